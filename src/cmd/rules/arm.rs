//! After `rules add` and `rules import`: the engine's one step after a store (`klaxon_engine::after_store`)
//! starts the clock of a stored NO_EVENTS rule whose project has sent no event yet (the contract); the command
//! publishes its timers through RabbitMQ's delay engine. Without Redis or RabbitMQ at hand the rules are stored
//! all the same, with a warning: they then start counting at the project's first event.

use std::time::Duration;

use klaxon_broker::{QueueType, Session, Topology};
use klaxon_engine::after_store::{self, Stored};

use crate::cli::GlobalOpts;

/// Arms the watched NO_EVENTS rules of the projects just stored; connects only when there is one. Never fails
/// the command: a failure is a warning on stderr.
pub(super) async fn after_store(global: &GlobalOpts, stored: &[Stored]) {
    if !stored.iter().any(Stored::arms) {
        return;
    }
    if let Err(e) = arm(global, stored).await {
        eprintln!(
            "klaxon: warning: NO_EVENTS rule(s) stored, but their clock did not start ({e:#}): they start counting \
             at the project's first event"
        );
    }
}

async fn arm(global: &GlobalOpts, stored: &[Stored]) -> anyhow::Result<()> {
    let t = Duration::from_secs(10);
    let redis = tokio::time::timeout(t, klaxon_counter::RedisHandle::connect(&global.redis_url))
        .await
        .map_err(|_| anyhow::anyhow!("Redis did not answer in time"))??;
    let no_events = klaxon_counter::NoEvents::new(redis, &global.namespace);
    // existing queues are used as they are: the type only matters for one this declares
    let topology = Topology::new(&global.namespace, &global.events_queue(), QueueType::Classic);
    let timers = after_store::arm(&no_events, &topology, stored).await?;
    if timers.is_empty() {
        return Ok(());
    }
    let session = Session::open(&global.amqp_url, t, "cli", &topology).await?;
    let published = session
        .publisher
        .publish_delayed(&topology.delay(), &timers)
        .await;
    session.close().await;
    published?;
    Ok(())
}
