//! What `klaxon rules …` prints, all of it through [`crate::output`]: the rules table (read from the stored
//! documents, so that broken rules are shown too), the `check` report, and the one-line answers of the
//! editing commands. Tables never show channel endpoints (Slack webhook URLs are bearer secrets).

use std::fmt::Write as _;

use klaxon_core::rule::Field;
use klaxon_core::{ChannelKind, Limits, RawRule, RuleProblem};
use klaxon_store::format::{oids_to_hex, rule_problems};
use klaxon_store::{export_json, ProjectNotifications};
use mongodb::bson::oid::ObjectId;
use serde_json::{json, Value};

use super::{RuleRef, Survey};
use crate::output::{self, Format};

/// `rules add`: the stored rule (with the id the store gave it) or a sentence.
pub(super) fn added(project: &str, id: &str, rule: Value, as_json: bool) -> anyhow::Result<()> {
    let project = project.to_ascii_lowercase();
    if as_json {
        let mut stored = rule;
        stored["_id"] = Value::String(id.to_owned());
        output::emit(&format!("{}\n", json!({"projectId": project, "rule": stored})))
    } else {
        output::emit(&format!("added rule {id} to project {project}\n"))
    }
}

/// `rules rm|enable|disable`: what was done to which rule.
pub(super) fn edited(r: &RuleRef, project: &str, what: &str) -> anyhow::Result<()> {
    let rule_id = r.rule_id.to_ascii_lowercase();
    if r.json {
        output::emit(&format!(
            "{}\n",
            json!({"projectId": project, "ruleId": rule_id, "action": what})
        ))
    } else {
        output::emit(&format!("{what} rule {rule_id} of project {project}\n"))
    }
}

/// `rules export` to stdout: the import format.
pub(super) fn exported(projects: &[ProjectNotifications]) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(&export_json(projects))?)
}

/// `rules import`: what was stored, as the export format or one line per project.
pub(super) fn imported(projects: &[ProjectNotifications], as_json: bool) -> anyhow::Result<()> {
    if as_json {
        return output::emit(&format!("{}\n", exported(projects)?));
    }
    let mut text = String::new();
    for p in projects {
        let ids = rule_ids(p).map(|o| o.to_hex()).collect();
        project_line(&mut text, &p.project_id, "stored", "", ids);
    }
    output::emit(&text)
}

/// The ids of a project's rules, in order (those that have one).
fn rule_ids(p: &ProjectNotifications) -> impl Iterator<Item = ObjectId> + '_ {
    p.notifications.iter().filter_map(|d| d.get_object_id("_id").ok())
}

/// One line of `rules import`: `project <id>: <verb> <n> rule(s)<after>[: <rules>]`.
fn project_line(text: &mut String, project_id: &ObjectId, verb: &str, after: &str, rules: Vec<String>) {
    let colon = if rules.is_empty() { "" } else { ": " };
    let (n, rules) = (rules.len(), rules.join(", "));
    let _ = writeln!(
        text,
        "project {project_id}: {verb} {n} rule(s){after}{colon}{rules}"
    );
}

/// `rules import --dry-run`: one line per project, what would replace its stored rules.
pub(super) fn would_store(file: &super::build::ImportFile) -> anyhow::Result<()> {
    let mut text = String::new();
    for p in &file.projects {
        let names = rule_ids(p).map(|o| file.rule_name(&o.to_hex())).collect();
        let replacing = ", replacing its stored rules";
        project_line(&mut text, &p.project_id, "would store", replacing, names);
    }
    if file.projects.is_empty() {
        text.push_str("nothing to import: the file lists no project\n");
    }
    output::emit(&text)
}

/// `rules list`: one row (or JSON object) per stored rule, with its project.
pub(super) fn rules(format: Format, rules: &[(&String, &Value)]) -> anyhow::Result<()> {
    output::emit(&output::list(
        format,
        rules,
        &[
            "PROJECT", "RULE", "ENABLED", "WHAT", "WINDOW", "CHANNELS", "FILTERS", "STATUS",
        ],
        |(p, r)| row(p, r).to_vec(),
        |(p, r)| json!({"projectId": p, "rule": oids_to_hex((*r).clone()), "problems": rule_problems(r, &Limits::default())}),
        "no rules",
    ))
}

/// `rules check`: the problems as JSON, or a report for people with their fixes and a summary line.
pub(super) fn check(format: Format, survey: &Survey, reminder_budget: u32) -> anyhow::Result<()> {
    let Survey {
        projects,
        rules: rules_seen,
        found,
        ignored,
        reminders,
    } = survey;
    // not problems either: projects whose rules can send more reminders than the senders' budget lets through
    let over_budget: Vec<String> = reminders
        .iter()
        .filter(|(_, n)| reminder_budget > 0 && *n > u64::from(reminder_budget))
        .map(|(project, n)| {
            format!(
                "project {project}: one alert of each rule can send up to {n} reminders an hour, over the budget \
                 of {reminder_budget} per project (--reminder-budget); reminders past it are dropped and counted \
                 (klaxon_notifications_dropped_total{{reason=\"reminder_budget\"}})"
            )
        })
        .collect();
    if format != Format::Table {
        for line in &over_budget {
            eprintln!("note: {line}");
        }
        let problem = |(project, p): &(String, RuleProblem)| {
            let mut v = json!({"projectId": project, "ruleId": p.rule_id, "fatal": p.fatal, "problem": p.message, "fix": p.fix});
            if p.limit {
                v["limit"] = json!(true);
            }
            v
        };
        return output::emit(&output::list(format, found, &[], |_| Vec::new(), problem, ""));
    }
    let mut text = String::new();
    // not problems: channels Hawk offers that nobody delivers (Hawk has no sender for them either)
    for (project, ch, rules) in ignored {
        let _ = writeln!(
            text,
            "project {project}: channel `{ch}` is ignored in {rules} rule(s): Klaxon does not deliver it (nor does Hawk)"
        );
    }
    for line in &over_budget {
        let _ = writeln!(text, "{line}");
    }
    if found.is_empty() {
        let _ = writeln!(text, "{rules_seen} rule(s) in {projects} project(s): no problems");
    } else {
        for (project, p) in found {
            let whose = match (&p.rule_id, p.limit) {
                (Some(id), _) => format!("project {project} rule {id}"),
                // a bound of the whole project
                (None, true) => format!("project {project}"),
                (None, false) => format!("project {project} rule <no id>"),
            };
            let _ = writeln!(
                text,
                "{whose}: {}{}{}\n  fix: {}",
                if p.fatal { "[rule skipped] " } else { "" },
                if p.limit { "[over a limit] " } else { "" },
                p.message,
                p.fix
            );
        }
        let _ = writeln!(text, "{} problem(s) in {rules_seen} rule(s)", found.len());
    }
    output::emit(&text)
}

/// The id as the document holds it, whatever its shape.
fn rule_id_of(rule: &RawRule) -> String {
    match &rule.id {
        Field::Typed(id) => id.as_str().to_owned(),
        Field::Other(v) => v.to_string(),
        Field::Missing => "<no id>".into(),
    }
}

/// The strings of a list field; a list that also holds other values shows its strings.
fn strings(field: &Field<Vec<String>>) -> Vec<String> {
    match field {
        Field::Typed(items) => items.clone(),
        Field::Other(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// One table row per rule; read from the raw document so that broken rules are shown too.
fn row(project: &str, rule: &Value) -> [String; 8] {
    let (raw, compiled) = match RawRule::from_value(rule) {
        Ok(raw) => {
            let compiled = raw.validate();
            (raw, compiled)
        }
        Err(p) => (RawRule::default(), Err(p)),
    };
    let (status, what) = match compiled {
        Ok((r, problems)) => {
            // The kind, then what the rule sets of its alerts' life (resolveAfter, renotify, escalation, quiet hours).
            let what = r.summary();
            let status = match problems.first() {
                None => "ok".to_owned(),
                Some(p) => format!("warning: {}", p.message),
            };
            (status, what)
        }
        Err(p) => (
            format!("INVALID: {}", p.message),
            raw.what_to_receive.typed().cloned().unwrap_or_else(|| "?".into()),
        ),
    };
    let enabled = if raw.is_enabled.typed() == Some(&true) {
        "yes"
    } else {
        "no"
    };
    // Only SEEN_MORE (and Hawk's legacy ALL) counts in a window; SPIKE has buckets, ONLY_NEW and REAPPEARED none.
    let window = match raw.what_to_receive.typed().map(String::as_str) {
        Some("SEEN_MORE" | "ALL") => raw.window.typed().cloned().unwrap_or_else(|| "fixed".into()),
        _ => "-".into(),
    };
    let mut channels: Vec<String> = raw
        .channels
        .typed()
        .into_iter()
        .flat_map(|chs| chs.enabled())
        .filter(|(key, _)| ChannelKind::parse(key).is_some())
        .map(|(key, ch)| match ch.min_period.typed() {
            Some(p) if *p > 0 => format!("{key}({p}s)"),
            _ => key.to_owned(),
        })
        .collect();
    channels.sort();
    let mut filters = Vec::new();
    let inc = strings(&raw.including);
    let exc = strings(&raw.excluding);
    if !inc.is_empty() {
        filters.push(format!("+{}", inc.join(",")));
    }
    if !exc.is_empty() {
        filters.push(format!("-{}", exc.join(",")));
    }
    filters.extend(
        strings(&raw.including_patterns)
            .into_iter()
            .map(|p| format!("~/{p}/")),
    );
    filters.extend(
        strings(&raw.excluding_patterns)
            .into_iter()
            .map(|p| format!("!~/{p}/")),
    );
    [
        project.to_owned(),
        rule_id_of(&raw),
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

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_core::text::short_duration as period_text;

    #[test]
    fn periods() {
        assert_eq!(period_text(3_600_000), "1h");
        assert_eq!(period_text(90_000), "90s");
    }

    #[test]
    fn rows_show_broken_rules_too() {
        let id = "5e3eef0679fa3700a0198a4a";
        let s = |v: &[&str]| v.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let cases = [
            (
                json!({"_id": {"$oid": id}, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5,
                       "thresholdPeriod": 5_400_000, "window": "sliding", "uniqueUsers": true, "including": ["db"],
                       "excludingPatterns": ["^x"],
                       "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x", "minPeriod": 60},
                                    "email": {"isEnabled": true, "endpoint": "a@b.test", "minPeriod": 0},
                                    "webPush": {"isEnabled": true, "endpoint": "x"},
                                    "slack": {"isEnabled": false, "endpoint": "https://hooks.slack.com/x"}}}),
                s(&[
                    "p",
                    id,
                    "yes",
                    "SEEN_MORE 5 users/90m",
                    "sliding",
                    "email,webhook(60s)",
                    "+db !~/^x/",
                    "ok",
                ]),
            ),
            (
                json!({"_id": id, "isEnabled": "yes", "whatToReceive": "ONLY_NEW", "excluding": ["a", 1], "channels": {}}),
                s(&[
                    "p",
                    id,
                    "no",
                    "ONLY_NEW",
                    "-",
                    "-",
                    "-a",
                    "INVALID: `isEnabled` must be a boolean",
                ]),
            ),
            (
                json!({"_id": 7, "whatToReceive": 3}),
                s(&["p", "7", "no", "?", "-", "-", "-", "INVALID: rule has no `_id`"]),
            ),
            (
                json!("not a rule"),
                s(&[
                    "p",
                    "<no id>",
                    "no",
                    "?",
                    "-",
                    "-",
                    "-",
                    "INVALID: rule is not an object",
                ]),
            ),
            (
                json!({"_id": id, "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": {}}),
                s(&[
                    "p",
                    id,
                    "yes",
                    "ONLY_NEW",
                    "-",
                    "-",
                    "-",
                    "warning: rule is enabled but has no usable channel, so it never notifies",
                ]),
            ),
            (
                json!({"_id": id, "isEnabled": true, "whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000,
                       "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x"}}}),
                s(&[
                    "p",
                    id,
                    "yes",
                    "SPIKE 5x/1h over 24 (min 10)",
                    "-",
                    "webhook",
                    "-",
                    "ok",
                ]),
            ),
            (
                json!({"_id": id, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 2,
                       "thresholdPeriod": 60_000,
                       "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x"}}}),
                s(&["p", id, "yes", "SEEN_MORE 2/1m", "fixed", "webhook", "-", "ok"]),
            ),
        ];
        for (rule, want) in cases {
            assert_eq!(row("p", &rule).to_vec(), want, "{rule}");
        }
    }
}
