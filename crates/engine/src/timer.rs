//! The timer messages of `<ns>.alerts.timer`, as they are on the wire: one tagged serde enum,
//! [`TimerMessage`], read into an alert's timer ([`Timer`]: a resolve, a reminder, an escalation step) or a
//! NO_EVENTS rule's ([`SilenceTimer`]). The loop that handles them is [`crate::timers`].
//!
//! ```text
//! {"what": "resolve",   "projectId", "alertId"}
//! {"what": "remind",    "projectId", "alertId", "n", "every", "max"}
//! {"what": "escalate",  "projectId", "alertId", "step"}
//! {"what": "no_events", "projectId", "ruleId", "at"}
//! ```
//! The shapes of earlier versions, so a timer already waiting in a delay queue is read after a rolling upgrade;
//! fields this version does not know are ignored. Bounded: at most [`TIMER_MAX_BYTES`], ids checked, numbers in
//! range; anything else is set aside with the reason.

use std::time::Duration;

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::alert::{is_alert_id, Alert};
use klaxon_core::oncall::{
    next_escalation, EscalationStep, Renotify, MAX_ESCALATION_STEPS, RENOTIFY_EVERY_MS, RENOTIFY_MAX,
};
use serde::{Deserialize, Serialize};

/// The largest timer message the loop reads; a longer body is set aside unread.
pub const TIMER_MAX_BYTES: usize = 1_024;

/// The longest project (or rule) id a timer may name (ids are 24 hex characters; this leaves room, not abuse).
const ID_MAX: usize = 128;

/// A timer message on the wire, tagged by `what`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum TimerMessage {
    /// Resolve the alert if its `resolveAfter` ran out.
    Resolve {
        /// The project.
        project_id: String,
        /// The alert.
        alert_id: String,
    },
    /// Reminder `n` of at most `max`, `every` ms apart.
    Remind {
        /// The project.
        project_id: String,
        /// The alert.
        alert_id: String,
        /// 1 for the first reminder.
        n: u64,
        /// `renotify.every`, ms.
        every: u64,
        /// `renotify.max`.
        max: u64,
    },
    /// Escalation step `step` (1-based).
    Escalate {
        /// The project.
        project_id: String,
        /// The alert.
        alert_id: String,
        /// 1 for the first step.
        step: u64,
    },
    /// A NO_EVENTS rule's silence check, due `at` (unix ms), which names it.
    NoEvents {
        /// The project.
        project_id: String,
        /// The NO_EVENTS rule.
        rule_id: String,
        /// When it is due, unix ms.
        at: i64,
    },
}

/// A timer read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// An alert's timer.
    Alert(Timer),
    /// A NO_EVENTS rule's timer.
    Silence(SilenceTimer),
}

/// A timer message that is not one: why, and whether it said it was a NO_EVENTS timer (counted there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Why.
    pub reason: String,
    /// `"what": "no_events"`.
    pub silence: bool,
}

impl Due {
    /// Reads a timer message; the reason when it is not one.
    pub fn parse(body: &[u8]) -> Result<Due, Invalid> {
        let silence = || {
            #[derive(Deserialize)]
            struct What {
                what: Option<String>,
            }
            serde_json::from_slice::<What>(body).is_ok_and(|w| w.what.as_deref() == Some("no_events"))
        };
        if body.len() > TIMER_MAX_BYTES {
            return Err(Invalid {
                reason: format!("{} bytes, more than {TIMER_MAX_BYTES}", body.len()),
                silence: false,
            });
        }
        let message: TimerMessage = serde_json::from_slice(body).map_err(|e| Invalid {
            reason: format!("not a timer message: {e}"),
            silence: silence(),
        })?;
        let is_silence = matches!(message, TimerMessage::NoEvents { .. });
        Due::check(message).map_err(|reason| Invalid {
            reason,
            silence: is_silence,
        })
    }

    fn check(message: TimerMessage) -> Result<Due, String> {
        let in_range = |k: &str, v: u64, range: std::ops::RangeInclusive<u64>| {
            if range.contains(&v) {
                Ok(v)
            } else {
                Err(format!("`{k}` is not in {}..={}", range.start(), range.end()))
            }
        };
        let alert = |project_id: String, alert_id: String, what: TimerWhat| {
            check_id("projectId", &project_id)?;
            if !is_alert_id(&alert_id) {
                return Err("`alertId` is not an alert id (24 lowercase hex characters)".to_owned());
            }
            Ok(Due::Alert(Timer {
                project_id,
                alert_id,
                what,
            }))
        };
        match message {
            TimerMessage::Resolve { project_id, alert_id } => alert(project_id, alert_id, TimerWhat::Resolve),
            TimerMessage::Remind {
                project_id,
                alert_id,
                n,
                every,
                max,
            } => {
                let max = in_range("max", max, RENOTIFY_MAX)?;
                let what = TimerWhat::Remind {
                    number: in_range("n", n, 1..=max)? as u32,
                    every_ms: in_range("every", every, RENOTIFY_EVERY_MS)?,
                    max: max as u32,
                };
                alert(project_id, alert_id, what)
            }
            TimerMessage::Escalate {
                project_id,
                alert_id,
                step,
            } => {
                let step = in_range("step", step, 1..=MAX_ESCALATION_STEPS as u64)? as u32;
                alert(project_id, alert_id, TimerWhat::Escalate { step })
            }
            TimerMessage::NoEvents {
                project_id,
                rule_id,
                at,
            } => {
                check_id("projectId", &project_id)?;
                check_id("ruleId", &rule_id)?;
                if at <= 0 {
                    return Err("`at` is not a positive integer".into());
                }
                Ok(Due::Silence(SilenceTimer {
                    project_id,
                    rule_id,
                    due_ms: at,
                }))
            }
        }
    }
}

/// A project's or rule's id as a timer may name it: not empty, not too long, no control characters.
fn check_id(k: &str, id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > ID_MAX || id.chars().any(char::is_control) {
        return Err(format!("`{k}` is empty, too long or has control characters"));
    }
    Ok(())
}

/// The message of `m` in `<ns>.alerts.timer` named `message_id`.
fn outgoing(topology: &Topology, m: &TimerMessage, message_id: String) -> Outgoing {
    // an enum of strings and numbers always encodes
    let body = serde_json::to_vec(m).unwrap_or_default();
    let mut msg = Outgoing::json(topology.alerts_timer_queue(), body);
    msg.message_id = Some(message_id);
    msg
}

/// How long a timer due at `due_ms` waits, seen at `now_ms` (at once when it is past).
fn wait(due_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(due_ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// What an alert's timer asks for when it is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerWhat {
    /// Resolve the alert if its `resolveAfter` ran out without events (`Alerts::resolve_due`).
    Resolve,
    /// Reminder `number` of at most `max` (`renotify`, as the rule said when the alert opened), if the alert is
    /// still `firing`; then the next one, `every_ms` later.
    Remind {
        /// 1 for the first reminder.
        number: u32,
        /// `renotify.every`.
        every_ms: u64,
        /// `renotify.max`.
        max: u32,
    },
    /// Escalation step `step` (1-based) if the alert is still `firing`; its channels come from the rule.
    Escalate {
        /// 1 for the first step.
        step: u32,
    },
}

impl TimerWhat {
    /// Its name in the timer message (`what`).
    pub fn as_str(self) -> &'static str {
        match self {
            TimerWhat::Resolve => "resolve",
            TimerWhat::Remind { .. } => "remind",
            TimerWhat::Escalate { .. } => "escalate",
        }
    }
}

/// One alert timer, through the delay engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// The project.
    pub project_id: String,
    /// The alert.
    pub alert_id: String,
    /// What is due.
    pub what: TimerWhat,
}

impl Timer {
    /// The resolve timer of `alert`.
    pub fn resolve(alert: &Alert) -> Timer {
        Timer::of(alert, TimerWhat::Resolve)
    }

    fn of(alert: &Alert, what: TimerWhat) -> Timer {
        Timer {
            project_id: alert.project_id.clone(),
            alert_id: alert.id.clone(),
            what,
        }
    }

    /// This timer on the wire.
    pub fn to_message(&self) -> TimerMessage {
        let (project_id, alert_id) = (self.project_id.clone(), self.alert_id.clone());
        match self.what {
            TimerWhat::Resolve => TimerMessage::Resolve { project_id, alert_id },
            TimerWhat::Remind {
                number,
                every_ms,
                max,
            } => TimerMessage::Remind {
                project_id,
                alert_id,
                n: number.into(),
                every: every_ms,
                max: max.into(),
            },
            TimerWhat::Escalate { step } => TimerMessage::Escalate {
                project_id,
                alert_id,
                step: step.into(),
            },
        }
    }

    /// Reads an alert timer message; the reason when it is not one (a NO_EVENTS timer is not).
    pub fn parse(body: &[u8]) -> Result<Timer, String> {
        match Due::parse(body) {
            Ok(Due::Alert(t)) => Ok(t),
            Ok(Due::Silence(_)) => Err("a NO_EVENTS timer".into()),
            Err(e) => Err(e.reason),
        }
    }

    /// The message of this timer (its `message_id` names the alert and what is due).
    pub fn message(&self, topology: &Topology) -> Outgoing {
        let what = match self.what {
            TimerWhat::Resolve => "resolve".to_owned(),
            TimerWhat::Remind { number, .. } => format!("remind:{number}"),
            TimerWhat::Escalate { step } => format!("escalate:{step}"),
        };
        let id = format!("alert-timer:{}:{what}", self.alert_id);
        outgoing(topology, &self.to_message(), id)
    }

    /// The message of this timer and how long it waits to be due at `due_ms` (unix ms), seen at `now_ms`.
    pub fn scheduled(&self, topology: &Topology, due_ms: i64, now_ms: i64) -> (Outgoing, Duration) {
        (self.message(topology), wait(due_ms, now_ms))
    }

    /// The first reminder timer of `alert` under `renotify`, and when it is due (opened + every).
    pub fn first_reminder(alert: &Alert, renotify: &Renotify) -> Option<(Timer, i64)> {
        Timer::reminder(alert, renotify, 0)
    }

    /// The reminder after `sent` reminders of `alert`, and when it is due; `None` once `max` were sent.
    pub fn reminder(alert: &Alert, renotify: &Renotify, sent: u32) -> Option<(Timer, i64)> {
        let (number, at) = renotify.next(alert.fired_at_ms, sent)?;
        let what = TimerWhat::Remind {
            number,
            every_ms: renotify.every_ms,
            max: renotify.max,
        };
        Some((Timer::of(alert, what), at))
    }

    /// The escalation timer after `sent` steps of `steps` of `alert`, and when it is due; `None` after the last.
    pub fn escalation(alert: &Alert, steps: &[EscalationStep], sent: usize) -> Option<(Timer, i64)> {
        let (i, at) = next_escalation(steps, alert.fired_at_ms, sent)?;
        let what = TimerWhat::Escalate {
            step: u32::try_from(i + 1).ok()?,
        };
        Some((Timer::of(alert, what), at))
    }
}

/// One NO_EVENTS rule's timer, through the delay engine; `due_ms` is the time it was scheduled for, which
/// names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilenceTimer {
    /// The project.
    pub project_id: String,
    /// The NO_EVENTS rule.
    pub rule_id: String,
    /// When it is due, unix ms.
    pub due_ms: i64,
}

impl SilenceTimer {
    /// The message of this timer, waiting until `due_ms` as seen at `now_ms` (the delay engine clamps a longer
    /// wait: the timer then comes early and is rescheduled to the same time).
    pub fn scheduled(&self, topology: &Topology, now_ms: i64) -> (Outgoing, Duration) {
        let m = TimerMessage::NoEvents {
            project_id: self.project_id.clone(),
            rule_id: self.rule_id.clone(),
            at: self.due_ms,
        };
        let id = format!(
            "no-events-timer:{}:{}:{}",
            self.project_id, self.rule_id, self.due_ms
        );
        (outgoing(topology, &m, id), wait(self.due_ms, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;

    const ALERT: &str = "0123456789abcdef01234567";

    fn alert() -> Alert {
        crate::alerts::tests::alert("1000", 5_000)
    }

    /// The wire of earlier versions (timers already waiting in delay queues) is read as it was written, and
    /// each timer is written back in a shape that reads the same.
    #[test]
    fn earlier_wire_shapes_still_parse() {
        let cases = [
            (
                format!(r#"{{"projectId":"p","alertId":"{ALERT}","what":"resolve"}}"#),
                Due::Alert(Timer {
                    project_id: "p".into(),
                    alert_id: ALERT.into(),
                    what: TimerWhat::Resolve,
                }),
            ),
            (
                format!(
                    r#"{{"projectId":"p","alertId":"{ALERT}","what":"remind","n":2,"every":60000,"max":3}}"#
                ),
                Due::Alert(Timer {
                    project_id: "p".into(),
                    alert_id: ALERT.into(),
                    what: TimerWhat::Remind {
                        number: 2,
                        every_ms: 60_000,
                        max: 3,
                    },
                }),
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{ALERT}","what":"escalate","step":5,"later":true}}"#),
                Due::Alert(Timer {
                    project_id: "p".into(),
                    alert_id: ALERT.into(),
                    what: TimerWhat::Escalate { step: 5 },
                }),
            ),
            (
                r#"{"projectId":"p","ruleId":"r","what":"no_events","at":1700000000000}"#.to_owned(),
                Due::Silence(SilenceTimer {
                    project_id: "p".into(),
                    rule_id: "r".into(),
                    due_ms: 1_700_000_000_000,
                }),
            ),
        ];
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        for (wire, want) in cases {
            assert_eq!(Due::parse(wire.as_bytes()).as_ref(), Ok(&want), "{wire}");
            let msg = match &want {
                Due::Alert(t) => t.message(&topology),
                Due::Silence(t) => t.scheduled(&topology, 0).0,
            };
            assert_eq!(msg.queue, "ns.alerts.timer");
            assert_eq!(Due::parse(&msg.body), Ok(want));
        }
    }

    #[test]
    fn bad_timers_are_refused_with_a_reason() {
        let id = ALERT;
        let long = format!(
            r#"{{"projectId":"{}","alertId":"{id}","what":"resolve"}}"#,
            "p".repeat(2_000)
        );
        // (body, counted as a NO_EVENTS timer)
        let bad = [
            ("nope".to_owned(), false),
            (r#"{"projectId":"p"}"#.to_owned(), false),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"later"}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate"}}"#),
                false,
            ),
            (
                r#"{"projectId":"p","alertId":"../../etc","what":"resolve"}"#.to_owned(),
                false,
            ),
            (
                format!(r#"{{"projectId":"","alertId":"{id}","what":"resolve"}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p\n","alertId":"{id}","what":"resolve"}}"#),
                false,
            ),
            (long, false),
            // n past max, n 0, every below 1 s, max over 100, missing fields, step 0 and 6, strings, floats
            (
                format!(
                    r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":4,"every":60000,"max":3}}"#
                ),
                false,
            ),
            (
                format!(
                    r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":0,"every":60000,"max":3}}"#
                ),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1,"every":999,"max":3}}"#),
                false,
            ),
            (
                format!(
                    r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1,"every":60000,"max":101}}"#
                ),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":0}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":6}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":"1"}}"#),
                false,
            ),
            (
                format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":1.0}}"#),
                false,
            ),
            (r#"{"projectId":"p","what":"no_events","at":1}"#.to_owned(), true),
            (
                r#"{"projectId":"p","ruleId":"r","what":"no_events"}"#.to_owned(),
                true,
            ),
            (
                r#"{"projectId":"p","ruleId":"r","what":"no_events","at":-5}"#.to_owned(),
                true,
            ),
            (
                r#"{"projectId":"p\n","ruleId":"r","what":"no_events","at":1}"#.to_owned(),
                true,
            ),
            (
                r#"{"projectId":"","ruleId":"r","what":"no_events","at":1}"#.to_owned(),
                true,
            ),
        ];
        for (body, silence) in bad {
            let got = Due::parse(body.as_bytes());
            assert!(
                got.as_ref()
                    .is_err_and(|e| e.silence == silence && !e.reason.is_empty()),
                "{body}: {got:?}"
            );
        }
    }

    #[test]
    fn timers_are_scheduled_and_named() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let a = alert();
        let t = Timer::resolve(&a);
        // a timer due in the past is due at once; one in the future waits the difference
        assert_eq!(t.scheduled(&topology, 1_000, 5_000).1, Duration::ZERO);
        assert_eq!(
            t.scheduled(&topology, 7_500, 5_000).1,
            Duration::from_millis(2_500)
        );
        let renotify = Renotify {
            every_ms: 60_000,
            max: 3,
        };
        let (rem, due) = Timer::first_reminder(&a, &renotify).expect("a first reminder");
        assert_eq!(due, 10_000 + 60_000);
        // distinct message ids per reminder
        let (rem2, _) = Timer::reminder(&a, &renotify, 1).expect("2");
        assert_ne!(
            rem.message(&topology).message_id,
            rem2.message(&topology).message_id
        );
        let s = SilenceTimer {
            project_id: "5e3eef0679fa3700a0198a49".into(),
            rule_id: "5e3eef0679fa3700a0198a4a".into(),
            due_ms: 1_700_000_000_000,
        };
        let (msg, wait) = s.scheduled(&topology, 1_699_999_990_000);
        assert_eq!(wait, Duration::from_secs(10));
        assert_eq!(
            msg.message_id.as_deref(),
            Some("no-events-timer:5e3eef0679fa3700a0198a49:5e3eef0679fa3700a0198a4a:1700000000000")
        );
        assert_eq!(s.scheduled(&topology, 1_800_000_000_000).1, Duration::ZERO);
    }
}
