//! Notification rules in Hawk's `projects.notifications` shape: tolerant reading into the serde model
//! [`RawRule`], validation into typed values ([`RawRule::validate`] → [`CompiledRule`]), and the per-event
//! decision of whether a rule wants an event.
//!
//! Reading is per rule: one broken rule is reported and skipped while the project's other rules keep
//! working (Hawk's notifier aborts the remaining rules instead).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::Event;
use crate::filter::{Case, Title, TitleFilter};
use crate::limits::Limits;
use crate::oncall::{EscalationStep, QuietHours, Renotify};

mod endpoint;
mod raw;

pub use crate::field::Field;
pub use crate::kind::reappeared::{object_id_ms, reappears, DEFAULT_QUIET_PERIOD_MS, QUIET_PERIOD_MS};
pub use crate::kind::seen_more::{LEGACY_ALL_PERIOD_MS, MAX_PERIOD_MS, MAX_THRESHOLD, MIN_PERIOD_MS};
pub use crate::kind::spike::{
    DEFAULT_BASELINE_WINDOWS, DEFAULT_FACTOR_MILLI, DEFAULT_SPIKE_THRESHOLD, MAX_SPIKE_PERIOD_MS,
    SPIKE_FACTOR_MILLI, SPIKE_WINDOWS,
};
pub use crate::kind::{Kind, Skip, Spike, Want, WhatToReceive, Window};
pub use crate::problem::{RuleProblem, MAX_PROBLEM_BYTES};
pub use endpoint::{endpoint_problem, is_slack_channel_id};
pub use raw::{Channels, RawChannel, RawRule, RuleId};

/// The largest channel `minPeriod` accepted, in seconds (7 days): digest state lives in Redis that long.
pub const MAX_MIN_PERIOD_S: u64 = 7 * 24 * 3600;

/// A delivery channel Klaxon knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// SMTP email.
    Email,
    /// Telegram Bot API.
    Telegram,
    /// Slack incoming webhook.
    Slack,
    /// Generic signed JSON webhook.
    Webhook,
    /// Hawk's `loop`: a Mattermost-compatible incoming webhook (`{"text": …}`, Markdown).
    Loop,
    /// Discord incoming webhook (embeds, mentions off).
    Discord,
    /// Microsoft Teams through a Workflows (Power Automate) webhook, with an Adaptive Card.
    Teams,
    /// PagerDuty Events API v2: the endpoint is the integration's routing key.
    Pagerduty,
}

impl ChannelKind {
    /// Every channel, in a stable order.
    pub const ALL: [ChannelKind; 8] = [
        ChannelKind::Email,
        ChannelKind::Telegram,
        ChannelKind::Slack,
        ChannelKind::Webhook,
        ChannelKind::Loop,
        ChannelKind::Discord,
        ChannelKind::Teams,
        ChannelKind::Pagerduty,
    ];

    /// The key used in Hawk's `channels` object and in queue names.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Email => "email",
            ChannelKind::Telegram => "telegram",
            ChannelKind::Slack => "slack",
            ChannelKind::Webhook => "webhook",
            ChannelKind::Loop => "loop",
            ChannelKind::Discord => "discord",
            ChannelKind::Teams => "teams",
            ChannelKind::Pagerduty => "pagerduty",
        }
    }

    /// Parses a channel key.
    pub fn parse(s: &str) -> Option<Self> {
        ChannelKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A PagerDuty alert's severity (`channels.pagerduty.severity`; the Events API v2 `payload.severity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// `critical`.
    Critical,
    /// `error`, the default.
    #[default]
    Error,
    /// `warning`.
    Warning,
    /// `info`.
    Info,
}

impl Severity {
    /// Every severity, most severe first.
    pub const ALL: [Severity; 4] = [
        Severity::Critical,
        Severity::Error,
        Severity::Warning,
        Severity::Info,
    ];

    /// The value PagerDuty takes (and rules store).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }

    /// Parses a stored value.
    pub fn parse(s: &str) -> Option<Self> {
        Severity::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One enabled channel of a rule.
#[derive(Clone, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Which channel.
    pub kind: ChannelKind,
    /// Where to: webhook URL, chat id, comma-separated addresses, PagerDuty routing key.
    pub endpoint: String,
    /// Digest period in seconds; 0 = send each firing on its own.
    pub min_period_s: u64,
    /// PagerDuty only: the alert's severity (`channels.pagerduty.severity`); `None` elsewhere.
    pub severity: Option<Severity>,
}

impl fmt::Debug for ChannelConfig {
    // Endpoints can embed credentials (Slack webhook URLs are bearer secrets): never print them whole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("kind", &self.kind)
            .field("endpoint", &"<redacted>")
            .field("min_period_s", &self.min_period_s)
            .field("severity", &self.severity)
            .finish()
    }
}

/// A validated rule, ready to evaluate events.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    /// Rule id (24-hex).
    pub id: String,
    /// Off = ignored.
    pub enabled: bool,
    /// What the rule reacts to.
    pub what: WhatToReceive,
    /// How SEEN_MORE counts.
    pub window: Window,
    /// Enabled channels with an endpoint.
    pub channels: Vec<ChannelConfig>,
    /// Compiled title filters.
    pub filter: TitleFilter,
    /// SEEN_MORE counts distinct users (`uniqueUsers: true`) instead of events.
    pub unique_users: bool,
    /// `resolveAfter`, ms: an alert of this rule resolves when its group has had no matching event for that
    /// long; 0 = never by itself ([`crate::alert::read_resolve_after`] has the defaults).
    pub resolve_after_ms: u64,
    /// `renotify`: reminders while an alert is `firing` ([`crate::oncall`]).
    pub renotify: Option<Renotify>,
    /// `escalation`: steps by ascending `after` ([`crate::oncall::next_escalation`]).
    pub escalation: Vec<EscalationStep>,
    /// `quietHours` and `quietHoursBypass`: when firings are held ([`QuietHours::window_at`]); empty = never.
    pub quiet_hours: QuietHours,
}

impl CompiledRule {
    /// Its `minPeriod` for `channel`, seconds: 0 when it has no such channel (or sends each firing alone).
    pub fn min_period_s(&self, channel: ChannelKind) -> u64 {
        self.channels
            .iter()
            .find(|c| c.kind == channel)
            .map_or(0, |c| c.min_period_s)
    }

    /// Decides whether this rule is interested in the event (enabled, kind, filters). `title` must be
    /// `Title::new(&event.title)`, computed once per event.
    pub fn wants(&self, event: &Event, title: &Title<'_>) -> Option<Want> {
        self.decide(event, title).ok()
    }

    /// The rule in a table cell (`klaxon rules list`): its kind's [`WhatToReceive::summary`], then what it sets of
    /// its alerts' life, each part after a `; `: `resolveAfter` when it is not the kind's default, `renotify`,
    /// `escalation` and `quietHours`. E.g. "SEEN_MORE 100/1h; renotify every 30m, 3 times; escalate 15m→pagerduty;
    /// quiet mon-fri 22:00-07:00 Europe/Berlin (bypass pagerduty)".
    pub fn summary(&self) -> String {
        let mut parts = vec![self.what.summary(self.unique_users)];
        if self.resolve_after_ms != crate::alert::default_resolve_after_ms(&self.what) {
            parts.push(match self.resolve_after_ms {
                0 => "resolved by hand".to_owned(),
                ms => format!("resolve after {}", crate::text::short_duration(ms)),
            });
        }
        if let Some(r) = &self.renotify {
            parts.push(format!("renotify {}", r.summary()));
        }
        if !self.escalation.is_empty() {
            parts.push(format!(
                "escalate {}",
                crate::oncall::escalation_summary(&self.escalation)
            ));
        }
        if !self.quiet_hours.is_empty() {
            parts.push(format!("quiet {}", self.quiet_hours.summary()));
        }
        parts.join("; ")
    }

    /// [`CompiledRule::wants`] with the reason when the rule does not count the event: the one decision the
    /// worker evaluates with and `explain` reports.
    pub fn decide(&self, event: &Event, title: &Title<'_>) -> Result<Want, Skip> {
        if !self.enabled {
            return Err(Skip::Disabled);
        }
        if self.channels.is_empty() {
            return Err(Skip::NoChannels);
        }
        let want = self.what.want(&self.id, self.window, self.unique_users, event)?;
        self.filter.check(title).map_err(Skip::Filtered)?;
        Ok(want)
    }
}

/// What a process assumes for what a rule leaves unset: set once at start from its flags, the same for every
/// rule it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuleDefaults {
    /// How `including` words compare when the rule has no `includingCaseSensitive` (`--including-case`).
    pub including_case: Case,
}

/// Reads one rule from its JSON form (a MongoDB document as relaxed extended JSON, or the import format):
/// [`RawRule::from_value`], then [`RawRule::validate`].
///
/// Returns the compiled rule and the non-fatal problems found in it (skipped channels), or the fatal problem
/// that makes the rule unusable.
pub fn parse_rule_value(value: &Value) -> Result<(CompiledRule, Vec<RuleProblem>), RuleProblem> {
    parse_rule_value_with(value, &Limits::default(), &RuleDefaults::default())
}

/// [`parse_rule_value`] with the process's [`Limits`] (the email channel's recipients) and [`RuleDefaults`]
/// (what the rule leaves unset).
pub fn parse_rule_value_with(
    value: &Value,
    limits: &Limits,
    defaults: &RuleDefaults,
) -> Result<(CompiledRule, Vec<RuleProblem>), RuleProblem> {
    RawRule::from_value(value)?.validate_with(limits, defaults)
}

/// Every problem of one stored rule (its JSON form) under `limits`: the fatal one that makes it unusable or
/// its warnings, and the keys MongoDB would read as operators or paths ([`crate::limits::key_problem`]).
/// `klaxon rules check`, imports and the API's `PUT` report these.
pub fn rule_problems(value: &Value, limits: &Limits) -> Vec<RuleProblem> {
    // What a rule leaves unset (`--including-case`) changes how it matches, never whether it has problems.
    let mut out = match parse_rule_value_with(value, limits, &RuleDefaults::default()) {
        Ok((_, problems)) => problems,
        Err(p) => vec![p],
    };
    out.extend(crate::limits::key_problem(value));
    out
}

/// Longest project name kept, in characters (Hawk's own limit is far below; this bounds what goes into
/// messages whatever the document holds).
pub const MAX_PROJECT_NAME_CHARS: usize = 200;

/// Longest project name Klaxon stores (API, CLI, `rules import`), in characters.
pub const MAX_SET_PROJECT_NAME_CHARS: usize = 100;

/// A project name to store (`PUT /api/v1/projects/{id}`, `klaxon projects name`, `rules import`'s `name`):
/// trimmed, 1 to [`MAX_SET_PROJECT_NAME_CHARS`] characters, no control characters. Tenant text: every channel
/// escapes it when it shows it.
pub fn check_project_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    let n = name.chars().count();
    if n == 0 || n > MAX_SET_PROJECT_NAME_CHARS {
        return Err(format!(
            "a project name must be 1 to {MAX_SET_PROJECT_NAME_CHARS} characters (got {n})"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a project name must not contain control characters (line breaks, tabs, …)".into());
    }
    Ok(name.to_owned())
}

fn clean_name(raw: &str) -> Option<String> {
    let mut out = String::new();
    for (i, c) in raw.trim().chars().enumerate() {
        if i == MAX_PROJECT_NAME_CHARS {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    (!out.is_empty()).then_some(out)
}

/// The usable rules of one project and the problems found while reading them.
#[derive(Debug, Clone, Default)]
pub struct ProjectRules {
    /// True when the rule database has a document for the project (even one without rules); the default,
    /// false, is an unknown project.
    pub known: bool,
    /// Rules that can be evaluated (enabled or not).
    pub rules: Vec<CompiledRule>,
    /// Every problem, fatal (rule skipped) or not (part skipped).
    pub problems: Vec<RuleProblem>,
    /// The project's display `name` from the same `projects` document (Hawk keeps it there), when it has
    /// one; messages show it instead of the id.
    pub name: Option<String>,
    /// Stored rules not read because the project is over [`Limits::max_rules`] (the ones after the first
    /// `max_rules`, in document order).
    pub skipped: usize,
}

impl ProjectRules {
    /// Reads the `notifications` array (JSON form) of a project the database has, with the default [`Limits`]
    /// and [`RuleDefaults`]. A missing or non-array value means no rules.
    pub fn from_notifications(notifications: Option<&Value>) -> Self {
        Self::from_notifications_with(notifications, &Limits::default(), &RuleDefaults::default())
    }

    /// Reads a project's `notifications` array (JSON form) under `limits`, with the process's `defaults`: only
    /// the first [`Limits::max_rules`] rules, in document order, are read (validated, compiled); the rest are
    /// counted in [`ProjectRules::skipped`] and reported as one problem of the project. Documents written by
    /// someone else (Hawk) can hold any number of rules: reading costs at most `max_rules` of them.
    pub fn from_notifications_with(
        notifications: Option<&Value>,
        limits: &Limits,
        defaults: &RuleDefaults,
    ) -> Self {
        let mut out = ProjectRules {
            known: true,
            ..ProjectRules::default()
        };
        let Some(Value::Array(items)) = notifications else {
            return out;
        };
        for item in items.iter().take(limits.max_rules) {
            match parse_rule_value_with(item, limits, defaults) {
                Ok((rule, problems)) => {
                    out.rules.push(rule);
                    out.problems.extend(problems);
                }
                Err(problem) => out.problems.push(problem),
            }
            out.problems.extend(crate::limits::key_problem(item));
        }
        out.skipped = items.len().saturating_sub(limits.max_rules);
        out.problems.extend(limits.rule_count_problem(items.len()));
        out
    }

    /// Sets the project's display name from the document's `name` field: trimmed, on one line, at most
    /// [`MAX_PROJECT_NAME_CHARS`] characters; a missing, non-string or blank name is none.
    pub fn with_name(mut self, name: Option<&Value>) -> Self {
        self.name = name.and_then(Value::as_str).and_then(clean_name);
        self
    }

    /// Rule `id` when it is switched on: what a timer, a resolve or a release of one of its alerts acts on now
    /// (`None` when it was deleted or switched off since).
    pub fn enabled_rule(&self, id: &str) -> Option<&CompiledRule> {
        self.rules.iter().find(|r| r.id == id && r.enabled)
    }

    /// True when at least one rule can fire.
    pub fn any_enabled(&self) -> bool {
        self.rules.iter().any(|r| r.enabled && !r.channels.is_empty())
    }

    /// Why no event of this project can be evaluated at all, whatever the event: `None` when some rule can
    /// fire. An event whose rules are evaluated and filter it out is not "unevaluated" (see [`Unevaluated`]).
    pub fn unevaluated(&self) -> Option<Unevaluated> {
        if !self.known {
            return Some(Unevaluated::ProjectUnknown);
        }
        if self.rules.is_empty() {
            return Some(if self.problems.iter().any(|p| p.fatal) {
                Unevaluated::RulesInvalid
            } else {
                Unevaluated::NoRules
            });
        }
        if !self.rules.iter().any(|r| r.enabled) {
            return Some(Unevaluated::RulesDisabled);
        }
        if !self.any_enabled() {
            return Some(Unevaluated::NoChannels);
        }
        None
    }
}

/// Why the events of a project lead to no evaluation (the `reason` of `klaxon_events_unmatched_total`): nothing
/// in the rule database could count or notify them, whatever they are. Events that *are* evaluated and that
/// every rule filters out (an `including` word missing, not a first occurrence for ONLY_NEW, …) are the rules
/// working, not this: with ONLY_NEW rules most events are filtered, and counting them here would bury the
/// misconfigurations this is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unevaluated {
    /// The rule database has no document for the project (or the id is not an ObjectId): wrong `--mongo-db`,
    /// a project deleted in Hawk, or a producer that sends another tracker's ids.
    ProjectUnknown,
    /// The project's document has no rules (`notifications` empty or missing).
    NoRules,
    /// The project has rules, and none of them can be read (each has a fatal problem: `klaxon rules check`).
    RulesInvalid,
    /// Every usable rule of the project is disabled (`isEnabled: false`).
    RulesDisabled,
    /// Some rule is enabled, but no enabled rule has a channel Klaxon can send to (enabled, with an endpoint).
    NoChannels,
}

impl Unevaluated {
    /// Every reason, in the order [`ProjectRules::unevaluated`] checks them.
    pub const ALL: [Unevaluated; 5] = [
        Unevaluated::ProjectUnknown,
        Unevaluated::NoRules,
        Unevaluated::RulesInvalid,
        Unevaluated::RulesDisabled,
        Unevaluated::NoChannels,
    ];

    /// The metric label: `project_unknown`, `no_rules`, `rules_invalid`, `rules_disabled`, `no_channels`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unevaluated::ProjectUnknown => "project_unknown",
            Unevaluated::NoRules => "no_rules",
            Unevaluated::RulesInvalid => "rules_invalid",
            Unevaluated::RulesDisabled => "rules_disabled",
            Unevaluated::NoChannels => "no_channels",
        }
    }

    /// What to look at, for the log line.
    pub fn hint(self) -> &'static str {
        match self {
            Unevaluated::ProjectUnknown => {
                "no project document in the rule database: check --mongo-url/--mongo-db (Hawk's accounts database)"
            }
            Unevaluated::NoRules => "the project has no rules",
            Unevaluated::RulesInvalid => "none of the project's rules can be used: see `klaxon rules check`",
            Unevaluated::RulesDisabled => "every rule of the project is disabled",
            Unevaluated::NoChannels => "no enabled rule of the project has an enabled channel with an endpoint",
        }
    }
}

impl fmt::Display for Unevaluated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod decide_tests;
