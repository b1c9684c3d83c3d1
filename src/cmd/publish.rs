//! `klaxon publish`: send events to the events queue, or with `--events-shards` N > 1 to the shard exchange keyed
//! by project (for trying Klaxon out, tests and benchmarks).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use klaxon_broker::{Broker, QueueType, Topology};

use crate::cli::GlobalOpts;

/// Publishes `--count` copies of one event (each with its own AMQP message_id), or one raw body.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon publish --project 5e3eef0679fa3700a0198a49 --title \"TypeError: x is undefined\" --group 11da --new
  klaxon publish --project 5e3eef0679fa3700a0198a49 --title Boom --group g --count 250 --groups 10
  klaxon publish --project 5e3eef0679fa3700a0198a49 --title Boom --group g --count 60 --users 60
  klaxon publish --body 'not json'          # try the invalid-event path (<ns>.events.invalid)")]
pub struct PublishArgs {
    /// Project id (24-hex ObjectId).
    #[arg(long, required_unless_present = "body")]
    pub project: Option<String>,
    /// Event title.
    #[arg(long, required_unless_present = "body")]
    pub title: Option<String>,
    /// Group hash.
    #[arg(long, required_unless_present = "body")]
    pub group: Option<String>,
    /// Mark the first event as new (`isNew: true`).
    #[arg(long)]
    pub new: bool,
    /// How many events to publish.
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// Spread the events round-robin over this many groups: `<group>-0` … `<group>-<n-1>`, each with the title
    /// `<title> (<group>-<i>)`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub groups: u64,
    /// The affected user: events carry `event.user = {"id": USER}` (what `uniqueUsers` rules count).
    #[arg(long)]
    pub user: Option<String>,
    /// Spread the events round-robin over this many users: `<user>-0` … `<user>-<n-1>` (`--user` defaults
    /// to `user` then).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub users: Option<u64>,
    /// Publish this body as is, instead of building an event (e.g. to try the invalid-event path).
    #[arg(long, conflicts_with_all = ["project", "title", "group", "new", "user", "users"])]
    pub body: Option<String>,
    /// Queue type used if the events queue must be declared.
    #[arg(long, env = "KLAXON_QUEUE_TYPE", default_value = "classic")]
    pub queue_type: QueueType,
}

const CHUNK: usize = 1000;

pub async fn run(args: PublishArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let queue = global.events_queue();
    if let Some(p) = &args.project {
        crate::exit::ensure_usage!(
            klaxon_core::event::is_object_id(p),
            "--project must be a 24-hex-digit ObjectId, got {p:?}"
        );
    }
    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("cannot connect to RabbitMQ (--amqp-url / KLAXON_AMQP_URL)")?;
    let publisher = broker.publisher().await?;
    let topology =
        Topology::new(&global.namespace, &queue, args.queue_type).with_shards(global.events_shards);
    publisher.declare(&topology).await?;

    let run_id = format!("{:016x}", rand::random::<u64>());
    let mut sent = 0u64;
    while sent < args.count {
        let n = (args.count - sent).min(CHUNK as u64);
        let mut batch = Vec::with_capacity(n as usize);
        for i in sent..sent + n {
            let body = match &args.body {
                Some(b) => b.clone().into_bytes(),
                None => {
                    let title = args.title.as_deref().unwrap_or_default();
                    let group = args.group.as_deref().unwrap_or_default();
                    let (title, group) = if args.groups > 1 {
                        let g = format!("{group}-{}", i % args.groups);
                        (format!("{title} ({g})"), g)
                    } else {
                        (title.to_owned(), group.to_owned())
                    };
                    let mut task = serde_json::json!({
                        "projectId": args.project,
                        "event": {
                            "title": title,
                            "groupHash": group,
                            "isNew": args.new && i < args.groups,
                            "repetitionId": null,
                        }
                    });
                    if let Some(user) = user_of(&args, i) {
                        task["event"]["user"] = serde_json::json!({ "id": user });
                    }
                    serde_json::to_vec(&task)?
                }
            };
            // with --events-shards: to the shard exchange, keyed by the project (a raw body's own, if it has one)
            let project = match &args.project {
                Some(p) => p.clone(),
                None => project_of(&body),
            };
            let mut msg = topology.event(&project, body);
            msg.message_id = Some(format!("publish-{run_id}-{i}"));
            batch.push(msg);
        }
        publisher.publish_all(&batch).await?;
        sent += n;
    }
    publisher.close().await;
    broker.close().await;
    if topology.sharded() {
        println!(
            "published {sent} event(s) to exchange {} ({} shards)",
            topology.shard_exchange(),
            topology.shards()
        );
    } else {
        println!("published {sent} event(s) to {queue}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The `projectId` of a raw body (the shard key), empty when it has none.
fn project_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("projectId")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The user of the i-th event: `--user`, or `<user>-<i mod n>` with `--users n`.
fn user_of(args: &PublishArgs, i: u64) -> Option<String> {
    match (args.user.as_deref(), args.users) {
        (None, None) => None,
        (Some(u), None) => Some(u.to_owned()),
        (u, Some(n)) => Some(format!("{}-{}", u.unwrap_or("user"), i % n)),
    }
}
