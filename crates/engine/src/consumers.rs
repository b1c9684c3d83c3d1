//! Who else consumes the events queue: a worker registers itself in Redis ([`klaxon_counter::Consumers`]) before
//! it consumes, beats while it consumes, and compares the queue's consumer count (a passive declare) with the
//! live registrations. More consumers than registered Klaxon workers means a consumer that is not a Klaxon process
//! of this namespace — typically Hawk's notifier still running after a cut-over, or a second deployment on the
//! same queue: RabbitMQ then hands each consumer part of the stream and every threshold is under-counted, with
//! nothing failing. The worker says so at warn (the first time at once, then at most every [`WARN_EVERY`] while it
//! lasts, and once at info when it ends) and exports the difference as `klaxon_events_foreign_consumers`.
//!
//! With `--events-shards`, a worker registers once per consumed queue (the events queue and each shard queue), and
//! each shard's registration exports that shard's depth and consumers (`klaxon_events_shard_messages`,
//! `klaxon_events_shard_consumers`, label `shard`); `klaxon_events_foreign_consumers` stays the events queue's.
//!
//! The beats also report that events were taken (at most one report per beat), which `klaxon doctor` reads as
//! "this queue has traffic" even when the workers keep it empty.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::Broker;
use klaxon_counter::Consumers;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a worker beats and counts the queue's consumers.
pub const BEAT_EVERY: Duration = Duration::from_secs(10);
/// How long a registration lives without a beat: three beats, so one slow beat never drops a live worker.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(35);
/// How long a report of events taken is kept (`klaxon doctor`'s "recent traffic").
pub const EVENTS_REPORT_TTL: Duration = Duration::from_secs(600);
/// The least time between two warnings about the same foreign consumers.
pub const WARN_EVERY: Duration = Duration::from_secs(600);
/// How long one beat or count may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long unregistering may hold up a session's end (shutdown drains within 8 s).
const LEAVE_TIMEOUT: Duration = Duration::from_secs(1);
/// The gauge: consumers of the events queue beyond the registered Klaxon workers, at the last count.
pub const FOREIGN_CONSUMERS: &str = "klaxon_events_foreign_consumers";
/// The gauge: messages ready in a shard queue (label `shard`), at the last count.
pub const SHARD_MESSAGES: &str = "klaxon_events_shard_messages";
/// The gauge: consumers of a shard queue (label `shard`), at the last count.
pub const SHARD_CONSUMERS: &str = "klaxon_events_shard_consumers";

/// One worker session's registration. Cheap to clone; [`Presence::taken`] is what the consume loop bumps.
#[derive(Clone)]
pub struct Presence {
    registry: Consumers,
    label: String,
    queue: String,
    taken: Arc<AtomicU64>,
    first_taken: Arc<Notify>,
    /// The shard this queue is (`--events-shards`), whose depth and consumers are exported per shard.
    shard: Option<u16>,
}

impl Presence {
    /// A registration of `queue`'s consumer `label` in `namespace`'s registry.
    pub fn new(redis: klaxon_counter::RedisHandle, namespace: &str, queue: &str, label: String) -> Self {
        Presence {
            registry: Consumers::new(redis, namespace, queue),
            label,
            queue: queue.to_owned(),
            taken: Arc::default(),
            first_taken: Arc::default(),
            shard: None,
        }
    }

    /// The registration of shard queue `shard`: its depth and consumers are exported as
    /// `klaxon_events_shard_{messages,consumers}{shard="<shard>"}` at every beat.
    pub fn for_shard(mut self, shard: u16) -> Self {
        self.shard = Some(shard);
        self
    }

    /// Counts `n` events taken from the queue (one atomic add per batch; the first batch after a beat wakes the
    /// watcher, so a quiet queue's first events are reported at once).
    pub fn taken(&self, n: u64) {
        if self.taken.fetch_add(n, Ordering::Relaxed) == 0 {
            self.first_taken.notify_one();
        }
    }

    /// Registers before consuming. A Redis failure is logged, not fatal: the registration is what lets foreign
    /// consumers be told apart, not what the worker needs to count.
    pub async fn join(&self) {
        if let Err(e) = self.beat(0).await {
            tracing::warn!(queue = %self.queue, error = %e, "cannot register this worker in Redis; other consumers of the queue cannot be told apart until it can");
        }
    }

    /// Unregisters after the consumer closed (best effort, at most [`LEAVE_TIMEOUT`]: the registration runs out
    /// anyway).
    pub async fn leave(&self) {
        let left = tokio::time::timeout(LEAVE_TIMEOUT, self.registry.leave(&self.label)).await;
        if !matches!(left, Ok(Ok(_))) {
            tracing::debug!(queue = %self.queue, "could not unregister; the registration runs out by itself");
        }
    }

    async fn beat(&self, taken: u64) -> Result<u64, String> {
        match tokio::time::timeout(
            CALL_TIMEOUT,
            self.registry
                .beat(&self.label, REGISTRATION_TTL, taken, EVENTS_REPORT_TTL),
        )
        .await
        {
            Ok(Ok(live)) => Ok(live),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}s", CALL_TIMEOUT.as_secs())),
        }
    }

    /// Beats every [`BEAT_EVERY`] (and when the first events after a quiet beat arrive), counts the queue's
    /// consumers through `broker` and warns about foreign ones, until `stop`.
    pub async fn watch(self, broker: Broker, stop: CancellationToken) {
        let mut foreign = Foreign::default();
        let mut last_report: Option<Instant> = None;
        let mut next_beat = Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(next_beat) => {}
                _ = self.first_taken.notified() => {
                    // events after a quiet spell: report them now, unless a report is fresh anyway
                    if last_report.is_some_and(|t| t.elapsed() < BEAT_EVERY) {
                        continue;
                    }
                }
            }
            next_beat = Instant::now() + BEAT_EVERY;
            let taken = self.taken.swap(0, Ordering::Relaxed);
            let live = match self.beat(taken).await {
                Ok(live) => live,
                Err(e) => {
                    // put the events back for the next beat's report
                    self.taken.fetch_add(taken, Ordering::Relaxed);
                    tracing::debug!(queue = %self.queue, error = %e, "registry beat failed");
                    continue;
                }
            };
            if taken > 0 {
                last_report = Some(Instant::now());
            }
            let depth = tokio::time::timeout(CALL_TIMEOUT, broker.queue_depth(&self.queue)).await;
            let Ok(Ok(Some(depth))) = depth else {
                continue;
            };
            let extra = u64::from(depth.consumers).saturating_sub(live);
            match self.shard {
                // the shard's number, never a tenant's anything: at most --events-shards series
                Some(shard) => {
                    let shard = shard.to_string();
                    metrics::gauge!("klaxon_events_shard_messages", "shard" => shard.clone())
                        .set(f64::from(depth.messages));
                    metrics::gauge!("klaxon_events_shard_consumers", "shard" => shard)
                        .set(f64::from(depth.consumers));
                }
                None => metrics::gauge!(FOREIGN_CONSUMERS).set(extra as f64),
            }
            foreign.observe(extra, Instant::now(), &self.queue, depth.consumers, live);
        }
    }
}

/// When to warn about foreign consumers: at once, then at most every [`WARN_EVERY`] while they stay, and once
/// (at info) when they are gone.
#[derive(Debug, Default)]
struct Foreign {
    warned_at: Option<Instant>,
}

impl Foreign {
    /// What to say about `extra` consumers at `now`: `Some(true)` warn, `Some(false)` all clear, `None` nothing.
    fn decide(&mut self, extra: u64, now: Instant) -> Option<bool> {
        match (extra, self.warned_at) {
            (0, None) => None,
            (0, Some(_)) => {
                self.warned_at = None;
                Some(false)
            }
            (_, Some(at)) if now.duration_since(at) < WARN_EVERY => None,
            _ => {
                self.warned_at = Some(now);
                Some(true)
            }
        }
    }

    fn observe(&mut self, extra: u64, now: Instant, queue: &str, consumers: u32, klaxon: u64) {
        match self.decide(extra, now) {
            Some(true) => tracing::warn!(
                queue,
                consumers,
                klaxon_workers = klaxon,
                foreign = extra,
                "the events queue has consumers that are not Klaxon workers of this namespace (Hawk's notifier \
                 still running?): each consumer sees part of the stream, so thresholds are under-counted; stop \
                 them (rabbitmqctl list_consumers / list_connections name show who they are)"
            ),
            Some(false) => tracing::info!(queue, consumers, "the events queue's other consumers are gone"),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_consumers_are_warned_at_once_then_at_most_every_interval_and_cleared_once() {
        let t0 = Instant::now();
        let mut f = Foreign::default();
        let s = Duration::from_secs;
        let steps = [
            (0, s(0), None),
            (1, s(0), Some(true)),
            (1, s(10), None),
            (2, s(599), None),
            (1, WARN_EVERY, Some(true)),
            (1, WARN_EVERY + s(10), None),
            (0, WARN_EVERY + s(20), Some(false)),
            (0, WARN_EVERY + s(30), None),
            (1, WARN_EVERY + s(40), Some(true)),
        ];
        for (i, (extra, at, want)) in steps.into_iter().enumerate() {
            assert_eq!(f.decide(extra, t0 + at), want, "step {i}: {extra} at {at:?}");
        }
    }
}
