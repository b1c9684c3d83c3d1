//! `klaxon doctor`: checks, with a short timeout each, everything a Klaxon process needs, and prints one line
//! per check — `ok|warn|FAIL  <check>  <detail>`. Exit 1 when a check FAILs, 0 otherwise (warnings included).
//! It takes the connection flags and variables `klaxon run` takes (`KLAXON_*` exported once, both agree).
//!
//! What it checks, and why:
//! - **redis**: reachable, and version ≥ 6.2 — `lua/unique_users.lua` calls `ZMSCORE` (Redis 6.2); the other
//!   scripts need less. A comma-separated `--redis-url` must reach a Redis Cluster (every primary is asked);
//!   one URL pointing at a cluster node fails (keys of other slots would answer MOVED).
//! - **redis eviction**: `maxmemory-policy` on the server or on every cluster primary (`CONFIG GET`, else
//!   `INFO memory`): anything but `noeviction` can delete window counters, first-seen marks, dedup leases and
//!   digest state under memory pressure (a warning).
//! - **redis persistence**: `appendonly` and `save` on the server or every cluster primary (`CONFIG GET`): with
//!   neither, a restart empties Redis — the messages held by quiet hours live only there (a warning naming the fix;
//!   also a warning, "could not be checked", where `CONFIG` is refused).
//! - **alert slots**: projects that could not open an alert in the last 24 hours (every slot open, or their
//!   alerts resolved by hand only holding half of them): their firings are delivered without reminders,
//!   escalation or resolve (a warning naming them, how full they are now, and the fix).
//! - **rabbitmq** and **queue <name>**: reachable; depth and consumers of the namespace's queues by passive
//!   declare (a missing queue is a warning: a Klaxon process declares it when it starts). With `--output hawk`,
//!   Hawk's `sender/<channel>` queues too: one without a consumer means Hawk's sender is not running and tasks
//!   pile up (a warning). And **alert messages**: with `--output hawk` alerts are tracked but only firings are
//!   published (Hawk's senders know no other task), so resolves, acknowledgements, reminders and escalations
//!   are not sent — said on a line of its own, so nobody waits for them.
//! - **shards plugin**, **exchange** and **queue <events-queue>.shard.i** (with `--events-shards` N > 1): the
//!   `rabbitmq_consistent_hash_exchange` plugin (FAIL when missing: a throwaway x-consistent-hash exchange is
//!   declared on a connection of its own), the shard exchange, each shard queue's depth and consumers (none is a
//!   warning), and shard queues left beyond N (a warning).
//! - **consumers**: the events queue's consumer count against the Klaxon workers registered in Redis
//!   (`klaxon_counter::Consumers`): more consumers than workers means another application (Hawk's notifier?)
//!   takes part of the stream, and thresholds are under-counted (a warning naming the count).
//! - **mongodb**: reachable, the database and collection rules are read from, and what the server supports
//!   (`createIndexes`: PoloDB does not, so rule-id lookups scan projects and the delivery trail keeps old records).
//! - **rules**: the problems `klaxon rules check` would report, counted (a warning: the other rules work). A
//!   database without a single rule FAILs when the events queue has traffic — messages ready, or a registered
//!   worker reported taking events in the last 10 minutes — since every event is then dropped unevaluated (the
//!   usual cause: `--mongo-db` names the wrong database); with consumers but no sign of events it is a warning.
//! - **smtp**: a TCP connect to the `--smtp-url` host and its `220` greeting (credentials are never printed).
//! - **telegram**: whether a bot token is set (it is never printed).
//! - **inbound pagerduty|slack|telegram**: whether each inbound integration is on (its secret set, never
//!   printed), and the accepted and refused requests the running process at `--http-addr` counted (its
//!   `/metrics`); a warning when it accepted none and refused some for their signature or age (a wrong secret).
//!
//! One file per service or job: `redis.rs`, `alerts.rs` (alert slots), `rabbitmq.rs` (the queues, Hawk's queues with
//! `--output hawk`), `shards.rs` (`--events-shards`),
//! `consumers.rs`, `mongodb.rs`, `rules.rs`, `smtp.rs`, `channels.rs` (Telegram, PagerDuty), `inbound.rs` (the inbound integrations) and `keys.rs` (action
//! links, webhook signing, the API token); this file holds the options, the report and the order of the lines.

mod alerts;
mod channels;
mod consumers;
mod inbound;
mod keys;
mod mongodb;
mod rabbitmq;
mod redis;
mod rules;
mod shards;
mod smtp;

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use klaxon_counter::Consumers;
use klaxon_engine::sink::Output;
use serde_json::json;

use crate::cli::{duration_secs, GlobalOpts, DEFAULT_SMTP_URL, DEFAULT_TELEGRAM_API};
use crate::output::{self, Format, OutputArgs};

/// Options of `klaxon doctor`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon doctor
  klaxon doctor --timeout 1s -o json
  KLAXON_REDIS_URL=redis://10.0.0.1:7000,redis://10.0.0.2:7000 klaxon doctor

  KLAXON_OUTPUT=hawk KLAXON_EVENTS_QUEUE=notifier KLAXON_MONGO_DB=hawk klaxon doctor

Sample output:
  ok    redis                127.0.0.1:6379: Redis 7.0.15, standalone (6.2 or later needed: ZMSCORE)
  ok    redis eviction       127.0.0.1:6379: maxmemory-policy noeviction
  ok    redis persistence    127.0.0.1:6379: appendonly yes
  ok    alert slots          no project ran out of alert slots in the last 24 h (each keeps 1000 alerts, at most 500 …)
  ok    rabbitmq             127.0.0.1:5672: connected
  ok    queue klaxon.events  0 messages, 1 consumers
  ok    consumers            queue klaxon.events: 1 consumer(s), all registered Klaxon workers (klaxon worker web-1 4711)
  ok    mongodb              127.0.0.1:27017, database `klaxon`, collection `projects`: createIndexes supported
  warn  rules                1 problem(s) in 12 rule(s) of 3 project(s) in database `klaxon`: see `klaxon rules check`
  ok    smtp                 127.0.0.1:25: 220 mail.example.com ESMTP
  warn  telegram             KLAXON_TELEGRAM_BOT_TOKEN is not set: telegram channels cannot deliver
  ok    inbound pagerduty    on (KLAXON_PAGERDUTY_WEBHOOK_SECRET set, not shown): POST /api/v1/integrations/pagerduty; …
  ok    inbound slack        off: KLAXON_SLACK_SIGNING_SECRET is not set (POST /api/v1/integrations/slack answers 404)
  ok    inbound telegram     off: KLAXON_TELEGRAM_WEBHOOK_SECRET is not set (POST /api/v1/integrations/telegram answers 404)")]
pub struct DoctorArgs {
    /// How long each check may take (a plain number is seconds).
    #[arg(long, env = "KLAXON_DOCTOR_TIMEOUT", default_value = "3s", value_parser = duration_secs, value_name = "DURATION")]
    pub timeout: Duration,
    /// SMTP server to check (its host and port; credentials are never printed).
    #[arg(long, env = "KLAXON_SMTP_URL", default_value = DEFAULT_SMTP_URL, hide_env_values = true)]
    pub smtp_url: String,
    /// Telegram Bot API base URL.
    #[arg(long, env = "KLAXON_TELEGRAM_API", default_value = DEFAULT_TELEGRAM_API)]
    pub telegram_api: String,
    /// PagerDuty Events API base URL, as `klaxon run` has it.
    #[arg(long, env = "KLAXON_PAGERDUTY_API", default_value = crate::cli::DEFAULT_PAGERDUTY_API, value_name = "URL")]
    pub pagerduty_api: String,
    /// Where the workers put notifications, as `klaxon run --output` has it: with `hawk`, Hawk's
    /// `sender/<channel>` queues are checked for consumers too.
    #[arg(
        long = "output",
        env = "KLAXON_OUTPUT",
        default_value = "klaxon",
        value_name = "OUTPUT"
    )]
    pub notify_output: Output,
    /// The address of the running Klaxon process whose `/metrics` give the inbound integrations' request counts
    /// (as `klaxon run --http-addr` has it).
    #[arg(
        long,
        env = "KLAXON_HTTP_ADDR",
        default_value = "127.0.0.1:9464",
        value_name = "ADDR"
    )]
    pub http_addr: std::net::SocketAddr,
    /// The console's URL as browsers reach it (as `klaxon run --public-url` has it): checked beside
    /// KLAXON_ACTION_KEY, as the action links of messages need both.
    #[arg(long, env = "KLAXON_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The rules check reads projects under these limits, as the engine does.
    #[command(flatten, next_help_heading = "Limits per project")]
    pub limits: crate::cli::RuleLimitOpts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the report.
#[derive(Debug)]
struct Check {
    status: Status,
    name: String,
    detail: String,
}

fn check(status: Status, name: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        status,
        name: name.into(),
        detail: detail.into(),
    }
}

/// `host:port[,host:port…]` of a service URL, without scheme, credentials, path or query.
pub(crate) fn endpoint(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts)
        .to_owned()
}

/// Runs every check.
pub async fn run(args: DoctorArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let t = args.timeout;
    let limits = crate::cli::limits(Some(&args.limits), None)?;
    // Shadow mode delivers nothing: the senders' services and settings are not checked.
    let delivers = args.notify_output != Output::Shadow;
    let ((redis, handle), (rabbit, events), (mongo, survey), smtp, inbound) = tokio::join!(
        redis::redis_checks(&global.redis_url, t),
        rabbitmq::rabbit_checks(global, args.notify_output, t),
        mongodb::mongo_checks(global, t, &limits),
        async {
            if delivers {
                Some(smtp::smtp_check(&args.smtp_url, t).await)
            } else {
                None
            }
        },
        inbound::inbound_checks(args.http_addr, t),
    );
    // Klaxon's registered consumers of the events queue (and whether they took events lately), from Redis.
    let registered = match (&handle, &events) {
        (Some(redis), Some(_)) => Some(
            match tokio::time::timeout(
                t,
                Consumers::new(redis.clone(), &global.namespace, &global.events_queue())
                    .live(consumers::MAX_LABELS),
            )
            .await
            {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {}", humantime::format_duration(t))),
            },
        ),
        _ => None,
    };
    let mut checks = Vec::new();
    checks.extend(redis);
    if let Some(redis) = &handle {
        checks.push(alerts::alert_slots_check(redis, &global.namespace, t).await);
    }
    checks.extend(rabbit);
    checks.extend(rabbitmq::alert_messages_check(args.notify_output));
    checks.extend(rabbitmq::no_events_check(args.notify_output));
    if let Some(depth) = events {
        checks.push(consumers::consumers_check(global, depth, registered.as_ref()));
    }
    checks.extend(mongo);
    if let Some(survey) = survey {
        let traffic = rules::Traffic::of(events, registered.as_ref().and_then(|r| r.as_ref().ok()));
        checks.push(rules::rules_check(global, survey, traffic, t));
    }
    if delivers {
        checks.extend(smtp);
        checks.push(channels::telegram_check(&args.telegram_api));
        checks.push(channels::slack_check());
        checks.extend(keys::action_links_check(args.public_url.as_deref()));
        checks.push(channels::pagerduty_check(&args.pagerduty_api));
    } else {
        checks.push(check(
            Status::Ok,
            "senders",
            "not checked: --output shadow records what would be sent and delivers nothing",
        ));
    }
    checks.extend(keys::webhook_keys_check());
    checks.extend(keys::api_token_check());
    checks.extend(inbound);

    let format = args.output.format(Format::Json);
    let text = match format {
        Format::Table => output::table(
            None,
            &checks
                .iter()
                .map(|c| vec![c.status.label().to_owned(), c.name.clone(), c.detail.clone()])
                .collect::<Vec<_>>(),
        ),
        _ => output::list(
            format,
            &checks,
            &[],
            |_| Vec::new(),
            |c| json!({"check": c.name, "status": c.status.label().to_ascii_lowercase(), "detail": c.detail}),
            "",
        ),
    };
    output::emit(&text)?;
    Ok(if checks.iter().any(|c| c.status == Status::Fail) {
        ExitCode::from(crate::exit::PROBLEMS)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_never_show_credentials() {
        for (url, want) in [
            ("redis://127.0.0.1:6379/", "127.0.0.1:6379"),
            ("redis://:secret@10.0.0.1:6380/0", "10.0.0.1:6380"),
            ("amqp://guest:guest@127.0.0.1:5672/%2f", "127.0.0.1:5672"),
            ("mongodb://u:p@a:1,b:2/?replicaSet=rs", "a:1,b:2"),
            ("smtps://user:p%40ss@mail.example.com:465", "mail.example.com:465"),
            ("127.0.0.1:25", "127.0.0.1:25"),
        ] {
            assert_eq!(endpoint(url), want, "{url}");
        }
    }

    pub(super) fn global() -> GlobalOpts {
        GlobalOpts {
            namespace: "ns".into(),
            amqp_url: String::new(),
            redis_url: String::new(),
            mongo_url: String::new(),
            mongo_db: Some("hawk".into()),
            events_queue: Some("notifier".into()),
            events_shards: 1,
            log_format: "text".into(),
            namespace_given: true,
            command: "doctor".into(),
        }
    }
}
