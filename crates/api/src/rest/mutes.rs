//! `GET|POST /api/v1/projects/{projectId}/mutes`, `DELETE …/mutes/{muteId}`: "be quiet about this until then".
//! A request `{"ruleId"?, "groupHash"?, "until" (RFC 3339) | "for" (seconds)}` is validated into a [`Mute`] on
//! the Redis clock ([`mute_from_request`]), stored under the project's limit of active mutes ([`mutes_full`]
//! when full); while one matches, firings are counted but not delivered. The console's mute forms and
//! `klaxon mute` go through the same functions.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use klaxon_core::mute::Mute;
use klaxon_counter::mutes::Added;
use serde::Serialize;
use serde_json::{json, Value};

use super::check_project_id;
use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// Longest mute accepted (a year): a mute is for quiet hours and incidents, not for deleting a rule.
pub const MAX_MUTE_MS: i64 = 366 * 24 * 3600 * 1000;

/// Parses an RFC 3339 time into unix ms.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|e| format!("`until` is not an RFC 3339 time ({e})"))
}

/// When a requested mute ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MuteEnd {
    /// `until`: an RFC 3339 time.
    Until(String),
    /// `for`: this many seconds from now (≥ 1).
    For(u64),
}

/// A mute request: `{"ruleId"?, "groupHash"?, "until" (RFC 3339) | "for" (seconds)}` as the API reads it
/// ([`MuteRequest::from_json`]), or built by the console's forms, the action links and `klaxon mute add`.
/// [`MuteRequest::to_mute`] validates it into a [`Mute`] on the Redis clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MuteRequest {
    /// Only this rule (a 24-hex ObjectId).
    pub rule_id: Option<String>,
    /// Only this group.
    pub group_hash: Option<String>,
    /// When it ends.
    pub end: MuteEnd,
}

/// A `ruleId` or `groupHash`: trimmed, non-empty, at most 256 bytes.
fn mute_text(field: &str, value: Option<&str>) -> Result<Option<String>, String> {
    match value {
        None => Ok(None),
        Some(s) if !s.trim().is_empty() && s.len() <= 256 => Ok(Some(s.trim().to_owned())),
        Some(_) => Err(format!(
            "`{field}` must be a non-empty string of at most 256 bytes"
        )),
    }
}

/// A `ruleId`: [`mute_text`], and an ObjectId.
fn mute_rule_id(value: Option<&str>) -> Result<Option<String>, String> {
    let rule_id = mute_text("ruleId", value)?;
    if let Some(r) = &rule_id {
        if !klaxon_core::event::is_object_id(r) {
            return Err("`ruleId` must be a 24-hex-digit ObjectId".into());
        }
    }
    Ok(rule_id)
}

/// `for`: a whole number of seconds ≥ 1.
fn mute_secs(secs: Option<u64>) -> Result<u64, String> {
    secs.filter(|s| *s >= 1)
        .ok_or_else(|| "`for` must be a whole number of seconds ≥ 1".to_owned())
}

impl MuteRequest {
    /// Reads the API's request body, refusing what is not a request (every field checked in the order
    /// [`MuteRequest::to_mute`] checks them).
    pub fn from_json(body: &Value) -> Result<Self, String> {
        let obj = body
            .as_object()
            .ok_or("the body must be an object {\"ruleId\"?, \"groupHash\"?, \"until\" | \"for\"}")?;
        let text = |field: &str| -> Result<Option<String>, String> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!(
                    "`{field}` must be a non-empty string of at most 256 bytes"
                )),
            }
        };
        let rule_id = text("ruleId")?;
        mute_rule_id(rule_id.as_deref())?;
        let group_hash = text("groupHash")?;
        mute_text("groupHash", group_hash.as_deref())?;
        let end = match (obj.get("until"), obj.get("for")) {
            (Some(Value::String(u)), None) => MuteEnd::Until(u.clone()),
            (None, Some(f)) => MuteEnd::For(mute_secs(f.as_u64())?),
            (Some(_), Some(_)) => return Err("give `until` or `for`, not both".into()),
            (Some(_), None) => return Err("`until` must be an RFC 3339 time string".into()),
            (None, None) => return Err("give `until` (RFC 3339) or `for` (seconds)".into()),
        };
        Ok(MuteRequest {
            rule_id,
            group_hash,
            end,
        })
    }

    /// Validates the request made at `now_ms`, giving the mute `mute_id`.
    pub fn to_mute(&self, now_ms: i64, mute_id: String) -> Result<Mute, String> {
        let rule_id = mute_rule_id(self.rule_id.as_deref())?;
        let group_hash = mute_text("groupHash", self.group_hash.as_deref())?;
        let until_ms = match &self.end {
            MuteEnd::Until(u) => parse_rfc3339_ms(u)?,
            MuteEnd::For(secs) => {
                let secs = mute_secs(Some(*secs))?;
                now_ms.saturating_add((secs.min(i64::MAX as u64 / 1000) as i64).saturating_mul(1000))
            }
        };
        if until_ms <= now_ms {
            return Err("`until` is in the past".into());
        }
        if until_ms - now_ms > MAX_MUTE_MS {
            return Err("a mute may last at most 366 days".into());
        }
        Ok(Mute {
            mute_id,
            rule_id: rule_id.map(|r| r.to_ascii_lowercase()),
            group_hash,
            until_ms,
        })
    }
}

/// Validates the API's mute request body made at `now_ms`, giving it `mute_id`.
pub fn mute_from_request(body: &Value, now_ms: i64, mute_id: String) -> Result<Mute, String> {
    MuteRequest::from_json(body)?.to_mute(now_ms, mute_id)
}

/// A mute as the API lists it: `{"muteId", "until" (RFC 3339), "ruleId"?, "groupHash"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MuteView {
    /// Its id.
    pub mute_id: String,
    /// When it ends.
    pub until: String,
    /// Only this rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Only this group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_hash: Option<String>,
}

impl From<&Mute> for MuteView {
    fn from(m: &Mute) -> Self {
        MuteView {
            mute_id: m.mute_id.clone(),
            until: klaxon_core::notification::rfc3339_ms(m.until_ms),
            rule_id: m.rule_id.clone(),
            group_hash: m.group_hash.clone(),
        }
    }
}

/// The API's JSON form of a mute ([`MuteView`]).
pub fn to_json(m: &Mute) -> Value {
    serde_json::to_value(MuteView::from(m)).unwrap_or(Value::Null)
}

/// The refusal of a mute for a project that already has `active` of at most `limit` active mutes.
pub fn mutes_full(project_id: &str, active: u64, limit: usize) -> String {
    format!(
        "project {project_id} already has {active} active mutes, the limit is {limit} per project: remove one \
         (DELETE /api/v1/projects/{project_id}/mutes/{{muteId}}, `klaxon mute rm`), wait for one to end, or raise \
         --max-mutes-per-project (KLAXON_MAX_MUTES_PER_PROJECT)"
    )
}

/// `POST /api/v1/projects/{id}/mutes` → 201 `{"muteId", "until"}` (`409` over the project's limit of mutes).
pub(crate) async fn add(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_body(body)?;
    api.known_project(&project_id).await?;
    let request = MuteRequest::from_json(&body).map_err(ApiError::bad_request)?;
    let mute = api.add_mute(&project_id, &request).await?;
    let v = MuteView::from(&mute);
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"muteId": v.mute_id, "until": v.until}),
    ))
}

/// `GET /api/v1/projects/{id}/mutes` → `{"mutes": [{"muteId", "ruleId"?, "groupHash"?, "until"}]}`, at most the
/// project's limit of them; `"skipped": n` when more are stored (not listed, and not applied either).
pub(crate) async fn list(
    State(api): State<Api>,
    Path(project_id): Path<String>,
) -> Result<Response, ApiError> {
    api.known_project(&project_id).await?;
    let (_, list) = api.active_mutes(&project_id).await?;
    let mut body = json!({"mutes": list.mutes.iter().map(MuteView::from).collect::<Vec<_>>()});
    if list.unread > 0 {
        body["skipped"] = json!(list.unread);
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// `DELETE /api/v1/projects/{id}/mutes/{muteId}` → 204, or 404 for an unknown mute.
pub(crate) async fn remove(
    State(api): State<Api>,
    Path((project_id, mute_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if api.remove_mute(&project_id, &mute_id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(StatusCode::NOT_FOUND, "no such mute"))
    }
}

/// What confirming an action link's mute did.
#[derive(Debug, Clone)]
pub(crate) enum LinkMute {
    /// The mute was made.
    Made(Mute),
    /// The link was used before (unix ms): nothing was done.
    Used {
        /// When.
        at_ms: i64,
    },
}

impl Api {
    /// Validates a mute request made now (the Redis clock) for a project known to exist and stores it with a
    /// fresh id; `400` for a bad request, `409` when the project already has the limit of active mutes. The
    /// API's and the console's mute forms both come here.
    pub(crate) async fn add_mute(&self, project_id: &str, request: &MuteRequest) -> Result<Mute, ApiError> {
        self.add_mute_as(project_id, request, None).await
    }

    /// [`Api::add_mute`] with the mute's id given (`None`: a fresh random one).
    pub(crate) async fn add_mute_as(
        &self,
        project_id: &str,
        request: &MuteRequest,
        mute_id: Option<String>,
    ) -> Result<Mute, ApiError> {
        let (counter, now) = self.redis_now().await?;
        let mute_id = mute_id.unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()));
        let mute = request.to_mute(now, mute_id).map_err(ApiError::bad_request)?;
        let added = self
            .mutes(&counter)
            .add(project_id, &mute, Some(now))
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        self.stored(project_id, added).map(|_| mute)
    }

    /// The mute of an action link, made once: `mute_id` is derived from the link, and the link's use is
    /// recorded with the mute in one step until `link_expires_ms`. A link used before makes nothing, also
    /// after its mute was undone or deleted ([`LinkMute::Used`]); `409` when the project has the limit of
    /// active mutes (the link stays unused).
    pub(crate) async fn add_link_mute(
        &self,
        project_id: &str,
        request: &MuteRequest,
        mute_id: String,
        link_expires_ms: i64,
    ) -> Result<LinkMute, ApiError> {
        let (counter, now) = self.redis_now().await?;
        let mute = request.to_mute(now, mute_id).map_err(ApiError::bad_request)?;
        let added = self
            .mutes(&counter)
            .add_once(project_id, &mute, Some(now), link_expires_ms)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        Ok(match self.stored(project_id, added)? {
            Some(at_ms) => LinkMute::Used { at_ms },
            None => LinkMute::Made(mute),
        })
    }

    /// When the action link whose mute id is `mute_id` was used (unix ms), if it was.
    pub(crate) async fn link_used(&self, project_id: &str, mute_id: &str) -> Result<Option<i64>, ApiError> {
        let (counter, _) = self.redis_now().await?;
        self.mutes(&counter)
            .link_used(project_id, mute_id)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// The outcome of a mute write: `Ok(None)` stored, `Ok(Some(at))` a link used at `at`, `409` when the
    /// project already has the limit of active mutes.
    fn stored(&self, project_id: &str, added: Added) -> Result<Option<i64>, ApiError> {
        match added {
            Added::Stored { .. } => Ok(None),
            Added::Used { at_ms } => Ok(Some(at_ms)),
            Added::Full { active } => Err(ApiError::new(
                StatusCode::CONFLICT,
                mutes_full(project_id, active, self.config().limits.max_mutes),
            )),
        }
    }

    /// Removes a mute of a project: `false` when there is no such mute (it may have expired). The API's
    /// `DELETE` and the console's remove button both come here.
    pub(crate) async fn remove_mute(&self, project_id: &str, mute_id: &str) -> Result<bool, ApiError> {
        check_project_id(project_id)?;
        let (counter, _) = self.redis_now().await?;
        self.mutes(&counter)
            .remove(project_id, mute_id)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests() {
        let now = 1_880_000_000_000;
        let ok = mute_from_request(&json!({"for": 60}), now, "m".into()).expect("for");
        assert_eq!(ok.until_ms, now + 60_000);
        let ok = mute_from_request(
            &json!({"until": "2030-01-01T00:00:00Z", "groupHash": "g", "ruleId": "5E3EEF0679FA3700A0198A49"}),
            now,
            "m".into(),
        )
        .expect("until");
        assert_eq!(ok.until_ms, 1_893_456_000_000);
        assert_eq!(ok.rule_id.as_deref(), Some("5e3eef0679fa3700a0198a49"));
        for bad in [
            json!({}),
            json!({"for": 0}),
            json!({"for": "60"}),
            json!({"for": 60, "until": "2030-01-01T00:00:00Z"}),
            json!({"until": "2020-01-01T00:00:00Z"}),
            json!({"until": "tomorrow"}),
            json!({"for": 60, "ruleId": "nope"}),
            json!({"for": 400 * 86400}),
            json!([]),
        ] {
            assert!(mute_from_request(&bad, now, "m".into()).is_err(), "{bad}");
        }
    }
}
