//! The worker pipeline end to end: bad input, several workers, crashes. Real binary, real services.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{object_id, Env};
use klaxon_broker::{header, Broker, Outgoing, Publisher, QueueType, Topology, ERROR_HEADER};
use klaxon_core::ChannelKind;
use klaxon_testkit::HttpSink;
use serde_json::json;

const T: Duration = Duration::from_secs(10);

fn topology(env: &Env) -> Topology {
    Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    )
}

async fn connect(env: &Env) -> (Broker, Publisher, Topology) {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let publisher = broker.publisher().await.expect("publisher");
    let topo = topology(env);
    publisher.declare(&topo).await.expect("declare");
    (broker, publisher, topo)
}

fn import(env: &Env, project: &str, rule: serde_json::Value) {
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
}

/// Drains `queue` until `want` messages arrived, then listens `quiet` longer for extras.
async fn drain(
    broker: &Broker,
    queue: &str,
    want: usize,
    within: Duration,
    quiet: Duration,
) -> Vec<klaxon_broker::Delivery> {
    let mut c = broker.consume(queue, 200, "test-drain").await.expect("consume");
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while got.len() < want && tokio::time::Instant::now() < deadline {
        if let Some(Some(Ok(d))) = c.next_within(Duration::from_millis(200)).await {
            c.ack(d.delivery_tag).await.expect("ack");
            got.push(d);
        }
    }
    let quiet_until = tokio::time::Instant::now() + quiet;
    while tokio::time::Instant::now() < quiet_until {
        if let Some(Some(Ok(d))) = c.next_within(Duration::from_millis(200)).await {
            c.ack(d.delivery_tag).await.expect("ack");
            got.push(d);
        }
    }
    c.close().await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_shape_is_set_aside_and_good_events_still_notify() {
    let env = Env::new();
    let project = object_id();
    import(
        &env,
        &project,
        json!({"isEnabled": true, "whatToReceive": "ONLY_NEW",
               "channels": {"webhook": {"isEnabled": true, "endpoint": "http://127.0.0.1:9/hook", "minPeriod": 0}}}),
    );
    let mut k = env.spawn("worker", &[]);
    let (broker, publisher, topo) = connect(&env).await;

    let good = |title: &str| {
        serde_json::to_vec(
            &json!({"projectId": project, "event": {"title": title, "groupHash": title, "isNew": true}}),
        )
        .expect("json")
    };
    let oversized = {
        let mut v = good("big");
        v.extend(std::iter::repeat_n(b' ', klaxon_core::event::MAX_BODY_BYTES));
        v
    };
    let bad: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not a valid notifier task"),
        (vec![0xff, 0xfe, 0x00, 0x7b], "UTF-8"),
        (
            json!({"event": {"title": "t", "groupHash": "g"}})
                .to_string()
                .into_bytes(),
            "`projectId`",
        ),
        (json!({"projectId": project}).to_string().into_bytes(), "`event`"),
        (
            json!({"projectId": project, "event": {"groupHash": "g"}})
                .to_string()
                .into_bytes(),
            "`event.title`",
        ),
        (
            json!({"projectId": project, "event": {"title": "t"}})
                .to_string()
                .into_bytes(),
            "`event.groupHash`",
        ),
        (
            json!({"projectId": 42, "event": {"title": "t", "groupHash": "g"}})
                .to_string()
                .into_bytes(),
            "must be a string",
        ),
        (
            json!({"projectId": project, "event": {"title": ["t"], "groupHash": "g"}})
                .to_string()
                .into_bytes(),
            "must be a string",
        ),
        (
            json!({"projectId": project, "event": {"title": "t", "groupHash": "g", "isNew": "yes"}})
                .to_string()
                .into_bytes(),
            "`event.isNew`",
        ),
        (oversized, "limit"),
        // poison: under the size limit, but serde's error echoes the whole string; the reason must stay small
        // or its header frame exceeds frame_max and the broker closes the connection (the batch never acks)
        (
            serde_json::to_vec(&"A".repeat(200 * 1024)).expect("json"),
            "not a valid notifier task",
        ),
        (
            serde_json::to_vec(&json!({"projectId": project, "event": "A".repeat(200 * 1024)}))
                .expect("json"),
            "not a valid notifier task",
        ),
    ];
    let mut msgs = vec![Outgoing::json(topo.events_queue(), good("before"))];
    for (body, _) in &bad {
        let mut m = Outgoing::json(topo.events_queue(), body.clone());
        m.headers = vec![("x-test".into(), "kept".into())];
        msgs.push(m);
    }
    msgs.push(Outgoing::json(topo.events_queue(), good("after")));
    publisher.publish_all(&msgs).await.expect("publish");

    let invalid = drain(
        &broker,
        &topo.invalid_queue(),
        bad.len(),
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        invalid.len(),
        bad.len(),
        "every bad shape set aside; log:\n{}",
        k.logs()
    );
    for (d, (body, reason)) in invalid.iter().zip(&bad) {
        assert_eq!(&d.data, body, "moved untouched");
        let why = header(&d.properties, ERROR_HEADER).unwrap_or_default();
        assert!(why.contains(reason), "reason {why:?} should mention {reason}");
        assert!(
            why.len() <= klaxon_core::text::MAX_REASON_BYTES && !why.contains('\n'),
            "a bounded one-line reason, not {} bytes",
            why.len()
        );
        assert_eq!(
            header(&d.properties, "x-test").as_deref(),
            Some("kept"),
            "headers kept"
        );
    }
    let tasks = drain(
        &broker,
        &topo.notify_queue(ChannelKind::Webhook),
        2,
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await;
    let titles: HashSet<String> = tasks
        .iter()
        .map(|d| {
            serde_json::from_slice::<serde_json::Value>(&d.data).expect("task")["events"][0]["title"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(titles, HashSet::from(["before".to_owned(), "after".to_owned()]));

    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(
        metrics.contains(&format!("klaxon_events_invalid_total {}", bad.len())),
        "{metrics}"
    );
    assert!(k.logs().contains("invalid event set aside"));
    assert_eq!(k.terminate(T), Some(0));
    broker.close().await;
    common::delete_queues(&env).await;
}

fn seen_more_rule(endpoint: &str) -> serde_json::Value {
    json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100, "thresholdPeriod": 3_600_000,
           "channels": {"slack": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_fire_each_of_20_groups_exactly_once() {
    let env = Env::new();
    let project = object_id();
    import(&env, &project, seen_more_rule("http://127.0.0.1:9/unused"));
    let workers: Vec<_> = (0..3)
        .map(|_| env.spawn("worker", &["--batch-max", "64"]))
        .collect();
    env.publish(&project, "Timeout", "g").groups(20).count(10000).ok();
    // Every event acked across the fleet: every firing's task is in the queue (tasks are confirmed before acks).
    let acked =
        |ws: &[common::Klaxon]| -> f64 { ws.iter().map(|w| w.metric("klaxon_events_acked_total")).sum() };
    let all_acked = common::eventually(Duration::from_secs(90), || {
        (acked(&workers) >= 10_000.0).then_some(())
    })
    .await;
    assert!(
        all_acked.is_some(),
        "acked {} of 10000; log:\n{}",
        acked(&workers),
        workers[0].logs()
    );
    let (broker, _publisher, topo) = connect(&env).await;
    let tasks = drain(
        &broker,
        &topo.notify_queue(ChannelKind::Slack),
        20,
        Duration::from_secs(10),
        Duration::from_millis(500),
    )
    .await;
    let ids: HashSet<String> = tasks
        .iter()
        .map(|d| {
            d.properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default()
        })
        .collect();
    let groups: HashSet<String> = tasks
        .iter()
        .map(|d| {
            serde_json::from_slice::<serde_json::Value>(&d.data).expect("task")["events"][0]["groupHash"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(tasks.len(), 20, "exactly 20 tasks; logs:\n{}", workers[0].logs());
    assert_eq!(ids.len(), 20, "20 distinct notification ids");
    assert_eq!(groups.len(), 20, "one per group");
    let consumed: f64 = workers
        .iter()
        .map(|w| w.metric("klaxon_events_consumed_total"))
        .sum();
    assert_eq!(consumed, 10_000.0, "every event consumed once across the fleet");
    let busy = workers.iter().filter(|w| !w.logs().is_empty()).count();
    assert!(busy >= 1);
    for mut w in workers {
        assert_eq!(w.terminate(T), Some(0));
    }
    broker.close().await;
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_mid_stream_loses_nothing_and_notifies_once() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    import(&env, &project, seen_more_rule(&slack.url("/hook")));
    let mut a = env.spawn("worker", &["--batch-max", "32"]);
    let b = env.spawn("worker", &["--batch-max", "32"]);
    let sender = env.spawn("sender", &[]);

    let publish = {
        let env = env.clone();
        let project = project.clone();
        std::thread::spawn(move || env.publish(&project, "Crash", "g").groups(20).count(10000).ok())
    };
    // Let both workers get going, then kill one without warning and start it again.
    // Mid-stream on purpose: kill it once it has taken (not necessarily finished) 500 events.
    a.wait_metric("klaxon_events_consumed_total", 500.0, Duration::from_secs(30));
    a.kill();
    let a2 = env.spawn("worker", &["--batch-max", "32"]);
    publish.join().expect("publisher thread");

    let got = slack.wait_for_count(20, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got_after = slack.requests();
    let titles: HashSet<String> = got_after
        .iter()
        .map(|r| r.json()["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        got.len().max(got_after.len()),
        20,
        "each firing delivered exactly once; worker log:\n{}",
        b.logs()
    );
    assert_eq!(titles.len(), 20, "all 20 firings present, none twice");
    drop((a2, b, sender));
    common::delete_queues(&env).await;
}
