//! NO_EVENTS in the engine: the worker notes that a project with NO_EVENTS rules was seen, the alert timer loop
//! fires its silences (`klaxon_core::silence` makes the tasks and the alert, `klaxon_counter::no_events` holds
//! the state).
//!
//! ```text
//! worker batch: projects with watched NO_EVENTS rules ──NoEvents::seen (beside the batch's counting)──▶
//!                 schedule: a SilenceTimer through the delay engine (only when none is pending)
//!                 resolve:  Alerts::resolve(by "event") ──▶ resolved tasks (published with the batch; in a
//!                           quiet window held into its release) ──after the publish──▶ NoEvents::settle
//! timer loop:   SilenceTimer due ──NoEvents::due──▶ stale: ack │ reschedule: the timer again at last + quietPeriod
//!                 fire: mutes? ──▶ open the (rule, project) alert ──▶ tasks, each channel's digest as for any
//!                 firing (in a quiet window: held, `crate::quiet`), the alert's reminders and escalations
//!                 ──publish, confirmed──▶ ack
//! ```
//!
//! * **Once.** `NoEvents::due` acts only for the timer the project's hash names as pending, and moves it: a
//!   duplicate timer or another worker finds it stale. A redelivered timer gets the answer of its first handling
//!   again and publishes the same tasks (ids from (project, rule, silence start)): the senders deliver each once.
//! * **Window of risk.** A worker that dies after `seen` scheduled a timer and before publishing it leaves no
//!   timer: the redelivered batch schedules it again (`redelivered`), and any later event of the project does once
//!   the lost timer is a minute late. A project that sends nothing more after such a crash is not watched until
//!   its next event (docs/internals.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use klaxon_broker::{Outgoing, Publisher, Topology};
use klaxon_core::alert::lifecycle_tasks;
use klaxon_core::mute::is_muted;
use klaxon_core::silence::{silence_alert_id, watched, Silence};
use klaxon_core::{ProjectRules, Reason};
use klaxon_counter::no_events::{Due, NoEvents, Seen, SeenBy, Watched};
use klaxon_counter::{Alerts, Change, Digests, Mutes, Opened};
use serde_json::{json, Value};

use crate::alerts::{after_open, OnCall, TimerDeps};
use crate::internal_events::{
    AlertOpened, AlertResolved, FiringMuted, NoEventsSeen, NoEventsTimer, RedisFailed, RuleFired,
    RulesUnavailable,
};
use crate::outbox::Post;
use crate::EngineError;

/// The `what` of a NO_EVENTS timer message in `<ns>.alerts.timer`.
pub const WHAT: &str = "no_events";

/// The longest rule id a timer may name.
const RULE_ID_MAX: usize = 128;

/// One NO_EVENTS rule's timer: `{"projectId", "ruleId", "what": "no_events", "at"}` in `<ns>.alerts.timer`,
/// through the delay engine; `at` is the due time it was scheduled for (unix ms), which names it.
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
    /// Reads a timer message if it is a NO_EVENTS one (`what` is `no_events`): `None` for any other message,
    /// the reason when it says `no_events` but is not one.
    pub fn recognise(body: &[u8]) -> Option<Result<SilenceTimer, String>> {
        if body.len() > crate::alerts::TIMER_MAX_BYTES {
            return None;
        }
        let v: Value = serde_json::from_slice(body).ok()?;
        if v.get("what").and_then(Value::as_str) != Some(WHAT) {
            return None;
        }
        let s = |k: &str, max: usize| {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control))
                .ok_or_else(|| format!("`{k}` is missing, empty, too long or has control characters"))
        };
        Some((|| {
            Ok(SilenceTimer {
                project_id: s("projectId", RULE_ID_MAX)?.to_owned(),
                rule_id: s("ruleId", RULE_ID_MAX)?.to_owned(),
                due_ms: v
                    .get("at")
                    .and_then(Value::as_i64)
                    .filter(|&at| at > 0)
                    .ok_or("`at` is missing or not a positive integer")?,
            })
        })())
    }

    /// The message of this timer, waiting until `due_ms` as seen at `now_ms` (the delay engine clamps a longer
    /// wait: the timer then comes early and is rescheduled to the same time).
    pub fn scheduled(&self, topology: &Topology, now_ms: i64) -> (Outgoing, Duration) {
        let body =
            json!({"projectId": self.project_id, "ruleId": self.rule_id, "what": WHAT, "at": self.due_ms});
        let mut msg = Outgoing::json(topology.alerts_timer_queue(), body.to_string().into_bytes());
        msg.message_id = Some(format!(
            "no-events-timer:{}:{}:{}",
            self.project_id, self.rule_id, self.due_ms
        ));
        let wait = u64::try_from(self.due_ms.saturating_sub(now_ms)).unwrap_or(0);
        (msg, Duration::from_millis(wait))
    }
}

/// The watched NO_EVENTS rules (enabled, with a channel) of every project in `rules`, projects without any left
/// out: what [`NoEvents::seen`] is asked about. Sorted by project.
pub fn watched_rules<'r>(rules: &'r HashMap<&str, Arc<ProjectRules>>) -> Vec<(&'r str, Vec<Watched<'r>>)> {
    let mut out: Vec<(&str, Vec<Watched<'_>>)> = rules
        .iter()
        .map(|(project, r)| (*project, watched_of(r)))
        .filter(|(_, w)| !w.is_empty())
        .collect();
    out.sort_unstable_by_key(|(p, _)| *p);
    out
}

/// The watched NO_EVENTS rules of one project.
pub fn watched_of(rules: &ProjectRules) -> Vec<Watched<'_>> {
    rules
        .rules
        .iter()
        .filter_map(|r| {
            watched(r).map(|quiet_period_ms| Watched {
                rule_id: &r.id,
                quiet_period_ms,
            })
        })
        .collect()
}

/// The worker's side, before the batch publishes: notes the batch's projects with NO_EVENTS rules as seen (one
/// round trip; none without such projects).
pub(crate) async fn seen(
    no_events: &NoEvents,
    watched: &[(&str, Vec<Watched<'_>>)],
    redelivered: bool,
) -> Result<Vec<Seen>, EngineError> {
    if watched.is_empty() {
        return Ok(Vec::new());
    }
    no_events
        .seen(watched, SeenBy::Events { redelivered }, None)
        .await
        .inspect_err(|_| RedisFailed.emit())
        .map_err(EngineError::from)
}

/// The worker's side, after `seen`: posts the timers to schedule, and the open silences the events ended,
/// resolved (by `event`) into their resolved tasks (one per channel that delivered the firing; a silence whose
/// firing opened no alert, being muted, has none), each routed under the rule as the batch read it (held in a
/// quiet window, through a digest: [`klaxon_core::route`]). Returns the silences to settle once the batch's
/// post is out.
pub(crate) async fn after_seen(
    alerts: &Alerts,
    topology: &Topology,
    rules: &HashMap<&str, Arc<ProjectRules>>,
    watched: &[(&str, Vec<Watched<'_>>)],
    answers: Vec<Seen>,
    post: &mut Post,
    now_ms: i64,
) -> Result<Vec<(String, String, i64)>, EngineError> {
    let mut settle = Vec::new();
    let mut timers = 0;
    for ((project, _), seen) in watched.iter().zip(answers) {
        for (rule, due_ms) in seen.schedule {
            let timer = SilenceTimer {
                project_id: (*project).to_owned(),
                rule_id: rule,
                due_ms,
            };
            post.timer(timer.scheduled(topology, now_ms));
            timers += 1;
        }
        for (rule, since) in seen.resolve {
            let id = silence_alert_id(project, &rule, since);
            let change = alerts
                .resolve(project, &id, "event", None)
                .await
                .inspect_err(|_| RedisFailed.emit())?;
            let (alert, now) = match change {
                Change::Done(a) => (a, true),
                // resolved before (a redelivered batch, another worker, by hand): the same tasks again
                Change::AlreadyResolved(a) => (a, false),
                _ => {
                    settle.push(((*project).to_owned(), rule, since));
                    continue;
                }
            };
            let at = alert.resolved_at_ms.unwrap_or(now_ms);
            let tasks = lifecycle_tasks(&alert, Reason::Resolved, at);
            if now {
                AlertResolved {
                    alert: &alert,
                    by: "event",
                    channels: tasks.len(),
                }
                .emit();
            }
            let rule_now = rules
                .get(project)
                .and_then(|r| r.rules.iter().find(|r| r.id == rule));
            post.route_all(tasks, rule_now, at);
            settle.push(((*project).to_owned(), rule, since));
        }
    }
    NoEventsSeen {
        projects: watched.len(),
        timers,
    }
    .emit();
    Ok(settle)
}

/// After the batch's publish: forgets the silences whose resolved messages are now out. A failure is only logged:
/// the next event resolves them again (same ids: nothing is delivered twice).
pub(crate) async fn settle(no_events: &NoEvents, settle: &[(String, String, i64)]) {
    for (project, rule, since) in settle {
        if let Err(e) = no_events.settle(project, rule, *since).await {
            RedisFailed.emit();
            tracing::warn!(error = %e, project = %project, rule = %rule, "NO_EVENTS silence not settled; the next event settles it");
        }
    }
}

/// A project's rules were just stored through Klaxon (API, CLI, console): each watched NO_EVENTS rule of a
/// project that has sent no event yet starts its clock now (the contract's "at its storing"; a second storing
/// does not restart it), and a rule with a pending timer keeps it (moved earlier when its `quietPeriod` shrank).
/// Returns the timers to publish through the delay engine; none for a project without watched rules.
pub async fn arm(
    no_events: &NoEvents,
    topology: &Topology,
    project_id: &str,
    rules: &ProjectRules,
) -> Result<Vec<(Outgoing, Duration)>, EngineError> {
    let watched = vec![(project_id, watched_of(rules))];
    if watched[0].1.is_empty() {
        return Ok(Vec::new());
    }
    let seen = no_events.seen(&watched, SeenBy::Armed, None).await?;
    let now_ms = klaxon_store::trail::now_ms();
    Ok(seen
        .into_iter()
        .flat_map(|s| s.schedule)
        .map(|(rule_id, due_ms)| {
            SilenceTimer {
                project_id: project_id.to_owned(),
                rule_id,
                due_ms,
            }
            .scheduled(topology, now_ms)
        })
        .collect())
}

/// What the timer loop needs for NO_EVENTS beside the alert timers' dependencies.
#[derive(Clone)]
pub struct SilenceDeps {
    /// The projects' NO_EVENTS state.
    pub no_events: NoEvents,
    /// Mutes, read when a silence fires.
    pub mutes: Mutes,
    /// The channels' digests (`minPeriod > 0`), as for any firing.
    pub digests: Digests,
}

/// Handles one due NO_EVENTS timer; returns once its outcome is durable (then the caller acks it).
pub(crate) async fn due(
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
        Due::Stale => return outcome("stale", timer),
        Due::Forgotten => return outcome("rule_gone", timer),
        Due::Reschedule { at_ms } => {
            let next = SilenceTimer {
                due_ms: at_ms,
                ..timer.clone()
            };
            let msg = next.scheduled(topology, klaxon_store::trail::now_ms());
            publisher.publish_delayed(&topology.delay(), &[msg]).await?;
            return outcome("rescheduled", timer);
        }
        Due::Fire {
            since_ms,
            last_event_ms,
            at_ms,
        } => (since_ms, last_event_ms, at_ms),
    };
    let (Some(rule), Some(quiet_period_ms)) = (rule, quiet) else {
        return outcome("rule_gone", timer);
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
        return outcome("muted", timer);
    }
    let mut tasks = silence.tasks();
    let wanted = silence.alert();
    let opened = deps
        .alerts
        .open(std::slice::from_ref(&wanted), None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    // one answer per open, in order: none would be a bug in the adapter, delivered without an alert
    let opened = opened.into_iter().next().unwrap_or(Opened::Full);
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
        if deps.faults.crash_after_no_events {
            tracing::error!(
                env = crate::alerts::CRASH_AFTER_NO_EVENTS_ENV,
                "test hook: aborting between a NO_EVENTS firing's claim and its publish"
            );
            std::process::abort();
        }
    };
    outbox.send_with(publisher, post, crash, || {}).await?;
    outcome("fired", timer)
}

fn outcome(outcome: &'static str, timer: &SilenceTimer) -> Result<(), EngineError> {
    NoEventsTimer {
        outcome,
        timer: Some(timer),
    }
    .emit();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaxon_broker::QueueType;

    #[test]
    fn timer_messages_round_trip_and_others_are_not_ours() {
        let topology = Topology::new("ns", "ns.events", QueueType::Classic);
        let t = SilenceTimer {
            project_id: "5e3eef0679fa3700a0198a49".into(),
            rule_id: "5e3eef0679fa3700a0198a4a".into(),
            due_ms: 1_700_000_000_000,
        };
        let (msg, wait) = t.scheduled(&topology, 1_699_999_990_000);
        assert_eq!(msg.queue, "ns.alerts.timer");
        assert_eq!(wait, Duration::from_secs(10));
        assert_eq!(SilenceTimer::recognise(&msg.body), Some(Ok(t.clone())));
        // due in the past: at once
        assert_eq!(t.scheduled(&topology, 1_800_000_000_000).1, Duration::ZERO);
        // an alert timer is not ours; a bad NO_EVENTS one is refused with a reason
        assert_eq!(
            SilenceTimer::recognise(br#"{"projectId":"p","alertId":"a","what":"resolve"}"#),
            None
        );
        assert_eq!(SilenceTimer::recognise(b"not json"), None);
        for bad in [
            r#"{"projectId":"p","what":"no_events","at":1}"#,
            r#"{"projectId":"p","ruleId":"r","what":"no_events"}"#,
            r#"{"projectId":"p","ruleId":"r","what":"no_events","at":-5}"#,
            r#"{"projectId":"p\n","ruleId":"r","what":"no_events","at":1}"#,
            r#"{"projectId":"","ruleId":"r","what":"no_events","at":1}"#,
        ] {
            assert!(
                matches!(SilenceTimer::recognise(bad.as_bytes()), Some(Err(_))),
                "{bad}"
            );
        }
    }
}
