//! Command-line interface: every option is a flag and an environment variable (INTERFACE.md).

use clap::{Args, Parser, Subcommand};

/// Klaxon: notification threshold engine for error trackers.
#[derive(Debug, Parser)]
#[command(name = "klaxon", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

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
    /// Log format.
    #[arg(long, env = "KLAXON_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"], global = true)]
    pub log_format: String,
}

impl GlobalOpts {
    /// The MongoDB database to use.
    pub fn mongo_db(&self) -> String {
        self.mongo_db.clone().unwrap_or_else(|| self.namespace.clone())
    }

    /// The events queue to consume / publish to.
    pub fn events_queue(&self) -> String {
        self.events_queue
            .clone()
            .unwrap_or_else(|| format!("{}.events", self.namespace))
    }
}

/// Delivery settings shared by `klaxon run|sender` and `klaxon test-notify`. Secrets come from the
/// environment only: `KLAXON_TELEGRAM_BOT_TOKEN`, `KLAXON_WEBHOOK_SECRET` (and SMTP credentials inside the URL).
#[derive(Debug, Clone, Args)]
pub struct DeliveryOpts {
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
    /// Connect timeout for deliveries, in seconds.
    #[arg(long, env = "KLAXON_CONNECT_TIMEOUT", default_value_t = 5)]
    pub connect_timeout: u64,
    /// Whole-request timeout for deliveries, in seconds.
    #[arg(long, env = "KLAXON_REQUEST_TIMEOUT", default_value_t = 10)]
    pub request_timeout: u64,
    /// Link every message to the event: a URL with {projectId}, {groupHash} and {repetitionId}, e.g. Hawk's
    /// https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview [default: no link].
    #[arg(long, env = "KLAXON_EVENT_URL_TEMPLATE", value_name = "URL")]
    pub event_url_template: Option<String>,
}

fn env_secret(name: &str) -> Option<klaxon_channels::Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(klaxon_channels::Secret::new)
}

impl DeliveryOpts {
    /// The validated adapters (must be called inside the tokio runtime: the SMTP pool starts a task).
    pub fn channels(&self) -> anyhow::Result<klaxon_channels::Channels> {
        use anyhow::Context;
        klaxon_channels::Channels::new(klaxon_channels::ChannelsConfig {
            telegram_api: self.telegram_api.clone(),
            telegram_bot_token: env_secret("KLAXON_TELEGRAM_BOT_TOKEN"),
            smtp_url: klaxon_channels::Secret::new(self.smtp_url.clone()),
            smtp_from: self.smtp_from.clone(),
            webhook_secret: env_secret("KLAXON_WEBHOOK_SECRET"),
            allow_private_endpoints: self.allow_private_endpoints,
            connect_timeout: std::time::Duration::from_secs(self.connect_timeout),
            request_timeout: std::time::Duration::from_secs(self.request_timeout),
        })
        .and_then(|c| c.with_event_url_template(self.event_url_template.as_deref().unwrap_or("")))
        .context("invalid delivery settings")
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate events and deliver notifications in one process.
    Run(crate::cmd::run::RunArgs),
    /// Evaluate events only: consume events, count, publish notification tasks.
    Worker(crate::cmd::run::RunArgs),
    /// Deliver notifications only: consume notification tasks and send them.
    Sender(crate::cmd::run::RunArgs),
    /// Manage notification rules in MongoDB.
    Rules(crate::cmd::rules::RulesArgs),
    /// Publish test events to the events queue.
    Publish(crate::cmd::publish::PublishArgs),
    /// Read the delivery trail.
    Deliveries(crate::cmd::deliveries::DeliveriesArgs),
    /// Inspect and replay the dead-letter queue.
    Dead(crate::cmd::dead::DeadArgs),
    /// Say what each rule of a project would do with an event, and why (reads only).
    Explain(crate::cmd::explain::ExplainArgs),
    /// Mute a project's firings (fleet-wide, in Redis): add, list, rm.
    Mute(crate::cmd::mute::MuteArgs),
    /// Send a real test notification through one channel.
    TestNotify(crate::cmd::test_notify::TestNotifyArgs),
    /// Ask a running Klaxon's /readyz (or /healthz): a healthcheck for images without curl.
    Probe(crate::cmd::probe::ProbeArgs),
    /// Measure throughput and cost side by side on this machine.
    Bench(crate::cmd::bench::BenchArgs),
}
