//! Alerts: what a firing opens for its (rule, group), and its life: `firing` → optionally `acknowledged` →
//! `resolved` (the contract's "Alert lifecycle"). A later firing of a resolved alert opens a new alert.
//!
//! Everything here is pure: the alert as stored and shown ([`Alert`], [`AlertView`] for the API), its id
//! ([`alert_id`], deterministic from the firing that opened it, so every worker and every redelivery names the
//! same alert), the reference a notification task carries ([`AlertRef`]) and the tasks of a lifecycle message
//! ([`NotificationTask::for_alert`]: resolved, acknowledged, reminder, escalation). The state lives in Redis
//! (`klaxon-counter`'s `alerts` module), the timers in RabbitMQ's delay engine (`klaxon-engine`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::field::Field;
use crate::kind::WhatToReceive;
use crate::notification::{notification_id, rfc3339_ms, NotificationEvent, NotificationTask, Reason};
use crate::problem::RuleProblem;
use crate::rule::{ChannelKind, Severity};

/// The shortest and longest `resolveAfter` (1 s … 90 days), ms; `0` means never.
pub const RESOLVE_AFTER_RANGE_MS: (u64, u64) = (1_000, 90 * 24 * 3_600_000);

/// The most alerts a project keeps (open and resolved, newest first): past it the oldest resolved ones are
/// forgotten, and when every one of them is open no new alert opens (the firing is still delivered).
pub const DEFAULT_MAX_ALERTS_PER_PROJECT: usize = 1_000;

/// How long a resolved alert is kept for its history, ms (7 days).
pub const RESOLVED_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// How long an open alert without events lives when nothing resolves it (`resolveAfter: 0` and nobody resolves
/// it by hand), ms after its last event (30 days): every key expires.
pub const OPEN_RETENTION_MS: i64 = 30 * 24 * 3_600_000;

/// `resolveAfter` when a rule leaves it out: its window (`thresholdPeriod`) for SEEN_MORE and SPIKE, never (0)
/// for ONLY_NEW and REAPPEARED, whose alerts are resolved by hand.
pub fn default_resolve_after_ms(what: &WhatToReceive) -> u64 {
    match what {
        WhatToReceive::SeenMore { period_ms, .. } => *period_ms,
        WhatToReceive::Spike(spike) => spike.period_ms,
        _ => 0,
    }
}

/// Reads a rule's `resolveAfter` (ms, 1 s … 90 days, or 0 for never; the kind's default when left out);
/// `fatal` makes the problem.
pub fn read_resolve_after(
    field: &Field<u64>,
    what: &WhatToReceive,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<u64, RuleProblem> {
    let (min, max) = RESOLVE_AFTER_RANGE_MS;
    match field.whole() {
        _ if field.is_unset() => Ok(default_resolve_after_ms(what)),
        Some(0) => Ok(0),
        Some(ms) if (min..=max).contains(&ms) => Ok(ms),
        _ => Err(fatal(
            format!(
                "`resolveAfter` must be 0 (never) or milliseconds between {min} and {max} (1 s … 90 days), got {}",
                field.to_json()
            ),
            "set `resolveAfter` in milliseconds, e.g. 3600000 to resolve an alert after an hour without events, 0 \
             to resolve it only by hand, or leave it out for the rule's window",
        )),
    }
}

/// Where an alert is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    /// Opened by a firing, nobody reacted yet.
    Firing,
    /// Someone said "I'm on it": reminders and escalation stop; it still resolves.
    Acknowledged,
    /// Over: by `resolveAfter` without events, or by hand. A later firing opens a new alert.
    Resolved,
}

impl AlertState {
    /// Every state, in life order.
    pub const ALL: [AlertState; 3] = [AlertState::Firing, AlertState::Acknowledged, AlertState::Resolved];

    /// The state's name (`firing`, `acknowledged`, `resolved`).
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Acknowledged => "acknowledged",
            AlertState::Resolved => "resolved",
        }
    }

    /// Parses a state name; `None` for anything else.
    pub fn parse(s: &str) -> Option<AlertState> {
        AlertState::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Not resolved yet.
    pub fn is_open(self) -> bool {
        self != AlertState::Resolved
    }
}

impl std::fmt::Display for AlertState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One channel that delivered an alert's firing: where its lifecycle messages go. No `Debug`: the endpoint can
/// be a secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertChannel {
    /// The channel.
    pub channel: ChannelKind,
    /// Its endpoint (URL, chat id, addresses, routing key).
    pub endpoint: String,
    /// PagerDuty's severity, when the rule set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
}

impl std::fmt::Debug for AlertChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertChannel")
            .field("channel", &self.channel)
            .field("endpoint", &"<redacted>")
            .finish()
    }
}

/// An alert as stored (one Redis hash per alert; see `klaxon-counter`'s `alerts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    /// Its id ([`alert_id`]).
    pub id: String,
    /// The project.
    pub project_id: String,
    /// The project's display name when the firing knew one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_name: Option<String>,
    /// The rule that fired.
    pub rule_id: String,
    /// The group (for `NO_EVENTS`: empty, the alert is the project's).
    pub group: String,
    /// The group's title at the firing.
    pub title: String,
    /// Where it is in its life.
    pub state: AlertState,
    /// The firing token of the firing that opened it (its channels' first notification ids derive from it).
    pub firing: String,
    /// When it opened, unix ms (Redis clock).
    pub fired_at_ms: i64,
    /// When it was acknowledged, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at_ms: Option<i64>,
    /// Who acknowledged it (the API token's label, `cli`, `console`, `link`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_by: Option<String>,
    /// When it resolved, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at_ms: Option<i64>,
    /// What resolved it: `timeout` (`resolveAfter`), `event` (`NO_EVENTS`: the project's next event), or who
    /// resolved it by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// Events of its group that matched the rule while it was open (the firing count included).
    pub events: u64,
    /// The last of them, unix ms.
    pub last_event_at_ms: i64,
    /// The rule's `resolveAfter` when it opened, ms (0: never by itself).
    pub resolve_after_ms: u64,
    /// The channels that delivered its firing, in the rule's order.
    pub channels: Vec<AlertChannel>,
}

impl Alert {
    /// How long it was (or has been, at `now_ms`) open, ms.
    pub fn open_for_ms(&self, now_ms: i64) -> i64 {
        (self.resolved_at_ms.unwrap_or(now_ms) - self.fired_at_ms).max(0)
    }

    /// When `resolveAfter` resolves it, unix ms, if it is open and has one.
    pub fn resolves_at_ms(&self) -> Option<i64> {
        (self.state.is_open() && self.resolve_after_ms > 0)
            .then(|| self.last_event_at_ms.saturating_add(self.resolve_after_ms as i64))
    }

    /// The notification id of its first firing on `channel`: what PagerDuty's `dedup_key` and the email's
    /// `Message-ID` of that firing were made from.
    pub fn firing_notification_id(&self, channel: ChannelKind) -> String {
        notification_id(
            &self.project_id,
            &self.rule_id,
            &self.group,
            &self.firing,
            channel,
        )
    }

    /// The alert as the API and `klaxon alerts list -o json` show it.
    pub fn view(&self) -> AlertView {
        AlertView {
            id: self.id.clone(),
            rule_id: self.rule_id.clone(),
            group: self.group.clone(),
            title: self.title.clone(),
            state: self.state,
            fired_at: rfc3339_ms(self.fired_at_ms),
            acknowledged_at: self.acknowledged_at_ms.map(rfc3339_ms),
            acknowledged_by: self.acknowledged_by.clone(),
            resolved_at: self.resolved_at_ms.map(rfc3339_ms),
            resolved_by: self.resolved_by.clone(),
            events: self.events,
        }
    }

    /// The reference its lifecycle tasks carry, for `channel`.
    pub fn reference(&self, channel: ChannelKind) -> AlertRef {
        AlertRef {
            id: self.id.clone(),
            state: self.state,
            opened_at_ms: self.fired_at_ms,
            events: self.events,
            by: match self.state {
                AlertState::Firing => None,
                AlertState::Acknowledged => self.acknowledged_by.clone(),
                AlertState::Resolved => self.resolved_by.clone(),
            },
            firing_notification_id: self.firing_notification_id(channel),
        }
    }
}

/// An alert in the API (`GET /api/v1/projects/{projectId}/alerts`): times in RFC 3339 (UTC), `null` when not
/// reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertView {
    /// The alert id.
    pub id: String,
    /// The rule.
    pub rule_id: String,
    /// The group.
    pub group: String,
    /// The group's title.
    pub title: String,
    /// `firing`, `acknowledged` or `resolved`.
    pub state: AlertState,
    /// When it opened.
    pub fired_at: String,
    /// When it was acknowledged.
    pub acknowledged_at: Option<String>,
    /// Who acknowledged it.
    pub acknowledged_by: Option<String>,
    /// When it resolved.
    pub resolved_at: Option<String>,
    /// What or who resolved it.
    pub resolved_by: Option<String>,
    /// Events while it was open.
    pub events: u64,
}

/// What a notification task of an alert carries (`"alert"` in the task JSON): firings name the alert they
/// opened or repeat, lifecycle messages (resolved, acknowledged, reminders, escalations) the alert they are about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertRef {
    /// The alert id.
    pub id: String,
    /// Its state when the task was made.
    pub state: AlertState,
    /// When it opened, unix ms.
    pub opened_at_ms: i64,
    /// Its events so far.
    pub events: u64,
    /// Who acknowledged or what resolved it, for those messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The notification id of its first firing on this task's channel: PagerDuty's `dedup_key` for resolve and
    /// acknowledge, the `Message-ID` a resolved email replies to.
    pub firing_notification_id: String,
}

impl AlertRef {
    /// The reference a firing task carries: the alert it opened (or repeats) as it is now.
    pub fn of_firing(alert: &Alert, channel: ChannelKind) -> AlertRef {
        alert.reference(channel)
    }
}

/// The deterministic id of the alert a firing opens: the same firing (same `firing` token) names the same alert
/// on every worker and every redelivery. 24 hex characters.
pub fn alert_id(project_id: &str, rule_id: &str, group: &str, firing: &str) -> String {
    let mut h = Sha256::new();
    for part in ["klaxon/alert/v1", project_id, rule_id, group, firing] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..12])
}

/// True for a well-formed alert id (24 lowercase hex characters): anything else is refused before Redis.
pub fn is_alert_id(s: &str) -> bool {
    s.len() == 24 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl NotificationTask {
    /// The task of one lifecycle message of `alert` on one of its channels: `reason` is [`Reason::Resolved`],
    /// [`Reason::Acknowledged`], [`Reason::Reminder`] or [`Reason::Escalation`]; `at_ms` when it happened. The
    /// id depends only on (alert, what, channel): the same resolve, ack, reminder `n` or escalation step gives the
    /// same id on every worker and every redelivery, so senders deliver it once.
    pub fn for_alert(alert: &Alert, channel: &AlertChannel, reason: Reason, at_ms: i64) -> NotificationTask {
        let what = match reason {
            Reason::Resolved => "resolved".to_owned(),
            Reason::Acknowledged => "acknowledged".to_owned(),
            Reason::Reminder { number, .. } => format!("reminder:{number}"),
            Reason::Escalation { step, .. } => format!("escalation:{step}"),
            other => format!("{other:?}"),
        };
        NotificationTask {
            notification_id: notification_id(
                &alert.project_id,
                &alert.rule_id,
                &alert.group,
                &format!("alert:{}:{what}", alert.id),
                channel.channel,
            ),
            project_id: alert.project_id.clone(),
            project_name: alert.project_name.clone(),
            rule_id: alert.rule_id.clone(),
            channel: channel.channel,
            endpoint: channel.endpoint.clone(),
            min_period_s: 0,
            fired_at_ms: at_ms,
            reason,
            events: vec![NotificationEvent {
                group_hash: alert.group.clone(),
                title: alert.title.clone(),
                count: alert.events,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            text: None,
            send_at_ms: None,
            severity: channel.severity,
            alert: Some(alert.reference(channel.channel)),
        }
    }
}

/// The tasks of one lifecycle message of `alert` (resolved, acknowledged, a reminder): one per channel that
/// delivered its firing, in the rule's order. The engine sends them at once, except a resolve on a channel with
/// `minPeriod > 0` (not PagerDuty), which goes through the channel's digest like a firing, and what a quiet window
/// holds (`klaxon_engine`'s `digest` and `quiet`).
pub fn lifecycle_tasks(alert: &Alert, reason: Reason, at_ms: i64) -> Vec<NotificationTask> {
    alert
        .channels
        .iter()
        .map(|ch| NotificationTask::for_alert(alert, ch, reason, at_ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert() -> Alert {
        Alert {
            id: alert_id("p", "r", "g", "1000"),
            project_id: "p".into(),
            project_name: Some("Shop".into()),
            rule_id: "r".into(),
            group: "g".into(),
            title: "TypeError".into(),
            state: AlertState::Firing,
            firing: "1000".into(),
            fired_at_ms: 1_000,
            acknowledged_at_ms: None,
            acknowledged_by: None,
            resolved_at_ms: None,
            resolved_by: None,
            events: 3,
            last_event_at_ms: 5_000,
            resolve_after_ms: 60_000,
            channels: vec![AlertChannel {
                channel: ChannelKind::Webhook,
                endpoint: "https://example.com/h".into(),
                severity: None,
            }],
        }
    }

    #[test]
    fn an_alert_id_is_the_same_for_the_same_firing_and_differs_otherwise() {
        let a = alert_id("p", "r", "g", "1000");
        assert_eq!(a, alert_id("p", "r", "g", "1000"));
        assert_ne!(a, alert_id("p", "r", "g", "2000"));
        assert_ne!(a, alert_id("p", "r", "h", "1000"));
        assert!(is_alert_id(&a), "{a}");
        assert!(!is_alert_id("../etc/passwd"));
        assert!(!is_alert_id(&a.to_uppercase()));
    }

    #[test]
    fn resolves_at_is_the_last_event_plus_resolve_after_while_open() {
        let mut a = alert();
        assert_eq!(a.resolves_at_ms(), Some(65_000));
        a.resolve_after_ms = 0;
        assert_eq!(a.resolves_at_ms(), None);
        a.resolve_after_ms = 60_000;
        a.state = AlertState::Resolved;
        a.resolved_at_ms = Some(70_000);
        assert_eq!(a.resolves_at_ms(), None);
        assert_eq!(a.open_for_ms(0), 69_000);
    }

    #[test]
    fn lifecycle_tasks_have_one_id_per_alert_what_and_channel() {
        let a = alert();
        let ch = &a.channels[0];
        let r1 = NotificationTask::for_alert(&a, ch, Reason::Resolved, 9_000);
        let r2 = NotificationTask::for_alert(&a, ch, Reason::Resolved, 9_999);
        assert_eq!(r1.notification_id, r2.notification_id);
        let ack = NotificationTask::for_alert(&a, ch, Reason::Acknowledged, 9_000);
        assert_ne!(r1.notification_id, ack.notification_id);
        let rem1 = NotificationTask::for_alert(&a, ch, Reason::Reminder { number: 1, max: 3 }, 9_000);
        let rem2 = NotificationTask::for_alert(&a, ch, Reason::Reminder { number: 2, max: 3 }, 9_000);
        assert_ne!(rem1.notification_id, rem2.notification_id);
        assert_eq!(lifecycle_tasks(&a, Reason::Resolved, 9_000), vec![r1.clone()]);
        let r = r1.alert.as_ref().expect("an alert ref");
        assert_eq!(r.id, a.id);
        assert_eq!(
            r.firing_notification_id,
            notification_id("p", "r", "g", "1000", ChannelKind::Webhook)
        );
        // the task JSON carries the alert and the reason's type
        let json = serde_json::to_value(&r1).expect("json");
        assert_eq!(json["reason"]["type"], "resolved");
        assert_eq!(json["alert"]["id"], a.id.as_str());
        let back: NotificationTask = serde_json::from_value(json).expect("a task");
        assert_eq!(back, r1);
    }

    #[test]
    fn the_view_has_the_contract_fields() {
        let v = serde_json::to_value(alert().view()).expect("json");
        for k in [
            "id",
            "ruleId",
            "group",
            "title",
            "state",
            "firedAt",
            "acknowledgedAt",
            "resolvedAt",
            "events",
        ] {
            assert!(v.get(k).is_some(), "{k} in {v}");
        }
        assert_eq!(v["state"], "firing");
        assert_eq!(v["acknowledgedAt"], serde_json::Value::Null);
        assert_eq!(v["firedAt"], "1970-01-01T00:00:01Z");
    }
}
