//! Where the evaluate side puts a notification: Klaxon's own `<ns>.notify.<channel>` queues (delivered by
//! `klaxon sender`), or Hawk's `sender/<channel>` queues (delivered by Hawk's sender workers).
//!
//! Hawk's shape, as its notifier publishes it (`workers/notifier/src/index.ts`, `lib/worker.ts` in
//! codex-team/hawk.workers): default exchange, queue `sender/<channelKey>`, declared by Hawk's workers with
//! `assertQueue(name)` (durable, no arguments), body
//! `{"type": "event" | "several-events", "payload": {"projectId", "ruleId", "events": [{"key", "count",
//! "repetitionId"?}]}}`. Klaxon also marks the message persistent and sets `message_id` to the notification id
//! (Hawk sets neither; both are harmless to Hawk's sender).

use std::str::FromStr;

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::notification::NotificationTask;
use klaxon_core::ChannelKind;
use serde_json::{json, Map, Value};

use crate::EngineError;

/// Which queues notifications go to (`--output`, `KLAXON_OUTPUT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    /// `<ns>.notify.<channel>`: Klaxon's senders deliver (the default).
    #[default]
    Klaxon,
    /// `sender/<channel>`: Hawk's sender tasks, for Hawk's sender workers.
    Hawk,
}

impl FromStr for Output {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "klaxon" => Ok(Output::Klaxon),
            "hawk" => Ok(Output::Hawk),
            other => Err(format!("unknown output `{other}` (expected `klaxon` or `hawk`)")),
        }
    }
}

/// Declares the queues `output` publishes to that the namespace's topology does not (Hawk's `sender/<channel>`).
pub async fn declare(publisher: &klaxon_broker::Publisher, output: Output) -> Result<(), EngineError> {
    if output == Output::Hawk {
        for c in ChannelKind::ALL {
            publisher.declare_plain(&hawk_queue(c)).await?;
        }
    }
    Ok(())
}

/// Hawk's sender queue of a channel: `sender/<channelKey>`.
pub fn hawk_queue(channel: ChannelKind) -> String {
    format!("sender/{}", channel.as_str())
}

/// Hawk's sender task for a notification: `event` for one event, `several-events` for more.
pub fn hawk_task(task: &NotificationTask) -> Value {
    let events: Vec<Value> = task
        .events
        .iter()
        .map(|e| {
            let mut o = Map::new();
            o.insert("key".into(), Value::from(e.group_hash.clone()));
            o.insert("count".into(), Value::from(e.count));
            if let Some(rep) = &e.repetition_id {
                o.insert("repetitionId".into(), Value::from(rep.clone()));
            }
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

/// The message that carries `task` to its channel's queue in `output`'s shape; `message_id` is the
/// notification id either way.
pub fn message(
    topology: &Topology,
    output: Output,
    task: &NotificationTask,
) -> Result<Outgoing, EngineError> {
    let (queue, body) = match output {
        Output::Klaxon => (
            topology.notify_queue(task.channel),
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
            rule_id: "5e4ff518628a6c714515f4db".into(),
            channel: ChannelKind::Slack,
            endpoint: "https://hooks".into(),
            min_period_s: 60,
            fired_at_ms: 1,
            reason: Reason::New,
            events: (0..events)
                .map(|i| NotificationEvent {
                    group_hash: format!("g{i}"),
                    title: "t".into(),
                    count: 3 + i as u64,
                    repetition_id: (i == 1).then(|| "r1".to_owned()),
                })
                .collect(),
            text: None,
            send_at_ms: None,
        }
    }

    #[test]
    fn outputs_parse() {
        assert_eq!("hawk".parse(), Ok(Output::Hawk));
        assert_eq!("klaxon".parse(), Ok(Output::Klaxon));
        assert!("Hawk".parse::<Output>().is_err());
    }

    #[test]
    fn hawk_tasks_have_hawks_shape() {
        assert_eq!(
            hawk_task(&task(1)),
            json!({"type": "event", "payload": {"projectId": "5e4ff518628a6c714515f4da",
                "ruleId": "5e4ff518628a6c714515f4db", "events": [{"key": "g0", "count": 3}]}})
        );
        assert_eq!(
            hawk_task(&task(2))["payload"]["events"],
            json!([{"key": "g0", "count": 3}, {"key": "g1", "count": 4, "repetitionId": "r1"}])
        );
        assert_eq!(hawk_task(&task(2))["type"], "several-events");
        assert_eq!(hawk_queue(ChannelKind::Slack), "sender/slack");
    }
}
