//! Sharded input (`--events-shards N`, N > 1): past one queue's ceiling with RabbitMQ's own pieces.
//!
//! ```text
//! producers ──(routing key = project id)──▶ <events-queue>.shards   (x-consistent-hash, durable)
//!                                              ├─ "1" ─▶ <events-queue>.shard.0
//!                                              ├─ "1" ─▶ <events-queue>.shard.1
//!                                              └─ "1" ─▶ <events-queue>.shard.{N-1}
//! ```
//!
//! The exchange type is the `rabbitmq_consistent_hash_exchange` plugin RabbitMQ ships: it hashes the routing key
//! onto a ring where each bound queue has as many points as its binding key says (every shard "1": equal shares),
//! so one project's events always land on the same shard, in the order they were published. The shard queues are
//! durable queues of the configured `--queue-type` (quorum ones are created with `x-queue-leader-locator:
//! balanced`, so their leaders spread over a cluster's nodes instead of all landing on the declaring client's); like
//! every other queue they are looked at first and used as they are when they exist ([`crate::declare`]), and so is
//! the exchange. Binding is idempotent (a binding that exists is left alone by the broker).
//!
//! A broker without the plugin refuses the exchange type with a connection error (`COMMAND_INVALID`), which is
//! reported as [`BrokerError::NoExchangeType`] naming the plugin.

use lapin::options::{ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};

use crate::declare::Probe;
use crate::error::amqp;
use crate::{BrokerError, Topology};

/// The exchange type of the shard exchange.
pub const CONSISTENT_HASH: &str = "x-consistent-hash";
/// The RabbitMQ plugin that provides [`CONSISTENT_HASH`].
pub const CONSISTENT_HASH_PLUGIN: &str = "rabbitmq_consistent_hash_exchange";
/// The binding key of every shard queue: its weight on the hash ring (all equal).
pub const SHARD_WEIGHT: &str = "1";

fn durable() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// The error of declaring `exchange` of type x-consistent-hash: [`BrokerError::NoExchangeType`] when the broker
/// does not know the type (the plugin is not enabled).
pub(crate) fn declare_error(exchange: &str, source: lapin::Error) -> BrokerError {
    if source.to_string().contains("exchange type") {
        BrokerError::NoExchangeType {
            exchange: exchange.to_owned(),
            source,
        }
    } else {
        BrokerError::Amqp {
            op: "exchange.declare",
            source,
        }
    }
}

/// Declares the shard exchange `name` (durable, x-consistent-hash); idempotent for one of the same type.
pub(crate) async fn declare_exchange(channel: &Channel, name: &str) -> Result<(), BrokerError> {
    channel
        .exchange_declare(
            name.into(),
            ExchangeKind::Custom(CONSISTENT_HASH.to_owned()),
            durable(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| declare_error(name, e))
}

/// Uses the shard exchange `name` as it is when it exists, declares it when it does not (a passive look first,
/// on the probe's throwaway channel, like every queue).
pub(crate) async fn ensure_exchange(probe: &mut Probe<'_>, name: &str) -> Result<(), BrokerError> {
    if probe.exchange_exists(name).await? {
        tracing::debug!(exchange = name, "shard exchange exists; used as it is");
        return Ok(());
    }
    probe
        .run(|channel| async move { declare_exchange(&channel, name).await })
        .await?;
    tracing::debug!(exchange = name, "shard exchange declared");
    Ok(())
}

/// Binds every shard queue of `topology` to its shard exchange with weight [`SHARD_WEIGHT`] (idempotent).
pub(crate) async fn bind(channel: &Channel, topology: &Topology) -> Result<(), BrokerError> {
    let exchange = topology.shard_exchange();
    for queue in topology.shard_queues() {
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                SHARD_WEIGHT.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("queue.bind"))?;
    }
    Ok(())
}

/// Deletes the shard exchange `name` (its bindings go with it; the queues stay).
pub(crate) async fn delete_exchange(channel: &Channel, name: &str) -> Result<(), BrokerError> {
    channel
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await
        .map_err(amqp("exchange.delete"))
}
