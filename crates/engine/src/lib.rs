//! Klaxon's engine: the long-running loops and how they are wired.
//!
//! ```text
//!            ┌──────── worker (evaluate) ────────┐          ┌────── sender (deliver), per channel ──────┐
//! events ──▶ │ parse → rules (cache) → counter   │ ──tasks─▶│ channels adapter → ack | retry | dead     │
//!  queue     │ (one Redis round trip per batch)  │  queues  │ (retries wait in RabbitMQ delay queues)   │
//!            └───────────────────────────────────┘          └───────────────────────────────────────────┘
//! ```
//! Every loop takes its dependencies and a `CancellationToken` (`run(deps, ready, shutdown)`), so `main` and the
//! tests share one path. A loop that loses a connection marks itself not ready, backs off (jittered, capped) and
//! reconnects; nothing is acked while its outcome is unknown.
//!
//! The on-call rooms, each with one job; loops depend on the outbox and the route, not on each other:
//!
//! | room | job |
//! | --- | --- |
//! | [`klaxon_core::route`] | where a task goes (now, digest, held, deferred, dropped): one pure decision for every kind |
//! | [`outbox`] | the one way out: digest entries and holds in one Redis trip, dispatch, one confirmed publish |
//! | [`timer`] | the timer messages (a tagged serde enum, the wire of earlier versions) |
//! | [`timers`] | the one timer loop: resolves, reminders, escalation steps, NO_EVENTS silences |
//! | [`alerts`] | the worker's opening of alerts and the decisions of a due reminder or step |
//! | [`no_events`] | NO_EVENTS: projects seen by the worker, silences resolved, rules armed |
//! | `quiet` | quiet-hours holds (the digest machinery on sibling keys) |
//! | [`digest`] | digest windows (`minPeriod > 0`) and their flush messages |
//! | [`flushes`] | the flush loop: digests and quiet releases when due |
//!
//! Cargo feature `fault-injection` (off by default; tests only): adds `flushes::Faults` to the flush loop's
//! deps (`DigestDeps::faults`) so an end-to-end test can make the flush loop abort between claim and publish.
//! The `klaxon` binary forwards it as its own `fault-injection` feature and only then reads
//! `KLAXON_TEST_CRASH_AFTER_CLAIM`; `scripts/test` turns it on for the tests. Likewise `timers::Faults`
//! (`TimerDeps::faults`, `KLAXON_TEST_CRASH_AFTER_RESOLVE`, `KLAXON_TEST_CRASH_AFTER_REMIND`,
//! `KLAXON_TEST_CRASH_AFTER_NO_EVENTS`) makes the timer loop abort between a resolve and the publishing of
//! its resolved messages, between a reminder's messages and its next timer, or between a NO_EVENTS firing's
//! claim and its publish. A build without it has neither the field, nor the check, nor the variable's name.
//!
//! The sender's delivery pipeline (see [`sender`]) is built from small parts: [`klaxon_counter::Dedup`] (a
//! notification id is delivered once, Redis + `lua/dedup_*.lua`), [`ratelimit`] (the limits per destination
//! over [`klaxon_counter::Gcra`], `lua/gcra_reserve.lua`), [`breaker`] (circuit breaker and bulkhead per
//! host, in process) and [`klaxon_store::trail`] (the append-only `deliveries` collection in MongoDB, written
//! in the background). Every wait longer than a second goes through the broker's delay engine. A reminder or an
//! escalation step is decided again when its turn comes, against its alert and rule as they are then
//! ([`sender::RulesNow`]).
#![deny(missing_docs)]

pub mod after_store;
pub mod alerts;
pub mod breaker;
pub mod clients;
pub mod consumers;
pub mod digest;
pub mod flushes;
mod internal_events;
pub mod metrics;
pub mod no_events;
pub mod ops_server;
mod outbox;
mod quiet;
pub mod ratelimit;
pub mod sender;
pub mod sink;
pub mod timer;
pub mod timers;
pub mod worker;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long each attempt to connect a loop's RabbitMQ session may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a loop's session ended.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// RabbitMQ failed (transient unless the topology clashes).
    #[error(transparent)]
    Broker(#[from] klaxon_broker::BrokerError),
    /// Redis failed: counting, dedup or rate limits (transient unless Redis refused the call).
    #[error(transparent)]
    Counter(#[from] klaxon_counter::CounterError),
    /// Rules could not be loaded and none were cached (transient).
    #[error(transparent)]
    Rules(#[from] klaxon_store::RulesError),
    /// The broker cancelled our consumer (transient: e.g. the queue was deleted).
    #[error("the broker closed the consumer")]
    ConsumerClosed,
    /// A batch in flight before this one failed: this one is handed back uncounted with it (the worker's
    /// batches in flight, transient).
    #[error("an earlier batch in flight failed")]
    EarlierBatchFailed,
    /// A fault a test injected (feature `fault-injection` only).
    #[cfg(feature = "fault-injection")]
    #[error("injected fault: {0}")]
    Injected(&'static str),
    /// A task could not be encoded (permanent; a bug).
    #[error("cannot encode a notification task: {0}")]
    Encode(String),
}

/// The next delivery of `consumer`, or `None` once `shutdown` fires — the consumer is then cancelled, so no new
/// deliveries arrive while the ones already received can still be finished and acked. A consumer the broker
/// closed is an error (the session ends and reconnects).
pub(crate) async fn next_or_shutdown(
    consumer: &mut klaxon_broker::Consumer,
    shutdown: &CancellationToken,
) -> Result<Option<klaxon_broker::Delivery>, EngineError> {
    tokio::select! {
        _ = shutdown.cancelled() => {
            let _ = consumer.cancel().await;
            Ok(None)
        }
        next = consumer.next() => match next {
            Some(d) => Ok(Some(d?)),
            None => Err(EngineError::ConsumerClosed),
        },
    }
}

/// Where a one-message-at-a-time loop (digest flushes, alert timers) consumes: its role, queue and prefetch, and
/// what its publisher must declare.
pub(crate) struct EachQueue<'a> {
    /// The loop's role (`digest`, `alerts`): connection name and consumer label.
    pub role: &'static str,
    /// RabbitMQ URL.
    pub amqp_url: &'a str,
    /// Queue names.
    pub topology: &'a klaxon_broker::Topology,
    /// The queue consumed.
    pub queue: String,
    /// Unacked deliveries at once.
    pub prefetch: u16,
    /// `--output`, declared on the publisher.
    pub output: sink::Output,
}

/// What a [`consume_each`] loop does with one message: returns once its outcome is durable.
pub(crate) trait HandleEach: Sync {
    /// Handles `delivery`, publishing with `publisher`.
    fn handle<'a>(
        &'a self,
        publisher: &'a klaxon_broker::Publisher,
        delivery: &'a klaxon_broker::Delivery,
    ) -> impl Future<Output = Result<(), EngineError>> + Send + 'a;
}

/// One session of a loop that handles its queue one message at a time: `handler` returns once the message's
/// outcome is durable, then it is acked; an error ends the session unacked (the caller's `supervise` reconnects).
pub(crate) async fn consume_each(
    q: EachQueue<'_>,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
    handler: &impl HandleEach,
) -> Result<(), EngineError> {
    let klaxon_broker::Session { broker, publisher } =
        klaxon_broker::Session::open(q.amqp_url, CONNECT_TIMEOUT, q.role, q.topology).await?;
    sink::declare(&publisher, q.output).await?;
    let mut consumer = broker
        .consume(&q.queue, q.prefetch, &klaxon_broker::process_label(q.role))
        .await?;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(queue = %q.queue, role = q.role, "consuming");
    let result = async {
        loop {
            let Some(delivery) = next_or_shutdown(&mut consumer, &shutdown).await? else {
                return Ok(());
            };
            handler.handle(&publisher, &delivery).await?;
            consumer.ack(delivery.delivery_tag).await?;
        }
    }
    .await;
    ready.store(false, Ordering::Relaxed);
    consumer.close().await;
    publisher.close().await;
    broker.close().await;
    result
}

/// Runs `session` again and again until `shutdown`, with a jittered, capped backoff after failures.
pub(crate) async fn supervise<F, Fut>(
    role: &str,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
    mut session: F,
) where
    F: FnMut(Arc<AtomicBool>, CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), EngineError>>,
{
    let mut failures: u32 = 0;
    while !shutdown.is_cancelled() {
        let started = tokio::time::Instant::now();
        match session(ready.clone(), shutdown.clone()).await {
            Ok(()) => break,
            Err(err) => {
                ready.store(false, Ordering::Relaxed);
                if matches!(err, EngineError::Broker(_) | EngineError::ConsumerClosed) {
                    internal_events::BrokerFailed.emit();
                }
                // A session that ran for a while resets the backoff.
                if started.elapsed() > Duration::from_secs(30) {
                    failures = 0;
                }
                let wait = klaxon_broker::backoff(failures, Duration::from_secs(30));
                failures = failures.saturating_add(1);
                tracing::warn!(role, error = %format!("{err:#}"), retry_in_ms = wait.as_millis() as u64, "session ended; reconnecting");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
    ready.store(false, Ordering::Relaxed);
}

/// Keeps `ready` true while Redis answers, checking every 2 s (1 s timeout). An idle worker thereby reports a
/// Redis outage on `/readyz` before the next event would have failed on it.
pub async fn probe_redis(
    counter: klaxon_counter::WindowCounter,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    let mut was_up = true;
    while !shutdown.is_cancelled() {
        let up = matches!(
            tokio::time::timeout(Duration::from_secs(1), counter.server_time_ms()).await,
            Ok(Ok(_))
        );
        if up != was_up {
            if up {
                tracing::info!("redis reachable again");
            } else {
                tracing::warn!("redis unreachable; not ready");
            }
            was_up = up;
        }
        ready.store(up, Ordering::Relaxed);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}
