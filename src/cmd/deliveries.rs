//! `klaxon deliveries list`: the delivery trail (MongoDB collection `deliveries`), newest state per notification.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use klaxon_engine::trail::{Status, TrailReader};

use crate::cli::GlobalOpts;

/// Read the delivery trail.
#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    #[command(subcommand)]
    pub command: DeliveriesCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// List notifications with their latest delivery state, newest first.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this project (24-hex id).
    #[arg(long)]
    pub project: Option<String>,
    /// Only notifications whose latest state is this: sent, retrying or dead.
    #[arg(long)]
    pub status: Option<Status>,
    /// At most this many notifications.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Read at most this many trail records.
    #[arg(long, default_value_t = 100_000)]
    pub scan: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: DeliveriesArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let DeliveriesCommand::List(args) = args.command;
    let reader = TrailReader::connect(&global.mongo_url, &global.mongo_db())
        .await
        .context("cannot open the delivery trail")?;
    let records = reader
        .latest(args.project.as_deref(), args.status, args.limit, args.scan)
        .await
        .context("cannot read the delivery trail")?;
    if args.json {
        for r in &records {
            let line = klaxon_api::deliveries::record_json(r);
            println!("{line}");
        }
    } else {
        println!("NOTIFICATION\tPROJECT\tRULE\tCHANNEL\tSTATUS\tATTEMPTS\tAT\tDESTINATION\tLAST ERROR");
        for r in &records {
            println!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                r.notification_id,
                r.project_id,
                r.rule_id,
                r.channel,
                r.status.as_str(),
                r.attempts,
                klaxon_core::notification::rfc3339_ms(r.at_ms),
                r.destination,
                r.last_error.as_deref().unwrap_or("-"),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
