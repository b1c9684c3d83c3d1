//! [`Consumer`]: one queue consumed on a channel of its own, with manual acknowledgements and a prefetch bound
//! (opened by [`Broker::consume`](crate::Broker::consume)). Deliveries are acked after their outcome is durable,
//! never on receipt.

use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicNackOptions};
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
