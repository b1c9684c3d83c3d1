//! The evaluate loop: events in, notification tasks out.
//!
//! Per batch (up to `batch_max` deliveries gathered for at most `batch_wait`):
//! 1. parse every body; invalid ones are set aside to `<ns>.events.invalid` untouched, with the reason;
//! 2. load the rules of every project in the batch (cached, one query per project at most); an event of a project
//!    where no rule can fire (unknown project, no rules, all disabled, …: [`ProjectRules::unevaluated`]) is
//!    counted in `klaxon_events_unmatched_total{reason}` and logged once per project per 10 minutes;
//! 3. evaluate every rule against every event and count all hits in **one** Redis round trip;
//! 4. publish a notification task per enabled channel of each firing ([`NotificationTask::for_firing`], pure;
//!    persistent, publisher confirms) — or in shadow mode record it in the trail instead
//!    ([`crate::sink::dispatch`]);
//! 5. ack the whole batch with one multiple-ack — only now, when every outcome is durable.
//!
//! Any failure in 2–4 ends the session without acking: the connection closes, RabbitMQ hands the batch back,
//! and the loop reconnects with a jittered, capped backoff.
//!
//! Each session registers the worker in Redis before it consumes and unregisters after it stopped, and beats
//! meanwhile ([`crate::consumers`]): that is how consumers of the events queue that are not Klaxon are found.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use klaxon_broker::{set_aside, Broker, Consumer, Delivery, Outgoing, Publisher, Topology};
use klaxon_core::filter::Title;
use klaxon_core::notification::{Firing, NotificationTask};
use klaxon_core::rule::{CompiledRule, Want};
use klaxon_core::{EventTask, ProjectRules, Unevaluated};
use klaxon_counter::{Hit, HitSpec, Outcome, WindowCounter};
use klaxon_rules::{RuleCache, Trail};
use tokio_util::sync::CancellationToken;

use crate::consumers::Presence;
use crate::internal_events::{
    EventInvalid, EventsUnmatched, FiringMuted, LogOnce, MutesSkipped, UNMATCHED_LOG_INTERVAL,
    UNMATCHED_LOG_KEYS,
};
use crate::EngineError;

/// Tuning of the evaluate loop.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Unacked deliveries RabbitMQ may hand this worker.
    pub prefetch: u16,
    /// Most deliveries per batch.
    pub batch_max: usize,
    /// How long a batch fills after its first delivery (then whatever has arrived is taken).
    pub batch_wait: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            prefetch: 512,
            batch_max: 256,
            batch_wait: Duration::from_millis(2),
        }
    }
}

/// What the evaluate loop needs.
#[derive(Clone)]
pub struct WorkerDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// Redis counting.
    pub counter: WindowCounter,
    /// Rules, cached (read under the process's limits: `RuleCache::with_limits`).
    pub rules: RuleCache,
    /// Mutes, read for the projects that fired, at most `--max-mutes-per-project` of each
    /// (`Mutes::with_limit`).
    pub mutes: klaxon_counter::Mutes,
    /// Tuning.
    pub config: WorkerConfig,
    /// Where notifications go (`--output`).
    pub output: crate::sink::Output,
    /// Where shadow mode records what it would have sent ([`Trail::disabled`] for the other outputs).
    pub trail: Trail,
}

/// Runs the evaluate loop until `shutdown`, reconnecting after failures.
pub async fn run(deps: WorkerDeps, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    // which projects' unmatched events were logged lately: kept across sessions
    let unmatched = Arc::new(LogOnce::new(UNMATCHED_LOG_INTERVAL, UNMATCHED_LOG_KEYS));
    crate::supervise("worker", ready, shutdown, |ready, shutdown| {
        let deps = deps.clone();
        let unmatched = unmatched.clone();
        async move { session(&deps, &unmatched, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: &WorkerDeps,
    unmatched: &LogOnce,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let broker = Broker::connect_as(&deps.amqp_url, Duration::from_secs(10), "worker").await?;
    let publisher = broker.publisher().await?;
    publisher.declare(&deps.topology).await?;
    crate::sink::declare(&publisher, deps.output).await?;
    // Registered before consuming and unregistered after, so the registry never counts fewer Klaxon workers than
    // the queue has (crate::consumers).
    let label = klaxon_broker::process_label("worker");
    let presence = Presence::new(
        deps.counter.redis().clone(),
        deps.topology.namespace(),
        deps.topology.events_queue(),
        label.clone(),
    );
    presence.join().await;
    let consumer = broker
        .consume(deps.topology.events_queue(), deps.config.prefetch, &label)
        .await;
    let mut consumer = match consumer {
        Ok(c) => c,
        Err(e) => {
            presence.leave().await;
            return Err(e.into());
        }
    };
    let watching = CancellationToken::new();
    let watch = tokio::spawn(presence.clone().watch(broker.clone(), watching.clone()));
    ready.store(true, Ordering::Relaxed);
    tracing::info!(
        queue = deps.topology.events_queue(),
        prefetch = deps.config.prefetch,
        output = deps.output.as_str(),
        rules_database = deps.rules.store().database(),
        "worker consuming"
    );
    let result = consume_loop(deps, unmatched, &mut consumer, &publisher, &shutdown, &presence).await;
    ready.store(false, Ordering::Relaxed);
    // a beat in flight is simply dropped: shutdown must not wait for a slow Redis
    watching.cancel();
    watch.abort();
    consumer.close().await;
    publisher.close().await;
    presence.leave().await;
    broker.close().await;
    result
}

async fn consume_loop(
    deps: &WorkerDeps,
    unmatched: &LogOnce,
    consumer: &mut Consumer,
    publisher: &Publisher,
    shutdown: &CancellationToken,
    presence: &Presence,
) -> Result<(), EngineError> {
    loop {
        let Some(first) = crate::next_or_shutdown(consumer, shutdown).await? else {
            return Ok(());
        };
        let started = Instant::now();
        let mut batch = vec![first];
        // Let the batch fill for `batch_wait` without being woken per delivery, then take what has arrived:
        // one wake-up per batch instead of one per delivery (each is a cross-thread hand-off from lapin's I/O
        // thread).
        if !deps.config.batch_wait.is_zero() {
            tokio::time::sleep(deps.config.batch_wait).await;
        }
        while batch.len() < deps.config.batch_max {
            match consumer.next().now_or_never() {
                Some(Some(d)) => batch.push(d?),
                Some(None) | None => break,
            }
        }
        let last_tag = batch.iter().map(|d| d.delivery_tag).max().unwrap_or(0);
        process_batch(deps, unmatched, publisher, &batch).await?;
        consumer.ack_up_to(last_tag).await?;
        presence.taken(batch.len() as u64);
        metrics::counter!("klaxon_events_acked_total").increment(batch.len() as u64);
        metrics::histogram!(crate::metrics::BATCH_SIZE).record(batch.len() as f64);
        metrics::histogram!(crate::metrics::BATCH_SECONDS).record(started.elapsed().as_secs_f64());
    }
}

/// Which (event, rule) a hit belongs to.
struct HitSource<'a> {
    event: usize,
    rule: &'a CompiledRule,
    want: Want,
}

async fn process_batch(
    deps: &WorkerDeps,
    unmatched: &LogOnce,
    publisher: &Publisher,
    batch: &[Delivery],
) -> Result<(), EngineError> {
    metrics::counter!("klaxon_events_consumed_total").increment(batch.len() as u64);
    let mut out: Vec<Outgoing> = Vec::new();
    let mut digest_firings: Vec<NotificationTask> = Vec::new();
    let mut events: Vec<(EventTask, Option<String>)> = Vec::with_capacity(batch.len());
    for d in batch {
        match EventTask::parse(&d.data) {
            Ok(task) => {
                let id = d.properties.message_id().as_ref().map(|s| s.as_str().to_owned());
                events.push((task, id));
            }
            Err(reason) => {
                EventInvalid {
                    reason: &reason,
                    bytes: d.data.len(),
                }
                .emit();
                out.push(set_aside(d, deps.topology.invalid_queue(), &reason.0));
            }
        }
    }

    let rules = load_rules(deps, &events).await?;

    let mut hits = Vec::new();
    let mut sources = Vec::new();
    // (project, reason) → events of this batch no rule could evaluate
    let mut unevaluated: BTreeMap<(&str, Unevaluated), u64> = BTreeMap::new();
    for (i, (task, event_id)) in events.iter().enumerate() {
        let project = rules.get(task.project_id.as_str());
        let reason = match project {
            Some(p) => p.unevaluated(),
            None => Some(Unevaluated::ProjectUnknown),
        };
        let (Some(project), None) = (project, reason) else {
            if let Some(reason) = reason {
                *unevaluated.entry((task.project_id.as_str(), reason)).or_default() += 1;
            }
            continue;
        };
        let title = Title::new(&task.event.title);
        for rule in &project.rules {
            let Some(want) = rule.wants(&task.event, &title) else {
                continue;
            };
            let mut hit = Hit::new(
                rule.id.as_str(),
                task.event.group_hash.as_str(),
                HitSpec::from(want),
            )
            .with_project(task.project_id.as_str());
            if let Some(id) = event_id {
                hit = hit.with_event_id(id.as_str());
            }
            if let (Want::UniqueUsers { .. }, Some(user)) = (want, &task.event.user) {
                hit = hit.with_user(user.as_str());
            }
            hits.push(hit);
            sources.push(HitSource { event: i, rule, want });
        }
    }

    if !unevaluated.is_empty() {
        let now = Instant::now();
        let database = deps.rules.store().database();
        for ((project, reason), events) in unevaluated {
            EventsUnmatched {
                project,
                reason,
                events,
                database,
                log: unmatched.should_log(project, now),
            }
            .emit();
        }
    }

    // one registry lookup per batch, not one per (event, rule) pair
    metrics::counter!("klaxon_rules_matched_total").increment(hits.len() as u64);
    if !hits.is_empty() {
        let outcomes = deps.counter.hit_batch(&hits, None).await.inspect_err(|_| {
            metrics::counter!("klaxon_redis_errors_total").increment(1);
        })?;
        // Mutes of the projects that fired: one extra Redis round trip per batch with firings, none otherwise.
        let mut firing_projects: Vec<&str> = outcomes
            .iter()
            .zip(&sources)
            .filter(|(o, _)| o.is_fired())
            .map(|(_, s)| events[s.event].0.project_id.as_str())
            .collect();
        firing_projects.sort_unstable();
        firing_projects.dedup();
        let mutes = if firing_projects.is_empty() {
            Default::default()
        } else {
            deps.mutes.of_projects(&firing_projects).await.inspect_err(|_| {
                metrics::counter!("klaxon_redis_errors_total").increment(1);
            })?
        };
        for (project, read) in &mutes {
            if read.unread > 0 {
                MutesSkipped {
                    project,
                    unread: read.unread,
                    limit: deps.mutes.limit(),
                    first: deps.mutes.first_report(project, read.unread),
                }
                .emit();
            }
        }
        for (outcome, src) in outcomes.iter().zip(&sources) {
            let Outcome::Fired { count, firing, at_ms } = outcome else {
                continue;
            };
            let (task, _) = &events[src.event];
            if mutes.get(task.project_id.as_str()).is_some_and(|ms| {
                klaxon_core::mute::is_muted(&ms.mutes, &src.rule.id, &task.event.group_hash, *at_ms)
            }) {
                // Counted (the window stays true), never delivered, not later either.
                FiringMuted {
                    project: &task.project_id,
                    rule: &src.rule.id,
                }
                .emit();
                continue;
            }
            let fired = NotificationTask::for_firing(&Firing {
                task,
                project_name: rules
                    .get(task.project_id.as_str())
                    .and_then(|p| p.name.as_deref()),
                rule: src.rule,
                want: src.want,
                count: *count,
                firing,
                at_ms: *at_ms,
            });
            metrics::counter!("klaxon_thresholds_crossed_total", "window" => fired.window).increment(1);
            for nt in fired.tasks {
                tracing::info!(
                    notification_id = %nt.notification_id,
                    project = %nt.project_id,
                    rule = %nt.rule_id,
                    channel = %nt.channel,
                    count = *count,
                    "rule fired"
                );
                if nt.min_period_s > 0 {
                    // digest channel: buffered in Redis, delivered by the flush loop (crate::digest)
                    metrics::counter!("klaxon_digest_firings_total", "channel" => nt.channel.as_str())
                        .increment(1);
                    digest_firings.push(nt);
                    continue;
                }
                task_message(deps, &nt, &mut out)?;
            }
        }
    }

    if !digest_firings.is_empty() {
        let digests = klaxon_counter::Digests::new(deps.counter.redis().clone(), deps.topology.namespace());
        let routed = crate::digest::append_firings(&digests, &deps.topology, digest_firings)
            .await
            .inspect_err(|_| {
                metrics::counter!("klaxon_redis_errors_total").increment(1);
            })?;
        for nt in routed.send_now {
            task_message(deps, &nt, &mut out)?;
        }
        let flushes = routed.flushes;
        if !flushes.is_empty() {
            publisher
                .publish_delayed(&deps.topology.delay(), &flushes)
                .await
                .inspect_err(|_| {
                    metrics::counter!("klaxon_broker_errors_total").increment(1);
                })?;
        }
    }
    if !out.is_empty() {
        publisher.publish_all(&out).await.inspect_err(|_| {
            metrics::counter!("klaxon_broker_errors_total").increment(1);
        })?;
    }
    Ok(())
}

/// Adds the message for a notification task's sender queue to `out` (counted as published), keyed by its
/// notification id; in shadow mode records it in the trail instead.
fn task_message(
    deps: &WorkerDeps,
    nt: &NotificationTask,
    out: &mut Vec<Outgoing>,
) -> Result<(), EngineError> {
    if let Some(msg) = crate::sink::dispatch(&deps.topology, deps.output, &deps.trail, nt)? {
        metrics::counter!("klaxon_notifications_published_total", "channel" => nt.channel.as_str())
            .increment(1);
        out.push(msg);
    }
    Ok(())
}

async fn load_rules<'a>(
    deps: &WorkerDeps,
    events: &'a [(EventTask, Option<String>)],
) -> Result<HashMap<&'a str, Arc<ProjectRules>>, EngineError> {
    let mut projects: Vec<&str> = events.iter().map(|(t, _)| t.project_id.as_str()).collect();
    projects.sort_unstable();
    projects.dedup();
    let loaded = futures_util::future::join_all(projects.iter().map(|p| deps.rules.get(p))).await;
    let mut out = HashMap::with_capacity(projects.len());
    for (p, r) in projects.into_iter().zip(loaded) {
        match r {
            Ok(rules) => {
                out.insert(p, rules);
            }
            Err(e) => {
                metrics::counter!("klaxon_rules_errors_total").increment(1);
                return Err(EngineError::Rules(e));
            }
        }
    }
    Ok(out)
}
