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
//! a reminder or escalation step: its alert now ─ acknowledged, resolved, gone ─▶ dropped (trail), ack
//! a reminder: its project's budget this hour ─ spent ─▶ dropped (trail), ack
//!        ▼
//! claim notificationId (dedup) ─ already sent ─▶ ack (no second message)
//!        │                     └ leased by another sender ─▶ park (delay engine), ack
//!        ▼
//! breakers again (take the half-open probe, if any) ─ open ─▶ park, ack
//!        ▼
//! endpoint's and project's shares of the host (try, never waits) ─ busy ─▶ park 1–3 s, ack
//!        ▼
//! rate limit (GCRA, fleet-wide) ─ no slot soon ─▶ park until the slot, ack (never dropped)
//!        ▼  (after waiting for a reserved slot, a reminder's or step's alert is read again: dropped as above; a
//!        │   reminder or step holds no share while it waits and takes them again ─ busy ─▶ park 1–3 s, ack)
//! bulkhead of the host (semaphore, ≤ 10 s) ─▶ deliver ─▶ sent: mark, ack
//!                                           ├──▶ transient, attempts left: retry after backoff + jitter, ack
//!                                           └──▶ permanent or exhausted: <ns>.dead with reason, ack
//! ```
//! Two lanes per channel ([`klaxon_core::priority`]): firings, digests, resolves and acknowledgements in
//! `<ns>.notify.<channel>`, reminders and escalation steps in `<ns>.notify.<channel>.later`. The loop takes a
//! later-lane task only when no main-lane task is ready, and gives the later lane at most half its slots, so a
//! backlog of reminders parked behind a paced channel never sits between a firing and its sender. A task parked
//! because of its own endpoint (breaker, `Retry-After`, the endpoint's share of its host) or retried after its
//! endpoint failed comes back in the later lane too ([`klaxon_core::priority::Lane::back`]): a throttled tenant's
//! parked tasks never queue ahead of another tenant's new firing. Under a rate limit, a lower priority reserves
//! no slot ahead ([`crate::ratelimit`]).
//!
//! Every outcome is also appended to the delivery trail ([`klaxon_store::trail`]), which never blocks a delivery.
//!
//! Conversations: an alert's first firing on Discord or Telegram (through the Bot API) leaves its message id in
//! Redis ([`klaxon_counter::Conversations`]); the alert's lifecycle messages read it just before the host's
//! bulkhead, and the channel edits the firing message to show the alert's state and then sends the lifecycle
//! message (a reply on Telegram) inside the same slot, rate-limit reservation and breaker record as any
//! delivery. A failed edit or a missing id only means a new message.
//!
//! The walk above (`attempt::attempt_delivery`) makes at most one delivery attempt and ends in one `Next`
//! (delivered, duplicate, dropped, park, retry, dead; `next`); one exit (`settle`) carries it out — releases the
//! dedup lease unless delivered, logs, counts, records the trail and re-publishes — before the task is acked.
//! Reminders and escalation steps are decided at send time (`current`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::{Consumer, Publisher, QueuedAck, Session, Topology};
use klaxon_channels::Channels;
use klaxon_core::priority::Lane;
use klaxon_core::ChannelKind;
use klaxon_counter::dedup::Dedup;
use klaxon_counter::{Alerts, Budgets, Conversations, Inbound};
use klaxon_store::trail::Trail;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::breaker::{Breakers, Bulkheads};
use crate::ratelimit::RateLimiter;
use crate::EngineError;

mod attempt;
mod current;
mod next;
mod settle;

pub(crate) use current::Dropped;
pub use current::RulesNow;

pub use next::{default_retry_schedule_flag, not_before, retry_delay, RETRY_SCHEDULE_S};

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
    /// Delay before attempt n+1 is entry n (the last later_in_flight), jittered; see [`retry_delay`].
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
    /// The PagerDuty incidents Klaxon triggered (dedup key → project and alerts), for PagerDuty's webhooks.
    pub inbound: Inbound,
    /// The alerts, read again when a reminder or an escalation step is sent (decided at send time, `current`).
    pub alerts: Alerts,
    /// The rules as they are now, read with the alert (once the process's rule store is connected).
    pub rules: RulesNow,
    /// The per-project reminder budgets.
    pub budgets: Budgets,
    /// Reminders a project may send per hour (`--reminder-budget`); 0 = no budget.
    pub reminder_budget: u32,
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
    let tag = klaxon_broker::process_label(&role);
    let mut main = broker.consume(&queue, deps.prefetch, &tag).await?;
    // The later lane (reminders, escalation steps) on a channel of its own, with half the prefetch: the main
    // lane always has the other half (see `Lanes`).
    let later_queue = deps.topology.later_queue(channel);
    let mut later = match broker
        .consume(&later_queue, later_share(deps.prefetch), &format!("{tag}.later"))
        .await
    {
        Ok(c) => c,
        Err(e) => {
            main.close().await;
            publisher.close().await;
            broker.close().await;
            return Err(e.into());
        }
    };
    ready.store(true, Ordering::Relaxed);
    tracing::info!(queue = %queue, later_queue = %later_queue, prefetch = deps.prefetch, "sender consuming");
    let ctx = Arc::new(Ctx {
        deps,
        channel,
        publisher,
    });
    let result = consume_loop(&ctx, &mut main, &mut later, &shutdown).await;
    ready.store(false, Ordering::Relaxed);
    later.close().await;
    main.close().await;
    ctx.publisher.close().await;
    broker.close().await;
    result
}

/// The later lane's share of a sender's `prefetch`: half, at least one.
fn later_share(prefetch: u16) -> u16 {
    (prefetch / 2).max(1)
}

struct Ctx {
    deps: SenderDeps,
    channel: ChannelKind,
    publisher: Publisher,
}

/// What a finished delivery task hands back: its lane (whose consumer acks it), its delivery tag, its outcome.
type Done = (Lane, u64, Result<(), EngineError>);

async fn consume_loop(
    ctx: &Arc<Ctx>,
    main: &mut Consumer,
    later: &mut Consumer,
    shutdown: &CancellationToken,
) -> Result<(), EngineError> {
    let limit = usize::from(ctx.deps.prefetch.max(1));
    let later_limit = usize::from(later_share(ctx.deps.prefetch));
    let mut in_flight: JoinSet<Done> = JoinSet::new();
    let mut later_in_flight = 0usize;
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
        // biased: a finished task first (it frees a slot), then shutdown, then the main lane, and the later
        // lane only when no main-lane delivery is ready, with at most `later_limit` of the slots
        tokio::select! {
            biased;
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                if matches!(done, Ok((Lane::Later, ..))) {
                    later_in_flight = later_in_flight.saturating_sub(1);
                }
                if let Err(e) = finish(main, later, done).and_then(|ack| acks.push(ack)) {
                    break Err(e);
                }
            }
            _ = shutdown.cancelled() => break Ok(()),
            next = main.next(), if in_flight.len() < limit => {
                let delivery = match next {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => break Err(e.into()),
                    None => break Err(EngineError::ConsumerClosed),
                };
                spawn(ctx, &mut in_flight, Lane::Main, delivery);
            }
            next = later.next(), if in_flight.len() < limit && later_in_flight < later_limit => {
                let delivery = match next {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => break Err(e.into()),
                    None => break Err(EngineError::ConsumerClosed),
                };
                later_in_flight += 1;
                spawn(ctx, &mut in_flight, Lane::Later, delivery);
            }
        }
    };
    // Shutdown, or the session failed: take no new tasks, and let the started ones finish (bounded) rather
    // than abort them mid-send. A delivery that completes is marked in the dedup store, so when its unacked
    // task comes back it is dropped as a duplicate instead of being sent again; what can still be acked is.
    let _ = main.cancel().await;
    let _ = later.cancel().await;
    let deadline = tokio::time::Instant::now() + DRAIN;
    while !in_flight.is_empty() {
        match tokio::time::timeout_at(deadline, in_flight.join_next()).await {
            Ok(Some(done)) => {
                if let Err(e) = finish(main, later, done).and_then(|ack| acks.push(ack)) {
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

fn spawn(ctx: &Arc<Ctx>, in_flight: &mut JoinSet<Done>, lane: Lane, delivery: klaxon_broker::Delivery) {
    let ctx = ctx.clone();
    in_flight.spawn(async move {
        let tag = delivery.delivery_tag;
        (lane, tag, attempt::handle(&ctx, &delivery).await)
    });
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
    main: &Consumer,
    later: &Consumer,
    done: Result<Done, tokio::task::JoinError>,
) -> Result<QueuedAck, EngineError> {
    match done {
        Ok((Lane::Main, tag, Ok(()))) => Ok(main.ack_queued(tag)?),
        Ok((Lane::Later, tag, Ok(()))) => Ok(later.ack_queued(tag)?),
        // The outcome could not be made durable: end the session; unacked tasks go back to the queue.
        Ok((_, _, Err(e))) => Err(e),
        Err(e) => Err(EngineError::Encode(format!("delivery task failed: {e}"))),
    }
}
