//! `klaxon dead list | replay`: the dead-letter queue `<ns>.dead`.
//!
//! Both read at most the messages that were in the queue when they started (so they always end), holding
//! them unacked: `list` hands every message back untouched; `replay` publishes the chosen ones to their
//! channel's queue with a fresh attempt count (same body and message id, so the same notificationId and the
//! same dedup), acks them once RabbitMQ confirmed the publish, and hands the others back.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use klaxon_api::rest::dead::{DeadItem, Pass};
use klaxon_broker::{Broker, Topology};

use crate::cli::GlobalOpts;
use crate::output::{self, Format, OutputArgs};

/// Inspect and replay dead-lettered notifications.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon dead list
  klaxon dead list -o ndjson | jq -r .reason
  klaxon dead replay --id 3f1c…        # one notification, fresh attempt count, same notificationId
  klaxon dead replay --all             # exit 1 when nothing was replayed")]
pub struct DeadArgs {
    #[command(subcommand)]
    pub command: DeadCommand,
    /// Queue type used if the namespace's queues must be declared.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic", global = true)]
    pub queue_type: klaxon_broker::QueueType,
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead-lettered notifications (they stay in the queue).
    #[command(after_help = "\
Examples:
  klaxon dead list --limit 20
  klaxon dead list -o json > dead.json
  klaxon dead list --json              # one object per line (same as -o ndjson)")]
    List {
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Send dead-lettered notifications again, with a fresh attempt count.
    #[command(
        override_usage = "klaxon dead replay --all\n       klaxon dead replay --id <NOTIFICATION_ID>",
        group(clap::ArgGroup::new("which").required(true).args(["id", "all"])),
        after_help = "\
Examples:
  klaxon dead replay --id 3f1c…
  klaxon dead replay --all"
    )]
    Replay {
        /// The notificationId to replay.
        #[arg(long, value_name = "NOTIFICATION_ID", conflicts_with = "all")]
        id: Option<String>,
        /// Replay every dead-lettered notification.
        #[arg(long)]
        all: bool,
    },
}

pub async fn run(args: DeadArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let topology = Topology::new(&global.namespace, &global.events_queue(), args.queue_type);
    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("cannot connect to RabbitMQ")?;
    let publisher = broker.publisher().await?;
    publisher
        .declare(&topology)
        .await
        .context("cannot declare queues")?;
    let ids: Vec<String>;
    let what = match &args.command {
        DeadCommand::List { limit, .. } => Pass::List(*limit),
        DeadCommand::Replay { id, all } => {
            ids = id.iter().cloned().collect();
            Pass::Replay(if *all { None } else { Some(&ids) })
        }
    };
    let replay = matches!(what, Pass::Replay(_));
    let items = klaxon_api::rest::dead::pass(&broker, &publisher, &topology, what)
        .await
        .context("cannot read the dead-letter queue")?;
    publisher.close().await;
    broker.close().await;
    match args.command {
        DeadCommand::List { output, .. } => {
            // `--json` printed one object per line before `-o` existed.
            output::emit(&output::list(
                output.format(Format::Ndjson),
                &items,
                &[
                    "NOTIFICATION",
                    "PROJECT",
                    "RULE",
                    "CHANNEL",
                    "ATTEMPTS",
                    "DESTINATION",
                    "REASON",
                ],
                |d| {
                    vec![
                        d.notification_id.clone(),
                        d.project_id.clone(),
                        d.rule_id.clone(),
                        d.channel.clone(),
                        d.attempts.to_string(),
                        d.destination.clone(),
                        d.reason.clone(),
                    ]
                },
                DeadItem::to_json,
                "no dead-lettered notifications",
            ))?;
        }
        DeadCommand::Replay { .. } => {
            for item in &items {
                println!("replayed {} ({})", item.notification_id, item.channel);
            }
        }
    }
    if replay {
        println!("{} replayed", items.len());
        if items.is_empty() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
