//! Building rules before connecting: `rules add` flags become a [`RawRule`] in Hawk's shape and `rules import`
//! files become projects, both validated by the core exactly as the engine will read them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read as _;

use anyhow::{bail, Context as _};
use klaxon_core::oncall::{RawEscalationStep, RawQuietWindow, RawRenotify, WEEKDAYS};
use klaxon_core::rule::{Channels, Field, RawChannel, RuleId};
use klaxon_core::{RawRule, RuleProblem};
use klaxon_store::{parse_import, ProjectNotifications};
use mongodb::bson::oid::ObjectId;

use super::{AddArgs, ImportArgs};

/// Parses `1h`, `90s`, `1h30m`, `500ms`, `2d` into milliseconds.
pub(super) fn parse_period_ms(s: &str) -> anyhow::Result<u64> {
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
pub(super) fn whole_seconds(s: &str) -> Result<u64, String> {
    let d = crate::cli::duration_secs(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("`{}` is not a whole number of seconds", s.trim()));
    }
    Ok(d.as_secs())
}

/// Parses `THRESHOLD/PERIOD`.
pub(super) fn parse_seen_more(s: &str) -> anyhow::Result<(u64, u64)> {
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

/// Parses `FACTORx/BUCKET` (`5x/1h`, `2.5x/10m`; the `x` may be left out) into (factor, bucket ms).
pub(super) fn parse_spike(s: &str) -> anyhow::Result<(f64, u64)> {
    let Some((f, b)) = s.split_once('/') else {
        bail!("--spike {s:?}: expected FACTORx/BUCKET, e.g. 5x/1h");
    };
    let f = f.trim();
    let factor: f64 = f
        .strip_suffix(['x', 'X', '×'])
        .unwrap_or(f)
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite())
        .with_context(|| format!("--spike {s:?}: the factor must be a number, e.g. 5x"))?;
    let bucket = parse_period_ms(b).with_context(|| format!("--spike {s:?}"))?;
    Ok((factor, bucket))
}

/// Parses `--resolve-after`: a period (`1h`), or `0` / `never` for an alert resolved only by hand.
pub(super) fn parse_resolve_after(s: &str) -> anyhow::Result<u64> {
    match s.trim() {
        "0" | "never" => Ok(0),
        p => parse_period_ms(p)
            .with_context(|| format!("--resolve-after {s:?}: expected a period (e.g. 1h) or never")),
    }
}

/// Parses `--renotify EVERY/MAX` (`30m/3`) into `renotify`.
pub(super) fn parse_renotify(s: &str) -> anyhow::Result<RawRenotify> {
    let Some((every, max)) = s.split_once('/') else {
        bail!("--renotify {s:?}: expected EVERY/MAX, e.g. 30m/3 (every 30 minutes, at most 3 times)");
    };
    let every = parse_period_ms(every).with_context(|| format!("--renotify {s:?}"))?;
    let max: u64 = max
        .trim()
        .parse()
        .with_context(|| format!("--renotify {s:?}: MAX must be a whole number, e.g. 3"))?;
    Ok(RawRenotify {
        every: Field::Typed(every),
        max: Field::Typed(max),
        ..RawRenotify::default()
    })
}

/// Parses one `--quiet-hours` value, `DAYS FROM-TO TIMEZONE` ("mon-fri 22:00-07:00 Europe/Berlin"; DAYS a
/// comma-separated list of days and ranges, `daily`, or left out for every day), into a window of `quietHours`.
/// The times and the time zone are checked by the core, with the rule.
pub(super) fn parse_quiet_hours(s: &str) -> anyhow::Result<RawQuietWindow> {
    const FORMAT: &str = "expected DAYS FROM-TO TIMEZONE, e.g. \"mon-fri 22:00-07:00 Europe/Berlin\"";
    let parts: Vec<&str> = s.split_whitespace().collect();
    // "HH:MM-HH:MM" (or "HH-HH"): what FROM-TO looks like, so a value that ends with it lacks its time zone
    let times_like = |p: &str| {
        p.split_once('-').is_some_and(|(a, b)| {
            a.starts_with(|c: char| c.is_ascii_digit()) && b.starts_with(|c: char| c.is_ascii_digit())
        })
    };
    if parts.last().is_some_and(|p| times_like(p)) && parts.len() <= 2 {
        bail!(
            "--quiet-hours {s:?}: the time zone is missing: add an IANA name after the times, e.g. \"{} Europe/Berlin\" \
             or \"{} UTC\"",
            s.trim(),
            s.trim()
        );
    }
    let (days, times, tz) = match parts.as_slice() {
        [days, times, tz] => (Some(*days), *times, *tz),
        [times, tz] => (None, *times, *tz),
        _ => bail!("--quiet-hours {s:?}: {FORMAT}"),
    };
    let Some((from, to)) = times.split_once('-') else {
        bail!("--quiet-hours {s:?}: {times:?} is not FROM-TO (e.g. 22:00-07:00); {FORMAT}");
    };
    let days = match days {
        None | Some("daily") => None,
        Some(spec) => Some(parse_days(spec).with_context(|| format!("--quiet-hours {s:?}"))?),
    };
    Ok(RawQuietWindow {
        days: days.map_or(Field::Missing, Field::Typed),
        from: Field::Typed(from.to_owned()),
        to: Field::Typed(to.to_owned()),
        timezone: Field::Typed(tz.to_owned()),
        ..RawQuietWindow::default()
    })
}

/// The channel keys a rule (and an escalation step) may name.
const CHANNEL_KEYS: [&str; 8] = [
    "email",
    "telegram",
    "slack",
    "loop",
    "webhook",
    "discord",
    "teams",
    "pagerduty",
];

/// Parses the `--escalate AFTER:CHANNEL=ENDPOINT` values into `escalation`: one step per AFTER (in the order
/// first given), each with its channels (enabled, `minPeriod` 0: a step is sent once). The core checks the
/// rest (at most 5 steps, `after` in range, endpoints) with the rule.
pub(super) fn parse_escalation(values: &[String]) -> anyhow::Result<Vec<Field<RawEscalationStep>>> {
    const FORMAT: &str = "expected AFTER:CHANNEL=ENDPOINT, e.g. 15m:pagerduty=<routing key>";
    let mut steps: Vec<(u64, Channels)> = Vec::new();
    for v in values {
        let Some((after, target)) = v.split_once(':') else {
            bail!("--escalate {v:?}: {FORMAT}");
        };
        let after = parse_period_ms(after).with_context(|| format!("--escalate {v:?}: AFTER"))?;
        let Some((channel, endpoint)) = target.split_once('=') else {
            bail!("--escalate {v:?}: {FORMAT}");
        };
        let channel = channel.trim();
        if !CHANNEL_KEYS.contains(&channel) {
            bail!(
                "--escalate {v:?}: unknown channel {channel:?}; use one of {}",
                CHANNEL_KEYS.join(", ")
            );
        }
        if endpoint.trim().is_empty() {
            bail!("--escalate {v:?}: ENDPOINT is empty; {FORMAT}");
        }
        let i = match steps.iter().position(|(a, _)| *a == after) {
            Some(i) => i,
            None => {
                steps.push((after, Channels::default()));
                steps.len() - 1
            }
        };
        steps[i]
            .1
            .insert(channel, Field::Typed(RawChannel::enabled(endpoint.trim(), 0)));
    }
    Ok(steps
        .into_iter()
        .map(|(after, channels)| {
            Field::Typed(RawEscalationStep {
                after: Field::Typed(after),
                channels: Field::Typed(channels),
                ..RawEscalationStep::default()
            })
        })
        .collect())
}

/// `mon-fri`, `sat,sun`, `mon,wed-fri`, `fri-mon` (a range may wrap past Sunday) → the days in week order.
fn parse_days(spec: &str) -> anyhow::Result<Vec<String>> {
    let day = |d: &str| {
        klaxon_core::oncall::weekday(d)
            .with_context(|| format!("unknown day {d:?}: use mon, tue, wed, thu, fri, sat, sun or daily"))
    };
    let mut on = [false; 7];
    for item in spec.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                let mut d = a;
                loop {
                    on[d] = true;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => on[day(item)?] = true,
        }
    }
    Ok(WEEKDAYS
        .iter()
        .zip(on)
        .filter(|(_, on)| *on)
        .map(|(d, _)| (*d).to_owned())
        .collect())
}

fn clean(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

/// A rule or an import over a per-project limit (`klaxon_core::Limits`): exit 1, not a usage error, and never
/// stored, `--force` or not.
#[derive(Debug)]
pub(super) struct OverLimit(pub String);

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverLimit {}

/// Flags → a rule in Hawk's shape (no `_id`: the store assigns it), validated by the core exactly as the
/// engine will read it under `limits` (an email channel over the recipient limit is an [`OverLimit`]).
pub(super) fn build_rule(a: &AddArgs, limits: &klaxon_core::Limits) -> anyhow::Result<RawRule> {
    klaxon_store::format::parse_object_id("project id", &a.project)?;
    let mut rule = RawRule {
        is_enabled: Field::Typed(!a.disabled),
        ..RawRule::default()
    };
    match &a.seen_more {
        Some(s) => {
            let (threshold, period) = parse_seen_more(s)?;
            rule.what_to_receive = Field::Typed("SEEN_MORE".into());
            rule.threshold = Field::Typed(threshold);
            rule.threshold_period = Field::Typed(period);
        }
        None => rule.what_to_receive = Field::Typed("ONLY_NEW".into()),
    }
    if let Some(s) = &a.spike {
        let (factor, bucket) = parse_spike(s)?;
        rule.what_to_receive = Field::Typed("SPIKE".into());
        rule.threshold_period = Field::Typed(bucket);
        rule.factor = Field::Typed(factor);
        if let Some(n) = a.baseline_windows {
            rule.baseline_windows = Field::Typed(n);
        }
        if let Some(n) = a.spike_threshold {
            rule.threshold = Field::Typed(n);
        }
    }
    if let Some(q) = &a.reappeared {
        let quiet = parse_period_ms(q).with_context(|| format!("--reappeared {q:?}"))?;
        rule.what_to_receive = Field::Typed("REAPPEARED".into());
        rule.quiet_period = Field::Typed(quiet);
    }
    if let Some(q) = &a.no_events {
        let quiet = parse_period_ms(q).with_context(|| format!("--no-events {q:?}"))?;
        rule.what_to_receive = Field::Typed("NO_EVENTS".into());
        rule.quiet_period = Field::Typed(quiet);
    }
    if let Some(w) = &a.window {
        rule.window = Field::Typed(w.clone());
    }
    if let Some(r) = &a.resolve_after {
        rule.resolve_after = Field::Typed(parse_resolve_after(r)?);
    }
    if let Some(r) = &a.renotify {
        rule.renotify = Field::Typed(parse_renotify(r)?);
    }
    if !a.quiet_hours.is_empty() {
        let windows = a
            .quiet_hours
            .iter()
            .map(|q| parse_quiet_hours(q).map(Field::Typed))
            .collect::<anyhow::Result<Vec<_>>>()?;
        rule.quiet_hours = Field::Typed(windows);
    }
    if !a.quiet_hours_bypass.is_empty() {
        rule.quiet_hours_bypass = Field::Typed(a.quiet_hours_bypass.clone());
    }
    if !a.escalate.is_empty() {
        rule.escalation = Field::Typed(parse_escalation(&a.escalate)?);
    }
    if a.unique_users {
        rule.unique_users = Field::Typed(true);
    }
    rule.including = Field::Typed(clean(&a.including));
    rule.excluding = Field::Typed(clean(&a.excluding));
    if !a.patterns.is_empty() {
        rule.including_patterns = Field::Typed(a.patterns.clone());
    }
    if !a.exclude_patterns.is_empty() {
        rule.excluding_patterns = Field::Typed(a.exclude_patterns.clone());
    }
    let mut channels = Channels::default();
    for (key, endpoint) in [
        ("email", &a.email),
        ("telegram", &a.telegram),
        ("slack", &a.slack),
        ("webhook", &a.webhook),
        ("discord", &a.discord),
        ("teams", &a.teams),
        ("pagerduty", &a.pagerduty),
    ] {
        if let Some(e) = endpoint {
            if e.trim().is_empty() {
                bail!("--{key} needs a non-empty value");
            }
            let mut channel = RawChannel::enabled(e.trim(), a.min_period);
            if let (Some(severity), "pagerduty") = (&a.severity, key) {
                channel
                    .extra
                    .insert("severity".into(), serde_json::Value::from(severity.as_str()));
            }
            channels.insert(key, Field::Typed(channel));
        }
    }
    rule.channels = Field::Typed(channels);
    // Validate with a placeholder id: the store assigns the real one. What a rule leaves unset (`--including-case`)
    // changes how it matches, never whether it has problems.
    let probe = RawRule {
        id: Field::Typed(RuleId::Hex("000000000000000000000000".into())),
        ..rule.clone()
    };
    let checked = probe.validate_with(limits, &klaxon_core::RuleDefaults::default());
    match checked {
        Ok((_, problems)) if problems.is_empty() => Ok(rule),
        Ok((_, problems)) if problems.iter().any(|p| p.limit) => {
            Err(OverLimit(format!("nothing added, over a limit: {}", describe(&problems))).into())
        }
        Ok((_, problems)) => bail!("{}", describe(&problems)),
        Err(p) => bail!("{} (fix: {})", p.message, p.fix),
    }
}

/// Says on stderr which endpoints of a rule just stored point to a loopback or private address (the senders
/// refuse them unless `--allow-private-endpoints`). The rule is stored all the same. `rule` carries its stored
/// `_id`: without one, parsing would make up a new id and the warning would name a rule that does not exist.
pub(super) fn warn_private_endpoints(project: &str, rule: &serde_json::Value) {
    let file = serde_json::json!([{"_id": project, "notifications": [rule]}]).to_string();
    if let Ok(projects) = parse_import(&file) {
        warn_private(&projects);
    }
}

fn warn_private(projects: &[ProjectNotifications]) {
    let warnings = klaxon_api::rest::rules::private_endpoints(projects);
    if warnings.is_empty() {
        return;
    }
    let mut msg = String::new();
    for (project, p) in &warnings {
        let _ = writeln!(msg, "  project {project}: {p}");
    }
    eprintln!(
        "warning: {} endpoint(s) on a loopback or private address (pass --allow-private-endpoints if this is \
         meant):\n{msg}",
        warnings.len()
    );
}

fn describe(problems: &[RuleProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{} (fix: {})", p.message, p.fix))
        .collect::<Vec<_>>()
        .join("; ")
}

/// An import file read and validated, nothing stored.
pub(super) struct ImportFile {
    /// The projects, in the stored shape (rules without an `_id` got one here).
    pub projects: Vec<ProjectNotifications>,
    /// Problems over a limit (too many rules in a project, an email channel over the recipient limit, keys MongoDB
    /// would read as operators or paths): import refuses the file whatever `--force` says.
    pub over_limit: Vec<(ObjectId, RuleProblem)>,
    /// Problems that make a rule unusable (the engine skips it): import refuses the file unless `--force`.
    pub fatal: Vec<(ObjectId, RuleProblem)>,
    /// Problems that only limit a rule (e.g. Hawk's default rule with every channel off): stored, with a warning.
    pub warnings: Vec<(ObjectId, RuleProblem)>,
    /// Ids given here to rules the file has none for → where the rule is in its project (`#3`: the third); the store
    /// assigns the real one.
    pub assigned: HashMap<String, String>,
}

impl ImportFile {
    /// How to name a rule in a message: its id, or its place in the file when the file gave it none.
    pub fn rule_name(&self, id: &str) -> String {
        self.assigned.get(id).map_or_else(
            || id.to_owned(),
            |place| format!("{place} (no _id: assigned when stored)"),
        )
    }

    /// `problems` with the rules named by [`ImportFile::rule_name`].
    pub fn named(&self, problems: &[(ObjectId, RuleProblem)]) -> Vec<(String, RuleProblem)> {
        problems
            .iter()
            .map(|(project, p)| {
                let mut p = p.clone();
                p.rule_id = p.rule_id.as_deref().map(|id| self.rule_name(id));
                (project.to_hex(), p)
            })
            .collect()
    }
}

/// Reads and validates an import file (`-` = stdin) under `limits` without storing anything: the same checks
/// `rules import` makes, for `import`, `import --dry-run` and `check --file`.
pub(super) fn read_file(file: &str, limits: &klaxon_core::Limits) -> anyhow::Result<ImportFile> {
    let text = if file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read stdin")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?
    };
    let projects = parse_import(&text).with_context(|| format!("{file}: nothing imported"))?;
    // Which rules the file gave no `_id` (parse_import assigned one): (project index, rule index).
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let mut assigned = HashMap::new();
    for (i, p) in projects.iter().enumerate() {
        for (j, doc) in p.notifications.iter().enumerate() {
            let given = raw[i]["notifications"][j]
                .get("_id")
                .is_some_and(|v| !v.is_null());
            if let (false, Ok(id)) = (given, doc.get_object_id("_id")) {
                assigned.insert(id.to_hex(), format!("#{}", j + 1));
            }
        }
    }
    let (over_limit, problems): (Vec<_>, Vec<_>) = klaxon_store::format::import_problems(&projects, limits)
        .into_iter()
        .partition(|(_, p)| p.limit);
    let (fatal, warnings) = problems.into_iter().partition(|(_, p)| p.fatal);
    Ok(ImportFile {
        projects,
        over_limit,
        fatal,
        warnings,
        assigned,
    })
}

/// One line per problem, indented, with the rules named by [`ImportFile::rule_name`].
pub(super) fn listing(file: &ImportFile, problems: &[(ObjectId, RuleProblem)]) -> String {
    let mut msg = String::new();
    for (project, p) in file.named(problems) {
        let _ = writeln!(msg, "  project {project}: {p}");
    }
    msg
}

/// Reads and validates an import file (`-` = stdin) under `limits`. What the engine cannot use (fatal
/// problems) refuses it unless `--force`; a limit (too many rules in a project, an email channel over the
/// recipient limit, keys MongoDB would read as operators or paths) refuses it whatever `--force` says, as an
/// [`OverLimit`]. Warnings, and endpoints on private addresses, are printed to stderr.
pub(super) fn read_import(
    a: &ImportArgs,
    limits: &klaxon_core::Limits,
) -> anyhow::Result<Vec<ProjectNotifications>> {
    let file = read_file(&a.file, limits)?;
    if !file.over_limit.is_empty() {
        return Err(OverLimit(format!(
            "{}: {} problem(s) over a limit, nothing imported (a limit cannot be forced):\n{}",
            a.file,
            file.over_limit.len(),
            listing(&file, &file.over_limit)
        ))
        .into());
    }
    // Import refuses only what the engine cannot use (fatal problems). A rule that is valid but cannot notify yet
    // (Hawk's default rule with every channel disabled) is stored, with a warning.
    // Refused first, so a refusal never reads as if something had been stored.
    let warnings = (!file.warnings.is_empty()).then(|| listing(&file, &file.warnings));
    if !file.fatal.is_empty() && !a.force {
        let mut msg = format!(
            "{}: {} problem(s), nothing imported (use --force to store anyway):\n{}",
            a.file,
            file.fatal.len(),
            listing(&file, &file.fatal)
        );
        if let Some(w) = &warnings {
            let _ = write!(
                msg,
                "and {} warning(s), which would not block the import:\n{w}",
                file.warnings.len()
            );
        }
        bail!("{}", msg.trim_end());
    }
    if let Some(w) = &warnings {
        eprintln!(
            "warning: {} warning(s), which do not block the import:\n{w}",
            file.warnings.len()
        );
    }
    if !file.fatal.is_empty() {
        eprintln!(
            "storing rules with problems (--force):\n{}",
            listing(&file, &file.fatal)
        );
    }
    if !a.writes.allow_private_endpoints {
        warn_private(&file.projects);
    }
    Ok(file.projects)
}

#[cfg(test)]
mod tests {
    use super::super::WriteArgs;
    use super::*;

    fn add_args() -> AddArgs {
        AddArgs {
            project: "5e3eef0679fa3700a0198a49".into(),
            seen_more: None,
            only_new: true,
            spike: None,
            baseline_windows: None,
            spike_threshold: None,
            reappeared: None,
            no_events: None,
            resolve_after: None,
            renotify: None,
            quiet_hours: Vec::new(),
            quiet_hours_bypass: Vec::new(),
            escalate: Vec::new(),
            window: None,
            unique_users: false,
            slack: None,
            telegram: None,
            email: None,
            webhook: None,
            discord: None,
            teams: None,
            pagerduty: None,
            severity: None,
            including: Vec::new(),
            excluding: Vec::new(),
            patterns: Vec::new(),
            exclude_patterns: Vec::new(),
            min_period: 0,
            disabled: false,
            json: false,
            writes: WriteArgs {
                allow_private_endpoints: false,
                limits: crate::cli::RuleLimitOpts {
                    max_rules_per_project: 100,
                    max_email_recipients: 50,
                },
            },
        }
    }

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
        assert_eq!(parse_spike("5x/1h").expect("valid"), (5.0, 3_600_000));
        assert_eq!(parse_spike("2.5×/10m").expect("valid"), (2.5, 600_000));
        assert_eq!(parse_spike("3/1s").expect("valid"), (3.0, 1000));
        for bad in ["5x", "x/1h", "5x/1", "inf/1h"] {
            assert!(parse_spike(bad).is_err(), "{bad}");
        }
        assert!(parse_seen_more("100").is_err());
        assert!(parse_seen_more("x/1h").is_err());
    }

    /// The stored document keeps the exact shape (keys and their order) `rules add` always wrote.
    #[test]
    fn add_flags_build_hawks_document() {
        let only_new = AddArgs {
            telegram: Some(" -100123 ".into()),
            email: Some("dev@example.com".into()),
            including: vec![" db".into(), "".into()],
            ..add_args()
        };
        let seen_more = AddArgs {
            seen_more: Some("100/1h".into()),
            only_new: false,
            window: Some("sliding".into()),
            unique_users: true,
            webhook: Some("https://alerts.example.com/k".into()),
            slack: Some("https://hooks.slack.com/x".into()),
            patterns: vec!["^Type".into()],
            exclude_patterns: vec!["noise".into()],
            min_period: 60,
            disabled: true,
            ..add_args()
        };
        let reach = AddArgs {
            discord: Some("https://discord.com/api/webhooks/1/t".into()),
            teams: Some("https://prod.logic.azure.com/workflows/x".into()),
            pagerduty: Some(" r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE ".into()),
            severity: Some("critical".into()),
            ..add_args()
        };
        let cases = [
            (
                reach,
                r#"{"isEnabled":true,"whatToReceive":"ONLY_NEW","including":[],"excluding":[],"channels":{"discord":{"isEnabled":true,"endpoint":"https://discord.com/api/webhooks/1/t","minPeriod":0},"teams":{"isEnabled":true,"endpoint":"https://prod.logic.azure.com/workflows/x","minPeriod":0},"pagerduty":{"isEnabled":true,"endpoint":"r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE","minPeriod":0,"severity":"critical"}}}"#,
            ),
            (
                only_new,
                r#"{"isEnabled":true,"whatToReceive":"ONLY_NEW","including":["db"],"excluding":[],"channels":{"email":{"isEnabled":true,"endpoint":"dev@example.com","minPeriod":0},"telegram":{"isEnabled":true,"endpoint":"-100123","minPeriod":0}}}"#,
            ),
            (
                seen_more,
                r#"{"isEnabled":false,"whatToReceive":"SEEN_MORE","threshold":100,"thresholdPeriod":3600000,"window":"sliding","uniqueUsers":true,"including":[],"excluding":[],"includingPatterns":["^Type"],"excludingPatterns":["noise"],"channels":{"slack":{"isEnabled":true,"endpoint":"https://hooks.slack.com/x","minPeriod":60},"webhook":{"isEnabled":true,"endpoint":"https://alerts.example.com/k","minPeriod":60}}}"#,
            ),
        ];
        for (args, want) in cases {
            let rule = build_rule(&args, &klaxon_core::Limits::default()).expect("valid flags");
            let value = serde_json::to_value(&rule).expect("json");
            assert_eq!(value.to_string(), want);
        }
    }

    #[test]
    fn spike_and_reappeared_flags_build_documents_the_core_accepts() {
        let hook = Some("https://alerts.example.com/k".to_owned());
        let spike = AddArgs {
            only_new: false,
            spike: Some("5x/1h".into()),
            baseline_windows: Some(12),
            spike_threshold: Some(20),
            webhook: hook.clone(),
            ..add_args()
        };
        let reappeared = AddArgs {
            only_new: false,
            reappeared: Some("7d".into()),
            webhook: hook.clone(),
            ..add_args()
        };
        let cases = [
            (
                spike,
                r#"{"isEnabled":true,"whatToReceive":"SPIKE","threshold":20,"thresholdPeriod":3600000,"baselineWindows":12,"factor":5.0,"including":[],"excluding":[],"channels":{"webhook":{"isEnabled":true,"endpoint":"https://alerts.example.com/k","minPeriod":0}}}"#,
            ),
            (
                reappeared,
                r#"{"isEnabled":true,"whatToReceive":"REAPPEARED","quietPeriod":604800000,"including":[],"excluding":[],"channels":{"webhook":{"isEnabled":true,"endpoint":"https://alerts.example.com/k","minPeriod":0}}}"#,
            ),
        ];
        for (args, want) in cases {
            let rule = build_rule(&args, &klaxon_core::Limits::default()).expect("valid flags");
            assert_eq!(serde_json::to_value(&rule).expect("json").to_string(), want);
        }
        // out of range: refused with the core's problem and fix
        for (args, says) in [
            (
                AddArgs {
                    only_new: false,
                    spike: Some("1x/1h".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`factor` must be between 1.5 and 100",
            ),
            (
                AddArgs {
                    only_new: false,
                    spike: Some("5x/2d".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "1 s … 1 day",
            ),
            (
                AddArgs {
                    only_new: false,
                    reappeared: Some("91d".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "1 s … 90 days",
            ),
        ] {
            let e = build_rule(&args, &klaxon_core::Limits::default()).expect_err("refused");
            assert!(
                e.to_string().contains(says) && e.to_string().contains("fix:"),
                "{e}"
            );
        }
    }

    /// The on-call flags and NO_EVENTS build the documented fields, in the model's order.
    #[test]
    fn on_call_flags_build_documents_the_core_accepts() {
        let pd = Some("r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE".to_owned());
        let on_call = AddArgs {
            only_new: false,
            seen_more: Some("100/5m".into()),
            pagerduty: pd.clone(),
            resolve_after: Some("1h".into()),
            renotify: Some("30m/3".into()),
            quiet_hours: vec![
                "mon-fri 22:00-07:00 Europe/Berlin".into(),
                "sat,sun 00:00-24:00 UTC".into(),
                "21:00-23:00 America/New_York".into(),
            ],
            quiet_hours_bypass: vec!["pagerduty".into()],
            ..add_args()
        };
        let no_events = AddArgs {
            only_new: false,
            no_events: Some("1h".into()),
            pagerduty: pd.clone(),
            ..add_args()
        };
        let never = AddArgs {
            resolve_after: Some("never".into()),
            pagerduty: pd.clone(),
            ..add_args()
        };
        let cases = [
            (
                on_call,
                r#"{"isEnabled":true,"whatToReceive":"SEEN_MORE","threshold":100,"thresholdPeriod":300000,"resolveAfter":3600000,"renotify":{"every":1800000,"max":3},"quietHours":[{"days":["mon","tue","wed","thu","fri"],"from":"22:00","to":"07:00","timezone":"Europe/Berlin"},{"days":["sat","sun"],"from":"00:00","to":"24:00","timezone":"UTC"},{"from":"21:00","to":"23:00","timezone":"America/New_York"}],"quietHoursBypass":["pagerduty"],"including":[],"excluding":[],"channels":{"pagerduty":{"isEnabled":true,"endpoint":"r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE","minPeriod":0}}}"#,
            ),
            (
                no_events,
                r#"{"isEnabled":true,"whatToReceive":"NO_EVENTS","quietPeriod":3600000,"including":[],"excluding":[],"channels":{"pagerduty":{"isEnabled":true,"endpoint":"r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE","minPeriod":0}}}"#,
            ),
            (
                never,
                r#"{"isEnabled":true,"whatToReceive":"ONLY_NEW","resolveAfter":0,"including":[],"excluding":[],"channels":{"pagerduty":{"isEnabled":true,"endpoint":"r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE","minPeriod":0}}}"#,
            ),
        ];
        for (args, want) in cases {
            let rule = build_rule(&args, &klaxon_core::Limits::default()).expect("valid flags");
            assert_eq!(serde_json::to_value(&rule).expect("json").to_string(), want);
        }
        // days: lists, ranges, a range past Sunday
        for (spec, want) in [
            ("mon-fri", vec!["mon", "tue", "wed", "thu", "fri"]),
            ("fri-mon", vec!["mon", "fri", "sat", "sun"]),
            ("sun,mon,wed-thu", vec!["mon", "wed", "thu", "sun"]),
            ("Saturday", vec!["sat"]),
        ] {
            assert_eq!(parse_days(spec).expect(spec), want, "{spec}");
        }
        // refused: by the flag's own parser, or with the core's problem and fix
        let hook = Some("https://alerts.example.com/k".to_owned());
        for (args, says) in [
            (
                AddArgs {
                    renotify: Some("30m".into()),
                    ..add_args()
                },
                "expected EVERY/MAX",
            ),
            (
                AddArgs {
                    renotify: Some("30m/0".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`renotify.max` must be a whole number between 1 and 100, got 0 (fix:",
            ),
            (
                AddArgs {
                    renotify: Some("500ms/3".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`renotify.every` must be milliseconds between 1000",
            ),
            (
                AddArgs {
                    resolve_after: Some("91d".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`resolveAfter` must be 0 (never) or milliseconds between 1000 and 7776000000",
            ),
            (
                AddArgs {
                    resolve_after: Some("soon".into()),
                    ..add_args()
                },
                "--resolve-after \"soon\"",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["mon-fri 22:00 Europe/Berlin".into()],
                    ..add_args()
                },
                "is not FROM-TO",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["weekdays 22:00-07:00 Europe/Berlin".into()],
                    ..add_args()
                },
                "unknown day \"weekdays\"",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["22:00-07:00".into()],
                    ..add_args()
                },
                "the time zone is missing",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["mon 22:00-07:00 Mars/Olympus".into()],
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`quietHours[0].timezone` \"Mars/Olympus\" is not a time zone Klaxon knows (fix: set an IANA",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["mon 10pm-07:00 UTC".into()],
                    webhook: hook.clone(),
                    ..add_args()
                },
                "`quietHours[0].from` must be a 24-hour time",
            ),
            (
                AddArgs {
                    quiet_hours: vec!["mon 22:00-22:00 UTC".into()],
                    webhook: hook.clone(),
                    ..add_args()
                },
                "a window that never ends",
            ),
            (
                AddArgs {
                    only_new: false,
                    no_events: Some("5s".into()),
                    webhook: hook.clone(),
                    ..add_args()
                },
                "(10 s … 30 days), got 5000",
            ),
            (
                AddArgs {
                    only_new: false,
                    no_events: Some("1h".into()),
                    including: vec!["db".into()],
                    webhook: hook.clone(),
                    ..add_args()
                },
                "ignored by a NO_EVENTS rule",
            ),
        ] {
            let e = build_rule(&args, &klaxon_core::Limits::default()).expect_err(says);
            assert!(format!("{e:#}").contains(says), "{e:#}\nshould say: {says}");
        }
    }

    #[test]
    fn bad_add_flags_are_refused_with_the_core_message() {
        let cases = [
            (
                AddArgs {
                    slack: Some("  ".into()),
                    ..add_args()
                },
                "--slack needs a non-empty value",
            ),
            (
                AddArgs {
                    seen_more: Some("0/1h".into()),
                    slack: Some("https://hooks.slack.com/x".into()),
                    ..add_args()
                },
                "`threshold` must be a whole number ≥ 1, got 0 (fix: set `threshold` to a whole number ≥ 1)",
            ),
            (
                AddArgs {
                    patterns: vec!["(".into()],
                    slack: Some("https://hooks.slack.com/x".into()),
                    ..add_args()
                },
                "(fix: fix the pattern",
            ),
            (
                AddArgs {
                    project: "nothex".into(),
                    ..add_args()
                },
                "nothex",
            ),
            (
                AddArgs {
                    pagerduty: Some("too-short".into()),
                    ..add_args()
                },
                "not an Events API v2 routing key",
            ),
            (
                AddArgs {
                    teams: Some("http://prod.logic.azure.com/workflows/x".into()),
                    ..add_args()
                },
                "Teams Workflows webhooks are https",
            ),
            (
                AddArgs {
                    discord: Some("https://discord.com/channels/1/2".into()),
                    ..add_args()
                },
                "not a Discord webhook URL",
            ),
        ];
        for (args, want) in cases {
            let err = build_rule(&args, &klaxon_core::Limits::default()).expect_err(want);
            assert!(!err.is::<OverLimit>(), "{err:#}");
            let err = format!("{err:#}");
            assert!(err.contains(want), "{err} should contain {want}");
        }
        // Over a limit is not a usage error.
        let many = (0..3).map(|i| format!("u{i}@x.io")).collect::<Vec<_>>().join(",");
        let args = AddArgs {
            email: Some(many),
            ..add_args()
        };
        let limits = klaxon_core::Limits::new(100, 1000, 2).expect("limits");
        let err = build_rule(&args, &limits).expect_err("3 of 2 recipients");
        assert!(err.is::<OverLimit>(), "{err:#}");
        assert!(
            format!("{err:#}").contains("3 recipients, over the limit of 2"),
            "{err:#}"
        );
        assert!(build_rule(&args, &klaxon_core::Limits::default()).is_ok());
    }

    #[test]
    fn escalation_steps_and_quiet_hours_without_a_time_zone() {
        let args = AddArgs {
            only_new: false,
            seen_more: Some("100/5m".into()),
            webhook: Some("https://alerts.example.com/k".into()),
            escalate: vec![
                "15m:pagerduty=r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE".into(),
                "1h:email=lead@example.com".into(),
                "15m:slack=https://hooks.slack.com/services/T/B/x".into(),
            ],
            ..add_args()
        };
        let rule = build_rule(&args, &klaxon_core::Limits::default()).expect("valid flags");
        let v = serde_json::to_value(&rule).expect("json");
        assert_eq!(
            v["escalation"],
            serde_json::json!([
                {"after": 900_000, "channels": {
                    "pagerduty": {"isEnabled": true, "endpoint": "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE", "minPeriod": 0},
                    "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/services/T/B/x", "minPeriod": 0}}},
                {"after": 3_600_000, "channels": {
                    "email": {"isEnabled": true, "endpoint": "lead@example.com", "minPeriod": 0}}}
            ]),
            "{v}"
        );
        for (escalate, says) in [
            ("15m", "expected AFTER:CHANNEL=ENDPOINT"),
            ("15m:pagerduty", "expected AFTER:CHANNEL=ENDPOINT"),
            ("soon:pagerduty=k", "AFTER"),
            ("15m:pager=k", "unknown channel \"pager\""),
            ("15m:slack= ", "ENDPOINT is empty"),
        ] {
            let args = AddArgs {
                escalate: vec![escalate.into()],
                webhook: Some("https://alerts.example.com/k".into()),
                ..add_args()
            };
            let err = format!(
                "{:#}",
                build_rule(&args, &klaxon_core::Limits::default()).expect_err(escalate)
            );
            assert!(err.contains(says), "{escalate}: {err}");
        }
        for q in ["mon-fri 22:00-7:00", "22:00-07:00", "daily 22-7"] {
            let err = format!("{:#}", parse_quiet_hours(q).expect_err(q));
            assert!(err.contains("the time zone is missing"), "{q}: {err}");
            assert!(!err.contains("`from`"), "{q}: {err}");
        }
        assert!(parse_quiet_hours("mon-fri 22:00-7:00 UTC").is_ok());
    }
}
