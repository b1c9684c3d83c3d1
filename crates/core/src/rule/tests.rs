use super::*;
use serde_json::json;

fn event(title: &str, is_new: bool) -> Event {
    super::decide_tests::ev(title, is_new, None)
}

fn slack() -> Value {
    json!({"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.test/x", "minPeriod": 0}})
}

#[test]
fn reads_a_hawk_document_with_extra_fields_and_unsupported_channels() {
    let doc = json!({
        "_id": {"$oid": "5e3eef0679fa3700a0198a4a"},
        "uidAdded": {"$oid": "5e3eef0679fa3700a0198a00"},
        "isEnabled": true,
        "whatToReceive": "SEEN_MORE",
        "including": ["db"], "excluding": [],
        "threshold": 100, "thresholdPeriod": 3_600_000,
        "channels": {
            "email": {"isEnabled": false, "endpoint": "a@b.c", "minPeriod": 60},
            "telegram": {"isEnabled": true, "endpoint": "-100123", "minPeriod": 0},
            "loop": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
            "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
            "desktopPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}
        },
        "somethingNew": {"nested": true}
    });
    let (rule, problems) = parse_rule_value(&doc).expect("usable");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(rule.id, "5e3eef0679fa3700a0198a4a");
    assert_eq!(
        rule.what,
        WhatToReceive::SeenMore {
            threshold: 100,
            period_ms: 3_600_000
        }
    );
    assert_eq!(rule.window, Window::Fixed);
    // Hawk's `loop` is delivered; `webPush`/`desktopPush` are ignored, and listed as such
    assert_eq!(rule.channels.len(), 2);
    assert_eq!(rule.channels[0].kind, ChannelKind::Telegram);
    assert_eq!(rule.channels[1].kind, ChannelKind::Loop);
    assert_eq!(
        RawRule::from_value(&doc).expect("object").ignored_channels(),
        vec!["desktopPush".to_owned(), "webPush".to_owned()]
    );
}

/// Why a project's events would not be evaluated at all, by what its document holds.
#[test]
fn unevaluated_reasons_table() {
    let ok = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": slack()});
    let disabled = json!({"_id": "5e3eef0679fa3700a0198a4b", "isEnabled": false, "whatToReceive": "ONLY_NEW",
        "channels": slack()});
    let no_channel = json!({"_id": "5e3eef0679fa3700a0198a4c", "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": {"slack": {"isEnabled": true, "endpoint": "", "minPeriod": 0},
                     "email": {"isEnabled": false, "endpoint": "a@b.c", "minPeriod": 0}}});
    let broken = json!({"_id": "5e3eef0679fa3700a0198a4d", "isEnabled": true, "whatToReceive": "SOMETIMES",
        "channels": slack()});
    let filtered = json!({"_id": "5e3eef0679fa3700a0198a4e", "isEnabled": true, "whatToReceive": "SEEN_MORE",
        "threshold": 1, "thresholdPeriod": 60000, "including": ["never in a title"], "channels": slack()});
    // (notifications of a known project, expected reason)
    let cases: Vec<(Option<Value>, Option<Unevaluated>)> = vec![
        (None, Some(Unevaluated::NoRules)),
        (Some(json!([])), Some(Unevaluated::NoRules)),
        (Some(json!("not an array")), Some(Unevaluated::NoRules)),
        (Some(json!([broken])), Some(Unevaluated::RulesInvalid)),
        (Some(json!([disabled])), Some(Unevaluated::RulesDisabled)),
        (Some(json!([broken, disabled])), Some(Unevaluated::RulesDisabled)),
        (Some(json!([no_channel])), Some(Unevaluated::NoChannels)),
        (Some(json!([disabled, no_channel])), Some(Unevaluated::NoChannels)),
        (Some(json!([ok])), None),
        (Some(json!([broken, disabled, ok])), None),
        // a rule that filters every title out is evaluated: filtering is not "unevaluated"
        (Some(json!([filtered])), None),
    ];
    for (notifications, want) in cases {
        let pr = ProjectRules::from_notifications(notifications.as_ref());
        assert!(pr.known);
        assert_eq!(pr.unevaluated(), want, "{notifications:?}");
    }
    assert_eq!(
        ProjectRules::default().unevaluated(),
        Some(Unevaluated::ProjectUnknown),
        "no document: unknown project"
    );
    let labels: Vec<&str> = Unevaluated::ALL.iter().map(|u| u.as_str()).collect();
    assert_eq!(
        labels,
        [
            "project_unknown",
            "no_rules",
            "rules_invalid",
            "rules_disabled",
            "no_channels"
        ]
    );
}

#[test]
fn problems_quoting_tenant_values_are_one_bounded_line() {
    // Found by the fuzz test: a `window` that is an array holding a long multi-line string.
    let long = "A\n".repeat(1500);
    let bad = [
        json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": "ONLY_NEW", "window": [[long]], "channels": {}}),
        json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": long, "channels": {}}),
        json!({"_id": "5e3eef0679fa3700a0198a4a", "whatToReceive": "ONLY_NEW", "includingPatterns": [format!("({long}")], "channels": {}}),
    ];
    for rule in bad {
        let p = parse_rule_value(&rule).expect_err("unusable");
        assert!(p.message.len() <= MAX_PROBLEM_BYTES, "{} bytes", p.message.len());
        assert!(!p.message.contains('\n'), "{:?}", p.message);
        assert_eq!(p.rule_id.as_deref(), Some("5e3eef0679fa3700a0198a4a"));
    }
    let rule = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.example.com/x", "minPeriod": long}}});
    let (_, problems) = parse_rule_value(&rule).expect("usable");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].message.len() <= MAX_PROBLEM_BYTES && !problems[0].message.contains('\n'));
}

#[test]
fn fatal_problems_name_the_rule() {
    let cases = [
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "thresholdPeriod": 60000, "channels": slack()}),
            "no `threshold`",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "channels": slack()}),
            "no `thresholdPeriod`",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000, "channels": slack()}),
            "`threshold` must be",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 10, "channels": slack()}),
            "`thresholdPeriod` must be",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1_000_001, "thresholdPeriod": 60000, "channels": slack()}),
            "at most 1000000",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 31u64 * 24 * 3600 * 1000, "channels": slack()}),
            "`thresholdPeriod` must be",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
                   "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 1e19}}}),
            "over the limit",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
                   "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 604_801}}}),
            "over the limit",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "window": "hopping", "channels": slack()}),
            "unknown `window`",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SOMETIMES", "channels": slack()}),
            "unknown `whatToReceive`",
        ),
        (
            json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "includingPatterns": ["(bad"], "channels": slack()}),
            "invalid regex",
        ),
        (
            json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()}),
            "no `_id`",
        ),
    ];
    for (doc, want) in cases {
        let p = parse_rule_value(&doc).expect_err("unusable");
        assert!(p.fatal);
        assert!(p.message.contains(want), "{} should mention {want}", p.message);
        assert!(!p.fix.is_empty());
    }
}

#[test]
fn one_bad_rule_does_not_hide_the_good_one() {
    let notifications = json!([
        {"_id": "5e3eef0679fa3700a0198a41", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000, "channels": slack()},
        {"_id": "5e3eef0679fa3700a0198a42", "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()}
    ]);
    let pr = ProjectRules::from_notifications(Some(&notifications));
    assert_eq!(pr.rules.len(), 1);
    assert_eq!(pr.rules[0].id, "5e3eef0679fa3700a0198a42");
    assert_eq!(pr.problems.len(), 1);
    assert_eq!(
        pr.problems[0].rule_id.as_deref(),
        Some("5e3eef0679fa3700a0198a41")
    );
}

#[test]
fn legacy_all_is_seen_more_threshold_one() {
    let doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ALL", "channels": slack()});
    let (rule, _) = parse_rule_value(&doc).expect("usable");
    assert_eq!(
        rule.what,
        WhatToReceive::SeenMore {
            threshold: 1,
            period_ms: LEGACY_ALL_PERIOD_MS
        }
    );
}

#[test]
fn wants_table() {
    let only_new = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": ["db"], "channels": slack()});
    let seen_more = json!({"_id": "5e3eef0679fa3700a0198a4b", "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000, "window": "sliding", "excluding": ["auth"], "channels": slack()});
    let disabled = json!({"_id": "5e3eef0679fa3700a0198a4c", "isEnabled": false, "whatToReceive": "ONLY_NEW", "channels": slack()});
    let no_channel = json!({"_id": "5e3eef0679fa3700a0198a4d", "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": {}});
    let count = Want::Count {
        threshold: 3,
        period_ms: 60000,
        window: Window::Sliding,
    };
    let cases = [
        (&only_new, "DB down", true, Some(Want::FirstSeen)),
        (&only_new, "DB down", false, None),
        (&only_new, "cache miss", true, None),
        (&seen_more, "anything", false, Some(count)),
        (&seen_more, "anything", true, Some(count)),
        (&seen_more, "Auth failed", false, None),
        (&disabled, "x", true, None),
        (&no_channel, "x", true, None),
    ];
    for (doc, title, is_new, want) in cases {
        let (rule, _) = parse_rule_value(doc).expect("usable");
        let ev = event(title, is_new);
        assert_eq!(
            rule.wants(&ev, &Title::new(&ev.title)),
            want,
            "{doc} {title} {is_new}"
        );
    }
}

/// The cases of Hawk's notifier `RuleValidator` tests (isEnabled, whatToReceive, including, excluding),
/// which must decide the same way here.
#[test]
fn hawk_validator_cases() {
    let rule = |enabled: bool, what: &str, including: &[&str], excluding: &[&str]| {
        json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": enabled, "whatToReceive": what,
               "threshold": 1, "thresholdPeriod": 60000,
               "including": including, "excluding": excluding, "channels": slack()})
    };
    let cases = [
        // (rule, title, isNew, passes)
        (rule(true, "ONLY_NEW", &[], &[]), "Error", true, true),
        (rule(false, "ONLY_NEW", &[], &[]), "Error", true, false),
        (rule(false, "SEEN_MORE", &[], &[]), "Error", false, false),
        (rule(true, "ONLY_NEW", &[], &[]), "Error", false, false),
        (rule(true, "SEEN_MORE", &[], &[]), "Error", false, true),
        (rule(true, "ALL", &[], &[]), "Error", false, true),
        (
            rule(true, "ONLY_NEW", &["error"], &[]),
            "Some ERROR happened",
            true,
            true,
        ),
        (
            rule(true, "ONLY_NEW", &["warning", "error"], &[]),
            "error only",
            true,
            true,
        ),
        (
            rule(true, "ONLY_NEW", &["warning", "notice"], &[]),
            "error only",
            true,
            false,
        ),
        (rule(true, "ONLY_NEW", &[], &["error"]), "Some Error", true, false),
        (
            rule(true, "ONLY_NEW", &[], &["warning", "error"]),
            "an error",
            true,
            false,
        ),
        (rule(true, "ONLY_NEW", &[], &["warning"]), "an error", true, true),
        (
            rule(true, "ONLY_NEW", &["error"], &["fatal"]),
            "Fatal error",
            true,
            false,
        ),
        (
            rule(true, "ONLY_NEW", &["ошибка"], &[]),
            "Ошибка сети",
            true,
            true,
        ),
        (rule(true, "ONLY_NEW", &[], &["ÜBER"]), "über-fehler", true, false),
    ];
    for (doc, title, is_new, passes) in cases {
        let (r, _) = parse_rule_value(&doc).expect("usable");
        let ev = event(title, is_new);
        assert_eq!(
            r.wants(&ev, &Title::new(&ev.title)).is_some(),
            passes,
            "{doc} {title:?} isNew={is_new}"
        );
    }
}

#[test]
fn unique_users_table() {
    let rule = |extra: Value| {
        let mut doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 3, "thresholdPeriod": 60000, "channels": slack()});
        for (k, v) in extra.as_object().into_iter().flatten() {
            doc[k] = v.clone();
        }
        doc
    };
    let users = |window| {
        Some(Want::UniqueUsers {
            threshold: 3,
            period_ms: 60000,
            window,
        })
    };
    let count = Some(Want::Count {
        threshold: 3,
        period_ms: 60000,
        window: Window::Fixed,
    });
    // (rule, event user, wanted)
    let cases = [
        (
            rule(json!({"uniqueUsers": true})),
            Some("u1"),
            users(Window::Fixed),
        ),
        (rule(json!({"uniqueUsers": true})), None, None),
        (
            rule(json!({"uniqueUsers": true, "window": "sliding"})),
            Some("u1"),
            users(Window::Sliding),
        ),
        (rule(json!({"uniqueUsers": false})), None, count),
        (rule(json!({"uniqueUsers": null})), Some("u1"), count),
        (rule(json!({})), Some("u1"), count),
    ];
    for (doc, user, want) in cases {
        let (r, problems) = parse_rule_value(&doc).expect("usable");
        assert!(problems.is_empty(), "{problems:?}");
        let mut ev = event("Boom", false);
        ev.user = user.map(str::to_owned);
        assert_eq!(r.wants(&ev, &Title::new(&ev.title)), want, "{doc} {user:?}");
    }
    let p = parse_rule_value(&rule(json!({"uniqueUsers": "yes"}))).expect_err("not a boolean");
    assert!(
        p.fatal && p.message.contains("`uniqueUsers` must be a boolean"),
        "{p}"
    );
    assert!(p.fix.contains("distinct users"), "{p}");
    let only_new = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "uniqueUsers": true, "channels": slack()});
    let (r, problems) = parse_rule_value(&only_new).expect("usable, with a warning");
    assert_eq!(problems.len(), 1);
    assert!(
        !problems[0].fatal && problems[0].message.contains("ONLY_NEW"),
        "{problems:?}"
    );
    let ev = event("Boom", true);
    assert_eq!(
        r.wants(&ev, &Title::new(&ev.title)),
        Some(Want::FirstSeen),
        "still fires on new errors"
    );
    let raw: RawRule = serde_json::from_value(rule(json!({"uniqueUsers": true}))).expect("raw");
    assert_eq!(raw.unique_users, Field::Typed(true));
    assert!(serde_json::to_string(&raw)
        .expect("json")
        .contains(r#""uniqueUsers":true"#));
    let raw: RawRule = serde_json::from_value(rule(json!({}))).expect("raw");
    assert!(!serde_json::to_string(&raw).expect("json").contains("uniqueUsers"));
}

#[test]
fn enabled_channel_without_endpoint_is_reported_not_fatal() {
    let doc = json!({"_id": "5e3eef0679fa3700a0198a4a", "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": {"slack": {"isEnabled": true, "endpoint": ""}, "webhook": {"isEnabled": true, "endpoint": "https://x.test/h", "minPeriod": 30}}});
    let (rule, problems) = parse_rule_value(&doc).expect("usable");
    assert_eq!(rule.channels.len(), 1);
    assert_eq!(rule.channels[0].min_period_s, 30);
    assert_eq!(problems.len(), 1);
    assert!(!problems[0].fatal);
}

/// The per-project bounds as the engine reads them (`crate::limits`): a table per bound.
#[test]
fn limits_table() {
    let id = |i: usize| format!("5e3eef0679fa3700a0198{i:03x}");
    let rule =
        |i: usize| json!({"_id": id(i), "isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": slack()});
    let limits = |rules, recipients| Limits {
        max_rules: rules,
        max_mutes: 1000,
        max_email_recipients: recipients,
    };
    // (rules stored, limit) → rules read (the first ones, in document order), skipped, a project problem
    for (stored, max, read) in [(0, 3, 0), (3, 3, 3), (4, 3, 3), (150, 100, 100), (5, 1, 1)] {
        let items = Value::Array((0..stored).map(rule).collect());
        let pr =
            ProjectRules::from_notifications_with(Some(&items), &limits(max, 50), &RuleDefaults::default());
        let ids: Vec<String> = pr.rules.iter().map(|r| r.id.clone()).collect();
        assert_eq!(ids, (0..read).map(id).collect::<Vec<_>>(), "{stored}/{max}");
        assert_eq!(pr.skipped, stored - read, "{stored}/{max}");
        let project: Vec<&RuleProblem> = pr.problems.iter().filter(|p| p.rule_id.is_none()).collect();
        assert_eq!(
            project.len(),
            usize::from(stored > max),
            "{stored}/{max}: {:?}",
            pr.problems
        );
        if let Some(p) = project.first() {
            assert!(p.limit && !p.fatal, "{p:?}");
            assert!(p.message.contains(&format!("{stored} rules")), "{}", p.message);
            assert_eq!(p.to_string(), format!("{} (fix: {})", p.message, p.fix));
        }
    }
    // Rules past the limit are not even validated: a broken one there is no problem of the engine's.
    let items = json!([rule(0), {"_id": id(1), "whatToReceive": "NOPE"}]);
    let pr = ProjectRules::from_notifications_with(Some(&items), &limits(1, 50), &RuleDefaults::default());
    assert_eq!(pr.problems.len(), 1, "{:?}", pr.problems);

    // (recipients in the endpoint, limit) → the endpoint delivered to, a limit problem
    let addrs = |n: usize| (0..n).map(|i| format!("u{i}@x.io")).collect::<Vec<_>>();
    let cases = [
        (1, 50, addrs(1).join(","), false),
        (50, 50, addrs(50).join(", "), false),
        (51, 50, addrs(50).join(","), true),
        (60, 50, addrs(50).join(","), true),
        (3, 2, addrs(2).join(","), true),
    ];
    for (n, max, want, over) in cases {
        let endpoint = addrs(n).join(", ");
        let doc = json!({"_id": id(0), "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "channels": {"email": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}});
        let (rule, problems) =
            parse_rule_value_with(&doc, &limits(100, max), &RuleDefaults::default()).expect("usable");
        assert_eq!(rule.channels[0].endpoint, want, "{n}/{max}");
        assert_eq!(problems.len(), usize::from(over), "{n}/{max}: {problems:?}");
        if over {
            let p = &problems[0];
            assert!(p.limit && !p.fatal && p.refuses_write(true), "{p:?}");
            assert!(
                p.message
                    .contains(&format!("{n} recipients, over the limit of {max}")),
                "{}",
                p.message
            );
            assert!(p.fix.contains("--max-email-recipients"), "{}", p.fix);
        }
        // The default limit is 50.
        assert_eq!(
            parse_rule_value(&doc).expect("usable").1.len(),
            usize::from(n > 50),
            "{n}"
        );
    }
    // Other channels' endpoints are not address lists.
    let doc = json!({"_id": id(0), "isEnabled": true, "whatToReceive": "ONLY_NEW",
        "channels": {"webhook": {"isEnabled": true, "endpoint": "https://h.example/a,b,c", "minPeriod": 0}}});
    let (rule, problems) =
        parse_rule_value_with(&doc, &limits(100, 1), &RuleDefaults::default()).expect("usable");
    assert!(problems.is_empty() && rule.channels[0].endpoint == "https://h.example/a,b,c");

    // Keys MongoDB reads as operators or paths: reported by the reader (not fatal), beside other problems.
    let doc =
        json!({"_id": id(0), "isEnabled": true, "whatToReceive": "NOPE", "$where": "1", "channels": slack()});
    let problems = rule_problems(&doc, &Limits::default());
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].fatal && !problems[0].limit);
    assert!(problems[1].limit && problems[1].message.contains("`$where`"));
    let pr = ProjectRules::from_notifications_with(
        Some(&json!([doc])),
        &Limits::default(),
        &RuleDefaults::default(),
    );
    assert_eq!(pr.problems.len(), 2, "{:?}", pr.problems);
}

#[test]
fn which_problems_refuse_a_write() {
    let p = |fatal, limit| RuleProblem {
        rule_id: Some("r".into()),
        fatal,
        limit,
        message: "m".into(),
        fix: "f".into(),
    };
    // (fatal, limit, force) → refused
    let cases = [
        (false, false, false, false),
        (false, false, true, false),
        (true, false, false, true),
        (true, false, true, false),
        (false, true, false, true),
        (false, true, true, true),
        (true, true, true, true),
    ];
    for (fatal, limit, force, refused) in cases {
        assert_eq!(
            p(fatal, limit).refuses_write(force),
            refused,
            "{fatal} {limit} {force}"
        );
    }
    // `limit` is written only when set (the JSON of every other problem is unchanged).
    assert!(!serde_json::to_string(&p(true, false))
        .expect("json")
        .contains("limit"));
    assert!(serde_json::to_string(&p(false, true))
        .expect("json")
        .contains(r#""limit":true"#));
}

#[test]
fn project_names_are_one_bounded_line() {
    let named = |v: Value| ProjectRules::default().with_name(Some(&v)).name;
    assert_eq!(named(json!("  Acme web\n")), Some("Acme web".into()));
    assert_eq!(named(json!("a\tb")), Some("a b".into()));
    assert_eq!(named(json!("   ")), None);
    assert_eq!(named(json!(42)), None);
    assert_eq!(ProjectRules::default().with_name(None).name, None);
    let long = named(json!("x".repeat(500))).expect("name");
    assert_eq!(long.chars().count(), MAX_PROJECT_NAME_CHARS + 1);
}

#[test]
fn channel_debug_redacts_endpoint() {
    let c = ChannelConfig {
        kind: ChannelKind::Slack,
        endpoint: "https://hooks.slack.com/services/SECRET".into(),
        min_period_s: 0,
        severity: None,
    };
    assert!(!format!("{c:?}").contains("SECRET"));
}

#[test]
fn stored_project_names_are_bounded() {
    let cases: Vec<(String, Option<&str>)> = vec![
        ("Acme web".into(), Some("Acme web")),
        ("  Acme  ".into(), Some("Acme")),
        ("x".repeat(100), Some("")),
        (String::new(), None),
        ("   ".into(), None),
        ("x".repeat(101), None),
        ("a\nb".into(), None),
        ("a\u{7}b".into(), None),
        ("é".repeat(100), Some("")),
    ];
    for (raw, want) in cases {
        let got = check_project_name(&raw);
        match want {
            Some("") => assert_eq!(got.as_deref(), Ok(raw.trim()), "{raw:?}"),
            Some(w) => assert_eq!(got.as_deref(), Ok(w), "{raw:?}"),
            None => assert!(got.is_err(), "{raw:?}: {got:?}"),
        }
    }
}
