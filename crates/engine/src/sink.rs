//! Where the evaluate side puts a notification: Klaxon's own `<ns>.notify.<channel>` queues (delivered by
//! `klaxon sender`), Hawk's `sender/<channel>` queues (delivered by Hawk's sender workers), or nowhere
//! (`shadow`: recorded in the delivery trail as what would have been sent, and counted).
//!
//! Hawk's shape, as its notifier publishes it (`workers/notifier/src/index.ts`, `lib/worker.ts` in
//! codex-team/hawk.workers): default exchange, queue `sender/<channelKey>`, declared by Hawk's workers with
//! `assertQueue(name)` (durable, no arguments), body
//! `{"type": "event" | "several-events", "payload": {"projectId", "ruleId", "events": [{"key", "count",
//! "repetitionId"}]}}`, `repetitionId` copied from the grouper's task, so `null` when the event has none. Klaxon
//! also marks the message persistent and sets `message_id` to the notification id (Hawk sets neither; both are
//! harmless to Hawk's sender).
//!
//! Shadow mode evaluates and counts exactly as the other outputs do — windows, first-seen marks, digests (the
//! leading edge at once, the rest when the window's `minPeriod` has passed) — and at each point where a
//! notification would be published it records a trail record with status `shadow` and counts
//! `klaxon_notifications_shadowed_total` instead. Digest windows are flushed through the namespace's own
//! `<ns>.digest.flush` queue as usual (that is Klaxon's clock, not a delivery), so the trail shows a digest when it
//! would have been sent, with what it would have held.

use klaxon_broker::{Outgoing, QueueType, Topology};
use klaxon_channels::redact_endpoint;
use klaxon_core::notification::NotificationTask;
use klaxon_core::priority::Priority;
use klaxon_core::ChannelKind;
use klaxon_store::trail::{now_ms, Record, Status, Trail};
use serde_json::{json, Map, Value};

use crate::internal_events::{AlertMessageNotSent, NotificationShadowed};
use crate::EngineError;

/// Which queues notifications go to (`--output`, `KLAXON_OUTPUT`): one definition, in core, where the route
/// reads it ([`klaxon_core::route`]).
pub use klaxon_core::route::Output;

/// Makes sure the queues `output` publishes to that the namespace's topology does not have exist (Hawk's
/// `sender/<channel>`). One that exists is used as it is, whatever `--queue-type` says; a missing one is declared
/// as Hawk's workers declare it (`assertQueue(name)`: durable, classic, no arguments), because a quorum queue
/// would refuse that plain declaration when Hawk's sender starts (RabbitMQ 3.x: `inequivalent arg
/// 'x-queue-type'`).
pub async fn declare(publisher: &klaxon_broker::Publisher, output: Output) -> Result<(), EngineError> {
    if output == Output::Hawk {
        for c in ChannelKind::ALL {
            publisher.ensure_queue(&hawk_queue(c), QueueType::Classic).await?;
        }
    }
    Ok(())
}

/// Hawk's sender queue of a channel: `sender/<channelKey>`.
pub fn hawk_queue(channel: ChannelKind) -> String {
    format!("sender/{}", channel.as_str())
}

/// Hawk's sender task for a notification: `event` for one event, `several-events` for more. `repetitionId` is
/// always there, `null` when the event has none: Hawk's notifier copies the grouper's `event.repetitionId`, which
/// the grouper sends as `null` for a first occurrence.
pub fn hawk_task(task: &NotificationTask) -> Value {
    let events: Vec<Value> = task
        .events
        .iter()
        .map(|e| {
            let mut o = Map::new();
            o.insert("key".into(), Value::from(e.group_hash.clone()));
            o.insert("count".into(), Value::from(e.count));
            o.insert(
                "repetitionId".into(),
                e.repetition_id.clone().map_or(Value::Null, Value::from),
            );
            Value::Object(o)
        })
        .collect();
    let kind = if events.len() > 1 {
        "several-events"
    } else {
        "event"
    };
    json!({
        "type": kind,
        "payload": {"projectId": task.project_id, "ruleId": task.rule_id, "events": events},
    })
}

/// Sends `task` on its way in `output`'s manner: a message to publish (returned, for the caller to publish with
/// the rest of its batch), or in shadow mode a trail record and a count, and `None`. With `--output hawk`, a
/// message of an alert's life (resolved, acknowledged, a reminder, an escalation) or a NO_EVENTS firing (about
/// the project, no event group; also in a digest or a quiet window's release) is not published — Hawk's senders
/// know only firings of event groups (`event`, `several-events`) and would send it as a new firing, or fail to
/// find its group — but counted and logged as not sent, and `None`. The worker, the digest flusher, the alert timers and the hand changes (API, console,
/// `klaxon alerts`) all go through here, so every output treats them alike.
pub fn dispatch(
    topology: &Topology,
    output: Output,
    trail: &Trail,
    task: &NotificationTask,
) -> Result<Option<Outgoing>, EngineError> {
    if output == Output::Shadow {
        NotificationShadowed { task }.emit();
        trail.record(shadow_record(task, now_ms()));
        return Ok(None);
    }
    // the route's own decision for what goes out at once (`--output hawk` cannot send every task)
    if let klaxon_core::route::Route::Dropped { reason } = klaxon_core::route::by_hand(task, output) {
        AlertMessageNotSent { task, reason }.emit();
        return Ok(None);
    }
    message(topology, output, task).map(Some)
}

/// The trail record of a notification shadow mode did not send: attempts 0, status `shadow`.
pub fn shadow_record(task: &NotificationTask, at_ms: i64) -> Record {
    Record {
        notification_id: task.notification_id.clone(),
        project_id: task.project_id.clone(),
        rule_id: task.rule_id.clone(),
        channel: task.channel.as_str().to_owned(),
        destination: redact_endpoint(task.channel, &task.endpoint),
        attempts: 0,
        status: Status::Shadow,
        last_error: None,
        fired_at_ms: task.fired_at_ms,
        at_ms,
    }
}

/// The message that carries `task` to its channel's queue in `output`'s shape; `message_id` is the
/// notification id either way. Shadow mode publishes nothing: asked anyway, it answers with Klaxon's shape (the
/// callers go through [`dispatch`], which never asks).
pub fn message(
    topology: &Topology,
    output: Output,
    task: &NotificationTask,
) -> Result<Outgoing, EngineError> {
    let (queue, body) = match output {
        // reminders and escalation steps wait in the channel's later lane, never ahead of a firing
        Output::Klaxon | Output::Shadow => (
            topology.lane_queue(task.channel, Priority::of(&task.reason).lane()),
            serde_json::to_vec(task).map_err(|e| EngineError::Encode(e.to_string()))?,
        ),
        Output::Hawk => (hawk_queue(task.channel), hawk_task(task).to_string().into_bytes()),
    };
    let mut msg = Outgoing::json(queue, body);
    msg.message_id = Some(task.notification_id.clone());
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::notification::Reason;
    use klaxon_core::NotificationEvent;

    fn task(events: usize) -> NotificationTask {
        NotificationTask {
            notification_id: "n".into(),
            project_id: "5e4ff518628a6c714515f4da".into(),
            project_name: Some("Acme".into()),
            rule_id: "5e4ff518628a6c714515f4db".into(),
            channel: ChannelKind::Slack,
            endpoint: "https://hooks.slack.com/services/T000/B000/very-secret-token".into(),
            min_period_s: 60,
            fired_at_ms: 1_700_000_000_000,
            reason: Reason::New,
            events: (0..events)
                .map(|i| NotificationEvent {
                    group_hash: format!("g{i}"),
                    title: "t".into(),
                    count: 3 + i as u64,
                    repetition_id: (i == 1).then(|| "r1".to_owned()),
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                })
                .collect(),
            text: None,
            send_at_ms: None,
            alert: None,
            severity: None,
        }
    }

    #[test]
    fn hawk_tasks_have_hawks_shape() {
        // `repetitionId` as the grouper sends it: null for an event without one; no project name (Hawk's
        // sender reads it itself)
        assert_eq!(
            hawk_task(&task(1)),
            json!({"type": "event", "payload": {"projectId": "5e4ff518628a6c714515f4da",
                "ruleId": "5e4ff518628a6c714515f4db", "events": [{"key": "g0", "count": 3, "repetitionId": null}]}})
        );
        assert_eq!(
            hawk_task(&task(2))["payload"]["events"],
            json!([{"key": "g0", "count": 3, "repetitionId": null}, {"key": "g1", "count": 4, "repetitionId": "r1"}])
        );
        assert_eq!(hawk_task(&task(2))["type"], "several-events");
        assert_eq!(hawk_queue(ChannelKind::Slack), "sender/slack");
    }

    /// Where each output puts a task: Klaxon's queue with the task itself (the project's name with it), Hawk's
    /// queue with Hawk's shape, or (shadow) no message at all; `message_id` is the notification id either way.
    #[test]
    fn each_output_puts_a_task_where_it_belongs() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let t = task(1);
        // (output, queue of the message, body's project field)
        let cases = [
            (
                Output::Klaxon,
                Some("ns.notify.slack"),
                Some(("/projectName", json!("Acme"))),
            ),
            (
                Output::Hawk,
                Some("sender/slack"),
                Some(("/payload/projectId", json!(t.project_id))),
            ),
            (Output::Shadow, None, None),
        ];
        for (output, queue, field) in cases {
            let sent = dispatch(&topology, output, &Trail::disabled(), &t).expect("dispatch");
            assert_eq!(sent.as_ref().map(|m| m.queue.as_str()), queue, "{output:?}");
            if let (Some(m), Some((pointer, want))) = (sent, field) {
                assert_eq!(m.message_id.as_deref(), Some("n"));
                let body: Value = serde_json::from_slice(&m.body).expect("json");
                assert_eq!(body.pointer(pointer), Some(&want), "{output:?}: {body}");
            }
        }
        let klaxon = message(&topology, Output::Klaxon, &t).expect("message");
        let back: NotificationTask = serde_json::from_slice(&klaxon.body).expect("a task");
        assert_eq!(back, t);
    }

    /// `--output hawk` publishes firings only: a message of an alert's life is not put in Hawk's queue (Hawk's
    /// sender would send it as a new firing), and is counted as not sent. Klaxon's output publishes it like a
    /// firing, and shadow mode records it in the trail like a firing.
    #[test]
    fn hawk_output_publishes_no_lifecycle_message_and_counts_it() {
        use klaxon_core::alert::{AlertRef, AlertState};
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let lifecycle = |reason| NotificationTask {
            reason,
            alert: Some(AlertRef {
                id: "a1e2c3d4e5f60718293a4b5c".into(),
                state: AlertState::Resolved,
                opened_at_ms: 1_699_999_000_000,
                events: 12,
                by: Some("timeout".into()),
                firing_notification_id: "f1".into(),
            }),
            ..task(1)
        };
        let reasons = [
            Reason::Resolved,
            Reason::Acknowledged,
            Reason::Reminder { number: 1, max: 2 },
            Reason::Escalation { step: 1, steps: 1 },
        ];
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for reason in reasons {
                let t = lifecycle(reason);
                assert!(
                    dispatch(&topology, Output::Hawk, &Trail::disabled(), &t)
                        .expect("dispatch")
                        .is_none(),
                    "{reason:?}"
                );
                let klaxon = dispatch(&topology, Output::Klaxon, &Trail::disabled(), &t)
                    .expect("dispatch")
                    .expect("published");
                // reminders and escalation steps wait in the channel's later lane, behind no firing
                let lane = match reason {
                    Reason::Reminder { .. } | Reason::Escalation { .. } => "ns.notify.slack.later",
                    _ => "ns.notify.slack",
                };
                assert_eq!(klaxon.queue, lane, "{reason:?}");
                let back: NotificationTask = serde_json::from_slice(&klaxon.body).expect("a task");
                assert_eq!(back, t);
                assert!(dispatch(&topology, Output::Shadow, &Trail::disabled(), &t)
                    .expect("dispatch")
                    .is_none());
            }
            // a firing that carries its alert is still published to Hawk
            let mut firing = lifecycle(Reason::New);
            firing.alert.as_mut().expect("alert").state = AlertState::Firing;
            let sent = dispatch(&topology, Output::Hawk, &Trail::disabled(), &firing).expect("dispatch");
            assert_eq!(sent.map(|m| m.queue), Some("sender/slack".to_owned()));
            // a quiet window's release of a NO_EVENTS rule lists its silence (group ""): Hawk's senders could
            // not look it up, so it is not published either; the same release of groups is
            let mut release = task(1);
            release.reason = Reason::QuietHours {
                until_ms: 1_700_000_000_000,
                fired: 1,
                resolved: 0,
                more: Default::default(),
            };
            let sent = dispatch(&topology, Output::Hawk, &Trail::disabled(), &release).expect("dispatch");
            assert!(sent.is_some());
            release.events[0].group_hash = String::new();
            let sent = dispatch(&topology, Output::Hawk, &Trail::disabled(), &release).expect("dispatch");
            assert!(sent.is_none());
        });
        let text = handle.render();
        assert_eq!(
            crate::metrics::series_value(
                &text,
                "klaxon_alert_messages_not_sent_total{reason=\"hawk_output\"}"
            ),
            Some(5.0),
            "{text}"
        );
    }

    #[test]
    fn shadow_records_say_what_would_have_been_sent_without_the_secret() {
        let r = shadow_record(&task(1), 1_700_000_000_500);
        assert_eq!(r.status, Status::Shadow);
        assert_eq!(
            (r.notification_id.as_str(), r.channel.as_str(), r.attempts),
            ("n", "slack", 0)
        );
        assert_eq!((r.fired_at_ms, r.at_ms), (1_700_000_000_000, 1_700_000_000_500));
        assert!(!r.destination.contains("very-secret-token"), "{}", r.destination);
    }
}
