//! The command lines of `klaxon run | worker | sender`: clap structures only (every flag with its variable and
//! help text). Nothing here is checked beyond what clap parses; [`super::plan::Plan::from_args`] validates them.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use klaxon_broker::QueueType;

use crate::cli::{duration_days, duration_ms, duration_secs, DeliveryOpts, MuteLimitOpts, RuleLimitOpts};

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
    /// Reverse proxies whose X-Forwarded-For is believed, comma-separated addresses or CIDR networks (e.g.
    /// 127.0.0.1 or 10.0.0.0/8). Only for a request whose TCP peer is one of them, its client (whose wrong tokens
    /// are counted, and whom "loopback only" looks at) is the right-most X-Forwarded-For address that is not a
    /// trusted proxy. Default: none (the TCP peer is the client).
    #[arg(long, env = "KLAXON_TRUSTED_PROXIES", value_name = "ADDRS", value_parser = klaxon_api::proxy::TrustedProxies::parse)]
    pub trusted_proxies: Option<klaxon_api::proxy::TrustedProxies>,
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
    /// How long a batch fills when deliveries come together; a lone one is processed at once (a plain number is
    /// milliseconds).
    #[arg(long, env = "KLAXON_BATCH_WAIT_MS", default_value = "2ms", value_parser = duration_ms, value_name = "DURATION")]
    pub batch_wait_ms: Duration,
    /// Batches a worker processes at once per consumed queue: the next batch is taken, parsed and counted while
    /// the previous one opens its alerts and waits for its publish confirms; counting stays in delivery order
    /// and acks in order. 1 = one batch at a time. Give `--prefetch` room for them (at least this × `--batch-max`
    /// to keep full batches).
    #[arg(long, env = "KLAXON_BATCHES_IN_FLIGHT", default_value_t = klaxon_engine::worker::DEFAULT_BATCHES_IN_FLIGHT, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..=16), usize::from))]
    pub batches_in_flight: usize,
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
    #[arg(long, env = "KLAXON_RETRY_SCHEDULE", default_value_t = klaxon_engine::sender::default_retry_schedule_flag())]
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
    /// Concurrent deliveries per destination host (bulkhead); one endpoint, and one project, may use half of
    /// them.
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
    /// Reminders (`renotify`) one project may send per hour, all its rules and channels together; past it a
    /// reminder is dropped and counted (`reason="reminder_budget"`). 0 = no budget.
    #[arg(long, env = "KLAXON_REMINDER_BUDGET", default_value_t = klaxon_core::priority::DEFAULT_REMINDER_BUDGET)]
    pub reminder_budget: u32,
}

/// The circuit breakers per destination endpoint (and host), per process.
#[derive(Debug, Args)]
pub struct BreakerOpts {
    /// Sliding window of outcomes per endpoint (a plain number is seconds).
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
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", value_parser = clap::builder::BoolishValueParser::new())]
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
