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
use klaxon_api::dead::{DeadItem, Pass};
use klaxon_broker::{Broker, Topology};

use crate::cli::GlobalOpts;

/// Inspect and replay dead-lettered notifications.
#[derive(Debug, Args)]
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
    List {
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Send dead-lettered notifications again, with a fresh attempt count.
    Replay {
        /// The notificationId to replay.
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
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
    let items = klaxon_api::dead::pass(&broker, &publisher, &topology, what)
        .await
        .context("cannot read the dead-letter queue")?;
    publisher.close().await;
    broker.close().await;
    match args.command {
        DeadCommand::List { json, .. } => {
            if !json {
                println!("NOTIFICATION\tPROJECT\tRULE\tCHANNEL\tATTEMPTS\tDESTINATION\tREASON");
            }
            for item in &items {
                print_one(item, json);
            }
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

fn print_one(d: &DeadItem, json: bool) {
    if json {
        println!("{}", d.to_json());
    } else {
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            d.notification_id, d.project_id, d.rule_id, d.channel, d.attempts, d.destination, d.reason
        );
    }
}
