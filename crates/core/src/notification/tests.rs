use super::*;
use crate::event::Event;
use crate::filter::TitleFilter;
use crate::rule::{ChannelConfig, WhatToReceive};

/// The task JSON of every reason is the flat object of earlier versions (senders of another version read
/// it), and reads back to the same reason.
#[test]
fn reasons_on_the_wire() {
    let spike = Spike {
        period_ms: 3_600_000,
        baseline_windows: 24,
        factor_milli: 5000,
        threshold: 10,
    };
    let cases = [
        (Reason::New, r#"{"type":"new"}"#),
        (
            Reason::Threshold {
                threshold: 3,
                period_ms: 60000,
                window: Window::Sliding,
            },
            r#"{"type":"threshold","threshold":3,"periodMs":60000,"window":"sliding"}"#,
        ),
        (
            Reason::UniqueUsers {
                threshold: 3,
                period_ms: 60000,
                window: Window::Fixed,
            },
            r#"{"type":"uniqueUsers","threshold":3,"periodMs":60000,"window":"fixed"}"#,
        ),
        (
            Reason::Spike {
                spike,
                baseline: Baseline {
                    sum: 480,
                    buckets: 24,
                    needed: 100,
                },
            },
            r#"{"type":"spike","periodMs":3600000,"baselineWindows":24,"factorMilli":5000,"threshold":10,"baselineSum":480,"baselineBuckets":24,"needed":100}"#,
        ),
        (
            Reason::Reappeared {
                quiet_period_ms: 1000,
                last_seen_ms: Some(5),
            },
            r#"{"type":"reappeared","quietPeriodMs":1000,"lastSeenMs":5}"#,
        ),
        (
            Reason::Reappeared {
                quiet_period_ms: 1000,
                last_seen_ms: None,
            },
            r#"{"type":"reappeared","quietPeriodMs":1000}"#,
        ),
        (
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            },
            r#"{"type":"digest","minPeriodS":60}"#,
        ),
        (Reason::Direct, r#"{"type":"direct"}"#),
    ];
    for (reason, json) in cases {
        assert_eq!(serde_json::to_string(&reason).expect("json"), json);
        assert_eq!(
            serde_json::from_str::<Reason>(json).expect("reason"),
            reason,
            "{json}"
        );
    }
    // what the kind asked plus what the counter observed; nothing observed reads as a first bucket's
    assert_eq!(
        Reason::of_firing(Want::Spike(spike), None),
        Reason::Spike {
            spike,
            baseline: Baseline {
                sum: 0,
                buckets: 0,
                needed: 10
            }
        }
    );
    assert_eq!(Reason::of_want(Want::FirstSeen).kind(), Some(Kind::OnlyNew));
}

fn rule(channels: &[(ChannelKind, &str, u64)]) -> CompiledRule {
    CompiledRule {
        id: "r1".into(),
        enabled: true,
        what: WhatToReceive::OnlyNew,
        window: Window::Fixed,
        channels: channels
            .iter()
            .map(|(kind, endpoint, min_period_s)| ChannelConfig {
                kind: *kind,
                endpoint: (*endpoint).to_owned(),
                min_period_s: *min_period_s,
                severity: None,
            })
            .collect(),
        filter: TitleFilter::default(),
        unique_users: false,
        resolve_after_ms: 0,
        renotify: None,
        escalation: Vec::new(),
        quiet_hours: Default::default(),
    }
}

fn event_task(repetition_id: Option<&str>) -> EventTask {
    EventTask {
        project_id: "p1".into(),
        event: Event {
            title: "DB down".into(),
            group_hash: "g1".into(),
            is_new: true,
            repetition_id: repetition_id.map(str::to_owned),
            timestamp: None,
            user: Some("u1".into()),
        },
    }
}

#[test]
fn a_firing_becomes_one_task_per_channel() {
    let count = |window| Want::Count {
        threshold: 10,
        period_ms: 60_000,
        window,
    };
    let users = |window| Want::UniqueUsers {
        threshold: 3,
        period_ms: 5_000,
        window,
    };
    let slack = (ChannelKind::Slack, "https://hooks.test/s", 0);
    let email = (ChannelKind::Email, "a@b.test", 300);
    // (want, channels, repetition id, count, firing, reason, window label)
    let table = [
        (
            Want::FirstSeen,
            vec![slack],
            Some("rep"),
            1,
            "new",
            Reason::New,
            "first_seen",
        ),
        (
            count(Window::Fixed),
            vec![slack, email],
            None,
            10,
            "1700000000000",
            Reason::Threshold {
                threshold: 10,
                period_ms: 60_000,
                window: Window::Fixed,
            },
            "fixed",
        ),
        (
            count(Window::Sliding),
            vec![email],
            None,
            12,
            "1700000000500",
            Reason::Threshold {
                threshold: 10,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            "sliding",
        ),
        (
            users(Window::Fixed),
            vec![slack],
            Some("rep"),
            3,
            "17",
            Reason::UniqueUsers {
                threshold: 3,
                period_ms: 5_000,
                window: Window::Fixed,
            },
            "fixed",
        ),
        (
            users(Window::Sliding),
            vec![email, slack],
            None,
            4,
            "18",
            Reason::UniqueUsers {
                threshold: 3,
                period_ms: 5_000,
                window: Window::Sliding,
            },
            "sliding",
        ),
        // a rule without channels never reaches the counter, but would give no task
        (Want::FirstSeen, vec![], None, 1, "new", Reason::New, "first_seen"),
    ];
    for (want, channels, rep, n, firing, reason, label) in table {
        let (rule, task) = (rule(&channels), event_task(rep));
        let got = NotificationTask::for_firing(&Firing {
            task: &task,
            project_name: Some("Acme"),
            rule: &rule,
            want,
            count: n,
            firing,
            at_ms: 1_700_000_000_999,
            signal: None,
        });
        let ctx = format!("{want:?} {channels:?}");
        assert_eq!(got.reason, reason, "{ctx}");
        assert_eq!(got.window, label, "{ctx}");
        assert_eq!(want.label(), label, "{ctx}");
        assert_eq!(Reason::of_want(want), reason, "{ctx}");
        let want_tasks: Vec<NotificationTask> = channels
            .iter()
            .map(|(kind, endpoint, min_period_s)| NotificationTask {
                notification_id: notification_id("p1", "r1", "g1", firing, *kind),
                project_id: "p1".into(),
                project_name: Some("Acme".into()),
                rule_id: "r1".into(),
                channel: *kind,
                endpoint: (*endpoint).to_owned(),
                min_period_s: *min_period_s,
                fired_at_ms: 1_700_000_000_999,
                reason,
                events: vec![NotificationEvent {
                    group_hash: "g1".into(),
                    title: "DB down".into(),
                    count: n,
                    repetition_id: rep.map(str::to_owned),
                    open_for_ms: None,
                    silence_period_ms: None,
                    alert_id: None,
                }],
                text: None,
                send_at_ms: None,
                alert: None,
                severity: None,
            })
            .collect();
        assert_eq!(got.tasks, want_tasks, "{ctx}");
    }
}

#[test]
fn a_digest_window_becomes_one_sorted_task() {
    let ev = |g: &str, c| NotificationEvent {
        group_hash: g.into(),
        title: format!("title {g}"),
        count: c,
        repetition_id: None,
        open_for_ms: None,
        silence_period_ms: None,
        alert_id: None,
    };
    let w = DigestWindow {
        project_id: "p1",
        project_name: Some("Acme"),
        rule_id: "r1",
        channel: ChannelKind::Telegram,
        endpoint: "123",
        min_period_s: 60,
        severity: None,
        window_start_ms: 1_700_000_000_000,
    };
    let id = notification_id("p1", "r1", "", "digest:1700000000000", ChannelKind::Telegram);
    // (events in, groups out in order)
    let table: [(Vec<NotificationEvent>, Vec<&str>); 4] = [
        (vec![], vec![]),
        (vec![ev("a", 1)], vec!["a"]),
        (vec![ev("a", 1), ev("b", 5), ev("c", 3)], vec!["b", "c", "a"]),
        // equal counts: by group
        (vec![ev("z", 2), ev("b", 2), ev("m", 9)], vec!["m", "b", "z"]),
    ];
    for (events, order) in table {
        let t = NotificationTask::for_digest(&w, 42, events.clone(), vec![]);
        assert_eq!(t.notification_id, id);
        assert_eq!(
            (t.project_id.as_str(), t.rule_id.as_str(), t.endpoint.as_str()),
            ("p1", "r1", "123")
        );
        assert_eq!(
            (t.channel, t.min_period_s, t.fired_at_ms),
            (ChannelKind::Telegram, 60, 42)
        );
        assert_eq!(
            t.reason,
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            }
        );
        assert_eq!(t.held_parts(), None, "a digest of firings only");
        assert_eq!(t.project_name.as_deref(), Some("Acme"));
        assert_eq!((t.text, t.send_at_ms), (None, None));
        let groups: Vec<&str> = t.events.iter().map(|e| e.group_hash.as_str()).collect();
        assert_eq!(groups, order, "{events:?}");
        assert_eq!(t.events.len(), events.len());
    }
    let later = DigestWindow {
        window_start_ms: w.window_start_ms + 1,
        ..w
    };
    assert_ne!(
        NotificationTask::for_digest(&later, 42, vec![], vec![]).notification_id,
        id
    );
    // what resolved in the window comes after what fired, each part sorted; the same group may be in both
    let t = NotificationTask::for_digest(&w, 42, vec![ev("a", 1), ev("b", 5)], vec![ev("c", 2), ev("a", 9)]);
    assert_eq!(t.notification_id, id, "the window's one notification");
    assert_eq!(
        t.reason,
        Reason::Digest {
            min_period_s: 60,
            resolved: 2,
            more: Default::default(),
        }
    );
    let groups: Vec<&str> = t.events.iter().map(|e| e.group_hash.as_str()).collect();
    assert_eq!(groups, ["b", "a", "a", "c"]);
    let (fired, resolved) = t.held_parts().expect("parts");
    assert_eq!((fired.len(), resolved[0].count), (2, 9));
    let json = serde_json::to_value(&t).expect("json");
    assert_eq!(
        json["reason"],
        serde_json::json!({"type": "digest", "minPeriodS": 60, "resolved": 2})
    );
    assert_eq!(
        serde_json::from_value::<NotificationTask>(json).expect("a task"),
        t
    );
}

#[test]
fn ids_are_deterministic_and_distinct() {
    let a = notification_id("p", "r", "g", "1000", ChannelKind::Slack);
    assert_eq!(a, notification_id("p", "r", "g", "1000", ChannelKind::Slack));
    assert_eq!(a.len(), 32);
    for other in [
        notification_id("p", "r", "g", "1001", ChannelKind::Slack),
        notification_id("p", "r", "g", "1000", ChannelKind::Email),
        notification_id("p", "r", "h", "1000", ChannelKind::Slack),
        notification_id("p", "r2", "g", "1000", ChannelKind::Slack),
        // the separator keeps ("ab","c") apart from ("a","bc")
        notification_id("p", "r", "g1", "000", ChannelKind::Slack),
    ] {
        assert_ne!(a, other);
    }
}

#[test]
fn direct_ids_follow_the_key() {
    let a = direct_notification_id("order-42");
    assert_eq!(a, direct_notification_id("order-42"));
    assert_ne!(a, direct_notification_id("order-43"));
    assert_eq!(a.len(), 32);
    // a direct id never equals a firing's id built from the same text
    assert_ne!(a, notification_id("order-42", "", "", "", ChannelKind::Slack));
}

#[test]
fn direct_task_round_trips() {
    let json = r#"{"notificationId":"n","projectId":"","ruleId":"api","channel":"slack","endpoint":"https://x.test/h",
        "firedAtMs":1,"reason":{"type":"direct"},"events":[{"groupHash":"","title":"Deploy","count":1,"repetitionId":null}],
        "text":"v2 is out","sendAtMs":1700000000000}"#;
    let t: NotificationTask = serde_json::from_str(json).expect("parse");
    assert_eq!(t.reason, Reason::Direct);
    assert_eq!(t.text.as_deref(), Some("v2 is out"));
    assert_eq!(t.send_at_ms, Some(1_700_000_000_000));
    let back: NotificationTask =
        serde_json::from_str(&serde_json::to_string(&t).expect("ser")).expect("parse");
    assert_eq!(back, t);
}

/// Tasks already in the queues when the project's name started to travel in the task have no `projectName`:
/// they still parse (and are delivered showing the id); a name round-trips.
#[test]
fn the_project_name_is_optional_on_the_wire() {
    let old = r#"{"notificationId":"n","projectId":"5e3eef0679fa3700a0198a49","ruleId":"r","channel":"slack",
        "endpoint":"https://x.test/h","minPeriodS":0,"firedAtMs":1,"reason":{"type":"new"},
        "events":[{"groupHash":"g","title":"t","count":1,"repetitionId":null}]}"#;
    let mut t: NotificationTask = serde_json::from_str(old).expect("a task without projectName");
    assert_eq!(t.project_name, None);
    t.project_name = Some("Acme shop".into());
    let json = serde_json::to_string(&t).expect("ser");
    assert!(json.contains(r#""projectName":"Acme shop""#), "{json}");
    let back: NotificationTask = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, t);
}

#[test]
fn rfc3339() {
    assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
}

#[test]
fn task_round_trips_and_debug_hides_endpoint() {
    let t = NotificationTask {
        notification_id: "id".into(),
        project_id: "p".into(),
        project_name: None,
        rule_id: "r".into(),
        channel: ChannelKind::Webhook,
        endpoint: "https://secret.test/hook?token=SECRET".into(),
        min_period_s: 0,
        fired_at_ms: 5,
        reason: Reason::Threshold {
            threshold: 100,
            period_ms: 60_000,
            window: Window::Sliding,
        },
        events: vec![NotificationEvent {
            group_hash: "g".into(),
            title: "t".into(),
            count: 100,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        }],
        text: None,
        send_at_ms: None,
        alert: None,
        severity: None,
    };
    let json = serde_json::to_string(&t).expect("serialize");
    assert!(
        !json.contains("sendAtMs") && !json.contains("\"text\"") && !json.contains("projectName"),
        "{json}"
    );
    assert!(
        json.contains(r#""reason":{"type":"threshold","threshold":100,"periodMs":60000,"window":"sliding"}"#),
        "{json}"
    );
    assert!(
        json.contains(r#""notificationId":"id""#) && json.contains(r#""firedAtMs":5"#),
        "{json}"
    );
    let back: NotificationTask = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, t);
    assert!(!format!("{t:?}").contains("SECRET"));
}

/// An entry says whether it is a NO_EVENTS silence (with its quiet period) and which alert it is about; entries
/// of earlier versions have neither and still parse; an entry with neither writes what it always wrote.
#[test]
fn an_entry_carries_its_silence_and_its_alert_optionally() {
    let old = r#"{"groupHash":"","title":"No events for 1 hour","count":0,"repetitionId":null}"#;
    let e: NotificationEvent = serde_json::from_str(old).expect("an entry of an earlier version");
    assert_eq!(
        (e.silence_period_ms, e.alert_id.as_deref(), e.is_silence()),
        (None, None, false)
    );
    assert_eq!(serde_json::to_string(&e).expect("json"), old);
    let mut silence = NotificationEvent::silence(3_600_000);
    assert!(silence.is_silence());
    assert_eq!((silence.group_hash.as_str(), silence.count), ("", 0));
    assert_eq!(silence.title, crate::kind::no_events::title(3_600_000));
    silence.alert_id = Some("a1".into());
    let json = serde_json::to_string(&silence).expect("json");
    assert!(
        json.contains(r#""silencePeriodMs":3600000"#) && json.contains(r#""alertId":"a1""#),
        "{json}"
    );
    assert_eq!(
        serde_json::from_str::<NotificationEvent>(&json).expect("parse"),
        silence
    );
}
