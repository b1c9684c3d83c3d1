//! On-call end to end (#34): the real `klaxon` binary, Redis, RabbitMQ's delay engine and webhook receivers.
//! A `renotify` rule reminds a `firing` alert's channels every `every`, at most `max` times, and not after an
//! acknowledgement; an `escalation` step notifies its own channels once when the alert is still `firing` `after`
//! it opened, and not when it was acknowledged before.

mod common;

use std::time::Duration;

use common::{fleet_logs, fleet_metric, object_id, Env};
use klaxon_counter::{Alerts, Change, RedisHandle};
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

/// A SEEN_MORE rule (2 events in a minute fire) that never resolves by itself, with a webhook and `extra` fields.
fn rule(project: &str, hook: &HttpSink, extra: Value) -> Value {
    let mut r = json!({
        "isEnabled": true,
        "whatToReceive": "SEEN_MORE",
        "including": [], "excluding": [],
        "threshold": 2, "thresholdPeriod": 60_000,
        "resolveAfter": 0,
        "channels": {
            "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}
        }
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        r[k] = v;
    }
    json!([{"_id": project, "notifications": [r]}])
}

/// One project with `rule(…, extra)` under a `run` process, two events of group `g` titled `title` published,
/// and the alert's firing on the webhook.
struct Fired {
    hook: HttpSink,
    env: Env,
    project: String,
    k: common::Klaxon,
    body: Value,
}

async fn fired(title: &str, extra: Value) -> Fired {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&rule(&project, &hook, extra));
    let k = env.spawn("run", &[]);
    let title = format!("{title} ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let body = common::firing_webhook(&hook, || k.logs()).await;
    Fired {
        hook,
        env,
        project,
        k,
        body,
    }
}

async fn acknowledge(env: &Env, project: &str, alert_id: &str) {
    let redis = RedisHandle::connect(&klaxon_testkit::redis_url())
        .await
        .expect("redis");
    let alerts = Alerts::new(redis, &env.namespace);
    let change = alerts
        .acknowledge(project, alert_id, "e2e", None)
        .await
        .expect("ack");
    assert!(matches!(change, Change::Done(_)), "{change:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_is_reminded_every_second_at_most_twice() {
    let Fired {
        hook,
        env,
        mut k,
        body: fired,
        ..
    } = fired("Timeout", json!({"renotify": {"every": 1_000, "max": 2}})).await;
    let got = hook.wait_for_count(3, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 3, "two reminders; log:\n{}", k.logs());
    for (i, r) in got[1..].iter().enumerate() {
        let body = r.json();
        assert_eq!(body["kind"], "reminder", "{body}");
        assert_eq!(body["alertId"], fired["alertId"], "{body}");
        let after = r.at.duration_since(got[i].at);
        assert!(
            after >= Duration::from_millis(700),
            "a reminder about every second: {after:?}"
        );
        eprintln!(
            "measured: reminder {} {after:?} after the previous message",
            i + 1
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 3, "at most `max` reminders; log:\n{}", k.logs());
    assert_eq!(k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#), 2.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_alert_is_not_reminded() {
    let Fired {
        hook,
        env,
        project,
        mut k,
        body: fired,
    } = fired("Acked", json!({"renotify": {"every": 2_000, "max": 3}})).await;
    acknowledge(&env, &project, fired["alertId"].as_str().unwrap_or_default()).await;
    // the first reminder was due 2 s after the alert opened: it finds the alert acknowledged and ends the chain
    k.wait_metric(
        r#"klaxon_alert_reminders_total{outcome="acknowledged"}"#,
        1.0,
        Duration::from_secs(10),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 1, "no reminder after the ack; log:\n{}", k.logs());
    assert_eq!(k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#), 0.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_alert_escalates_once_and_an_acknowledged_one_does_not() {
    let (hook_a, esc_a) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let (hook_b, esc_b) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let escalation = |esc: &HttpSink| {
        json!({"escalation": [{"after": 3_000, "channels": {
            "webhook": {"isEnabled": true, "endpoint": esc.url("/escalated"), "minPeriod": 0}
        }}]})
    };
    let (a, b) = (object_id(), object_id());
    let mut rules = rule(&a, &hook_a, escalation(&esc_a));
    rules.as_array_mut().expect("an array").extend(
        rule(&b, &hook_b, escalation(&esc_b))
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    env.import(&rules);
    let mut k = env.spawn("run", &[]);
    let title = format!("Down ({})", env.namespace);
    env.publish(&a, &title, "g").count(2).ok();
    env.publish(&b, &title, "g").count(2).ok();
    let fired_a = common::firing_webhook(&hook_a, || k.logs()).await;
    let fired_b = common::firing_webhook(&hook_b, || k.logs()).await;
    acknowledge(&env, &b, fired_b["alertId"].as_str().unwrap_or_default()).await;

    let got = esc_a.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "the step's webhook; log:\n{}", k.logs());
    let body = got[0].json();
    assert_eq!(body["kind"], "escalation", "{body}");
    assert_eq!(body["alertId"], fired_a["alertId"], "{body}");
    let after = got[0].at.duration_since(hook_a.requests()[0].at);
    eprintln!("measured: escalation {after:?} after the firing message (after 3 s)");
    assert!(
        after >= Duration::from_millis(2_500),
        "not before `after`: {after:?}"
    );
    k.wait_metric(
        r#"klaxon_alert_escalations_total{outcome="acknowledged"}"#,
        1.0,
        Duration::from_secs(10),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(esc_a.count(), 1, "escalated once; log:\n{}", k.logs());
    assert_eq!(
        esc_b.count(),
        0,
        "an acknowledged alert does not escalate; log:\n{}",
        k.logs()
    );
    assert_eq!(
        (hook_a.count(), hook_b.count()),
        (1, 1),
        "the rule's own channel only fired"
    );
    assert_eq!(k.metric(r#"klaxon_alert_escalations_total{outcome="sent"}"#), 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// The webhook bodies' notification ids, each once: a repeat would be a second delivery of one notification.
fn distinct_ids(hook: &HttpSink) -> usize {
    let ids: std::collections::HashSet<String> = hook
        .requests()
        .iter()
        .map(|r| r.json()["notificationId"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.len()
}

/// An escalation step to `esc` after `after` ms.
fn one_step(esc: &HttpSink, after: u64) -> Value {
    json!([{"after": after, "channels": {
        "webhook": {"isEnabled": true, "endpoint": esc.url("/escalated"), "minPeriod": 0}
    }}])
}

/// Three `klaxon run` processes share the timer queue: each reminder and the escalation step is delivered by one
/// of them, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_three_reminds_max_times_and_escalates_once() {
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let project = object_id();
    env.import(&rule(
        &project,
        &hook,
        json!({"renotify": {"every": 1_000, "max": 2}, "escalation": one_step(&esc, 2_000)}),
    ));
    let fleet: Vec<common::Klaxon> = (0..3).map(|_| env.spawn("run", &[])).collect();
    let title = format!("Fleet ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = common::firing_webhook(&hook, || fleet_logs(&fleet)).await;
    let got = hook.wait_for_count(3, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 3, "two reminders; logs:\n{}", fleet_logs(&fleet));
    let got = esc.wait_for_count(1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "one step; logs:\n{}", fleet_logs(&fleet));
    assert_eq!(got[0].json()["alertId"], fired["alertId"]);
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        hook.count(),
        3,
        "firing + max reminders; logs:\n{}",
        fleet_logs(&fleet)
    );
    assert_eq!(esc.count(), 1, "escalated once; logs:\n{}", fleet_logs(&fleet));
    assert_eq!((distinct_ids(&hook), distinct_ids(&esc)), (3, 1));
    for r in &hook.requests()[1..] {
        assert_eq!(r.json()["kind"], "reminder");
    }
    assert_eq!(
        fleet_metric(&fleet, r#"klaxon_alert_reminders_total{outcome="sent"}"#),
        2.0,
        "each reminder timer handled once across the fleet"
    );
    assert_eq!(
        fleet_metric(&fleet, r#"klaxon_alert_escalations_total{outcome="sent"}"#),
        1.0
    );
    let handled: Vec<f64> = fleet
        .iter()
        .map(|k| k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#))
        .collect();
    eprintln!("measured: reminders handled per process {handled:?}");
    for mut k in fleet {
        assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    }
    common::delete_queues(&env).await;
}

/// `kill -9` of the process that opened the alert while its reminders and escalation wait in the delay engine
/// (RabbitMQ holds them, not the process), and of the one that sent the first reminder: the survivors send the
/// rest, nothing is lost or sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_timers_are_pending_loses_and_repeats_nothing() {
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let project = object_id();
    env.import(&rule(
        &project,
        &hook,
        json!({"renotify": {"every": 2_000, "max": 3}, "escalation": one_step(&esc, 3_000)}),
    ));
    let mut fleet: Vec<common::Klaxon> = (0..3).map(|_| env.spawn("run", &[])).collect();
    let title = format!("Killed ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    common::firing_webhook(&hook, || fleet_logs(&fleet)).await;
    // the opener's timers are in the delay queue now: kill it
    let opener = fleet
        .iter()
        .position(|k| k.metric("klaxon_alerts_opened_total") >= 1.0)
        .unwrap_or(0);
    fleet[opener].kill();
    eprintln!("killed the opener ({})", fleet[opener].addr);
    let got = hook.wait_for_count(2, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 2, "the first reminder; logs:\n{}", fleet_logs(&fleet));
    // let its sender mark it delivered, then kill the survivor that sent it (one process stays)
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some(sender) = fleet
        .iter()
        .position(|k| k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#) >= 1.0)
    {
        fleet[sender].kill();
        eprintln!("killed the first reminder's sender ({})", fleet[sender].addr);
    }
    let got = hook.wait_for_count(4, Duration::from_secs(30)).await;
    assert_eq!(
        got.len(),
        4,
        "firing + 3 reminders; logs:\n{}",
        fleet_logs(&fleet)
    );
    let got = esc.wait_for_count(1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "the step; logs:\n{}", fleet_logs(&fleet));
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 4, "nothing twice; logs:\n{}", fleet_logs(&fleet));
    assert_eq!(esc.count(), 1, "escalated once; logs:\n{}", fleet_logs(&fleet));
    assert_eq!((distinct_ids(&hook), distinct_ids(&esc)), (4, 1));
    let numbers: Vec<Value> = hook.requests()[1..]
        .iter()
        .map(|r| r.json()["kind"].clone())
        .collect();
    assert!(numbers.iter().all(|k| k == "reminder"), "{numbers:?}");
    for k in fleet.iter_mut() {
        k.terminate(Duration::from_secs(10));
    }
    common::delete_queues(&env).await;
}

/// The design call (docs/rules.md "Mutes and on-call"): a mute silences an alert's reminders and escalation
/// like its firings (the chain goes on, nothing is sent, nothing made up later), and never keeps its resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_muted_alert_is_neither_reminded_nor_escalated_but_still_resolves() {
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let (project, rule_id) = (object_id(), object_id());
    let rules = rule(
        &project,
        &hook,
        // the mute lands well before the first reminder (3 s), even on a busy machine
        json!({"_id": rule_id, "resolveAfter": 9_000, "renotify": {"every": 3_000, "max": 2},
               "escalation": one_step(&esc, 4_500)}),
    );
    env.import(&rules);
    let mut k = env.spawn("run", &[]);
    let title = format!("Muted ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    common::firing_webhook(&hook, || k.logs()).await;
    env.ok(&[
        "mute",
        "add",
        "--project",
        &project,
        "--rule",
        &rule_id,
        "--for",
        "1h",
    ]);
    k.wait_metric(
        r#"klaxon_alert_reminders_total{outcome="muted"}"#,
        2.0,
        Duration::from_secs(15),
    );
    k.wait_metric(
        r#"klaxon_alert_escalations_total{outcome="muted"}"#,
        1.0,
        Duration::from_secs(15),
    );
    // resolveAfter 9 s after the last event: the resolve comes through the mute
    let got = hook.wait_for_count(2, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 2, "the resolve; log:\n{}", k.logs());
    assert_eq!(got[1].json()["kind"], "resolved", "{}", got[1].json());
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 2, "firing + resolved only; log:\n{}", k.logs());
    assert_eq!(
        esc.count(),
        0,
        "a muted alert does not escalate; log:\n{}",
        k.logs()
    );
    assert_eq!(k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#), 0.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// `klaxon explain`, the API's explain and the console's explain page show where an open alert's reminders and
/// escalation stand and whether the rule is in quiet hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_reminders_left_the_next_step_and_quiet_hours() {
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let project = object_id();
    // a quiet window that is not now (two to three hours from now, UTC), so the firing is not held
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let hhmm = |secs: u64| format!("{:02}:{:02}", (secs / 3600) % 24, (secs / 60) % 60);
    env.import(&rule(
        &project,
        &hook,
        json!({"renotify": {"every": 600_000, "max": 2}, "escalation": one_step(&esc, 1_200_000),
               "quietHours": [{"from": hhmm(now + 7_200), "to": hhmm(now + 10_800), "timezone": "UTC"}],
               "quietHoursBypass": ["pagerduty"]}),
    ));
    let k = env.spawn("run", &[]);
    let title = format!("Explained ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;

    let check = |on_call: &Value, from: &str| {
        assert_eq!(on_call["reminders"]["sent"], 0, "{from}: {on_call}");
        assert_eq!(on_call["reminders"]["max"], 2, "{from}: {on_call}");
        assert_eq!(on_call["reminders"]["every"], 600_000, "{from}: {on_call}");
        assert!(on_call["reminders"]["nextAt"].is_string(), "{from}: {on_call}");
        assert_eq!(on_call["escalation"]["nextStep"], 1, "{from}: {on_call}");
        assert_eq!(on_call["escalation"]["steps"], 1, "{from}: {on_call}");
        assert_eq!(
            on_call["escalation"]["nextChannels"],
            json!(["webhook"]),
            "{from}: {on_call}"
        );
        assert_eq!(on_call["quietHours"]["quiet"], false, "{from}: {on_call}");
        assert_eq!(
            on_call["quietHours"]["bypass"],
            json!(["pagerduty"]),
            "{from}: {on_call}"
        );
    };
    // the CLI, as JSON and as a table
    let out = env.ok(&[
        "explain",
        "--project",
        &project,
        "--title",
        &title,
        "--group",
        "g",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["rules"][0]["alert"]["id"], fired["alertId"], "{v}");
    check(&v["rules"][0]["onCall"], "cli");
    let table = env.ok(&[
        "explain",
        "--project",
        &project,
        "--title",
        &title,
        "--group",
        "g",
    ]);
    assert!(table.contains("reminders: 0 of 2 sent, the next at"), "{table}");
    assert!(table.contains("escalation: step 1 of 1 (webhook) at"), "{table}");
    assert!(table.contains("not in quiet hours now"), "{table}");
    // the API
    let r = reqwest::Client::new()
        .post(format!("http://{}/api/v1/projects/{project}/explain", k.addr))
        .json(&json!({"title": title, "groupHash": "g"}))
        .send()
        .await
        .expect("explain");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    check(&v["rules"][0]["onCall"], "api");
    // the console's page
    let page = reqwest::get(format!(
        "http://{}/projects/{project}/explain?title=x&groupHash=g",
        k.addr
    ))
    .await
    .expect("page")
    .text()
    .await
    .unwrap_or_default();
    assert!(page.contains("reminders: 0 of 2 sent, the next at"), "{page}");
    assert!(page.contains("escalation: step 1 of 1 (webhook) at"), "{page}");
    // another group has no open alert: quiet hours only
    let out = env.ok(&[
        "explain",
        "--project",
        &project,
        "--title",
        &title,
        "--group",
        "other",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("json");
    let on_call = &v["rules"][0]["onCall"];
    assert!(
        on_call.get("reminders").is_none() && on_call.get("escalation").is_none(),
        "{v}"
    );
    assert_eq!(on_call["quietHours"]["quiet"], false, "{v}");
    drop(k);
    common::delete_queues(&env).await;
}

/// A worker dies (abort, as a `kill -9`) right after publishing a reminder's messages, before scheduling the next
/// reminder and acking the timer: RabbitMQ gives the timer to a surviving worker, which publishes the same
/// messages again (the same notification ids: the sender delivers them once) and goes on with the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dying_between_a_reminder_and_its_next_timer_repeats_and_loses_nothing() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&rule(
        &project,
        &hook,
        json!({"renotify": {"every": 2_000, "max": 3}}),
    ));
    let mut sender = env.spawn("sender", &[]);
    let crashing = env
        .clone()
        .set("KLAXON_TEST_CRASH_AFTER_REMIND", "1")
        .spawn("worker", &[]);
    let title = format!("Crash ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    common::firing_webhook(&hook, || crashing.logs()).await;
    // reminder 1 is due 2 s after the alert opened: the worker publishes it and aborts
    let died = klaxon_testkit::wait_for(Duration::from_secs(20), || {
        let up = crashing.get("/healthz").is_some();
        async move { (!up).then_some(()) }
    })
    .await;
    assert!(
        died.is_some(),
        "the worker should have aborted; log:\n{}",
        crashing.logs()
    );
    // the survivors (started only now, so the timer was surely the dead one's)
    let fleet: Vec<common::Klaxon> = (0..2).map(|_| env.spawn("worker", &[])).collect();
    let got = hook.wait_for_count(4, Duration::from_secs(30)).await;
    assert_eq!(
        got.len(),
        4,
        "firing + 3 reminders; logs:\n{}\n{}",
        crashing.logs(),
        fleet_logs(&fleet)
    );
    // the copy the dead worker published is dropped by the sender, never delivered twice
    sender.wait_metric(
        r#"klaxon_deliveries_total{channel="webhook",outcome="duplicate"}"#,
        1.0,
        Duration::from_secs(20),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 4, "nothing twice; logs:\n{}", fleet_logs(&fleet));
    assert_eq!(distinct_ids(&hook), 4);
    assert_eq!(
        fleet_metric(&fleet, r#"klaxon_alert_reminders_total{outcome="sent"}"#),
        3.0,
        "the redelivered reminder 1, then 2 and 3"
    );
    for mut k in fleet {
        assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    }
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// An escalation step to PagerDuty opens an incident of its own (its `dedup_key` is the step's notification id,
/// not the firing's): the step records it in the alert's audience, so acknowledging the alert (here with
/// `klaxon alerts ack`) acknowledges that incident and resolving it resolves it, each once, on that key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_steps_pagerduty_incident_is_acknowledged_and_resolved_on_its_own_key() {
    const ROUTING_KEY: &str = "R0uT1nGkEyOnCall0000000000000000";
    let hook = HttpSink::start().await.expect("sink");
    let pd = HttpSink::start().await.expect("sink");
    pd.set_default(
        klaxon_testkit::http_sink::Reply::status(202)
            .body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &pd.url(""));
    let project = object_id();
    env.import(&rule(
        &project,
        &hook,
        json!({"escalation": [{"after": 1_000, "channels": {
            "pagerduty": {"isEnabled": true, "endpoint": ROUTING_KEY}}}]}),
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("Escalated ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();
    let got = pd.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "the step's trigger; log:\n{}", k.logs());
    let trigger = got[0].json();
    assert_eq!(trigger["event_action"], "trigger", "{trigger}");
    let key = trigger["dedup_key"].as_str().unwrap_or_default().to_owned();
    assert!(!key.is_empty(), "{trigger}");
    for (i, (verb, action)) in [("ack", "acknowledge"), ("resolve", "resolve")]
        .into_iter()
        .enumerate()
    {
        env.ok(&["alerts", verb, "--project", &project, &alert_id]);
        let got = pd.wait_for_count(i + 2, Duration::from_secs(15)).await;
        assert_eq!(got.len(), i + 2, "the {action}; log:\n{}", k.logs());
        let event = got[i + 1].json();
        assert_eq!(event["event_action"], action, "{event}");
        assert_eq!(
            event["dedup_key"],
            key.as_str(),
            "the step's own incident: {event}"
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(pd.count(), 3, "each once; log:\n{}", k.logs());
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #42: a project whose slots hold 16 alerts resolved by hand only (open 30 days) and 984 resolved alerts
/// used to open no alert at all: the firing was delivered, but its escalation never existed. A resolved alert's
/// slot is reusable at once: the new firing opens its alert, and it escalates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_full_of_resolved_alerts_still_opens_and_escalates_a_new_one() {
    use klaxon_core::alert::{alert_id, Alert, AlertChannel, AlertState};
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let env = Env::new();
    let project = object_id();
    let redis = RedisHandle::connect(&klaxon_testkit::redis_url())
        .await
        .expect("redis");
    let alerts = Alerts::new(redis, &env.namespace);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let old = |rule: &str, i: i64, resolve_after_ms: u64| Alert {
        id: alert_id(&project, rule, &format!("old{i}"), "w"),
        project_id: project.clone(),
        project_name: None,
        rule_id: rule.into(),
        group: format!("old{i}"),
        title: format!("Old error {i}"),
        state: AlertState::Firing,
        firing: "w".into(),
        fired_at_ms: now - 3_600_000 + i,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 0,
        last_event_at_ms: now - 3_600_000 + i,
        resolve_after_ms,
        channels: vec![AlertChannel::of_rule(
            klaxon_core::ChannelKind::Webhook,
            "https://example.com/hook",
            None,
        )],
        heard: Vec::new(),
        closes: Vec::new(),
    };
    let by_hand: Vec<Alert> = (0..16).map(|i| old("5e3eef0679fa3700a0198a01", i, 0)).collect();
    let paging: Vec<Alert> = (0..984)
        .map(|i| old("5e3eef0679fa3700a0198a02", 100 + i, 60_000))
        .collect();
    alerts.open(&by_hand, None).await.expect("open");
    for chunk in paging.chunks(200) {
        alerts.open(chunk, None).await.expect("open");
    }
    for p in &paging {
        let c = alerts
            .resolve(&project, &p.id, "e2e", None)
            .await
            .expect("resolve");
        assert!(matches!(c, Change::Done(_)), "{c:?}");
    }
    let usage = alerts.usage(&project).await.expect("usage");
    assert_eq!((usage.kept, usage.open), (1000, 16), "{usage:?}");

    env.import(&rule(
        &project,
        &hook,
        json!({"escalation": [{"after": 2_000, "channels": {
            "webhook": {"isEnabled": true, "endpoint": esc.url("/escalated"), "minPeriod": 0}
        }}]}),
    ));
    let mut k = env.spawn("run", &[]);
    env.publish(&project, &format!("New ({})", env.namespace), "g")
        .count(2)
        .ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    assert!(
        fired["alertId"].is_string(),
        "the firing opened its alert: {fired}"
    );
    let got = esc.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "the step's webhook; log:\n{}", k.logs());
    assert_eq!(got[0].json()["alertId"], fired["alertId"]);
    assert_eq!(
        k.metric(r#"klaxon_alerts_not_opened_total{reason="project_full"}"#),
        0.0
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
