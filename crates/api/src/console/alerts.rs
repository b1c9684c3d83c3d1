//! `GET /projects/{id}/alerts`: a project's open alerts (firing, acknowledged) and the recently resolved ones,
//! with Acknowledge and Resolve buttons: `POST /projects/{id}/alerts/{alertId}/ack|resolve` (CSRF-checked like
//! every console form), through the API's own [`Api::change_alert`], so they publish the lifecycle messages
//! and refuse exactly as `POST /api/v1/…/alerts/{alertId}/ack` does.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use klaxon_core::alert::{Alert, AlertState, AlertView};
use serde::Serialize;

use super::auth::Access;
use super::projects::DoneQuery;
use super::view::{ms_human, render, Nav, PageError, Template};
use super::{path_project, Console};
use crate::rest::alerts::HandAction;

/// `by` of a change made in the console.
pub(super) const CONSOLE_BY: &str = "console";
/// Most alerts of each list on the page.
const PAGE_LIMIT: usize = 200;

/// One alert as the page shows it: the API's view, and its times for a table.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AlertRow {
    #[serde(flatten)]
    view: AlertView,
    fired_shown: String,
    acknowledged_shown: Option<String>,
    resolved_shown: Option<String>,
    resolves_shown: Option<String>,
}

impl From<&Alert> for AlertRow {
    fn from(a: &Alert) -> Self {
        AlertRow {
            view: a.view(),
            fired_shown: ms_human(a.fired_at_ms),
            acknowledged_shown: a.acknowledged_at_ms.map(ms_human),
            resolved_shown: a.resolved_at_ms.map(ms_human),
            resolves_shown: a.resolves_at_ms().map(ms_human),
        }
    }
}

/// `alerts.html`.
#[derive(Serialize)]
struct AlertsPage<'a> {
    project_id: &'a str,
    open: Vec<AlertRow>,
    resolved: Vec<AlertRow>,
    notice: Option<&'static str>,
    /// Said when the project's slots keep new alerts from opening.
    full: Option<String>,
}

impl Template for AlertsPage<'_> {
    const NAME: &'static str = "alerts.html";
}

/// The fixed notices of the page's redirects.
fn notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "acknowledged" => "Alert acknowledged; its channels are told.",
        "resolved" => "Alert resolved; its channels are told.",
        _ => return None,
    })
}

/// `GET /projects/{id}/alerts`.
pub(super) async fn page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Query(dq): Query<DoneQuery>,
) -> Result<Response, PageError> {
    let project_id = path_project(&project_id)?;
    let all = c.api.list_alerts(&project_id, None, PAGE_LIMIT).await?;
    let usage = c.api.alert_usage(&project_id).await?;
    let (open, resolved): (Vec<&Alert>, Vec<&Alert>) = all.iter().partition(|a| a.state.is_open());
    let title = format!("Alerts · {project_id}");
    let page = AlertsPage {
        project_id: &project_id,
        open: open.into_iter().map(AlertRow::from).collect(),
        resolved: resolved
            .into_iter()
            .filter(|a| a.state == AlertState::Resolved)
            .map(AlertRow::from)
            .collect(),
        notice: notice(dq.done.as_deref()),
        full: full_notice(&usage),
    };
    Ok(render(StatusCode::OK, &access.page(Nav::Projects, &title, page)))
}

/// What the page says when new alerts cannot open: every slot open, or the share of alerts resolved by hand
/// only taken.
fn full_notice(u: &klaxon_counter::Usage) -> Option<String> {
    match u.full(true)? {
        klaxon_counter::NotOpened::ProjectFull => Some(format!(
            "This project has {} open alerts, as many as it keeps: new firings are delivered without an alert \
             (no reminders, escalation or resolve) until some resolve.",
            u.open
        )),
        klaxon_counter::NotOpened::ByHandShare => Some(format!(
            "{} open alerts resolve only by hand (resolveAfter 0), their share of this project's {} slots: new \
             alerts of such rules are delivered without an alert until some are resolved by hand (alerts that \
             page still open).",
            u.by_hand, u.limit
        )),
    }
}

async fn change(
    c: &Console,
    project_id: &str,
    alert_id: &str,
    action: HandAction,
) -> Result<Response, PageError> {
    let project_id = path_project(project_id)?;
    c.api
        .change_alert(&project_id, alert_id, action, CONSOLE_BY)
        .await?;
    Ok(Redirect::to(&format!("/projects/{project_id}/alerts?done={}", action.done())).into_response())
}

/// `POST /projects/{id}/alerts/{alertId}/ack`.
pub(super) async fn ack(
    State(c): State<Arc<Console>>,
    Path((project_id, alert_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    change(&c, &project_id, &alert_id, HandAction::Acknowledge).await
}

/// `POST /projects/{id}/alerts/{alertId}/resolve`.
pub(super) async fn resolve(
    State(c): State<Arc<Console>>,
    Path((project_id, alert_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    change(&c, &project_id, &alert_id, HandAction::Resolve).await
}
