//! `klaxon rules …`: manage notification rules stored in MongoDB in Hawk's shape.
//!
//! Every subcommand validates its input completely before writing (raw flags → a rule document → the core's
//! validator), prints a human-readable table or message by default and JSON with `--json`, and never prints
//! channel endpoints in tables (Slack webhook URLs are bearer secrets).

use std::fmt::Write as _;
use std::io::Read as _;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{ArgGroup, Args, Subcommand};
use klaxon_core::{parse_rule_value, RuleProblem};
use klaxon_rules::format::{document_to_json, oids_to_hex};
use klaxon_rules::{export_json, parse_import, RuleStore};
use serde_json::{json, Map, Value};

use crate::cli::GlobalOpts;
use crate::output::{self, Format, OutputArgs};

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
  klaxon rules add --project 5e3eef0679fa3700a0198a49 --seen-more 50/1h --unique-users --webhook https://alerts.example.com/k --including db,timeout")]
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
  klaxon rules export | klaxon --namespace staging rules import --file -
  klaxon rules import --file rules.json --force      # store rules with problems too")]
    Import(ImportArgs),
    /// Validate every stored rule; exits 1 when any has a problem.
    #[command(after_help = "\
Examples:
  klaxon rules check
  klaxon rules check --project 5e3eef0679fa3700a0198a49 -o json")]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("kind").required(true).args(["seen_more", "only_new"])))]
#[command(group(ArgGroup::new("channel").required(true).multiple(true).args(["slack", "telegram", "email", "webhook"])))]
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
    /// How SEEN_MORE counts [default: fixed].
    #[arg(long, value_parser = ["fixed", "sliding"])]
    window: Option<String>,
    /// SEEN_MORE counts distinct users (`event.user.id`) instead of events: `--seen-more 50/1h
    /// --unique-users` fires when 50 different users hit the error within the window; events without a
    /// user are not counted.
    #[arg(long, requires = "seen_more")]
    unique_users: bool,
    /// Slack incoming-webhook URL.
    #[arg(long, value_name = "URL")]
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
    #[arg(long, default_value = "0", value_parser = whole_seconds, value_name = "DURATION")]
    min_period: u64,
    /// Store the rule disabled.
    #[arg(long)]
    disabled: bool,
    /// Print the stored rule as JSON.
    #[arg(long)]
    json: bool,
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
    /// Store rules even when some cannot be used (they are reported and skipped by the engine).
    #[arg(long)]
    force: bool,
    /// Print what was stored as JSON (the export format).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Only this project.
    #[arg(long)]
    project: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
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
        klaxon_rules::format::parse_object_id(what, id).map_err(|e| crate::exit::usage(e.to_string()))?;
    }
    let add_rule = match &args.command {
        // Wrong flags: a usage error.
        RulesCommand::Add(a) => Some(build_rule(a).map_err(|e| crate::exit::usage(format!("{e:#}")))?),
        _ => None,
    };
    let import = match &args.command {
        RulesCommand::Import(a) => Some(read_import(a)?),
        _ => None,
    };
    let db = global.mongo_db();
    let store = RuleStore::connect(&global.mongo_url, &db)
        .await
        .with_context(|| format!("cannot use MongoDB database `{db}`"))?;
    let result = command(&store, args.command, add_rule, import).await;
    store.close().await;
    result
}

/// One `rules` subcommand against a connected store.
async fn command(
    store: &RuleStore,
    command: RulesCommand,
    add_rule: Option<Value>,
    import: Option<Vec<klaxon_rules::ProjectNotifications>>,
) -> anyhow::Result<ExitCode> {
    match command {
        RulesCommand::Add(a) => {
            let rule = add_rule.unwrap_or_default();
            let id = store.add_rule(&a.project, &rule).await?;
            if a.json {
                let mut stored = rule;
                stored["_id"] = Value::String(id.clone());
                println!(
                    "{}",
                    json!({"projectId": a.project.to_ascii_lowercase(), "rule": stored})
                );
            } else {
                println!("added rule {id} to project {}", a.project.to_ascii_lowercase());
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::List(a) => list(store, a).await,
        RulesCommand::Rm(r) => {
            let project = store.remove_rule(r.project.as_deref(), &r.rule_id).await?;
            report_edit(&r, &project, "removed");
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Enable(r) => {
            let project = store.set_enabled(r.project.as_deref(), &r.rule_id, true).await?;
            report_edit(&r, &project, "enabled");
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Disable(r) => {
            let project = store.set_enabled(r.project.as_deref(), &r.rule_id, false).await?;
            report_edit(&r, &project, "disabled");
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Export(a) => {
            let projects = store.export(&a.project).await?;
            let text = serde_json::to_string_pretty(&export_json(&projects))?;
            if a.file == "-" {
                println!("{text}");
            } else {
                std::fs::write(&a.file, text + "\n").with_context(|| format!("cannot write {}", a.file))?;
                let rules: usize = projects.iter().map(|p| p.notifications.len()).sum();
                eprintln!(
                    "exported {rules} rules of {} projects to {}",
                    projects.len(),
                    a.file
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Import(a) => {
            let projects = import.unwrap_or_default();
            store.replace(&projects).await?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&export_json(&projects))?);
            } else {
                for p in &projects {
                    let ids: Vec<String> = p
                        .notifications
                        .iter()
                        .filter_map(|d| d.get_object_id("_id").ok().map(|o| o.to_hex()))
                        .collect();
                    println!(
                        "project {}: stored {} rule(s){}{}",
                        p.project_id,
                        ids.len(),
                        if ids.is_empty() { "" } else { ": " },
                        ids.join(", ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Check(a) => check(store, a).await,
    }
}

fn report_edit(r: &RuleRef, project: &str, what: &str) {
    if r.json {
        println!(
            "{}",
            json!({"projectId": project, "ruleId": r.rule_id.to_ascii_lowercase(), "action": what})
        );
    } else {
        println!(
            "{what} rule {} of project {project}",
            r.rule_id.to_ascii_lowercase()
        );
    }
}

/// Parses `1h`, `90s`, `1h30m`, `500ms`, `2d` into milliseconds.
fn parse_period_ms(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let mut total: u64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        bail!("empty period");
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            bail!("period {s:?}: expected a number, e.g. 1h, 30m, 90s");
        }
        let n: u64 = rest[..digits]
            .parse()
            .with_context(|| format!("period {s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let ms = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => bail!("period {s:?} needs a unit (ms, s, m, h, d), e.g. 1h"),
            other => bail!("period {s:?}: unknown unit {other:?} (use ms, s, m, h or d)"),
        };
        total = n
            .checked_mul(ms)
            .and_then(|v| total.checked_add(v))
            .with_context(|| format!("period {s:?} is too long"))?;
    }
    Ok(total)
}

/// `--min-period`: a duration in whole seconds (a plain number is seconds, as Hawk's `minPeriod` field).
fn whole_seconds(s: &str) -> Result<u64, String> {
    let d = crate::cli::duration_secs(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("`{}` is not a whole number of seconds", s.trim()));
    }
    Ok(d.as_secs())
}

/// Parses `THRESHOLD/PERIOD`.
fn parse_seen_more(s: &str) -> anyhow::Result<(u64, u64)> {
    let Some((t, p)) = s.split_once('/') else {
        bail!("--seen-more {s:?}: expected THRESHOLD/PERIOD, e.g. 100/1h");
    };
    let threshold: u64 = t
        .trim()
        .parse()
        .with_context(|| format!("--seen-more {s:?}: threshold must be a whole number ≥ 1"))?;
    let period = parse_period_ms(p).with_context(|| format!("--seen-more {s:?}"))?;
    Ok((threshold, period))
}

fn clean(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Flags → a rule document in Hawk's shape, validated by the core exactly as the engine will read it.
fn build_rule(a: &AddArgs) -> anyhow::Result<Value> {
    klaxon_rules::format::parse_object_id("project id", &a.project)?;
    let mut rule = Map::new();
    rule.insert("isEnabled".into(), json!(!a.disabled));
    match &a.seen_more {
        Some(s) => {
            let (threshold, period) = parse_seen_more(s)?;
            rule.insert("whatToReceive".into(), json!("SEEN_MORE"));
            rule.insert("threshold".into(), json!(threshold));
            rule.insert("thresholdPeriod".into(), json!(period));
        }
        None => {
            rule.insert("whatToReceive".into(), json!("ONLY_NEW"));
        }
    }
    if let Some(w) = &a.window {
        rule.insert("window".into(), json!(w));
    }
    if a.unique_users {
        rule.insert("uniqueUsers".into(), json!(true));
    }
    rule.insert("including".into(), json!(clean(&a.including)));
    rule.insert("excluding".into(), json!(clean(&a.excluding)));
    if !a.patterns.is_empty() {
        rule.insert("includingPatterns".into(), json!(a.patterns));
    }
    if !a.exclude_patterns.is_empty() {
        rule.insert("excludingPatterns".into(), json!(a.exclude_patterns));
    }
    let mut channels = Map::new();
    for (key, endpoint) in [
        ("email", &a.email),
        ("telegram", &a.telegram),
        ("slack", &a.slack),
        ("webhook", &a.webhook),
    ] {
        if let Some(e) = endpoint {
            if e.trim().is_empty() {
                bail!("--{key} needs a non-empty value");
            }
            channels.insert(
                key.into(),
                json!({"isEnabled": true, "endpoint": e.trim(), "minPeriod": a.min_period}),
            );
        }
    }
    rule.insert("channels".into(), Value::Object(channels));
    let rule = Value::Object(rule);
    // Validate with a placeholder id: the store assigns the real one.
    let mut probe = rule.clone();
    probe["_id"] = json!("000000000000000000000000");
    match parse_rule_value(&probe) {
        Ok((_, problems)) if problems.is_empty() => Ok(rule),
        Ok((_, problems)) => bail!("{}", describe(&problems)),
        Err(p) => bail!("{} (fix: {})", p.message, p.fix),
    }
}

use klaxon_rules::format::rule_problems as problems_of;

fn describe(problems: &[RuleProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{} (fix: {})", p.message, p.fix))
        .collect::<Vec<_>>()
        .join("; ")
}

fn read_import(a: &ImportArgs) -> anyhow::Result<Vec<klaxon_rules::ProjectNotifications>> {
    let text = if a.file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read stdin")?;
        s
    } else {
        std::fs::read_to_string(&a.file).with_context(|| format!("cannot read {}", a.file))?
    };
    let projects = parse_import(&text).with_context(|| format!("{}: nothing imported", a.file))?;
    let problems = klaxon_rules::format::import_problems(&projects);
    // Import refuses only what the engine cannot use (fatal problems). A rule that is valid but cannot notify yet
    // (Hawk's default rule with every channel disabled) is stored, with a warning.
    let (problems, warnings): (Vec<_>, Vec<_>) = problems.into_iter().partition(|(_, p)| p.fatal);
    if !warnings.is_empty() {
        let mut msg = String::new();
        for (project, p) in &warnings {
            let _ = writeln!(msg, "  project {project}: {p}");
        }
        eprintln!("warning: stored with {} warning(s):\n{msg}", warnings.len());
    }
    if !problems.is_empty() {
        let mut msg = String::new();
        for (project, p) in &problems {
            let _ = writeln!(msg, "  project {project}: {p}");
        }
        if a.force {
            eprintln!("storing rules with problems (--force):\n{msg}");
        } else {
            bail!(
                "{}: {} problem(s), nothing imported (use --force to store anyway):\n{msg}",
                a.file,
                problems.len()
            );
        }
    }
    Ok(projects)
}

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

fn rule_id_of(rule: &Value) -> String {
    match rule.get("_id") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v
            .get("$oid")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string()),
        None => "<no id>".into(),
    }
}

fn period_text(ms: u64) -> String {
    match ms {
        m if m % 86_400_000 == 0 => format!("{}d", m / 86_400_000),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1000 == 0 => format!("{}s", m / 1000),
        m => format!("{m}ms"),
    }
}

fn strings(rule: &Value, field: &str) -> Vec<String> {
    rule.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// One table row per rule; read from the raw document so that broken rules are shown too.
fn row(project: &str, rule: &Value) -> [String; 8] {
    let (status, what) = match parse_rule_value(rule) {
        Ok((r, problems)) => {
            let what = match r.what {
                klaxon_core::WhatToReceive::OnlyNew => "ONLY_NEW".to_owned(),
                klaxon_core::WhatToReceive::SeenMore { threshold, period_ms } if r.unique_users => {
                    format!("SEEN_MORE {threshold} users/{}", period_text(period_ms))
                }
                klaxon_core::WhatToReceive::SeenMore { threshold, period_ms } => {
                    format!("SEEN_MORE {threshold}/{}", period_text(period_ms))
                }
            };
            let status = match problems.first() {
                None => "ok".to_owned(),
                Some(p) => format!("warning: {}", p.message),
            };
            (status, what)
        }
        Err(p) => (
            format!("INVALID: {}", p.message),
            rule.get("whatToReceive")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
        ),
    };
    let enabled = match rule.get("isEnabled").and_then(Value::as_bool) {
        Some(true) => "yes",
        _ => "no",
    };
    let window = rule
        .get("window")
        .and_then(Value::as_str)
        .unwrap_or("fixed")
        .to_owned();
    let mut channels = Vec::new();
    if let Some(Value::Object(chs)) = rule.get("channels") {
        for (key, ch) in chs {
            if klaxon_core::ChannelKind::parse(key).is_none() {
                continue;
            }
            if ch.get("isEnabled").and_then(Value::as_bool) == Some(true) {
                match ch.get("minPeriod").and_then(Value::as_u64) {
                    Some(p) if p > 0 => channels.push(format!("{key}({p}s)")),
                    _ => channels.push(key.clone()),
                }
            }
        }
    }
    channels.sort();
    let mut filters = Vec::new();
    let inc = strings(rule, "including");
    let exc = strings(rule, "excluding");
    if !inc.is_empty() {
        filters.push(format!("+{}", inc.join(",")));
    }
    if !exc.is_empty() {
        filters.push(format!("-{}", exc.join(",")));
    }
    filters.extend(
        strings(rule, "includingPatterns")
            .into_iter()
            .map(|p| format!("~/{p}/")),
    );
    filters.extend(
        strings(rule, "excludingPatterns")
            .into_iter()
            .map(|p| format!("!~/{p}/")),
    );
    [
        project.to_owned(),
        rule_id_of(rule),
        enabled.to_owned(),
        what,
        window,
        if channels.is_empty() {
            "-".into()
        } else {
            channels.join(",")
        },
        if filters.is_empty() {
            "-".into()
        } else {
            filters.join(" ")
        },
        status,
    ]
}

async fn list(store: &RuleStore, a: ListArgs) -> anyhow::Result<ExitCode> {
    let projects = stored_projects(store, a.project.as_deref()).await?;
    let rules: Vec<(&String, &Value)> = projects
        .iter()
        .flat_map(|(p, rules)| rules.iter().map(move |r| (p, r)))
        .collect();
    output::emit(&output::list(
        a.output.format(Format::Json),
        &rules,
        &[
            "PROJECT", "RULE", "ENABLED", "WHAT", "WINDOW", "CHANNELS", "FILTERS", "STATUS",
        ],
        |(p, r)| row(p, r).to_vec(),
        |(p, r)| json!({"projectId": p, "rule": oids_to_hex((*r).clone()), "problems": problems_of(r)}),
        "no rules",
    ))?;
    Ok(ExitCode::SUCCESS)
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
}

/// Validates the stored rules (of one project, or all), like the engine reads them.
pub async fn survey(store: &RuleStore, project: Option<&str>) -> anyhow::Result<Survey> {
    let projects = stored_projects(store, project).await?;
    let mut found = Vec::new();
    let mut ignored: Vec<(String, String, usize)> = Vec::new();
    let mut rules_seen = 0usize;
    for (project, rules) in &projects {
        rules_seen += rules.len();
        for rule in rules {
            found.extend(problems_of(rule).into_iter().map(|p| (project.clone(), p)));
            let ignored_here = klaxon_core::RawRule::from_value(rule)
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
    Ok(Survey {
        projects: projects.len(),
        rules: rules_seen,
        found,
        ignored,
    })
}

async fn check(store: &RuleStore, a: CheckArgs) -> anyhow::Result<ExitCode> {
    let Survey {
        projects,
        rules: rules_seen,
        found,
        ignored,
    } = survey(store, a.project.as_deref()).await?;
    let format = a.output.format(Format::Json);
    if format != Format::Table {
        let problem = |(project, p): &(String, RuleProblem)| json!({"projectId": project, "ruleId": p.rule_id, "fatal": p.fatal, "problem": p.message, "fix": p.fix});
        output::emit(&output::list(format, &found, &[], |_| Vec::new(), problem, ""))?;
    } else {
        // A report for people: problems with their fixes, then a summary line.
        let mut text = String::new();
        // not problems: channels Hawk offers that nobody delivers (Hawk has no sender for them either)
        for (project, ch, rules) in &ignored {
            let _ = writeln!(
                text,
                "project {project}: channel `{ch}` is ignored in {rules} rule(s): Klaxon does not deliver it (nor does Hawk)"
            );
        }
        if found.is_empty() {
            let _ = writeln!(text, "{rules_seen} rule(s) in {projects} project(s): no problems");
        } else {
            for (project, p) in &found {
                let _ = writeln!(
                    text,
                    "project {project} rule {}: {}{}\n  fix: {}",
                    p.rule_id.as_deref().unwrap_or("<no id>"),
                    if p.fatal { "[rule skipped] " } else { "" },
                    p.message,
                    p.fix
                );
            }
            let _ = writeln!(text, "{} problem(s) in {rules_seen} rule(s)", found.len());
        }
        output::emit(&text)?;
    }
    Ok(if found.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods() {
        let ok = [
            ("1h", 3_600_000),
            ("90s", 90_000),
            ("1h30m", 5_400_000),
            ("500ms", 500),
            ("2d", 172_800_000),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_period_ms(s).expect(s), ms, "{s}");
        }
        for bad in ["", "1", "h", "1y", "1h30", "99999999999999999999s"] {
            assert!(parse_period_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seen_more("100/1h").expect("valid"), (100, 3_600_000));
        assert!(parse_seen_more("100").is_err());
        assert!(parse_seen_more("x/1h").is_err());
        assert_eq!(period_text(3_600_000), "1h");
        assert_eq!(period_text(90_000), "90s");
    }
}
