//! `GET /api/v1/deliveries?projectId=&limit=`: the delivery trail, newest first, one record per notification (its
//! latest state). The JSON form is shared with `klaxon deliveries list --json` and the console's deliveries page.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_core::notification::rfc3339_ms;
use klaxon_store::trail::Record;
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
    /// `sent`, `retrying`, `dead` or `shadow`.
    pub status: &'static str,
    /// The last failure, if any.
    pub last_error: Option<&'a str>,
    /// When the rule fired (RFC 3339).
    pub fired_at: String,
    /// When this state was recorded (RFC 3339).
    pub at: String,
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
        }
    }
}

/// One notification's latest delivery state as JSON ([`RecordView`]).
pub fn record_json(r: &Record) -> Value {
    serde_json::to_value(RecordView::from(r)).unwrap_or(Value::Null)
}

/// `GET /api/v1/deliveries?projectId=&limit=` → `{"deliveries": [...]}`, newest first.
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
    let records = api
        .trail()
        .await?
        .latest(project.as_deref(), None, limit, SCAN)
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"deliveries": records.iter().map(record_json).collect::<Vec<_>>()}),
    ))
}
