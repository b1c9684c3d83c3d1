//! Alerts: what a firing opens for its (rule, group), and its life: `firing` → optionally `acknowledged` →
//! `resolved` (the contract's "Alert lifecycle"). A later firing of a resolved alert opens a new alert.
//!
//! Everything here is pure: the alert as stored and shown ([`Alert`], [`AlertView`] for the API), its id
//! ([`alert_id`], deterministic from the firing that opened it, so every worker and every redelivery names the
//! same alert), the reference a notification task carries ([`AlertRef`]) and the tasks of a lifecycle message
//! ([`NotificationTask::for_alert`]: resolved, acknowledged, reminder, escalation), and its audience: everyone
//! who heard of it ([`Alert::audience`]: the rule's channels, then an escalation step's new endpoints and the
//! digests and releases that listed it), whom its acknowledge and resolve reach ([`lifecycle_tasks`]) with the
//! first message's id each received ([`AlertChannel::first_id`]). The state lives in Redis
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

/// The most members an alert hears of after it opened ([`Alert::heard`]): past it a member is not recorded
/// (klaxon-counter's `Alerts::hear` answers so), and its acknowledge and resolve do not reach it.
pub const MAX_HEARD_MEMBERS: usize = 32;

/// One member of an alert's audience: a (channel, endpoint) that received a message about it, where its
/// acknowledge and resolve go. The rule's channels at the firing have no `first_id`; an escalation step to a new
/// endpoint, a digest or a quiet-hours release that listed the alert add members with one ([`Alert::heard`]).
/// No `Debug` of the endpoint: it can be a secret.
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
    /// The notification id of the first message this (channel, endpoint) received about the alert when that
    /// message was not the alert's firing on the rule's channel: PagerDuty acknowledges and resolves with it as
    /// `dedup_key`, an email replies to it. `None`: the firing's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_id: Option<String>,
    /// That first message listed several alerts (a digest or a quiet-hours release on PagerDuty): its incident is
    /// acknowledged when any listed alert is, and resolved only when the last listed alert resolves
    /// ([`Alert::closes`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

impl AlertChannel {
    /// A rule's channel as the firing delivered it (no `first_id`, not shared).
    pub fn of_rule(channel: ChannelKind, endpoint: &str, severity: Option<Severity>) -> AlertChannel {
        AlertChannel {
            channel,
            endpoint: endpoint.to_owned(),
            severity,
            first_id: None,
            shared: false,
        }
    }

    /// What makes the member one in an audience, as a short key: `s:<first_id>` for a shared member (one per
    /// incident), `<channel>:<16 hex of the endpoint's SHA-256>` otherwise (one per (channel, endpoint)).
    /// klaxon-counter names the member's field in the alert's hash after it (`m:<key>`); no endpoint (it can be
    /// a secret) is ever part of a key.
    pub fn member_key(&self) -> String {
        match (&self.first_id, self.shared) {
            (Some(first), true) => format!("s:{first}"),
            _ => {
                let digest = Sha256::digest(self.endpoint.as_bytes());
                format!("{}:{}", self.channel.as_str(), hex::encode(&digest[..8]))
            }
        }
    }

    fn same_place(&self, other: &AlertChannel) -> bool {
        self.channel == other.channel && self.endpoint == other.endpoint
    }
}

impl std::fmt::Debug for AlertChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertChannel")
            .field("channel", &self.channel)
            .field("endpoint", &"<redacted>")
            .field("first_id", &self.first_id)
            .field("shared", &self.shared)
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
    /// Members that heard of it after it opened (an escalation step's new endpoints, a digest or a quiet-hours
    /// release that listed it), at most [`MAX_HEARD_MEMBERS`]: with `channels`, its [`Alert::audience`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heard: Vec<AlertChannel>,
    /// The `first_id`s of shared incidents whose last open alert was this one (its resolve found them with no
    /// other open alert): its resolve reaches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closes: Vec<String>,
}

/// Where a member of an alert's audience comes from: its lifecycle messages' ids and keys depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// One of the rule's channels at the firing (`Alert::channels`).
    Rule,
    /// Heard of it later, on its own (an escalation step's new endpoint).
    Heard,
    /// Heard of it in a message that listed several alerts (a digest or release on PagerDuty).
    Shared,
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

    /// Everyone who heard of it: the rule's channels at the firing, then [`Alert::heard`]. A member that is not
    /// shared is there once per (channel, endpoint), the first one wins (an escalation step to the rule's own
    /// Slack channel adds nobody); a shared member once per incident (`first_id`).
    pub fn audience(&self) -> Vec<&AlertChannel> {
        self.members().into_iter().map(|(_, m)| m).collect()
    }

    /// The audience with where each member comes from.
    fn members(&self) -> Vec<(Origin, &AlertChannel)> {
        let mut out: Vec<(Origin, &AlertChannel)> =
            Vec::with_capacity(self.channels.len() + self.heard.len());
        let rule = self.channels.iter().map(|m| (Origin::Rule, m));
        let heard = self.heard.iter().map(|m| match (m.shared, &m.first_id) {
            (true, Some(_)) => (Origin::Shared, m),
            _ => (Origin::Heard, m),
        });
        for (origin, m) in rule.chain(heard) {
            let known = out.iter().any(|(o, k)| match origin {
                Origin::Shared => *o == Origin::Shared && k.first_id == m.first_id,
                Origin::Rule | Origin::Heard => *o != Origin::Shared && k.same_place(m),
            });
            if !known {
                out.push((origin, m));
            }
        }
        out
    }

    /// The member of its audience on (channel, endpoint) that is not shared, if one is.
    pub fn member(&self, channel: ChannelKind, endpoint: &str) -> Option<&AlertChannel> {
        self.members()
            .into_iter()
            .find(|(o, m)| *o != Origin::Shared && m.channel == channel && m.endpoint == endpoint)
            .map(|(_, m)| m)
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

    /// The reference its lifecycle tasks carry, for the rule's `channel`.
    pub fn reference(&self, channel: ChannelKind) -> AlertRef {
        self.reference_with(self.firing_notification_id(channel))
    }

    /// The reference a task to `member` carries: the member's `first_id` as the first message's id when it has
    /// one (PagerDuty's `dedup_key`, the email it replies to), else the firing's on its channel.
    pub fn reference_for(&self, member: &AlertChannel) -> AlertRef {
        match &member.first_id {
            Some(first) => self.reference_with(first.clone()),
            None => self.reference(member.channel),
        }
    }

    fn reference_with(&self, firing_notification_id: String) -> AlertRef {
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
            firing_notification_id,
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

/// What a lifecycle message is, in its notification id: `resolved`, `acknowledged`, `reminder:<n>`,
/// `escalation:<step>`.
fn what(reason: Reason) -> String {
    match reason {
        Reason::Resolved => "resolved".to_owned(),
        Reason::Acknowledged => "acknowledged".to_owned(),
        Reason::Reminder { number, .. } => format!("reminder:{number}"),
        Reason::Escalation { step, .. } => format!("escalation:{step}"),
        other => format!("{other:?}"),
    }
}

impl NotificationTask {
    /// The task of one lifecycle message of `alert` on one of its channels: `reason` is [`Reason::Resolved`],
    /// [`Reason::Acknowledged`], [`Reason::Reminder`] or [`Reason::Escalation`]; `at_ms` when it happened. The
    /// id depends only on (alert, what, channel): the same resolve, ack, reminder `n` or escalation step gives the
    /// same id on every worker and every redelivery, so senders deliver it once. The task's
    /// `alert.firingNotificationId` is `channel.first_id` when it has one, else the firing's on its channel.
    pub fn for_alert(alert: &Alert, channel: &AlertChannel, reason: Reason, at_ms: i64) -> NotificationTask {
        let id = notification_id(
            &alert.project_id,
            &alert.rule_id,
            &alert.group,
            &format!("alert:{}:{}", alert.id, what(reason)),
            channel.channel,
        );
        NotificationTask::of_member(alert, channel, reason, at_ms, id, alert.reference_for(channel))
    }

    /// The task of an escalation step (or another message about `alert` to a (channel, endpoint) the rule may not
    /// have): the same id as [`NotificationTask::for_alert`]. When the (channel, endpoint) is already in the
    /// alert's audience the message lands on that member's incident or thread (its `first_id`, or the firing's);
    /// when it is new, the message is its first: `first_id` is the task's own notification id (PagerDuty
    /// triggers a new incident with it, an email starts its own thread), and the member to record with the alert
    /// (klaxon-counter's `Alerts::hear`) comes back beside the task.
    pub fn for_alert_member(
        alert: &Alert,
        channel: &AlertChannel,
        reason: Reason,
        at_ms: i64,
    ) -> (NotificationTask, Option<AlertChannel>) {
        if let Some(member) = alert.member(channel.channel, &channel.endpoint) {
            let member = AlertChannel {
                severity: channel.severity,
                ..member.clone()
            };
            return (NotificationTask::for_alert(alert, &member, reason, at_ms), None);
        }
        let mut task = NotificationTask::for_alert(alert, channel, reason, at_ms);
        let member = AlertChannel {
            first_id: Some(task.notification_id.clone()),
            shared: false,
            ..channel.clone()
        };
        task.alert = Some(alert.reference_for(&member));
        (task, Some(member))
    }

    /// The resolve of a shared incident (a digest's or a quiet release's message on PagerDuty, `release`) none of
    /// whose listed alerts is open any more when it is sent: nothing would ever close it. The same id as the
    /// resolve its last listed alert would have sent (`incident:<first_id>:resolved`), so it is delivered once
    /// either way; PagerDuty reads only its routing key and `dedup_key` (the release's own id).
    pub fn for_closed_incident(release: &NotificationTask, at_ms: i64) -> NotificationTask {
        let first = &release.notification_id;
        NotificationTask {
            notification_id: notification_id(
                &release.project_id,
                &release.rule_id,
                "",
                &format!("incident:{first}:{}", what(Reason::Resolved)),
                release.channel,
            ),
            project_id: release.project_id.clone(),
            project_name: release.project_name.clone(),
            rule_id: release.rule_id.clone(),
            channel: release.channel,
            endpoint: release.endpoint.clone(),
            min_period_s: 0,
            fired_at_ms: at_ms,
            reason: Reason::Resolved,
            events: release.events.iter().take(1).cloned().collect(),
            text: None,
            send_at_ms: None,
            severity: release.severity,
            alert: Some(AlertRef {
                id: String::new(),
                state: AlertState::Resolved,
                opened_at_ms: release.fired_at_ms,
                events: 0,
                by: None,
                firing_notification_id: first.clone(),
            }),
        }
    }

    fn of_member(
        alert: &Alert,
        member: &AlertChannel,
        reason: Reason,
        at_ms: i64,
        notification_id: String,
        reference: AlertRef,
    ) -> NotificationTask {
        NotificationTask {
            notification_id,
            project_id: alert.project_id.clone(),
            project_name: alert.project_name.clone(),
            rule_id: alert.rule_id.clone(),
            channel: member.channel,
            endpoint: member.endpoint.clone(),
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
            severity: member.severity,
            alert: Some(reference),
        }
    }

    /// The task of a lifecycle message to one member of the alert's audience, by where the member comes from:
    /// the rule's channels keep [`NotificationTask::for_alert`]'s ids; a heard member's id adds its `first_id`
    /// (two Slack endpoints of one alert are two messages); a shared member's id names the incident, not the
    /// alert (one acknowledge or resolve per incident, whichever listed alert sends it).
    fn for_audience(
        alert: &Alert,
        origin: Origin,
        member: &AlertChannel,
        reason: Reason,
        at_ms: i64,
    ) -> NotificationTask {
        let first = member.first_id.as_deref().unwrap_or_default();
        let id = match origin {
            Origin::Rule => return NotificationTask::for_alert(alert, member, reason, at_ms),
            Origin::Heard => notification_id(
                &alert.project_id,
                &alert.rule_id,
                &alert.group,
                &format!("alert:{}:{}:{first}", alert.id, what(reason)),
                member.channel,
            ),
            Origin::Shared => notification_id(
                &alert.project_id,
                &alert.rule_id,
                "",
                &format!("incident:{first}:{}", what(reason)),
                member.channel,
            ),
        };
        NotificationTask::of_member(alert, member, reason, at_ms, id, alert.reference_for(member))
    }
}

/// The tasks of one lifecycle message of `alert`: acknowledged reaches its whole [`Alert::audience`] (shared
/// incidents too: any listed alert's acknowledge acknowledges them); resolved every member that is not shared,
/// and the shared incidents it [`Alert::closes`] (the last of their listed alerts to resolve); a reminder (and
/// anything else) the rule's channels only, in the rule's order. One task per member, with the ids of
/// [`NotificationTask::for_alert`] for the rule's channels. The engine sends them at once, except a resolve on
/// a channel with `minPeriod > 0` (not PagerDuty), which goes through the channel's digest like a firing, and
/// what a quiet window holds (`klaxon_engine`'s `digest` and `quiet`).
pub fn lifecycle_tasks(alert: &Alert, reason: Reason, at_ms: i64) -> Vec<NotificationTask> {
    alert
        .members()
        .into_iter()
        .filter(|(origin, member)| match (reason, origin) {
            (_, Origin::Rule) => true,
            (Reason::Acknowledged, _) => true,
            (Reason::Resolved, Origin::Heard) => true,
            (Reason::Resolved, Origin::Shared) => member
                .first_id
                .as_ref()
                .is_some_and(|first| alert.closes.contains(first)),
            _ => false,
        })
        .map(|(origin, member)| NotificationTask::for_audience(alert, origin, member, reason, at_ms))
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
            channels: vec![AlertChannel::of_rule(
                ChannelKind::Webhook,
                "https://example.com/h",
                None,
            )],
            heard: Vec::new(),
            closes: Vec::new(),
        }
    }

    fn heard(channel: ChannelKind, endpoint: &str, first_id: &str, shared: bool) -> AlertChannel {
        AlertChannel {
            first_id: Some(first_id.into()),
            shared,
            ..AlertChannel::of_rule(channel, endpoint, None)
        }
    }

    /// An alert of a rule with Slack A and PagerDuty R, which heard of: Slack A again (a step to the rule's own
    /// channel), Slack B (a step), PagerDuty R on its own (a step to the rule's routing key: the same place),
    /// PagerDuty R in digest incident `d1` twice, and in release incident `q2`.
    fn audience_alert() -> Alert {
        let mut a = alert();
        a.channels = vec![
            AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/A", None),
            AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", Some(Severity::Critical)),
        ];
        a.heard = vec![
            heard(
                ChannelKind::Slack,
                "https://hooks.slack.test/A",
                "step1slack",
                false,
            ),
            heard(
                ChannelKind::Slack,
                "https://hooks.slack.test/B",
                "step1slackb",
                false,
            ),
            heard(ChannelKind::Pagerduty, "R0UTINGKEY", "step2pd", false),
            heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true),
            heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true),
            heard(ChannelKind::Pagerduty, "R0UTINGKEY", "q2", true),
        ];
        a
    }

    #[test]
    fn a_closed_incidents_resolve_is_the_one_its_last_alert_would_have_sent() {
        let mut a = audience_alert();
        a.closes = vec!["d1".into()];
        let from_alert = lifecycle_tasks(&a, Reason::Resolved, 9_000)
            .into_iter()
            .find(|t| t.alert.as_ref().is_some_and(|r| r.firing_notification_id == "d1"))
            .expect("the incident's resolve");
        let release = NotificationTask {
            notification_id: "d1".into(),
            ..NotificationTask::for_alert(&a, &a.channels[1], Reason::Resolved, 1_000)
        };
        let closed = NotificationTask::for_closed_incident(&release, 9_500);
        assert_eq!(closed.notification_id, from_alert.notification_id);
        assert_eq!(
            (closed.channel, closed.endpoint.as_str(), closed.reason),
            (ChannelKind::Pagerduty, "R0UTINGKEY", Reason::Resolved)
        );
        let r = closed.alert.expect("a reference");
        assert_eq!(
            (r.firing_notification_id.as_str(), r.state),
            ("d1", AlertState::Resolved)
        );
    }

    /// (channel, endpoint, the first message's id the task refers to) of each task.
    fn places(tasks: &[NotificationTask]) -> Vec<(ChannelKind, String, String)> {
        tasks
            .iter()
            .map(|t| {
                let first = t
                    .alert
                    .as_ref()
                    .expect("an alert ref")
                    .firing_notification_id
                    .clone();
                (t.channel, t.endpoint.clone(), first)
            })
            .collect()
    }

    #[test]
    fn the_audience_is_the_rules_channels_then_who_heard_once_per_place_or_incident() {
        let a = audience_alert();
        let got: Vec<(ChannelKind, &str, Option<&str>, bool)> = a
            .audience()
            .into_iter()
            .map(|m| (m.channel, m.endpoint.as_str(), m.first_id.as_deref(), m.shared))
            .collect();
        assert_eq!(
            got,
            vec![
                (ChannelKind::Slack, "https://hooks.slack.test/A", None, false),
                (ChannelKind::Pagerduty, "R0UTINGKEY", None, false),
                (
                    ChannelKind::Slack,
                    "https://hooks.slack.test/B",
                    Some("step1slackb"),
                    false
                ),
                (ChannelKind::Pagerduty, "R0UTINGKEY", Some("d1"), true),
                (ChannelKind::Pagerduty, "R0UTINGKEY", Some("q2"), true),
            ]
        );
        assert_eq!(
            alert().audience().len(),
            1,
            "without anyone heard: the rule's channels"
        );
        // a shared member without its incident's id is a member of its own (channel, endpoint), not an incident
        let mut b = alert();
        b.heard = vec![AlertChannel {
            shared: true,
            ..AlertChannel::of_rule(ChannelKind::Pagerduty, "OTHERKEY", None)
        }];
        assert_eq!(b.audience().len(), 2);
    }

    #[test]
    fn lifecycle_tasks_reach_the_audience_by_what_they_are() {
        let fired = |ch| notification_id("p", "r", "g", "1000", ch);
        let slack_a = (
            ChannelKind::Slack,
            "https://hooks.slack.test/A".to_owned(),
            fired(ChannelKind::Slack),
        );
        let pd = (
            ChannelKind::Pagerduty,
            "R0UTINGKEY".to_owned(),
            fired(ChannelKind::Pagerduty),
        );
        let slack_b = (
            ChannelKind::Slack,
            "https://hooks.slack.test/B".to_owned(),
            "step1slackb".to_owned(),
        );
        let d1 = (ChannelKind::Pagerduty, "R0UTINGKEY".to_owned(), "d1".to_owned());
        let q2 = (ChannelKind::Pagerduty, "R0UTINGKEY".to_owned(), "q2".to_owned());
        let reminder = Reason::Reminder { number: 1, max: 3 };
        let escalation = Reason::Escalation { step: 1, steps: 2 };
        #[rustfmt::skip]
        let table: Vec<(&str, Reason, Vec<&str>, Vec<_>)> = vec![
            ("ack: everyone, shared incidents too", Reason::Acknowledged, vec![],
             vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone(), q2.clone()]),
            ("resolve, closing nothing shared", Reason::Resolved, vec![],
             vec![slack_a.clone(), pd.clone(), slack_b.clone()]),
            ("resolve, the last of d1's alerts", Reason::Resolved, vec!["d1"],
             vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone()]),
            ("resolve, the last of both", Reason::Resolved, vec!["q2", "d1"],
             vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone(), q2.clone()]),
            ("resolve closing an incident it never heard of", Reason::Resolved, vec!["zz"],
             vec![slack_a.clone(), pd.clone(), slack_b.clone()]),
            ("reminder: the rule's channels", reminder, vec!["d1"], vec![slack_a.clone(), pd.clone()]),
            ("escalation: the rule's channels", escalation, vec![], vec![slack_a.clone(), pd.clone()]),
        ];
        for (case, reason, closes, want) in table {
            let mut a = audience_alert();
            a.closes = closes.into_iter().map(str::to_owned).collect();
            let tasks = lifecycle_tasks(&a, reason, 9_000);
            assert_eq!(places(&tasks), want, "{case}");
            let ids: std::collections::BTreeSet<_> = tasks.iter().map(|t| &t.notification_id).collect();
            assert_eq!(ids.len(), tasks.len(), "{case}: one id per message");
            assert!(
                tasks.iter().all(|t| t.reason == reason && t.fired_at_ms == 9_000),
                "{case}"
            );
        }
    }

    #[test]
    fn lifecycle_ids_keep_the_rules_channels_and_name_heard_members_and_incidents() {
        let a = audience_alert();
        let tasks = lifecycle_tasks(&a, Reason::Acknowledged, 9_000);
        // the rule's channels: the ids they always had (golden files, exactly once)
        for (t, ch) in tasks.iter().zip(&a.channels) {
            assert_eq!(
                t.notification_id,
                NotificationTask::for_alert(&a, ch, Reason::Acknowledged, 0).notification_id
            );
        }
        assert_eq!(
            tasks[0].notification_id,
            notification_id(
                "p",
                "r",
                "g",
                &format!("alert:{}:acknowledged", a.id),
                ChannelKind::Slack
            )
        );
        // a heard member: its first message in the id; PagerDuty's severity from where it was heard
        assert_eq!(
            tasks[2].notification_id,
            notification_id(
                "p",
                "r",
                "g",
                &format!("alert:{}:acknowledged:step1slackb", a.id),
                ChannelKind::Slack
            )
        );
        assert_eq!(tasks[1].severity, Some(Severity::Critical));
        // a shared member: the incident's id, the same whichever alert of the rule sends it
        assert_eq!(
            tasks[3].notification_id,
            notification_id("p", "r", "", "incident:d1:acknowledged", ChannelKind::Pagerduty)
        );
        let mut other = audience_alert();
        other.id = alert_id("p", "r", "h", "2000");
        other.group = "h".into();
        other.closes = vec!["d1".into()];
        let theirs = lifecycle_tasks(&other, Reason::Resolved, 9_500);
        let mut ours = audience_alert();
        ours.closes = vec!["d1".into()];
        let mine = lifecycle_tasks(&ours, Reason::Resolved, 9_000);
        assert_eq!(
            theirs[3].notification_id, mine[3].notification_id,
            "one resolve per incident"
        );
        assert_ne!(
            theirs[0].notification_id, mine[0].notification_id,
            "one per alert on the rule's channels"
        );
        assert_ne!(
            mine[3].notification_id, tasks[3].notification_id,
            "its resolve is not its acknowledge"
        );
    }

    #[test]
    fn an_escalation_step_to_a_new_place_is_its_own_first_message() {
        let a = audience_alert();
        let step = Reason::Escalation { step: 2, steps: 2 };
        #[rustfmt::skip]
        let table: Vec<(&str, AlertChannel, Option<&str>)> = vec![
            // (case, the step's channel, the first message it lands on: None = its own, a new member)
            ("the rule's own Slack: the firing's thread", AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/A", None),
             Some("firing")),
            ("the rule's routing key: the firing's incident", AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", None),
             Some("firing")),
            ("a Slack an earlier step reached: that step's message", AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/B", None),
             Some("step1slackb")),
            ("a new email", AlertChannel::of_rule(ChannelKind::Email, "oncall@example.com", None), None),
            ("a new routing key", AlertChannel::of_rule(ChannelKind::Pagerduty, "OTHERKEY", Some(Severity::Warning)), None),
        ];
        for (case, channel, lands_on) in table {
            let (task, member) = NotificationTask::for_alert_member(&a, &channel, step, 9_000);
            let plain = NotificationTask::for_alert(&a, &channel, step, 9_000);
            assert_eq!(
                task.notification_id, plain.notification_id,
                "{case}: the step's id"
            );
            assert_eq!(
                (task.channel, &task.endpoint, task.severity),
                (channel.channel, &channel.endpoint, channel.severity),
                "{case}"
            );
            let first = &task.alert.as_ref().expect("a ref").firing_notification_id;
            match lands_on {
                Some("firing") => {
                    assert_eq!(*first, a.firing_notification_id(channel.channel), "{case}");
                    assert_eq!(member, None, "{case}");
                }
                Some(id) => {
                    assert_eq!(first, id, "{case}");
                    assert_eq!(member, None, "{case}");
                }
                None => {
                    assert_eq!(*first, task.notification_id, "{case}: its own first message");
                    let m = member.expect("a new member to record");
                    assert_eq!(
                        m.first_id.as_deref(),
                        Some(task.notification_id.as_str()),
                        "{case}"
                    );
                    assert!(!m.shared);
                    assert_eq!(
                        (m.channel, &m.endpoint, m.severity),
                        (channel.channel, &channel.endpoint, channel.severity)
                    );
                    // once recorded, its acknowledge and resolve go to the same incident or thread
                    let mut b = a.clone();
                    b.heard.push(m);
                    let acks = lifecycle_tasks(&b, Reason::Acknowledged, 9_500);
                    let ack = acks
                        .iter()
                        .find(|t| t.endpoint == channel.endpoint)
                        .expect("the ack reaches it");
                    assert_eq!(
                        ack.alert.as_ref().expect("a ref").firing_notification_id,
                        task.notification_id,
                        "{case}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_member_is_stored_as_before_unless_it_was_heard() {
        let rule = AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", Some(Severity::Critical));
        assert_eq!(
            serde_json::to_value(&rule).expect("json"),
            serde_json::json!({"channel": "pagerduty", "endpoint": "R0UTINGKEY", "severity": "critical"})
        );
        let shared = heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true);
        let json = serde_json::to_value(&shared).expect("json");
        assert_eq!(
            (&json["firstId"], &json["shared"]),
            (&serde_json::json!("d1"), &serde_json::json!(true))
        );
        let back: AlertChannel = serde_json::from_value(json).expect("back");
        assert_eq!(back, shared);
        // member keys: one per incident, one per (channel, endpoint), and no endpoint in them
        assert_eq!(shared.member_key(), "s:d1");
        let k = heard(ChannelKind::Slack, "https://hooks.slack.test/SECRET", "x", false).member_key();
        assert!(k.starts_with("slack:") && !k.contains("SECRET"), "{k}");
        assert_eq!(
            k,
            AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/SECRET", None).member_key()
        );
        assert_ne!(
            k,
            AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/OTHER", None).member_key()
        );
        let a = audience_alert();
        let back: Alert = serde_json::from_value(serde_json::to_value(&a).expect("json")).expect("back");
        assert_eq!(back, a);
        let plain = serde_json::to_value(alert()).expect("json");
        assert!(
            plain.get("heard").is_none() && plain.get("closes").is_none(),
            "{plain}"
        );
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
