use super::*;
use serde_json::json;

const ID: &str = "5e3eef0679fa3700a0198a4a";

fn slack() -> Value {
    json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}})
}

/// A valid ONLY_NEW rule with `field` set to `value`.
fn with(field: &str, value: Value) -> Value {
    let mut doc = json!({"_id": ID, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
        "thresholdPeriod": 60000, "channels": slack()});
    doc[field] = value;
    doc
}

#[test]
fn ids_as_hex_or_oid() {
    let cases = [
        (json!(ID), Some(ID)),
        (json!({"$oid": ID}), Some(ID)),
        (json!({"$oid": ID, "note": 1}), Some(ID)),
        (json!({"$oid": 7}), None),
        (json!({"oid": ID}), None),
        (json!(42), None),
        (json!(null), None),
    ];
    for (id, want) in cases {
        let raw = RawRule::from_value(&with("_id", id.clone())).expect("an object reads");
        assert_eq!(raw.id(), want, "{id}");
        match want {
            Some(want) => assert_eq!(raw.validate().expect("usable").0.id, want, "{id}"),
            None => {
                let p = raw.validate().expect_err("no id");
                assert_eq!(p.message, "rule has no `_id`", "{id}");
                assert_eq!(p.rule_id, None);
            }
        }
    }
    let raw = RawRule::from_value(&json!({"_id": {"$oid": ID}})).expect("object");
    assert!(matches!(&raw.id, Field::Typed(RuleId::Oid { oid, .. }) if oid == ID));
    let raw = RawRule::from_value(&json!({"_id": ID})).expect("object");
    assert_eq!(raw.id, Field::Typed(RuleId::Hex(ID.into())));
}

/// A field of the wrong type reads (the document is kept) and validation names it.
#[test]
fn wrong_types_are_problems_not_read_failures() {
    let cases = [
        ("isEnabled", json!("yes"), "`isEnabled` must be a boolean"),
        ("whatToReceive", json!(1), "unknown `whatToReceive` 1"),
        ("whatToReceive", json!(null), "unknown `whatToReceive` null"),
        (
            "whatToReceive",
            json!("SEEN_MOAR"),
            "unknown `whatToReceive` \"SEEN_MOAR\"",
        ),
        (
            "threshold",
            json!("3"),
            "`threshold` must be a whole number ≥ 1, got \"3\"",
        ),
        (
            "threshold",
            json!(null),
            "`threshold` must be a whole number ≥ 1, got null",
        ),
        (
            "threshold",
            json!(-1),
            "`threshold` must be a whole number ≥ 1, got -1",
        ),
        (
            "threshold",
            json!(2.5),
            "`threshold` must be a whole number ≥ 1, got 2.5",
        ),
        (
            "thresholdPeriod",
            json!([60000]),
            "`thresholdPeriod` must be milliseconds between 1000 and 2592000000, got [60000]",
        ),
        ("window", json!(true), "unknown `window` true"),
        (
            "window",
            json!({"fixed": null}),
            "unknown `window` {\"fixed\":null}",
        ),
        ("window", json!("hopping"), "unknown `window` \"hopping\""),
        ("uniqueUsers", json!(1), "`uniqueUsers` must be a boolean, got 1"),
        (
            "includingCaseSensitive",
            json!("yes"),
            "`includingCaseSensitive` must be a boolean, got \"yes\"",
        ),
        ("including", json!("db"), "`including` must be a list of strings"),
        (
            "excluding",
            json!(["a", 1]),
            "`excluding` must be a list of strings",
        ),
        (
            "includingPatterns",
            json!({}),
            "`includingPatterns` must be a list of strings",
        ),
        (
            "excludingPatterns",
            json!(false),
            "`excludingPatterns` must be a list of strings",
        ),
    ];
    for (field, value, want) in cases {
        let doc = with(field, value.clone());
        let raw = RawRule::from_value(&doc).expect("an object always reads");
        let p = raw.validate().expect_err(field);
        assert!(p.fatal, "{field}: {p}");
        assert_eq!(p.message, want, "{field} = {value}");
        assert_eq!(p.rule_id.as_deref(), Some(ID));
        // What was read is what was stored.
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc, "{field}");
    }
}

/// Values that are not the plain type but mean it (MongoDB's number forms) and values that mean "unset".
#[test]
fn tolerated_forms() {
    let seen_more = |raw: &RawRule| raw.validate().expect("usable").0.what;
    let cases = [
        ("threshold", json!(3.0), 3, 60000),
        ("threshold", json!({"$numberLong": "3"}), 3, 60000),
        ("threshold", json!({"$numberInt": "4"}), 4, 60000),
        ("thresholdPeriod", json!(90000.0), 3, 90000),
    ];
    for (field, value, threshold, period_ms) in cases {
        let raw = RawRule::from_value(&with(field, value.clone())).expect("object");
        assert_eq!(
            seen_more(&raw),
            WhatToReceive::SeenMore { threshold, period_ms },
            "{field} = {value}"
        );
    }
    for field in [
        "isEnabled",
        "window",
        "uniqueUsers",
        "including",
        "includingCaseSensitive",
        "excludingPatterns",
    ] {
        let raw = RawRule::from_value(&with(field, Value::Null)).expect("object");
        assert!(raw.validate().is_ok(), "{field}: null means unset");
    }
    let raw = RawRule::from_value(&with("isEnabled", Value::Null)).expect("object");
    assert!(!raw.validate().expect("usable").0.enabled);
}

/// `includingCaseSensitive` on the rule wins; without it the process's default (`--including-case`) applies.
#[test]
fn including_case_comes_from_the_rule_or_the_process() {
    use crate::filter::Title;
    let title = Title::new("typeerror: x is undefined");
    // (the rule's field, the process default, whether `including: ["TypeError"]` matches the lowercase title)
    let cases = [
        (None, Case::Insensitive, true),
        (None, Case::Sensitive, false),
        (Some(true), Case::Insensitive, false),
        (Some(true), Case::Sensitive, false),
        (Some(false), Case::Sensitive, true),
        (Some(false), Case::Insensitive, true),
    ];
    for (field, default, matches) in cases {
        let mut doc = with("including", json!(["TypeError"]));
        if let Some(b) = field {
            doc["includingCaseSensitive"] = json!(b);
        }
        let raw = RawRule::from_value(&doc).expect("object");
        let defaults = RuleDefaults {
            including_case: default,
        };
        let (rule, _) = raw.validate_with(&Limits::default(), &defaults).expect("usable");
        assert_eq!(rule.filter.matches(&title), matches, "{field:?} {default:?}");
        // and the document is written back as it was read
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
    }
}

#[test]
fn unknown_fields_are_kept_on_a_round_trip() {
    let docs = [
        json!({
            "_id": {"$oid": ID}, "uidAdded": {"$oid": "5e3eef0679fa3700a0198a00"}, "isEnabled": true,
            "whatToReceive": "ONLY_NEW", "including": [], "excluding": ["x"], "window": null,
            "channels": {
                "telegram": {"isEnabled": true, "endpoint": "-100", "minPeriod": 60, "chatTitle": "ops"},
                "webPush": {"isEnabled": false, "endpoint": "", "minPeriod": 0},
                "email": "not an object"
            },
            "somethingNew": {"nested": [1, 2.5, null]}, "createdAt": {"$date": "2020-01-01T00:00:00Z"}
        }),
        json!({"_id": ID, "threshold": {"$numberLong": "5"}, "channels": []}),
        json!({}),
    ];
    for doc in docs {
        let raw = RawRule::from_value(&doc).expect("object");
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
    }
    let raw =
        RawRule::from_value(&json!({"_id": ID, "uidAdded": {"$oid": ID}, "custom": 1})).expect("object");
    assert_eq!(raw.extra.get("custom"), Some(&json!(1)));
    assert_eq!(raw.extra.get("uidAdded"), Some(&json!({"$oid": ID})));
}

#[test]
fn not_an_object() {
    for v in [json!([]), json!("rule"), json!(null), json!(1)] {
        let p = RawRule::from_value(&v).expect_err("not a rule");
        assert!(p.fatal && p.rule_id.is_none());
        assert_eq!(p.message, "rule is not an object");
    }
}

/// The channels keep the document's order when written back: `klaxon rules add` stores them in the
/// order of its flags.
#[test]
fn channels_keep_their_order() {
    let mut chs = Channels::default();
    chs.insert(
        "webhook",
        Field::Typed(RawChannel::enabled("https://h.test/x", 0)),
    );
    chs.insert("email", Field::Typed(RawChannel::enabled("a@b.test", 60)));
    chs.insert(
        "webhook",
        Field::Typed(RawChannel::enabled("https://h.test/y", 0)),
    );
    let text = serde_json::to_string(&chs).expect("json");
    assert_eq!(
        text,
        r#"{"webhook":{"isEnabled":true,"endpoint":"https://h.test/y","minPeriod":0},"email":{"isEnabled":true,"endpoint":"a@b.test","minPeriod":60}}"#
    );
    let back: Channels = serde_json::from_str(&text).expect("channels");
    assert_eq!(back, chs);
}

/// `channels.pagerduty.severity`: read for PagerDuty only, `error` by default, a bad value is a warning.
#[test]
fn pagerduty_severity() {
    let key = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";
    let rule = |severity: Value| {
        let mut ch = json!({"isEnabled": true, "endpoint": key, "minPeriod": 0});
        if !severity.is_null() {
            ch["severity"] = severity;
        }
        let doc = with("channels", json!({"pagerduty": ch, "slack": slack()["slack"]}));
        RawRule::from_value(&doc)
            .expect("object")
            .validate()
            .expect("usable")
    };
    for (value, want, warned) in [
        (Value::Null, Severity::Error, false),
        (json!("critical"), Severity::Critical, false),
        (json!("info"), Severity::Info, false),
        (json!("warning"), Severity::Warning, false),
        (json!("fatal"), Severity::Error, true),
        (json!(3), Severity::Error, true),
    ] {
        let (compiled, problems) = rule(value.clone());
        let pd = compiled
            .channels
            .iter()
            .find(|c| c.kind == ChannelKind::Pagerduty)
            .expect("pagerduty kept");
        assert_eq!(pd.severity, Some(want), "{value}");
        let slack = compiled
            .channels
            .iter()
            .find(|c| c.kind == ChannelKind::Slack)
            .expect("slack");
        assert_eq!(slack.severity, None);
        assert_eq!(
            problems.iter().any(|p| p.message.contains("`severity`")),
            warned,
            "{value}: {problems:?}"
        );
    }
}

/// Endpoint shapes the services document: warned about, never skipped.
#[test]
fn endpoint_shapes() {
    let cases = [
        (
            ChannelKind::Discord,
            "https://discord.com/api/webhooks/123456/tok-EN_x",
            true,
        ),
        (
            ChannelKind::Discord,
            "https://discord.com/api/v10/webhooks/1/t",
            true,
        ),
        (ChannelKind::Discord, "http://127.0.0.1:9/api/webhooks/1/t", true),
        (
            ChannelKind::Discord,
            "https://discord.com/api/webhooks/abc/t",
            false,
        ),
        (ChannelKind::Discord, "https://discord.com/channels/1/2", false),
        (ChannelKind::Discord, "not a url", false),
        (
            ChannelKind::Teams,
            "https://prod-1.westeurope.logic.azure.com/workflows/x",
            true,
        ),
        (ChannelKind::Teams, "http://example.com/workflows/x", false),
        (ChannelKind::Teams, "http://127.0.0.1:8080/teams", true),
        (ChannelKind::Teams, "http://10.1.2.3/teams", true),
        (ChannelKind::Teams, "http://localhost:9/teams", true),
        (ChannelKind::Teams, "http://[::1]:9/teams", true),
        (ChannelKind::Teams, "http://8.8.8.8/teams", false),
        (ChannelKind::Teams, "ftp://127.0.0.1/teams", false),
        (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE", true),
        (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2Nk", false),
        (ChannelKind::Pagerduty, "r3FPuDvNOTEDyQYCc7trBkymIFcy2Nk-", false),
        (ChannelKind::Slack, "https://hooks.slack.com/services/T/B/x", true),
        (ChannelKind::Slack, "C0123ABCD", true),
        (ChannelKind::Slack, "G0123ABCDEF", true),
        (ChannelKind::Slack, "#alerts", false),
        (ChannelKind::Slack, "c0123abcd", false),
        (ChannelKind::Slack, "anything", false),
        (ChannelKind::Slack, "ftp://hooks.slack.com/x", false),
    ];
    for (kind, endpoint, ok) in cases {
        assert_eq!(
            endpoint_problem(kind, endpoint).is_none(),
            ok,
            "{kind} {endpoint}"
        );
        let doc = with(
            "channels",
            json!({kind.as_str(): {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}),
        );
        let (rule, problems) = RawRule::from_value(&doc)
            .expect("object")
            .validate()
            .expect("usable");
        assert_eq!(rule.channels.len(), 1, "never skipped: {kind} {endpoint}");
        assert_eq!(problems.is_empty(), ok, "{kind} {endpoint}: {problems:?}");
        for p in &problems {
            assert!(!p.fatal && !p.fix.is_empty() && !p.message.contains(endpoint));
        }
    }
}

/// `resolveAfter`: 0 (never) or 1 s … 90 days; left out, the kind's default; NO_EVENTS ignores it (warning).
#[test]
fn resolve_after_values() {
    let kind = |what: &str| match what {
        "SEEN_MORE" => json!({"whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000}),
        "SPIKE" => json!({"whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000}),
        "ONLY_NEW" => json!({"whatToReceive": "ONLY_NEW"}),
        "REAPPEARED" => json!({"whatToReceive": "REAPPEARED"}),
        _ => json!({"whatToReceive": "NO_EVENTS", "quietPeriod": 600_000}),
    };
    // (kind, resolveAfter (null: left out), Ok(ms, warned) or Err(what the message says))
    type Case = (&'static str, Value, Result<(u64, bool), &'static str>);
    let cases: Vec<Case> = vec![
        ("SEEN_MORE", Value::Null, Ok((60000, false))),
        ("SPIKE", Value::Null, Ok((3_600_000, false))),
        ("ONLY_NEW", Value::Null, Ok((0, false))),
        ("REAPPEARED", Value::Null, Ok((0, false))),
        ("NO_EVENTS", Value::Null, Ok((0, false))),
        ("SEEN_MORE", json!(0), Ok((0, false))),
        ("ONLY_NEW", json!(1000), Ok((1000, false))),
        ("ONLY_NEW", json!(7_776_000_000u64), Ok((7_776_000_000, false))),
        ("SEEN_MORE", json!(3_600_000.0), Ok((3_600_000, false))),
        (
            "SEEN_MORE",
            json!({"$numberLong": "3600000"}),
            Ok((3_600_000, false)),
        ),
        ("NO_EVENTS", json!(3_600_000), Ok((0, true))),
        ("NO_EVENTS", json!(0), Ok((0, false))),
        ("SEEN_MORE", json!(999), Err("got 999")),
        ("SEEN_MORE", json!(7_776_000_001u64), Err("got 7776000001")),
        ("ONLY_NEW", json!(-1), Err("got -1")),
        ("ONLY_NEW", json!("1h"), Err("got \"1h\"")),
        ("ONLY_NEW", json!(1.5), Err("got 1.5")),
        ("NO_EVENTS", json!(500), Err("got 500")),
    ];
    for (what, value, want) in cases {
        let mut doc = kind(what);
        doc["_id"] = json!(ID);
        doc["isEnabled"] = json!(true);
        doc["channels"] = slack();
        if !value.is_null() {
            doc["resolveAfter"] = value.clone();
        }
        let raw = RawRule::from_value(&doc).expect("object");
        match (raw.validate(), want) {
            (Ok((rule, problems)), Ok((ms, warned))) => {
                assert_eq!(rule.resolve_after_ms, ms, "{what} {value}");
                assert_eq!(
                    problems
                        .iter()
                        .any(|p| p.message.contains("`resolveAfter` is ignored")),
                    warned,
                    "{what} {value}: {problems:?}"
                );
            }
            (Err(p), Err(says)) => {
                assert!(p.fatal, "{p}");
                assert!(
                    p.message.starts_with(
                        "`resolveAfter` must be 0 (never) or milliseconds between 1000 and 7776000000 (1 s … 90 \
                         days)"
                    ) && p.message.contains(says),
                    "{what} {value}: {p}"
                );
                assert!(p.fix.contains("set `resolveAfter` in milliseconds"), "{p}");
                // `rules check` reports the same problem
                let problems = crate::rule::rule_problems(&doc, &Limits::default());
                assert_eq!(problems, vec![p]);
            }
            (got, want) => panic!("{what} {value}: {got:?}, wanted {want:?}"),
        }
        assert_eq!(serde_json::to_value(&raw).expect("json"), doc);
    }
}

/// NO_EVENTS: `quietPeriod` required (10 s … 30 days); what narrows a group's events is ignored, with warnings.
#[test]
fn no_events_rules() {
    let doc = |extra: Value| {
        let mut d = json!({"_id": ID, "isEnabled": true, "whatToReceive": "NO_EVENTS", "channels": slack()});
        for (k, v) in extra.as_object().expect("object") {
            d[k] = v.clone();
        }
        d
    };
    let (rule, problems) = RawRule::from_value(&doc(json!({"quietPeriod": 3_600_000})))
        .expect("object")
        .validate()
        .expect("usable");
    assert_eq!(
        rule.what,
        WhatToReceive::NoEvents {
            quiet_period_ms: 3_600_000
        }
    );
    // evaluated at run time: no warning
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(rule.summary(), "NO_EVENTS for 1h");
    assert_eq!(
        rule.what.watches_for().as_deref(),
        Some("no event from the project for 1h")
    );
    // (fields, fatal: what the message says; or a warning)
    let cases = [
        (json!({}), true, "a NO_EVENTS rule needs `quietPeriod`"),
        (
            json!({"quietPeriod": 9999}),
            true,
            "between 10000 and 2592000000 (10 s … 30 days), got 9999",
        ),
        (
            json!({"quietPeriod": 2_592_000_001u64}),
            true,
            "(10 s … 30 days), got 2592000001",
        ),
        (
            json!({"quietPeriod": 60000, "including": ["db"]}),
            false,
            "title filters",
        ),
        (
            json!({"quietPeriod": 60000, "excludingPatterns": ["x"]}),
            false,
            "ignored by a NO_EVENTS rule",
        ),
        (
            json!({"quietPeriod": 60000, "uniqueUsers": true}),
            false,
            "`uniqueUsers` means nothing to a NO_EVENTS rule",
        ),
        (
            json!({"quietPeriod": 60000, "resolveAfter": 60000}),
            false,
            "`resolveAfter` is ignored by a NO_EVENTS rule",
        ),
    ];
    for (fields, fatal, says) in cases {
        let problems = match RawRule::from_value(&doc(fields.clone()))
            .expect("object")
            .validate()
        {
            Ok((_, problems)) => problems,
            Err(p) => vec![p],
        };
        assert!(
            problems
                .iter()
                .any(|p| p.fatal == fatal && p.message.contains(says) && !p.fix.is_empty()),
            "{fields}: {problems:?}"
        );
    }
    // an unknown kind's fix names NO_EVENTS
    let p = RawRule::from_value(&with("whatToReceive", json!("NO_EVENT")))
        .expect("object")
        .validate()
        .expect_err("unknown");
    assert!(p.fix.contains("\"NO_EVENTS\""), "{p}");
}

/// A key one edit from a known one is a warning naming the known key; other unknown keys stay silent.
#[test]
fn a_misspelt_key_is_a_warning_with_did_you_mean() {
    let cases = [
        ("includng", Some("including")),
        ("inculding", Some("including")),
        ("Including", Some("including")),
        ("exluding", Some("excluding")),
        ("treshold", Some("threshold")),
        ("threshold_period", Some("thresholdPeriod")),
        ("isEnable", Some("isEnabled")),
        ("windows", Some("window")),
        ("patterns", Some("includingPatterns")),
        ("includingPattern", Some("includingPatterns")),
        ("excludePatterns", Some("excludingPatterns")),
        ("uidAdded", None),
        ("custom", None),
        ("id", Some("_id")),
        ("x", None),
    ];
    for (key, want) in cases {
        let mut doc = with("including", json!(["db"]));
        doc[key] = json!(["database"]);
        let (_, problems) = RawRule::from_value(&doc)
            .expect("object")
            .validate()
            .expect("usable");
        match want {
            Some(known) => {
                assert_eq!(problems.len(), 1, "{key}: {problems:?}");
                let p = &problems[0];
                assert!(!p.fatal && !p.limit, "{key}: {p:?}");
                assert!(
                    p.message.contains(&format!("did you mean `{known}`?"))
                        && p.message.contains(&format!("`{key}`")),
                    "{key}: {p}"
                );
                assert!(p.fix.contains(known), "{key}: {p}");
            }
            None => assert!(problems.is_empty(), "{key}: {problems:?}"),
        }
    }
    // every known key is read by the model (none lands in `extra`)
    for key in RULE_KEYS {
        let raw = RawRule::from_value(&json!({ *key: null })).expect("object");
        assert!(raw.extra.is_empty(), "{key} is not a field of RawRule");
    }
    // inside a channel too
    let doc = with(
        "channels",
        json!({"slack": {"isEnabled": true, "endpont": "https://hooks.slack.com/x", "minPeriod": 0}}),
    );
    let problems = match RawRule::from_value(&doc).expect("object").validate() {
        Ok((_, problems)) => problems,
        Err(p) => vec![p],
    };
    assert!(
        problems
            .iter()
            .any(|p| p.message.contains("`channels.slack.endpont`")
                && p.message.contains("did you mean `endpoint`?")),
        "{problems:?}"
    );
}
