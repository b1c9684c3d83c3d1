//! The delay engine: every delayed message in Klaxon (retries, breaker parking, rate-limit waits, digest flushes,
//! later scheduled sends) goes through these queues. No cron, no polling, no in-process timer: a delayed message
//! is a persistent message sitting in a durable RabbitMQ queue until it is due.
//!
//! # Binary decomposition over fixed-TTL queues (NServiceBus's RabbitMQ transport)
//!
//! A delay of `d` whole seconds (`0 ≤ d < 2^20`, about 12 days) is written as [`LEVELS`] bits. Level `k` is a
//! topic exchange and a durable queue, both named `<ns>.delay.L<k>`; the queue has `x-message-ttl = 2^k s` and
//! dead-letters (keeping the routing key) into the exchange of level `k-1` (level 0's into `<ns>.delay.deliver`).
//! The routing key is the 20 bits, most significant first, as dot-separated words, then the destination queue
//! name:
//!
//! ```text
//! publish ──▶ L19 ─bit19=1─▶ queue L19 (TTL 2^19 s) ─expire─▶ L18 ─ … ─▶ L0 ─bit0=1─▶ queue L0 (TTL 1 s) ─▶ deliver
//!              └──bit19=0─(exchange-to-exchange binding)──▶ L18          └─bit0=0─────────────────────────▶ deliver
//! deliver (topic): `*.*.… (20 words).<queue>` ──▶ <queue>         (unroutable ──▶ <ns>.delay.unroutable)
//! ```
//!
//! A message waits in the queue of each set bit for exactly that bit's weight, so it reaches its destination
//! `d` seconds after it was published (plus a few milliseconds per hop). Every level queue has one fixed TTL,
//! so its FIFO order *is* its expiry order: a 1 s delay published after a 1 h delay waits only in `L0` and never
//! behind the longer one — no head-of-line blocking. Delays are rounded **up** to whole seconds: a message is
//! delivered *not earlier than* its delay.
//!
//! Level queues are always classic durable queues holding persistent messages, even when the namespace uses
//! quorum queues: quorum queues dead-letter at-most-once unless `x-dead-letter-strategy=at-least-once` with
//! `x-overflow=reject-publish` (and, on 3.10, the `stream_queue` feature flag), which would make a full level
//! refuse publishes instead. A classic queue's dead-lettering of an expired persistent message is a local,
//! durable move. Destination queues may be of either type.
//!
//! Dead-lettering adds an `x-death` header (one entry per level queue, so at most 20); [`Publisher::publish_delayed`]
//! strips `x-death`/`x-first-death-*`/`x-last-death-*` from the properties it starts from, so headers never grow
//! across repeated delays. Klaxon's own headers (`x-klaxon-*`) pass through untouched.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use crate::declare::declare_queue;
use crate::error::amqp;
use crate::{BrokerError, Outgoing, Publisher};

/// Number of levels: delays up to `2^LEVELS − 1` seconds (about 12 days, more than the 7 days required).
pub const LEVELS: u32 = 20;

/// The longest delay the engine can express; longer delays are clamped to it.
pub const MAX_DELAY: Duration = Duration::from_secs((1 << LEVELS) - 1);

/// The exchanges, queues and bindings of one namespace's delay engine.
#[derive(Debug, Clone)]
pub struct DelayTopology {
    namespace: String,
}

impl DelayTopology {
    /// The delay engine of `namespace`.
    pub fn new(namespace: &str) -> Self {
        DelayTopology {
            namespace: namespace.to_owned(),
        }
    }

    /// `<ns>.delay.L<k>`: the name of level `k`'s exchange and of its queue.
    pub fn level(&self, k: u32) -> String {
        format!("{}.delay.L{k}", self.namespace)
    }

    /// `<ns>.delay.deliver`: the topic exchange destination queues are bound to.
    pub fn deliver_exchange(&self) -> String {
        format!("{}.delay.deliver", self.namespace)
    }

    /// `<ns>.delay.unroutable`: the alternate exchange and queue catching due messages whose destination was
    /// never bound (kept for an operator instead of being dropped).
    pub fn unroutable(&self) -> String {
        format!("{}.delay.unroutable", self.namespace)
    }

    /// Every exchange the engine declares.
    pub fn exchanges(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..LEVELS).map(|k| self.level(k)).collect();
        v.push(self.deliver_exchange());
        v.push(self.unroutable());
        v
    }

    /// Every queue the engine declares.
    pub fn queues(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..LEVELS).map(|k| self.level(k)).collect();
        v.push(self.unroutable());
        v
    }

    /// Whole seconds of `delay`, rounded up ("not earlier than") and clamped to [`MAX_DELAY`].
    pub fn delay_seconds(delay: Duration) -> u64 {
        let mut s = delay.as_secs();
        if delay.subsec_nanos() > 0 {
            s += 1;
        }
        s.min(MAX_DELAY.as_secs())
    }

    /// The routing key carrying `delay_s` (as [`LEVELS`] bit words, most significant first) to `queue`.
    pub fn routing_key(queue: &str, delay_s: u64) -> String {
        let mut key = String::with_capacity(2 * LEVELS as usize + queue.len());
        for k in (0..LEVELS).rev() {
            key.push(if (delay_s >> k) & 1 == 1 { '1' } else { '0' });
            key.push('.');
        }
        key.push_str(queue);
        key
    }

    /// The binding pattern matching bit `k` = `bit` (any other bits, any destination).
    fn bit_pattern(k: u32, bit: char) -> String {
        let mut p = "*.".repeat((LEVELS - 1 - k) as usize);
        p.push(bit);
        p.push_str(".#");
        p
    }

    /// Deletes every queue and exchange of the engine (tests, benchmarks, decommissioning a namespace).
    /// Messages waiting in it are lost.
    pub(crate) async fn delete(&self, channel: &Channel) -> Result<(), BrokerError> {
        for q in self.queues() {
            crate::declare::delete_queue(channel, &q).await?;
        }
        for x in self.exchanges() {
            channel
                .exchange_delete(
                    x.as_str().into(),
                    lapin::options::ExchangeDeleteOptions::default(),
                )
                .await
                .map_err(amqp("exchange.delete"))?;
        }
        Ok(())
    }

    /// Declares every level, the deliver exchange and their bindings (idempotent).
    pub(crate) async fn declare(&self, channel: &Channel) -> Result<(), BrokerError> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let unroutable = self.unroutable();
        channel
            .exchange_declare(
                unroutable.as_str().into(),
                ExchangeKind::Fanout,
                durable,
                FieldTable::default(),
            )
            .await
            .map_err(amqp("exchange.declare"))?;
        declare_queue(channel, &unroutable, FieldTable::default()).await?;
        channel
            .queue_bind(
                unroutable.as_str().into(),
                unroutable.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("queue.bind"))?;
        let mut deliver_args = FieldTable::default();
        deliver_args.insert(
            "alternate-exchange".into(),
            AMQPValue::LongString(unroutable.as_str().into()),
        );
        channel
            .exchange_declare(
                self.deliver_exchange().as_str().into(),
                ExchangeKind::Topic,
                durable,
                deliver_args,
            )
            .await
            .map_err(amqp("exchange.declare"))?;
        for k in 0..LEVELS {
            let name = self.level(k);
            let lower = if k == 0 {
                self.deliver_exchange()
            } else {
                self.level(k - 1)
            };
            channel
                .exchange_declare(
                    name.as_str().into(),
                    ExchangeKind::Topic,
                    durable,
                    FieldTable::default(),
                )
                .await
                .map_err(amqp("exchange.declare"))?;
            let mut args = FieldTable::default();
            args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(1000i64 << k));
            args.insert(
                "x-dead-letter-exchange".into(),
                AMQPValue::LongString(lower.as_str().into()),
            );
            declare_queue(channel, &name, args).await?;
            channel
                .queue_bind(
                    name.as_str().into(),
                    name.as_str().into(),
                    Self::bit_pattern(k, '1').as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(amqp("queue.bind"))?;
            channel
                .exchange_bind(
                    lower.as_str().into(),
                    name.as_str().into(),
                    Self::bit_pattern(k, '0').as_str().into(),
                    ExchangeBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(amqp("exchange.bind"))?;
        }
        Ok(())
    }

    /// Makes `queue` (already declared) a destination of delayed messages (idempotent).
    pub(crate) async fn bind(&self, channel: &Channel, queue: &str) -> Result<(), BrokerError> {
        let mut pattern = "*.".repeat(LEVELS as usize);
        pattern.push_str(queue);
        channel
            .queue_bind(
                queue.into(),
                self.deliver_exchange().as_str().into(),
                pattern.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("queue.bind"))
    }
}

/// Headers RabbitMQ adds when dead-lettering; dropped before a message is delayed again.
fn is_death_header(name: &str) -> bool {
    name == "x-death" || name.starts_with("x-first-death-") || name.starts_with("x-last-death-")
}

impl Publisher {
    /// Publishes every `(message, delay)` through the delay engine, then waits for all confirms. Each message
    /// reaches `message.queue` (which must be bound to the engine: one of
    /// [`Topology::delay_targets`](crate::Topology::delay_targets)) not earlier than its delay, rounded up to
    /// whole seconds (a zero delay passes straight through).
    pub async fn publish_delayed(
        &self,
        delay: &DelayTopology,
        messages: &[(Outgoing, Duration)],
    ) -> Result<(), BrokerError> {
        let top = delay.level(LEVELS - 1);
        let publishes = messages.iter().map(|(m, d)| {
            let key = DelayTopology::routing_key(&m.queue, DelayTopology::delay_seconds(*d));
            let mut props = m.properties();
            if let Some(headers) = props.headers().as_ref() {
                if headers.inner().keys().any(|k| is_death_header(k.as_str())) {
                    let mut clean = FieldTable::default();
                    for (k, v) in headers.inner() {
                        if !is_death_header(k.as_str()) {
                            clean.insert(k.clone(), v.clone());
                        }
                    }
                    props = props.with_headers(clean);
                }
            }
            let publish = self.channel.basic_publish(
                top.as_str().into(),
                key.as_str().into(),
                // the first hop always routes (every key matches a level queue or the next level's
                // exchange); mandatory catches a delay engine that was deleted
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &m.body,
                props,
            );
            (publish, m.queue.as_str())
        });
        crate::publisher::publish_queued(publishes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_keys_spell_the_delay_in_binary() {
        let k = DelayTopology::routing_key("ns.notify.slack", 5);
        assert_eq!(k, format!("{}1.0.1.ns.notify.slack", "0.".repeat(17)));
        let k = DelayTopology::routing_key("q", MAX_DELAY.as_secs());
        assert_eq!(k, format!("{}q", "1.".repeat(20)));
        assert_eq!(
            DelayTopology::routing_key("q", 0),
            format!("{}q", "0.".repeat(20))
        );
    }

    #[test]
    fn delays_round_up_and_clamp() {
        let table = [
            (Duration::ZERO, 0),
            (Duration::from_millis(1), 1),
            (Duration::from_millis(1000), 1),
            (Duration::from_millis(1001), 2),
            (Duration::from_secs(7 * 24 * 3600), 7 * 24 * 3600),
            (Duration::from_secs(u64::MAX / 2), (1 << 20) - 1),
        ];
        for (d, s) in table {
            assert_eq!(DelayTopology::delay_seconds(d), s, "{d:?}");
        }
        assert!(MAX_DELAY >= Duration::from_secs(7 * 24 * 3600));
    }

    #[test]
    fn bit_patterns_address_one_word() {
        assert_eq!(DelayTopology::bit_pattern(19, '1'), "1.#");
        assert_eq!(
            DelayTopology::bit_pattern(0, '0'),
            format!("{}0.#", "*.".repeat(19))
        );
    }

    #[test]
    fn death_headers_are_recognised() {
        for h in ["x-death", "x-first-death-queue", "x-last-death-reason"] {
            assert!(is_death_header(h));
        }
        assert!(!is_death_header("x-klaxon-attempts"));
    }
}
