//! `GET|POST /projects/{id}/edit`: the project's rules as JSON in a textarea, saved like
//! `PUT /api/v1/projects/{id}/rules`. Stored endpoints (which can hold a bot token or a webhook secret) are
//! never shown: the page shows a placeholder, and saving it unchanged keeps the stored endpoint.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use klaxon_core::rule::{Channels, Field, RawChannel, RuleId};
use klaxon_core::{ChannelKind, RawRule, RuleProblem};
use klaxon_store::format::oids_to_hex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Access;
use super::view::{project_path, render, Nav, PageError, Template};
use super::{path_project, Console};
use crate::rest::rules::{NotStored, ProblemView};

/// What the edit page shows instead of a stored endpoint (which can hold a bot token or a webhook secret);
/// saving it unchanged keeps the stored endpoint.
const KEEP: &str = "(unchanged)";

fn endpoint_placeholder(channel: &str, endpoint: &str) -> String {
    match ChannelKind::parse(channel) {
        Some(kind) => format!("{KEEP} {}", klaxon_channels::redact_endpoint(kind, endpoint)),
        None => KEEP.to_owned(),
    }
}

/// A rule's id as the console matches it: the 24-hex text (`{"$oid": …}` read as its text), lowercased.
fn hex_id(rule: &RawRule) -> Option<String> {
    match &rule.id {
        Field::Typed(RuleId::Hex(id)) => Some(id.to_ascii_lowercase()),
        Field::Typed(RuleId::Oid { oid, extra }) if extra.is_empty() => Some(oid.to_ascii_lowercase()),
        _ => None,
    }
}

/// The endpoints (strings) of the rule's channels and of its escalation steps' channels (a PagerDuty routing
/// key there is as secret as anywhere), each with where it is: `slack` for the rule's own channel,
/// `escalation[0].pagerduty` for a step's.
fn endpoints(rule: &mut RawRule) -> Vec<(String, &mut String)> {
    fn of<'r>(channels: &'r mut Field<Channels>, prefix: &str, out: &mut Vec<(String, &'r mut String)>) {
        let Field::Typed(chs) = channels else { return };
        for (key, ch) in chs.0.iter_mut() {
            if let Field::Typed(RawChannel {
                endpoint: Field::Typed(endpoint),
                ..
            }) = ch
            {
                out.push((format!("{prefix}{key}"), endpoint));
            }
        }
    }
    let mut out = Vec::new();
    of(&mut rule.channels, "", &mut out);
    if let Field::Typed(steps) = &mut rule.escalation {
        for (i, step) in steps.iter_mut().enumerate() {
            if let Field::Typed(step) = step {
                of(&mut step.channels, &format!("escalation[{i}]."), &mut out);
            }
        }
    }
    out
}

/// The channel name of an [`endpoints`] key (`escalation[0].pagerduty` → `pagerduty`).
fn channel_of(key: &str) -> &str {
    key.rsplit_once('.').map_or(key, |(_, ch)| ch)
}

/// The endpoint at `key` ([`endpoints`]) of a stored rule, when it is a string.
fn endpoint_of(rule: &RawRule, key: &str) -> Option<String> {
    let mut rule = rule.clone();
    endpoints(&mut rule)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, e)| e.clone())
}

/// The project in the import/export format, as the textarea shows it.
#[derive(Serialize)]
struct Shown<'a> {
    #[serde(rename = "_id")]
    project_id: &'a str,
    notifications: Vec<ShownRule>,
}

/// A stored rule as shown: the model (endpoints replaced), or, when it is not an object, the value as stored.
#[derive(Serialize)]
#[serde(untagged)]
enum ShownRule {
    Rule(Box<RawRule>),
    AsStored(Value),
}

/// The project's rules in the import/export format, pretty-printed for the textarea, endpoints replaced by
/// [`KEEP`] placeholders.
fn export_text(project_id: &str, notifications: &[Value]) -> String {
    let notifications = notifications
        .iter()
        .map(|stored| {
            let stored = oids_to_hex(stored.clone());
            let Ok(mut rule) = RawRule::from_value(&stored) else {
                return ShownRule::AsStored(stored);
            };
            for (key, endpoint) in endpoints(&mut rule) {
                if !endpoint.trim().is_empty() {
                    *endpoint = endpoint_placeholder(channel_of(&key), endpoint);
                }
            }
            ShownRule::Rule(Box::new(rule))
        })
        .collect();
    let shown = Shown {
        project_id,
        notifications,
    };
    serde_json::to_string_pretty(&shown).unwrap_or_default()
}

/// Puts the stored endpoint back where the submitted rules still hold a [`KEEP`] placeholder (matched by rule
/// id and channel). A placeholder with no stored endpoint to stand for is an error. Only the rules that held
/// a placeholder are rewritten (through the model); the others go on as the user wrote them.
fn restore_endpoints(body: &mut Value, stored: &[Value]) -> Result<(), String> {
    let stored: Vec<RawRule> = stored
        .iter()
        .filter_map(|r| RawRule::from_value(r).ok())
        .collect();
    let Some(Value::Array(rules)) = body.get_mut("notifications") else {
        return Ok(());
    };
    for value in rules {
        let Ok(mut rule) = RawRule::from_value(value) else {
            continue;
        };
        let id = hex_id(&rule);
        let mut restored = false;
        for (key, endpoint) in endpoints(&mut rule) {
            if !endpoint.trim_start().starts_with(KEEP) {
                continue;
            }
            let original = stored
                .iter()
                .find(|s| id.is_some() && hex_id(s) == id)
                .and_then(|s| endpoint_of(s, &key));
            let Some(original) = original else {
                return Err(format!(
                    "rule {}, channel `{key}`: the endpoint is the {KEEP} placeholder but no stored rule with this id has one; write the endpoint",
                    id.as_deref().unwrap_or("<no id>")
                ));
            };
            *endpoint = original;
            restored = true;
        }
        if restored {
            *value =
                serde_json::to_value(&rule).map_err(|e| format!("the rules cannot be written back: {e}"))?;
        }
    }
    Ok(())
}

/// `GET /projects/{id}/edit`.
pub(super) async fn show(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
) -> Result<Response, PageError> {
    let project_id = path_project(&project_id)?;
    let project = c.stored(&project_id).await?;
    let text = export_text(
        &project_id,
        project
            .as_ref()
            .map(|p| p.notifications.as_slice())
            .unwrap_or(&[]),
    );
    Ok(edit_form(
        &access,
        &project_id,
        &text,
        false,
        None,
        &[],
        StatusCode::OK,
    ))
}

/// `edit.html`: the rules' text, and what refused it.
#[derive(Serialize)]
struct EditPage<'a> {
    project_id: &'a str,
    /// The rules as shown (or as the user sent them, after an error).
    text: &'a str,
    /// "store anyway" was ticked.
    force: bool,
    error: Option<&'a str>,
    problems: Vec<ProblemView<'a>>,
}

impl Template for EditPage<'_> {
    const NAME: &'static str = "edit.html";
}

fn edit_form(
    access: &Access,
    project_id: &str,
    text: &str,
    force: bool,
    error: Option<&str>,
    problems: &[RuleProblem],
    status: StatusCode,
) -> Response {
    let title = format!("Edit rules of {project_id}");
    let page = EditPage {
        project_id,
        text,
        force,
        error,
        problems: problems.iter().map(ProblemView::from).collect(),
    };
    render(status, &access.page(Nav::Projects, &title, page))
}

#[derive(Deserialize)]
pub(super) struct EditForm {
    #[serde(default)]
    rules: String,
    force: Option<String>,
}

/// `POST /projects/{id}/edit`: validated and stored like `PUT /api/v1/projects/{id}/rules`; on an error the
/// page comes back with the problems and the user's text.
pub(super) async fn save(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Form(form): Form<EditForm>,
) -> Result<Response, PageError> {
    let project_id = path_project(&project_id)?;
    let force = form.force.is_some();
    let back = |status: StatusCode, error: &str, problems: &[RuleProblem]| {
        edit_form(
            &access,
            &project_id,
            &form.rules,
            force,
            Some(error),
            problems,
            status,
        )
    };
    let mut body: Value = match serde_json::from_str(&form.rules) {
        Ok(v) => v,
        Err(e) => {
            return Ok(back(
                StatusCode::BAD_REQUEST,
                &format!("The text is not JSON: {e}"),
                &[],
            ))
        }
    };
    let stored = c
        .stored(&project_id)
        .await?
        .map(|p| p.notifications)
        .unwrap_or_default();
    if let Err(e) = restore_endpoints(&mut body, &stored) {
        return Ok(back(StatusCode::BAD_REQUEST, &e, &[]));
    }
    match c.api.replace_rules(&project_id, body, force).await {
        Ok(stored) => {
            let done = if stored.private_endpoints {
                "saved-private"
            } else {
                "saved"
            };
            Ok(Redirect::to(&format!("{}?done={done}", project_path(&project_id))).into_response())
        }
        Err(NotStored::Refused { message, problems }) => {
            Ok(back(StatusCode::BAD_REQUEST, &message, &problems))
        }
        Err(NotStored::Failed(e)) => Ok(back(e.status, &e.message, &[])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_edit_page_hides_endpoints_and_saving_keeps_them() {
        let p = "5e3eef0679fa3700a0198a48";
        let stored = vec![
            json!({"_id": {"$oid": "5e3eef0679fa3700a0198a49"}, "threshold": 3, "channels": {
            "telegram": {"isEnabled": true, "endpoint": "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"},
            "webPush": {"isEnabled": false, "endpoint": "push-secret"}}}),
        ];
        let text = export_text(p, &stored);
        assert!(
            !text.contains("SECRET") && !text.contains("push-secret"),
            "{text}"
        );
        assert!(text.contains("(unchanged) https://api.telegram.org/"), "{text}");
        // Saved as shown (with an edit elsewhere): the stored endpoints come back.
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["threshold"] = json!(9);
        restore_endpoints(&mut body, &stored).expect("restored");
        assert_eq!(
            body["notifications"][0]["channels"]["telegram"]["endpoint"],
            "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"
        );
        assert_eq!(
            body["notifications"][0]["channels"]["webPush"]["endpoint"],
            "push-secret"
        );
        assert_eq!(body["notifications"][0]["threshold"], 9);
        // A new endpoint is taken as typed; a placeholder under an unknown rule id is an error.
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["channels"]["telegram"]["endpoint"] = json!("https://new.example/x");
        restore_endpoints(&mut body, &stored).expect("restored");
        assert_eq!(
            body["notifications"][0]["channels"]["telegram"]["endpoint"],
            "https://new.example/x"
        );
        let mut body: Value = serde_json::from_str(&text).expect("json");
        body["notifications"][0]["_id"] = json!("5e3eef0679fa3700a0198a4a");
        assert!(restore_endpoints(&mut body, &stored).is_err());
    }

    /// An escalation step's endpoints (a PagerDuty routing key) are hidden like the rule's own, and come back
    /// on save; on-call fields go through as written.
    #[test]
    fn escalation_endpoints_are_hidden_and_kept() {
        let p = "5e3eef0679fa3700a0198a48";
        let key = "R0UTINGKEY0123456789abcdefABCDEF";
        let stored = vec![
            json!({"_id": "5e3eef0679fa3700a0198a49", "renotify": {"every": 60000, "max": 2},
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/services/T/B/SECRET"}},
            "escalation": [{"after": 60000, "channels": {"pagerduty": {"isEnabled": true, "endpoint": key}}},
                           {"after": 120000, "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x?token=SECRET2"}}}]}),
        ];
        let text = export_text(p, &stored);
        for secret in [key, "SECRET", "SECRET2"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let mut body: Value = serde_json::from_str(&text).expect("json");
        assert!(
            body["notifications"][0]["escalation"][0]["channels"]["pagerduty"]["endpoint"]
                .as_str()
                .is_some_and(|e| e.starts_with(KEEP))
        );
        body["notifications"][0]["quietHours"] =
            json!([{"from": "22:00", "to": "07:00", "timezone": "Europe/Berlin"}]);
        body["notifications"][0]["escalation"][1]["channels"]["webhook"]["endpoint"] =
            json!("https://new.example/y");
        restore_endpoints(&mut body, &stored).expect("restored");
        let rule = &body["notifications"][0];
        assert_eq!(rule["escalation"][0]["channels"]["pagerduty"]["endpoint"], key);
        assert_eq!(
            rule["escalation"][1]["channels"]["webhook"]["endpoint"],
            "https://new.example/y"
        );
        assert_eq!(
            rule["channels"]["slack"]["endpoint"],
            "https://hooks.slack.com/services/T/B/SECRET"
        );
        assert_eq!(rule["quietHours"][0]["timezone"], "Europe/Berlin");
        assert_eq!(rule["renotify"]["max"], 2);
        // a step's placeholder stands only for the same step's stored endpoint
        let mut body: Value = serde_json::from_str(&text).expect("json");
        let first = body["notifications"][0]["escalation"][0].clone();
        if let Some(steps) = body["notifications"][0]["escalation"].as_array_mut() {
            steps.push(first);
        }
        let err = restore_endpoints(&mut body, &stored).expect_err("no third step stored");
        assert!(err.contains("escalation[2].pagerduty"), "{err}");
    }

    /// What is not a rule is shown as stored; ids match in either form; a rule without a placeholder goes on
    /// exactly as written; an unknown channel's placeholder stands for its stored endpoint too.
    #[test]
    fn export_and_restore_take_what_is_not_a_plain_rule() {
        let p = "5e3eef0679fa3700a0198a48";
        let stored = vec![
            json!(7),
            json!({"_id": {"$oid": "5E3EEF0679FA3700A0198A49"}, "uidAdded": "u", "channels": {
                "webPush": {"isEnabled": true, "endpoint": "push-secret"},
                "slack": {"isEnabled": true, "endpoint": "  "},
                "email": "not an object"}}),
        ];
        let text = export_text(p, &stored);
        let shown: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(shown["_id"], p);
        assert_eq!(shown["notifications"][0], 7, "as stored");
        let rule = &shown["notifications"][1];
        assert_eq!(rule["_id"], "5E3EEF0679FA3700A0198A49");
        assert_eq!(rule["uidAdded"], "u", "unknown fields are kept");
        assert_eq!(rule["channels"]["webPush"]["endpoint"], KEEP);
        assert_eq!(
            rule["channels"]["slack"]["endpoint"], "  ",
            "a blank endpoint has nothing to hide"
        );
        assert_eq!(rule["channels"]["email"], "not an object");
        // Saved with the id in `{"$oid": …}` form: the stored endpoint comes back.
        let mut body = shown.clone();
        body["notifications"][1]["_id"] = json!({"$oid": "5e3eef0679fa3700a0198a49"});
        restore_endpoints(&mut body, &stored).expect("restored");
        assert_eq!(
            body["notifications"][1]["channels"]["webPush"]["endpoint"],
            "push-secret"
        );
        // A rule without a placeholder is not rewritten: the user's text, key order included.
        let mut body = json!({"_id": p, "notifications": [
            {"threshold": 2, "_id": "5e3eef0679fa3700a0198a4b", "channels": {"slack": {"endpoint": "https://h.example/x"}}}]});
        let before = body.to_string();
        restore_endpoints(&mut body, &stored).expect("nothing to restore");
        assert_eq!(body.to_string(), before);
        // A placeholder in a rule without an id cannot stand for anything.
        let mut body = json!({"notifications": [{"channels": {"webPush": {"endpoint": KEEP}}}]});
        let err = restore_endpoints(&mut body, &stored).expect_err("no id");
        assert!(err.starts_with("rule <no id>, channel `webPush`"), "{err}");
    }
}
