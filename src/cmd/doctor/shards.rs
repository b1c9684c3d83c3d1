//! The **shards** lines, with `--events-shards N` > 1: the `rabbitmq_consistent_hash_exchange` plugin (FAIL when
//! missing), the shard exchange, each shard queue's depth and consumers, and shard queues beyond N.
//!
//! AMQP cannot list an exchange's bindings (only the management plugin can, which is not enabled by default), so
//! "shards and bindings match" is checked by the names the layout gives them: `.shard.0` … `.shard.{N-1}` exist,
//! and no `.shard.N`, `.shard.{N+1}` … is left from a larger N (bound to the exchange, such a queue takes its share
//! of the events, and workers started with N never consume it).

use std::time::Duration;

use klaxon_broker::shards::CONSISTENT_HASH_PLUGIN;
use klaxon_broker::{Broker, Topology};

use super::{check, Check, Status};
use crate::cli::GlobalOpts;

/// How far past N the check looks for shard queues left from a larger N.
const MAX_EXTRA: u16 = 256;

pub(super) async fn shard_checks(
    global: &GlobalOpts,
    broker: &Broker,
    topology: &Topology,
    t: Duration,
) -> Vec<Check> {
    let n = topology.shards();
    let mut out = vec![plugin_check(global, t).await];
    if out[0].status == Status::Fail {
        return out;
    }
    let exchange = topology.shard_exchange();
    let name = format!("exchange {exchange}");
    out.push(
        match tokio::time::timeout(t, broker.exchange_exists(&exchange)).await {
            Err(_) => check(Status::Fail, name, "no answer in time"),
            Ok(Err(e)) => check(Status::Fail, name, e.to_string()),
            Ok(Ok(false)) => check(
                Status::Warn,
                name,
                format!(
                    "not declared yet (a klaxon process with --events-shards {n} declares it when it starts)"
                ),
            ),
            Ok(Ok(true)) => check(
                Status::Ok,
                name,
                format!("x-consistent-hash, keyed by project, over {n} shard queues"),
            ),
        },
    );
    for i in 0..n {
        out.push(shard_queue_check(broker, &topology.shard_queue(i), t).await);
    }
    if let Some(c) = extra_shards_check(broker, topology, t).await {
        out.push(c);
    }
    out
}

/// FAIL when the broker does not know the x-consistent-hash exchange type. Declaring one it does not know closes
/// the connection, so this uses a connection of its own and a throwaway, auto-deleted exchange.
async fn plugin_check(global: &GlobalOpts, t: Duration) -> Check {
    const NAME: &str = "shards plugin";
    let probe = format!(
        "{}.doctor.hash-check.{:08x}",
        global.namespace,
        rand::random::<u32>()
    );
    let answer = tokio::time::timeout(t, async {
        let broker = Broker::connect_as(&global.amqp_url, t, "doctor").await?;
        let has = broker.has_consistent_hash(&probe).await;
        broker.close().await;
        has
    })
    .await;
    match answer {
        Err(_) => check(Status::Fail, NAME, "no answer in time"),
        Ok(Err(e)) => check(Status::Fail, NAME, e.to_string()),
        Ok(Ok(true)) => check(
            Status::Ok,
            NAME,
            format!("{CONSISTENT_HASH_PLUGIN} enabled (x-consistent-hash exchanges work)"),
        ),
        Ok(Ok(false)) => check(
            Status::Fail,
            NAME,
            format!(
                "--events-shards {} needs RabbitMQ's {CONSISTENT_HASH_PLUGIN} plugin, which is not enabled: \
                 rabbitmq-plugins enable {CONSISTENT_HASH_PLUGIN} (on every node), or set --events-shards 1",
                global.events_shards
            ),
        ),
    }
}

async fn shard_queue_check(broker: &Broker, queue: &str, t: Duration) -> Check {
    let name = format!("queue {queue}");
    match tokio::time::timeout(t, broker.queue_depth(queue)).await {
        Err(_) => check(Status::Fail, name, "no answer in time"),
        Ok(Err(e)) => check(Status::Fail, name, e.to_string()),
        Ok(Ok(None)) => check(
            Status::Warn,
            name,
            "not declared yet (a klaxon process with this --events-shards declares and binds it when it starts)",
        ),
        Ok(Ok(Some(q))) if q.consumers == 0 => check(
            Status::Warn,
            name,
            format!(
                "{} messages, 0 consumers: the projects hashed to this shard are not evaluated until a worker with \
                 this --events-shards runs",
                q.messages
            ),
        ),
        Ok(Ok(Some(q))) => check(
            Status::Ok,
            name,
            format!("{} messages, {} consumers", q.messages, q.consumers),
        ),
    }
}

/// A warning when shard queues exist past `.shard.{N-1}`: left from a larger `--events-shards`.
async fn extra_shards_check(broker: &Broker, topology: &Topology, t: Duration) -> Option<Check> {
    let n = topology.shards();
    let mut extra = Vec::new();
    for i in n..n.saturating_add(MAX_EXTRA) {
        let queue = topology.shard_queue(i);
        match tokio::time::timeout(t, broker.queue_depth(&queue)).await {
            Ok(Ok(Some(q))) => extra.push((queue, q.messages)),
            _ => break,
        }
    }
    let (first, _) = extra.first()?;
    let waiting: u64 = extra.iter().map(|(_, m)| u64::from(*m)).sum();
    Some(check(
        Status::Warn,
        "shards",
        format!(
            "{} shard queue(s) beyond --events-shards {n} exist (from {first}; {waiting} messages): if they are \
             still bound to {}, they take their share of the events and no worker with --events-shards {n} \
             consumes them; run every process with the same --events-shards, or drain and delete them",
            extra.len(),
            topology.shard_exchange()
        ),
    ))
}
