use super::*;

fn alert() -> Alert {
    Alert {
        id: alert_id("p", "r", "g", "1000"),
        project_id: "p".into(),
        project_name: Some("Shop".into()),
        rule_id: "r".into(),
        group: "g".into(),
        title: "TypeError".into(),
        state: AlertState::Firing,
        firing: "1000".into(),
        fired_at_ms: 1_000,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 3,
        last_event_at_ms: 5_000,
        resolve_after_ms: 60_000,
        channels: vec![AlertChannel::of_rule(
            ChannelKind::Webhook,
            "https://example.com/h",
            None,
        )],
        heard: Vec::new(),
        closes: Vec::new(),
    }
}

fn heard(channel: ChannelKind, endpoint: &str, first_id: &str, shared: bool) -> AlertChannel {
    AlertChannel {
        first_id: Some(first_id.into()),
        shared,
        ..AlertChannel::of_rule(channel, endpoint, None)
    }
}

/// An alert of a rule with Slack A and PagerDuty R, which heard of: Slack A again (a step to the rule's own
/// channel), Slack B (a step), PagerDuty R on its own (a step to the rule's routing key: the same place),
/// PagerDuty R in digest incident `d1` twice, and in release incident `q2`.
fn audience_alert() -> Alert {
    let mut a = alert();
    a.channels = vec![
        AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/A", None),
        AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", Some(Severity::Critical)),
    ];
    a.heard = vec![
        heard(
            ChannelKind::Slack,
            "https://hooks.slack.test/A",
            "step1slack",
            false,
        ),
        heard(
            ChannelKind::Slack,
            "https://hooks.slack.test/B",
            "step1slackb",
            false,
        ),
        heard(ChannelKind::Pagerduty, "R0UTINGKEY", "step2pd", false),
        heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true),
        heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true),
        heard(ChannelKind::Pagerduty, "R0UTINGKEY", "q2", true),
    ];
    a
}

#[test]
fn a_closed_incidents_resolve_is_the_one_its_last_alert_would_have_sent() {
    let mut a = audience_alert();
    a.closes = vec!["d1".into()];
    let from_alert = lifecycle_tasks(&a, Reason::Resolved, 9_000)
        .into_iter()
        .find(|t| t.alert.as_ref().is_some_and(|r| r.firing_notification_id == "d1"))
        .expect("the incident's resolve");
    let release = NotificationTask {
        notification_id: "d1".into(),
        ..NotificationTask::for_alert(&a, &a.channels[1], Reason::Resolved, 1_000)
    };
    let closed = NotificationTask::for_closed_incident(&release, 9_500);
    assert_eq!(closed.notification_id, from_alert.notification_id);
    assert_eq!(
        (closed.channel, closed.endpoint.as_str(), closed.reason),
        (ChannelKind::Pagerduty, "R0UTINGKEY", Reason::Resolved)
    );
    let r = closed.alert.expect("a reference");
    assert_eq!(
        (r.firing_notification_id.as_str(), r.state),
        ("d1", AlertState::Resolved)
    );
}

/// (channel, endpoint, the first message's id the task refers to) of each task.
fn places(tasks: &[NotificationTask]) -> Vec<(ChannelKind, String, String)> {
    tasks
        .iter()
        .map(|t| {
            let first = t
                .alert
                .as_ref()
                .expect("an alert ref")
                .firing_notification_id
                .clone();
            (t.channel, t.endpoint.clone(), first)
        })
        .collect()
}

#[test]
fn the_audience_is_the_rules_channels_then_who_heard_once_per_place_or_incident() {
    let a = audience_alert();
    let got: Vec<(ChannelKind, &str, Option<&str>, bool)> = a
        .audience()
        .into_iter()
        .map(|m| (m.channel, m.endpoint.as_str(), m.first_id.as_deref(), m.shared))
        .collect();
    assert_eq!(
        got,
        vec![
            (ChannelKind::Slack, "https://hooks.slack.test/A", None, false),
            (ChannelKind::Pagerduty, "R0UTINGKEY", None, false),
            (
                ChannelKind::Slack,
                "https://hooks.slack.test/B",
                Some("step1slackb"),
                false
            ),
            (ChannelKind::Pagerduty, "R0UTINGKEY", Some("d1"), true),
            (ChannelKind::Pagerduty, "R0UTINGKEY", Some("q2"), true),
        ]
    );
    assert_eq!(
        alert().audience().len(),
        1,
        "without anyone heard: the rule's channels"
    );
    // a shared member without its incident's id is a member of its own (channel, endpoint), not an incident
    let mut b = alert();
    b.heard = vec![AlertChannel {
        shared: true,
        ..AlertChannel::of_rule(ChannelKind::Pagerduty, "OTHERKEY", None)
    }];
    assert_eq!(b.audience().len(), 2);
}

#[test]
fn lifecycle_tasks_reach_the_audience_by_what_they_are() {
    let fired = |ch| notification_id("p", "r", "g", "1000", ch);
    let slack_a = (
        ChannelKind::Slack,
        "https://hooks.slack.test/A".to_owned(),
        fired(ChannelKind::Slack),
    );
    let pd = (
        ChannelKind::Pagerduty,
        "R0UTINGKEY".to_owned(),
        fired(ChannelKind::Pagerduty),
    );
    let slack_b = (
        ChannelKind::Slack,
        "https://hooks.slack.test/B".to_owned(),
        "step1slackb".to_owned(),
    );
    let d1 = (ChannelKind::Pagerduty, "R0UTINGKEY".to_owned(), "d1".to_owned());
    let q2 = (ChannelKind::Pagerduty, "R0UTINGKEY".to_owned(), "q2".to_owned());
    let reminder = Reason::Reminder { number: 1, max: 3 };
    let escalation = Reason::Escalation { step: 1, steps: 2 };
    #[rustfmt::skip]
    let table: Vec<(&str, Reason, Vec<&str>, Vec<_>)> = vec![
        ("ack: everyone, shared incidents too", Reason::Acknowledged, vec![],
         vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone(), q2.clone()]),
        ("resolve, closing nothing shared", Reason::Resolved, vec![],
         vec![slack_a.clone(), pd.clone(), slack_b.clone()]),
        ("resolve, the last of d1's alerts", Reason::Resolved, vec!["d1"],
         vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone()]),
        ("resolve, the last of both", Reason::Resolved, vec!["q2", "d1"],
         vec![slack_a.clone(), pd.clone(), slack_b.clone(), d1.clone(), q2.clone()]),
        ("resolve closing an incident it never heard of", Reason::Resolved, vec!["zz"],
         vec![slack_a.clone(), pd.clone(), slack_b.clone()]),
        ("reminder: the rule's channels", reminder, vec!["d1"], vec![slack_a.clone(), pd.clone()]),
        ("escalation: the rule's channels", escalation, vec![], vec![slack_a.clone(), pd.clone()]),
    ];
    for (case, reason, closes, want) in table {
        let mut a = audience_alert();
        a.closes = closes.into_iter().map(str::to_owned).collect();
        let tasks = lifecycle_tasks(&a, reason, 9_000);
        assert_eq!(places(&tasks), want, "{case}");
        let ids: std::collections::BTreeSet<_> = tasks.iter().map(|t| &t.notification_id).collect();
        assert_eq!(ids.len(), tasks.len(), "{case}: one id per message");
        assert!(
            tasks.iter().all(|t| t.reason == reason && t.fired_at_ms == 9_000),
            "{case}"
        );
    }
}

#[test]
fn lifecycle_ids_keep_the_rules_channels_and_name_heard_members_and_incidents() {
    let a = audience_alert();
    let tasks = lifecycle_tasks(&a, Reason::Acknowledged, 9_000);
    // the rule's channels: the ids they always had (golden files, exactly once)
    for (t, ch) in tasks.iter().zip(&a.channels) {
        assert_eq!(
            t.notification_id,
            NotificationTask::for_alert(&a, ch, Reason::Acknowledged, 0).notification_id
        );
    }
    assert_eq!(
        tasks[0].notification_id,
        notification_id(
            "p",
            "r",
            "g",
            &format!("alert:{}:acknowledged", a.id),
            ChannelKind::Slack
        )
    );
    // a heard member: its first message in the id; PagerDuty's severity from where it was heard
    assert_eq!(
        tasks[2].notification_id,
        notification_id(
            "p",
            "r",
            "g",
            &format!("alert:{}:acknowledged:step1slackb", a.id),
            ChannelKind::Slack
        )
    );
    assert_eq!(tasks[1].severity, Some(Severity::Critical));
    // a shared member: the incident's id, the same whichever alert of the rule sends it
    assert_eq!(
        tasks[3].notification_id,
        notification_id("p", "r", "", "incident:d1:acknowledged", ChannelKind::Pagerduty)
    );
    let mut other = audience_alert();
    other.id = alert_id("p", "r", "h", "2000");
    other.group = "h".into();
    other.closes = vec!["d1".into()];
    let theirs = lifecycle_tasks(&other, Reason::Resolved, 9_500);
    let mut ours = audience_alert();
    ours.closes = vec!["d1".into()];
    let mine = lifecycle_tasks(&ours, Reason::Resolved, 9_000);
    assert_eq!(
        theirs[3].notification_id, mine[3].notification_id,
        "one resolve per incident"
    );
    assert_ne!(
        theirs[0].notification_id, mine[0].notification_id,
        "one per alert on the rule's channels"
    );
    assert_ne!(
        mine[3].notification_id, tasks[3].notification_id,
        "its resolve is not its acknowledge"
    );
}

#[test]
fn an_escalation_step_to_a_new_place_is_its_own_first_message() {
    let a = audience_alert();
    let step = Reason::Escalation { step: 2, steps: 2 };
    #[rustfmt::skip]
    let table: Vec<(&str, AlertChannel, Option<&str>)> = vec![
        // (case, the step's channel, the first message it lands on: None = its own, a new member)
        ("the rule's own Slack: the firing's thread", AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/A", None),
         Some("firing")),
        ("the rule's routing key: the firing's incident", AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", None),
         Some("firing")),
        ("a Slack an earlier step reached: that step's message", AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/B", None),
         Some("step1slackb")),
        ("a new email", AlertChannel::of_rule(ChannelKind::Email, "oncall@example.com", None), None),
        ("a new routing key", AlertChannel::of_rule(ChannelKind::Pagerduty, "OTHERKEY", Some(Severity::Warning)), None),
    ];
    for (case, channel, lands_on) in table {
        let (task, member) = NotificationTask::for_alert_member(&a, &channel, step, 9_000);
        let plain = NotificationTask::for_alert(&a, &channel, step, 9_000);
        assert_eq!(
            task.notification_id, plain.notification_id,
            "{case}: the step's id"
        );
        assert_eq!(
            (task.channel, &task.endpoint, task.severity),
            (channel.channel, &channel.endpoint, channel.severity),
            "{case}"
        );
        let first = &task.alert.as_ref().expect("a ref").firing_notification_id;
        match lands_on {
            Some("firing") => {
                assert_eq!(*first, a.firing_notification_id(channel.channel), "{case}");
                assert_eq!(member, None, "{case}");
            }
            Some(id) => {
                assert_eq!(first, id, "{case}");
                assert_eq!(member, None, "{case}");
            }
            None => {
                assert_eq!(*first, task.notification_id, "{case}: its own first message");
                let m = member.expect("a new member to record");
                assert_eq!(
                    m.first_id.as_deref(),
                    Some(task.notification_id.as_str()),
                    "{case}"
                );
                assert!(!m.shared);
                assert_eq!(
                    (m.channel, &m.endpoint, m.severity),
                    (channel.channel, &channel.endpoint, channel.severity)
                );
                // once recorded, its acknowledge and resolve go to the same incident or thread
                let mut b = a.clone();
                b.heard.push(m);
                let acks = lifecycle_tasks(&b, Reason::Acknowledged, 9_500);
                let ack = acks
                    .iter()
                    .find(|t| t.endpoint == channel.endpoint)
                    .expect("the ack reaches it");
                assert_eq!(
                    ack.alert.as_ref().expect("a ref").firing_notification_id,
                    task.notification_id,
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn a_member_is_stored_as_before_unless_it_was_heard() {
    let rule = AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", Some(Severity::Critical));
    assert_eq!(
        serde_json::to_value(&rule).expect("json"),
        serde_json::json!({"channel": "pagerduty", "endpoint": "R0UTINGKEY", "severity": "critical"})
    );
    let shared = heard(ChannelKind::Pagerduty, "R0UTINGKEY", "d1", true);
    let json = serde_json::to_value(&shared).expect("json");
    assert_eq!(
        (&json["firstId"], &json["shared"]),
        (&serde_json::json!("d1"), &serde_json::json!(true))
    );
    let back: AlertChannel = serde_json::from_value(json).expect("back");
    assert_eq!(back, shared);
    // member keys: one per incident, one per (channel, endpoint), and no endpoint in them
    assert_eq!(shared.member_key(), "s:d1");
    let k = heard(ChannelKind::Slack, "https://hooks.slack.test/SECRET", "x", false).member_key();
    assert!(k.starts_with("slack:") && !k.contains("SECRET"), "{k}");
    assert_eq!(
        k,
        AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/SECRET", None).member_key()
    );
    assert_ne!(
        k,
        AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/OTHER", None).member_key()
    );
    let a = audience_alert();
    let back: Alert = serde_json::from_value(serde_json::to_value(&a).expect("json")).expect("back");
    assert_eq!(back, a);
    let plain = serde_json::to_value(alert()).expect("json");
    assert!(
        plain.get("heard").is_none() && plain.get("closes").is_none(),
        "{plain}"
    );
}

#[test]
fn an_alert_id_is_the_same_for_the_same_firing_and_differs_otherwise() {
    let a = alert_id("p", "r", "g", "1000");
    assert_eq!(a, alert_id("p", "r", "g", "1000"));
    assert_ne!(a, alert_id("p", "r", "g", "2000"));
    assert_ne!(a, alert_id("p", "r", "h", "1000"));
    assert!(is_alert_id(&a), "{a}");
    assert!(!is_alert_id("../etc/passwd"));
    assert!(!is_alert_id(&a.to_uppercase()));
}

#[test]
fn resolves_at_is_the_last_event_plus_resolve_after_while_open() {
    let mut a = alert();
    assert_eq!(a.resolves_at_ms(), Some(65_000));
    a.resolve_after_ms = 0;
    assert_eq!(a.resolves_at_ms(), None);
    a.resolve_after_ms = 60_000;
    a.state = AlertState::Resolved;
    a.resolved_at_ms = Some(70_000);
    assert_eq!(a.resolves_at_ms(), None);
    assert_eq!(a.open_for_ms(0), 69_000);
}

#[test]
fn lifecycle_tasks_have_one_id_per_alert_what_and_channel() {
    let a = alert();
    let ch = &a.channels[0];
    let r1 = NotificationTask::for_alert(&a, ch, Reason::Resolved, 9_000);
    let r2 = NotificationTask::for_alert(&a, ch, Reason::Resolved, 9_999);
    assert_eq!(r1.notification_id, r2.notification_id);
    let ack = NotificationTask::for_alert(&a, ch, Reason::Acknowledged, 9_000);
    assert_ne!(r1.notification_id, ack.notification_id);
    let rem1 = NotificationTask::for_alert(&a, ch, Reason::Reminder { number: 1, max: 3 }, 9_000);
    let rem2 = NotificationTask::for_alert(&a, ch, Reason::Reminder { number: 2, max: 3 }, 9_000);
    assert_ne!(rem1.notification_id, rem2.notification_id);
    assert_eq!(lifecycle_tasks(&a, Reason::Resolved, 9_000), vec![r1.clone()]);
    let r = r1.alert.as_ref().expect("an alert ref");
    assert_eq!(r.id, a.id);
    assert_eq!(
        r.firing_notification_id,
        notification_id("p", "r", "g", "1000", ChannelKind::Webhook)
    );
    // the task JSON carries the alert and the reason's type
    let json = serde_json::to_value(&r1).expect("json");
    assert_eq!(json["reason"]["type"], "resolved");
    assert_eq!(json["alert"]["id"], a.id.as_str());
    let back: NotificationTask = serde_json::from_value(json).expect("a task");
    assert_eq!(back, r1);
}

#[test]
fn the_view_has_the_contract_fields() {
    let v = serde_json::to_value(alert().view()).expect("json");
    for k in [
        "id",
        "ruleId",
        "group",
        "title",
        "state",
        "firedAt",
        "acknowledgedAt",
        "resolvedAt",
        "events",
    ] {
        assert!(v.get(k).is_some(), "{k} in {v}");
    }
    assert_eq!(v["state"], "firing");
    assert_eq!(v["acknowledgedAt"], serde_json::Value::Null);
    assert_eq!(v["firedAt"], "1970-01-01T00:00:01Z");
}

#[test]
fn long_groups_are_held_as_a_digest_and_every_id_agrees() {
    let hawk = "11da".repeat(16); // Hawk's 64-hex group hash
    let edge = "g".repeat(MAX_GROUP_KEY_BYTES);
    let long = "g".repeat(MAX_GROUP_KEY_BYTES + 1);
    let huge = format!("x\n{}", "é".repeat(100 * 1024));
    // (group, kept as it is)
    for (group, kept) in [
        ("", true),
        ("g", true),
        (hawk.as_str(), true),
        (edge.as_str(), true),
        (long.as_str(), false),
        (huge.as_str(), false),
    ] {
        let b = bounded_group(group);
        assert_eq!(b == group, kept, "{}", group.len());
        assert!(b.len() <= MAX_GROUP_KEY_BYTES);
        assert_eq!(bounded_group(&b), b, "idempotent");
        if !kept {
            assert_eq!(b.len(), 33);
            assert!(
                b.starts_with('#') && b[1..].bytes().all(|c| c.is_ascii_hexdigit()),
                "{b}"
            );
        }
        // ids made from the event's group and from the group an alert keeps are the same
        assert_eq!(alert_id("p", "r", group, "1"), alert_id("p", "r", &b, "1"));
        assert_eq!(
            notification_id("p", "r", group, "1", ChannelKind::Webhook),
            notification_id("p", "r", &b, "1", ChannelKind::Webhook)
        );
    }
    assert_ne!(
        bounded_group(&long),
        bounded_group(&huge),
        "different groups, different digests"
    );
    // the ids of ordinary groups did not change with the bound (stable across the upgrade): the formula as it was
    let mut h = Sha256::new();
    for part in ["klaxon/alert/v1", "p", "r", hawk.as_str(), "1000"] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    assert_eq!(
        alert_id("p", "r", &hawk, "1000"),
        hex::encode(&h.finalize()[..12])
    );
}
