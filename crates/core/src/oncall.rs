//! A rule's on-call fields and the schedule decisions the engine takes with them, pure (time is a parameter):
//!
//! - `renotify` → [`Renotify`]: while an alert is `firing`, its channels are notified again every `every` ms, at
//!   most `max` times ([`Renotify::due_at`]).
//! - `escalation` → [`EscalationStep`]s: a step's channels are notified once when the alert is still `firing`
//!   `after` ms after it opened ([`EscalationStep::due_at`], [`next_escalation`]).
//! - `quietHours` + `quietHoursBypass` → [`QuietHours`]: inside a window firings are held
//!   ([`QuietHours::window_at`] says until when), except on the bypassing channels ([`QuietHours::is_bypassed`]).
//!
//! ```text
//!  RawRule.{renotify, escalation, quietHours, quietHoursBypass} ──read()──▶ OnCall ──▶ CompiledRule
//!                                     (problems with their fixes)
//!  engine: alert opened at T ──Renotify::due_at(T, n) / next_escalation(steps, T, sent)──▶ timers
//!          firing at now     ──QuietHours::window_at(now)──▶ hold until end (UTC ms), unless is_bypassed(channel)
//! ```
//!
//! A quiet window is local time in an IANA time zone, from the tz database bundled into the binary (`jiff`), so
//! it follows daylight saving: "22:00-07:00 Europe/Berlin" is 9 hours on most nights, 8 on the spring-forward
//! night and 10 on the fall-back one. `days` are the days a window *starts* on: "fri 22:00-07:00" holds from
//! Friday 22:00 to Saturday 07:00. A window starts (ends) at the first instant the local clock reads `from`
//! (`to`) or later: a time skipped by a spring-forward starts (ends) the window when the clock jumps, a time
//! repeated by a fall-back counts its first occurrence.
//!
//! This module reads its own fields from the raw model ([`crate::rule::RawRule`] lends them, as [`OnCallFields`])
//! and validates an escalation step's channels through the rule's own channel reader (passed in), so every
//! channel, whether the rule's or a step's, is checked the same way.

use std::fmt;
use std::ops::RangeInclusive;

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::field::Field;
use crate::problem::RuleProblem;
use crate::rule::{ChannelConfig, ChannelKind, Channels};

const DAY_MS: u64 = 24 * 3_600_000;

/// `renotify.every`: 1 s … 30 days, in ms.
pub const RENOTIFY_EVERY_MS: RangeInclusive<u64> = 1_000..=30 * DAY_MS;
/// `renotify.max`: 1 … 100 reminders.
pub const RENOTIFY_MAX: RangeInclusive<u64> = 1..=100;
/// At most this many `escalation` steps.
pub const MAX_ESCALATION_STEPS: usize = 5;
/// A step's `after`: 1 s … 30 days after the alert opened, in ms (an open alert without events lives 30 days).
pub const ESCALATION_AFTER_MS: RangeInclusive<u64> = 1_000..=30 * DAY_MS;
/// At most this many `quietHours` windows (a week of one window a day, three times over).
pub const MAX_QUIET_WINDOWS: usize = 21;
/// How many windows that touch [`QuietHours::window_at`] chains into one hold at most: a rule whose windows cover
/// the whole week would hold for ever; it holds a week and a day at a time instead, and the engine asks again.
const MAX_CHAINED_WINDOWS: usize = 8 * MAX_QUIET_WINDOWS;

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

// ---------------------------------------------------------------------------------------------------------------
// The typed values

/// `renotify`: reminders of a `firing` alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renotify {
    /// Milliseconds between reminders (the first one `every` after the alert opened).
    pub every_ms: u64,
    /// At most this many reminders.
    pub max: u32,
}

impl Renotify {
    /// When reminder `n` (1 … `max`) of an alert opened at `opened_at_ms` is due: `opened + n × every`; `None`
    /// for `n` 0 or past `max`. The engine sends it only if the alert is still `firing` then.
    pub fn due_at(&self, opened_at_ms: i64, n: u32) -> Option<i64> {
        if n == 0 || n > self.max {
            return None;
        }
        let every = i64::try_from(self.every_ms).ok()?;
        every
            .checked_mul(i64::from(n))
            .and_then(|d| opened_at_ms.checked_add(d))
    }

    /// The next reminder after `sent` of them: its number and when it is due; `None` once `max` were sent.
    pub fn next(&self, opened_at_ms: i64, sent: u32) -> Option<(u32, i64)> {
        let n = sent.checked_add(1)?;
        self.due_at(opened_at_ms, n).map(|at| (n, at))
    }

    /// "every 30m, 3 times" (`klaxon rules list`).
    pub fn summary(&self) -> String {
        let times = if self.max == 1 {
            "once".to_owned()
        } else {
            format!("{} times", self.max)
        };
        format!("every {}, {times}", crate::text::short_duration(self.every_ms))
    }
}

/// One `escalation` step: its channels are notified once when the alert is still `firing` `after_ms` after it
/// opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationStep {
    /// Milliseconds after the alert opened; strictly ascending from step to step.
    pub after_ms: u64,
    /// The step's channels, validated like the rule's, sorted by kind.
    pub channels: Vec<ChannelConfig>,
}

impl EscalationStep {
    /// When this step is due for an alert opened at `opened_at_ms`.
    pub fn due_at(&self, opened_at_ms: i64) -> i64 {
        opened_at_ms.saturating_add(i64::try_from(self.after_ms).unwrap_or(i64::MAX))
    }
}

/// The next escalation step after `sent` steps of an alert opened at `opened_at_ms`: its index in `steps` and
/// when it is due; `None` when every step was sent. Steps go in order (their `after` ascends), so a step due
/// while the engine was away is sent before the ones after it.
pub fn next_escalation(steps: &[EscalationStep], opened_at_ms: i64, sent: usize) -> Option<(usize, i64)> {
    steps.get(sent).map(|s| (sent, s.due_at(opened_at_ms)))
}

impl EscalationStep {
    /// The step's channel names, "webhook,pagerduty" ("-" for none).
    pub fn channel_names(&self) -> String {
        if self.channels.is_empty() {
            return "-".to_owned();
        }
        let names: Vec<&str> = self.channels.iter().map(|c| c.kind.as_str()).collect();
        names.join(",")
    }
}

/// "15m→pagerduty 1h→email,slack" (`klaxon rules list`, the console's rule view).
pub fn escalation_summary(steps: &[EscalationStep]) -> String {
    steps
        .iter()
        .map(|s| {
            format!(
                "{}→{}",
                crate::text::short_duration(s.after_ms),
                s.channel_names()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `resolveAfter` in words: "after 1h without events", "by hand only" (`0`).
pub fn resolve_after_summary(resolve_after_ms: u64) -> String {
    match resolve_after_ms {
        0 => "by hand only".to_owned(),
        ms => format!("after {} without events", crate::text::short_duration(ms)),
    }
}

/// A local time of day, minutes since midnight: 0 (`00:00`) … 1440 (`24:00`, only as a window's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClockTime(u16);

impl ClockTime {
    /// Reads `HH:MM` (24-hour, two digits each); `24:00` only when `end`.
    pub fn parse(s: &str, end: bool) -> Option<ClockTime> {
        let (h, m) = s.split_once(':')?;
        if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        match (h, m) {
            (24, 0) if end => Some(ClockTime(1440)),
            (0..=23, 0..=59) => Some(ClockTime(h * 60 + m)),
            _ => None,
        }
    }

    /// Minutes since midnight.
    pub fn minutes(self) -> u16 {
        self.0
    }
}

impl fmt::Display for ClockTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// The weekday names `days` takes (also the full English names, any case), Monday first.
pub const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const WEEKDAY_NAMES: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// A weekday name (`mon`, `Monday`): its index from Monday (0) to Sunday (6).
pub fn weekday(name: &str) -> Option<usize> {
    let n = name.trim().to_ascii_lowercase();
    WEEKDAYS
        .iter()
        .position(|d| *d == n)
        .or_else(|| WEEKDAY_NAMES.iter().position(|d| *d == n))
}

/// One quiet window: from `from` to `to` local time in `timezone`, starting on `days`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuietWindow {
    /// The days the window starts on, Monday (0) to Sunday (6).
    pub days: [bool; 7],
    /// Local start.
    pub from: ClockTime,
    /// Local end; at or before `from`, the next day (never equal to `from`).
    pub to: ClockTime,
    tz: TimeZone,
    tz_name: String,
}

impl QuietWindow {
    /// A window, or why not (an unknown time zone, `from` = `to`, no day).
    pub fn new(
        days: [bool; 7],
        from: ClockTime,
        to: ClockTime,
        timezone: &str,
    ) -> Result<QuietWindow, String> {
        if from == to {
            return Err(format!("from {from} to {to} never ends"));
        }
        if !days.contains(&true) {
            return Err("the window has no day".into());
        }
        let tz = TimeZone::get(timezone).map_err(|_| format!("unknown time zone {timezone:?}"))?;
        Ok(QuietWindow {
            days,
            from,
            to,
            tz,
            tz_name: timezone.to_owned(),
        })
    }

    /// The IANA name of the window's time zone, as stored.
    pub fn timezone(&self) -> &str {
        &self.tz_name
    }

    /// Whether the window spans midnight (`to` at or before `from`).
    pub fn spans_midnight(&self) -> bool {
        self.to <= self.from
    }

    /// The occurrence of the window started on local date `date`, as UTC instants [start, end).
    fn occurrence(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        let start = first_instant(&self.tz, at(date, self.from)?)?;
        let end_date = if self.spans_midnight() {
            date.tomorrow().ok()?
        } else {
            date
        };
        let end = first_instant(&self.tz, at(end_date, self.to)?)?;
        Some((start, end))
    }

    /// The end of the occurrence containing `t`, if any.
    fn end_if_inside(&self, t: Timestamp) -> Option<Timestamp> {
        let today = self.tz.to_datetime(t).date();
        // An occurrence lasts less than a day of local time plus a daylight-saving hour: one that holds `t`
        // started today or yesterday.
        [today.yesterday().ok(), Some(today)]
            .into_iter()
            .flatten()
            .filter(|d| self.days[weekday_index(*d)])
            .filter_map(|d| self.occurrence(d))
            .filter(|(start, end)| *start <= t && t < *end)
            .map(|(_, end)| end)
            .max()
    }

    /// "mon-fri 22:00-07:00 Europe/Berlin" (the `--quiet-hours` form).
    pub fn summary(&self) -> String {
        format!(
            "{} {}-{} {}",
            days_summary(&self.days),
            self.from,
            self.to,
            self.tz_name
        )
    }
}

/// `quietHours` and `quietHoursBypass`: when firings are held, and which channels are never held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuietHours {
    /// The windows; none = never quiet.
    pub windows: Vec<QuietWindow>,
    /// The channels never held (`quietHoursBypass`), sorted.
    pub bypass: Vec<ChannelKind>,
}

impl QuietHours {
    /// True when the rule has no quiet window.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Whether `at_ms` (unix ms) is inside a quiet window, and if so when the quiet ends (unix ms): the end of
    /// the window, or of the last of the windows that follow on from it without a gap (at most
    /// [`MAX_CHAINED_WINDOWS`] of them; the engine asks again then). `None`: not quiet, deliver now.
    pub fn window_at(&self, at_ms: i64) -> Option<i64> {
        let mut t = Timestamp::from_millisecond(at_ms).ok()?;
        let mut inside = false;
        for _ in 0..MAX_CHAINED_WINDOWS {
            match self.windows.iter().filter_map(|w| w.end_if_inside(t)).max() {
                Some(end) => {
                    inside = true;
                    t = end;
                }
                None => break,
            }
        }
        inside.then(|| t.as_millisecond())
    }

    /// Whether firings on `channel` skip the quiet (`quietHoursBypass`).
    pub fn is_bypassed(&self, channel: ChannelKind) -> bool {
        self.bypass.contains(&channel)
    }

    /// Until when a firing on `channel` at `at_ms` is held: [`QuietHours::window_at`], unless the channel
    /// bypasses the quiet.
    pub fn held_until(&self, channel: ChannelKind, at_ms: i64) -> Option<i64> {
        if self.is_bypassed(channel) {
            return None;
        }
        self.window_at(at_ms)
    }

    /// "mon-fri 22:00-07:00 Europe/Berlin, sat,sun 00:00-24:00 UTC (bypass pagerduty)" (`klaxon rules list`).
    pub fn summary(&self) -> String {
        let mut s = self
            .windows
            .iter()
            .map(QuietWindow::summary)
            .collect::<Vec<_>>()
            .join(", ");
        if !self.bypass.is_empty() {
            let names: Vec<&str> = self.bypass.iter().map(|c| c.as_str()).collect();
            s.push_str(&format!(" (bypass {})", names.join(",")));
        }
        s
    }
}

fn weekday_index(d: Date) -> usize {
    usize::try_from(d.weekday().to_monday_zero_offset()).unwrap_or(0)
}

fn at(date: Date, time: ClockTime) -> Option<DateTime> {
    if time.0 == 1440 {
        return Some(date.tomorrow().ok()?.at(0, 0, 0, 0));
    }
    let h = i8::try_from(time.0 / 60).ok()?;
    let m = i8::try_from(time.0 % 60).ok()?;
    Some(date.at(h, m, 0, 0))
}

/// The first instant the local clock of `tz` reads `dt` or later: `dt` itself, its first occurrence when a
/// fall-back repeats it, or the moment the clock jumps past it when a spring-forward skips it.
fn first_instant(tz: &TimeZone, dt: DateTime) -> Option<Timestamp> {
    let amb = tz.to_ambiguous_timestamp(dt);
    match amb.offset() {
        AmbiguousOffset::Gap { .. } => {
            let later = amb.later().ok()?;
            tz.preceding(later).next().map(|tr| tr.timestamp())
        }
        _ => amb.earlier().ok(),
    }
}

/// "mon-fri", "sat,sun", "daily", "mon,wed-fri".
pub fn days_summary(days: &[bool; 7]) -> String {
    if days.iter().all(|d| *d) {
        return "daily".into();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < 7 {
        if !days[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i + 1 < 7 && days[i + 1] {
            i += 1;
        }
        parts.push(match i - start {
            0 => WEEKDAYS[start].to_owned(),
            1 => format!("{},{}", WEEKDAYS[start], WEEKDAYS[i]),
            _ => format!("{}-{}", WEEKDAYS[start], WEEKDAYS[i]),
        });
        i += 1;
    }
    parts.join(",")
}

// ---------------------------------------------------------------------------------------------------------------
// Where an open alert stands (explain)

/// A rule's on-call fields as `explain` carries them beside a verdict: enough to say where an open alert's
/// reminders and escalation stand and whether the rule is in quiet hours ([`OnCallRule::status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnCallRule {
    /// `renotify`.
    pub renotify: Option<Renotify>,
    /// `escalation`.
    pub escalation: Vec<EscalationStep>,
    /// `quietHours` and `quietHoursBypass`.
    pub quiet_hours: QuietHours,
}

/// Where an open alert's reminders stand at a moment ([`OnCallRule::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reminders {
    /// Reminders due so far by the schedule (sent, or silenced by a mute), 0 … `max`.
    pub sent: u32,
    /// `renotify.max`.
    pub max: u32,
    /// `renotify.every`, ms.
    pub every_ms: u64,
    /// When the next one is due, unix ms; `None` when all were sent or the alert was acknowledged.
    pub next_at_ms: Option<i64>,
}

/// Where an open alert's escalation stands at a moment ([`OnCallRule::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// Steps due so far by the schedule (sent, or silenced by a mute).
    pub sent: usize,
    /// How many steps the rule has.
    pub steps: usize,
    /// The next step: its number (1-based), when it is due (unix ms) and its channels ("pagerduty,email");
    /// `None` after the last step or once the alert was acknowledged.
    pub next: Option<(usize, i64, String)>,
}

/// Whether the rule is in quiet hours at a moment, and until when ([`QuietHours::window_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quiet {
    /// The end of the quiet (unix ms), `None` when the rule is not in quiet hours.
    pub until_ms: Option<i64>,
    /// The channels never held (`quietHoursBypass`).
    pub bypass: Vec<ChannelKind>,
}

/// A rule's on-call state at a moment: what `explain` shows (`"onCall"`), pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnCallStatus {
    /// The open alert was acknowledged: reminders and escalation stopped.
    pub acknowledged: bool,
    /// Reminders of the open alert (`renotify` and an open alert).
    pub reminders: Option<Reminders>,
    /// Escalation of the open alert (`escalation` and an open alert).
    pub escalation: Option<Escalation>,
    /// Quiet hours (`quietHours`), with or without an alert.
    pub quiet: Option<Quiet>,
}

impl OnCallRule {
    /// The on-call fields of `rule`; `None` when it sets none of them.
    pub fn of(rule: &crate::CompiledRule) -> Option<OnCallRule> {
        let on_call = OnCallRule {
            renotify: rule.renotify,
            escalation: rule.escalation.clone(),
            quiet_hours: rule.quiet_hours.clone(),
        };
        (on_call != OnCallRule::default()).then_some(on_call)
    }

    /// Where things stand at `now_ms` for the rule's open `alert` (`None`: no open alert; a resolved one counts
    /// as none). Reminders and steps go by the schedule the engine keeps: reminder n at opened + n × every,
    /// step k at opened + its `after`; an acknowledgement stops both where they were at its time.
    pub fn status(&self, alert: Option<&crate::alert::Alert>, now_ms: i64) -> OnCallStatus {
        use crate::alert::AlertState;
        let quiet = (!self.quiet_hours.is_empty()).then(|| Quiet {
            until_ms: self.quiet_hours.window_at(now_ms),
            bypass: self.quiet_hours.bypass.clone(),
        });
        let Some(alert) = alert.filter(|a| a.state.is_open()) else {
            return OnCallStatus {
                quiet,
                ..OnCallStatus::default()
            };
        };
        let firing = alert.state == AlertState::Firing;
        // the moment the schedule stopped: now while firing, the acknowledgement otherwise
        let until = if firing {
            now_ms
        } else {
            alert.acknowledged_at_ms.unwrap_or(now_ms).min(now_ms)
        };
        let opened = alert.fired_at_ms;
        let reminders = self.renotify.map(|r| {
            let sent = (1..=r.max)
                .take_while(|n| r.due_at(opened, *n).is_some_and(|at| at <= until))
                .count() as u32;
            Reminders {
                sent,
                max: r.max,
                every_ms: r.every_ms,
                next_at_ms: if firing {
                    r.next(opened, sent).map(|(_, at)| at)
                } else {
                    None
                },
            }
        });
        let escalation = (!self.escalation.is_empty()).then(|| {
            let sent = self
                .escalation
                .iter()
                .take_while(|s| s.due_at(opened) <= until)
                .count();
            let next = if firing {
                next_escalation(&self.escalation, opened, sent)
                    .map(|(i, at)| (i + 1, at, self.escalation[i].channel_names()))
            } else {
                None
            };
            Escalation {
                sent,
                steps: self.escalation.len(),
                next,
            }
        });
        OnCallStatus {
            acknowledged: alert.state == AlertState::Acknowledged,
            reminders,
            escalation,
            quiet,
        }
    }
}

impl OnCallStatus {
    /// True when there is nothing to show (the rule sets no quiet hours and has no open alert to remind of or
    /// escalate).
    pub fn is_empty(&self) -> bool {
        self.reminders.is_none() && self.escalation.is_none() && self.quiet.is_none()
    }

    /// The API's `"onCall"` (documented in docs/api.md): `{"reminders"?: {"sent", "max", "every", "nextAt"},
    /// "escalation"?: {"sent", "steps", "nextStep", "nextAt", "nextChannels"}, "quietHours"?: {"quiet",
    /// "until", "bypass"}}`, times in RFC 3339, `null` when there is none.
    pub fn to_json(&self) -> Value {
        let at =
            |ms: Option<i64>| ms.map_or(Value::Null, |ms| Value::from(crate::notification::rfc3339_ms(ms)));
        let mut out = Map::new();
        if let Some(r) = &self.reminders {
            out.insert(
                "reminders".into(),
                serde_json::json!({"sent": r.sent, "max": r.max, "every": r.every_ms, "nextAt": at(r.next_at_ms)}),
            );
        }
        if let Some(e) = &self.escalation {
            let (step, when, channels) = match &e.next {
                Some((step, when, channels)) => (
                    Value::from(*step),
                    at(Some(*when)),
                    Value::from(channels.split(',').filter(|c| *c != "-").collect::<Vec<_>>()),
                ),
                None => (Value::Null, Value::Null, Value::Null),
            };
            out.insert(
                "escalation".into(),
                serde_json::json!({"sent": e.sent, "steps": e.steps, "nextStep": step, "nextAt": when,
                    "nextChannels": channels}),
            );
        }
        if let Some(q) = &self.quiet {
            let bypass: Vec<&str> = q.bypass.iter().map(|c| c.as_str()).collect();
            out.insert(
                "quietHours".into(),
                serde_json::json!({"quiet": q.until_ms.is_some(), "until": at(q.until_ms), "bypass": bypass}),
            );
        }
        Value::Object(out)
    }

    /// The same in words, one line per part: "reminders: 1 of 2 sent, the next at …", "escalation: step 2 of 3
    /// (pagerduty) at …", "in quiet hours until … (pagerduty not held)" (`klaxon explain`, the console).
    pub fn words(&self) -> Vec<String> {
        let at = crate::notification::rfc3339_ms;
        let mut out = Vec::new();
        if let Some(r) = &self.reminders {
            out.push(match r.next_at_ms {
                Some(next) => format!(
                    "reminders: {} of {} sent, the next at {} (every {})",
                    r.sent,
                    r.max,
                    at(next),
                    crate::text::short_duration(r.every_ms)
                ),
                None if self.acknowledged => format!(
                    "reminders: stopped by the acknowledgement after {} of {}",
                    r.sent, r.max
                ),
                None => format!("reminders: {} of {} sent, none left", r.sent, r.max),
            });
        }
        if let Some(e) = &self.escalation {
            out.push(match &e.next {
                Some((step, when, channels)) => format!(
                    "escalation: step {step} of {} ({channels}) at {}",
                    e.steps,
                    at(*when)
                ),
                None if self.acknowledged => format!(
                    "escalation: stopped by the acknowledgement after {} of {}",
                    e.sent, e.steps
                ),
                None => format!("escalation: {} of {} sent, none left", e.sent, e.steps),
            });
        }
        if let Some(q) = &self.quiet {
            let bypass = if q.bypass.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = q.bypass.iter().map(|c| c.as_str()).collect();
                format!(" ({} not held)", names.join(", "))
            };
            out.push(match q.until_ms {
                Some(until) => format!("in quiet hours until {}{bypass}: firings are held", at(until)),
                None => "not in quiet hours now".to_owned(),
            });
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------------------------
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::RawRule;
    use serde_json::json;

    const ID: &str = "5e3eef0679fa3700a0198a4a";
    const M: i64 = 60_000;
    const H: i64 = 3_600_000;

    /// Unix ms of an RFC 3339 instant.
    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().expect("an instant").as_millisecond()
    }

    fn quiet(windows: &[(&str, &str, &str, &str)]) -> QuietHours {
        QuietHours {
            windows: windows
                .iter()
                .map(|(days, from, to, tz)| {
                    let mut d = [false; 7];
                    for name in days.split(',') {
                        match name {
                            "daily" => d = [true; 7],
                            n => d[weekday(n).expect("a day")] = true,
                        }
                    }
                    QuietWindow::new(
                        d,
                        ClockTime::parse(from, false).expect("from"),
                        ClockTime::parse(to, true).expect("to"),
                        tz,
                    )
                    .expect("a window")
                })
                .collect(),
            bypass: vec![ChannelKind::Pagerduty],
        }
    }

    #[test]
    fn renotify_due_times() {
        let r = Renotify {
            every_ms: 30 * M as u64,
            max: 3,
        };
        let opened = ms("2026-11-25T10:00:00Z");
        // (n, due)
        let cases = [
            (0, None),
            (1, Some(opened + 30 * M)),
            (2, Some(opened + 60 * M)),
            (3, Some(opened + 90 * M)),
            (4, None),
            (u32::MAX, None),
        ];
        for (n, want) in cases {
            assert_eq!(r.due_at(opened, n), want, "reminder {n}");
        }
        assert_eq!(r.next(opened, 0), Some((1, opened + 30 * M)));
        assert_eq!(r.next(opened, 2), Some((3, opened + 90 * M)));
        assert_eq!(r.next(opened, 3), None);
        assert_eq!(r.next(opened, u32::MAX), None);
        assert_eq!(r.summary(), "every 30m, 3 times");
        assert_eq!(
            Renotify {
                every_ms: 1000,
                max: 1
            }
            .summary(),
            "every 1s, once"
        );
        // far future: no overflow, no reminder
        let huge = Renotify {
            every_ms: u64::MAX,
            max: 100,
        };
        assert_eq!(huge.due_at(opened, 1), None);
    }

    #[test]
    fn escalation_steps_go_in_order() {
        let step = |after_ms| EscalationStep {
            after_ms,
            channels: Vec::new(),
        };
        let steps = [step(15 * M as u64), step(H as u64), step(4 * H as u64)];
        let opened = ms("2026-11-25T10:00:00Z");
        // (sent, next)
        let cases = [
            (0, Some((0, opened + 15 * M))),
            (1, Some((1, opened + H))),
            (2, Some((2, opened + 4 * H))),
            (3, None),
            (9, None),
        ];
        for (sent, want) in cases {
            assert_eq!(next_escalation(&steps, opened, sent), want, "after {sent} sent");
        }
        assert_eq!(next_escalation(&[], opened, 0), None);
        assert_eq!(step(u64::MAX).due_at(opened), i64::MAX);
    }

    /// Explain's on-call status: reminders and steps by the schedule, stopped by an acknowledgement, quiet
    /// hours with or without an alert, nothing for a resolved alert.
    #[test]
    fn on_call_status_table() {
        use crate::alert::{Alert, AlertState};
        let ch = |kind| ChannelConfig {
            kind,
            endpoint: "x".into(),
            min_period_s: 0,
            severity: None,
        };
        let rule = OnCallRule {
            renotify: Some(Renotify {
                every_ms: 30 * M as u64,
                max: 3,
            }),
            escalation: vec![
                EscalationStep {
                    after_ms: 15 * M as u64,
                    channels: vec![ch(ChannelKind::Webhook)],
                },
                EscalationStep {
                    after_ms: H as u64,
                    channels: vec![ch(ChannelKind::Email), ch(ChannelKind::Pagerduty)],
                },
            ],
            quiet_hours: quiet(&[("daily", "22:00", "07:00", "Europe/Berlin")]),
        };
        let opened = ms("2026-11-25T10:00:00Z"); // 11:00 in Berlin: not quiet
        let alert = |state, acked: Option<i64>| Alert {
            id: "0123456789abcdef01234567".into(),
            project_id: "p".into(),
            project_name: None,
            rule_id: ID.into(),
            group: "g".into(),
            title: "t".into(),
            state,
            firing: "f".into(),
            fired_at_ms: opened,
            acknowledged_at_ms: acked,
            acknowledged_by: acked.map(|_| "ann".into()),
            resolved_at_ms: None,
            resolved_by: None,
            events: 2,
            last_event_at_ms: opened,
            resolve_after_ms: 0,
            channels: Vec::new(),
            heard: Vec::new(),
            closes: Vec::new(),
        };
        let firing = alert(AlertState::Firing, None);
        let acked = alert(AlertState::Acknowledged, Some(opened + 40 * M));
        let resolved = alert(AlertState::Resolved, None);
        let not_quiet = Some(Quiet {
            until_ms: None,
            bypass: vec![ChannelKind::Pagerduty],
        });
        let rem = |sent, next_at_ms| {
            Some(Reminders {
                sent,
                max: 3,
                every_ms: 30 * M as u64,
                next_at_ms,
            })
        };
        let esc = |sent, next: Option<(usize, i64, &str)>| {
            Some(Escalation {
                sent,
                steps: 2,
                next: next.map(|(n, at, c)| (n, at, c.to_owned())),
            })
        };
        // (alert, now, reminders, escalation, words)
        let cases = vec![
            (
                Some(&firing),
                opened + 10 * M,
                rem(0, Some(opened + 30 * M)),
                esc(0, Some((1, opened + 15 * M, "webhook"))),
                vec![
                    "reminders: 0 of 3 sent, the next at 2026-11-25T10:30:00Z (every 30m)",
                    "escalation: step 1 of 2 (webhook) at 2026-11-25T10:15:00Z",
                    "not in quiet hours now",
                ],
            ),
            // exactly due counts as sent
            (
                Some(&firing),
                opened + 30 * M,
                rem(1, Some(opened + 60 * M)),
                esc(1, Some((2, opened + H, "email,pagerduty"))),
                vec![
                    "reminders: 1 of 3 sent, the next at 2026-11-25T11:00:00Z (every 30m)",
                    "escalation: step 2 of 2 (email,pagerduty) at 2026-11-25T11:00:00Z",
                    "not in quiet hours now",
                ],
            ),
            (
                Some(&firing),
                opened + 5 * H,
                rem(3, None),
                esc(2, None),
                vec![
                    "reminders: 3 of 3 sent, none left",
                    "escalation: 2 of 2 sent, none left",
                    "not in quiet hours now",
                ],
            ),
            // acknowledged at +40m: one reminder and one step before it, none after
            (
                Some(&acked),
                opened + 5 * H,
                rem(1, None),
                esc(1, None),
                vec![
                    "reminders: stopped by the acknowledgement after 1 of 3",
                    "escalation: stopped by the acknowledgement after 1 of 2",
                    "not in quiet hours now",
                ],
            ),
            (
                Some(&resolved),
                opened + 10 * M,
                None,
                None,
                vec!["not in quiet hours now"],
            ),
            (None, opened + 10 * M, None, None, vec!["not in quiet hours now"]),
        ];
        for (alert, now, reminders, escalation, words) in cases {
            let st = rule.status(alert, now);
            let what = format!("{:?} at {now}", alert.map(|a| a.state));
            assert_eq!(st.reminders, reminders, "{what}");
            assert_eq!(st.escalation, escalation, "{what}");
            assert_eq!(st.quiet, not_quiet, "{what}");
            assert_eq!(st.words(), words, "{what}");
        }
        // 23:30 in Berlin: quiet until 07:00 Berlin (06:00 UTC); no alert, quiet hours only
        let st = rule.status(None, ms("2026-11-25T22:30:00Z"));
        assert_eq!(
            st.quiet.as_ref().and_then(|q| q.until_ms),
            Some(ms("2026-11-26T06:00:00Z"))
        );
        assert_eq!(
            st.words(),
            vec!["in quiet hours until 2026-11-26T06:00:00Z (pagerduty not held): firings are held"]
        );
        assert_eq!(
            st.to_json(),
            json!({"quietHours": {"quiet": true, "until": "2026-11-26T06:00:00Z", "bypass": ["pagerduty"]}})
        );
        let st = rule.status(Some(&firing), opened + 30 * M);
        assert_eq!(
            st.to_json(),
            json!({
                "reminders": {"sent": 1, "max": 3, "every": 1_800_000, "nextAt": "2026-11-25T11:00:00Z"},
                "escalation": {"sent": 1, "steps": 2, "nextStep": 2, "nextAt": "2026-11-25T11:00:00Z",
                    "nextChannels": ["email", "pagerduty"]},
                "quietHours": {"quiet": false, "until": null, "bypass": ["pagerduty"]}
            })
        );
        let st = rule.status(Some(&acked), opened + 5 * H);
        assert_eq!(st.to_json()["reminders"]["nextAt"], Value::Null);
        assert_eq!(st.to_json()["escalation"]["nextStep"], Value::Null);
        // a rule without on-call fields has nothing to show
        assert!(OnCallRule::default().status(Some(&firing), opened).is_empty());
        assert!(OnCallRule::default()
            .status(Some(&firing), opened)
            .words()
            .is_empty());
    }

    #[test]
    fn summaries_in_words() {
        let step = |after_ms, kinds: &[ChannelKind]| EscalationStep {
            after_ms,
            channels: kinds
                .iter()
                .map(|k| ChannelConfig {
                    kind: *k,
                    endpoint: "x".into(),
                    min_period_s: 0,
                    severity: None,
                })
                .collect(),
        };
        let steps = [
            step(15 * M as u64, &[ChannelKind::Pagerduty]),
            step(H as u64, &[ChannelKind::Email, ChannelKind::Slack]),
            step(2 * H as u64, &[]),
        ];
        assert_eq!(escalation_summary(&steps), "15m→pagerduty 1h→email,slack 2h→-");
        assert_eq!(escalation_summary(&[]), "");
        assert_eq!(resolve_after_summary(0), "by hand only");
        assert_eq!(resolve_after_summary(3_600_000), "after 1h without events");
    }

    #[test]
    fn clock_times() {
        let cases = [
            ("00:00", false, Some(0)),
            ("07:30", false, Some(450)),
            ("23:59", false, Some(1439)),
            ("24:00", true, Some(1440)),
            ("24:00", false, None),
            ("24:01", true, None),
            ("7:30", false, None),
            ("07:60", false, None),
            ("0730", false, None),
            ("07:3a", false, None),
            ("+7:30", false, None),
            ("", false, None),
        ];
        for (s, end, want) in cases {
            assert_eq!(
                ClockTime::parse(s, end).map(ClockTime::minutes),
                want,
                "{s} end={end}"
            );
        }
        assert_eq!(ClockTime(450).to_string(), "07:30");
        assert_eq!(ClockTime(1440).to_string(), "24:00");
    }

    #[test]
    fn weekday_names_and_summaries() {
        assert_eq!(weekday("mon"), Some(0));
        assert_eq!(weekday("Sunday"), Some(6));
        assert_eq!(weekday(" FRI "), Some(4));
        assert_eq!(weekday("funday"), None);
        let d = |s: &str| {
            let mut out = [false; 7];
            for c in s.split(',') {
                out[weekday(c).expect("day")] = true;
            }
            out
        };
        assert_eq!(days_summary(&[true; 7]), "daily");
        assert_eq!(days_summary(&d("mon,tue,wed,thu,fri")), "mon-fri");
        assert_eq!(days_summary(&d("sat,sun")), "sat,sun");
        assert_eq!(days_summary(&d("mon,wed,thu,fri")), "mon,wed-fri");
        assert_eq!(days_summary(&d("sun")), "sun");
    }

    /// Inside a window → when it ends (UTC); across midnight and the daylight-saving nights of Berlin and New York.
    #[test]
    fn window_at_across_midnight_and_daylight_saving() {
        let berlin = quiet(&[("daily", "22:00", "07:00", "Europe/Berlin")]);
        let new_york = quiet(&[("daily", "22:00", "07:00", "America/New_York")]);
        let friday_night = quiet(&[("fri", "22:00", "07:00", "UTC")]);
        let gap_start = quiet(&[("sun", "02:30", "04:00", "Europe/Berlin")]);
        let gap_end = quiet(&[("sat", "23:00", "02:30", "Europe/Berlin")]);
        let fold_start = quiet(&[("sun", "02:30", "06:00", "Europe/Berlin")]);
        let ny_fold = quiet(&[("sun", "01:30", "03:00", "America/New_York")]);
        // (what, quiet hours, at, quiet until)
        let cases: Vec<(&str, &QuietHours, &str, Option<&str>)> = vec![
            // Berlin, an ordinary night in winter (CET, UTC+1): 21:00Z … 06:00Z
            ("winter before", &berlin, "2026-01-14T20:59:59.999Z", None),
            (
                "winter start",
                &berlin,
                "2026-01-14T21:00:00Z",
                Some("2026-01-15T06:00:00Z"),
            ),
            (
                "winter after midnight",
                &berlin,
                "2026-01-15T03:00:00Z",
                Some("2026-01-15T06:00:00Z"),
            ),
            ("winter end", &berlin, "2026-01-15T06:00:00Z", None),
            // Berlin, summer (CEST, UTC+2): 20:00Z … 05:00Z
            (
                "summer",
                &berlin,
                "2026-07-01T20:30:00Z",
                Some("2026-07-02T05:00:00Z"),
            ),
            ("summer day", &berlin, "2026-07-02T12:00:00Z", None),
            // Berlin spring-forward night (29 March 2026, 02:00 CET → 03:00 CEST): 22:00 CET = 21:00Z … 07:00
            // CEST = 05:00Z, 8 hours
            (
                "berlin spring start",
                &berlin,
                "2026-03-28T21:00:00Z",
                Some("2026-03-29T05:00:00Z"),
            ),
            (
                "berlin spring in the gap",
                &berlin,
                "2026-03-29T01:30:00Z",
                Some("2026-03-29T05:00:00Z"),
            ),
            (
                "berlin spring last ms",
                &berlin,
                "2026-03-29T04:59:59.999Z",
                Some("2026-03-29T05:00:00Z"),
            ),
            ("berlin spring end", &berlin, "2026-03-29T05:00:00Z", None),
            // Berlin fall-back night (25 October 2026, 03:00 CEST → 02:00 CET): 22:00 CEST = 20:00Z … 07:00 CET =
            // 06:00Z, 10 hours
            ("berlin fall before", &berlin, "2026-10-24T19:59:00Z", None),
            (
                "berlin fall start",
                &berlin,
                "2026-10-24T20:00:00Z",
                Some("2026-10-25T06:00:00Z"),
            ),
            (
                "berlin fall repeated hour",
                &berlin,
                "2026-10-25T00:30:00Z",
                Some("2026-10-25T06:00:00Z"),
            ),
            (
                "berlin fall repeated again",
                &berlin,
                "2026-10-25T01:30:00Z",
                Some("2026-10-25T06:00:00Z"),
            ),
            (
                "berlin fall last hour",
                &berlin,
                "2026-10-25T05:30:00Z",
                Some("2026-10-25T06:00:00Z"),
            ),
            ("berlin fall end", &berlin, "2026-10-25T06:00:00Z", None),
            // New York spring-forward night (8 March 2026, 02:00 EST → 03:00 EDT): 22:00 EST = 03:00Z … 07:00 EDT
            // = 11:00Z, 8 hours
            ("ny spring before", &new_york, "2026-03-08T02:59:00Z", None),
            (
                "ny spring start",
                &new_york,
                "2026-03-08T03:00:00Z",
                Some("2026-03-08T11:00:00Z"),
            ),
            (
                "ny spring in the gap",
                &new_york,
                "2026-03-08T07:30:00Z",
                Some("2026-03-08T11:00:00Z"),
            ),
            ("ny spring end", &new_york, "2026-03-08T11:00:00Z", None),
            // New York fall-back night (1 November 2026, 02:00 EDT → 01:00 EST): 22:00 EDT = 02:00Z … 07:00 EST =
            // 12:00Z, 10 hours
            (
                "ny fall start",
                &new_york,
                "2026-11-01T02:00:00Z",
                Some("2026-11-01T12:00:00Z"),
            ),
            (
                "ny fall repeated hour",
                &new_york,
                "2026-11-01T06:30:00Z",
                Some("2026-11-01T12:00:00Z"),
            ),
            (
                "ny fall last hour",
                &new_york,
                "2026-11-01T11:59:00Z",
                Some("2026-11-01T12:00:00Z"),
            ),
            ("ny fall end", &new_york, "2026-11-01T12:00:00Z", None),
            // `days` are the days a window starts on: Friday 22:00 … Saturday 07:00 only
            (
                "friday night",
                &friday_night,
                "2026-11-27T22:00:00Z",
                Some("2026-11-28T07:00:00Z"),
            ),
            (
                "saturday morning",
                &friday_night,
                "2026-11-28T06:59:00Z",
                Some("2026-11-28T07:00:00Z"),
            ),
            ("saturday night", &friday_night, "2026-11-28T23:00:00Z", None),
            ("friday morning", &friday_night, "2026-11-27T06:00:00Z", None),
            ("thursday night", &friday_night, "2026-11-26T23:00:00Z", None),
            // a start skipped by spring-forward: the window starts when the clock jumps (01:00Z = 03:00 CEST)
            ("gap start before", &gap_start, "2026-03-29T00:59:59Z", None),
            (
                "gap start",
                &gap_start,
                "2026-03-29T01:00:00Z",
                Some("2026-03-29T02:00:00Z"),
            ),
            // an end skipped by spring-forward: the window ends when the clock jumps
            (
                "gap end inside",
                &gap_end,
                "2026-03-28T22:30:00Z",
                Some("2026-03-29T01:00:00Z"),
            ),
            ("gap end", &gap_end, "2026-03-29T01:00:00Z", None),
            // a start repeated by fall-back: its first occurrence (02:30 CEST = 00:30Z); ends 06:00 CET = 05:00Z
            ("fold start before", &fold_start, "2026-10-25T00:29:00Z", None),
            (
                "fold start",
                &fold_start,
                "2026-10-25T00:30:00Z",
                Some("2026-10-25T05:00:00Z"),
            ),
            // New York: 01:30 EDT = 05:30Z … 03:00 EST = 08:00Z
            ("ny fold before", &ny_fold, "2026-11-01T05:29:00Z", None),
            (
                "ny fold",
                &ny_fold,
                "2026-11-01T06:45:00Z",
                Some("2026-11-01T08:00:00Z"),
            ),
        ];
        for (what, q, at, want) in cases {
            assert_eq!(q.window_at(ms(at)), want.map(ms), "{what}: at {at}");
        }
        // the nights' lengths
        let night = |q: &QuietHours, start: &str| q.window_at(ms(start)).expect("quiet") - ms(start);
        assert_eq!(night(&berlin, "2026-01-14T21:00:00Z"), 9 * H);
        assert_eq!(night(&berlin, "2026-03-28T21:00:00Z"), 8 * H);
        assert_eq!(night(&berlin, "2026-10-24T20:00:00Z"), 10 * H);
        assert_eq!(night(&new_york, "2026-03-08T03:00:00Z"), 8 * H);
        assert_eq!(night(&new_york, "2026-11-01T02:00:00Z"), 10 * H);
    }

    /// Windows that follow on from each other make one quiet; a week of quiet is held a bounded time at once.
    #[test]
    fn windows_chain_and_stay_bounded() {
        let weeknights_and_weekend = quiet(&[
            ("mon,tue,wed,thu,fri", "22:00", "07:00", "UTC"),
            ("sat,sun", "00:00", "24:00", "UTC"),
        ]);
        // Friday 23:00 → Saturday 07:00, joined by Saturday and Sunday 00:00-24:00 → Monday 00:00
        assert_eq!(
            weeknights_and_weekend.window_at(ms("2026-11-27T23:00:00Z")),
            Some(ms("2026-11-30T00:00:00Z"))
        );
        assert_eq!(
            weeknights_and_weekend.window_at(ms("2026-11-29T12:00:00Z")),
            Some(ms("2026-11-30T00:00:00Z"))
        );
        assert_eq!(weeknights_and_weekend.window_at(ms("2026-11-30T12:00:00Z")), None);
        // Berlin and New York windows in one rule: the later end of those holding
        let both = quiet(&[
            ("daily", "22:00", "07:00", "Europe/Berlin"),
            ("daily", "22:00", "07:00", "America/New_York"),
        ]);
        // 05:30Z: Berlin (CET) quiet until 06:00Z, New York (EST) quiet 03:00Z … 12:00Z
        assert_eq!(
            both.window_at(ms("2026-01-15T05:30:00Z")),
            Some(ms("2026-01-15T12:00:00Z"))
        );
        // always quiet: held, for a bounded time, then asked again
        let always = quiet(&[("daily", "00:00", "24:00", "UTC")]);
        let at = ms("2026-11-25T10:00:00Z");
        let until = always.window_at(at).expect("quiet");
        assert!(until >= at + 7 * 24 * H, "{until}");
        assert!(until <= at + 400 * 24 * H, "{until}");
        // never quiet
        assert_eq!(QuietHours::default().window_at(at), None);
        assert_eq!(QuietHours::default().window_at(i64::MAX), None);
    }

    #[test]
    fn bypassed_channels_are_never_held() {
        let q = quiet(&[("daily", "22:00", "07:00", "UTC")]);
        let night = ms("2026-11-25T23:00:00Z");
        let day = ms("2026-11-25T12:00:00Z");
        // (channel, at, held until)
        let cases = [
            (ChannelKind::Pagerduty, night, None),
            (ChannelKind::Slack, night, Some(ms("2026-11-26T07:00:00Z"))),
            (ChannelKind::Email, night, Some(ms("2026-11-26T07:00:00Z"))),
            (ChannelKind::Slack, day, None),
            (ChannelKind::Pagerduty, day, None),
        ];
        for (channel, at, want) in cases {
            assert_eq!(q.is_bypassed(channel), channel == ChannelKind::Pagerduty);
            assert_eq!(q.held_until(channel, at), want, "{channel} at {at}");
        }
        assert_eq!(q.summary(), "daily 22:00-07:00 UTC (bypass pagerduty)");
    }

    fn rule(extra: serde_json::Value) -> serde_json::Value {
        let mut doc = json!({"_id": ID, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
            "thresholdPeriod": 60000,
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}});
        for (k, v) in extra.as_object().expect("object") {
            doc[k] = v.clone();
        }
        doc
    }

    const PD_KEY: &str = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";

    /// Valid on-call fields compile into their typed values, and the document is written back as read.
    #[test]
    fn on_call_fields_compile() {
        let doc = rule(json!({
            "renotify": {"every": 1_800_000, "max": 3},
            "escalation": [
                {"after": 900_000, "channels": {"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0,
                    "severity": "critical"}}},
                {"after": 3_600_000, "channels": {
                    "email": {"isEnabled": true, "endpoint": "cto@example.com", "minPeriod": 0},
                    "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/y", "minPeriod": 0}}}
            ],
            "quietHours": [
                {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00", "timezone": "Europe/Berlin"},
                {"days": ["Saturday", "sun"], "from": "00:00", "to": "24:00", "timezone": "UTC"}
            ],
            "quietHoursBypass": ["pagerduty"]
        }));
        let raw = RawRule::from_value(&doc).expect("object");
        let (r, problems) = raw.validate().expect("usable");
        // nothing to say: quietHours is applied
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            r.renotify,
            Some(Renotify {
                every_ms: 1_800_000,
                max: 3
            })
        );
        assert_eq!(r.escalation.len(), 2);
        assert_eq!(r.escalation[0].after_ms, 900_000);
        assert_eq!(r.escalation[0].channels[0].kind, ChannelKind::Pagerduty);
        assert_eq!(
            r.escalation[0].channels[0].severity,
            Some(crate::rule::Severity::Critical)
        );
        let kinds: Vec<_> = r.escalation[1].channels.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ChannelKind::Email, ChannelKind::Slack]);
        assert_eq!(r.quiet_hours.windows.len(), 2);
        assert_eq!(r.quiet_hours.windows[0].timezone(), "Europe/Berlin");
        assert!(r.quiet_hours.is_bypassed(ChannelKind::Pagerduty));
        assert!(!r.quiet_hours.is_bypassed(ChannelKind::Slack));
        assert_eq!(
            r.summary(),
            "SEEN_MORE 3/1m; renotify every 30m, 3 times; escalate 15m→pagerduty 1h→email,slack; quiet mon-fri \
             22:00-07:00 Europe/Berlin, sat,sun 00:00-24:00 UTC (bypass pagerduty)"
        );
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
        // unset or null: nothing
        let raw = RawRule::from_value(&rule(
            json!({"renotify": null, "escalation": null, "quietHours": null,
            "quietHoursBypass": null}),
        ))
        .expect("object");
        let (r, problems) = raw.validate().expect("usable");
        assert!(
            problems.is_empty()
                && r.renotify.is_none()
                && r.escalation.is_empty()
                && r.quiet_hours.is_empty()
        );
        assert_eq!(r.summary(), "SEEN_MORE 3/1m");
    }

    /// Every wrong value is a problem naming the field, with its fix; the document is kept as read.
    #[test]
    fn on_call_problems_have_fixes() {
        let slack =
            json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/y", "minPeriod": 0}});
        let step = |after: serde_json::Value| json!({"after": after, "channels": slack.clone()});
        let window = |days: serde_json::Value, from: &str, to: &str, tz: serde_json::Value| json!({"days": days, "from": from, "to": to, "timezone": tz});
        let mon = json!(["mon"]);
        let berlin = json!("Europe/Berlin");
        // (fields, what the message says, what the fix says)
        let cases = vec![
            (
                json!({"renotify": 30}),
                "`renotify` must be an object",
                "\"every\": 1800000",
            ),
            (
                json!({"renotify": {"every": 999, "max": 3}}),
                "`renotify.every` must be milliseconds between 1000",
                "renotify.every",
            ),
            (
                json!({"renotify": {"max": 3}}),
                "`renotify.every` must be",
                "renotify.every",
            ),
            (
                json!({"renotify": {"every": "30m", "max": 3}}),
                "got \"30m\"",
                "1800000",
            ),
            (
                json!({"renotify": {"every": 60000, "max": 0}}),
                "`renotify.max` must be a whole number between 1 and 100, got 0",
                "renotify.max",
            ),
            (
                json!({"renotify": {"every": 60000, "max": 101}}),
                "got 101",
                "renotify.max",
            ),
            (
                json!({"renotify": {"every": 60000}}),
                "`renotify.max` must be",
                "renotify.max",
            ),
            (
                json!({"escalation": {"after": 1000}}),
                "`escalation` must be a list of steps",
                "escalation",
            ),
            (
                json!({"escalation": (0..6).map(|i| step(json!(60000 * (i + 1)))).collect::<Vec<_>>()}),
                "6 steps, more than 5",
                "at most 5",
            ),
            (
                json!({"escalation": [3]}),
                "escalation step 1 (`escalation[0]`) must be an object",
                "\"after\"",
            ),
            (
                json!({"escalation": [step(json!(500))]}),
                "`escalation[0].after` must be milliseconds between 1000",
                "escalation[0].after",
            ),
            (
                json!({"escalation": [{"channels": slack.clone()}]}),
                "`escalation[0].after` must be",
                "900000",
            ),
            (
                json!({"escalation": [step(json!(600000)), step(json!(600000))]}),
                "escalation step 2 has `after` 600000, not later than step 1's 600000",
                "order the steps by `after`",
            ),
            (
                json!({"escalation": [step(json!(600000)), step(json!(60000))]}),
                "not later than step 1's",
                "each later than the one before",
            ),
            (
                json!({"escalation": [{"after": 60000}]}),
                "`escalation[0].channels` must be an object of channels",
                "escalation[0].channels",
            ),
            (
                json!({"escalation": [{"after": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "x", "minPeriod": 9_999_999}}}]}),
                "`escalation[0].channels`: channel `slack` has `minPeriod` 9999999, over the limit",
                "604800",
            ),
            (
                json!({"quietHours": {"from": "22:00"}}),
                "`quietHours` must be a list of windows",
                "\"timezone\"",
            ),
            (
                json!({"quietHours": ["22:00-07:00"]}),
                "`quietHours[0]` must be an object",
                "\"from\"",
            ),
            (
                json!({"quietHours": [window(json!(["mon", "funday"]), "22:00", "07:00", berlin.clone())]}),
                "`quietHours[0].days` has an unknown weekday \"funday\"",
                "\"mon\", \"tue\"",
            ),
            (
                json!({"quietHours": [window(json!([]), "22:00", "07:00", berlin.clone())]}),
                "`quietHours[0].days` is empty",
                "leave `days` out",
            ),
            (
                json!({"quietHours": [window(json!("mon"), "22:00", "07:00", berlin.clone())]}),
                "`quietHours[0].days` must be a list of weekdays",
                "\"sun\"",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "10pm", "07:00", berlin.clone())]}),
                "`quietHours[0].from` must be a 24-hour time \"HH:MM\" (00:00 … 23:59), got \"10pm\"",
                "\"22:00\"",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "24:00", "07:00", berlin.clone())]}),
                "`quietHours[0].from` must be",
                "quietHours[0].from",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "22:00", "7:00", berlin.clone())]}),
                "`quietHours[0].to` must be a 24-hour time \"HH:MM\" (00:00 … 24:00), got \"7:00\"",
                "\"07:00\"",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "22:00", "22:00", berlin.clone())]}),
                "`quietHours[0]` goes from 22:00 to 22:00: a window that never ends",
                "span midnight",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "00:00", "00:00", berlin.clone())]}),
                "a window that never ends",
                "\"24:00\"",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!("Europe/Berln"))]}),
                "`quietHours[0].timezone` \"Europe/Berln\" is not a time zone Klaxon knows",
                "\"Europe/Berlin\"",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!("CEST+2"))]}),
                "is not a time zone Klaxon knows",
                "IANA",
            ),
            (
                json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!(1))]}),
                "`quietHours[0].timezone` must be an IANA time zone name, got 1",
                "UTC",
            ),
            (
                json!({"quietHours": [{"days": ["mon"], "from": "22:00", "to": "07:00"}]}),
                "`quietHours[0]` has no `timezone`",
                "\"America/New_York\"",
            ),
            (
                json!({"quietHours": (0..22).map(|_| window(mon.clone(), "22:00", "07:00", berlin.clone())).collect::<Vec<_>>()}),
                "22 windows, more than 21",
                "merge",
            ),
            (
                json!({"quietHoursBypass": ["pagerdty"]}),
                "`quietHoursBypass` has an unknown channel \"pagerdty\"",
                "did you mean \"pagerduty\"?",
            ),
            (
                json!({"quietHoursBypass": "pagerduty"}),
                "`quietHoursBypass` must be a list of channel names",
                "pagerduty",
            ),
        ];
        for (fields, says, fix) in cases {
            let doc = rule(fields.clone());
            let raw = RawRule::from_value(&doc).expect("object");
            let p = raw.validate().expect_err(&fields.to_string());
            assert!(p.fatal, "{fields}: {p}");
            assert!(p.message.contains(says), "{fields}: {p}\nshould say: {says}");
            assert!(p.fix.contains(fix), "{fields}: {p}\nthe fix should say: {fix}");
            assert_eq!(p.rule_id.as_deref(), Some(ID));
            assert_eq!(serde_json::to_value(&raw).expect("json"), doc, "{fields}");
        }
    }

    /// A step's channels are checked like the rule's: warnings name the step, the step keeps its usable channels.
    #[test]
    fn escalation_channels_are_checked_like_the_rules() {
        let limits = crate::Limits::new(100, 1000, 2).expect("limits");
        // (step channels, usable channels left, what a warning says)
        let cases = vec![
            (json!({"pagerduty": {"isEnabled": true, "endpoint": "too-short", "minPeriod": 0}}), 1, Some("`escalation[0].channels`: channel `pagerduty` endpoint is not an Events API v2 routing key")),
            (json!({"discord": {"isEnabled": true, "endpoint": "https://discord.com/channels/1/2", "minPeriod": 0}}), 1, Some("not a Discord webhook URL")),
            (json!({"teams": {"isEnabled": true, "endpoint": "http://8.8.8.8/teams", "minPeriod": 0}}), 1, Some("Teams Workflows webhooks are https")),
            (json!({"slack": {"isEnabled": true, "endpoint": " ", "minPeriod": 0}}), 0, Some("`escalation[0].channels`: channel `slack` is enabled but has no endpoint")),
            (json!({"email": {"isEnabled": true, "endpoint": "a@x.io,b@x.io,c@x.io", "minPeriod": 0}}), 1, Some("`escalation[0].channels`: channel `email` has 3 recipients, over the limit of 2")),
            (json!({"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0, "severity": "fatal"}}), 1, Some("channel `pagerduty` has `severity` \"fatal\"")),
            (json!({"slack": {"isEnabled": true, "endpont": "https://hooks.slack.test/x", "minPeriod": 0}}), 0, Some("unknown key `escalation[0].channels.slack.endpont` is ignored; did you mean `endpoint`?")),
            (json!({"slack": {"isEnabled": false, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}), 0, Some("escalation step 1 has no usable channel")),
            (json!({"webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}}), 0, Some("escalation step 1 has no usable channel")),
            (json!({"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0}}), 1, None),
        ];
        for (channels, usable, says) in cases {
            let doc = rule(json!({"escalation": [{"after": 60000, "channels": channels}]}));
            let (r, problems) = RawRule::from_value(&doc)
                .expect("object")
                .validate_with(&limits, &crate::RuleDefaults::default())
                .expect("usable");
            assert_eq!(r.escalation[0].channels.len(), usable, "{channels}");
            match says {
                Some(says) => {
                    assert!(
                        problems
                            .iter()
                            .any(|p| p.message.contains(says) && !p.fix.is_empty() && !p.fatal),
                        "{channels}: {problems:?}"
                    );
                    for p in &problems {
                        assert!(!p.message.contains(PD_KEY), "{p}");
                    }
                }
                None => assert!(problems.is_empty(), "{channels}: {problems:?}"),
            }
        }
        // the email limit keeps the first addresses, as for the rule's own channel
        let doc = rule(
            json!({"escalation": [{"after": 60000, "channels": {"email": {"isEnabled": true,
            "endpoint": "a@x.io,b@x.io,c@x.io", "minPeriod": 0}}}]}),
        );
        let (r, problems) = RawRule::from_value(&doc)
            .expect("object")
            .validate_with(&limits, &crate::RuleDefaults::default())
            .expect("usable");
        assert_eq!(r.escalation[0].channels[0].endpoint, "a@x.io,b@x.io");
        assert!(problems.iter().any(|p| p.limit));
    }

    /// Warnings that do not make the rule unusable: misspelt keys, a bypass without windows.
    #[test]
    fn on_call_warnings() {
        let cases = vec![
            (
                json!({"renotify": {"every": 60000, "max": 2, "evry": 3}}),
                "unknown key `renotify.evry` is ignored; did you mean `every`?",
            ),
            (
                json!({"escalation": [{"aftr": 60000, "after": 60000, "channels": {}}]}),
                "did you mean `after`?",
            ),
            (
                json!({"quietHours": [{"from": "22:00", "to": "07:00", "timezone": "UTC", "timeZone": "UTC"}]}),
                "unknown key `quietHours[0].timeZone` is ignored; did you mean `timezone`?",
            ),
            (
                json!({"quietHoursBypass": ["pagerduty"]}),
                "`quietHoursBypass` has no effect",
            ),
            (json!({"quietHour": []}), "did you mean `quietHours`?"),
            (json!({"renotfy": {}}), "did you mean `renotify`?"),
        ];
        for (fields, says) in cases {
            let (_, problems) = RawRule::from_value(&rule(fields.clone()))
                .expect("object")
                .validate()
                .expect("usable");
            assert!(
                problems
                    .iter()
                    .any(|p| !p.fatal && p.message.contains(says) && !p.fix.is_empty()),
                "{fields}: {problems:?}"
            );
        }
    }
}
