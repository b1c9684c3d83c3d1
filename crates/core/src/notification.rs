//! Notification tasks: what a worker hands to a sender, one per enabled channel of a firing rule.
//!
//! The decisions that turn a firing into tasks live here, pure: [`NotificationTask::for_firing`] (one firing
//! of a rule on one group → one task per channel of the rule) and [`NotificationTask::for_digest`] (one
//! claimed digest window → its one task). The engine's loops only do the I/O around them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::alert::AlertRef;
use crate::event::EventTask;
use crate::kind::{Baseline, Kind, Signal, Spike, Want, Window};
use crate::rule::{ChannelKind, CompiledRule, Severity};

/// Why a notification was produced: for a rule's firing, what its kind asked ([`Want`]'s parameters) plus what
/// the counter observed ([`Signal`]); or a digest, or a direct notification.
///
/// On the wire (the task JSON) every variant is one flat object tagged by `type`, as it always was
/// (`{"type": "spike", "periodMs": …, "baselineSum": …}`): a spike's two halves are flattened into it
/// (`tests/reason_wire.rs` holds the strings of earlier versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "type")]
pub enum Reason {
    /// ONLY_NEW: a first occurrence.
    New,
    /// SEEN_MORE: a window's count reached the threshold.
    Threshold {
        /// The rule's threshold.
        threshold: u64,
        /// The rule's window length, ms.
        period_ms: u64,
        /// Fixed or sliding.
        window: Window,
    },
    /// SEEN_MORE with `uniqueUsers`: the number of distinct users in a window reached the threshold. The
    /// events' `count` is that number of users.
    UniqueUsers {
        /// The rule's threshold (distinct users).
        threshold: u64,
        /// The rule's window length, ms.
        period_ms: u64,
        /// Fixed or sliding.
        window: Window,
    },
    /// SPIKE: the count of a bucket reached `max(threshold, factor × baseline)`. The events' `count` is the
    /// bucket's count at the firing.
    Spike {
        /// What the rule asked: its bucket, baseline span, factor and least count.
        #[serde(flatten)]
        spike: Spike,
        /// What the counter observed: the bucket's baseline and the count it needed.
        #[serde(flatten)]
        baseline: Baseline,
    },
    /// REAPPEARED: a group seen again after at least `quiet_period_ms` without events.
    Reappeared {
        /// What the rule asked: its `quietPeriod`, ms.
        quiet_period_ms: u64,
        /// What the counter observed: when the group was last seen before, unix ms; `None` when its mark had
        /// expired (the quiet was then longer than the mark lives, see docs/rules.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_seen_ms: Option<i64>,
    },
    /// NO_EVENTS: the project sent no event at all for `quiet_period_ms` ([`crate::kind::no_events`]). Its
    /// task's one event is the project's (group `""`), count 0.
    NoEvents {
        /// What the rule asked: its `quietPeriod`, ms.
        quiet_period_ms: u64,
        /// The project's last event before the silence, unix ms; `None` when none was seen (the clock started
        /// at the rule's storing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_event_ms: Option<i64>,
    },
    /// Several firings coalesced over the channel's `minPeriod` ([`NotificationTask::for_digest`]), and the
    /// alerts that resolved in the same window: the task's events are what fired, then the last `resolved`
    /// ones what resolved (none in digests of earlier versions).
    Digest {
        /// The digest period, seconds.
        min_period_s: u64,
        /// How many of the task's events (the last ones) resolved (absent from the wire when none).
        #[serde(default, skip_serializing_if = "is_zero")]
        resolved: u32,
        /// What fired and resolved in the window past its list's bound (absent from the wire when nothing).
        #[serde(default, skip_serializing_if = "Unlisted::is_none")]
        more: Unlisted,
    },
    /// A direct notification from `POST /api/v1/notifications`: the event's title is the message's title and
    /// [`NotificationTask::text`] its body.
    Direct,
    /// An alert resolved ([`crate::alert`]); the task's [`NotificationTask::alert`] says which, since when, with
    /// how many events and by what.
    Resolved,
    /// An alert was acknowledged; [`NotificationTask::alert`] says which and by whom.
    Acknowledged,
    /// A reminder of an alert still firing (`renotify`): the `number`-th of at most `max`.
    Reminder {
        /// 1 for the first reminder.
        number: u32,
        /// The rule's `renotify.max`.
        max: u32,
    },
    /// An escalation step of an alert still firing (`escalation`): step `step` (1-based) of `steps`.
    Escalation {
        /// 1 for the first step.
        step: u32,
        /// How many steps the rule has.
        steps: u32,
    },
    /// What a channel held during a quiet window (`quietHours`), released when the window ended
    /// ([`NotificationTask::for_held`]): the task's first `fired` events are what fired (or was still firing:
    /// a reminder held), the `resolved` after them what resolved inside the window.
    QuietHours {
        /// When the quiet window ended, unix ms.
        until_ms: i64,
        /// How many of the task's events (the first ones) fired.
        fired: u32,
        /// How many (after those) resolved.
        resolved: u32,
        /// What fired and resolved in the window past its list's bound (absent from the wire when nothing).
        #[serde(default, skip_serializing_if = "Unlisted::is_none")]
        more: Unlisted,
    },
}

/// What a digest window or a quiet window counted past its list's bound (`klaxon-counter`'s
/// `DIGEST_MAX_GROUPS` groups of each kind): a digest or a release never drops silently, its message says "and
/// N more (X fired, Y resolved)". Each firing and each resolve past the bound counts once (a group that fired
/// twice there counts twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Unlisted {
    /// Firings not listed.
    pub fired: u64,
    /// Resolves not listed.
    pub resolved: u64,
}

impl Unlisted {
    /// Nothing past the bound.
    pub fn is_none(&self) -> bool {
        self.fired == 0 && self.resolved == 0
    }

    /// Firings and resolves not listed.
    pub fn total(&self) -> u64 {
        self.fired.saturating_add(self.resolved)
    }
}

impl Reason {
    /// Why a rule that asked the counter for `want` fired, with what the counter observed of the firing (the
    /// baseline of a spike, the previous sighting of a reappearance). A spike the counter said nothing of reads
    /// as a first bucket's ([`Baseline::unknown`]), a reappearance as one whose mark had expired.
    pub fn of_firing(want: Want, signal: Option<Signal>) -> Reason {
        match want {
            Want::FirstSeen => Reason::New,
            Want::Count {
                threshold,
                period_ms,
                window,
            } => Reason::Threshold {
                threshold,
                period_ms,
                window,
            },
            Want::UniqueUsers {
                threshold,
                period_ms,
                window,
            } => Reason::UniqueUsers {
                threshold,
                period_ms,
                window,
            },
            Want::Spike(spike) => Reason::Spike {
                spike,
                baseline: match signal {
                    Some(Signal::Spike(baseline)) => baseline,
                    _ => Baseline::unknown(&spike),
                },
            },
            Want::Reappeared { quiet_period_ms, .. } => Reason::Reappeared {
                quiet_period_ms,
                last_seen_ms: match signal {
                    Some(Signal::Reappeared { last_seen_ms }) => last_seen_ms,
                    _ => None,
                },
            },
        }
    }

    /// Why a rule that asked the counter for `want` fired, the counter having said nothing more.
    pub fn of_want(want: Want) -> Reason {
        Reason::of_firing(want, None)
    }

    /// The rule kind that fired; `None` for a digest or a direct notification.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Reason::New => Some(Kind::OnlyNew),
            Reason::Threshold { .. } | Reason::UniqueUsers { .. } => Some(Kind::SeenMore),
            Reason::Spike { .. } => Some(Kind::Spike),
            Reason::Reappeared { .. } => Some(Kind::Reappeared),
            Reason::NoEvents { .. } => Some(Kind::NoEvents),
            Reason::Digest { .. }
            | Reason::Direct
            | Reason::Resolved
            | Reason::Acknowledged
            | Reason::Reminder { .. }
            | Reason::Escalation { .. }
            | Reason::QuietHours { .. } => None,
        }
    }

    /// A message about an alert's life (resolved, acknowledged, a reminder, an escalation), not a firing.
    pub fn is_lifecycle(&self) -> bool {
        matches!(
            self,
            Reason::Resolved | Reason::Acknowledged | Reason::Reminder { .. } | Reason::Escalation { .. }
        )
    }

    /// Whether Hawk's senders (`--output hawk`) can deliver it: only firings about a group of events (`event`,
    /// `several-events` look the group up by its hash). A lifecycle message or a NO_EVENTS firing (about the
    /// project, no group) is not theirs.
    pub fn hawk_can_send(&self) -> bool {
        !self.is_lifecycle() && !matches!(self, Reason::NoEvents { .. })
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One firing: the counter's answer to one (event, rule) hit that reached the rule's condition.
#[derive(Debug, Clone, Copy)]
pub struct Firing<'a> {
    /// The event that made the rule fire, with its project.
    pub task: &'a EventTask,
    /// The project's display name, when its document has one ([`crate::ProjectRules::name`]).
    pub project_name: Option<&'a str>,
    /// The rule that fired.
    pub rule: &'a CompiledRule,
    /// What the rule asked the counter for this event.
    pub want: Want,
    /// The count the window reached (events, or distinct users; 1 for a first occurrence).
    pub count: u64,
    /// Identifies the firing inside its (rule, group) (see [`notification_id`]).
    pub firing: &'a str,
    /// When the rule fired, unix milliseconds on the Redis clock.
    pub at_ms: i64,
    /// The numbers behind a SPIKE or REAPPEARED firing.
    pub signal: Option<Signal>,
}

/// One window of a digest channel (`minPeriod > 0`) of one rule ([`NotificationTask::for_digest`]). No `Debug`:
/// the endpoint can be a secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DigestWindow<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The project's display name, when the firing that opened the window carried one.
    pub project_name: Option<&'a str>,
    /// The rule.
    pub rule_id: &'a str,
    /// The digest channel.
    pub channel: ChannelKind,
    /// The channel's endpoint.
    pub endpoint: &'a str,
    /// The channel's digest period, seconds.
    pub min_period_s: u64,
    /// The channel's severity (PagerDuty).
    pub severity: Option<Severity>,
    /// When the window opened, unix ms on the Redis clock.
    pub window_start_ms: i64,
}

/// What one firing becomes ([`NotificationTask::for_firing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringTasks {
    /// Why the rule fired.
    pub reason: Reason,
    /// The firing's `window` metric label ([`Want::label`]).
    pub window: String,
    /// One task per channel of the rule, in the rule's channel order. Tasks of digest channels
    /// (`min_period_s > 0`) are among them: the caller routes them to the channel's digest.
    pub tasks: Vec<NotificationTask>,
}

/// One group inside a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationEvent {
    /// The group.
    pub group_hash: String,
    /// Its title.
    pub title: String,
    /// Occurrences counted when the rule fired (1 for a new error).
    pub count: u64,
    /// Hawk's repetition id of the firing event, if any.
    pub repetition_id: Option<String>,
    /// A resolved alert's entry in a digest or a quiet window's release: how long the alert was open, ms (its
    /// `count` is then the alert's events). Absent otherwise, and from tasks of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_for_ms: Option<u64>,
    /// A NO_EVENTS silence ([`NotificationEvent::silence`]): the rule's `quietPeriod`, ms. The entry is then about
    /// the project, not a group: a digest or a quiet window's release lists it as "No events from <project> for
    /// <period>" without a count. Absent for every other entry, and from tasks and buffers of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_period_ms: Option<u64>,
    /// The alert the entry is about, when known. Absent from tasks of earlier versions.
    #[serde(default, rename = "alertId", skip_serializing_if = "Option::is_none")]
    pub alert_id: Option<String>,
}

impl NotificationEvent {
    /// The one entry of a NO_EVENTS firing: the project's (group `""`), count 0, titled "No events for 1 hour"
    /// ([`crate::kind::no_events::title`]), carrying its quiet period.
    pub fn silence(quiet_period_ms: u64) -> NotificationEvent {
        NotificationEvent {
            group_hash: String::new(),
            title: crate::kind::no_events::title(quiet_period_ms),
            count: 0,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: Some(quiet_period_ms),
            alert_id: None,
        }
    }

    /// Whether the entry is a NO_EVENTS silence (about the project; its line shows no count).
    pub fn is_silence(&self) -> bool {
        self.silence_period_ms.is_some()
    }
}

/// Everything a sender needs to deliver one notification on one channel.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationTask {
    /// Deterministic id: the same firing gives the same id on every worker and every redelivery.
    pub notification_id: String,
    /// The project.
    pub project_id: String,
    /// The project's display name (Hawk's `projects.name`, cleaned and bounded when the rules were read), when
    /// the worker knew one: messages show it instead of the id. Absent from tasks of earlier versions and from
    /// direct notifications; their messages show the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_name: Option<String>,
    /// The rule that fired.
    pub rule_id: String,
    /// The channel to deliver on.
    pub channel: ChannelKind,
    /// The channel's endpoint (URL, chat id, addresses). Treated as a secret in logs.
    pub endpoint: String,
    /// The channel's digest period in seconds (0 = none).
    #[serde(default)]
    pub min_period_s: u64,
    /// When the rule fired, unix milliseconds on the Redis clock.
    pub fired_at_ms: i64,
    /// Why.
    pub reason: Reason,
    /// The groups this notification is about.
    pub events: Vec<NotificationEvent>,
    /// The body of a direct notification ([`Reason::Direct`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Not to be delivered before this instant (unix ms, wall clock): a sender that receives the task earlier
    /// parks it again until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_at_ms: Option<i64>,
    /// PagerDuty only: the alert's severity from the rule (`channels.pagerduty.severity`); absent elsewhere and
    /// from tasks of earlier versions (PagerDuty then gets `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Severity>,
    /// The alert this task opened or repeats (a firing) or is about (resolved, acknowledged, a reminder, an
    /// escalation: [`crate::alert`]); absent from digests, direct notifications and tasks of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertRef>,
}

impl std::fmt::Debug for NotificationTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotificationTask")
            .field("notification_id", &self.notification_id)
            .field("project_id", &self.project_id)
            .field("project_name", &self.project_name)
            .field("rule_id", &self.rule_id)
            .field("channel", &self.channel)
            .field("endpoint", &"<redacted>")
            .field("fired_at_ms", &self.fired_at_ms)
            .field("reason", &self.reason)
            .field("events", &self.events.len())
            .field("send_at_ms", &self.send_at_ms)
            .finish()
    }
}

impl NotificationTask {
    /// `firedAt` as RFC 3339 (UTC, millisecond precision).
    pub fn fired_at_rfc3339(&self) -> String {
        rfc3339_ms(self.fired_at_ms)
    }

    /// Whether Hawk's senders (`--output hawk`) can deliver it: its reason is theirs
    /// ([`Reason::hawk_can_send`]) and every event names a group they can look up. A NO_EVENTS silence (group
    /// `""`) is about the project and has none, also inside a digest or a quiet window's release.
    pub fn hawk_can_send(&self) -> bool {
        self.reason.hawk_can_send() && self.events.iter().all(|e| !e.group_hash.is_empty())
    }

    /// The tasks of one firing: one per channel of the rule, each about the firing event's group, with a
    /// deterministic id per (firing, channel); plus the reason and the window label.
    pub fn for_firing(f: &Firing<'_>) -> FiringTasks {
        let reason = Reason::of_firing(f.want, f.signal);
        let (project_id, event) = (&f.task.project_id, &f.task.event);
        let tasks = f
            .rule
            .channels
            .iter()
            .map(|ch| NotificationTask {
                notification_id: notification_id(
                    project_id,
                    &f.rule.id,
                    &event.group_hash,
                    f.firing,
                    ch.kind,
                ),
                project_id: project_id.clone(),
                project_name: f.project_name.map(str::to_owned),
                rule_id: f.rule.id.clone(),
                channel: ch.kind,
                endpoint: ch.endpoint.clone(),
                min_period_s: ch.min_period_s,
                fired_at_ms: f.at_ms,
                reason,
                events: vec![NotificationEvent {
                    group_hash: event.group_hash.clone(),
                    title: event.title.clone(),
                    count: f.count,
                    repetition_id: event.repetition_id.clone(),
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                }],
                text: None,
                send_at_ms: None,
                alert: None,
                severity: ch.severity,
            })
            .collect();
        FiringTasks {
            reason,
            window: f.want.label(),
            tasks,
        }
    }

    /// The one task of a claimed digest window: what fired in it, then what resolved in it (an alert's resolve
    /// on a digest channel joins the window like a firing), each part sorted by count, highest first, then by
    /// group. Its id depends only on the window's (project, rule, channel, start), so a recovered claim
    /// publishes the same notification.
    pub fn for_digest(
        w: &DigestWindow<'_>,
        fired_at_ms: i64,
        fired: Vec<NotificationEvent>,
        resolved: Vec<NotificationEvent>,
    ) -> NotificationTask {
        let (events, _, resolved) = in_parts(fired, resolved);
        NotificationTask {
            notification_id: notification_id(
                w.project_id,
                w.rule_id,
                "",
                &format!("digest:{}", w.window_start_ms),
                w.channel,
            ),
            project_id: w.project_id.to_owned(),
            project_name: w.project_name.map(str::to_owned),
            rule_id: w.rule_id.to_owned(),
            channel: w.channel,
            endpoint: w.endpoint.to_owned(),
            min_period_s: w.min_period_s,
            fired_at_ms,
            reason: Reason::Digest {
                min_period_s: w.min_period_s,
                resolved,
                more: Default::default(),
            },
            events,
            text: None,
            send_at_ms: None,
            alert: None,
            severity: w.severity,
        }
    }
}

/// What fired, then what resolved, each part sorted by count (highest first), then by group; with the parts'
/// lengths.
fn in_parts(
    mut fired: Vec<NotificationEvent>,
    mut resolved: Vec<NotificationEvent>,
) -> (Vec<NotificationEvent>, u32, u32) {
    let order = |a: &NotificationEvent, b: &NotificationEvent| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.group_hash.cmp(&b.group_hash))
    };
    fired.sort_by(order);
    resolved.sort_by(order);
    let n = |v: &[NotificationEvent]| u32::try_from(v.len()).unwrap_or(u32::MAX);
    let (f, r) = (n(&fired), n(&resolved));
    fired.append(&mut resolved);
    (fired, f, r)
}

impl NotificationTask {
    /// The one task of a quiet window's release on one channel (`quietHours`): what fired inside the window,
    /// then what resolved inside it, each part sorted by count, highest first, then by group. Its id depends
    /// only on (project, rule, channel, the window's end), so a recovered claim publishes the same notification.
    /// `w.window_start_ms` is the window's end (the hold's due time).
    pub fn for_held(
        w: &DigestWindow<'_>,
        fired_at_ms: i64,
        fired: Vec<NotificationEvent>,
        resolved: Vec<NotificationEvent>,
    ) -> NotificationTask {
        let (events, fired, resolved) = in_parts(fired, resolved);
        let reason = Reason::QuietHours {
            until_ms: w.window_start_ms,
            fired,
            resolved,
            more: Default::default(),
        };
        NotificationTask {
            notification_id: held_release_id(w.project_id, w.rule_id, w.channel, w.window_start_ms),
            project_id: w.project_id.to_owned(),
            project_name: w.project_name.map(str::to_owned),
            rule_id: w.rule_id.to_owned(),
            channel: w.channel,
            endpoint: w.endpoint.to_owned(),
            min_period_s: w.min_period_s,
            fired_at_ms,
            reason,
            events,
            text: None,
            send_at_ms: None,
            alert: None,
            severity: w.severity,
        }
    }

    /// The task with what its window counted past its list's bound ([`Unlisted`]): a digest's or a quiet
    /// window's release; any other task is returned as it is.
    pub fn with_unlisted(mut self, unlisted: Unlisted) -> NotificationTask {
        if let Reason::Digest { more, .. } | Reason::QuietHours { more, .. } = &mut self.reason {
            *more = unlisted;
        }
        self
    }

    /// What its window counted past its list's bound: a digest's or a quiet window's release; nothing for any
    /// other task.
    pub fn unlisted(&self) -> Unlisted {
        match self.reason {
            Reason::Digest { more, .. } | Reason::QuietHours { more, .. } => more,
            _ => Unlisted::default(),
        }
    }

    /// A message that lists what fired and what resolved: a quiet window's release ([`Reason::QuietHours`]), or
    /// a digest that carries resolves ([`Reason::Digest`] with `resolved > 0`). Its events that fired and those
    /// that resolved; `None` for any other task (a digest of firings only among them).
    pub fn held_parts(&self) -> Option<(&[NotificationEvent], &[NotificationEvent])> {
        let n = match self.reason {
            Reason::QuietHours { fired, .. } => fired as usize,
            Reason::Digest { resolved, .. } if resolved > 0 => {
                self.events.len().saturating_sub(resolved as usize)
            }
            _ => return None,
        };
        Some(self.events.split_at(n.min(self.events.len())))
    }
}

/// Formats unix milliseconds as RFC 3339 UTC.
pub fn rfc3339_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// The id of the one message that releases a (project, rule, channel)'s quiet-hours hold due at `until_ms`
/// ([`NotificationTask::for_held`]): what `klaxon deliveries list` shows a held message under, before and after
/// its release.
pub fn held_release_id(project_id: &str, rule_id: &str, channel: ChannelKind, until_ms: i64) -> String {
    notification_id(project_id, rule_id, "", &format!("quiet:{until_ms}"), channel)
}

/// The deterministic id of one firing on one channel.
///
/// `firing` identifies the firing inside its (rule, group): the window start for a fixed window, the firing
/// time for a sliding window, `"new"` for ONLY_NEW. Every worker computes the same id for the same firing, so
/// senders can drop duplicates.
pub fn notification_id(
    project_id: &str,
    rule_id: &str,
    group_hash: &str,
    firing: &str,
    channel: ChannelKind,
) -> String {
    let mut h = Sha256::new();
    // an alert keeps a long group as its digest: the ids made from either are the same
    let group_hash = crate::alert::bounded_group(group_hash);
    for part in [
        "klaxon/v1",
        project_id,
        rule_id,
        &group_hash,
        firing,
        channel.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

/// The id of a direct notification with an idempotency key: the same key always gives the same id, so the
/// senders' deduplication delivers it once however often it is submitted.
pub fn direct_notification_id(idempotency_key: &str) -> String {
    let mut h = Sha256::new();
    for part in ["klaxon/direct/v1", idempotency_key] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..16])
}

#[cfg(test)]
mod tests;
