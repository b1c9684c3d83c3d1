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
use klaxon_broker::{header, Broker, Delivery, Outgoing, Topology, ERROR_HEADER};
use klaxon_channels::redact_endpoint;
use klaxon_core::NotificationTask;
use klaxon_engine::sender::ATTEMPTS_HEADER;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

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

/// How long to wait for the next message of a queue known to hold more.
const NEXT_WAIT: Duration = Duration::from_secs(5);

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
    let queue = topology.dead_queue();
    let count = {
        let ch = broker.channel().await?;
        let q = ch
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .context("cannot inspect the dead-letter queue")?;
        let _ = ch.close(200, "bye".into()).await;
        q.message_count()
    };
    let (limit, replay) = match &args.command {
        DeadCommand::List { limit, .. } => (count.min(*limit), None),
        DeadCommand::Replay { id, all } => (count, Some((id.clone(), *all))),
    };
    let mut consumer = broker
        .consume(
            &queue,
            u16::try_from(limit.clamp(1, 1000)).unwrap_or(1000),
            "klaxon-dead-cli",
        )
        .await?;
    let mut seen = 0u32;
    let mut replayed = 0u32;
    if let DeadCommand::List { json: false, .. } = args.command {
        println!("NOTIFICATION\tPROJECT\tRULE\tCHANNEL\tATTEMPTS\tDESTINATION\tREASON");
    }
    while seen < limit {
        let Some(Some(next)) = consumer.next_within(NEXT_WAIT).await else {
            break;
        };
        let delivery = next?;
        seen += 1;
        let task: Option<NotificationTask> = serde_json::from_slice(&delivery.data).ok();
        match (&args.command, &replay) {
            (DeadCommand::List { json, .. }, _) => print_one(&delivery, task.as_ref(), *json),
            (_, Some((id, all))) => {
                let Some(task) = task else { continue };
                if !*all && id.as_deref() != Some(task.notification_id.as_str()) {
                    continue;
                }
                let msg = Outgoing {
                    queue: topology.notify_queue(task.channel),
                    body: delivery.data.clone(),
                    message_id: delivery.properties.message_id().as_ref().map(|s| s.to_string()),
                    headers: Vec::new(),
                    base: None,
                };
                publisher.publish_all(&[msg]).await.context("cannot republish")?;
                consumer.ack(delivery.delivery_tag).await?;
                replayed += 1;
                println!("replayed {} ({})", task.notification_id, task.channel);
            }
            _ => {}
        }
    }
    // Whatever was not replayed goes back to the queue when the channel closes.
    consumer.close().await;
    publisher.close().await;
    broker.close().await;
    if replay.is_some() {
        println!("{replayed} replayed");
        if replayed == 0 {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_one(delivery: &Delivery, task: Option<&NotificationTask>, json: bool) {
    let attempts = header(&delivery.properties, ATTEMPTS_HEADER).unwrap_or_else(|| "0".into());
    let reason = header(&delivery.properties, ERROR_HEADER).unwrap_or_default();
    let (id, project, rule, channel, dest) = match task {
        Some(t) => (
            t.notification_id.clone(),
            t.project_id.clone(),
            t.rule_id.clone(),
            t.channel.as_str().to_owned(),
            redact_endpoint(t.channel, &t.endpoint),
        ),
        None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
    };
    if json {
        let line = serde_json::json!({
            "notificationId": id, "projectId": project, "ruleId": rule, "channel": channel,
            "attempts": attempts.parse::<u64>().unwrap_or(0), "destination": dest, "reason": reason,
        });
        println!("{line}");
    } else {
        println!("{id}\t{project}\t{rule}\t{channel}\t{attempts}\t{dest}\t{reason}");
    }
}
