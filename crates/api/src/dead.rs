//! The dead-letter queue `<ns>.dead`: list and replay, shared by `klaxon dead` and the API.
//!
//! A pass reads at most the messages that were in the queue when it started (so it always ends), holding them
//! unacked: listed messages go back untouched when the channel closes; a replayed one is published to its
//! channel's queue with a fresh attempt count (same body and message id, so the same notificationId and the
//! same dedup) and acked once RabbitMQ confirmed the publish.

use std::time::Duration;

use klaxon_broker::{header, Broker, BrokerError, Delivery, Outgoing, Publisher, Topology, ERROR_HEADER};
use klaxon_channels::redact_endpoint;
use klaxon_core::NotificationTask;
use klaxon_engine::sender::ATTEMPTS_HEADER;
use serde_json::{json, Value};

/// How long to wait for the next message of a queue known to hold more.
const NEXT_WAIT: Duration = Duration::from_secs(5);

/// One dead-lettered message, as listed.
#[derive(Debug, Clone)]
pub struct DeadItem {
    /// The notification (`-` when the body is not a notification task).
    pub notification_id: String,
    /// Its project.
    pub project_id: String,
    /// Its rule.
    pub rule_id: String,
    /// Its channel.
    pub channel: String,
    /// Attempts made.
    pub attempts: u64,
    /// The redacted endpoint.
    pub destination: String,
    /// Why it was dead-lettered.
    pub reason: String,
}

impl DeadItem {
    fn of(delivery: &Delivery, task: Option<&NotificationTask>) -> Self {
        let attempts = header(&delivery.properties, ATTEMPTS_HEADER)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let reason = header(&delivery.properties, ERROR_HEADER).unwrap_or_default();
        match task {
            Some(t) => DeadItem {
                notification_id: t.notification_id.clone(),
                project_id: t.project_id.clone(),
                rule_id: t.rule_id.clone(),
                channel: t.channel.as_str().to_owned(),
                attempts,
                destination: redact_endpoint(t.channel, &t.endpoint),
                reason,
            },
            None => DeadItem {
                notification_id: "-".into(),
                project_id: "-".into(),
                rule_id: "-".into(),
                channel: "-".into(),
                attempts,
                destination: "-".into(),
                reason,
            },
        }
    }

    /// The JSON form (API and `klaxon dead list --json`).
    pub fn to_json(&self) -> Value {
        json!({
            "notificationId": self.notification_id, "projectId": self.project_id, "ruleId": self.rule_id,
            "channel": self.channel, "attempts": self.attempts, "destination": self.destination,
            "reason": self.reason,
        })
    }
}

/// What to do with the messages read.
pub enum Pass<'a> {
    /// List at most this many; they all stay.
    List(u32),
    /// Replay those whose notificationId is listed (every one when `None`).
    Replay(Option<&'a [String]>),
}

/// Reads the dead-letter queue once. Returns the listed items (list) or the replayed ones (replay).
pub async fn pass(
    broker: &Broker,
    publisher: &Publisher,
    topology: &Topology,
    what: Pass<'_>,
) -> Result<Vec<DeadItem>, BrokerError> {
    let queue = topology.dead_queue();
    let count = broker
        .queue_depth(&queue)
        .await?
        .ok_or_else(|| BrokerError::NoQueue { queue: queue.clone() })?
        .messages;
    let limit = match what {
        Pass::List(n) => count.min(n),
        Pass::Replay(_) => count,
    };
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let mut consumer = broker
        .consume(
            &queue,
            u16::try_from(limit.clamp(1, 1000)).unwrap_or(1000),
            "klaxon-dead",
        )
        .await?;
    let mut seen = 0u32;
    let result = async {
        while seen < limit {
            let Some(Some(next)) = consumer.next_within(NEXT_WAIT).await else {
                break;
            };
            let delivery = next?;
            seen += 1;
            let task: Option<NotificationTask> = serde_json::from_slice(&delivery.data).ok();
            match &what {
                Pass::List(_) => out.push(DeadItem::of(&delivery, task.as_ref())),
                Pass::Replay(ids) => {
                    let Some(task) = task else { continue };
                    if ids.is_some_and(|ids| !ids.iter().any(|i| i == &task.notification_id)) {
                        continue;
                    }
                    let msg = Outgoing {
                        queue: topology.notify_queue(task.channel),
                        body: delivery.data.clone(),
                        message_id: delivery.properties.message_id().as_ref().map(|s| s.to_string()),
                        headers: Vec::new(),
                        base: None,
                    };
                    publisher.publish_all(&[msg]).await?;
                    consumer.ack(delivery.delivery_tag).await?;
                    out.push(DeadItem::of(&delivery, Some(&task)));
                }
            }
        }
        Ok::<(), BrokerError>(())
    }
    .await;
    // Whatever was not replayed goes back to the queue when the channel closes.
    consumer.close().await;
    result.map(|()| out)
}
