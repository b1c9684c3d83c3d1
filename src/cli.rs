//! Command-line interface: every option is a flag and an environment variable (README, "Command line" and
//! "Running").

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// `klaxon --help`'s epilogue: what every command shares.
const AFTER_HELP: &str = "\
Examples:
  klaxon run                                   # evaluate + deliver, against local services
  klaxon rules list -o json                    # every rule, as one JSON array
  klaxon doctor                                # is every service reachable and usable?
  klaxon completions bash > ~/.local/share/bash-completion/completions/klaxon

Durations: a humantime string (90s, 5m, 1h30m, 7d) or a plain number in the flag's old unit (seconds, unless
the flag's name says ms or days).

Output of listing commands: -o table (default) | json (one JSON document) | ndjson (one object per line).

Exit codes:
  0  ok
  1  problems found (rules check, doctor, test-notify not delivered, nothing to replay) or another error
  2  usage error (a wrong flag or argument, a URL that cannot be parsed, namespace delete without --yes)
  3  a backing service (Redis, RabbitMQ, MongoDB) is unreachable";

/// Klaxon: notification threshold engine for error trackers.
#[derive(Debug, Parser)]
#[command(name = "klaxon", version, about, propagate_version = true, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

pub use crate::global::GlobalOpts;

impl GlobalOpts {
    /// Checks the service URLs this subcommand uses before anything connects: a URL that cannot be parsed is a
    /// usage error (exit 2) naming the flag and its variable, never an "unreachable" (exit 3) later. The value
    /// itself is not quoted: it may carry a password.
    pub fn validate(&self) -> anyhow::Result<()> {
        let used = globals_used(&self.command);
        let bad = |flag: &str, var: &str, e: &dyn std::fmt::Display| {
            crate::exit::usage(format!("--{flag} (or {var}): {e}"))
        };
        if used.contains(&"amqp_url") {
            klaxon_broker::parse_urls(&self.amqp_url).map_err(|e| bad("amqp-url", "KLAXON_AMQP_URL", &e))?;
        }
        if used.contains(&"redis_url") {
            klaxon_counter::RedisHandle::check_url(&self.redis_url)
                .map_err(|e| bad("redis-url", "KLAXON_REDIS_URL", &e))?;
        }
        if used.contains(&"mongo_url") {
            klaxon_store::check_url(&self.mongo_url).map_err(|e| bad("mongo-url", "KLAXON_MONGO_URL", &e))?;
        }
        Ok(())
    }
}

/// Every global option (the ids of [`GlobalOpts`]'s fields).
const ALL_GLOBALS: &[&str] = &[
    "namespace",
    "amqp_url",
    "redis_url",
    "mongo_url",
    "mongo_db",
    "events_queue",
    "events_shards",
    "log_format",
];

/// Which global options each subcommand reads. The others are still accepted after it (scripts that pass them
/// everywhere keep working, and every variable still parses) but are hidden from its `--help` and not
/// validated: `klaxon completions --help` lists no `--amqp-url`.
const GLOBALS_USED: &[(&str, &[&str])] = &[
    ("run", ALL_GLOBALS),
    ("worker", ALL_GLOBALS),
    ("sender", ALL_GLOBALS),
    ("doctor", ALL_GLOBALS),
    ("namespace", ALL_GLOBALS),
    ("rules", &["namespace", "mongo_url", "mongo_db", "log_format"]),
    // Redis: the messages quiet hours hold
    (
        "deliveries",
        &["namespace", "redis_url", "mongo_url", "mongo_db", "log_format"],
    ),
    (
        "publish",
        &[
            "namespace",
            "amqp_url",
            "events_queue",
            "events_shards",
            "log_format",
        ],
    ),
    ("dead", &["namespace", "amqp_url", "events_queue", "log_format"]),
    (
        "invalid",
        &["namespace", "amqp_url", "events_queue", "log_format"],
    ),
    (
        "explain",
        &["namespace", "redis_url", "mongo_url", "mongo_db", "log_format"],
    ),
    ("mute", &["namespace", "redis_url", "log_format"]),
    // MongoDB: the projects' names of `alerts list`, and the trail of `--output shadow`
    (
        "alerts",
        &[
            "namespace",
            "amqp_url",
            "redis_url",
            "mongo_url",
            "mongo_db",
            "events_queue",
            "log_format",
        ],
    ),
    // MongoDB: the name; Redis: telling running processes to reload the project
    (
        "projects",
        &["namespace", "redis_url", "mongo_url", "mongo_db", "log_format"],
    ),
    ("bench", &["amqp_url", "redis_url", "mongo_url", "log_format"]),
    ("test-notify", &["log_format"]),
    ("probe", &[]),
    ("completions", &[]),
    // `klaxon webhook secret` derives its answer from KLAXON_WEBHOOK_SECRET: no service
    ("webhook", &[]),
];

/// The global options `subcommand` reads (all of them for a name not in the table).
pub fn globals_used(subcommand: &str) -> &'static [&'static str] {
    GLOBALS_USED
        .iter()
        .find(|(name, _)| *name == subcommand)
        .map_or(ALL_GLOBALS, |(_, used)| used)
}

/// The command line as clap reads it, with two changes to what `--help` shows:
/// - `[env: NAME]` without a value: clap prints `NAME=<value>`, and `NAME=` when the variable is unset, which
///   reads as "set to empty" (and would print secrets from the environment);
/// - in each subcommand's help, only the global options it reads ([`globals_used`]).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    // Global options are copied into every subcommand when the command is built; hide them there afterwards.
    cmd.build();
    edit_args(&mut cmd, &|a| a.hide_env_values(true));
    for sub in cmd.get_subcommands_mut() {
        let used = globals_used(sub.get_name());
        edit_args(sub, &|a| {
            let id = a.get_id().as_str();
            if ALL_GLOBALS.contains(&id) && !used.contains(&id) {
                a.hide(true)
            } else {
                a
            }
        });
    }
    cmd
}

/// Applies `f` to every argument of `cmd` and of its subcommands (order and lookups unchanged).
fn edit_args(cmd: &mut clap::Command, f: &dyn Fn(clap::Arg) -> clap::Arg) {
    *cmd = std::mem::take(cmd).mut_args(f);
    for sub in cmd.get_subcommands_mut() {
        edit_args(sub, f);
    }
}

/// Parses the process's arguments (exits with clap's message and code 2 on a usage error).
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let mut cmd = command();
    let matches = cmd.clone().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cmd).exit());
    cli.global.namespace_given = matches
        .value_source("namespace")
        .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue);
    cli.global.command = matches.subcommand_name().unwrap_or_default().to_owned();
    cli
}

/// `--smtp-url`'s default.
pub const DEFAULT_SMTP_URL: &str = "smtp://127.0.0.1:25";
/// `--telegram-api`'s default.
pub const DEFAULT_TELEGRAM_API: &str = "https://api.telegram.org";
/// `--slack-api`'s default.
pub const DEFAULT_SLACK_API: &str = "https://slack.com/api";
/// `--pagerduty-api`'s default.
pub const DEFAULT_PAGERDUTY_API: &str = "https://events.pagerduty.com";

/// Delivery settings shared by `klaxon run|sender` and `klaxon test-notify`. Secrets come from the
/// environment only: `KLAXON_TELEGRAM_BOT_TOKEN`, `KLAXON_SLACK_BOT_TOKEN`, `KLAXON_WEBHOOK_SECRET` and `KLAXON_WEBHOOK_SECRET_PREVIOUS`
/// (and SMTP credentials inside the URL).
#[derive(Debug, Clone, Args)]
pub struct DeliveryOpts {
    /// Telegram Bot API base URL.
    #[arg(long, env = "KLAXON_TELEGRAM_API", default_value = DEFAULT_TELEGRAM_API)]
    pub telegram_api: String,
    /// Slack Web API base URL: `slack` channels whose endpoint is a channel id (C0123ABCD) are posted to
    /// <URL>/chat.postMessage with the bot token in KLAXON_SLACK_BOT_TOKEN.
    #[arg(long, env = "KLAXON_SLACK_API", default_value = DEFAULT_SLACK_API, value_name = "URL")]
    pub slack_api: String,
    /// PagerDuty Events API base URL: `pagerduty` channels POST to <URL>/v2/enqueue.
    #[arg(long, env = "KLAXON_PAGERDUTY_API", default_value = DEFAULT_PAGERDUTY_API, value_name = "URL")]
    pub pagerduty_api: String,
    /// SMTP server: smtp://host:port, smtp://host:port?tls=starttls, smtps://user:pass@host:port.
    #[arg(
        long,
        env = "KLAXON_SMTP_URL",
        default_value = DEFAULT_SMTP_URL,
        hide_env_values = true
    )]
    pub smtp_url: String,
    /// The From address of emails.
    #[arg(long, env = "KLAXON_SMTP_FROM", default_value = "klaxon@localhost")]
    pub smtp_from: String,
    /// Allow deliveries to loopback/private/link-local addresses.
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_private_endpoints: bool,
    /// Connect timeout for deliveries (a plain number is seconds).
    #[arg(long, env = "KLAXON_CONNECT_TIMEOUT", default_value = "5s", value_parser = duration_secs, value_name = "DURATION")]
    pub connect_timeout: Duration,
    /// Whole-request timeout for deliveries (a plain number is seconds).
    #[arg(long, env = "KLAXON_REQUEST_TIMEOUT", default_value = "10s", value_parser = duration_secs, value_name = "DURATION")]
    pub request_timeout: Duration,
    /// Link every message to the event: a URL with {projectId}, {groupHash} and {repetitionId}, e.g. Hawk's
    /// https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview [default: no link].
    #[arg(long, env = "KLAXON_EVENT_URL_TEMPLATE", value_name = "URL")]
    pub event_url_template: Option<String>,
}

/// The inbound integrations' secrets (docs/integrations.md), from the environment only (secrets): each
/// integration's endpoint is off while its secret is unset or empty.
pub fn inbound_secrets() -> klaxon_api::inbound::InboundSecrets {
    klaxon_api::inbound::InboundSecrets {
        pagerduty: env_secret("KLAXON_PAGERDUTY_WEBHOOK_SECRET"),
        slack: env_secret("KLAXON_SLACK_SIGNING_SECRET"),
        telegram: env_secret("KLAXON_TELEGRAM_WEBHOOK_SECRET"),
    }
}

/// Which channels' messages carry Acknowledge and Resolve buttons: those whose inbound integration's secret is
/// set in this process too (a button nobody answers is never shown).
fn buttons() -> klaxon_channels::buttons::Buttons {
    let secrets = inbound_secrets();
    klaxon_channels::buttons::Buttons {
        slack: secrets.slack.is_some(),
        telegram: secrets.telegram.is_some(),
    }
}

fn env_secret(name: &str) -> Option<klaxon_channels::Secret> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(klaxon_channels::Secret::new)
}

/// What is wrong with a `KLAXON_API_TOKEN` shorter than 32 bytes (never its value): the wrong-token throttle
/// slows guessing per client address, but only a long random token keeps guessing from many addresses hopeless.
pub fn short_api_token(token: &str) -> Option<String> {
    let len = token.trim().len();
    (len < klaxon_api::MIN_TOKEN_LEN).then(|| {
        format!(
            "KLAXON_API_TOKEN is {len} bytes: use at least {} random bytes, e.g. `openssl rand -hex 32` (the \
             wrong-token throttle slows guessing per address; a short token can still be guessed from many)",
            klaxon_api::MIN_TOKEN_LEN
        )
    })
}

/// The webhook master keys from the environment: `KLAXON_WEBHOOK_SECRET` (current, at least 32 bytes),
/// `KLAXON_WEBHOOK_SECRET_PREVIOUS` (during a rotation) and `KLAXON_WEBHOOK_LEGACY_SECRET` (the key of the
/// deprecated `X-Klaxon-Signature`, sent only when set). `None` when no current key is set; a short current
/// key, a previous or legacy key alone, or a legacy key equal to a master key is a usage error (exit 2). Every process that signs (senders) or shows secrets (API, console, `klaxon webhook
/// secret`) reads the same two variables.
pub fn webhook_keys() -> anyhow::Result<Option<klaxon_channels::webhook::SigningKeys>> {
    klaxon_channels::webhook::SigningKeys::from_settings(
        env_secret("KLAXON_WEBHOOK_SECRET"),
        env_secret("KLAXON_WEBHOOK_SECRET_PREVIOUS"),
        env_secret("KLAXON_WEBHOOK_LEGACY_SECRET"),
    )
    .map_err(|e| crate::exit::usage(e.to_string()))
}

/// `--public-url`'s parser (an http(s) URL with a host, no query).
pub fn public_url(s: &str) -> Result<klaxon_channels::PublicUrl, String> {
    klaxon_channels::PublicUrl::parse(s).map_err(|e| e.to_string())
}

/// What `KLAXON_ACTION_KEY` and `--public-url` say about action links (README, "Action links").
pub enum ActionSetup {
    /// Neither is set: no action links.
    Off,
    /// Only one of the two is set: no action links, and a warning saying which is missing.
    Half(&'static str),
    /// Both: messages carry signed links, the console serves them.
    On(klaxon_core::action::ActionKey, klaxon_channels::PublicUrl),
}

/// Reads `KLAXON_ACTION_KEY` (environment only: a secret) beside `--public-url`. A key shorter than 32 bytes is
/// an error (`klaxon doctor` reports it; the processes refuse to start).
pub fn action_setup(
    public_url: Option<&klaxon_channels::PublicUrl>,
) -> Result<ActionSetup, klaxon_core::action::KeyTooShort> {
    let key = std::env::var("KLAXON_ACTION_KEY")
        .ok()
        .filter(|k| !k.trim().is_empty())
        .map(|k| klaxon_core::action::ActionKey::new(&k))
        .transpose()?;
    Ok(match (key, public_url) {
        (None, None) => ActionSetup::Off,
        (Some(key), Some(url)) => ActionSetup::On(key, url.clone()),
        (None, Some(_)) => ActionSetup::Half(
            "--public-url (KLAXON_PUBLIC_URL) is set but KLAXON_ACTION_KEY is not: messages carry no action links",
        ),
        (Some(_), None) => ActionSetup::Half(
            "KLAXON_ACTION_KEY is set but --public-url (KLAXON_PUBLIC_URL) is not: messages carry no action links",
        ),
    })
}

impl DeliveryOpts {
    /// The validated adapters (must be called inside the tokio runtime: the SMTP pool starts a task).
    pub fn channels(&self) -> anyhow::Result<klaxon_channels::Channels> {
        klaxon_channels::Channels::new(klaxon_channels::ChannelsConfig {
            telegram_api: self.telegram_api.clone(),
            pagerduty_api: self.pagerduty_api.clone(),
            telegram_bot_token: env_secret("KLAXON_TELEGRAM_BOT_TOKEN"),
            slack_api: self.slack_api.clone(),
            slack_bot_token: env_secret("KLAXON_SLACK_BOT_TOKEN"),
            smtp_url: klaxon_channels::Secret::new(self.smtp_url.clone()),
            smtp_from: self.smtp_from.clone(),
            webhook_keys: webhook_keys()?,
            allow_private_endpoints: self.allow_private_endpoints,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
        })
        .and_then(|c| c.with_event_url_template(self.event_url_template.as_deref().unwrap_or("")))
        .map(|c| c.with_buttons(buttons()))
        // Only the flags' values can be wrong here: a usage error.
        .map_err(|e| crate::exit::usage(format!("invalid delivery settings: {e:#}")))
    }
}

/// The per-project limits on rules (README, "Limits per project"; docs/rules.md): writes over them are refused
/// (exit 1, a 4xx from the API), and a document over them written by someone else is read up to them. Processes
/// that write or read rules take these (`run`, `worker`, `sender` for their API; `rules add|import|check`,
/// `explain`). Give every process of a namespace the same values.
#[derive(Debug, Clone, Args)]
pub struct RuleLimitOpts {
    /// Most rules one project may hold; a stored project with more is evaluated for its first N (document
    /// order) and reported.
    #[arg(long, env = "KLAXON_MAX_RULES_PER_PROJECT", default_value_t = klaxon_core::limits::DEFAULT_MAX_RULES, value_name = "N")]
    pub max_rules_per_project: usize,
    /// Most addresses one email channel (or direct email notification) may have; a stored channel with more
    /// is sent to its first N and reported.
    #[arg(long, env = "KLAXON_MAX_EMAIL_RECIPIENTS", default_value_t = klaxon_core::limits::DEFAULT_MAX_EMAIL_RECIPIENTS, value_name = "N")]
    pub max_email_recipients: usize,
}

/// The per-project limit on mutes: `mute add` (and the API) refuse one more, readers apply at most N.
#[derive(Debug, Clone, Args)]
pub struct MuteLimitOpts {
    /// Most active mutes one project may have; more stored ones are not read (not applied) and reported.
    #[arg(long, env = "KLAXON_MAX_MUTES_PER_PROJECT", default_value_t = klaxon_core::limits::DEFAULT_MAX_MUTES, value_name = "N")]
    pub max_mutes_per_project: usize,
}

/// The validated limits from the flags a command has (the others keep their defaults); a value out of range
/// is a usage error.
pub fn limits(
    rules: Option<&RuleLimitOpts>,
    mutes: Option<&MuteLimitOpts>,
) -> anyhow::Result<klaxon_core::Limits> {
    let d = klaxon_core::Limits::default();
    klaxon_core::Limits::new(
        rules.map_or(d.max_rules, |r| r.max_rules_per_project),
        mutes.map_or(d.max_mutes, |m| m.max_mutes_per_project),
        rules.map_or(d.max_email_recipients, |r| r.max_email_recipients),
    )
    .map_err(crate::exit::usage)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate events and deliver notifications in one process.
    Run(crate::cmd::run::RunArgs),
    /// Evaluate events only: consume events, count, publish notification tasks.
    Worker(crate::cmd::run::WorkerArgs),
    /// Deliver notifications only: consume notification tasks and send them.
    Sender(crate::cmd::run::SenderArgs),
    /// Manage notification rules in MongoDB.
    Rules(crate::cmd::rules::RulesArgs),
    /// Publish test events to the events queue.
    Publish(crate::cmd::publish::PublishArgs),
    /// Read the delivery trail.
    Deliveries(crate::cmd::deliveries::DeliveriesArgs),
    /// Inspect and replay the dead-letter queue.
    Dead(crate::cmd::dead::DeadArgs),
    /// Inspect and replay invalid events (messages of the events queue that could not be read).
    Invalid(crate::cmd::invalid::InvalidArgs),
    /// Say what each rule of a project would do with an event, and why (reads only).
    Explain(crate::cmd::explain::ExplainArgs),
    /// Mute a project's firings (fleet-wide, in Redis): add, list, rm.
    Mute(crate::cmd::mute::MuteArgs),
    /// Alerts (fleet-wide, in Redis): list (one project or every one), ack, resolve.
    Alerts(crate::cmd::alerts::AlertsArgs),
    /// A project's name, as messages, PagerDuty, the console and `alerts list` show it.
    Projects(crate::cmd::projects::ProjectsArgs),
    /// Send a real test notification through one channel.
    TestNotify(crate::cmd::test_notify::TestNotifyArgs),
    /// Webhook signing: `webhook secret` prints a project's signing secret for one endpoint.
    Webhook(crate::cmd::webhook::WebhookArgs),
    /// Ask a running Klaxon's /readyz (or /healthz): a healthcheck for images without curl.
    Probe(crate::cmd::probe::ProbeArgs),
    /// Measure throughput and cost side by side on this machine.
    Bench(crate::cmd::bench::BenchArgs),
    /// Check every backing service and setting: one line per check (ok, warn, FAIL); exits 1 on a FAIL.
    Doctor(crate::cmd::doctor::DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(crate::cmd::completions::CompletionsArgs),
    /// Delete a namespace's queues, exchanges and Redis keys (asks for --yes).
    Namespace(crate::cmd::namespace::NamespaceArgs),
}

/// A duration flag: a humantime string (`90s`, `5m`, `1h30m`, `7d`) or a plain number of seconds (the unit
/// these flags had before they took humantime, so old values keep their meaning).
pub fn duration_secs(s: &str) -> Result<Duration, String> {
    duration_in(s, 1_000, "seconds")
}

/// [`duration_secs`] for flags whose plain numbers are milliseconds (`--batch-wait-ms`).
pub fn duration_ms(s: &str) -> Result<Duration, String> {
    duration_in(s, 1, "milliseconds")
}

/// [`duration_secs`] for flags whose plain numbers are days (`--trail-ttl-days`).
pub fn duration_days(s: &str) -> Result<Duration, String> {
    duration_in(s, 86_400_000, "days")
}

fn duration_in(s: &str, unit_ms: u64, unit: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u64>() {
        return n
            .checked_mul(unit_ms)
            .map(Duration::from_millis)
            .ok_or_else(|| format!("`{t}` {unit} is too long"));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("`{t}` is not a duration ({e}): use e.g. 90s, 5m, 1h30m, 7d, or a plain number of {unit}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_humantime_and_plain_numbers_in_the_old_unit() {
        let ok = [
            (
                "60",
                duration_secs as fn(&str) -> Result<Duration, String>,
                60_000,
            ),
            ("60s", duration_secs, 60_000),
            ("7d", duration_secs, 7 * 86_400_000),
            ("1h30m", duration_secs, 5_400_000),
            (" 2m ", duration_secs, 120_000),
            ("500ms", duration_secs, 500),
            ("2", duration_ms, 2),
            ("2ms", duration_ms, 2),
            ("1s", duration_ms, 1000),
            ("30", duration_days, 30 * 86_400_000),
            ("12h", duration_days, 43_200_000),
        ];
        for (s, parse, ms) in ok {
            assert_eq!(parse(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        for bad in ["", "x", "1y2", "-5", "5 parsecs", "99999999999999999999"] {
            assert!(duration_secs(bad).is_err(), "{bad}");
        }
        assert!(duration_days("999999999999999").is_err());
    }

    #[test]
    fn limits_are_validated_before_anything_connects() {
        let rules = |r, e| RuleLimitOpts {
            max_rules_per_project: r,
            max_email_recipients: e,
        };
        let mutes = |m| MuteLimitOpts {
            max_mutes_per_project: m,
        };
        assert_eq!(
            limits(None, None).expect("defaults"),
            klaxon_core::Limits::default()
        );
        let l = limits(Some(&rules(5, 3)), Some(&mutes(7))).expect("valid");
        assert_eq!((l.max_rules, l.max_mutes, l.max_email_recipients), (5, 7, 3));
        for (r, m, e, flag) in [
            (0, 1, 1, "--max-rules-per-project"),
            (1, 0, 1, "--max-mutes-per-project"),
            (1, 1, 0, "--max-email-recipients"),
        ] {
            let err = limits(Some(&rules(r, e)), Some(&mutes(m))).expect_err(flag);
            assert_eq!(crate::exit::code(&err), crate::exit::USAGE, "{err:#}");
            assert!(format!("{err:#}").contains(flag), "{err:#}");
        }
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        command().debug_assert();
    }

    /// Every subcommand says which global options it reads (a new one must be added to the table), and names
    /// only real options.
    #[test]
    fn every_subcommand_lists_the_global_options_it_reads() {
        let cmd = command();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            assert!(
                GLOBALS_USED.iter().any(|(name, _)| *name == sub.get_name()),
                "add `{}` to GLOBALS_USED",
                sub.get_name()
            );
        }
        let ids: Vec<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
        for (name, used) in GLOBALS_USED {
            for id in *used {
                assert!(ids.contains(id), "{name}: unknown option {id}");
            }
        }
        for id in ALL_GLOBALS {
            assert!(ids.contains(id), "unknown option {id}");
        }
    }
}
