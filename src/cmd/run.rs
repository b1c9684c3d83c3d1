//! `klaxon run | worker | sender`: the long-running processes.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use klaxon_broker::{QueueType, Topology};
use klaxon_core::ChannelKind;
use klaxon_counter::{Counter, RedisHandle};
use klaxon_engine::breaker::{BreakerConfig, Breakers, Bulkheads};
use klaxon_engine::dedup::Dedup;
use klaxon_engine::http::Readiness;
use klaxon_engine::metrics::Metrics;
use klaxon_engine::names::CachedNames;
use klaxon_engine::ratelimit::{RateLimiter, RateLimits};
use klaxon_engine::trail::Trail;
use klaxon_engine::{sender, worker};
use klaxon_rules::{RuleCache, RuleStore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::{DeliveryOpts, GlobalOpts};

/// How long in-flight work may take to finish after SIGTERM/SIGINT before the process exits anyway.
const DRAIN_DEADLINE: Duration = Duration::from_secs(8);

/// Options of the long-running processes.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Serves GET /metrics, /healthz and /readyz.
    #[arg(long, env = "KLAXON_HTTP_ADDR", default_value = "127.0.0.1:9464")]
    pub http_addr: SocketAddr,
    #[command(flatten)]
    pub delivery: DeliveryOpts,
    /// Where notifications go: `klaxon` (this program's senders deliver them) or `hawk` (Hawk's sender tasks
    /// on `sender/<channel>`, for Hawk's sender workers; `run` then starts no senders).
    #[arg(long, env = "KLAXON_OUTPUT", default_value = "klaxon")]
    pub output: klaxon_engine::output::Output,
    /// Queue type for newly declared queues: classic or quorum.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: QueueType,
    /// Unacked events a worker may hold.
    #[arg(long, env = "KLAXON_PREFETCH", default_value_t = 512)]
    pub prefetch: u16,
    /// Most events evaluated per batch.
    #[arg(long, env = "KLAXON_BATCH_MAX", default_value_t = 256)]
    pub batch_max: usize,
    /// How long a batch fills after its first delivery, in milliseconds.
    #[arg(long, env = "KLAXON_BATCH_WAIT_MS", default_value_t = 2)]
    pub batch_wait_ms: u64,
    /// How long a project's rules are cached, in seconds.
    #[arg(long, env = "KLAXON_RULES_TTL", default_value_t = 60)]
    pub rules_ttl: u64,
    /// Delivery attempts before a notification goes to the dead-letter queue.
    #[arg(long, env = "KLAXON_MAX_ATTEMPTS", default_value_t = 8)]
    pub max_attempts: u32,
    /// Retry schedule, comma-separated seconds: the delay before attempt n+1 is entry n (the last repeats),
    /// jittered ±20 %, never shorter than the destination's Retry-After.
    #[arg(long, env = "KLAXON_RETRY_SCHEDULE", default_value = "1,5,30,120,600,3600")]
    pub retry_schedule: String,
    /// Notification tasks each channel's sender processes at once.
    #[arg(long, env = "KLAXON_SENDER_PREFETCH", default_value_t = 16)]
    pub sender_prefetch: u16,
    /// How long a delivered notification id is remembered (no second delivery), in seconds.
    #[arg(long, env = "KLAXON_DEDUP_TTL", default_value_t = 7 * 24 * 3600)]
    pub dedup_ttl: u64,
    /// Rate limit per Telegram chat, messages per second (0 = none); shared by every sender of the namespace.
    #[arg(long, env = "KLAXON_RATE_TELEGRAM_CHAT", default_value_t = 1.0)]
    pub rate_telegram_chat: f64,
    /// Rate limit per Telegram bot (all chats), messages per second (0 = none).
    #[arg(long, env = "KLAXON_RATE_TELEGRAM_BOT", default_value_t = 30.0)]
    pub rate_telegram_bot: f64,
    /// Rate limit per Slack webhook, messages per second (0 = none).
    #[arg(long, env = "KLAXON_RATE_SLACK", default_value_t = 1.0)]
    pub rate_slack: f64,
    /// Rate limit per webhook URL, messages per second (0 = none).
    #[arg(long, env = "KLAXON_RATE_WEBHOOK", default_value_t = 0.0)]
    pub rate_webhook: f64,
    /// Rate limit per set of recipient domains for email, messages per second (0 = none).
    #[arg(long, env = "KLAXON_RATE_EMAIL", default_value_t = 0.0)]
    pub rate_email: f64,
    /// Circuit breaker: sliding window of outcomes per host, in seconds.
    #[arg(long, env = "KLAXON_BREAKER_WINDOW", default_value_t = 30)]
    pub breaker_window: u64,
    /// Circuit breaker: outcomes in the window before it may open.
    #[arg(long, env = "KLAXON_BREAKER_MIN_REQUESTS", default_value_t = 5)]
    pub breaker_min_requests: u32,
    /// Circuit breaker: failure ratio (0..1] that opens it.
    #[arg(long, env = "KLAXON_BREAKER_FAILURE_RATIO", default_value_t = 0.5)]
    pub breaker_failure_ratio: f64,
    /// Circuit breaker: seconds it stays open before a probe.
    #[arg(long, env = "KLAXON_BREAKER_OPEN", default_value_t = 30)]
    pub breaker_open: u64,
    /// Concurrent deliveries per destination host (bulkhead).
    #[arg(long, env = "KLAXON_HOST_CONCURRENCY", default_value_t = 4)]
    pub host_concurrency: usize,
    /// Days the delivery trail keeps records (TTL index, where the server supports it).
    #[arg(long, env = "KLAXON_TRAIL_TTL_DAYS", default_value_t = 30)]
    pub trail_ttl_days: u64,
}

/// Which loops a process runs.
#[derive(Debug, Clone, Copy)]
pub struct Roles {
    worker: bool,
    sender: bool,
}

impl Roles {
    pub const BOTH: Roles = Roles {
        worker: true,
        sender: true,
    };
    pub const WORKER: Roles = Roles {
        worker: true,
        sender: false,
    };
    pub const SENDER: Roles = Roles {
        worker: false,
        sender: true,
    };
}

/// Parses `--retry-schedule`: comma-separated whole seconds, at least one, each ≥ 1.
fn parse_schedule(s: &str) -> anyhow::Result<Vec<Duration>> {
    let out = s
        .split(',')
        .map(|p| match p.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Duration::from_secs(n)),
            _ => Err(anyhow::anyhow!(
                "--retry-schedule: `{}` is not a whole number of seconds ≥ 1",
                p.trim()
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!out.is_empty(), "--retry-schedule needs at least one delay");
    Ok(out)
}

/// Retries `connect` with a jittered, capped backoff until it succeeds or shutdown begins.
async fn connect_with_retry<T, E, F, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    mut connect: F,
) -> Option<T>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut attempt = 0;
    loop {
        match connect().await {
            Ok(v) => return Some(v),
            Err(e) => {
                let wait = klaxon_broker::backoff(attempt, Duration::from_secs(30));
                attempt += 1;
                tracing::warn!(service = what, error = %e, retry_in_ms = wait.as_millis() as u64, "cannot connect; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

pub async fn run(args: RunArgs, global: &GlobalOpts, roles: Roles) -> anyhow::Result<ExitCode> {
    // Validate everything before connecting to anything.
    let topology = Topology::new(&global.namespace, &global.events_queue(), args.queue_type);
    let hawk_output = args.output == klaxon_engine::output::Output::Hawk;
    let channels = if roles.sender && !(hawk_output && roles.worker) {
        Some(args.delivery.channels()?)
    } else {
        None
    };
    anyhow::ensure!(args.batch_max >= 1, "--batch-max must be at least 1");
    anyhow::ensure!(args.prefetch >= 1, "--prefetch must be at least 1");
    anyhow::ensure!(args.max_attempts >= 1, "--max-attempts must be at least 1");
    let retry_schedule = parse_schedule(&args.retry_schedule)?;
    anyhow::ensure!(args.sender_prefetch >= 1, "--sender-prefetch must be at least 1");
    anyhow::ensure!(
        args.host_concurrency >= 1,
        "--host-concurrency must be at least 1"
    );
    anyhow::ensure!(
        args.breaker_failure_ratio > 0.0 && args.breaker_failure_ratio <= 1.0,
        "--breaker-failure-ratio must be in (0, 1]"
    );
    for (flag, rate) in [
        ("--rate-telegram-chat", args.rate_telegram_chat),
        ("--rate-telegram-bot", args.rate_telegram_bot),
        ("--rate-slack", args.rate_slack),
        ("--rate-webhook", args.rate_webhook),
        ("--rate-email", args.rate_email),
    ] {
        anyhow::ensure!(
            rate.is_finite() && rate >= 0.0,
            "{flag} must be a number of messages per second ≥ 0"
        );
    }

    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::default();
    let api = klaxon_api::router(klaxon_api::ApiConfig {
        namespace: global.namespace.clone(),
        amqp_url: global.amqp_url.clone(),
        redis_url: global.redis_url.clone(),
        mongo_url: global.mongo_url.clone(),
        mongo_db: global.mongo_db(),
        events_queue: global.events_queue(),
        queue_type: args.queue_type,
        token: std::env::var("KLAXON_API_TOKEN")
            .ok()
            .filter(|t| !t.trim().is_empty()),
    });
    let http = klaxon_engine::http::serve(
        args.http_addr,
        metrics.clone(),
        readiness.clone(),
        api,
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("cannot serve HTTP on --http-addr {}", args.http_addr))?;

    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested: finishing in-flight work");
        signals.cancel();
    });

    let tracker = TaskTracker::new();
    // Project names for messages come from the rule cache (the same `projects` documents).
    let names = CachedNames::default();
    if roles.worker {
        let ready = readiness.role("worker");
        let Some(redis) =
            connect_with_retry("redis", &shutdown, || RedisHandle::connect(&global.redis_url)).await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let mongo_db = global.mongo_db();
        let Some(store) = connect_with_retry("mongodb", &shutdown, || {
            RuleStore::connect(&global.mongo_url, &mongo_db)
        })
        .await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let counter = Counter::new(redis, &global.namespace);
        tracker.spawn(klaxon_engine::probe_redis(
            counter.clone(),
            readiness.role("redis"),
            shutdown.clone(),
        ));
        let rules = RuleCache::new(store, Duration::from_secs(args.rules_ttl));
        tracker.spawn(klaxon_api::invalidation::subscribe(
            global.redis_url.clone(),
            global.namespace.clone(),
            rules.clone(),
            shutdown.clone(),
        ));
        names.connect(rules.clone());
        {
            let rules = rules.clone();
            metrics.add_scrape_hook(Box::new(move |m: &Metrics| {
                Metrics::sync_counter(&m.rules_queries, rules.queries());
                Metrics::sync_counter(&m.rules_stale_served, rules.stale_served());
                Metrics::sync_counter(&m.rules_load_errors, rules.load_errors());
                Metrics::sync_counter(&m.rules_problems, rules.store().problems_reported());
            }));
        }
        {
            let rules = rules.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                rules.start_invalidation(shutdown).await;
            });
        }
        let deps = worker::WorkerDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            counter,
            rules,
            metrics: metrics.clone(),
            config: worker::WorkerConfig {
                prefetch: args.prefetch,
                batch_max: args.batch_max,
                batch_wait: Duration::from_millis(args.batch_wait_ms),
            },
            output: args.output,
        };
        let digest_deps = klaxon_engine::digest::DigestDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            digests: klaxon_counter::Digests::new(deps.counter.redis().clone(), &global.namespace),
            metrics: metrics.clone(),
            prefetch: 16,
            output: args.output,
        };
        tracker.spawn(worker::run(deps, ready, shutdown.clone()));
        // flushes due digest windows (minPeriod > 0): part of the evaluate side, next to the worker
        tracker.spawn(klaxon_engine::digest::run(
            digest_deps,
            readiness.role("digest"),
            shutdown.clone(),
        ));
    }
    if let Some(channels) = channels {
        if !names.is_connected() {
            // sender only: connect a rule cache for names in the background; deliveries never wait for it
            let names = names.clone();
            let shutdown = shutdown.clone();
            let (mongo_url, mongo_db, ttl) = (global.mongo_url.clone(), global.mongo_db(), args.rules_ttl);
            tracker.spawn(async move {
                if let Some(store) =
                    connect_with_retry("mongodb", &shutdown, || RuleStore::connect(&mongo_url, &mongo_db))
                        .await
                {
                    names.connect(RuleCache::new(store, Duration::from_secs(ttl)));
                }
            });
        }
        let channels = channels.with_project_names(Arc::new(names.clone()));
        let Some(redis) =
            connect_with_retry("redis", &shutdown, || RedisHandle::connect(&global.redis_url)).await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let (trail, trail_task) = Trail::start(
            global.mongo_url.clone(),
            global.mongo_db(),
            Duration::from_secs(args.trail_ttl_days.saturating_mul(24 * 3600).max(1)),
            metrics.clone(),
            shutdown.clone(),
        );
        tracker.spawn(async move {
            let _ = trail_task.await;
        });
        let deps = sender::SenderDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            channels,
            metrics: metrics.clone(),
            max_attempts: args.max_attempts,
            prefetch: args.sender_prefetch,
            retry_schedule: retry_schedule.clone().into(),
            dedup: Dedup::new(
                redis.clone(),
                &global.namespace,
                Duration::from_secs(args.dedup_ttl),
                // longer than one attempt can take (connect + request timeouts) plus a rate-limit sleep
                Duration::from_secs(args.delivery.connect_timeout + args.delivery.request_timeout + 30),
            ),
            limiter: RateLimiter::new(
                redis,
                &global.namespace,
                RateLimits {
                    telegram_chat: args.rate_telegram_chat,
                    telegram_bot: args.rate_telegram_bot,
                    slack: args.rate_slack,
                    webhook: args.rate_webhook,
                    email: args.rate_email,
                },
                Duration::from_secs(1),
            ),
            breakers: Arc::new(Breakers::new(BreakerConfig {
                window: Duration::from_secs(args.breaker_window),
                min_requests: args.breaker_min_requests,
                failure_ratio: args.breaker_failure_ratio,
                open_for: Duration::from_secs(args.breaker_open),
            })),
            bulkheads: Arc::new(Bulkheads::new(args.host_concurrency)),
            trail,
        };
        for kind in ChannelKind::ALL {
            let ready = readiness.role(&format!("sender.{kind}"));
            tracker.spawn(sender::run(deps.clone(), kind, ready, shutdown.clone()));
        }
    }
    tracker.close();
    tracing::info!(namespace = %global.namespace, http = %args.http_addr, "klaxon started");

    shutdown.cancelled().await;
    if tokio::time::timeout(DRAIN_DEADLINE, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("in-flight work did not finish in time; unacked messages go back to their queues");
    }
    let _ = http.await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
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
