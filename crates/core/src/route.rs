//! Where a notification task goes, for every way a message leaves Klaxon: one pure decision, [`route`], of a
//! task, the rule **as it is now**, the process's [`Output`] and the time.
//!
//! ```text
//! task kind   │ rule now: gone / disabled / lost the channel │ quiet window (not bypassed) │ minPeriod > 0 │ else
//! ────────────┼──────────────────────────────────────────────┼─────────────────────────────┼───────────────┼─────
//! firing      │ (the rule fired it)                          │ Held{window end}            │ Digest        │ Now
//! silence     │ (the rule fired it)                          │ Held{window end}            │ Digest        │ Now
//! resolve     │ Now (no quiet, no digest: the rule is gone)  │ Held{window end}            │ Digest¹       │ Now
//! reminder    │ Dropped{rule_gone|rule_disabled|channel_…}   │ Held{window end}            │ Now           │ Now
//! escalation  │ Dropped{rule_gone|rule_disabled|channel_…}   │ Deferred{window end}        │ Now           │ Now
//! acknowledge │ Now (acknowledging works whatever the rule)  │ Now (someone is awake)      │ Now           │ Now
//! release     │ Now (a digest's or a quiet window's message, a direct notification: already decided)        │
//! ```
//! ¹ Except PagerDuty (its incident closes on the firing's `dedup_key`, at once) and `--output hawk`.
//!
//! `--output hawk`: Hawk's senders know only firings of event groups, so a task that would go out now and that
//! Hawk cannot send (a message of an alert's life, a NO_EVENTS silence: [`NotificationTask::hawk_can_send`]) is
//! `Dropped{hawk_output}`; what is held or digested is decided at its release. Shadow mode routes exactly as
//! Klaxon's own output does (it records what would be sent where Klaxon would send it).
//!
//! Resolves and acknowledgements by hand (API, console, `klaxon alerts`) go out at once: [`by_hand`].

use std::fmt;
use std::str::FromStr;

use crate::notification::{NotificationTask, Reason};
use crate::rule::CompiledRule;
use crate::ChannelKind;

/// Which queues notifications go to (`--output`, `KLAXON_OUTPUT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    /// `<ns>.notify.<channel>`: Klaxon's senders deliver (the default).
    #[default]
    Klaxon,
    /// `sender/<channel>`: Hawk's sender tasks, for Hawk's sender workers.
    Hawk,
    /// Nowhere: what would be sent is recorded in the delivery trail (status `shadow`) and counted.
    Shadow,
}

impl Output {
    /// `klaxon`, `hawk`, `shadow`.
    pub fn as_str(self) -> &'static str {
        match self {
            Output::Klaxon => "klaxon",
            Output::Hawk => "hawk",
            Output::Shadow => "shadow",
        }
    }

    /// True when Klaxon's own senders deliver what this output produces (`klaxon run` then starts them).
    pub fn needs_senders(self) -> bool {
        self == Output::Klaxon
    }
}

impl FromStr for Output {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "klaxon" => Ok(Output::Klaxon),
            "hawk" => Ok(Output::Hawk),
            "shadow" => Ok(Output::Shadow),
            other => Err(format!(
                "unknown output `{other}` (expected `klaxon`, `hawk` or `shadow`)"
            )),
        }
    }
}

/// What a task is, read from its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    /// A rule's firing about a group of events.
    Firing,
    /// A NO_EVENTS rule's firing: the project fell silent.
    Silence,
    /// An alert resolved by the engine (its `resolveAfter` ran out, or a NO_EVENTS silence ended).
    Resolve,
    /// An alert acknowledged.
    Acknowledge,
    /// A reminder of an alert still firing.
    Reminder,
    /// An escalation step of an alert still firing.
    Escalation,
    /// A message already decided: a digest, a quiet window's release, a direct notification.
    Release,
}

impl TaskKind {
    /// The kind of `task`.
    pub fn of(task: &NotificationTask) -> TaskKind {
        match task.reason {
            Reason::Resolved => TaskKind::Resolve,
            Reason::Acknowledged => TaskKind::Acknowledge,
            Reason::Reminder { .. } => TaskKind::Reminder,
            Reason::Escalation { .. } => TaskKind::Escalation,
            Reason::NoEvents { .. } => TaskKind::Silence,
            Reason::Digest { .. } | Reason::QuietHours { .. } | Reason::Direct => TaskKind::Release,
            _ => TaskKind::Firing,
        }
    }
}

/// Why a task is not sent: decided when it is routed (the rule as it is now, the output) or, for a reminder or an
/// escalation step already published, when its sender's turn comes (the alert and the rule as they are then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The alert's rule was deleted since.
    RuleGone,
    /// The alert's rule was switched off since.
    RuleDisabled,
    /// The alert's rule no longer has the task's channel (kind and endpoint), or the escalation step no longer
    /// has it (or the step is gone).
    ChannelRemoved,
    /// `--output hawk`: Hawk's senders know only firings of event groups.
    HawkOutput,
    /// The alert was acknowledged since the task was published.
    Acknowledged,
    /// The alert resolved since.
    Resolved,
    /// The alert no longer exists (resolved alerts are kept 7 days; or it was never stored).
    AlertGone,
    /// A reminder over its project's budget of reminders this hour (`--reminder-budget`).
    ReminderBudget,
}

impl DropReason {
    /// `rule_gone`, `rule_disabled`, `channel_removed`, `hawk_output`, `acknowledged`, `resolved`, `alert_gone`,
    /// `reminder_budget`
    /// (the metrics' `reason` label).
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::RuleGone => "rule_gone",
            DropReason::RuleDisabled => "rule_disabled",
            DropReason::ChannelRemoved => "channel_removed",
            DropReason::HawkOutput => "hawk_output",
            DropReason::Acknowledged => "acknowledged",
            DropReason::Resolved => "resolved",
            DropReason::AlertGone => "alert_gone",
            DropReason::ReminderBudget => "reminder_budget",
        }
    }

    /// In words, for the delivery trail.
    pub fn words(self) -> &'static str {
        match self {
            DropReason::RuleGone => "not sent: the rule was deleted",
            DropReason::RuleDisabled => "not sent: the rule is disabled",
            DropReason::ChannelRemoved => "not sent: the channel was removed from the rule",
            DropReason::HawkOutput => "not sent: --output hawk sends firings only",
            DropReason::Acknowledged => "not sent: the alert was acknowledged",
            DropReason::Resolved => "not sent: the alert resolved",
            DropReason::AlertGone => "not sent: the alert no longer exists",
            DropReason::ReminderBudget => "not sent: the project's reminders this hour reached its budget",
        }
    }

    /// What the state of a reminder's or step's alert as it is now (`None`: gone) says of it: `Some(why)` when
    /// it is not to be sent.
    pub fn of_alert(state: Option<crate::alert::AlertState>) -> Option<DropReason> {
        use crate::alert::AlertState;
        match state {
            None => Some(DropReason::AlertGone),
            Some(AlertState::Firing) => None,
            Some(AlertState::Acknowledged) => Some(DropReason::Acknowledged),
            Some(AlertState::Resolved) => Some(DropReason::Resolved),
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a task goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Published now.
    Now,
    /// Through its channel's digest (`minPeriod` seconds; the task carries it): sent now on a quiet channel,
    /// else listed in the window's one message. A resolve is a resolved entry.
    Digest {
        /// The channel's `minPeriod`, seconds.
        min_period_s: u64,
    },
    /// Held into its channel's quiet-window release, due at `until_ms` (a firing or a reminder is listed among
    /// what fired, a resolve among what resolved).
    Held {
        /// When the window ends, unix ms.
        until_ms: i64,
    },
    /// Not sent now; the whole escalation step is due again at `until_ms` (the quiet window's end).
    Deferred {
        /// When the window ends, unix ms.
        until_ms: i64,
    },
    /// Not sent, counted with its reason.
    Dropped {
        /// Why.
        reason: DropReason,
    },
}

/// Where `task` goes at `at_ms`, under `rule` as it is now (`None`: deleted) and `output`. Pure; see the module
/// docs for the table.
pub fn route(task: &NotificationTask, rule: Option<&CompiledRule>, output: Output, at_ms: i64) -> Route {
    let kind = TaskKind::of(task);
    let quiet_until = |rule: &CompiledRule| rule.quiet_hours.held_until(task.channel, at_ms);
    let route = match kind {
        TaskKind::Firing | TaskKind::Silence => match rule.and_then(quiet_until) {
            Some(until_ms) => Route::Held { until_ms },
            None if task.min_period_s > 0 => Route::Digest {
                min_period_s: task.min_period_s,
            },
            None => Route::Now,
        },
        TaskKind::Resolve => {
            // a rule switched off or deleted since has no quiet hours and no digest any more
            let rule = rule.filter(|r| r.enabled);
            let period = rule.map_or(0, |r| r.min_period_s(task.channel));
            match rule.and_then(quiet_until) {
                Some(until_ms) => Route::Held { until_ms },
                None if period > 0 && task.channel != ChannelKind::Pagerduty && output != Output::Hawk => {
                    Route::Digest { min_period_s: period }
                }
                None => Route::Now,
            }
        }
        TaskKind::Reminder | TaskKind::Escalation => match still_sent_by(task, rule) {
            Err(reason) => Route::Dropped { reason },
            Ok(rule) => match (quiet_until(rule), kind) {
                (Some(until_ms), TaskKind::Escalation) => Route::Deferred { until_ms },
                (Some(until_ms), _) => Route::Held { until_ms },
                (None, _) => Route::Now,
            },
        },
        TaskKind::Acknowledge | TaskKind::Release => Route::Now,
    };
    if route == Route::Now {
        return by_hand(task, output);
    }
    route
}

/// Where a change by hand (an acknowledgement, a resolve through the API, the console or `klaxon alerts`)
/// goes: now, whatever the rule and its quiet hours (someone is awake), unless `--output hawk` cannot send it.
pub fn by_hand(task: &NotificationTask, output: Output) -> Route {
    if output == Output::Hawk && !task.hawk_can_send() {
        return Route::Dropped {
            reason: DropReason::HawkOutput,
        };
    }
    Route::Now
}

/// The rule of a reminder or an escalation step as it is now (`None`: deleted), if it still sends the task:
/// enabled, and with the task's channel (kind and endpoint) among its channels (a reminder) or among the
/// channels of the task's step (an escalation step). The timer loop asks when it publishes ([`route`]); the
/// sender asks again when the task's turn comes.
pub fn still_sent_by<'r>(
    task: &NotificationTask,
    rule: Option<&'r CompiledRule>,
) -> Result<&'r CompiledRule, DropReason> {
    let rule = rule.ok_or(DropReason::RuleGone)?;
    if !rule.enabled {
        return Err(DropReason::RuleDisabled);
    }
    let channels: &[crate::ChannelConfig] = match task.reason {
        Reason::Escalation { step, .. } => match (step as usize)
            .checked_sub(1)
            .and_then(|i| rule.escalation.get(i))
        {
            Some(s) => &s.channels,
            None => return Err(DropReason::ChannelRemoved),
        },
        _ => &rule.channels,
    };
    if channels
        .iter()
        .any(|c| c.kind == task.channel && c.endpoint == task.endpoint)
    {
        Ok(rule)
    } else {
        Err(DropReason::ChannelRemoved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertRef;
    use crate::notification::NotificationEvent;
    use serde_json::json;

    const SLACK: &str = "https://hooks.slack.test/x";
    const PD: &str = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";
    const HOOK: &str = "https://h.test/step";
    // 2023-11-14 (a Tuesday) 22:30 UTC: inside the window 22:00-23:00
    const QUIET: i64 = 1_700_001_000_000;
    const END: i64 = 1_700_002_800_000;
    // 2023-11-14 21:00 UTC: outside it
    const DAY: i64 = 1_699_995_600_000;

    /// A rule with Slack and PagerDuty (`minPeriod` `period` on both), an escalation step to a webhook, quiet
    /// hours 22:00-23:00 UTC on Tuesdays (none when `quiet` is false) bypassed by `bypass`.
    fn rule(period: u64, quiet: bool, bypass: &[&str], enabled: bool) -> CompiledRule {
        let mut raw = json!({"_id": "a0000000000000000000000a", "isEnabled": enabled,
            "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
            "channels": {
                "slack": {"isEnabled": true, "endpoint": SLACK, "minPeriod": period},
                "pagerduty": {"isEnabled": true, "endpoint": PD, "minPeriod": period}},
            "renotify": {"every": 60_000, "max": 3},
            "escalation": [{"after": 60_000, "channels": {"webhook": {"isEnabled": true, "endpoint": HOOK}}}]});
        if quiet {
            raw["quietHours"] = json!([{"days": ["tue"], "from": "22:00", "to": "23:00", "timezone": "UTC"}]);
            raw["quietHoursBypass"] = json!(bypass);
        }
        let (rule, _) = crate::parse_rule_value(&raw).expect("a rule");
        rule
    }

    fn task(reason: Reason, channel: ChannelKind, min_period_s: u64) -> NotificationTask {
        let endpoint = match channel {
            ChannelKind::Slack => SLACK,
            ChannelKind::Pagerduty => PD,
            _ => HOOK,
        };
        let group = if matches!(reason, Reason::NoEvents { .. }) {
            ""
        } else {
            "g"
        };
        NotificationTask {
            notification_id: "n".into(),
            project_id: "p".into(),
            project_name: None,
            rule_id: "a0000000000000000000000a".into(),
            channel,
            endpoint: endpoint.into(),
            min_period_s,
            fired_at_ms: DAY,
            reason,
            events: vec![NotificationEvent {
                group_hash: group.into(),
                title: "t".into(),
                count: 1,
                repetition_id: None,
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            }],
            text: None,
            send_at_ms: None,
            alert: None::<AlertRef>,
            severity: None,
        }
    }

    const FIRING: Reason = Reason::New;
    const SILENCE: Reason = Reason::NoEvents {
        quiet_period_ms: 60_000,
        last_event_ms: None,
    };
    const RESOLVE: Reason = Reason::Resolved;
    const ACK: Reason = Reason::Acknowledged;
    const REMIND: Reason = Reason::Reminder { number: 1, max: 3 };
    const STEP: Reason = Reason::Escalation { step: 1, steps: 1 };
    const DIGEST: Reason = Reason::Digest {
        min_period_s: 300,
        resolved: 0,
        more: crate::notification::Unlisted {
            fired: 0,
            resolved: 0,
        },
    };

    fn held() -> Route {
        Route::Held { until_ms: END }
    }
    fn dropped(reason: DropReason) -> Route {
        Route::Dropped { reason }
    }

    /// Every task kind × output × quiet / bypass / digest / PagerDuty / rule-now case.
    #[test]
    fn route_table() {
        use ChannelKind::{Pagerduty as Pd, Slack, Webhook as Hook};
        use Output::{Hawk, Klaxon, Shadow};
        let digest = Route::Digest { min_period_s: 300 };
        let hawk = dropped(DropReason::HawkOutput);
        // rules now: (minPeriod, quiet hours, bypass, enabled)
        let plain = rule(0, false, &[], true);
        let periodic = rule(300, false, &[], true);
        let quiet = rule(300, true, &[], true);
        let bypass_pd = rule(300, true, &["pagerduty"], true);
        let bypass_hook = rule(0, true, &["webhook"], true);
        let off = rule(300, true, &[], false);
        let mut lost = rule(0, false, &[], true);
        lost.channels.retain(|c| c.kind != Slack);
        lost.escalation.clear();
        // (task reason, channel, the task's minPeriod, rule now, output, at, where)
        type Case<'r> = (
            Reason,
            ChannelKind,
            u64,
            Option<&'r CompiledRule>,
            Output,
            i64,
            Route,
        );
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            // firings: quiet hours hold (whatever the period), then the digest, then now; every output alike
            (FIRING, Slack, 0, Some(&plain), Klaxon, DAY, Route::Now),
            (FIRING, Slack, 300, Some(&periodic), Klaxon, DAY, digest),
            (FIRING, Slack, 300, Some(&quiet), Klaxon, QUIET, held()),
            (FIRING, Slack, 300, Some(&quiet), Klaxon, DAY, digest),
            (FIRING, Pd, 300, Some(&bypass_pd), Klaxon, QUIET, digest),
            (FIRING, Slack, 300, Some(&bypass_pd), Klaxon, QUIET, held()),
            (FIRING, Slack, 0, Some(&plain), Hawk, DAY, Route::Now),
            (FIRING, Slack, 300, Some(&quiet), Hawk, QUIET, held()),
            (FIRING, Slack, 0, Some(&plain), Shadow, DAY, Route::Now),
            (FIRING, Slack, 300, Some(&periodic), Shadow, DAY, digest),
            // NO_EVENTS silences: like firings, but Hawk cannot send one now (no group)
            (SILENCE, Slack, 0, Some(&plain), Klaxon, DAY, Route::Now),
            (SILENCE, Slack, 300, Some(&periodic), Klaxon, DAY, digest),
            (SILENCE, Slack, 300, Some(&quiet), Klaxon, QUIET, held()),
            (SILENCE, Slack, 0, Some(&plain), Hawk, DAY, hawk),
            (SILENCE, Slack, 300, Some(&periodic), Hawk, DAY, digest),
            (SILENCE, Slack, 0, Some(&plain), Shadow, DAY, Route::Now),
            // resolves: the rule's minPeriod now (not the task's), never PagerDuty's nor Hawk's digest
            (RESOLVE, Slack, 0, Some(&plain), Klaxon, DAY, Route::Now),
            (RESOLVE, Slack, 0, Some(&periodic), Klaxon, DAY, digest),
            (RESOLVE, Pd, 0, Some(&periodic), Klaxon, DAY, Route::Now),
            (RESOLVE, Slack, 0, Some(&periodic), Hawk, DAY, hawk),
            (RESOLVE, Slack, 0, Some(&periodic), Shadow, DAY, digest),
            (RESOLVE, Slack, 0, Some(&quiet), Klaxon, QUIET, held()),
            // "where does a resolve go in quiet hours on PagerDuty with minPeriod 300?": held into the release
            (RESOLVE, Pd, 0, Some(&quiet), Klaxon, QUIET, held()),
            // ... unless PagerDuty bypasses the quiet: then at once (never through PagerDuty's digest)
            (RESOLVE, Pd, 0, Some(&bypass_pd), Klaxon, QUIET, Route::Now),
            (RESOLVE, Slack, 0, Some(&quiet), Hawk, QUIET, held()),
            (RESOLVE, Slack, 0, Some(&quiet), Shadow, QUIET, held()),
            // a resolve is never dropped for its rule: gone or off, it has no quiet and no digest any more
            (RESOLVE, Slack, 0, None, Klaxon, QUIET, Route::Now),
            (RESOLVE, Slack, 0, Some(&off), Klaxon, QUIET, Route::Now),
            (RESOLVE, Slack, 0, Some(&lost), Klaxon, DAY, Route::Now),
            (RESOLVE, Slack, 0, None, Hawk, DAY, hawk),
            // acknowledgements: at once, whatever the rule, the quiet and the period
            (ACK, Slack, 0, Some(&quiet), Klaxon, QUIET, Route::Now),
            (ACK, Pd, 0, Some(&periodic), Klaxon, DAY, Route::Now),
            (ACK, Slack, 0, None, Klaxon, DAY, Route::Now),
            (ACK, Slack, 0, Some(&off), Shadow, DAY, Route::Now),
            (ACK, Slack, 0, Some(&plain), Hawk, DAY, hawk),
            // reminders: decided against the rule now; held in quiet hours; never digested
            (REMIND, Slack, 0, Some(&plain), Klaxon, DAY, Route::Now),
            (REMIND, Slack, 0, Some(&periodic), Klaxon, DAY, Route::Now),
            (REMIND, Slack, 0, Some(&quiet), Klaxon, QUIET, held()),
            (REMIND, Pd, 0, Some(&bypass_pd), Klaxon, QUIET, Route::Now),
            (REMIND, Slack, 0, Some(&quiet), Hawk, QUIET, held()),
            (REMIND, Slack, 0, Some(&plain), Hawk, DAY, hawk),
            (REMIND, Slack, 0, Some(&plain), Shadow, DAY, Route::Now),
            (REMIND, Slack, 0, None, Klaxon, DAY, dropped(DropReason::RuleGone)),
            (REMIND, Slack, 0, Some(&off), Klaxon, DAY, dropped(DropReason::RuleDisabled)),
            (REMIND, Slack, 0, Some(&lost), Klaxon, DAY, dropped(DropReason::ChannelRemoved)),
            (REMIND, Slack, 0, None, Hawk, DAY, dropped(DropReason::RuleGone)),
            // escalation steps: deferred (not held) in quiet hours, at once on a bypassed channel
            (STEP, Hook, 0, Some(&plain), Klaxon, DAY, Route::Now),
            (STEP, Hook, 0, Some(&quiet), Klaxon, QUIET, Route::Deferred { until_ms: END }),
            (STEP, Hook, 0, Some(&bypass_hook), Klaxon, QUIET, Route::Now),
            (STEP, Hook, 0, Some(&quiet), Shadow, QUIET, Route::Deferred { until_ms: END }),
            (STEP, Hook, 0, Some(&plain), Hawk, DAY, hawk),
            (STEP, Hook, 0, None, Klaxon, DAY, dropped(DropReason::RuleGone)),
            (STEP, Hook, 0, Some(&off), Klaxon, DAY, dropped(DropReason::RuleDisabled)),
            (STEP, Hook, 0, Some(&lost), Klaxon, DAY, dropped(DropReason::ChannelRemoved)),
            // releases (a digest's message, a quiet window's): already decided
            (DIGEST, Slack, 300, Some(&quiet), Klaxon, QUIET, Route::Now),
            (DIGEST, Slack, 300, None, Hawk, DAY, Route::Now),
        ];
        for (reason, channel, period, rule, output, at, want) in cases {
            let t = task(reason, channel, period);
            assert_eq!(
                route(&t, rule, output, at),
                want,
                "{reason:?} on {channel} (minPeriod {period}) under {:?} via {output:?} at {at}",
                rule.map(|r| (r.enabled, r.quiet_hours.summary()))
            );
        }
        // a release that lists a NO_EVENTS silence (no group) is not Hawk's either
        let silent = task(DIGEST, Slack, 300);
        let mut silent = silent;
        silent.events[0].group_hash.clear();
        assert_eq!(route(&silent, None, Hawk, DAY), hawk);
    }

    /// Changes by hand go out at once, in quiet hours too; with `--output hawk` they are not Hawk's.
    #[test]
    fn by_hand_is_now() {
        for reason in [ACK, RESOLVE] {
            let t = task(reason, ChannelKind::Pagerduty, 0);
            assert_eq!(by_hand(&t, Output::Klaxon), Route::Now);
            assert_eq!(by_hand(&t, Output::Shadow), Route::Now);
            assert_eq!(by_hand(&t, Output::Hawk), dropped(DropReason::HawkOutput));
        }
        let kinds = [
            (FIRING, TaskKind::Firing),
            (SILENCE, TaskKind::Silence),
            (RESOLVE, TaskKind::Resolve),
            (ACK, TaskKind::Acknowledge),
            (REMIND, TaskKind::Reminder),
            (STEP, TaskKind::Escalation),
            (DIGEST, TaskKind::Release),
            (Reason::Direct, TaskKind::Release),
        ];
        for (reason, kind) in kinds {
            assert_eq!(TaskKind::of(&task(reason, ChannelKind::Slack, 0)), kind);
        }
    }

    #[test]
    fn outputs_parse() {
        for o in [Output::Klaxon, Output::Hawk, Output::Shadow] {
            assert_eq!(o.as_str().parse(), Ok(o));
        }
        assert!("Hawk".parse::<Output>().is_err());
        assert!("shadow-mode"
            .parse::<Output>()
            .is_err_and(|e| e.contains("`shadow`")));
        assert_eq!(
            [Output::Klaxon, Output::Hawk, Output::Shadow].map(Output::needs_senders),
            [true, false, false]
        );
        assert_eq!(DropReason::ChannelRemoved.to_string(), "channel_removed");
    }
}
