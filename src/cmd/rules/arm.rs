//! After `rules add` and `rules import`: the clock of a stored NO_EVENTS rule starts at its storing when its
//! project has sent no event yet (the contract), so the command schedules its timer through RabbitMQ's delay
//! engine (`klaxon_engine::no_events::arm`). Without Redis or RabbitMQ at hand the rules are stored all the
//! same, with a warning: they then start counting at the project's first event.

use std::time::Duration;

use klaxon_broker::{QueueType, Session, Topology};
use klaxon_core::ProjectRules;
use serde_json::Value;

use crate::cli::GlobalOpts;

/// Arms the watched NO_EVENTS rules of each `(project, notifications)` just stored; connects only when there is
/// one. Never fails the command: a failure is a warning on stderr.
pub(super) async fn after_store(global: &GlobalOpts, stored: &[(String, Value)]) {
    let projects: Vec<(&str, ProjectRules)> = stored
        .iter()
        .map(|(p, n)| (p.as_str(), ProjectRules::from_notifications(Some(n))))
        .filter(|(_, r)| !klaxon_engine::no_events::watched_of(r).is_empty())
        .collect();
    if projects.is_empty() {
        return;
    }
    if let Err(e) = arm(global, &projects).await {
        eprintln!(
            "klaxon: warning: NO_EVENTS rule(s) stored, but their clock did not start ({e:#}): they start counting \
             at the project's first event"
        );
    }
}

async fn arm(global: &GlobalOpts, projects: &[(&str, ProjectRules)]) -> anyhow::Result<()> {
    let t = Duration::from_secs(10);
    let redis = tokio::time::timeout(t, klaxon_counter::RedisHandle::connect(&global.redis_url))
        .await
        .map_err(|_| anyhow::anyhow!("Redis did not answer in time"))??;
    let no_events = klaxon_counter::NoEvents::new(redis, &global.namespace);
    // existing queues are used as they are: the type only matters for one this declares
    let topology = Topology::new(&global.namespace, &global.events_queue(), QueueType::Classic);
    let mut timers = Vec::new();
    for (project, rules) in projects {
        timers.extend(klaxon_engine::no_events::arm(&no_events, &topology, project, rules).await?);
    }
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
