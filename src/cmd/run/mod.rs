//! `klaxon run | worker | sender`: the long-running processes.
//!
//! Three steps: [`args`] is the command line (clap structures only); [`plan::Plan::from_args`] validates every
//! option into typed configurations before anything connects (a wrong value exits 2); [`run`] starts the HTTP
//! server and the parts the plan names on one set of clients ([`klaxon_engine::clients::Clients`]): one Redis
//! handle and one MongoDB client, shared by the worker, the digest flusher, the senders and the API, each
//! connected once by whichever part needs it first. Every RabbitMQ loop (worker, digest flusher, one sender per
//! channel) owns its connection, because it reconnects on its own after a failure (`klaxon_engine::supervise`);
//! they open it the same way, through `klaxon_broker::Session::open`. The API keeps one connection for all its requests and console pages.

mod args;
mod plan;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use klaxon_broker::Topology;
use klaxon_core::ChannelKind;
use klaxon_counter::{Dedup, RedisHandle, WindowCounter};
use klaxon_engine::breaker::{Breakers, Bulkheads};
use klaxon_engine::clients::Clients;
use klaxon_engine::metrics::Metrics;
use klaxon_engine::ops_server::Readiness;
use klaxon_engine::ratelimit::RateLimiter;
use klaxon_engine::{sender, worker};
use klaxon_store::{RuleCache, RuleStore, Trail};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use args::{RunArgs, SenderArgs, WorkerArgs};
use plan::{Plan, RawArgs, SenderPlan, WorkerPlan};

use crate::cli::GlobalOpts;

/// How long in-flight work may take to finish after SIGTERM/SIGINT before the process exits anyway.
const DRAIN_DEADLINE: Duration = Duration::from_secs(8);
/// How long after SIGTERM/SIGINT open HTTP requests may still run (counted from the signal, not after the drain).
const HTTP_DEADLINE: Duration = Duration::from_millis(9_000);

/// What every part of a started process shares.
struct Parts<'a> {
    global: &'a GlobalOpts,
    topology: Topology,
    readiness: Readiness,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// Retries `connect` to `what` at `url` with a jittered, capped backoff until it succeeds or shutdown begins.
/// While it fails, the log and `/readyz` (through `readiness`) name the service and its address.
async fn connect_with_retry<T, E, F, Fut>(
    (what, url): (&str, &str),
    readiness: &Readiness,
    shutdown: &CancellationToken,
    mut connect: F,
) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut attempt = 0;
    let address = service_address(url);
    loop {
        match connect().await {
            Ok(v) => {
                if attempt > 0 {
                    readiness.waiting_for(None);
                }
                return Some(v);
            }
            Err(e) => {
                let wait = klaxon_broker::backoff(attempt, Duration::from_secs(30));
                attempt += 1;
                readiness.waiting_for(Some(format!("{what} at {address}")));
                tracing::warn!(service = what, address = %address, error = %e, retry_in_ms = wait.as_millis() as u64, "cannot connect; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// The host:port list of a service URL (`redis://:pw@10.0.0.5:6379/0` → `10.0.0.5:6379`; a Redis Cluster's
/// URL list or a MongoDB seed list → `h1:7000,h2:7001`): what an operator needs to find it, without
/// credentials, database or options.
fn service_address(url: &str) -> String {
    url.split(',')
        .map(|part| klaxon_core::text::one_line(&super::doctor::endpoint(part.trim()), 100))
        .filter(|h| !h.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// Validates the options into a [`Plan`], then runs it until SIGTERM/SIGINT.
pub async fn run(args: impl Into<RawArgs>, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    // Validate everything before connecting to anything.
    let plan = Plan::from_args(args)?;
    let http_addr = plan.http.addr;
    let shutdown = CancellationToken::new();
    let metrics = Metrics::install();
    let readiness = Readiness::default();
    let clients = Clients::new(
        &global.redis_url,
        &global.mongo_url,
        &global.mongo_db(),
        plan.rule_defaults,
    );
    let api_token = plan.api.token.clone();
    let tracker = TaskTracker::new();
    let output = plan
        .worker
        .as_ref()
        .map_or(klaxon_engine::sink::Output::Klaxon, |w| w.output);
    let shadow_trail = shadow_trail(output, &clients, &tracker, &shutdown);
    let api = klaxon_api::router(klaxon_api::ApiConfig {
        namespace: global.namespace.clone(),
        amqp_url: global.amqp_url.clone(),
        clients: clients.clone(),
        events_queue: global.events_queue(),
        queue_type: plan.queue_type,
        events_shards: global.events_shards,
        allow_private_endpoints: plan.api.allow_private_endpoints,
        limits: plan.limits,
        token: plan.api.token,
        allowed_hosts: plan.http.allowed_hosts,
        trusted_proxies: plan.http.trusted_proxies,
        webhook_keys: plan.api.webhook_keys,
        action_key: plan.api.action_key,
        inbound: plan.api.inbound,
        output,
        shadow_trail: shadow_trail.clone(),
    });
    let http = klaxon_engine::ops_server::serve(
        http_addr,
        metrics,
        readiness.clone(),
        api,
        plan.http.limits,
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("cannot serve HTTP on --http-addr {http_addr}"))?;

    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: finishing in-flight work");
        signals.cancel();
    });

    let parts = Parts {
        global,
        topology: Topology::new(&global.namespace, &global.events_queue(), plan.queue_type)
            .with_shards(global.events_shards),
        readiness,
        shutdown: shutdown.clone(),
        tracker,
    };
    // Both sides count, dedup or limit in Redis: connected before either starts.
    let mut redis = None;
    if plan.worker.is_some() || plan.sender.is_some() {
        let clients = &clients;
        let Some(r) = connect_with_retry(
            ("redis", &global.redis_url),
            &parts.readiness,
            &shutdown,
            || async move { clients.redis().await.cloned() },
        )
        .await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        // said once per process
        parts.tracker.spawn(super::notices::redis_eviction(r.clone()));
        redis = Some(r);
    }
    // The rule store and cache once the worker has them (the sender's trail then writes through the store at once,
    // and the senders read rules through the worker's cache).
    let mut store: Option<(RuleStore, RuleCache)> = None;
    if let (Some(w), Some(redis)) = (plan.worker, &redis) {
        let Some(s) = connect_with_retry(
            ("mongodb", &global.mongo_url),
            &parts.readiness,
            &shutdown,
            || {
                let clients = &clients;
                async move { clients.store().await.cloned() }
            },
        )
        .await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let rules = start_worker(&parts, w, plan.limits, redis.clone(), s.clone(), shadow_trail);
        store = Some((s, rules));
    }
    if let (Some(send), Some(redis)) = (plan.sender, redis) {
        start_senders(&parts, send, &clients, store, redis, plan.limits);
    }
    let Parts { tracker, .. } = parts;
    tracker.close();
    tracing::info!(namespace = %global.namespace, http = %http_addr, "klaxon started");
    super::notices::console(http_addr, api_token.as_ref().map(klaxon_channels::Secret::expose));

    shutdown.cancelled().await;
    let stopping = tokio::time::Instant::now();
    if tokio::time::timeout(DRAIN_DEADLINE, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("in-flight work did not finish in time; unacked messages go back to their queues");
    }
    // The HTTP server drains its requests at the same time (graceful shutdown began with the signal); a slow
    // client never holds the exit past the 10 s promise.
    if tokio::time::timeout_at(stopping + HTTP_DEADLINE, http)
        .await
        .is_err()
    {
        tracing::warn!("HTTP requests still open at exit; closed");
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// With `--output shadow`, the delivery trail (the senders' collection) that records what would have been sent:
/// the worker's firings, digests and alert messages, and the API's hand changes. It writes through the process's
/// rule store once connected (records queue meanwhile). Disabled for the other outputs.
fn shadow_trail(
    output: klaxon_engine::sink::Output,
    clients: &Clients,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Trail {
    if output != klaxon_engine::sink::Output::Shadow {
        return Trail::disabled();
    }
    let (clients, stop) = (clients.clone(), shutdown.clone());
    let store = async move {
        // the worker connects the store (with retries); the trail waits for it, bounded by shutdown
        loop {
            if let Some(store) = clients.connected_store() {
                return Some(store.clone());
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    };
    let (trail, task) = Trail::start(store, klaxon_store::trail::DEFAULT_TRAIL_TTL, shutdown.clone());
    tracker.spawn(async move {
        let _ = task.await;
    });
    trail
}

/// Starts the evaluating side on the process's Redis handle and rule store: the worker, the digest flusher,
/// the alert timer loop, the Redis probe, the rule cache's invalidation and, in shadow mode, the delivery trail.
/// Returns the rule cache (the senders of the process read rules through it too).
fn start_worker(
    p: &Parts<'_>,
    w: WorkerPlan,
    limits: klaxon_core::Limits,
    redis: RedisHandle,
    store: RuleStore,
    trail: Trail,
) -> RuleCache {
    let (global, shutdown) = (p.global, &p.shutdown);
    let counter = WindowCounter::new(redis.clone(), &global.namespace);
    p.tracker.spawn(klaxon_engine::probe_redis(
        counter.clone(),
        p.readiness.role("redis"),
        shutdown.clone(),
    ));
    if w.output == klaxon_engine::sink::Output::Shadow {
        tracing::info!("shadow mode: notifications are recorded in the delivery trail, never sent");
    }
    let rules = RuleCache::new(store, w.rules_ttl).with_limits(limits);
    invalidate(&p.tracker, p.global, &rules, &p.shutdown);
    p.tracker.spawn(backfill_alert_projects(
        klaxon_counter::Alerts::new(redis.clone(), &global.namespace),
        shutdown.clone(),
    ));
    let deps = worker::WorkerDeps {
        amqp_url: global.amqp_url.clone(),
        topology: p.topology.clone(),
        mutes: klaxon_counter::Mutes::new(redis.clone(), &global.namespace).with_limit(limits.max_mutes),
        counter,
        rules: rules.clone(),
        config: w.config,
        output: w.output,
        trail: trail.clone(),
        alerts: klaxon_counter::Alerts::new(redis.clone(), &global.namespace),
        // test builds only: the end-to-end batches-in-flight test sets the variable
        #[cfg(feature = "fault-injection")]
        faults: worker::Faults {
            hold_after_publish: std::env::var_os(worker::HOLD_AFTER_PUBLISH_ENV).map(Into::into),
            ..Default::default()
        },
    };
    let timer_deps = klaxon_engine::timers::TimerDeps {
        amqp_url: global.amqp_url.clone(),
        topology: p.topology.clone(),
        alerts: klaxon_counter::Alerts::new(redis.clone(), &global.namespace),
        digests: klaxon_counter::Digests::new(redis.clone(), &global.namespace),
        rules: deps.rules.clone(),
        mutes: deps.mutes.clone(),
        prefetch: 16,
        output: w.output,
        trail: trail.clone(),
        no_events: klaxon_engine::no_events::SilenceDeps {
            no_events: klaxon_counter::NoEvents::new(redis.clone(), &global.namespace),
            mutes: deps.mutes.clone(),
            digests: klaxon_counter::Digests::new(redis.clone(), &global.namespace),
        },
        // test builds only: the end-to-end crash-between-resolve-and-publish test sets the variable
        #[cfg(feature = "fault-injection")]
        faults: klaxon_engine::timers::Faults {
            crash_after_resolve: std::env::var(klaxon_engine::timers::CRASH_AFTER_RESOLVE_ENV)
                .is_ok_and(|v| v == "1"),
            crash_after_remind: std::env::var(klaxon_engine::timers::CRASH_AFTER_REMIND_ENV)
                .is_ok_and(|v| v == "1"),
            crash_after_no_events: std::env::var(klaxon_engine::timers::CRASH_AFTER_NO_EVENTS_ENV)
                .is_ok_and(|v| v == "1"),
        },
    };
    let digest_deps = klaxon_engine::flushes::DigestDeps {
        amqp_url: global.amqp_url.clone(),
        topology: p.topology.clone(),
        digests: klaxon_counter::Digests::new(redis.clone(), &global.namespace),
        alerts: klaxon_counter::Alerts::new(redis, &global.namespace),
        prefetch: 16,
        output: w.output,
        trail,
        // test builds only: the end-to-end crash-between-claim-and-publish test sets the variable
        #[cfg(feature = "fault-injection")]
        faults: klaxon_engine::flushes::Faults {
            crash_after_claim: std::env::var(klaxon_engine::flushes::CRASH_AFTER_CLAIM_ENV)
                .is_ok_and(|v| v == "1"),
        },
    };
    p.tracker
        .spawn(worker::run(deps, p.readiness.role("worker"), shutdown.clone()));
    // flushes due digest windows (minPeriod > 0): part of the evaluate side, next to the worker
    p.tracker.spawn(klaxon_engine::flushes::run(
        digest_deps,
        p.readiness.role("digest"),
        shutdown.clone(),
    ));
    // resolves alerts whose resolveAfter ran out (timers through the delay engine), next to the digest flusher
    p.tracker.spawn(klaxon_engine::timers::run(
        timer_deps,
        p.readiness.role("alerts"),
        shutdown.clone(),
    ));
    rules
}

/// Registers, once per namespace, the projects whose alerts opened before the cross-project list's registry
/// existed (`klaxon_counter::alert_projects`: a bounded SCAN, one process of a fleet, recorded); in the
/// background, never delaying readiness. Stopped by shutdown, it is done by a later start (after its lease).
async fn backfill_alert_projects(alerts: klaxon_counter::Alerts, shutdown: CancellationToken) {
    use klaxon_counter::Backfilled;
    tokio::select! {
        _ = shutdown.cancelled() => {}
        r = alerts.backfill_projects(klaxon_core::clock::now_ms()) => match r {
            Ok(Backfilled::Done { projects, capped }) if projects > 0 || capped => tracing::info!(
                projects,
                capped,
                "alerts: projects with alerts from an earlier version registered for the cross-project list \
                 (once per namespace)"
            ),
            Ok(done) => tracing::debug!(?done, "alerts: cross-project registry backfill"),
            Err(e) => tracing::warn!(
                error = %e,
                "alerts: the cross-project registry's backfill failed; the next start tries again"
            ),
        }
    }
}

/// Keeps `rules` fresh: invalidations by Redis pub/sub (a connection of its own) and MongoDB's change stream.
fn invalidate(tracker: &TaskTracker, global: &GlobalOpts, rules: &RuleCache, shutdown: &CancellationToken) {
    tracker.spawn(klaxon_store::invalidation::subscribe(
        global.redis_url.clone(),
        global.namespace.clone(),
        rules.clone(),
        shutdown.clone(),
    ));
    let (rules, shutdown) = (rules.clone(), shutdown.clone());
    tracker.spawn(async move {
        rules.start_invalidation(shutdown).await;
    });
}

/// How long a `klaxon sender`'s rules are cached (its reminders and escalation steps are decided with them); the
/// worker's `--rules-ttl` default. Invalidations refresh them sooner.
const SENDER_RULES_TTL: Duration = Duration::from_secs(60);

/// Starts one sender per channel on the process's Redis handle; their delivery trail writes through the rule
/// store and they read rules through the worker's cache (`worker` when the worker connected them; else the store is
/// connected in the background, deliveries never wait for it, and a cache of the senders' own is made on it).
fn start_senders(
    p: &Parts<'_>,
    send: SenderPlan,
    clients: &Clients,
    worker: Option<(RuleStore, RuleCache)>,
    redis: RedisHandle,
    limits: klaxon_core::Limits,
) {
    let (global, shutdown) = (p.global, &p.shutdown);
    let (store_tx, store_rx) = tokio::sync::oneshot::channel::<RuleStore>();
    let rules = sender::RulesNow::new();
    match worker {
        Some((store, cache)) => {
            rules.set(cache);
            let _ = store_tx.send(store);
        }
        None => {
            let shutdown = shutdown.clone();
            let clients = clients.clone();
            let global = global.clone();
            let (rules, tracker) = (rules.clone(), p.tracker.clone());
            p.tracker.spawn(async move {
                // deliveries never wait for the trail: logged, never a reason for /readyz
                let unread = Readiness::default();
                if let Some(store) =
                    connect_with_retry(("mongodb", &global.mongo_url), &unread, &shutdown, || {
                        let clients = &clients;
                        async move { clients.store().await.cloned() }
                    })
                    .await
                {
                    let cache = RuleCache::new(store.clone(), SENDER_RULES_TTL).with_limits(limits);
                    invalidate(&tracker, &global, &cache, &shutdown);
                    rules.set(cache);
                    let _ = store_tx.send(store);
                }
            });
        }
    }
    let (trail, trail_task) = Trail::start(
        async move { store_rx.await.ok() },
        send.trail_ttl,
        shutdown.clone(),
    );
    p.tracker.spawn(async move {
        let _ = trail_task.await;
    });
    let deps = sender::SenderDeps {
        amqp_url: global.amqp_url.clone(),
        topology: p.topology.clone(),
        channels: send.channels,
        max_attempts: send.max_attempts,
        prefetch: send.prefetch,
        retry_schedule: send.retry_schedule,
        dedup: Dedup::new(redis.clone(), &global.namespace, send.dedup_ttl, send.dedup_lease),
        conversations: klaxon_counter::Conversations::new(redis.clone(), &global.namespace),
        inbound: klaxon_counter::Inbound::new(redis.clone(), &global.namespace),
        alerts: klaxon_counter::Alerts::new(redis.clone(), &global.namespace),
        budgets: klaxon_counter::Budgets::new(redis.clone(), &global.namespace),
        reminder_budget: send.reminder_budget,
        limiter: RateLimiter::new(redis, &global.namespace, send.rates, Duration::from_secs(1)),
        breakers: Arc::new(Breakers::new(send.breaker)),
        bulkheads: Arc::new(Bulkheads::new(send.host_concurrency)),
        trail,
        rules,
    };
    for kind in ChannelKind::ALL {
        let ready = p.readiness.role(&format!("sender.{kind}"));
        p.tracker
            .spawn(sender::run(deps.clone(), kind, ready, shutdown.clone()));
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::service_address;

    #[test]
    fn a_service_is_named_by_its_address_without_credentials() {
        let cases = [
            ("redis://127.0.0.1:6390/", "127.0.0.1:6390"),
            ("redis://:s3cret@10.0.0.5:6379/0", "10.0.0.5:6379"),
            ("rediss://user:s3cret@cache.internal:6380", "cache.internal:6380"),
            (
                "redis://127.0.0.1:7000,redis://127.0.0.1:7001",
                "127.0.0.1:7000,127.0.0.1:7001",
            ),
            (
                "mongodb://admin:p%40ss@h1:27017,h2:27017/hawk?replicaSet=rs0",
                "h1:27017,h2:27017",
            ),
            ("mongodb://127.0.0.1:27017", "127.0.0.1:27017"),
        ];
        for (url, want) in cases {
            let got = service_address(url);
            assert_eq!(got, want, "{url}");
            assert!(!got.contains("s3cret") && !got.contains("p%40ss"), "{got}");
        }
    }
}
