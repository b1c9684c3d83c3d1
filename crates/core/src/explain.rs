//! `explain`: for one hypothetical event, what each rule of a project would do with it and why. Pure: the
//! counter's state comes in as [`Peek`]s (read by `klaxon_counter`'s `WindowCounter::peek`, which never
//! counts), the clock is the peek's.
//!
//! ```text
//!  notifications ──Explanation::new(limits, defaults, event)──▶ rules that do not count: a verdict now
//!                        │                                       (disabled, filtered, invalid)
//!                        └─ counting(): (rule, Want) ──▶ the counter peeks each (rule, group) ──▶ [Peek]
//!  Explanation::finish(peeks, mutes) ──▶ [RuleVerdict]: counting, would_fire, cooling_down, already_notified, muted
//! ```
//!
//! Whether a rule counts the event is [`CompiledRule::decide`], the function the worker evaluates with. What
//! the next hit would make of the counter's state ([`counted`]) is a Rust reading of the Lua scripts'
//! decisions (`lua/fixed_window.lua`, `sliding_window.lua`, `first_seen.lua`, `unique_users.lua`); the two are
//! held together by `crates/counter/tests/explain.rs`, which drives the real scripts through sequences of hits
//! and checks, before every hit, that [`counted`] predicts exactly what the script answers.

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::filter::Title;
use crate::mute::Mute;
use crate::notification::rfc3339_ms;
use crate::oncall::{OnCallRule, OnCallStatus};
use crate::rule::{parse_rule_value_with, CompiledRule, RawRule, RuleDefaults, Skip, Want, Window};
use crate::{Event, Limits};

/// What a rule would do with the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The rule is off, or has no channel that could send.
    Disabled,
    /// The rule does not count this event (title filters, not a first occurrence, no user).
    Filtered,
    /// The rule cannot be used (a problem `klaxon rules check` reports), or lies past the project's rule limit.
    Invalid,
    /// The event would be counted without firing.
    Counting,
    /// The event would fire the rule.
    WouldFire,
    /// A sliding window fired recently: nothing fires until its period has passed.
    CoolingDown,
    /// The window (or, ONLY_NEW, the group) already fired.
    AlreadyNotified,
    /// The rule counts the event but a mute matches: counted, not delivered.
    Muted,
}

impl Verdict {
    /// The name the API, the console and `klaxon explain` print.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Disabled => "disabled",
            Verdict::Filtered => "filtered",
            Verdict::Invalid => "invalid",
            Verdict::Counting => "counting",
            Verdict::WouldFire => "would_fire",
            Verdict::CoolingDown => "cooling_down",
            Verdict::AlreadyNotified => "already_notified",
            Verdict::Muted => "muted",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule's verdict; serialized as the API's `{"ruleId", "verdict", "reason", "count"?, "threshold"?,
/// "windowEndsAt"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleVerdict {
    /// The rule id (`?` when it cannot be read).
    pub rule_id: String,
    /// What the rule would do.
    pub verdict: Verdict,
    /// Why, in words.
    pub reason: String,
    /// Events (or distinct users) in the window (bucket) with this event counted, when the rule counts: the
    /// same meaning in every verdict, so "3" after two counted events, also once the window has fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The rule's threshold, when it counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<u64>,
    /// When the window (or cooldown) ends, unix ms; RFC 3339 in JSON.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rfc3339")]
    pub window_ends_at: Option<i64>,
    /// The rule's on-call fields, when it sets any (not serialized: with the (rule, group)'s open alert they
    /// make [`RuleVerdict::on_call`], the API's `"onCall"`).
    #[serde(skip)]
    pub on_call_rule: Option<OnCallRule>,
    /// When the verdict was read, unix ms (the Redis clock; [`Explanation::finish_at`]).
    #[serde(skip)]
    pub at_ms: Option<i64>,
}

fn rfc3339<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&rfc3339_ms(*ms)),
        None => s.serialize_none(),
    }
}

impl RuleVerdict {
    pub(crate) fn new(rule_id: &str, verdict: Verdict, reason: impl Into<String>) -> Self {
        RuleVerdict {
            rule_id: rule_id.to_owned(),
            verdict,
            reason: reason.into(),
            count: None,
            threshold: None,
            window_ends_at: None,
            on_call_rule: None,
            at_ms: None,
        }
    }

    /// Where the rule's on-call fields stand for its open `alert` of the event's group (`None`: none open) at
    /// the verdict's time: reminders left, the next escalation step, quiet hours ([`OnCallRule::status`]).
    /// `None` when the rule sets no on-call field or the verdict has no time.
    pub fn on_call(&self, alert: Option<&crate::alert::Alert>) -> Option<OnCallStatus> {
        let rule = self.on_call_rule.as_ref()?;
        Some(rule.status(alert, self.at_ms?)).filter(|s| !s.is_empty())
    }

    /// The JSON form (the API's, `klaxon explain --output json`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// This verdict under a matching mute: `muted`, the reason saying what it would be without the mute.
    pub fn muted_by(mut self, mute: &Mute) -> Self {
        self.reason = format!(
            "muted until {} (mute {}): counted, not delivered; without it: {} — {}",
            rfc3339_ms(mute.until_ms),
            mute.mute_id,
            self.verdict,
            self.reason
        );
        self.verdict = Verdict::Muted;
        self
    }
}

/// The state the counting scripts hold for one (rule, group), read at `now_ms` (the Redis clock) without
/// counting. The key layout each field comes from is documented in each `lua/*.lua`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peek {
    /// The Redis clock when read (ms).
    pub now_ms: i64,
    /// When the current window fired, the running cooldown started, or (ONLY_NEW) the group was notified.
    pub fired_at: Option<i64>,
    /// Events (or distinct users) counted in the current window; sliding: in the trailing period.
    pub count: u64,
    /// Fixed windows: when the current window started (`None`: no window running).
    pub window_start: Option<i64>,
    /// Unique-users rules: the asked user is already among the counted ones.
    pub user_known: bool,
    /// SPIKE: the sum of the counts of the baseline's buckets (the previous ones, at most `baselineWindows`,
    /// none before the group's first bucket).
    pub baseline_sum: u64,
    /// SPIKE: how many buckets the baseline has (0 in the group's first bucket).
    pub baseline_buckets: u64,
    /// REAPPEARED: when the group was last seen by the rule (`None`: no mark, never seen or expired).
    pub last_seen: Option<i64>,
}

/// The verdict of a rule that does not count the event.
pub fn skipped(rule_id: &str, skip: Skip, rule: &CompiledRule) -> RuleVerdict {
    let (verdict, reason) = match skip {
        Skip::Disabled => (
            Verdict::Disabled,
            "the rule is disabled (isEnabled: false)".into(),
        ),
        Skip::NoChannels => (
            Verdict::Disabled,
            "no enabled channel with an endpoint: nothing could be sent".into(),
        ),
        Skip::NotNew => (
            Verdict::Filtered,
            "an ONLY_NEW rule and the event is not a first occurrence (isNew: false)".into(),
        ),
        Skip::NoUser => (
            Verdict::Filtered,
            "a uniqueUsers rule and the event has no user: it is not counted".into(),
        ),
        Skip::Filtered(miss) => (Verdict::Filtered, rule.filter.describe(miss)),
        // The event is not counted per group, but it is not ignored either: it restarts the project's silence.
        Skip::ProjectWide => (
            Verdict::Counting,
            match rule.what {
                crate::WhatToReceive::NoEvents { quiet_period_ms } => {
                    crate::kind::no_events::explain_reason(quiet_period_ms)
                }
                _ => "the rule watches the project, not groups: any event of the project restarts it".into(),
            },
        ),
    };
    RuleVerdict::new(rule_id, verdict, reason)
}

/// The verdict of a rule that counts the event, from the state the counter holds: what the script would
/// answer the next hit (pure: the same inputs give the same answer; `peek.now_ms` is the clock).
pub fn counted(rule_id: &str, want: Want, peek: &Peek) -> RuleVerdict {
    let at = rfc3339_ms;
    let (threshold, period, window, users) = match want {
        Want::FirstSeen => return crate::kind::only_new::verdict(rule_id, peek),
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
        Want::Spike(spike) => return crate::kind::spike::verdict(rule_id, spike, peek),
        Want::Reappeared {
            quiet_period_ms,
            armed_at_ms,
            is_new,
        } => return crate::kind::reappeared::verdict(rule_id, quiet_period_ms, armed_at_ms, is_new, peek),
    };
    let counts = |verdict, reason: String, count, ends| RuleVerdict {
        count: Some(count),
        threshold: Some(threshold),
        window_ends_at: ends,
        ..RuleVerdict::new(rule_id, verdict, reason)
    };
    let what = if users { "distinct users" } else { "events" };
    // A user already counted adds nothing; anything else is one more.
    let next = if users && peek.user_known {
        peek.count
    } else {
        peek.count + 1
    };
    match window {
        Window::Fixed => {
            let ends = peek
                .window_start
                .map(|s| s + period)
                .unwrap_or(peek.now_ms + period);
            if let Some(f) = peek.fired_at {
                let reason = format!(
                    "this window fired at {}; a new one starts after {}",
                    at(f),
                    at(ends)
                );
                // a fired window goes on counting events; a users window dropped its users and counts no more
                let with_this = if users { peek.count } else { next };
                return counts(Verdict::AlreadyNotified, reason, with_this, Some(ends));
            }
            // Fixed windows fire on the event that makes the count EQUAL the threshold (users: reach it).
            let fires = if users {
                next >= threshold
            } else {
                next == threshold
            };
            let so_far = so_far(peek.count, threshold, what, "in this window");
            let this = this_one(users, peek.user_known, next);
            let (verdict, reason) = if fires {
                (Verdict::WouldFire, format!("{so_far}; {this} and fire"))
            } else if !users && next > threshold {
                let reason = format!(
                    "{so_far}, past the threshold without firing (it was lowered): {this}; the window cannot \
                     fire before it ends"
                );
                (Verdict::Counting, reason)
            } else {
                (Verdict::Counting, format!("{so_far}; {this}"))
            };
            counts(verdict, reason, next, Some(ends))
        }
        Window::Sliding => {
            if let Some(f) = peek.fired_at {
                let reason = format!("fired at {}; quiet until {}", at(f), at(f + period));
                return counts(
                    Verdict::CoolingDown,
                    reason,
                    next.min(threshold),
                    Some(f + period),
                );
            }
            // The scripts keep the newest `threshold` members, so the count saturates there.
            let next = next.min(threshold);
            let so_far = so_far(peek.count, threshold, what, "in the trailing window");
            let this = this_one(users, peek.user_known, next);
            if next >= threshold {
                counts(
                    Verdict::WouldFire,
                    format!("{so_far}; {this} and fire"),
                    next,
                    None,
                )
            } else {
                counts(Verdict::Counting, format!("{so_far}; {this}"), next, None)
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

/// One rule's place in an [`Explanation`].
#[derive(Debug, Clone)]
enum Slot {
    /// Decided without the counter.
    Decided(RuleVerdict),
    /// Counts the event: decided from the counter's state.
    Counts {
        rule_id: String,
        want: Want,
        on_call_rule: Option<OnCallRule>,
    },
}

/// The explanation of one event against a project's stored rules, before and after the counter's state is
/// read: [`Explanation::new`] decides what needs no counter, [`Explanation::counting`] says which
/// (rule, [`Want`]) to peek, [`Explanation::finish`] gives the verdicts in the rules' order.
#[derive(Debug, Clone)]
pub struct Explanation {
    group_hash: String,
    user: Option<String>,
    slots: Vec<Slot>,
    /// The enabled NO_EVENTS rules with a channel, with their `quietPeriod`: [`Explanation::silences`].
    silences: Vec<(String, u64)>,
}

impl Explanation {
    /// Reads every stored rule of a project (`notifications` in their JSON form) under `limits` and with
    /// `defaults`, as the worker reads them: the rules past [`Limits::max_rules`] are `invalid` (not
    /// evaluated), a rule that cannot be used is `invalid`, one that does not count the event says why.
    pub fn new(notifications: &[Value], limits: &Limits, defaults: &RuleDefaults, event: &Event) -> Self {
        let title = Title::new(&event.title);
        let (read, past_limit) = notifications.split_at(notifications.len().min(limits.max_rules));
        let mut silences = Vec::new();
        let mut slots: Vec<Slot> = read
            .iter()
            .map(|n| match parse_rule_value_with(n, limits, defaults) {
                Err(p) => Slot::Decided(RuleVerdict::new(
                    p.rule_id.as_deref().unwrap_or("?"),
                    Verdict::Invalid,
                    format!("{} (fix: {})", p.message, p.fix),
                )),
                Ok((rule, _)) => {
                    if let Some(quiet) = crate::silence::watched(&rule) {
                        silences.push((rule.id.clone(), quiet));
                    }
                    match rule.decide(event, &title) {
                        Err(skip) => Slot::Decided(RuleVerdict {
                            on_call_rule: OnCallRule::of(&rule),
                            ..skipped(&rule.id, skip, &rule)
                        }),
                        Ok(want) => Slot::Counts {
                            rule_id: rule.id.clone(),
                            want,
                            on_call_rule: OnCallRule::of(&rule),
                        },
                    }
                }
            })
            .collect();
        slots.extend(past_limit.iter().map(|n| {
            let id = RawRule::from_value(n)
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
            Slot::Decided(RuleVerdict::new(&id, Verdict::Invalid, reason))
        }));
        Explanation {
            group_hash: event.group_hash.clone(),
            user: event.user.clone(),
            slots,
            silences,
        }
    }

    /// The watched NO_EVENTS rules (enabled, with a channel) and their `quietPeriod`: when there is one, the
    /// project's last event ([`with_last_event`]) is worth reading.
    pub fn silences(&self) -> &[(String, u64)] {
        &self.silences
    }

    /// The event's group.
    pub fn group_hash(&self) -> &str {
        &self.group_hash
    }

    /// The event's user, when it has one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The rules that count the event, in order, with what they count: the (rule, group)s whose counter
    /// state [`Explanation::finish`] needs.
    pub fn counting(&self) -> impl Iterator<Item = (&str, Want)> + '_ {
        self.slots.iter().filter_map(|s| match s {
            Slot::Counts { rule_id, want, .. } => Some((rule_id.as_str(), *want)),
            Slot::Decided(_) => None,
        })
    }

    /// Every rule's verdict, in the rules' order, given the counter's state for each of
    /// [`Explanation::counting`] (in that order). A rule that counts the event while one of `mutes` matches
    /// it is `muted` (counted, not delivered).
    pub fn finish(self, peeks: &[Peek], mutes: &[Mute]) -> Vec<RuleVerdict> {
        let now_ms = peeks.first().map(|p| p.now_ms);
        self.finish_inner(peeks, mutes, now_ms)
    }

    /// [`Explanation::finish`], the verdicts read at `now_ms` (the clock of the peeks): each verdict carries
    /// it, for where its rule's on-call fields stand then ([`RuleVerdict::on_call`]).
    pub fn finish_at(self, peeks: &[Peek], mutes: &[Mute], now_ms: i64) -> Vec<RuleVerdict> {
        self.finish_inner(peeks, mutes, Some(now_ms))
    }

    fn finish_inner(self, peeks: &[Peek], mutes: &[Mute], now_ms: Option<i64>) -> Vec<RuleVerdict> {
        let mut peeks = peeks.iter();
        let group = self.group_hash;
        self.slots
            .into_iter()
            .filter_map(|slot| match slot {
                Slot::Decided(v) => Some(v),
                Slot::Counts {
                    rule_id,
                    want,
                    on_call_rule,
                } => {
                    let peek = peeks.next()?;
                    let v = RuleVerdict {
                        on_call_rule,
                        ..counted(&rule_id, want, peek)
                    };
                    Some(
                        match mutes.iter().find(|m| m.matches(&rule_id, &group, peek.now_ms)) {
                            Some(m) => v.muted_by(m),
                            None => v,
                        },
                    )
                }
            })
            .map(|v| RuleVerdict { at_ms: now_ms, ..v })
            .collect()
    }
}

/// Adds to the verdicts of the watched NO_EVENTS rules (`silences`, [`Explanation::silences`]) the project's
/// last event as the engine noted it (`None`: none noted) and, from it, when the rule fires if no other event
/// comes (`windowEndsAt`).
pub fn with_last_event(verdicts: &mut [RuleVerdict], silences: &[(String, u64)], last_event_ms: Option<i64>) {
    for v in verdicts.iter_mut() {
        let Some((_, quiet)) = silences.iter().find(|(id, _)| *id == v.rule_id) else {
            continue;
        };
        match last_event_ms {
            Some(last) => {
                v.reason
                    .push_str(&format!(" (the project's last event: {})", rfc3339_ms(last)));
                v.window_ends_at = Some(crate::kind::no_events::due_at(last, *quiet));
            }
            None => v.reason.push_str(" (no event of the project noted yet)"),
        }
    }
}

#[cfg(test)]
mod tests;
