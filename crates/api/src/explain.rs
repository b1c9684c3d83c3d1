//! `explain`: for one hypothetical event, what each rule of the project would do with it and why. The rule's
//! decision is [`klaxon_core::CompiledRule::decide`], the function the worker evaluates with; the counting
//! state comes from [`WindowCounter::peek`], which reads and never counts.

use klaxon_core::notification::rfc3339_ms;
use klaxon_core::{parse_rule_value_with, Event, Limits, RuleDefaults, Skip, Title, Want, Window};
use klaxon_counter::{CounterError, Hit, HitSpec, Peek, WindowCounter};
use serde_json::{json, Map, Value};

/// One rule's verdict, as the API and `klaxon explain` print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The rule id (`?` when it cannot be read).
    pub rule_id: String,
    /// `disabled`, `filtered`, `invalid`, `counting`, `would_fire`, `cooling_down`, `already_notified` or
    /// `muted`.
    pub verdict: &'static str,
    /// Why, in words.
    pub reason: String,
    /// Events (or distinct users) in the window including this one, when the rule counts.
    pub count: Option<u64>,
    /// The rule's threshold, when it counts.
    pub threshold: Option<u64>,
    /// When the window (or cooldown, or ONLY_NEW mark's firing) ends, unix ms.
    pub window_ends_at: Option<i64>,
}

impl Verdict {
    fn new(rule_id: &str, verdict: &'static str, reason: impl Into<String>) -> Self {
        Verdict {
            rule_id: rule_id.to_owned(),
            verdict,
            reason: reason.into(),
            count: None,
            threshold: None,
            window_ends_at: None,
        }
    }

    /// The API's JSON form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("ruleId".into(), json!(self.rule_id));
        m.insert("verdict".into(), json!(self.verdict));
        m.insert("reason".into(), json!(self.reason));
        if let Some(c) = self.count {
            m.insert("count".into(), json!(c));
        }
        if let Some(t) = self.threshold {
            m.insert("threshold".into(), json!(t));
        }
        if let Some(w) = self.window_ends_at {
            m.insert("windowEndsAt".into(), json!(rfc3339_ms(w)));
        }
        Value::Object(m)
    }
}

/// The verdict of a rule that does not count the event.
pub fn skipped(rule_id: &str, skip: Skip, rule: &klaxon_core::CompiledRule) -> Verdict {
    match skip {
        Skip::Disabled => Verdict::new(rule_id, "disabled", "the rule is disabled (isEnabled: false)"),
        Skip::NoChannels => Verdict::new(
            rule_id,
            "disabled",
            "no enabled channel with an endpoint: nothing could be sent",
        ),
        Skip::NotNew => Verdict::new(
            rule_id,
            "filtered",
            "an ONLY_NEW rule and the event is not a first occurrence (isNew: false)",
        ),
        Skip::NoUser => Verdict::new(
            rule_id,
            "filtered",
            "a uniqueUsers rule and the event has no user: it is not counted",
        ),
        Skip::Filtered(miss) => Verdict::new(rule_id, "filtered", rule.filter.describe(miss)),
    }
}

/// The verdict of a rule that counts the event, from the state the counter holds (pure: the same inputs give
/// the same answer; `peek.now_ms` is the clock).
pub fn counted(rule_id: &str, want: Want, peek: &Peek) -> Verdict {
    let now = peek.now_ms;
    let at = |ms: i64| rfc3339_ms(ms);
    let (threshold, period, window, users) = match want {
        Want::FirstSeen => {
            return match peek.fired_at {
                Some(t) => Verdict::new(
                    rule_id,
                    "already_notified",
                    format!("ONLY_NEW: this group was already notified at {}", at(t)),
                ),
                None => Verdict::new(
                    rule_id,
                    "would_fire",
                    "ONLY_NEW: the first occurrence of this group fires",
                ),
            };
        }
        Want::Count {
            threshold,
            period_ms,
            window,
        } => (threshold, period_ms as i64, window, false),
        Want::UniqueUsers {
            threshold,
            period_ms,
            window,
        } => (threshold, period_ms as i64, window, true),
    };
    let what = if users { "distinct users" } else { "events" };
    let with = |mut v: Verdict, count: u64, ends: Option<i64>| {
        v.count = Some(count);
        v.threshold = Some(threshold);
        v.window_ends_at = ends;
        v
    };
    match window {
        Window::Fixed => {
            let ends = peek.window_start.map(|s| s + period).unwrap_or(now + period);
            if let Some(f) = peek.fired_at {
                return with(
                    Verdict::new(
                        rule_id,
                        "already_notified",
                        format!(
                            "this window fired at {}; a new one starts after {}",
                            at(f),
                            at(ends)
                        ),
                    ),
                    peek.count,
                    Some(ends),
                );
            }
            let next = if users && peek.user_known {
                peek.count
            } else {
                peek.count + 1
            };
            // Fixed windows fire on the event that makes the count EQUAL the threshold (users: reach it).
            let fires = if users {
                next >= threshold
            } else {
                next == threshold
            };
            let so_far = so_far(peek.count, threshold, what, "in this window");
            if fires {
                with(
                    Verdict::new(
                        rule_id,
                        "would_fire",
                        format!("{so_far}; {} and fire", this_one(users, peek.user_known, next)),
                    ),
                    next,
                    Some(ends),
                )
            } else if !users && next > threshold {
                with(
                    Verdict::new(
                        rule_id,
                        "counting",
                        format!("{so_far}, past the threshold without firing (it was lowered): {}; the window cannot fire before it ends", this_one(users, peek.user_known, next)),
                    ),
                    next,
                    Some(ends),
                )
            } else {
                with(
                    Verdict::new(
                        rule_id,
                        "counting",
                        format!("{so_far}; {}", this_one(users, peek.user_known, next)),
                    ),
                    next,
                    Some(ends),
                )
            }
        }
        Window::Sliding => {
            if let Some(f) = peek.fired_at {
                return with(
                    Verdict::new(
                        rule_id,
                        "cooling_down",
                        format!("fired at {}; quiet until {}", at(f), at(f + period)),
                    ),
                    peek.count,
                    Some(f + period),
                );
            }
            let next = if users && peek.user_known {
                peek.count
            } else {
                peek.count + 1
            }
            .min(threshold);
            let so_far = so_far(peek.count, threshold, what, "in the trailing window");
            if next >= threshold {
                with(
                    Verdict::new(
                        rule_id,
                        "would_fire",
                        format!("{so_far}; {} and fire", this_one(users, peek.user_known, next)),
                    ),
                    next,
                    None,
                )
            } else {
                with(
                    Verdict::new(
                        rule_id,
                        "counting",
                        format!("{so_far}; {}", this_one(users, peek.user_known, next)),
                    ),
                    next,
                    None,
                )
            }
        }
    }
}

/// What the counter holds now, in words: explain has counted nothing, so the count is "so far".
fn so_far(count: u64, threshold: u64, what: &str, window: &str) -> String {
    format!("{count} of {threshold} {what} counted {window} so far")
}

/// Where this (hypothetical) event would stand: "#n", or, for a user already counted, that it adds nothing.
fn this_one(users: bool, user_known: bool, next: u64) -> String {
    match (users, user_known) {
        (true, true) => format!("this event's user is already counted, so it would stay at {next}"),
        (true, false) => format!("this event's user would be #{next}"),
        (false, _) => format!("this event would be #{next}"),
    }
}

/// Explains every stored rule of a project for `event` (`notifications` in their JSON form), read under
/// `limits` and compiled with `defaults` as the worker reads them: the rules past [`Limits::max_rules`] are
/// `invalid` (not evaluated). Reads Redis, never writes. A rule that counts the event while one of `mutes`
/// matches it is `muted` (counted, not delivered).
pub async fn explain(
    counter: &WindowCounter,
    project_id: &str,
    notifications: &[Value],
    defaults: &RuleDefaults,
    mutes: &[klaxon_core::mute::Mute],
    event: &Event,
    limits: &Limits,
) -> Result<Vec<Verdict>, CounterError> {
    let title = Title::new(&event.title);
    let mut out: Vec<Option<Verdict>> = Vec::with_capacity(notifications.len());
    let mut pending: Vec<(usize, String, Want, Hit)> = Vec::new();
    let (read, past_limit) = notifications.split_at(notifications.len().min(limits.max_rules));
    let past_limit: Vec<Verdict> = past_limit
        .iter()
        .map(|n| {
            let id = klaxon_core::RawRule::from_value(n)
                .ok()
                .and_then(|r| r.id().map(str::to_owned))
                .unwrap_or_else(|| "?".into());
            let reason = format!(
                "not evaluated: the project has {} rules, over the limit of {}, and only the first {} are \
                 evaluated (fix: remove rules, or raise --max-rules-per-project)",
                notifications.len(),
                limits.max_rules,
                limits.max_rules
            );
            Verdict::new(&id, "invalid", reason)
        })
        .collect();
    for n in read {
        match parse_rule_value_with(n, limits, defaults) {
            Err(p) => {
                let id = p.rule_id.clone().unwrap_or_else(|| "?".into());
                out.push(Some(Verdict::new(
                    &id,
                    "invalid",
                    format!("{} (fix: {})", p.message, p.fix),
                )));
            }
            Ok((rule, _)) => match rule.decide(event, &title) {
                Err(skip) => out.push(Some(skipped(&rule.id, skip, &rule))),
                Ok(want) => {
                    let mut hit = Hit::new(rule.id.as_str(), event.group_hash.as_str(), HitSpec::from(want))
                        .with_project(project_id);
                    if let (Want::UniqueUsers { .. }, Some(u)) = (want, &event.user) {
                        hit = hit.with_user(u.as_str());
                    }
                    pending.push((out.len(), rule.id.clone(), want, hit));
                    out.push(None);
                }
            },
        }
    }
    if !pending.is_empty() {
        let hits: Vec<Hit> = pending.iter().map(|p| p.3.clone()).collect();
        let peeks = counter.peek(&hits).await?;
        for ((i, id, want, _), peek) in pending.into_iter().zip(peeks) {
            let mut v = counted(&id, want, &peek);
            if let Some(m) = mutes
                .iter()
                .find(|m| m.matches(&id, &event.group_hash, peek.now_ms))
            {
                v.reason = format!(
                    "muted until {} (mute {}): counted, not delivered; without it: {} — {}",
                    rfc3339_ms(m.until_ms),
                    m.mute_id,
                    v.verdict,
                    v.reason
                );
                v.verdict = "muted";
            }
            out[i] = Some(v);
        }
    }
    Ok(out.into_iter().flatten().chain(past_limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(count: u64, fired_at: Option<i64>, start: Option<i64>) -> Peek {
        Peek {
            now_ms: 10_000,
            fired_at,
            count,
            window_start: start,
            user_known: false,
        }
    }

    #[test]
    fn verdicts_from_counter_state() {
        let fixed = Want::Count {
            threshold: 3,
            period_ms: 60_000,
            window: Window::Fixed,
        };
        let sliding = Want::Count {
            threshold: 3,
            period_ms: 60_000,
            window: Window::Sliding,
        };
        let cases = [
            (Want::FirstSeen, peek(0, None, None), "would_fire"),
            (Want::FirstSeen, peek(0, Some(5), None), "already_notified"),
            (fixed, peek(0, None, None), "counting"),
            (fixed, peek(1, None, Some(9_000)), "counting"),
            (fixed, peek(2, None, Some(9_000)), "would_fire"),
            (fixed, peek(3, Some(9_500), Some(9_000)), "already_notified"),
            (fixed, peek(5, None, Some(9_000)), "counting"),
            (sliding, peek(2, None, None), "would_fire"),
            (sliding, peek(1, None, None), "counting"),
            (sliding, peek(3, Some(9_000), None), "cooling_down"),
        ];
        for (i, (want, p, expected)) in cases.iter().enumerate() {
            let v = counted("r", *want, p);
            assert_eq!(v.verdict, *expected, "case {i}: {v:?}");
        }
        let v = counted("r", fixed, &peek(1, None, Some(9_000)));
        assert_eq!(
            (v.count, v.threshold, v.window_ends_at),
            (Some(2), Some(3), Some(69_000))
        );
    }

    /// Explain counts nothing: the reason says what is counted so far and where this event would stand, never
    /// "2 of 3" as if this event had been counted.
    #[test]
    fn reasons_say_what_is_counted_and_where_this_event_would_stand() {
        let want = |threshold, window, users| {
            if users {
                Want::UniqueUsers {
                    threshold,
                    period_ms: 60_000,
                    window,
                }
            } else {
                Want::Count {
                    threshold,
                    period_ms: 60_000,
                    window,
                }
            }
        };
        let known = Peek {
            user_known: true,
            ..peek(2, None, Some(9_000))
        };
        let cases = [
            (
                want(3, Window::Fixed, false),
                peek(1, None, Some(9_000)),
                "1 of 3 events counted in this window so far; this event would be #2",
            ),
            (
                want(3, Window::Fixed, false),
                peek(2, None, Some(9_000)),
                "2 of 3 events counted in this window so far; this event would be #3 and fire",
            ),
            (
                want(3, Window::Fixed, false),
                peek(5, None, Some(9_000)),
                "5 of 3 events counted in this window so far, past the threshold without firing (it was lowered): this event would be #6; the window cannot fire before it ends",
            ),
            (
                want(3, Window::Sliding, false),
                peek(0, None, None),
                "0 of 3 events counted in the trailing window so far; this event would be #1",
            ),
            (
                want(3, Window::Sliding, false),
                peek(2, None, None),
                "2 of 3 events counted in the trailing window so far; this event would be #3 and fire",
            ),
            (
                want(3, Window::Fixed, true),
                peek(1, None, Some(9_000)),
                "1 of 3 distinct users counted in this window so far; this event's user would be #2",
            ),
            (
                want(3, Window::Fixed, true),
                known,
                "2 of 3 distinct users counted in this window so far; this event's user is already counted, so it would stay at 2",
            ),
        ];
        for (want, p, reason) in cases {
            assert_eq!(counted("r", want, &p).reason, reason);
        }
    }
}
