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
    },
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
        };
        NotificationTask {
            notification_id: notification_id(
                w.project_id,
                w.rule_id,
                "",
                &format!("quiet:{}", w.window_start_ms),
                w.channel,
            ),
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
    for part in [
        "klaxon/v1",
        project_id,
        rule_id,
        group_hash,
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
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::filter::TitleFilter;
    use crate::rule::{ChannelConfig, WhatToReceive};

    /// The task JSON of every reason is the flat object of earlier versions (senders of another version read
    /// it), and reads back to the same reason.
    #[test]
    fn reasons_on_the_wire() {
        let spike = Spike {
            period_ms: 3_600_000,
            baseline_windows: 24,
            factor_milli: 5000,
            threshold: 10,
        };
        let cases = [
            (Reason::New, r#"{"type":"new"}"#),
            (
                Reason::Threshold {
                    threshold: 3,
                    period_ms: 60000,
                    window: Window::Sliding,
                },
                r#"{"type":"threshold","threshold":3,"periodMs":60000,"window":"sliding"}"#,
            ),
            (
                Reason::UniqueUsers {
                    threshold: 3,
                    period_ms: 60000,
                    window: Window::Fixed,
                },
                r#"{"type":"uniqueUsers","threshold":3,"periodMs":60000,"window":"fixed"}"#,
            ),
            (
                Reason::Spike {
                    spike,
                    baseline: Baseline {
                        sum: 480,
                        buckets: 24,
                        needed: 100,
                    },
                },
                r#"{"type":"spike","periodMs":3600000,"baselineWindows":24,"factorMilli":5000,"threshold":10,"baselineSum":480,"baselineBuckets":24,"needed":100}"#,
            ),
            (
                Reason::Reappeared {
                    quiet_period_ms: 1000,
                    last_seen_ms: Some(5),
                },
                r#"{"type":"reappeared","quietPeriodMs":1000,"lastSeenMs":5}"#,
            ),
            (
                Reason::Reappeared {
                    quiet_period_ms: 1000,
                    last_seen_ms: None,
                },
                r#"{"type":"reappeared","quietPeriodMs":1000}"#,
            ),
            (
                Reason::Digest {
                    min_period_s: 60,
                    resolved: 0,
                },
                r#"{"type":"digest","minPeriodS":60}"#,
            ),
            (Reason::Direct, r#"{"type":"direct"}"#),
        ];
        for (reason, json) in cases {
            assert_eq!(serde_json::to_string(&reason).expect("json"), json);
            assert_eq!(
                serde_json::from_str::<Reason>(json).expect("reason"),
                reason,
                "{json}"
            );
        }
        // what the kind asked plus what the counter observed; nothing observed reads as a first bucket's
        assert_eq!(
            Reason::of_firing(Want::Spike(spike), None),
            Reason::Spike {
                spike,
                baseline: Baseline {
                    sum: 0,
                    buckets: 0,
                    needed: 10
                }
            }
        );
        assert_eq!(Reason::of_want(Want::FirstSeen).kind(), Some(Kind::OnlyNew));
    }

    fn rule(channels: &[(ChannelKind, &str, u64)]) -> CompiledRule {
        CompiledRule {
            id: "r1".into(),
            enabled: true,
            what: WhatToReceive::OnlyNew,
            window: Window::Fixed,
            channels: channels
                .iter()
                .map(|(kind, endpoint, min_period_s)| ChannelConfig {
                    kind: *kind,
                    endpoint: (*endpoint).to_owned(),
                    min_period_s: *min_period_s,
                    severity: None,
                })
                .collect(),
            filter: TitleFilter::default(),
            unique_users: false,
            resolve_after_ms: 0,
            renotify: None,
            escalation: Vec::new(),
            quiet_hours: Default::default(),
        }
    }

    fn event_task(repetition_id: Option<&str>) -> EventTask {
        EventTask {
            project_id: "p1".into(),
            event: Event {
                title: "DB down".into(),
                group_hash: "g1".into(),
                is_new: true,
                repetition_id: repetition_id.map(str::to_owned),
                timestamp: None,
                user: Some("u1".into()),
            },
        }
    }

    #[test]
    fn a_firing_becomes_one_task_per_channel() {
        let count = |window| Want::Count {
            threshold: 10,
            period_ms: 60_000,
            window,
        };
        let users = |window| Want::UniqueUsers {
            threshold: 3,
            period_ms: 5_000,
            window,
        };
        let slack = (ChannelKind::Slack, "https://hooks.test/s", 0);
        let email = (ChannelKind::Email, "a@b.test", 300);
        // (want, channels, repetition id, count, firing, reason, window label)
        let table = [
            (
                Want::FirstSeen,
                vec![slack],
                Some("rep"),
                1,
                "new",
                Reason::New,
                "first_seen",
            ),
            (
                count(Window::Fixed),
                vec![slack, email],
                None,
                10,
                "1700000000000",
                Reason::Threshold {
                    threshold: 10,
                    period_ms: 60_000,
                    window: Window::Fixed,
                },
                "fixed",
            ),
            (
                count(Window::Sliding),
                vec![email],
                None,
                12,
                "1700000000500",
                Reason::Threshold {
                    threshold: 10,
                    period_ms: 60_000,
                    window: Window::Sliding,
                },
                "sliding",
            ),
            (
                users(Window::Fixed),
                vec![slack],
                Some("rep"),
                3,
                "17",
                Reason::UniqueUsers {
                    threshold: 3,
                    period_ms: 5_000,
                    window: Window::Fixed,
                },
                "fixed",
            ),
            (
                users(Window::Sliding),
                vec![email, slack],
                None,
                4,
                "18",
                Reason::UniqueUsers {
                    threshold: 3,
                    period_ms: 5_000,
                    window: Window::Sliding,
                },
                "sliding",
            ),
            // a rule without channels never reaches the counter, but would give no task
            (Want::FirstSeen, vec![], None, 1, "new", Reason::New, "first_seen"),
        ];
        for (want, channels, rep, n, firing, reason, label) in table {
            let (rule, task) = (rule(&channels), event_task(rep));
            let got = NotificationTask::for_firing(&Firing {
                task: &task,
                project_name: Some("Acme"),
                rule: &rule,
                want,
                count: n,
                firing,
                at_ms: 1_700_000_000_999,
                signal: None,
            });
            let ctx = format!("{want:?} {channels:?}");
            assert_eq!(got.reason, reason, "{ctx}");
            assert_eq!(got.window, label, "{ctx}");
            assert_eq!(want.label(), label, "{ctx}");
            assert_eq!(Reason::of_want(want), reason, "{ctx}");
            let want_tasks: Vec<NotificationTask> = channels
                .iter()
                .map(|(kind, endpoint, min_period_s)| NotificationTask {
                    notification_id: notification_id("p1", "r1", "g1", firing, *kind),
                    project_id: "p1".into(),
                    project_name: Some("Acme".into()),
                    rule_id: "r1".into(),
                    channel: *kind,
                    endpoint: (*endpoint).to_owned(),
                    min_period_s: *min_period_s,
                    fired_at_ms: 1_700_000_000_999,
                    reason,
                    events: vec![NotificationEvent {
                        group_hash: "g1".into(),
                        title: "DB down".into(),
                        count: n,
                        repetition_id: rep.map(str::to_owned),
                        open_for_ms: None,
                    }],
                    text: None,
                    send_at_ms: None,
                    alert: None,
                    severity: None,
                })
                .collect();
            assert_eq!(got.tasks, want_tasks, "{ctx}");
        }
    }

    #[test]
    fn a_digest_window_becomes_one_sorted_task() {
        let ev = |g: &str, c| NotificationEvent {
            group_hash: g.into(),
            title: format!("title {g}"),
            count: c,
            repetition_id: None,
            open_for_ms: None,
        };
        let w = DigestWindow {
            project_id: "p1",
            project_name: Some("Acme"),
            rule_id: "r1",
            channel: ChannelKind::Telegram,
            endpoint: "123",
            min_period_s: 60,
            severity: None,
            window_start_ms: 1_700_000_000_000,
        };
        let id = notification_id("p1", "r1", "", "digest:1700000000000", ChannelKind::Telegram);
        // (events in, groups out in order)
        let table: [(Vec<NotificationEvent>, Vec<&str>); 4] = [
            (vec![], vec![]),
            (vec![ev("a", 1)], vec!["a"]),
            (vec![ev("a", 1), ev("b", 5), ev("c", 3)], vec!["b", "c", "a"]),
            // equal counts: by group
            (vec![ev("z", 2), ev("b", 2), ev("m", 9)], vec!["m", "b", "z"]),
        ];
        for (events, order) in table {
            let t = NotificationTask::for_digest(&w, 42, events.clone(), vec![]);
            assert_eq!(t.notification_id, id);
            assert_eq!(
                (t.project_id.as_str(), t.rule_id.as_str(), t.endpoint.as_str()),
                ("p1", "r1", "123")
            );
            assert_eq!(
                (t.channel, t.min_period_s, t.fired_at_ms),
                (ChannelKind::Telegram, 60, 42)
            );
            assert_eq!(
                t.reason,
                Reason::Digest {
                    min_period_s: 60,
                    resolved: 0
                }
            );
            assert_eq!(t.held_parts(), None, "a digest of firings only");
            assert_eq!(t.project_name.as_deref(), Some("Acme"));
            assert_eq!((t.text, t.send_at_ms), (None, None));
            let groups: Vec<&str> = t.events.iter().map(|e| e.group_hash.as_str()).collect();
            assert_eq!(groups, order, "{events:?}");
            assert_eq!(t.events.len(), events.len());
        }
        let later = DigestWindow {
            window_start_ms: w.window_start_ms + 1,
            ..w
        };
        assert_ne!(
            NotificationTask::for_digest(&later, 42, vec![], vec![]).notification_id,
            id
        );
        // what resolved in the window comes after what fired, each part sorted; the same group may be in both
        let t =
            NotificationTask::for_digest(&w, 42, vec![ev("a", 1), ev("b", 5)], vec![ev("c", 2), ev("a", 9)]);
        assert_eq!(t.notification_id, id, "the window's one notification");
        assert_eq!(
            t.reason,
            Reason::Digest {
                min_period_s: 60,
                resolved: 2
            }
        );
        let groups: Vec<&str> = t.events.iter().map(|e| e.group_hash.as_str()).collect();
        assert_eq!(groups, ["b", "a", "a", "c"]);
        let (fired, resolved) = t.held_parts().expect("parts");
        assert_eq!((fired.len(), resolved[0].count), (2, 9));
        let json = serde_json::to_value(&t).expect("json");
        assert_eq!(
            json["reason"],
            serde_json::json!({"type": "digest", "minPeriodS": 60, "resolved": 2})
        );
        assert_eq!(
            serde_json::from_value::<NotificationTask>(json).expect("a task"),
            t
        );
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let a = notification_id("p", "r", "g", "1000", ChannelKind::Slack);
        assert_eq!(a, notification_id("p", "r", "g", "1000", ChannelKind::Slack));
        assert_eq!(a.len(), 32);
        for other in [
            notification_id("p", "r", "g", "1001", ChannelKind::Slack),
            notification_id("p", "r", "g", "1000", ChannelKind::Email),
            notification_id("p", "r", "h", "1000", ChannelKind::Slack),
            notification_id("p", "r2", "g", "1000", ChannelKind::Slack),
            // the separator keeps ("ab","c") apart from ("a","bc")
            notification_id("p", "r", "g1", "000", ChannelKind::Slack),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn direct_ids_follow_the_key() {
        let a = direct_notification_id("order-42");
        assert_eq!(a, direct_notification_id("order-42"));
        assert_ne!(a, direct_notification_id("order-43"));
        assert_eq!(a.len(), 32);
        // a direct id never equals a firing's id built from the same text
        assert_ne!(a, notification_id("order-42", "", "", "", ChannelKind::Slack));
    }

    #[test]
    fn direct_task_round_trips() {
        let json = r#"{"notificationId":"n","projectId":"","ruleId":"api","channel":"slack","endpoint":"https://x.test/h",
            "firedAtMs":1,"reason":{"type":"direct"},"events":[{"groupHash":"","title":"Deploy","count":1,"repetitionId":null}],
            "text":"v2 is out","sendAtMs":1700000000000}"#;
        let t: NotificationTask = serde_json::from_str(json).expect("parse");
        assert_eq!(t.reason, Reason::Direct);
        assert_eq!(t.text.as_deref(), Some("v2 is out"));
        assert_eq!(t.send_at_ms, Some(1_700_000_000_000));
        let back: NotificationTask =
            serde_json::from_str(&serde_json::to_string(&t).expect("ser")).expect("parse");
        assert_eq!(back, t);
    }

    /// Tasks already in the queues when the project's name started to travel in the task have no `projectName`:
    /// they still parse (and are delivered showing the id); a name round-trips.
    #[test]
    fn the_project_name_is_optional_on_the_wire() {
        let old = r#"{"notificationId":"n","projectId":"5e3eef0679fa3700a0198a49","ruleId":"r","channel":"slack",
            "endpoint":"https://x.test/h","minPeriodS":0,"firedAtMs":1,"reason":{"type":"new"},
            "events":[{"groupHash":"g","title":"t","count":1,"repetitionId":null}]}"#;
        let mut t: NotificationTask = serde_json::from_str(old).expect("a task without projectName");
        assert_eq!(t.project_name, None);
        t.project_name = Some("Acme shop".into());
        let json = serde_json::to_string(&t).expect("ser");
        assert!(json.contains(r#""projectName":"Acme shop""#), "{json}");
        let back: NotificationTask = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, t);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn task_round_trips_and_debug_hides_endpoint() {
        let t = NotificationTask {
            notification_id: "id".into(),
            project_id: "p".into(),
            project_name: None,
            rule_id: "r".into(),
            channel: ChannelKind::Webhook,
            endpoint: "https://secret.test/hook?token=SECRET".into(),
            min_period_s: 0,
            fired_at_ms: 5,
            reason: Reason::Threshold {
                threshold: 100,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            events: vec![NotificationEvent {
                group_hash: "g".into(),
                title: "t".into(),
                count: 100,
                repetition_id: None,
                open_for_ms: None,
            }],
            text: None,
            send_at_ms: None,
            alert: None,
            severity: None,
        };
        let json = serde_json::to_string(&t).expect("serialize");
        assert!(
            !json.contains("sendAtMs") && !json.contains("\"text\"") && !json.contains("projectName"),
            "{json}"
        );
        assert!(
            json.contains(
                r#""reason":{"type":"threshold","threshold":100,"periodMs":60000,"window":"sliding"}"#
            ),
            "{json}"
        );
        assert!(
            json.contains(r#""notificationId":"id""#) && json.contains(r#""firedAtMs":5"#),
            "{json}"
        );
        let back: NotificationTask = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, t);
        assert!(!format!("{t:?}").contains("SECRET"));
    }
}
