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
//!
//! The rooms, one job each: `fields` (the raw fields as stored, and reading and validating them),
//! `schedule` (the typed values and their timing: reminders, escalation steps, quiet windows),
//! `status` (where an open alert stands, for `explain`). Their items are re-exported here.

mod fields;
mod schedule;
mod status;

#[cfg(test)]
mod tests;

use std::ops::RangeInclusive;

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
/// How long one hold of [`QuietHours::window_at`] lasts at most, ms: a rule whose windows follow on from each
/// other over the whole week would hold for ever; it holds eight days at a time instead, and the engine asks
/// again.
pub(crate) const MAX_HOLD_MS: i64 = 8 * DAY_MS as i64;

pub(crate) use fields::{read, OnCallFields, Reader};
pub use fields::{
    RawEscalationStep, RawQuietWindow, RawRenotify, QUIET_WINDOW_KEYS, RENOTIFY_KEYS, STEP_KEYS,
};
pub use schedule::{
    days_summary, escalation_summary, next_escalation, resolve_after_summary, weekday, ClockTime,
    EscalationStep, QuietHours, QuietWindow, Renotify, SpanCache, WEEKDAYS,
};
pub use status::{Escalation, OnCallRule, OnCallStatus, Quiet, Reminders};
