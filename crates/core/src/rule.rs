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
pub use raw::{endpoint_problem, is_slack_channel_id, Channels, RawChannel, RawRule, RuleId};

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
mod tests {
    use super::*;
    use serde_json::json;

    fn event(title: &str, is_new: bool) -> Event {
        super::decide_tests::ev(title, is_new, None)
    }

    fn slack() -> Value {
        json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}})
    }

    #[test]
    fn reads_a_hawk_document_with_extra_fields_and_unsupported_channels() {
        let doc = json!({
            "_id": {"$oid": "5e3eef0679fa3700a0198a4a"},
            "uidAdded": {"$oid": "5e3eef0679fa3700a0198a00"},
            "isEnabled": true,
            "whatToReceive": "SEEN_MORE",
            "including": ["db"], "excluding": [],
            "threshold": 100, "thresholdPeriod": 3_600_000,
            "channels": {
                "email": {"isEnabled": false, "endpoint": "a@b.c", "minPeriod": 60},
                "telegram": {"isEnabled": true, "endpoint": "-100123", "minPeriod": 0},
                "loop": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                "desktopPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}
            },
            "somethingNew": {"nested": true}
        });
        let (rule, problems) = parse_rule_value(&doc).expect("usable");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(rule.id, "5e3eef0679fa3700a0198a4a");
        assert_eq!(
            rule.what,
            WhatToReceive::SeenMore {
                threshold: 100,
                period_ms: 3_600_000
            }
        );
        assert_eq!(rule.window, Window::Fixed);
        // Hawk's `loop` is delivered; `webPush`/`desktopPush` are ignored, and listed as such
        assert_eq!(rule.channels.len(), 2);
        assert_eq!(rule.channels[0].kind, ChannelKind::Telegram);
        assert_eq!(rule.channels[1].kind, ChannelKind::Loop);
        assert_eq!(
            RawRule::from_value(&doc).expect("object").ignored_channels(),
            vec!["desktopPush".to_owned(), "webPush".to_owned()]
        );
    }

    /// Why a project's events would not be evaluated at all, by what its document holds.
    #[test]
    fn unevaluated_reasons_table() {
        let ok = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": slack()});
        let disabled = json!({"_id": "5e3eef0679fa3700a0198a4b", "isEnabled": false, "whatToReceive": "ONLY_NEW",
            "channels": slack()});
        let no_channel = json!({"_id": "5e3eef0679fa3700a0198a4c", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"slack": {"isEnabled": true, "endpoint": "", "minPeriod": 0},
                         "email": {"isEnabled": false, "endpoint": "a@b.c", "minPeriod": 0}}});
        let broken = json!({"_id": "5e3eef0679fa3700a0198a4d", "isEnabled": true, "whatToReceive": "SOMETIMES",
            "channels": slack()});
        let filtered = json!({"_id": "5e3eef0679fa3700a0198a4e", "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 1, "thresholdPeriod": 60000, "including": ["never in a title"], "channels": slack()});
        // (notifications of a known project, expected reason)
        let cases: Vec<(Option<Value>, Option<Unevaluated>)> = vec![
            (None, Some(Unevaluated::NoRules)),
            (Some(json!([])), Some(Unevaluated::NoRules)),
            (Some(json!("not an array")), Some(Unevaluated::NoRules)),
            (Some(json!([broken])), Some(Unevaluated::RulesInvalid)),
            (Some(json!([disabled])), Some(Unevaluated::RulesDisabled)),
            (Some(json!([broken, disabled])), Some(Unevaluated::RulesDisabled)),
            (Some(json!([no_channel])), Some(Unevaluated::NoChannels)),
            (Some(json!([disabled, no_channel])), Some(Unevaluated::NoChannels)),
            (Some(json!([ok])), None),
            (Some(json!([broken, disabled, ok])), None),
            // a rule that filters every title out is evaluated: filtering is not "unevaluated"
            (Some(json!([filtered])), None),
        ];
        for (notifications, want) in cases {
            let pr = ProjectRules::from_notifications(notifications.as_ref());
            assert!(pr.known);
            assert_eq!(pr.unevaluated(), want, "{notifications:?}");
        }
        assert_eq!(
            ProjectRules::default().unevaluated(),
            Some(Unevaluated::ProjectUnknown),
            "no document: unknown project"
        );
        let labels: Vec<&str> = Unevaluated::ALL.iter().map(|u| u.as_str()).collect();
        assert_eq!(
            labels,
            [
                "project_unknown",
                "no_rules",
                "rules_invalid",
                "rules_disabled",
                "no_channels"
            ]
        );
    }

    #[test]
    fn problems_quoting_tenant_values_are_one_bounded_line() {
        // Found by the fuzz test: a `window` that is an array holding a long multi-line string.
        let long = "A\n".repeat(1500);
        let bad = [
            json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": "ONLY_NEW", "window": [[long]], "channels": {}}),
            json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": long, "channels": {}}),
            json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": "ONLY_NEW", "includingPatterns": [format!("({long}")], "channels": {}}),
        ];
        for rule in bad {
            let p = parse_rule_value(&rule).expect_err("unusable");
            assert!(p.message.len() <= MAX_PROBLEM_BYTES, "{} bytes", p.message.len());
            assert!(!p.message.contains('\n'), "{:?}", p.message);
            assert_eq!(p.rule_id.as_deref(), Some("5e3eef0679fa3700a0198a4a"));
        }
        let rule = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.example.com/x", "minPeriod": long}}});
        let (_, problems) = parse_rule_value(&rule).expect("usable");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.len() <= MAX_PROBLEM_BYTES && !problems[0].message.contains('\n'));
    }

    #[test]
    fn fatal_problems_name_the_rule() {
        let cases = [
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "thresholdPeriod": 60000, "channels": slack()}),
                "no `threshold`",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "channels": slack()}),
                "no `thresholdPeriod`",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000, "channels": slack()}),
                "`threshold` must be",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 10, "channels": slack()}),
                "`thresholdPeriod` must be",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1_000_001, "thresholdPeriod": 60000, "channels": slack()}),
                "at most 1000000",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 31u64 * 24 * 3600 * 1000, "channels": slack()}),
                "`thresholdPeriod` must be",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
                       "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 1e19}}}),
                "over the limit",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
                       "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 604_801}}}),
                "over the limit",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "window": "hopping", "channels": slack()}),
                "unknown `window`",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SOMETIMES", "channels": slack()}),
                "unknown `whatToReceive`",
            ),
            (
                json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "includingPatterns": ["(bad"], "channels": slack()}),
                "invalid regex",
            ),
            (
                json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()}),
                "no `_id`",
            ),
        ];
        for (doc, want) in cases {
            let p = parse_rule_value(&doc).expect_err("unusable");
            assert!(p.fatal);
            assert!(p.message.contains(want), "{} should mention {want}", p.message);
            assert!(!p.fix.is_empty());
        }
    }

    #[test]
    fn one_bad_rule_does_not_hide_the_good_one() {
        let notifications = json!([
            {"_id": "5e3eef0679fa3700a0198a41", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000, "channels": slack()},
            {"_id": "5e3eef0679fa3700a0198a42", "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()}
        ]);
        let pr = ProjectRules::from_notifications(Some(&notifications));
        assert_eq!(pr.rules.len(), 1);
        assert_eq!(pr.rules[0].id, "5e3eef0679fa3700a0198a42");
        assert_eq!(pr.problems.len(), 1);
        assert_eq!(
            pr.problems[0].rule_id.as_deref(),
            Some("5e3eef0679fa3700a0198a41")
        );
    }

    #[test]
    fn legacy_all_is_seen_more_threshold_one() {
        let doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ALL", "channels": slack()});
        let (rule, _) = parse_rule_value(&doc).expect("usable");
        assert_eq!(
            rule.what,
            WhatToReceive::SeenMore {
                threshold: 1,
                period_ms: LEGACY_ALL_PERIOD_MS
            }
        );
    }

    #[test]
    fn wants_table() {
        let only_new = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": ["db"], "channels": slack()});
        let seen_more = json!({"_id": "5e3eef0679fa3700a0198a4b", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000, "window": "sliding", "excluding": ["auth"], "channels": slack()});
        let disabled = json!({"_id": "5e3eef0679fa3700a0198a4c", "isEnabled": false, "whatToReceive": "ONLY_NEW", "channels": slack()});
        let no_channel = json!({"_id": "5e3eef0679fa3700a0198a4d", "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": {}});
        let count = Want::Count {
            threshold: 3,
            period_ms: 60000,
            window: Window::Sliding,
        };
        let cases = [
            (&only_new, "DB down", true, Some(Want::FirstSeen)),
            (&only_new, "DB down", false, None),
            (&only_new, "cache miss", true, None),
            (&seen_more, "anything", false, Some(count)),
            (&seen_more, "anything", true, Some(count)),
            (&seen_more, "Auth failed", false, None),
            (&disabled, "x", true, None),
            (&no_channel, "x", true, None),
        ];
        for (doc, title, is_new, want) in cases {
            let (rule, _) = parse_rule_value(doc).expect("usable");
            let ev = event(title, is_new);
            assert_eq!(
                rule.wants(&ev, &Title::new(&ev.title)),
                want,
                "{doc} {title} {is_new}"
            );
        }
    }

    /// The cases of Hawk's notifier `RuleValidator` tests (isEnabled, whatToReceive, including, excluding),
    /// which must decide the same way here.
    #[test]
    fn hawk_validator_cases() {
        let rule = |enabled: bool, what: &str, including: &[&str], excluding: &[&str]| {
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": enabled, "whatToReceive": what,
                   "threshold": 1, "thresholdPeriod": 60000,
                   "including": including, "excluding": excluding, "channels": slack()})
        };
        let cases = [
            // (rule, title, isNew, passes)
            (rule(true, "ONLY_NEW", &[], &[]), "Error", true, true),
            (rule(false, "ONLY_NEW", &[], &[]), "Error", true, false),
            (rule(false, "SEEN_MORE", &[], &[]), "Error", false, false),
            (rule(true, "ONLY_NEW", &[], &[]), "Error", false, false),
            (rule(true, "SEEN_MORE", &[], &[]), "Error", false, true),
            (rule(true, "ALL", &[], &[]), "Error", false, true),
            (
                rule(true, "ONLY_NEW", &["error"], &[]),
                "Some ERROR happened",
                true,
                true,
            ),
            (
                rule(true, "ONLY_NEW", &["warning", "error"], &[]),
                "error only",
                true,
                true,
            ),
            (
                rule(true, "ONLY_NEW", &["warning", "notice"], &[]),
                "error only",
                true,
                false,
            ),
            (rule(true, "ONLY_NEW", &[], &["error"]), "Some Error", true, false),
            (
                rule(true, "ONLY_NEW", &[], &["warning", "error"]),
                "an error",
                true,
                false,
            ),
            (rule(true, "ONLY_NEW", &[], &["warning"]), "an error", true, true),
            (
                rule(true, "ONLY_NEW", &["error"], &["fatal"]),
                "Fatal error",
                true,
                false,
            ),
            (
                rule(true, "ONLY_NEW", &["ошибка"], &[]),
                "Ошибка сети",
                true,
                true,
            ),
            (rule(true, "ONLY_NEW", &[], &["ÜBER"]), "über-fehler", true, false),
        ];
        for (doc, title, is_new, passes) in cases {
            let (r, _) = parse_rule_value(&doc).expect("usable");
            let ev = event(title, is_new);
            assert_eq!(
                r.wants(&ev, &Title::new(&ev.title)).is_some(),
                passes,
                "{doc} {title:?} isNew={is_new}"
            );
        }
    }

    #[test]
    fn unique_users_table() {
        let rule = |extra: Value| {
            let mut doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE",
                "threshold": 3, "thresholdPeriod": 60000, "channels": slack()});
            for (k, v) in extra.as_object().into_iter().flatten() {
                doc[k] = v.clone();
            }
            doc
        };
        let users = |window| {
            Some(Want::UniqueUsers {
                threshold: 3,
                period_ms: 60000,
                window,
            })
        };
        let count = Some(Want::Count {
            threshold: 3,
            period_ms: 60000,
            window: Window::Fixed,
        });
        // (rule, event user, wanted)
        let cases = [
            (
                rule(json!({"uniqueUsers": true})),
                Some("u1"),
                users(Window::Fixed),
            ),
            (rule(json!({"uniqueUsers": true})), None, None),
            (
                rule(json!({"uniqueUsers": true, "window": "sliding"})),
                Some("u1"),
                users(Window::Sliding),
            ),
            (rule(json!({"uniqueUsers": false})), None, count),
            (rule(json!({"uniqueUsers": null})), Some("u1"), count),
            (rule(json!({})), Some("u1"), count),
        ];
        for (doc, user, want) in cases {
            let (r, problems) = parse_rule_value(&doc).expect("usable");
            assert!(problems.is_empty(), "{problems:?}");
            let mut ev = event("Boom", false);
            ev.user = user.map(str::to_owned);
            assert_eq!(r.wants(&ev, &Title::new(&ev.title)), want, "{doc} {user:?}");
        }
        let p = parse_rule_value(&rule(json!({"uniqueUsers": "yes"}))).expect_err("not a boolean");
        assert!(
            p.fatal && p.message.contains("`uniqueUsers` must be a boolean"),
            "{p}"
        );
        assert!(p.fix.contains("distinct users"), "{p}");
        let only_new = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "uniqueUsers": true, "channels": slack()});
        let (r, problems) = parse_rule_value(&only_new).expect("usable, with a warning");
        assert_eq!(problems.len(), 1);
        assert!(
            !problems[0].fatal && problems[0].message.contains("ONLY_NEW"),
            "{problems:?}"
        );
        let ev = event("Boom", true);
        assert_eq!(
            r.wants(&ev, &Title::new(&ev.title)),
            Some(Want::FirstSeen),
            "still fires on new errors"
        );
        let raw: RawRule = serde_json::from_value(rule(json!({"uniqueUsers": true}))).expect("raw");
        assert_eq!(raw.unique_users, Field::Typed(true));
        assert!(serde_json::to_string(&raw)
            .expect("json")
            .contains(r#""uniqueUsers":true"#));
        let raw: RawRule = serde_json::from_value(rule(json!({}))).expect("raw");
        assert!(!serde_json::to_string(&raw).expect("json").contains("uniqueUsers"));
    }

    #[test]
    fn enabled_channel_without_endpoint_is_reported_not_fatal() {
        let doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"slack": {"isEnabled": true, "endpoint": ""}, "webhook": {"isEnabled": true, "endpoint": "https://x.test/h", "minPeriod": 30}}});
        let (rule, problems) = parse_rule_value(&doc).expect("usable");
        assert_eq!(rule.channels.len(), 1);
        assert_eq!(rule.channels[0].min_period_s, 30);
        assert_eq!(problems.len(), 1);
        assert!(!problems[0].fatal);
    }

    /// The per-project bounds as the engine reads them (`crate::limits`): a table per bound.
    #[test]
    fn limits_table() {
        let id = |i: usize| format!("5e3eef0679fa3700a0198{i:03x}");
        let rule = |i: usize| json!({"_id": id(i), "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()});
        let limits = |rules, recipients| Limits {
            max_rules: rules,
            max_mutes: 1000,
            max_email_recipients: recipients,
        };
        // (rules stored, limit) → rules read (the first ones, in document order), skipped, a project problem
        for (stored, max, read) in [(0, 3, 0), (3, 3, 3), (4, 3, 3), (150, 100, 100), (5, 1, 1)] {
            let items = Value::Array((0..stored).map(rule).collect());
            let pr = ProjectRules::from_notifications_with(
                Some(&items),
                &limits(max, 50),
                &RuleDefaults::default(),
            );
            let ids: Vec<String> = pr.rules.iter().map(|r| r.id.clone()).collect();
            assert_eq!(ids, (0..read).map(id).collect::<Vec<_>>(), "{stored}/{max}");
            assert_eq!(pr.skipped, stored - read, "{stored}/{max}");
            let project: Vec<&RuleProblem> = pr.problems.iter().filter(|p| p.rule_id.is_none()).collect();
            assert_eq!(
                project.len(),
                usize::from(stored > max),
                "{stored}/{max}: {:?}",
                pr.problems
            );
            if let Some(p) = project.first() {
                assert!(p.limit && !p.fatal, "{p:?}");
                assert!(p.message.contains(&format!("{stored} rules")), "{}", p.message);
                assert_eq!(p.to_string(), format!("{} (fix: {})", p.message, p.fix));
            }
        }
        // Rules past the limit are not even validated: a broken one there is no problem of the engine's.
        let items = json!([rule(0), {"_id": id(1), "whatToReceive": "NOPE"}]);
        let pr =
            ProjectRules::from_notifications_with(Some(&items), &limits(1, 50), &RuleDefaults::default());
        assert_eq!(pr.problems.len(), 1, "{:?}", pr.problems);

        // (recipients in the endpoint, limit) → the endpoint delivered to, a limit problem
        let addrs = |n: usize| (0..n).map(|i| format!("u{i}@x.io")).collect::<Vec<_>>();
        let cases = [
            (1, 50, addrs(1).join(","), false),
            (50, 50, addrs(50).join(", "), false),
            (51, 50, addrs(50).join(","), true),
            (60, 50, addrs(50).join(","), true),
            (3, 2, addrs(2).join(","), true),
        ];
        for (n, max, want, over) in cases {
            let endpoint = addrs(n).join(", ");
            let doc = json!({"_id": id(0), "isEnabled": true, "whatToReceive": "ONLY_NEW",
                "channels": {"email": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}});
            let (rule, problems) =
                parse_rule_value_with(&doc, &limits(100, max), &RuleDefaults::default()).expect("usable");
            assert_eq!(rule.channels[0].endpoint, want, "{n}/{max}");
            assert_eq!(problems.len(), usize::from(over), "{n}/{max}: {problems:?}");
            if over {
                let p = &problems[0];
                assert!(p.limit && !p.fatal && p.refuses_write(true), "{p:?}");
                assert!(
                    p.message
                        .contains(&format!("{n} recipients, over the limit of {max}")),
                    "{}",
                    p.message
                );
                assert!(p.fix.contains("--max-email-recipients"), "{}", p.fix);
            }
            // The default limit is 50.
            assert_eq!(
                parse_rule_value(&doc).expect("usable").1.len(),
                usize::from(n > 50),
                "{n}"
            );
        }
        // Other channels' endpoints are not address lists.
        let doc = json!({"_id": id(0), "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/a,b,c", "minPeriod": 0}}});
        let (rule, problems) =
            parse_rule_value_with(&doc, &limits(100, 1), &RuleDefaults::default()).expect("usable");
        assert!(problems.is_empty() && rule.channels[0].endpoint == "https://h.example/a,b,c");

        // Keys MongoDB reads as operators or paths: reported by the reader (not fatal), beside other problems.
        let doc = json!({"_id": id(0), "isEnabled": true, "whatToReceive": "NOPE", "$where": "1", "channels": slack()});
        let problems = rule_problems(&doc, &Limits::default());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].fatal && !problems[0].limit);
        assert!(problems[1].limit && problems[1].message.contains("`$where`"));
        let pr = ProjectRules::from_notifications_with(
            Some(&json!([doc])),
            &Limits::default(),
            &RuleDefaults::default(),
        );
        assert_eq!(pr.problems.len(), 2, "{:?}", pr.problems);
    }

    #[test]
    fn which_problems_refuse_a_write() {
        let p = |fatal, limit| RuleProblem {
            rule_id: Some("r".into()),
            fatal,
            limit,
            message: "m".into(),
            fix: "f".into(),
        };
        // (fatal, limit, force) → refused
        let cases = [
            (false, false, false, false),
            (false, false, true, false),
            (true, false, false, true),
            (true, false, true, false),
            (false, true, false, true),
            (false, true, true, true),
            (true, true, true, true),
        ];
        for (fatal, limit, force, refused) in cases {
            assert_eq!(
                p(fatal, limit).refuses_write(force),
                refused,
                "{fatal} {limit} {force}"
            );
        }
        // `limit` is written only when set (the JSON of every other problem is unchanged).
        assert!(!serde_json::to_string(&p(true, false))
            .expect("json")
            .contains("limit"));
        assert!(serde_json::to_string(&p(false, true))
            .expect("json")
            .contains(r#""limit":true"#));
    }

    #[test]
    fn project_names_are_one_bounded_line() {
        let named = |v: Value| ProjectRules::default().with_name(Some(&v)).name;
        assert_eq!(named(json!("  Acme web\n")), Some("Acme web".into()));
        assert_eq!(named(json!("a\tb")), Some("a b".into()));
        assert_eq!(named(json!("   ")), None);
        assert_eq!(named(json!(42)), None);
        assert_eq!(ProjectRules::default().with_name(None).name, None);
        let long = named(json!("x".repeat(500))).expect("name");
        assert_eq!(long.chars().count(), MAX_PROJECT_NAME_CHARS + 1);
    }

    #[test]
    fn channel_debug_redacts_endpoint() {
        let c = ChannelConfig {
            kind: ChannelKind::Slack,
            endpoint: "https://hooks.slack.com/services/SECRET".into(),
            min_period_s: 0,
            severity: None,
        };
        assert!(!format!("{c:?}").contains("SECRET"));
    }
}

#[cfg(test)]
mod decide_tests {
    use super::*;
    use crate::filter::FilterMiss;
    use serde_json::json;

    /// An event of group `g` (the tests of this file all use it).
    pub(super) fn ev(title: &str, is_new: bool, user: Option<&str>) -> Event {
        Event {
            title: title.into(),
            group_hash: "g".into(),
            is_new,
            repetition_id: None,
            timestamp: None,
            user: user.map(str::to_owned),
        }
    }

    /// The worker evaluates with `wants`, explain reports `decide`: one function, the same answers.
    #[test]
    fn decide_table_and_wants_agree() {
        let hook = json!({"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "minPeriod": 0}});
        let rule = |extra: Value| {
            let mut r = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SEEN_MORE",
                               "threshold": 3, "thresholdPeriod": 60000, "channels": hook});
            if let (Some(r), Value::Object(e)) = (r.as_object_mut(), extra) {
                r.extend(e);
            }
            parse_rule_value(&r).expect("rule").0
        };
        let count = Ok(Want::Count {
            threshold: 3,
            period_ms: 60000,
            window: Window::Fixed,
        });
        let cases: Vec<(CompiledRule, Event, Result<Want, Skip>)> = vec![
            (rule(json!({})), ev("Boom", false, None), count),
            (
                rule(json!({"isEnabled": false})),
                ev("Boom", false, None),
                Err(Skip::Disabled),
            ),
            (
                rule(json!({"channels": {}})),
                ev("Boom", false, None),
                Err(Skip::NoChannels),
            ),
            (
                rule(json!({"whatToReceive": "ONLY_NEW"})),
                ev("Boom", false, None),
                Err(Skip::NotNew),
            ),
            (
                rule(json!({"whatToReceive": "ONLY_NEW"})),
                ev("Boom", true, None),
                Ok(Want::FirstSeen),
            ),
            (
                rule(json!({"uniqueUsers": true})),
                ev("Boom", false, None),
                Err(Skip::NoUser),
            ),
            (
                rule(json!({"including": ["timeout"]})),
                ev("Boom", false, None),
                Err(Skip::Filtered(FilterMiss::NoIncludingWord)),
            ),
            (
                rule(json!({"excluding": ["", "Noise", "boom"]})),
                ev("BOOM here", false, None),
                Err(Skip::Filtered(FilterMiss::ExcludedWord(1))),
            ),
            (
                rule(json!({"includingPatterns": ["^Type"]})),
                ev("Boom", false, None),
                Err(Skip::Filtered(FilterMiss::NoIncludingPattern)),
            ),
            (
                rule(json!({"excludingPatterns": ["^a", "o{2}"]})),
                ev("Boom", false, None),
                Err(Skip::Filtered(FilterMiss::ExcludedPattern(1))),
            ),
            // NO_EVENTS never asks the counter, whatever the event (new or not, a title its filters would refuse)
            (
                rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000})),
                ev("Boom", true, None),
                Err(Skip::ProjectWide),
            ),
            (
                rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000, "including": ["x"]})),
                ev("Boom", false, Some("u1")),
                Err(Skip::ProjectWide),
            ),
            (
                rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000, "isEnabled": false})),
                ev("Boom", false, None),
                Err(Skip::Disabled),
            ),
        ];
        for (i, (rule, event, expected)) in cases.iter().enumerate() {
            let title = Title::new(&event.title);
            let got = rule.decide(event, &title);
            assert_eq!(&got, expected, "case {i}");
            assert_eq!(rule.wants(event, &title), got.ok(), "case {i}: wants = decide");
        }
        // The reason names what decided.
        let r = rule(json!({"excluding": ["noise", "boom"]}));
        let Err(Skip::Filtered(miss)) = r.decide(&ev("a Boom", false, None), &Title::new("a Boom")) else {
            panic!("filtered")
        };
        assert!(r.filter.describe(miss).contains("\"boom\""));
        let r = rule(json!({"excludingPatterns": ["o{2}"]}));
        let Err(Skip::Filtered(miss)) = r.decide(&ev("Boom", false, None), &Title::new("Boom")) else {
            panic!("filtered")
        };
        assert!(r.filter.describe(miss).contains("o{2}"));
    }

    /// SPIKE's decision: the baseline (bucket edges, empty buckets, young groups) and the count it needs
    /// (factor exactly met).
    #[test]
    fn spike_table() {
        let spike = |w, factor_milli, threshold| Spike {
            period_ms: 60_000,
            baseline_windows: w,
            factor_milli,
            threshold,
        };
        let s = spike(3, 5000, 10);
        // (origin, cur, held buckets) → (sum, buckets)
        type Case = (i64, i64, Vec<(i64, u64)>, (u64, u64));
        let cases: Vec<Case> = vec![
            // the previous 3 buckets: 7, 8, 9 (cur 10); 6 is one too old and 10 is the current one
            (0, 10, vec![(6, 100), (7, 1), (8, 2), (9, 3), (10, 50)], (6, 3)),
            // empty buckets count as 0: only bucket 7 held, still 3 buckets
            (0, 10, vec![(7, 12)], (12, 3)),
            // nothing held at all after a long quiet: baseline 0 over 3 buckets
            (0, 10, vec![], (0, 3)),
            // a young group: first bucket 8, so buckets 8 and 9 only
            (8, 10, vec![(8, 4), (9, 6)], (10, 2)),
            // its first bucket: no baseline
            (10, 10, vec![(10, 5)], (0, 0)),
            // a bucket before the group's first (a stale one) is never part of it
            (9, 10, vec![(8, 40), (9, 6)], (6, 1)),
            // the clock went back before the group's first bucket
            (12, 10, vec![(9, 6)], (0, 0)),
        ];
        for (origin, cur, held, want) in cases {
            assert_eq!(
                s.baseline(origin, cur, held.clone()),
                want,
                "{origin} {cur} {held:?}"
            );
        }
        // (spike, sum, buckets) → needed
        let needed = [
            // no baseline (the group's first bucket): nothing fires
            (spike(24, 5000, 10), 0, 0, None),
            // baseline 0 over 24 buckets: the threshold
            (spike(24, 5000, 10), 0, 24, Some(10)),
            // 5 × mean 20 = 100
            (spike(24, 5000, 10), 480, 24, Some(100)),
            // 5 × mean 1 = 5, below the threshold
            (spike(24, 5000, 10), 24, 24, Some(10)),
            // factor exactly met: 1.5 × 10 = 15, not 16
            (spike(2, 1500, 1), 20, 2, Some(15)),
            // 2.2 × 10 = 22 exactly (a float would give 22.000000000000004 and round up to 23)
            (spike(2, 2200, 1), 20, 2, Some(22)),
            // a fraction rounds up: 1.5 × 7/3 = 3.5 → 4
            (spike(3, 1500, 1), 7, 3, Some(4)),
            // young group: mean of 2 buckets (4 + 6) / 2 = 5, × 5 = 25
            (spike(24, 5000, 10), 10, 2, Some(25)),
        ];
        for (s, sum, buckets, want) in needed {
            assert_eq!(s.needed(sum, buckets), want, "{s:?} {sum} {buckets}");
        }
        assert_eq!(s.bucket(119_999), 1);
        assert_eq!(s.bucket(120_000), 2);
        assert_eq!(s.bucket(-1), -1);
    }

    /// REAPPEARED's decision: quiet exactly met, a mark, no mark (new or not, rule watching long enough or not).
    #[test]
    fn reappeared_table() {
        let q = 1000;
        // (last seen, now, armed at, isNew) → fires
        let cases = [
            (Some(0), 999, 0, false, false),
            (Some(0), 1000, 0, false, true),
            (Some(0), 1000, 0, true, true),
            (Some(5000), 5000, 0, false, false),
            (None, 5000, 0, true, false),
            (None, 5000, 0, false, true),
            (None, 5000, 4001, false, false),
            (None, 5000, 4000, false, true),
            (None, 5000, i64::MAX, false, false),
        ];
        for (seen, now, armed, is_new, fires) in cases {
            assert_eq!(
                reappears(seen, now, q, armed, is_new),
                fires,
                "{seen:?} {now} {armed} {is_new}"
            );
        }
        assert_eq!(object_id_ms("5e3eef0679fa3700a0198a4a"), Some(0x5e3e_ef06 * 1000));
        assert_eq!(object_id_ms("r1"), None);
        assert_eq!(object_id_ms("5e3eef0679fa3700a0198a4z"), None);
    }

    #[test]
    fn spike_and_reappeared_rules_validate() {
        let base = |extra: Value| {
            let mut doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true,
                "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}});
            for (k, v) in extra.as_object().into_iter().flatten() {
                doc[k] = v.clone();
            }
            doc
        };
        let what = |extra: Value| parse_rule_value(&base(extra)).map(|(r, _)| r.what);
        assert_eq!(
            what(json!({"whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000})),
            Ok(WhatToReceive::Spike(Spike {
                period_ms: 3_600_000,
                baseline_windows: 24,
                factor_milli: 5000,
                threshold: 10
            }))
        );
        assert_eq!(
            what(
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 1000, "baselineWindows": 2, "factor": 1.5,
                "threshold": 1})
            ),
            Ok(WhatToReceive::Spike(Spike {
                period_ms: 1000,
                baseline_windows: 2,
                factor_milli: 1500,
                threshold: 1
            }))
        );
        assert_eq!(
            what(json!({"whatToReceive": "REAPPEARED"})),
            Ok(WhatToReceive::Reappeared {
                quiet_period_ms: DEFAULT_QUIET_PERIOD_MS
            })
        );
        assert_eq!(
            what(json!({"whatToReceive": "REAPPEARED", "quietPeriod": 1000})),
            Ok(WhatToReceive::Reappeared {
                quiet_period_ms: 1000
            })
        );
        // (fields, what the problem says, what the fix says)
        let bad = [
            (
                json!({"whatToReceive": "SPIKE"}),
                "has no `thresholdPeriod`",
                "3600000",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 999}),
                "between 1000 and 86400000",
                "bucket",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 86_400_001}),
                "1 s … 1 day",
                "bucket",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 1}),
                "between 2 and 168, got 1",
                "24",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 169}),
                "got 169",
                "2 … 168",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "factor": 1.4}),
                "between 1.5 and 100, got 1.4",
                "e.g. 5",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "factor": "5x"}),
                "must be a number",
                "e.g. 5",
            ),
            (
                json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "threshold": 0}),
                "least count",
                "10",
            ),
            (
                json!({"whatToReceive": "REAPPEARED", "quietPeriod": 999}),
                "between 1000 and 7776000000",
                "604800000",
            ),
            (
                json!({"whatToReceive": "REAPPEARED", "quietPeriod": "7d"}),
                "got \"7d\"",
                "milliseconds",
            ),
            (
                json!({"whatToReceive": "REAPPEARED", "quietPeriod": 7_776_000_001u64}),
                "90 days",
                "7 days",
            ),
        ];
        for (extra, message, fix) in bad {
            let p = parse_rule_value(&base(extra.clone())).expect_err("invalid");
            assert!(p.fatal && p.message.contains(message), "{extra}: {p}");
            assert!(p.fix.contains(fix), "{extra}: {p}");
        }
        // `uniqueUsers` means nothing to these kinds: a warning, the rule still works
        let (_, problems) =
            parse_rule_value(&base(json!({"whatToReceive": "REAPPEARED", "uniqueUsers": true})))
                .expect("usable");
        assert!(problems.len() == 1 && !problems[0].fatal, "{problems:?}");
        // the fields are written back as read
        let doc = base(
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 5, "factor": 2.5,
            "quietPeriod": 1000}),
        );
        let raw = RawRule::from_value(&doc).expect("object");
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
        // decide: a REAPPEARED rule carries the event's isNew and its id's time
        let (r, _) = parse_rule_value(&base(json!({"whatToReceive": "REAPPEARED", "quietPeriod": 1000})))
            .expect("usable");
        let ev = ev("Boom", true, None);
        assert_eq!(
            r.wants(&ev, &Title::new("Boom")),
            Some(Want::Reappeared {
                quiet_period_ms: 1000,
                armed_at_ms: 0x5e3e_ef06 * 1000,
                is_new: true
            })
        );
    }
}
