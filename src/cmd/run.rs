//! `klaxon run | worker | sender`: the long-running processes.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use klaxon_broker::{QueueType, Topology};
use klaxon_channels::{Channels, ChannelsConfig, Secret};
use klaxon_core::ChannelKind;
use klaxon_counter::{Counter, RedisHandle};
use klaxon_engine::http::Readiness;
use klaxon_engine::metrics::Metrics;
use klaxon_engine::{sender, worker};
use klaxon_rules::{RuleCache, RuleStore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::GlobalOpts;

/// How long in-flight work may take to finish after SIGTERM/SIGINT before the process exits anyway.
const DRAIN_DEADLINE: Duration = Duration::from_secs(8);

/// Options of the long-running processes.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Serves GET /metrics, /healthz and /readyz.
    #[arg(long, env = "KLAXON_HTTP_ADDR", default_value = "127.0.0.1:9464")]
    pub http_addr: SocketAddr,
    /// Telegram Bot API base URL.
    #[arg(long, env = "KLAXON_TELEGRAM_API", default_value = "https://api.telegram.org")]
    pub telegram_api: String,
    /// SMTP server: smtp://host:port, smtp://host:port?tls=starttls, smtps://user:pass@host:port.
    #[arg(
        long,
        env = "KLAXON_SMTP_URL",
        default_value = "smtp://127.0.0.1:25",
        hide_env_values = true
    )]
    pub smtp_url: String,
    /// The From address of emails.
    #[arg(long, env = "KLAXON_SMTP_FROM", default_value = "klaxon@localhost")]
    pub smtp_from: String,
    /// Allow deliveries to loopback/private/link-local addresses.
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", default_value_t = false)]
    pub allow_private_endpoints: bool,
    /// Queue type for newly declared queues: classic or quorum.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: QueueType,
    /// Unacked events a worker may hold.
    #[arg(long, env = "KLAXON_PREFETCH", default_value_t = 512)]
    pub prefetch: u16,
    /// Most events evaluated per batch.
    #[arg(long, env = "KLAXON_BATCH_MAX", default_value_t = 256)]
    pub batch_max: usize,
    /// Longest wait for a batch to fill, in milliseconds.
    #[arg(long, env = "KLAXON_BATCH_WAIT_MS", default_value_t = 2)]
    pub batch_wait_ms: u64,
    /// How long a project's rules are cached, in seconds.
    #[arg(long, env = "KLAXON_RULES_TTL", default_value_t = 60)]
    pub rules_ttl: u64,
    /// Delivery attempts before a notification goes to the dead-letter queue.
    #[arg(long, env = "KLAXON_MAX_ATTEMPTS", default_value_t = 8)]
    pub max_attempts: u32,
    /// Connect timeout for deliveries, in seconds.
    #[arg(long, env = "KLAXON_CONNECT_TIMEOUT", default_value_t = 5)]
    pub connect_timeout: u64,
    /// Whole-request timeout for deliveries, in seconds.
    #[arg(long, env = "KLAXON_REQUEST_TIMEOUT", default_value_t = 10)]
    pub request_timeout: u64,
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

fn env_secret(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
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
    let channels = if roles.sender {
        Some(
            Channels::new(ChannelsConfig {
                telegram_api: args.telegram_api.clone(),
                telegram_bot_token: env_secret("KLAXON_TELEGRAM_BOT_TOKEN"),
                smtp_url: Secret::new(args.smtp_url.clone()),
                smtp_from: args.smtp_from.clone(),
                webhook_secret: env_secret("KLAXON_WEBHOOK_SECRET"),
                allow_private_endpoints: args.allow_private_endpoints,
                connect_timeout: Duration::from_secs(args.connect_timeout),
                request_timeout: Duration::from_secs(args.request_timeout),
            })
            .context("invalid delivery settings")?,
        )
    } else {
        None
    };
    anyhow::ensure!(args.batch_max >= 1, "--batch-max must be at least 1");
    anyhow::ensure!(args.prefetch >= 1, "--prefetch must be at least 1");
    anyhow::ensure!(args.max_attempts >= 1, "--max-attempts must be at least 1");

    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::default();
    let http = klaxon_engine::http::serve(
        args.http_addr,
        metrics.clone(),
        readiness.clone(),
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
        };
        tracker.spawn(worker::run(deps, ready, shutdown.clone()));
    }
    if let Some(channels) = channels {
        let deps = sender::SenderDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            channels,
            metrics: metrics.clone(),
            max_attempts: args.max_attempts,
            prefetch: 16,
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
