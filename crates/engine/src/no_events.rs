//! NO_EVENTS in the engine: the worker notes that a project with NO_EVENTS rules was seen, the timer loop
//! ([`crate::timers`]) fires its silences (`klaxon_core::silence` makes the tasks and the alert, `klaxon_counter::no_events` holds
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

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::silence::{resolved_tasks, silence_alert_id, watched};
use klaxon_core::ProjectRules;
use klaxon_counter::no_events::{NoEvents, Seen, SeenBy, Watched};
use klaxon_counter::{Alerts, Change, Digests, Mutes};

use crate::internal_events::{AlertResolved, NoEventsSeen, RedisFailed};
use crate::outbox::Post;
use crate::timer::SilenceTimer;
use crate::EngineError;

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
            let rule_now = rules
                .get(project)
                .and_then(|r| r.rules.iter().find(|r| r.id == rule));
            let tasks = resolved_tasks(&alert, rule_now, at);
            if now {
                AlertResolved {
                    alert: &alert,
                    by: "event",
                    channels: tasks.len(),
                }
                .emit();
            }
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
            tracing::warn!(error = %e, project = %crate::internal_events::text(project), rule = %crate::internal_events::text(rule), "NO_EVENTS silence not settled; the next event settles it");
        }
    }
}

/// A project's rules were just stored through Klaxon (API, CLI, console): each watched NO_EVENTS rule of a
/// project that has sent no event yet starts its clock now (the contract's "at its storing"; a second storing
/// does not restart it), and a rule with a pending timer keeps it (moved earlier when its `quietPeriod` shrank).
/// Returns the timers to publish through the delay engine; none for a project without watched rules. Called
/// through [`crate::after_store::arm`], the one step after a store.
pub(crate) async fn arm(
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
