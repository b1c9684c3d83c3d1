//! `klaxon projects name --project P [NAME]`: a project's name as Klaxon keeps it (MongoDB, `projects.klaxonName`;
//! Hawk's own `name` is left as it is), the one messages, PagerDuty's `source`, the console and `klaxon alerts
//! list` show. Checked as `PUT /api/v1/projects/{id}` checks it; running processes are told to reload the project
//! (Redis pub/sub), as after a write through the API.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use klaxon_counter::RedisHandle;
use klaxon_store::RuleStore;

use crate::cli::GlobalOpts;
use crate::exit::{ensure_usage, usage};

/// Options of `klaxon projects`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon projects name --project 5e3eef0679fa3700a0198a49 \"Acme web shop\"
  klaxon projects name --project 5e3eef0679fa3700a0198a49")]
pub struct ProjectsArgs {
    #[command(subcommand)]
    pub command: ProjectsCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProjectsCommand {
    /// Set a project's name (1 to 100 characters), or print it without NAME.
    #[command(after_help = "\
Examples:
  klaxon projects name --project 5e3eef0679fa3700a0198a49 \"Acme web shop\"")]
    Name(NameArgs),
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    /// The name to set; without it the current name is printed.
    pub name: Option<String>,
}

pub async fn run(args: ProjectsArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let ProjectsCommand::Name(a) = args.command;
    ensure_usage!(
        klaxon_core::event::is_object_id(&a.project),
        "--project must be a 24-hex-digit ObjectId"
    );
    let project = a.project.to_ascii_lowercase();
    let name = a
        .name
        .as_deref()
        .map(klaxon_core::rule::check_project_name)
        .transpose()
        .map_err(usage)?;
    let store = RuleStore::connect(&global.mongo_url, &global.mongo_db())
        .await
        .context("cannot connect to MongoDB (--mongo-url / KLAXON_MONGO_URL)")?;
    let Some(name) = name else {
        let names = store.names(std::slice::from_ref(&project)).await;
        store.close().await;
        let names = names?;
        match names.get(&project).and_then(|n| n.shown()) {
            Some(n) => println!("{n}"),
            None => println!("project {project} has no name"),
        }
        return Ok(ExitCode::SUCCESS);
    };
    let stored = store.set_name(&project, &name).await;
    store.close().await;
    stored?;
    // Running processes reload the project now rather than at their --rules-ttl; not being able to tell them
    // is no failure (they reload on their TTL).
    match RedisHandle::connect(&global.redis_url).await {
        Ok(mut redis) => {
            if let Err(e) = klaxon_store::invalidation::publish(&mut redis, &global.namespace, &project).await
            {
                tracing::warn!(error = %e, "name stored; running processes see it after --rules-ttl");
            }
        }
        Err(e) => tracing::warn!(error = %e, "name stored; running processes see it after --rules-ttl"),
    }
    println!("project {project} is named {name}");
    Ok(ExitCode::SUCCESS)
}
