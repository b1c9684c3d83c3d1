//! Messages in and out: a received [`Delivery`], the [`Properties`] it came with (Klaxon reads a message id and
//! string headers, and puts properties back unchanged when it moves a message), an [`Outgoing`] message, and
//! Klaxon's own headers ([`ERROR_HEADER`], [`ATTEMPTS_HEADER`]). These wrap lapin's types so that the crates
//! above never name them.

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;

/// Header carrying the reason a message was set aside.
pub const ERROR_HEADER: &str = "x-klaxon-error";
/// Header counting the delivery attempts a notification has had so far: written by the senders when they
/// retry or dead-letter it, read back by them and by the dead-letter listing (`klaxon dead`, the API).
pub const ATTEMPTS_HEADER: &str = "x-klaxon-attempts";
/// Persistent delivery mode.
const PERSISTENT: u8 = 2;

/// A message's AMQP properties (message id, delivery mode, headers, …), kept whole so a message moved
/// elsewhere keeps them all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties(pub(crate) BasicProperties);

impl Properties {
    /// The AMQP `message_id`, if set.
    pub fn message_id(&self) -> Option<&str> {
        self.0.message_id().as_ref().map(|s| s.as_str())
    }

    /// True when the message was published persistent (delivery mode 2).
    pub fn is_persistent(&self) -> bool {
        *self.0.delivery_mode() == Some(PERSISTENT)
    }

    /// How many entries RabbitMQ's `x-death` header holds (one per queue the message was dead-lettered from;
    /// 0 when it has none).
    pub fn death_count(&self) -> usize {
        match self.0.headers().as_ref().and_then(|h| h.inner().get("x-death")) {
            Some(AMQPValue::FieldArray(a)) => a.as_slice().len(),
            _ => 0,
        }
    }
}

/// A message received from a [`Consumer`](crate::Consumer), acked through it by `delivery_tag`.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The tag to ack (or requeue) it with, on the consumer it came from.
    pub delivery_tag: u64,
    /// True when the broker delivered it before (to this consumer or another) without an ack.
    pub redelivered: bool,
    /// Its properties.
    pub properties: Properties,
    /// The body.
    pub data: Vec<u8>,
}

impl From<lapin::message::Delivery> for Delivery {
    fn from(d: lapin::message::Delivery) -> Self {
        Delivery {
            delivery_tag: d.delivery_tag,
            redelivered: d.redelivered,
            properties: Properties(d.properties),
            data: d.data,
        }
    }
}

/// An outgoing message.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// Target queue (published to the default exchange); with an `exchange`, the routing key.
    pub queue: String,
    /// The exchange it is published to; empty: the default exchange, straight to `queue`.
    pub exchange: String,
    /// Body.
    pub body: Vec<u8>,
    /// AMQP message_id.
    pub message_id: Option<String>,
    /// Extra headers (string values).
    pub headers: Vec<(String, String)>,
    /// Properties to start from (e.g. when moving a message untouched); persistence is always forced.
    pub base: Option<Properties>,
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

    /// A persistent JSON message for `exchange` with `routing_key` (e.g. an event for the shard exchange, keyed
    /// by its project).
    pub fn routed(exchange: impl Into<String>, routing_key: impl Into<String>, body: Vec<u8>) -> Self {
        Outgoing {
            queue: routing_key.into(),
            exchange: exchange.into(),
            body,
            ..Default::default()
        }
    }

    /// Where it goes, for errors: the queue, or the exchange when it has one.
    pub(crate) fn target(&self) -> &str {
        if self.exchange.is_empty() {
            &self.queue
        } else {
            &self.exchange
        }
    }

    /// The properties it is published with.
    pub(crate) fn properties(&self) -> BasicProperties {
        let mut props = self.base.clone().map(|p| p.0).unwrap_or_else(|| {
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

/// Reads a string header.
pub fn header(props: &Properties, name: &str) -> Option<String> {
    let table = props.0.headers().as_ref()?;
    match table.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::LongInt(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `props` without the header `name` (a message put back where it was set aside from, without its reason).
pub fn without_header(props: &Properties, name: &str) -> Properties {
    match props.0.headers() {
        Some(table) if table.inner().contains_key(name) => {
            let kept: std::collections::BTreeMap<ShortString, AMQPValue> = table
                .inner()
                .iter()
                .filter(|(k, _)| k.as_str() != name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Properties(props.0.clone().with_headers(FieldTable::from(kept)))
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
        exchange: String::new(),
    }
}
