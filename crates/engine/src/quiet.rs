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
//!             (Reason::QuietHours: what fired, then what resolved) ──outbox──▶ done_held ──▶ ack
//!             (crate::flushes)
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

use klaxon_broker::Topology;
use klaxon_core::evaluate::Held;
use klaxon_core::NotificationEvent;
use klaxon_counter::{DigestKey, Digests, HeldEntry, Hold};

use crate::digest::{Appended, Flush};
use crate::internal_events::{QuietHeld, RedisFailed};
use crate::EngineError;

/// Holds `held` (tasks of channels inside a quiet window, each as its entry: a firing or a reminder is what
/// fired, a resolve what resolved) in one Redis round trip, and says which go out now after all (their window
/// ended meanwhile) and which releases to schedule.
pub(crate) async fn hold(
    digests: &Digests,
    topology: &Topology,
    held: &[(Held, HeldEntry)],
) -> Result<Appended, EngineError> {
    if held.is_empty() {
        return Ok(Appended::default());
    }
    // a firing's or a lifecycle message's task carries one group; each (task, group) is one hold, a resolve's
    // with how long its alert was open (the release shows it)
    let groups: Vec<(&Held, NotificationEvent, HeldEntry)> = held
        .iter()
        .flat_map(|(h, entry)| {
            let entry = *entry;
            let open = (entry == HeldEntry::Resolved)
                .then(|| crate::digest::open_for_ms(&h.task))
                .flatten();
            h.task.events.iter().map(move |e| {
                let mut e = e.clone();
                e.open_for_ms = open;
                (h, e, entry)
            })
        })
        .collect();
    // as the trail shows it: the listing of held messages (`klaxon deliveries list`) keeps no secret
    let destinations: Vec<String> = groups
        .iter()
        .map(|(h, _, _)| klaxon_channels::redact_endpoint(h.task.channel, &h.task.endpoint))
        .collect();
    let holds: Vec<Hold<'_>> = groups
        .iter()
        .zip(&destinations)
        .map(|((h, e, entry), destination)| Hold {
            key: DigestKey {
                project_id: &h.task.project_id,
                rule_id: &h.task.rule_id,
                channel: h.task.channel,
            },
            notification_id: &h.task.notification_id,
            event: e,
            entry: *entry,
            until_ms: h.until_ms,
            destination,
            alert_id: h.task.alert.as_ref().map(|a| a.id.as_str()),
        })
        .collect();
    let answers = digests
        .hold_all(&holds, None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    for (h, _, entry) in &groups {
        QuietHeld {
            task: &h.task,
            entry: *entry,
        }
        .emit();
    }
    Ok(after_hold(
        topology,
        groups.into_iter().map(|(h, _, _)| h).zip(answers),
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

/// The release message of `t`'s channel's hold due at `until_ms`.
#[cfg(test)]
fn release_message(
    topology: &Topology,
    t: &klaxon_core::notification::NotificationTask,
    until_ms: i64,
) -> klaxon_broker::Outgoing {
    Flush::of_task(t, until_ms, true).message(topology)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use klaxon_broker::QueueType;
    use klaxon_core::notification::NotificationTask;
    use klaxon_core::{ChannelKind, Reason};
    use std::time::Duration;

    const END: i64 = 1_700_002_800_000; // 2023-11-14T23:00:00Z

    pub(crate) fn task(id: &str, channel: ChannelKind) -> NotificationTask {
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
