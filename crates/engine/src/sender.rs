//! The deliver loop: notification tasks in, messages out.
//!
//! One loop per channel queue (`<ns>.notify.<channel>`). A task is acked only once its outcome is durable:
//! delivered, re-published to a retry queue (transient failure), or re-published to `<ns>.dead` (permanent failure
//! or attempts exhausted). Retries wait in RabbitMQ, in tiered delay queues, never in a sleeping task holding a
//! prefetch slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::{header, Broker, Consumer, Delivery, Outgoing, Publisher, Topology, ERROR_HEADER};
use klaxon_channels::{Channels, DeliveryError};
use klaxon_core::{ChannelKind, NotificationTask};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::EngineError;

/// Header counting delivery attempts made so far.
pub const ATTEMPTS_HEADER: &str = "x-klaxon-attempts";

/// What the deliver loop needs.
#[derive(Clone)]
pub struct SenderDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// The channel adapters.
    pub channels: Channels,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Attempts before a task goes to the dead-letter queue.
    pub max_attempts: u32,
    /// Unacked tasks per channel queue.
    pub prefetch: u16,
}

/// Runs the deliver loop of one channel until `shutdown`, reconnecting after failures.
pub async fn run(deps: SenderDeps, channel: ChannelKind, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    let role = format!("sender.{channel}");
    crate::supervise(&role, ready, shutdown, deps.metrics.clone(), |ready, shutdown| {
        let deps = deps.clone();
        async move { session(&deps, channel, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: &SenderDeps,
    channel: ChannelKind,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let broker = Broker::connect(&deps.amqp_url, Duration::from_secs(10)).await?;
    let publisher = broker.publisher().await?;
    publisher.declare(&deps.topology).await?;
    publisher
        .declare_retry(&deps.topology, channel, &RETRY_TIERS_S)
        .await?;
    let queue = deps.topology.notify_queue(channel);
    let mut consumer = broker
        .consume(&queue, deps.prefetch, &format!("klaxon-sender-{channel}"))
        .await?;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(queue = %queue, "sender consuming");
    let result = consume_loop(deps, channel, &mut consumer, &publisher, &shutdown).await;
    ready.store(false, Ordering::Relaxed);
    consumer.close().await;
    publisher.close().await;
    broker.close().await;
    result
}

async fn consume_loop(
    deps: &SenderDeps,
    channel: ChannelKind,
    consumer: &mut Consumer,
    publisher: &Publisher,
    shutdown: &CancellationToken,
) -> Result<(), EngineError> {
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = consumer.cancel().await;
                return Ok(());
            }
            d = consumer.next() => d,
        };
        let delivery = match next {
            Some(d) => d?,
            None => return Err(EngineError::ConsumerClosed),
        };
        handle(deps, channel, publisher, &delivery).await?;
        consumer.ack(delivery.delivery_tag).await?;
    }
}

/// Retry tiers: the delay before attempt n+1 is the n-th tier (the last one repeats), or the server's
/// `Retry-After` rounded up to a tier.
pub const RETRY_TIERS_S: [u64; 6] = [1, 5, 30, 120, 600, 3600];

fn tier_for(attempts: u32, retry_after: Option<Duration>) -> u64 {
    let idx = (attempts.saturating_sub(1) as usize).min(RETRY_TIERS_S.len() - 1);
    let mut tier = RETRY_TIERS_S[idx];
    if let Some(ra) = retry_after {
        let want = ra.as_secs_f64().ceil() as u64;
        if let Some(t) = RETRY_TIERS_S.iter().copied().find(|t| *t >= want) {
            tier = tier.max(t);
        } else {
            tier = RETRY_TIERS_S[RETRY_TIERS_S.len() - 1];
        }
    }
    tier
}

async fn handle(
    deps: &SenderDeps,
    channel: ChannelKind,
    publisher: &Publisher,
    delivery: &Delivery,
) -> Result<(), EngineError> {
    let m = &deps.metrics;
    let attempts: u32 = header(&delivery.properties, ATTEMPTS_HEADER)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
        + 1;
    let task: NotificationTask = match serde_json::from_slice(&delivery.data) {
        Ok(t) => t,
        Err(e) => {
            let reason = format!("not a notification task: {e}");
            tracing::warn!(reason = %reason, "notification task dead-lettered");
            m.delivery(channel.as_str(), "dead");
            return dead(deps, publisher, delivery, attempts, &reason).await;
        }
    };
    match deps.channels.deliver(&task).await {
        Ok(_) => {
            m.delivery(channel.as_str(), "sent");
            tracing::info!(notification_id = %task.notification_id, channel = %channel, attempts, "delivered");
            Ok(())
        }
        Err(DeliveryError::Transient { reason, retry_after }) if attempts < deps.max_attempts => {
            let tier = tier_for(attempts, retry_after);
            tracing::warn!(
                notification_id = %task.notification_id, channel = %channel, attempts, retry_in_s = tier,
                reason = %reason, "delivery failed, will retry"
            );
            m.delivery(channel.as_str(), "retried");
            let mut msg = Outgoing::json(deps.topology.retry_queue(channel, tier), delivery.data.clone());
            msg.base = Some(delivery.properties.clone());
            msg.headers = vec![
                (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
                (ERROR_HEADER.to_owned(), reason),
            ];
            publisher.publish_all(&[msg]).await?;
            Ok(())
        }
        Err(err) => {
            let reason = match &err {
                DeliveryError::Transient { reason, .. } => format!("gave up after {attempts} attempts: {reason}"),
                DeliveryError::Permanent { reason } => reason.clone(),
            };
            tracing::warn!(
                notification_id = %task.notification_id, channel = %channel, attempts, reason = %reason,
                "notification dead-lettered"
            );
            m.delivery(channel.as_str(), "dead");
            dead(deps, publisher, delivery, attempts, &reason).await
        }
    }
}

async fn dead(
    deps: &SenderDeps,
    publisher: &Publisher,
    delivery: &Delivery,
    attempts: u32,
    reason: &str,
) -> Result<(), EngineError> {
    let mut msg = Outgoing::json(deps.topology.dead_queue(), delivery.data.clone());
    msg.base = Some(delivery.properties.clone());
    msg.headers = vec![
        (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
        (ERROR_HEADER.to_owned(), reason.to_owned()),
    ];
    publisher.publish_all(&[msg]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers() {
        assert_eq!(tier_for(1, None), 1);
        assert_eq!(tier_for(2, None), 5);
        assert_eq!(tier_for(6, None), 3600);
        assert_eq!(tier_for(20, None), 3600);
        assert_eq!(tier_for(1, Some(Duration::from_secs(3))), 5);
        assert_eq!(tier_for(1, Some(Duration::from_millis(200))), 1);
        assert_eq!(tier_for(1, Some(Duration::from_secs(99_999))), 3600);
    }
}
