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

/// The most alerts a project keeps (open and resolved, newest first): past it a resolved one is forgotten at
/// once (the one that expires first), and when every one of them is open no new alert opens (the firing is still
/// delivered). Alerts that resolve only by hand (`resolveAfter: 0`) hold at most half of these slots.
pub const DEFAULT_MAX_ALERTS_PER_PROJECT: usize = 1_000;

/// The longest title an alert keeps, bytes: longer ones are cut on a character boundary when stored and when
/// listed, as digests cut theirs (`klaxon_core::text::one_line`).
pub const MAX_ALERT_TITLE_BYTES: usize = 1024;

/// The longest group hash kept as it is in a Redis key or an alert's stored group, bytes (Hawk's group hashes
/// are 64 hex characters). A longer one (a producer's 200 KB "hash") is kept as [`bounded_group`]'s digest.
pub const MAX_GROUP_KEY_BYTES: usize = 256;

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

    /// [`Alert::reference`] for a caller that holds the notification id of this alert's own firing on the
    /// channel already (the firing task it opened with): the same reference without hashing it again.
    pub fn reference_with_firing_id(&self, channel: ChannelKind, firing_notification_id: String) -> AlertRef {
        debug_assert_eq!(firing_notification_id, self.firing_notification_id(channel));
        self.reference_with(firing_notification_id)
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

/// A group hash as Redis keys and alerts hold it: as it is up to [`MAX_GROUP_KEY_BYTES`] bytes, else `#` and
/// the first 128 bits of its SHA-256 in hex (33 bytes), so one event's group cannot make a 200 KB key or field.
/// Idempotent (a digest is short, so it maps to itself): the counting keys, an alert's `cur:` key, its stored
/// group and the ids made from a group ([`alert_id`], `notification_id`) give the same answer for the event's
/// group and for the group an alert read back from Redis holds, so lookups still match.
pub fn bounded_group(group: &str) -> std::borrow::Cow<'_, str> {
    if group.len() <= MAX_GROUP_KEY_BYTES {
        std::borrow::Cow::Borrowed(group)
    } else {
        std::borrow::Cow::Owned(format!(
            "#{}",
            hex::encode(&Sha256::digest(group.as_bytes())[..16])
        ))
    }
}

/// The deterministic id of the alert a firing opens: the same firing (same `firing` token) names the same alert
/// on every worker and every redelivery. 24 hex characters.
pub fn alert_id(project_id: &str, rule_id: &str, group: &str, firing: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        "klaxon/alert/v1",
        project_id,
        rule_id,
        &bounded_group(group),
        firing,
    ] {
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
mod tests;
