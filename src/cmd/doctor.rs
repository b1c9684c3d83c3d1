//! `klaxon doctor`: checks, with a short timeout each, everything a Klaxon process needs, and prints one line
//! per check — `ok|warn|FAIL  <check>  <detail>`. Exit 1 when a check FAILs, 0 otherwise (warnings included).
//!
//! What it checks, and why:
//! - **redis**: reachable, and version ≥ 6.2 — `lua/unique_users.lua` calls `ZMSCORE` (Redis 6.2); the other
//!   scripts need less. A comma-separated `--redis-url` must reach a Redis Cluster (every primary is asked);
//!   one URL pointing at a cluster node fails (keys of other slots would answer MOVED).
//! - **rabbitmq** and **queue <name>**: reachable; depth and consumers of the namespace's queues by passive
//!   declare (a missing queue is a warning: a Klaxon process declares it when it starts).
//! - **mongodb**: reachable, and what the server supports (`createIndexes`: PoloDB does not, so rule-id
//!   lookups scan projects and the delivery trail keeps old records).
//! - **rules**: the problems `klaxon rules check` would report, counted (a warning: the other rules work).
//! - **smtp**: a TCP connect to the `--smtp-url` host and its `220` greeting (credentials are never printed).
//! - **telegram**: whether a bot token is set (it is never printed).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use klaxon_broker::{Broker, BrokerError, QueueType, Topology, QUEUE_DECLARE_PASSIVE};
use klaxon_core::ChannelKind;
use klaxon_counter::RedisHandle;
use klaxon_rules::RuleStore;
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

Sample output:
  ok    redis              127.0.0.1:6379: Redis 7.0.15, standalone (6.2 or later needed: ZMSCORE)
  ok    rabbitmq           127.0.0.1:5672: connected
  ok    queue klaxon.dead  0 messages, 0 consumers
  warn  rules              1 problem(s) in 12 rule(s) of 3 project(s): see `klaxon rules check`
  ok    smtp               127.0.0.1:25: 220 mail.example.com ESMTP
  warn  telegram           KLAXON_TELEGRAM_BOT_TOKEN is not set: telegram channels cannot deliver")]
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
fn endpoint(url: &str) -> String {
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
    let (redis, rabbit, mongo, smtp) = tokio::join!(
        redis_checks(&global.redis_url, t),
        rabbit_checks(global, t),
        mongo_checks(global, t, &limits),
        smtp_check(&args.smtp_url, t),
    );
    let mut checks = Vec::new();
    checks.extend(redis);
    checks.extend(rabbit);
    checks.extend(mongo);
    checks.push(smtp);
    checks.push(telegram_check(&args.telegram_api));

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

async fn redis_checks(url: &str, t: Duration) -> Vec<Check> {
    let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let cluster = nodes.len() > 1;
    let at = nodes.iter().map(|n| endpoint(n)).collect::<Vec<_>>().join(",");
    let handle = match tokio::time::timeout(t, RedisHandle::connect(url)).await {
        Err(_) => {
            return vec![check(
                Status::Fail,
                "redis",
                format!("{at}: no answer within {}", humantime::format_duration(t)),
            )]
        }
        Ok(Err(e)) => return vec![check(Status::Fail, "redis", format!("{at}: {e}"))],
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
            return vec![check(
                Status::Fail,
                "redis",
                format!(
                    "{at}: INFO got no answer within {}",
                    humantime::format_duration(t)
                ),
            )]
        }
        Ok(Err(e)) => return vec![check(Status::Fail, "redis", format!("{at}: INFO failed: {e}"))],
        Ok(Ok(v)) => info_texts(&v, &mut texts),
    }
    let infos: Vec<NodeInfo> = texts.iter().filter_map(|t| parse_info(t)).collect();
    let Some(oldest) = infos.iter().min_by_key(|i| i.version) else {
        return vec![check(
            Status::Fail,
            "redis",
            format!("{at}: INFO has no redis_version"),
        )];
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
    }
    out
}

async fn rabbit_checks(global: &GlobalOpts, t: Duration) -> Vec<Check> {
    let at = global
        .amqp_url
        .split(',')
        .map(endpoint)
        .collect::<Vec<_>>()
        .join(",");
    let broker = match Broker::connect(&global.amqp_url, t).await {
        Ok(b) => b,
        Err(e) => return vec![check(Status::Fail, "rabbitmq", format!("{at}: {e}"))],
    };
    let mut out = vec![check(Status::Ok, "rabbitmq", format!("{at}: connected"))];
    // The queue type only matters for declaring, which a passive declare does not do.
    let topology = Topology::new(&global.namespace, &global.events_queue(), QueueType::Classic);
    let mut queues = vec![topology.events_queue().to_owned()];
    queues.extend(ChannelKind::ALL.iter().map(|k| topology.notify_queue(*k)));
    queues.push(topology.dead_queue());
    queues.push(topology.invalid_queue());
    for q in queues {
        out.push(queue_check(&broker, &topology, &q, t).await);
    }
    broker.close().await;
    out
}

async fn queue_check(broker: &Broker, topology: &Topology, queue: &str, t: Duration) -> Check {
    let name = format!("queue {queue}");
    let declared = tokio::time::timeout(t, broker.queue_depth(queue)).await;
    let q = match declared {
        Err(_) => return check(Status::Fail, name, "no answer in time"),
        Ok(Ok(None)) => {
            return check(
                Status::Warn,
                name,
                "not declared yet (a klaxon process declares it when it starts)",
            )
        }
        // The declare's own error, as the check has always shown it.
        Ok(Err(BrokerError::Amqp {
            op: QUEUE_DECLARE_PASSIVE,
            source,
        })) => return check(Status::Fail, name, source.to_string()),
        Ok(Err(e)) => return check(Status::Fail, name, e.to_string()),
        Ok(Ok(Some(q))) => q,
    };
    let (messages, consumers) = (q.messages, q.consumers);
    let detail = format!("{messages} messages, {consumers} consumers");
    if messages > 0 && queue == topology.dead_queue() {
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
    }
}

async fn mongo_checks(global: &GlobalOpts, t: Duration, limits: &klaxon_core::Limits) -> Vec<Check> {
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
            return vec![
                check(Status::Fail, "mongodb", detail),
                check(Status::Warn, "rules", "not checked: MongoDB is unreachable"),
            ]
        }
    };
    let capabilities = if store.has_rule_index() {
        "createIndexes supported: rule-id index ready, delivery trail expires by TTL index"
    } else {
        "no createIndexes (e.g. PoloDB): rule-id lookups scan projects, the delivery trail keeps old records"
    };
    let mut out = vec![check(
        Status::Ok,
        "mongodb",
        format!("{at}, database `{db}`: {capabilities}"),
    )];
    // One retry of a failed read: a MongoDB-wire server under load may drop a cursor ("cursor not found").
    let survey = async {
        match super::rules::survey(&store, None, limits).await {
            Err(_) => super::rules::survey(&store, None, limits).await,
            ok => ok,
        }
    };
    out.push(
        match tokio::time::timeout(t, survey).await {
            // MongoDB answered (the check above); a slow read of many rules is not a failure
            Err(_) => check(
                Status::Warn,
                "rules",
                format!("not checked: reading the rules took longer than {}", humantime::format_duration(t)),
            ),
            Ok(Err(e)) => check(Status::Fail, "rules", format!("cannot read the rules: {e:#}")),
            Ok(Ok(s)) if s.found.is_empty() => check(
                Status::Ok,
                "rules",
                format!("{} rule(s) in {} project(s), no problems", s.rules, s.projects),
            ),
            Ok(Ok(s)) => {
                let skipped = s.found.iter().filter(|(_, p)| p.fatal).count();
                check(
                    Status::Warn,
                    "rules",
                    format!(
                        "{} problem(s) in {} rule(s) of {} project(s), {skipped} rule(s) skipped by the engine: see `klaxon rules check`",
                        s.found.len(),
                        s.rules,
                        s.projects
                    ),
                )
            }
        },
    );
    store.close().await;
    out
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
