//! `klaxon deliveries list`: the delivery trail (MongoDB collection `deliveries`), newest state per notification.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
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
    /// List notifications with their latest delivery state, newest first.
    #[command(after_help = "\
Examples:
  klaxon deliveries list --limit 20
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
    /// shadow`, not sent) or dropped (a reminder or escalation step of an alert acknowledged or resolved since).
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
    // `--json` printed one object per line before `-o` existed.
    output::emit(&output::list(
        args.output.format(Format::Ndjson),
        &records,
        &[
            "NOTIFICATION",
            "PROJECT",
            "RULE",
            "CHANNEL",
            "STATUS",
            "ATTEMPTS",
            "AT",
            "DESTINATION",
            "LAST ERROR",
        ],
        |r| {
            vec![
                r.notification_id.clone(),
                r.project_id.clone(),
                r.rule_id.clone(),
                r.channel.clone(),
                r.status.as_str().to_owned(),
                r.attempts.to_string(),
                klaxon_core::notification::rfc3339_ms(r.at_ms),
                r.destination.clone(),
                r.last_error.clone().unwrap_or_else(|| "-".into()),
            ]
        },
        klaxon_api::rest::deliveries::record_json,
        "no deliveries",
    ))?;
    Ok(ExitCode::SUCCESS)
}
