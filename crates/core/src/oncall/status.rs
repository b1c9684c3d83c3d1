//! Where an open alert stands with its rule's on-call fields ([`OnCallRule::status`]): what `explain` shows
//! beside a verdict.

use serde_json::{Map, Value};

use super::schedule::{next_escalation, EscalationStep, QuietHours, Renotify};
use crate::rule::ChannelKind;

// ---------------------------------------------------------------------------------------------------------------
// Where an open alert stands (explain)

/// A rule's on-call fields as `explain` carries them beside a verdict: enough to say where an open alert's
/// reminders and escalation stand and whether the rule is in quiet hours ([`OnCallRule::status`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnCallRule {
    /// `renotify`.
    pub renotify: Option<Renotify>,
    /// `escalation`.
    pub escalation: Vec<EscalationStep>,
    /// `quietHours` and `quietHoursBypass`.
    pub quiet_hours: QuietHours,
}

/// Where an open alert's reminders stand at a moment ([`OnCallRule::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reminders {
    /// Reminders due so far by the schedule (sent, or silenced by a mute), 0 … `max`.
    pub sent: u32,
    /// `renotify.max`.
    pub max: u32,
    /// `renotify.every`, ms.
    pub every_ms: u64,
    /// When the next one is due, unix ms; `None` when all were sent or the alert was acknowledged.
    pub next_at_ms: Option<i64>,
}

/// Where an open alert's escalation stands at a moment ([`OnCallRule::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// Steps due so far by the schedule (sent, or silenced by a mute).
    pub sent: usize,
    /// How many steps the rule has.
    pub steps: usize,
    /// The next step: its number (1-based), when it is due (unix ms) and its channels ("pagerduty,email");
    /// `None` after the last step or once the alert was acknowledged.
    pub next: Option<(usize, i64, String)>,
}

/// Whether the rule is in quiet hours at a moment, and until when ([`QuietHours::window_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quiet {
    /// The end of the quiet (unix ms), `None` when the rule is not in quiet hours.
    pub until_ms: Option<i64>,
    /// The channels never held (`quietHoursBypass`).
    pub bypass: Vec<ChannelKind>,
}

/// A rule's on-call state at a moment: what `explain` shows (`"onCall"`), pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnCallStatus {
    /// The open alert was acknowledged: reminders and escalation stopped.
    pub acknowledged: bool,
    /// Reminders of the open alert (`renotify` and an open alert).
    pub reminders: Option<Reminders>,
    /// Escalation of the open alert (`escalation` and an open alert).
    pub escalation: Option<Escalation>,
    /// Quiet hours (`quietHours`), with or without an alert.
    pub quiet: Option<Quiet>,
}

impl OnCallRule {
    /// The on-call fields of `rule`; `None` when it sets none of them.
    pub fn of(rule: &crate::CompiledRule) -> Option<OnCallRule> {
        let on_call = OnCallRule {
            renotify: rule.renotify,
            escalation: rule.escalation.clone(),
            quiet_hours: rule.quiet_hours.clone(),
        };
        (on_call != OnCallRule::default()).then_some(on_call)
    }

    /// Where things stand at `now_ms` for the rule's open `alert` (`None`: no open alert; a resolved one counts
    /// as none). Reminders and steps go by the schedule the engine keeps: reminder n at opened + n × every,
    /// step k at opened + its `after`; an acknowledgement stops both where they were at its time.
    pub fn status(&self, alert: Option<&crate::alert::Alert>, now_ms: i64) -> OnCallStatus {
        use crate::alert::AlertState;
        let quiet = (!self.quiet_hours.is_empty()).then(|| Quiet {
            until_ms: self.quiet_hours.window_at(now_ms),
            bypass: self.quiet_hours.bypass.clone(),
        });
        let Some(alert) = alert.filter(|a| a.state.is_open()) else {
            return OnCallStatus {
                quiet,
                ..OnCallStatus::default()
            };
        };
        let firing = alert.state == AlertState::Firing;
        // the moment the schedule stopped: now while firing, the acknowledgement otherwise
        let until = if firing {
            now_ms
        } else {
            alert.acknowledged_at_ms.unwrap_or(now_ms).min(now_ms)
        };
        let opened = alert.fired_at_ms;
        let reminders = self.renotify.map(|r| {
            let sent = (1..=r.max)
                .take_while(|n| r.due_at(opened, *n).is_some_and(|at| at <= until))
                .count() as u32;
            Reminders {
                sent,
                max: r.max,
                every_ms: r.every_ms,
                next_at_ms: if firing {
                    r.next(opened, sent).map(|(_, at)| at)
                } else {
                    None
                },
            }
        });
        let escalation = (!self.escalation.is_empty()).then(|| {
            let sent = self
                .escalation
                .iter()
                .take_while(|s| s.due_at(opened) <= until)
                .count();
            let next = if firing {
                next_escalation(&self.escalation, opened, sent)
                    .map(|(i, at)| (i + 1, at, self.escalation[i].channel_names()))
            } else {
                None
            };
            Escalation {
                sent,
                steps: self.escalation.len(),
                next,
            }
        });
        OnCallStatus {
            acknowledged: alert.state == AlertState::Acknowledged,
            reminders,
            escalation,
            quiet,
        }
    }
}

impl OnCallStatus {
    /// True when there is nothing to show (the rule sets no quiet hours and has no open alert to remind of or
    /// escalate).
    pub fn is_empty(&self) -> bool {
        self.reminders.is_none() && self.escalation.is_none() && self.quiet.is_none()
    }

    /// The API's `"onCall"` (documented in docs/api.md): `{"reminders"?: {"sent", "max", "every", "nextAt"},
    /// "escalation"?: {"sent", "steps", "nextStep", "nextAt", "nextChannels"}, "quietHours"?: {"quiet",
    /// "until", "bypass"}}`, times in RFC 3339, `null` when there is none.
    pub fn to_json(&self) -> Value {
        let at =
            |ms: Option<i64>| ms.map_or(Value::Null, |ms| Value::from(crate::notification::rfc3339_ms(ms)));
        let mut out = Map::new();
        if let Some(r) = &self.reminders {
            out.insert(
                "reminders".into(),
                serde_json::json!({"sent": r.sent, "max": r.max, "every": r.every_ms, "nextAt": at(r.next_at_ms)}),
            );
        }
        if let Some(e) = &self.escalation {
            let (step, when, channels) = match &e.next {
                Some((step, when, channels)) => (
                    Value::from(*step),
                    at(Some(*when)),
                    Value::from(channels.split(',').filter(|c| *c != "-").collect::<Vec<_>>()),
                ),
                None => (Value::Null, Value::Null, Value::Null),
            };
            out.insert(
                "escalation".into(),
                serde_json::json!({"sent": e.sent, "steps": e.steps, "nextStep": step, "nextAt": when,
                    "nextChannels": channels}),
            );
        }
        if let Some(q) = &self.quiet {
            let bypass: Vec<&str> = q.bypass.iter().map(|c| c.as_str()).collect();
            out.insert(
                "quietHours".into(),
                serde_json::json!({"quiet": q.until_ms.is_some(), "until": at(q.until_ms), "bypass": bypass}),
            );
        }
        Value::Object(out)
    }

    /// The same in words, one line per part: "reminders: 1 of 2 sent, the next at …", "escalation: step 2 of 3
    /// (pagerduty) at …", "in quiet hours until … (pagerduty not held)" (`klaxon explain`, the console).
    pub fn words(&self) -> Vec<String> {
        let at = crate::notification::rfc3339_ms;
        let mut out = Vec::new();
        if let Some(r) = &self.reminders {
            out.push(match r.next_at_ms {
                Some(next) => format!(
                    "reminders: {} of {} sent, the next at {} (every {})",
                    r.sent,
                    r.max,
                    at(next),
                    crate::text::short_duration(r.every_ms)
                ),
                None if self.acknowledged => format!(
                    "reminders: stopped by the acknowledgement after {} of {}",
                    r.sent, r.max
                ),
                None => format!("reminders: {} of {} sent, none left", r.sent, r.max),
            });
        }
        if let Some(e) = &self.escalation {
            out.push(match &e.next {
                Some((step, when, channels)) => format!(
                    "escalation: step {step} of {} ({channels}) at {}",
                    e.steps,
                    at(*when)
                ),
                None if self.acknowledged => format!(
                    "escalation: stopped by the acknowledgement after {} of {}",
                    e.sent, e.steps
                ),
                None => format!("escalation: {} of {} sent, none left", e.sent, e.steps),
            });
        }
        if let Some(q) = &self.quiet {
            let bypass = if q.bypass.is_empty() {
                String::new()
            } else {
                let names: Vec<&str> = q.bypass.iter().map(|c| c.as_str()).collect();
                format!(" ({} not held)", names.join(", "))
            };
            out.push(match q.until_ms {
                Some(until) => format!("in quiet hours until {}{bypass}: firings are held", at(until)),
                None => "not in quiet hours now".to_owned(),
            });
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------------------------
