//! What becomes of a task after an attempt ([`Next`]), and when it is tried again: the retry schedule, its
//! jitter and a scheduled task's wait.

use std::time::Duration;

use klaxon_channels::DeliveryError;
use rand::Rng;

/// The default retry schedule, seconds: 1 s, 5 s, 30 s, 2 min, 10 min, 1 h (the last repeats).
pub const RETRY_SCHEDULE_S: [u64; 6] = [1, 5, 30, 120, 600, 3600];

/// [`RETRY_SCHEDULE_S`] as `--retry-schedule` writes it (plain numbers are seconds): the flag's default.
pub fn default_retry_schedule_flag() -> String {
    RETRY_SCHEDULE_S.map(|s| s.to_string()).join(",")
}

/// The delay before attempt `attempts + 1`: the schedule's entry for `attempts` (the last repeats) times a
/// random factor in [0.8, 1.2) (`jitter`, so that a burst of failures does not come back as a burst), never
/// less than the destination's `Retry-After` (capped at the schedule's last entry). The delay engine rounds
/// up to whole seconds.
pub fn retry_delay(
    schedule: &[Duration],
    attempts: u32,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    let Some(last) = schedule.last().copied() else {
        return retry_after.unwrap_or(Duration::from_secs(1));
    };
    let idx = (attempts.saturating_sub(1) as usize).min(schedule.len() - 1);
    let base = schedule[idx].mul_f64(jitter.clamp(0.5, 1.5));
    retry_after.map_or(base, |ra| base.max(ra.min(last)))
}

/// How long a task scheduled for `send_at_ms` must still wait at `now_ms` (None: it is due), capped at what
/// the delay engine can express in one step.
pub fn not_before(send_at_ms: Option<i64>, now_ms: i64) -> Option<Duration> {
    let left = send_at_ms?.saturating_sub(now_ms);
    (left > 0).then(|| Duration::from_millis(left.unsigned_abs()).min(klaxon_broker::delay::MAX_DELAY))
}

pub(super) fn jitter() -> f64 {
    rand::rng().random_range(0.8..1.2)
}

/// What becomes of a task: the outcome of `attempt_delivery` (through [`after_attempt`] once it was tried),
/// carried out by `settle`, the one exit (lease, log, metric, trail, re-publish; the caller then acks).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Next {
    /// Sent after `attempts` attempts: mark the id delivered.
    Delivered { attempts: u32 },
    /// Delivered before (the dedup store says so): drop this copy, no second message.
    Duplicate,
    /// Not now: back through the delay engine unchanged (attempts included), after `wait`; to the later lane
    /// when its own endpoint `held` it ([`klaxon_core::priority::Lane::back`]).
    Park {
        wait: Duration,
        why: &'static str,
        held: bool,
    },
    /// A transient failure with attempts left: back through the delay engine after `wait`, counting
    /// `attempts`.
    Retry {
        attempts: u32,
        wait: Duration,
        why: String,
    },
    /// A permanent failure, the attempts exhausted, or not a task at all: to `<ns>.dead`.
    Dead { attempts: u32, why: String },
    /// Not to be sent at all (a reminder or step of an alert acknowledged or resolved since, see
    /// [`super::current`]), after `attempts` attempts: acked, recorded as `dropped`.
    Dropped { attempts: u32, why: super::Dropped },
}

impl Next {
    /// [`Next::Park`]: not now, again after `wait` (`held`: its own endpoint holds it).
    pub(super) fn park(wait: Duration, why: &'static str, held: bool) -> Next {
        Next::Park { wait, why, held }
    }
}

/// What the result of attempt number `attempts` means for the task (`error` None: it was sent).
pub(super) fn after_attempt(
    error: Option<&DeliveryError>,
    attempts: u32,
    max_attempts: u32,
    schedule: &[Duration],
    jitter: f64,
) -> Next {
    match error {
        None => Next::Delivered { attempts },
        // bounded before it reaches the log, the trail and the retry's header (a huge hostname, an echoed body)
        Some(DeliveryError::Transient {
            reason, retry_after, ..
        }) if attempts < max_attempts => Next::Retry {
            attempts,
            wait: retry_delay(schedule, attempts, *retry_after, jitter),
            why: klaxon_core::text::reason(reason),
        },
        Some(DeliveryError::Transient { reason, .. }) => Next::Dead {
            attempts,
            why: klaxon_core::text::reason(&format!("gave up after {attempts} attempts: {reason}")),
        },
        Some(DeliveryError::Permanent { reason }) => Next::Dead {
            attempts,
            why: klaxon_core::text::reason(reason),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays() {
        let s = Duration::from_secs;
        let schedule: Vec<Duration> = RETRY_SCHEDULE_S.iter().map(|x| s(*x)).collect();
        // (attempts, retry_after, jitter, want)
        let table = [
            (1, None, 1.0, s(1)),
            (2, None, 1.0, s(5)),
            (6, None, 1.0, s(3600)),
            (20, None, 1.0, s(3600)),
            (1, Some(s(3)), 1.0, s(3)),
            (2, Some(s(3)), 1.0, s(5)),
            (1, Some(Duration::from_millis(200)), 1.0, s(1)),
            (1, Some(s(99_999)), 1.0, s(3600)),
            (2, None, 0.8, s(4)),
            (2, None, 1.2, s(6)),
            // jitter never goes below Retry-After
            (1, Some(s(1)), 0.8, s(1)),
        ];
        for (attempts, retry_after, j, want) in table {
            assert_eq!(
                retry_delay(&schedule, attempts, retry_after, j),
                want,
                "{attempts} {retry_after:?} {j}"
            );
        }
        assert_eq!(retry_delay(&[], 1, None, 1.0), s(1));
        assert_eq!(not_before(None, 5), None);
        assert_eq!(not_before(Some(5), 5), None);
        assert_eq!(not_before(Some(4), 5), None);
        assert_eq!(not_before(Some(i64::MIN), i64::MAX), None);
        assert_eq!(not_before(Some(1_500), 1_000), Some(Duration::from_millis(500)));
        // beyond the delay engine's range: wait its longest step, then again
        assert_eq!(
            not_before(Some(i64::MAX), 0),
            Some(klaxon_broker::delay::MAX_DELAY)
        );
        for _ in 0..100 {
            let j = jitter();
            assert!((0.8..1.2).contains(&j));
        }
    }

    #[test]
    fn what_an_attempt_leads_to() {
        let s = Duration::from_secs;
        let schedule: Vec<Duration> = RETRY_SCHEDULE_S.iter().map(|x| s(*x)).collect();
        let transient = |retry_after| DeliveryError::Transient {
            reason: "HTTP 503 from hooks.test".into(),
            retry_after,
            rate_limited: false,
        };
        let permanent = DeliveryError::Permanent {
            reason: "HTTP 404 from hooks.test".into(),
        };
        let long = DeliveryError::Permanent {
            reason: "x".repeat(10_000),
        };
        let dead = |attempts, why: &str| Next::Dead {
            attempts,
            why: why.to_owned(),
        };
        // (error, attempts, max attempts, jitter, next)
        let table = [
            (None, 1, 5, 1.0, Next::Delivered { attempts: 1 }),
            (None, 5, 5, 1.0, Next::Delivered { attempts: 5 }),
            (
                Some(transient(None)),
                1,
                5,
                1.0,
                Next::Retry {
                    attempts: 1,
                    wait: s(1),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(Some(s(20)))),
                2,
                5,
                1.2,
                Next::Retry {
                    attempts: 2,
                    wait: s(20),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(None)),
                4,
                5,
                0.8,
                Next::Retry {
                    attempts: 4,
                    wait: s(96),
                    why: "HTTP 503 from hooks.test".into(),
                },
            ),
            (
                Some(transient(None)),
                5,
                5,
                1.0,
                dead(5, "gave up after 5 attempts: HTTP 503 from hooks.test"),
            ),
            (
                Some(transient(None)),
                1,
                1,
                1.0,
                dead(1, "gave up after 1 attempts: HTTP 503 from hooks.test"),
            ),
            (
                Some(permanent.clone()),
                1,
                5,
                1.0,
                dead(1, "HTTP 404 from hooks.test"),
            ),
            (Some(permanent), 5, 5, 1.0, dead(5, "HTTP 404 from hooks.test")),
            (
                Some(long.clone()),
                1,
                5,
                1.0,
                dead(1, &klaxon_core::text::reason(&"x".repeat(10_000))),
            ),
        ];
        for (error, attempts, max, j, want) in table {
            assert_eq!(
                after_attempt(error.as_ref(), attempts, max, &schedule, j),
                want,
                "{error:?} {attempts}/{max}"
            );
        }
        // reasons are bounded whatever the failure
        let Next::Dead { why, .. } = after_attempt(Some(&long), 1, 5, &schedule, 1.0) else {
            panic!("a permanent failure is dead-lettered");
        };
        assert!(why.len() <= klaxon_core::text::MAX_REASON_BYTES, "{}", why.len());
    }
}
