//! [`Consumer`]: one queue consumed on a channel of its own, with manual acknowledgements and a prefetch bound
//! (opened by [`Broker::consume`](crate::Broker::consume)). Deliveries are acked after their outcome is durable,
//! never on receipt.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicGetOptions, BasicNackOptions};
use lapin::Channel;

use crate::error::amqp;
use crate::{BrokerError, Delivery};

/// A consumer with manual acknowledgements.
pub struct Consumer {
    pub(crate) channel: Channel,
    pub(crate) inner: lapin::Consumer,
    pub(crate) tag: String,
}

impl Consumer {
    /// The next delivery; `None` when the consumer was cancelled or the channel closed.
    pub async fn next(&mut self) -> Option<Result<Delivery, BrokerError>> {
        self.inner
            .next()
            .await
            .map(|r| r.map(Delivery::from).map_err(amqp("basic.deliver")))
    }

    /// The next delivery if one arrives within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Option<Result<Delivery, BrokerError>>> {
        tokio::time::timeout(wait, self.next()).await.ok()
    }

    /// Acks every outstanding delivery up to and including `tag`.
    pub async fn ack_up_to(&self, tag: u64) -> Result<(), BrokerError> {
        self.channel
            .basic_ack(tag, BasicAckOptions { multiple: true })
            .await
            .map_err(amqp("basic.ack"))
    }

    /// Acks every outstanding delivery up to and including `tag` without waiting for lapin's I/O thread to write
    /// the frame: it is queued on the channel here, before this returns, in order before anything sent on the
    /// channel later (a `basic.cancel` or the channel's close included). AMQP has no reply to an ack, so waiting
    /// would only learn that the frame reached the socket, at the cost of the I/O thread waking the caller once
    /// more; a connection lost before the write is the same as one lost just after it (the broker hands the
    /// deliveries back). An error of the channel's state at the call is returned now; one of the write is
    /// returned by [`QueuedAck::written`], which the caller must await before it counts on the ack (its next
    /// batch, the drain).
    pub fn ack_up_to_queued(&self, tag: u64) -> Result<QueuedAck, BrokerError> {
        self.queue_ack(tag, true)
    }

    /// Acks one delivery the way [`Consumer::ack_up_to_queued`] acks many: queued now, its write checked by
    /// [`QueuedAck::written`] (or [`QueuedAck::check`]) later.
    pub fn ack_queued(&self, tag: u64) -> Result<QueuedAck, BrokerError> {
        self.queue_ack(tag, false)
    }

    fn queue_ack(&self, tag: u64, multiple: bool) -> Result<QueuedAck, BrokerError> {
        let channel = self.channel.clone();
        let mut ack: PendingAck =
            Box::pin(async move { channel.basic_ack(tag, BasicAckOptions { multiple }).await });
        // The first poll queues the frame (lapin's `send_method_frame`); a no-op waker: nobody is woken when the
        // I/O thread has written it, `written` looks later.
        match (&mut ack).now_or_never() {
            Some(done) => done.map(|()| QueuedAck(None)).map_err(amqp("basic.ack")),
            None => Ok(QueuedAck(Some(ack))),
        }
    }

    /// Acks one delivery.
    pub async fn ack(&self, tag: u64) -> Result<(), BrokerError> {
        self.channel
            .basic_ack(tag, BasicAckOptions { multiple: false })
            .await
            .map_err(amqp("basic.ack"))
    }

    /// Hands one delivery back to the queue.
    pub async fn requeue(&self, tag: u64) -> Result<(), BrokerError> {
        self.channel
            .basic_nack(
                tag,
                BasicNackOptions {
                    multiple: false,
                    requeue: true,
                },
            )
            .await
            .map_err(amqp("basic.nack"))
    }

    /// Stops new deliveries; already received ones can still be acked.
    pub async fn cancel(&self) -> Result<(), BrokerError> {
        self.channel
            .basic_cancel(self.tag.as_str().into(), BasicCancelOptions::default())
            .await
            .map_err(amqp("basic.cancel"))
    }

    /// Closes the channel; unacked deliveries go back to the queue.
    pub async fn close(&self) {
        let _ = self.channel.close(200, "bye".into()).await;
    }
}

/// A queue read one message at a time (`basic.get`) on a channel of its own (opened by
/// [`Broker::reader`](crate::Broker::reader)), each message held unacked until it is acked or the reader closes —
/// then it goes back to the queue in its place. Unlike a [`Consumer`]'s, its unacked messages are bounded by no
/// prefetch (RabbitMQ applies none to `basic.get`): a pass over a whole queue (`klaxon invalid`) reaches its
/// last message, keeping in memory only the ones the caller keeps.
pub struct Reader {
    pub(crate) channel: Channel,
}

impl Reader {
    /// The queue's next message, held unacked; `None` when the queue has no more ready.
    pub async fn get(&self, queue: &str) -> Result<Option<Delivery>, BrokerError> {
        let got = self
            .channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(amqp("basic.get"))?;
        Ok(got.map(|m| Delivery::from(m.delivery)))
    }

    /// Acks one message (it leaves the queue).
    pub async fn ack(&self, tag: u64) -> Result<(), BrokerError> {
        self.channel
            .basic_ack(tag, BasicAckOptions { multiple: false })
            .await
            .map_err(amqp("basic.ack"))
    }

    /// Closes the channel; unacked messages go back to the queue.
    pub async fn close(&self) {
        let _ = self.channel.close(200, "bye".into()).await;
    }
}

type PendingAck = Pin<Box<dyn Future<Output = lapin::Result<()>> + Send>>;

/// An ack queued on its channel by [`Consumer::ack_up_to_queued`], not yet known to be written.
#[must_use = "an ack's failure must end the session: await `written`"]
pub struct QueuedAck(Option<PendingAck>);

impl QueuedAck {
    /// Waits until lapin's I/O thread has written the ack (by the next batch it has: no wait then) and returns
    /// its error, e.g. the channel closed before the frame went out (the broker then hands the deliveries back).
    pub async fn written(self) -> Result<(), BrokerError> {
        match self.0 {
            Some(ack) => ack.await.map_err(amqp("basic.ack")),
            None => Ok(()),
        }
    }

    /// Without waiting: `Some(result)` once the I/O thread has written the ack (or failed to), `None` while it
    /// is still queued (then `self` is kept for a later look).
    pub fn check(&mut self) -> Option<Result<(), BrokerError>> {
        match &mut self.0 {
            None => Some(Ok(())),
            Some(ack) => {
                let done = ack.now_or_never()?;
                self.0 = None;
                Some(done.map_err(amqp("basic.ack")))
            }
        }
    }
}
