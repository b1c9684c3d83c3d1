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
//! breakers of the endpoint and host ─ open, or Retry-After pending ─▶ park until then, ack (attempts unchanged)
//!        ▼
//! claim notificationId (dedup) ─ already sent ─▶ ack (no second message)
//!        │                     └ leased by another sender ─▶ park (delay engine), ack
//!        ▼
//! breakers again (take the half-open probe, if any) ─ open ─▶ park, ack
//!        ▼
//! endpoint's share of the host (try, never waits) ─ busy ─▶ park 1–3 s, ack
//!        ▼
//! rate limit (GCRA, fleet-wide) ─ no slot soon ─▶ park until the slot, ack (never dropped)
//!        ▼
//! bulkhead of the host (semaphore, ≤ 10 s) ─▶ deliver ─▶ sent: mark, ack
//!                                           ├──▶ transient, attempts left: retry after backoff + jitter, ack
//!                                           └──▶ permanent or exhausted: <ns>.dead with reason, ack
//! ```
//! Every outcome is also appended to the delivery trail ([`klaxon_store::trail`]), which never blocks a delivery.
//!
//! Conversations: an alert's first firing on Discord or Telegram (through the Bot API) leaves its message id in
//! Redis ([`klaxon_counter::Conversations`]); the alert's lifecycle messages read it just before the host's
//! bulkhead, and the channel edits the firing message to show the alert's state and then sends the lifecycle
//! message (a reply on Telegram) inside the same slot, rate-limit reservation and breaker record as any
//! delivery. A failed edit or a missing id only means a new message.
//!
//! The walk above (`attempt_delivery`) makes at most one delivery attempt and ends in one `Next` (delivered,
//! duplicate, park, retry, dead); one exit (`settle`) carries it out — releases the dedup lease unless delivered,
//! logs, counts, records the trail and re-publishes — before the task is acked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaxon_broker::{
    header, Consumer, Delivery, Outgoing, Publisher, QueuedAck, Session, Topology, ATTEMPTS_HEADER,
    ERROR_HEADER,
};
use klaxon_channels::{redact_endpoint, Channels, DeliveryError, MessageRef};
use klaxon_core::{ChannelKind, NotificationTask};
use klaxon_counter::dedup::{Claim, Dedup};
use klaxon_counter::{Conversation, Conversations};
use klaxon_store::trail::{now_ms, Record, Status, Trail};
use rand::Rng;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::breaker::{Admission, Breakers, Bulkheads, Outcome, Transition};
use crate::internal_events::{
    BreakerClosed, BreakerOpened, ConversationEdited, ConversationNotKept, DeadLettered, Delivered,
    DeliveryParked, DeliveryRetried, DuplicateDropped,
};
use crate::ratelimit::{RateLimiter, Slot};
use crate::EngineError;

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
    /// Circuit breakers per endpoint and per host (shared by the channel loops of the process).
    pub breakers: Arc<Breakers>,
    /// Concurrency budget per host and per endpoint (shared by the channel loops of the process).
    pub bulkheads: Arc<Bulkheads>,
    /// The delivery trail.
    pub trail: Trail,
    /// Each alert's firing message on Discord and Telegram, which its lifecycle messages edit and reply to.
    pub conversations: Conversations,
}

/// Runs the deliver loop of one channel until `shutdown`, reconnecting after failures.
pub async fn run(
    deps: SenderDeps,
    channel: ChannelKind,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let role = format!("sender.{channel}");
    crate::supervise(&role, ready, shutdown, |ready, shutdown| {
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
    let role = format!("sender.{channel}");
    let Session { broker, publisher } =
        Session::open(&deps.amqp_url, crate::CONNECT_TIMEOUT, &role, &deps.topology).await?;
    let queue = deps.topology.notify_queue(channel);
    let mut consumer = broker
        .consume(&queue, deps.prefetch, &klaxon_broker::process_label(&role))
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
    // Acks queued on the channel and not yet seen written (see `Consumer::ack_queued`): looked at, without
    // waiting, before each next step; a failed one ends the session.
    let mut acks = Acks::default();
    let mut outcome: Result<(), EngineError> = loop {
        // bounded: a channel that stops writing stops the session taking more (never more than `MAX_QUEUED_ACKS`)
        let checked = if acks.0.len() >= MAX_QUEUED_ACKS {
            acks.written().await
        } else {
            acks.check()
        };
        if let Err(e) = checked {
            break Err(e);
        }
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                if let Err(e) = finish(consumer, done).and_then(|ack| acks.push(ack)) {
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
                if let Err(e) = finish(consumer, done).and_then(|ack| acks.push(ack)) {
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
    // The drain: the queued acks are written before the session closes the channel.
    if let Err(e) = acks.written().await {
        if outcome.is_ok() {
            outcome = Err(e);
        }
    }
    outcome
}

/// The acks a sender session queued and has not yet seen written: the channel writes them in order, so most
/// are written by the time the next delivery or outcome is looked at, and none costs the session a wake-up of
/// its own (AMQP has no reply to an ack; awaiting one only learns that lapin's I/O thread wrote it).
#[derive(Default)]
struct Acks(Vec<QueuedAck>);

/// The most acks a sender session keeps queued and unseen before it waits for them to be written.
const MAX_QUEUED_ACKS: usize = 256;

impl Acks {
    fn push(&mut self, ack: QueuedAck) -> Result<(), EngineError> {
        self.0.push(ack);
        self.check()
    }

    /// Drops the written acks; the first failed one is the session's error.
    fn check(&mut self) -> Result<(), EngineError> {
        let mut failed = None;
        self.0.retain_mut(|ack| match ack.check() {
            Some(Ok(())) => false,
            Some(Err(e)) => {
                failed.get_or_insert(e);
                false
            }
            None => true,
        });
        failed.map_or(Ok(()), |e| Err(e.into()))
    }

    async fn written(&mut self) -> Result<(), EngineError> {
        for ack in self.0.drain(..) {
            ack.written().await?;
        }
        Ok(())
    }
}

fn finish(
    consumer: &Consumer,
    done: Result<(u64, Result<(), EngineError>), tokio::task::JoinError>,
) -> Result<QueuedAck, EngineError> {
    match done {
        Ok((tag, Ok(()))) => Ok(consumer.ack_queued(tag)?),
        // The outcome could not be made durable: end the session; unacked tasks go back to the queue.
        Ok((_, Err(e))) => Err(e),
        Err(e) => Err(EngineError::Encode(format!("delivery task failed: {e}"))),
    }
}

/// The default retry schedule, seconds: 1 s, 5 s, 30 s, 2 min, 10 min, 1 h (the last repeats).
pub const RETRY_SCHEDULE_S: [u64; 6] = [1, 5, 30, 120, 600, 3600];

/// [`RETRY_SCHEDULE_S`] as `--retry-schedule` writes it (plain numbers are seconds): the flag's default.
pub fn default_retry_schedule_flag() -> String {
    RETRY_SCHEDULE_S.map(|s| s.to_string()).join(",")
}

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
    rand::rng().random_range(0.8..1.2)
}

fn token() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// What a delivery's result says to the breakers: a 429 is the endpoint's rate limit (its host is up), other
/// transient failures count against endpoint and host, a permanent one is the request's fault.
fn outcome<T>(result: &Result<T, DeliveryError>) -> Outcome {
    match result {
        Ok(_) | Err(DeliveryError::Permanent { .. }) => Outcome::Ok,
        Err(e @ DeliveryError::Transient { retry_after, .. }) if e.is_rate_limited() => Outcome::Throttled {
            retry_after: *retry_after,
        },
        Err(DeliveryError::Transient { retry_after, .. }) => Outcome::Failed {
            retry_after: *retry_after,
        },
    }
}

/// What becomes of a task: the outcome of [`attempt_delivery`] (through [`after_attempt`] once it was tried),
/// carried out by [`settle`], the one exit (lease, log, metric, trail, re-publish; the caller then acks).
#[derive(Debug, Clone, PartialEq)]
enum Next {
    /// Sent after `attempts` attempts: mark the id delivered.
    Delivered { attempts: u32 },
    /// Delivered before (the dedup store says so): drop this copy, no second message.
    Duplicate,
    /// Not now: back through the delay engine unchanged (attempts included), after `wait`.
    Park { wait: Duration, why: &'static str },
    /// A transient failure with attempts left: back through the delay engine after `wait`, counting
    /// `attempts`.
    Retry {
        attempts: u32,
        wait: Duration,
        why: String,
    },
    /// A permanent failure, the attempts exhausted, or not a task at all: to `<ns>.dead`.
    Dead { attempts: u32, why: String },
}

/// What the result of attempt number `attempts` means for the task (`error` None: it was sent).
fn after_attempt(
    error: Option<&DeliveryError>,
    attempts: u32,
    max_attempts: u32,
    schedule: &[Duration],
    jitter: f64,
) -> Next {
    match error {
        None => Next::Delivered { attempts },
        // bounded before it reaches the log, the trail and the retry's header (a huge hostname, an echoed body)
        Some(DeliveryError::Transient {
            reason, retry_after, ..
        }) if attempts < max_attempts => Next::Retry {
            attempts,
            wait: retry_delay(schedule, attempts, *retry_after, jitter),
            why: klaxon_core::text::reason(reason),
        },
        Some(DeliveryError::Transient { reason, .. }) => Next::Dead {
            attempts,
            why: klaxon_core::text::reason(&format!("gave up after {attempts} attempts: {reason}")),
        },
        Some(DeliveryError::Permanent { reason }) => Next::Dead {
            attempts,
            why: klaxon_core::text::reason(reason),
        },
    }
}

async fn handle(ctx: &Ctx, delivery: &Delivery) -> Result<(), EngineError> {
    let before: u32 = header(&delivery.properties, ATTEMPTS_HEADER)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let task: NotificationTask = match serde_json::from_slice(&delivery.data) {
        Ok(t) => t,
        Err(e) => {
            let why = klaxon_core::text::reason(&format!("not a notification task: {e}"));
            let next = Next::Dead {
                attempts: before,
                why,
            };
            return settle(ctx, delivery, None, None, next).await;
        }
    };
    let token = token();
    let (next, leased) = attempt_delivery(ctx, &task, before, &token).await;
    settle(ctx, delivery, Some(&task), leased.then_some(&token), next).await
}

/// One delivery attempt of `task`: walks it through the pipeline (see the module docs) and delivers it when no
/// step before stops it (scheduled for later, a breaker, dedup, the endpoint's share, the rate limit, the host's
/// bulkhead). Returns what becomes of the task, and true when it still holds the dedup lease `token`.
async fn attempt_delivery(ctx: &Ctx, task: &NotificationTask, before: u32, token: &str) -> (Next, bool) {
    let deps = &ctx.deps;
    let channel = ctx.channel;
    let id = task.notification_id.as_str();

    // 0. A scheduled notification (`sendAt`) never leaves before its time: one that arrives early (the delay
    //    engine's range is ~12 days, so a later one comes back in steps) waits again.
    if let Some(wait) = not_before(task.send_at_ms, now_ms()) {
        let why = "scheduled for later";
        return (Next::Park { wait, why }, false);
    }

    // 1. The breakers and throttles of the endpoint and its host, before anything is taken: parking a throttled
    //    endpoint's tasks costs no Redis round trip, so thousands of them cannot hold up other tenants' tasks.
    let endpoint = Channels::destination_key(task);
    let host = Channels::host_key(task);
    if let Some((left, why)) = deps.breakers.blocked(&endpoint, &host, Instant::now()) {
        let wait = left.max(Duration::from_secs(1));
        return (
            Next::Park {
                wait,
                why: why.reason(),
            },
            false,
        );
    }

    // 2. Dedup: never a second message for one notification id.
    match deps.dedup.claim(id, token).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::AlreadySent) => return (Next::Duplicate, false),
        Ok(Claim::Busy(left)) => {
            // Usually the holder finishes within a second; the lease only matters after a crash.
            let wait = left.clamp(Duration::from_secs(1), Duration::from_secs(5));
            let why = "being delivered elsewhere";
            return (Next::Park { wait, why }, false);
        }
        Err(e) => {
            // Without the dedup store we cannot promise "once": wait rather than risk a second message.
            tracing::warn!(notification_id = %id, channel = %channel, error = %e, "dedup store unavailable");
            let (wait, why) = (Duration::from_secs(5), "dedup store unavailable");
            return (Next::Park { wait, why }, false);
        }
    }

    // From here on the task holds the lease: `settle` marks the id sent or releases it. A probe taken here
    // and then not sent is handed back, so that the endpoint's next task may probe at once.
    let probe = match deps.breakers.admit(&endpoint, &host, Instant::now()) {
        Admission::Allow => false,
        Admission::Probe => true,
        Admission::Reject(left, why) => {
            let wait = left.max(Duration::from_secs(1));
            return (
                Next::Park {
                    wait,
                    why: why.reason(),
                },
                true,
            );
        }
    };
    let park = |wait: Duration, why: &'static str| {
        if probe {
            deps.breakers.release_probe(&endpoint, &host, Instant::now());
        }
        (Next::Park { wait, why }, true)
    };

    // 3. The endpoint's share of its host (bulkhead): never waited for. A busy endpoint's task is parked at once
    //    instead of holding a prefetch slot, so a slow endpoint delays only its own tasks.
    let Some(endpoint_permit) = deps.bulkheads.try_endpoint(&endpoint) else {
        let wait = Duration::from_millis(rand::rng().random_range(1_000..3_000));
        return park(wait, "destination busy");
    };

    // 4. Rate limit of the destination (fleet-wide).
    match deps.limiter.acquire(task).await {
        Ok(Slot::Reserved(wait)) => {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        Ok(Slot::Later(wait)) => {
            // Spread: the tasks refused together would otherwise all come back together and be refused again.
            let spread = wait.mul_f64(rand::rng().random_range(1.0..1.5));
            return park(spread.max(Duration::from_secs(1)), "rate limited");
        }
        Err(e) => {
            tracing::warn!(notification_id = %id, channel = %channel, error = %e, "rate limiter unavailable");
            return park(Duration::from_secs(5), "rate limiter unavailable");
        }
    }

    // The alert's firing message, for a lifecycle message on a channel that keeps conversations: read before the
    // host's slot is taken, so the round trip holds no slot; no message (or Redis failing) means a new message.
    let firing = recall(deps, task).await;

    // 5. The host's bulkhead. The wait is bounded, so the dedup lease (longer than this wait plus one attempt)
    //    never runs out while the task still holds it; an endpoint holds at most half the host's slots.
    let Ok(host_permit) = tokio::time::timeout(BULKHEAD_WAIT, deps.bulkheads.acquire(&host)).await else {
        let wait = Duration::from_millis(rand::rng().random_range(1_000..3_000));
        return park(wait, "destination host busy");
    };
    let result = deps.channels.deliver_in(task, firing.as_ref()).await;
    // recorded before the slots are given back: the endpoint's next task already sees a Retry-After
    let changes = deps
        .breakers
        .record(&endpoint, &host, outcome(&result), Instant::now());
    drop(host_permit);
    drop(endpoint_permit);
    if changes.endpoint.is_some() || changes.host.is_some() {
        let shown = redact_endpoint(task.channel, &task.endpoint);
        for (scope, change) in [("endpoint", changes.endpoint), ("host", changes.host)] {
            let target = if scope == "host" {
                host.as_str()
            } else {
                shown.as_str()
            };
            match change {
                Some(Transition::Opened) => BreakerOpened { scope, target, probe }.emit(),
                Some(Transition::Closed) => BreakerClosed { scope, target }.emit(),
                None => {}
            }
        }
    }
    if let Ok(delivered) = &result {
        if let Some(edit) = delivered.edit {
            ConversationEdited {
                channel,
                outcome: edit.as_str(),
            }
            .emit();
        }
        if let Some(sent) = &delivered.sent {
            remember(deps, task, sent).await;
        }
    }
    let next = after_attempt(
        result.as_ref().err(),
        before + 1,
        deps.max_attempts,
        &deps.retry_schedule,
        jitter(),
    );
    (next, true)
}

/// The firing message of `task`'s alert, when `task` is a lifecycle message on a channel that keeps an alert as
/// one conversation and the firing's message was remembered. A Redis failure is logged and means none: the
/// lifecycle message is then a new message, never held back.
async fn recall(deps: &SenderDeps, task: &NotificationTask) -> Option<MessageRef> {
    let alert = task.alert.as_ref()?;
    if !task.reason.is_lifecycle() || !Channels::keeps_conversation(task) {
        return None;
    }
    match deps
        .conversations
        .recall(&task.project_id, &alert.id, task.channel)
        .await
    {
        Ok(c) => c.map(|c| MessageRef {
            message_id: c.message_id,
            destination: c.destination,
            body: c.body,
        }),
        Err(e) => {
            tracing::warn!(notification_id = %task.notification_id, channel = %task.channel, error = %e,
                "cannot read the alert's firing message: sending a new message");
            None
        }
    }
}

/// Remembers the message an alert's first firing sent ([`Channels::opens_conversation`]); a failure is logged
/// and counted, never a failed delivery (the message went out).
async fn remember(deps: &SenderDeps, task: &NotificationTask, sent: &MessageRef) {
    let Some(alert) = task.alert.as_ref().filter(|_| Channels::opens_conversation(task)) else {
        return;
    };
    let conversation = Conversation {
        message_id: sent.message_id.clone(),
        destination: sent.destination.clone(),
        body: sent.body.clone(),
    };
    if let Err(error) = deps
        .conversations
        .remember(&task.project_id, &alert.id, task.channel, &conversation)
        .await
    {
        ConversationNotKept {
            id: &task.notification_id,
            channel: task.channel,
            error: &error,
        }
        .emit();
    }
}

/// Carries out `next` for the delivery (its `task`, None when the body is not one; `lease`, the dedup token
/// the task holds, if any): gives the lease back unless the task was delivered, then logs, counts, records
/// the trail and re-publishes as `next` says. Ok means the outcome is durable and the delivery may be acked.
async fn settle(
    ctx: &Ctx,
    delivery: &Delivery,
    task: Option<&NotificationTask>,
    lease: Option<&str>,
    next: Next,
) -> Result<(), EngineError> {
    let deps = &ctx.deps;
    let channel = ctx.channel;
    // A body that is not a task only ever becomes `Dead`, whose log then names no id: "" is never logged.
    let id = task.map_or("", |t| t.notification_id.as_str());
    if let (Some(token), false) = (lease, matches!(next, Next::Delivered { .. })) {
        release(deps, id, token).await;
    }
    match next {
        Next::Delivered { attempts } => {
            if let Err(e) = deps.dedup.mark_sent(id).await {
                // Delivered all the same; only a redelivery in the lease's lifetime is still caught.
                tracing::warn!(notification_id = %id, error = %e, "cannot mark notification delivered");
            }
            Delivered {
                id,
                channel,
                attempts,
            }
            .emit();
            trail(deps, task, attempts, Status::Sent, None);
            Ok(())
        }
        Next::Duplicate => {
            DuplicateDropped { id, channel }.emit();
            Ok(())
        }
        Next::Park { wait, why } => {
            DeliveryParked {
                id,
                channel,
                why,
                wait,
            }
            .emit();
            let msg = requeue(delivery, deps.topology.notify_queue(channel), Vec::new());
            publish_later(ctx, msg, wait).await
        }
        Next::Retry { attempts, wait, why } => {
            DeliveryRetried {
                id,
                channel,
                attempts,
                wait,
                reason: &why,
            }
            .emit();
            trail(deps, task, attempts, Status::Retrying, Some(why.clone()));
            let msg = requeue(
                delivery,
                deps.topology.notify_queue(channel),
                failure_headers(attempts, why),
            );
            publish_later(ctx, msg, wait).await
        }
        Next::Dead { attempts, why } => {
            DeadLettered {
                id: task.map(|t| t.notification_id.as_str()),
                channel,
                attempts,
                reason: &why,
            }
            .emit();
            trail(deps, task, attempts, Status::Dead, Some(why.clone()));
            let msg = requeue(
                delivery,
                deps.topology.dead_queue(),
                failure_headers(attempts, why),
            );
            ctx.publisher.publish_all(&[msg]).await?;
            Ok(())
        }
    }
}

/// The delivery's body and properties again, for `queue`, with `headers` set.
fn requeue(delivery: &Delivery, queue: String, headers: Vec<(String, String)>) -> Outgoing {
    let mut msg = Outgoing::json(queue, delivery.data.clone());
    msg.base = Some(delivery.properties.clone());
    msg.headers = headers;
    msg
}

/// The attempts made so far and the last failure, on a retried or dead-lettered task.
fn failure_headers(attempts: u32, why: String) -> Vec<(String, String)> {
    vec![
        (ATTEMPTS_HEADER.to_owned(), attempts.to_string()),
        (ERROR_HEADER.to_owned(), why),
    ]
}

/// Through the delay engine: `msg` comes back to its queue after `wait`.
async fn publish_later(ctx: &Ctx, msg: Outgoing, wait: Duration) -> Result<(), EngineError> {
    ctx.publisher
        .publish_delayed(&ctx.deps.topology.delay(), &[(msg, wait)])
        .await?;
    Ok(())
}

async fn release(deps: &SenderDeps, id: &str, token: &str) {
    if let Err(e) = deps.dedup.release(id, token).await {
        // The lease runs out by itself; the retry waits for it at worst.
        tracing::debug!(notification_id = %id, error = %e, "cannot release dedup lease");
    }
}

/// Records the outcome in the trail (nothing for a body that is not a task).
fn trail(
    deps: &SenderDeps,
    task: Option<&NotificationTask>,
    attempts: u32,
    status: Status,
    last_error: Option<String>,
) {
    let Some(task) = task else {
        return;
    };
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

    #[test]
    fn what_an_attempt_leads_to() {
        let s = Duration::from_secs;
        let schedule: Vec<Duration> = RETRY_SCHEDULE_S.iter().map(|x| s(*x)).collect();
        let transient = |retry_after| DeliveryError::Transient {
            reason: "HTTP 503 from hooks.test".into(),
            retry_after,
            rate_limited: false,
        };
        let permanent = DeliveryError::Permanent {
            reason: "HTTP 404 from hooks.test".into(),
        };
        let long = DeliveryError::Permanent {
            reason: "x".repeat(10_000),
        };
        let dead = |attempts, why: &str| Next::Dead {
            attempts,
            why: why.to_owned(),
        };
        // (error, attempts, max attempts, jitter, next)
        let table = [
            (None, 1, 5, 1.0, Next::Delivered { attempts: 1 }),
            (None, 5, 5, 1.0, Next::Delivered { attempts: 5 }),
            (
                Some(transient(None)),
                1,
                5,
                1.0,
                Next::Retry {
                    attempts: 1,
                    wait: s(1),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(Some(s(20)))),
                2,
                5,
                1.2,
                Next::Retry {
                    attempts: 2,
                    wait: s(20),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(None)),
                4,
                5,
                0.8,
                Next::Retry {
                    attempts: 4,
                    wait: s(96),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(None)),
                5,
                5,
                1.0,
                dead(5, "gave up after 5 attempts: HTTP 503 from hooks.test"),
            ),
            (
                Some(transient(None)),
                1,
                1,
                1.0,
                dead(1, "gave up after 1 attempts: HTTP 503 from hooks.test"),
            ),
            (
                Some(permanent.clone()),
                1,
                5,
                1.0,
                dead(1, "HTTP 404 from hooks.test"),
            ),
            (Some(permanent), 5, 5, 1.0, dead(5, "HTTP 404 from hooks.test")),
            (
                Some(long.clone()),
                1,
                5,
                1.0,
                dead(1, &klaxon_core::text::reason(&"x".repeat(10_000))),
            ),
        ];
        for (error, attempts, max, j, want) in table {
            assert_eq!(
                after_attempt(error.as_ref(), attempts, max, &schedule, j),
                want,
                "{error:?} {attempts}/{max}"
            );
        }
        // reasons are bounded whatever the failure
        let Next::Dead { why, .. } = after_attempt(Some(&long), 1, 5, &schedule, 1.0) else {
            panic!("a permanent failure is dead-lettered");
        };
        assert!(why.len() <= klaxon_core::text::MAX_REASON_BYTES, "{}", why.len());
    }
}
