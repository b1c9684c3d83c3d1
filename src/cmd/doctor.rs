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
//! - **rabbitmq** and **queue <name>**: reachable; depth and consumers of the namespace's queues by passive
//!   declare (a missing queue is a warning: a Klaxon process declares it when it starts). With `--output hawk`,
//!   Hawk's `sender/<channel>` queues too: one without a consumer means Hawk's sender is not running and tasks
//!   pile up (a warning). And **alert messages**: with `--output hawk` alerts are tracked but only firings are
//!   published (Hawk's senders know no other task), so resolves, acknowledgements, reminders and escalations
//!   are not sent — said on a line of its own, so nobody waits for them.
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

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use klaxon_broker::{Broker, BrokerError, QueueDepth, QueueType, Topology, QUEUE_DECLARE_PASSIVE};
use klaxon_core::ChannelKind;
use klaxon_counter::{Consumers, PolicySource, RedisHandle, Registered};
use klaxon_engine::sink::{hawk_queue, Output};
use klaxon_store::RuleStore;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cli::{duration_secs, GlobalOpts, DEFAULT_SMTP_URL, DEFAULT_TELEGRAM_API};
use crate::output::{self, Format, OutputArgs};

/// The oldest Redis whose commands every script in `lua/` can use (`ZMSCORE` came in 6.2).
const REDIS_MIN: (u32, u32) = (6, 2);

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
  ok    rabbitmq             127.0.0.1:5672: connected
  ok    queue klaxon.events  0 messages, 1 consumers
  ok    consumers            queue klaxon.events: 1 consumer(s), all registered Klaxon workers (klaxon worker web-1 4711)
  ok    mongodb              127.0.0.1:27017, database `klaxon`, collection `projects`: createIndexes supported
  warn  rules                1 problem(s) in 12 rule(s) of 3 project(s) in database `klaxon`: see `klaxon rules check`
  ok    smtp                 127.0.0.1:25: 220 mail.example.com ESMTP
  warn  telegram             KLAXON_TELEGRAM_BOT_TOKEN is not set: telegram channels cannot deliver")]
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
    let ((redis, handle), (rabbit, events), (mongo, survey), smtp) = tokio::join!(
        redis_checks(&global.redis_url, t),
        rabbit_checks(global, args.notify_output, t),
        mongo_checks(global, t, &limits),
        async {
            if delivers {
                Some(smtp_check(&args.smtp_url, t).await)
            } else {
                None
            }
        },
    );
    // Klaxon's registered consumers of the events queue (and whether they took events lately), from Redis.
    let registered = match (&handle, &events) {
        (Some(redis), Some(_)) => Some(
            match tokio::time::timeout(
                t,
                Consumers::new(redis.clone(), &global.namespace, &global.events_queue()).live(MAX_LABELS),
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
    checks.extend(rabbit);
    checks.extend(alert_messages_check(args.notify_output));
    if let Some(depth) = events {
        checks.push(consumers_check(global, depth, registered.as_ref()));
    }
    checks.extend(mongo);
    if let Some(survey) = survey {
        let traffic = Traffic::of(events, registered.as_ref().and_then(|r| r.as_ref().ok()));
        checks.push(rules_check(global, survey, traffic, t));
    }
    if delivers {
        checks.extend(smtp);
        checks.push(telegram_check(&args.telegram_api));
        checks.push(slack_check());
        checks.extend(action_links_check(args.public_url.as_deref()));
        checks.push(pagerduty_check(&args.pagerduty_api));
    } else {
        checks.push(check(
            Status::Ok,
            "senders",
            "not checked: --output shadow records what would be sent and delivers nothing",
        ));
    }
    checks.extend(webhook_keys_check());
    checks.extend(api_token_check());

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

/// What one Redis node says in `INFO server`.
struct NodeInfo {
    version: (u32, u32, u32),
    version_text: String,
    mode: String,
}

fn parse_info(text: &str) -> Option<NodeInfo> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let version_text = field("redis_version")?;
    let mut parts = version_text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    Some(NodeInfo {
        version,
        version_text,
        mode: field("redis_mode").unwrap_or_else(|| "standalone".into()),
    })
}

/// Every INFO text in a reply: one for a single node, one per primary (a map) for a cluster.
fn info_texts(v: &redis::Value, out: &mut Vec<String>) {
    match v {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => out.push(s.clone()),
        redis::Value::VerbatimString { text, .. } => out.push(text.clone()),
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, v)| info_texts(v, out)),
        redis::Value::Array(items) => items.iter().for_each(|v| info_texts(v, out)),
        _ => {}
    }
}

async fn redis_checks(url: &str, t: Duration) -> (Vec<Check>, Option<RedisHandle>) {
    let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let cluster = nodes.len() > 1;
    let at = nodes.iter().map(|n| endpoint(n)).collect::<Vec<_>>().join(",");
    let handle = match tokio::time::timeout(t, RedisHandle::connect(url)).await {
        Err(_) => {
            return (
                vec![check(
                    Status::Fail,
                    "redis",
                    format!("{at}: no answer within {}", humantime::format_duration(t)),
                )],
                None,
            )
        }
        Ok(Err(e)) => return (vec![check(Status::Fail, "redis", format!("{at}: {e}"))], None),
        Ok(Ok(h)) => h,
    };
    let mut conn = handle.clone();
    let reply = tokio::time::timeout(
        t,
        redis::cmd("INFO")
            .arg("server")
            .query_async::<redis::Value>(&mut conn),
    )
    .await;
    let mut texts = Vec::new();
    match reply {
        Err(_) => {
            return (
                vec![check(
                    Status::Fail,
                    "redis",
                    format!(
                        "{at}: INFO got no answer within {}",
                        humantime::format_duration(t)
                    ),
                )],
                None,
            )
        }
        Ok(Err(e)) => {
            return (
                vec![check(Status::Fail, "redis", format!("{at}: INFO failed: {e}"))],
                None,
            )
        }
        Ok(Ok(v)) => info_texts(&v, &mut texts),
    }
    let infos: Vec<NodeInfo> = texts.iter().filter_map(|t| parse_info(t)).collect();
    let Some(oldest) = infos.iter().min_by_key(|i| i.version) else {
        return (
            vec![check(
                Status::Fail,
                "redis",
                format!("{at}: INFO has no redis_version"),
            )],
            None,
        );
    };
    let new_enough = (oldest.version.0, oldest.version.1) >= REDIS_MIN;
    let need = format!(
        "{}.{} or later needed: ZMSCORE in unique_users.lua",
        REDIS_MIN.0, REDIS_MIN.1
    );
    let mut out = vec![check(
        if new_enough { Status::Ok } else { Status::Fail },
        "redis",
        format!(
            "{at}: Redis {}{}, {} ({need})",
            oldest.version_text,
            if infos.len() > 1 { " (oldest node)" } else { "" },
            oldest.mode
        ),
    )];
    let in_cluster_mode = infos.iter().any(|i| i.mode == "cluster");
    if cluster {
        out.push(check(
            Status::Ok,
            "redis cluster",
            format!(
                "cluster mode detected ({} seed nodes given, {} primaries answered)",
                nodes.len(),
                infos.len()
            ),
        ));
    } else if in_cluster_mode || handle.is_cluster() {
        out.push(check(
            Status::Fail,
            "redis cluster",
            "this node runs in cluster mode but one URL was given: list the cluster's nodes, comma-separated",
        ));
        return (out, None);
    }
    out.push(eviction_check(&handle, &at, t).await);
    (out, Some(handle))
}

/// `maxmemory-policy` on the server or on every cluster primary (see [`klaxon_counter::eviction_policies`]).
async fn eviction_check(handle: &RedisHandle, at: &str, t: Duration) -> Check {
    const NAME: &str = "redis eviction";
    let policies = match tokio::time::timeout(t, klaxon_counter::eviction_policies(handle)).await {
        Err(_) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "{at}: maxmemory-policy not checked: no answer within {}; it must be noeviction",
                    humantime::format_duration(t)
                ),
            )
        }
        Ok(Err(e)) => {
            return check(
                Status::Warn,
                NAME,
                format!("{at}: maxmemory-policy could not be checked ({e}); it must be noeviction"),
            )
        }
        Ok(Ok(p)) => p,
    };
    let via = match policies.source {
        PolicySource::Config => "",
        PolicySource::Info => " (read from INFO memory: CONFIG is not allowed here)",
    };
    let evicting = policies.evicting();
    let name_of = |node: &Option<String>| node.clone().unwrap_or_else(|| at.to_owned());
    if evicting.is_empty() {
        let whom = if policies.nodes.len() > 1 {
            format!(
                "{at}: maxmemory-policy noeviction on all {} primaries",
                policies.nodes.len()
            )
        } else {
            format!(
                "{}: maxmemory-policy noeviction",
                policies
                    .nodes
                    .first()
                    .map_or_else(|| at.to_owned(), |n| name_of(&n.node))
            )
        };
        return check(Status::Ok, NAME, format!("{whom}{via}"));
    }
    let nodes = evicting
        .iter()
        .map(|n| format!("{}: maxmemory-policy {}", name_of(&n.node), n.policy))
        .collect::<Vec<_>>()
        .join(", ");
    let of = if policies.nodes.len() > 1 {
        format!(" ({} of {} primaries)", evicting.len(), policies.nodes.len())
    } else {
        String::new()
    };
    check(
        Status::Warn,
        NAME,
        format!(
            "{nodes}{of}{via}: Redis may evict Klaxon's keys under memory pressure: {}",
            super::notices::EVICTION_LOSES
        ),
    )
}

async fn rabbit_checks(
    global: &GlobalOpts,
    notify_output: Output,
    t: Duration,
) -> (Vec<Check>, Option<QueueDepth>) {
    let at = global
        .amqp_url
        .split(',')
        .map(endpoint)
        .collect::<Vec<_>>()
        .join(",");
    let broker = match Broker::connect_as(&global.amqp_url, t, "doctor").await {
        Ok(b) => b,
        Err(e) => return (vec![check(Status::Fail, "rabbitmq", format!("{at}: {e}"))], None),
    };
    let mut out = vec![check(Status::Ok, "rabbitmq", format!("{at}: connected"))];
    // The queue type only matters for declaring, which a passive declare does not do.
    let topology = Topology::new(&global.namespace, &global.events_queue(), QueueType::Classic);
    let (events_check, events) = queue_check(&broker, &topology, topology.events_queue(), t).await;
    out.push(events_check);
    let mut queues: Vec<String> = ChannelKind::ALL
        .iter()
        .map(|k| topology.notify_queue(*k))
        .collect();
    queues.push(topology.dead_queue());
    queues.push(topology.invalid_queue());
    for q in queues {
        out.push(queue_check(&broker, &topology, &q, t).await.0);
    }
    if notify_output == Output::Hawk {
        for kind in ChannelKind::ALL {
            out.push(hawk_queue_check(&broker, kind, t).await);
        }
    }
    broker.close().await;
    (out, events)
}

/// A queue's depth by passive declare, or the check that says why there is none.
async fn depth(broker: &Broker, name: &str, queue: &str, t: Duration) -> Result<Option<QueueDepth>, Check> {
    match tokio::time::timeout(t, broker.queue_depth(queue)).await {
        Err(_) => Err(check(Status::Fail, name, "no answer in time")),
        Ok(Ok(q)) => Ok(q),
        // The declare's own error, as the check has always shown it.
        Ok(Err(BrokerError::Amqp {
            op: QUEUE_DECLARE_PASSIVE,
            source,
        })) => Err(check(Status::Fail, name, source.to_string())),
        Ok(Err(e)) => Err(check(Status::Fail, name, e.to_string())),
    }
}

async fn queue_check(
    broker: &Broker,
    topology: &Topology,
    queue: &str,
    t: Duration,
) -> (Check, Option<QueueDepth>) {
    let name = format!("queue {queue}");
    let q = match depth(broker, &name, queue, t).await {
        Err(c) => return (c, None),
        Ok(None) => {
            return (
                check(
                    Status::Warn,
                    name,
                    "not declared yet (a klaxon process declares it when it starts)",
                ),
                None,
            )
        }
        Ok(Some(q)) => q,
    };
    let (messages, consumers) = (q.messages, q.consumers);
    let detail = format!("{messages} messages, {consumers} consumers");
    let c = if messages > 0 && queue == topology.dead_queue() {
        check(
            Status::Warn,
            name,
            format!("{detail}: dead-lettered, see `klaxon dead list`"),
        )
    } else if messages > 0 && queue == topology.invalid_queue() {
        check(
            Status::Warn,
            name,
            format!("{detail}: invalid events set aside (reason in header x-klaxon-error)"),
        )
    } else {
        check(Status::Ok, name, detail)
    };
    (c, Some(q))
}

/// With `--output hawk`, what happens to the messages of an alert's life: tracked, not sent.
fn alert_messages_check(notify_output: Output) -> Option<Check> {
    (notify_output == Output::Hawk).then(|| {
        check(
            Status::Ok,
            "alert messages",
            "--output hawk: alerts are tracked (API, CLI, console) but only firings are published; resolves, \
             acknowledgements, reminders and escalations are not sent (Hawk's senders know no such task), only \
             counted in klaxon_alert_messages_not_sent_total{reason=\"hawk_output\"}; --output klaxon sends them",
        )
    })
}

/// With `--output hawk`: Hawk's `sender/<channel>` queue has a consumer (Hawk's sender worker of that channel).
async fn hawk_queue_check(broker: &Broker, kind: ChannelKind, t: Duration) -> Check {
    let queue = hawk_queue(kind);
    let name = format!("queue {queue}");
    match depth(broker, &name, &queue, t).await {
        Err(c) => c,
        Ok(None) => check(
            Status::Warn,
            name,
            format!(
                "not declared: Hawk's {kind} sender has not run here (a klaxon worker with --output hawk declares \
                 it; its tasks then wait for that sender)"
            ),
        ),
        Ok(Some(q)) if q.consumers == 0 => check(
            Status::Warn,
            name,
            format!(
                "{} messages, 0 consumers: Hawk's {kind} sender is not running, --output hawk's tasks pile up \
                 undelivered",
                q.messages
            ),
        ),
        Ok(Some(q)) => check(
            Status::Ok,
            name,
            format!("{} messages, {} consumers", q.messages, q.consumers),
        ),
    }
}

/// How many registered labels the consumers check reads (and at most names).
const MAX_LABELS: usize = 20;
/// How many of them it prints.
const SHOWN_LABELS: usize = 3;

/// The events queue's consumers against the Klaxon workers registered in Redis.
fn consumers_check(
    global: &GlobalOpts,
    events: QueueDepth,
    registered: Option<&Result<Registered, String>>,
) -> Check {
    const NAME: &str = "consumers";
    let queue = global.events_queue();
    let n = events.consumers;
    if n == 0 {
        return if events.messages > 0 {
            check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {} messages wait and nothing consumes them: start `klaxon run` or `klaxon worker`",
                    events.messages
                ),
            )
        } else {
            check(
                Status::Ok,
                NAME,
                format!("queue {queue}: no consumers (no klaxon worker is running)"),
            )
        };
    }
    let r = match registered {
        None => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {n} consumer(s); Redis could not be used (see the redis checks), so Klaxon's \
                     cannot be told from others"
                ),
            )
        }
        Some(Err(e)) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "queue {queue}: {n} consumer(s); the worker registry in Redis could not be read ({e}), so \
                     Klaxon's cannot be told from others"
                ),
            )
        }
        Some(Ok(r)) => r,
    };
    let mut names = r
        .labels
        .iter()
        .take(SHOWN_LABELS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if r.live as usize > SHOWN_LABELS {
        names.push_str(&format!(" and {} more", r.live as usize - SHOWN_LABELS));
    }
    let foreign = u64::from(n).saturating_sub(r.live);
    if foreign == 0 {
        return check(
            Status::Ok,
            NAME,
            format!("queue {queue}: {n} consumer(s), all registered Klaxon workers ({names})"),
        );
    }
    let workers = if r.live == 0 {
        "no registered Klaxon worker".to_owned()
    } else {
        format!("{} registered Klaxon worker(s) ({names})", r.live)
    };
    check(
        Status::Warn,
        NAME,
        format!(
            "queue {queue}: {n} consumer(s), {workers}: {foreign} consumer(s) are not Klaxon processes of namespace \
             `{}` (Hawk's notifier still running?). Each consumer gets part of the stream, so thresholds are \
             under-counted: stop the other consumer(s) (`rabbitmqctl list_consumers` shows their tags; Klaxon's \
             connections are named `klaxon <role> <host> <pid>`)",
            global.namespace
        ),
    )
}

/// Whether the events queue has traffic, as far as can be seen without RabbitMQ's management plugin.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    /// Messages ready on the queue.
    ready: u32,
    /// Consumers on it.
    consumers: u32,
    /// How long ago a registered Klaxon worker reported taking events (within 10 minutes).
    taken_ago: Option<Duration>,
}

impl Traffic {
    fn of(events: Option<QueueDepth>, registered: Option<&Registered>) -> Option<Traffic> {
        let q = events?;
        Some(Traffic {
            ready: q.messages,
            consumers: q.consumers,
            taken_ago: registered.and_then(|r| r.events_ago),
        })
    }

    /// The evidence of events, in words; `None` when there is none.
    fn evidence(&self) -> Option<String> {
        let mut said = Vec::new();
        if self.ready > 0 {
            said.push(format!("{} messages ready", self.ready));
        }
        if let Some(ago) = self.taken_ago {
            said.push(format!(
                "a Klaxon worker took events {} ago",
                humantime::format_duration(Duration::from_secs(ago.as_secs()))
            ));
        }
        (!said.is_empty()).then(|| said.join(", "))
    }
}

/// The rules as read from MongoDB, or why they were not.
enum RulesRead {
    Read(super::rules::Survey),
    Failed(String),
    Slow,
}

/// The rules line: their problems, and a database without rules while events flow (see the module docs).
fn rules_check(global: &GlobalOpts, read: RulesRead, traffic: Option<Traffic>, t: Duration) -> Check {
    let db = global.mongo_db();
    let queue = global.events_queue();
    let collection = klaxon_store::store::PROJECTS;
    let s = match read {
        // MongoDB answered; a slow read of many rules is not a failure
        RulesRead::Slow => {
            return check(
                Status::Warn,
                "rules",
                format!(
                    "not checked: reading the rules took longer than {}",
                    humantime::format_duration(t)
                ),
            )
        }
        RulesRead::Failed(e) => return check(Status::Fail, "rules", format!("cannot read the rules: {e}")),
        RulesRead::Read(s) => s,
    };
    if s.rules == 0 {
        let empty = format!(
            "database `{db}` (collection `{collection}`) holds no project with rules ({} project document(s))",
            s.projects
        );
        let fix = "point --mongo-db/KLAXON_MONGO_DB (and --mongo-url) at the database that holds the rules (Hawk: its \
                   accounts database), or store rules with `klaxon rules import`";
        return match traffic {
            Some(tr) if tr.evidence().is_some() => check(
                Status::Fail,
                "rules",
                format!(
                    "{empty}, but queue {queue} has traffic ({}): every event is dropped unevaluated; {fix}",
                    tr.evidence().unwrap_or_default()
                ),
            ),
            Some(tr) if tr.consumers > 0 => check(
                Status::Warn,
                "rules",
                format!(
                    "{empty}, and queue {queue} has {} consumer(s): no event can fire; {fix}",
                    tr.consumers
                ),
            ),
            _ => check(
                Status::Ok,
                "rules",
                format!("{empty} yet; no traffic on queue {queue}"),
            ),
        };
    }
    if s.found.is_empty() {
        return check(
            Status::Ok,
            "rules",
            format!(
                "{} rule(s) in {} project(s) in database `{db}`, no problems",
                s.rules, s.projects
            ),
        );
    }
    let skipped = s.found.iter().filter(|(_, p)| p.fatal).count();
    check(
        Status::Warn,
        "rules",
        format!(
            "{} problem(s) in {} rule(s) of {} project(s) in database `{db}`, {skipped} rule(s) skipped by the engine: see `klaxon rules check`",
            s.found.len(),
            s.rules,
            s.projects
        ),
    )
}

async fn mongo_checks(
    global: &GlobalOpts,
    t: Duration,
    limits: &klaxon_core::Limits,
) -> (Vec<Check>, Option<RulesRead>) {
    let at = endpoint(&global.mongo_url);
    let db = global.mongo_db();
    let store = match tokio::time::timeout(t, RuleStore::connect(&global.mongo_url, &db)).await {
        Err(_) => Err(format!(
            "{at}: no answer within {}",
            humantime::format_duration(t)
        )),
        Ok(Err(e)) => Err(format!("{at}: {e}")),
        Ok(Ok(s)) => Ok(s),
    };
    let store = match store {
        Ok(s) => s,
        Err(detail) => {
            return (
                vec![
                    check(Status::Fail, "mongodb", detail),
                    check(Status::Warn, "rules", "not checked: MongoDB is unreachable"),
                ],
                None,
            )
        }
    };
    let capabilities = if store.has_rule_index() {
        "createIndexes supported: rule-id index ready, delivery trail expires by TTL index"
    } else {
        "no createIndexes (e.g. PoloDB): rule-id lookups scan projects, the delivery trail keeps old records"
    };
    let out = vec![check(
        Status::Ok,
        "mongodb",
        format!(
            "{at}, database `{db}`, collection `{}`: {capabilities}",
            klaxon_store::store::PROJECTS
        ),
    )];
    // One retry of a failed read: a MongoDB-wire server under load may drop a cursor ("cursor not found").
    let survey = async {
        match super::rules::survey(&store, None, limits).await {
            Err(_) => super::rules::survey(&store, None, limits).await,
            ok => ok,
        }
    };
    let read = match tokio::time::timeout(t, survey).await {
        Err(_) => RulesRead::Slow,
        Ok(Err(e)) => RulesRead::Failed(format!("{e:#}")),
        Ok(Ok(s)) => RulesRead::Read(s),
    };
    store.close().await;
    (out, Some(read))
}

/// Host and port of an SMTP URL (`smtp://` defaults to 25, `smtps://` to 465), and whether TLS starts at once.
fn smtp_target(url: &str) -> Option<(String, u16, bool)> {
    let (scheme, _) = url.split_once("://")?;
    let implicit_tls = scheme.eq_ignore_ascii_case("smtps");
    let at = endpoint(url);
    let (host, port) = match at.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h.to_owned(), p.parse().ok()?),
        _ => (at.clone(), if implicit_tls { 465 } else { 25 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    (!host.is_empty()).then_some((host, port, implicit_tls))
}

async fn smtp_check(url: &str, t: Duration) -> Check {
    let Some((host, port, implicit_tls)) = smtp_target(url) else {
        return check(
            Status::Fail,
            "smtp",
            "--smtp-url is not smtp://host:port or smtps://host:port",
        );
    };
    let at = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let greeting = tokio::time::timeout(t, async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        if implicit_tls {
            return Ok::<_, std::io::Error>(None);
        }
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        // One greeting line (bounded: the server's first line, at most 512 bytes kept).
        reader.read_line(&mut line).await?;
        line.truncate(512);
        let _ = reader.get_mut().write_all(b"QUIT\r\n").await;
        Ok(Some(line.trim_end().to_owned()))
    })
    .await;
    match greeting {
        Err(_) => check(
            Status::Fail,
            "smtp",
            format!("{at}: no answer within {}", humantime::format_duration(t)),
        ),
        Ok(Err(e)) => check(Status::Fail, "smtp", format!("{at}: {e}")),
        Ok(Ok(None)) => check(
            Status::Ok,
            "smtp",
            format!("{at}: TCP connect ok (smtps: the greeting comes after TLS, not read)"),
        ),
        Ok(Ok(Some(line))) if line.starts_with("220") => check(Status::Ok, "smtp", format!("{at}: {line}")),
        Ok(Ok(Some(line))) => check(
            Status::Fail,
            "smtp",
            format!("{at}: greeted with `{line}` instead of 220"),
        ),
    }
}

/// Action links need `--public-url` and `KLAXON_ACTION_KEY` together (README, "Action links"): one without the
/// other is a warning (no links are rendered), a bad URL or a short key a failure (the processes refuse to
/// start). Nothing is said when neither is set.
fn action_links_check(public_url: Option<&str>) -> Option<Check> {
    let url = match public_url.map(str::trim).filter(|u| !u.is_empty()) {
        None => None,
        Some(u) => match crate::cli::public_url(u) {
            Ok(url) => Some(url),
            Err(e) => return Some(check(Status::Fail, "action links", format!("--public-url: {e}"))),
        },
    };
    match crate::cli::action_setup(url.as_ref()) {
        Err(e) => Some(check(Status::Fail, "action links", e.to_string())),
        Ok(crate::cli::ActionSetup::Off) => None,
        Ok(crate::cli::ActionSetup::Half(why)) => Some(check(Status::Warn, "action links", why)),
        Ok(crate::cli::ActionSetup::On(_, url)) => Some(check(
            Status::Ok,
            "action links",
            format!("messages carry signed links to {}/a/…", url.as_str()),
        )),
    }
}

/// The webhook keys (`KLAXON_WEBHOOK_SECRET`, `…_PREVIOUS`, `KLAXON_WEBHOOK_LEGACY_SECRET`), never shown: a
/// short master key (or another setting the processes refuse) FAILs, a short previous key during a rotation and
/// the deprecated `X-Klaxon-Signature` are warnings. Nothing is said when no key is set (webhooks are unsigned).
fn webhook_keys_check() -> Option<Check> {
    const NAME: &str = "webhook signing";
    let keys = match crate::cli::webhook_keys() {
        Err(e) => return Some(check(Status::Fail, NAME, e.to_string())),
        Ok(None) => return None,
        Ok(Some(keys)) => keys,
    };
    let min = klaxon_channels::webhook::MIN_MASTER_KEY_LEN;
    let mut warnings = Vec::new();
    if keys.previous_len().is_some_and(|len| len < min) {
        warnings.push(format!(
            "KLAXON_WEBHOOK_SECRET_PREVIOUS is shorter than {min} bytes: finish the rotation (unset it) soon, \
             tenants' secrets derived from it can be attacked offline"
        ));
    }
    if keys.legacy() {
        warnings.push(
            "KLAXON_WEBHOOK_LEGACY_SECRET is set: deliveries carry the deprecated X-Klaxon-Signature; unset it once \
             receivers verify webhook-signature"
                .to_owned(),
        );
    }
    Some(if warnings.is_empty() {
        check(
            Status::Ok,
            NAME,
            format!(
                "master key set (not shown, at least {min} bytes){}",
                if keys.rotating() {
                    ", rotating from a previous key"
                } else {
                    ""
                }
            ),
        )
    } else {
        check(Status::Warn, NAME, warnings.join("; "))
    })
}

/// `KLAXON_API_TOKEN`, never shown: shorter than 32 bytes is a warning (the wrong-token throttle slows guessing
/// per address; only the token's length makes it hopeless from many). Nothing is said when it is not set.
fn api_token_check() -> Option<Check> {
    let token = std::env::var("KLAXON_API_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())?;
    Some(match crate::cli::short_api_token(&token) {
        Some(problem) => check(Status::Warn, "api token", problem),
        None => check(
            Status::Ok,
            "api token",
            format!("set (not shown, at least {} bytes)", klaxon_api::MIN_TOKEN_LEN),
        ),
    })
}

fn telegram_check(api: &str) -> Check {
    let token = std::env::var("KLAXON_TELEGRAM_BOT_TOKEN").is_ok_and(|t| !t.trim().is_empty());
    let scheme = api.split_once("://").map_or("https", |(s, _)| s);
    let api = format!("{scheme}://{}", endpoint(api));
    if token {
        check(
            Status::Ok,
            "telegram",
            format!("bot token set (not shown), API {api}"),
        )
    } else {
        check(
            Status::Warn,
            "telegram",
            "KLAXON_TELEGRAM_BOT_TOKEN is not set: telegram channels cannot deliver",
        )
    }
}

/// Whether `KLAXON_SLACK_BOT_TOKEN` is set (never shown): without it, Slack channels whose endpoint is a
/// channel id cannot deliver; incoming-webhook URLs need no token, so its absence is no warning.
fn slack_check() -> Check {
    let token = std::env::var("KLAXON_SLACK_BOT_TOKEN").is_ok_and(|t| !t.trim().is_empty());
    let said = if token {
        "bot token set (not shown): channel ids (C…) go through the Web API"
    } else {
        "no KLAXON_SLACK_BOT_TOKEN: incoming-webhook URLs only (a channel-id endpoint cannot deliver)"
    };
    check(Status::Ok, "slack", said)
}

/// `--pagerduty-api` must be an http(s) URL with a host (the senders refuse to start otherwise); shown as the
/// senders post to it (its path kept: `<api>/v2/enqueue`), without credentials or query. Routing keys are per
/// rule: `klaxon rules check` judges them.
fn pagerduty_check(api: &str) -> Check {
    match url::Url::parse(api.trim()) {
        Ok(mut u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            check(
                Status::Ok,
                "pagerduty",
                format!("Events API {}/v2/enqueue", u.as_str().trim_end_matches('/')),
            )
        }
        _ => check(
            Status::Fail,
            "pagerduty",
            "--pagerduty-api (KLAXON_PAGERDUTY_API) is not an http(s) URL with a host: the senders refuse to start",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hawk_output_says_alert_messages_are_not_sent() {
        let c = alert_messages_check(Output::Hawk).expect("a line with --output hawk");
        assert_eq!((c.status, c.name.as_str()), (Status::Ok, "alert messages"));
        assert!(
            c.detail.contains("resolves") && c.detail.contains("not sent"),
            "{}",
            c.detail
        );
        assert!(alert_messages_check(Output::Klaxon).is_none());
        assert!(alert_messages_check(Output::Shadow).is_none());
    }

    #[test]
    fn pagerduty_api_is_checked() {
        let ok = pagerduty_check("https://user:pw@events.pagerduty.com");
        assert!(
            ok.status == Status::Ok && !ok.detail.contains("pw"),
            "{}",
            ok.detail
        );
        assert_eq!(ok.detail, "Events API https://events.pagerduty.com/v2/enqueue");
        // a base with a path (a relay, a test stub) keeps it, as the senders post to it
        let relay = pagerduty_check("http://u:pw@127.0.0.1:8080/pd/?token=x");
        assert_eq!(relay.detail, "Events API http://127.0.0.1:8080/pd/v2/enqueue");
        for bad in ["events.pagerduty.com", "ftp://x", ""] {
            assert!(pagerduty_check(bad).status == Status::Fail, "{bad}");
        }
    }

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
        assert_eq!(
            smtp_target("smtp://127.0.0.1:2525"),
            Some(("127.0.0.1".into(), 2525, false))
        );
        assert_eq!(
            smtp_target("smtp://mail?tls=starttls"),
            Some(("mail".into(), 25, false))
        );
        assert_eq!(smtp_target("smtps://u:p@mail"), Some(("mail".into(), 465, true)));
        assert_eq!(
            smtp_target("smtp://[::1]:2525"),
            Some(("::1".into(), 2525, false))
        );
        assert_eq!(smtp_target("nonsense"), None);
    }

    fn global() -> GlobalOpts {
        GlobalOpts {
            namespace: "ns".into(),
            amqp_url: String::new(),
            redis_url: String::new(),
            mongo_url: String::new(),
            mongo_db: Some("hawk".into()),
            events_queue: Some("notifier".into()),
            log_format: "text".into(),
            namespace_given: true,
            command: "doctor".into(),
        }
    }

    fn registered(live: u64, events_ago_s: Option<u64>) -> Registered {
        Registered {
            live,
            events_ago: events_ago_s.map(Duration::from_secs),
            labels: (0..live).map(|i| format!("klaxon worker h {i}")).collect(),
        }
    }

    #[test]
    fn consumers_beyond_the_registered_workers_are_warned_with_their_count() {
        let q = |messages, consumers| QueueDepth { messages, consumers };
        type Read = Option<Result<Registered, String>>;
        let cases: Vec<(QueueDepth, Read, Status, &str)> = vec![
            (q(0, 0), None, Status::Ok, "no consumers"),
            (
                q(5, 0),
                None,
                Status::Warn,
                "5 messages wait and nothing consumes them",
            ),
            (
                q(0, 1),
                Some(Ok(registered(1, None))),
                Status::Ok,
                "all registered Klaxon workers (klaxon worker h 0)",
            ),
            // a crashed worker still registered: never blamed on anyone
            (
                q(0, 1),
                Some(Ok(registered(2, None))),
                Status::Ok,
                "all registered",
            ),
            (
                q(0, 1),
                Some(Ok(registered(0, None))),
                Status::Warn,
                "no registered Klaxon worker: 1 consumer(s) are not",
            ),
            (
                q(0, 3),
                Some(Ok(registered(1, None))),
                Status::Warn,
                "1 registered Klaxon worker(s) (klaxon worker h 0): 2 consumer(s) are not",
            ),
            (
                q(0, 5),
                Some(Ok(registered(5, None))),
                Status::Ok,
                "h 2 and 2 more",
            ),
            (
                q(0, 2),
                Some(Err("boom".into())),
                Status::Warn,
                "could not be read (boom)",
            ),
            (q(0, 2), None, Status::Warn, "Redis could not be used"),
        ];
        for (depth, reg, want, said) in cases {
            let c = consumers_check(&global(), depth, reg.as_ref());
            assert_eq!(c.status, want, "{depth:?} {reg:?}: {}", c.detail);
            assert!(c.detail.contains(said), "`{said}` in {}", c.detail);
            assert!(c.detail.starts_with("queue notifier:"), "{}", c.detail);
        }
    }

    #[test]
    fn an_empty_rule_database_fails_only_with_traffic_and_names_the_database() {
        let t = Duration::from_secs(3);
        let survey = |rules| super::super::rules::Survey {
            projects: 2,
            rules,
            found: Vec::new(),
            ignored: Vec::new(),
        };
        let traffic = |ready, consumers, ago: Option<u64>| Traffic {
            ready,
            consumers,
            taken_ago: ago.map(Duration::from_secs),
        };
        let cases = [
            (
                0,
                Some(traffic(7, 0, None)),
                Status::Fail,
                "has traffic (7 messages ready)",
            ),
            (
                0,
                Some(traffic(0, 1, Some(65))),
                Status::Fail,
                "(a Klaxon worker took events 1m 5s ago)",
            ),
            (
                0,
                Some(traffic(0, 2, None)),
                Status::Warn,
                "has 2 consumer(s): no event can fire",
            ),
            (0, Some(traffic(0, 0, None)), Status::Ok, "yet; no traffic"),
            (0, None, Status::Ok, "yet; no traffic"),
            (
                3,
                Some(traffic(7, 1, Some(1))),
                Status::Ok,
                "3 rule(s) in 2 project(s) in database `hawk`",
            ),
        ];
        for (rules, tr, want, said) in cases {
            let c = rules_check(&global(), RulesRead::Read(survey(rules)), tr, t);
            assert_eq!(c.status, want, "{rules} {tr:?}: {}", c.detail);
            assert!(c.detail.contains(said), "`{said}` in {}", c.detail);
            if rules == 0 {
                assert!(c
                    .detail
                    .contains("database `hawk` (collection `projects`) holds no project with rules"));
            }
            if want == Status::Fail {
                assert!(
                    c.detail.contains("--mongo-db") && c.detail.contains("queue notifier"),
                    "{}",
                    c.detail
                );
            }
        }
        let c = rules_check(&global(), RulesRead::Slow, Some(traffic(7, 0, None)), t);
        assert_eq!(
            c.status,
            Status::Warn,
            "unknown rules are not a failure: {}",
            c.detail
        );
    }

    #[test]
    fn info_gives_version_and_mode() {
        let info = parse_info("# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n").expect("info");
        assert_eq!(info.version, (7, 0, 15));
        assert_eq!(info.mode, "cluster");
        assert!((info.version.0, info.version.1) >= REDIS_MIN);
        let old = parse_info("redis_version:6.0.9\n").expect("info");
        assert!((old.version.0, old.version.1) < REDIS_MIN);
        assert_eq!(old.mode, "standalone");
        assert!(parse_info("nothing").is_none());
    }
}
