//! On-call end to end (#34): the real `klaxon` binary, Redis, RabbitMQ's delay engine and webhook receivers.
//! A `renotify` rule reminds a `firing` alert's channels every `every`, at most `max` times, and not after an
//! acknowledgement; an `escalation` step notifies its own channels once when the alert is still `firing` `after`
//! it opened, and not when it was acknowledged before.

mod common;

use std::time::Duration;

use common::{object_id, Env};
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
