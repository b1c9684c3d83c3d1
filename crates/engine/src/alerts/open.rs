//! The worker's side of alerts: the alert a crossed firing opens, the touches that count events into open
//! alerts, and what the opens' answers mean for a batch (each firing task carries its alert; the timers of the
//! alerts opened now).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use klaxon_broker::{Outgoing, Topology};
use klaxon_core::alert::{alert_id, Alert, AlertChannel, AlertRef, AlertState};
use klaxon_core::evaluate::Match;
use klaxon_core::notification::{notification_id, Firing, NotificationTask};
use klaxon_core::oncall::{EscalationStep, Renotify};
use klaxon_core::{CompiledRule, Outcome};
use klaxon_counter::{Alerts, NotOpened, Opened, Touch};

use crate::internal_events::{AlertNotOpened, AlertOpened, LogOnce, RedisFailed};
use crate::timer::Timer;
use crate::EngineError;

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

/// The alert a crossed (not muted) firing opens, as it would open: state firing, no events yet (the opener sets
/// the events of its firing, [`fired_touches`]), the rule's channels (every channel the firing is routed to,
/// digest channels too).
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
            .map(|ch| AlertChannel::of_rule(ch.kind, &ch.endpoint, ch.severity))
            .collect(),
        heard: Vec::new(),
        closes: Vec::new(),
    }
}

/// The matched (event, rule) pairs of a batch as one [`Touch`] per (project, rule, group) at `now_ms` (this
/// process's clock: a skew between workers moves a resolve by at most that skew) with the number of its events,
/// in the order of their first pair: each counts into the (rule, group)'s open alert and keeps it from
/// resolving, so a batch touches each open alert once, not once per event. Sent beside the counting, in the
/// same round trip: a pair whose alert opens in this batch finds none yet and is counted once it is open
/// ([`fired_touches`], [`open_for_batch`]).
pub fn touches<'a>(matches: &[Match<'a>], now_ms: i64) -> Vec<Touch<'a>> {
    let mut out: Vec<Touch<'a>> = Vec::new();
    let mut at: HashMap<(&str, &str, &str), usize> = HashMap::with_capacity(matches.len());
    for m in matches {
        let t = touch(m, now_ms);
        match at.entry((t.project_id, t.rule_id, t.group)) {
            std::collections::hash_map::Entry::Occupied(i) => out[*i.get()].events += 1,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(out.len());
                out.push(t);
            }
        }
    }
    out
}

/// What a new alert counts once it is open, per (project, rule, group) that fired in the batch, at its firing's
/// time: the count at the crossing (the events that made it fire, this one included: an alert fired by the
/// third event of a threshold of 3 says 3), plus the batch's later pairs of the same (rule, group), which were
/// counted beside the counting when no alert was open yet. A second firing of the same (rule, group) in one
/// batch adds its one event (it repeats the first's alert).
pub fn fired_touches<'a>(matches: &[Match<'a>], outcomes: &[Outcome]) -> Vec<Touch<'a>> {
    let mut out: Vec<Touch<'a>> = Vec::new();
    for (m, o) in matches.iter().zip(outcomes) {
        let key = (
            m.event.task.project_id.as_str(),
            m.rule.id.as_str(),
            m.event.task.event.group_hash.as_str(),
        );
        let known = out.iter_mut().find(|t| (t.project_id, t.rule_id, t.group) == key);
        match (o, known) {
            (Outcome::Fired { .. } | Outcome::Counted { .. }, Some(t)) => t.events += 1,
            (Outcome::Fired { at_ms, count, .. }, None) => out.push(Touch {
                events: (*count).max(1),
                ..touch(m, *at_ms)
            }),
            (Outcome::Counted { .. }, None) => {}
        }
    }
    out
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
    /// The firings no alert opened for, and why: the project keeps as many alerts as it may, all open, or the
    /// alerts resolved by hand only hold their share.
    pub full: Vec<(Alert, NotOpened)>,
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
    // a firing task's notification id → the alert of its firing, and whether that alert is the one this firing
    // opened (then the task's id is the alert's own firing id on its channel: not hashed again)
    let mut by_task: HashMap<String, (usize, bool)> = HashMap::new();
    let mut alerts: Vec<Alert> = Vec::new();
    for (wanted, answer, oncall) in answers {
        let schedule = match &answer {
            Opened::New(_) => {
                out.opened += 1;
                true
            }
            Opened::Again(_) => true,
            Opened::Repeat(_) => false,
            Opened::Full(why) => {
                out.full.push((wanted, *why));
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
        let own = (&alert.project_id, &alert.rule_id, &alert.group, &alert.firing)
            == (&wanted.project_id, &wanted.rule_id, &wanted.group, &wanted.firing);
        for ch in &wanted.channels {
            let id = notification_id(
                &wanted.project_id,
                &wanted.rule_id,
                &wanted.group,
                &wanted.firing,
                ch.channel,
            );
            by_task.insert(id, (alerts.len(), own));
        }
        alerts.push(alert.clone());
    }
    for task in tasks {
        if let Some(&(i, own)) = by_task.get(&task.notification_id) {
            let alert = &alerts[i];
            task.alert = Some(if own {
                alert.reference_with_firing_id(task.channel, task.notification_id.clone())
            } else {
                AlertRef::of_firing(alert, task.channel)
            });
        }
    }
    out
}

/// The worker's side, after the batch's early touch ([`touches`], sent beside the counting: the events of a
/// (rule, group) whose alert is open are counted there): opens the alerts of the crossed firings, each with the
/// events of its firing (`fired`: the crossed pairs' touches; an alert that opens now found none to count into
/// before), sets `alert` on the firing tasks, and returns the resolve timers to schedule. One Redis round trip
/// for the opens; none without crossings.
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
    // each alert opens with the events of its firing (`fired`): counted by the open itself, no second call
    let wanted: Vec<Alert> = crossed
        .iter()
        .map(|f| {
            let mut a = alert_of(f);
            a.events = fired
                .iter()
                .find(|t| (t.project_id, t.rule_id, t.group) == (&*a.project_id, &*a.rule_id, &*a.group))
                .map_or(0, |t| t.events);
            a
        })
        .collect();
    let answers = alerts
        .open(&wanted, None)
        .await
        .inspect_err(|_| RedisFailed.emit())?;
    for a in opened_now(&answers) {
        AlertOpened { alert: a }.emit();
    }
    let oncall = crossed.iter().map(|f| OnCall::of(f.rule));
    let answers = wanted
        .into_iter()
        .zip(answers)
        .zip(oncall)
        .map(|((w, a), o)| (w, a, o));
    let after = after_open(topology, answers, tasks, now_ms);
    let now = Instant::now();
    for (a, why) in &after.full {
        AlertNotOpened {
            project: &a.project_id,
            rule: &a.rule_id,
            why: *why,
            limit: match why {
                NotOpened::ProjectFull => alerts.limit(),
                NotOpened::ByHandShare => alerts.by_hand_limit(),
            },
            log: full_log.should_log(&a.project_id, now),
        }
        .emit();
    }
    Ok(after.timers)
}
