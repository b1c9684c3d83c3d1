//! `--output hawk` end to end: the real `klaxon run` publishes Hawk's sender tasks to `sender/<channel>`, and
//! the tasks are compared field by field with what Hawk's notifier publishes (`workers/notifier/src/index.ts`:
//! `addTask("sender/<channel>", {type: "event", payload: {projectId, ruleId, events: [{key, count,
//! repetitionId}]}})`, `repetitionId` copied from the grouper's task, so `null` when the event has none; the queue
//! asserted durable by Hawk's `lib/worker.ts`).
//!
//! `sender/<channel>` names are global (not namespaced) on the broker, so this file keeps to one test and
//! keeps only the tasks of its own project.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_broker::{Broker, Consumer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(5);

struct Task {
    body: Value,
    at: Instant,
    persistent: bool,
}

/// Takes up to `n` tasks of `project` from `consumer` within `within`; tasks of other projects are acked and
/// dropped (left over by an earlier, interrupted run).
async fn take(consumer: &mut Consumer, project: &str, n: usize, within: Duration) -> Vec<Task> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let Some(Some(Ok(d))) = consumer.next_within(left).await else {
            break;
        };
        consumer.ack(d.delivery_tag).await.expect("ack");
        let body: Value = serde_json::from_slice(&d.data).expect("a JSON task");
        if body["payload"]["projectId"] != project {
            continue;
        }
        out.push(Task {
            body,
            at: Instant::now(),
            persistent: d.properties.is_persistent(),
        });
    }
    out
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// Hawk's shape, strictly: no field more, none less (`repetitionId` always there, a string or `null`).
fn assert_hawk_shape(t: &Value) {
    assert_eq!(keys(t), BTreeSet::from(["type".into(), "payload".into()]), "{t}");
    assert_eq!(
        keys(&t["payload"]),
        BTreeSet::from(["projectId".into(), "ruleId".into(), "events".into()]),
        "{t}"
    );
    for e in t["payload"]["events"].as_array().expect("events") {
        assert_eq!(
            keys(e),
            BTreeSet::from(["key".into(), "count".into(), "repetitionId".into()]),
            "{t}"
        );
        assert!(e["key"].is_string() && e["count"].is_u64(), "{t}");
        assert!(
            e["repetitionId"].is_string() || e["repetitionId"].is_null(),
            "{t}"
        );
    }
}

fn event(project: &str, title: &str, group: &str, repetition: Option<&str>) -> String {
    json!({"projectId": project, "event": {"title": title, "groupHash": group, "isNew": false,
        "repetitionId": repetition}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hawk_output_publishes_hawks_sender_tasks_with_leading_edge_digests() {
    let env = Env::new();
    let project = object_id();
    let rule = object_id();
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "_id": rule,
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 1, "thresholdPeriod": 3_600_000,
            "channels": {
                "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.example/x", "minPeriod": 2},
                "telegram": {"isEnabled": true, "endpoint": "-100123", "minPeriod": 0},
                "email": {"isEnabled": false, "endpoint": "a@example.test", "minPeriod": 0},
                "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}
            }
        }]
    }]));
    // no Telegram token, no SMTP: with --output hawk nothing is delivered here, so none is needed
    let env = env.set("KLAXON_OUTPUT", "hawk");
    let mut k = env.spawn("run", &[]);

    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("amqp");
    // Hawk's `assertQueue(name)` (durable, no arguments) agrees with the queues klaxon declared
    let publisher = broker.publisher().await.expect("publisher");
    for ch in ["email", "telegram", "slack", "loop", "webhook"] {
        publisher
            .declare_plain(&format!("sender/{ch}"))
            .await
            .expect("same declaration as Hawk's");
    }
    let mut slack = broker
        .consume("sender/slack", 16, "t-slack")
        .await
        .expect("consume");
    let mut telegram = broker
        .consume("sender/telegram", 16, "t-tg")
        .await
        .expect("consume");

    let title = format!("TypeError ({})", env.namespace);
    let (a, b, c) = (
        format!("{}-a", env.namespace),
        format!("{}-b", env.namespace),
        format!("{}-c", env.namespace),
    );
    env.ok(&[
        "publish",
        "--body",
        &event(&project, &title, &a, Some("6b02d7e1bd0871205ff67971")),
    ]);
    let published = Instant::now();

    // the leading edge on slack, at once, exactly as Hawk's notifier publishes one event
    let first = take(&mut slack, &project, 1, T).await;
    assert_eq!(first.len(), 1, "log:\n{}", k.logs());
    assert!(first[0].at.duration_since(published) < Duration::from_secs(1));
    let expect_a = json!({"type": "event", "payload": {"projectId": project, "ruleId": rule,
        "events": [{"key": a, "count": 1, "repetitionId": "6b02d7e1bd0871205ff67971"}]}});
    assert_hawk_shape(&first[0].body);
    assert_eq!(first[0].body, expect_a);
    assert!(first[0].persistent);

    // b as the grouper sends a first occurrence (`"repetitionId": null`), c without the field at all
    env.ok(&["publish", "--body", &event(&project, &title, &b, None)]);
    let without = json!({"projectId": project, "event": {"title": title, "groupHash": c, "isNew": false}});
    env.ok(&["publish", "--body", &without.to_string()]);

    // telegram (minPeriod 0): one `event` task per firing, `"repetitionId": null` when the event has none
    let tg = take(&mut telegram, &project, 3, T).await;
    assert_eq!(tg.len(), 3, "log:\n{}", k.logs());
    for t in &tg {
        assert_hawk_shape(&t.body);
        assert!(t.persistent);
    }
    assert_eq!(tg[0].body, expect_a);
    let mut got: Vec<Value> = tg[1..].iter().map(|t| t.body.clone()).collect();
    got.sort_by_key(|v| {
        v["payload"]["events"][0]["key"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    for (v, key) in got.iter().zip([&b, &c]) {
        assert_eq!(
            v,
            &json!({"type": "event", "payload": {"projectId": project, "ruleId": rule,
                "events": [{"key": key, "count": 1, "repetitionId": null}]}})
        );
    }

    // slack (minPeriod 2): the other two firings as one `several-events` task, not before minPeriod
    let digest = take(&mut slack, &project, 1, Duration::from_secs(10)).await;
    assert_eq!(digest.len(), 1, "log:\n{}", k.logs());
    assert!(digest[0].at.duration_since(first[0].at) >= Duration::from_millis(1900));
    assert_hawk_shape(&digest[0].body);
    assert_eq!(
        digest[0].body,
        json!({"type": "several-events", "payload": {"projectId": project, "ruleId": rule,
            "events": [{"key": b, "count": 1, "repetitionId": null}, {"key": c, "count": 1, "repetitionId": null}]}})
    );
    assert!(
        take(&mut slack, &project, 1, Duration::from_secs(3))
            .await
            .is_empty(),
        "one digest"
    );

    // nothing went to klaxon's own notify queues
    let mut own = broker
        .consume(&format!("{}.notify.slack", env.namespace), 16, "t-own")
        .await
        .expect("consume");
    assert!(own.next_within(Duration::from_millis(500)).await.is_none());
    own.close().await;
    slack.close().await;
    telegram.close().await;
    publisher.close().await;
    broker.close().await;
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
