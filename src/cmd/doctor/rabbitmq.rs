//! The **rabbitmq** and **queue** lines: reachable, the depth and consumers of the namespace's queues, Hawk's
//! `sender/<channel>` queues and the **alert messages** line with `--output hawk`.

use std::time::Duration;

use klaxon_broker::{Broker, BrokerError, QueueDepth, QueueType, Topology, QUEUE_DECLARE_PASSIVE};
use klaxon_core::ChannelKind;
use klaxon_engine::sink::{hawk_queue, Output};

use super::{check, endpoint, Check, Status};
use crate::cli::GlobalOpts;

pub(super) async fn rabbit_checks(
    global: &GlobalOpts,
    notify_output: Output,
    t: Duration,
) -> (Vec<Check>, Option<QueueDepth>) {
    let at = global
        .amqp_url
        .split(',')
        .map(endpoint)
        .collect::<Vec<_>>()
        .join(",");
    let broker = match Broker::connect_as(&global.amqp_url, t, "doctor").await {
        Ok(b) => b,
        Err(e) => return (vec![check(Status::Fail, "rabbitmq", format!("{at}: {e}"))], None),
    };
    let mut out = vec![check(Status::Ok, "rabbitmq", format!("{at}: connected"))];
    // The queue type only matters for declaring, which a passive declare does not do.
    let topology = Topology::new(&global.namespace, &global.events_queue(), QueueType::Classic)
        .with_shards(global.events_shards);
    let (events_check, events) = queue_check(&broker, &topology, topology.events_queue(), t).await;
    out.push(events_check);
    if topology.sharded() {
        out.extend(super::shards::shard_checks(global, &broker, &topology, t).await);
    }
    // each channel's main lane and its later lane (reminders, escalation steps, endpoint-held tasks)
    let mut queues: Vec<String> = ChannelKind::ALL
        .iter()
        .flat_map(|k| [topology.notify_queue(*k), topology.later_queue(*k)])
        .collect();
    queues.push(topology.dead_queue());
    queues.push(topology.invalid_queue());
    for q in queues {
        out.push(queue_check(&broker, &topology, &q, t).await.0);
    }
    if notify_output == Output::Hawk {
        for kind in ChannelKind::ALL {
            out.push(hawk_queue_check(&broker, kind, t).await);
        }
    }
    broker.close().await;
    (out, events)
}

/// A queue's depth by passive declare, or the check that says why there is none.
async fn depth(broker: &Broker, name: &str, queue: &str, t: Duration) -> Result<Option<QueueDepth>, Check> {
    match tokio::time::timeout(t, broker.queue_depth(queue)).await {
        Err(_) => Err(check(Status::Fail, name, "no answer in time")),
        Ok(Ok(q)) => Ok(q),
        // The declare's own error, as the check has always shown it.
        Ok(Err(BrokerError::Amqp {
            op: QUEUE_DECLARE_PASSIVE,
            source,
        })) => Err(check(Status::Fail, name, source.to_string())),
        Ok(Err(e)) => Err(check(Status::Fail, name, e.to_string())),
    }
}

async fn queue_check(
    broker: &Broker,
    topology: &Topology,
    queue: &str,
    t: Duration,
) -> (Check, Option<QueueDepth>) {
    let name = format!("queue {queue}");
    let q = match depth(broker, &name, queue, t).await {
        Err(c) => return (c, None),
        Ok(None) => {
            return (
                check(
                    Status::Warn,
                    name,
                    "not declared yet (a klaxon process declares it when it starts)",
                ),
                None,
            )
        }
        Ok(Some(q)) => q,
    };
    let (messages, consumers) = (q.messages, q.consumers);
    let detail = format!("{messages} messages, {consumers} consumers");
    let c = if messages > 0 && queue == topology.dead_queue() {
        check(
            Status::Warn,
            name,
            format!("{detail}: dead-lettered, see `klaxon dead list`"),
        )
    } else if messages > 0 && queue == topology.invalid_queue() {
        check(
            Status::Warn,
            name,
            format!("{detail}: invalid events set aside (reason in header x-klaxon-error)"),
        )
    } else {
        check(Status::Ok, name, detail)
    };
    (c, Some(q))
}

/// With `--output hawk`, what happens to the messages of an alert's life: tracked, not sent.
pub(super) fn alert_messages_check(notify_output: Output) -> Option<Check> {
    (notify_output == Output::Hawk).then(|| {
        check(
            Status::Ok,
            "alert messages",
            "--output hawk: alerts are tracked (API, CLI, console) but only firings are published; resolves, \
             acknowledgements, reminders and escalations are not sent (Hawk's senders know no such task), only \
             counted in klaxon_alert_messages_not_sent_total{reason=\"hawk_output\"}; --output klaxon sends them",
        )
    })
}

/// With `--output hawk` (a cut-over from Hawk's notifier): how to know when Hawk's grouper stops sending, and
/// what NO_EVENTS firings do in this output.
pub(super) fn no_events_check(notify_output: Output) -> Option<Check> {
    (notify_output == Output::Hawk).then(|| {
        check(
            Status::Ok,
            "no events",
            "to know when Hawk's grouper stops sending (the cut-over's blind spot), give busy projects a NO_EVENTS \
             rule (`klaxon rules add --project P --no-events 1h …`); with --output hawk its firings open alerts \
             (`klaxon alerts list`, klaxon_no_events_timers_total{outcome=\"fired\"}) but are not published: Hawk's \
             senders know only event groups",
        )
    })
}

/// With `--output hawk`: Hawk's `sender/<channel>` queue has a consumer (Hawk's sender worker of that channel).
async fn hawk_queue_check(broker: &Broker, kind: ChannelKind, t: Duration) -> Check {
    let queue = hawk_queue(kind);
    let name = format!("queue {queue}");
    match depth(broker, &name, &queue, t).await {
        Err(c) => c,
        Ok(None) => check(
            Status::Warn,
            name,
            format!(
                "not declared: Hawk's {kind} sender has not run here (a klaxon worker with --output hawk declares \
                 it; its tasks then wait for that sender)"
            ),
        ),
        Ok(Some(q)) if q.consumers == 0 => check(
            Status::Warn,
            name,
            format!(
                "{} messages, 0 consumers: Hawk's {kind} sender is not running, --output hawk's tasks pile up \
                 undelivered",
                q.messages
            ),
        ),
        Ok(Some(q)) => check(
            Status::Ok,
            name,
            format!("{} messages, {} consumers", q.messages, q.consumers),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hawk_output_says_alert_messages_are_not_sent() {
        let c = alert_messages_check(Output::Hawk).expect("a line with --output hawk");
        assert_eq!((c.status, c.name.as_str()), (Status::Ok, "alert messages"));
        assert!(
            c.detail.contains("resolves") && c.detail.contains("not sent"),
            "{}",
            c.detail
        );
        assert!(alert_messages_check(Output::Klaxon).is_none());
        assert!(alert_messages_check(Output::Shadow).is_none());
        let c = no_events_check(Output::Hawk).expect("a line with --output hawk");
        assert!(
            c.detail.contains("NO_EVENTS") && c.detail.contains("grouper"),
            "{}",
            c.detail
        );
        assert!(no_events_check(Output::Klaxon).is_none());
    }
}
