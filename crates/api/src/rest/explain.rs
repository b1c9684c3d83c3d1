//! `POST /api/v1/projects/{projectId}/explain` `{"title", "groupHash", "isNew"?, "user"?}`: per rule, what this
//! event would do and why. It reads, it never counts: the decision is the core's ([`klaxon_core::explain`]),
//! the counters' state is peeked ([`klaxon_counter::WindowCounter::explain`]). The console's explain page
//! comes through [`Api::explain_event`] too.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::event::MAX_BODY_BYTES;
use klaxon_core::{Event, Explanation, RuleVerdict};
use serde_json::json;

use super::check_project_id;
use crate::error::{json_body, json_response};
use crate::{Api, ApiError};

/// `POST /api/v1/projects/{id}/explain` → `{"rules": [{"ruleId", "verdict", "reason", "count"?, "threshold"?,
/// "windowEndsAt"?, "alert"?}]}`; `alert` is the (rule, group)'s open alert (`rest::alerts::current_json`).
pub(crate) async fn explain(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    check_project_id(&project_id)?;
    let len = body.as_ref().map_or(0, Bytes::len);
    let body = json_body(body)?;
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body must be an object {\"title\", \"groupHash\", \"isNew\"?, \"user\"?}",
        ));
    }
    // Validated exactly like an event on the queue, under the queue's size bound.
    if len > MAX_BODY_BYTES {
        return Err(ApiError::bad_request(format!(
            "body is {len} bytes, over the {MAX_BODY_BYTES}-byte limit"
        )));
    }
    let event = Event::from_json(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let verdicts = api.explain_event(&project_id, &event).await?;
    let alerts = api
        .explain_alerts(&project_id, &event.group_hash, &verdicts)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "rules": super::alerts::verdicts_json(&verdicts, &alerts) }),
    ))
}

impl Api {
    /// Per stored rule of `project_id`, what `event` would do now (mutes included). Reads only; `404` for a
    /// project without rules.
    pub(crate) async fn explain_event(
        &self,
        project_id: &str,
        event: &Event,
    ) -> Result<Vec<RuleVerdict>, ApiError> {
        let store = self.store().await?;
        let Some(project) = store.project(project_id).await.map_err(ApiError::rules)? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "unknown project {project_id}: it has no rules in MongoDB database `{}` (Klaxon reads \
                     --mongo-db / KLAXON_MONGO_DB; for Hawk's rules, set it to Hawk's database)",
                    self.config().clients.mongo_db()
                ),
            ));
        };
        let (counter, mutes) = self.active_mutes(project_id).await?;
        let explanation = Explanation::new(
            &project.notifications,
            &self.config().limits,
            &store.rule_defaults(),
            event,
        );
        counter
            .explain(project_id, explanation, &mutes.mutes)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }
}
