use super::*;
use serde_json::json;

#[test]
fn a_no_events_rule_says_the_last_event_and_when_it_fires() {
    let rule = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "NO_EVENTS",
        "quietPeriod": 3_600_000,
        "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.test/x", "minPeriod": 0}}});
    let event = Event {
        title: "t".into(),
        group_hash: "g".into(),
        is_new: false,
        repetition_id: None,
        timestamp: None,
        user: None,
    };
    let e = Explanation::new(&[rule], &Limits::default(), &RuleDefaults::default(), &event);
    let silences = e.silences().to_vec();
    assert_eq!(silences, vec![("5e3eef0679fa3700a0198a4a".to_owned(), 3_600_000)]);
    let mut v = e.finish(&[], &[]);
    with_last_event(&mut v, &silences, Some(0));
    assert_eq!(v[0].verdict, Verdict::Counting);
    assert!(
        v[0].reason
            .ends_with("(the project's last event: 1970-01-01T00:00:00Z)"),
        "{}",
        v[0].reason
    );
    assert_eq!(v[0].window_ends_at, Some(3_600_000));
    let mut v = Explanation::new(&[], &Limits::default(), &RuleDefaults::default(), &event).finish(&[], &[]);
    with_last_event(&mut v, &silences, None);
    assert!(v.is_empty());
}

fn peek(count: u64, fired_at: Option<i64>, start: Option<i64>) -> Peek {
    Peek {
        now_ms: 10_000,
        fired_at,
        count,
        window_start: start,
        ..Peek::default()
    }
}

#[test]
fn verdicts_from_counter_state() {
    let fixed = Want::Count {
        threshold: 3,
        period_ms: 60_000,
        window: Window::Fixed,
    };
    let sliding = Want::Count {
        threshold: 3,
        period_ms: 60_000,
        window: Window::Sliding,
    };
    let cases = [
        (Want::FirstSeen, peek(0, None, None), Verdict::WouldFire),
        (Want::FirstSeen, peek(0, Some(5), None), Verdict::AlreadyNotified),
        (fixed, peek(0, None, None), Verdict::Counting),
        (fixed, peek(1, None, Some(9_000)), Verdict::Counting),
        (fixed, peek(2, None, Some(9_000)), Verdict::WouldFire),
        (fixed, peek(3, Some(9_500), Some(9_000)), Verdict::AlreadyNotified),
        (fixed, peek(5, None, Some(9_000)), Verdict::Counting),
        (sliding, peek(2, None, None), Verdict::WouldFire),
        (sliding, peek(1, None, None), Verdict::Counting),
        (sliding, peek(3, Some(9_000), None), Verdict::CoolingDown),
    ];
    for (i, (want, p, expected)) in cases.iter().enumerate() {
        let v = counted("r", *want, p);
        assert_eq!(v.verdict, *expected, "case {i}: {v:?}");
    }
    let v = counted("r", fixed, &peek(1, None, Some(9_000)));
    assert_eq!(
        (v.count, v.threshold, v.window_ends_at),
        (Some(2), Some(3), Some(69_000))
    );
}

/// SPIKE and REAPPEARED verdicts from the counter's state: the numbers and the decision.
#[test]
fn spike_and_reappeared_verdicts() {
    let spike = Want::Spike(crate::rule::Spike {
        period_ms: 60_000,
        baseline_windows: 24,
        factor_milli: 5000,
        threshold: 10,
    });
    let p = |count, sum, buckets, fired_at| Peek {
        now_ms: 90_000,
        count,
        baseline_sum: sum,
        baseline_buckets: buckets,
        fired_at,
        ..Peek::default()
    };
    // (peek, verdict, predicted count, needed)
    let cases = [
        (p(50, 0, 0, None), Verdict::Counting, Some(51), None),
        (p(98, 480, 24, None), Verdict::Counting, Some(99), Some(100)),
        (p(99, 480, 24, None), Verdict::WouldFire, Some(100), Some(100)),
        (p(8, 24, 24, None), Verdict::Counting, Some(9), Some(10)),
        (p(9, 24, 24, None), Verdict::WouldFire, Some(10), Some(10)),
        (
            p(300, 480, 24, Some(80_000)),
            Verdict::AlreadyNotified,
            // the count with this event, as in every other verdict
            Some(301),
            Some(100),
        ),
    ];
    for (peek, verdict, count, needed) in cases {
        let v = counted("r", spike, &peek);
        assert_eq!(
            (v.verdict, v.count, v.threshold),
            (verdict, count, needed),
            "{peek:?}: {v:?}"
        );
        assert_eq!(v.window_ends_at, Some(120_000), "the bucket's end");
    }
    let v = counted("r", spike, &p(99, 480, 24, None));
    assert_eq!(
        v.reason,
        "99 events in this bucket so far, baseline ~20.0 over 24 buckets: 100 needed (max of threshold 10 and \
         5× the baseline); this event would be #100 and fire"
    );
    let back = |armed_at_ms, is_new| Want::Reappeared {
        quiet_period_ms: 7 * 86_400_000,
        armed_at_ms,
        is_new,
    };
    let seen = |last: Option<i64>| Peek {
        now_ms: 20 * 86_400_000,
        last_seen: last,
        ..Peek::default()
    };
    let cases = [
        (
            back(0, false),
            seen(Some(8 * 86_400_000)),
            Verdict::WouldFire,
            "quiet for 12 days",
        ),
        (
            back(0, false),
            seen(Some(19 * 86_400_000)),
            Verdict::Counting,
            "quiet for 1 day",
        ),
        (
            back(0, true),
            seen(None),
            Verdict::Counting,
            "ONLY_NEW's business",
        ),
        (
            back(0, false),
            seen(None),
            Verdict::WouldFire,
            "not seen for more than 7 days",
        ),
        (
            back(19 * 86_400_000, false),
            seen(None),
            Verdict::Counting,
            "less than 7 days ago",
        ),
    ];
    for (want, peek, verdict, says) in cases {
        let v = counted("r", want, &peek);
        assert_eq!(v.verdict, verdict, "{want:?} {peek:?}: {v:?}");
        assert!(v.reason.contains(says), "{}", v.reason);
    }
}

/// Explain counts nothing: the reason says what is counted so far and where this event would stand, never
/// "2 of 3" as if this event had been counted.
#[test]
fn reasons_say_what_is_counted_and_where_this_event_would_stand() {
    let want = |threshold, window, users| {
        if users {
            Want::UniqueUsers {
                threshold,
                period_ms: 60_000,
                window,
            }
        } else {
            Want::Count {
                threshold,
                period_ms: 60_000,
                window,
            }
        }
    };
    let known = Peek {
        user_known: true,
        ..peek(2, None, Some(9_000))
    };
    let cases = [
        (
            want(3, Window::Fixed, false),
            peek(1, None, Some(9_000)),
            "1 of 3 events counted in this window so far; this event would be #2",
        ),
        (
            want(3, Window::Fixed, false),
            peek(2, None, Some(9_000)),
            "2 of 3 events counted in this window so far; this event would be #3 and fire",
        ),
        (
            want(3, Window::Fixed, false),
            peek(5, None, Some(9_000)),
            "5 of 3 events counted in this window so far, past the threshold without firing (it was lowered): this event would be #6; the window cannot fire before it ends",
        ),
        (
            want(3, Window::Sliding, false),
            peek(0, None, None),
            "0 of 3 events counted in the trailing window so far; this event would be #1",
        ),
        (
            want(3, Window::Sliding, false),
            peek(2, None, None),
            "2 of 3 events counted in the trailing window so far; this event would be #3 and fire",
        ),
        (
            want(3, Window::Fixed, true),
            peek(1, None, Some(9_000)),
            "1 of 3 distinct users counted in this window so far; this event's user would be #2",
        ),
        (
            want(3, Window::Fixed, true),
            known,
            "2 of 3 distinct users counted in this window so far; this event's user is already counted, so it would stay at 2",
        ),
    ];
    for (want, p, reason) in cases {
        assert_eq!(counted("r", want, &p).reason, reason);
    }
}

/// The wire form is the contract's (docs/api.md): the verdict names, camelCase keys, the optional fields
/// absent when unset, `windowEndsAt` in RFC 3339.
#[test]
fn verdicts_serialize_as_the_contract_says() {
    let names: Vec<String> = [
        Verdict::Disabled,
        Verdict::Filtered,
        Verdict::Invalid,
        Verdict::Counting,
        Verdict::WouldFire,
        Verdict::CoolingDown,
        Verdict::AlreadyNotified,
        Verdict::Muted,
    ]
    .iter()
    .map(|v| {
        let json = serde_json::to_value(v).expect("serializes");
        assert_eq!(json, json!(v.as_str()));
        v.to_string()
    })
    .collect();
    assert_eq!(
        names.join(" "),
        "disabled filtered invalid counting would_fire cooling_down already_notified muted"
    );
    let fixed = Want::Count {
        threshold: 3,
        period_ms: 60_000,
        window: Window::Fixed,
    };
    let v = counted("r1", fixed, &peek(1, None, Some(9_000)));
    assert_eq!(
        serde_json::to_string(&v).expect("serializes"),
        r#"{"ruleId":"r1","verdict":"counting","reason":"1 of 3 events counted in this window so far; this event would be #2","count":2,"threshold":3,"windowEndsAt":"1970-01-01T00:01:09Z"}"#
    );
    let v = RuleVerdict::new("r2", Verdict::Disabled, "off");
    assert_eq!(
        v.to_json(),
        json!({"ruleId": "r2", "verdict": "disabled", "reason": "off"})
    );
}

/// A whole project: the rules that need no counter are decided at once, the others in order from the
/// peeks; past the rule limit `invalid`, a matching mute `muted`.
/// A NO_EVENTS rule asks the counter nothing: it is not among the counting rules, and its verdict says the
/// event restarts the project's silence.
#[test]
fn no_events_rules_count_nothing() {
    let id = "5e3eef0679fa3700a0198a47";
    let notifications = [json!({"_id": id, "isEnabled": true, "whatToReceive": "NO_EVENTS",
        "quietPeriod": 3_600_000,
        "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x"}}})];
    let event = Event {
        title: "TypeError".into(),
        group_hash: "g1".into(),
        is_new: false,
        repetition_id: None,
        timestamp: None,
        user: None,
    };
    let e = Explanation::new(
        &notifications,
        &Limits::default(),
        &RuleDefaults::default(),
        &event,
    );
    assert_eq!(e.counting().count(), 0);
    let verdicts = e.finish(&[], &[]);
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].verdict, Verdict::Counting);
    assert!(
        verdicts[0].reason.contains("NO_EVENTS") && verdicts[0].reason.contains("1h of silence"),
        "{}",
        verdicts[0].reason
    );
    assert_eq!(verdicts[0].count, None);
}

/// Every verdict of a rule with on-call fields carries them and the clock it was read at, counting or not:
/// the on-call state is the rule's, whatever the event.
#[test]
fn verdicts_carry_the_rules_on_call_fields_and_the_clock() {
    let rule = |id: &str, extra: Value| {
        let mut r = json!({"_id": id, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 2,
            "thresholdPeriod": 60_000, "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x"}}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            r[k] = v.clone();
        }
        r
    };
    let quiet = json!({"quietHours": [{"from": "00:00", "to": "12:00", "timezone": "UTC"}],
        "renotify": {"every": 60_000, "max": 2}});
    let notifications = [
        rule("5e3eef0679fa3700a0198a41", quiet.clone()),
        rule(
            "5e3eef0679fa3700a0198a42",
            json!({"including": ["nope"], "quietHours": quiet["quietHours"]}),
        ),
        rule("5e3eef0679fa3700a0198a43", json!({})),
    ];
    let event = Event {
        title: "TypeError".into(),
        group_hash: "g1".into(),
        is_new: false,
        repetition_id: None,
        timestamp: None,
        user: None,
    };
    let e = Explanation::new(
        &notifications,
        &Limits::default(),
        &RuleDefaults::default(),
        &event,
    );
    let now = 86_400_000 + 3_600_000; // 1970-01-02T01:00Z, inside the window
    let peek = Peek {
        now_ms: now,
        ..Peek::default()
    };
    let v = e.finish_at(&[peek.clone(), peek], &[], now);
    assert_eq!(v.len(), 3);
    assert_eq!(v[1].verdict, Verdict::Filtered);
    for (i, has) in [(0, true), (1, true), (2, false)] {
        assert_eq!(v[i].at_ms, Some(now), "{i}");
        assert_eq!(v[i].on_call_rule.is_some(), has, "{i}");
        // no open alert: quiet hours only, no reminders
        let st = v[i].on_call(None);
        assert_eq!(st.is_some(), has, "{i}");
        if let Some(st) = st {
            assert_eq!(st.reminders, None);
            assert_eq!(
                st.quiet.and_then(|q| q.until_ms),
                Some(86_400_000 + 43_200_000),
                "{i}"
            );
        }
    }
    // not serialized: the API adds `onCall` with the alert
    assert!(v[0].to_json().get("onCallRule").is_none() && v[0].to_json().get("atMs").is_none());
}

#[test]
fn explanations_keep_the_rules_order() {
    let rule = |id: &str, extra: Value| {
        let mut r = json!({"_id": id, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 2,
            "thresholdPeriod": 60_000, "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/x"}}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            r[k] = v.clone();
        }
        r
    };
    let ids = [
        "5e3eef0679fa3700a0198a41",
        "5e3eef0679fa3700a0198a42",
        "5e3eef0679fa3700a0198a43",
        "5e3eef0679fa3700a0198a44",
        "5e3eef0679fa3700a0198a45",
        "5e3eef0679fa3700a0198a46",
    ];
    let notifications = [
        rule(ids[0], json!({})),
        rule(ids[1], json!({"isEnabled": false})),
        rule(ids[2], json!({"threshold": 0})),
        rule(ids[3], json!({"including": ["payment"]})),
        rule(ids[4], json!({"whatToReceive": "ONLY_NEW"})),
        rule(ids[5], json!({})),
    ];
    let limits = Limits {
        max_rules: 5,
        ..Limits::default()
    };
    let event = Event {
        title: "TypeError".into(),
        group_hash: "g1".into(),
        is_new: true,
        repetition_id: None,
        timestamp: None,
        user: None,
    };
    let e = Explanation::new(&notifications, &limits, &RuleDefaults::default(), &event);
    let counting: Vec<(&str, Want)> = e.counting().collect();
    assert_eq!(
        counting,
        [
            (
                ids[0],
                Want::Count {
                    threshold: 2,
                    period_ms: 60_000,
                    window: Window::Fixed
                }
            ),
            (ids[4], Want::FirstSeen)
        ]
    );
    let mute = Mute {
        mute_id: "m1".into(),
        rule_id: Some(ids[4].into()),
        group_hash: None,
        until_ms: 20_000,
    };
    let verdicts = e.finish(&[peek(1, None, Some(9_000)), peek(0, None, None)], &[mute]);
    let got: Vec<(&str, Verdict)> = verdicts.iter().map(|v| (v.rule_id.as_str(), v.verdict)).collect();
    assert_eq!(
        got,
        [
            (ids[0], Verdict::WouldFire),
            (ids[1], Verdict::Disabled),
            (ids[2], Verdict::Invalid),
            (ids[3], Verdict::Filtered),
            (ids[4], Verdict::Muted),
            (ids[5], Verdict::Invalid),
        ]
    );
    assert!(
        verdicts[4].reason.starts_with("muted until 1970-01-01T00:00:20Z (mute m1): counted, not delivered; without it: would_fire — ONLY_NEW"),
        "{}",
        verdicts[4].reason
    );
    assert!(verdicts[5]
        .reason
        .starts_with("not evaluated: the project has 6 rules, over the limit of 5"));
}
