//! `klaxon explain`: what each rule of a project would do with an event, and why (the API's explain, from
//! the command line). Reads MongoDB and Redis; never counts.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use klaxon_core::{EventTask, Explanation};
use klaxon_counter::{RedisHandle, WindowCounter};
use klaxon_store::RuleStore;
use serde_json::json;

use crate::cli::{GlobalOpts, MuteLimitOpts, RuleLimitOpts};
use crate::exit::usage;
use crate::output::{self, Format, OutputArgs};

/// Options of `klaxon explain`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon explain --project 5e3eef0679fa3700a0198a49 --title \"TypeError: x is undefined\" --group 11da
  klaxon explain --project 5e3eef0679fa3700a0198a49 --title Boom --group g1 --new --user u42 -o json")]
pub struct ExplainArgs {
    /// The project (24-hex id).
    #[arg(long)]
    pub project: String,
    /// The event's title.
    #[arg(long)]
    pub title: String,
    /// The event's groupHash.
    #[arg(long)]
    pub group: String,
    /// The event is a first occurrence (isNew: true).
    #[arg(long)]
    pub new: bool,
    /// The event's user id (uniqueUsers rules).
    #[arg(long)]
    pub user: Option<String>,
    #[command(flatten, next_help_heading = "Limits per project")]
    pub rule_limits: RuleLimitOpts,
    #[command(flatten, next_help_heading = "Limits per project")]
    pub mute_limits: MuteLimitOpts,
    /// How `including` words compare when a rule has no `includingCaseSensitive`, as the workers' own
    /// `--including-case` (set the same value, e.g. through the same KLAXON_INCLUDING_CASE).
    #[arg(
        long,
        env = "KLAXON_INCLUDING_CASE",
        default_value = "insensitive",
        value_name = "CASE"
    )]
    pub including_case: klaxon_core::Case,
    /// `-o json` prints the API's answer, `{"rules": [...]}`; `-o ndjson` one verdict per line.
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: ExplainArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let mut event = json!({"title": args.title, "groupHash": args.group, "isNew": args.new});
    if let Some(u) = &args.user {
        event["user"] = json!(u);
    }
    let task = json!({"projectId": args.project, "event": event}).to_string();
    let event = EventTask::parse(task.as_bytes())
        .map_err(|e| usage(e.to_string()))?
        .event;
    let limits = crate::cli::limits(Some(&args.rule_limits), Some(&args.mute_limits))?;
    let store = RuleStore::connect(&global.mongo_url, &global.mongo_db())
        .await
        .context("cannot connect to MongoDB (--mongo-url / KLAXON_MONGO_URL)")?;
    let project = store.project(&args.project).await;
    store.close().await;
    let project = project?.with_context(|| {
        format!(
            "unknown project {}: it has no rules in MongoDB database `{}` (read from --mongo-db / \
             KLAXON_MONGO_DB, default: the namespace); for Hawk's rules, pass --mongo-db with Hawk's database",
            args.project,
            global.mongo_db()
        )
    })?;
    let redis = RedisHandle::connect(&global.redis_url)
        .await
        .context("cannot connect to Redis (--redis-url / KLAXON_REDIS_URL)")?;
    let counter = WindowCounter::new(redis.clone(), &global.namespace);
    let now = counter.server_time_ms().await?;
    let mutes = klaxon_counter::Mutes::new(redis, &global.namespace)
        .with_limit(limits.max_mutes)
        .list(&args.project, now)
        .await?
        .mutes;
    let explanation = Explanation::new(
        &project.notifications,
        &limits,
        &klaxon_core::RuleDefaults {
            including_case: args.including_case,
        },
        &event,
    );
    let verdicts = counter.explain(&project.project_id, explanation, &mutes).await?;
    // each (rule, group)'s open alert, as the API's explain shows it
    let rule_ids: Vec<&str> = verdicts.iter().map(|v| v.rule_id.as_str()).collect();
    let alerts = klaxon_api::rest::alerts::current_alerts(
        &klaxon_counter::Alerts::new(counter.redis().clone(), &global.namespace),
        &project.project_id,
        &event.group_hash,
        &rule_ids,
    )
    .await?;
    let format = args.output.format(Format::Json);
    if format == Format::Json {
        let rules = klaxon_api::rest::alerts::verdicts_json(&verdicts, &alerts);
        output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({ "rules": rules }))?
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let empty = format!("project {} has no rules", args.project);
    let with_alerts = klaxon_api::rest::alerts::verdicts_json(&verdicts, &alerts);
    output::emit(&output::list(
        format,
        &verdicts,
        &["RULE", "VERDICT", "COUNT WITH THIS EVENT", "REASON"],
        |v| {
            // one meaning in every verdict: the count with this event counted (explain counts nothing), of the
            // threshold
            let count = match (v.count, v.threshold) {
                (Some(c), Some(t)) => format!("{c} of {t}"),
                (Some(c), None) => c.to_string(),
                _ => "-".into(),
            };
            vec![v.rule_id.clone(), v.verdict.to_string(), count, v.reason.clone()]
        },
        |v| {
            let i = verdicts.iter().position(|x| std::ptr::eq(x, v)).unwrap_or(0);
            with_alerts.get(i).cloned().unwrap_or_else(|| v.to_json())
        },
        &empty,
    ))?;
    // below the table: the open alert of each (rule, group) that has one, and where the rule's reminders,
    // escalation and quiet hours stand
    if format == Format::Table {
        let lines: String = verdicts
            .iter()
            .zip(&alerts)
            .flat_map(|(v, a)| {
                let alert = a
                    .as_ref()
                    .map(klaxon_api::rest::alerts::current_words)
                    .into_iter();
                alert
                    .chain(klaxon_api::rest::alerts::on_call_words(v, a.as_ref()))
                    .map(|line| format!("rule {}: {line}\n", v.rule_id))
                    .collect::<Vec<_>>()
            })
            .collect();
        if !lines.is_empty() {
            output::emit(&format!("\n{lines}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
