//! The delivery trail as JSON: shared by `GET /api/v1/deliveries` and `klaxon deliveries list --json`.

use klaxon_core::notification::rfc3339_ms;
use klaxon_rules::trail::Record;
use serde_json::{json, Value};

/// Most records `GET /api/v1/deliveries` returns at once.
pub const MAX_LIMIT: usize = 1000;
/// Trail records read at most to answer one request.
pub const SCAN: usize = 100_000;

/// One notification's latest delivery state.
pub fn record_json(r: &Record) -> Value {
    json!({
        "notificationId": r.notification_id,
        "projectId": r.project_id,
        "ruleId": r.rule_id,
        "channel": r.channel,
        "destination": r.destination,
        "attempts": r.attempts,
        "status": r.status.as_str(),
        "lastError": r.last_error,
        "firedAt": rfc3339_ms(r.fired_at_ms),
        "at": rfc3339_ms(r.at_ms),
    })
}
