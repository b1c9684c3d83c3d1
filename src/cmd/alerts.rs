//! `klaxon alerts list|ack|resolve`: alerts from the command line, straight on Redis (the alerts), MongoDB (the
//! projects' names, when it answers) and RabbitMQ (the lifecycle messages of an ack or a resolve), through the
//! API's own functions (`klaxon_api::rest::{alerts, projects}`), so the CLI refuses, answers and publishes as
//! `POST …/alerts/{id}/ack` does, and `list` without `--project` lists what `GET /api/v1/alerts` does.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use klaxon_api::rest::alerts::{self as api_alerts, HandAction, HandOutcome};
use klaxon_api::rest::projects::{self, ProjectAlert, MAX_LIST_ALL};
use klaxon_broker::{Session, Topology};
use klaxon_core::alert::{Alert, DEFAULT_MAX_ALERTS_PER_PROJECT};
use klaxon_counter::{Alerts, RedisHandle};

use crate::cli::GlobalOpts;
use crate::exit::{ensure_usage, usage};
use crate::output::{self, Format, OutputArgs};

/// How long connecting to RabbitMQ may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of `klaxon alerts`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon alerts list --state firing
  klaxon alerts list --project 5e3eef0679fa3700a0198a49
  klaxon alerts list --project 5e3eef0679fa3700a0198a49 --state firing -o json
  klaxon alerts ack --project 5e3eef0679fa3700a0198a49 0f1e2d3c4b5a69788796a5b4
  klaxon alerts resolve --project 5e3eef0679fa3700a0198a49 0f1e2d3c4b5a69788796a5b4 --by ana")]
pub struct AlertsArgs {
    #[command(subcommand)]
    pub command: AlertsCommand,
}

#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// List alerts, newest first (firing, acknowledged, recently resolved): one project's, or every project's.
    #[command(after_help = "\
Examples:
  klaxon alerts list --state firing
  klaxon alerts list --project 5e3eef0679fa3700a0198a49
  klaxon alerts list --project 5e3eef0679fa3700a0198a49 --state resolved -o json")]
    List(ListArgs),
    /// Acknowledge an alert ("I'm on it"): reminders and escalation stop, PagerDuty is acknowledged.
    #[command(after_help = "\
Examples:
  klaxon alerts ack --project 5e3eef0679fa3700a0198a49 0f1e2d3c4b5a69788796a5b4 --by ana")]
    Ack(ChangeArgs),
    /// Resolve an alert by hand: every channel that delivered its firing gets a resolved message.
    #[command(after_help = "\
Examples:
  klaxon alerts resolve --project 5e3eef0679fa3700a0198a49 0f1e2d3c4b5a69788796a5b4")]
    Resolve(ChangeArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The project (24-hex id); without it, every project's alerts.
    #[arg(long)]
    pub project: Option<String>,
    /// Only alerts in this state: firing, acknowledged or resolved.
    #[arg(long)]
    pub state: Option<String>,
    /// At most this many alerts.
    #[arg(long, default_value_t = api_alerts::DEFAULT_LIST_LIMIT)]
    pub limit: usize,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ChangeArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    /// The alert id (24 hex characters, as `klaxon alerts list` shows it).
    pub alert_id: String,
    /// Who does it, shown in the messages (default: $USER, or `cli`).
    #[arg(long)]
    pub by: Option<String>,
    /// Where the worker puts notifications (`--output` of `klaxon run`/`worker`): with `hawk` or `shadow` the
    /// lifecycle messages are not published, as the worker does not publish them either (`shadow` records them
    /// in the delivery trail).
    #[arg(long, env = "KLAXON_OUTPUT", default_value = "klaxon")]
    pub output: klaxon_engine::sink::Output,
    /// Queue type used if the namespace's queues must be declared.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: klaxon_broker::QueueType,
}

/// The rule store, for the projects' names, when there are alerts and MongoDB answers (else the names kept with
/// the alerts are shown).
async fn names_store(global: &GlobalOpts, list: &[Alert]) -> Option<klaxon_store::RuleStore> {
    if list.is_empty() {
        return None;
    }
    match klaxon_store::RuleStore::connect(&global.mongo_url, &global.mongo_db()).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "MongoDB unreachable: showing the project names kept with the alerts");
            None
        }
    }
}

fn check_project(p: &str) -> anyhow::Result<()> {
    ensure_usage!(
        klaxon_core::event::is_object_id(p),
        "--project must be a 24-hex-digit ObjectId"
    );
    Ok(())
}

/// `by` when `--by` is not given: `$USER`, or `cli`.
fn default_by() -> String {
    std::env::var("USER")
        .ok()
        .and_then(|u| api_alerts::check_by(&u).ok())
        .unwrap_or_else(|| "cli".to_owned())
}

fn row(p: &ProjectAlert) -> Vec<String> {
    let v = p.alert.view();
    vec![
        v.id,
        klaxon_core::text::one_line(&p.project_name, 40),
        v.state.to_string(),
        v.fired_at,
        v.events.to_string(),
        v.rule_id,
        v.group,
        klaxon_core::text::one_line(&v.title, 80),
    ]
}

pub async fn run(args: AlertsArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    // Wrong flags are reported before anything connects.
    let project = match &args.command {
        AlertsCommand::List(a) => a.project.as_deref(),
        AlertsCommand::Ack(a) | AlertsCommand::Resolve(a) => Some(a.project.as_str()),
    };
    if let Some(p) = project {
        check_project(p)?;
    }
    let project = project.map(str::to_ascii_lowercase).unwrap_or_default();
    let by = match &args.command {
        AlertsCommand::Ack(a) | AlertsCommand::Resolve(a) => match &a.by {
            Some(b) => api_alerts::check_by(b).map_err(|e| usage(e.replace("`by`", "--by")))?,
            None => default_by(),
        },
        AlertsCommand::List(_) => String::new(),
    };
    let state = match &args.command {
        AlertsCommand::List(a) => a
            .state
            .as_deref()
            .map(api_alerts::parse_state)
            .transpose()
            .map_err(|e| usage(e.replace("`state`", "--state")))?,
        _ => None,
    };
    if let AlertsCommand::List(a) = &args.command {
        let max = if a.project.is_some() {
            DEFAULT_MAX_ALERTS_PER_PROJECT
        } else {
            MAX_LIST_ALL
        };
        ensure_usage!((1..=max).contains(&a.limit), "--limit must be from 1 to {max}");
    }
    let redis = RedisHandle::connect(&global.redis_url)
        .await
        .context("cannot connect to Redis (--redis-url / KLAXON_REDIS_URL)")?;
    let alerts = Alerts::new(redis, &global.namespace);
    let (change, action) = match args.command {
        AlertsCommand::List(a) => {
            let all = a.project.is_none();
            let list = if all {
                alerts.list_all(state, a.limit).await?
            } else {
                alerts.list(&project, state, a.limit).await?
            };
            let store = names_store(global, &list).await;
            let named = projects::with_names(list, store.as_ref()).await;
            if let Some(store) = store {
                store.close().await;
            }
            let text = match a.output.format(Format::Json) {
                Format::Json if all => format!("{:#}\n", projects::list_all_json(&named)),
                Format::Json => {
                    let list: Vec<Alert> = named.into_iter().map(|p| p.alert).collect();
                    format!("{:#}\n", api_alerts::list_json(&list))
                }
                Format::Ndjson if all => named.iter().map(|x| format!("{}\n", x.to_json())).collect(),
                Format::Ndjson => named
                    .iter()
                    .map(|x| format!("{}\n", serde_json::to_string(&x.alert.view()).unwrap_or_default()))
                    .collect(),
                Format::Table if named.is_empty() => "no alerts\n".to_owned(),
                Format::Table => output::table(
                    Some(&[
                        "ALERT", "PROJECT", "STATE", "FIRED", "EVENTS", "RULE", "GROUP", "TITLE",
                    ]),
                    &named.iter().map(row).collect::<Vec<_>>(),
                ),
            };
            output::emit(&text)?;
            return Ok(ExitCode::SUCCESS);
        }
        AlertsCommand::Ack(a) => (a, HandAction::Acknowledge),
        AlertsCommand::Resolve(a) => (a, HandAction::Resolve),
    };
    let outcome = api_alerts::hand_change(&alerts, &project, &change.alert_id, action, &by).await?;
    let topology = Topology::new(&global.namespace, &global.events_queue(), change.queue_type);
    let tasks = outcome.tasks(action);
    // shadow mode records the lifecycle messages in the delivery trail, as the worker records its firings
    let (trail, writer) = if change.output == klaxon_engine::sink::Output::Shadow && !tasks.is_empty() {
        let store = klaxon_store::RuleStore::connect(&global.mongo_url, &global.mongo_db())
            .await
            .context("cannot connect to MongoDB (--mongo-url / KLAXON_MONGO_URL) for the delivery trail")?;
        let (trail, writer) = klaxon_store::Trail::start(
            async move { Some(store) },
            klaxon_store::trail::DEFAULT_TRAIL_TTL,
            tokio_util::sync::CancellationToken::new(),
        );
        (trail, Some(writer))
    } else {
        (klaxon_store::Trail::disabled(), None)
    };
    let messages = api_alerts::messages(&topology, change.output, &trail, &tasks);
    // the writer ends once every handle is gone and what was queued is written
    drop(trail);
    if let Some(writer) = writer {
        if tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .is_err()
        {
            tracing::warn!("the delivery trail was not written in time");
        }
    }
    if !messages.is_empty() {
        let session = Session::open(&global.amqp_url, CONNECT_TIMEOUT, "cli", &topology)
            .await
            .context("cannot connect to RabbitMQ (--amqp-url / KLAXON_AMQP_URL)")?;
        let published = session.publisher.publish_all(&messages).await;
        session.close().await;
        published.context("the alert changed, but its messages were not published: run the command again")?;
    }
    match outcome {
        HandOutcome::Done(alert) => {
            println!("{} alert {} by {by}", action.done(), alert.id);
            Ok(ExitCode::SUCCESS)
        }
        HandOutcome::Conflict { message, .. } => anyhow::bail!("{message}"),
        HandOutcome::NotFound => anyhow::bail!(
            "no alert `{}` in project {project} (see `klaxon alerts list --project {project}`)",
            klaxon_core::text::one_line(&change.alert_id, 48)
        ),
    }
}
