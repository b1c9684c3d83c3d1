//! Quiet hours (`quietHours`) at run time: inside a rule's quiet window its firings, resolves and reminders are
//! held per (project, rule, channel) and released as **one** message per channel when the window ends. Channels
//! in `quietHoursBypass` are never held. The hold is the digest machinery ([`crate::digest`],
//! `klaxon_counter::digest`) on sibling keys, with the window's end as an explicit due time:
//!
//! ```text
//! worker:     firing in a window ──▶ Held{task, until} ──▶ Digests::hold_all (digest_append.lua + hold-until,
//!             (evaluate::route)                             `…:quiet:*` keys, entry `f:<group>`)
//!                                      opened the hold? ──▶ flush message {"held": true, windowStartMs: until}
//!                                                           ──delay engine (until − now)──▶ <ns>.digest.flush
//! timer loop: resolve / reminder due inside a window ──▶ the same hold (entry `r:<group>` / `f:<group>`)
//! flush loop: Digests::claim_held (digest_claim.lua, period 0) ──▶ one NotificationTask::for_held
//!             (Reason::QuietHours: what fired, then what resolved) ──publish, confirmed──▶ done_held ──▶ ack
//! ```
//!
//! * **Once.** Holding is idempotent per notification id (a redelivered batch or timer holds nothing twice and
//!   the redelivered opener schedules the release again); the claim is atomic across a fleet and leaves a
//!   leased record until the release is confirmed; a release's id depends only on (project, rule, channel,
//!   window end), so a recovered claim publishes the same notification and the sender drops a copy.
//! * **Nothing late, nothing dropped.** Counting goes on inside the window (the hold is after counting and
//!   after the alert opened); a hold whose window already ended on the Redis clock answers "send now"; a hold
//!   whose due time moved (the rule's windows changed, or a lost release found by the next window) is
//!   rescheduled at the new time and keeps what it held.
//! * **Reminders** due inside a window are not sent to held channels: the alert is listed, once, among what is
//!   firing in the release. **Escalation steps** due inside a window are sent at once to the step's bypassed
//!   channels and deferred for the others to the window's end (the step's timer is scheduled again then: sent
//!   if the alert is still firing; the bypassed ones are not sent twice, same ids). **Acknowledgements** and
//!   resolves by hand are sent at once: someone is awake.

use klaxon_broker::{Publisher, Topology};
use klaxon_core::evaluate::Held;
use klaxon_core::notification::NotificationTask;
use klaxon_core::oncall::QuietHours;
use klaxon_core::NotificationEvent;
use klaxon_counter::{DigestKey, Digests, HeldClaim, HeldEntry, Hold};

use crate::digest::{Appended, DigestDeps, Flush};
use crate::internal_events::{QuietHeld, QuietReleased, RedisFailed};
use crate::{sink, EngineError};

/// Holds `held` (firing tasks of channels inside a quiet window) in one Redis round trip, as `entry`, and says
/// which go out now after all (their window ended meanwhile) and which releases to schedule.
pub(crate) async fn hold(
    digests: &Digests,
    topology: &Topology,
    held: &[Held],
    entry: HeldEntry,
) -> Result<Appended, EngineError> {
    if held.is_empty() {
        return Ok(Appended::default());
    }
    // a firing's or a lifecycle message's task carries one group; each (task, group) is one hold, a resolve's
    // with how long its alert was open (the release shows it)
    let groups: Vec<(&Held, NotificationEvent)> = held
        .iter()
        .flat_map(|h| {
            let open = (entry == HeldEntry::Resolved)
                .then(|| crate::digest::open_for_ms(&h.task))
                .flatten();
            h.task.events.iter().map(move |e| {
                let mut e = e.clone();
                e.open_for_ms = open;
                (h, e)
            })
        })
        .collect();
    let holds: Vec<Hold<'_>> = groups
        .iter()
        .map(|(h, e)| Hold {
            key: DigestKey {
                project_id: &h.task.project_id,
                rule_id: &h.task.rule_id,
                channel: h.task.channel,
            },
            notification_id: &h.task.notification_id,
            event: e,
            entry,
            until_ms: h.until_ms,
        })
        .collect();
    let answers = digests
        .hold_all(&holds, None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    for (h, _) in &groups {
        QuietHeld { task: &h.task, entry }.emit();
    }
    Ok(after_hold(
        topology,
        groups.into_iter().map(|(h, _)| h).zip(answers),
    ))
}

/// What the holds' answers mean, pure: a task whose window already ended goes out now (once); an answer that
/// opened the hold (or moved it, or is the redelivery of the one that did) schedules its release at the due
/// time.
fn after_hold<'a>(
    topology: &Topology,
    answers: impl IntoIterator<Item = (&'a Held, klaxon_counter::Appended)>,
) -> Appended {
    let mut out = Appended::default();
    for (h, answer) in answers {
        let t = &h.task;
        if answer.send_now {
            out.send_once(t);
        } else if answer.schedule_flush {
            let flush = Flush::of_task(t, answer.window_start_ms, true);
            // due at the quiet window's end itself (no digest period after it)
            out.flushes.push((flush.message(topology), answer.flush_in(0)));
        }
    }
    out
}

/// Splits lifecycle tasks (a resolve, a reminder) of a rule with `quiet` hours, happening at `at_ms`: those held
/// (their channel is inside a window and not bypassed) and those sent now. Pure.
pub(crate) fn split(
    tasks: Vec<NotificationTask>,
    quiet: Option<&QuietHours>,
    at_ms: i64,
) -> (Vec<NotificationTask>, Vec<Held>) {
    let mut now = Vec::with_capacity(tasks.len());
    let mut held = Vec::new();
    for task in tasks {
        match quiet.and_then(|q| q.held_until(task.channel, at_ms)) {
            Some(until_ms) => held.push(Held { task, until_ms }),
            None => now.push(task),
        }
    }
    (now, held)
}

/// Holds the lifecycle tasks of `split` that are held (resolved: [`HeldEntry::Resolved`], a reminder:
/// [`HeldEntry::Fired`]) and schedules their releases; returns the tasks to send now (the others of `split`
/// and any whose window ended meanwhile).
pub(crate) async fn hold_lifecycle(
    digests: &Digests,
    topology: &Topology,
    publisher: &Publisher,
    (mut now, held): (Vec<NotificationTask>, Vec<Held>),
    entry: HeldEntry,
) -> Result<Vec<NotificationTask>, EngineError> {
    let appended = hold(digests, topology, &held, entry).await?;
    if !appended.flushes.is_empty() {
        publisher
            .publish_delayed(&topology.delay(), &appended.flushes)
            .await?;
    }
    now.extend(appended.send_now);
    Ok(now)
}

/// Releases a claimed hold: one message of what fired and what resolved inside the window (nothing when it
/// held nothing), then completes the claim. Returns once that is durable.
pub(crate) async fn release(
    deps: &DigestDeps,
    publisher: &Publisher,
    f: &Flush,
    now_ms: i64,
    events: Vec<NotificationEvent>,
) -> Result<(), EngineError> {
    let mut held = HeldClaim::of(events);
    if deps.output == sink::Output::Hawk {
        // Hawk's senders know firings only (docs/rules.md): the resolves are tracked, not sent
        held.resolved.clear();
    }
    if !held.is_empty() {
        let (fired, resolved) = (held.fired.len(), held.resolved.len());
        let task = NotificationTask::for_held(&f.window(), now_ms, held.fired, held.resolved);
        // shadow mode: recorded (and counted) by dispatch instead of published
        if let Some(msg) = sink::dispatch(&deps.topology, deps.output, &deps.trail, &task)? {
            publisher.publish_all(&[msg]).await?;
            QuietReleased {
                task: &task,
                fired,
                resolved,
            }
            .emit();
        }
    }
    deps.digests
        .done_held(&f.key(), f.window_start_ms)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    Ok(())
}

/// The messages of a batch of escalation tasks due at `at_ms` under `quiet`: those sent now, and whether some
/// were deferred (then the step's timer is scheduled again at the returned time). Pure.
pub(crate) fn defer_escalation(
    tasks: Vec<NotificationTask>,
    quiet: Option<&QuietHours>,
    at_ms: i64,
) -> (Vec<NotificationTask>, Option<i64>) {
    let (now, held) = split(tasks, quiet, at_ms);
    let until = held.iter().map(|h| h.until_ms).max();
    (now, until)
}

/// The release message of `t`'s channel's hold due at `until_ms`.
#[cfg(test)]
fn release_message(topology: &Topology, t: &NotificationTask, until_ms: i64) -> klaxon_broker::Outgoing {
    Flush::of_task(t, until_ms, true).message(topology)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;
    use klaxon_core::{ChannelKind, Reason};
    use std::time::Duration;

    fn quiet() -> QuietHours {
        let raw = serde_json::json!({"_id": "a0000000000000000000000a", "isEnabled": true,
            "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/w", "minPeriod": 0}},
            // 2023-11-14 (a Tuesday) 22:00-23:00 UTC
            "quietHours": [{"days": ["tue"], "from": "22:00", "to": "23:00", "timezone": "UTC"}],
            "quietHoursBypass": ["pagerduty"]});
        let (rule, _) = klaxon_core::parse_rule_value(&raw).expect("a rule");
        rule.quiet_hours
    }

    const END: i64 = 1_700_002_800_000; // 2023-11-14T23:00:00Z

    fn task(id: &str, channel: ChannelKind) -> NotificationTask {
        NotificationTask {
            notification_id: id.into(),
            project_id: "p".into(),
            project_name: None,
            rule_id: "r".into(),
            channel,
            endpoint: "e".into(),
            min_period_s: 0,
            fired_at_ms: 0,
            reason: Reason::Resolved,
            events: vec![NotificationEvent {
                group_hash: "g".into(),
                title: "t".into(),
                count: 3,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            text: None,
            send_at_ms: None,
            severity: None,
            alert: None,
        }
    }

    /// Inside the window the channels that do not bypass are held until its end; outside nothing is.
    #[test]
    fn lifecycle_tasks_split_by_the_window_and_the_bypass() {
        let q = quiet();
        let tasks = || {
            vec![
                task("w", ChannelKind::Webhook),
                task("pd", ChannelKind::Pagerduty),
            ]
        };
        // (at, sent now, held until)
        let cases = [
            (END - 1, vec!["pd"], vec![END]),
            (END, vec!["w", "pd"], vec![]),
            (END - 3_600_000, vec!["pd"], vec![END]),
            (END - 3_600_001, vec!["w", "pd"], vec![]),
        ];
        for (at, now, until) in cases {
            let (sent, held) = split(tasks(), Some(&q), at);
            let sent: Vec<&str> = sent.iter().map(|t| t.notification_id.as_str()).collect();
            assert_eq!(sent, now, "at {at}");
            let got: Vec<i64> = held.iter().map(|h| h.until_ms).collect();
            assert_eq!(got, until, "at {at}");
            let (esc_now, deferred) = defer_escalation(tasks(), Some(&q), at);
            assert_eq!(esc_now.len(), now.len());
            assert_eq!(deferred, until.first().copied());
        }
        // no rule (deleted, disabled): nothing held
        let (sent, held) = split(tasks(), None, END - 1);
        assert_eq!((sent.len(), held.len()), (2, 0));
    }

    /// A hold's answers: sent now once when the window ended meanwhile, a release scheduled at the due time
    /// for the one that opened (or moved) the hold, nothing for the others.
    #[test]
    fn hold_answers_table() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let held = |id: &str| Held {
            task: task(id, ChannelKind::Webhook),
            until_ms: END,
        };
        let (a, b, c) = (held("a"), held("b"), held("c"));
        let answer = |action: u8| klaxon_counter::Appended {
            send_now: action == 2,
            schedule_flush: action == 1,
            window_start_ms: if action == 2 { END + 5 } else { END },
            now_ms: END - 30_000,
        };
        let got = after_hold(
            &topology,
            [(&a, answer(1)), (&b, answer(0)), (&c, answer(2)), (&c, answer(2))],
        );
        let sent: Vec<&str> = got.send_now.iter().map(|t| t.notification_id.as_str()).collect();
        assert_eq!(sent, ["c"]);
        assert_eq!(got.flushes.len(), 1);
        let (msg, wait) = &got.flushes[0];
        assert_eq!(*wait, Duration::from_secs(30));
        assert_eq!(msg.queue, topology.digest_flush_queue());
        let body: serde_json::Value = serde_json::from_slice(&msg.body).expect("json");
        assert_eq!(
            (body["held"].as_bool(), body["windowStartMs"].as_i64()),
            (Some(true), Some(END))
        );
        assert!(msg.message_id.as_deref().is_some_and(|m| m.starts_with("quiet:")));
        assert_eq!(
            msg.message_id,
            release_message(&topology, &a.task, END).message_id
        );
    }
}
