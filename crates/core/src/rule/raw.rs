//! Hawk's rule document as a serde model, [`RawRule`], and its one validation into a [`CompiledRule`]
//! ([`RawRule::validate`]): the raw → validated split of ripgrep's low and high arguments.
//!
//! Reading is tolerant so that one odd field never loses a whole project: every field Klaxon reads is a
//! [`Field`], which is missing, of the expected type, or any other JSON value kept as it was (validation
//! quotes it in the problem, and writing the model back gives it back unchanged). Fields Klaxon does not
//! read (`uidAdded`, whatever Hawk adds next) are kept in `extra`. Only validation decides what is wrong.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::endpoint::endpoint_problem;
use super::{ChannelConfig, ChannelKind, CompiledRule, RuleDefaults, Severity, MAX_MIN_PERIOD_S};
use crate::field::Field;
use crate::filter::{Case, TitleFilter};
use crate::kind::{seen_more, KindFields, WhatToReceive};
use crate::limits::{email_recipients, Limits};
use crate::oncall::{OnCallFields, RawEscalationStep, RawQuietWindow, RawRenotify};
use crate::problem::RuleProblem;

/// A rule id as stored: a 24-hex string (the import format) or an ObjectId in extended JSON
/// (`{"$oid": "…"}`, how MongoDB documents read as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RuleId {
    /// `"5e3eef0679fa3700a0198a4a"`.
    Hex(String),
    /// `{"$oid": "5e3eef0679fa3700a0198a4a"}`.
    Oid {
        /// The 24-hex id.
        #[serde(rename = "$oid")]
        oid: String,
        /// Anything else in the object, kept.
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
}

impl RuleId {
    /// The id text.
    pub fn as_str(&self) -> &str {
        match self {
            RuleId::Hex(s) | RuleId::Oid { oid: s, .. } => s,
        }
    }
}

/// One channel of a rule (`channels.<key>`), as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawChannel {
    /// On/off.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub is_enabled: Field<bool>,
    /// Webhook URL, chat id, comma-separated addresses.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub endpoint: Field<String>,
    /// Digest period in whole seconds.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub min_period: Field<u64>,
    /// Fields Klaxon does not read, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl RawChannel {
    /// An enabled channel with this endpoint and digest period: what `klaxon rules add` stores.
    pub fn enabled(endpoint: &str, min_period_s: u64) -> Self {
        RawChannel {
            is_enabled: Field::Typed(true),
            endpoint: Field::Typed(endpoint.to_owned()),
            min_period: Field::Typed(min_period_s),
            extra: Map::new(),
        }
    }

    /// True only for `isEnabled: true`.
    pub fn is_on(&self) -> bool {
        self.is_enabled.typed() == Some(&true)
    }
}

/// A rule's `channels` object: channels by key, in the document's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Channels(pub Vec<(String, Field<RawChannel>)>);

impl Channels {
    /// Sets a channel, keeping its place when the key is already there (like a JSON object would).
    pub fn insert(&mut self, key: &str, channel: Field<RawChannel>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, c)) => *c = channel,
            None => self.0.push((key.to_owned(), channel)),
        }
    }

    /// The channels that are objects with `isEnabled: true`, with their keys.
    pub fn enabled(&self) -> impl Iterator<Item = (&str, &RawChannel)> {
        self.0.iter().filter_map(|(key, ch)| match ch {
            Field::Typed(c) if c.is_on() => Some((key.as_str(), c)),
            _ => None,
        })
    }
}

impl Serialize for Channels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, ch) in &self.0 {
            map.serialize_entry(key, ch)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Channels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChannelsVisitor;
        impl<'de> Visitor<'de> for ChannelsVisitor {
            type Value = Channels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of channels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Channels, A::Error> {
                let mut out = Channels::default();
                while let Some((key, ch)) = access.next_entry::<String, Field<RawChannel>>()? {
                    out.insert(&key, ch);
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(ChannelsVisitor)
    }
}

/// A rule in Hawk's `projects.notifications` shape, as stored, before validation.
///
/// Reading a JSON object into it never fails (see [`Field`]); [`RawRule::validate`] turns it into a
/// [`CompiledRule`] or says what is wrong. Written back, it gives the same document: known fields in this
/// order, then the unknown ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawRule {
    /// Rule id; missing until stored (the store assigns one).
    #[serde(rename = "_id", default, skip_serializing_if = "Field::is_missing")]
    pub id: Field<RuleId>,
    /// Off = ignored.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub is_enabled: Field<bool>,
    /// `ONLY_NEW`, `SEEN_MORE` (or legacy `ALL`).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub what_to_receive: Field<String>,
    /// SEEN_MORE threshold.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub threshold: Field<u64>,
    /// SEEN_MORE window length in ms.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub threshold_period: Field<u64>,
    /// `fixed` or `sliding`.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub window: Field<String>,
    /// SPIKE: how many previous buckets form the baseline (Klaxon extension).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub baseline_windows: Field<u64>,
    /// SPIKE: how many times the baseline the current bucket must reach (Klaxon extension).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub factor: Field<f64>,
    /// REAPPEARED: the quiet, in ms, after which a group seen again fires (Klaxon extension).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub quiet_period: Field<u64>,
    /// How long an alert waits without a matching event before it resolves, ms (Klaxon extension; 0 = never).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub resolve_after: Field<u64>,
    /// Reminders of a firing alert: `{"every": ms, "max": n}` (Klaxon extension, [`crate::oncall`]).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub renotify: Field<RawRenotify>,
    /// Escalation steps: `[{"after": ms, "channels": {…}}]` (Klaxon extension, [`crate::oncall`]).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub escalation: Field<Vec<Field<RawEscalationStep>>>,
    /// Quiet windows: `[{"days", "from", "to", "timezone"}]` (Klaxon extension, [`crate::oncall`]).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub quiet_hours: Field<Vec<Field<RawQuietWindow>>>,
    /// Channels never held by `quietHours` (Klaxon extension).
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub quiet_hours_bypass: Field<Vec<String>>,
    /// SEEN_MORE counts distinct users (`event.user`) instead of events.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub unique_users: Field<bool>,
    /// Words, any of which must appear.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub including: Field<Vec<String>>,
    /// Klaxon extension: `true` compares `including` words case-sensitively (Hawk's notifier), `false`
    /// case-insensitively; absent = the process's `--including-case`.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub including_case_sensitive: Field<bool>,
    /// Words, none of which may appear.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub excluding: Field<Vec<String>>,
    /// Regexes, any of which must match.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub including_patterns: Field<Vec<String>>,
    /// Regexes, none of which may match.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub excluding_patterns: Field<Vec<String>>,
    /// Channels by key.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub channels: Field<Channels>,
    /// Fields Klaxon does not read (`uidAdded`, …), kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl RawRule {
    /// Reads one rule from its JSON form (a MongoDB document as relaxed extended JSON, or the import
    /// format). Fails only when the value is not an object.
    pub fn from_value(value: &Value) -> Result<RawRule, RuleProblem> {
        let not_an_object = |message: String| RuleProblem {
            rule_id: None,
            fatal: true,
            limit: false,
            message,
            fix: "store each rule of `notifications` as a document".into(),
        };
        if !value.is_object() {
            return Err(not_an_object("rule is not an object".into()));
        }
        // Every field takes any JSON value, so an object always reads; the error is kept for safety.
        RawRule::deserialize(value).map_err(|e| not_an_object(format!("rule cannot be read: {e}")).bounded())
    }

    /// The rule id, when the document has one as a string or `{"$oid": "…"}`.
    pub fn id(&self) -> Option<&str> {
        self.id.typed().map(RuleId::as_str)
    }

    /// The enabled channels of the rule that Klaxon does not deliver (Hawk's `webPush`, `desktopPush`, or
    /// any unknown key), sorted by key: they are ignored, not errors.
    pub fn ignored_channels(&self) -> Vec<String> {
        let Some(chs) = self.channels.typed() else {
            return Vec::new();
        };
        chs.enabled()
            .filter(|(key, _)| ChannelKind::parse(key).is_none())
            .map(|(key, _)| key.to_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Validates the rule into a [`CompiledRule`].
    ///
    /// Returns the compiled rule and the non-fatal problems found in it (skipped channels), or the fatal
    /// problem that makes the rule unusable. Every problem's message and fix is one line of at most
    /// [`super::MAX_PROBLEM_BYTES`]: messages quote the rule's own values (a bad `window`, a regex error), and
    /// those come from a tenant.
    pub fn validate(&self) -> Result<(CompiledRule, Vec<RuleProblem>), RuleProblem> {
        self.validate_with(&Limits::default(), &RuleDefaults::default())
    }

    /// [`RawRule::validate`] under the process's [`Limits`] and with its [`RuleDefaults`] for what the rule
    /// leaves unset (`--including-case`): an email channel with more than [`Limits::max_email_recipients`]
    /// addresses keeps the first ones (in the endpoint's order) and is reported (a problem with `limit: true`,
    /// which writes refuse).
    pub fn validate_with(
        &self,
        limits: &Limits,
        defaults: &RuleDefaults,
    ) -> Result<(CompiledRule, Vec<RuleProblem>), RuleProblem> {
        match self.check(limits, defaults) {
            Ok((rule, problems)) => Ok((rule, problems.into_iter().map(RuleProblem::bounded).collect())),
            Err(p) => Err(p.bounded()),
        }
    }

    fn check(
        &self,
        limits: &Limits,
        defaults: &RuleDefaults,
    ) -> Result<(CompiledRule, Vec<RuleProblem>), RuleProblem> {
        let rule_id = self.id().map(str::to_owned);
        let fatal = |message: String, fix: &str| RuleProblem {
            rule_id: rule_id.clone(),
            fatal: true,
            limit: false,
            message,
            fix: fix.to_owned(),
        };
        let Some(id) = rule_id.clone() else {
            return Err(fatal(
                "rule has no `_id`".into(),
                "re-import the rule: `klaxon rules import` assigns ids",
            ));
        };
        let enabled = match &self.is_enabled {
            Field::Typed(b) => *b,
            f if f.is_unset() => false,
            _ => {
                return Err(fatal(
                    "`isEnabled` must be a boolean".into(),
                    "`klaxon rules enable|disable`",
                ))
            }
        };
        // The kind's own fields, defaults, limits and problems: `crate::kind`.
        let what = WhatToReceive::read(
            &KindFields {
                what_to_receive: &self.what_to_receive,
                threshold: &self.threshold,
                threshold_period: &self.threshold_period,
                baseline_windows: &self.baseline_windows,
                factor: &self.factor,
                quiet_period: &self.quiet_period,
            },
            &fatal,
        )?;
        let window = seen_more::read_window(&self.window, &fatal)?;
        let resolve_after_ms = crate::alert::read_resolve_after(&self.resolve_after, &what, &fatal)?;
        let unique_users =
            match &self.unique_users {
                Field::Typed(b) => *b,
                f if f.is_unset() => false,
                other => return Err(fatal(
                    format!("`uniqueUsers` must be a boolean, got {}", other.to_json()),
                    "set `uniqueUsers` to true to count distinct users (`event.user.id`) instead of events, \
                     or to false (or leave it out) to count events",
                )),
            };
        let list = |field: &Field<Vec<String>>, name: &str| -> Result<Vec<String>, RuleProblem> {
            match field {
                Field::Typed(items) => Ok(items.clone()),
                f if f.is_unset() => Ok(Vec::new()),
                _ => Err(fatal(
                    format!("`{name}` must be a list of strings"),
                    "store a JSON array of strings",
                )),
            }
        };
        let including = list(&self.including, "including")?;
        let excluding = list(&self.excluding, "excluding")?;
        let including_patterns = list(&self.including_patterns, "includingPatterns")?;
        let excluding_patterns = list(&self.excluding_patterns, "excludingPatterns")?;
        let including_case = match &self.including_case_sensitive {
            Field::Typed(true) => Case::Sensitive,
            Field::Typed(false) => Case::Insensitive,
            f if f.is_unset() => defaults.including_case,
            other => {
                return Err(fatal(
                    format!(
                        "`includingCaseSensitive` must be a boolean, got {}",
                        other.to_json()
                    ),
                    "set `includingCaseSensitive` to true (Hawk's case-sensitive `including`) or false, or leave \
                     it out for the process's --including-case",
                ))
            }
        };
        let filter = TitleFilter::new(
            &including,
            including_case,
            &excluding,
            &including_patterns,
            &excluding_patterns,
        )
        .map_err(|e| {
            fatal(
                e.to_string(),
                "fix the pattern (Rust `regex` syntax, no look-around or backreferences)",
            )
        })?;

        let mut problems = Vec::new();
        let warning = |message: String, fix: String| RuleProblem {
            rule_id: Some(id.clone()),
            fatal: false,
            limit: false,
            message,
            fix,
        };
        // Unknown keys are kept (Hawk adds its own), but one a typo away from a key Klaxon reads is almost
        // certainly that key misspelt: `"includng"` would otherwise pass and fire on every title.
        for key in self.extra.keys() {
            if let Some(known) = did_you_mean(key, RULE_KEYS) {
                problems.push(warning(
                    format!(
                        "unknown key `{}` is ignored; did you mean `{known}`?",
                        crate::text::one_line(key, 60)
                    ),
                    format!("rename `{}` to `{known}`", crate::text::one_line(key, 60)),
                ));
            }
        }
        if let Some((message, fix)) = what.unique_users_warning().filter(|_| unique_users) {
            problems.push(warning(message, fix));
        }
        // NO_EVENTS watches whether the project sends anything at all: what narrows or ends a group's alert means
        // nothing to it (its alert resolves on the project's next event).
        let mut resolve_after_ms = resolve_after_ms;
        if let crate::kind::WhatToReceive::NoEvents { .. } = what {
            if resolve_after_ms > 0 {
                problems.push(warning(
                    "`resolveAfter` is ignored by a NO_EVENTS rule: its alert resolves when the project's next \
                     event arrives"
                        .into(),
                    "remove `resolveAfter`".into(),
                ));
                resolve_after_ms = 0;
            }
            if [&including, &excluding, &including_patterns, &excluding_patterns]
                .iter()
                .any(|l| !l.is_empty())
            {
                problems.push(warning(
                    "title filters (`including`, `excluding`, `includingPatterns`, `excludingPatterns`) are \
                     ignored by a NO_EVENTS rule: any event of the project counts"
                        .into(),
                    "remove the filters, or use a SEEN_MORE rule to watch some titles".into(),
                ));
            }
        }
        let empty = Channels::default();
        let channels = read_channels(
            self.channels.typed().unwrap_or(&empty),
            "channels",
            &Scope {
                id: &id,
                limits,
                fatal: &fatal,
                warning: &warning,
            },
            &mut problems,
        )?;
        let channels_at = |chs: &Channels, path: &str, problems: &mut Vec<RuleProblem>| {
            read_channels(
                chs,
                path,
                &Scope {
                    id: &id,
                    limits,
                    fatal: &fatal,
                    warning: &warning,
                },
                problems,
            )
        };
        let on_call = crate::oncall::read(
            &OnCallFields {
                renotify: &self.renotify,
                escalation: &self.escalation,
                quiet_hours: &self.quiet_hours,
                quiet_hours_bypass: &self.quiet_hours_bypass,
            },
            &crate::oncall::Reader {
                fatal: &fatal,
                warning: &warning,
                channels: &channels_at,
                did_you_mean: &did_you_mean,
            },
            &mut problems,
        )?;
        if enabled && channels.is_empty() {
            problems.push(warning(
                "rule is enabled but has no usable channel, so it never notifies".into(),
                "enable a channel (email, telegram, slack, webhook, loop, discord, teams or pagerduty) with an \
                 endpoint"
                    .into(),
            ));
        }
        Ok((
            CompiledRule {
                id,
                enabled,
                what,
                window,
                channels,
                filter,
                unique_users,
                resolve_after_ms,
                renotify: on_call.renotify,
                escalation: on_call.escalation,
                quiet_hours: on_call.quiet_hours,
            },
            problems,
        ))
    }
}

/// What [`read_channels`] needs from the rule being read.
struct Scope<'a> {
    id: &'a str,
    limits: &'a Limits,
    fatal: &'a dyn Fn(String, &str) -> RuleProblem,
    warning: &'a dyn Fn(String, String) -> RuleProblem,
}

/// Reads a channels object (the rule's `channels`, or an escalation step's, at `path`): its enabled channels
/// Klaxon delivers, sorted by kind, each checked the same way wherever it is (endpoint present and of its
/// service's shape, `minPeriod`, the email recipients' limit, PagerDuty's `severity`). Warnings go to `problems`;
/// a `minPeriod` over the limit is fatal. Problems about a step's channels name the step's path.
fn read_channels(
    chs: &Channels,
    path: &str,
    scope: &Scope<'_>,
    problems: &mut Vec<RuleProblem>,
) -> Result<Vec<ChannelConfig>, RuleProblem> {
    let (fatal, warning) = (scope.fatal, scope.warning);
    // The rule's own channels keep the words they always had; a step's say where they are.
    let at = if path == "channels" {
        String::new()
    } else {
        format!("`{path}`: ")
    };
    for (key, ch) in &chs.0 {
        let Field::Typed(ch) = ch else { continue };
        for field in ch.extra.keys() {
            if let Some(known) = did_you_mean(field, CHANNEL_KEYS) {
                problems.push(warning(
                    format!(
                        "unknown key `{path}.{key}.{}` is ignored; did you mean `{known}`?",
                        crate::text::one_line(field, 60)
                    ),
                    format!("rename it to `{path}.{key}.{known}`"),
                ));
            }
        }
    }
    let mut channels = Vec::new();
    for (key, ch) in chs.enabled() {
        // Channels Klaxon does not deliver (Hawk's `webPush`, `desktopPush`: Hawk has no sender for them
        // either) are left alone; `klaxon rules check` lists them as ignored (`ignored_channels`).
        let Some(kind) = ChannelKind::parse(key) else {
            continue;
        };
        let endpoint = ch.endpoint.typed().map(String::as_str).unwrap_or("").trim();
        if endpoint.is_empty() {
            problems.push(warning(
                format!("{at}channel `{key}` is enabled but has no endpoint; it is skipped"),
                format!("set `{path}.{key}.endpoint` or disable the channel"),
            ));
            continue;
        }
        let min_period_s = if ch.min_period.is_unset() {
            0
        } else {
            let v = ch.min_period.to_json();
            match ch.min_period.whole() {
                Some(n) if n > MAX_MIN_PERIOD_S => {
                    return Err(fatal(
                        format!(
                            "{at}channel `{key}` has `minPeriod` {v}, over the limit of {MAX_MIN_PERIOD_S} s (7 days)"
                        ),
                        "set `minPeriod` to whole seconds between 0 and 604800",
                    ))
                }
                Some(n) => n,
                None => {
                    problems.push(warning(
                        format!("{at}channel `{key}` has `minPeriod` {v}, not whole seconds; digests are off"),
                        format!("set `{path}.{key}.minPeriod` to whole seconds ≥ 0"),
                    ));
                    0
                }
            }
        };
        let endpoint = match kind {
            ChannelKind::Email => {
                let recipients: Vec<&str> = email_recipients(endpoint).collect();
                match scope.limits.recipients_problem(scope.id, recipients.len()) {
                    Some(mut p) => {
                        p.message = format!("{at}{}", p.message);
                        problems.push(p);
                        recipients[..scope.limits.max_email_recipients].join(",")
                    }
                    None => endpoint.to_owned(),
                }
            }
            _ => endpoint.to_owned(),
        };
        if let Some((message, fix)) = endpoint_problem(kind, &endpoint) {
            problems.push(warning(format!("{at}{message}"), fix));
        }
        let severity = if kind == ChannelKind::Pagerduty {
            Some(match ch.extra.get("severity") {
                None | Some(Value::Null) => Severity::default(),
                Some(v) => match v.as_str().and_then(Severity::parse) {
                    Some(s) => s,
                    None => {
                        problems.push(warning(
                            format!(
                                "{at}channel `pagerduty` has `severity` {}, not one of critical, error, warning, \
                                 info; `error` is used",
                                klaxon_text(v)
                            ),
                            format!(
                                "set `{path}.pagerduty.severity` to \"critical\", \"error\", \"warning\" or \
                                 \"info\" (or leave it out for error)"
                            ),
                        ));
                        Severity::default()
                    }
                },
            })
        } else {
            None
        };
        channels.push(ChannelConfig {
            kind,
            endpoint,
            min_period_s,
            severity,
        });
    }
    channels.sort_by_key(|c| c.kind);
    Ok(channels)
}

/// The keys of a rule document Klaxon reads (Hawk's and its own extensions), for "did you mean".
pub const RULE_KEYS: &[&str] = &[
    "_id",
    "isEnabled",
    "whatToReceive",
    "threshold",
    "thresholdPeriod",
    "window",
    "baselineWindows",
    "factor",
    "quietPeriod",
    "resolveAfter",
    "renotify",
    "escalation",
    "quietHours",
    "quietHoursBypass",
    "uniqueUsers",
    "including",
    "includingCaseSensitive",
    "excluding",
    "includingPatterns",
    "excludingPatterns",
    "channels",
];

/// The keys of a channel Klaxon reads.
const CHANNEL_KEYS: &[&str] = &["isEnabled", "endpoint", "minPeriod", "severity"];

/// Keys people write for a known one that are not a typo of it.
const ALIASES: &[(&str, &str)] = &[
    ("patterns", "includingPatterns"),
    ("pattern", "includingPatterns"),
    ("regex", "includingPatterns"),
    ("regexes", "includingPatterns"),
    ("includePatterns", "includingPatterns"),
    ("excludePatterns", "excludingPatterns"),
    ("include", "including"),
    ("exclude", "excluding"),
];

/// The known key `key` most likely stands for: one it spells the same but for case or `_`, one at most one
/// edit (insertion, deletion, substitution or swap of neighbours) away, or a usual alias (`patterns`). `None`
/// for a key that is known itself or is nothing like one (Hawk's `uidAdded`).
pub(crate) fn did_you_mean(key: &str, known: &'static [&'static str]) -> Option<&'static str> {
    if known.contains(&key) {
        return None;
    }
    let norm = |s: &str| -> Vec<char> {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let k = norm(key);
    if let Some((_, to)) = ALIASES
        .iter()
        .find(|(alias, to)| known.contains(to) && norm(alias) == k)
    {
        return Some(to);
    }
    // Too short keys are one edit from too much (`id` from `_id` is fine: normalised they are equal).
    known.iter().copied().find(|candidate| {
        let c = norm(candidate);
        c == k || (k.len() >= 4 && within_one_edit(&k, &c))
    })
}

/// True when `a` and `b` differ by at most one insertion, deletion, substitution or swap of neighbours.
fn within_one_edit(a: &[char], b: &[char]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if long.len() - short.len() > 1 {
        return false;
    }
    let prefix = short.iter().zip(long).take_while(|(x, y)| x == y).count();
    if short.len() == long.len() {
        if prefix == short.len() {
            return true;
        }
        // a substitution, or a swap of neighbours
        short[prefix + 1..] == long[prefix + 1..]
            || (prefix + 1 < short.len()
                && short[prefix] == long[prefix + 1]
                && short[prefix + 1] == long[prefix]
                && short[prefix + 2..] == long[prefix + 2..])
    } else {
        short[prefix..] == long[prefix + 1..]
    }
}

/// A JSON value quoted in a problem: at most 100 characters on one line.
fn klaxon_text(v: &Value) -> String {
    crate::text::one_line(&v.to_string(), 100)
}

#[cfg(test)]
mod tests;
