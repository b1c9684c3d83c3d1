//! The on-call rooms' table tests.

use super::*;
use jiff::Timestamp;

use crate::rule::{ChannelConfig, ChannelKind, RawRule};
use serde_json::{json, Value};

const ID: &str = "5e3eef0679fa3700a0198a4a";
const M: i64 = 60_000;
const H: i64 = 3_600_000;

/// Unix ms of an RFC 3339 instant.
fn ms(s: &str) -> i64 {
    s.parse::<Timestamp>().expect("an instant").as_millisecond()
}

fn quiet(windows: &[(&str, &str, &str, &str)]) -> QuietHours {
    QuietHours {
        spans: Default::default(),
        windows: windows
            .iter()
            .map(|(days, from, to, tz)| {
                let mut d = [false; 7];
                for name in days.split(',') {
                    match name {
                        "daily" => d = [true; 7],
                        n => d[weekday(n).expect("a day")] = true,
                    }
                }
                QuietWindow::new(
                    d,
                    ClockTime::parse(from, false).expect("from"),
                    ClockTime::parse(to, true).expect("to"),
                    tz,
                )
                .expect("a window")
            })
            .collect(),
        bypass: vec![ChannelKind::Pagerduty],
    }
}

#[test]
fn renotify_due_times() {
    let r = Renotify {
        every_ms: 30 * M as u64,
        max: 3,
    };
    let opened = ms("2026-11-25T10:00:00Z");
    // (n, due)
    let cases = [
        (0, None),
        (1, Some(opened + 30 * M)),
        (2, Some(opened + 60 * M)),
        (3, Some(opened + 90 * M)),
        (4, None),
        (u32::MAX, None),
    ];
    for (n, want) in cases {
        assert_eq!(r.due_at(opened, n), want, "reminder {n}");
    }
    assert_eq!(r.next(opened, 0), Some((1, opened + 30 * M)));
    assert_eq!(r.next(opened, 2), Some((3, opened + 90 * M)));
    assert_eq!(r.next(opened, 3), None);
    assert_eq!(r.next(opened, u32::MAX), None);
    assert_eq!(r.summary(), "every 30m, 3 times");
    assert_eq!(
        Renotify {
            every_ms: 1000,
            max: 1
        }
        .summary(),
        "every 1s, once"
    );
    // far future: no overflow, no reminder
    let huge = Renotify {
        every_ms: u64::MAX,
        max: 100,
    };
    assert_eq!(huge.due_at(opened, 1), None);
}

#[test]
fn escalation_steps_go_in_order() {
    let step = |after_ms| EscalationStep {
        after_ms,
        channels: Vec::new(),
    };
    let steps = [step(15 * M as u64), step(H as u64), step(4 * H as u64)];
    let opened = ms("2026-11-25T10:00:00Z");
    // (sent, next)
    let cases = [
        (0, Some((0, opened + 15 * M))),
        (1, Some((1, opened + H))),
        (2, Some((2, opened + 4 * H))),
        (3, None),
        (9, None),
    ];
    for (sent, want) in cases {
        assert_eq!(next_escalation(&steps, opened, sent), want, "after {sent} sent");
    }
    assert_eq!(next_escalation(&[], opened, 0), None);
    assert_eq!(step(u64::MAX).due_at(opened), i64::MAX);
}

/// Explain's on-call status: reminders and steps by the schedule, stopped by an acknowledgement, quiet
/// hours with or without an alert, nothing for a resolved alert.
#[test]
fn on_call_status_table() {
    use crate::alert::{Alert, AlertState};
    let ch = |kind| ChannelConfig {
        kind,
        endpoint: "x".into(),
        min_period_s: 0,
        severity: None,
    };
    let rule = OnCallRule {
        renotify: Some(Renotify {
            every_ms: 30 * M as u64,
            max: 3,
        }),
        escalation: vec![
            EscalationStep {
                after_ms: 15 * M as u64,
                channels: vec![ch(ChannelKind::Webhook)],
            },
            EscalationStep {
                after_ms: H as u64,
                channels: vec![ch(ChannelKind::Email), ch(ChannelKind::Pagerduty)],
            },
        ],
        quiet_hours: quiet(&[("daily", "22:00", "07:00", "Europe/Berlin")]),
    };
    let opened = ms("2026-11-25T10:00:00Z"); // 11:00 in Berlin: not quiet
    let alert = |state, acked: Option<i64>| Alert {
        id: "0123456789abcdef01234567".into(),
        project_id: "p".into(),
        project_name: None,
        rule_id: ID.into(),
        group: "g".into(),
        title: "t".into(),
        state,
        firing: "f".into(),
        fired_at_ms: opened,
        acknowledged_at_ms: acked,
        acknowledged_by: acked.map(|_| "ann".into()),
        resolved_at_ms: None,
        resolved_by: None,
        events: 2,
        last_event_at_ms: opened,
        resolve_after_ms: 0,
        channels: Vec::new(),
        heard: Vec::new(),
        closes: Vec::new(),
    };
    let firing = alert(AlertState::Firing, None);
    let acked = alert(AlertState::Acknowledged, Some(opened + 40 * M));
    let resolved = alert(AlertState::Resolved, None);
    let not_quiet = Some(Quiet {
        until_ms: None,
        bypass: vec![ChannelKind::Pagerduty],
    });
    let rem = |sent, next_at_ms| {
        Some(Reminders {
            sent,
            max: 3,
            every_ms: 30 * M as u64,
            next_at_ms,
        })
    };
    let esc = |sent, next: Option<(usize, i64, &str)>| {
        Some(Escalation {
            sent,
            steps: 2,
            next: next.map(|(n, at, c)| (n, at, c.to_owned())),
        })
    };
    // (alert, now, reminders, escalation, words)
    let cases = vec![
        (
            Some(&firing),
            opened + 10 * M,
            rem(0, Some(opened + 30 * M)),
            esc(0, Some((1, opened + 15 * M, "webhook"))),
            vec![
                "reminders: 0 of 3 sent, the next at 2026-11-25T10:30:00Z (every 30m)",
                "escalation: step 1 of 2 (webhook) at 2026-11-25T10:15:00Z",
                "not in quiet hours now",
            ],
        ),
        // exactly due counts as sent
        (
            Some(&firing),
            opened + 30 * M,
            rem(1, Some(opened + 60 * M)),
            esc(1, Some((2, opened + H, "email,pagerduty"))),
            vec![
                "reminders: 1 of 3 sent, the next at 2026-11-25T11:00:00Z (every 30m)",
                "escalation: step 2 of 2 (email,pagerduty) at 2026-11-25T11:00:00Z",
                "not in quiet hours now",
            ],
        ),
        (
            Some(&firing),
            opened + 5 * H,
            rem(3, None),
            esc(2, None),
            vec![
                "reminders: 3 of 3 sent, none left",
                "escalation: 2 of 2 sent, none left",
                "not in quiet hours now",
            ],
        ),
        // acknowledged at +40m: one reminder and one step before it, none after
        (
            Some(&acked),
            opened + 5 * H,
            rem(1, None),
            esc(1, None),
            vec![
                "reminders: stopped by the acknowledgement after 1 of 3",
                "escalation: stopped by the acknowledgement after 1 of 2",
                "not in quiet hours now",
            ],
        ),
        (
            Some(&resolved),
            opened + 10 * M,
            None,
            None,
            vec!["not in quiet hours now"],
        ),
        (None, opened + 10 * M, None, None, vec!["not in quiet hours now"]),
    ];
    for (alert, now, reminders, escalation, words) in cases {
        let st = rule.status(alert, now);
        let what = format!("{:?} at {now}", alert.map(|a| a.state));
        assert_eq!(st.reminders, reminders, "{what}");
        assert_eq!(st.escalation, escalation, "{what}");
        assert_eq!(st.quiet, not_quiet, "{what}");
        assert_eq!(st.words(), words, "{what}");
    }
    // 23:30 in Berlin: quiet until 07:00 Berlin (06:00 UTC); no alert, quiet hours only
    let st = rule.status(None, ms("2026-11-25T22:30:00Z"));
    assert_eq!(
        st.quiet.as_ref().and_then(|q| q.until_ms),
        Some(ms("2026-11-26T06:00:00Z"))
    );
    assert_eq!(
        st.words(),
        vec!["in quiet hours until 2026-11-26T06:00:00Z (pagerduty not held): firings are held"]
    );
    assert_eq!(
        st.to_json(),
        json!({"quietHours": {"quiet": true, "until": "2026-11-26T06:00:00Z", "bypass": ["pagerduty"]}})
    );
    let st = rule.status(Some(&firing), opened + 30 * M);
    assert_eq!(
        st.to_json(),
        json!({
            "reminders": {"sent": 1, "max": 3, "every": 1_800_000, "nextAt": "2026-11-25T11:00:00Z"},
            "escalation": {"sent": 1, "steps": 2, "nextStep": 2, "nextAt": "2026-11-25T11:00:00Z",
                "nextChannels": ["email", "pagerduty"]},
            "quietHours": {"quiet": false, "until": null, "bypass": ["pagerduty"]}
        })
    );
    let st = rule.status(Some(&acked), opened + 5 * H);
    assert_eq!(st.to_json()["reminders"]["nextAt"], Value::Null);
    assert_eq!(st.to_json()["escalation"]["nextStep"], Value::Null);
    // a rule without on-call fields has nothing to show
    assert!(OnCallRule::default().status(Some(&firing), opened).is_empty());
    assert!(OnCallRule::default()
        .status(Some(&firing), opened)
        .words()
        .is_empty());
}

#[test]
fn summaries_in_words() {
    let step = |after_ms, kinds: &[ChannelKind]| EscalationStep {
        after_ms,
        channels: kinds
            .iter()
            .map(|k| ChannelConfig {
                kind: *k,
                endpoint: "x".into(),
                min_period_s: 0,
                severity: None,
            })
            .collect(),
    };
    let steps = [
        step(15 * M as u64, &[ChannelKind::Pagerduty]),
        step(H as u64, &[ChannelKind::Email, ChannelKind::Slack]),
        step(2 * H as u64, &[]),
    ];
    assert_eq!(escalation_summary(&steps), "15m→pagerduty 1h→email,slack 2h→-");
    assert_eq!(escalation_summary(&[]), "");
    assert_eq!(resolve_after_summary(0), "by hand only");
    assert_eq!(resolve_after_summary(3_600_000), "after 1h without events");
}

#[test]
fn clock_times() {
    let cases = [
        ("00:00", false, Some(0)),
        ("07:30", false, Some(450)),
        ("23:59", false, Some(1439)),
        ("24:00", true, Some(1440)),
        ("24:00", false, None),
        ("24:01", true, None),
        ("7:30", false, None),
        ("07:60", false, None),
        ("0730", false, None),
        ("07:3a", false, None),
        ("+7:30", false, None),
        ("", false, None),
    ];
    for (s, end, want) in cases {
        assert_eq!(
            ClockTime::parse(s, end).map(ClockTime::minutes),
            want,
            "{s} end={end}"
        );
    }
    assert_eq!(ClockTime(450).to_string(), "07:30");
    assert_eq!(ClockTime(1440).to_string(), "24:00");
}

#[test]
fn weekday_names_and_summaries() {
    assert_eq!(weekday("mon"), Some(0));
    assert_eq!(weekday("Sunday"), Some(6));
    assert_eq!(weekday(" FRI "), Some(4));
    assert_eq!(weekday("funday"), None);
    let d = |s: &str| {
        let mut out = [false; 7];
        for c in s.split(',') {
            out[weekday(c).expect("day")] = true;
        }
        out
    };
    assert_eq!(days_summary(&[true; 7]), "daily");
    assert_eq!(days_summary(&d("mon,tue,wed,thu,fri")), "mon-fri");
    assert_eq!(days_summary(&d("sat,sun")), "sat,sun");
    assert_eq!(days_summary(&d("mon,wed,thu,fri")), "mon,wed-fri");
    assert_eq!(days_summary(&d("sun")), "sun");
}

/// Inside a window → when it ends (UTC); across midnight and the daylight-saving nights of Berlin and New York.
#[test]
fn window_at_across_midnight_and_daylight_saving() {
    let berlin = quiet(&[("daily", "22:00", "07:00", "Europe/Berlin")]);
    let new_york = quiet(&[("daily", "22:00", "07:00", "America/New_York")]);
    let friday_night = quiet(&[("fri", "22:00", "07:00", "UTC")]);
    let gap_start = quiet(&[("sun", "02:30", "04:00", "Europe/Berlin")]);
    let gap_end = quiet(&[("sat", "23:00", "02:30", "Europe/Berlin")]);
    let fold_start = quiet(&[("sun", "02:30", "06:00", "Europe/Berlin")]);
    let ny_fold = quiet(&[("sun", "01:30", "03:00", "America/New_York")]);
    // (what, quiet hours, at, quiet until)
    let cases: Vec<(&str, &QuietHours, &str, Option<&str>)> = vec![
        // Berlin, an ordinary night in winter (CET, UTC+1): 21:00Z … 06:00Z
        ("winter before", &berlin, "2026-01-14T20:59:59.999Z", None),
        (
            "winter start",
            &berlin,
            "2026-01-14T21:00:00Z",
            Some("2026-01-15T06:00:00Z"),
        ),
        (
            "winter after midnight",
            &berlin,
            "2026-01-15T03:00:00Z",
            Some("2026-01-15T06:00:00Z"),
        ),
        ("winter end", &berlin, "2026-01-15T06:00:00Z", None),
        // Berlin, summer (CEST, UTC+2): 20:00Z … 05:00Z
        (
            "summer",
            &berlin,
            "2026-07-01T20:30:00Z",
            Some("2026-07-02T05:00:00Z"),
        ),
        ("summer day", &berlin, "2026-07-02T12:00:00Z", None),
        // Berlin spring-forward night (29 March 2026, 02:00 CET → 03:00 CEST): 22:00 CET = 21:00Z … 07:00
        // CEST = 05:00Z, 8 hours
        (
            "berlin spring start",
            &berlin,
            "2026-03-28T21:00:00Z",
            Some("2026-03-29T05:00:00Z"),
        ),
        (
            "berlin spring in the gap",
            &berlin,
            "2026-03-29T01:30:00Z",
            Some("2026-03-29T05:00:00Z"),
        ),
        (
            "berlin spring last ms",
            &berlin,
            "2026-03-29T04:59:59.999Z",
            Some("2026-03-29T05:00:00Z"),
        ),
        ("berlin spring end", &berlin, "2026-03-29T05:00:00Z", None),
        // Berlin fall-back night (25 October 2026, 03:00 CEST → 02:00 CET): 22:00 CEST = 20:00Z … 07:00 CET =
        // 06:00Z, 10 hours
        ("berlin fall before", &berlin, "2026-10-24T19:59:00Z", None),
        (
            "berlin fall start",
            &berlin,
            "2026-10-24T20:00:00Z",
            Some("2026-10-25T06:00:00Z"),
        ),
        (
            "berlin fall repeated hour",
            &berlin,
            "2026-10-25T00:30:00Z",
            Some("2026-10-25T06:00:00Z"),
        ),
        (
            "berlin fall repeated again",
            &berlin,
            "2026-10-25T01:30:00Z",
            Some("2026-10-25T06:00:00Z"),
        ),
        (
            "berlin fall last hour",
            &berlin,
            "2026-10-25T05:30:00Z",
            Some("2026-10-25T06:00:00Z"),
        ),
        ("berlin fall end", &berlin, "2026-10-25T06:00:00Z", None),
        // New York spring-forward night (8 March 2026, 02:00 EST → 03:00 EDT): 22:00 EST = 03:00Z … 07:00 EDT
        // = 11:00Z, 8 hours
        ("ny spring before", &new_york, "2026-03-08T02:59:00Z", None),
        (
            "ny spring start",
            &new_york,
            "2026-03-08T03:00:00Z",
            Some("2026-03-08T11:00:00Z"),
        ),
        (
            "ny spring in the gap",
            &new_york,
            "2026-03-08T07:30:00Z",
            Some("2026-03-08T11:00:00Z"),
        ),
        ("ny spring end", &new_york, "2026-03-08T11:00:00Z", None),
        // New York fall-back night (1 November 2026, 02:00 EDT → 01:00 EST): 22:00 EDT = 02:00Z … 07:00 EST =
        // 12:00Z, 10 hours
        (
            "ny fall start",
            &new_york,
            "2026-11-01T02:00:00Z",
            Some("2026-11-01T12:00:00Z"),
        ),
        (
            "ny fall repeated hour",
            &new_york,
            "2026-11-01T06:30:00Z",
            Some("2026-11-01T12:00:00Z"),
        ),
        (
            "ny fall last hour",
            &new_york,
            "2026-11-01T11:59:00Z",
            Some("2026-11-01T12:00:00Z"),
        ),
        ("ny fall end", &new_york, "2026-11-01T12:00:00Z", None),
        // `days` are the days a window starts on: Friday 22:00 … Saturday 07:00 only
        (
            "friday night",
            &friday_night,
            "2026-11-27T22:00:00Z",
            Some("2026-11-28T07:00:00Z"),
        ),
        (
            "saturday morning",
            &friday_night,
            "2026-11-28T06:59:00Z",
            Some("2026-11-28T07:00:00Z"),
        ),
        ("saturday night", &friday_night, "2026-11-28T23:00:00Z", None),
        ("friday morning", &friday_night, "2026-11-27T06:00:00Z", None),
        ("thursday night", &friday_night, "2026-11-26T23:00:00Z", None),
        // a start skipped by spring-forward: the window starts when the clock jumps (01:00Z = 03:00 CEST)
        ("gap start before", &gap_start, "2026-03-29T00:59:59Z", None),
        (
            "gap start",
            &gap_start,
            "2026-03-29T01:00:00Z",
            Some("2026-03-29T02:00:00Z"),
        ),
        // an end skipped by spring-forward: the window ends when the clock jumps
        (
            "gap end inside",
            &gap_end,
            "2026-03-28T22:30:00Z",
            Some("2026-03-29T01:00:00Z"),
        ),
        ("gap end", &gap_end, "2026-03-29T01:00:00Z", None),
        // a start repeated by fall-back: its first occurrence (02:30 CEST = 00:30Z); ends 06:00 CET = 05:00Z
        ("fold start before", &fold_start, "2026-10-25T00:29:00Z", None),
        (
            "fold start",
            &fold_start,
            "2026-10-25T00:30:00Z",
            Some("2026-10-25T05:00:00Z"),
        ),
        // New York: 01:30 EDT = 05:30Z … 03:00 EST = 08:00Z
        ("ny fold before", &ny_fold, "2026-11-01T05:29:00Z", None),
        (
            "ny fold",
            &ny_fold,
            "2026-11-01T06:45:00Z",
            Some("2026-11-01T08:00:00Z"),
        ),
    ];
    for (what, q, at, want) in cases {
        assert_eq!(q.window_at(ms(at)), want.map(ms), "{what}: at {at}");
    }
    // the nights' lengths
    let night = |q: &QuietHours, start: &str| q.window_at(ms(start)).expect("quiet") - ms(start);
    assert_eq!(night(&berlin, "2026-01-14T21:00:00Z"), 9 * H);
    assert_eq!(night(&berlin, "2026-03-28T21:00:00Z"), 8 * H);
    assert_eq!(night(&berlin, "2026-10-24T20:00:00Z"), 10 * H);
    assert_eq!(night(&new_york, "2026-03-08T03:00:00Z"), 8 * H);
    assert_eq!(night(&new_york, "2026-11-01T02:00:00Z"), 10 * H);
}

/// Windows that follow on from each other make one quiet; a week of quiet is held a bounded time at once.
#[test]
fn windows_chain_and_stay_bounded() {
    let weeknights_and_weekend = quiet(&[
        ("mon,tue,wed,thu,fri", "22:00", "07:00", "UTC"),
        ("sat,sun", "00:00", "24:00", "UTC"),
    ]);
    // Friday 23:00 → Saturday 07:00, joined by Saturday and Sunday 00:00-24:00 → Monday 00:00
    assert_eq!(
        weeknights_and_weekend.window_at(ms("2026-11-27T23:00:00Z")),
        Some(ms("2026-11-30T00:00:00Z"))
    );
    assert_eq!(
        weeknights_and_weekend.window_at(ms("2026-11-29T12:00:00Z")),
        Some(ms("2026-11-30T00:00:00Z"))
    );
    assert_eq!(weeknights_and_weekend.window_at(ms("2026-11-30T12:00:00Z")), None);
    // Berlin and New York windows in one rule: the later end of those holding
    let both = quiet(&[
        ("daily", "22:00", "07:00", "Europe/Berlin"),
        ("daily", "22:00", "07:00", "America/New_York"),
    ]);
    // 05:30Z: Berlin (CET) quiet until 06:00Z, New York (EST) quiet 03:00Z … 12:00Z
    assert_eq!(
        both.window_at(ms("2026-01-15T05:30:00Z")),
        Some(ms("2026-01-15T12:00:00Z"))
    );
    // always quiet: held, for a bounded time, then asked again
    let always = quiet(&[("daily", "00:00", "24:00", "UTC")]);
    let at = ms("2026-11-25T10:00:00Z");
    let until = always.window_at(at).expect("quiet");
    assert!(until >= at + 7 * 24 * H, "{until}");
    assert!(until <= at + 400 * 24 * H, "{until}");
    // never quiet
    assert_eq!(QuietHours::default().window_at(at), None);
    assert_eq!(QuietHours::default().window_at(i64::MAX), None);
}

#[test]
fn bypassed_channels_are_never_held() {
    let q = quiet(&[("daily", "22:00", "07:00", "UTC")]);
    let night = ms("2026-11-25T23:00:00Z");
    let day = ms("2026-11-25T12:00:00Z");
    // (channel, at, held until)
    let cases = [
        (ChannelKind::Pagerduty, night, None),
        (ChannelKind::Slack, night, Some(ms("2026-11-26T07:00:00Z"))),
        (ChannelKind::Email, night, Some(ms("2026-11-26T07:00:00Z"))),
        (ChannelKind::Slack, day, None),
        (ChannelKind::Pagerduty, day, None),
    ];
    for (channel, at, want) in cases {
        assert_eq!(q.is_bypassed(channel), channel == ChannelKind::Pagerduty);
        assert_eq!(q.held_until(channel, at), want, "{channel} at {at}");
    }
    assert_eq!(q.summary(), "daily 22:00-07:00 UTC (bypass pagerduty)");
}

fn rule(extra: serde_json::Value) -> serde_json::Value {
    let mut doc = json!({"_id": ID, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
        "thresholdPeriod": 60000,
        "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}});
    for (k, v) in extra.as_object().expect("object") {
        doc[k] = v.clone();
    }
    doc
}

const PD_KEY: &str = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";

/// Valid on-call fields compile into their typed values, and the document is written back as read.
#[test]
fn on_call_fields_compile() {
    let doc = rule(json!({
        "renotify": {"every": 1_800_000, "max": 3},
        "escalation": [
            {"after": 900_000, "channels": {"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0,
                "severity": "critical"}}},
            {"after": 3_600_000, "channels": {
                "email": {"isEnabled": true, "endpoint": "cto@example.com", "minPeriod": 0},
                "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/y", "minPeriod": 0}}}
        ],
        "quietHours": [
            {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00", "timezone": "Europe/Berlin"},
            {"days": ["Saturday", "sun"], "from": "00:00", "to": "24:00", "timezone": "UTC"}
        ],
        "quietHoursBypass": ["pagerduty"]
    }));
    let raw = RawRule::from_value(&doc).expect("object");
    let (r, problems) = raw.validate().expect("usable");
    // nothing to say: quietHours is applied
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        r.renotify,
        Some(Renotify {
            every_ms: 1_800_000,
            max: 3
        })
    );
    assert_eq!(r.escalation.len(), 2);
    assert_eq!(r.escalation[0].after_ms, 900_000);
    assert_eq!(r.escalation[0].channels[0].kind, ChannelKind::Pagerduty);
    assert_eq!(
        r.escalation[0].channels[0].severity,
        Some(crate::rule::Severity::Critical)
    );
    let kinds: Vec<_> = r.escalation[1].channels.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChannelKind::Email, ChannelKind::Slack]);
    assert_eq!(r.quiet_hours.windows.len(), 2);
    assert_eq!(r.quiet_hours.windows[0].timezone(), "Europe/Berlin");
    assert!(r.quiet_hours.is_bypassed(ChannelKind::Pagerduty));
    assert!(!r.quiet_hours.is_bypassed(ChannelKind::Slack));
    assert_eq!(
        r.summary(),
        "SEEN_MORE 3/1m; renotify every 30m, 3 times; escalate 15m→pagerduty 1h→email,slack; quiet mon-fri \
         22:00-07:00 Europe/Berlin, sat,sun 00:00-24:00 UTC (bypass pagerduty)"
    );
    assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
    // unset or null: nothing
    let raw = RawRule::from_value(&rule(
        json!({"renotify": null, "escalation": null, "quietHours": null,
        "quietHoursBypass": null}),
    ))
    .expect("object");
    let (r, problems) = raw.validate().expect("usable");
    assert!(
        problems.is_empty() && r.renotify.is_none() && r.escalation.is_empty() && r.quiet_hours.is_empty()
    );
    assert_eq!(r.summary(), "SEEN_MORE 3/1m");
}

/// Every wrong value is a problem naming the field, with its fix; the document is kept as read.
#[test]
fn on_call_problems_have_fixes() {
    let slack =
        json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/y", "minPeriod": 0}});
    let step = |after: serde_json::Value| json!({"after": after, "channels": slack.clone()});
    let window = |days: serde_json::Value, from: &str, to: &str, tz: serde_json::Value| json!({"days": days, "from": from, "to": to, "timezone": tz});
    let mon = json!(["mon"]);
    let berlin = json!("Europe/Berlin");
    // (fields, what the message says, what the fix says)
    let cases = vec![
        (
            json!({"renotify": 30}),
            "`renotify` must be an object",
            "\"every\": 1800000",
        ),
        (
            json!({"renotify": {"every": 999, "max": 3}}),
            "`renotify.every` must be milliseconds between 1000",
            "renotify.every",
        ),
        (
            json!({"renotify": {"max": 3}}),
            "`renotify.every` must be",
            "renotify.every",
        ),
        (
            json!({"renotify": {"every": "30m", "max": 3}}),
            "got \"30m\"",
            "1800000",
        ),
        (
            json!({"renotify": {"every": 60000, "max": 0}}),
            "`renotify.max` must be a whole number between 1 and 100, got 0",
            "renotify.max",
        ),
        (
            json!({"renotify": {"every": 60000, "max": 101}}),
            "got 101",
            "renotify.max",
        ),
        (
            json!({"renotify": {"every": 60000}}),
            "`renotify.max` must be",
            "renotify.max",
        ),
        (
            json!({"escalation": {"after": 1000}}),
            "`escalation` must be a list of steps",
            "escalation",
        ),
        (
            json!({"escalation": (0..6).map(|i| step(json!(60000 * (i + 1)))).collect::<Vec<_>>()}),
            "6 steps, more than 5",
            "at most 5",
        ),
        (
            json!({"escalation": [3]}),
            "escalation step 1 (`escalation[0]`) must be an object",
            "\"after\"",
        ),
        (
            json!({"escalation": [step(json!(500))]}),
            "`escalation[0].after` must be milliseconds between 1000",
            "escalation[0].after",
        ),
        (
            json!({"escalation": [{"channels": slack.clone()}]}),
            "`escalation[0].after` must be",
            "900000",
        ),
        (
            json!({"escalation": [step(json!(600000)), step(json!(600000))]}),
            "escalation step 2 has `after` 600000, not later than step 1's 600000",
            "order the steps by `after`",
        ),
        (
            json!({"escalation": [step(json!(600000)), step(json!(60000))]}),
            "not later than step 1's",
            "each later than the one before",
        ),
        (
            json!({"escalation": [{"after": 60000}]}),
            "`escalation[0].channels` must be an object of channels",
            "escalation[0].channels",
        ),
        (
            json!({"escalation": [{"after": 60000, "channels": {"slack": {"isEnabled": true, "endpoint": "x", "minPeriod": 9_999_999}}}]}),
            "`escalation[0].channels`: channel `slack` has `minPeriod` 9999999, over the limit",
            "604800",
        ),
        (
            json!({"quietHours": {"from": "22:00"}}),
            "`quietHours` must be a list of windows",
            "\"timezone\"",
        ),
        (
            json!({"quietHours": ["22:00-07:00"]}),
            "`quietHours[0]` must be an object",
            "\"from\"",
        ),
        (
            json!({"quietHours": [window(json!(["mon", "funday"]), "22:00", "07:00", berlin.clone())]}),
            "`quietHours[0].days` has an unknown weekday \"funday\"",
            "\"mon\", \"tue\"",
        ),
        (
            json!({"quietHours": [window(json!([]), "22:00", "07:00", berlin.clone())]}),
            "`quietHours[0].days` is empty",
            "leave `days` out",
        ),
        (
            json!({"quietHours": [window(json!("mon"), "22:00", "07:00", berlin.clone())]}),
            "`quietHours[0].days` must be a list of weekdays",
            "\"sun\"",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "10pm", "07:00", berlin.clone())]}),
            "`quietHours[0].from` must be a 24-hour time \"HH:MM\" (00:00 … 23:59), got \"10pm\"",
            "\"22:00\"",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "24:00", "07:00", berlin.clone())]}),
            "`quietHours[0].from` must be",
            "quietHours[0].from",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "22:00", "7:00", berlin.clone())]}),
            "`quietHours[0].to` must be a 24-hour time \"HH:MM\" (00:00 … 24:00), got \"7:00\"",
            "\"07:00\"",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "22:00", "22:00", berlin.clone())]}),
            "`quietHours[0]` goes from 22:00 to 22:00: a window that never ends",
            "span midnight",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "00:00", "00:00", berlin.clone())]}),
            "a window that never ends",
            "\"24:00\"",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!("Europe/Berln"))]}),
            "`quietHours[0].timezone` \"Europe/Berln\" is not a time zone Klaxon knows",
            "\"Europe/Berlin\"",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!("CEST+2"))]}),
            "is not a time zone Klaxon knows",
            "IANA",
        ),
        (
            json!({"quietHours": [window(mon.clone(), "22:00", "07:00", json!(1))]}),
            "`quietHours[0].timezone` must be an IANA time zone name, got 1",
            "UTC",
        ),
        (
            json!({"quietHours": [{"days": ["mon"], "from": "22:00", "to": "07:00"}]}),
            "`quietHours[0]` has no `timezone`",
            "\"America/New_York\"",
        ),
        (
            json!({"quietHours": (0..22).map(|_| window(mon.clone(), "22:00", "07:00", berlin.clone())).collect::<Vec<_>>()}),
            "22 windows, more than 21",
            "merge",
        ),
        (
            json!({"quietHoursBypass": ["pagerdty"]}),
            "`quietHoursBypass` has an unknown channel \"pagerdty\"",
            "did you mean \"pagerduty\"?",
        ),
        (
            json!({"quietHoursBypass": "pagerduty"}),
            "`quietHoursBypass` must be a list of channel names",
            "pagerduty",
        ),
    ];
    for (fields, says, fix) in cases {
        let doc = rule(fields.clone());
        let raw = RawRule::from_value(&doc).expect("object");
        let p = raw.validate().expect_err(&fields.to_string());
        assert!(p.fatal, "{fields}: {p}");
        assert!(p.message.contains(says), "{fields}: {p}\nshould say: {says}");
        assert!(p.fix.contains(fix), "{fields}: {p}\nthe fix should say: {fix}");
        assert_eq!(p.rule_id.as_deref(), Some(ID));
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc, "{fields}");
    }
}

/// A step's channels are checked like the rule's: warnings name the step, the step keeps its usable channels.
#[test]
fn escalation_channels_are_checked_like_the_rules() {
    let limits = crate::Limits::new(100, 1000, 2).expect("limits");
    // (step channels, usable channels left, what a warning says)
    let cases = vec![
        (
            json!({"pagerduty": {"isEnabled": true, "endpoint": "too-short", "minPeriod": 0}}),
            1,
            Some(
                "`escalation[0].channels`: channel `pagerduty` endpoint is not an Events API v2 routing key",
            ),
        ),
        (
            json!({"discord": {"isEnabled": true, "endpoint": "https://discord.com/channels/1/2", "minPeriod": 0}}),
            1,
            Some("not a Discord webhook URL"),
        ),
        (
            json!({"teams": {"isEnabled": true, "endpoint": "http://8.8.8.8/teams", "minPeriod": 0}}),
            1,
            Some("Teams Workflows webhooks are https"),
        ),
        (
            json!({"slack": {"isEnabled": true, "endpoint": " ", "minPeriod": 0}}),
            0,
            Some("`escalation[0].channels`: channel `slack` is enabled but has no endpoint"),
        ),
        (
            json!({"email": {"isEnabled": true, "endpoint": "a@x.io,b@x.io,c@x.io", "minPeriod": 0}}),
            1,
            Some("`escalation[0].channels`: channel `email` has 3 recipients, over the limit of 2"),
        ),
        (
            json!({"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0, "severity": "fatal"}}),
            1,
            Some("channel `pagerduty` has `severity` \"fatal\""),
        ),
        (
            json!({"slack": {"isEnabled": true, "endpont": "https://hooks.slack.test/x", "minPeriod": 0}}),
            0,
            Some("unknown key `escalation[0].channels.slack.endpont` is ignored; did you mean `endpoint`?"),
        ),
        (
            json!({"slack": {"isEnabled": false, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}),
            0,
            Some("escalation step 1 has no usable channel"),
        ),
        (
            json!({"webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}}),
            0,
            Some("escalation step 1 has no usable channel"),
        ),
        (
            json!({"pagerduty": {"isEnabled": true, "endpoint": PD_KEY, "minPeriod": 0}}),
            1,
            None,
        ),
    ];
    for (channels, usable, says) in cases {
        let doc = rule(json!({"escalation": [{"after": 60000, "channels": channels}]}));
        let (r, problems) = RawRule::from_value(&doc)
            .expect("object")
            .validate_with(&limits, &crate::RuleDefaults::default())
            .expect("usable");
        assert_eq!(r.escalation[0].channels.len(), usable, "{channels}");
        match says {
            Some(says) => {
                assert!(
                    problems
                        .iter()
                        .any(|p| p.message.contains(says) && !p.fix.is_empty() && !p.fatal),
                    "{channels}: {problems:?}"
                );
                for p in &problems {
                    assert!(!p.message.contains(PD_KEY), "{p}");
                }
            }
            None => assert!(problems.is_empty(), "{channels}: {problems:?}"),
        }
    }
    // the email limit keeps the first addresses, as for the rule's own channel
    let doc = rule(
        json!({"escalation": [{"after": 60000, "channels": {"email": {"isEnabled": true,
        "endpoint": "a@x.io,b@x.io,c@x.io", "minPeriod": 0}}}]}),
    );
    let (r, problems) = RawRule::from_value(&doc)
        .expect("object")
        .validate_with(&limits, &crate::RuleDefaults::default())
        .expect("usable");
    assert_eq!(r.escalation[0].channels[0].endpoint, "a@x.io,b@x.io");
    assert!(problems.iter().any(|p| p.limit));
}

/// Warnings that do not make the rule unusable: misspelt keys, a bypass without windows.
#[test]
fn on_call_warnings() {
    let cases = vec![
        (
            json!({"renotify": {"every": 60000, "max": 2, "evry": 3}}),
            "unknown key `renotify.evry` is ignored; did you mean `every`?",
        ),
        (
            json!({"escalation": [{"aftr": 60000, "after": 60000, "channels": {}}]}),
            "did you mean `after`?",
        ),
        (
            json!({"quietHours": [{"from": "22:00", "to": "07:00", "timezone": "UTC", "timeZone": "UTC"}]}),
            "unknown key `quietHours[0].timeZone` is ignored; did you mean `timezone`?",
        ),
        (
            json!({"quietHoursBypass": ["pagerduty"]}),
            "`quietHoursBypass` has no effect",
        ),
        (json!({"quietHour": []}), "did you mean `quietHours`?"),
        (json!({"renotfy": {}}), "did you mean `renotify`?"),
    ];
    for (fields, says) in cases {
        let (_, problems) = RawRule::from_value(&rule(fields.clone()))
            .expect("object")
            .validate()
            .expect("usable");
        assert!(
            problems
                .iter()
                .any(|p| !p.fatal && p.message.contains(says) && !p.fix.is_empty()),
            "{fields}: {problems:?}"
        );
    }
}

/// Issue #42: the spans computed once per rule version answer exactly as the windows' chain computed per firing,
/// over a year of moments (daylight saving both ways, two time zones, windows that touch, overlap, span midnight
/// and cover whole days), while the cache moves along.
#[test]
fn spans_answer_as_the_chain_does() {
    let schedules = [
        quiet(&[("daily", "22:00", "07:00", "Europe/Berlin")]),
        quiet(&[
            ("mon,tue,wed,thu,fri", "22:00", "07:00", "UTC"),
            ("sat,sun", "00:00", "24:00", "UTC"),
        ]),
        quiet(&[
            ("daily", "22:00", "07:00", "Europe/Berlin"),
            ("daily", "22:00", "07:00", "America/New_York"),
            ("sun", "02:30", "04:00", "Europe/Berlin"),
            ("sat", "23:00", "02:30", "Europe/Berlin"),
            ("wed", "12:00", "12:30", "Asia/Kolkata"),
        ]),
        // 21 windows that follow on from each other all week: every moment is quiet, held 8 days at a time
        quiet(
            &["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
                .iter()
                .flat_map(|d| {
                    [("00:00", "08:00"), ("08:00", "16:00"), ("16:00", "24:00")]
                        .map(|(f, t)| (*d, f, t, "Europe/Berlin"))
                })
                .collect::<Vec<_>>(),
        ),
    ];
    let start = ms("2026-01-01T00:00:00Z");
    for (n, q) in schedules.iter().enumerate() {
        // a prime step: moments at every minute of the day and every day of the week, in order (the cache moves
        // forward) and then a few back in time (it is computed again)
        let mut at = start;
        let mut quiet_seen = 0;
        for _ in 0..1_500 {
            let want = q.chained_window_at(at);
            assert_eq!(q.window_at(at), want, "schedule {n} at {at}");
            quiet_seen += usize::from(want.is_some());
            at += 5 * H + 13 * M + 7_000;
        }
        assert!(quiet_seen > 0, "schedule {n} is quiet sometimes");
        for back in [at - 300 * 24 * H, start, start + 17 * M] {
            assert_eq!(
                q.window_at(back),
                q.chained_window_at(back),
                "schedule {n} at {back}"
            );
        }
    }
    // the whole week: held eight days at a time, then asked again
    let at = ms("2026-11-25T10:00:00Z");
    assert_eq!(schedules[3].window_at(at), Some(at + 8 * 24 * H));
}
