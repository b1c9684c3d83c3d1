//! Raw options → a validated [`Plan`], before anything connects (ripgrep's `LowArgs` → `HiArgs`): every flag of
//! `klaxon run | worker | sender` is checked here, once, into the typed configuration each part takes. A wrong
//! value is a usage error (exit 2) naming the flag.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::QueueType;
use klaxon_channels::{Channels, Secret};
use klaxon_engine::breaker::BreakerConfig;
use klaxon_engine::ops_server::ServerLimits;
use klaxon_engine::ratelimit::RateLimits;
use klaxon_engine::sink::Output;
use klaxon_engine::worker::WorkerConfig;

use super::args::{
    EvaluateOpts, HttpOpts, LimitOpts, ProcessOpts, RunArgs, SendOpts, SenderArgs, WorkerArgs,
};
use crate::cli::duration_secs;
use crate::exit::{ensure_usage, usage};

/// The options of one process as clap parsed them, whichever command gave them: the evaluating side, the
/// delivering side, or both.
pub struct RawArgs {
    process: ProcessOpts,
    http: HttpOpts,
    evaluate: Option<EvaluateOpts>,
    send: Option<SendOpts>,
    /// `--allow-private-endpoints`, for the HTTP API's direct notifications.
    allow_private_endpoints: bool,
    /// `--max-rules-per-project`, `--max-mutes-per-project`, `--max-email-recipients`.
    limits: LimitOpts,
}

impl From<RunArgs> for RawArgs {
    fn from(a: RunArgs) -> Self {
        RawArgs {
            allow_private_endpoints: a.send.deliver.delivery.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: Some(a.evaluate),
            send: Some(a.send),
            limits: a.limits,
        }
    }
}

impl From<WorkerArgs> for RawArgs {
    fn from(a: WorkerArgs) -> Self {
        RawArgs {
            allow_private_endpoints: a.api.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: Some(a.evaluate),
            send: None,
            limits: a.limits,
        }
    }
}

impl From<SenderArgs> for RawArgs {
    fn from(a: SenderArgs) -> Self {
        RawArgs {
            allow_private_endpoints: a.send.deliver.delivery.allow_private_endpoints,
            process: a.process,
            http: a.http,
            evaluate: None,
            send: Some(a.send),
            limits: a.limits,
        }
    }
}

/// What one process runs, validated: the HTTP server and API every process has, the evaluating side (worker
/// and digest flusher) and the delivering side (one sender per channel), each when it runs.
pub struct Plan {
    /// `--queue-type`, for newly declared queues.
    pub queue_type: QueueType,
    /// The HTTP server (metrics, health, API, console).
    pub http: HttpPlan,
    /// The HTTP API's own settings.
    pub api: ApiPlan,
    /// The per-project limits (the API writes under them, the worker reads under them).
    pub limits: klaxon_core::Limits,
    /// What rules leave unset (`--including-case`; the default for a sender-only process).
    pub rule_defaults: klaxon_core::RuleDefaults,
    /// The evaluating side (`run`, `worker`).
    pub worker: Option<WorkerPlan>,
    /// The delivering side (`run` with `--output klaxon`, `sender`).
    pub sender: Option<SenderPlan>,
}

/// The HTTP server's address and limits.
pub struct HttpPlan {
    /// `--http-addr`.
    pub addr: SocketAddr,
    /// `--allowed-hosts`, bound to the address.
    pub allowed_hosts: klaxon_api::guard::AllowedHosts,
    /// `--trusted-proxies` (default: none).
    pub trusted_proxies: klaxon_api::proxy::TrustedProxies,
    /// `--http-header-timeout`, `--http-max-connections`.
    pub limits: ServerLimits,
}

/// The HTTP API's settings besides the service URLs.
pub struct ApiPlan {
    /// `KLAXON_API_TOKEN` (unset or blank: none; only loopback clients are served).
    pub token: Option<Secret>,
    /// `--allow-private-endpoints`, for direct notifications.
    pub allow_private_endpoints: bool,
    /// `KLAXON_WEBHOOK_SECRET` (and `…_PREVIOUS`), to show signing secrets.
    pub webhook_keys: Option<klaxon_channels::webhook::SigningKeys>,
    /// `KLAXON_ACTION_KEY` with `--public-url`: the key the console checks action links with.
    pub action_key: Option<klaxon_core::action::ActionKey>,
    /// The inbound integrations' secrets (`KLAXON_PAGERDUTY_WEBHOOK_SECRET`, `KLAXON_SLACK_SIGNING_SECRET`,
    /// `KLAXON_TELEGRAM_WEBHOOK_SECRET`).
    pub inbound: klaxon_api::inbound::InboundSecrets,
}

/// The evaluating side.
pub struct WorkerPlan {
    /// `--output`.
    pub output: Output,
    /// `--prefetch`, `--batch-max`, `--batch-wait-ms`, `--batches-in-flight`.
    pub config: WorkerConfig,
    /// `--rules-ttl`.
    pub rules_ttl: Duration,
}

/// The delivering side.
pub struct SenderPlan {
    /// The channel adapters (`--telegram-api`, `--smtp-url`, …), validated.
    pub channels: Channels,
    /// `--max-attempts`.
    pub max_attempts: u32,
    /// `--sender-prefetch`.
    pub prefetch: u16,
    /// `--retry-schedule`.
    pub retry_schedule: Arc<[Duration]>,
    /// `--dedup-ttl`.
    pub dedup_ttl: Duration,
    /// How long a delivery holds its dedup lease: longer than one attempt can take (connect + request
    /// timeouts) plus a rate-limit sleep (≤ 1 s) and the bulkhead wait (`sender::BULKHEAD_WAIT`, 10 s).
    pub dedup_lease: Duration,
    /// `--trail-ttl-days` (at least a second).
    pub trail_ttl: Duration,
    /// `--rate-*`.
    pub rates: RateLimits,
    /// `--breaker-*`.
    pub breaker: BreakerConfig,
    /// `--host-concurrency`.
    pub host_concurrency: usize,
    /// `--reminder-budget` (0 = none).
    pub reminder_budget: u32,
}

impl Plan {
    /// Validates every option (and `KLAXON_API_TOKEN`, `KLAXON_WEBHOOK_SECRET…`) into a plan. Must be called
    /// inside the tokio runtime: the SMTP adapter's pool starts a task.
    pub fn from_args(args: impl Into<RawArgs>) -> anyhow::Result<Plan> {
        let a: RawArgs = args.into();
        let mut allowed_hosts = a
            .http
            .allowed_hosts
            .clone()
            .unwrap_or_default()
            .bound_to(a.http.http_addr.ip());
        if let Some(url) = &a.http.public_url {
            // Action links send browsers to the public URL: its host is always one the console answers to.
            allowed_hosts = allowed_hosts.allowing(url.host());
        }
        let http = HttpPlan {
            addr: a.http.http_addr,
            allowed_hosts,
            trusted_proxies: a.http.trusted_proxies.clone().unwrap_or_default(),
            limits: server_limits(&a.http)?,
        };
        let (action_key, action_links) =
            match crate::cli::action_setup(a.http.public_url.as_ref()).map_err(|e| usage(e.to_string()))? {
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
        let worker = a.evaluate.as_ref().map(worker_plan).transpose()?;
        let rule_defaults = klaxon_core::RuleDefaults {
            including_case: a.evaluate.as_ref().map(|e| e.including_case).unwrap_or_default(),
        };
        let limits = crate::cli::limits(Some(&a.limits.rules), Some(&a.limits.mutes))?;
        // `run --output hawk` publishes Hawk's sender tasks and starts no senders of its own; neither does shadow
        // mode: their delivery flags are not read.
        let senders = worker.as_ref().is_none_or(|w| w.output.needs_senders());
        let sender = match &a.send {
            Some(send) if senders => Some(sender_plan(send, action_links)?),
            _ => None,
        };
        let api = ApiPlan {
            token: api_token(std::env::var("KLAXON_API_TOKEN").ok()),
            allow_private_endpoints: a.allow_private_endpoints,
            webhook_keys: crate::cli::webhook_keys()?,
            action_key,
            inbound: crate::cli::inbound_secrets(),
        };
        Ok(Plan {
            queue_type: a.process.queue_type,
            http,
            api,
            limits,
            rule_defaults,
            worker,
            sender,
        })
    }
}

/// `KLAXON_API_TOKEN`'s value as a secret; unset or blank is none.
fn api_token(value: Option<String>) -> Option<Secret> {
    let token = value.filter(|t| !t.trim().is_empty()).map(Secret::new);
    if let Some(problem) = token
        .as_ref()
        .and_then(|t| crate::cli::short_api_token(t.expose()))
    {
        tracing::warn!(problem = %problem, "KLAXON_API_TOKEN is short");
    }
    token
}

/// The HTTP server's limits, checked.
fn server_limits(http: &HttpOpts) -> anyhow::Result<ServerLimits> {
    let t = http.http_header_timeout;
    ensure_usage!(
        t >= Duration::from_millis(100) && t <= Duration::from_secs(3600),
        "--http-header-timeout must be from 100ms to 1h (got {})",
        humantime::format_duration(t)
    );
    ensure_usage!(
        (1..=1_000_000).contains(&http.http_max_connections),
        "--http-max-connections must be from 1 to 1000000"
    );
    Ok(ServerLimits {
        header_timeout: t,
        max_connections: http.http_max_connections,
        ..Default::default()
    })
}

fn worker_plan(e: &EvaluateOpts) -> anyhow::Result<WorkerPlan> {
    ensure_usage!(e.batch_max >= 1, "--batch-max must be at least 1");
    ensure_usage!(e.prefetch >= 1, "--prefetch must be at least 1");
    Ok(WorkerPlan {
        output: e.output,
        config: WorkerConfig {
            prefetch: e.prefetch,
            batch_max: e.batch_max,
            batch_wait: e.batch_wait_ms,
            in_flight: e.batches_in_flight,
        },
        rules_ttl: e.rules_ttl,
    })
}

/// Checks the flags of the delivering side.
fn sender_plan(
    send: &SendOpts,
    action_links: Option<klaxon_channels::ActionLinks>,
) -> anyhow::Result<SenderPlan> {
    let (d, b, r) = (&send.deliver, &send.breaker, &send.rates);
    let channels = d.delivery.channels()?.with_action_links(action_links);
    ensure_usage!(d.max_attempts >= 1, "--max-attempts must be at least 1");
    let retry_schedule = parse_schedule(&d.retry_schedule)?;
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
    Ok(SenderPlan {
        channels,
        max_attempts: d.max_attempts,
        prefetch: d.sender_prefetch,
        retry_schedule: retry_schedule.into(),
        dedup_ttl: d.dedup_ttl,
        dedup_lease: d.delivery.connect_timeout + d.delivery.request_timeout + Duration::from_secs(30),
        trail_ttl: d.trail_ttl_days.max(Duration::from_secs(1)),
        rates: RateLimits {
            telegram_chat: r.rate_telegram_chat,
            telegram_bot: r.rate_telegram_bot,
            slack: r.rate_slack,
            webhook: r.rate_webhook,
            email: r.rate_email,
        },
        breaker: BreakerConfig {
            window: b.breaker_window,
            min_requests: b.breaker_min_requests,
            failure_ratio: b.breaker_failure_ratio,
            open_for: b.breaker_open,
            host_min_endpoints: klaxon_engine::breaker::HOST_MIN_ENDPOINTS,
        },
        host_concurrency: d.host_concurrency,
        reminder_budget: r.reminder_budget,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_engine::sender::{default_retry_schedule_flag, RETRY_SCHEDULE_S};

    #[test]
    fn the_flags_default_schedule_is_the_engines() {
        let parsed = parse_schedule(&default_retry_schedule_flag()).expect("the default parses");
        let want: Vec<Duration> = RETRY_SCHEDULE_S.iter().map(|s| Duration::from_secs(*s)).collect();
        assert_eq!(parsed, want);
    }

    #[test]
    fn schedules() {
        let s = Duration::from_secs;
        for (text, want) in [
            ("1s,30s,2m", Some(vec![s(1), s(30), s(120)])),
            ("5", Some(vec![s(5)])),
            ("1,soon", None),
            ("0", None),
            ("500ms", None),
            ("", None),
        ] {
            assert_eq!(parse_schedule(text).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn the_api_token_is_a_secret_and_blank_is_none() {
        assert!(api_token(None).is_none());
        assert!(api_token(Some("  ".into())).is_none());
        let t = api_token(Some("s3cret-token".into())).expect("set");
        assert_eq!(t.expose(), "s3cret-token");
        assert!(!format!("{t:?} {t}").contains("s3cret"));
    }
}
