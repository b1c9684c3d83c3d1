//! `klaxon deliveries list`: the messages quiet hours hold now (Redis, `klaxon_counter::held`), then the delivery
//! trail (MongoDB collection `deliveries`), newest state per notification — the listing of
//! `GET /api/v1/deliveries` (`klaxon_api::rest::deliveries::merge`).

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use klaxon_api::rest::deliveries::{self as api_deliveries, Delivery};
use klaxon_counter::{Digests, RedisHandle};
use klaxon_store::trail::{Status, TrailReader};
use klaxon_store::RulesError;

use crate::cli::GlobalOpts;
use crate::exit::Unreachable;
use crate::output::{self, Format, OutputArgs};

/// Read the delivery trail.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon deliveries list
  klaxon deliveries list --project 5e3eef0679fa3700a0198a49 --status dead -o json")]
pub struct DeliveriesArgs {
    #[command(subcommand)]
    pub command: DeliveriesCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// List the messages held by quiet hours (soonest release first), then notifications with their latest
    /// delivery state, newest first.
    #[command(after_help = "\
Examples:
  klaxon deliveries list --limit 20
  klaxon deliveries list --status held    # held by quiet hours: until when, and what
  klaxon deliveries list --status retrying -o ndjson
  klaxon deliveries list --project 5e3eef0679fa3700a0198a49 --json    # one object per line (= -o ndjson)")]
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this project (24-hex id).
    #[arg(long)]
    pub project: Option<String>,
    /// Only notifications whose latest state is this: sent, retrying, dead, shadow (recorded by `--output
    /// shadow`, not sent), dropped (a reminder or escalation step of an alert acknowledged or resolved since) or
    /// held (by a rule's quiet hours until its window ends; read from Redis).
    #[arg(long)]
    pub status: Option<Status>,
    /// At most this many notifications.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Read at most this many trail records.
    #[arg(long, default_value_t = 100_000)]
    pub scan: usize,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: DeliveriesArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let DeliveriesCommand::List(args) = args.command;
    let (with_held, with_trail) = api_deliveries::sources(args.status);
    let held = if with_held {
        let read = async {
            let redis = RedisHandle::connect(&global.redis_url)
                .await
                .context("cannot connect to Redis (--redis-url / KLAXON_REDIS_URL)")?;
            Digests::new(redis, &global.namespace)
                .held(args.project.as_deref(), args.limit)
                .await
                .context("cannot read the messages held by quiet hours")
        };
        match read.await {
            Ok(held) => held,
            // listing everything: the trail still lists, and the missing held messages are said
            Err(e) if with_trail => {
                eprintln!("klaxon: warning: {e:#}; listing the delivery trail without them");
                Vec::new()
            }
            Err(e) => return Err(e),
        }
    } else {
        Vec::new()
    };
    if !with_trail {
        return print(&args, api_deliveries::merge(held, Vec::new(), args.limit));
    }
    let reader = TrailReader::connect(&global.mongo_url, &global.mongo_db())
        .await
        .map_err(|e| match e {
            // The reader pings first; a failed ping means the server is out of reach.
            RulesError::Query { op: "ping", message } => {
                anyhow::Error::new(Unreachable(format!("MongoDB is unreachable: ping: {message}")))
            }
            e => anyhow::Error::new(e),
        })
        .context("cannot open the delivery trail")?;
    let records = reader
        .latest(args.project.as_deref(), args.status, args.limit, args.scan)
        .await;
    reader.close().await;
    let records = records.context("cannot read the delivery trail")?;
    print(&args, api_deliveries::merge(held, records, args.limit))
}

fn print(args: &ListArgs, rows: Vec<Delivery>) -> anyhow::Result<ExitCode> {
    // `--json` printed one object per line before `-o` existed.
    output::emit(&output::list(
        args.output.format(Format::Ndjson),
        &rows,
        &[
            "NOTIFICATION",
            "PROJECT",
            "RULE",
            "CHANNEL",
            "STATUS",
            "ATTEMPTS",
            "AT",
            "DESTINATION",
            "DETAIL",
        ],
        |d| {
            let r = d.view();
            vec![
                r.notification_id.to_owned(),
                r.project_id.to_owned(),
                r.rule_id.to_owned(),
                r.channel.to_owned(),
                r.status.to_owned(),
                r.attempts.to_string(),
                r.at.clone(),
                r.destination.to_owned(),
                // the last error of a trail record; until when and what for a held message
                d.held_summary()
                    .or_else(|| r.last_error.map(str::to_owned))
                    .unwrap_or_else(|| "-".into()),
            ]
        },
        api_deliveries::delivery_json,
        "no deliveries",
    ))?;
    Ok(ExitCode::SUCCESS)
}
