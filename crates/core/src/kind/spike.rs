//! SPIKE (a Klaxon extension): the count of a group's current bucket (`thresholdPeriod`, aligned on the epoch)
//! reaches `max(threshold, factor × baseline)`, the baseline being the mean count of the group's previous
//! `baselineWindows` buckets; once per bucket (`lua/spike.lua`).

use serde::{Deserialize, Serialize};

use crate::explain::{Peek, RuleVerdict, Verdict};
use crate::notification::rfc3339_ms;

use super::seen_more::{MAX_THRESHOLD, MIN_PERIOD_MS};
use super::Want;
use crate::field::Field;
use crate::problem::RuleProblem;

/// The rule kind's name in `whatToReceive`.
pub const NAME: &str = "SPIKE";
/// The largest SPIKE bucket (`thresholdPeriod`), in milliseconds: one day.
pub const MAX_SPIKE_PERIOD_MS: u64 = 24 * 3600 * 1000;
/// The fewest and most previous buckets a SPIKE baseline may span (`baselineWindows`): memory per
/// (rule, group) is one field per bucket of the baseline.
pub const SPIKE_WINDOWS: std::ops::RangeInclusive<u32> = 2..=168;
/// `baselineWindows` when a SPIKE rule leaves it out.
pub const DEFAULT_BASELINE_WINDOWS: u32 = 24;
/// The smallest and largest SPIKE `factor`, in thousandths (1.5 … 100).
pub const SPIKE_FACTOR_MILLI: std::ops::RangeInclusive<u32> = 1500..=100_000;
/// `factor` when a SPIKE rule leaves it out (5×), in thousandths.
pub const DEFAULT_FACTOR_MILLI: u32 = 5000;
/// `threshold` when a SPIKE rule leaves it out: the least count of the current bucket that can fire.
pub const DEFAULT_SPIKE_THRESHOLD: u64 = 10;

/// The parameters of a SPIKE rule (see [`super::WhatToReceive::Spike`]). On the wire (inside a task's
/// [`crate::Reason::Spike`]) its fields keep their names in camelCase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spike {
    /// The bucket length (`thresholdPeriod`), ms: 1 s … 1 day. Buckets are aligned on the epoch.
    pub period_ms: u64,
    /// How many previous buckets form the baseline (`baselineWindows`), 2 … 168.
    pub baseline_windows: u32,
    /// `factor` in thousandths (5× = 5000): integers keep "factor exactly met" exact.
    pub factor_milli: u32,
    /// The least count of the current bucket that can fire (`threshold`).
    pub threshold: u64,
}

impl Spike {
    /// The count the current bucket must reach to fire, given the sum of the counts of the baseline buckets and
    /// how many buckets the baseline has: `max(threshold, ⌈factor × sum / buckets⌉)`. `None` without a baseline
    /// (the group's first bucket, as far as the counter knows): a group with no usual volume cannot spike
    /// above it. The same arithmetic as `lua/spike.lua`.
    pub fn needed(&self, baseline_sum: u64, baseline_buckets: u64) -> Option<u64> {
        if baseline_buckets == 0 {
            return None;
        }
        let num = u128::from(self.factor_milli) * u128::from(baseline_sum);
        let den = 1000 * u128::from(baseline_buckets);
        let scaled = u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX);
        Some(scaled.max(self.threshold))
    }

    /// The bucket `now_ms` falls in (buckets are aligned on the epoch).
    pub fn bucket(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(self.period_ms.max(1) as i64)
    }

    /// The baseline of bucket `cur` for a group whose first bucket is `origin`, from the buckets the counter
    /// holds (`(bucket, count)`, in any order, the same bucket at most once): the sum of the counts of the
    /// previous `baseline_windows` buckets and how many buckets that is. Buckets before the group's first one
    /// are not part of it (a young group's baseline is the mean of the buckets it has had); buckets the
    /// counter holds nothing for count as 0. The same reading as `lua/spike.lua`.
    pub fn baseline(&self, origin: i64, cur: i64, held: impl IntoIterator<Item = (i64, u64)>) -> (u64, u64) {
        let w = i64::from(self.baseline_windows);
        let from = (cur - w).max(origin);
        let sum = held
            .into_iter()
            .filter(|&(b, _)| b >= from && b < cur)
            .map(|(_, c)| c)
            .sum();
        (sum, (cur - from).max(0) as u64)
    }

    /// `factor` as a number (5000 → 5.0).
    pub fn factor(&self) -> f64 {
        f64::from(self.factor_milli) / 1000.0
    }
}

/// What the counter observed when a SPIKE rule fired: the baseline of the bucket that fired and the count it
/// needed (`lua/spike.lua`'s answer; [`crate::Reason::Spike`] carries it with the rule's [`Spike`]).
///
/// On the wire (inside a task's [`crate::Reason::Spike`], beside the rule's [`Spike`]) its fields are
/// `baselineSum`, `baselineBuckets` and `needed`, as they always were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Baseline {
    /// The sum of the counts of the baseline's buckets at the firing.
    #[serde(rename = "baselineSum")]
    pub sum: u64,
    /// How many buckets the baseline had (fewer than `baseline_windows` for a young group; 0 in its first
    /// bucket).
    #[serde(rename = "baselineBuckets")]
    pub buckets: u64,
    /// The count that fired: `max(threshold, ⌈factor × baseline⌉)`.
    pub needed: u64,
}

impl Baseline {
    /// The baseline a firing is read with when the counter said nothing of it: a first bucket's (none), which
    /// needs the rule's threshold.
    pub fn unknown(spike: &Spike) -> Self {
        Baseline {
            sum: 0,
            buckets: 0,
            needed: spike.needed(0, 0).unwrap_or(spike.threshold),
        }
    }

    /// What a firing saw, in the messages' words: "312 in the last hour, usually ~20 (15.6×)", or "usually
    /// none". Only numbers: no tenant text.
    pub fn words(&self, count: u64, window: &str) -> String {
        let mean = self.sum as f64 / self.buckets.max(1) as f64;
        if mean <= 0.0 {
            format!("{count} in {window}, usually none")
        } else {
            format!(
                "{count} in {window}, usually ~{} ({:.1}×)",
                one_decimal(mean),
                count as f64 / mean
            )
        }
    }
}

/// "20" for a whole number, else one decimal: "20.5".
fn one_decimal(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

impl Spike {
    /// What a SPIKE rule asks the counter for every event it wants: count it in the current bucket.
    pub(crate) fn want(self) -> Want {
        Want::Spike(self)
    }

    /// The rule in a table cell (`klaxon rules list`): "SPIKE 5x/1h over 24 (min 10)".
    pub fn summary(&self) -> String {
        format!(
            "{NAME} {}x/{} over {} (min {})",
            self.factor(),
            crate::text::short_duration(self.period_ms),
            self.baseline_windows,
            self.threshold
        )
    }

    /// What the rule watches for, in a sentence (the console): "5× its mean of the previous 24 buckets of 1h
    /// (at least 10)".
    pub fn watches_for(&self) -> String {
        format!(
            "{}× its mean of the previous {} buckets of {} (at least {})",
            self.factor(),
            self.baseline_windows,
            crate::text::compact_duration(self.period_ms),
            self.threshold
        )
    }

    /// Reads a SPIKE rule's bucket (`thresholdPeriod`), `baselineWindows`, `factor` and least count
    /// (`threshold`), with their defaults; `fatal` makes the problem.
    pub(crate) fn read(
        period: &Field<u64>,
        baseline_windows: &Field<u64>,
        factor: &Field<f64>,
        threshold: &Field<u64>,
        fatal: &dyn Fn(String, &str) -> RuleProblem,
    ) -> Result<Spike, RuleProblem> {
        let period_ms = match period.whole() {
            _ if period.is_missing() => {
                return Err(fatal(
                    "SPIKE rule has no `thresholdPeriod` (the bucket)".into(),
                    "set `thresholdPeriod` to the bucket in milliseconds, e.g. 3600000 for one hour",
                ))
            }
            Some(ms) if (MIN_PERIOD_MS..=MAX_SPIKE_PERIOD_MS).contains(&ms) => ms,
            _ => {
                return Err(fatal(
                    format!(
                    "SPIKE `thresholdPeriod` (the bucket) must be milliseconds between {MIN_PERIOD_MS} and \
                         {MAX_SPIKE_PERIOD_MS} (1 s … 1 day), got {}",
                    period.to_json()
                ),
                    "set `thresholdPeriod` to the bucket in milliseconds, e.g. 3600000 for one hour",
                ))
            }
        };
        let baseline_windows = match baseline_windows.whole() {
            _ if baseline_windows.is_unset() => DEFAULT_BASELINE_WINDOWS,
            Some(n) if SPIKE_WINDOWS.contains(&u32::try_from(n).unwrap_or(u32::MAX)) => n as u32,
            _ => return Err(fatal(
                format!(
                    "`baselineWindows` must be a whole number between {} and {}, got {}",
                    SPIKE_WINDOWS.start(),
                    SPIKE_WINDOWS.end(),
                    baseline_windows.to_json()
                ),
                "set `baselineWindows` to how many previous buckets form the baseline (2 … 168), or leave \
                     it out for 24",
            )),
        };
        let factor_milli = match factor {
            f if f.is_unset() => DEFAULT_FACTOR_MILLI,
            Field::Typed(x) if x.is_finite() => {
                // thousandths: "factor exactly met" stays exact in integers, in Rust and in Lua alike
                let milli = (x * 1000.0).round();
                if (f64::from(*SPIKE_FACTOR_MILLI.start())..=f64::from(*SPIKE_FACTOR_MILLI.end()))
                    .contains(&milli)
                {
                    milli as u32
                } else {
                    return Err(fatal(
                        format!("`factor` must be between 1.5 and 100, got {x}"),
                        "set `factor` to how many times its baseline a bucket must reach, e.g. 5, or leave it out \
                         for 5",
                    ));
                }
            }
            other => return Err(fatal(
                format!(
                    "`factor` must be a number between 1.5 and 100, got {}",
                    other.to_json()
                ),
                "set `factor` to how many times its baseline a bucket must reach, e.g. 5, or leave it out \
                     for 5",
            )),
        };
        let threshold = match threshold.whole() {
            _ if threshold.is_unset() => DEFAULT_SPIKE_THRESHOLD,
            Some(n) if (1..=MAX_THRESHOLD).contains(&n) => n,
            _ => return Err(fatal(
                format!(
                    "SPIKE `threshold` (the least count that can fire) must be a whole number between 1 and \
                         {MAX_THRESHOLD}, got {}",
                    threshold.to_json()
                ),
                "set `threshold` to the least count of a bucket that can be a spike, or leave it out for 10",
            )),
        };
        Ok(Spike {
            period_ms,
            baseline_windows,
            factor_milli,
            threshold,
        })
    }
}

/// A SPIKE rule's verdict for `explain` (`lua/spike.lua`'s decision): the current bucket's count against `max(threshold, factor ×
/// baseline)`, once per bucket.
pub(crate) fn verdict(rule_id: &str, spike: Spike, peek: &Peek) -> RuleVerdict {
    let at = rfc3339_ms;
    let period = spike.period_ms as i64;
    let ends = (spike.bucket(peek.now_ms) + 1) * period;
    let needed = spike.needed(peek.baseline_sum, peek.baseline_buckets);
    let baseline = baseline_words(peek.baseline_sum, peek.baseline_buckets);
    let verdict = |verdict, reason: String, count| RuleVerdict {
        count: Some(count),
        threshold: needed,
        window_ends_at: Some(ends),
        ..RuleVerdict::new(rule_id, verdict, reason)
    };
    if let Some(f) = peek.fired_at {
        let reason = format!(
            "this bucket fired at {} ({} events, {baseline}); the next bucket starts at {}",
            at(f),
            peek.count,
            at(ends)
        );
        return verdict(Verdict::AlreadyNotified, reason, peek.count + 1);
    }
    let next = peek.count + 1;
    let Some(needed) = needed else {
        let reason = format!(
            "{} events in this bucket so far, the group's first: with no baseline it cannot spike; this event \
             would be #{next}",
            peek.count
        );
        return verdict(Verdict::Counting, reason, next);
    };
    let so_far = format!(
        "{} events in this bucket so far, {baseline}: {needed} needed (max of threshold {} and {}× the baseline)",
        peek.count,
        spike.threshold,
        spike.factor()
    );
    if next >= needed {
        verdict(
            Verdict::WouldFire,
            format!("{so_far}; this event would be #{next} and fire"),
            next,
        )
    } else {
        verdict(
            Verdict::Counting,
            format!("{so_far}; this event would be #{next}"),
            next,
        )
    }
}

/// A spike's baseline in words: "baseline ~20.0 over 24 buckets", or none yet.
fn baseline_words(sum: u64, buckets: u64) -> String {
    if buckets == 0 {
        return "no baseline yet (the group's first bucket)".to_owned();
    }
    format!(
        "baseline ~{:.1} over {buckets} bucket{}",
        sum as f64 / buckets as f64,
        if buckets == 1 { "" } else { "s" }
    )
}
