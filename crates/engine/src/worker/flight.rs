//! Batches in flight (`--batches-in-flight`, [`WorkerConfig::in_flight`]): one consume loop keeps up to that many
//! batches going at once, so batch n+1 is taken, parsed and counted while batch n opens its alerts and waits for
//! its publisher confirms.
//!
//! ```text
//! deliveries ─▶ batch n   parse · rules · plan ─┬ count ┬ alerts · digests · publish, confirmed ─┬ ack n
//!               batch n+1       parse · rules · plan ─┴──────┬ count ┬ … publish, confirmed ───┴─┬ ack n+1
//!                                            (the turn: n+1 counts when n passed it)     (acks in order)
//! ```
//!
//! Three rules keep a worker's effects what they were with one batch at a time:
//! * **One project's events are counted in their order.** Each batch holds a [`Turn`]: it counts only when the
//!   batch before it has passed its turn, which it does when its Redis work is done — right after its counting
//!   when it has no firing (the common case under load), after its alerts, digests and holds are written when it
//!   fires (the next batch's touches then find the alerts it opened), and only after its publish when it resolved
//!   NO_EVENTS silences (their settling must precede the next batch's look at them). Redis therefore sees the
//!   counting calls of one worker in delivery order, as before.
//! * **Acks in order.** The batches finish in the order they were taken ([`FuturesOrdered`]), and each is acked,
//!   when it finishes, with one multiple-ack up to its last delivery tag: deliveries are taken in tag order and a
//!   batch is consecutive deliveries, so that ack covers exactly the batches up to it, every one of them durable.
//!   (Acking each batch's own tags without `multiple` would let a later batch be acked before an earlier one
//!   that then fails: correct too — its outcome is durable — but one ack frame per delivery instead of one per
//!   batch, and a redelivery with holes; the ordered multiple-ack keeps "everything up to here is done".)
//! * **A failed session hands everything back.** The first error (of any batch in flight, or of the consumer)
//!   ends the session: the batches in flight are dropped unacked and the session closes its channel, so RabbitMQ
//!   redelivers all of them, as after a crash. A batch whose earlier batch failed never counts (its turn is never
//!   passed: [`EngineError::EarlierBatchFailed`]). The counting is idempotent per event id and every notification
//!   keeps its id, so the redelivered batches count and notify once (the interleavings are the ones two workers
//!   of a fleet already produce).
//!
//! Everything runs in the consume loop's task (no spawn, no thread hand-off): the batches in flight are futures
//! polled while the loop waits for deliveries. With `in_flight = 1` the loop takes the next batch only after the
//! previous one was acked: the one-batch-at-a-time worker of earlier versions.

use std::time::Instant;

use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use klaxon_broker::{Consumer, Delivery, QueuedAck};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Batches, WorkerConfig};
use crate::consumers::Presence;
use crate::internal_events::BatchAcked;
use crate::EngineError;

/// A batch's place in the counting order: it counts after [`Turn::take`], and lets the next batch count with
/// [`Turn::pass`]. Dropped without passing (the batch failed), the next batch's `take` fails.
pub(super) struct Turn {
    wait: Option<oneshot::Receiver<()>>,
    next: Option<oneshot::Sender<()>>,
}

impl Turn {
    /// Waits until the batch before this one passed its turn; fails when that batch failed instead.
    pub async fn take(&mut self) -> Result<(), EngineError> {
        if let Some(wait) = self.wait.take() {
            wait.await.map_err(|_| EngineError::EarlierBatchFailed)?;
        }
        Ok(())
    }

    /// Lets the next batch count (once; again is a no-op).
    pub fn pass(&mut self) {
        if let Some(next) = self.next.take() {
            let _ = next.send(());
        }
    }
}

/// The turns of one consume loop, chained: each new batch's turn waits for the previous batch's.
#[derive(Default)]
struct Turns {
    last: Option<oneshot::Receiver<()>>,
}

impl Turns {
    fn next(&mut self) -> Turn {
        let (tx, rx) = oneshot::channel();
        Turn {
            wait: self.last.replace(rx),
            next: Some(tx),
        }
    }
}

/// A batch whose outcome is durable: what its ack needs.
pub(super) struct Finished {
    /// Its highest delivery tag.
    pub last_tag: u64,
    /// Its deliveries.
    pub events: usize,
    /// When its first delivery was taken.
    pub started: Instant,
}

/// What the loop waits for next.
// One value at a time on the loop's stack, moved out at once: boxing the delivery would cost an allocation per
// batch for nothing.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// The oldest batch in flight finished (or failed).
    Done(Result<Finished, EngineError>),
    /// A delivery (or the consumer's end).
    Delivery(Option<Result<Delivery, klaxon_broker::BrokerError>>),
    /// Shutdown began.
    Shutdown,
}

/// One consumed queue's loop: batches taken in delivery order, up to `in_flight` of them processed at once,
/// acked in order. On shutdown the consumer is cancelled, the batches in flight finish and are acked.
pub(super) async fn consume_loop(
    batches: &Batches<'_>,
    consumer: &mut Consumer,
    shutdown: &CancellationToken,
    presence: &Presence,
) -> Result<(), EngineError> {
    let config: &WorkerConfig = &batches.deps.config;
    let in_flight = config.in_flight.max(1);
    let mut flight = FuturesOrdered::new();
    let mut turns = Turns::default();
    // The last ack, queued on the channel and not yet seen written.
    let mut last: Option<QueuedAck> = None;
    loop {
        // Room for one more batch: the oldest finishes first (the others keep going meanwhile).
        while flight.len() >= in_flight {
            if let Some(done) = flight.next().await {
                ack(consumer, presence, &mut last, done?).await?;
            }
        }
        // The next batch's first delivery; batches that finish meanwhile are acked.
        let first = loop {
            let step = tokio::select! {
                biased;
                Some(done) = flight.next(), if !flight.is_empty() => Step::Done(done),
                () = shutdown.cancelled() => Step::Shutdown,
                next = consumer.next() => Step::Delivery(next),
            };
            match step {
                Step::Done(done) => ack(consumer, presence, &mut last, done?).await?,
                Step::Delivery(Some(d)) => break d?,
                Step::Delivery(None) => return Err(EngineError::ConsumerClosed),
                Step::Shutdown => {
                    // No new deliveries; the ones received and not taken go back when the channel closes (no
                    // ack covers them: every batch in flight holds lower tags).
                    let _ = consumer.cancel().await;
                    while let Some(done) = flight.next().await {
                        ack(consumer, presence, &mut last, done?).await?;
                    }
                    // the last ack is written before the session closes the channel
                    if let Some(a) = last.take() {
                        a.written().await?;
                    }
                    return Ok(());
                }
            }
        };
        let started = Instant::now();
        let mut batch = vec![first];
        take_ready(consumer, &mut batch, config.batch_max)?;
        // A lone delivery of a quiet stream is processed at once: a timer would cost a wake-up of its own and add
        // its wait to the latency, for nothing to batch. When others came with it (a burst, a backlog, a busy
        // stream), let the batch fill for `batch_wait` without being woken per delivery, then take what has
        // arrived: one wake-up per batch instead of one per delivery (each is a cross-thread hand-off from lapin's
        // I/O thread). The batches in flight go on meanwhile.
        if batch.len() > 1 && batch.len() < config.batch_max && !config.batch_wait.is_zero() {
            let sleep = tokio::time::sleep(config.batch_wait);
            tokio::pin!(sleep);
            loop {
                let done = tokio::select! {
                    biased;
                    Some(done) = flight.next(), if !flight.is_empty() => done,
                    () = &mut sleep => break,
                };
                ack(consumer, presence, &mut last, done?).await?;
            }
            take_ready(consumer, &mut batch, config.batch_max)?;
        }
        flight.push_back(batches.process(batch, turns.next(), started));
    }
}

/// Acks `done` and with it every batch before it (they finished before it: [`FuturesOrdered`]).
async fn ack(
    consumer: &Consumer,
    presence: &Presence,
    last: &mut Option<QueuedAck>,
    done: Finished,
) -> Result<(), EngineError> {
    // Written long since (the I/O thread writes it at once), so no wait: a failed ack ends the session before
    // another is queued.
    if let Some(a) = last.take() {
        a.written().await?;
    }
    // Queued, not awaited: waiting for lapin's I/O thread to have written it would cost this task a wake-up per
    // batch.
    *last = Some(consumer.ack_up_to_queued(done.last_tag)?);
    presence.taken(done.events as u64);
    BatchAcked {
        events: done.events,
        elapsed: done.started.elapsed(),
    }
    .emit();
    Ok(())
}

/// Moves the deliveries that have already arrived into `batch`, up to `max`, without waiting.
fn take_ready(consumer: &mut Consumer, batch: &mut Vec<Delivery>, max: usize) -> Result<(), EngineError> {
    while batch.len() < max {
        match consumer.next().now_or_never() {
            Some(Some(d)) => batch.push(d?),
            Some(None) | None => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_counts_only_after_the_one_before_passed_its_turn() {
        let mut turns = Turns::default();
        let (mut first, mut second, mut third) = (turns.next(), turns.next(), turns.next());
        first.take().await.expect("the first batch waits for nobody");
        // the second waits while the first holds its turn
        assert!(second.take().now_or_never().is_none());
        first.pass();
        second.take().await.expect("passed");
        second.pass();
        second.pass(); // again: a no-op
        third.take().await.expect("passed on");
    }

    #[tokio::test]
    async fn a_batch_after_a_failed_one_never_counts() {
        let mut turns = Turns::default();
        let (first, mut second, mut third) = (turns.next(), turns.next(), turns.next());
        drop(first); // failed without passing
        assert!(matches!(
            second.take().await,
            Err(EngineError::EarlierBatchFailed)
        ));
        drop(second);
        assert!(matches!(third.take().await, Err(EngineError::EarlierBatchFailed)));
    }
}
