use super::*;
use crate::filter::FilterMiss;
use serde_json::json;

/// An event of group `g` (the tests of this file all use it).
pub(super) fn ev(title: &str, is_new: bool, user: Option<&str>) -> Event {
    Event {
        title: title.into(),
        group_hash: "g".into(),
        is_new,
        repetition_id: None,
        timestamp: None,
        user: user.map(str::to_owned),
    }
}

/// The worker evaluates with `wants`, explain reports `decide`: one function, the same answers.
#[test]
fn decide_table_and_wants_agree() {
    let hook = json!({"webhook": {"isEnabled": true, "endpoint": "https://h.example/x", "minPeriod": 0}});
    let rule = |extra: Value| {
        let mut r = json!({"_id": "5e3eef0679fa3700a0198a49", "isEnabled": true, "whatToReceive": "SEEN_MORE",
                           "threshold": 3, "thresholdPeriod": 60000, "channels": hook});
        if let (Some(r), Value::Object(e)) = (r.as_object_mut(), extra) {
            r.extend(e);
        }
        parse_rule_value(&r).expect("rule").0
    };
    let count = Ok(Want::Count {
        threshold: 3,
        period_ms: 60000,
        window: Window::Fixed,
    });
    let cases: Vec<(CompiledRule, Event, Result<Want, Skip>)> = vec![
        (rule(json!({})), ev("Boom", false, None), count),
        (
            rule(json!({"isEnabled": false})),
            ev("Boom", false, None),
            Err(Skip::Disabled),
        ),
        (
            rule(json!({"channels": {}})),
            ev("Boom", false, None),
            Err(Skip::NoChannels),
        ),
        (
            rule(json!({"whatToReceive": "ONLY_NEW"})),
            ev("Boom", false, None),
            Err(Skip::NotNew),
        ),
        (
            rule(json!({"whatToReceive": "ONLY_NEW"})),
            ev("Boom", true, None),
            Ok(Want::FirstSeen),
        ),
        (
            rule(json!({"uniqueUsers": true})),
            ev("Boom", false, None),
            Err(Skip::NoUser),
        ),
        (
            rule(json!({"including": ["timeout"]})),
            ev("Boom", false, None),
            Err(Skip::Filtered(FilterMiss::NoIncludingWord)),
        ),
        (
            rule(json!({"excluding": ["", "Noise", "boom"]})),
            ev("BOOM here", false, None),
            Err(Skip::Filtered(FilterMiss::ExcludedWord(1))),
        ),
        (
            rule(json!({"includingPatterns": ["^Type"]})),
            ev("Boom", false, None),
            Err(Skip::Filtered(FilterMiss::NoIncludingPattern)),
        ),
        (
            rule(json!({"excludingPatterns": ["^a", "o{2}"]})),
            ev("Boom", false, None),
            Err(Skip::Filtered(FilterMiss::ExcludedPattern(1))),
        ),
        // NO_EVENTS never asks the counter, whatever the event (new or not, a title its filters would refuse)
        (
            rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000})),
            ev("Boom", true, None),
            Err(Skip::ProjectWide),
        ),
        (
            rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000, "including": ["x"]})),
            ev("Boom", false, Some("u1")),
            Err(Skip::ProjectWide),
        ),
        (
            rule(json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 3_600_000, "isEnabled": false})),
            ev("Boom", false, None),
            Err(Skip::Disabled),
        ),
    ];
    for (i, (rule, event, expected)) in cases.iter().enumerate() {
        let title = Title::new(&event.title);
        let got = rule.decide(event, &title);
        assert_eq!(&got, expected, "case {i}");
        assert_eq!(rule.wants(event, &title), got.ok(), "case {i}: wants = decide");
    }
    // The reason names what decided.
    let r = rule(json!({"excluding": ["noise", "boom"]}));
    let Err(Skip::Filtered(miss)) = r.decide(&ev("a Boom", false, None), &Title::new("a Boom")) else {
        panic!("filtered")
    };
    assert!(r.filter.describe(miss).contains("\"boom\""));
    let r = rule(json!({"excludingPatterns": ["o{2}"]}));
    let Err(Skip::Filtered(miss)) = r.decide(&ev("Boom", false, None), &Title::new("Boom")) else {
        panic!("filtered")
    };
    assert!(r.filter.describe(miss).contains("o{2}"));
}

/// SPIKE's decision: the baseline (bucket edges, empty buckets, young groups) and the count it needs
/// (factor exactly met).
#[test]
fn spike_table() {
    let spike = |w, factor_milli, threshold| Spike {
        period_ms: 60_000,
        baseline_windows: w,
        factor_milli,
        threshold,
    };
    let s = spike(3, 5000, 10);
    // (origin, cur, held buckets) → (sum, buckets)
    type Case = (i64, i64, Vec<(i64, u64)>, (u64, u64));
    let cases: Vec<Case> = vec![
        // the previous 3 buckets: 7, 8, 9 (cur 10); 6 is one too old and 10 is the current one
        (0, 10, vec![(6, 100), (7, 1), (8, 2), (9, 3), (10, 50)], (6, 3)),
        // empty buckets count as 0: only bucket 7 held, still 3 buckets
        (0, 10, vec![(7, 12)], (12, 3)),
        // nothing held at all after a long quiet: baseline 0 over 3 buckets
        (0, 10, vec![], (0, 3)),
        // a young group: first bucket 8, so buckets 8 and 9 only
        (8, 10, vec![(8, 4), (9, 6)], (10, 2)),
        // its first bucket: no baseline
        (10, 10, vec![(10, 5)], (0, 0)),
        // a bucket before the group's first (a stale one) is never part of it
        (9, 10, vec![(8, 40), (9, 6)], (6, 1)),
        // the clock went back before the group's first bucket
        (12, 10, vec![(9, 6)], (0, 0)),
    ];
    for (origin, cur, held, want) in cases {
        assert_eq!(
            s.baseline(origin, cur, held.clone()),
            want,
            "{origin} {cur} {held:?}"
        );
    }
    // (spike, sum, buckets) → needed
    let needed = [
        // no baseline (the group's first bucket): nothing fires
        (spike(24, 5000, 10), 0, 0, None),
        // baseline 0 over 24 buckets: the threshold
        (spike(24, 5000, 10), 0, 24, Some(10)),
        // 5 × mean 20 = 100
        (spike(24, 5000, 10), 480, 24, Some(100)),
        // 5 × mean 1 = 5, below the threshold
        (spike(24, 5000, 10), 24, 24, Some(10)),
        // factor exactly met: 1.5 × 10 = 15, not 16
        (spike(2, 1500, 1), 20, 2, Some(15)),
        // 2.2 × 10 = 22 exactly (a float would give 22.000000000000004 and round up to 23)
        (spike(2, 2200, 1), 20, 2, Some(22)),
        // a fraction rounds up: 1.5 × 7/3 = 3.5 → 4
        (spike(3, 1500, 1), 7, 3, Some(4)),
        // young group: mean of 2 buckets (4 + 6) / 2 = 5, × 5 = 25
        (spike(24, 5000, 10), 10, 2, Some(25)),
    ];
    for (s, sum, buckets, want) in needed {
        assert_eq!(s.needed(sum, buckets), want, "{s:?} {sum} {buckets}");
    }
    assert_eq!(s.bucket(119_999), 1);
    assert_eq!(s.bucket(120_000), 2);
    assert_eq!(s.bucket(-1), -1);
}

/// REAPPEARED's decision: quiet exactly met, a mark, no mark (new or not, rule watching long enough or not).
#[test]
fn reappeared_table() {
    let q = 1000;
    // (last seen, now, armed at, isNew) → fires
    let cases = [
        (Some(0), 999, 0, false, false),
        (Some(0), 1000, 0, false, true),
        (Some(0), 1000, 0, true, true),
        (Some(5000), 5000, 0, false, false),
        (None, 5000, 0, true, false),
        (None, 5000, 0, false, true),
        (None, 5000, 4001, false, false),
        (None, 5000, 4000, false, true),
        (None, 5000, i64::MAX, false, false),
    ];
    for (seen, now, armed, is_new, fires) in cases {
        assert_eq!(
            reappears(seen, now, q, armed, is_new),
            fires,
            "{seen:?} {now} {armed} {is_new}"
        );
    }
    assert_eq!(object_id_ms("5e3eef0679fa3700a0198a4a"), Some(0x5e3e_ef06 * 1000));
    assert_eq!(object_id_ms("r1"), None);
    assert_eq!(object_id_ms("5e3eef0679fa3700a0198a4z"), None);
}

#[test]
fn spike_and_reappeared_rules_validate() {
    let base = |extra: Value| {
        let mut doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true,
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            doc[k] = v.clone();
        }
        doc
    };
    let what = |extra: Value| parse_rule_value(&base(extra)).map(|(r, _)| r.what);
    assert_eq!(
        what(json!({"whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000})),
        Ok(WhatToReceive::Spike(Spike {
            period_ms: 3_600_000,
            baseline_windows: 24,
            factor_milli: 5000,
            threshold: 10
        }))
    );
    assert_eq!(
        what(
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 1000, "baselineWindows": 2, "factor": 1.5,
            "threshold": 1})
        ),
        Ok(WhatToReceive::Spike(Spike {
            period_ms: 1000,
            baseline_windows: 2,
            factor_milli: 1500,
            threshold: 1
        }))
    );
    assert_eq!(
        what(json!({"whatToReceive": "REAPPEARED"})),
        Ok(WhatToReceive::Reappeared {
            quiet_period_ms: DEFAULT_QUIET_PERIOD_MS
        })
    );
    assert_eq!(
        what(json!({"whatToReceive": "REAPPEARED", "quietPeriod": 1000})),
        Ok(WhatToReceive::Reappeared {
            quiet_period_ms: 1000
        })
    );
    // (fields, what the problem says, what the fix says)
    let bad = [
        (
            json!({"whatToReceive": "SPIKE"}),
            "has no `thresholdPeriod`",
            "3600000",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 999}),
            "between 1000 and 86400000",
            "bucket",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 86_400_001}),
            "1 s … 1 day",
            "bucket",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 1}),
            "between 2 and 168, got 1",
            "24",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 169}),
            "got 169",
            "2 … 168",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "factor": 1.4}),
            "between 1.5 and 100, got 1.4",
            "e.g. 5",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "factor": "5x"}),
            "must be a number",
            "e.g. 5",
        ),
        (
            json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "threshold": 0}),
            "least count",
            "10",
        ),
        (
            json!({"whatToReceive": "REAPPEARED", "quietPeriod": 999}),
            "between 1000 and 7776000000",
            "604800000",
        ),
        (
            json!({"whatToReceive": "REAPPEARED", "quietPeriod": "7d"}),
            "got \"7d\"",
            "milliseconds",
        ),
        (
            json!({"whatToReceive": "REAPPEARED", "quietPeriod": 7_776_000_001u64}),
            "90 days",
            "7 days",
        ),
    ];
    for (extra, message, fix) in bad {
        let p = parse_rule_value(&base(extra.clone())).expect_err("invalid");
        assert!(p.fatal && p.message.contains(message), "{extra}: {p}");
        assert!(p.fix.contains(fix), "{extra}: {p}");
    }
    // `uniqueUsers` means nothing to these kinds: a warning, the rule still works
    let (_, problems) =
        parse_rule_value(&base(json!({"whatToReceive": "REAPPEARED", "uniqueUsers": true}))).expect("usable");
    assert!(problems.len() == 1 && !problems[0].fatal, "{problems:?}");
    // the fields are written back as read
    let doc = base(
        json!({"whatToReceive": "SPIKE", "thresholdPeriod": 60000, "baselineWindows": 5, "factor": 2.5,
        "quietPeriod": 1000}),
    );
    let raw = RawRule::from_value(&doc).expect("object");
    assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
    // decide: a REAPPEARED rule carries the event's isNew and its id's time
    let (r, _) =
        parse_rule_value(&base(json!({"whatToReceive": "REAPPEARED", "quietPeriod": 1000}))).expect("usable");
    let ev = ev("Boom", true, None);
    assert_eq!(
        r.wants(&ev, &Title::new("Boom")),
        Some(Want::Reappeared {
            quiet_period_ms: 1000,
            armed_at_ms: 0x5e3e_ef06 * 1000,
            is_new: true
        })
    );
}
