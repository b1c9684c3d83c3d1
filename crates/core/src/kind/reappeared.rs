//! REAPPEARED (a Klaxon extension): a group seen again after at least `quietPeriod` without events
//! (`lua/reappeared.lua`, which keeps one last-seen mark per (rule, group)).

use super::Want;
use crate::event::Event;
use crate::explain::{Peek, RuleVerdict, Verdict};
use crate::field::Field;
use crate::notification::rfc3339_ms;
use crate::problem::RuleProblem;

/// The rule kind's name in `whatToReceive`.
pub const NAME: &str = "REAPPEARED";
/// The shortest and longest REAPPEARED `quietPeriod`, in milliseconds (1 s … 90 days).
pub const QUIET_PERIOD_MS: std::ops::RangeInclusive<u64> = 1000..=90 * 24 * 3600 * 1000;
/// `quietPeriod` when a REAPPEARED rule leaves it out: 7 days.
pub const DEFAULT_QUIET_PERIOD_MS: u64 = 7 * 24 * 3600 * 1000;

/// Reads a REAPPEARED rule's `quietPeriod` (7 days when left out); `fatal` makes the problem.
pub(crate) fn read(
    quiet_period: &Field<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<u64, RuleProblem> {
    match quiet_period.whole() {
        _ if quiet_period.is_unset() => Ok(DEFAULT_QUIET_PERIOD_MS),
        Some(ms) if QUIET_PERIOD_MS.contains(&ms) => Ok(ms),
        _ => Err(fatal(
            format!(
                "`quietPeriod` must be milliseconds between {} and {} (1 s … 90 days), got {}",
                QUIET_PERIOD_MS.start(),
                QUIET_PERIOD_MS.end(),
                quiet_period.to_json()
            ),
            "set `quietPeriod` in milliseconds, e.g. 604800000 for 7 days, or leave it out for 7 days",
        )),
    }
}

/// What a REAPPEARED rule asks the counter for one event of rule `rule_id`: note the sighting, and fire when
/// the group had been quiet long enough.
pub(crate) fn want(quiet_period_ms: u64, rule_id: &str, event: &Event) -> Want {
    Want::Reappeared {
        quiet_period_ms,
        // An id that is no ObjectId gives no creation time: the rule then never takes a group it has no mark
        // for as quiet (the far future arms it never).
        armed_at_ms: object_id_ms(rule_id).unwrap_or(i64::MAX),
        is_new: event.is_new,
    }
}

/// Whether a group's next event is a reappearance (`lua/reappeared.lua`'s decision): the group was last seen
/// `quiet_period_ms` or longer ago; or the counter has no mark of it, the event is not a first occurrence
/// (`isNew`: a group never seen is ONLY_NEW's business) and the rule has watched for at least
/// `quiet_period_ms` (a mark lives longer than that, so a group seen since would have one).
pub fn reappears(
    last_seen: Option<i64>,
    now_ms: i64,
    quiet_period_ms: u64,
    armed_at_ms: i64,
    is_new: bool,
) -> bool {
    let quiet = i64::try_from(quiet_period_ms).unwrap_or(i64::MAX);
    match last_seen {
        Some(seen) => now_ms.saturating_sub(seen) >= quiet,
        None => !is_new && now_ms.saturating_sub(armed_at_ms) >= quiet,
    }
}

/// The time an ObjectId was made, in unix ms (its first four bytes are seconds), when `id` is one: a
/// REAPPEARED rule watches groups from its creation on (see [`Want::Reappeared`]).
pub fn object_id_ms(id: &str) -> Option<i64> {
    if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::from_str_radix(&id[..8], 16).ok().map(|s| s * 1000)
}

/// The rule in a table cell (`klaxon rules list`): "REAPPEARED after 7d".
pub fn summary(quiet_period_ms: u64) -> String {
    format!("{NAME} after {}", crate::text::short_duration(quiet_period_ms))
}

/// What the rule watches for, in a sentence (the console): "seen again after 7days quiet".
pub fn watches_for(quiet_period_ms: u64) -> String {
    format!(
        "seen again after {} quiet",
        crate::text::compact_duration(quiet_period_ms)
    )
}

/// What a firing saw, in the messages' words: "back after 12 days quiet" (from the previous sighting at
/// `last_seen_ms`, to the firing at `fired_at_ms`), or "back after more than 7 days quiet" when the mark had
/// expired. Only numbers: no tenant text.
pub fn words(quiet_period_ms: u64, last_seen_ms: Option<i64>, fired_at_ms: i64) -> String {
    match last_seen_ms {
        Some(seen) => format!(
            "back after {} quiet",
            crate::text::duration_words(u64::try_from(fired_at_ms - seen).unwrap_or(0))
        ),
        None => format!(
            "back after more than {} quiet",
            crate::text::duration_words(quiet_period_ms)
        ),
    }
}

/// A REAPPEARED rule's verdict for `explain` (`lua/reappeared.lua`'s decision): how long the group has been quiet against
/// `quietPeriod`.
pub(crate) fn verdict(
    rule_id: &str,
    quiet_ms: u64,
    armed_at_ms: i64,
    is_new: bool,
    peek: &Peek,
) -> RuleVerdict {
    // the script's decision, in the core's one function; the words say why
    let fires = reappears(peek.last_seen, peek.now_ms, quiet_ms, armed_at_ms, is_new);
    let verdict = if fires {
        Verdict::WouldFire
    } else {
        Verdict::Counting
    };
    let reason = match peek.last_seen {
        Some(seen) => {
            let for_ms = peek.now_ms.saturating_sub(seen).max(0);
            let words = format!(
                "last seen at {}, quiet for {} (quietPeriod {})",
                rfc3339_ms(seen),
                crate::text::duration_words(for_ms as u64),
                crate::text::duration_words(quiet_ms)
            );
            if fires {
                format!("{words}; this event would fire")
            } else {
                format!("{words}; this event would be noted, not fire")
            }
        }
        None if is_new => {
            "a first occurrence (isNew) is ONLY_NEW's business: this event would start the group's mark"
                .to_owned()
        }
        None if fires => format!(
            "not seen for more than {} (no mark, and the rule has watched that long); this event would fire",
            crate::text::duration_words(quiet_ms)
        ),
        None => format!(
            "not seen since the rule began watching, less than {} ago; this event would be noted, not fire",
            crate::text::duration_words(quiet_ms)
        ),
    };
    RuleVerdict::new(rule_id, verdict, reason)
}
