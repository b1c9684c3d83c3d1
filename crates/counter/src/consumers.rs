//! [`Consumers`]: a registry of Klaxon's consumers of one queue, in Redis, so other consumers can be told apart.
//!
//! RabbitMQ says how many consumers a queue has (a passive declare's `consumer_count`), but not who they are
//! without the management plugin, which is not enabled by default. Every Klaxon worker therefore registers itself
//! here before it starts consuming the events queue, beats while it consumes, and leaves after it stopped; a
//! queue with more consumers than live registrations has a consumer that is not a Klaxon process of this
//! namespace (Hawk's notifier still running, a second deployment): each of them sees part of the stream and
//! every threshold is under-counted. Registering *before* consuming and leaving *after* keeps the registry at or
//! above the real number of Klaxon consumers, so that difference never blames Klaxon itself; a crashed worker's
//! registration runs out after its TTL.
//!
//! The beats also carry whether events were taken (`…:events`, the server time of the last report), which is how
//! `klaxon doctor` knows the queue has traffic even when the workers keep it empty.
//!
//! Keys: `<ns>:consumers:{<queue>}` (sorted set: label → expiry, server time ms) and
//! `<ns>:consumers:{<queue>}:events`; one hash tag, so both scripts stay in one cluster slot. Both keys expire.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::script_io::ms;
use crate::{CounterError, RedisHandle};

static BEAT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/consumers_beat.lua")));
static LIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/consumers_live.lua")));

/// What the registry holds now ([`Consumers::live`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// Live registrations: Klaxon consumers of the queue.
    pub live: u64,
    /// How long ago a registered consumer last reported events taken from the queue, if within the report's
    /// lifetime.
    pub events_ago: Option<Duration>,
    /// The labels of (at most the requested number of) live registrations.
    pub labels: Vec<String>,
}

/// The registry of one queue's Klaxon consumers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Consumers {
    redis: RedisHandle,
    key: String,
    events_key: String,
}

impl Consumers {
    /// The registry of `queue`'s consumers in `namespace`.
    pub fn new(redis: RedisHandle, namespace: &str, queue: &str) -> Self {
        let key = format!("{namespace}:consumers:{{{queue}}}");
        Consumers {
            redis,
            events_key: format!("{key}:events"),
            key,
        }
    }

    /// The registry's sorted set.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Registers `label` (or refreshes it) for `ttl`; `events` taken since the previous beat are reported (kept
    /// for `events_ttl`) when more than 0. Returns the number of live registrations.
    pub async fn beat(
        &self,
        label: &str,
        ttl: Duration,
        events: u64,
        events_ttl: Duration,
    ) -> Result<u64, CounterError> {
        self.call(label, ttl, events, events_ttl, true).await
    }

    /// Removes `label`'s registration (the consumer stopped). Returns the number of live registrations.
    pub async fn leave(&self, label: &str) -> Result<u64, CounterError> {
        self.call(label, Duration::from_secs(1), 0, Duration::from_secs(1), false)
            .await
    }

    async fn call(
        &self,
        label: &str,
        ttl: Duration,
        events: u64,
        events_ttl: Duration,
        join: bool,
    ) -> Result<u64, CounterError> {
        let live: i64 = BEAT
            .key(&self.key)
            .key(&self.events_key)
            .arg(label)
            .arg(ms(ttl))
            .arg(events)
            .arg(ms(events_ttl))
            .arg(if join { 1 } else { 0 })
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(u64::try_from(live).unwrap_or(0))
    }

    /// The live registrations, with at most `max_labels` of their labels (reads only).
    pub async fn live(&self, max_labels: usize) -> Result<Registered, CounterError> {
        let reply: Vec<redis::Value> = LIVE
            .key(&self.key)
            .key(&self.events_key)
            .arg(max_labels.max(1))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let bad = |detail: &str| CounterError::BadReply {
            script: "consumers_live",
            detail: detail.to_owned(),
        };
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => Ok(*n),
            _ => Err(bad("expected two integers first")),
        };
        let live = int(reply.first())?;
        let ago = int(reply.get(1))?;
        let labels = reply
            .iter()
            .skip(2)
            .filter_map(|v| match v {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                redis::Value::SimpleString(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        Ok(Registered {
            live: u64::try_from(live).unwrap_or(0),
            events_ago: u64::try_from(ago).ok().map(Duration::from_millis),
            labels,
        })
    }
}
