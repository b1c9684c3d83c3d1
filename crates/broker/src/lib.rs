//! RabbitMQ for Klaxon: topology, consuming with manual acks, and publishing with publisher confirms.
//!
//! Every queue is durable and every message persistent. Publishing always waits for the broker's confirm
//! before the caller acks what caused it, so "acked" always means "the outcome is durable".
//!
//! ```text
//! <events-queue>            ← producers (Hawk's grouper); consumed by workers
//! <ns>.events.invalid       ← bodies that are not notifier tasks, untouched, reason in `x-klaxon-error`
//! <ns>.notify.<channel>     ← notification tasks, one queue per channel (email, telegram, slack, webhook, loop,
//!                             discord, teams, pagerduty); consumed by senders
//! <ns>.dead                 ← notifications that could not be delivered, reason in `x-klaxon-error`
//! <ns>.digest.flush         ← "close this digest window" messages, scheduled through the delay engine
//! <ns>.delay.L0 … L19       ← the delay engine (see [`delay`]): every delayed message in Klaxon waits here
//! ```
//!
//! # Queues used as they are
//!
//! A queue Klaxon consumes or publishes to may have been made by someone else: Hawk's grouper declares `notifier`
//! as a plain classic queue, Hawk's workers declare `sender/<channel>`, an operator may have made a queue by
//! hand. [`Publisher::declare`] therefore looks before it declares: a queue that exists is used with its own type
//! and arguments (a passive declare, on a throwaway channel since a failed one closes its channel), and only a
//! missing one is declared, with the configured [`QueueType`]. When two processes find the same queue missing at
//! once and declare it with different settings, the loser's declare fails with `PRECONDITION_FAILED`; it looks
//! again, finds the winner's queue and uses it as it is. [`Topology::declare`] is the strict form (every queue
//! with this topology's arguments, a mismatch is [`BrokerError::Incompatible`]).
#![deny(missing_docs)]

pub mod delay;

pub use delay::{DelayTopology, MAX_DELAY};

use std::time::Duration;

use futures_util::StreamExt;
use klaxon_core::ChannelKind;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

pub use lapin::message::Delivery;
pub use lapin::BasicProperties as Properties;

/// Header carrying the reason a message was set aside.
pub const ERROR_HEADER: &str = "x-klaxon-error";
/// Header counting the delivery attempts a notification has had so far: written by the senders when they
/// retry or dead-letter it, read back by them and by the dead-letter listing (`klaxon dead`, the API).
pub const ATTEMPTS_HEADER: &str = "x-klaxon-attempts";
/// Persistent delivery mode.
const PERSISTENT: u8 = 2;
/// The AMQP frame size Klaxon proposes (bytes): see [`Broker::connect`].
pub const FRAME_MAX: u32 = 16 * 1024;

/// Errors from the broker. Connection-level problems are transient: reconnect and try again.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Connecting, a channel, or an operation failed (transient: reconnect).
    #[error("RabbitMQ {op} failed: {source}")]
    Amqp {
        /// What was being done.
        op: &'static str,
        /// The client's error.
        #[source]
        source: lapin::Error,
    },
    /// The broker refused (nacked) a published message (transient: publish again).
    #[error("RabbitMQ did not confirm a message published to `{queue}`")]
    Nacked {
        /// Target queue.
        queue: String,
    },
    /// A message published to `queue` was returned as unroutable: the queue does not exist (deleted by
    /// hand?). Transient: the next session declares its queues again; the message was not lost, since the
    /// publish reports failure and its source is not acked.
    #[error("RabbitMQ returned a message published to `{queue}` as unroutable (does the queue exist?)")]
    Unroutable {
        /// Target queue.
        queue: String,
    },
    /// A queue that must exist does not (deleted by hand?). Transient: the next session declares its queues
    /// again.
    #[error("RabbitMQ has no queue `{queue}` (was it deleted?)")]
    NoQueue {
        /// The queue.
        queue: String,
    },
    /// The AMQP URL (or one node of a comma-separated list) cannot be parsed (permanent: fix the flag). The
    /// URL itself is not repeated, since it may carry a password.
    #[error("invalid AMQP URL: {0}")]
    InvalidUrl(String),
    /// A queue exists with other arguments (permanent until an operator fixes it).
    #[error(
        "queue `{queue}` exists with different settings ({source}); delete it or use the queue type it was made with"
    )]
    Incompatible {
        /// The queue.
        queue: String,
        /// The broker's error.
        #[source]
        source: lapin::Error,
    },
}

impl BrokerError {
    /// True when retrying (after reconnecting) may succeed.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            BrokerError::Incompatible { .. } | BrokerError::InvalidUrl(_)
        )
    }
}

/// The node URLs of `url` (a comma-separated list of the nodes of one cluster, or one URL), each parsed, before
/// anything connects: [`BrokerError::InvalidUrl`] names the node (by position) that cannot be read.
pub fn parse_urls(url: &str) -> Result<Vec<lapin::uri::AMQPUri>, BrokerError> {
    let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    if nodes.is_empty() {
        return Err(BrokerError::InvalidUrl("no URL given".into()));
    }
    let many = nodes.len() > 1;
    nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            parse_url(node).map_err(|e| match (many, e) {
                (true, BrokerError::InvalidUrl(why)) => {
                    BrokerError::InvalidUrl(format!("node #{}: {why}", i + 1))
                }
                (_, e) => e,
            })
        })
        .collect()
}

/// One node's URL. lapin's parser quotes no part of the URL in its messages except the scheme, so its message
/// is kept (cut short); a URL without a scheme gets a hint instead of "relative URL without a base".
fn parse_url(url: &str) -> Result<lapin::uri::AMQPUri, BrokerError> {
    if !url.contains("://") {
        return Err(BrokerError::InvalidUrl(
            "not a URL: expected amqp://user:password@host:5672/vhost (or amqps://)".into(),
        ));
    }
    url.parse()
        .map_err(|e: String| BrokerError::InvalidUrl(klaxon_core::text::one_line(&e, 200)))
}

fn amqp(op: &'static str) -> impl FnOnce(lapin::Error) -> BrokerError {
    move |source| BrokerError::Amqp { op, source }
}

/// Classic or quorum queues (`--queue-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// Classic durable queues.
    #[default]
    Classic,
    /// Raft-replicated quorum queues (also fine on a single node).
    Quorum,
}

impl std::str::FromStr for QueueType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "classic" => Ok(QueueType::Classic),
            "quorum" => Ok(QueueType::Quorum),
            other => Err(format!("unknown queue type `{other}`: use classic or quorum")),
        }
    }
}

impl QueueType {
    /// `classic` or `quorum`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }

    /// The declare arguments of a new queue of this type (`x-queue-type` for quorum queues; none for classic,
    /// which is how other applications declare theirs).
    fn arguments(self) -> FieldTable {
        let mut args = FieldTable::default();
        if self == QueueType::Quorum {
            args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
        }
        args
    }
}

/// Queue names of one namespace.
#[derive(Debug, Clone)]
pub struct Topology {
    namespace: String,
    events_queue: String,
    queue_type: QueueType,
}

impl Topology {
    /// Names for `namespace`, consuming events from `events_queue`.
    pub fn new(namespace: &str, events_queue: &str, queue_type: QueueType) -> Self {
        Topology {
            namespace: namespace.to_owned(),
            events_queue: events_queue.to_owned(),
            queue_type,
        }
    }

    /// The events queue.
    pub fn events_queue(&self) -> &str {
        &self.events_queue
    }

    /// `<ns>.events.invalid`.
    pub fn invalid_queue(&self) -> String {
        format!("{}.events.invalid", self.namespace)
    }

    /// `<ns>.notify.<channel>`.
    pub fn notify_queue(&self, channel: ChannelKind) -> String {
        format!("{}.notify.{}", self.namespace, channel.as_str())
    }

    /// `<ns>.dead`.
    pub fn dead_queue(&self) -> String {
        format!("{}.dead", self.namespace)
    }

    /// `<ns>.digest.flush`: digest windows due to be flushed (delayed messages).
    pub fn digest_flush_queue(&self) -> String {
        format!("{}.digest.flush", self.namespace)
    }

    /// `<ns>.alerts.timer`: alert timers (`resolveAfter`) that are due (delayed messages).
    pub fn alerts_timer_queue(&self) -> String {
        format!("{}.alerts.timer", self.namespace)
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The namespace's delay engine.
    pub fn delay(&self) -> DelayTopology {
        DelayTopology::new(&self.namespace)
    }

    /// Queues that receive delayed messages (bound to the delay engine): the notify queues, the digest
    /// flush queue and the alert timer queue.
    pub fn delay_targets(&self) -> Vec<String> {
        let mut q: Vec<String> = ChannelKind::ALL.iter().map(|c| self.notify_queue(*c)).collect();
        q.push(self.digest_flush_queue());
        q.push(self.alerts_timer_queue());
        q
    }

    /// Every queue of the namespace, in declaration order.
    pub fn queues(&self) -> Vec<String> {
        let mut q = vec![self.events_queue.clone(), self.invalid_queue(), self.dead_queue()];
        q.extend(ChannelKind::ALL.iter().map(|c| self.notify_queue(*c)));
        q.push(self.digest_flush_queue());
        q.push(self.alerts_timer_queue());
        q
    }

    /// The arguments of a queue this topology creates (`x-queue-type` for quorum queues).
    fn arguments(&self) -> FieldTable {
        self.queue_type.arguments()
    }

    /// The type of the queues this topology creates.
    pub fn queue_type(&self) -> QueueType {
        self.queue_type
    }

    /// Declares every queue with this topology's arguments (strictly: a queue that exists with other settings
    /// fails with [`BrokerError::Incompatible`]), the delay engine, and binds the delay targets to it
    /// (idempotent). Processes use [`Publisher::declare`] instead, which uses existing queues as they are.
    pub async fn declare(&self, channel: &Channel) -> Result<(), BrokerError> {
        for q in self.queues() {
            declare_queue(channel, &q, self.arguments()).await?;
        }
        self.declare_delay(channel).await
    }

    /// The delay engine (always Klaxon's own, with its own arguments) and the delay targets' bindings.
    async fn declare_delay(&self, channel: &Channel) -> Result<(), BrokerError> {
        let delay = self.delay();
        delay.declare(channel).await?;
        for q in self.delay_targets() {
            delay.bind(channel, &q).await?;
        }
        Ok(())
    }

    /// Deletes every queue and exchange of the namespace, the delay engine's included (tests, benchmarks,
    /// decommissioning). Messages in them are lost.
    pub async fn delete(&self, channel: &Channel) -> Result<(), BrokerError> {
        for q in self.queues() {
            delete_queue(channel, &q).await?;
        }
        self.delay().delete(channel).await
    }
}

async fn delete_queue(channel: &Channel, name: &str) -> Result<(), BrokerError> {
    channel
        .queue_delete(name.into(), lapin::options::QueueDeleteOptions::default())
        .await
        .map(|_| ())
        .map_err(amqp("queue.delete"))
}

/// The AMQP reply code of a channel error, when `e` is one (404 NOT_FOUND, 406 PRECONDITION_FAILED, …).
fn reply_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// 406 PRECONDITION_FAILED: e.g. `inequivalent arg 'x-queue-type'`.
const PRECONDITION_FAILED: u16 = 406;
/// 404 NOT_FOUND: e.g. a passive declare of a missing queue.
const NOT_FOUND: u16 = 404;

async fn declare_queue(channel: &Channel, name: &str, args: FieldTable) -> Result<(), BrokerError> {
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

/// One connection to RabbitMQ.
#[derive(Clone)]
pub struct Broker {
    conn: std::sync::Arc<Connection>,
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
        let urls: Vec<&str> = url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
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
            source: lapin::Error::from(lapin::ErrorKind::IOError(std::sync::Arc::new(
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "no AMQP URL"),
            ))),
        }))
    }

    async fn connect_one(url: &str, timeout: Duration, name: &str) -> Result<Self, BrokerError> {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let mut uri = parse_url(url)?;
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
                source: lapin::Error::from(lapin::ErrorKind::IOError(std::sync::Arc::new(
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out"),
                ))),
            })?
            .map_err(amqp("connect"))?;
        Ok(Broker {
            conn: std::sync::Arc::new(conn),
        })
    }

    /// True while the connection is usable.
    pub fn is_connected(&self) -> bool {
        self.conn.status().connected()
    }

    /// A channel for declaring and other one-off operations.
    pub async fn channel(&self) -> Result<Channel, BrokerError> {
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
            Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404) => Ok(None),
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
                lapin::options::ExchangeDeclareOptions {
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
            Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404) => {
                Ok(false)
            }
            Err(source) => {
                close_channel(&channel).await;
                Err(BrokerError::Amqp {
                    op: "exchange.declare (passive)",
                    source,
                })
            }
        }
    }

    /// Deletes exchange `name`, on a channel of its own.
    pub async fn delete_exchange(&self, name: &str) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let deleted = channel
            .exchange_delete(name.into(), lapin::options::ExchangeDeleteOptions::default())
            .await
            .map_err(amqp("exchange.delete"));
        close_channel(&channel).await;
        deleted
    }

    /// Deletes every queue and exchange of `topology` ([`Topology::delete`]), on a channel of its own.
    pub async fn delete_topology(&self, topology: &Topology) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let deleted = topology.delete(&channel).await;
        close_channel(&channel).await;
        deleted
    }
}

/// A session with RabbitMQ as every Klaxon loop opens it: a connection of its own named after its role
/// ([`Broker::connect_as`]), a publisher in confirm mode, and the topology declared. The worker, the digest
/// flusher and each sender own their session and open a new one to reconnect after a failure (the engine's
/// `supervise`); the HTTP API keeps one for all its requests.
pub struct Session {
    /// The connection (more channels for consumers and one-off operations).
    pub broker: Broker,
    /// The confirm-mode channel the topology was declared on.
    pub publisher: Publisher,
}

impl Session {
    /// Connects as `role` (each connect attempt bounded by `timeout`), opens the publisher and declares
    /// `topology` ([`Publisher::declare`]). A failure after connecting closes the connection.
    pub async fn open(
        url: &str,
        timeout: Duration,
        role: &str,
        topology: &Topology,
    ) -> Result<Session, BrokerError> {
        let broker = Broker::connect_as(url, timeout, role).await?;
        let publisher = match broker.publisher().await {
            Ok(p) => p,
            Err(e) => {
                broker.close().await;
                return Err(e);
            }
        };
        if let Err(e) = publisher.declare(topology).await {
            publisher.close().await;
            broker.close().await;
            return Err(e);
        }
        Ok(Session { broker, publisher })
    }

    /// Closes the publisher's channel, then the connection.
    pub async fn close(&self) {
        self.publisher.close().await;
        self.broker.close().await;
    }
}

/// The `op` of a failed passive declare in [`BrokerError::Amqp`] (see [`Broker::queue_depth`]).
pub const QUEUE_DECLARE_PASSIVE: &str = "queue.declare (passive)";

/// A queue's depth (see [`Broker::queue_depth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages ready for delivery.
    pub messages: u32,
    /// Consumers attached.
    pub consumers: u32,
}

/// Closes a one-off channel before its connection: a channel merely dropped closes itself in the background,
/// and when that races the connection's close lapin reports a "Connection error" at ERROR level.
async fn close_channel(channel: &Channel) {
    let _ = channel.close(200, "bye".into()).await;
}

/// A consumer with manual acknowledgements.
pub struct Consumer {
    channel: Channel,
    inner: lapin::Consumer,
    tag: String,
}

impl Consumer {
    /// The next delivery; `None` when the consumer was cancelled or the channel closed.
    pub async fn next(&mut self) -> Option<Result<Delivery, BrokerError>> {
        self.inner.next().await.map(|r| r.map_err(amqp("basic.deliver")))
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

/// An outgoing message.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// Target queue (default exchange).
    pub queue: String,
    /// Body.
    pub body: Vec<u8>,
    /// AMQP message_id.
    pub message_id: Option<String>,
    /// Extra headers (string values).
    pub headers: Vec<(String, String)>,
    /// Properties to start from (e.g. when moving a message untouched); persistence is always forced.
    pub base: Option<BasicProperties>,
}

impl Outgoing {
    /// A persistent JSON message for `queue`.
    pub fn json(queue: impl Into<String>, body: Vec<u8>) -> Self {
        Outgoing {
            queue: queue.into(),
            body,
            ..Default::default()
        }
    }

    fn properties(&self) -> BasicProperties {
        let mut props = self.base.clone().unwrap_or_else(|| {
            BasicProperties::default().with_content_type(ShortString::from("application/json"))
        });
        props = props.with_delivery_mode(PERSISTENT);
        if let Some(id) = &self.message_id {
            props = props.with_message_id(id.as_str().into());
        }
        if !self.headers.is_empty() {
            let mut table = props.headers().clone().unwrap_or_default();
            for (k, v) in &self.headers {
                table.insert(
                    k.as_str().into(),
                    AMQPValue::LongString(LongString::from(v.as_bytes())),
                );
            }
            props = props.with_headers(table);
        }
        props
    }
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

/// A channel in confirm mode.
pub struct Publisher {
    channel: Channel,
    /// Its connection, for the throwaway channels of [`Publisher::ensure_queue`].
    conn: std::sync::Arc<Connection>,
}

/// How [`Publisher::ensure_queue`] found a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The queue was there: it is used with its own type and arguments.
    Existing,
    /// It was missing and this call declared it.
    Created,
}

/// Throwaway channels for passive declares: a passive declare of a missing queue (404) closes its channel, so a
/// channel is opened when needed, reused while declares succeed and dropped after a failure.
struct Probe<'a> {
    conn: &'a Connection,
    channel: Option<Channel>,
}

impl Probe<'_> {
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
            Err(e) => {
                // the broker closed the channel either way
                if let Some(ch) = self.channel.take() {
                    close_channel(&ch).await;
                }
                if reply_code(&e) == Some(NOT_FOUND) {
                    Ok(false)
                } else {
                    Err(BrokerError::Amqp {
                        op: QUEUE_DECLARE_PASSIVE,
                        source: e,
                    })
                }
            }
        }
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

    async fn close(self) {
        if let Some(ch) = self.channel {
            close_channel(&ch).await;
        }
    }
}

/// Uses `queue` as it is when it exists; declares it with `args` when it does not (see the crate docs).
async fn ensure_queue(probe: &mut Probe<'_>, queue: &str, args: FieldTable) -> Result<Ensured, BrokerError> {
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

impl Publisher {
    /// Publishes every message, then waits until the broker confirmed all of them. Publishes are mandatory: a
    /// message no queue takes (its queue was deleted) fails with [`BrokerError::Unroutable`] instead of being
    /// dropped by the broker.
    pub async fn publish_all(&self, messages: &[Outgoing]) -> Result<(), BrokerError> {
        let mut pending = Vec::with_capacity(messages.len());
        for m in messages {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    m.queue.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &m.body,
                    m.properties(),
                )
                .await
                .map_err(amqp("basic.publish"))?;
            pending.push((confirm, &m.queue));
        }
        for (confirm, queue) in pending {
            check_confirm(confirm.await.map_err(amqp("publisher confirm"))?, queue)?;
        }
        Ok(())
    }

    /// Makes sure every queue of `topology` exists — a queue that exists is used as it is, a missing one is
    /// declared with the topology's queue type (see the crate docs) — then declares the delay engine and its
    /// bindings (idempotent).
    pub async fn declare(&self, topology: &Topology) -> Result<(), BrokerError> {
        let mut probe = Probe {
            conn: &self.conn,
            channel: None,
        };
        let mut result = Ok(());
        for q in topology.queues() {
            result = ensure_queue(&mut probe, &q, topology.arguments())
                .await
                .map(|_| ());
            if result.is_err() {
                break;
            }
        }
        probe.close().await;
        result?;
        topology.declare_delay(&self.channel).await
    }

    /// Makes sure queue `name` exists: used as it is when it does, declared durable with `queue_type` when it
    /// does not (see the crate docs). For queues outside a [`Topology`], e.g. Hawk's `sender/<channel>`.
    pub async fn ensure_queue(&self, name: &str, queue_type: QueueType) -> Result<Ensured, BrokerError> {
        let mut probe = Probe {
            conn: &self.conn,
            channel: None,
        };
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

/// Reads a string header.
pub fn header(props: &BasicProperties, name: &str) -> Option<String> {
    let table = props.headers().as_ref()?;
    match table.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::LongInt(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `props` without the header `name` (a message put back where it was set aside from, without its reason).
pub fn without_header(props: &BasicProperties, name: &str) -> BasicProperties {
    match props.headers() {
        Some(table) if table.inner().contains_key(name) => {
            let kept: std::collections::BTreeMap<ShortString, AMQPValue> = table
                .inner()
                .iter()
                .filter(|(k, _)| k.as_str() != name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            props.clone().with_headers(FieldTable::from(kept))
        }
        _ => props.clone(),
    }
}

/// A message moved aside untouched (same body and properties) with the reason in [`ERROR_HEADER`].
pub fn set_aside(delivery: &Delivery, queue: String, reason: &str) -> Outgoing {
    Outgoing {
        queue,
        body: delivery.data.clone(),
        message_id: None,
        // bounded here too: a header larger than the connection's frame_max makes the broker close it
        headers: vec![(ERROR_HEADER.to_owned(), klaxon_core::text::reason(reason))],
        base: Some(delivery.properties.clone()),
    }
}

/// A jittered, capped exponential backoff for reconnect loops: 0.5 s, 1 s, 2 s … up to `cap`, ±25 %.
pub fn backoff(attempt: u32, cap: Duration) -> Duration {
    use rand::Rng;
    let base = Duration::from_millis(500).saturating_mul(1u32 << attempt.min(16));
    let d = base.min(cap);
    let jitter = rand::rng().random_range(0.75..1.25);
    d.mul_f64(jitter)
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
