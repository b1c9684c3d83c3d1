//! `GET /` (projects with rules, queue depths, the last hour of the trail), `GET /projects?id=`, and
//! `GET /projects/{id}` (its rules, enable/disable, mutes).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use klaxon_broker::{BrokerError, QUEUE_DECLARE_PASSIVE};
use klaxon_core::rule::{Field, RawChannel, RuleId};
use klaxon_core::{ChannelKind, RawRule, RuleProblem};
use klaxon_store::format::oids_to_hex;
use klaxon_store::trail::{Record, Status};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Access;
use super::mutes::{active_mutes, MuteRow};
use super::view::{notice, project_path, render, rules_error, Nav, PageError, Template};
use super::{path_project, Console};
use crate::rest::check_project_id;
use crate::{Api, ApiError};

/// Projects listed on `/` at most (the rest are reachable with "open a project").
const MAX_PROJECTS: usize = 500;
/// Trail records read at most for the last hour's counts.
const LAST_HOUR_SCAN: usize = 100_000;
/// How long the last hour's counts may take before the page shows them as unavailable (on a MongoDB-wire
/// server without indexes, e.g. PoloDB, the trail is scanned whole).
const LAST_HOUR_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the queue depths may take before the page shows them as unavailable.
const QUEUES_TIMEOUT: Duration = Duration::from_secs(4);

/// `GET /`: projects with rules, the namespace's queue depths, the last hour of the trail.
pub(super) async fn list(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
) -> Result<Response, PageError> {
    let api = &c.api;
    let store = api.store().await?;
    let hour = async {
        tokio::time::timeout(LAST_HOUR_TIMEOUT, last_hour(api))
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no answer within {} s", LAST_HOUR_TIMEOUT.as_secs()),
                ))
            })
    };
    // The two MongoDB reads one after the other (a MongoDB-wire server like PoloDB loses cursors under
    // concurrent reads); RabbitMQ meanwhile.
    let mongo = async {
        let projects = match store.projects().await {
            // One retry of this read-only query on a transient error (PoloDB under concurrent load has been
            // seen answering "cursor not found" to it).
            Err(e) if e.is_transient() => {
                tracing::debug!(error = %e, "console: listing projects failed; retrying once");
                tokio::time::sleep(Duration::from_millis(100)).await;
                store.projects().await
            }
            r => r,
        };
        (projects, hour.await)
    };
    let open = async {
        tokio::time::timeout(
            LAST_HOUR_TIMEOUT,
            api.list_all_alerts(None, crate::rest::projects::MAX_LIST_ALL),
        )
        .await
        .ok()
        .and_then(Result::ok)
    };
    let ((projects, hour), queues, open) = tokio::join!(mongo, queue_depths(api), open);
    // Open alerts per project: (firing, acknowledged); `None` when Redis did not answer in time.
    let mut open_counts: HashMap<String, (usize, usize)> = HashMap::new();
    if let Some(list) = &open {
        for p in list {
            let c = open_counts.entry(p.alert.project_id.clone()).or_default();
            match p.alert.state {
                klaxon_core::alert::AlertState::Firing => c.0 += 1,
                klaxon_core::alert::AlertState::Acknowledged => c.1 += 1,
                klaxon_core::alert::AlertState::Resolved => {}
            }
        }
    }
    let projects = projects.map_err(rules_error)?;
    let (hour_rows, hour_error) = match hour {
        Ok(h) => (h, None),
        Err(e) => (BTreeMap::new(), Some(e.message)),
    };
    // The busiest projects of the last hour first, then the newest (an ObjectId starts with its creation
    // time), so that what needs a look is on the page however many projects the store holds.
    let hour_of = |id: &str| hour_rows.get(id).copied().unwrap_or_default();
    let mut projects = projects;
    projects.sort_by_cached_key(|p| {
        (
            std::cmp::Reverse(hour_of(&p.project_id.to_hex()).firings),
            std::cmp::Reverse(p.project_id.bytes()),
        )
    });
    let rows: Vec<ProjectRow> = projects
        .iter()
        .take(MAX_PROJECTS)
        .map(|p| {
            let id = p.project_id.to_hex();
            let (firing, acknowledged) = open_counts.get(&id).copied().unwrap_or_default();
            ProjectRow {
                name: p.shown_name.clone(),
                firing,
                acknowledged,
                rules: p.notifications.len(),
                enabled: p
                    .notifications
                    .iter()
                    .filter(|d| d.get_bool("isEnabled").unwrap_or(false))
                    .count(),
                hour: hour_of(&id),
                id,
            }
        })
        .collect();
    let (queues, queues_error) = match queues {
        Ok(q) => (q, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let page = ProjectsPage {
        projects: rows,
        project_count: projects.len(),
        max_projects: MAX_PROJECTS,
        queues,
        queues_error,
        hour_total: hour_rows.values().copied().sum(),
        hour_error,
        namespace: &api.config().namespace,
        alerts_error: open.is_none(),
        open_firing: open_counts.values().map(|c| c.0).sum(),
        open_acknowledged: open_counts.values().map(|c| c.1).sum(),
    };
    Ok(render(
        StatusCode::OK,
        &access.page(Nav::Projects, "Projects", page),
    ))
}

/// `projects.html`: the projects with rules, the last hour, the queues.
#[derive(Serialize)]
struct ProjectsPage<'a> {
    /// At most [`MAX_PROJECTS`] of them.
    projects: Vec<ProjectRow>,
    /// How many projects have rules.
    project_count: usize,
    max_projects: usize,
    queues: Vec<QueueRow>,
    /// Why the queue depths are not shown.
    queues_error: Option<String>,
    /// The last hour of every project.
    hour_total: HourCounts,
    /// Why the last hour is not shown.
    hour_error: Option<String>,
    namespace: &'a str,
    /// The open alerts could not be read (Redis): no counts shown.
    alerts_error: bool,
    /// Open alerts of every project, firing and acknowledged.
    open_firing: usize,
    open_acknowledged: usize,
}

impl Template for ProjectsPage<'_> {
    const NAME: &'static str = "projects.html";
}

/// A project with rules.
#[derive(Serialize)]
struct ProjectRow {
    id: String,
    /// Its name (Klaxon's, else Hawk's).
    name: Option<String>,
    /// Open alerts: firing, acknowledged.
    firing: usize,
    acknowledged: usize,
    /// Rules stored.
    rules: usize,
    /// Of which enabled.
    enabled: usize,
    hour: HourCounts,
}

/// One queue of the namespace: its depth, `None` when it is not declared (yet).
#[derive(Serialize)]
struct QueueRow {
    name: String,
    messages: Option<u32>,
    consumers: Option<u32>,
}

/// A project's last hour in the delivery trail: distinct notifications fired, and records by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct HourCounts {
    firings: u64,
    sent: u64,
    retrying: u64,
    dead: u64,
    shadow: u64,
    dropped: u64,
}

impl HourCounts {
    /// One more record of `status`.
    fn record(&mut self, status: Status) {
        *match status {
            Status::Sent => &mut self.sent,
            Status::Retrying => &mut self.retrying,
            Status::Dead => &mut self.dead,
            Status::Shadow => &mut self.shadow,
            Status::Dropped => &mut self.dropped,
            // never recorded in the trail (quiet hours' holds live in Redis)
            Status::Held => return,
        } += 1;
    }
}

impl std::iter::Sum for HourCounts {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(HourCounts::default(), |a, b| HourCounts {
            firings: a.firings + b.firings,
            sent: a.sent + b.sent,
            retrying: a.retrying + b.retrying,
            dead: a.dead + b.dead,
            shadow: a.shadow + b.shadow,
            dropped: a.dropped + b.dropped,
        })
    }
}

/// Message counts of the namespace's queues, by passive declare (which never creates a queue); `null` for a
/// queue that does not exist. Err: RabbitMQ is unavailable.
async fn queue_depths(api: &Api) -> Result<Vec<QueueRow>, String> {
    let topology = api.topology();
    let read = async {
        // the API's one connection: a page view opens channels, never a connection
        let broker = api.broker().await.map_err(|e| e.message)?;
        let mut out = Vec::new();
        for queue in topology.queues() {
            let (messages, consumers) = match broker.queue_depth(&queue).await {
                Ok(Some(q)) => (Some(q.messages), Some(q.consumers)),
                // missing, or the declare failed: shown as unknown
                Ok(None)
                | Err(BrokerError::Amqp {
                    op: QUEUE_DECLARE_PASSIVE,
                    ..
                }) => (None, None),
                // no channel: RabbitMQ is unavailable
                Err(e) => return Err(e.to_string()),
            };
            out.push(QueueRow {
                name: queue,
                messages,
                consumers,
            });
        }
        Ok(out)
    };
    match tokio::time::timeout(QUEUES_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", QUEUES_TIMEOUT.as_secs())),
    }
}

/// The last hour of the delivery trail per project: distinct notifications fired, and records by status.
async fn last_hour(api: &Api) -> Result<BTreeMap<String, HourCounts>, ApiError> {
    let since = klaxon_core::clock::now_ms() - 3_600_000;
    let records = api
        .trail()
        .await?
        .since(since, LAST_HOUR_SCAN)
        .await
        .map_err(|e| ApiError::unavailable("MongoDB", e))?;
    Ok(hour_counts(&records, since))
}

/// Per project: distinct notifications fired since `since` (ms), and the records by status.
fn hour_counts(records: &[Record], since: i64) -> BTreeMap<String, HourCounts> {
    let mut fired: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut out: BTreeMap<String, HourCounts> = BTreeMap::new();
    for r in records {
        out.entry(r.project_id.clone()).or_default().record(r.status);
        if r.fired_at_ms >= since {
            fired
                .entry(r.project_id.as_str())
                .or_default()
                .insert(r.notification_id.as_str());
        }
    }
    for (p, ids) in fired {
        if let Some(row) = out.get_mut(p) {
            row.firings = ids.len() as u64;
        }
    }
    out
}

#[derive(Deserialize)]
pub(super) struct OpenQuery {
    #[serde(default)]
    id: String,
}

/// `GET /projects?id=`: the "open a project" form.
pub(super) async fn open(Query(q): Query<OpenQuery>) -> Result<Response, PageError> {
    let id = q.id.trim().to_ascii_lowercase();
    check_project_id(&id)?;
    Ok(Redirect::to(&project_path(&id)).into_response())
}

/// One rule as the project page shows it (endpoints redacted).
#[derive(Debug, Serialize)]
pub(super) struct RuleView {
    /// `?` when the rule has no readable id.
    pub(super) id: String,
    enabled: bool,
    /// `whatToReceive` (`?` when it is not a string).
    pub(super) what: String,
    /// As stored, whatever its type.
    threshold: Value,
    /// `thresholdPeriod` in words (`1m 30s`).
    period: Option<String>,
    /// SPIKE and REAPPEARED (valid ones): what the rule watches for, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    /// A valid rule's alert life in words: how its alerts resolve, reminders, escalation, quiet hours.
    on_call: Vec<OnCallLine>,
    window: String,
    unique_users: bool,
    including: Vec<String>,
    excluding: Vec<String>,
    including_patterns: Vec<String>,
    excluding_patterns: Vec<String>,
    channels: Vec<ChannelView>,
    /// What `klaxon rules check` would say about it.
    problems: Vec<RuleProblem>,
}

/// One line of a rule's alert life on the project page: "reminders" → "every 30m, 3 times".
#[derive(Debug, Serialize)]
struct OnCallLine {
    what: &'static str,
    words: String,
}

/// One channel of a rule on the project page.
#[derive(Debug, Serialize)]
struct ChannelView {
    name: String,
    enabled: bool,
    /// The endpoint, redacted (or why there is none to show).
    destination: String,
    /// A webhook channel's Standard Webhooks secret (see [`add_signing_secret`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    signing_secret: Option<String>,
    /// A webhook channel, and no master key: its deliveries are unsigned.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    unsigned: bool,
}

/// One rule as the project page shows it, read through the core's [`RawRule`] so that a broken rule is shown
/// too.
pub(super) fn rule_view(rule: &Value, limits: &klaxon_core::Limits) -> RuleView {
    // Ids as hex, like everywhere in the console; a value that is not a rule shows as an empty one.
    let raw = RawRule::from_value(&oids_to_hex(rule.clone())).unwrap_or_default();
    let text = |f: &Field<String>| f.typed().cloned();
    let list = |f: &Field<Vec<String>>| -> Vec<String> {
        match f {
            Field::Typed(items) => items.clone(),
            Field::Other(Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let channels = raw
        .channels
        .typed()
        .map(|chs| chs.0.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|(name, ch)| {
            let ch = ch.typed();
            let endpoint = ch
                .and_then(|c| c.endpoint.typed())
                .map(String::as_str)
                .unwrap_or("");
            let destination = match ChannelKind::parse(name) {
                Some(kind) if !endpoint.trim().is_empty() => klaxon_channels::redact_endpoint(kind, endpoint),
                Some(_) => "(no endpoint)".into(),
                None => "(not delivered by Klaxon)".into(),
            };
            ChannelView {
                name: name.clone(),
                enabled: ch.is_some_and(RawChannel::is_on),
                destination,
                signing_secret: None,
                unsigned: false,
            }
        })
        .collect();
    // After `oids_to_hex`, an id still in `{"$oid": …}` form carries other keys: not shown as an id.
    let id = match &raw.id {
        Field::Typed(RuleId::Hex(id)) => id.clone(),
        _ => "?".into(),
    };
    let compiled = compile(&raw);
    RuleView {
        id,
        enabled: raw.is_enabled.typed() == Some(&true),
        what: text(&raw.what_to_receive).unwrap_or_else(|| "?".into()),
        threshold: raw.threshold.to_json(),
        period: raw
            .threshold_period
            .typed()
            .map(|ms| klaxon_core::text::compact_duration(*ms)),
        signal: compiled.as_ref().and_then(|r| r.what.watches_for()),
        on_call: compiled.as_ref().map(on_call_lines).unwrap_or_default(),
        window: text(&raw.window).unwrap_or_else(|| "fixed".into()),
        unique_users: raw.unique_users.typed() == Some(&true),
        including: list(&raw.including),
        excluding: list(&raw.excluding),
        including_patterns: list(&raw.including_patterns),
        excluding_patterns: list(&raw.excluding_patterns),
        channels,
        problems: klaxon_store::format::rule_problems(rule, limits),
    }
}

/// The rule compiled as the engine reads it (any id, so that a rule without one is described too), when it
/// is usable: what a valid SPIKE, REAPPEARED or NO_EVENTS rule watches for
/// ([`klaxon_core::WhatToReceive::watches_for`]: "5× its mean of the previous 24 buckets of 1h (at least 10)",
/// "seen again after 7days quiet", "no event from the project for 1h") and its alert life come from it.
fn compile(raw: &RawRule) -> Option<klaxon_core::CompiledRule> {
    let probe = RawRule {
        id: Field::Typed(RuleId::Hex("000000000000000000000000".into())),
        ..raw.clone()
    };
    Some(probe.validate().ok()?.0)
}

/// A rule's alert life in the core's words (the summaries `klaxon rules list` prints): how its alerts
/// resolve (`resolveAfter`, the kind's default included), `renotify`, `escalation`, `quietHours` with
/// `quietHoursBypass`.
fn on_call_lines(rule: &klaxon_core::CompiledRule) -> Vec<OnCallLine> {
    use klaxon_core::oncall::{escalation_summary, resolve_after_summary};
    let mut out = vec![OnCallLine {
        what: "resolves",
        words: resolve_after_summary(rule.resolve_after_ms),
    }];
    if let Some(r) = &rule.renotify {
        out.push(OnCallLine {
            what: "reminders",
            words: r.summary(),
        });
    }
    if !rule.escalation.is_empty() {
        out.push(OnCallLine {
            what: "escalation",
            words: escalation_summary(&rule.escalation),
        });
    }
    if !rule.quiet_hours.is_empty() {
        out.push(OnCallLine {
            what: "quiet hours",
            words: rule.quiet_hours.summary(),
        });
    }
    out
}

/// Adds the webhook channel's Standard Webhooks signing secret to a rule's view (`signing_secret`, or
/// `unsigned` without a master key): the project page shows it, behind the console's auth, so the tenant can
/// configure its receiver. Derived for this project only (see `webhook_secret`).
fn add_signing_secret(
    view: &mut RuleView,
    rule: &Value,
    project_id: &str,
    keys: Option<&klaxon_channels::webhook::SigningKeys>,
) {
    let Some(endpoint) = rule
        .pointer("/channels/webhook/endpoint")
        .and_then(Value::as_str)
        .filter(|e| !e.trim().is_empty())
    else {
        return;
    };
    let Some(ch) = view.channels.iter_mut().find(|c| c.name == "webhook") else {
        return;
    };
    match keys {
        Some(k) => ch.signing_secret = Some(k.endpoint_secret(project_id, endpoint).expose_whsec()),
        None => ch.unsigned = true,
    }
}

#[derive(Deserialize)]
pub(super) struct DoneQuery {
    pub(super) done: Option<String>,
}

/// `GET /projects/{id}`: rules, enable/disable, mutes.
pub(super) async fn show(
    State(c): State<Arc<Console>>,
    Extension(access): Extension<Access>,
    Path(project_id): Path<String>,
    Query(dq): Query<DoneQuery>,
) -> Result<Response, PageError> {
    let project_id = path_project(&project_id)?;
    let api = &c.api;
    let project = c.stored(&project_id).await?;
    let limits = &api.config().limits;
    let (exists, rules) = match &project {
        // The rules the engine evaluates: a project over the limit (written elsewhere) shows its first ones
        // and says so below; the editor shows every stored rule, to remove some.
        Some(p) => (
            true,
            p.notifications
                .iter()
                .take(limits.max_rules)
                .map(|r| {
                    let mut view = rule_view(r, limits);
                    add_signing_secret(&mut view, r, &project_id, api.config().webhook_keys.as_ref());
                    view
                })
                .collect::<Vec<_>>(),
        ),
        None => (false, Vec::new()),
    };
    // Over a limit: what the engine skips, said above the lists.
    let mut over_limit: Vec<String> = project
        .as_ref()
        .and_then(|p| limits.rule_count_problem(p.notifications.len()))
        .map(|p| {
            format!(
                "{}; the list below shows those {}, Edit rules shows them all (fix: {})",
                p.message, limits.max_rules, p.fix
            )
        })
        .into_iter()
        .collect();
    let (mutes, mutes_error) = match active_mutes(api, &project_id).await {
        Ok((m, unread)) => {
            if unread > 0 {
                over_limit.push(format!(
                    "{unread} more mutes are stored than the limit of {} per project: they are not shown and \
                     not applied (delete mutes, or let them expire)",
                    limits.max_mutes
                ));
            }
            (m, None)
        }
        Err(e) => (Vec::new(), Some(e.message)),
    };
    let title = format!("Project {project_id}");
    let page = ProjectPage {
        project_id: &project_id,
        exists,
        rules,
        mutes,
        mutes_error,
        notice: notice(dq.done.as_deref()),
        over_limit,
    };
    let status = if exists {
        StatusCode::OK
    } else {
        StatusCode::NOT_FOUND
    };
    Ok(render(status, &access.page(Nav::Projects, &title, page)))
}

/// `project.html`: the rules, the mutes and their forms.
#[derive(Serialize)]
struct ProjectPage<'a> {
    project_id: &'a str,
    /// The store has the project (else: 404, and a link to write its first rules).
    exists: bool,
    /// The rules the engine evaluates (at most the limit).
    rules: Vec<RuleView>,
    mutes: Vec<MuteRow>,
    /// Why the mutes are not shown.
    mutes_error: Option<String>,
    /// What the last form did (`?done=`).
    notice: Option<&'static str>,
    /// What is past a limit, in words.
    over_limit: Vec<String>,
}

impl Template for ProjectPage<'_> {
    const NAME: &'static str = "project.html";
}

#[derive(Deserialize)]
pub(super) struct EnabledForm {
    #[serde(default)]
    enabled: String,
}

/// `POST /projects/{id}/rules/{ruleId}/enabled` `enabled=true|false`.
pub(super) async fn set_enabled(
    State(c): State<Arc<Console>>,
    Path((project_id, rule_id)): Path<(String, String)>,
    Form(form): Form<EnabledForm>,
) -> Result<Response, PageError> {
    check_project_id(&project_id)?;
    let enabled = match form.enabled.as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return Err(PageError(
                StatusCode::BAD_REQUEST,
                "`enabled` must be true or false".into(),
            ))
        }
    };
    let api = &c.api;
    api.store()
        .await?
        .set_enabled(Some(&project_id), &rule_id, enabled)
        .await
        .map_err(rules_error)?;
    api.publish_invalidation(&project_id).await;
    let done = if enabled { "enabled" } else { "disabled" };
    Ok(Redirect::to(&format!("{}?done={done}", project_path(&project_id))).into_response())
}

#[cfg(test)]
mod tests {

    #[test]
    fn spike_reappeared_and_no_events_rules_say_what_they_watch_for() {
        let limits = klaxon_core::Limits::default();
        let hook = json!({"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "minPeriod": 0}});
        let cases = [
            (
                json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SPIKE",
                    "thresholdPeriod": 3_600_000, "channels": hook}),
                Some("5× its mean of the previous 24 buckets of 1h (at least 10)"),
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "REAPPEARED",
                    "channels": hook}),
                Some("seen again after 7days quiet"),
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "NO_EVENTS",
                    "quietPeriod": 3_600_000, "channels": hook}),
                Some("no event from the project for 1h"),
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "NO_EVENTS",
                    "channels": hook}),
                None,
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SPIKE",
                    "thresholdPeriod": 3_600_000, "factor": 1, "channels": hook}),
                None,
            ),
        ];
        for (rule, want) in cases {
            let v = rule_view(&rule, &limits);
            assert_eq!(v.signal.as_deref(), want, "{rule}");
            assert_eq!(v.problems.is_empty(), want.is_some(), "{rule}: {:?}", v.problems);
        }
    }

    /// A usable rule's alert life in the core's words; a broken rule shows none (its problems say why).
    #[test]
    fn rule_views_say_the_alert_life_in_words() {
        let limits = klaxon_core::Limits::default();
        let hook = json!({"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "minPeriod": 0}});
        let base = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 3, "thresholdPeriod": 3_600_000, "channels": hook});
        let with = |extra: serde_json::Value| {
            let mut r = base.clone();
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                r[k] = v;
            }
            r
        };
        let cases = [
            (base.clone(), vec![("resolves", "after 1h without events")]),
            (
                with(
                    json!({"resolveAfter": 0, "renotify": {"every": 1_800_000, "max": 3},
                    "escalation": [{"after": 900_000, "channels": {"pagerduty": {"isEnabled": true,
                        "endpoint": "R0UTINGKEYabcdefABCDEF0123456789", "minPeriod": 0}}}],
                    "quietHours": [{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00",
                        "timezone": "Europe/Berlin"}],
                    "quietHoursBypass": ["pagerduty"]}),
                ),
                vec![
                    ("resolves", "by hand only"),
                    ("reminders", "every 30m, 3 times"),
                    ("escalation", "15m→pagerduty"),
                    (
                        "quiet hours",
                        "mon-fri 22:00-07:00 Europe/Berlin (bypass pagerduty)",
                    ),
                ],
            ),
            (with(json!({"renotify": {"every": 10, "max": 3}})), vec![]),
        ];
        for (rule, want) in cases {
            let v = rule_view(&rule, &limits);
            let got: Vec<(&str, &str)> = v.on_call.iter().map(|l| (l.what, l.words.as_str())).collect();
            assert_eq!(got, want, "{rule}");
        }
    }

    use super::*;
    use serde_json::json;

    /// The project page of `rules`, as HTML.
    async fn project_html(access: &Access, project_id: &str, rules: Vec<RuleView>) -> String {
        let page = ProjectPage {
            project_id,
            exists: true,
            rules,
            mutes: Vec::new(),
            mutes_error: None,
            notice: None,
            over_limit: Vec::new(),
        };
        let r = render(StatusCode::OK, &access.page(Nav::Projects, "P", page));
        assert_eq!(r.status(), StatusCode::OK);
        axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The project page shows broken rules as they are stored, with their problems.
    #[test]
    fn rule_views_show_what_is_stored() {
        let id = "5e3eef0679fa3700a0198a49";
        let broken = json!({"_id": {"$oid": id}, "isEnabled": "yes", "whatToReceive": 5, "threshold": "3",
            "thresholdPeriod": 90_000, "window": null, "uniqueUsers": true, "including": ["a", 1],
            "channels": {"slack": {"isEnabled": true, "endpoint": " "}, "webPush": {"isEnabled": true},
                         "email": "x", "webhook": {"isEnabled": false, "endpoint": "https://h.test/x"}}});
        let view = |rule: &Value| {
            serde_json::to_value(rule_view(rule, &klaxon_core::Limits::default())).expect("serializes")
        };
        let v = view(&broken);
        let want = json!({"id": id, "enabled": false, "what": "?", "threshold": "3", "period": "1m 30s",
            "window": "fixed", "unique_users": true, "including": ["a", "1"], "excluding": [],
            "including_patterns": [], "excluding_patterns": []});
        for (k, w) in want.as_object().into_iter().flatten() {
            assert_eq!(&v[k], w, "{k}");
        }
        let channels: Vec<(&str, bool, &str)> = v["channels"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default(),
                    c["enabled"] == true,
                    c["destination"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            channels[..3],
            [
                ("slack", true, "(no endpoint)"),
                ("webPush", true, "(not delivered by Klaxon)"),
                ("email", false, "(no endpoint)")
            ]
        );
        assert_eq!((channels[3].0, channels[3].1), ("webhook", false));
        assert_eq!(v["problems"][0]["message"], "`isEnabled` must be a boolean");
        let v = view(&json!(3));
        assert_eq!(
            (&v["id"], &v["what"], &v["window"]),
            (&json!("?"), &json!("?"), &json!("fixed"))
        );
        assert_eq!(v["problems"][0]["message"], "rule is not an object");
        let v = view(&json!({"_id": {"$oid": id, "x": 1}}));
        assert_eq!(v["id"], "?", "not an ObjectId");
    }

    #[tokio::test]
    async fn pages_escape_what_they_show() {
        let access = Access {
            csrf: "tok".into(),
            session: true,
        };
        let rule = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 3, "thresholdPeriod": 3_600_000, "including": ["<script>alert(1)</script>"], "excluding": [],
            "channels": {"telegram": {"isEnabled": true, "endpoint": "https://api.telegram.org/bot123:SECRET/sendMessage?chat_id=1"}}});
        let html = project_html(
            &access,
            "5e3eef0679fa3700a0198a48",
            vec![rule_view(&rule, &klaxon_core::Limits::default())],
        )
        .await;
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("SECRET"), "the endpoint is redacted: {html}");
        assert!(
            html.contains("name=\"csrf\" value=\"tok\""),
            "forms carry the token"
        );
    }

    #[tokio::test]
    async fn the_project_page_shows_each_webhook_channels_own_signing_secret() {
        use klaxon_channels::webhook::SigningKeys;
        let access = Access {
            csrf: "tok".into(),
            session: true,
        };
        let (p, endpoint) = (
            "5e3eef0679fa3700a0198a48",
            "https://hooks.example/k?token=SECRETPATH",
        );
        let rule = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"webhook": {"isEnabled": true, "endpoint": endpoint},
                         "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/services/x"}}});
        let keys = SigningKeys::from_settings(
            Some(klaxon_channels::Secret::new(
                "MASTERKEY-0123456789abcdef0123456789",
            )),
            None,
            None,
        )
        .expect("valid")
        .expect("some");
        let page = |keys: Option<&SigningKeys>| {
            let mut view = rule_view(&rule, &klaxon_core::Limits::default());
            add_signing_secret(&mut view, &rule, p, keys);
            project_html(&access, p, vec![view])
        };
        let html = page(Some(&keys)).await;
        let secret = keys.endpoint_secret(p, endpoint).expose_whsec();
        // base64 may hold `/` and `+`: the page escapes them like any text, so compare with the escaped form.
        let shown = secret.replace('/', "&#x2f;");
        assert!(html.contains(&shown), "the project's own secret is shown: {html}");
        assert_eq!(
            html.matches("signing secret").count(),
            1,
            "for the webhook channel only"
        );
        let other = keys
            .endpoint_secret("65a000000000000000000001", endpoint)
            .expose_whsec();
        assert!(!html.contains(&other.replace('/', "&#x2f;")));
        for hidden in ["MASTERKEY", "SECRETPATH"] {
            assert!(!html.contains(hidden), "{hidden} in {html}");
        }
        let html = page(None).await;
        assert!(html.contains("unsigned") && !html.contains("whsec_"), "{html}");
    }

    #[test]
    fn the_last_hour_counts_firings_once_and_records_by_status() {
        let rec = |p: &str, n: &str, status: Status, fired: i64| Record {
            notification_id: n.into(),
            project_id: p.into(),
            rule_id: "r".into(),
            channel: "webhook".into(),
            destination: "-".into(),
            attempts: 1,
            status,
            last_error: None,
            fired_at_ms: fired,
            at_ms: 2_000,
        };
        let records = [
            rec("a", "n1", Status::Retrying, 1_500),
            rec("a", "n1", Status::Sent, 1_500),
            rec("a", "n2", Status::Dead, 1_600),
            rec("a", "n3", Status::Sent, 500), // fired before the hour, delivered in it
            rec("b", "n4", Status::Sent, 1_900),
        ];
        let c = hour_counts(&records, 1_000);
        assert_eq!(
            json!(c["a"]),
            json!({"firings": 2, "sent": 2, "retrying": 1, "dead": 1, "shadow": 0, "dropped": 0})
        );
        assert_eq!(
            json!(c["b"]),
            json!({"firings": 1, "sent": 1, "retrying": 0, "dead": 0, "shadow": 0, "dropped": 0})
        );
        assert_eq!(c.len(), 2);
    }
}
