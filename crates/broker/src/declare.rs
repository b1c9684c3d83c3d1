//! Queue declaration: "queues used as they are" (see the crate docs). A passive declare looks first, on a
//! throwaway channel ([`Probe`]) since a failed one closes its channel; only a missing queue is declared, and a
//! `PRECONDITION_FAILED` race with another process ends with the winner's queue used as it is ([`Ensured`]).

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ExchangeKind};

use crate::error::{amqp, reply_code, NOT_FOUND, PRECONDITION_FAILED};
use crate::{BrokerError, QUEUE_DECLARE_PASSIVE};

/// How [`Publisher::ensure_queue`](crate::Publisher::ensure_queue) found a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The queue was there: it is used with its own type and arguments.
    Existing,
    /// It was missing and this call declared it.
    Created,
}

/// Declares `name` durable with `args`; a queue that exists with other arguments is [`BrokerError::Incompatible`].
pub(crate) async fn declare_queue(
    channel: &Channel,
    name: &str,
    args: FieldTable,
) -> Result<(), BrokerError> {
    channel
        .queue_declare(name.into(), QueueDeclareOptions::durable(), args)
        .await
        .map(|_| ())
        .map_err(|source| {
            if reply_code(&source) == Some(PRECONDITION_FAILED)
                || source.to_string().contains("PRECONDITION_FAILED")
            {
                BrokerError::Incompatible {
                    queue: name.to_owned(),
                    source,
                }
            } else {
                BrokerError::Amqp {
                    op: "queue.declare",
                    source,
                }
            }
        })
}

/// Deletes queue `name` and the messages in it.
pub(crate) async fn delete_queue(channel: &Channel, name: &str) -> Result<(), BrokerError> {
    channel
        .queue_delete(name.into(), QueueDeleteOptions::default())
        .await
        .map(|_| ())
        .map_err(amqp("queue.delete"))
}

/// Closes a one-off channel before its connection: a channel merely dropped closes itself in the background,
/// and when that races the connection's close lapin reports a "Connection error" at ERROR level.
pub(crate) async fn close_channel(channel: &Channel) {
    let _ = channel.close(200, "bye".into()).await;
}

/// Throwaway channels for passive declares: a passive declare of a missing queue (404) closes its channel, so a
/// channel is opened when needed, reused while declares succeed and dropped after a failure.
pub(crate) struct Probe<'a> {
    conn: &'a Connection,
    channel: Option<Channel>,
}

impl<'a> Probe<'a> {
    /// A probe on `conn`; no channel is opened until one is needed.
    pub(crate) fn new(conn: &'a Connection) -> Self {
        Probe { conn, channel: None }
    }

    async fn channel(&mut self) -> Result<Channel, BrokerError> {
        if let Some(ch) = &self.channel {
            return Ok(ch.clone());
        }
        let ch = self.conn.create_channel().await.map_err(amqp("channel.open"))?;
        self.channel = Some(ch.clone());
        Ok(ch)
    }

    /// True when `queue` exists (a passive declare, which creates nothing and ignores arguments).
    async fn exists(&mut self, queue: &str) -> Result<bool, BrokerError> {
        let channel = self.channel().await?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        match channel
            .queue_declare(queue.into(), passive, FieldTable::default())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => self.passive_failed(e, QUEUE_DECLARE_PASSIVE).await,
        }
    }

    /// A passive declare that failed: the broker closed the channel either way; `NOT_FOUND` means it is not there
    /// (false), anything else is an error of `op`.
    async fn passive_failed(&mut self, e: lapin::Error, op: &'static str) -> Result<bool, BrokerError> {
        if let Some(ch) = self.channel.take() {
            close_channel(&ch).await;
        }
        if reply_code(&e) == Some(NOT_FOUND) {
            Ok(false)
        } else {
            Err(BrokerError::Amqp { op, source: e })
        }
    }

    /// True when exchange `name` exists (a passive declare, which creates nothing and ignores the type).
    pub(crate) async fn exchange_exists(&mut self, name: &str) -> Result<bool, BrokerError> {
        let channel = self.channel().await?;
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        match channel
            .exchange_declare(name.into(), ExchangeKind::Topic, passive, FieldTable::default())
            .await
        {
            Ok(()) => Ok(true),
            Err(e) => self.passive_failed(e, "exchange.declare (passive)").await,
        }
    }

    /// Runs `op` on the probe's channel; a failure closes only this throwaway channel.
    pub(crate) async fn run<F, Fut>(&mut self, op: F) -> Result<(), BrokerError>
    where
        F: FnOnce(Channel) -> Fut,
        Fut: std::future::Future<Output = Result<(), BrokerError>>,
    {
        let channel = self.channel().await?;
        let done = op(channel).await;
        if done.is_err() {
            if let Some(ch) = self.channel.take() {
                close_channel(&ch).await;
            }
        }
        done
    }

    /// Declares `queue` durable with `args`; a failure (e.g. 406, the queue appeared meanwhile with other
    /// arguments) closes only this throwaway channel.
    async fn declare(&mut self, queue: &str, args: FieldTable) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let declared = declare_queue(&channel, queue, args).await;
        if declared.is_err() {
            if let Some(ch) = self.channel.take() {
                close_channel(&ch).await;
            }
        }
        declared
    }

    /// Closes the probe's channel, if one is open.
    pub(crate) async fn close(self) {
        if let Some(ch) = self.channel {
            close_channel(&ch).await;
        }
    }
}

/// Uses `queue` as it is when it exists; declares it with `args` when it does not (see the crate docs).
pub(crate) async fn ensure_queue(
    probe: &mut Probe<'_>,
    queue: &str,
    args: FieldTable,
) -> Result<Ensured, BrokerError> {
    if probe.exists(queue).await? {
        tracing::debug!(queue, "queue exists; used with its own type and arguments");
        return Ok(Ensured::Existing);
    }
    match probe.declare(queue, args).await {
        Ok(()) => {
            tracing::debug!(queue, "queue declared");
            Ok(Ensured::Created)
        }
        // Made by someone else between the look and the declare, with other settings: use theirs.
        Err(BrokerError::Incompatible { .. }) if probe.exists(queue).await? => {
            tracing::info!(
                queue,
                "queue was declared meanwhile by another process with other settings; used as it is"
            );
            Ok(Ensured::Existing)
        }
        Err(e) => Err(e),
    }
}
