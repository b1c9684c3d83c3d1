//! The options every `klaxon` subcommand shares ([`GlobalOpts`]: the namespace, the services' URLs, the log
//! format), in a file of their own so that `klaxon-bench` (`src/bin/klaxon-bench`) takes the very same flags and
//! variables: it includes this file (`#[path]`), and `klaxon bench` passes its own values on as the variables.
//! Only clap and std here; what checks the values before connecting is `cli.rs`'s (`GlobalOpts::validate`).

use clap::Args;

/// Options shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct GlobalOpts {
    /// Prefixes every queue, Redis key and the default Mongo database.
    #[arg(long, env = "KLAXON_NAMESPACE", default_value = "klaxon", global = true)]
    pub namespace: String,
    /// RabbitMQ URL; a comma-separated list of the nodes of one cluster is tried in turn on each (re)connect.
    #[arg(
        long,
        env = "KLAXON_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        global = true,
        hide_env_values = true
    )]
    pub amqp_url: String,
    /// Redis URL; a comma-separated list of redis:// node URLs means Redis Cluster.
    #[arg(
        long,
        env = "KLAXON_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true,
        hide_env_values = true
    )]
    pub redis_url: String,
    /// MongoDB URL.
    #[arg(
        long,
        env = "KLAXON_MONGO_URL",
        default_value = "mongodb://127.0.0.1:27017",
        global = true,
        hide_env_values = true
    )]
    pub mongo_url: String,
    /// MongoDB database [default: the namespace].
    #[arg(long, env = "KLAXON_MONGO_DB", global = true)]
    pub mongo_db: Option<String>,
    /// Queue the events come from [default: <namespace>.events]; `notifier` takes Hawk's grouper output.
    #[arg(long, env = "KLAXON_EVENTS_QUEUE", global = true)]
    pub events_queue: Option<String>,
    /// Spread the events over this many shard queues (`<events-queue>.shard.0` …) through the x-consistent-hash
    /// exchange `<events-queue>.shards`, keyed by project; 1 is the single events queue. Needs RabbitMQ's
    /// rabbitmq_consistent_hash_exchange plugin.
    #[arg(long, env = "KLAXON_EVENTS_SHARDS", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=256), global = true)]
    pub events_shards: u16,
    /// Log format.
    #[arg(long, env = "KLAXON_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"], global = true)]
    pub log_format: String,
    /// True when `--namespace` / `KLAXON_NAMESPACE` was given, false when it is the default (set by `cli::parse`).
    #[arg(skip)]
    pub namespace_given: bool,
    /// The subcommand (set by `cli::parse`): which of these options it reads (`cli::globals_used`).
    #[arg(skip)]
    pub command: String,
}

impl GlobalOpts {
    /// The MongoDB database to use (an empty `KLAXON_MONGO_DB=` is unset, as in a manifest that blanks it).
    pub fn mongo_db(&self) -> String {
        self.mongo_db
            .clone()
            .filter(|db| !db.trim().is_empty())
            .unwrap_or_else(|| self.namespace.clone())
    }

    /// The events queue to consume / publish to (empty = unset).
    pub fn events_queue(&self) -> String {
        self.events_queue
            .clone()
            .filter(|q| !q.trim().is_empty())
            .unwrap_or_else(|| format!("{}.events", self.namespace))
    }
}
