//! `klaxon run | worker | sender`: the long-running processes.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use klaxon_broker::{QueueType, Topology};
use klaxon_core::ChannelKind;
use klaxon_counter::{Dedup, RedisHandle, WindowCounter};
use klaxon_engine::breaker::{BreakerConfig, Breakers, Bulkheads};
use klaxon_engine::metrics::Metrics;
use klaxon_engine::ops_server::Readiness;
use klaxon_engine::ratelimit::{RateLimiter, RateLimits};
use klaxon_engine::{sender, worker};
use klaxon_store::{RuleCache, RuleStore, Trail};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::{
    duration_days, duration_ms, duration_secs, DeliveryOpts, GlobalOpts, MuteLimitOpts, RuleLimitOpts,
};
use crate::exit::{ensure_usage, usage};

/// How long in-flight work may take to finish after SIGTERM/SIGINT before the process exits anyway.
const DRAIN_DEADLINE: Duration = Duration::from_secs(8);
/// How long after SIGTERM/SIGINT open HTTP requests may still run (counted from the signal, not after the drain).
const HTTP_DEADLINE: Duration = Duration::from_millis(9_000);

/// Options every long-running process has.
#[derive(Debug, Args)]
pub struct ProcessOpts {
    /// Queue type for newly declared queues: classic or quorum.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: QueueType,
}

/// The HTTP server every long-running process runs: /metrics, /healthz, /readyz, the API and the console.
#[derive(Debug, Args)]
pub struct HttpOpts {
    /// Serves GET /metrics, /healthz and /readyz (and the HTTP API).
    #[arg(long, env = "KLAXON_HTTP_ADDR", default_value = "127.0.0.1:9464")]
    pub http_addr: SocketAddr,
    /// Host names (or addresses) the API and the console answer to, comma-separated, besides localhost, the
    /// loopback addresses and the --http-addr address (every address when it is 0.0.0.0): the names clients or a
    /// reverse proxy use, e.g. klaxon.example.com; `*.example.com` for every subdomain; `*` turns the check off.
    /// Other Host headers get 421 (stops DNS-rebinding pages).
    #[arg(long, env = "KLAXON_ALLOWED_HOSTS", value_name = "HOSTS", value_parser = klaxon_api::guard::AllowedHosts::parse)]
    pub allowed_hosts: Option<klaxon_api::guard::AllowedHosts>,
    /// A request's headers must arrive within this time of the connection's start or of the previous answer;
    /// idle keep-alive connections are closed after it too (a plain number is seconds).
    #[arg(long, env = "KLAXON_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = duration_secs, value_name = "DURATION")]
    pub http_header_timeout: Duration,
    /// HTTP connections served at once; further ones wait until one closes.
    #[arg(long, env = "KLAXON_HTTP_MAX_CONNECTIONS", default_value_t = 512)]
    pub http_max_connections: usize,
    /// The console's URL as browsers reach it, e.g. https://klaxon.example.com: with KLAXON_ACTION_KEY set,
    /// messages carry signed action links (mute, explain) to its /a/… pages, and its host is accepted in Host.
    #[arg(long, env = "KLAXON_PUBLIC_URL", value_name = "URL", value_parser = crate::cli::public_url)]
    pub public_url: Option<klaxon_channels::PublicUrl>,
}

impl HttpOpts {
    /// The server's limits, checked (a wrong value is a usage error, exit 2).
    fn limits(&self) -> anyhow::Result<klaxon_engine::ops_server::ServerLimits> {
        let t = self.http_header_timeout;
        ensure_usage!(
            t >= Duration::from_millis(100) && t <= Duration::from_secs(3600),
            "--http-header-timeout must be from 100ms to 1h (got {})",
            humantime::format_duration(t)
        );
        ensure_usage!(
            (1..=1_000_000).contains(&self.http_max_connections),
            "--http-max-connections must be from 1 to 1000000"
        );
        Ok(klaxon_engine::ops_server::ServerLimits {
            header_timeout: t,
            max_connections: self.http_max_connections,
            ..Default::default()
        })
    }
}

/// The evaluating side: consume events, count, publish notification tasks (`run`, `worker`).
#[derive(Debug, Args)]
pub struct EvaluateOpts {
    /// Where notifications go: `klaxon` (this program's senders deliver them), `hawk` (Hawk's sender tasks
    /// on `sender/<channel>`, for Hawk's sender workers) or `shadow` (evaluate and count, record what would be
    /// sent in the delivery trail with status `shadow`, send nothing); `run` starts senders for `klaxon` only.
    #[arg(long, env = "KLAXON_OUTPUT", default_value = "klaxon")]
    pub output: klaxon_engine::sink::Output,
    /// How `including` words compare with titles when a rule has no `includingCaseSensitive`: `insensitive`
    /// (Klaxon's default) or `sensitive` (Hawk's notifier, for a faithful cut-over).
    #[arg(
        long,
        env = "KLAXON_INCLUDING_CASE",
        default_value = "insensitive",
        value_name = "CASE"
    )]
    pub including_case: klaxon_core::Case,
    /// Unacked events a worker may hold.
    #[arg(long, env = "KLAXON_PREFETCH", default_value_t = 512)]
    pub prefetch: u16,
    /// Most events evaluated per batch.
    #[arg(long, env = "KLAXON_BATCH_MAX", default_value_t = 256)]
    pub batch_max: usize,
    /// How long a batch fills after its first delivery (a plain number is milliseconds).
    #[arg(long, env = "KLAXON_BATCH_WAIT_MS", default_value = "2ms", value_parser = duration_ms, value_name = "DURATION")]
    pub batch_wait_ms: Duration,
    /// How long a project's rules are cached (a plain number is seconds).
    #[arg(long, env = "KLAXON_RULES_TTL", default_value = "60s", value_parser = duration_secs, value_name = "DURATION")]
    pub rules_ttl: Duration,
}

/// The delivering side: consume notification tasks and send them (`run`, `sender`).
#[derive(Debug, Args)]
pub struct DeliverOpts {
    #[command(flatten)]
    pub delivery: DeliveryOpts,
    /// Delivery attempts before a notification goes to the dead-letter queue.
    #[arg(long, env = "KLAXON_MAX_ATTEMPTS", default_value_t = 8)]
    pub max_attempts: u32,
    /// Retry schedule, comma-separated durations (plain numbers are seconds): the delay before attempt n+1 is
    /// entry n (the last repeats), jittered ±20 %, never shorter than the destination's Retry-After.
    #[arg(long, env = "KLAXON_RETRY_SCHEDULE", default_value = "1,5,30,120,600,3600")]
    pub retry_schedule: String,
    /// Notification tasks each channel's sender processes at once.
    #[arg(long, env = "KLAXON_SENDER_PREFETCH", default_value_t = 16)]
    pub sender_prefetch: u16,
    /// How long a delivered notification id is remembered (no second delivery); a plain number is seconds.
    #[arg(long, env = "KLAXON_DEDUP_TTL", default_value = "7d", value_parser = duration_secs, value_name = "DURATION")]
    pub dedup_ttl: Duration,
    /// How long the delivery trail keeps records (TTL index, where the server supports it); a plain number
    /// is days.
    #[arg(long, env = "KLAXON_TRAIL_TTL_DAYS", default_value = "30d", value_parser = duration_days, value_name = "DURATION")]
    pub trail_ttl_days: Duration,
    /// Concurrent deliveries per destination host (bulkhead).
    #[arg(long, env = "KLAXON_HOST_CONCURRENCY", default_value_t = 4)]
    pub host_concurrency: usize,
}

/// Rate limits, shared by every sender of the namespace (in Redis).
#[derive(Debug, Args)]
pub struct RateOpts {
    /// Rate limit per Telegram chat, messages per second (0 = none).
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
}

/// The circuit breaker per destination host, per process.
#[derive(Debug, Args)]
pub struct BreakerOpts {
    /// Sliding window of outcomes per host (a plain number is seconds).
    #[arg(long, env = "KLAXON_BREAKER_WINDOW", default_value = "30s", value_parser = duration_secs, value_name = "DURATION")]
    pub breaker_window: Duration,
    /// Outcomes in the window before it may open.
    #[arg(long, env = "KLAXON_BREAKER_MIN_REQUESTS", default_value_t = 5)]
    pub breaker_min_requests: u32,
    /// Failure ratio (0..1] that opens it.
    #[arg(long, env = "KLAXON_BREAKER_FAILURE_RATIO", default_value_t = 0.5)]
    pub breaker_failure_ratio: f64,
    /// How long it stays open before a probe (a plain number is seconds).
    #[arg(long, env = "KLAXON_BREAKER_OPEN", default_value = "30s", value_parser = duration_secs, value_name = "DURATION")]
    pub breaker_open: Duration,
}

/// Everything the delivering side takes, under its help headings.
#[derive(Debug, Args)]
pub struct SendOpts {
    #[command(flatten, next_help_heading = "Delivery")]
    pub deliver: DeliverOpts,
    #[command(flatten, next_help_heading = "Rate limits")]
    pub rates: RateOpts,
    #[command(flatten, next_help_heading = "Circuit breaker")]
    pub breaker: BreakerOpts,
}

const RUN_EXAMPLES: &str = "\
Examples:
  klaxon run                                          # evaluate + deliver against local services
  KLAXON_SMTP_URL=smtp://127.0.0.1:2525 klaxon run --http-addr 0.0.0.0:9464
  KLAXON_MONGO_DB=hawk klaxon run --output hawk --events-queue notifier   # Hawk's rules; keep Hawk's senders
  KLAXON_MONGO_DB=hawk klaxon run --output shadow --events-queue notifier # record, send nothing (docs/hawk.md)
  klaxon run --rules-ttl 5m --dedup-ttl 7d --breaker-open 1m";

const WORKER_EXAMPLES: &str = "\
Examples:
  klaxon worker                                       # evaluate only; run `klaxon sender` beside it
  klaxon worker --batch-max 64 --batch-wait-ms 5ms --rules-ttl 2m
  klaxon worker --output hawk --events-queue notifier --mongo-db hawk   # Hawk's accounts database";

const SENDER_EXAMPLES: &str = "\
Examples:
  klaxon sender                                       # deliver only; `klaxon worker` evaluates
  KLAXON_TELEGRAM_BOT_TOKEN=… klaxon sender --smtp-url smtp://mail:25 --retry-schedule 1s,5s,30s,2m
  klaxon sender --rate-slack 1 --breaker-window 1m --breaker-open 30s";

/// The per-project limits every long-running process enforces: its API writes rules and mutes, its worker
/// reads them.
#[derive(Debug, Args)]
pub struct LimitOpts {
    #[command(flatten)]
    pub rules: RuleLimitOpts,
    #[command(flatten)]
    pub mutes: MuteLimitOpts,
}

/// `klaxon run`: both sides in one process.
#[derive(Debug, Args)]
#[command(after_help = RUN_EXAMPLES)]
pub struct RunArgs {
    #[command(flatten, next_help_heading = "Process")]
    pub process: ProcessOpts,
    #[command(flatten, next_help_heading = "HTTP server")]
    pub http: HttpOpts,
    #[command(flatten, next_help_heading = "Evaluation")]
    pub evaluate: EvaluateOpts,
    #[command(flatten)]
    pub send: SendOpts,
    #[command(flatten, next_help_heading = "Limits per project")]
    pub limits: LimitOpts,
}

/// `klaxon worker` without delivery settings still serves the HTTP API, whose direct notifications
/// (`POST /api/v1/notifications`) are checked against `--allow-private-endpoints` (in `run` and `sender` it is
/// one of the delivery settings).
#[derive(Debug, Args)]
pub struct ApiOpts {
    /// Accept direct notifications (POST /api/v1/notifications) to loopback/private/link-local addresses.
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", default_value_t = false)]
    pub allow_private_endpoints: bool,
}

/// `klaxon worker`: the evaluating side.
#[derive(Debug, Args)]
#[command(after_help = WORKER_EXAMPLES)]
pub struct WorkerArgs {
    #[command(flatten, next_help_heading = "Process")]
    pub process: ProcessOpts,
    #[command(flatten, next_help_heading = "Process")]
    pub api: ApiOpts,
    #[command(flatten, next_help_heading = "HTTP server")]
    pub http: HttpOpts,
    #[command(flatten, next_help_heading = "Evaluation")]
    pub evaluate: EvaluateOpts,
    #[command(flatten, next_help_heading = "Limits per project")]
    pub limits: LimitOpts,
}

/// `klaxon sender`: the delivering side.
#[derive(Debug, Args)]
#[command(after_help = SENDER_EXAMPLES)]
pub struct SenderArgs {
    #[command(flatten, next_help_heading = "Process")]
    pub process: ProcessOpts,
    #[command(flatten, next_help_heading = "HTTP server")]
    pub http: HttpOpts,
    #[command(flatten)]
    pub send: SendOpts,
    #[command(flatten, next_help_heading = "Limits per project")]
    pub limits: LimitOpts,
}

/// What one process runs: the evaluating side, the delivering side, or both.
pub struct Plan {
    process: ProcessOpts,
    http: HttpOpts,
    evaluate: Option<EvaluateOpts>,
    send: Option<SendOpts>,
    /// `--allow-private-endpoints`, for the HTTP API's direct notifications.
    allow_private_endpoints: bool,
    /// `--max-rules-per-project`, `--max-mutes-per-project`, `--max-email-recipients`.
    limits: LimitOpts,
}

impl From<RunArgs> for Plan {
    fn from(a: RunArgs) -> Self {
        Plan {
            allow_private_endpoints: a.send.deliver.delivery.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: Some(a.evaluate),
            send: Some(a.send),
            limits: a.limits,
        }
    }
}

impl From<WorkerArgs> for Plan {
    fn from(a: WorkerArgs) -> Self {
        Plan {
            allow_private_endpoints: a.api.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: Some(a.evaluate),
            send: None,
            limits: a.limits,
        }
    }
}

impl From<SenderArgs> for Plan {
    fn from(a: SenderArgs) -> Self {
        Plan {
            allow_private_endpoints: a.send.deliver.delivery.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: None,
            send: Some(a.send),
            limits: a.limits,
        }
    }
}

/// Parses `--retry-schedule`: comma-separated durations (plain numbers are seconds), at least one, each ≥ 1 s.
fn parse_schedule(s: &str) -> anyhow::Result<Vec<Duration>> {
    let out = s
        .split(',')
        .map(|p| match duration_secs(p) {
            Ok(d) if d >= Duration::from_secs(1) => Ok(d),
            _ => Err(usage(format!(
                "--retry-schedule: `{}` is not a duration of at least 1s (e.g. 5, 30s, 2m)",
                p.trim()
            ))),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ensure_usage!(!out.is_empty(), "--retry-schedule needs at least one delay");
    Ok(out)
}

/// The process's rule store: connected once (one MongoDB client), by whichever part asks first.
async fn shared_store(
    cell: &tokio::sync::OnceCell<RuleStore>,
    mongo_url: &str,
    mongo_db: &str,
    defaults: klaxon_core::RuleDefaults,
) -> Result<RuleStore, klaxon_store::RulesError> {
    cell.get_or_try_init(|| async {
        RuleStore::connect(mongo_url, mongo_db)
            .await
            .map(|s| s.with_rule_defaults(defaults))
    })
    .await
    .cloned()
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

/// Checks the flags of the delivering side before anything connects: a wrong value is a usage error (exit 2).
fn validate_send(send: &SendOpts) -> anyhow::Result<Vec<Duration>> {
    let (d, b, r) = (&send.deliver, &send.breaker, &send.rates);
    ensure_usage!(d.max_attempts >= 1, "--max-attempts must be at least 1");
    let schedule = parse_schedule(&d.retry_schedule)?;
    ensure_usage!(d.sender_prefetch >= 1, "--sender-prefetch must be at least 1");
    ensure_usage!(d.host_concurrency >= 1, "--host-concurrency must be at least 1");
    ensure_usage!(
        b.breaker_failure_ratio > 0.0 && b.breaker_failure_ratio <= 1.0,
        "--breaker-failure-ratio must be in (0, 1]"
    );
    for (flag, rate) in [
        ("--rate-telegram-chat", r.rate_telegram_chat),
        ("--rate-telegram-bot", r.rate_telegram_bot),
        ("--rate-slack", r.rate_slack),
        ("--rate-webhook", r.rate_webhook),
        ("--rate-email", r.rate_email),
    ] {
        ensure_usage!(
            rate.is_finite() && rate >= 0.0,
            "{flag} must be a number of messages per second ≥ 0"
        );
    }
    Ok(schedule)
}

/// Runs the process `plan` describes until SIGTERM/SIGINT.
pub async fn run(plan: impl Into<Plan>, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let plan: Plan = plan.into();
    let process = &plan.process;
    let http_addr = plan.http.http_addr;
    // Validate everything before connecting to anything.
    let server_limits = plan.http.limits()?;
    let topology = Topology::new(&global.namespace, &global.events_queue(), process.queue_type);
    // `--output hawk` and `--output shadow` deliver nothing themselves
    let no_senders = plan.evaluate.as_ref().is_some_and(|e| !e.output.needs_senders());
    let rule_defaults = klaxon_core::RuleDefaults {
        including_case: plan
            .evaluate
            .as_ref()
            .map(|e| e.including_case)
            .unwrap_or_default(),
    };
    if let Some(e) = &plan.evaluate {
        ensure_usage!(e.batch_max >= 1, "--batch-max must be at least 1");
        ensure_usage!(e.prefetch >= 1, "--prefetch must be at least 1");
    }
    let limits = crate::cli::limits(Some(&plan.limits.rules), Some(&plan.limits.mutes))?;
    let (action_key, action_links) =
        match crate::cli::action_setup(plan.http.public_url.as_ref()).map_err(|e| usage(e.to_string()))? {
            crate::cli::ActionSetup::On(key, url) => (
                Some(key.clone()),
                Some(klaxon_channels::ActionLinks::new(url, key)),
            ),
            crate::cli::ActionSetup::Half(why) => {
                tracing::warn!(problem = why, "action links are off");
                (None, None)
            }
            crate::cli::ActionSetup::Off => (None, None),
        };
    // `run --output hawk` publishes Hawk's sender tasks and starts no senders of its own; neither does shadow mode.
    let send = match plan.send {
        Some(send) if !no_senders => {
            let channels = send.deliver.delivery.channels()?.with_action_links(action_links);
            let schedule = validate_send(&send)?;
            Some((send, channels, schedule))
        }
        _ => None,
    };

    let shutdown = CancellationToken::new();
    let metrics = Metrics::install();
    let readiness = Readiness::default();
    // The process's one MongoDB client, for rules and the delivery trail: connected by whichever part (the
    // worker, the sender, the API) needs it first.
    let rule_store: Arc<tokio::sync::OnceCell<RuleStore>> = Arc::default();
    let api_token = std::env::var("KLAXON_API_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty());
    let mut allowed_hosts = plan
        .http
        .allowed_hosts
        .clone()
        .unwrap_or_default()
        .bound_to(http_addr.ip());
    if let Some(url) = &plan.http.public_url {
        // Action links send browsers to the public URL: its host is always one the console answers to.
        allowed_hosts = allowed_hosts.allowing(url.host());
    }
    let api = klaxon_api::router(klaxon_api::ApiConfig {
        namespace: global.namespace.clone(),
        amqp_url: global.amqp_url.clone(),
        redis_url: global.redis_url.clone(),
        mongo_url: global.mongo_url.clone(),
        mongo_db: global.mongo_db(),
        events_queue: global.events_queue(),
        queue_type: process.queue_type,
        allow_private_endpoints: plan.allow_private_endpoints,
        limits,
        token: api_token.clone(),
        allowed_hosts,
        rule_store: rule_store.clone(),
        webhook_keys: crate::cli::webhook_keys()?,
        rule_defaults,
        action_key,
    });
    let http = klaxon_engine::ops_server::serve(
        http_addr,
        metrics,
        readiness.clone(),
        api,
        server_limits,
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

    let tracker = TaskTracker::new();
    // The rule store once the worker has it (the sender's trail then writes through it at once).
    let mut mongo: Option<RuleStore> = None;
    if let Some(evaluate) = &plan.evaluate {
        let ready = readiness.role("worker");
        let Some(redis) =
            connect_with_retry("redis", &shutdown, || RedisHandle::connect(&global.redis_url)).await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let mongo_db = global.mongo_db();
        let Some(store) = connect_with_retry("mongodb", &shutdown, || {
            shared_store(&rule_store, &global.mongo_url, &mongo_db, rule_defaults)
        })
        .await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        // said once per process: the sender-only branch below checks when there is no evaluate side
        tracker.spawn(super::notices::redis_eviction(redis.clone()));
        let counter = WindowCounter::new(redis, &global.namespace);
        tracker.spawn(klaxon_engine::probe_redis(
            counter.clone(),
            readiness.role("redis"),
            shutdown.clone(),
        ));
        mongo = Some(store.clone());
        // Shadow mode records what it would have sent in the delivery trail (the senders' collection).
        let trail = if evaluate.output == klaxon_engine::sink::Output::Shadow {
            let store = store.clone();
            let (trail, task) = Trail::start(
                async move { Some(store) },
                klaxon_store::trail::DEFAULT_TRAIL_TTL,
                shutdown.clone(),
            );
            tracker.spawn(async move {
                let _ = task.await;
            });
            tracing::info!("shadow mode: notifications are recorded in the delivery trail, never sent");
            trail
        } else {
            Trail::disabled()
        };
        let rules = RuleCache::new(store, evaluate.rules_ttl).with_limits(limits);
        tracker.spawn(klaxon_store::invalidation::subscribe(
            global.redis_url.clone(),
            global.namespace.clone(),
            rules.clone(),
            shutdown.clone(),
        ));
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
            mutes: klaxon_counter::Mutes::new(counter.redis().clone(), &global.namespace)
                .with_limit(limits.max_mutes),
            counter,
            rules,
            config: worker::WorkerConfig {
                prefetch: evaluate.prefetch,
                batch_max: evaluate.batch_max,
                batch_wait: evaluate.batch_wait_ms,
            },
            output: evaluate.output,
            trail: trail.clone(),
        };
        let digest_deps = klaxon_engine::digest::DigestDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            digests: klaxon_counter::Digests::new(deps.counter.redis().clone(), &global.namespace),
            prefetch: 16,
            output: evaluate.output,
            trail,
            // test builds only: the end-to-end crash-between-claim-and-publish test sets the variable
            #[cfg(feature = "fault-injection")]
            faults: klaxon_engine::digest::Faults {
                crash_after_claim: std::env::var(klaxon_engine::digest::CRASH_AFTER_CLAIM_ENV)
                    .is_ok_and(|v| v == "1"),
            },
        };
        tracker.spawn(worker::run(deps, ready, shutdown.clone()));
        // flushes due digest windows (minPeriod > 0): part of the evaluate side, next to the worker
        tracker.spawn(klaxon_engine::digest::run(
            digest_deps,
            readiness.role("digest"),
            shutdown.clone(),
        ));
    }
    if let Some((send, channels, retry_schedule)) = send {
        let (deliver, rates, breaker) = (&send.deliver, &send.rates, &send.breaker);
        // The trail writes through the rule store; it queues records until the store is there.
        let (store_tx, store_rx) = tokio::sync::oneshot::channel::<RuleStore>();
        match mongo.clone() {
            Some(store) => {
                let _ = store_tx.send(store);
            }
            None => {
                // sender only: connect the store in the background, for the trail; deliveries never wait for it
                let shutdown = shutdown.clone();
                let rule_store = rule_store.clone();
                let (mongo_url, mongo_db) = (global.mongo_url.clone(), global.mongo_db());
                tracker.spawn(async move {
                    if let Some(store) = connect_with_retry("mongodb", &shutdown, || {
                        shared_store(&rule_store, &mongo_url, &mongo_db, rule_defaults)
                    })
                    .await
                    {
                        let _ = store_tx.send(store);
                    }
                });
            }
        }
        let Some(redis) =
            connect_with_retry("redis", &shutdown, || RedisHandle::connect(&global.redis_url)).await
        else {
            return Ok(ExitCode::SUCCESS);
        };
        if plan.evaluate.is_none() {
            tracker.spawn(super::notices::redis_eviction(redis.clone()));
        }
        let (trail, trail_task) = Trail::start(
            async move { store_rx.await.ok() },
            deliver.trail_ttl_days.max(Duration::from_secs(1)),
            shutdown.clone(),
        );
        tracker.spawn(async move {
            let _ = trail_task.await;
        });
        let deps = sender::SenderDeps {
            amqp_url: global.amqp_url.clone(),
            topology: topology.clone(),
            channels,
            max_attempts: deliver.max_attempts,
            prefetch: deliver.sender_prefetch,
            retry_schedule: retry_schedule.into(),
            dedup: Dedup::new(
                redis.clone(),
                &global.namespace,
                deliver.dedup_ttl,
                // longer than one attempt can take (connect + request timeouts) plus a rate-limit sleep (≤ 1 s) and
                // the bulkhead wait (sender::BULKHEAD_WAIT, 10 s)
                deliver.delivery.connect_timeout + deliver.delivery.request_timeout + Duration::from_secs(30),
            ),
            limiter: RateLimiter::new(
                redis,
                &global.namespace,
                RateLimits {
                    telegram_chat: rates.rate_telegram_chat,
                    telegram_bot: rates.rate_telegram_bot,
                    slack: rates.rate_slack,
                    webhook: rates.rate_webhook,
                    email: rates.rate_email,
                },
                Duration::from_secs(1),
            ),
            breakers: Arc::new(Breakers::new(BreakerConfig {
                window: breaker.breaker_window,
                min_requests: breaker.breaker_min_requests,
                failure_ratio: breaker.breaker_failure_ratio,
                open_for: breaker.breaker_open,
            })),
            bulkheads: Arc::new(Bulkheads::new(deliver.host_concurrency)),
            trail,
        };
        for kind in ChannelKind::ALL {
            let ready = readiness.role(&format!("sender.{kind}"));
            tracker.spawn(sender::run(deps.clone(), kind, ready, shutdown.clone()));
        }
    }
    tracker.close();
    tracing::info!(namespace = %global.namespace, http = %http_addr, "klaxon started");
    super::notices::console(http_addr, api_token.as_deref());

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
