//! `GET /api/v1/deliveries?projectId=&limit=`: the messages quiet hours hold now (`"status": "held"`, soonest
//! release first: `klaxon_counter::held`), then the delivery trail, newest first, one record per notification (its
//! latest state). A held message is listed under its release's notification id until the release is claimed,
//! then as the trail's record of it: never both ([`merge`]). The JSON form is shared with
//! `klaxon deliveries list --json` and the console's deliveries page.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::notification::rfc3339_ms;
use klaxon_counter::{Digests, HeldMessage};
use klaxon_store::trail::{Record, Status};
use serde::Serialize;
use serde_json::{json, Value};

use super::{check_project_id, limit_of, query_pairs};
use crate::error::json_response;
use crate::{Api, ApiError};

/// Most records `GET /api/v1/deliveries` returns at once.
pub const MAX_LIMIT: usize = 1000;
/// Trail records read at most to answer one request.
pub const SCAN: usize = 100_000;

/// One notification's latest delivery state, as the API and `klaxon deliveries list --json` show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView<'a> {
    /// The notification.
    pub notification_id: &'a str,
    /// Its project.
    pub project_id: &'a str,
    /// Its rule.
    pub rule_id: &'a str,
    /// Its channel.
    pub channel: &'a str,
    /// The redacted destination.
    pub destination: &'a str,
    /// Attempts made.
    pub attempts: u32,
    /// `sent`, `retrying`, `dead`, `shadow`, `dropped` or `held`.
    pub status: &'static str,
    /// The last failure, if any.
    pub last_error: Option<&'a str>,
    /// When the rule fired (RFC 3339).
    pub fired_at: String,
    /// When this state was recorded (RFC 3339); for a held message, when its latest message was held.
    pub at: String,
    /// A held message: until when (RFC 3339), the quiet window's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
    /// A held message: what it holds so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldView<'a>>,
}

/// What a held message holds so far: its counts and its first groups.
#[derive(Debug, Clone, Serialize)]
pub struct HeldView<'a> {
    /// Groups held as fired.
    pub fired: u64,
    /// Groups held as resolved.
    pub resolved: u64,
    /// The first groups (at most `klaxon_counter::held::MAX_HELD_GROUPS_SHOWN`), fired first.
    pub groups: Vec<HeldGroupView<'a>>,
}

/// One group of a held message.
#[derive(Debug, Clone, Serialize)]
pub struct HeldGroupView<'a> {
    /// The group hash.
    pub group: &'a str,
    /// Its title (tenant text: data).
    pub title: &'a str,
    /// Its count.
    pub count: u64,
    /// Held as resolved.
    pub resolved: bool,
    /// The alert it is about, when known.
    #[serde(rename = "alertId", skip_serializing_if = "Option::is_none")]
    pub alert_id: Option<&'a str>,
}

impl<'a> From<&'a Record> for RecordView<'a> {
    fn from(r: &'a Record) -> Self {
        RecordView {
            notification_id: &r.notification_id,
            project_id: &r.project_id,
            rule_id: &r.rule_id,
            channel: &r.channel,
            destination: &r.destination,
            attempts: r.attempts,
            status: r.status.as_str(),
            last_error: r.last_error.as_deref(),
            fired_at: rfc3339_ms(r.fired_at_ms),
            at: rfc3339_ms(r.at_ms),
            held_until: None,
            held: None,
        }
    }
}

impl<'a> From<&'a HeldMessage> for RecordView<'a> {
    fn from(h: &'a HeldMessage) -> Self {
        let since = h.held_since_ms.or(h.last_held_ms).unwrap_or(h.until_ms);
        RecordView {
            notification_id: &h.notification_id,
            project_id: &h.project_id,
            rule_id: &h.rule_id,
            channel: h.channel.as_str(),
            destination: &h.destination,
            attempts: 0,
            status: Status::Held.as_str(),
            last_error: None,
            fired_at: rfc3339_ms(since),
            at: rfc3339_ms(h.last_held_ms.unwrap_or(since)),
            held_until: Some(rfc3339_ms(h.until_ms)),
            held: Some(HeldView {
                fired: h.fired,
                resolved: h.resolved,
                groups: h
                    .groups
                    .iter()
                    .map(|g| HeldGroupView {
                        group: &g.group,
                        title: &g.title,
                        count: g.count,
                        resolved: g.resolved,
                        alert_id: g.alert_id.as_deref(),
                    })
                    .collect(),
            }),
        }
    }
}

/// One row of the deliveries listing: a trail record, or a message quiet hours hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// A notification's latest record in the trail.
    Trail(Record),
    /// A message held until its quiet window ends (not in the trail yet).
    Held(HeldMessage),
}

impl Delivery {
    /// Its view (the API's JSON, the console's row).
    pub fn view(&self) -> RecordView<'_> {
        match self {
            Delivery::Trail(r) => RecordView::from(r),
            Delivery::Held(h) => RecordView::from(h),
        }
    }

    /// A held message's summary for a table cell: until when, the counts, the first groups (tenant titles as
    /// data: the table neutralises control characters). `None` for a trail record.
    pub fn held_summary(&self) -> Option<String> {
        let Delivery::Held(h) = self else {
            return None;
        };
        let groups: Vec<String> = h
            .groups
            .iter()
            .map(|g| {
                let what = if g.resolved { "resolved" } else { "fired" };
                match &g.alert_id {
                    Some(a) => format!("{} [{}] {what}, alert {a}", g.title, g.group),
                    None => format!("{} [{}] {what}", g.title, g.group),
                }
            })
            .collect();
        Some(format!(
            "held until {}: {} fired, {} resolved{}{}",
            rfc3339_ms(h.until_ms),
            h.fired,
            h.resolved,
            if groups.is_empty() { "" } else { ": " },
            groups.join("; ")
        ))
    }
}

/// One notification's latest delivery state as JSON ([`RecordView`]).
pub fn record_json(r: &Record) -> Value {
    serde_json::to_value(RecordView::from(r)).unwrap_or(Value::Null)
}

/// One row of the listing as JSON ([`RecordView`]).
pub fn delivery_json(d: &Delivery) -> Value {
    serde_json::to_value(d.view()).unwrap_or(Value::Null)
}

/// Whether a listing filtered by `status` shows held messages (read from Redis) and trail records (MongoDB).
pub fn sources(status: Option<Status>) -> (bool, bool) {
    match status {
        None => (true, true),
        Some(Status::Held) => (true, false),
        Some(_) => (false, true),
    }
}

/// The listing: the held messages first (soonest release first), then the trail's records (newest first), at
/// most `limit` rows. A held message whose release the trail already has is left out: its record stands for
/// it (the index can list a hold for a moment after its release was claimed).
pub fn merge(held: Vec<HeldMessage>, trail: Vec<Record>, limit: usize) -> Vec<Delivery> {
    let released: std::collections::HashSet<&str> =
        trail.iter().map(|r| r.notification_id.as_str()).collect();
    let held: Vec<HeldMessage> = held
        .into_iter()
        .filter(|h| !released.contains(h.notification_id.as_str()))
        .collect();
    held.into_iter()
        .map(Delivery::Held)
        .chain(trail.into_iter().map(Delivery::Trail))
        .take(limit)
        .collect()
}

/// The messages quiet hours hold now (of `project`), at most `limit`: what [`merge`] puts first. With Redis out of
/// reach none, and why (the trail stays readable: the API and the console say the held messages are missing).
pub(crate) async fn held(
    api: &Api,
    project: Option<&str>,
    limit: usize,
) -> (Vec<HeldMessage>, Option<String>) {
    let read = async {
        Digests::new(api.redis().await?, &api.config().namespace)
            .held(project, limit)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    };
    match read.await {
        Ok(held) => (held, None),
        Err(e) => (Vec::new(), Some(e.message)),
    }
}

/// `GET /api/v1/deliveries?projectId=&limit=` → `{"deliveries": [...]}`, newest first. With Redis down the trail
/// is still listed, and `"warnings"` says the held messages could not be read.
pub(crate) async fn list(State(api): State<Api>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let limit = limit_of(&pairs, 100, MAX_LIMIT)?;
    let project = pairs
        .iter()
        .find(|(k, v)| k == "projectId" && !v.is_empty())
        .map(|(_, v)| v.clone());
    if let Some(p) = &project {
        check_project_id(p)?;
    }
    // Redis down: the trail still lists (the held messages are said to be unreadable, not silently absent)
    let (held, held_error) = held(&api, project.as_deref(), limit).await;
    let warnings: Vec<&str> = held_error
        .map(|_| "held (quiet-hours) messages could not be read: Redis is unavailable")
        .into_iter()
        .collect();
    let records = api
        .trail()
        .await?
        .latest(project.as_deref(), None, limit, SCAN)
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    let rows = merge(held, records, limit);
    let mut body = json!({"deliveries": rows.iter().map(delivery_json).collect::<Vec<_>>()});
    if !warnings.is_empty() {
        body["warnings"] = json!(warnings);
    }
    Ok(json_response(StatusCode::OK, &body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::ChannelKind;

    fn held_message(id: &str, until_ms: i64) -> HeldMessage {
        HeldMessage {
            notification_id: id.into(),
            project_id: "p".into(),
            rule_id: "r".into(),
            channel: ChannelKind::Slack,
            destination: "https://hooks.slack.com/services/T000/…".into(),
            until_ms,
            held_since_ms: Some(1_000),
            last_held_ms: Some(2_000),
            fired: 2,
            resolved: 1,
            groups: vec![klaxon_counter::HeldGroup {
                group: "g<1>".into(),
                title: "<b>Boom</b>\nline".into(),
                count: 3,
                resolved: false,
                alert_id: Some("a1e2c3d4e5f60718293a4b5c".into()),
            }],
        }
    }

    fn record(id: &str, status: Status) -> Record {
        Record {
            notification_id: id.into(),
            project_id: "p".into(),
            rule_id: "r".into(),
            channel: "slack".into(),
            destination: "d".into(),
            attempts: 1,
            status,
            last_error: None,
            fired_at_ms: 0,
            at_ms: 5_000,
        }
    }

    /// Held first, then the trail; a hold whose release the trail has is shown once, as the trail's record;
    /// the limit counts both.
    #[test]
    fn merge_lists_each_message_once() {
        let rows = merge(
            vec![held_message("h1", 10_000), held_message("released", 20_000)],
            vec![record("released", Status::Sent), record("t1", Status::Dead)],
            10,
        );
        let shown: Vec<(&str, &str)> = rows
            .iter()
            .map(|d| {
                let v = d.view();
                (v.notification_id, v.status)
            })
            .collect();
        assert_eq!(shown, [("h1", "held"), ("released", "sent"), ("t1", "dead")]);
        assert_eq!(
            merge(vec![held_message("h1", 1)], vec![record("t1", Status::Sent)], 1).len(),
            1
        );
        assert_eq!(sources(None), (true, true));
        assert_eq!(sources(Some(Status::Held)), (true, false));
        assert_eq!(sources(Some(Status::Dead)), (false, true));
    }

    /// A held row's JSON: status, until when, counts and groups, tenant text as it is (JSON escapes it).
    #[test]
    fn held_rows_say_until_when_and_what() {
        let d = Delivery::Held(held_message("h1", 1_700_000_000_000));
        let v = delivery_json(&d);
        assert_eq!(v["status"], "held");
        assert_eq!(v["heldUntil"], "2023-11-14T22:13:20Z");
        assert_eq!(v["attempts"], 0);
        assert_eq!(v["held"]["fired"], 2);
        assert_eq!(v["held"]["groups"][0]["title"], "<b>Boom</b>\nline");
        assert_eq!(v["destination"], "https://hooks.slack.com/services/T000/…");
        let summary = d.held_summary().expect("held");
        assert!(
            summary.starts_with("held until 2023-11-14T22:13:20Z: 2 fired, 1 resolved: "),
            "{summary}"
        );
        assert!(
            summary.contains("[g<1>] fired, alert a1e2c3d4e5f60718293a4b5c"),
            "{summary}"
        );
        assert_eq!(v["held"]["groups"][0]["alertId"], "a1e2c3d4e5f60718293a4b5c");
        let t = Delivery::Trail(record("t", Status::Sent));
        assert!(t.held_summary().is_none());
        assert!(delivery_json(&t).get("heldUntil").is_none());
    }
}
