//! [`Publisher`]: a channel in confirm mode. Every publish is mandatory and waits for the broker's confirm, so
//! a caller acks what caused a message only once the message is durable. Also declares queues the
//! "used as they are" way ([`crate::declare`]); the delayed form of publishing is in [`crate::delay`].

use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt;

use lapin::options::BasicPublishOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use crate::declare::{declare_queue, ensure_queue, Probe};
use crate::error::amqp;
use crate::{BrokerError, Ensured, Outgoing, QueueType, Topology};

/// A channel in confirm mode.
pub struct Publisher {
    pub(crate) channel: Channel,
    /// Its connection, for the throwaway channels of [`Publisher::ensure_queue`].
    pub(crate) conn: Arc<Connection>,
}

/// Publishes with confirms, as one step: every publish is queued on the channel first, in order (the first poll
/// of lapin's `basic_publish` registers its confirm and pushes its frames), so lapin's I/O thread is woken once
/// and writes them all; then their writes and the broker's confirms are awaited. Awaiting each publish before
/// queuing the next would cost a hand-off to that thread and back per message.
pub(crate) async fn publish_queued<'q, F>(
    publishes: impl IntoIterator<Item = (F, &'q str)>,
) -> Result<(), BrokerError>
where
    F: Future<Output = lapin::Result<lapin::PublisherConfirm>>,
{
    let mut queued = Vec::new();
    for (publish, queue) in publishes {
        let mut publish = Box::pin(publish);
        // written already (rare) or queued: the rest is awaited below, in order
        let done = (&mut publish).now_or_never();
        queued.push((done, publish, queue));
    }
    let mut confirms = Vec::with_capacity(queued.len());
    for (done, publish, queue) in queued {
        let confirm = match done {
            Some(written) => written,
            None => publish.await,
        };
        confirms.push((confirm.map_err(amqp("basic.publish"))?, queue));
    }
    for (confirm, queue) in confirms {
        check_confirm(confirm.await.map_err(amqp("publisher confirm"))?, queue)?;
    }
    Ok(())
}

/// The outcome of one confirmed publish.
pub(crate) fn check_confirm(c: lapin::Confirmation, queue: &str) -> Result<(), BrokerError> {
    use lapin::Confirmation;
    match c {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err(BrokerError::Unroutable {
            queue: queue.to_owned(),
        }),
        Confirmation::Nack(_) | Confirmation::NotRequested => Err(BrokerError::Nacked {
            queue: queue.to_owned(),
        }),
    }
}

impl Publisher {
    /// Publishes every message, then waits until the broker confirmed all of them. Publishes are mandatory: a
    /// message no queue takes (its queue was deleted) fails with [`BrokerError::Unroutable`] instead of being
    /// dropped by the broker.
    pub async fn publish_all(&self, messages: &[Outgoing]) -> Result<(), BrokerError> {
        publish_queued(messages.iter().map(|m| {
            let publish = self.channel.basic_publish(
                m.exchange.as_str().into(),
                m.queue.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &m.body,
                m.properties(),
            );
            (publish, m.target())
        }))
        .await
    }

    /// Makes sure every queue of `topology` exists — a queue that exists is used as it is, a missing one is
    /// declared with the topology's queue type (see the crate docs) — and, when sharded, the shard exchange the
    /// same way and the shard queues' bindings ([`crate::shards`]); then declares the delay engine and its
    /// bindings (idempotent).
    pub async fn declare(&self, topology: &Topology) -> Result<(), BrokerError> {
        let mut probe = Probe::new(&self.conn);
        let mut result = Ok(());
        for q in topology.queues() {
            result = ensure_queue(&mut probe, &q, topology.arguments_of(&q))
                .await
                .map(|_| ());
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() && topology.sharded() {
            result = crate::shards::ensure_exchange(&mut probe, &topology.shard_exchange()).await;
        }
        probe.close().await;
        result?;
        if topology.sharded() {
            crate::shards::bind(&self.channel, topology).await?;
        }
        topology.declare_delay(&self.channel).await
    }

    /// Makes sure queue `name` exists: used as it is when it does, declared durable with `queue_type` when it
    /// does not (see the crate docs). For queues outside a [`Topology`], e.g. Hawk's `sender/<channel>`.
    pub async fn ensure_queue(&self, name: &str, queue_type: QueueType) -> Result<Ensured, BrokerError> {
        let mut probe = Probe::new(&self.conn);
        let ensured = ensure_queue(&mut probe, name, queue_type.arguments()).await;
        probe.close().await;
        ensured
    }

    /// Declares one durable queue without arguments (idempotent), as other applications' workers declare
    /// theirs (Hawk's `assertQueue(name)`); strict: a queue that exists with other arguments fails with
    /// [`BrokerError::Incompatible`] (and closes this publisher's channel).
    pub async fn declare_plain(&self, name: &str) -> Result<(), BrokerError> {
        declare_queue(&self.channel, name, FieldTable::default()).await
    }

    /// Closes the channel.
    pub async fn close(&self) {
        let _ = self.channel.close(200, "bye".into()).await;
    }
}
