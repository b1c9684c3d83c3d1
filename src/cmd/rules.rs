//! `klaxon rules …`: manage notification rules stored in MongoDB in Hawk's shape.
//!
//! Three steps, one module each: the flags (here, with the calls to the store), building and validating
//! rules before connecting ([`build`]: raw flags or an import file → a rule document → the core's
//! validator), and printing ([`print`]: a human-readable table or message by default, JSON with `--json` or
//! `-o`, never channel endpoints in tables: Slack webhook URLs are bearer secrets).

mod arm;
mod build;
mod print;

use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{ArgGroup, Args, Subcommand};
use klaxon_core::{RawRule, RuleProblem};
use klaxon_engine::after_store::Stored;
use klaxon_store::format::document_to_json;
use klaxon_store::RuleStore;
use serde_json::Value;

use crate::cli::{GlobalOpts, RuleLimitOpts};
use crate::output::{Format, OutputArgs};

/// `klaxon rules`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 100/1h --slack https://hooks.slack.com/services/T/B/X
  klaxon rules list -o json | jq '.[].rule._id'
  klaxon rules check                     # exit 1 when a rule has a problem
  klaxon rules export --file rules.json && klaxon rules import --file rules.json")]
pub struct RulesArgs {
    #[command(subcommand)]
    command: RulesCommand,
}

#[derive(Debug, Subcommand)]
enum RulesCommand {
    /// Add a rule to a project (the project document is created when missing).
    #[command(after_help = "\
Examples:
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --only-new --email dev@example.com
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 100/1h --window sliding --telegram -100123 --min-period 1m
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 50/1h --unique-users --webhook https://alerts.example.com/k --including db,timeout
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 500/5m --pagerduty $ROUTING_KEY --severity critical
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --only-new --discord https://discord.com/api/webhooks/123/abc
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 100/5m --slack $SLACK_URL --pagerduty $ROUTING_KEY \\
    --resolve-after 1h --renotify 30m/3 --quiet-hours \"mon-fri 22:00-07:00 Europe/Berlin\" --quiet-hours-bypass pagerduty
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 100/5m --slack $SLACK_URL \
    --escalate 15m:pagerduty=$ROUTING_KEY --escalate 1h:email=oncall-lead@example.com
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --no-events 1h --pagerduty $ROUTING_KEY")]
    Add(Box<AddArgs>),
    /// List stored rules with their status.
    #[command(after_help = "\
Examples:
  klaxon rules list
  klaxon rules list --project 5e3eef0679fa3700a0198a49 -o json
  klaxon rules list -o ndjson | grep INVALID")]
    List(ListArgs),
    /// Remove a rule.
    #[command(after_help = "\
Examples:
  klaxon rules rm 65f0c0ffee0000000000beef
  klaxon rules rm 65f0c0ffee0000000000beef --project 5e3eef0679fa3700a0198a49 --json")]
    Rm(RuleRef),
    /// Enable a rule.
    #[command(after_help = "\
Examples:
  klaxon rules enable 65f0c0ffee0000000000beef")]
    Enable(RuleRef),
    /// Disable a rule.
    #[command(after_help = "\
Examples:
  klaxon rules disable 65f0c0ffee0000000000beef --project 5e3eef0679fa3700a0198a49")]
    Disable(RuleRef),
    /// Write rules as JSON (the import format).
    #[command(after_help = "\
Examples:
  klaxon rules export > rules.json
  klaxon rules export --project 5e3eef0679fa3700a0198a49 --file project.json")]
    Export(ExportArgs),
    /// Replace the rules of the projects listed in a JSON file.
    #[command(after_help = "\
Examples:
  klaxon rules import --file examples/rules.json
  klaxon rules import --file rules.json --dry-run    # what would be stored; exit 1 on problems
  klaxon rules export | klaxon --namespace staging rules import --file -
  klaxon rules import --file rules.json --force      # store rules with problems too")]
    Import(ImportArgs),
    /// Validate every stored rule (or the rules of a file, before storing them); exits 1 when any has a problem.
    #[command(after_help = "\
Examples:
  klaxon rules check
  klaxon rules check --project 5e3eef0679fa3700a0198a49 -o json
  klaxon rules check --file rules.json               # before `rules import --file rules.json`")]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("kind").required(true).args(["seen_more", "only_new", "spike", "reappeared", "no_events"])))]
#[command(group(ArgGroup::new("channel").required(true).multiple(true).args(["slack", "telegram", "email", "webhook", "discord", "teams", "pagerduty"])))]
struct AddArgs {
    /// Project id (24 hex characters).
    #[arg(long)]
    project: String,
    /// Fire when a group is seen THRESHOLD times within PERIOD, e.g. `100/1h`, `5/90s`, `10/1h30m`.
    #[arg(long, value_name = "THRESHOLD/PERIOD")]
    seen_more: Option<String>,
    /// Fire on the first occurrence of each group.
    #[arg(long)]
    only_new: bool,
    /// SPIKE: fire once per BUCKET when a group's count in the bucket reaches FACTOR times its own baseline
    /// (the mean of its previous buckets), e.g. `5x/1h`, `2.5x/10m`.
    #[arg(long, value_name = "FACTORx/BUCKET")]
    spike: Option<String>,
    /// SPIKE: how many previous buckets form the baseline, 2 … 168 [default: 24].
    #[arg(long, requires = "spike", value_name = "N")]
    baseline_windows: Option<u64>,
    /// SPIKE: the least count of a bucket that can fire [default: 10].
    #[arg(long, requires = "spike", value_name = "N")]
    spike_threshold: Option<u64>,
    /// REAPPEARED: fire when a group is seen again after QUIET without events, e.g. `7d`, `12h`.
    #[arg(long, value_name = "QUIET")]
    reappeared: Option<String>,
    /// NO_EVENTS: fire when the project sends no event at all for QUIET (its events stopped arriving), e.g.
    /// `1h`, `30m` (10 s … 30 days); the alert resolves on the project's next event.
    #[arg(long, value_name = "QUIET")]
    no_events: Option<String>,
    /// How long an alert waits without a matching event before it resolves, e.g. `1h`; `0` or `never` = only by
    /// hand [default: the window for SEEN_MORE and SPIKE, never for the others].
    #[arg(long, value_name = "DURATION")]
    resolve_after: Option<String>,
    /// Remind while an alert is firing (not acknowledged, not resolved): every EVERY, at most MAX times, e.g.
    /// `30m/3`.
    #[arg(long, value_name = "EVERY/MAX")]
    renotify: Option<String>,
    /// Hold firings inside a local-time window, sent as one message when it ends: `DAYS FROM-TO TIMEZONE`, e.g.
    /// "mon-fri 22:00-07:00 Europe/Berlin", "sat,sun 00:00-24:00 UTC" (TO before FROM spans midnight; DAYS are
    /// the days a window starts on, `daily` for all). Repeatable.
    #[arg(long, value_name = "DAYS FROM-TO TZ")]
    quiet_hours: Vec<String>,
    /// A channel that is never held by --quiet-hours, e.g. `pagerduty`. Repeatable.
    #[arg(long, requires = "quiet_hours", value_name = "CHANNEL",
          value_parser = ["email", "telegram", "slack", "webhook", "loop", "discord", "teams", "pagerduty"])]
    quiet_hours_bypass: Vec<String>,
    /// An escalation step: while the alert is still firing AFTER it opened (e.g. `15m`), notify CHANNEL at
    /// ENDPOINT once, e.g. `15m:pagerduty=$ROUTING_KEY`. Repeatable: several channels with the same AFTER make one
    /// step; at most 5 steps.
    #[arg(long, value_name = "AFTER:CHANNEL=ENDPOINT")]
    escalate: Vec<String>,
    /// How SEEN_MORE counts [default: fixed].
    #[arg(long, value_parser = ["fixed", "sliding"])]
    window: Option<String>,
    /// SEEN_MORE counts distinct users (`event.user.id`) instead of events: `--seen-more 50/1h
    /// --unique-users` fires when 50 different users hit the error within the window; events without a
    /// user are not counted.
    #[arg(long, requires = "seen_more")]
    unique_users: bool,
    /// Slack incoming-webhook URL, or a channel id (C0123ABCD) to post through the Web API with KLAXON_SLACK_BOT_TOKEN.
    #[arg(long, value_name = "URL_OR_CHANNEL_ID")]
    slack: Option<String>,
    /// Telegram chat id (group ids are negative, e.g. -100123).
    #[arg(long, value_name = "CHAT_ID", allow_hyphen_values = true)]
    telegram: Option<String>,
    /// Email address(es), comma-separated.
    #[arg(long, value_name = "ADDRESSES")]
    email: Option<String>,
    /// Webhook URL.
    #[arg(long, value_name = "URL")]
    webhook: Option<String>,
    /// Discord webhook URL (https://discord.com/api/webhooks/<id>/<token>).
    #[arg(long, value_name = "URL")]
    discord: Option<String>,
    /// Microsoft Teams Workflows webhook URL (https; the retired Office 365 connector URLs do not work).
    #[arg(long, value_name = "URL")]
    teams: Option<String>,
    /// PagerDuty Events API v2 routing key (the integration key, 32 characters).
    #[arg(long, value_name = "ROUTING_KEY")]
    pagerduty: Option<String>,
    /// Severity of the PagerDuty alerts [default: error].
    #[arg(long, requires = "pagerduty", value_parser = ["critical", "error", "warning", "info"])]
    severity: Option<String>,
    /// Words (comma-separated), one of which the title must contain (case-insensitive).
    #[arg(long, value_delimiter = ',', value_name = "WORDS")]
    including: Vec<String>,
    /// Words (comma-separated), none of which the title may contain (case-insensitive).
    #[arg(long, value_delimiter = ',', value_name = "WORDS")]
    excluding: Vec<String>,
    /// Regex the title must match (repeat for "any of").
    #[arg(long = "pattern", value_name = "REGEX")]
    patterns: Vec<String>,
    /// Regex the title must not match (repeatable).
    #[arg(long = "exclude-pattern", value_name = "REGEX")]
    exclude_patterns: Vec<String>,
    /// Digest period of every channel, whole seconds (e.g. 60, 1m, 1h; 0 = one message per firing).
    #[arg(long, default_value = "0", value_parser = build::whole_seconds, value_name = "DURATION")]
    min_period: u64,
    /// Store the rule disabled.
    #[arg(long)]
    disabled: bool,
    /// Print the stored rule as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    writes: WriteArgs,
}

/// What the commands that store rules (`add`, `import`) check beyond validation.
#[derive(Debug, Args)]
struct WriteArgs {
    /// Endpoints on loopback/private addresses are expected (no warning on stderr).
    #[arg(long, env = "KLAXON_ALLOW_PRIVATE_ENDPOINTS", value_parser = clap::builder::BoolishValueParser::new())]
    allow_private_endpoints: bool,
    #[command(flatten, next_help_heading = "Limits per project")]
    limits: RuleLimitOpts,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only this project.
    #[arg(long)]
    project: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, Args)]
struct RuleRef {
    /// Rule id (24 hex characters).
    rule_id: String,
    /// Project holding the rule [default: searched in every project].
    #[arg(long)]
    project: Option<String>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ExportArgs {
    /// Only these projects (repeatable) [default: every project with rules].
    #[arg(long)]
    project: Vec<String>,
    /// Output file; `-` = stdout.
    #[arg(long, default_value = "-")]
    file: String,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// Input file (a JSON array of {"_id": projectId, "notifications": [...]}); `-` = stdin.
    #[arg(long)]
    file: String,
    /// Store rules even when some cannot be used (they are reported and skipped by the engine); never over a
    /// limit.
    #[arg(long)]
    force: bool,
    /// Validate and print what would be stored, store nothing (no MongoDB needed); exit 1 when a rule has a
    /// problem that makes it unusable.
    #[arg(long)]
    dry_run: bool,
    /// Print what was stored as JSON (the export format).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    writes: WriteArgs,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Only this project.
    #[arg(long)]
    project: Option<String>,
    /// Check the rules of this import file (`-` = stdin) instead of the stored ones: the same problems and fixes,
    /// before anything is stored (no MongoDB needed).
    #[arg(long, value_name = "FILE")]
    file: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten, next_help_heading = "Limits per project")]
    limits: RuleLimitOpts,
    /// The senders' budget of reminders per project per hour (`klaxon run --reminder-budget`): a project whose
    /// rules can send more is named (a note, not a problem). 0 = no budget.
    #[arg(long, env = "KLAXON_REMINDER_BUDGET", default_value_t = klaxon_core::priority::DEFAULT_REMINDER_BUDGET, help_heading = "Limits per project", value_name = "N")]
    reminder_budget: u32,
}

/// Runs `klaxon rules …`.
pub async fn run(args: RulesArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    // Validate what needs no server before connecting; wrong ids on the command line are usage errors.
    let ids: Vec<(&str, &str)> = match &args.command {
        RulesCommand::Rm(r) | RulesCommand::Enable(r) | RulesCommand::Disable(r) => {
            let mut ids = vec![("rule id", r.rule_id.as_str())];
            ids.extend(r.project.as_deref().map(|p| ("project id", p)));
            ids
        }
        RulesCommand::List(ListArgs { project, .. }) | RulesCommand::Check(CheckArgs { project, .. }) => {
            project
                .as_deref()
                .map(|p| ("project id", p))
                .into_iter()
                .collect()
        }
        RulesCommand::Export(a) => a.project.iter().map(|p| ("project id", p.as_str())).collect(),
        RulesCommand::Add(_) | RulesCommand::Import(_) => Vec::new(),
    };
    for (what, id) in ids {
        klaxon_store::format::parse_object_id(what, id).map_err(|e| crate::exit::usage(e.to_string()))?;
    }
    let limits = crate::cli::limits(
        match &args.command {
            RulesCommand::Add(a) => Some(&a.writes.limits),
            RulesCommand::Import(a) => Some(&a.writes.limits),
            RulesCommand::Check(a) => Some(&a.limits),
            _ => None,
        },
        None,
    )?;
    // Files checked or dry-run imported: nothing is stored, so MongoDB is not needed.
    match args.command {
        RulesCommand::Import(a) if a.dry_run => dry_run(&a, &limits),
        RulesCommand::Check(CheckArgs {
            file: Some(file),
            project,
            output,
            reminder_budget,
            ..
        }) => check_file(&file, project.as_deref(), &output, &limits, reminder_budget),
        stored => run_stored(stored, global, &limits).await,
    }
}

/// The `rules` subcommands that read or write the stored rules.
async fn run_stored(
    stored: RulesCommand,
    global: &GlobalOpts,
    limits: &klaxon_core::Limits,
) -> anyhow::Result<ExitCode> {
    let args = RulesArgs { command: stored };
    let add_rule = match &args.command {
        // Wrong flags: a usage error; over a limit (email recipients): exit 1, like import.
        RulesCommand::Add(a) => Some(build::build_rule(a, limits).map_err(|e| {
            if e.is::<build::OverLimit>() {
                e
            } else {
                crate::exit::usage(format!("{e:#}"))
            }
        })?),
        _ => None,
    };
    let import = match &args.command {
        RulesCommand::Import(a) => Some(build::read_import(a, limits)?),
        _ => None,
    };
    let db = global.mongo_db();
    let store = RuleStore::connect(&global.mongo_url, &db)
        .await
        .with_context(|| format!("cannot use MongoDB database `{db}`"))?;
    let result = command(&store, args.command, add_rule, import, limits, global).await;
    store.close().await;
    result
}

/// `rules import --dry-run`: validate, print what would be stored, store nothing; exit 1 when a rule is unusable
/// or the file is over a limit.
fn dry_run(a: &ImportArgs, limits: &klaxon_core::Limits) -> anyhow::Result<ExitCode> {
    let file = build::read_file(&a.file, limits)?;
    if a.json {
        print::imported(&file.projects, true)?;
    } else {
        print::would_store(&file)?;
    }
    if !file.warnings.is_empty() {
        eprintln!(
            "warning: would be stored with {} warning(s):\n{}",
            file.warnings.len(),
            build::listing(&file, &file.warnings)
        );
    }
    if !file.over_limit.is_empty() {
        eprintln!(
            "{}: {} problem(s) over a limit; nothing would be imported (a limit cannot be forced):\n{}",
            a.file,
            file.over_limit.len(),
            build::listing(&file, &file.over_limit)
        );
    }
    if file.fatal.is_empty() {
        return Ok(if file.over_limit.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(crate::exit::PROBLEMS)
        });
    }
    eprintln!(
        "{}: {} problem(s){}:\n{}",
        a.file,
        file.fatal.len(),
        if a.force {
            "; --force would store these rules anyway and the engine would skip them"
        } else {
            "; nothing would be imported (--force stores anyway)"
        },
        build::listing(&file, &file.fatal)
    );
    Ok(ExitCode::from(crate::exit::PROBLEMS))
}

/// `rules check --file F`: the rules of an import file checked like stored ones (the same problems and fixes).
fn check_file(
    name: &str,
    project: Option<&str>,
    output: &OutputArgs,
    limits: &klaxon_core::Limits,
    reminder_budget: u32,
) -> anyhow::Result<ExitCode> {
    let file = build::read_file(name, limits)?;
    let projects: Vec<(String, Vec<Value>)> = file
        .projects
        .iter()
        .map(|p| {
            (
                p.project_id.to_hex(),
                p.notifications.iter().map(document_to_json).collect(),
            )
        })
        .filter(|(p, _)| project.is_none_or(|want| want.eq_ignore_ascii_case(p)))
        .collect();
    if let Some(want) = project {
        if projects.is_empty() {
            bail!("{name} has no project {want}");
        }
    }
    let mut survey = survey_of(&projects, limits);
    for (_, p) in &mut survey.found {
        p.rule_id = p.rule_id.as_deref().map(|id| file.rule_name(id));
    }
    print::check(output.format(Format::Json), &survey, reminder_budget)?;
    Ok(if survey.found.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::PROBLEMS)
    })
}

/// One `rules` subcommand against a connected store.
async fn command(
    store: &RuleStore,
    command: RulesCommand,
    add_rule: Option<RawRule>,
    import: Option<Vec<klaxon_store::ProjectNotifications>>,
    limits: &klaxon_core::Limits,
    global: &GlobalOpts,
) -> anyhow::Result<ExitCode> {
    match command {
        RulesCommand::Add(a) => {
            let mut typed = add_rule.unwrap_or_default();
            let rule = serde_json::to_value(&typed)?;
            let id = store.add_rule(&a.project, &rule, limits.max_rules).await?;
            // The result first, then the warning about the rule as stored (its id is the store's).
            let mut stored = rule.clone();
            stored["_id"] = Value::String(id.clone());
            print::added(&a.project, &id, rule, a.json)?;
            if !a.writes.allow_private_endpoints {
                build::warn_private_endpoints(&a.project, &stored);
            }
            // the rule as stored, with the store's id, as the engine reads it
            typed.id = klaxon_core::rule::Field::Typed(klaxon_core::rule::RuleId::Hex(id));
            let rules = klaxon_core::ProjectRules {
                known: true,
                rules: typed.validate().map(|(r, _)| vec![r]).unwrap_or_default(),
                ..Default::default()
            };
            arm::after_store(
                global,
                &[Stored {
                    project_id: a.project.clone(),
                    rules,
                }],
            )
            .await;
        }
        RulesCommand::List(a) => {
            let projects = stored_projects(store, a.project.as_deref()).await?;
            let rules: Vec<(&String, &Value)> = projects
                .iter()
                .flat_map(|(p, rules)| rules.iter().map(move |r| (p, r)))
                .collect();
            print::rules(a.output.format(Format::Json), &rules)?;
        }
        RulesCommand::Rm(r) => {
            let project = store.remove_rule(r.project.as_deref(), &r.rule_id).await?;
            print::edited(&r, &project, "removed")?;
        }
        RulesCommand::Enable(r) => {
            let project = store.set_enabled(r.project.as_deref(), &r.rule_id, true).await?;
            print::edited(&r, &project, "enabled")?;
        }
        RulesCommand::Disable(r) => {
            let project = store.set_enabled(r.project.as_deref(), &r.rule_id, false).await?;
            print::edited(&r, &project, "disabled")?;
        }
        RulesCommand::Export(a) => {
            let projects = store.export(&a.project).await?;
            let text = print::exported(&projects)?;
            if a.file == "-" {
                crate::output::emit(&format!("{text}\n"))?;
            } else {
                std::fs::write(&a.file, text + "\n").with_context(|| format!("cannot write {}", a.file))?;
                let rules: usize = projects.iter().map(|p| p.notifications.len()).sum();
                eprintln!(
                    "exported {rules} rules of {} projects to {}",
                    projects.len(),
                    a.file
                );
            }
        }
        RulesCommand::Import(a) => {
            let projects = import.unwrap_or_default();
            store.replace(&projects).await?;
            print::imported(&projects, a.json)?;
            let stored: Vec<Stored> = projects
                .iter()
                .map(|p| Stored {
                    project_id: p.project_id.to_hex(),
                    rules: p.rules(),
                })
                .collect();
            arm::after_store(global, &stored).await;
        }
        RulesCommand::Check(a) => {
            let survey = survey(store, a.project.as_deref(), limits).await?;
            print::check(a.output.format(Format::Json), &survey, a.reminder_budget)?;
            if !survey.found.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The stored rules of one project (or every project), as JSON documents.
async fn stored_projects(
    store: &RuleStore,
    project: Option<&str>,
) -> anyhow::Result<Vec<(String, Vec<Value>)>> {
    Ok(match project {
        Some(p) => match store.project(p).await? {
            Some(sp) => vec![(sp.project_id, sp.notifications)],
            None => bail!("no project {p}"),
        },
        None => store
            .projects()
            .await?
            .iter()
            .map(|p| {
                (
                    p.project_id.to_hex(),
                    p.notifications.iter().map(document_to_json).collect(),
                )
            })
            .collect(),
    })
}

/// What `rules check` finds: problems per project, and channels nobody delivers.
pub struct Survey {
    /// Projects read.
    pub projects: usize,
    /// Rules read.
    pub rules: usize,
    /// (project, problem) for every problem.
    pub found: Vec<(String, RuleProblem)>,
    /// (project, channel, rules) for channels Klaxon does not deliver.
    pub ignored: Vec<(String, String, usize)>,
    /// (project, reminders) for projects with `renotify` rules: how many reminders one alert of each rule can
    /// send in an hour ([`klaxon_core::priority::reminders_per_hour`]), to compare with `--reminder-budget`.
    pub reminders: Vec<(String, u64)>,
}

/// Validates the stored rules (of one project, or all), like the engine reads them under `limits`: every
/// stored rule is checked, and a project over the rule limit is one more problem (the engine evaluates only
/// its first rules).
pub async fn survey(
    store: &RuleStore,
    project: Option<&str>,
    limits: &klaxon_core::Limits,
) -> anyhow::Result<Survey> {
    let projects = stored_projects(store, project).await?;
    Ok(survey_of(&projects, limits))
}

/// Validates rules (JSON documents per project), like the engine reads them under `limits`.
fn survey_of(projects: &[(String, Vec<Value>)], limits: &klaxon_core::Limits) -> Survey {
    let mut found = Vec::new();
    let mut ignored: Vec<(String, String, usize)> = Vec::new();
    let mut rules_seen = 0usize;
    let mut reminders = Vec::new();
    for (project, rules) in projects {
        rules_seen += rules.len();
        let compiled = klaxon_core::ProjectRules::from_notifications(Some(&Value::Array(rules.clone())));
        let per_hour: u64 = compiled
            .rules
            .iter()
            .map(klaxon_core::priority::reminders_per_hour)
            .sum();
        if per_hour > 0 {
            reminders.push((project.clone(), per_hour));
        }
        found.extend(
            limits
                .rule_count_problem(rules.len())
                .map(|p| (project.clone(), p)),
        );
        for rule in rules {
            found.extend(
                klaxon_store::format::rule_problems(rule, limits)
                    .into_iter()
                    .map(|p| (project.clone(), p)),
            );
            let ignored_here = RawRule::from_value(rule)
                .map(|r| r.ignored_channels())
                .unwrap_or_default();
            for ch in ignored_here {
                match ignored.iter_mut().find(|(p, c, _)| p == project && *c == ch) {
                    Some((_, _, n)) => *n += 1,
                    None => ignored.push((project.clone(), ch, 1)),
                }
            }
        }
    }
    Survey {
        projects: projects.len(),
        rules: rules_seen,
        found,
        ignored,
        reminders,
    }
}
