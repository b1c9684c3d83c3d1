//! `GET /alerts`: everything open across projects (the on-call overview), newest first: each alert's project (by
//! name), its state in its own colour, who acknowledged it, its next reminder and its next escalation step, with
//! Acknowledge and Resolve buttons (the project page's forms: CSRF-checked, through [`Api::change_alert`]).
//!
//! The alerts come from [`crate::rest::projects::list_all`] (the API's `GET /api/v1/alerts`); the next reminder
//! and step from each project's rules as `explain` reads them ([`klaxon_core::oncall::OnCallRule::status`]).
//! Below them, the inbound integrations acknowledging from PagerDuty, Slack and Telegram: on or off, and what this
//! process counted of their requests ([`crate::inbound::status`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use klaxon_core::oncall::OnCallRule;
use klaxon_core::rule::ProjectRules;
use serde::Serialize;

use super::auth::Access;
use super::view::{ms_human, render, Nav, PageError, Template};
use super::Console;
use crate::rest::projects::ProjectAlert;

/// Most alerts on the page.
const PAGE_LIMIT: usize = 500;

/// One open alert as the overview shows it.
#[derive(Serialize)]
struct Row {
    project_id: String,
    project_name: String,
    id: String,
    state: &'static str,
    title: String,
    fired: String,
    events: u64,
    acknowledged_by: Option<String>,
    acknowledged: Option<String>,
    /// "at 14:05 (2 of 3 sent)", or `None` when the rule reminds not (or no more).
    next_reminder: Option<String>,
    /// "step 2 (pagerduty) at 14:20", or `None`.
    next_step: Option<String>,
}

/// `overview.html`.
#[derive(Serialize)]
struct OverviewPage {
    alerts: Vec<Row>,
    firing: usize,
    acknowledged: usize,
    /// Why the next reminders and steps are not shown (MongoDB unavailable).
    rules_error: Option<String>,
    /// The inbound integrations: on or off, and this process's counts.
    inbound: Vec<Inbound>,
}

/// One inbound integration as the page shows it.
#[derive(Serialize)]
struct Inbound {
    integration: &'static str,
    enabled: bool,
    secret_variable: &'static str,
    /// "3 accepted, 1 refused (bad_signature 1), 0 ignored".
    counts: Option<String>,
}

impl Template for OverviewPage {
    const NAME: &'static str = "overview.html";
}

fn row(p: &ProjectAlert, rules: Option<&ProjectRules>, now_ms: i64) -> Row {
    let a = &p.alert;
    let status = rules
        .and_then(|r| r.rules.iter().find(|r| r.id == a.rule_id))
        .and_then(OnCallRule::of)
        .map(|r| r.status(Some(a), now_ms));
    let next_reminder = status.as_ref().and_then(|s| s.reminders).and_then(|r| {
        r.next_at_ms
            .map(|at| format!("{} ({} of {} sent)", ms_human(at), r.sent, r.max))
    });
    let next_step = status.as_ref().and_then(|s| s.escalation.as_ref()).and_then(|e| {
        e.next
            .as_ref()
            .map(|(step, at, channels)| format!("step {step} of {} ({channels}) {}", e.steps, ms_human(*at)))
    });
    Row {
        project_id: a.project_id.clone(),
        project_name: p.project_name.clone(),
        id: a.id.clone(),
        state: a.state.as_str(),
        title: klaxon_core::text::one_line(&a.title, 300),
        fired: ms_human(a.fired_at_ms),
        events: a.events,
        acknowledged_by: a.acknowledged_by.clone(),
        acknowledged: a.acknowledged_at_ms.map(ms_human),
        next_reminder,
        next_step,
    }
}

/// `GET /alerts`.
pub(super) async fn page(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
) -> Result<Response, PageError> {
    let all = c.api.list_all_alerts(None, PAGE_LIMIT).await?;
    let open: Vec<ProjectAlert> = all.into_iter().filter(|p| p.alert.state.is_open()).collect();
    // The rules of each project with an open alert, for its next reminder and step (read through the store;
    // one read per project).
    let mut rules: HashMap<String, ProjectRules> = HashMap::new();
    let mut rules_error = None;
    if let Ok(store) = c.api.store().await {
        for p in &open {
            if rules.contains_key(&p.alert.project_id) || rules_error.is_some() {
                continue;
            }
            match store.load(&p.alert.project_id).await {
                Ok(Some(r)) => {
                    rules.insert(p.alert.project_id.clone(), r);
                }
                Ok(None) => {}
                Err(e) => rules_error = Some(e.to_string()),
            }
        }
    } else {
        rules_error = Some("MongoDB is unavailable".into());
    }
    let now_ms = klaxon_core::clock::now_ms();
    let alerts: Vec<Row> = open
        .iter()
        .map(|p| row(p, rules.get(&p.alert.project_id), now_ms))
        .collect();
    let page = OverviewPage {
        firing: alerts.iter().filter(|r| r.state == "firing").count(),
        acknowledged: alerts.iter().filter(|r| r.state == "acknowledged").count(),
        alerts,
        rules_error,
        inbound: crate::inbound::status::of_process(&c.api)
            .into_iter()
            .map(|s| Inbound {
                integration: s.integration,
                enabled: s.enabled,
                secret_variable: s.secret_variable,
                counts: s.counts.map(|c| c.summary()),
            })
            .collect(),
    };
    Ok(render(
        StatusCode::OK,
        &access.page(Nav::Alerts, "Open alerts", page),
    ))
}
