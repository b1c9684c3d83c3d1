//! What a due reminder or escalation step does with the alert it names, pure: send (and the next timer), be
//! silenced by a mute, or end the chain; and the tasks of an escalation step.

use klaxon_core::alert::{Alert, AlertChannel, AlertState};
use klaxon_core::notification::NotificationTask;
use klaxon_core::oncall::{EscalationStep, Renotify};
use klaxon_core::Reason;

use crate::timer::{Timer, TimerWhat};

/// What a due reminder or escalation does with the alert it names (read just now), pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OnCallDue {
    /// The alert is still `firing`: send (`remind` or `escalate`), then schedule the next timer if any.
    Send { next: Option<(Timer, i64)> },
    /// The alert is still `firing` but a mute matches its (rule, group) now: nothing is sent (and nothing
    /// later: a silenced reminder or step is not made up for), the chain goes on with the next timer.
    Muted { next: Option<(Timer, i64)> },
    /// Acknowledged, resolved or gone: the chain ends here. The outcome to count.
    Stop(&'static str),
}

impl OnCallDue {
    /// The decision under the mutes: a reminder or step that would be sent while a mute matches the alert's
    /// (rule, group) is silenced, like a firing (the design call in docs/rules.md "Mutes and on-call"); a
    /// stop stays a stop. Resolves never ask: a mute never keeps the resolve of what people saw.
    pub(crate) fn under_mute(self, muted: bool) -> OnCallDue {
        match self {
            OnCallDue::Send { next } if muted => OnCallDue::Muted { next },
            other => other,
        }
    }
}

/// The decision of a due reminder `timer` (`Remind`) for `alert`.
pub(crate) fn reminder_due(timer: &Timer, alert: Option<&Alert>) -> OnCallDue {
    let TimerWhat::Remind {
        number,
        every_ms,
        max,
    } = timer.what
    else {
        return OnCallDue::Stop("invalid");
    };
    match alert {
        None => OnCallDue::Stop("not_found"),
        Some(a) if a.state == AlertState::Firing => {
            let renotify = Renotify { every_ms, max };
            OnCallDue::Send {
                next: Timer::reminder(a, &renotify, number),
            }
        }
        Some(a) if a.state == AlertState::Acknowledged => OnCallDue::Stop("acknowledged"),
        Some(_) => OnCallDue::Stop("resolved"),
    }
}

/// The decision of a due escalation `timer` (`Escalate`) for `alert`, with the rule's steps now (`None`: the
/// rule was deleted since, or lost its escalation: stop).
pub(crate) fn escalation_due(
    timer: &Timer,
    alert: Option<&Alert>,
    steps: Option<&[EscalationStep]>,
) -> OnCallDue {
    let TimerWhat::Escalate { step } = timer.what else {
        return OnCallDue::Stop("invalid");
    };
    match alert {
        None => OnCallDue::Stop("not_found"),
        Some(a) if a.state == AlertState::Acknowledged => OnCallDue::Stop("acknowledged"),
        Some(a) if a.state != AlertState::Firing => OnCallDue::Stop("resolved"),
        Some(a) => match steps {
            Some(steps) if (step as usize) <= steps.len() => OnCallDue::Send {
                next: Timer::escalation(a, steps, step as usize),
            },
            _ => OnCallDue::Stop("rule_gone"),
        },
    }
}

/// The tasks of escalation step `step` (1-based) of `alert`: one per channel of that step, sent at once like
/// any lifecycle message (through the same senders: SSRF guard, caps, rate limits, dead letters). A channel
/// already in the alert's audience gets the message on its incident or thread; a new one gets its first message
/// (`first_id` its own id: PagerDuty triggers a new incident, an email starts its own thread), and the member to
/// record with the alert comes beside the task ([`NotificationTask::for_alert_member`]).
pub(crate) fn escalation_tasks(
    alert: &Alert,
    steps: &[EscalationStep],
    step: u32,
    at_ms: i64,
) -> Vec<(NotificationTask, Option<AlertChannel>)> {
    let Some(s) = (step as usize).checked_sub(1).and_then(|i| steps.get(i)) else {
        return Vec::new();
    };
    let reason = Reason::Escalation {
        step,
        steps: steps.len() as u32,
    };
    s.channels
        .iter()
        .map(|ch| {
            let channel = AlertChannel::of_rule(ch.kind, &ch.endpoint, ch.severity);
            NotificationTask::for_alert_member(alert, &channel, reason, at_ms)
        })
        .collect()
}
