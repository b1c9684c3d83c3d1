//! SEEN_MORE (and Hawk's legacy `ALL`): occurrences of a group counted in a fixed or sliding window — events, or
//! distinct users with `uniqueUsers` — fire when the count reaches `threshold` (`lua/fixed_window.lua`,
//! `lua/sliding_window.lua`, `lua/unique_users.lua`).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Skip, Want};
use crate::event::Event;
use crate::field::Field;
use crate::problem::RuleProblem;

/// The rule kind's name in `whatToReceive`.
pub const NAME: &str = "SEEN_MORE";
/// The smallest `thresholdPeriod` accepted, in milliseconds.
pub const MIN_PERIOD_MS: u64 = 1000;
/// The largest `thresholdPeriod` accepted (30 days): windows are kept in Redis for their whole length.
pub const MAX_PERIOD_MS: u64 = 30 * 24 * 3600 * 1000;
/// The largest `threshold` accepted: a sliding window keeps up to `threshold` members per (rule, group), so the
/// threshold is a tenant's lever on Redis memory.
pub const MAX_THRESHOLD: u64 = 1_000_000;
/// Window used for legacy `whatToReceive: "ALL"` rules that carry no `thresholdPeriod`.
pub const LEGACY_ALL_PERIOD_MS: u64 = 60_000;

/// How occurrences are counted for `SEEN_MORE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    /// Hawk's window: starts at the first counted event and lasts `thresholdPeriod`.
    #[default]
    Fixed,
    /// Trailing window of `thresholdPeriod` with a cooldown of the same length after a firing.
    Sliding,
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Window::Fixed => "fixed",
            Window::Sliding => "sliding",
        })
    }
}

/// Reads a SEEN_MORE rule's `threshold` and `thresholdPeriod`; `fatal` makes the problem.
pub(crate) fn read(
    threshold: &Field<u64>,
    period: &Field<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<(u64, u64), RuleProblem> {
    Ok((
        read_threshold(threshold, fatal)?,
        read_period(period, None, fatal)?,
    ))
}

/// Reads Hawk's legacy `ALL` rule: every occurrence is interesting. Klaxon treats it as SEEN_MORE with
/// threshold 1, i.e. at most one notification per group per window (the rule's period, or one minute).
pub(crate) fn read_legacy_all(
    period: &Field<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<(u64, u64), RuleProblem> {
    Ok((1, read_period(period, Some(LEGACY_ALL_PERIOD_MS), fatal)?))
}

fn read_threshold(
    threshold: &Field<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<u64, RuleProblem> {
    if threshold.is_missing() {
        return Err(fatal(
            "SEEN_MORE rule has no `threshold`".into(),
            "set `threshold` to a whole number ≥ 1",
        ));
    }
    match threshold.whole() {
        Some(0) | None => Err(fatal(
            format!(
                "`threshold` must be a whole number ≥ 1, got {}",
                threshold.to_json()
            ),
            "set `threshold` to a whole number ≥ 1",
        )),
        Some(n) if n > MAX_THRESHOLD => Err(fatal(
            format!("`threshold` must be at most {MAX_THRESHOLD}, got {n}"),
            "set `threshold` to a whole number between 1 and 1000000",
        )),
        Some(n) => Ok(n),
    }
}

fn read_period(
    period: &Field<u64>,
    default: Option<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<u64, RuleProblem> {
    if period.is_missing() {
        return default.ok_or_else(|| {
            fatal(
                "SEEN_MORE rule has no `thresholdPeriod`".into(),
                "set `thresholdPeriod` in milliseconds, ≥ 1000",
            )
        });
    }
    match period.whole() {
        Some(ms) if (MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&ms) => Ok(ms),
        _ => Err(fatal(
            format!(
                "`thresholdPeriod` must be milliseconds between {MIN_PERIOD_MS} and {MAX_PERIOD_MS}, got {}",
                period.to_json()
            ),
            "set `thresholdPeriod` in milliseconds, e.g. 3600000 for one hour",
        )),
    }
}

/// Reads a rule's `window` (every kind's: a bad value is a problem whatever the kind, as it always was).
pub(crate) fn read_window(
    window: &Field<String>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<Window, RuleProblem> {
    match window {
        Field::Typed(s) if s == "fixed" => Ok(Window::Fixed),
        Field::Typed(s) if s == "sliding" => Ok(Window::Sliding),
        f if f.is_unset() => Ok(Window::Fixed),
        other => Err(fatal(
            format!("unknown `window` {}", other.to_json()),
            "use \"fixed\" or \"sliding\" (or leave it out for fixed)",
        )),
    }
}

/// What a SEEN_MORE rule asks the counter for one event: count it, or count its user (`uniqueUsers`; events
/// without a user are not counted).
pub(crate) fn want(
    threshold: u64,
    period_ms: u64,
    window: Window,
    unique_users: bool,
    event: &Event,
) -> Result<Want, Skip> {
    if !unique_users {
        return Ok(Want::Count {
            threshold,
            period_ms,
            window,
        });
    }
    if event.user.is_none() {
        return Err(Skip::NoUser);
    }
    Ok(Want::UniqueUsers {
        threshold,
        period_ms,
        window,
    })
}

/// The rule in a table cell (`klaxon rules list`): "SEEN_MORE 100/1h", "SEEN_MORE 5 users/10m".
pub fn summary(threshold: u64, period_ms: u64, unique_users: bool) -> String {
    let period = crate::text::short_duration(period_ms);
    if unique_users {
        format!("{NAME} {threshold} users/{period}")
    } else {
        format!("{NAME} {threshold}/{period}")
    }
}
