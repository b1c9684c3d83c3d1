//! NO_EVENTS (a Klaxon extension): fires once when the project has sent no event at all for `quietPeriod`
//! (its events stopped arriving), and its alert resolves when the project's next event arrives.
//!
//! Unlike every other kind it watches the project, not a group: nothing is counted per (rule, group), so it has
//! no Lua script of its own and its `want` never asks the counter for anything. For every event of the project
//! it answers [`Skip::ProjectWide`]: "not mine to count; the project was seen". The engine notes the project's
//! last event once per project (whatever the title: NO_EVENTS has no title filters) and keeps a timer per rule
//! at last event + `quietPeriod`, deciding with [`silent_since`] and [`fires`]. Where the clock starts, per the
//! contract: at the project's last event, or, for a rule stored through Klaxon before any event, at its storing
//! (the rule's ObjectId time, [`super::reappeared::object_id_ms`]); a rule written straight into MongoDB starts at
//! the project's first event.
//!
//! `resolveAfter` means nothing to it (the alert resolves on the next event): left out it is 0, set it is
//! ignored with a warning. Its title filters, `uniqueUsers` and `window` are ignored too (warnings).

use super::Skip;
use crate::field::Field;
use crate::problem::RuleProblem;

/// The rule kind's name in `whatToReceive`.
pub const NAME: &str = "NO_EVENTS";
/// The shortest and longest NO_EVENTS `quietPeriod`, in milliseconds (10 s … 30 days).
pub const QUIET_PERIOD_MS: std::ops::RangeInclusive<u64> = 10_000..=30 * 24 * 3600 * 1000;

/// Reads a NO_EVENTS rule's `quietPeriod`, which it must have; `fatal` makes the problem.
pub(crate) fn read(
    quiet_period: &Field<u64>,
    fatal: &dyn Fn(String, &str) -> RuleProblem,
) -> Result<u64, RuleProblem> {
    match quiet_period.whole() {
        Some(ms) if QUIET_PERIOD_MS.contains(&ms) => Ok(ms),
        _ if quiet_period.is_unset() => Err(fatal(
            "a NO_EVENTS rule needs `quietPeriod`: how long without any event of the project fires it".into(),
            "set `quietPeriod` in milliseconds, e.g. 3600000 to fire after an hour without events",
        )),
        _ => Err(fatal(
            format!(
                "`quietPeriod` must be milliseconds between {} and {} (10 s … 30 days), got {}",
                QUIET_PERIOD_MS.start(),
                QUIET_PERIOD_MS.end(),
                quiet_period.to_json()
            ),
            "set `quietPeriod` in milliseconds, e.g. 3600000 to fire after an hour without events",
        )),
    }
}

/// What a NO_EVENTS rule asks the counter for an event: nothing, ever ([`Skip::ProjectWide`]); the engine notes
/// the project's last event itself.
pub(crate) fn want() -> Result<super::Want, Skip> {
    Err(Skip::ProjectWide)
}

/// Since when the project has been silent for the rule, unix ms: its last event, or, with none seen, the
/// rule's storing (`armed_at_ms`, its ObjectId time; `None` for a rule written straight into MongoDB, which
/// waits for the project's first event).
pub fn silent_since(last_event_ms: Option<i64>, armed_at_ms: Option<i64>) -> Option<i64> {
    last_event_ms.or(armed_at_ms)
}

/// Whether the rule fires at `now_ms`: the project has been silent since `since_ms` for at least
/// `quiet_period_ms`. (Once per silence: the alert it opens stays open until the next event resolves it.)
pub fn fires(since_ms: Option<i64>, now_ms: i64, quiet_period_ms: u64) -> bool {
    let quiet = i64::try_from(quiet_period_ms).unwrap_or(i64::MAX);
    since_ms.is_some_and(|since| now_ms.saturating_sub(since) >= quiet)
}

/// When the rule fires if no event comes, unix ms: `since_ms + quiet_period_ms`.
pub fn due_at(since_ms: i64, quiet_period_ms: u64) -> i64 {
    since_ms.saturating_add(i64::try_from(quiet_period_ms).unwrap_or(i64::MAX))
}

/// The rule in a table cell (`klaxon rules list`): "NO_EVENTS for 1h".
pub fn summary(quiet_period_ms: u64) -> String {
    format!("{NAME} for {}", crate::text::short_duration(quiet_period_ms))
}

/// What the rule watches for, in a sentence (the console): "no event from the project for 1h".
pub fn watches_for(quiet_period_ms: u64) -> String {
    format!(
        "no event from the project for {}",
        crate::text::compact_duration(quiet_period_ms)
    )
}

/// What a firing saw, in the messages' words: "no events for 2 hours" (since the last event at `since_ms`), or
/// "no events for more than 1 hour" when the last event is not known. Only numbers: no tenant text.
pub fn words(quiet_period_ms: u64, since_ms: Option<i64>, fired_at_ms: i64) -> String {
    match since_ms {
        Some(since) => format!(
            "no events for {}",
            crate::text::duration_words(u64::try_from(fired_at_ms - since).unwrap_or(0))
        ),
        None => format!(
            "no events for more than {}",
            crate::text::duration_words(quiet_period_ms)
        ),
    }
}

/// Why `explain` counts an event of the project for the rule: "a NO_EVENTS rule: any event of the project
/// restarts its 1h of silence; …". Only numbers: no tenant text.
pub fn explain_reason(quiet_period_ms: u64) -> String {
    format!(
        "a NO_EVENTS rule: any event of the project restarts its {} of silence; it fires only when the project's \
         events stop for that long",
        crate::text::compact_duration(quiet_period_ms)
    )
}

/// How a NO_EVENTS firing's title starts, before its quiet period ([`title`]). Nothing reads it back: an entry
/// of a digest or a quiet window's release carries its period (`NotificationEvent::silence_period_ms`).
pub const TITLE_PREFIX: &str = "No events for ";

/// A NO_EVENTS firing's title: "No events for 1 hour".
pub fn title(quiet_period_ms: u64) -> String {
    format!("{TITLE_PREFIX}{}", crate::text::duration_words(quiet_period_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    #[test]
    fn silence_and_firing() {
        // (last event, armed at, now, quiet period, fires)
        let cases = [
            (Some(0), None, H - 1, H as u64, false),
            (Some(0), None, H, H as u64, true),
            (Some(0), Some(5 * H), H, H as u64, true),
            (None, Some(10 * H), 10 * H + H / 2, H as u64, false),
            (None, Some(10 * H), 11 * H, H as u64, true),
            // written straight into MongoDB, no event yet: never fires
            (None, None, 1_000 * H, H as u64, false),
            // the last event wins over the storing
            (Some(20 * H), Some(10 * H), 20 * H + H - 1, H as u64, false),
        ];
        for (last, armed, now, quiet, want) in cases {
            let since = silent_since(last, armed);
            assert_eq!(fires(since, now, quiet), want, "{last:?} {armed:?} {now} {quiet}");
            if let Some(s) = since {
                assert!(fires(since, due_at(s, quiet), quiet));
                assert!(!fires(since, due_at(s, quiet) - 1, quiet));
            }
        }
    }

    #[test]
    fn quiet_period_limits() {
        let fatal = |m: String, f: &str| RuleProblem {
            rule_id: None,
            fatal: true,
            limit: false,
            message: m,
            fix: f.into(),
        };
        let cases: [(Field<u64>, Result<u64, &str>); 6] = [
            (Field::Typed(10_000), Ok(10_000)),
            (Field::Typed(30 * 24 * H as u64), Ok(30 * 24 * H as u64)),
            (Field::Typed(9_999), Err("between 10000 and 2592000000")),
            (Field::Typed(30 * 24 * H as u64 + 1), Err("10 s … 30 days")),
            (Field::Missing, Err("needs `quietPeriod`")),
            (Field::Other(serde_json::json!("1h")), Err("got \"1h\"")),
        ];
        for (field, want) in cases {
            match (read(&field, &fatal), want) {
                (Ok(ms), Ok(w)) => assert_eq!(ms, w),
                (Err(p), Err(says)) => {
                    assert!(p.message.contains(says), "{p}");
                    assert!(p.fix.contains("quietPeriod"), "{p}");
                }
                (got, want) => panic!("{field:?}: {got:?} vs {want:?}"),
            }
        }
    }

    #[test]
    fn words_are_numbers() {
        assert_eq!(summary(3_600_000), "NO_EVENTS for 1h");
        assert_eq!(watches_for(3_600_000), "no event from the project for 1h");
        assert!(words(3_600_000, Some(0), 2 * H).starts_with("no events for 2"));
        assert!(words(3_600_000, None, 2 * H).starts_with("no events for more than 1"));
        assert_eq!(title(3_600_000), "No events for 1 hour");
    }
}
