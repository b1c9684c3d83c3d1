//! Bounded property tests ("fuzzing" that runs in `cargo test`): the event parser and the rule reader take
//! tenants' input; whatever they are given, they must not panic, must answer with a bounded reason, and
//! must never hand the engine a value outside the documented bounds.

use klaxon_core::rule::{parse_rule_value, MAX_MIN_PERIOD_S, MAX_PERIOD_MS, MAX_THRESHOLD, MIN_PERIOD_MS};
use klaxon_core::text::MAX_REASON_BYTES;
use klaxon_core::{EventTask, RawRule, WhatToReceive};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Any JSON value, a few levels deep, with the numbers that break naive code (huge, negative, fractional,
/// exponent notation) and strings that break naive logs (control characters, long runs).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1e19)),
        Just(json!(-1)),
        Just(json!(0)),
        ".{0,40}".prop_map(Value::String),
        "[a-f0-9]{24}".prop_map(Value::String),
        (1usize..3000).prop_map(|n| Value::String("A\n".repeat(n))),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((".{0,12}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A field name a rule or an event really has, or noise.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("_id"),
        Just("id"),
        Just("isEnabled"),
        Just("whatToReceive"),
        Just("threshold"),
        Just("thresholdPeriod"),
        Just("window"),
        Just("including"),
        Just("excluding"),
        Just("channels"),
        Just("uniqueUsers"),
        Just("title"),
        Just("groupHash"),
        Just("isNew"),
        Just("repetitionId"),
        Just("timestamp"),
        Just("user"),
        Just("noise"),
    ]
    .prop_map(str::to_owned)
}

fn object_of(fields: impl Strategy<Value = Vec<(String, Value)>>) -> impl Strategy<Value = Value> {
    fields.prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

/// Rule-shaped objects: the real field names with any values, and channels with any settings.
fn rule_like() -> impl Strategy<Value = Value> {
    let channel = object_of(prop::collection::vec(
        (
            prop_oneof![Just("isEnabled"), Just("endpoint"), Just("minPeriod")].prop_map(str::to_owned),
            any_json(),
        ),
        0..4,
    ));
    let channels = prop::collection::vec(
        (
            prop_oneof![
                Just("email"),
                Just("telegram"),
                Just("slack"),
                Just("webhook"),
                Just("loop"),
                Just("webPush")
            ]
            .prop_map(str::to_owned),
            channel,
        ),
        0..4,
    )
    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()));
    let what = prop_oneof![
        Just(json!("ONLY_NEW")),
        Just(json!("SEEN_MORE")),
        Just(json!("ALL")),
        any_json()
    ];
    (prop::collection::vec((field(), any_json()), 0..8), what, channels).prop_map(
        |(mut kv, what, channels)| {
            kv.push(("whatToReceive".into(), what));
            kv.push(("channels".into(), channels));
            Value::Object(kv.into_iter().collect::<Map<_, _>>())
        },
    )
}

fn check_reason(reason: &str) {
    assert!(
        reason.len() <= MAX_REASON_BYTES,
        "reason of {} bytes",
        reason.len()
    );
    assert!(!reason.contains('\n'), "reason on several lines: {reason:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_event_parser_takes_any_bytes(body in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Err(e) = EventTask::parse(&body) {
            check_reason(&e.0);
        }
    }

    #[test]
    fn the_event_parser_takes_any_json(project in any_json(), event in any_json(),
                                       fields in prop::collection::vec((field(), any_json()), 0..6)) {
        let mut event = event;
        if let Some(obj) = event.as_object_mut() {
            obj.extend(fields);
        }
        let body = json!({"projectId": project, "event": event}).to_string();
        match EventTask::parse(body.as_bytes()) {
            Ok(task) => {
                prop_assert!(klaxon_core::event::is_object_id(&task.project_id));
                prop_assert!(!task.event.group_hash.is_empty());
            }
            Err(e) => check_reason(&e.0),
        }
    }

    #[test]
    fn valid_events_round_trip(project in "[a-f0-9]{24}", title in ".{1,200}", group in "[ -~]{1,64}",
                               is_new in any::<bool>(), repetition in proptest::option::of("[a-z0-9]{1,24}"),
                               user in proptest::option::of("[a-zA-Z0-9@._-]{1,40}")) {
        prop_assume!(!title.trim().is_empty() && !group.trim().is_empty());
        let body = json!({"projectId": project, "event": {"title": title, "groupHash": group, "isNew": is_new,
            "repetitionId": repetition, "user": user.as_ref().map(|u| json!({"id": u}))}});
        let task = EventTask::parse(body.to_string().as_bytes()).map_err(|e| TestCaseError::fail(e.0))?;
        prop_assert_eq!(&task.project_id, &project);
        prop_assert_eq!(&task.event.title, &title);
        prop_assert_eq!(&task.event.group_hash, &group);
        prop_assert_eq!(task.event.is_new, is_new);
        prop_assert_eq!(task.event.repetition_id, repetition);
        prop_assert_eq!(task.event.user, user);
    }

    #[test]
    fn the_rule_reader_takes_any_rule(rule in rule_like()) {
        match parse_rule_value(&rule) {
            Ok((compiled, problems)) => {
                if let WhatToReceive::SeenMore { threshold, period_ms } = compiled.what {
                    prop_assert!((1..=MAX_THRESHOLD).contains(&threshold), "threshold {threshold}");
                    prop_assert!((MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&period_ms), "period {period_ms}");
                }
                for ch in &compiled.channels {
                    prop_assert!(ch.min_period_s <= MAX_MIN_PERIOD_S, "minPeriod {}", ch.min_period_s);
                    prop_assert!(!ch.endpoint.trim().is_empty());
                }
                for p in problems {
                    prop_assert!(!p.fatal, "a fatal problem with a compiled rule: {p}");
                    prop_assert!(p.message.len() <= 4 * MAX_REASON_BYTES, "{} bytes", p.message.len());
                }
            }
            Err(p) => {
                prop_assert!(p.fatal);
                prop_assert!(p.message.len() <= 4 * MAX_REASON_BYTES, "{} bytes", p.message.len());
            }
        }
    }

    #[test]
    fn the_rule_reader_takes_any_json(value in any_json()) {
        let _ = parse_rule_value(&value);
    }

    /// Reading a rule into its serde model never fails on a field's value, and writing the model back gives
    /// the document that was read: nothing of a tenant's rule is lost on the way.
    #[test]
    fn raw_rules_write_back_what_they_read(rule in rule_like()) {
        let raw = RawRule::from_value(&rule).map_err(|p| TestCaseError::fail(p.to_string()))?;
        let back = serde_json::to_value(&raw).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, rule);
    }
}
