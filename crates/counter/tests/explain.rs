//! `explain` against the scripts it predicts. The verdict is the core's pure reading of the counter's state
//! (`klaxon_core::explain::counted`), a Rust copy of the decisions the Lua scripts make; this test holds the two
//! together. Each case drives a real script (real Redis, single node and cluster) through a sequence of hits;
//! before every hit it peeks the (rule, group) and asks the core what the hit would do, then counts the hit
//! and checks that the script did exactly that: `would_fire` when and only when it fires, the predicted count
//! its count, and nothing fires while `already_notified` or `cooling_down`. The expected verdicts are written
//! down too, so a change that moved both sides the same wrong way shows here as well.
//!
//! Cases run on injected time (window ends, cooldowns, a threshold changed under a running window) and on the
//! server's clock, where the fixed window takes its one-HINCRBY fast path for hits without event ids.

mod common;

use common::{on_both, Env};
use klaxon_core::explain::{counted, Verdict};
use klaxon_core::{Want, Window};
use klaxon_counter::{Hit, Outcome};

const T0: i64 = 1_700_000_000_000;
const PERIOD: u64 = 10_000;

/// One hit of a case: when (ms after `T0`; ignored on the server's clock), its user, the rule's threshold at
/// that moment, and the verdict explain must give just before it.
type Step = (i64, Option<&'static str>, u64, Verdict);

/// How a case reads the time.
#[derive(Clone, Copy, PartialEq)]
enum Clock {
    Injected,
    Server,
}

struct Case {
    name: &'static str,
    /// The rule's want, with the first step's threshold (each step may change it).
    want: Want,
    clock: Clock,
    steps: &'static [Step],
}

fn count(threshold: u64, window: Window) -> Want {
    Want::Count {
        threshold,
        period_ms: PERIOD,
        window,
    }
}

fn users(threshold: u64, window: Window) -> Want {
    Want::UniqueUsers {
        threshold,
        period_ms: PERIOD,
        window,
    }
}

fn with_threshold(want: Want, t: u64) -> Want {
    match want {
        Want::FirstSeen => Want::FirstSeen,
        Want::Count {
            period_ms, window, ..
        } => Want::Count {
            threshold: t,
            period_ms,
            window,
        },
        Want::UniqueUsers {
            period_ms, window, ..
        } => Want::UniqueUsers {
            threshold: t,
            period_ms,
            window,
        },
        other => other,
    }
}

use Verdict::{AlreadyNotified as Notified, CoolingDown as Cooling, Counting, WouldFire as Fires};

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "fixed: under, at, over the threshold; a new window after the end",
            want: count(3, Window::Fixed),
            clock: Clock::Injected,
            steps: &[
                (0, None, 3, Counting),
                (1, None, 3, Counting),
                (2, None, 3, Fires),
                (3, None, 3, Notified),
                (9_999, None, 3, Notified),
                (10_000, None, 3, Counting),
                (10_001, None, 3, Counting),
                (10_002, None, 3, Fires),
            ],
        },
        Case {
            name: "fixed: the threshold lowered under a running window, then raised to the next count",
            want: count(5, Window::Fixed),
            clock: Clock::Injected,
            steps: &[
                (0, None, 5, Counting),
                (1, None, 5, Counting),
                (2, None, 5, Counting),
                (3, None, 5, Counting),
                (4, None, 3, Counting),
                (5, None, 6, Fires),
                (6, None, 6, Notified),
                (7, None, 2, Notified),
            ],
        },
        Case {
            name: "sliding: fires, cools down for the period, fires again on what the trailing window holds",
            want: count(3, Window::Sliding),
            clock: Clock::Injected,
            steps: &[
                (0, None, 3, Counting),
                (1_000, None, 3, Counting),
                (2_000, None, 3, Fires),
                (3_000, None, 3, Cooling),
                (11_999, None, 3, Cooling),
                (12_000, None, 3, Fires),
                (12_001, None, 3, Cooling),
                (40_000, None, 3, Counting),
                (40_001, None, 3, Counting),
            ],
        },
        Case {
            name: "sliding: a lowered threshold fires on the next event",
            want: count(4, Window::Sliding),
            clock: Clock::Injected,
            steps: &[
                (0, None, 4, Counting),
                (1, None, 4, Counting),
                (2, None, 4, Counting),
                (3, None, 2, Fires),
                (4, None, 2, Cooling),
            ],
        },
        Case {
            name: "first seen: the first occurrence fires, repeats never",
            want: Want::FirstSeen,
            clock: Clock::Injected,
            steps: &[
                (0, None, 1, Fires),
                (1, None, 1, Notified),
                (86_400_000, None, 1, Notified),
            ],
        },
        Case {
            name: "unique users, fixed: a known user adds nothing; fired windows stay fired until they end",
            want: users(3, Window::Fixed),
            clock: Clock::Injected,
            steps: &[
                (0, Some("ann"), 3, Counting),
                (1, Some("ann"), 3, Counting),
                (2, Some("bob"), 3, Counting),
                (3, Some("ann"), 3, Counting),
                (4, Some("cid"), 3, Fires),
                (5, Some("dan"), 3, Notified),
                (6, Some("ann"), 3, Notified),
                (10_000, Some("ann"), 3, Counting),
                (10_001, Some("bob"), 2, Fires),
            ],
        },
        Case {
            name: "unique users, fixed: a known user fires once the threshold is lowered below the count",
            want: users(4, Window::Fixed),
            clock: Clock::Injected,
            steps: &[
                (0, Some("ann"), 4, Counting),
                (1, Some("bob"), 4, Counting),
                (2, Some("cid"), 4, Counting),
                (3, Some("ann"), 2, Fires),
                (4, Some("dan"), 2, Notified),
            ],
        },
        Case {
            name:
                "unique users, sliding: cooldown, then users still in the trailing window (a known one fires)",
            want: users(2, Window::Sliding),
            clock: Clock::Injected,
            steps: &[
                (0, Some("ann"), 2, Counting),
                (1, Some("ann"), 2, Counting),
                (2, Some("bob"), 2, Fires),
                (5_000, Some("ann"), 2, Cooling),
                (6_000, Some("bob"), 2, Cooling),
                (10_002, Some("ann"), 2, Fires),
                (10_003, Some("cid"), 2, Cooling),
                (40_000, Some("cid"), 2, Counting),
                (40_001, Some("cid"), 2, Counting),
                (40_002, Some("dan"), 2, Fires),
            ],
        },
        Case {
            name: "fixed on the server's clock (the one-HINCRBY path)",
            want: Want::Count {
                threshold: 3,
                period_ms: 60_000,
                window: Window::Fixed,
            },
            clock: Clock::Server,
            steps: &[
                (0, None, 3, Counting),
                (0, None, 3, Counting),
                (0, None, 3, Fires),
                (0, None, 3, Notified),
                (0, None, 2, Notified),
            ],
        },
        Case {
            name: "sliding on the server's clock",
            want: Want::Count {
                threshold: 2,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            clock: Clock::Server,
            steps: &[(0, None, 2, Counting), (0, None, 2, Fires), (0, None, 2, Cooling)],
        },
        Case {
            name: "first seen on the server's clock",
            want: Want::FirstSeen,
            clock: Clock::Server,
            steps: &[(0, None, 1, Fires), (0, None, 1, Notified)],
        },
        Case {
            name: "unique users, fixed, on the server's clock",
            want: Want::UniqueUsers {
                threshold: 2,
                period_ms: 60_000,
                window: Window::Fixed,
            },
            clock: Clock::Server,
            steps: &[
                (0, Some("ann"), 2, Counting),
                (0, Some("ann"), 2, Counting),
                (0, Some("bob"), 2, Fires),
                (0, Some("cid"), 2, Notified),
            ],
        },
    ]
}

/// The count the script answered, and whether the hit fired.
fn script_said(outcome: &Outcome) -> (u64, bool) {
    match outcome {
        Outcome::Counted { count } => (*count, false),
        Outcome::Fired { count, .. } => (*count, true),
    }
}

async fn run(env: Env) {
    let t = env.topology;
    for (c, case) in cases().iter().enumerate() {
        let rule = format!("rule-{c}");
        for (i, &(at, user, threshold, expected)) in case.steps.iter().enumerate() {
            let at = (case.clock == Clock::Injected).then_some(T0 + at);
            let want = with_threshold(case.want, threshold);
            let mut hit = Hit::new(rule.as_str(), "group", want).with_project("p");
            if let Some(u) = user {
                hit = hit.with_user(u);
            }
            let peeks = env.counter.peek(std::slice::from_ref(&hit), at).await;
            let peek = match peeks.as_deref() {
                Ok([p]) => p.clone(),
                other => panic!("[{t}] {}: step {i}: peek gave {other:?}", case.name),
            };
            let verdict = counted(&rule, want, &peek);
            let outcome = match env.counter.hit(&hit, at).await {
                Ok(o) => o,
                Err(e) => panic!("[{t}] {}: step {i}: hit failed: {e}", case.name),
            };
            let (script_count, fired) = script_said(&outcome);
            let place = format!(
                "[{t}] {}: step {i} (+{} ms, user {user:?}, threshold {threshold}): explain said {verdict:?} \
                 on {peek:?}, the script {outcome:?}",
                case.name,
                at.map_or(0, |a| a - T0)
            );
            assert_eq!(verdict.verdict, expected, "{place}");
            assert_eq!(
                verdict.verdict == Verdict::WouldFire,
                fired,
                "would_fire exactly when the script fires: {place}"
            );
            if want == Want::FirstSeen {
                // ONLY_NEW counts nothing: no count to predict.
                assert_eq!((verdict.count, verdict.threshold), (None, None), "{place}");
            } else {
                // one meaning in every verdict: the count with this event counted, as the script answers
                assert_eq!(verdict.count, Some(script_count), "the predicted count: {place}");
                assert_eq!(verdict.threshold, Some(threshold), "{place}");
            }
        }
    }
}

#[tokio::test]
async fn explain_predicts_what_the_scripts_do() {
    on_both(run).await;
}

/// One hit of a SPIKE or REAPPEARED case: when (ms after `T0`), the event's `isNew`, and explain's verdict before it.
type SignalStep = (i64, bool, Verdict);

fn signal_cases() -> Vec<(&'static str, Want, Vec<SignalStep>)> {
    let spike = Want::Spike(klaxon_core::Spike {
        period_ms: PERIOD,
        baseline_windows: 2,
        factor_milli: 2000,
        threshold: 3,
    });
    let reappeared = |armed_at_ms| Want::Reappeared {
        quiet_period_ms: 5_000,
        armed_at_ms,
        is_new: false,
    };
    let p = PERIOD as i64;
    let mut spike_steps: Vec<SignalStep> = vec![];
    // the first bucket: 4 events, never fires
    spike_steps.extend((0..4).map(|i| (i, false, Counting)));
    // bucket 1: baseline 4 → needs 8
    spike_steps.extend((0..7).map(|i| (p + i, false, Counting)));
    spike_steps.push((p + 7, false, Fires));
    spike_steps.push((p + 8, false, Notified));
    spike_steps.push((2 * p - 1, false, Notified));
    // bucket 3 after an empty bucket 2: baseline (10 + 0) / 2 = 5 → needs 10
    spike_steps.extend((0..9).map(|i| (3 * p + i, false, Counting)));
    spike_steps.push((3 * p + 9, false, Fires));
    // bucket 6: an empty baseline → the threshold (3)
    spike_steps.extend([
        (6 * p, false, Counting),
        (6 * p + 1, false, Counting),
        (6 * p + 2, false, Fires),
    ]);
    vec![
        (
            "spike: a first bucket, a spike, once per bucket, empty buckets",
            spike,
            spike_steps,
        ),
        (
            "reappeared: a mark, quiet not yet, quiet exactly met, once",
            reappeared(T0),
            vec![
                (0, true, Counting),
                (4_999, false, Counting),
                (9_998, false, Counting),
                (14_998, false, Fires),
                (14_999, false, Counting),
            ],
        ),
        (
            "reappeared: no mark, a rule that has watched long enough, a new group does not fire",
            reappeared(T0 - 5_000),
            vec![(0, true, Counting), (100_000, false, Fires)],
        ),
        (
            "reappeared: no mark and a rule watching for less than the quiet",
            reappeared(T0 - 4_999),
            vec![(0, false, Counting), (5_000, false, Fires)],
        ),
    ]
}

async fn run_signals(env: Env) {
    let t = env.topology;
    for (c, (name, want, steps)) in signal_cases().into_iter().enumerate() {
        let rule = format!("signal-{c}");
        for (i, &(at, is_new, expected)) in steps.iter().enumerate() {
            let want = match want {
                Want::Reappeared {
                    quiet_period_ms,
                    armed_at_ms,
                    ..
                } => Want::Reappeared {
                    quiet_period_ms,
                    armed_at_ms,
                    is_new,
                },
                w => w,
            };
            let now = Some(T0 + at);
            let hit = Hit::new(rule.as_str(), "group", want)
                .with_project("p")
                .with_new(is_new);
            let peek = match env.counter.peek(std::slice::from_ref(&hit), now).await.as_deref() {
                Ok([p]) => p.clone(),
                other => panic!("[{t}] {name}: step {i}: peek gave {other:?}"),
            };
            let verdict = counted(&rule, want, &peek);
            let outcome = env.counter.hit(&hit, now).await.expect("hit");
            let place =
                format!("[{t}] {name}: step {i} (+{at} ms): explain said {verdict:?} on {peek:?}, the script {outcome:?}");
            assert_eq!(verdict.verdict, expected, "{place}");
            assert_eq!(
                verdict.verdict == Verdict::WouldFire,
                outcome.is_fired(),
                "{place}"
            );
            if let Want::Spike(_) = want {
                // one meaning in every verdict: the bucket's count with this event counted
                assert_eq!(
                    verdict.count,
                    Some(outcome.count()),
                    "the predicted count: {place}"
                );
            }
        }
    }
}

#[tokio::test]
async fn explain_predicts_what_spike_and_reappeared_do() {
    on_both(run_signals).await;
}
