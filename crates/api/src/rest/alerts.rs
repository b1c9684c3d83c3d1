//! `GET /api/v1/projects/{projectId}/alerts?state=…`, `POST …/alerts/{alertId}/ack` and `…/resolve`: the
//! people's half of the alert lifecycle (the contract's "Alert lifecycle"): see a project's alerts, say "I'm on
//! it", say "it's over".
//!
//! ```text
//!  ack | resolve ──▶ klaxon_counter::Alerts::{acknowledge, resolve} (one atomic step in Redis; a replay finds
//!                    what the first call did) ──▶ klaxon_core::alert::lifecycle_tasks (one task per channel
//!                    that delivered the firing; the ids depend on (alert, what, channel) only)
//!                ──▶ the senders' queues with confirms, in the worker's `--output` manner ──▶ 200 AlertView
//! ```
//!
//! A replay is safe: resolving a resolved alert (or acknowledging an acknowledged one) answers 409 and publishes
//! the same messages again — same notification ids, so the senders deliver them once — which also completes a
//! first call that changed the state but could not publish. The console, the action links and `klaxon alerts`
//! go through [`hand_change`] and [`messages`], so they refuse and publish alike.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use klaxon_broker::{Outgoing, Topology};
use klaxon_core::alert::{lifecycle_tasks, Alert, AlertState, AlertView, DEFAULT_MAX_ALERTS_PER_PROJECT};
use klaxon_core::notification::{rfc3339_ms, NotificationTask, Reason};
use klaxon_counter::alerts::Change;
use klaxon_counter::{Alerts, CounterError};
use klaxon_engine::sink::Output;
use klaxon_store::Trail;
use serde_json::{json, Value};

use super::{check_project_id, limit_of, query_pairs};
use crate::error::{body_of, json_response};
use crate::{Api, ApiError};

/// How many alerts a list shows when the request says no `limit`.
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// The longest `by` (who acknowledged or resolved), in characters.
pub const MAX_BY_CHARS: usize = 64;
/// `by` when an API request names nobody.
pub const API_BY: &str = "api";

/// Acknowledge or resolve, by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandAction {
    /// "I'm on it": reminders and escalation stop.
    Acknowledge,
    /// "It's over".
    Resolve,
}

impl HandAction {
    /// The lifecycle message it sends.
    pub fn reason(self) -> Reason {
        match self {
            HandAction::Acknowledge => Reason::Acknowledged,
            HandAction::Resolve => Reason::Resolved,
        }
    }

    /// `acknowledged`, `resolved`: what the alert is after it.
    pub fn done(self) -> &'static str {
        match self {
            HandAction::Acknowledge => "acknowledged",
            HandAction::Resolve => "resolved",
        }
    }
}

/// What a hand change came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOutcome {
    /// Done now: the alert after it.
    Done(Alert),
    /// Refused (409): it was resolved already, or acknowledged already (acknowledge). `message` says so.
    Conflict {
        /// The alert as it is.
        alert: Alert,
        /// What to tell the person.
        message: String,
    },
    /// No such alert (never was, expired, or a malformed id).
    NotFound,
}

impl HandOutcome {
    /// The lifecycle tasks to publish for it: the change's messages when done, and again for a replay of the
    /// same change (resolve of a resolved alert, acknowledge of an acknowledged one): the same notification ids,
    /// so the senders deliver them once. Nothing for an acknowledge of a resolved alert, nor for a resolve of an
    /// alert Klaxon resolved by itself (`timeout`, `event`): the loop that resolved it delivers its messages
    /// (completing them after a crash too), and on a channel with `minPeriod > 0` or in quiet hours it delivered
    /// them inside a digest or a release, so publishing them here would send a second, separate message.
    pub fn tasks(&self, action: HandAction) -> Vec<NotificationTask> {
        let alert = match self {
            HandOutcome::Done(a) => a,
            HandOutcome::Conflict { alert, .. } => match (action, alert.state) {
                (HandAction::Resolve, AlertState::Resolved)
                    if matches!(alert.resolved_by.as_deref(), Some("timeout" | "event")) =>
                {
                    return Vec::new()
                }
                (HandAction::Resolve, AlertState::Resolved)
                | (HandAction::Acknowledge, AlertState::Acknowledged) => alert,
                _ => return Vec::new(),
            },
            HandOutcome::NotFound => return Vec::new(),
        };
        let at_ms = match action {
            HandAction::Acknowledge => alert.acknowledged_at_ms,
            HandAction::Resolve => alert.resolved_at_ms,
        }
        .unwrap_or(alert.fired_at_ms);
        lifecycle_tasks(alert, action.reason(), at_ms)
    }
}

/// Who or what, and when (`by X at T`), for a refusal.
fn by_at(by: Option<&str>, at_ms: Option<i64>) -> String {
    let mut s = String::new();
    if let Some(by) = by {
        s.push_str(&format!(" by {}", klaxon_core::text::one_line(by, MAX_BY_CHARS)));
    }
    if let Some(at) = at_ms {
        s.push_str(&format!(" at {}", rfc3339_ms(at)));
    }
    s
}

/// The outcome of the counter's answer to `action` on alert `alert_id`.
pub fn outcome(action: HandAction, alert_id: &str, change: Change) -> HandOutcome {
    match change {
        Change::Done(a) => HandOutcome::Done(a),
        Change::AlreadyResolved(a) => HandOutcome::Conflict {
            message: match action {
                HandAction::Acknowledge => format!(
                    "alert {alert_id} is resolved{}: there is nothing to acknowledge",
                    by_at(a.resolved_by.as_deref(), a.resolved_at_ms)
                ),
                HandAction::Resolve => format!(
                    "alert {alert_id} is already resolved{}",
                    by_at(a.resolved_by.as_deref(), a.resolved_at_ms)
                ),
            },
            alert: a,
        },
        Change::AlreadyAcknowledged(a) => HandOutcome::Conflict {
            message: format!(
                "alert {alert_id} is already acknowledged{}",
                by_at(a.acknowledged_by.as_deref(), a.acknowledged_at_ms)
            ),
            alert: a,
        },
        // The timer's answers; a hand change never gets them.
        Change::NotDue { .. } | Change::Never(_) | Change::NotFound => HandOutcome::NotFound,
    }
}

/// Acknowledges or resolves alert `alert_id` of `project_id` by `by`, on the Redis clock. A malformed id is
/// not found (never sent to Redis).
pub async fn hand_change(
    alerts: &Alerts,
    project_id: &str,
    alert_id: &str,
    action: HandAction,
    by: &str,
) -> Result<HandOutcome, CounterError> {
    if !klaxon_core::alert::is_alert_id(alert_id) || !klaxon_core::event::is_object_id(project_id) {
        return Ok(HandOutcome::NotFound);
    }
    let change = match action {
        HandAction::Acknowledge => alerts.acknowledge(project_id, alert_id, by, None).await?,
        HandAction::Resolve => alerts.resolve(project_id, alert_id, by, None).await?,
    };
    Ok(outcome(action, alert_id, change))
}

/// The messages that carry `tasks` to the senders in `output`'s manner, through the worker's own
/// [`klaxon_engine::sink::dispatch`]: Klaxon's `<ns>.notify.<channel>` queues; with `--output hawk` none (Hawk's
/// senders know only firings: each task is counted in `klaxon_alert_messages_not_sent_total{reason="hawk_output"}`
/// and logged as not sent); with `--output shadow` none (each is recorded in `trail` with status `shadow` and
/// counted, as the worker's firings are).
pub fn messages(
    topology: &Topology,
    output: Output,
    trail: &Trail,
    tasks: &[NotificationTask],
) -> Vec<Outgoing> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        match klaxon_engine::sink::dispatch(topology, output, trail, task) {
            Ok(Some(m)) => out.push(m),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(notification_id = %klaxon_core::text::one_line(&task.notification_id, 256), error = %e, "cannot encode an alert message")
            }
        }
    }
    out
}

/// `by` from an optional body `{"by": "name"}` (empty body: `default`): 1 to [`MAX_BY_CHARS`] characters
/// without control characters.
pub fn by_from_body(body: &[u8], default: &str) -> Result<String, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(default.to_owned());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Some(obj) = v.as_object() else {
        return Err("the body must be an object {\"by\"?}".into());
    };
    match obj.get("by") {
        None | Some(Value::Null) => Ok(default.to_owned()),
        Some(Value::String(s)) => check_by(s),
        Some(_) => Err("`by` must be a string".into()),
    }
}

/// A valid `by` (trimmed), or why not.
pub fn check_by(by: &str) -> Result<String, String> {
    let by = by.trim();
    if by.is_empty() || by.chars().count() > MAX_BY_CHARS || by.chars().any(char::is_control) {
        return Err(format!(
            "`by` must be 1 to {MAX_BY_CHARS} characters without control characters"
        ));
    }
    Ok(by.to_owned())
}

/// A state name from a query or a flag, or why not.
pub fn parse_state(s: &str) -> Result<AlertState, String> {
    AlertState::parse(s.trim()).ok_or_else(|| {
        format!(
            "`state` must be one of {} (got `{}`)",
            AlertState::ALL.map(AlertState::as_str).join(", "),
            klaxon_core::text::one_line(s, 40)
        )
    })
}

/// The current alert of a rule in an explain answer (`"alert"` beside the verdict): `{"id", "state",
/// "firedAt", "acknowledgedAt", "acknowledgedBy", "events", "resolvesAt"}` (RFC 3339, `resolvesAt` null when it
/// resolves only by hand).
pub fn current_json(a: &Alert) -> Value {
    let v = a.view();
    json!({
        "id": v.id,
        "state": v.state,
        "firedAt": v.fired_at,
        "acknowledgedAt": v.acknowledged_at,
        "acknowledgedBy": v.acknowledged_by,
        "events": v.events,
        "resolvesAt": a.resolves_at_ms().map(rfc3339_ms),
    })
}

/// The open alert of each (rule, `group`) of `rule_ids` (`None` where there is none), in order.
pub async fn current_alerts(
    alerts: &Alerts,
    project_id: &str,
    group: &str,
    rule_ids: &[&str],
) -> Result<Vec<Option<Alert>>, CounterError> {
    let mut out = Vec::with_capacity(rule_ids.len());
    for &rule_id in rule_ids {
        out.push(if klaxon_core::event::is_object_id(rule_id) {
            alerts
                .current(project_id, &rule_id.to_ascii_lowercase(), group)
                .await?
        } else {
            None
        });
    }
    Ok(out)
}

/// Explain's verdicts as JSON, each with `"alert"` ([`current_json`]) when its (rule, group) has an open alert,
/// and `"onCall"` ([`klaxon_core::oncall::OnCallStatus::to_json`]) when the rule sets on-call fields: its
/// reminders and escalation (with an open alert), its quiet hours.
pub fn verdicts_json(verdicts: &[klaxon_core::RuleVerdict], alerts: &[Option<Alert>]) -> Vec<Value> {
    verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut j = v.to_json();
            let alert = alerts.get(i).and_then(Option::as_ref);
            if let Some(a) = alert {
                j["alert"] = current_json(a);
            }
            if let Some(on_call) = v.on_call(alert) {
                j["onCall"] = on_call.to_json();
            }
            j
        })
        .collect()
}

/// Explain's on-call lines of a verdict for a table or a page: "reminders: 1 of 2 sent, …", "escalation: …",
/// "in quiet hours until …" (empty when the rule sets no on-call field).
pub fn on_call_words(verdict: &klaxon_core::RuleVerdict, alert: Option<&Alert>) -> Vec<String> {
    verdict.on_call(alert).map(|s| s.words()).unwrap_or_default()
}

/// One line about a rule's open alert for a table: "alert 0f1e… firing since …, 3 events, resolves at …".
pub fn current_words(a: &Alert) -> String {
    let mut s = format!(
        "alert {} {} since {}, {} events",
        a.id,
        a.state,
        rfc3339_ms(a.fired_at_ms),
        a.events
    );
    if let Some(by) = &a.acknowledged_by {
        s.push_str(&format!(
            ", acknowledged by {}",
            klaxon_core::text::one_line(by, MAX_BY_CHARS)
        ));
    }
    match a.resolves_at_ms() {
        Some(at) => s.push_str(&format!(", resolves at {}", rfc3339_ms(at))),
        None => s.push_str(", resolves by hand"),
    }
    s
}

/// The list's JSON: `{"alerts": [AlertView…]}`.
pub fn list_json(alerts: &[Alert]) -> Value {
    json!({"alerts": alerts.iter().map(Alert::view).collect::<Vec<AlertView>>()})
}

impl Api {
    /// The namespace's alerts, on the API's Redis.
    pub(crate) async fn alerts(&self) -> Result<Alerts, ApiError> {
        Ok(Alerts::new(self.redis().await?, &self.config().namespace))
    }

    /// A project's alerts, newest first, of one state or all.
    pub(crate) async fn list_alerts(
        &self,
        project_id: &str,
        state: Option<AlertState>,
        limit: usize,
    ) -> Result<Vec<Alert>, ApiError> {
        self.alerts()
            .await?
            .list(project_id, state, limit)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// How full a project's alert slots are (the console says when no alert can open).
    pub(crate) async fn alert_usage(&self, project_id: &str) -> Result<klaxon_counter::Usage, ApiError> {
        self.alerts()
            .await?
            .usage(project_id)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// The open alert of each verdict's (rule, `group`), in order (explain's `"alert"`).
    pub(crate) async fn explain_alerts(
        &self,
        project_id: &str,
        group: &str,
        verdicts: &[klaxon_core::RuleVerdict],
    ) -> Result<Vec<Option<Alert>>, ApiError> {
        let rule_ids: Vec<&str> = verdicts.iter().map(|v| v.rule_id.as_str()).collect();
        current_alerts(&self.alerts().await?, project_id, group, &rule_ids)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// Acknowledges or resolves an alert by `by` and publishes its lifecycle messages (again, for a replay):
    /// the API's, the console's and the action links' one way. `404` unknown, `409` refused (after the replay's
    /// messages were published), `503` when Redis or RabbitMQ is down.
    pub(crate) async fn change_alert(
        &self,
        project_id: &str,
        alert_id: &str,
        action: HandAction,
        by: &str,
    ) -> Result<Alert, ApiError> {
        check_project_id(project_id)?;
        match self
            .change_alert_outcome(project_id, alert_id, action, by)
            .await?
        {
            HandOutcome::Done(alert) => Ok(alert),
            HandOutcome::Conflict { message, .. } => Err(ApiError::new(StatusCode::CONFLICT, message)),
            HandOutcome::NotFound => Err(not_found(project_id, alert_id)),
        }
    }

    /// [`Api::change_alert`]'s one way, with its outcome as it is (the inbound integrations answer a conflict
    /// with a 200 of their own): changes the alert, publishes its lifecycle messages (again, for a replay), logs.
    pub(crate) async fn change_alert_outcome(
        &self,
        project_id: &str,
        alert_id: &str,
        action: HandAction,
        by: &str,
    ) -> Result<HandOutcome, ApiError> {
        let outcome = hand_change(&self.alerts().await?, project_id, alert_id, action, by)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        let config = self.config();
        let out = messages(
            &self.topology(),
            config.output,
            &config.shadow_trail,
            &outcome.tasks(action),
        );
        if !out.is_empty() {
            let now: Vec<_> = out.into_iter().map(|m| (m, std::time::Duration::ZERO)).collect();
            self.publish(&now).await?;
        }
        if let HandOutcome::Done(_) = &outcome {
            tracing::info!(
                alert_id,
                project_id,
                by = %klaxon_core::text::one_line(by, MAX_BY_CHARS),
                state = action.done(),
                "alert changed by hand"
            );
        }
        Ok(outcome)
    }
}

fn not_found(project_id: &str, alert_id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no alert `{}` in project {project_id}",
            klaxon_core::text::one_line(alert_id, 48)
        ),
    )
}

/// `GET /api/v1/projects/{id}/alerts?state=&limit=` → `{"alerts": [AlertView…]}`, newest first.
pub(crate) async fn list(
    State(api): State<Api>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let state = match pairs.iter().find(|(k, _)| k == "state") {
        Some((_, s)) if !s.is_empty() => Some(parse_state(s).map_err(ApiError::bad_request)?),
        _ => None,
    };
    let limit = limit_of(&pairs, DEFAULT_LIST_LIMIT, DEFAULT_MAX_ALERTS_PER_PROJECT)?;
    api.known_project(&project_id).await?;
    let alerts = api.list_alerts(&project_id, state, limit).await?;
    Ok(json_response(StatusCode::OK, &list_json(&alerts)))
}

async fn change(
    api: Api,
    project_id: String,
    alert_id: String,
    body: Result<Bytes, BytesRejection>,
    action: HandAction,
) -> Result<Response, ApiError> {
    let body = body_of(body)?;
    let by = by_from_body(&body, API_BY).map_err(ApiError::bad_request)?;
    let alert = api.change_alert(&project_id, &alert_id, action, &by).await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::to_value(alert.view()).unwrap_or(Value::Null),
    ))
}

/// `POST /api/v1/projects/{id}/alerts/{alertId}/ack` (`{"by"?}`) → 200 AlertView.
pub(crate) async fn ack(
    State(api): State<Api>,
    Path((project_id, alert_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    change(api, project_id, alert_id, body, HandAction::Acknowledge).await
}

/// `POST /api/v1/projects/{id}/alerts/{alertId}/resolve` (`{"by"?}`) → 200 AlertView.
pub(crate) async fn resolve(
    State(api): State<Api>,
    Path((project_id, alert_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    change(api, project_id, alert_id, body, HandAction::Resolve).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;
    use klaxon_core::alert::{alert_id, AlertChannel};
    use klaxon_core::ChannelKind;

    fn alert(state: AlertState) -> Alert {
        Alert {
            id: alert_id("p", "r", "g", "1"),
            project_id: "5e3eef0679fa3700a0198a49".into(),
            project_name: None,
            rule_id: "r".into(),
            group: "g".into(),
            title: "T".into(),
            state,
            firing: "1".into(),
            fired_at_ms: 1_000,
            acknowledged_at_ms: Some(2_000),
            acknowledged_by: Some("ana".into()),
            resolved_at_ms: (state == AlertState::Resolved).then_some(3_000),
            resolved_by: (state == AlertState::Resolved).then(|| "bob".to_owned()),
            events: 2,
            last_event_at_ms: 1_500,
            resolve_after_ms: 0,
            channels: vec![
                AlertChannel::of_rule(ChannelKind::Webhook, "https://example.com/h", None),
                AlertChannel::of_rule(ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE", None),
            ],
            heard: Vec::new(),
            closes: Vec::new(),
        }
    }

    #[test]
    fn outcomes_say_what_happened_and_what_to_publish() {
        use HandAction::*;
        let id = "a".repeat(24);
        // (action, the counter's answer, conflict text or None for done/not found, tasks published)
        let cases: Vec<(HandAction, Change, Option<&str>, usize)> = vec![
            (
                Acknowledge,
                Change::Done(alert(AlertState::Acknowledged)),
                None,
                2,
            ),
            (Resolve, Change::Done(alert(AlertState::Resolved)), None, 2),
            (
                Acknowledge,
                Change::AlreadyAcknowledged(alert(AlertState::Acknowledged)),
                Some("is already acknowledged by ana at 1970-01-01T00:00:02Z"),
                2,
            ),
            (
                Acknowledge,
                Change::AlreadyResolved(alert(AlertState::Resolved)),
                Some("is resolved by bob at 1970-01-01T00:00:03Z: there is nothing to acknowledge"),
                0,
            ),
            (
                Resolve,
                Change::AlreadyResolved(alert(AlertState::Resolved)),
                Some("is already resolved by bob"),
                2,
            ),
            (Resolve, Change::NotFound, None, 0),
            // resolved by Klaxon itself: its own loop delivered (or digested) the messages
            (
                Resolve,
                Change::AlreadyResolved(Alert {
                    resolved_by: Some("timeout".into()),
                    ..alert(AlertState::Resolved)
                }),
                Some("is already resolved by timeout"),
                0,
            ),
        ];
        for (action, change, conflict, n) in cases {
            let o = outcome(action, &id, change.clone());
            match (&o, conflict) {
                (HandOutcome::Conflict { message, .. }, Some(want)) => {
                    assert!(message.contains(want), "{message}")
                }
                (HandOutcome::Done(_) | HandOutcome::NotFound, None) => {}
                other => panic!("{action:?} {change:?}: {other:?}"),
            }
            let tasks = o.tasks(action);
            assert_eq!(tasks.len(), n, "{action:?} {change:?}");
            for t in &tasks {
                assert_eq!(t.reason, action.reason());
            }
        }
    }

    /// A hand acknowledge or resolve reaches the alert's whole audience (an escalation step's routing key, a
    /// digest's shared incident), not only the rule's channels: `lifecycle_tasks` decides who.
    #[test]
    fn hand_changes_reach_the_whole_audience() {
        let heard = |first: &str, shared: bool| AlertChannel {
            first_id: Some(first.into()),
            shared,
            ..AlertChannel::of_rule(ChannelKind::Pagerduty, "Q2ndL1neR0ut1ngKey0123456789abcd", None)
        };
        let with_audience = |state| Alert {
            heard: vec![heard("step1", false), heard("digest1", true)],
            ..alert(state)
        };
        let keys = |tasks: Vec<NotificationTask>| -> Vec<String> {
            tasks
                .into_iter()
                .map(|t| t.alert.expect("a ref").firing_notification_id)
                .filter(|k| k.len() < 10)
                .collect()
        };
        let acked = outcome(
            HandAction::Acknowledge,
            "x",
            Change::Done(with_audience(AlertState::Acknowledged)),
        );
        let tasks = acked.tasks(HandAction::Acknowledge);
        assert_eq!(
            tasks.len(),
            4,
            "webhook, PagerDuty, the step's key, the digest's incident"
        );
        assert_eq!(keys(tasks), ["step1", "digest1"]);
        let resolved = outcome(
            HandAction::Resolve,
            "x",
            Change::Done(with_audience(AlertState::Resolved)),
        );
        assert_eq!(
            keys(resolved.tasks(HandAction::Resolve)),
            ["step1"],
            "the digest lists other open alerts"
        );
        let last = Alert {
            closes: vec!["digest1".into()],
            ..with_audience(AlertState::Resolved)
        };
        let resolved = outcome(HandAction::Resolve, "x", Change::Done(last));
        assert_eq!(
            keys(resolved.tasks(HandAction::Resolve)),
            ["step1", "digest1"],
            "the last listed alert"
        );
    }

    #[test]
    fn replays_publish_the_same_notification_ids() {
        let done = outcome(
            HandAction::Resolve,
            "x",
            Change::Done(alert(AlertState::Resolved)),
        );
        let again = outcome(
            HandAction::Resolve,
            "x",
            Change::AlreadyResolved(alert(AlertState::Resolved)),
        );
        let ids = |o: &HandOutcome| {
            o.tasks(HandAction::Resolve)
                .into_iter()
                .map(|t| t.notification_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&done), ids(&again));
    }

    #[test]
    fn each_output_publishes_or_not() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let tasks = outcome(
            HandAction::Resolve,
            "x",
            Change::Done(alert(AlertState::Resolved)),
        )
        .tasks(HandAction::Resolve);
        let off = Trail::disabled();
        let m = messages(&topology, Output::Klaxon, &off, &tasks);
        assert_eq!(
            m.iter().map(|m| m.queue.as_str()).collect::<Vec<_>>(),
            ["ns.notify.webhook", "ns.notify.pagerduty"]
        );
        assert_eq!(
            m[0].message_id.as_deref(),
            Some(tasks[0].notification_id.as_str())
        );
        assert!(messages(&topology, Output::Hawk, &off, &tasks).is_empty());
        assert!(messages(&topology, Output::Shadow, &off, &tasks).is_empty());
    }

    #[test]
    fn bodies_and_states() {
        assert_eq!(by_from_body(b"", "api").as_deref(), Ok("api"));
        assert_eq!(by_from_body(b"{}", "api").as_deref(), Ok("api"));
        assert_eq!(by_from_body(br#"{"by": " ana "}"#, "api").as_deref(), Ok("ana"));
        for bad in [
            &br#"{"by": ""}"#[..],
            br#"{"by": 3}"#,
            br#"[1]"#,
            b"nope",
            br#"{"by": "a\nb"}"#,
        ] {
            assert!(
                by_from_body(bad, "api").is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!(r#"{{"by": "{}"}}"#, "x".repeat(MAX_BY_CHARS + 1));
        assert!(by_from_body(long.as_bytes(), "api").is_err());
        assert_eq!(parse_state("resolved"), Ok(AlertState::Resolved));
        let e = parse_state("open").expect_err("open");
        assert!(e.contains("firing, acknowledged, resolved"), "{e}");
    }
}
