//! The typed on-call values and their timing, pure (time is a parameter): when a reminder or an escalation step
//! is due, whether a moment is inside a quiet window and until when, and each in words.

use std::fmt;
use std::sync::{Arc, RwLock};

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

use super::MAX_HOLD_MS;
use crate::rule::{ChannelConfig, ChannelKind};

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
pub struct ClockTime(pub(super) u16);

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
    /// The windows' quiet spans, computed once for weeks at a time ([`QuietHours::window_at`]); shared by the
    /// clones of one rule version, never compared.
    pub spans: SpanCache,
}

/// How far ahead the quiet spans are computed at once (then again, from the moment asked).
const SPAN_HORIZON_MS: i64 = 28 * 24 * 3_600_000;
/// A margin around the computed span: an occurrence lasts less than a day plus a daylight-saving hour.
const SPAN_MARGIN_MS: i64 = 2 * 24 * 3_600_000;

/// The quiet spans of a rule's windows over some weeks: every occurrence of every window, those that overlap or
/// touch merged into one span, so "inside a quiet window, until when" is a binary search instead of up to
/// [`crate::oncall::MAX_QUIET_WINDOWS`] × 8 time-zone conversions per chained window, for every firing.
#[derive(Clone, Default)]
pub struct SpanCache(Arc<RwLock<Option<Arc<Spans>>>>);

impl fmt::Debug for SpanCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpanCache")
    }
}

impl PartialEq for SpanCache {
    /// A cache of what the windows say: never part of a rule's value.
    fn eq(&self, _: &SpanCache) -> bool {
        true
    }
}

impl Eq for SpanCache {}

/// Merged quiet spans [start, end) (unix ms, sorted, disjoint and not touching) of `windows`, valid for a moment
/// in [`from_ms`, `to_ms`).
#[derive(Debug)]
struct Spans {
    windows: Vec<QuietWindow>,
    from_ms: i64,
    to_ms: i64,
    spans: Vec<(i64, i64)>,
}

impl Spans {
    /// The spans of `windows` around `at_ms`: from two days before to [`SPAN_HORIZON_MS`] after; `None` when
    /// the moment is too far out for the calendar.
    fn around(windows: &[QuietWindow], at_ms: i64) -> Option<Spans> {
        let from_ms = at_ms.checked_sub(SPAN_MARGIN_MS)?;
        let to_ms = at_ms.checked_add(SPAN_HORIZON_MS + MAX_HOLD_MS + SPAN_MARGIN_MS)?;
        let first = Timestamp::from_millisecond(from_ms.checked_sub(SPAN_MARGIN_MS)?).ok()?;
        let last = Timestamp::from_millisecond(to_ms.checked_add(SPAN_MARGIN_MS)?).ok()?;
        let mut occurrences = Vec::new();
        for w in windows {
            let end = w.tz.to_datetime(last).date();
            let mut d = w.tz.to_datetime(first).date();
            while d <= end {
                if w.days[weekday_index(d)] {
                    if let Some((s, e)) = w.occurrence(d) {
                        occurrences.push((s.as_millisecond(), e.as_millisecond()));
                    }
                }
                d = d.tomorrow().ok()?;
            }
        }
        occurrences.sort_unstable();
        let mut spans: Vec<(i64, i64)> = Vec::with_capacity(occurrences.len());
        for (s, e) in occurrences {
            match spans.last_mut() {
                // overlapping or touching: one quiet
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => spans.push((s, e)),
            }
        }
        Some(Spans {
            windows: windows.to_vec(),
            from_ms,
            to_ms,
            spans,
        })
    }

    /// Whether these spans answer for `at_ms` of `windows`.
    fn covers(&self, windows: &[QuietWindow], at_ms: i64) -> bool {
        self.from_ms <= at_ms
            && at_ms.saturating_add(MAX_HOLD_MS + SPAN_MARGIN_MS) <= self.to_ms
            && self.windows.len() == windows.len()
            // what the windows say, without comparing time zones' rules (the name is what was stored)
            && self.windows.iter().zip(windows).all(|(a, b)| {
                (a.days, a.from, a.to, &a.tz_name) == (b.days, b.from, b.to, &b.tz_name)
            })
    }

    /// The end of the quiet holding `at_ms` (at most [`MAX_HOLD_MS`] later), if it is quiet.
    fn end_at(&self, at_ms: i64) -> Option<i64> {
        let i = self.spans.partition_point(|(s, _)| *s <= at_ms);
        let (_, end) = *self.spans.get(i.checked_sub(1)?)?;
        (at_ms < end).then(|| end.min(at_ms.saturating_add(MAX_HOLD_MS)))
    }
}

impl SpanCache {
    /// The quiet holding `at_ms` under `windows`, from the spans computed already, or computed now (once for
    /// [`SPAN_HORIZON_MS`]). `None` when the moment is too far out for the calendar.
    fn end_at(&self, windows: &[QuietWindow], at_ms: i64) -> Option<Option<i64>> {
        let cached = self.0.read().ok().and_then(|s| s.clone());
        if let Some(spans) = cached.filter(|s| s.covers(windows, at_ms)) {
            return Some(spans.end_at(at_ms));
        }
        let spans = Arc::new(Spans::around(windows, at_ms)?);
        let end = spans.end_at(at_ms);
        if let Ok(mut slot) = self.0.write() {
            *slot = Some(spans);
        }
        Some(end)
    }
}

impl QuietHours {
    /// True when the rule has no quiet window.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Whether `at_ms` (unix ms) is inside a quiet window, and if so when the quiet ends (unix ms): the end of
    /// the window, or of the last of the windows that follow on from it without a gap (at most
    /// [`MAX_HOLD_MS`] after `at_ms`; the engine asks again then). `None`: not quiet, deliver now.
    ///
    /// O(log n) per call: the windows' occurrences are computed once per rule version for four weeks at a time
    /// and merged into spans ([`SpanCache`]); only a moment outside those weeks computes them again.
    pub fn window_at(&self, at_ms: i64) -> Option<i64> {
        if self.windows.is_empty() {
            return None;
        }
        match self.spans.end_at(&self.windows, at_ms) {
            Some(end) => end,
            None => self.chained_window_at(at_ms),
        }
    }

    /// [`QuietHours::window_at`] computed from the windows, without spans: hop from window to window (each hop
    /// up to one time-zone conversion per window and day) until no window holds the moment, or
    /// [`MAX_HOLD_MS`] have passed. The reference the spans are tested against, and the answer for moments too
    /// far out for them.
    pub fn chained_window_at(&self, at_ms: i64) -> Option<i64> {
        let mut t = Timestamp::from_millisecond(at_ms).ok()?;
        let cap = at_ms.saturating_add(MAX_HOLD_MS);
        let mut inside = false;
        while t.as_millisecond() < cap {
            match self.windows.iter().filter_map(|w| w.end_if_inside(t)).max() {
                Some(end) => {
                    inside = true;
                    t = end;
                }
                None => break,
            }
        }
        inside.then(|| t.as_millisecond().min(cap))
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
