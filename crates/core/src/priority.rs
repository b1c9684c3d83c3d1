//! Who goes first on a paced channel: a task's [`Priority`], the queue ([`Lane`]) it waits in, how far ahead it
//! may reserve a shared send slot ([`Priority::horizon`]), and the per-project reminder budget a rule set can
//! exceed ([`reminders_per_hour`]). Pure: the engine's sender and rate limiter and `klaxon rules check` ask here.
//!
//! ```text
//! firing, digest, release, resolve, ack, direct ─▶ Priority::First      ─▶ lane Main    ─▶ reserves up to the sleep bound
//! escalation step                                ─▶ Priority::Step       ─▶ lane Later   ─▶ up to a quarter of it
//! reminder                                       ─▶ Priority::Reminder   ─▶ lane Later   ─▶ up to a tenth of it
//! any task whose own endpoint holds it (breaker open, Retry-After, busy)   ─▶ lane Later when it comes back
//! ```
//!
//! A lower priority reserves only slots close to now, so what it takes is capacity no firing was waiting for: a
//! firing waits behind the slots other firings reserved and at most a tenth of a second of reminders', never
//! behind a backlog of reminders. The later lane keeps what comes back again and again — reminders while a paced channel
//! is saturated, the parked tasks of a throttled or failing endpoint — out of the queue a new firing waits in.

use std::time::Duration;

use crate::notification::Reason;
use crate::rule::CompiledRule;

/// How urgent a task is on a paced channel (most urgent first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// A firing, a digest or quiet-hours release, a resolve or acknowledgement, a direct notification: the
    /// messages someone is waiting for.
    First,
    /// An escalation step: the first message to a step's audience, but about an alert already paged.
    Step,
    /// A reminder (`renotify`): a repeat of what was already said.
    Reminder,
}

/// The queue a task waits in: `<ns>.notify.<channel>` (Main) or `<ns>.notify.<channel>.later` (Later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Firings and everything else of [`Priority::First`].
    Main,
    /// Reminders, escalation steps, and tasks back from waiting for their own endpoint ([`Lane::back`]):
    /// consumed when the main lane has nothing ready, with at most half of the sender's slots.
    Later,
}

impl Lane {
    /// The lane a parked task of `priority` comes back to: the later lane when its own endpoint held it
    /// (`endpoint_held`: breaker open, `Retry-After` pending, the endpoint's share of its host busy), so that a
    /// throttled tenant's thousands of parked tasks never queue ahead of another tenant's new firing; otherwise
    /// its priority's lane.
    pub fn back(priority: Priority, endpoint_held: bool) -> Lane {
        if endpoint_held {
            Lane::Later
        } else {
            priority.lane()
        }
    }
}

impl Priority {
    /// The priority of a task sent for `reason`.
    pub fn of(reason: &Reason) -> Priority {
        match reason {
            Reason::Reminder { .. } => Priority::Reminder,
            Reason::Escalation { .. } => Priority::Step,
            _ => Priority::First,
        }
    }

    /// The lane a task of this priority waits in.
    pub fn lane(self) -> Lane {
        match self {
            Priority::First => Lane::Main,
            Priority::Step | Priority::Reminder => Lane::Later,
        }
    }

    /// How far ahead a task of this priority may reserve a slot, given the sender's longest sleep for a
    /// reserved slot (`max_sleep`, 1 s): all of it for [`Priority::First`], a quarter for a step, a tenth for a
    /// reminder (a few of the Telegram bot's slots; on a destination paced slower than that, only a slot that
    /// is free now). A slot further away is not reserved: the task waits and asks again. So a firing waits at
    /// most a tenth of the sleep bound behind reminders' reservations, and reminders still use a saturated bot.
    pub fn horizon(self, max_sleep: Duration) -> Duration {
        match self {
            Priority::First => max_sleep,
            Priority::Step => max_sleep / 4,
            Priority::Reminder => max_sleep / 10,
        }
    }

    /// `first`, `step`, `reminder` (a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::First => "first",
            Priority::Step => "step",
            Priority::Reminder => "reminder",
        }
    }
}

/// The default per-project budget of reminders per hour (`--reminder-budget`).
pub const DEFAULT_REMINDER_BUDGET: u32 = 600;

/// The most reminders one alert of `rule` can send in an hour: its channels × the reminders `renotify` allows
/// in an hour (`max`, or fewer when `every` is longer than 3,600 s ÷ `max`). 0 without `renotify`.
pub fn reminders_per_hour(rule: &CompiledRule) -> u64 {
    let Some(renotify) = rule.renotify.filter(|_| rule.enabled) else {
        return 0;
    };
    let per_hour = 3_600_000 / renotify.every_ms.max(1);
    let per_alert = per_hour.min(u64::from(renotify.max));
    per_alert.saturating_mul(rule.channels.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Window;
    use crate::rule::ProjectRules;
    use serde_json::json;

    #[test]
    fn priorities_and_lanes_per_reason() {
        // (reason, priority, lane)
        let table = [
            (Reason::New, Priority::First, Lane::Main),
            (
                Reason::Threshold {
                    threshold: 2,
                    period_ms: 1_000,
                    window: Window::Fixed,
                },
                Priority::First,
                Lane::Main,
            ),
            (
                Reason::Digest {
                    min_period_s: 60,
                    resolved: 0,
                    more: Default::default(),
                },
                Priority::First,
                Lane::Main,
            ),
            (Reason::Direct, Priority::First, Lane::Main),
            (Reason::Resolved, Priority::First, Lane::Main),
            (Reason::Acknowledged, Priority::First, Lane::Main),
            (
                Reason::Escalation { step: 1, steps: 2 },
                Priority::Step,
                Lane::Later,
            ),
            (
                Reason::Reminder { number: 1, max: 3 },
                Priority::Reminder,
                Lane::Later,
            ),
        ];
        for (reason, priority, lane) in table {
            assert_eq!(Priority::of(&reason), priority, "{reason:?}");
            assert_eq!(Priority::of(&reason).lane(), lane, "{reason:?}");
        }
        assert!(Priority::First < Priority::Step && Priority::Step < Priority::Reminder);
        // (priority, held by its own endpoint, lane it comes back to)
        let back = [
            (Priority::First, false, Lane::Main),
            (Priority::First, true, Lane::Later),
            (Priority::Reminder, false, Lane::Later),
            (Priority::Step, true, Lane::Later),
        ];
        for (p, held, lane) in back {
            assert_eq!(Lane::back(p, held), lane, "{p:?} {held}");
        }
    }

    #[test]
    fn horizons_shrink_with_priority() {
        let ms = Duration::from_millis;
        // (priority, max sleep, horizon)
        let table = [
            (Priority::First, ms(1_000), ms(1_000)),
            (Priority::Step, ms(1_000), ms(250)),
            (Priority::Reminder, ms(1_000), ms(100)),
            (Priority::First, ms(0), ms(0)),
            (Priority::Step, ms(0), ms(0)),
        ];
        for (p, sleep, want) in table {
            assert_eq!(p.horizon(sleep), want, "{p:?}");
        }
    }

    #[test]
    fn reminders_an_alert_can_send_in_an_hour() {
        let rule = |renotify: serde_json::Value, enabled: bool, channels: usize| {
            let mut ch = serde_json::Map::new();
            let kinds = ["webhook", "slack", "telegram"];
            for kind in kinds.iter().take(channels) {
                let endpoint = if *kind == "telegram" {
                    "-100123"
                } else {
                    "https://x.test/h"
                };
                ch.insert(
                    (*kind).into(),
                    json!({"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}),
                );
            }
            let r = json!({"_id": "r", "isEnabled": enabled, "whatToReceive": "ONLY_NEW", "including": [],
                "excluding": [], "channels": ch, "renotify": renotify});
            let project = ProjectRules::from_notifications(Some(&json!([r])));
            assert_eq!(project.rules.len(), 1, "{:?}", project.problems);
            reminders_per_hour(&project.rules[0])
        };
        // (renotify, enabled, channels, reminders per hour)
        let table = [
            (json!({"every": 1_000, "max": 100}), true, 1, 100),
            (json!({"every": 1_000, "max": 100}), true, 3, 300),
            (json!({"every": 60_000, "max": 100}), true, 1, 60),
            (json!({"every": 3_600_000, "max": 5}), true, 2, 2),
            (json!({"every": 1_000, "max": 100}), false, 1, 0),
            (json!(null), true, 1, 0),
        ];
        for (renotify, enabled, channels, want) in table {
            assert_eq!(
                rule(renotify.clone(), enabled, channels),
                want,
                "{renotify} {enabled} {channels}"
            );
        }
    }
}
