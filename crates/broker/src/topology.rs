//! The names of one namespace's queues ([`Topology`]) and the type new ones are made with ([`QueueType`]);
//! declaring and deleting them on a channel. The delay engine's own names live in [`crate::delay`].

use klaxon_core::priority::Lane;
use klaxon_core::ChannelKind;
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;

use crate::declare::{declare_queue, delete_queue};
use crate::{BrokerError, DelayTopology, Outgoing};

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
    pub(crate) fn arguments(self) -> FieldTable {
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
    /// `--events-shards`: 1 is the single events queue; more spread the events over shard queues
    /// ([`crate::shards`]).
    shards: u16,
}

impl Topology {
    /// Names for `namespace`, consuming events from `events_queue`.
    pub fn new(namespace: &str, events_queue: &str, queue_type: QueueType) -> Self {
        Topology {
            namespace: namespace.to_owned(),
            events_queue: events_queue.to_owned(),
            queue_type,
            shards: 1,
        }
    }

    /// The same names with the events spread over `shards` shard queues (`--events-shards`; 0 and 1 are the
    /// single events queue): see [`crate::shards`].
    pub fn with_shards(mut self, shards: u16) -> Self {
        self.shards = shards.max(1);
        self
    }

    /// How many shard queues the events are spread over (1: none, the events queue alone).
    pub fn shards(&self) -> u16 {
        self.shards
    }

    /// True when the events go through the shard exchange (`--events-shards` > 1).
    pub fn sharded(&self) -> bool {
        self.shards > 1
    }

    /// `<events-queue>.shards`: the `x-consistent-hash` exchange producers publish events to when sharded.
    pub fn shard_exchange(&self) -> String {
        format!("{}.shards", self.events_queue)
    }

    /// `<events-queue>.shard.<i>`.
    pub fn shard_queue(&self, i: u16) -> String {
        format!("{}.shard.{i}", self.events_queue)
    }

    /// The shard queues, `.shard.0` … `.shard.{N-1}`; none when not sharded.
    pub fn shard_queues(&self) -> Vec<String> {
        if !self.sharded() {
            return Vec::new();
        }
        (0..self.shards).map(|i| self.shard_queue(i)).collect()
    }

    /// The queues a worker consumes events from: the events queue, then the shard queues when sharded (the events
    /// queue is still drained then: events published there before the switch, or by a producer still pointed at
    /// it, are not stranded).
    pub fn event_queues(&self) -> Vec<String> {
        let mut q = vec![self.events_queue.clone()];
        q.extend(self.shard_queues());
        q
    }

    /// An event of `project` as producers publish it: to the events queue, or when sharded to the shard exchange
    /// with the project as the routing key (one project's events stay in order on one shard).
    pub fn event(&self, project: &str, body: Vec<u8>) -> Outgoing {
        if self.sharded() {
            Outgoing::routed(self.shard_exchange(), project, body)
        } else {
            Outgoing::json(self.events_queue.clone(), body)
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

    /// `<ns>.notify.<channel>.later`: the channel's reminders and escalation steps
    /// ([`klaxon_core::priority::Lane::Later`]), consumed after the main lane so that they never hold a firing.
    pub fn later_queue(&self, channel: ChannelKind) -> String {
        format!("{}.notify.{}.later", self.namespace, channel.as_str())
    }

    /// The queue a task of `channel` waits in for `lane`.
    pub fn lane_queue(&self, channel: ChannelKind, lane: Lane) -> String {
        match lane {
            Lane::Main => self.notify_queue(channel),
            Lane::Later => self.later_queue(channel),
        }
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

    /// Queues that receive delayed messages (bound to the delay engine): the notify queues (both lanes), the
    /// digest flush queue and the alert timer queue.
    pub fn delay_targets(&self) -> Vec<String> {
        let mut q: Vec<String> = ChannelKind::ALL.iter().map(|c| self.notify_queue(*c)).collect();
        q.extend(ChannelKind::ALL.iter().map(|c| self.later_queue(*c)));
        q.push(self.digest_flush_queue());
        q.push(self.alerts_timer_queue());
        q
    }

    /// Every queue of the namespace, in declaration order.
    pub fn queues(&self) -> Vec<String> {
        let mut q = self.event_queues();
        q.extend([self.invalid_queue(), self.dead_queue()]);
        q.extend(ChannelKind::ALL.iter().map(|c| self.notify_queue(*c)));
        q.extend(ChannelKind::ALL.iter().map(|c| self.later_queue(*c)));
        q.push(self.digest_flush_queue());
        q.push(self.alerts_timer_queue());
        q
    }

    /// The arguments of a queue this topology creates (`x-queue-type` for quorum queues).
    pub(crate) fn arguments(&self) -> FieldTable {
        self.queue_type.arguments()
    }

    /// The arguments `queue` is created with: [`Topology::arguments`], and for a quorum shard queue
    /// `x-queue-leader-locator: balanced` as well. RabbitMQ places a new quorum queue's leader on the node the
    /// declaring client is connected to (`client-local`), so the N shards one process declares would all be led
    /// by one node, which would carry every shard's work (measured by tests/e2e_chaos.rs: all three on one node);
    /// `balanced` (RabbitMQ ≥ 3.10) puts each on the node leading the fewest queues.
    pub(crate) fn arguments_of(&self, queue: &str) -> FieldTable {
        let mut args = self.arguments();
        if self.queue_type == QueueType::Quorum && self.shard_queues().iter().any(|s| s == queue) {
            args.insert(
                "x-queue-leader-locator".into(),
                AMQPValue::LongString("balanced".into()),
            );
        }
        args
    }

    /// The type of the queues this topology creates.
    pub fn queue_type(&self) -> QueueType {
        self.queue_type
    }

    /// Declares every queue with this topology's arguments (strictly: a queue that exists with other settings
    /// fails with [`BrokerError::Incompatible`]), the delay engine, and binds the delay targets to it
    /// (idempotent). Processes use [`Publisher::declare`](crate::Publisher::declare) instead, which uses
    /// existing queues as they are.
    pub(crate) async fn declare(&self, channel: &Channel) -> Result<(), BrokerError> {
        for q in self.queues() {
            declare_queue(channel, &q, self.arguments_of(&q)).await?;
        }
        if self.sharded() {
            crate::shards::declare_exchange(channel, &self.shard_exchange()).await?;
            crate::shards::bind(channel, self).await?;
        }
        self.declare_delay(channel).await
    }

    /// The delay engine (always Klaxon's own, with its own arguments) and the delay targets' bindings.
    pub(crate) async fn declare_delay(&self, channel: &Channel) -> Result<(), BrokerError> {
        let delay = self.delay();
        delay.declare(channel).await?;
        for q in self.delay_targets() {
            delay.bind(channel, &q).await?;
        }
        Ok(())
    }

    /// Deletes every queue and exchange of the namespace, the delay engine's included (tests, benchmarks,
    /// decommissioning). Messages in them are lost.
    pub(crate) async fn delete(&self, channel: &Channel) -> Result<(), BrokerError> {
        for q in self.queues() {
            delete_queue(channel, &q).await?;
        }
        if self.sharded() {
            crate::shards::delete_exchange(channel, &self.shard_exchange()).await?;
        }
        self.delay().delete(channel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locator(t: &Topology, queue: &str) -> Option<String> {
        match t.arguments_of(queue).inner().get("x-queue-leader-locator") {
            Some(AMQPValue::LongString(s)) => Some(s.to_string()),
            _ => None,
        }
    }

    #[test]
    fn only_quorum_shard_queues_are_placed_balanced() {
        let quorum = Topology::new("ns", "ns.events", QueueType::Quorum).with_shards(3);
        let classic = Topology::new("ns", "ns.events", QueueType::Classic).with_shards(3);
        let single = Topology::new("ns", "ns.events", QueueType::Quorum);
        let cases = [
            (&quorum, "ns.events.shard.0", Some("balanced")),
            (&quorum, "ns.events.shard.2", Some("balanced")),
            (&quorum, "ns.events.shard.3", None),
            (&quorum, "ns.events", None),
            (&quorum, "ns.events.invalid", None),
            (&classic, "ns.events.shard.0", None),
            (&single, "ns.events", None),
        ];
        for (t, queue, want) in cases {
            assert_eq!(
                locator(t, queue).as_deref(),
                want,
                "{queue} ({:?})",
                t.queue_type()
            );
        }
        // the queue type stays
        assert!(quorum
            .arguments_of("ns.events.shard.1")
            .inner()
            .contains_key("x-queue-type"));
    }
}
