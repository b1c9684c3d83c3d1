//! `klaxon namespace delete`: remove everything one namespace left in RabbitMQ and Redis (and, when asked, its
//! own MongoDB database), e.g. after a test, a staging run or a migration.
//!
//! What belongs to namespace `ns`:
//! - RabbitMQ: the queues and exchanges Klaxon declares for it ([`Topology::queues`], the delay engine's queues and
//!   exchanges), by exact name. `<ns>.events` is the namespace's own events queue; a queue named by
//!   `--events-queue` (Hawk's `notifier`) and `--output hawk`'s `sender/<channel>` queues belong to others and are
//!   never deleted.
//! - Redis: every key beginning with `<ns>:` (`SCAN MATCH` on every master of a cluster): `klaxon` never matches
//!   `klaxon2`'s keys, whose prefix is `klaxon2:`.
//! - MongoDB: the database named like the namespace (the default `--mongo-db`), dropped only with
//!   `--drop-database`; a database named by `--mongo-db` (Hawk's accounts database) is never dropped.
//!
//! Without `--yes` nothing is deleted: the command prints what would be, says how to confirm on stderr, and exits 2
//! (the confirmation is missing: a usage error). It never asks on stdin: scripts and CI have none. A namespace
//! still in use (a queue has consumers) is refused with exit 1.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use klaxon_broker::{Broker, QueueType, Topology};
use klaxon_counter::RedisHandle;

use crate::cli::GlobalOpts;
use crate::exit::{ensure_usage, usage};

/// `klaxon namespace`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon namespace delete --namespace staging          # what would be deleted (exit 2, nothing deleted)
  klaxon namespace delete --namespace staging --yes    # delete its queues, exchanges and Redis keys")]
pub struct NamespaceArgs {
    #[command(subcommand)]
    command: NamespaceCommand,
}

#[derive(Debug, Subcommand)]
enum NamespaceCommand {
    /// Delete a namespace's queues, exchanges and Redis keys (and with --drop-database its own MongoDB database).
    /// Without --yes, print what would be deleted and exit 2.
    #[command(after_help = "\
Examples:
  klaxon namespace delete --namespace staging
  klaxon namespace delete --namespace staging --yes
  klaxon namespace delete --namespace ci-1234 --yes --drop-database   # also drop MongoDB database `ci-1234`")]
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
struct DeleteArgs {
    /// Delete (without it: print what would be deleted, delete nothing, exit 2).
    #[arg(long)]
    yes: bool,
    /// Also drop the namespace's own MongoDB database (named like the namespace): rules and delivery trail.
    #[arg(long)]
    drop_database: bool,
}

/// Most Redis keys read per round; deleting goes round by round.
const KEYS_PER_ROUND: usize = 100_000;
/// Most rounds (bounds the command at 100 million keys).
const MAX_ROUNDS: usize = 1_000;
/// How long RabbitMQ may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the namespace holds, found before anything is deleted.
struct Found {
    /// (queue, messages, consumers) of each existing queue.
    queues: Vec<(String, u32, u32)>,
    /// Existing exchanges.
    exchanges: Vec<String>,
    /// Redis keys, counted up to [`KEYS_PER_ROUND`] (`more`: there are more).
    keys: usize,
    more_keys: bool,
    /// Nodes the keys were looked for on.
    nodes: usize,
}

impl Found {
    fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.exchanges.is_empty() && self.keys == 0
    }
}

pub async fn run(args: NamespaceArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let NamespaceCommand::Delete(args) = args.command;
    let ns = global.namespace.trim();
    ensure_usage!(
        global.namespace_given && !ns.is_empty(),
        "name the namespace to delete with --namespace NS (or KLAXON_NAMESPACE): the default is never assumed"
    );
    let db = global.mongo_db();
    ensure_usage!(
        !args.drop_database || db == ns,
        "--drop-database drops only the namespace's own database `{ns}`; --mongo-db names `{db}`, which Klaxon \
         does not own: drop it yourself if you mean to"
    );
    // with --events-shards, the namespace's shard queues and shard exchange too
    let topology =
        Topology::new(ns, &format!("{ns}.events"), QueueType::Classic).with_shards(global.events_shards);
    let delay = topology.delay();
    let mut queues = topology.queues();
    queues.extend(delay.queues());
    let mut exchanges = delay.exchanges();
    if topology.sharded() {
        exchanges.push(topology.shard_exchange());
    }

    let broker = Broker::connect(&global.amqp_url, CONNECT_TIMEOUT)
        .await
        .context("cannot connect to RabbitMQ")?;
    let redis = RedisHandle::connect(&global.redis_url)
        .await
        .context("cannot connect to Redis")?;
    let found = survey(&broker, &redis, ns, &queues, &exchanges).await;
    let found = match found {
        Ok(f) => f,
        Err(e) => {
            broker.close().await;
            return Err(e);
        }
    };

    let mut text = String::new();
    let pattern = klaxon_counter::namespace::key_pattern(ns);
    let keys_text = |n: usize, more: bool| {
        format!(
            "{n}{} Redis key(s) `{pattern}` (on {} node(s))",
            if more { "+" } else { "" },
            found.nodes
        )
    };
    let events_queue = global.events_queue();
    if events_queue != format!("{ns}.events") {
        let _ = writeln!(
            text,
            "kept queue {events_queue}: --events-queue names a queue the namespace does not own"
        );
    }
    let in_use: Vec<String> = found
        .queues
        .iter()
        .filter(|(_, _, consumers)| *consumers > 0)
        .map(|(q, _, c)| format!("{q} ({c} consumer(s))"))
        .collect();
    if !in_use.is_empty() {
        broker.close().await;
        crate::output::emit(&text)?;
        anyhow::bail!(
            "namespace {ns} is in use: {}; stop its Klaxon processes first (nothing deleted)",
            in_use.join(", ")
        );
    }
    if found.is_empty() && !args.drop_database {
        broker.close().await;
        let _ = writeln!(text, "namespace {ns}: nothing to delete");
        crate::output::emit(&text)?;
        return Ok(ExitCode::SUCCESS);
    }

    if !args.yes {
        broker.close().await;
        let _ = writeln!(text, "namespace {ns}: would delete");
        for (q, messages, _) in &found.queues {
            let _ = writeln!(text, "  queue {q} ({messages} message(s))");
        }
        for x in &found.exchanges {
            let _ = writeln!(text, "  exchange {x}");
        }
        let _ = writeln!(text, "  {}", keys_text(found.keys, found.more_keys));
        let _ = writeln!(text, "  {}", database_line(&db, args.drop_database, false));
        crate::output::emit(&text)?;
        return Err(usage(format!(
            "nothing deleted: add --yes to delete namespace {ns} as listed above"
        )));
    }

    // The database first: it is the step a server may not support (PoloDB has no dropDatabase), and failing
    // before anything else is deleted leaves the namespace whole.
    if args.drop_database {
        if let Err(e) = drop_database(&global.mongo_url, &db).await {
            broker.close().await;
            return Err(e);
        }
    }
    let result = delete(&broker, &redis, ns, &found, &mut text).await;
    broker.close().await;
    let _ = writeln!(text, "{}", database_line(&db, args.drop_database, true));
    crate::output::emit(&text)?;
    result.map(|()| ExitCode::SUCCESS)
}

async fn drop_database(mongo_url: &str, db: &str) -> anyhow::Result<()> {
    let store = klaxon_store::RuleStore::connect(mongo_url, db)
        .await
        .with_context(|| format!("cannot use MongoDB database `{db}`"))?;
    let dropped = store.drop_database().await;
    store.close().await;
    dropped.with_context(|| format!("cannot drop MongoDB database `{db}` (nothing deleted)"))
}

fn database_line(db: &str, drop: bool, done: bool) -> String {
    match (drop, done) {
        (true, true) => format!("dropped MongoDB database `{db}`"),
        (true, false) => format!("MongoDB database `{db}` (--drop-database)"),
        (false, _) => {
            format!("kept MongoDB database `{db}` (rules, delivery trail): --drop-database drops it")
        }
    }
}

/// What exists, by exact name (queues and exchanges) and by prefix (Redis keys).
async fn survey(
    broker: &Broker,
    redis: &RedisHandle,
    ns: &str,
    queues: &[String],
    exchanges: &[String],
) -> anyhow::Result<Found> {
    let mut found = Found {
        queues: Vec::new(),
        exchanges: Vec::new(),
        keys: 0,
        more_keys: false,
        nodes: 0,
    };
    for q in queues {
        if let Some(depth) = broker.queue_depth(q).await? {
            found.queues.push((q.clone(), depth.messages, depth.consumers));
        }
    }
    for x in exchanges {
        if broker.exchange_exists(x).await? {
            found.exchanges.push(x.clone());
        }
    }
    let keys = klaxon_counter::namespace::keys(redis, ns, KEYS_PER_ROUND).await?;
    found.more_keys = keys.len() >= KEYS_PER_ROUND;
    found.keys = keys.len();
    found.nodes = redis.key_nodes().await?;
    Ok(found)
}

/// Deletes what [`survey`] found, saying each step in `text`.
async fn delete(
    broker: &Broker,
    redis: &RedisHandle,
    ns: &str,
    found: &Found,
    text: &mut String,
) -> anyhow::Result<()> {
    for (q, messages, _) in &found.queues {
        broker.delete_queue(q).await?;
        let _ = writeln!(text, "deleted queue {q} ({messages} message(s))");
    }
    for x in &found.exchanges {
        broker.delete_exchange(x).await?;
        let _ = writeln!(text, "deleted exchange {x}");
    }
    let mut removed = 0u64;
    for _ in 0..MAX_ROUNDS {
        let keys = klaxon_counter::namespace::keys(redis, ns, KEYS_PER_ROUND).await?;
        if keys.is_empty() {
            break;
        }
        removed += redis.unlink(&keys).await?;
    }
    let _ = writeln!(
        text,
        "deleted {removed} Redis key(s) `{}` (on {} node(s))",
        klaxon_counter::namespace::key_pattern(ns),
        found.nodes
    );
    Ok(())
}
