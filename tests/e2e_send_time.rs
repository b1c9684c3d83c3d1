//! Decided at send time (#41, item 5), end to end: the real `klaxon` binary, Redis, RabbitMQ's delay engine,
//! MongoDB and local webhook receivers. A reminder or an escalation step waits in the sender's queue (behind a
//! paced channel, a throttled endpoint) after the timer loop published it; it is sent only if its alert is still
//! firing and its rule still has its channel when its turn comes. Acknowledging an alert stops the reminders
//! already queued; a deleted rule's alert reminds no more, and its Acknowledge link still works; reminders and
//! escalation steps carry the alert's Acknowledge and Resolve links.
//! A `klaxon sender` on its own decides the same with rules read on the store of its delivery trail.

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use reqwest::redirect::Policy;
use serde_json::{json, Value};

/// A message of an alert that passed its last check just before the ack or the delete can still arrive this long
/// after it (a Redis call or two and one HTTP request on loopback, on a loaded machine); anything later was
/// decided after the change, wrongly (the paced reminders came 2 s apart, the unpaced ones 1 s).
const IN_FLIGHT: Duration = Duration::from_millis(500);

/// A SEEN_MORE rule (2 events in a minute fire, never resolving by itself) with a webhook and `extra` fields.
fn rule(rule_id: &str, hook: &HttpSink, extra: Value) -> Value {
    let mut r = json!({
        "_id": rule_id,
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
    r
}

/// The webhook bodies of `hook` of kind `kind` (`reminder`, `escalation`, …) and when each arrived.
fn of_kind(hook: &HttpSink, kind: &str) -> Vec<(Instant, Value)> {
    hook.requests()
        .into_iter()
        .map(|r| (r.at, r.json()))
        .filter(|(_, b)| b["kind"] == kind)
        .collect()
}

/// The action names of a webhook body (`actions[].action`).
fn actions(body: &Value) -> Vec<String> {
    body["actions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["action"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The URL of action `name` of a webhook body.
fn link(body: &Value, name: &str) -> String {
    body["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["action"] == name))
        .and_then(|x| x["url"].as_str())
        .unwrap_or_else(|| panic!("no {name} link in {body}"))
        .to_owned()
}

/// The delivery trail's records of `project` with status `dropped`, once there is one (within 15 s).
fn dropped_records(env: &Env, project: &str, logs: impl Fn() -> String) -> Vec<Value> {
    klaxon_testkit::eventually_blocking(Duration::from_secs(15), || {
        let out = env.ok(&[
            "deliveries",
            "list",
            "--project",
            project,
            "--status",
            "dropped",
            "-o",
            "ndjson",
        ]);
        let r: Vec<Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (!r.is_empty()).then_some(r)
    })
    .unwrap_or_else(|| panic!("a dropped record in the trail; log:\n{}", logs()))
}

/// Reminders every second on a webhook paced at one message per 2 s: they queue up in the sender (parked in the
/// delay engine, waiting for their slot). Once the alert is acknowledged (`klaxon alerts ack`), none of those
/// already queued is delivered — each is dropped, counted and recorded — while the acknowledged message is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_stops_the_reminders_queued_behind_a_paced_channel() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new().set("KLAXON_RATE_WEBHOOK", "0.5");
    let project = object_id();
    let r = rule(
        &object_id(),
        &hook,
        json!({"renotify": {"every": 1_000, "max": 30}}),
    );
    env.import(&json!([{"_id": project, "notifications": [r]}]));
    let mut k = env.spawn("run", &[]);
    let title = format!("Paced ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();

    // Eight reminders published in about eight seconds; the webhook takes one message per 2 s, so about four of
    // them are still waiting in the sender.
    k.wait_metric(
        r#"klaxon_alert_reminders_total{outcome="sent"}"#,
        8.0,
        Duration::from_secs(25),
    );
    let before = of_kind(&hook, "reminder").len();
    env.ok(&["alerts", "ack", "--project", &project, &alert_id]);
    let acked = Instant::now();
    eprintln!("measured: {before} reminder(s) delivered before the ack");

    // The queued reminders come back for their slot, find the alert acknowledged, and are dropped. Long enough
    // for them to come back, and for two more paced deliveries if reminders still went out.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let late: Vec<Duration> = of_kind(&hook, "reminder")
        .iter()
        .filter(|(at, _)| *at > acked + IN_FLIGHT)
        .map(|(at, _)| at.duration_since(acked))
        .collect();
    assert!(
        late.is_empty(),
        "reminders delivered after the ack, at {late:?}; log:\n{}",
        k.logs()
    );
    let series = r#"klaxon_notifications_dropped_total{channel="webhook",reason="acknowledged"}"#;
    k.wait_metric(series, 2.0, Duration::from_secs(10));
    let dropped = k.metric(series);
    eprintln!("measured: {dropped} queued reminder(s) dropped after the ack");
    // the acknowledgement itself is told, once
    let told = of_kind(&hook, "acknowledged");
    assert_eq!(told.len(), 1, "the acknowledged message; log:\n{}", k.logs());

    // recorded in the trail as dropped, with the reason; logged once each
    let records = dropped_records(&env, &project, || k.logs());
    assert!(
        records.iter().all(|r| r["lastError"]
            .as_str()
            .unwrap_or_default()
            .contains("acknowledged")),
        "{records:?}"
    );
    let logged = k.logs().matches("not sent: decided at send time").count();
    assert!(
        logged as f64 >= dropped,
        "one line per dropped reminder ({logged} < {dropped})"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Reminders and an escalation step carry the alert's Acknowledge and Resolve links (and only those); after
/// the rule is deleted (`PUT …/rules` without it), its alert sends no more reminders, and the Acknowledge link
/// of a reminder still works: the page says the rule is deleted, the confirmed POST acknowledges the alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_rules_alert_reminds_no_more_and_its_acknowledge_link_still_works() {
    let key = format!("action-key-{}-{}", object_id(), object_id());
    let port = common::free_port();
    let public = format!("http://klaxon-public.localhost:{port}");
    let env = Env::new()
        .set("KLAXON_ACTION_KEY", &key)
        .set("KLAXON_PUBLIC_URL", &public);
    let (hook, esc) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let project = object_id();
    let rule_id = object_id();
    let r = rule(
        &rule_id,
        &hook,
        json!({
            "renotify": {"every": 1_000, "max": 30},
            "escalation": [{"after": 1_500, "channels": {
                "webhook": {"isEnabled": true, "endpoint": esc.url("/escalated"), "minPeriod": 0}
            }}]
        }),
    );
    env.import(&json!([{"_id": project, "notifications": [r]}]));
    let mut k = env.spawn_at("run", &format!("127.0.0.1:{port}"), &[]);
    let title = format!("Gone ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    assert_eq!(
        actions(&fired),
        [
            "mute-group-1h",
            "mute-group-24h",
            "mute-rule-1h",
            "explain",
            "ack",
            "resolve"
        ],
        "{fired}"
    );

    // A reminder and the step: the alert's two links, nothing to mute or explain.
    let got = klaxon_testkit::wait_for(Duration::from_secs(15), || {
        let r = of_kind(&hook, "reminder");
        async move { r.into_iter().next() }
    })
    .await;
    let (_, reminder) = got.unwrap_or_else(|| panic!("a reminder; log:\n{}", k.logs()));
    assert_eq!(actions(&reminder), ["ack", "resolve"], "{reminder}");
    let steps = esc.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(steps.len(), 1, "the escalation step; log:\n{}", k.logs());
    let step = steps[0].json();
    assert_eq!(step["kind"], "escalation", "{step}");
    assert_eq!(actions(&step), ["ack", "resolve"], "{step}");
    for url in [link(&reminder, "ack"), link(&step, "resolve")] {
        assert!(url.starts_with(&format!("{public}/a/v1.")), "{url}");
    }

    // The rule goes (through the API: every process is told at once).
    let http = reqwest::Client::builder()
        .redirect(Policy::none())
        .resolve("klaxon-public.localhost", k.addr.parse().expect("addr"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let put = http
        .put(format!("http://{}/api/v1/projects/{project}/rules", k.addr))
        .json(&json!({"_id": project, "notifications": []}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(
        put.status().as_u16(),
        200,
        "{}",
        put.text().await.unwrap_or_default()
    );
    let deleted = Instant::now();
    // reminders were due every second: five more seconds would have brought about five
    tokio::time::sleep(Duration::from_secs(5)).await;
    let late: Vec<Duration> = of_kind(&hook, "reminder")
        .iter()
        .filter(|(at, _)| *at > deleted + IN_FLIGHT)
        .map(|(at, _)| at.duration_since(deleted))
        .collect();
    assert!(
        late.is_empty(),
        "reminders of a deleted rule's alert, at {late:?} after the delete; log:\n{}",
        k.logs()
    );

    // The reminder's Acknowledge link: the page shows the alert (its rule deleted), the POST acknowledges it.
    let ack = link(&reminder, "ack");
    let page = http.get(&ack).send().await.expect("GET");
    let status = page.status().as_u16();
    let page = page.text().await.expect("page");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("is firing") && page.contains("deleted") && page.contains("id=\"confirm\""),
        "{page}"
    );
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("no form: {page}"))
        .to_owned();
    let done = http
        .post(&ack)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .expect("POST");
    let status = done.status().as_u16();
    let done = done.text().await.expect("page");
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("acknowledged by link"), "{done}");
    let alerts = env.ok(&["alerts", "list", "--project", &project, "-o", "json"]);
    assert!(alerts.contains("\"acknowledged\""), "{alerts}");
    // the acknowledgement still reaches the channel that heard of the alert
    let told = klaxon_testkit::wait_for(Duration::from_secs(15), || {
        let n = of_kind(&hook, "acknowledged").len();
        async move { (n > 0).then_some(n) }
    })
    .await;
    assert_eq!(told, Some(1), "the acknowledged message; log:\n{}", k.logs());
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// The same for a `klaxon sender` on its own (its rules read through a cache of its own on the store of its
/// delivery trail, refreshed by the invalidations): reminders queued behind a paced webhook when the rule is
/// deleted are dropped (`rule_gone`), none is delivered after the delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_on_its_own_drops_the_queued_reminders_of_a_deleted_rule() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new().set("KLAXON_RATE_WEBHOOK", "0.5");
    let project = object_id();
    let r = rule(
        &object_id(),
        &hook,
        json!({"renotify": {"every": 1_000, "max": 30}}),
    );
    env.import(&json!([{"_id": project, "notifications": [r]}]));
    let mut worker = env.spawn("worker", &[]);
    let mut sender = env.spawn("sender", &[]);
    let logs =
        |w: &common::Klaxon, s: &common::Klaxon| format!("worker:\n{}\nsender:\n{}", w.logs(), s.logs());
    let title = format!("Alone ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    common::firing_webhook(&hook, || logs(&worker, &sender)).await;
    worker.wait_metric(
        r#"klaxon_alert_reminders_total{outcome="sent"}"#,
        6.0,
        Duration::from_secs(25),
    );
    let put = reqwest::Client::new()
        .put(format!("http://{}/api/v1/projects/{project}/rules", sender.addr))
        .json(&json!({"_id": project, "notifications": []}))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("PUT");
    assert_eq!(
        put.status().as_u16(),
        200,
        "{}",
        put.text().await.unwrap_or_default()
    );
    let deleted = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let late: Vec<Duration> = of_kind(&hook, "reminder")
        .iter()
        .filter(|(at, _)| *at > deleted + IN_FLIGHT)
        .map(|(at, _)| at.duration_since(deleted))
        .collect();
    assert!(
        late.is_empty(),
        "reminders of a deleted rule's alert, at {late:?} after the delete; {}",
        logs(&worker, &sender)
    );
    sender.wait_metric(
        r#"klaxon_notifications_dropped_total{channel="webhook",reason="rule_gone"}"#,
        1.0,
        Duration::from_secs(10),
    );
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(worker.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
