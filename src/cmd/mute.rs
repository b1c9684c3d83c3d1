//! `klaxon mute add|list|rm`: the API's mutes from the command line (stored in Redis, fleet-wide).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use klaxon_counter::{Counter, Mutes, RedisHandle};
use serde_json::json;

use crate::cli::GlobalOpts;

/// Options of `klaxon mute`.
#[derive(Debug, Args)]
pub struct MuteArgs {
    #[command(subcommand)]
    pub command: MuteCommand,
}

#[derive(Debug, Subcommand)]
pub enum MuteCommand {
    /// Mute a project's firings (of one rule and/or group) until a time or for a while.
    Add(AddArgs),
    /// List a project's active mutes.
    List(ProjectArg),
    /// Remove a mute.
    Rm(RmArgs),
}

#[derive(Debug, Args)]
pub struct ProjectArg {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
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
    /// For this long: seconds, or a humantime like 2h, 30m.
    #[arg(long = "for", id = "for_")]
    pub for_: Option<String>,
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
    anyhow::ensure!(
        klaxon_core::event::is_object_id(p),
        "--project must be a 24-hex-digit ObjectId"
    );
    Ok(())
}

pub async fn run(args: MuteArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let redis = RedisHandle::connect(&global.redis_url)
        .await
        .context("cannot connect to Redis (--redis-url / KLAXON_REDIS_URL)")?;
    let now = Counter::new(redis.clone(), &global.namespace)
        .server_time_ms()
        .await?;
    let mutes = Mutes::new(redis, &global.namespace);
    match args.command {
        MuteCommand::Add(a) => {
            check_project(&a.project)?;
            let mut req = json!({"ruleId": a.rule, "groupHash": a.group});
            if let Some(u) = a.until {
                req["until"] = json!(u);
            }
            if let Some(f) = a.for_ {
                let secs = match f.trim().parse::<u64>() {
                    Ok(s) => s,
                    Err(_) => humantime::parse_duration(f.trim())
                        .with_context(|| format!("--for {f:?}: seconds or a duration like 2h"))?
                        .as_secs(),
                };
                req["for"] = json!(secs);
            }
            let id = format!("{:016x}", rand::random::<u64>());
            let mute = klaxon_api::mutes::mute_from_request(&req, now, id).map_err(|e| anyhow::anyhow!(e))?;
            mutes.add(&a.project, &mute).await?;
            let v = klaxon_api::mutes::to_json(&mute);
            println!(
                "muted {} until {}",
                mute.mute_id,
                v["until"].as_str().unwrap_or_default()
            );
        }
        MuteCommand::List(p) => {
            check_project(&p.project)?;
            let list = mutes.list(&p.project, now).await?;
            if list.is_empty() {
                println!("no active mutes");
            }
            for m in &list {
                let v = klaxon_api::mutes::to_json(m);
                println!(
                    "{}  until {}  rule {}  group {}",
                    m.mute_id,
                    v["until"].as_str().unwrap_or_default(),
                    m.rule_id.as_deref().unwrap_or("*"),
                    m.group_hash.as_deref().unwrap_or("*")
                );
            }
        }
        MuteCommand::Rm(a) => {
            check_project(&a.project)?;
            if !mutes.remove(&a.project, &a.mute_id).await? {
                anyhow::bail!("no mute {} in project {}", a.mute_id, a.project);
            }
            println!("removed mute {}", a.mute_id);
        }
    }
    Ok(ExitCode::SUCCESS)
}
