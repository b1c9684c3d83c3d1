//! `GET /projects/{id}/explain?title=&groupHash=&isNew=&user=`: what each rule would do with an event, and why
//! (the API's explain, as a page). It reads, it never counts.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use klaxon_core::{EventTask, RuleVerdict};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::Access;
use super::view::{ms_human, render, Nav, PageError, Template};
use super::{path_project, Console};

#[derive(Deserialize)]
pub(super) struct ExplainQuery {
    #[serde(default)]
    title: String,
    #[serde(default, rename = "groupHash")]
    group_hash: String,
    #[serde(default, rename = "isNew")]
    is_new: Option<String>,
    #[serde(default)]
    user: String,
}

/// `GET /projects/{id}/explain?title=&groupHash=&isNew=&user=`: what each rule would do (reads only).
pub(super) async fn page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Query(ask): Query<ExplainQuery>,
) -> Result<Response, PageError> {
    let project_id = path_project(&project_id)?;
    let asked = !ask.title.is_empty() || !ask.group_hash.is_empty();
    let mut error = None;
    let mut verdicts = Vec::new();
    if asked {
        let mut event =
            json!({"title": ask.title, "groupHash": ask.group_hash, "isNew": ask.is_new.is_some()});
        if !ask.user.trim().is_empty() {
            event["user"] = json!(ask.user.trim());
        }
        // Validated exactly like an event on the queue (and like the API's explain).
        let task = json!({"projectId": project_id, "event": event}).to_string();
        match EventTask::parse(task.as_bytes()) {
            Err(e) => error = Some(e.to_string()),
            Ok(task) => {
                let found = c.api.explain_event(&project_id, &task.event).await?;
                let alerts = c
                    .api
                    .explain_alerts(&project_id, &task.event.group_hash, &found)
                    .await?;
                verdicts = found
                    .into_iter()
                    .zip(alerts)
                    .map(|(v, a)| VerdictRow {
                        window_ends_at_shown: v.window_ends_at.map(ms_human),
                        on_call: crate::rest::alerts::on_call_words(&v, a.as_ref()),
                        alert_id: a.as_ref().map(|a| a.id.clone()),
                        alert: a.as_ref().map(crate::rest::alerts::current_words),
                        verdict: v,
                    })
                    .collect();
            }
        }
    }
    let title = format!("Explain · {project_id}");
    let page = ExplainPage {
        project_id: &project_id,
        asked: asked && error.is_none(),
        error: error.as_deref(),
        verdicts,
        title_in: &ask.title,
        group_in: &ask.group_hash,
        is_new: ask.is_new.is_some(),
        user_in: &ask.user,
    };
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok(render(status, &access.page(Nav::Projects, &title, page)))
}

/// `explain.html`: the form (with what was asked) and the verdicts.
#[derive(Serialize)]
struct ExplainPage<'a> {
    project_id: &'a str,
    /// An event was asked about and it is valid.
    asked: bool,
    /// Why the asked event is not valid.
    error: Option<&'a str>,
    verdicts: Vec<VerdictRow>,
    title_in: &'a str,
    group_in: &'a str,
    is_new: bool,
    user_in: &'a str,
}

impl Template for ExplainPage<'_> {
    const NAME: &'static str = "explain.html";
}

/// One rule's verdict (the API's JSON), with the window's end for a table.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct VerdictRow {
    #[serde(flatten)]
    verdict: RuleVerdict,
    window_ends_at_shown: Option<String>,
    /// The (rule, group)'s open alert, in words, and its id.
    alert: Option<String>,
    alert_id: Option<String>,
    /// Where the rule's reminders, escalation and quiet hours stand, in words.
    on_call: Vec<String>,
}
