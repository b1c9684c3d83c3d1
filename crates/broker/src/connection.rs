//! [`Broker`]: one AMQP connection, named after the part of the process that holds it ([`process_label`]),
//! to one node of a cluster; it opens the channels everything else uses (a [`Publisher`], a [`Consumer`],
//! one-off channels for passive declares and deletes) and answers the operator's questions (queue depths,
//! whether an exchange exists).

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use crate::declare::{close_channel, delete_queue};
use crate::error::{amqp, io_error, reply_code, NOT_FOUND};
use crate::url::{nodes, parse_url};
use crate::{BrokerError, Consumer, Publisher, QueueType, Reader, Topology, QUEUE_DECLARE_PASSIVE};

/// The AMQP frame size Klaxon proposes (bytes): see [`Broker::connect`].
pub const FRAME_MAX: u32 = 16 * 1024;

/// One connection to RabbitMQ.
#[derive(Clone)]
pub struct Broker {
    conn: Arc<Connection>,
}

impl Broker {
    /// Connects (each attempt bounded by `timeout`) as a client: [`Broker::connect_as`] with role `client`.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self, BrokerError> {
        Self::connect_as(url, timeout, "client").await
    }

    /// Connects (each attempt bounded by `timeout`), naming the connection [`process_label`]`(role)` — what
    /// `rabbitmqctl list_connections name` and the management UI show, so an operator can tell Klaxon's
    /// connections (and which part of which process holds them) from other applications'. `url` may be a
    /// comma-separated list of the nodes of one RabbitMQ cluster: they are tried in turn, starting at a random
    /// one (so a fleet spreads over the nodes), and the first that accepts wins; a node that is down only costs
    /// its connect attempt.
    pub async fn connect_as(url: &str, timeout: Duration, role: &str) -> Result<Self, BrokerError> {
        let name = process_label(role);
        let urls = nodes(url);
        let start = if urls.len() > 1 {
            use rand::Rng;
            rand::rng().random_range(0..urls.len())
        } else {
            0
        };
        let mut last = None;
        for i in 0..urls.len().max(1) {
            let one = urls.get((start + i) % urls.len().max(1)).copied().unwrap_or(url);
            match Self::connect_one(one, timeout, &name).await {
                Ok(b) => return Ok(b),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| BrokerError::Amqp {
            op: "connect",
            source: io_error(std::io::ErrorKind::InvalidInput, "no AMQP URL"),
        }))
    }

    async fn connect_one(url: &str, timeout: Duration, name: &str) -> Result<Self, BrokerError> {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let mut uri = parse_url(url)?.0;
        // lapin keeps a send and a receive buffer of 32 frames per connection. Without a frame_max of our own they
        // start small and are grown (and filled) to 32 × the server's 128 KiB once connected: 8 MiB resident per
        // connection, 45 of `klaxon run`'s 65 MiB (6 connections). Proposing a size sizes them once, untouched
        // until used, and 16 KiB frames bound them to 1 MiB per connection even when used; Klaxon's messages are
        // a few KiB at most (bigger ones are split into frames). A URL's own `?frame_max=` wins.
        uri.query.frame_max.get_or_insert(FRAME_MAX);
        let conn = tokio::time::timeout(timeout, Connection::connect_uri(uri, props))
            .await
            .map_err(|_| BrokerError::Amqp {
                op: "connect",
                source: io_error(std::io::ErrorKind::TimedOut, "connection timed out"),
            })?
            .map_err(amqp("connect"))?;
        Ok(Broker { conn: Arc::new(conn) })
    }

    /// True while the connection is usable.
    pub fn is_connected(&self) -> bool {
        self.conn.status().connected()
    }

    /// A channel for declaring and other one-off operations.
    pub(crate) async fn channel(&self) -> Result<Channel, BrokerError> {
        self.conn.create_channel().await.map_err(amqp("channel.open"))
    }

    /// A channel in confirm mode, for publishing.
    pub async fn publisher(&self) -> Result<Publisher, BrokerError> {
        let channel = self.channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(amqp("confirm.select"))?;
        Ok(Publisher {
            channel,
            conn: self.conn.clone(),
        })
    }

    /// Starts consuming `queue` with manual acks and at most `prefetch` unacked messages.
    pub async fn consume(&self, queue: &str, prefetch: u16, tag: &str) -> Result<Consumer, BrokerError> {
        let channel = self.channel().await?;
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(amqp("basic.qos"))?;
        let inner = channel
            .basic_consume(
                queue.into(),
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("basic.consume"))?;
        Ok(Consumer {
            channel,
            inner,
            tag: tag.to_owned(),
        })
    }

    /// A [`Reader`]: messages taken one at a time, on a channel of its own.
    pub async fn reader(&self) -> Result<Reader, BrokerError> {
        Ok(Reader {
            channel: self.channel().await?,
        })
    }

    /// Closes the connection politely.
    pub async fn close(&self) {
        let _ = self.conn.close(200, "bye".into()).await;
    }

    /// How many messages and consumers `queue` has, read by a passive declare (which creates nothing);
    /// `None` when the queue does not exist. A passive declare of a missing queue closes its channel, so each
    /// call uses a channel of its own.
    pub async fn queue_depth(&self, queue: &str) -> Result<Option<QueueDepth>, BrokerError> {
        let channel = self.channel().await?;
        let declared = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(q) => {
                let _ = channel.close(200, "bye".into()).await;
                Ok(Some(QueueDepth {
                    messages: q.message_count(),
                    consumers: q.consumer_count(),
                }))
            }
            Err(e) if reply_code(&e) == Some(NOT_FOUND) => Ok(None),
            Err(source) => {
                close_channel(&channel).await;
                Err(BrokerError::Amqp {
                    op: QUEUE_DECLARE_PASSIVE,
                    source,
                })
            }
        }
    }

    /// Deletes `queue` and the messages in it (benchmarks, tests), on a channel of its own.
    pub async fn delete_queue(&self, queue: &str) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let deleted = delete_queue(&channel, queue).await;
        close_channel(&channel).await;
        deleted
    }

    /// Whether exchange `name` exists (a passive declare on a channel of its own, which creates nothing).
    pub async fn exchange_exists(&self, name: &str) -> Result<bool, BrokerError> {
        let channel = self.channel().await?;
        let declared = channel
            .exchange_declare(
                name.into(),
                lapin::ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(()) => {
                close_channel(&channel).await;
                Ok(true)
            }
            Err(e) if reply_code(&e) == Some(NOT_FOUND) => Ok(false),
            Err(source) => {
                close_channel(&channel).await;
                Err(BrokerError::Amqp {
                    op: "exchange.declare (passive)",
                    source,
                })
            }
        }
    }

    /// Whether the broker knows the `x-consistent-hash` exchange type (the plugin `--events-shards` needs):
    /// declares the throwaway exchange `name` of that type (auto-delete), then deletes it. A broker without the
    /// plugin refuses with a connection error, which closes this whole connection: use one of its own.
    pub async fn has_consistent_hash(&self, name: &str) -> Result<bool, BrokerError> {
        let channel = self.channel().await?;
        let declared = channel
            .exchange_declare(
                name.into(),
                lapin::ExchangeKind::Custom(crate::shards::CONSISTENT_HASH.to_owned()),
                ExchangeDeclareOptions {
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| crate::shards::declare_error(name, e));
        match declared {
            Ok(()) => {
                let _ = channel
                    .exchange_delete(name.into(), ExchangeDeleteOptions::default())
                    .await;
                close_channel(&channel).await;
                Ok(true)
            }
            Err(BrokerError::NoExchangeType { .. }) => Ok(false),
            Err(e) => {
                close_channel(&channel).await;
                Err(e)
            }
        }
    }

    /// Declares `queue` durable, of `queue_type`, with `x-single-active-consumer` (RabbitMQ hands all its messages to
    /// one consumer at a time, the others standing by), on a channel of its own. For benchmarks comparing it with
    /// Klaxon's shards, which every worker consumes (docs/clusters.md says why); a process uses such a queue as it
    /// is when it finds it.
    pub async fn declare_single_active(&self, queue: &str, queue_type: QueueType) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let mut args = queue_type.arguments();
        args.insert(
            "x-single-active-consumer".into(),
            lapin::types::AMQPValue::Boolean(true),
        );
        let declared = crate::declare::declare_queue(&channel, queue, args).await;
        close_channel(&channel).await;
        declared
    }

    /// Deletes exchange `name`, on a channel of its own.
    pub async fn delete_exchange(&self, name: &str) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let deleted = channel
            .exchange_delete(name.into(), ExchangeDeleteOptions::default())
            .await
            .map_err(amqp("exchange.delete"));
        close_channel(&channel).await;
        deleted
    }

    /// Declares every queue of `topology` strictly, on a channel of its own: a queue that exists with other
    /// settings fails with [`BrokerError::Incompatible`]. Then the delay engine and its bindings (idempotent).
    /// Processes use [`Publisher::declare`] instead, which uses existing queues as they are.
    pub async fn declare_topology(&self, topology: &Topology) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let declared = topology.declare(&channel).await;
        close_channel(&channel).await;
        declared
    }

    /// Deletes every queue and exchange of `topology`, the delay engine's included, on a channel of its own
    /// (tests, benchmarks, decommissioning). Messages in them are lost.
    pub async fn delete_topology(&self, topology: &Topology) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let deleted = topology.delete(&channel).await;
        close_channel(&channel).await;
        deleted
    }
}

/// A queue's depth (see [`Broker::queue_depth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages ready for delivery.
    pub messages: u32,
    /// Consumers attached.
    pub consumers: u32,
}

/// `klaxon <role> <host> <pid>`: the name of this process's AMQP connections (see [`Broker::connect_as`]) and the
/// consumer tag of its long-lived consumers, e.g. `klaxon worker api-7f9c 4711`. The host is the machine's (in
/// Kubernetes: the pod's) host name; `role` says which part of the process holds the connection.
pub fn process_label(role: &str) -> String {
    format!("klaxon {role} {} {}", host_name(), std::process::id())
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`), bounded to 64 characters;
/// `unknown-host` when neither says.
pub fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| {
                h.trim()
                    .chars()
                    .filter(|c| !c.is_whitespace() && !c.is_control())
                    .take(64)
                    .collect::<String>()
            })
            .unwrap_or_default();
        if name.is_empty() {
            "unknown-host".to_owned()
        } else {
            name
        }
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_labels_name_role_host_and_pid() {
        let label = process_label("worker");
        let parts: Vec<&str> = label.split(' ').collect();
        assert_eq!(parts.len(), 4, "{label}");
        assert_eq!(&parts[..2], ["klaxon", "worker"]);
        assert!(!parts[2].is_empty() && parts[2].len() <= 64, "{label}");
        assert_eq!(parts[3], std::process::id().to_string());
    }
}
