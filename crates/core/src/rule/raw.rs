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
        // Never quiet by accident: what this version reads but does not act on yet is said, not passed over.
        if let crate::kind::WhatToReceive::NoEvents { .. } = what {
            problems.push(warning(
                "NO_EVENTS rules are checked and stored, but this version of Klaxon does not evaluate them yet: the \
                 rule never fires"
                    .into(),
                "watch the project's event rate with a SEEN_MORE or SPIKE rule meanwhile, and keep the rule for the \
                 version that evaluates it"
                    .into(),
            ));
        }
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

/// A Slack conversation id as the Web API's `chat.postMessage` and `chat.update` take it: `C…` (public
/// channel), `G…` (private channel, older workspaces) or `D…` (direct message), then 8 to 20 upper-case letters
/// and digits. Channel names (`#alerts`) are not ids: `chat.update` takes ids only, and a channel can be renamed.
pub fn is_slack_channel_id(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'C' | b'G' | b'D'))
        && (9..=21).contains(&s.len())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// What is wrong with the shape of an endpoint the channel's service would refuse, with the fix; `None` when it
/// looks right. Only the channels whose endpoints have a documented shape are judged: a Discord webhook URL
/// (`https://discord.com/api/webhooks/<id>/<token>`), a Teams Workflows URL (https only), a PagerDuty Events
/// API v2 routing key (32 letters and digits) and a Slack endpoint (an incoming-webhook URL, or a channel id
/// for the Web API: [`is_slack_channel_id`]). The channel is still delivered to (the service has the last word):
/// `klaxon rules check` shows the problem.
pub fn endpoint_problem(kind: ChannelKind, endpoint: &str) -> Option<(String, String)> {
    let endpoint = endpoint.trim();
    match kind {
        ChannelKind::Discord => {
            let ok = url::Url::parse(endpoint).is_ok_and(|u| {
                let segments: Vec<&str> = u.path_segments().map(Iterator::collect).unwrap_or_default();
                // /api/webhooks/<id>/<token>, or /api/v<N>/webhooks/<id>/<token>
                let rest = match segments.as_slice() {
                    ["api", "webhooks", rest @ ..] => rest,
                    ["api", v, "webhooks", rest @ ..] if v.starts_with('v') => rest,
                    _ => &[][..],
                };
                matches!(u.scheme(), "http" | "https")
                    && rest.len() == 2
                    && !rest[0].is_empty()
                    && rest[0].bytes().all(|b| b.is_ascii_digit())
                    && !rest[1].is_empty()
            });
            (!ok).then(|| {
                (
                    "channel `discord` endpoint is not a Discord webhook URL \
                     (https://discord.com/api/webhooks/<id>/<token>)"
                        .to_owned(),
                    "copy the URL from the channel's Integrations → Webhooks → Copy Webhook URL".to_owned(),
                )
            })
        }
        ChannelKind::Teams => {
            // Teams itself is https only; plain http is for a local receiver (a test stub, a relay), which the
            // senders reach only with --allow-private-endpoints, as `test-notify` does.
            let ok = url::Url::parse(endpoint).is_ok_and(|u| match u.scheme() {
                "https" => u.host_str().is_some(),
                "http" => u.host().is_some_and(|h| local_host(&h)),
                _ => false,
            });
            (!ok).then(|| {
                (
                    "channel `teams` endpoint is not an https URL: Teams Workflows webhooks are https (plain http \
                     only to a loopback or private address)"
                        .to_owned(),
                    "create a Workflows webhook (\"Post to a channel when a webhook request is received\") and \
                     paste its https URL"
                        .to_owned(),
                )
            })
        }
        ChannelKind::Slack if !endpoint.contains("://") => (!is_slack_channel_id(endpoint)).then(|| {
            let name = endpoint.starts_with('#');
            (
                if name {
                    "channel `slack` endpoint is a channel name: the Slack Web API needs the channel's id \
                     (C0123ABCD)"
                        .to_owned()
                } else {
                    "channel `slack` endpoint is neither an incoming-webhook URL (https://hooks.slack.com/…) nor \
                     a channel id (C0123ABCD)"
                        .to_owned()
                },
                "in Slack, open the channel's details: its Channel ID is at the bottom of the About tab; invite \
                 the operator's bot to it (/invite @<bot>), or paste an incoming-webhook URL instead"
                    .to_owned(),
            )
        }),
        ChannelKind::Slack => url::Url::parse(endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .is_none()
            .then(|| {
                (
                    "channel `slack` endpoint is not an http(s) URL".to_owned(),
                    "paste the incoming-webhook URL (https://hooks.slack.com/services/…) or a channel id \
                     (C0123ABCD)"
                        .to_owned(),
                )
            }),
        ChannelKind::Pagerduty => {
            let ok = endpoint.len() == 32 && endpoint.bytes().all(|b| b.is_ascii_alphanumeric());
            (!ok).then(|| {
                (
                    "channel `pagerduty` endpoint is not an Events API v2 routing key (32 letters and digits)"
                        .to_owned(),
                    "copy the Integration Key of the service's Events API v2 integration".to_owned(),
                )
            })
        }
        _ => None,
    }
}

/// A loopback, private or link-local address, or `localhost`: a receiver on the operator's own network.
fn local_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        url::Host::Ipv4(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        url::Host::Ipv6(ip) => {
            ip.is_loopback()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || (ip.segments()[0] & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "5e3eef0679fa3700a0198a4a";

    fn slack() -> Value {
        json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}})
    }

    /// A valid ONLY_NEW rule with `field` set to `value`.
    fn with(field: &str, value: Value) -> Value {
        let mut doc = json!({"_id": ID, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
            "thresholdPeriod": 60000, "channels": slack()});
        doc[field] = value;
        doc
    }

    #[test]
    fn ids_as_hex_or_oid() {
        let cases = [
            (json!(ID), Some(ID)),
            (json!({"$oid": ID}), Some(ID)),
            (json!({"$oid": ID, "note": 1}), Some(ID)),
            (json!({"$oid": 7}), None),
            (json!({"oid": ID}), None),
            (json!(42), None),
            (json!(null), None),
        ];
        for (id, want) in cases {
            let raw = RawRule::from_value(&with("_id", id.clone())).expect("an object reads");
            assert_eq!(raw.id(), want, "{id}");
            match want {
                Some(want) => assert_eq!(raw.validate().expect("usable").0.id, want, "{id}"),
                None => {
                    let p = raw.validate().expect_err("no id");
                    assert_eq!(p.message, "rule has no `_id`", "{id}");
                    assert_eq!(p.rule_id, None);
                }
            }
        }
        let raw = RawRule::from_value(&json!({"_id": {"$oid": ID}})).expect("object");
        assert!(matches!(&raw.id, Field::Typed(RuleId::Oid { oid, .. }) if oid == ID));
        let raw = RawRule::from_value(&json!({"_id": ID})).expect("object");
        assert_eq!(raw.id, Field::Typed(RuleId::Hex(ID.into())));
    }

    /// A field of the wrong type reads (the document is kept) and validation names it.
    #[test]
    fn wrong_types_are_problems_not_read_failures() {
        let cases = [
            ("isEnabled", json!("yes"), "`isEnabled` must be a boolean"),
            ("whatToReceive", json!(1), "unknown `whatToReceive` 1"),
            ("whatToReceive", json!(null), "unknown `whatToReceive` null"),
            (
                "whatToReceive",
                json!("SEEN_MOAR"),
                "unknown `whatToReceive` \"SEEN_MOAR\"",
            ),
            (
                "threshold",
                json!("3"),
                "`threshold` must be a whole number ≥ 1, got \"3\"",
            ),
            (
                "threshold",
                json!(null),
                "`threshold` must be a whole number ≥ 1, got null",
            ),
            (
                "threshold",
                json!(-1),
                "`threshold` must be a whole number ≥ 1, got -1",
            ),
            (
                "threshold",
                json!(2.5),
                "`threshold` must be a whole number ≥ 1, got 2.5",
            ),
            (
                "thresholdPeriod",
                json!([60000]),
                "`thresholdPeriod` must be milliseconds between 1000 and 2592000000, got [60000]",
            ),
            ("window", json!(true), "unknown `window` true"),
            (
                "window",
                json!({"fixed": null}),
                "unknown `window` {\"fixed\":null}",
            ),
            ("window", json!("hopping"), "unknown `window` \"hopping\""),
            ("uniqueUsers", json!(1), "`uniqueUsers` must be a boolean, got 1"),
            (
                "includingCaseSensitive",
                json!("yes"),
                "`includingCaseSensitive` must be a boolean, got \"yes\"",
            ),
            ("including", json!("db"), "`including` must be a list of strings"),
            (
                "excluding",
                json!(["a", 1]),
                "`excluding` must be a list of strings",
            ),
            (
                "includingPatterns",
                json!({}),
                "`includingPatterns` must be a list of strings",
            ),
            (
                "excludingPatterns",
                json!(false),
                "`excludingPatterns` must be a list of strings",
            ),
        ];
        for (field, value, want) in cases {
            let doc = with(field, value.clone());
            let raw = RawRule::from_value(&doc).expect("an object always reads");
            let p = raw.validate().expect_err(field);
            assert!(p.fatal, "{field}: {p}");
            assert_eq!(p.message, want, "{field} = {value}");
            assert_eq!(p.rule_id.as_deref(), Some(ID));
            // What was read is what was stored.
            assert_eq!(serde_json::to_value(&raw).expect("json"), doc, "{field}");
        }
    }

    /// Values that are not the plain type but mean it (MongoDB's number forms) and values that mean "unset".
    #[test]
    fn tolerated_forms() {
        let seen_more = |raw: &RawRule| raw.validate().expect("usable").0.what;
        let cases = [
            ("threshold", json!(3.0), 3, 60000),
            ("threshold", json!({"$numberLong": "3"}), 3, 60000),
            ("threshold", json!({"$numberInt": "4"}), 4, 60000),
            ("thresholdPeriod", json!(90000.0), 3, 90000),
        ];
        for (field, value, threshold, period_ms) in cases {
            let raw = RawRule::from_value(&with(field, value.clone())).expect("object");
            assert_eq!(
                seen_more(&raw),
                WhatToReceive::SeenMore { threshold, period_ms },
                "{field} = {value}"
            );
        }
        for field in [
            "isEnabled",
            "window",
            "uniqueUsers",
            "including",
            "includingCaseSensitive",
            "excludingPatterns",
        ] {
            let raw = RawRule::from_value(&with(field, Value::Null)).expect("object");
            assert!(raw.validate().is_ok(), "{field}: null means unset");
        }
        let raw = RawRule::from_value(&with("isEnabled", Value::Null)).expect("object");
        assert!(!raw.validate().expect("usable").0.enabled);
    }

    /// `includingCaseSensitive` on the rule wins; without it the process's default (`--including-case`) applies.
    #[test]
    fn including_case_comes_from_the_rule_or_the_process() {
        use crate::filter::Title;
        let title = Title::new("typeerror: x is undefined");
        // (the rule's field, the process default, whether `including: ["TypeError"]` matches the lowercase title)
        let cases = [
            (None, Case::Insensitive, true),
            (None, Case::Sensitive, false),
            (Some(true), Case::Insensitive, false),
            (Some(true), Case::Sensitive, false),
            (Some(false), Case::Sensitive, true),
            (Some(false), Case::Insensitive, true),
        ];
        for (field, default, matches) in cases {
            let mut doc = with("including", json!(["TypeError"]));
            if let Some(b) = field {
                doc["includingCaseSensitive"] = json!(b);
            }
            let raw = RawRule::from_value(&doc).expect("object");
            let defaults = RuleDefaults {
                including_case: default,
            };
            let (rule, _) = raw.validate_with(&Limits::default(), &defaults).expect("usable");
            assert_eq!(rule.filter.matches(&title), matches, "{field:?} {default:?}");
            // and the document is written back as it was read
            assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
        }
    }

    #[test]
    fn unknown_fields_are_kept_on_a_round_trip() {
        let docs = [
            json!({
                "_id": {"$oid": ID}, "uidAdded": {"$oid": "5e3eef0679fa3700a0198a00"}, "isEnabled": true,
                "whatToReceive": "ONLY_NEW", "including": [], "excluding": ["x"], "window": null,
                "channels": {
                    "telegram": {"isEnabled": true, "endpoint": "-100", "minPeriod": 60, "chatTitle": "ops"},
                    "webPush": {"isEnabled": false, "endpoint": "", "minPeriod": 0},
                    "email": "not an object"
                },
                "somethingNew": {"nested": [1, 2.5, null]}, "createdAt": {"$date": "2020-01-01T00:00:00Z"}
            }),
            json!({"_id": ID, "threshold": {"$numberLong": "5"}, "channels": []}),
            json!({}),
        ];
        for doc in docs {
            let raw = RawRule::from_value(&doc).expect("object");
            assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
        }
        let raw =
            RawRule::from_value(&json!({"_id": ID, "uidAdded": {"$oid": ID}, "custom": 1})).expect("object");
        assert_eq!(raw.extra.get("custom"), Some(&json!(1)));
        assert_eq!(raw.extra.get("uidAdded"), Some(&json!({"$oid": ID})));
    }

    #[test]
    fn not_an_object() {
        for v in [json!([]), json!("rule"), json!(null), json!(1)] {
            let p = RawRule::from_value(&v).expect_err("not a rule");
            assert!(p.fatal && p.rule_id.is_none());
            assert_eq!(p.message, "rule is not an object");
        }
    }

    /// The channels keep the document's order when written back: `klaxon rules add` stores them in the
    /// order of its flags.
    #[test]
    fn channels_keep_their_order() {
        let mut chs = Channels::default();
        chs.insert(
            "webhook",
            Field::Typed(RawChannel::enabled("https://h.test/x", 0)),
        );
        chs.insert("email", Field::Typed(RawChannel::enabled("a@b.test", 60)));
        chs.insert(
            "webhook",
            Field::Typed(RawChannel::enabled("https://h.test/y", 0)),
        );
        let text = serde_json::to_string(&chs).expect("json");
        assert_eq!(
            text,
            r#"{"webhook":{"isEnabled":true,"endpoint":"https://h.test/y","minPeriod":0},"email":{"isEnabled":true,"endpoint":"a@b.test","minPeriod":60}}"#
        );
        let back: Channels = serde_json::from_str(&text).expect("channels");
        assert_eq!(back, chs);
    }

    /// `channels.pagerduty.severity`: read for PagerDuty only, `error` by default, a bad value is a warning.
    #[test]
    fn pagerduty_severity() {
        let key = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";
        let rule = |severity: Value| {
            let mut ch = json!({"isEnabled": true, "endpoint": key, "minPeriod": 0});
            if !severity.is_null() {
                ch["severity"] = severity;
            }
            let doc = with("channels", json!({"pagerduty": ch, "slack": slack()["slack"]}));
            RawRule::from_value(&doc)
                .expect("object")
                .validate()
                .expect("usable")
        };
        for (value, want, warned) in [
            (Value::Null, Severity::Error, false),
            (json!("critical"), Severity::Critical, false),
            (json!("info"), Severity::Info, false),
            (json!("warning"), Severity::Warning, false),
            (json!("fatal"), Severity::Error, true),
            (json!(3), Severity::Error, true),
        ] {
            let (compiled, problems) = rule(value.clone());
            let pd = compiled
                .channels
                .iter()
                .find(|c| c.kind == ChannelKind::Pagerduty)
                .expect("pagerduty kept");
            assert_eq!(pd.severity, Some(want), "{value}");
            let slack = compiled
                .channels
                .iter()
                .find(|c| c.kind == ChannelKind::Slack)
                .expect("slack");
            assert_eq!(slack.severity, None);
            assert_eq!(
                problems.iter().any(|p| p.message.contains("`severity`")),
                warned,
                "{value}: {problems:?}"
            );
        }
    }

    /// Endpoint shapes the services document: warned about, never skipped.
    #[test]
    fn endpoint_shapes() {
        let cases = [
            (
                ChannelKind::Discord,
                "https://discord.com/api/webhooks/123456/tok-EN_x",
                true,
            ),
            (
                ChannelKind::Discord,
                "https://discord.com/api/v10/webhooks/1/t",
                true,
            ),
            (ChannelKind::Discord, "http://127.0.0.1:9/api/webhooks/1/t", true),
            (
                ChannelKind::Discord,
                "https://discord.com/api/webhooks/abc/t",
                false,
            ),
            (ChannelKind::Discord, "https://discord.com/channels/1/2", false),
            (ChannelKind::Discord, "not a url", false),
            (
                ChannelKind::Teams,
                "https://prod-1.westeurope.logic.azure.com/workflows/x",
                true,
            ),
            (ChannelKind::Teams, "http://example.com/workflows/x", false),
            (ChannelKind::Teams, "http://127.0.0.1:8080/teams", true),
            (ChannelKind::Teams, "http://10.1.2.3/teams", true),
            (ChannelKind::Teams, "http://localhost:9/teams", true),
            (ChannelKind::Teams, "http://[::1]:9/teams", true),
            (ChannelKind::Teams, "http://8.8.8.8/teams", false),
            (ChannelKind::Teams, "ftp://127.0.0.1/teams", false),
            (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE", true),
            (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2Nk", false),
            (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2Nk-", false),
            (ChannelKind::Slack, "https://hooks.slack.com/services/T/B/x", true),
            (ChannelKind::Slack, "C0123ABCD", true),
            (ChannelKind::Slack, "G0123ABCDEF", true),
            (ChannelKind::Slack, "#alerts", false),
            (ChannelKind::Slack, "c0123abcd", false),
            (ChannelKind::Slack, "anything", false),
            (ChannelKind::Slack, "ftp://hooks.slack.com/x", false),
        ];
        for (kind, endpoint, ok) in cases {
            assert_eq!(
                endpoint_problem(kind, endpoint).is_none(),
                ok,
                "{kind} {endpoint}"
            );
            let doc = with(
                "channels",
                json!({kind.as_str(): {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}),
            );
            let (rule, problems) = RawRule::from_value(&doc)
                .expect("object")
                .validate()
                .expect("usable");
            assert_eq!(rule.channels.len(), 1, "never skipped: {kind} {endpoint}");
            assert_eq!(problems.is_empty(), ok, "{kind} {endpoint}: {problems:?}");
            for p in &problems {
                assert!(!p.fatal && !p.fix.is_empty() && !p.message.contains(endpoint));
            }
        }
    }

    /// `resolveAfter`: 0 (never) or 1 s … 90 days; left out, the kind's default; NO_EVENTS ignores it (warning).
    #[test]
    fn resolve_after_values() {
        let kind = |what: &str| match what {
            "SEEN_MORE" => json!({"whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000}),
            "SPIKE" => json!({"whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000}),
            "ONLY_NEW" => json!({"whatToReceive": "ONLY_NEW"}),
            "REAPPEARED" => json!({"whatToReceive": "REAPPEARED"}),
            _ => json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 600_000}),
        };
        // (kind, resolveAfter (null: left out), Ok(ms, warned) or Err(what the message says))
        type Case = (&'static str, Value, Result<(u64, bool), &'static str>);
        let cases: Vec<Case> = vec![
            ("SEEN_MORE", Value::Null, Ok((60000, false))),
            ("SPIKE", Value::Null, Ok((3_600_000, false))),
            ("ONLY_NEW", Value::Null, Ok((0, false))),
            ("REAPPEARED", Value::Null, Ok((0, false))),
            ("NO_EVENTS", Value::Null, Ok((0, false))),
            ("SEEN_MORE", json!(0), Ok((0, false))),
            ("ONLY_NEW", json!(1000), Ok((1000, false))),
            ("ONLY_NEW", json!(7_776_000_000u64), Ok((7_776_000_000, false))),
            ("SEEN_MORE", json!(3_600_000.0), Ok((3_600_000, false))),
            (
                "SEEN_MORE",
                json!({"$numberLong": "3600000"}),
                Ok((3_600_000, false)),
            ),
            ("NO_EVENTS", json!(3_600_000), Ok((0, true))),
            ("NO_EVENTS", json!(0), Ok((0, false))),
            ("SEEN_MORE", json!(999), Err("got 999")),
            ("SEEN_MORE", json!(7_776_000_001u64), Err("got 7776000001")),
            ("ONLY_NEW", json!(-1), Err("got -1")),
            ("ONLY_NEW", json!("1h"), Err("got \"1h\"")),
            ("ONLY_NEW", json!(1.5), Err("got 1.5")),
            ("NO_EVENTS", json!(500), Err("got 500")),
        ];
        for (what, value, want) in cases {
            let mut doc = kind(what);
            doc["_id"] = json!(ID);
            doc["isEnabled"] = json!(true);
            doc["channels"] = slack();
            if !value.is_null() {
                doc["resolveAfter"] = value.clone();
            }
            let raw = RawRule::from_value(&doc).expect("object");
            match (raw.validate(), want) {
                (Ok((rule, problems)), Ok((ms, warned))) => {
                    assert_eq!(rule.resolve_after_ms, ms, "{what} {value}");
                    assert_eq!(
                        problems
                            .iter()
                            .any(|p| p.message.contains("`resolveAfter` is ignored")),
                        warned,
                        "{what} {value}: {problems:?}"
                    );
                }
                (Err(p), Err(says)) => {
                    assert!(p.fatal, "{p}");
                    assert!(
                        p.message.starts_with(
                            "`resolveAfter` must be 0 (never) or milliseconds between 1000 and 7776000000 (1 s … 90 \
                             days)"
                        ) && p.message.contains(says),
                        "{what} {value}: {p}"
                    );
                    assert!(p.fix.contains("set `resolveAfter` in milliseconds"), "{p}");
                    // `rules check` reports the same problem
                    let problems = crate::rule::rule_problems(&doc, &Limits::default());
                    assert_eq!(problems, vec![p]);
                }
                (got, want) => panic!("{what} {value}: {got:?}, wanted {want:?}"),
            }
            assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
        }
    }

    /// NO_EVENTS: `quietPeriod` required (10 s … 30 days); what narrows a group's events is ignored, with warnings.
    #[test]
    fn no_events_rules() {
        let doc = |extra: Value| {
            let mut d =
                json!({"_id": ID, "isEnabled": true, "whatToReceive": "NO_EVENTS", "channels": slack()});
            for (k, v) in extra.as_object().expect("object") {
                d[k] = v.clone();
            }
            d
        };
        let (rule, problems) = RawRule::from_value(&doc(json!({"quietPeriod": 3_600_000})))
            .expect("object")
            .validate()
            .expect("usable");
        assert_eq!(
            rule.what,
            WhatToReceive::NoEvents {
                quiet_period_ms: 3_600_000
            }
        );
        // the rule is said to be not evaluated yet, and nothing else
        assert!(problems.len() == 1 && problems[0].is_not_yet(), "{problems:?}");
        assert_eq!(rule.summary(), "NO_EVENTS for 1h");
        assert_eq!(
            rule.what.watches_for().as_deref(),
            Some("no event from the project for 1h")
        );
        // (fields, fatal: what the message says; or a warning)
        let cases = [
            (json!({}), true, "a NO_EVENTS rule needs `quietPeriod`"),
            (
                json!({"quietPeriod": 9999}),
                true,
                "between 10000 and 2592000000 (10 s … 30 days), got 9999",
            ),
            (
                json!({"quietPeriod": 2_592_000_001u64}),
                true,
                "(10 s … 30 days), got 2592000001",
            ),
            (
                json!({"quietPeriod": 60000, "including": ["db"]}),
                false,
                "title filters",
            ),
            (
                json!({"quietPeriod": 60000, "excludingPatterns": ["x"]}),
                false,
                "ignored by a NO_EVENTS rule",
            ),
            (
                json!({"quietPeriod": 60000, "uniqueUsers": true}),
                false,
                "`uniqueUsers` means nothing to a NO_EVENTS rule",
            ),
            (
                json!({"quietPeriod": 60000, "resolveAfter": 60000}),
                false,
                "`resolveAfter` is ignored by a NO_EVENTS rule",
            ),
        ];
        for (fields, fatal, says) in cases {
            let problems = match RawRule::from_value(&doc(fields.clone()))
                .expect("object")
                .validate()
            {
                Ok((_, problems)) => problems,
                Err(p) => vec![p],
            };
            assert!(
                problems
                    .iter()
                    .any(|p| p.fatal == fatal && p.message.contains(says) && !p.fix.is_empty()),
                "{fields}: {problems:?}"
            );
        }
        // an unknown kind's fix names NO_EVENTS
        let p = RawRule::from_value(&with("whatToReceive", json!("NO_EVENT")))
            .expect("object")
            .validate()
            .expect_err("unknown");
        assert!(p.fix.contains("\"NO_EVENTS\""), "{p}");
    }

    /// A key one edit from a known one is a warning naming the known key; other unknown keys stay silent.
    #[test]
    fn a_misspelt_key_is_a_warning_with_did_you_mean() {
        let cases = [
            ("includng", Some("including")),
            ("inculding", Some("including")),
            ("Including", Some("including")),
            ("exluding", Some("excluding")),
            ("treshold", Some("threshold")),
            ("threshold_period", Some("thresholdPeriod")),
            ("isEnable", Some("isEnabled")),
            ("windows", Some("window")),
            ("patterns", Some("includingPatterns")),
            ("includingPattern", Some("includingPatterns")),
            ("excludePatterns", Some("excludingPatterns")),
            ("uidAdded", None),
            ("custom", None),
            ("id", Some("_id")),
            ("x", None),
        ];
        for (key, want) in cases {
            let mut doc = with("including", json!(["db"]));
            doc[key] = json!(["database"]);
            let (_, problems) = RawRule::from_value(&doc)
                .expect("object")
                .validate()
                .expect("usable");
            match want {
                Some(known) => {
                    assert_eq!(problems.len(), 1, "{key}: {problems:?}");
                    let p = &problems[0];
                    assert!(!p.fatal && !p.limit, "{key}: {p:?}");
                    assert!(
                        p.message.contains(&format!("did you mean `{known}`?"))
                            && p.message.contains(&format!("`{key}`")),
                        "{key}: {p}"
                    );
                    assert!(p.fix.contains(known), "{key}: {p}");
                }
                None => assert!(problems.is_empty(), "{key}: {problems:?}"),
            }
        }
        // every known key is read by the model (none lands in `extra`)
        for key in RULE_KEYS {
            let raw = RawRule::from_value(&json!({ *key: null })).expect("object");
            assert!(raw.extra.is_empty(), "{key} is not a field of RawRule");
        }
        // inside a channel too
        let doc = with(
            "channels",
            json!({"slack": {"isEnabled": true, "endpont": "https://hooks.slack.com/x", "minPeriod": 0}}),
        );
        let problems = match RawRule::from_value(&doc).expect("object").validate() {
            Ok((_, problems)) => problems,
            Err(p) => vec![p],
        };
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("`channels.slack.endpont`")
                    && p.message.contains("did you mean `endpoint`?")),
            "{problems:?}"
        );
    }
}
