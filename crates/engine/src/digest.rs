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
//!   whose rule now has `minPeriod > 0` ([`split_resolves`]) is appended as a resolved entry (`r:<group>`; a
//!   firing is `f:<group>`): on a quiet channel it goes out at once as the ordinary resolved message and starts
//!   the quiet period, inside `minPeriod` it joins the window, which then lists what fired and what resolved
//!   (a group that fired and resolved in one window is listed in both parts). PagerDuty is never given a
//!   resolve to digest (its incident must close on the firing's `dedup_key`), nor is `--output hawk` (Hawk's
//!   senders know firings only). Acknowledgements, reminders, escalations and resolves by hand are sent at once:
//!   they are steps of a conversation someone is having, not events to coalesce.
//!
//! Fault injection (cargo feature `fault-injection`, tests only): `DigestDeps::faults` can make the flush
//! loop abort the process right after a successful claim, before publishing (used by the
//! kill-between-claim-and-publish test). Without the feature the field and the check do not exist.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::{set_aside, Delivery, Outgoing, Publisher, Topology};
use klaxon_core::notification::{notification_id, DigestWindow, NotificationTask};
use klaxon_core::{ChannelKind, NotificationEvent};
use klaxon_counter::{Append, Claim, DigestKey, Digests, HeldClaim, HeldEntry};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::internal_events::{DigestPublished, RedisFailed};
use crate::{sink, EngineError};

/// The environment variable the binary reads into [`Faults::crash_after_claim`] when built with the
/// `fault-injection` feature (see the module docs).
#[cfg(feature = "fault-injection")]
pub const CRASH_AFTER_CLAIM_ENV: &str = "KLAXON_TEST_CRASH_AFTER_CLAIM";

/// Faults a test can inject into the flush loop (feature `fault-injection`; never in production builds).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Abort the process right after a successful claim, before publishing.
    pub crash_after_claim: bool,
}

/// What the digest flush loop needs.
#[derive(Clone)]
pub struct DigestDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// Digest state in Redis.
    pub digests: Digests,
    /// Unacked flush messages.
    pub prefetch: u16,
    /// Where digests go (`--output`).
    pub output: sink::Output,
    /// Where shadow mode records the digests it would have sent ([`klaxon_store::Trail::disabled`] otherwise).
    pub trail: klaxon_store::Trail,
    /// Injected faults (tests only).
    #[cfg(feature = "fault-injection")]
    pub faults: Faults,
}

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

    fn parse(body: &[u8]) -> Result<Self, String> {
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
    fn task(&self, fired_at_ms: i64, claim: HeldClaim) -> NotificationTask {
        NotificationTask::for_digest(&self.window(), fired_at_ms, claim.fired, claim.resolved)
    }
}

/// Appends the firings of digest channels (`min_period_s > 0`) to their digests, all in one Redis round trip,
/// and says which go out now (leading edge) and which flush messages to publish through the delay engine (one
/// per window a firing opened). Call before acking the firings' events.
pub(crate) async fn append_firings(
    digests: &Digests,
    topology: &Topology,
    firings: &[NotificationTask],
) -> Result<Appended, EngineError> {
    append(digests, topology, firings, &[]).await
}

/// [`append_firings`] with resolves ([`split_resolves`]) beside the firings, in the same round trip: a resolve
/// goes through its channel's digest exactly as a firing does, as a resolved entry.
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
fn as_resolved_entry(task: &mut NotificationTask) {
    let open = open_for_ms(task);
    for e in &mut task.events {
        e.open_for_ms = open;
    }
}

/// Splits an alert's resolved tasks (one per channel that delivered its firing, `klaxon_core::alert::
/// lifecycle_tasks`) into those sent now and those that go through their channel's digest: a task whose
/// `min_period_s(task)` (its rule's `minPeriod` for its channel now; 0 when the rule or the channel is gone)
/// is positive, except PagerDuty (its incident closes on the firing's `dedup_key`, at once) and with
/// `--output hawk` (Hawk's senders know firings only: the resolve is counted as not sent, as before). The
/// digested tasks carry the channel's period, as a firing's do. Any other task is sent now. Pure.
pub(crate) fn split_resolves(
    tasks: Vec<NotificationTask>,
    output: sink::Output,
    min_period_s: impl Fn(&NotificationTask) -> u64,
) -> (Vec<NotificationTask>, Vec<NotificationTask>) {
    let mut now = Vec::with_capacity(tasks.len());
    let mut digested = Vec::new();
    for mut task in tasks {
        let period = min_period_s(&task);
        if period > 0
            && task.reason == klaxon_core::Reason::Resolved
            && task.channel != ChannelKind::Pagerduty
            && output != sink::Output::Hawk
        {
            task.min_period_s = period;
            as_resolved_entry(&mut task);
            digested.push(task);
        } else {
            now.push(task);
        }
    }
    (now, digested)
}

/// What the digests' answers mean for the firings ([`append_firings`]), pure: a firing the digest says to send
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

/// Where the firings of digest channels go ([`append_firings`]).
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

/// Runs the digest flush loop until `shutdown`, reconnecting after failures.
pub async fn run(deps: DigestDeps, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    #[cfg(feature = "fault-injection")]
    if deps.faults.crash_after_claim {
        tracing::warn!(
            env = CRASH_AFTER_CLAIM_ENV,
            "test hook on: the process aborts after its first claim"
        );
    }
    crate::supervise("digest", ready, shutdown, |ready, shutdown| {
        let deps = deps.clone();
        async move { session(&deps, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: &DigestDeps,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let queue = crate::EachQueue {
        role: "digest",
        amqp_url: &deps.amqp_url,
        topology: &deps.topology,
        queue: deps.topology.digest_flush_queue(),
        prefetch: deps.prefetch,
        output: deps.output,
    };
    crate::consume_each(queue, ready, shutdown, deps).await
}

impl crate::HandleEach for DigestDeps {
    fn handle<'a>(
        &'a self,
        publisher: &'a Publisher,
        delivery: &'a Delivery,
    ) -> impl std::future::Future<Output = Result<(), EngineError>> + Send + 'a {
        flush(self, publisher, delivery)
    }
}

/// Handles one flush message; returns once its outcome is durable (then the caller acks it).
async fn flush(deps: &DigestDeps, publisher: &Publisher, delivery: &Delivery) -> Result<(), EngineError> {
    let f = match Flush::parse(&delivery.data) {
        Ok(f) => f,
        Err(reason) => {
            let reason = format!("not a digest flush message: {reason}");
            tracing::warn!(reason = %reason, "digest flush message set aside");
            publisher
                .publish_all(&[set_aside(delivery, deps.topology.dead_queue(), &reason)])
                .await?;
            return Ok(());
        }
    };
    let claim = if f.held {
        deps.digests.claim_held(&f.key(), f.window_start_ms, None).await
    } else {
        deps.digests
            .claim(&f.key(), f.window_start_ms, f.min_period_s, None)
            .await
    };
    let claim = claim.inspect_err(|_| RedisFailed.emit())?;
    match claim {
        Claim::Gone => {
            tracing::debug!(project = %crate::internal_events::text(&f.project_id), rule = %crate::internal_events::text(&f.rule_id), channel = %f.channel,
                window_start_ms = f.window_start_ms, "digest window already flushed");
            Ok(())
        }
        Claim::Busy(wait) | Claim::Early(wait) => {
            tracing::info!(project = %crate::internal_events::text(&f.project_id), rule = %crate::internal_events::text(&f.rule_id), channel = %f.channel,
                window_start_ms = f.window_start_ms, retry_in_ms = wait.as_millis() as u64,
                "digest window not ready to flush; rescheduled");
            publisher
                .publish_delayed(&deps.topology.delay(), &[(f.message(&deps.topology), wait)])
                .await?;
            Ok(())
        }
        Claim::Claimed { now_ms, events } => {
            #[cfg(feature = "fault-injection")]
            if deps.faults.crash_after_claim {
                tracing::error!(
                    env = CRASH_AFTER_CLAIM_ENV,
                    "test hook: aborting between claim and publish"
                );
                std::process::abort();
            }
            if f.held {
                crate::quiet::release(deps, publisher, &f, now_ms, events).await?;
                return Ok(());
            }
            let mut claim = HeldClaim::of(events);
            if deps.output == sink::Output::Hawk {
                // Hawk's senders know firings only: no resolve is appended then, and none is sent
                claim.resolved.clear();
            }
            if !claim.is_empty() {
                let task = f.task(now_ms, claim);
                // shadow mode: recorded (and counted) by dispatch instead of published
                if let Some(msg) = sink::dispatch(&deps.topology, deps.output, &deps.trail, &task)? {
                    publisher.publish_all(&[msg]).await?;
                    DigestPublished {
                        task: &task,
                        window_start_ms: f.window_start_ms,
                    }
                    .emit();
                }
            }
            deps.digests
                .done(&f.key(), f.window_start_ms)
                .await
                .inspect_err(|_| RedisFailed.emit())?;
            Ok(())
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
            resolved: vec![],
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
                resolved: 0
            }
        );
        // a window that also saw resolves lists them after what fired, in the same notification
        let with = f.task(
            3,
            HeldClaim {
                fired: vec![ev("a", 1)],
                resolved: vec![ev("b", 5)],
            },
        );
        assert_eq!(with.notification_id, a.notification_id);
        assert_eq!(
            with.reason,
            Reason::Digest {
                min_period_s: 60,
                resolved: 1
            }
        );
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

    /// Which resolved tasks go through their channel's digest: a channel with a digest period now, except
    /// PagerDuty and Hawk's output; anything but a resolve is sent now; the digested ones carry the period.
    #[test]
    fn resolves_split_by_the_channels_digest_period() {
        let task = |channel, reason| NotificationTask {
            notification_id: format!("{channel}"),
            channel,
            reason,
            min_period_s: 0,
            fired_at_ms: 61_000,
            events: vec![NotificationEvent {
                group_hash: "g".into(),
                title: "t".into(),
                count: 3,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            alert: Some(klaxon_core::alert::AlertRef {
                id: "a".repeat(24),
                state: klaxon_core::alert::AlertState::Resolved,
                opened_at_ms: 1_000,
                events: 3,
                by: Some("timeout".into()),
                firing_notification_id: "f".into(),
            }),
            ..flush().task(0, HeldClaim::default())
        };
        let period = |t: &NotificationTask| match t.channel {
            ChannelKind::Slack | ChannelKind::Pagerduty | ChannelKind::Webhook => 60,
            _ => 0,
        };
        let tasks = || {
            vec![
                task(ChannelKind::Slack, Reason::Resolved),
                task(ChannelKind::Pagerduty, Reason::Resolved),
                task(ChannelKind::Email, Reason::Resolved),
                task(ChannelKind::Webhook, Reason::Acknowledged),
            ]
        };
        let ids = |v: &[NotificationTask]| v.iter().map(|t| t.notification_id.clone()).collect::<Vec<_>>();
        // (output, sent now, digested)
        let cases = [
            (
                sink::Output::Klaxon,
                vec!["pagerduty", "email", "webhook"],
                vec!["slack"],
            ),
            (
                sink::Output::Shadow,
                vec!["pagerduty", "email", "webhook"],
                vec!["slack"],
            ),
            (
                sink::Output::Hawk,
                vec!["slack", "pagerduty", "email", "webhook"],
                vec![],
            ),
        ];
        for (output, now, digested) in cases {
            let (n, d) = split_resolves(tasks(), output, period);
            assert_eq!(
                (ids(&n), ids(&d)),
                (
                    now.iter().map(|s| s.to_string()).collect(),
                    digested.iter().map(|s| s.to_string()).collect()
                ),
                "{output:?}"
            );
            assert!(d.iter().all(|t| t.min_period_s == 60));
            assert!(n.iter().all(|t| t.min_period_s == 0));
            // a digested resolve's entry keeps how long its alert was open; one sent now is itself again
            assert!(d.iter().all(|t| t.events[0].open_for_ms == Some(60_000)));
            assert!(n.iter().all(|t| t.events[0].open_for_ms.is_none()));
            let mut sent = Appended::default();
            for t in &d {
                sent.send_once(t);
            }
            assert!(sent.send_now.iter().all(|t| t.events[0].open_for_ms.is_none()));
        }
        // the rule is gone (no periods): everything now
        let (n, d) = split_resolves(tasks(), sink::Output::Klaxon, |_| 0);
        assert_eq!((n.len(), d.len()), (4, 0));
    }
}
