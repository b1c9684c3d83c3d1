//! The alerts' decisions and openings, table-tested.

use super::decide::*;
use super::open::*;
use crate::timer::{Timer, TimerWhat};
use klaxon_broker::{QueueType, Topology};
use klaxon_core::alert::{alert_id, Alert, AlertChannel, AlertState};
use klaxon_core::notification::{notification_id, NotificationTask};
use klaxon_core::oncall::{EscalationStep, Renotify};
use klaxon_core::ChannelKind;
use klaxon_core::Reason;
use klaxon_counter::{NotOpened, Opened};

pub(crate) fn alert(id_firing: &str, resolve_after_ms: u64) -> Alert {
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
            AlertChannel::of_rule(ChannelKind::Webhook, "https://example.test/h", None),
            AlertChannel::of_rule(ChannelKind::Pagerduty, "key", None),
        ],
        heard: Vec::new(),
        closes: Vec::new(),
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
        (
            vec![(a.clone(), Opened::Full(NotOpened::ProjectFull))],
            vec![],
            1,
            0,
            None,
            None,
        ),
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
fn on_call_timers_round_trip() {
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
    let tasks = |step, at| -> Vec<NotificationTask> {
        escalation_tasks(&firing, &steps, step, at)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    };
    let t2 = tasks(2, 20_000);
    assert_eq!(t2.len(), 1);
    assert_eq!(t2[0].endpoint, "https://b.test");
    assert_eq!(t2[0].reason, Reason::Escalation { step: 2, steps: 2 });
    assert_eq!(
        t2[0].alert.as_ref().map(|r| r.id.clone()),
        Some(firing.id.clone())
    );
    assert_eq!(tasks(2, 99_000)[0].notification_id, t2[0].notification_id);
    assert_ne!(tasks(1, 20_000)[0].notification_id, t2[0].notification_id);
    assert!(tasks(3, 20_000).is_empty());
    // a step to a new endpoint is its first message about the alert: the member to record, whose first_id
    // (PagerDuty's dedup_key, the email thread) is the step's own id; a step to a channel of the audience lands
    // on the firing's incident and records nobody
    let (t, member) = escalation_tasks(&firing, &steps, 2, 20_000).remove(0);
    let member = member.expect("a new member");
    assert_eq!(member.first_id.as_deref(), Some(t.notification_id.as_str()));
    assert!(!member.shared);
    assert_eq!(
        t.alert.as_ref().map(|r| r.firing_notification_id.clone()),
        Some(t.notification_id.clone())
    );
    let own = [step(5_000, "https://example.test/h")];
    let (t, member) = escalation_tasks(&firing, &own, 1, 20_000).remove(0);
    assert_eq!(member, None);
    assert_eq!(
        t.alert.as_ref().map(|r| r.firing_notification_id.clone()),
        Some(notification_id("p", "r", "g", "1000", ChannelKind::Webhook))
    );

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

/// A batch touches each open alert once, with the number of its events, in the order of its first event.
#[test]
fn a_batch_touches_each_alert_once() {
    use klaxon_core::evaluate::{plan, BatchEvent};
    use klaxon_core::event::{Event, EventTask};
    use klaxon_core::ProjectRules;
    const P: &str = "5e3eef0679fa3700a0198a49";
    let event = |group: &str, n: usize| BatchEvent {
        task: EventTask {
            project_id: P.into(),
            event: Event {
                title: "boom".into(),
                group_hash: group.into(),
                is_new: false,
                repetition_id: None,
                timestamp: None,
                user: None,
            },
        },
        id: Some(format!("{group}-{n}")),
    };
    let rules = serde_json::json!([
        {"_id": "a0000000000000000000000a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100,
         "thresholdPeriod": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "https://h.test/s"}}},
        {"_id": "a0000000000000000000000b", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100,
         "thresholdPeriod": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "https://h.test/s"}}}]);
    let project = ProjectRules::from_notifications(Some(&rules));
    let events = vec![event("g1", 1), event("g2", 2), event("g1", 3), event("g1", 4)];
    let plan = plan(&events, |_| Some(&project));
    assert_eq!(plan.matches.len(), 8, "two rules want every event");
    let got: Vec<(&str, &str, u64, i64)> = touches(&plan.matches, 7)
        .iter()
        .map(|t| (t.rule_id, t.group, t.events, t.at_ms))
        .collect();
    let (a, b) = ("a0000000000000000000000a", "a0000000000000000000000b");
    let mut want = vec![(a, "g1", 3, 7), (b, "g1", 3, 7), (a, "g2", 1, 7), (b, "g2", 1, 7)];
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    assert_eq!(got_sorted, want);
    assert_eq!((got[0].1, got[0].2), ("g1", 3), "the first event's pairs first");
    assert!(touches(&[], 7).is_empty());
}

/// A new alert counts the events that made it fire (the count at the crossing) and the batch's later events of
/// its (rule, group); a (rule, group) that did not fire in the batch gets nothing.
#[test]
fn a_new_alert_counts_the_events_that_made_it_fire() {
    use klaxon_core::evaluate::{plan, BatchEvent};
    use klaxon_core::event::{Event, EventTask};
    use klaxon_core::{Outcome, ProjectRules};
    const P: &str = "5e3eef0679fa3700a0198a49";
    let event = |group: &str, n: usize| BatchEvent {
        task: EventTask {
            project_id: P.into(),
            event: Event {
                title: "boom".into(),
                group_hash: group.into(),
                is_new: false,
                repetition_id: None,
                timestamp: None,
                user: None,
            },
        },
        id: Some(format!("{group}-{n}")),
    };
    let rules = serde_json::json!([
        {"_id": "a0000000000000000000000a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
         "thresholdPeriod": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "https://h.test/s"}}}]);
    let project = ProjectRules::from_notifications(Some(&rules));
    let events = vec![
        event("g1", 1),
        event("g2", 2),
        event("g1", 3),
        event("g1", 4),
        event("g1", 5),
    ];
    let plan = plan(&events, |_| Some(&project));
    let counted = |count| Outcome::Counted { count };
    let fired = |count, at_ms| Outcome::Fired {
        count,
        firing: "1".into(),
        at_ms,
        signal: None,
    };
    // g1: 2 counted, then the third crosses at 50, then two more in the batch; g2 never fires
    let outcomes = vec![counted(2), counted(1), fired(3, 50), counted(4), fired(5, 60)];
    let got: Vec<(&str, u64, i64)> = fired_touches(&plan.matches, &outcomes)
        .iter()
        .map(|t| (t.group, t.events, t.at_ms))
        .collect();
    assert_eq!(
        got,
        [("g1", 5, 50)],
        "3 at the crossing, then 1 counted and 1 repeat"
    );
    let only_new = vec![counted(0), counted(0), fired(0, 9), counted(0), counted(0)];
    let got: Vec<u64> = fired_touches(&plan.matches, &only_new)
        .iter()
        .map(|t| t.events)
        .collect();
    assert_eq!(got, [3], "a firing counts at least its own event");
    assert!(fired_touches(
        &plan.matches,
        &[counted(1), counted(1), counted(2), counted(3), counted(4)]
    )
    .is_empty());
}
