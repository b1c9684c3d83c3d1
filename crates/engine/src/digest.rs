//! Digests (`minPeriod > 0`): every firing of a (project, rule, channel) within `minPeriod` seconds becomes
//! **one** notification.
//!
//! State lives in Redis, timing in RabbitMQ:
//!
//! ```text
//! worker: firing ──▶ digest_append.lua ──opened?──▶ flush message ──delay engine (minPeriod)──▶ <ns>.digest.flush
//!                    (buffer, atomic,                (persistent, confirmed, "not earlier than")        │
//!                     idempotent per id)                                                                ▼
//! flush loop: digest_claim.lua (take-and-mark) ──▶ one NotificationTask (reason Digest, deterministic id)
//!             ──publish, confirmed──▶ <ns>.notify.<channel> ──▶ digest_done.lua ──▶ ack the flush message
//! ```
//!
//! * Leading edge: the first firing on a quiet (rule, channel) is not buffered at all — `digest_append.lua`
//!   answers "send now", the worker publishes it at once as an ordinary notification, and the channel's quiet
//!   period (`minPeriod`) starts. A firing inside the quiet period opens a window that is due `minPeriod` after
//!   the previous message and schedules one flush for it; later ones only append. A claimed digest is the
//!   channel's newest message, so what fires within `minPeriod` after it waits for the next digest; once a full
//!   `minPeriod` passes with nothing, the channel is quiet again.
//! * A redelivered firing appends nothing twice, the redelivered leading firing is sent again under the same
//!   notification id (the sender drops the copy), and the redelivered opener schedules again.
//! * The claim is atomic: exactly one flusher gets the window. It leaves a claimed record with a lease
//!   (`klaxon_counter::digest::DEFAULT_CLAIM_LEASE`) until the notification is published with a confirm;
//!   if the flusher dies in between, the flush message comes back and the record is recovered once the lease
//!   ran out, so the same notification (same id) is published — the sender drops a duplicate.
//! * A flush that finds the window not due yet, or busy, is re-scheduled through the delay engine.
//! * **Resolves** ride the same path ("digests carry resolves like firings"): an alert's resolve on a channel
//!   whose rule now has `minPeriod > 0` (`klaxon_core::route`) is appended as a resolved entry (`r:<group>`; a
//!   firing is `f:<group>`): on a quiet channel it goes out at once as the ordinary resolved message and starts
//!   the quiet period, inside `minPeriod` it joins the window, which then lists what fired and what resolved
//!   (a group that fired and resolved in one window is listed in both parts). PagerDuty is never given a
//!   resolve to digest (its incident must close on the firing's `dedup_key`), nor is `--output hawk` (Hawk's
//!   senders know firings only). Acknowledgements, reminders, escalations and resolves by hand are sent at once:
//!   they are steps of a conversation someone is having, not events to coalesce.
//!
//! The flush loop that claims the windows and sends their messages is [`crate::flushes`].

use std::time::Duration;

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::notification::{notification_id, DigestWindow, NotificationTask};
use klaxon_core::{ChannelKind, NotificationEvent};
use klaxon_counter::{Append, DigestKey, Digests, HeldClaim, HeldEntry};
use serde::{Deserialize, Serialize};

use crate::EngineError;

/// A due-window message: which digest, and which window of it; or which quiet-hours hold (`held`), due at
/// `window_start_ms` (the quiet window's end). On the wire, JSON in this field order:
/// `{"projectId", "ruleId", "channel", "endpoint", "minPeriodS", "windowStartMs", "projectName"?, "severity"?,
/// "held"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Flush {
    pub(crate) project_id: String,
    pub(crate) rule_id: String,
    pub(crate) channel: ChannelKind,
    pub(crate) endpoint: String,
    /// Positive for a digest window ([`Flush::parse`] refuses 0); a hold's channel may have no digest period.
    pub(crate) min_period_s: u64,
    pub(crate) window_start_ms: i64,
    /// The project's name from the firing that opened the window (absent in flush messages of earlier versions;
    /// anything but a string reads as absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_string"
    )]
    pub(crate) project_name: Option<String>,
    /// The channel's severity (PagerDuty; absent in flush messages of earlier versions; a value this version does
    /// not know reads as absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_severity"
    )]
    pub(crate) severity: Option<klaxon_core::Severity>,
    /// A quiet-hours hold (`"held": true`) rather than a digest window: claimed with `claim_held` when due at
    /// `window_start_ms`, released as one [`NotificationTask::for_held`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) held: bool,
}

/// An optional string that is absent when it is not one.
fn lenient_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    })
}

/// An optional severity that is absent when it is not one this version knows.
fn lenient_severity<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<klaxon_core::Severity>, D::Error> {
    Ok(lenient_string(d)?
        .as_deref()
        .and_then(klaxon_core::Severity::parse))
}

impl Flush {
    /// The flush of `t`'s channel: its digest window that started at `start`, or its hold due at `start`.
    pub(crate) fn of_task(t: &NotificationTask, start: i64, held: bool) -> Flush {
        Flush {
            project_id: t.project_id.clone(),
            project_name: t.project_name.clone(),
            rule_id: t.rule_id.clone(),
            channel: t.channel,
            endpoint: t.endpoint.clone(),
            min_period_s: t.min_period_s,
            severity: t.severity,
            window_start_ms: start,
            held,
        }
    }

    pub(crate) fn key(&self) -> DigestKey<'_> {
        DigestKey {
            project_id: &self.project_id,
            rule_id: &self.rule_id,
            channel: self.channel,
        }
    }

    fn to_json(&self) -> Vec<u8> {
        // A struct of strings and numbers always encodes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn parse(body: &[u8]) -> Result<Self, String> {
        let f: Flush = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        if f.min_period_s == 0 && !f.held {
            return Err("missing positive `minPeriodS`".into());
        }
        Ok(f)
    }

    /// The message that flushes this window (or releases this hold), delayed by `wait`.
    pub(crate) fn message(&self, topology: &Topology) -> Outgoing {
        let mut msg = Outgoing::json(topology.digest_flush_queue(), self.to_json());
        let (tag, which) = if self.held {
            ("quiet", format!("quiet:{}", self.window_start_ms))
        } else {
            ("flush", self.window_start_ms.to_string())
        };
        msg.message_id = Some(format!(
            "{tag}:{}",
            notification_id(&self.project_id, &self.rule_id, "", &which, self.channel)
        ));
        msg
    }

    pub(crate) fn window(&self) -> DigestWindow<'_> {
        DigestWindow {
            project_id: &self.project_id,
            project_name: self.project_name.as_deref(),
            rule_id: &self.rule_id,
            channel: self.channel,
            endpoint: &self.endpoint,
            min_period_s: self.min_period_s,
            severity: self.severity,
            window_start_ms: self.window_start_ms,
        }
    }

    /// The one notification of this window ([`NotificationTask::for_digest`]): what fired, then what resolved;
    /// its id depends only on (project, rule, channel, window start).
    pub(crate) fn task(&self, fired_at_ms: i64, claim: HeldClaim) -> NotificationTask {
        NotificationTask::for_digest(&self.window(), fired_at_ms, claim.fired, claim.resolved)
            .with_unlisted(claim.more)
    }
}

/// Appends the firings of digest channels (`min_period_s > 0`) and the resolves routed to their digests
/// ([`klaxon_core::route`]) to their digests, all in one Redis round trip, and says which go out now (leading
/// edge) and which flush messages to publish through the delay engine (one per window a firing opened): a
/// resolve goes through its channel's digest exactly as a firing does, as a resolved entry.
pub(crate) async fn append(
    digests: &Digests,
    topology: &Topology,
    firings: &[NotificationTask],
    resolves: &[NotificationTask],
) -> Result<Appended, EngineError> {
    // A firing's (and a resolve's) task carries its one group (NotificationTask::for_firing, for_alert); each
    // (task, group) is one append.
    let groups: Vec<(&NotificationTask, &NotificationEvent, HeldEntry)> = firings
        .iter()
        .map(|t| (t, HeldEntry::Fired))
        .chain(resolves.iter().map(|t| (t, HeldEntry::Resolved)))
        .flat_map(|(t, entry)| t.events.iter().map(move |e| (t, e, entry)))
        .collect();
    if groups.is_empty() {
        return Ok(Appended::default());
    }
    let appends: Vec<Append<'_>> = groups
        .iter()
        .map(|(t, e, entry)| Append {
            key: DigestKey {
                project_id: &t.project_id,
                rule_id: &t.rule_id,
                channel: t.channel,
            },
            notification_id: &t.notification_id,
            event: e,
            min_period_s: t.min_period_s,
            entry: *entry,
        })
        .collect();
    let answers = digests.append_all(&appends, None).await?;
    let groups = groups.into_iter().map(|(t, _, _)| t);
    Ok(after_append(topology, groups.zip(answers)))
}

/// How long a resolved task's alert was open (the task's time minus the alert's opening), ms: what its entry in
/// a digest or a quiet release shows beside the alert's events.
pub(crate) fn open_for_ms(task: &NotificationTask) -> Option<u64> {
    let a = task.alert.as_ref()?;
    u64::try_from(task.fired_at_ms.saturating_sub(a.opened_at_ms)).ok()
}

/// Makes a resolved task's group an entry of a digest ([`open_for_ms`]).
pub(crate) fn as_resolved_entry(task: &mut NotificationTask) {
    let open = open_for_ms(task);
    for e in &mut task.events {
        e.open_for_ms = open;
    }
}

/// What the digests' answers mean for the firings ([`append`]), pure: a firing the digest says to send
/// now goes out at once, alone (once, however many of its groups were answered so); an answer that opened a
/// window (or is the redelivery of the one that did) schedules the window's flush `minPeriod` after its start.
fn after_append<'a>(
    topology: &Topology,
    answers: impl IntoIterator<Item = (&'a NotificationTask, klaxon_counter::Appended)>,
) -> Appended {
    let mut out = Appended::default();
    for (t, answer) in answers {
        tracing::debug!(
            notification_id = %crate::internal_events::text(&t.notification_id), project = %crate::internal_events::text(&t.project_id),
            rule = %crate::internal_events::text(&t.rule_id),
            channel = %t.channel, window_start_ms = answer.window_start_ms, send_now = answer.send_now,
            schedule = answer.schedule_flush, "firing routed by the channel's digest state"
        );
        if answer.send_now {
            out.send_once(t);
        } else if answer.schedule_flush {
            let flush = Flush::of_task(t, answer.window_start_ms, false);
            out.flushes
                .push((flush.message(topology), answer.flush_in(t.min_period_s)));
        }
    }
    out
}

/// Where the firings of digest channels go ([`append`]).
#[derive(Default)]
pub(crate) struct Appended {
    /// Firings of quiet channels: published at once as ordinary notifications (leading edge).
    pub send_now: Vec<NotificationTask>,
    /// Flush messages to schedule through the delay engine (one per newly opened window), with their delays.
    pub flushes: Vec<(Outgoing, Duration)>,
}

impl Appended {
    /// Adds `t` to [`Appended::send_now`] unless it is the task just added: a task answered "send now" for
    /// several of its groups goes out once, as itself (a resolve is then the ordinary resolved message, not a
    /// digest's entry: [`as_resolved_entry`] is undone).
    pub(crate) fn send_once(&mut self, t: &NotificationTask) {
        if self
            .send_now
            .last()
            .is_none_or(|s| s.notification_id != t.notification_id)
        {
            let mut t = t.clone();
            for e in &mut t.events {
                e.open_for_ms = None;
            }
            self.send_now.push(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;
    use klaxon_core::Reason;

    fn flush() -> Flush {
        Flush {
            project_id: "p".into(),
            project_name: Some("Acme".into()),
            rule_id: "r".into(),
            channel: ChannelKind::Telegram,
            endpoint: "123".into(),
            min_period_s: 60,
            severity: None,
            window_start_ms: 1_700_000_000_000,
            held: false,
        }
    }

    #[test]
    fn flush_messages_round_trip() {
        let f = flush();
        assert_eq!(Flush::parse(&f.to_json()), Ok(f.clone()));
        // the exact bytes on the wire (flush messages wait in the delay queues across versions)
        let wire = r#"{"projectId":"p","ruleId":"r","channel":"telegram","endpoint":"123","minPeriodS":60,"windowStartMs":1700000000000,"projectName":"Acme"}"#;
        assert_eq!(String::from_utf8(f.to_json()).expect("utf-8"), wire);
        assert_eq!(Flush::parse(wire.as_bytes()), Ok(f.clone()));
        let paged = Flush {
            channel: ChannelKind::Pagerduty,
            project_name: None,
            severity: Some(klaxon_core::Severity::Critical),
            ..flush()
        };
        let wire = r#"{"projectId":"p","ruleId":"r","channel":"pagerduty","endpoint":"123","minPeriodS":60,"windowStartMs":1700000000000,"severity":"critical"}"#;
        assert_eq!(String::from_utf8(paged.to_json()).expect("utf-8"), wire);
        assert_eq!(Flush::parse(wire.as_bytes()), Ok(paged));
        // what this version does not know reads as absent
        let newer = br#"{"projectId":"p","ruleId":"r","channel":"telegram","endpoint":"123","minPeriodS":60,"windowStartMs":1700000000000,"projectName":7,"severity":"fatal","more":1}"#;
        assert_eq!(
            Flush::parse(newer),
            Ok(Flush {
                project_name: None,
                ..flush()
            })
        );
        // the window's digest shows the name of the project
        assert_eq!(
            f.task(1, HeldClaim::default()).project_name.as_deref(),
            Some("Acme")
        );
        // a flush message of an earlier version has no name: its digest shows the id
        let old = br#"{"projectId":"p","ruleId":"r","channel":"telegram","endpoint":"123","minPeriodS":60,"windowStartMs":1700000000000}"#;
        let parsed = Flush::parse(old).expect("an earlier flush message");
        assert_eq!(
            parsed,
            Flush {
                project_name: None,
                ..flush()
            }
        );
        assert_eq!(parsed.task(1, HeldClaim::default()).project_name, None);
        for bad in [&b"nope"[..], br#"{"projectId":"p"}"#, br#"{"projectId":"p","ruleId":"r","channel":"fax","endpoint":"","minPeriodS":1,"windowStartMs":1}"#, br#"{"projectId":"p","ruleId":"r","channel":"email","endpoint":"","minPeriodS":0,"windowStartMs":1}"#] {
            assert!(Flush::parse(bad).is_err());
        }
    }

    #[test]
    fn digest_tasks_are_deterministic_and_sorted() {
        let ev = |g: &str, c| NotificationEvent {
            group_hash: g.into(),
            title: g.into(),
            count: c,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        };
        let f = flush();
        let fired = |events| HeldClaim {
            fired: events,
            ..HeldClaim::default()
        };
        let a = f.task(1, fired(vec![ev("a", 1), ev("b", 5), ev("c", 3)]));
        let b = f.task(2, fired(vec![ev("c", 3), ev("a", 1), ev("b", 5)]));
        assert_eq!(a.notification_id, b.notification_id);
        assert_eq!(a.events, b.events);
        assert_eq!(a.events[0].group_hash, "b");
        assert_eq!(
            a.reason,
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            }
        );
        // a window that also saw resolves lists them after what fired, in the same notification
        let with = f.task(
            3,
            HeldClaim {
                fired: vec![ev("a", 1)],
                resolved: vec![ev("b", 5)],
                more: Default::default(),
            },
        );
        assert_eq!(with.notification_id, a.notification_id);
        assert_eq!(
            with.reason,
            Reason::Digest {
                min_period_s: 60,
                resolved: 1,
                more: Default::default(),
            }
        );
        // past the list's bound: the window's counts travel with the task
        let more = klaxon_core::notification::Unlisted {
            fired: 200,
            resolved: 6,
        };
        let past = f.task(4, fired(vec![ev("a", 1)]).with_more(more));
        assert_eq!(past.unlisted(), more);
        assert_eq!(with.held_parts().map(|(f, r)| (f.len(), r.len())), Some((1, 1)));
        let mut later = flush();
        later.window_start_ms += 1;
        assert_ne!(
            later.task(1, HeldClaim::default()).notification_id,
            a.notification_id
        );
    }

    /// What the digests' answers make of a batch's digest firings: sent now (once per firing), a flush per
    /// window opened, nothing for the firings buffered into an open window.
    #[test]
    fn digest_answers_table() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let task = |id: &str, groups: &[&str]| NotificationTask {
            notification_id: id.into(),
            events: groups
                .iter()
                .map(|g| NotificationEvent {
                    group_hash: (*g).into(),
                    title: "t".into(),
                    count: 1,
                    repetition_id: None,
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                })
                .collect(),
            ..flush().task(0, HeldClaim::default())
        };
        let answer = |action: u8| klaxon_counter::Appended {
            send_now: action == 2,
            schedule_flush: action == 1,
            window_start_ms: 1_000,
            now_ms: 31_000,
        };
        let (a, b, c) = (task("a", &["g"]), task("b", &["g"]), task("c", &["g1", "g2"]));
        // (answers per (firing, group), sent now, flush delays in s)
        type Case<'t> = (Vec<(&'t NotificationTask, u8)>, Vec<&'static str>, Vec<u64>);
        let cases: Vec<Case<'_>> = vec![
            (vec![], vec![], vec![]),
            (vec![(&a, 2), (&b, 1), (&c, 0), (&c, 0)], vec!["a"], vec![30]),
            (vec![(&a, 0), (&b, 0)], vec![], vec![]),
            // a firing with two groups goes out once
            (vec![(&c, 2), (&c, 2), (&a, 1)], vec!["c"], vec![30]),
        ];
        for (answers, now, flushes) in cases {
            let got = after_append(&topology, answers.iter().map(|(t, x)| (*t, answer(*x))));
            let sent: Vec<&str> = got.send_now.iter().map(|t| t.notification_id.as_str()).collect();
            assert_eq!(sent, now);
            let waits: Vec<u64> = got.flushes.iter().map(|(_, wait)| wait.as_secs()).collect();
            assert_eq!(waits, flushes);
            for (msg, _) in &got.flushes {
                assert_eq!(msg.queue, topology.digest_flush_queue());
                let parsed = Flush::parse(&msg.body).expect("a flush message");
                assert_eq!(
                    (parsed.window_start_ms, parsed.project_name.as_deref()),
                    (1_000, Some("Acme"))
                );
            }
        }
    }
}
