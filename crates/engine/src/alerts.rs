//! Alerts in the engine: the worker opens them and counts events into them, the timer loop resolves them (and
//! fires NO_EVENTS silences, whose timers share its queue: [`crate::no_events`])
//! (`klaxon_core::alert` is the model, `klaxon_counter::alerts` the state in Redis).
//!
//! ```text
//! worker batch: every matched (event, rule) pair is a Touch, sent beside the counting (one round trip):
//!               it counts into the (rule, group)'s open alert, if any
//!               route ──▶ crossed firings (not muted) ──▶ Alerts::open ──▶ tasks carry `alert`
//!                                                         (then the firing pairs of the alerts opened now
//!                                                          are touched: they found none before)
//!               a new alert with resolveAfter > 0 ──▶ timer message ──delay engine──▶ <ns>.alerts.timer
//!                 (due at last event + resolveAfter)
//! timer loop: Alerts::resolve_due ──NotDue{at}──▶ the timer again, due at `at`
//!                                 ──Done / AlreadyResolved──▶ lifecycle tasks (Reason::Resolved), one per channel
//!                                    that delivered the firing ──publish, confirmed──▶ ack the timer
//!                                    (a channel in a quiet window: held into its release, crate::quiet; a
//!                                     channel with `minPeriod > 0`: through its digest, crate::digest)
//!                                 ──Never / NotFound──▶ ack
//! ```
//!
//! * **Once.** An alert's id derives from its firing (`alert_id`), so a redelivered batch or another worker
//!   finds the same alert (`Opened::Again`) and schedules its timer again: two timers of one alert are harmless,
//!   the second finds it resolved and publishes the same tasks, whose notification ids depend only on (alert,
//!   "resolved", channel), so the senders deliver each once. The timer is acked only after the resolved tasks
//!   were confirmed: a crash in between brings the timer back, `resolve_due` answers `AlreadyResolved`, and the
//!   same tasks are published again.
//! * **Muted rules still resolve.** A muted firing opens no alert, but an alert opened before the mute resolves
//!   as usual: a resolve timer never reads mutes. A due reminder or escalation step does: a mute that matches
//!   the alert silences it (nothing sent, the chain goes on; [`OnCallDue::under_mute`]).
//! * **Bounded.** A timer message is small JSON (at most [`TIMER_MAX_BYTES`]); anything else in the queue is set
//!   aside to `<ns>.dead` with the reason, never retried, never a reason to stop the loop.
//!
//! Fault injection (cargo feature `fault-injection`, tests only): [`Faults::crash_after_resolve`] aborts the
//! process right after `resolve_due` answered `Done`, before publishing (the kill-between-resolve-and-publish
//! test); [`Faults::crash_after_remind`] aborts it right after a reminder's messages were published, before the
//! next reminder is scheduled and the timer acked (the reminder-timer-redelivered test);
//! [`Faults::crash_after_no_events`] aborts it right after a NO_EVENTS timer claimed its firing, before
//! publishing (the NO_EVENTS fleet test). Without the feature the fields and the checks do not exist.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaxon_broker::{set_aside, Delivery, Outgoing, Publisher, Topology};
use klaxon_core::alert::{alert_id, is_alert_id, lifecycle_tasks, Alert, AlertChannel, AlertRef, AlertState};
use klaxon_core::evaluate::Match;
use klaxon_core::notification::{notification_id, Firing, NotificationTask};
use klaxon_core::oncall::{
    next_escalation, EscalationStep, Renotify, MAX_ESCALATION_STEPS, RENOTIFY_EVERY_MS, RENOTIFY_MAX,
};
use klaxon_core::{CompiledRule, Outcome, ProjectRules, Reason};
use klaxon_counter::{Alerts, Change, Opened, Touch};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::internal_events::{
    AlertNotOpened, AlertOpened, AlertResolved, AlertTimer, LogOnce, OnCallTimer, RedisFailed,
    RulesUnavailable,
};
use crate::{sink, EngineError};

/// The environment variable the binary reads into [`Faults::crash_after_resolve`] when built with the
/// `fault-injection` feature (see the module docs).
#[cfg(feature = "fault-injection")]
pub const CRASH_AFTER_RESOLVE_ENV: &str = "KLAXON_TEST_CRASH_AFTER_RESOLVE";

/// The environment variable the binary reads into [`Faults::crash_after_remind`] (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
pub const CRASH_AFTER_REMIND_ENV: &str = "KLAXON_TEST_CRASH_AFTER_REMIND";

/// The environment variable the binary reads into [`Faults::crash_after_no_events`] (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
pub const CRASH_AFTER_NO_EVENTS_ENV: &str = "KLAXON_TEST_CRASH_AFTER_NO_EVENTS";

/// Faults a test can inject into the timer loop (feature `fault-injection`; never in production builds).
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Abort the process right after a timer resolved an alert, before its resolved messages are published.
    pub crash_after_resolve: bool,
    /// Abort the process right after a reminder's messages were published, before the next reminder is
    /// scheduled and the timer acked.
    pub crash_after_remind: bool,
    /// Abort the process right after a NO_EVENTS timer claimed its firing (and opened its alert, held or
    /// appended its tasks), before its messages are published and the timer acked.
    pub crash_after_no_events: bool,
}

/// The largest timer message the loop reads; a longer body is set aside unread.
pub const TIMER_MAX_BYTES: usize = 1_024;

/// The longest project id a timer may name (project ids are 24 hex characters; this leaves room, not abuse).
const PROJECT_ID_MAX: usize = 128;

/// What a timer asks for when it is due.
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

/// One alert timer: `{"projectId", "alertId", "what"}` in `<ns>.alerts.timer`, through the delay engine; a
/// reminder adds `"n"`, `"every"` and `"max"`, an escalation `"step"`.
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

    fn to_json(&self) -> Vec<u8> {
        let mut v =
            json!({"projectId": self.project_id, "alertId": self.alert_id, "what": self.what.as_str()});
        match self.what {
            TimerWhat::Resolve => {}
            TimerWhat::Remind {
                number,
                every_ms,
                max,
            } => {
                v["n"] = json!(number);
                v["every"] = json!(every_ms);
                v["max"] = json!(max);
            }
            TimerWhat::Escalate { step } => v["step"] = json!(step),
        }
        v.to_string().into_bytes()
    }

    /// Reads a timer message; the reason when it is not one.
    pub fn parse(body: &[u8]) -> Result<Timer, String> {
        if body.len() > TIMER_MAX_BYTES {
            return Err(format!("{} bytes, more than {TIMER_MAX_BYTES}", body.len()));
        }
        let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("missing string `{k}`"))
        };
        let n = |k: &str, range: std::ops::RangeInclusive<u64>| {
            v.get(k)
                .and_then(Value::as_u64)
                .filter(|n| range.contains(n))
                .ok_or_else(|| format!("`{k}` is missing or not in {}..={}", range.start(), range.end()))
        };
        let project_id = s("projectId")?;
        if project_id.is_empty()
            || project_id.len() > PROJECT_ID_MAX
            || project_id.chars().any(char::is_control)
        {
            return Err("`projectId` is empty, too long or has control characters".into());
        }
        let alert_id = s("alertId")?;
        if !is_alert_id(alert_id) {
            return Err("`alertId` is not an alert id (24 lowercase hex characters)".into());
        }
        let what = match s("what")? {
            "resolve" => TimerWhat::Resolve,
            "remind" => {
                let max = n("max", RENOTIFY_MAX)?;
                TimerWhat::Remind {
                    number: n("n", 1..=max)? as u32,
                    every_ms: n("every", RENOTIFY_EVERY_MS)?,
                    max: max as u32,
                }
            }
            "escalate" => TimerWhat::Escalate {
                step: n("step", 1..=MAX_ESCALATION_STEPS as u64)? as u32,
            },
            _ => return Err("unknown `what` (expected `resolve`, `remind` or `escalate`)".to_owned()),
        };
        Ok(Timer {
            project_id: project_id.to_owned(),
            alert_id: alert_id.to_owned(),
            what,
        })
    }

    /// The message of this timer (its `message_id` names the alert and what is due).
    pub fn message(&self, topology: &Topology) -> Outgoing {
        let mut msg = Outgoing::json(topology.alerts_timer_queue(), self.to_json());
        let what = match self.what {
            TimerWhat::Resolve => "resolve".to_owned(),
            TimerWhat::Remind { number, .. } => format!("remind:{number}"),
            TimerWhat::Escalate { step } => format!("escalate:{step}"),
        };
        msg.message_id = Some(format!("alert-timer:{}:{what}", self.alert_id));
        msg
    }

    /// The message of this timer and how long it waits to be due at `due_ms` (unix ms), seen at `now_ms`.
    pub fn scheduled(&self, topology: &Topology, due_ms: i64, now_ms: i64) -> (Outgoing, Duration) {
        let wait = u64::try_from(due_ms.saturating_sub(now_ms)).unwrap_or(0);
        (self.message(topology), Duration::from_millis(wait))
    }

    /// The first reminder timer of `alert` under `renotify`, and when it is due (opened + every).
    pub fn first_reminder(alert: &Alert, renotify: &Renotify) -> Option<(Timer, i64)> {
        Timer::reminder(alert, renotify, 0)
    }

    /// The reminder after `sent` reminders of `alert`, and when it is due; `None` once `max` were sent.
    fn reminder(alert: &Alert, renotify: &Renotify, sent: u32) -> Option<(Timer, i64)> {
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

/// What a rule says, when its alert opens, about the reminders and escalations to come: carried to
/// [`after_open`] next to the alert (the alert itself keeps no on-call fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnCall {
    /// `renotify`.
    pub renotify: Option<Renotify>,
    /// `escalation` (only their `after` matters at open; a step's channels are read from the rule when due).
    pub escalation: Vec<EscalationStep>,
}

impl OnCall {
    /// The on-call fields of `rule`.
    pub fn of(rule: &CompiledRule) -> OnCall {
        OnCall {
            renotify: rule.renotify,
            escalation: rule.escalation.clone(),
        }
    }

    /// The timers an alert opened now starts: its first reminder and its first escalation step.
    fn first_timers(&self, alert: &Alert) -> Vec<(Timer, i64)> {
        let reminder = self
            .renotify
            .as_ref()
            .and_then(|r| Timer::first_reminder(alert, r));
        let step = Timer::escalation(alert, &self.escalation, 0);
        reminder.into_iter().chain(step).collect()
    }
}

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

/// The alert a crossed (not muted) firing opens, as it would open: state firing, no events yet (its own event is
/// counted by its [`Touch`]), the rule's channels (every channel the firing is routed to, digest channels too).
pub fn alert_of(f: &Firing<'_>) -> Alert {
    let (project, rule, event) = (&f.task.project_id, f.rule, &f.task.event);
    Alert {
        id: alert_id(project, &rule.id, &event.group_hash, f.firing),
        project_id: project.clone(),
        project_name: f.project_name.map(str::to_owned),
        rule_id: rule.id.clone(),
        group: event.group_hash.clone(),
        title: event.title.clone(),
        state: AlertState::Firing,
        firing: f.firing.to_owned(),
        fired_at_ms: f.at_ms,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 0,
        last_event_at_ms: f.at_ms,
        resolve_after_ms: rule.resolve_after_ms,
        channels: rule
            .channels
            .iter()
            .map(|ch| AlertChannel {
                channel: ch.kind,
                endpoint: ch.endpoint.clone(),
                severity: ch.severity,
            })
            .collect(),
    }
}

/// Every matched (event, rule) pair of a batch as a [`Touch`] of one event at `now_ms` (this process's clock: a
/// skew between workers moves a resolve by at most that skew): it counts into the (rule, group)'s open alert and
/// keeps it from resolving. Sent beside the counting, in the same round trip: a pair whose alert opens in this
/// batch finds none yet and is counted once it is open ([`fired_touches`], [`open_for_batch`]).
pub fn touches<'a>(matches: &[Match<'a>], now_ms: i64) -> Vec<Touch<'a>> {
    matches.iter().map(|m| touch(m, now_ms)).collect()
}

/// The touches of the pairs that fired, at their firing's time: what a new alert counts once it is open.
pub fn fired_touches<'a>(matches: &[Match<'a>], outcomes: &[Outcome]) -> Vec<Touch<'a>> {
    matches
        .iter()
        .zip(outcomes)
        .filter_map(|(m, o)| match o {
            Outcome::Fired { at_ms, .. } => Some(touch(m, *at_ms)),
            Outcome::Counted { .. } => None,
        })
        .collect()
}

/// One matched (event, rule) pair as a [`Touch`] of one event at `at_ms`.
fn touch<'a>(m: &Match<'a>, at_ms: i64) -> Touch<'a> {
    Touch {
        project_id: &m.event.task.project_id,
        rule_id: &m.rule.id,
        group: &m.event.task.event.group_hash,
        events: 1,
        at_ms,
    }
}

/// The alerts `answers` opened now (not found again, not repeated).
fn opened_now(answers: &[Opened]) -> Vec<&Alert> {
    answers
        .iter()
        .filter_map(|o| match o {
            Opened::New(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// What the alerts' answers mean for a batch, pure: each firing task gets the alert its firing opened or repeats
/// (`task.alert`), and every alert that opened now (or again, for a redelivered batch) with a `resolveAfter`
/// gets a resolve timer, due `resolveAfter` after its last event.
pub(crate) struct AfterOpen {
    /// Resolve timers to publish through the delay engine, with their delays.
    pub timers: Vec<(Outgoing, Duration)>,
    /// The firings no alert opened for: the project keeps as many alerts as it may, all open.
    pub full: Vec<Alert>,
    /// Alerts opened now.
    pub opened: usize,
}

/// Sets `alert` on the tasks of `firings` (each with its `opened` answer, in order) and says which timers to
/// schedule.
pub(crate) fn after_open<'t>(
    topology: &Topology,
    answers: impl IntoIterator<Item = (Alert, Opened, OnCall)>,
    tasks: impl IntoIterator<Item = &'t mut NotificationTask>,
    now_ms: i64,
) -> AfterOpen {
    let mut out = AfterOpen {
        timers: Vec::new(),
        full: Vec::new(),
        opened: 0,
    };
    // a firing task's notification id → the alert of its firing
    let mut by_task: HashMap<String, Alert> = HashMap::new();
    for (wanted, answer, oncall) in answers {
        let schedule = match &answer {
            Opened::New(_) => {
                out.opened += 1;
                true
            }
            Opened::Again(_) => true,
            Opened::Repeat(_) => false,
            Opened::Full => {
                out.full.push(wanted);
                continue;
            }
        };
        let Some(alert) = answer.alert() else { continue };
        if schedule && alert.resolve_after_ms > 0 {
            let due = alert
                .last_event_at_ms
                .saturating_add(alert.resolve_after_ms as i64);
            out.timers
                .push(Timer::resolve(alert).scheduled(topology, due, now_ms));
        }
        if schedule {
            for (timer, due) in oncall.first_timers(alert) {
                out.timers.push(timer.scheduled(topology, due, now_ms));
            }
        }
        for ch in &wanted.channels {
            let id = notification_id(
                &wanted.project_id,
                &wanted.rule_id,
                &wanted.group,
                &wanted.firing,
                ch.channel,
            );
            by_task.insert(id, alert.clone());
        }
    }
    for task in tasks {
        if let Some(alert) = by_task.get(&task.notification_id) {
            task.alert = Some(AlertRef::of_firing(alert, task.channel));
        }
    }
    out
}

/// What the alert timer loop needs.
#[derive(Clone)]
pub struct TimerDeps {
    /// RabbitMQ URL.
    pub amqp_url: String,
    /// Queue names.
    pub topology: Topology,
    /// Alert state in Redis.
    pub alerts: Alerts,
    /// Quiet-hours holds and digests in Redis: a resolve or a reminder inside a quiet window is held into its
    /// release; a resolve on a channel with `minPeriod > 0` goes through the channel's digest.
    pub digests: klaxon_counter::Digests,
    /// Rules, cached: an escalation step's channels are read from the rule when the step is due, and a
    /// rule's quiet hours (and, for a resolve, its channels' `minPeriod`) when a resolve or reminder is.
    pub rules: klaxon_store::RuleCache,
    /// Mutes: a due reminder or step of a muted (rule, group) is silenced ([`OnCallDue::under_mute`]).
    pub mutes: klaxon_counter::Mutes,
    /// Unacked timer messages.
    pub prefetch: u16,
    /// Where resolved messages go (`--output`).
    pub output: sink::Output,
    /// Where shadow mode records what it would have sent ([`klaxon_store::Trail::disabled`] otherwise).
    pub trail: klaxon_store::Trail,
    /// NO_EVENTS: its timers share this loop ([`crate::no_events`]).
    pub no_events: crate::no_events::SilenceDeps,
    /// Injected faults (tests only).
    #[cfg(feature = "fault-injection")]
    pub faults: Faults,
}

impl TimerDeps {
    /// Where the timer loop's notifications leave.
    pub(crate) fn outbox(&self) -> crate::outbox::Outbox<'_> {
        crate::outbox::Outbox {
            topology: &self.topology,
            output: self.output,
            trail: &self.trail,
            digests: &self.digests,
        }
    }
}

/// Runs the alert timer loop until `shutdown`, reconnecting after failures.
pub async fn run(deps: TimerDeps, ready: Arc<AtomicBool>, shutdown: CancellationToken) {
    #[cfg(feature = "fault-injection")]
    if deps.faults.crash_after_resolve {
        tracing::warn!(
            env = CRASH_AFTER_RESOLVE_ENV,
            "test hook on: the process aborts after its first resolve"
        );
    }
    #[cfg(feature = "fault-injection")]
    if deps.faults.crash_after_remind {
        tracing::warn!(
            env = CRASH_AFTER_REMIND_ENV,
            "test hook on: the process aborts after its first reminder's messages"
        );
    }
    #[cfg(feature = "fault-injection")]
    if deps.faults.crash_after_no_events {
        tracing::warn!(
            env = CRASH_AFTER_NO_EVENTS_ENV,
            "test hook on: the process aborts after its first NO_EVENTS firing's claim"
        );
    }
    crate::supervise("alerts", ready, shutdown, |ready, shutdown| {
        let deps = deps.clone();
        async move { session(&deps, ready, shutdown).await }
    })
    .await;
}

async fn session(
    deps: &TimerDeps,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> Result<(), EngineError> {
    let queue = crate::EachQueue {
        role: "alerts",
        amqp_url: &deps.amqp_url,
        topology: &deps.topology,
        queue: deps.topology.alerts_timer_queue(),
        prefetch: deps.prefetch,
        output: deps.output,
    };
    crate::consume_each(queue, ready, shutdown, deps).await
}

impl crate::HandleEach for TimerDeps {
    fn handle<'a>(
        &'a self,
        publisher: &'a Publisher,
        delivery: &'a Delivery,
    ) -> impl std::future::Future<Output = Result<(), EngineError>> + Send + 'a {
        due(self, publisher, delivery)
    }
}

/// Handles one due timer; returns once its outcome is durable (then the caller acks it).
async fn due(deps: &TimerDeps, publisher: &Publisher, delivery: &Delivery) -> Result<(), EngineError> {
    match crate::no_events::SilenceTimer::recognise(&delivery.data) {
        Some(Ok(t)) => return crate::no_events::due(deps, publisher, &t, delivery.redelivered).await,
        Some(Err(reason)) => {
            let reason = format!("not a NO_EVENTS timer: {reason}");
            crate::internal_events::NoEventsTimer {
                outcome: "invalid",
                timer: None,
            }
            .emit();
            tracing::warn!(reason = %reason, bytes = delivery.data.len(), "NO_EVENTS timer set aside");
            publisher
                .publish_all(&[set_aside(delivery, deps.topology.dead_queue(), &reason)])
                .await?;
            return Ok(());
        }
        None => {}
    }
    let timer = match Timer::parse(&delivery.data) {
        Ok(t) => t,
        Err(reason) => {
            let reason = format!("not an alert timer: {reason}");
            AlertTimer {
                outcome: "invalid",
                timer: None,
            }
            .emit();
            tracing::warn!(reason = %reason, bytes = delivery.data.len(), "alert timer set aside");
            publisher
                .publish_all(&[set_aside(delivery, deps.topology.dead_queue(), &reason)])
                .await?;
            return Ok(());
        }
    };
    if timer.what != TimerWhat::Resolve {
        return on_call_due(deps, publisher, &timer).await;
    }
    let change = deps
        .alerts
        .resolve_due(&timer.project_id, &timer.alert_id, None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let (outcome, alert) = match change {
        Change::NotDue { at_ms } => {
            let next = timer.scheduled(&deps.topology, at_ms, klaxon_store::trail::now_ms());
            AlertTimer {
                outcome: "rescheduled",
                timer: Some(&timer),
            }
            .emit();
            publisher.publish_delayed(&deps.topology.delay(), &[next]).await?;
            return Ok(());
        }
        Change::Done(alert) => {
            #[cfg(feature = "fault-injection")]
            if deps.faults.crash_after_resolve {
                tracing::error!(
                    env = CRASH_AFTER_RESOLVE_ENV,
                    "test hook: aborting between resolve and publish"
                );
                std::process::abort();
            }
            ("resolved", alert)
        }
        Change::AlreadyResolved(alert) => ("already_resolved", alert),
        // `resolveAfter: 0` (an acknowledgement is never the timer's answer; counted alike)
        Change::Never(_) | Change::AlreadyAcknowledged(_) => {
            AlertTimer {
                outcome: "never",
                timer: Some(&timer),
            }
            .emit();
            return Ok(());
        }
        // expired, or never was (its project's alerts were deleted, Redis restarted empty)
        Change::NotFound => {
            AlertTimer {
                outcome: "not_found",
                timer: Some(&timer),
            }
            .emit();
            return Ok(());
        }
    };
    // Resolved now or before (a redelivered timer, or a resolve by hand): the same tasks, the same ids, so the
    // senders deliver each once. Each goes where the rule as it is now says (klaxon_core::route): inside a quiet
    // window held into its release (a redelivered timer holds nothing twice, one whose window ended meanwhile is
    // sent), outside it through the channel's digest when it has a period, else now.
    let at_ms = alert.resolved_at_ms.unwrap_or_else(klaxon_store::trail::now_ms);
    let tasks = lifecycle_tasks(&alert, Reason::Resolved, at_ms);
    let channels = tasks.len();
    let rules = rules_of(deps, &alert).await?;
    let outbox = deps.outbox();
    let mut post = outbox.post();
    post.route_all(tasks, rules.rules.iter().find(|r| r.id == alert.rule_id), at_ms);
    outbox.send(publisher, post).await?;
    AlertTimer {
        outcome,
        timer: Some(&timer),
    }
    .emit();
    if outcome == "resolved" {
        AlertResolved {
            alert: &alert,
            by: "timeout",
            channels,
        }
        .emit();
    }
    Ok(())
}

/// Handles one due reminder or escalation: reads the alert (and, for an escalation, the rule's steps through the
/// rule cache); if it is still `firing`, publishes the messages (ids from (alert, reminder n / step, channel): a
/// redelivered timer or a second chain sends nothing twice), then schedules the next timer; otherwise the chain
/// ends. Returns once that is durable.
async fn on_call_due(deps: &TimerDeps, publisher: &Publisher, timer: &Timer) -> Result<(), EngineError> {
    let alert = deps
        .alerts
        .get(&timer.project_id, &timer.alert_id)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let now_ms = klaxon_store::trail::now_ms();
    let (decision, tasks) = match (timer.what, &alert) {
        (TimerWhat::Remind { number, max, .. }, _) => {
            let d = reminder_due(timer, alert.as_ref());
            let tasks = match (&d, &alert) {
                (OnCallDue::Send { .. }, Some(a)) => {
                    lifecycle_tasks(a, Reason::Reminder { number, max }, now_ms)
                }
                _ => Vec::new(),
            };
            (d, tasks)
        }
        (TimerWhat::Escalate { step }, Some(a)) if a.state == AlertState::Firing => {
            let rules = deps
                .rules
                .get(&timer.project_id)
                .await
                .inspect_err(|_| RulesUnavailable.emit())?;
            // a rule deleted or switched off since stops its escalation
            let steps = rules.enabled_rule(&a.rule_id).map(|r| &r.escalation[..]);
            let d = escalation_due(timer, Some(a), steps);
            let tasks = match (&d, steps) {
                (OnCallDue::Send { .. }, Some(steps)) => escalation_tasks(a, steps, step, now_ms),
                _ => Vec::new(),
            };
            (d, tasks)
        }
        (TimerWhat::Escalate { .. }, _) => (escalation_due(timer, alert.as_ref(), None), Vec::new()),
        (TimerWhat::Resolve, _) => return Ok(()),
    };
    // a mute silences what would be sent (one read of the project's mutes, only then)
    let decision = match (&decision, &alert) {
        (OnCallDue::Send { .. }, Some(a)) => {
            let muted = muted(deps, a, now_ms).await?;
            decision.under_mute(muted)
        }
        _ => decision,
    };
    let next = match decision {
        OnCallDue::Stop(outcome) => {
            OnCallTimer {
                timer,
                outcome,
                channels: 0,
            }
            .emit();
            return Ok(());
        }
        OnCallDue::Muted { next } => {
            if let Some((next, due)) = next {
                let msg = next.scheduled(&deps.topology, due, now_ms);
                publisher.publish_delayed(&deps.topology.delay(), &[msg]).await?;
            }
            OnCallTimer {
                timer,
                outcome: "muted",
                channels: 0,
            }
            .emit();
            return Ok(());
        }
        OnCallDue::Send { next } => next,
    };
    // each task goes where the rule as it is now says (klaxon_core::route): a rule deleted, switched off or
    // without the channel sends nothing; inside a quiet window a reminder is held into the window's release, an
    // escalation step is sent to its bypassed channels now and deferred for the others to the window's end
    let rules = match &alert {
        Some(a) if !tasks.is_empty() => Some((a, rules_of(deps, a).await?)),
        _ => None,
    };
    let rule = rules
        .as_ref()
        .and_then(|(a, rules)| rules.rules.iter().find(|r| r.id == a.rule_id));
    let outbox = deps.outbox();
    let mut post = outbox.post();
    let filed = post.route_all(tasks, rule, now_ms);
    let deferred = post.deferred_until();
    let outcome = match (filed.rule_reason, filed.sent) {
        // the rule no longer sends this chain: it ends here
        (Some(reason), 0) if deferred.is_none() => reason,
        _ if deferred.is_some() => "deferred",
        _ => "sent",
    };
    if let Some(until) = deferred {
        // the same step again when the quiet ends: the next one is scheduled then
        post.after(timer.scheduled(&deps.topology, until, now_ms));
    } else if let (Some((next, due)), "sent") = (next, outcome) {
        post.after(next.scheduled(&deps.topology, due, now_ms));
    }
    let crash = || {
        #[cfg(feature = "fault-injection")]
        if deps.faults.crash_after_remind && matches!(timer.what, TimerWhat::Remind { .. }) {
            tracing::error!(
                env = CRASH_AFTER_REMIND_ENV,
                "test hook: aborting between a reminder's messages and its next timer"
            );
            std::process::abort();
        }
    };
    outbox.send_with(publisher, post, || {}, crash).await?;
    OnCallTimer {
        timer,
        outcome,
        channels: filed.sent,
    }
    .emit();
    Ok(())
}

/// The rules of `alert`'s project now (through the rule cache): its rule's quiet hours and its channels' digest
/// periods decide where its lifecycle messages go; a rule deleted or switched off since sends them at once.
async fn rules_of(deps: &TimerDeps, alert: &Alert) -> Result<Arc<ProjectRules>, EngineError> {
    let rules = deps.rules.get(&alert.project_id).await;
    Ok(rules.inspect_err(|_| RulesUnavailable.emit())?)
}

/// Whether a mute matches `alert`'s (rule, group) at `now_ms` (the project's mutes, at most the limit, as the
/// worker reads them for a firing).
async fn muted(deps: &TimerDeps, alert: &Alert, now_ms: i64) -> Result<bool, EngineError> {
    let read = deps
        .mutes
        .of_projects(&[alert.project_id.as_str()])
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    Ok(read
        .get(&alert.project_id)
        .is_some_and(|r| klaxon_core::mute::is_muted(&r.mutes, &alert.rule_id, &alert.group, now_ms)))
}

/// The tasks of escalation step `step` (1-based) of `alert`: one per channel of that step, sent at once like
/// any lifecycle message (through the same senders: SSRF guard, caps, rate limits, dead letters).
pub(crate) fn escalation_tasks(
    alert: &Alert,
    steps: &[EscalationStep],
    step: u32,
    at_ms: i64,
) -> Vec<NotificationTask> {
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
            let channel = AlertChannel {
                channel: ch.kind,
                endpoint: ch.endpoint.clone(),
                severity: ch.severity,
            };
            NotificationTask::for_alert(alert, &channel, reason, at_ms)
        })
        .collect()
}

/// The worker's side, after the batch's early touch ([`touches`], sent beside the counting: the events of a
/// (rule, group) whose alert is open are counted there): opens the alerts of the crossed firings, counts the
/// firing events of the alerts that opened now (new: the early touch found none to count into; `fired`: the
/// crossed pairs' touches), sets `alert` on the firing tasks, and returns the resolve timers to schedule. One
/// Redis round trip for the opens, one more only when an alert opened; none without crossings.
pub(crate) async fn open_for_batch<'t>(
    alerts: &Alerts,
    topology: &Topology,
    full_log: &LogOnce,
    crossed: &[Firing<'_>],
    fired: &[Touch<'_>],
    tasks: impl IntoIterator<Item = &'t mut NotificationTask>,
    now_ms: i64,
) -> Result<Vec<(Outgoing, Duration)>, EngineError> {
    if crossed.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: Vec<Alert> = crossed.iter().map(alert_of).collect();
    let answers = alerts
        .open(&wanted, None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let opened_now = opened_now(&answers);
    for a in &opened_now {
        AlertOpened { alert: a }.emit();
    }
    let late: Vec<Touch<'_>> = fired
        .iter()
        .filter(|t| {
            opened_now
                .iter()
                .any(|a| a.project_id == t.project_id && a.rule_id == t.rule_id && a.group == t.group)
        })
        .copied()
        .collect();
    if !late.is_empty() {
        alerts.touch(&late).await.inspect_err(|_| RedisFailed.emit())?;
    }
    let oncall = crossed.iter().map(|f| OnCall::of(f.rule));
    let answers = wanted
        .into_iter()
        .zip(answers)
        .zip(oncall)
        .map(|((w, a), o)| (w, a, o));
    let after = after_open(topology, answers, tasks, now_ms);
    let now = Instant::now();
    for a in &after.full {
        AlertNotOpened {
            project: &a.project_id,
            rule: &a.rule_id,
            limit: alerts.limit(),
            log: full_log.should_log(&a.project_id, now),
        }
        .emit();
    }
    Ok(after.timers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;
    use klaxon_core::ChannelKind;

    fn alert(id_firing: &str, resolve_after_ms: u64) -> Alert {
        Alert {
            id: alert_id("p", "r", "g", id_firing),
            project_id: "p".into(),
            project_name: None,
            rule_id: "r".into(),
            group: "g".into(),
            title: "t".into(),
            state: AlertState::Firing,
            firing: id_firing.into(),
            fired_at_ms: 10_000,
            acknowledged_at_ms: None,
            acknowledged_by: None,
            resolved_at_ms: None,
            resolved_by: None,
            events: 0,
            last_event_at_ms: 10_000,
            resolve_after_ms,
            channels: vec![
                AlertChannel {
                    channel: ChannelKind::Webhook,
                    endpoint: "https://example.test/h".into(),
                    severity: None,
                },
                AlertChannel {
                    channel: ChannelKind::Pagerduty,
                    endpoint: "key".into(),
                    severity: None,
                },
            ],
        }
    }

    fn task(firing: &str, channel: ChannelKind) -> NotificationTask {
        let a = alert(firing, 0);
        let ch = a
            .channels
            .iter()
            .find(|c| c.channel == channel)
            .cloned()
            .expect("a channel of the alert");
        let mut t = NotificationTask::for_alert(&a, &ch, Reason::Resolved, 0);
        t.notification_id = notification_id("p", "r", "g", firing, channel);
        t.alert = None;
        t
    }

    #[test]
    fn timer_messages_round_trip_and_bad_ones_are_refused() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let t = Timer::resolve(&alert("1000", 5_000));
        let msg = t.message(&topology);
        assert_eq!(msg.queue, "ns.alerts.timer");
        assert_eq!(Timer::parse(&msg.body), Ok(t.clone()));
        let id = t.alert_id.clone();
        let long = format!(
            r#"{{"projectId":"{}","alertId":"{id}","what":"resolve"}}"#,
            "p".repeat(2_000)
        );
        let control = format!(r#"{{"projectId":"p\n","alertId":"{id}","what":"resolve"}}"#);
        let bad = [
            "nope".to_owned(),
            r#"{"projectId":"p"}"#.to_owned(),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate"}}"#),
            r#"{"projectId":"p","alertId":"../../etc","what":"resolve"}"#.to_owned(),
            format!(r#"{{"projectId":"","alertId":"{id}","what":"resolve"}}"#),
            control,
            long,
        ];
        for body in bad {
            assert!(Timer::parse(body.as_bytes()).is_err(), "{body}");
        }
        // a timer due in the past is due at once; one in the future waits the difference
        assert_eq!(t.scheduled(&topology, 1_000, 5_000).1, Duration::ZERO);
        assert_eq!(
            t.scheduled(&topology, 7_500, 5_000).1,
            Duration::from_millis(2_500)
        );
    }

    /// What the alerts' answers make of a batch: which tasks carry which alert, which timers are scheduled.
    #[test]
    fn after_open_table() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let (a, b) = (alert("1000", 5_000), alert("2000", 0));
        let mut repeated = alert("500", 5_000);
        repeated.last_event_at_ms = 12_000;
        // (answers as (wanted, opened), timers' delays in ms, full, opened now, alert id on the tasks of firing
        // "1000" and of firing "2000")
        type Case = (
            Vec<(Alert, Opened)>,
            Vec<u64>,
            usize,
            usize,
            Option<String>,
            Option<String>,
        );
        let cases: Vec<Case> = vec![
            (vec![], vec![], 0, 0, None, None),
            // a new alert with resolveAfter: a timer due 5 s after its last event; one without: none
            (
                vec![
                    (a.clone(), Opened::New(a.clone())),
                    (b.clone(), Opened::New(b.clone())),
                ],
                vec![4_000],
                0,
                2,
                Some(a.id.clone()),
                Some(b.id.clone()),
            ),
            // the same firing again (a redelivered batch): the timer again, nothing opened now
            (
                vec![(a.clone(), Opened::Again(a.clone()))],
                vec![4_000],
                0,
                0,
                Some(a.id.clone()),
                None,
            ),
            // another firing while an alert is open: its tasks carry the open alert, whose timer runs already
            (
                vec![(a.clone(), Opened::Repeat(repeated.clone()))],
                vec![],
                0,
                0,
                Some(repeated.id.clone()),
                None,
            ),
            // the project is full: delivered without an alert
            (vec![(a.clone(), Opened::Full)], vec![], 1, 0, None, None),
        ];
        for (answers, delays, full, opened, on_a, on_b) in cases {
            let mut tasks = vec![
                task("1000", ChannelKind::Webhook),
                task("1000", ChannelKind::Pagerduty),
                task("2000", ChannelKind::Webhook),
            ];
            let with_oncall = answers
                .iter()
                .map(|(w, o)| (w.clone(), o.clone(), OnCall::default()));
            let got = after_open(&topology, with_oncall, tasks.iter_mut(), 11_000);
            let waits: Vec<u64> = got.timers.iter().map(|(_, d)| d.as_millis() as u64).collect();
            assert_eq!(waits, delays, "{answers:?}");
            assert_eq!((got.full.len(), got.opened), (full, opened), "{answers:?}");
            let ids: Vec<Option<String>> = tasks
                .iter()
                .map(|t| t.alert.as_ref().map(|r| r.id.clone()))
                .collect();
            assert_eq!(ids, vec![on_a.clone(), on_a.clone(), on_b.clone()], "{answers:?}");
            for t in &tasks {
                if let Some(r) = &t.alert {
                    // the alert's first firing on this channel: PagerDuty's dedup_key, the email to reply to
                    let firing = if r.id == repeated.id { "500" } else { &r.id[..0] };
                    let want = if firing.is_empty() {
                        t.notification_id.clone()
                    } else {
                        notification_id("p", "r", "g", firing, t.channel)
                    };
                    assert_eq!(r.firing_notification_id, want);
                    assert_eq!(r.state, AlertState::Firing);
                }
            }
            for (msg, _) in &got.timers {
                assert_eq!(Timer::parse(&msg.body).map(|t| t.alert_id), Ok(a.id.clone()));
            }
        }
    }

    fn step(after_ms: u64, url: &str) -> EscalationStep {
        EscalationStep {
            after_ms,
            channels: vec![klaxon_core::ChannelConfig {
                kind: ChannelKind::Webhook,
                endpoint: url.into(),
                min_period_s: 0,
                severity: None,
            }],
        }
    }

    #[test]
    fn on_call_timers_round_trip_and_bad_ones_are_refused() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let a = alert("1000", 0);
        let renotify = Renotify {
            every_ms: 60_000,
            max: 3,
        };
        let (rem, due) = Timer::first_reminder(&a, &renotify).expect("a first reminder");
        assert_eq!(due, 10_000 + 60_000);
        assert_eq!(
            rem.what,
            TimerWhat::Remind {
                number: 1,
                every_ms: 60_000,
                max: 3
            }
        );
        let steps = [step(5_000, "https://a.test"), step(9_000, "https://b.test")];
        let (esc, due) = Timer::escalation(&a, &steps, 1).expect("step 2");
        assert_eq!((esc.what, due), (TimerWhat::Escalate { step: 2 }, 19_000));
        assert!(Timer::escalation(&a, &steps, 2).is_none());
        for t in [&rem, &esc] {
            let msg = t.message(&topology);
            assert_eq!(Timer::parse(&msg.body).as_ref(), Ok(t));
        }
        // distinct message ids per reminder / step
        assert_ne!(
            rem.message(&topology).message_id,
            Timer::reminder(&a, &renotify, 1)
                .expect("2")
                .0
                .message(&topology)
                .message_id
        );
        let id = &a.id;
        let bad = [
            // n past max, n 0, every below 1 s, max over 100, missing fields, step 0 and 6, strings
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":4,"every":60000,"max":3}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":0,"every":60000,"max":3}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1,"every":999,"max":3}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1,"every":60000,"max":101}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"remind","n":1}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":0}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":6}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate","step":"1"}}"#),
            format!(r#"{{"projectId":"p","alertId":"{id}","what":"escalate"}}"#),
        ];
        for body in bad {
            assert!(Timer::parse(body.as_bytes()).is_err(), "{body}");
        }
    }

    /// What a due reminder or escalation does, by the alert's state (and the rule's steps now).
    #[test]
    fn on_call_decisions() {
        let firing = alert("1000", 0);
        let mut acked = firing.clone();
        acked.state = AlertState::Acknowledged;
        let mut resolved = firing.clone();
        resolved.state = AlertState::Resolved;
        let remind = |number| Timer {
            project_id: "p".into(),
            alert_id: firing.id.clone(),
            what: TimerWhat::Remind {
                number,
                every_ms: 1_000,
                max: 2,
            },
        };
        // reminder 1 of 2: send, then reminder 2 at opened + 2 s; reminder 2: send, no next
        match reminder_due(&remind(1), Some(&firing)) {
            OnCallDue::Send { next: Some((t, at)) } => {
                assert_eq!(at, 12_000);
                assert!(matches!(t.what, TimerWhat::Remind { number: 2, .. }));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            reminder_due(&remind(2), Some(&firing)),
            OnCallDue::Send { next: None }
        );
        assert_eq!(
            reminder_due(&remind(1), Some(&acked)),
            OnCallDue::Stop("acknowledged")
        );
        assert_eq!(
            reminder_due(&remind(1), Some(&resolved)),
            OnCallDue::Stop("resolved")
        );
        assert_eq!(reminder_due(&remind(1), None), OnCallDue::Stop("not_found"));

        let steps = [step(5_000, "https://a.test"), step(9_000, "https://b.test")];
        let esc = |step| Timer {
            what: TimerWhat::Escalate { step },
            ..remind(1)
        };
        match escalation_due(&esc(1), Some(&firing), Some(&steps)) {
            OnCallDue::Send { next: Some((t, at)) } => {
                assert_eq!((t.what, at), (TimerWhat::Escalate { step: 2 }, 19_000));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            escalation_due(&esc(2), Some(&firing), Some(&steps)),
            OnCallDue::Send { next: None }
        );
        // the rule lost the step, or is gone: stop
        assert_eq!(
            escalation_due(&esc(2), Some(&firing), Some(&steps[..1])),
            OnCallDue::Stop("rule_gone")
        );
        assert_eq!(
            escalation_due(&esc(1), Some(&firing), None),
            OnCallDue::Stop("rule_gone")
        );
        assert_eq!(
            escalation_due(&esc(1), Some(&acked), Some(&steps)),
            OnCallDue::Stop("acknowledged")
        );
        assert_eq!(
            escalation_due(&esc(1), Some(&resolved), Some(&steps)),
            OnCallDue::Stop("resolved")
        );
        assert_eq!(
            escalation_due(&esc(1), None, Some(&steps)),
            OnCallDue::Stop("not_found")
        );

        // a step's tasks: its own channels, ids per (alert, step, channel), reason escalation step/steps
        let t2 = escalation_tasks(&firing, &steps, 2, 20_000);
        assert_eq!(t2.len(), 1);
        assert_eq!(t2[0].endpoint, "https://b.test");
        assert_eq!(t2[0].reason, Reason::Escalation { step: 2, steps: 2 });
        assert_eq!(
            t2[0].alert.as_ref().map(|r| r.id.clone()),
            Some(firing.id.clone())
        );
        assert_eq!(
            escalation_tasks(&firing, &steps, 2, 99_000)[0].notification_id,
            t2[0].notification_id
        );
        assert_ne!(
            escalation_tasks(&firing, &steps, 1, 20_000)[0].notification_id,
            t2[0].notification_id
        );
        assert!(escalation_tasks(&firing, &steps, 3, 20_000).is_empty());

        // under a mute: what would be sent is silenced and the chain goes on; a stop stays a stop
        // (decision, muted, after)
        let next = reminder_due(&remind(1), Some(&firing));
        let OnCallDue::Send { next: n1 } = next.clone() else {
            panic!("{next:?}")
        };
        let cases = [
            (next.clone(), true, OnCallDue::Muted { next: n1.clone() }),
            (next.clone(), false, next.clone()),
            (
                OnCallDue::Send { next: None },
                true,
                OnCallDue::Muted { next: None },
            ),
            (
                OnCallDue::Stop("acknowledged"),
                true,
                OnCallDue::Stop("acknowledged"),
            ),
            (OnCallDue::Stop("resolved"), false, OnCallDue::Stop("resolved")),
        ];
        for (decision, muted, want) in cases {
            assert_eq!(
                decision.clone().under_mute(muted),
                want,
                "{decision:?} muted={muted}"
            );
        }
    }

    /// An alert opened now (or again) starts its first reminder and first escalation step; a repeat starts none.
    #[test]
    fn after_open_starts_on_call_timers() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let a = alert("1000", 0);
        let oncall = OnCall {
            renotify: Some(Renotify {
                every_ms: 2_000,
                max: 2,
            }),
            escalation: vec![step(5_000, "https://a.test")],
        };
        for (answer, want) in [
            (
                Opened::New(a.clone()),
                vec![("remind", 1_000u64), ("escalate", 4_000)],
            ),
            (
                Opened::Again(a.clone()),
                vec![("remind", 1_000), ("escalate", 4_000)],
            ),
            (Opened::Repeat(a.clone()), vec![]),
        ] {
            let got = after_open(
                &topology,
                [(a.clone(), answer, oncall.clone())],
                std::iter::empty(),
                11_000,
            );
            let got: Vec<(&'static str, u64)> = got
                .timers
                .iter()
                .map(|(m, d)| {
                    let t = Timer::parse(&m.body).expect("a timer");
                    (t.what.as_str(), d.as_millis() as u64)
                })
                .collect();
            assert_eq!(got, want);
        }
    }
}
