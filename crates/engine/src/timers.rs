//! The one timer loop: every message of `<ns>.alerts.timer` ([`crate::timer`]) is handled here, one at a time,
//! and acked once its outcome is durable; what it sends leaves through the [`crate::outbox`].
//!
//! ```text
//! <ns>.alerts.timer ──Due::parse──▶ resolve   ──Alerts::resolve_due──▶ NotDue{at}: the timer again, due at `at`
//!                                  │                                 Done / AlreadyResolved: resolved tasks ─▶ outbox
//!                                  ├▶ remind / escalate ──alert still firing? mute? rule now?──▶ tasks ─▶ outbox,
//!                                  │                                                    then the chain's next timer
//!                                  ├▶ no_events ──NoEvents::due──▶ fire: open the silence's alert ─▶ outbox
//!                                  └▶ invalid: set aside to `<ns>.dead` with the reason
//! ```
//! The alerts' decisions are [`crate::alerts::decide`]; NO_EVENTS' state is [`crate::no_events`].
//!
//! Fault injection (cargo feature `fault-injection`, tests only): [`Faults::crash_after_resolve`] aborts the
//! process right after `resolve_due` answered `Done`, before publishing (the kill-between-resolve-and-publish
//! test); [`Faults::crash_after_remind`] aborts it right after a reminder's messages were published, before the
//! next reminder is scheduled and the timer acked (the reminder-timer-redelivered test);
//! [`Faults::crash_after_no_events`] aborts it right after a NO_EVENTS timer claimed its firing, before
//! publishing (the NO_EVENTS fleet test). Without the feature the fields and the checks do not exist.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use klaxon_broker::{Delivery, Publisher, Topology};
use klaxon_core::alert::{lifecycle_tasks, Alert, AlertState};
use klaxon_core::mute::is_muted;
use klaxon_core::silence::{watched, Silence};
use klaxon_core::{ProjectRules, Reason};
use klaxon_counter::no_events::Due as Answer;
use klaxon_counter::{Alerts, Change, NotOpened, Opened};
use tokio_util::sync::CancellationToken;

use crate::alerts::decide::{escalation_due, escalation_tasks, reminder_due, OnCallDue};
use crate::alerts::open::{after_open, OnCall};
use crate::internal_events::{
    AlertOpened, AlertResolved, AlertTimer, FiringMuted, NoEventsTimer, OnCallTimer, RedisFailed, RuleFired,
    RulesUnavailable,
};
use crate::outbox::Outbox;
use crate::timer::{Due, Invalid, SilenceTimer, Timer, TimerWhat};
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

/// Aborts the process when `on`: a test's fault hook (feature `fault-injection`), named by its variable `env`.
#[cfg(feature = "fault-injection")]
fn abort_if(on: bool, env: &'static str, between: &'static str) {
    if on {
        tracing::error!(env, "test hook: aborting {between}");
        std::process::abort();
    }
}

/// What the timer loop needs.
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
    /// Mutes: a due reminder or step of a muted (rule, group) is silenced ([`crate::alerts::decide::OnCallDue::under_mute`]).
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
    pub(crate) fn outbox(&self) -> Outbox<'_> {
        Outbox {
            topology: &self.topology,
            output: self.output,
            trail: &self.trail,
            digests: &self.digests,
            alerts: &self.alerts,
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
    match Due::parse(&delivery.data) {
        Ok(Due::Alert(t)) if t.what == TimerWhat::Resolve => resolve(deps, publisher, &t).await,
        Ok(Due::Alert(t)) => on_call(deps, publisher, &t).await,
        Ok(Due::Silence(t)) => silence(deps, publisher, &t, delivery.redelivered).await,
        Err(Invalid { reason, silence }) => {
            if silence {
                NoEventsTimer {
                    outcome: "invalid",
                    timer: None,
                }
                .emit();
                tracing::warn!(reason = %reason, bytes = delivery.data.len(), "NO_EVENTS timer set aside");
            } else {
                AlertTimer {
                    outcome: "invalid",
                    timer: None,
                }
                .emit();
                tracing::warn!(reason = %reason, bytes = delivery.data.len(), "alert timer set aside");
            }
            deps.outbox().set_aside(publisher, delivery, &reason).await
        }
    }
}

/// Handles one due resolve timer: resolves the alert if its `resolveAfter` ran out and posts its resolved
/// messages; reschedules the timer when an event came since. Returns once that is durable.
async fn resolve(deps: &TimerDeps, publisher: &Publisher, timer: &Timer) -> Result<(), EngineError> {
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
                timer: Some(timer),
            }
            .emit();
            return deps.outbox().schedule(publisher, next).await;
        }
        Change::Done(alert) => {
            #[cfg(feature = "fault-injection")]
            abort_if(
                deps.faults.crash_after_resolve,
                CRASH_AFTER_RESOLVE_ENV,
                "between resolve and publish",
            );
            ("resolved", alert)
        }
        Change::AlreadyResolved(alert) => ("already_resolved", alert),
        // `resolveAfter: 0` (an acknowledgement is never the timer's answer; counted alike)
        Change::Never(_) | Change::AlreadyAcknowledged(_) => {
            AlertTimer {
                outcome: "never",
                timer: Some(timer),
            }
            .emit();
            return Ok(());
        }
        // expired, or never was (its project's alerts were deleted, Redis restarted empty)
        Change::NotFound => {
            AlertTimer {
                outcome: "not_found",
                timer: Some(timer),
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
        timer: Some(timer),
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
async fn on_call(deps: &TimerDeps, publisher: &Publisher, timer: &Timer) -> Result<(), EngineError> {
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
                    let tasks = lifecycle_tasks(a, Reason::Reminder { number, max }, now_ms);
                    tasks.into_iter().map(|t| (t, None)).collect()
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
                deps.outbox().schedule(publisher, msg).await?;
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
    // a NO_EVENTS alert's reminder held into a quiet release is listed there as the silence it is
    let mut tasks = tasks;
    klaxon_core::silence::mark(tasks.iter_mut().map(|(t, _)| t), rule);
    let outbox = deps.outbox();
    let mut post = outbox.post();
    let filed = post.route_members(tasks, rule, now_ms);
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
        abort_if(
            deps.faults.crash_after_remind && matches!(timer.what, TimerWhat::Remind { .. }),
            CRASH_AFTER_REMIND_ENV,
            "between a reminder's messages and its next timer",
        );
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

/// Handles one due NO_EVENTS timer; returns once its outcome is durable (then the caller acks it).
async fn silence(
    deps: &TimerDeps,
    publisher: &Publisher,
    timer: &SilenceTimer,
    redelivered: bool,
) -> Result<(), EngineError> {
    let silence_deps = &deps.no_events;
    let rules = deps
        .rules
        .get(&timer.project_id)
        .await
        .inspect_err(|_| RulesUnavailable.emit())?;
    let rule = rules.rules.iter().find(|r| r.id == timer.rule_id);
    let quiet = rule.and_then(watched);
    let answer = silence_deps
        .no_events
        .due(
            &timer.project_id,
            &timer.rule_id,
            timer.due_ms,
            quiet,
            redelivered,
            None,
        )
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let topology = &deps.topology;
    let (since_ms, last_event_ms, at_ms) = match answer {
        Answer::Stale => return silence_outcome("stale", timer),
        Answer::Forgotten => return silence_outcome("rule_gone", timer),
        Answer::Reschedule { at_ms } => {
            let next = SilenceTimer {
                due_ms: at_ms,
                ..timer.clone()
            };
            let msg = next.scheduled(topology, klaxon_store::trail::now_ms());
            deps.outbox().schedule(publisher, msg).await?;
            return silence_outcome("rescheduled", timer);
        }
        Answer::Fire {
            since_ms,
            last_event_ms,
            at_ms,
        } => (since_ms, last_event_ms, at_ms),
    };
    let (Some(rule), Some(quiet_period_ms)) = (rule, quiet) else {
        return silence_outcome("rule_gone", timer);
    };
    let silence = Silence {
        project_id: &timer.project_id,
        project_name: rules.name.as_deref(),
        rule,
        quiet_period_ms,
        since_ms,
        last_event_ms,
        at_ms,
    };
    let mutes = silence_deps
        .mutes
        .of_projects(&[timer.project_id.as_str()])
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    let project_mutes = mutes.get(&timer.project_id).map_or(&[][..], |m| &m.mutes[..]);
    if is_muted(project_mutes, &rule.id, "", at_ms) {
        FiringMuted {
            project: &timer.project_id,
            rule: &rule.id,
        }
        .emit();
        return silence_outcome("muted", timer);
    }
    let mut tasks = silence.tasks();
    let wanted = silence.alert();
    let opened = deps
        .alerts
        .open(std::slice::from_ref(&wanted), None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    // one answer per open, in order: none would be a bug in the adapter, delivered without an alert
    let opened = opened
        .into_iter()
        .next()
        .unwrap_or(Opened::Full(NotOpened::ProjectFull));
    if let Opened::New(a) = &opened {
        AlertOpened { alert: a }.emit();
    }
    let now_ms = klaxon_store::trail::now_ms();
    let after = after_open(
        topology,
        [(wanted, opened, OnCall::of(rule))],
        tasks.iter_mut(),
        now_ms,
    );
    for task in &tasks {
        RuleFired { task }.emit();
    }
    // inside a quiet window the firing is held into the window's release, as any firing is (crate::quiet); its
    // bypassed channels are not; outside it a channel with `minPeriod > 0` goes through its digest. A redelivered
    // timer holds and appends nothing twice, and one whose window ended meanwhile is sent.
    let outbox = deps.outbox();
    let mut post = outbox.post();
    post.route_all(tasks, Some(rule), at_ms);
    post.timers(after.timers);
    let crash = || {
        #[cfg(feature = "fault-injection")]
        abort_if(
            deps.faults.crash_after_no_events,
            CRASH_AFTER_NO_EVENTS_ENV,
            "between a NO_EVENTS firing's claim and its publish",
        );
    };
    outbox.send_with(publisher, post, crash, || {}).await?;
    silence_outcome("fired", timer)
}

fn silence_outcome(outcome: &'static str, timer: &SilenceTimer) -> Result<(), EngineError> {
    NoEventsTimer {
        outcome,
        timer: Some(timer),
    }
    .emit();
    Ok(())
}
