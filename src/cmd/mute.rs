//! `klaxon mute add|list|rm`: the API's mutes from the command line (stored in Redis, fleet-wide).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use klaxon_api::rest::mutes::{MuteEnd, MuteRequest};
use klaxon_counter::{Mutes, RedisHandle, WindowCounter};

use crate::cli::{duration_secs, GlobalOpts, MuteLimitOpts};
use crate::exit::{ensure_usage, usage};
use crate::output::{self, Format, OutputArgs};

/// Options of `klaxon mute`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon mute add --project 5e3eef0679fa3700a0198a49 --group 11da --for 2h
  klaxon mute list --project 5e3eef0679fa3700a0198a49 -o json
  klaxon mute rm --project 5e3eef0679fa3700a0198a49 4f2a9c0d11e3b7aa")]
pub struct MuteArgs {
    #[command(subcommand)]
    pub command: MuteCommand,
}

#[derive(Debug, Subcommand)]
pub enum MuteCommand {
    /// Mute a project's firings (of one rule and/or group) until a time or for a while.
    #[command(after_help = "\
Examples:
  klaxon mute add --project 5e3eef0679fa3700a0198a49 --for 30m
  klaxon mute add --project 5e3eef0679fa3700a0198a49 --rule 65f0c0ffee0000000000beef --group 11da --for 1d
  klaxon mute add --project 5e3eef0679fa3700a0198a49 --until 2030-01-01T00:00:00Z")]
    Add(AddArgs),
    /// List a project's active mutes.
    #[command(after_help = "\
Examples:
  klaxon mute list --project 5e3eef0679fa3700a0198a49
  klaxon mute list --project 5e3eef0679fa3700a0198a49 -o ndjson")]
    List(ListArgs),
    /// Remove a mute.
    #[command(after_help = "\
Examples:
  klaxon mute rm --project 5e3eef0679fa3700a0198a49 4f2a9c0d11e3b7aa")]
    Rm(RmArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub limits: MuteLimitOpts,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    /// Only this rule.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only this groupHash.
    #[arg(long)]
    pub group: Option<String>,
    /// Until this time (RFC 3339).
    #[arg(long, conflicts_with = "for_")]
    pub until: Option<String>,
    /// For this long: a duration like 2h, 30m, 1d (a plain number is seconds).
    #[arg(long = "for", id = "for_", value_parser = duration_secs, value_name = "DURATION")]
    pub for_: Option<Duration>,
    #[command(flatten)]
    pub limits: MuteLimitOpts,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    /// The mute id.
    pub mute_id: String,
}

fn check_project(p: &str) -> anyhow::Result<()> {
    ensure_usage!(
        klaxon_core::event::is_object_id(p),
        "--project must be a 24-hex-digit ObjectId"
    );
    Ok(())
}

pub async fn run(args: MuteArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    // Wrong flags are reported before anything connects.
    check_project(match &args.command {
        MuteCommand::Add(a) => &a.project,
        MuteCommand::List(a) => &a.project,
        MuteCommand::Rm(a) => &a.project,
    })?;
    let limits = crate::cli::limits(
        None,
        match &args.command {
            MuteCommand::Add(a) => Some(&a.limits),
            MuteCommand::List(a) => Some(&a.limits),
            MuteCommand::Rm(_) => None,
        },
    )?;
    let redis = RedisHandle::connect(&global.redis_url)
        .await
        .context("cannot connect to Redis (--redis-url / KLAXON_REDIS_URL)")?;
    let now = WindowCounter::new(redis.clone(), &global.namespace)
        .server_time_ms()
        .await?;
    let mutes = Mutes::new(redis, &global.namespace).with_limit(limits.max_mutes);
    match args.command {
        MuteCommand::Add(a) => {
            let end = match (a.until, a.for_) {
                (Some(u), _) => MuteEnd::Until(u),
                (None, Some(f)) => MuteEnd::For(f.as_secs()),
                (None, None) => return Err(usage("give `until` (RFC 3339) or `for` (seconds)")),
            };
            let req = MuteRequest {
                rule_id: a.rule,
                group_hash: a.group,
                end,
            };
            let id = format!("{:016x}", rand::random::<u64>());
            // What the API would answer 400 to: the flags' values are wrong.
            let mute = req.to_mute(now, id).map_err(usage)?;
            // Over the project's limit: exit 1 with what to do (the API answers 409).
            if let klaxon_counter::mutes::Added::Full { active } =
                mutes.add(&a.project, &mute, Some(now)).await?
            {
                anyhow::bail!(
                    "{}",
                    klaxon_api::rest::mutes::mutes_full(
                        &a.project.to_ascii_lowercase(),
                        active,
                        mutes.limit()
                    )
                );
            }
            let v = klaxon_api::rest::mutes::to_json(&mute);
            println!(
                "muted {} until {}",
                mute.mute_id,
                v["until"].as_str().unwrap_or_default()
            );
        }
        MuteCommand::List(a) => {
            let read = mutes.list(&a.project, now).await?;
            if read.unread > 0 {
                eprintln!(
                    "warning: {} more mutes are stored than the limit of {} per project: not listed, and not applied",
                    read.unread,
                    mutes.limit()
                );
            }
            let list = read.mutes;
            output::emit(&output::list(
                a.output.format(Format::Json),
                &list,
                &["MUTE", "UNTIL", "RULE", "GROUP"],
                |m| {
                    let v = klaxon_api::rest::mutes::to_json(m);
                    vec![
                        m.mute_id.clone(),
                        v["until"].as_str().unwrap_or_default().to_owned(),
                        m.rule_id.clone().unwrap_or_else(|| "*".into()),
                        m.group_hash.clone().unwrap_or_else(|| "*".into()),
                    ]
                },
                klaxon_api::rest::mutes::to_json,
                "no active mutes",
            ))?;
        }
        MuteCommand::Rm(a) => {
            if !mutes.remove(&a.project, &a.mute_id).await? {
                anyhow::bail!("no mute {} in project {}", a.mute_id, a.project);
            }
            println!("removed mute {}", a.mute_id);
        }
    }
    Ok(ExitCode::SUCCESS)
}
