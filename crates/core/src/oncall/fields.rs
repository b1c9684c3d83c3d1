//! A rule's on-call fields as stored (`renotify`, `escalation`, `quietHours`, `quietHoursBypass`), their limits,
//! and reading and validating them into the typed values of `schedule`, with a problem and its fix for
//! each mistake.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::schedule::{weekday, ClockTime, EscalationStep, QuietHours, QuietWindow, Renotify};
use super::{ESCALATION_AFTER_MS, MAX_ESCALATION_STEPS, MAX_QUIET_WINDOWS, RENOTIFY_EVERY_MS, RENOTIFY_MAX};
use crate::field::Field;
use crate::problem::RuleProblem;
use crate::rule::{ChannelConfig, ChannelKind, Channels};

// ---------------------------------------------------------------------------------------------------------------
// The raw fields, as stored

/// `renotify` as stored: `{"every": ms, "max": n}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawRenotify {
    /// Milliseconds between reminders.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub every: Field<u64>,
    /// At most this many reminders.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub max: Field<u64>,
    /// Fields Klaxon does not read, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One step of `escalation` as stored: `{"after": ms, "channels": {…}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawEscalationStep {
    /// Milliseconds after the alert opened.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub after: Field<u64>,
    /// Channels, shaped like the rule's `channels`.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub channels: Field<Channels>,
    /// Fields Klaxon does not read, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One window of `quietHours` as stored: `{"days": ["mon", …], "from": "HH:MM", "to": "HH:MM", "timezone": …}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawQuietWindow {
    /// The days the window starts on; absent = every day.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub days: Field<Vec<String>>,
    /// Local start, `HH:MM`.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub from: Field<String>,
    /// Local end, `HH:MM` (`24:00` = midnight at the end of the day); before `from` spans midnight.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub to: Field<String>,
    /// IANA time zone name.
    #[serde(default, skip_serializing_if = "Field::is_missing")]
    pub timezone: Field<String>,
    /// Fields Klaxon does not read, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The keys of an escalation step Klaxon reads, for "did you mean".
pub const STEP_KEYS: &[&str] = &["after", "channels"];
/// The keys of `renotify` Klaxon reads, for "did you mean".
pub const RENOTIFY_KEYS: &[&str] = &["every", "max"];
/// The keys of a quiet window Klaxon reads, for "did you mean".
pub const QUIET_WINDOW_KEYS: &[&str] = &["days", "from", "to", "timezone"];

// Reading and validating

/// A rule's on-call fields as the raw model holds them.
pub(crate) struct OnCallFields<'a> {
    /// `renotify`.
    pub(crate) renotify: &'a Field<RawRenotify>,
    /// `escalation`.
    pub(crate) escalation: &'a Field<Vec<Field<RawEscalationStep>>>,
    /// `quietHours`.
    pub(crate) quiet_hours: &'a Field<Vec<Field<RawQuietWindow>>>,
    /// `quietHoursBypass`.
    pub(crate) quiet_hours_bypass: &'a Field<Vec<String>>,
}

/// A rule's on-call fields, validated.
#[derive(Debug, Clone, Default)]
pub(crate) struct OnCall {
    pub(crate) renotify: Option<Renotify>,
    pub(crate) escalation: Vec<EscalationStep>,
    pub(crate) quiet_hours: QuietHours,
}

/// What [`read`] needs from the rule's reader: how to make a problem, how to read a channels object (`path` is
/// where it is, e.g. `escalation[0].channels`, for the problems' words), and "did you mean".
pub(crate) struct Reader<'a> {
    /// A problem that makes the rule unusable.
    pub(crate) fatal: &'a dyn Fn(String, &str) -> RuleProblem,
    /// A problem that only limits the rule.
    pub(crate) warning: &'a dyn Fn(String, String) -> RuleProblem,
    /// Reads and validates a channels object, pushing its warnings.
    #[allow(clippy::type_complexity)]
    pub(crate) channels:
        &'a dyn Fn(&Channels, &str, &mut Vec<RuleProblem>) -> Result<Vec<ChannelConfig>, RuleProblem>,
    /// The known key an unknown one most likely stands for.
    pub(crate) did_you_mean: &'a dyn Fn(&str, &'static [&'static str]) -> Option<&'static str>,
}

/// A JSON value quoted in a problem: at most 100 characters on one line.
fn quote(v: &Value) -> String {
    crate::text::one_line(&v.to_string(), 100)
}

fn quote_field<T: Serialize>(f: &Field<T>) -> String {
    quote(&f.to_json())
}

impl Reader<'_> {
    fn unknown_keys(
        &self,
        extra: &Map<String, Value>,
        path: &str,
        known: &'static [&'static str],
        out: &mut Vec<RuleProblem>,
    ) {
        for key in extra.keys() {
            if let Some(k) = (self.did_you_mean)(key, known) {
                let key = crate::text::one_line(key, 60);
                out.push((self.warning)(
                    format!("unknown key `{path}.{key}` is ignored; did you mean `{k}`?"),
                    format!("rename it to `{path}.{k}`"),
                ));
            }
        }
    }
}

const TZ_FIX: &str = "set an IANA time zone name, e.g. \"Europe/Berlin\", \"America/New_York\" or \"UTC\"";

/// Reads the on-call fields; the first fatal problem, or the values with their warnings pushed to `problems`.
pub(crate) fn read(
    f: &OnCallFields<'_>,
    r: &Reader<'_>,
    problems: &mut Vec<RuleProblem>,
) -> Result<OnCall, RuleProblem> {
    Ok(OnCall {
        renotify: read_renotify(f.renotify, r, problems)?,
        escalation: read_escalation(f.escalation, r, problems)?,
        quiet_hours: read_quiet_hours(f.quiet_hours, f.quiet_hours_bypass, r, problems)?,
    })
}

fn read_renotify(
    field: &Field<RawRenotify>,
    r: &Reader<'_>,
    problems: &mut Vec<RuleProblem>,
) -> Result<Option<Renotify>, RuleProblem> {
    let raw = match field {
        f if f.is_unset() => return Ok(None),
        Field::Typed(raw) => raw,
        other => {
            return Err((r.fatal)(
                format!("`renotify` must be an object {{\"every\": ms, \"max\": n}}, got {}", quote_field(other)),
                "set `renotify` to e.g. {\"every\": 1800000, \"max\": 3} (a reminder every 30 minutes, at most 3), \
                 or leave it out for no reminders",
            ))
        }
    };
    r.unknown_keys(&raw.extra, "renotify", RENOTIFY_KEYS, problems);
    let every_ms = match raw.every.whole() {
        Some(ms) if RENOTIFY_EVERY_MS.contains(&ms) => ms,
        _ => {
            return Err((r.fatal)(
                format!(
                    "`renotify.every` must be milliseconds between {} and {} (1 s … 30 days), got {}",
                    RENOTIFY_EVERY_MS.start(),
                    RENOTIFY_EVERY_MS.end(),
                    quote_field(&raw.every)
                ),
                "set `renotify.every` in milliseconds, e.g. 1800000 for a reminder every 30 minutes",
            ))
        }
    };
    let max = match raw.max.whole() {
        Some(n) if RENOTIFY_MAX.contains(&n) => u32::try_from(n).unwrap_or(1),
        _ => {
            return Err((r.fatal)(
                format!(
                    "`renotify.max` must be a whole number between {} and {}, got {}",
                    RENOTIFY_MAX.start(),
                    RENOTIFY_MAX.end(),
                    quote_field(&raw.max)
                ),
                "set `renotify.max` to how many reminders at most, e.g. 3",
            ))
        }
    };
    Ok(Some(Renotify { every_ms, max }))
}

fn read_escalation(
    field: &Field<Vec<Field<RawEscalationStep>>>,
    r: &Reader<'_>,
    problems: &mut Vec<RuleProblem>,
) -> Result<Vec<EscalationStep>, RuleProblem> {
    let raw = match field {
        f if f.is_unset() => return Ok(Vec::new()),
        Field::Typed(steps) => steps,
        other => {
            return Err((r.fatal)(
                format!(
                    "`escalation` must be a list of steps [{{\"after\": ms, \"channels\": {{…}}}}], got {}",
                    quote_field(other)
                ),
                "set `escalation` to e.g. [{\"after\": 900000, \"channels\": {\"pagerduty\": {\"isEnabled\": true, \
                 \"endpoint\": \"<routing key>\", \"minPeriod\": 0}}}], or leave it out",
            ))
        }
    };
    if raw.len() > MAX_ESCALATION_STEPS {
        return Err((r.fatal)(
            format!(
                "`escalation` has {} steps, more than {MAX_ESCALATION_STEPS}",
                raw.len()
            ),
            "keep at most 5 steps: one step can notify several channels",
        ));
    }
    let mut out: Vec<EscalationStep> = Vec::with_capacity(raw.len());
    for (i, step) in raw.iter().enumerate() {
        let (n, path) = (i + 1, format!("escalation[{i}]"));
        let Field::Typed(step) = step else {
            return Err((r.fatal)(
                format!(
                    "escalation step {n} (`{path}`) must be an object {{\"after\": ms, \"channels\": {{…}}}}, got {}",
                    quote_field(step)
                ),
                "write each step as {\"after\": <ms after the alert opened>, \"channels\": {…like the rule's…}}",
            ));
        };
        r.unknown_keys(&step.extra, &path, STEP_KEYS, problems);
        let after_ms = match step.after.whole() {
            Some(ms) if ESCALATION_AFTER_MS.contains(&ms) => ms,
            _ => {
                return Err((r.fatal)(
                    format!(
                        "`{path}.after` must be milliseconds between {} and {} (1 s … 30 days) after the alert \
                         opened, got {}",
                        ESCALATION_AFTER_MS.start(),
                        ESCALATION_AFTER_MS.end(),
                        quote_field(&step.after)
                    ),
                    &format!("set `{path}.after` in milliseconds, e.g. 900000 to escalate 15 minutes after the alert opened"),
                ))
            }
        };
        if let Some(prev) = out.last() {
            if after_ms <= prev.after_ms {
                return Err((r.fatal)(
                    format!(
                        "escalation step {n} has `after` {after_ms}, not later than step {}'s {}",
                        n - 1,
                        prev.after_ms
                    ),
                    "order the steps by `after`, each later than the one before (e.g. 900000, then 3600000)",
                ));
            }
        }
        let channels = match &step.channels {
            Field::Typed(chs) => (r.channels)(chs, &format!("{path}.channels"), problems)?,
            other => {
                return Err((r.fatal)(
                    format!(
                        "`{path}.channels` must be an object of channels like the rule's `channels`, got {}",
                        quote_field(other)
                    ),
                    &format!(
                        "set `{path}.channels` to e.g. {{\"pagerduty\": {{\"isEnabled\": true, \"endpoint\": \
                         \"<routing key>\", \"minPeriod\": 0}}}}"
                    ),
                ))
            }
        };
        if channels.is_empty() {
            problems.push((r.warning)(
                format!("escalation step {n} has no usable channel, so it notifies nobody"),
                format!("enable a channel with an endpoint in `{path}.channels`, or remove the step"),
            ));
        }
        out.push(EscalationStep { after_ms, channels });
    }
    Ok(out)
}

fn read_quiet_hours(
    field: &Field<Vec<Field<RawQuietWindow>>>,
    bypass: &Field<Vec<String>>,
    r: &Reader<'_>,
    problems: &mut Vec<RuleProblem>,
) -> Result<QuietHours, RuleProblem> {
    let raw: &[Field<RawQuietWindow>] = match field {
        f if f.is_unset() => &[],
        Field::Typed(w) => w,
        other => {
            return Err((r.fatal)(
                format!(
                    "`quietHours` must be a list of windows [{{\"days\", \"from\", \"to\", \"timezone\"}}], got {}",
                    quote_field(other)
                ),
                "set `quietHours` to e.g. [{\"days\": [\"mon\", \"tue\", \"wed\", \"thu\", \"fri\"], \"from\": \
                 \"22:00\", \"to\": \"07:00\", \"timezone\": \"Europe/Berlin\"}], or leave it out",
            ))
        }
    };
    if raw.len() > MAX_QUIET_WINDOWS {
        return Err((r.fatal)(
            format!(
                "`quietHours` has {} windows, more than {MAX_QUIET_WINDOWS}",
                raw.len()
            ),
            "merge windows: one window takes a list of days",
        ));
    }
    let mut windows = Vec::with_capacity(raw.len());
    for (i, w) in raw.iter().enumerate() {
        let path = format!("quietHours[{i}]");
        let Field::Typed(w) = w else {
            return Err((r.fatal)(
                format!("`{path}` must be an object {{\"days\", \"from\", \"to\", \"timezone\"}}, got {}", quote_field(w)),
                "write each window as {\"days\": [\"mon\", …], \"from\": \"22:00\", \"to\": \"07:00\", \"timezone\": \
                 \"Europe/Berlin\"}",
            ));
        };
        r.unknown_keys(&w.extra, &path, QUIET_WINDOW_KEYS, problems);
        let days_fix =
            "list weekdays as \"mon\", \"tue\", \"wed\", \"thu\", \"fri\", \"sat\", \"sun\" (the days the \
                        window starts on), or leave `days` out for every day";
        let mut days = [false; 7];
        match &w.days {
            f if f.is_unset() => days = [true; 7],
            Field::Typed(names) => {
                for name in names {
                    match weekday(name) {
                        Some(d) => days[d] = true,
                        None => {
                            return Err((r.fatal)(
                                format!(
                                    "`{path}.days` has an unknown weekday {}",
                                    quote(&Value::from(name.as_str()))
                                ),
                                days_fix,
                            ))
                        }
                    }
                }
                if names.is_empty() {
                    return Err((r.fatal)(
                        format!("`{path}.days` is empty: the window is never quiet"),
                        days_fix,
                    ));
                }
            }
            other => {
                return Err((r.fatal)(
                    format!(
                        "`{path}.days` must be a list of weekdays, got {}",
                        quote_field(other)
                    ),
                    days_fix,
                ))
            }
        }
        let time = |f: &Field<String>, name: &str, end: bool| -> Result<ClockTime, RuleProblem> {
            f.typed()
                .and_then(|s| ClockTime::parse(s.trim(), end))
                .ok_or_else(|| {
                    (r.fatal)(
                        format!(
                            "`{path}.{name}` must be a 24-hour time \"HH:MM\" ({}), got {}",
                            if end { "00:00 … 24:00" } else { "00:00 … 23:59" },
                            quote_field(f)
                        ),
                        &format!(
                            "set `{path}.{name}` to e.g. \"{}\"",
                            if end { "07:00" } else { "22:00" }
                        ),
                    )
                })
        };
        let from = time(&w.from, "from", false)?;
        let to = time(&w.to, "to", true)?;
        if from == to {
            return Err((r.fatal)(
                format!("`{path}` goes from {from} to {to}: a window that never ends"),
                "set `to` to when the quiet ends (before `from` to span midnight, e.g. from \"22:00\" to \"07:00\"; \
                 \"00:00\" to \"24:00\" for whole days)",
            ));
        }
        let tz_name = match &w.timezone {
            Field::Typed(name) if !name.trim().is_empty() => name.trim(),
            f if f.is_unset() => {
                return Err((r.fatal)(format!("`{path}` has no `timezone`"), TZ_FIX));
            }
            other => {
                return Err((r.fatal)(
                    format!(
                        "`{path}.timezone` must be an IANA time zone name, got {}",
                        quote_field(other)
                    ),
                    TZ_FIX,
                ))
            }
        };
        let window = QuietWindow::new(days, from, to, tz_name).map_err(|_| {
            (r.fatal)(
                format!(
                    "`{path}.timezone` {} is not a time zone Klaxon knows",
                    quote(&Value::from(tz_name))
                ),
                TZ_FIX,
            )
        })?;
        windows.push(window);
    }
    let bypass_fix = format!(
        "list channel names: {}",
        ChannelKind::ALL
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut bypassed = Vec::new();
    match bypass {
        f if f.is_unset() => {}
        Field::Typed(names) => {
            for name in names {
                match ChannelKind::parse(name.trim()) {
                    Some(c) => bypassed.push(c),
                    None => {
                        let fix = match (r.did_you_mean)(name.trim(), CHANNEL_NAMES) {
                            Some(k) => format!("did you mean \"{k}\"? {bypass_fix}"),
                            None => bypass_fix.clone(),
                        };
                        return Err((r.fatal)(
                            format!(
                                "`quietHoursBypass` has an unknown channel {}",
                                quote(&Value::from(name.as_str()))
                            ),
                            &fix,
                        ));
                    }
                }
            }
        }
        other => {
            return Err((r.fatal)(
                format!(
                    "`quietHoursBypass` must be a list of channel names, got {}",
                    quote_field(other)
                ),
                &bypass_fix,
            ))
        }
    }
    bypassed.sort();
    bypassed.dedup();
    if windows.is_empty() && !bypassed.is_empty() {
        problems.push((r.warning)(
            "`quietHoursBypass` has no effect: the rule has no `quietHours`".into(),
            "add `quietHours`, or remove `quietHoursBypass`".into(),
        ));
    }
    Ok(QuietHours {
        windows,
        bypass: bypassed,
        spans: Default::default(),
    })
}

const CHANNEL_NAMES: &[&str] = &[
    "email",
    "telegram",
    "slack",
    "webhook",
    "loop",
    "discord",
    "teams",
    "pagerduty",
];
