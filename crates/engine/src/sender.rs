//! The deliver loop: notification tasks in, messages out.
//!
//! One loop per channel queue (`<ns>.notify.<channel>`), processing up to `prefetch` tasks at once, each acked
//! on its own once its outcome is durable: delivered (and marked in the dedup store), re-published through the
//! delay engine (`klaxon_broker::delay`) for a retry or to wait, or re-published to `<ns>.dead` (permanent
//! failure or attempts exhausted). Nothing waits in a sleeping task holding a prefetch slot, except a
//! reserved rate-limit slot at most [`RateLimiter::max_sleep`] away.
//!
//! Per task:
//! ```text
//! claim notificationId (dedup) ─ already sent ─▶ ack (no second message)
//!        │                     └ leased by another sender ─▶ park (delay engine), ack
//!        ▼
//! breaker of the host ─ open ─▶ park until it may close, ack (attempts unchanged)
//!        ▼
//! rate limit (GCRA, fleet-wide) ─ no slot soon ─▶ park until the slot, ack (never dropped)
//!        ▼
//! bulkhead of the host (semaphore) ─▶ deliver ─▶ sent: mark, ack
//!                                           ├──▶ transient, attempts left: retry after backoff + jitter, ack
//!                                           └──▶ permanent or exhausted: <ns>.dead with reason, ack
//! ```
//! Every outcome is also appended to the delivery trail ([`klaxon_rules::trail`]), which never blocks a delivery.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaxon_broker::{header, Broker, Consumer, Delivery, Outgoing, Publisher, Topology, ERROR_HEADER};
use klaxon_channels::{redact_endpoint, Channels, DeliveryError};
use klaxon_core::{ChannelKind, NotificationTask};
use klaxon_counter::dedup::{Claim, Dedup};
use klaxon_rules::trail::{now_ms, Record, Status, Trail};
use rand::Rng;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::breaker::{Admission, Breakers, Bulkheads, Transition};
use crate::metrics::Metrics;
use crate::ratelimit::{RateLimiter, Slot};
use crate::EngineError;

/// Header counting delivery attempts made so far.
pub const ATTEMPTS_HEADER: &str = "x-klaxon-attempts";

/// How long in-flight tasks may take to finish after shutdown began before the session gives up on them
/// (they go back to the queue unacked).
const DRAIN: Duration = Duration::from_secs(7);

/// Longest a task waits for its destination host's bulkhead before it is parked and tried later.
pub const BULKHEAD_WAIT: Duration = Duration::from_secs(10);

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
    /// Tasks per channel queue processed at once (and unacked at most).
    pub prefetch: u16,
    /// Delay before attempt n+1 is entry n (the last repeats), jittered; see [`retry_delay`].
    pub retry_schedule: Arc<[Duration]>,
    /// Delivered-once marks.
    pub dedup: Dedup,
    /// Fleet-wide rate limits.
    pub limiter: RateLimiter,
    /// Circuit breakers per host (shared by the channel loops of the process).
    pub breakers: Arc<Breakers>,
    /// Concurrency budget per host (shared by the channel loops of the process).
    pub bulkheads: Arc<Bulkheads>,
    /// The delivery trail.
    pub trail: Trail,
}

/// Runs the deliver loop of one channel until `shutdown`, reconnecting after failures.
pub async fn run(
    deps: SenderDeps,
    channel: ChannelKind,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let role = format!("sender.{channel}");
    crate::supervise(&role, ready, shutdown, deps.metrics.clone(), |ready, shutdown| {
        let deps = deps.clone();
        async move { session(deps, channel, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: SenderDeps,
    channel: ChannelKind,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let broker = Broker::connect(&deps.amqp_url, Duration::from_secs(10)).await?;
    let publisher = broker.publisher().await?;
    publisher.declare(&deps.topology).await?;
    let queue = deps.topology.notify_queue(channel);
    let mut consumer = broker
        .consume(&queue, deps.prefetch, &format!("klaxon-sender-{channel}"))
        .await?;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(queue = %queue, prefetch = deps.prefetch, "sender consuming");
    let ctx = Arc::new(Ctx {
        deps,
        channel,
        publisher,
    });
    let result = consume_loop(&ctx, &mut consumer, &shutdown).await;
    ready.store(false, Ordering::Relaxed);
    consumer.close().await;
    ctx.publisher.close().await;
    broker.close().await;
    result
}

struct Ctx {
    deps: SenderDeps,
    channel: ChannelKind,
    publisher: Publisher,
}

async fn consume_loop(
    ctx: &Arc<Ctx>,
    consumer: &mut Consumer,
    shutdown: &CancellationToken,
) -> Result<(), EngineError> {
    let limit = usize::from(ctx.deps.prefetch.max(1));
    let mut in_flight: JoinSet<(u64, Result<(), EngineError>)> = JoinSet::new();
    let mut outcome: Result<(), EngineError> = loop {
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                if let Err(e) = finish(consumer, done).await {
                    break Err(e);
                }
            }
            _ = shutdown.cancelled() => break Ok(()),
            next = consumer.next(), if in_flight.len() < limit => {
                let delivery = match next {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => break Err(e.into()),
                    None => break Err(EngineError::ConsumerClosed),
                };
                let ctx = ctx.clone();
                in_flight.spawn(async move {
                    let tag = delivery.delivery_tag;
                    (tag, handle(&ctx, &delivery).await)
                });
            }
        }
    };
    // Shutdown, or the session failed: take no new tasks, and let the started ones finish (bounded) rather
    // than abort them mid-send. A delivery that completes is marked in the dedup store, so when its unacked
    // task comes back it is dropped as a duplicate instead of being sent again; what can still be acked is.
    let _ = consumer.cancel().await;
    let deadline = tokio::time::Instant::now() + DRAIN;
    while !in_flight.is_empty() {
        match tokio::time::timeout_at(deadline, in_flight.join_next()).await {
            Ok(Some(done)) => {
                if let Err(e) = finish(consumer, done).await {
                    tracing::debug!(channel = %ctx.channel, error = %e, "cannot ack a finished delivery; it comes back and is deduplicated");
                    if outcome.is_ok() {
                        outcome = Err(e);
                    }
                }
            }
            Ok(None) => break,
            Err(_) => {
                tracing::warn!(
                    channel = %ctx.channel,
                    in_flight = in_flight.len(),
                    "deliveries still running after the drain deadline; they go back to the queue"
                );
                in_flight.abort_all();
                break;
            }
        }
    }
    outcome
}

async fn finish(
    consumer: &Consumer,
    done: Result<(u64, Result<(), EngineError>), tokio::task::JoinError>,
) -> Result<(), EngineError> {
    match done {
        Ok((tag, Ok(()))) => Ok(consumer.ack(tag).await?),
        // The outcome could not be made durable: end the session; unacked tasks go back to the queue.
        Ok((_, Err(e))) => Err(e),
        Err(e) => Err(EngineError::Encode(format!("delivery task failed: {e}"))),
    }
}

/// The default retry schedule, seconds: 1 s, 5 s, 30 s, 2 min, 10 min, 1 h (the last repeats).
pub const RETRY_SCHEDULE_S: [u64; 6] = [1, 5, 30, 120, 600, 3600];

/// The delay before attempt `attempts + 1`: the schedule's entry for `attempts` (the last repeats) times a
/// random factor in [0.8, 1.2) (`jitter`, so that a burst of failures does not come back as a burst), never
/// less than the destination's `Retry-After` (capped at the schedule's last entry). The delay engine rounds
/// up to whole seconds.
pub fn retry_delay(
    schedule: &[Duration],
    attempts: u32,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    let Some(last) = schedule.last().copied() else {
        return retry_after.unwrap_or(Duration::from_secs(1));
    };
    let idx = (attempts.saturating_sub(1) as usize).min(schedule.len() - 1);
    let base = schedule[idx].mul_f64(jitter.clamp(0.5, 1.5));
    retry_after.map_or(base, |ra| base.max(ra.min(last)))
}

/// How long a task scheduled for `send_at_ms` must still wait at `now_ms` (None: it is due), capped at what
/// the delay engine can express in one step.
pub fn not_before(send_at_ms: Option<i64>, now_ms: i64) -> Option<Duration> {
    let left = send_at_ms?.saturating_sub(now_ms);
    (left > 0).then(|| Duration::from_millis(left.unsigned_abs()).min(klaxon_broker::delay::MAX_DELAY))
}

fn jitter() -> f64 {
    rand::thread_rng().gen_range(0.8..1.2)
}

fn token() -> String {
    format!("{:016x}", rand::thread_rng().gen::<u64>())
}

async fn handle(ctx: &Ctx, delivery: &Delivery) -> Result<(), EngineError> {
    let deps = &ctx.deps;
    let channel = ctx.channel;
    let m = &deps.metrics;
    let before: u32 = header(&delivery.properties, ATTEMPTS_HEADER)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let task: NotificationTask = match serde_json::from_slice(&delivery.data) {
        Ok(t) => t,
        Err(e) => {
            let reason = klaxon_core::text::reason(&format!("not a notification task: {e}"));
            tracing::warn!(channel = %channel, reason = %reason, "notification task dead-lettered");
            m.delivery(channel.as_str(), "dead");
            return dead(ctx, delivery, before, &reason).await;
        }
    };
    let id = task.notification_id.as_str();

    // 0. A scheduled notification (`sendAt`) never leaves before its time: one that arrives early (the delay
    //    engine's range is ~12 days, so a later one comes back in steps) waits again.
    if let Some(wait) = not_before(task.send_at_ms, now_ms()) {
        return park(ctx, delivery, &task, wait, "scheduled for later").await;
    }

    // 1. Dedup: never a second message for one notification id.
    let token = token();
    match deps.dedup.claim(id, &token).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::AlreadySent) => {
            tracing::info!(notification_id = %id, channel = %channel, "already delivered; duplicate dropped");
            m.delivery(channel.as_str(), "duplicate");
            return Ok(());
        }
        Ok(Claim::Busy(left)) => {
            return park(
                ctx,
                delivery,
                &task,
                // Usually the holder finishes within a second; the lease only matters after a crash.
                left.clamp(Duration::from_secs(1), Duration::from_secs(5)),
                "being delivered elsewhere",
            )
            .await;
        }
        Err(e) => {
            // Without the dedup store we cannot promise "once": wait rather than risk a second message.
            tracing::warn!(notification_id = %id, channel = %channel, error = %e, "dedup store unavailable");
            return park(
                ctx,
                delivery,
                &task,
                Duration::from_secs(5),
                "dedup store unavailable",
            )
            .await;
        }
    }

    // From here on, every path either marks the id sent or releases the lease.
    let host = Channels::host_key(&task);
    let probe = match deps.breakers.admit(&host, Instant::now()) {
        Admission::Allow => false,
        Admission::Probe => true,
        Admission::Reject(left) => {
            release(deps, id, &token).await;
            return park(
                ctx,
                delivery,
                &task,
                left.max(Duration::from_secs(1)),
                "circuit breaker open",
            )
            .await;
        }
    };

    match deps.limiter.acquire(&task).await {
        Ok(Slot::Reserved(wait)) => {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        Ok(Slot::Later(wait)) => {
            release(deps, id, &token).await;
            // Spread: the tasks refused together would otherwise all come back together and be refused again.
            let spread = wait.mul_f64(rand::thread_rng().gen_range(1.0..1.5));
            return park(
                ctx,
                delivery,
                &task,
                spread.max(Duration::from_secs(1)),
                "rate limited",
            )
            .await;
        }
        Err(e) => {
            tracing::warn!(notification_id = %id, channel = %channel, error = %e, "rate limiter unavailable");
            release(deps, id, &token).await;
            return park(
                ctx,
                delivery,
                &task,
                Duration::from_secs(5),
                "rate limiter unavailable",
            )
            .await;
        }
    }

    // The bulkhead wait is bounded, so the dedup lease (longer than this wait plus one attempt) never runs
    // out while the task still holds it.
    let Ok(permit) = tokio::time::timeout(BULKHEAD_WAIT, deps.bulkheads.acquire(&host)).await else {
        release(deps, id, &token).await;
        let wait = Duration::from_millis(rand::thread_rng().gen_range(1_000..3_000));
        return park(ctx, delivery, &task, wait, "destination host busy").await;
    };
    let result = deps.channels.deliver(&task).await;
    drop(permit);
    let attempts = before + 1;
    let host_ok = !matches!(result, Err(DeliveryError::Transient { .. }));
    match deps.breakers.record(&host, host_ok, Instant::now()) {
        Some(Transition::Opened) => {
            m.breaker("open");
            tracing::warn!(host = %host, probe, "circuit breaker opened");
        }
        Some(Transition::Closed) => {
            m.breaker("closed");
            tracing::info!(host = %host, "circuit breaker closed");
        }
        None => {}
    }

    match result {
        Ok(_) => {
            if let Err(e) = deps.dedup.mark_sent(id).await {
                // Delivered all the same; only a redelivery in the lease's lifetime is still caught.
                tracing::warn!(notification_id = %id, error = %e, "cannot mark notification delivered");
            }
            m.delivery(channel.as_str(), "sent");
            tracing::info!(notification_id = %id, channel = %channel, attempts, "delivered");
            trail(deps, &task, attempts, Status::Sent, None);
            Ok(())
        }
        Err(DeliveryError::Transient { reason, retry_after }) if attempts < deps.max_attempts => {
            // bounded before it reaches the log, the trail and the retry's header (a huge hostname, an echoed body)
            let reason = klaxon_core::text::reason(&reason);
            release(deps, id, &token).await;
            let wait = retry_delay(&deps.retry_schedule, attempts, retry_after, jitter());
            tracing::warn!(
                notification_id = %id, channel = %channel, attempts,
                retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), reason = %reason,
                "delivery failed, will retry"
            );
            m.delivery(channel.as_str(), "retried");
            trail(deps, &task, attempts, Status::Retrying, Some(reason.clone()));
            let mut msg = Outgoing::json(deps.topology.notify_queue(channel), delivery.data.clone());
            msg.base = Some(delivery.properties.clone());
            msg.headers = vec![
                (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
                (ERROR_HEADER.to_owned(), reason),
            ];
            ctx.publisher
                .publish_delayed(&deps.topology.delay(), &[(msg, wait)])
                .await?;
            Ok(())
        }
        Err(err) => {
            release(deps, id, &token).await;
            let reason = match &err {
                DeliveryError::Transient { reason, .. } => {
                    format!("gave up after {attempts} attempts: {reason}")
                }
                DeliveryError::Permanent { reason } => reason.clone(),
            };
            let reason = klaxon_core::text::reason(&reason);
            tracing::warn!(
                notification_id = %id, channel = %channel, attempts, reason = %reason,
                "notification dead-lettered"
            );
            m.delivery(channel.as_str(), "dead");
            trail(deps, &task, attempts, Status::Dead, Some(reason.clone()));
            dead(ctx, delivery, attempts, &reason).await
        }
    }
}

async fn release(deps: &SenderDeps, id: &str, token: &str) {
    if let Err(e) = deps.dedup.release(id, token).await {
        // The lease runs out by itself; the retry waits for it at worst.
        tracing::debug!(notification_id = %id, error = %e, "cannot release dedup lease");
    }
}

fn trail(
    deps: &SenderDeps,
    task: &NotificationTask,
    attempts: u32,
    status: Status,
    last_error: Option<String>,
) {
    deps.trail.record(Record {
        notification_id: task.notification_id.clone(),
        project_id: task.project_id.clone(),
        rule_id: task.rule_id.clone(),
        channel: task.channel.as_str().to_owned(),
        destination: redact_endpoint(task.channel, &task.endpoint),
        attempts,
        status,
        last_error,
        fired_at_ms: task.fired_at_ms,
        at_ms: now_ms(),
    });
}

/// Puts the task back through the delay engine, unchanged (attempts included): it waits `wait`, then comes
/// back to this channel's queue.
async fn park(
    ctx: &Ctx,
    delivery: &Delivery,
    task: &NotificationTask,
    wait: Duration,
    why: &'static str,
) -> Result<(), EngineError> {
    tracing::info!(
        notification_id = %task.notification_id, channel = %ctx.channel, why,
        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "delivery parked"
    );
    ctx.deps.metrics.parked(ctx.channel.as_str());
    let mut msg = Outgoing::json(ctx.deps.topology.notify_queue(ctx.channel), delivery.data.clone());
    msg.base = Some(delivery.properties.clone());
    ctx.publisher
        .publish_delayed(&ctx.deps.topology.delay(), &[(msg, wait)])
        .await?;
    Ok(())
}

async fn dead(ctx: &Ctx, delivery: &Delivery, attempts: u32, reason: &str) -> Result<(), EngineError> {
    let mut msg = Outgoing::json(ctx.deps.topology.dead_queue(), delivery.data.clone());
    msg.base = Some(delivery.properties.clone());
    msg.headers = vec![
        (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
        (ERROR_HEADER.to_owned(), reason.to_owned()),
    ];
    ctx.publisher.publish_all(&[msg]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays() {
        let s = Duration::from_secs;
        let schedule: Vec<Duration> = RETRY_SCHEDULE_S.iter().map(|x| s(*x)).collect();
        // (attempts, retry_after, jitter, want)
        let table = [
            (1, None, 1.0, s(1)),
            (2, None, 1.0, s(5)),
            (6, None, 1.0, s(3600)),
            (20, None, 1.0, s(3600)),
            (1, Some(s(3)), 1.0, s(3)),
            (2, Some(s(3)), 1.0, s(5)),
            (1, Some(Duration::from_millis(200)), 1.0, s(1)),
            (1, Some(s(99_999)), 1.0, s(3600)),
            (2, None, 0.8, s(4)),
            (2, None, 1.2, s(6)),
            // jitter never goes below Retry-After
            (1, Some(s(1)), 0.8, s(1)),
        ];
        for (attempts, retry_after, j, want) in table {
            assert_eq!(
                retry_delay(&schedule, attempts, retry_after, j),
                want,
                "{attempts} {retry_after:?} {j}"
            );
        }
        assert_eq!(retry_delay(&[], 1, None, 1.0), s(1));
        assert_eq!(not_before(None, 5), None);
        assert_eq!(not_before(Some(5), 5), None);
        assert_eq!(not_before(Some(4), 5), None);
        assert_eq!(not_before(Some(i64::MIN), i64::MAX), None);
        assert_eq!(not_before(Some(1_500), 1_000), Some(Duration::from_millis(500)));
        // beyond the delay engine's range: wait its longest step, then again
        assert_eq!(
            not_before(Some(i64::MAX), 0),
            Some(klaxon_broker::delay::MAX_DELAY)
        );
        for _ in 0..100 {
            let j = jitter();
            assert!((0.8..1.2).contains(&j));
        }
    }
}
