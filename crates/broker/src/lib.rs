//! RabbitMQ for Klaxon: topology, consuming with manual acks, and publishing with publisher confirms.
//!
//! Every queue is durable and every message persistent. Publishing always waits for the broker's confirm
//! before the caller acks what caused it, so "acked" always means "the outcome is durable".
//!
//! ```text
//! <events-queue>            ← producers (Hawk's grouper); consumed by workers
//! <events-queue>.shards     ← with --events-shards N > 1: Klaxon's producers, routing key = project id
//!   → <events-queue>.shard.0 … .shard.{N-1}   (x-consistent-hash); consumed by every worker (see [`shards`])
//! <ns>.events.invalid       ← bodies that are not notifier tasks, untouched, reason in `x-klaxon-error`
//! <ns>.notify.<channel>     ← notification tasks, one queue per channel (email, telegram, slack, webhook, loop,
//!                             discord, teams, pagerduty); consumed by senders
//! <ns>.dead                 ← notifications that could not be delivered, reason in `x-klaxon-error`
//! <ns>.digest.flush         ← "close this digest window" messages, scheduled through the delay engine
//! <ns>.alerts.timer         ← alert timers (`resolveAfter`) that are due, scheduled through the delay engine
//! <ns>.delay.L0 … L19       ← the delay engine (see [`delay`]): every delayed message in Klaxon waits here
//! ```
//!
//! # Modules, one job each
//!
//! ```text
//! url         --amqp-url: one node or a comma-separated cluster, checked before connecting
//! error       BrokerError (transient or permanent) and lapin's errors turned into it
//! topology    QueueType and Topology: the names of one namespace's queues
//! connection  Broker: one named connection; opens channels, consumers, publishers; depths and deletes
//! session     Session: connection + publisher + topology declared, as each loop opens it; reconnect backoff
//! declare     queues used as they are: look (passive declare) first, declare only what is missing
//! publisher   Publisher: a confirm-mode channel, mandatory publishes
//! consumer    Consumer: manual acks, prefetch-bounded
//! message     Delivery, Properties, Outgoing and Klaxon's headers (x-klaxon-error, x-klaxon-attempts)
//! delay       the delay engine: 20 fixed-TTL levels, Publisher::publish_delayed
//! shards      --events-shards N: the x-consistent-hash exchange and its N shard queues, keyed by project
//! ```
//!
//! lapin stays inside this crate: the crates above see Klaxon's own types only ([`Delivery`], [`Properties`],
//! [`Outgoing`], [`AmqpUrl`]), so a client upgrade or swap touches this crate alone.
//!
//! # Queues used as they are
//!
//! A queue Klaxon consumes or publishes to may have been made by someone else: Hawk's grouper declares `notifier`
//! as a plain classic queue, Hawk's workers declare `sender/<channel>`, an operator may have made a queue by
//! hand. [`Publisher::declare`] therefore looks before it declares: a queue that exists is used with its own type
//! and arguments (a passive declare, on a throwaway channel since a failed one closes its channel), and only a
//! missing one is declared, with the configured [`QueueType`]. When two processes find the same queue missing at
//! once and declare it with different settings, the loser's declare fails with `PRECONDITION_FAILED`; it looks
//! again, finds the winner's queue and uses it as it is. [`Broker::declare_topology`] is the strict form (every
//! queue with this topology's arguments, a mismatch is [`BrokerError::Incompatible`]).
#![deny(missing_docs)]

mod connection;
mod consumer;
mod declare;
pub mod delay;
mod error;
mod message;
mod publisher;
mod session;
pub mod shards;
mod topology;
mod url;

pub use connection::{host_name, process_label, Broker, QueueDepth, FRAME_MAX};
pub use consumer::{Consumer, QueuedAck, Reader};
pub use declare::Ensured;
pub use delay::{DelayTopology, MAX_DELAY};
pub use error::{BrokerError, QUEUE_DECLARE_PASSIVE};
pub use message::{
    header, set_aside, without_header, Delivery, Outgoing, Properties, ATTEMPTS_HEADER, ERROR_HEADER,
};
pub use publisher::Publisher;
pub use session::{backoff, Session};
pub use topology::{QueueType, Topology};
pub use url::{parse_urls, AmqpUrl};
