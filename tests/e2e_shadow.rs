//! `--output shadow` end to end: the real `klaxon run` evaluates and counts as usual, records what it would send in
//! the delivery trail (status `shadow`) and in `klaxon_notifications_shadowed_total`, and sends and publishes
//! nothing. For a channel with `minPeriod`, shadow mode records what the other outputs would send, when they would:
//! the leading edge at once, the digest of the rest when its window closes.

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_records_the_leading_edge_then_the_digest_and_publishes_nothing() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new().set("KLAXON_OUTPUT", "shadow");
    let project = object_id();
    let rule = object_id();
    let email = format!("shadow-{}@example.test", env.namespace);
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "_id": rule, "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 1, "thresholdPeriod": 3_600_000,
            "channels": {
                "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 2},
                "email": {"isEnabled": true, "endpoint": email, "minPeriod": 0}
            }
        }]
    }]));
    let mut k = env.spawn("run", &[]);
    let started = Instant::now();
    // three groups: each fires once (threshold 1)
    env.publish(&project, "TypeError: shadow", "g")
        .count(3)
        .groups(3)
        .ok();
    k.wait_acked(3, T);
    // email (minPeriod 0): three notifications; webhook (minPeriod 2): the leading edge now, one digest later
    k.wait_metric(r#"klaxon_notifications_shadowed_total{channel="email"}"#, 3.0, T);
    k.wait_metric(
        r#"klaxon_notifications_shadowed_total{channel="webhook"}"#,
        2.0,
        T,
    );
    let digest_seen = started.elapsed();
    assert!(
        digest_seen >= Duration::from_millis(1900),
        "the digest is recorded when its window closes, not before ({digest_seen:?})"
    );

    // nothing published, nothing delivered
    let metrics = k.get("/metrics").map(|(_, b)| b).unwrap_or_default();
    for series in [
        r#"klaxon_notifications_published_total{channel="email"}"#,
        r#"klaxon_notifications_published_total{channel="webhook"}"#,
        r#"klaxon_digests_published_total{channel="webhook"}"#,
        r#"klaxon_deliveries_total{channel="webhook",outcome="sent"}"#,
    ] {
        assert_eq!(common::metric_in(&metrics, series), 0.0, "{series}");
    }
    assert_eq!(
        common::metric_in(&metrics, r#"klaxon_thresholds_crossed_total{window="fixed"}"#),
        3.0,
        "counted as usual"
    );

    // the trail: 3 email + 2 webhook records, status shadow, the webhook digest the last one
    let records = common::shadow_records(&env, &project, 5, T, || k.logs());
    assert_eq!(records.len(), 5, "{records:?}");
    let by = |ch: &str| records.iter().filter(|r| r["channel"] == ch).count();
    assert_eq!((by("email"), by("webhook")), (3, 2), "{records:?}");
    for r in &records {
        assert_eq!(
            (r["status"].as_str(), r["attempts"].as_u64()),
            (Some("shadow"), Some(0)),
            "{r}"
        );
        assert_eq!(r["ruleId"], rule.as_str());
    }
    // the same answer from the API the console reads
    let (status, body) = k
        .get(&format!("/api/v1/deliveries?projectId={project}&limit=10"))
        .expect("api");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    let listed = api["deliveries"]
        .as_array()
        .map(|a| a.iter().filter(|r| r["status"] == "shadow").count());
    assert_eq!(listed, Some(5), "{api}");

    // no request reached the receiver, no email the SMTP server, no task Klaxon's own queues
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(hook.count(), 0, "shadow mode delivers nothing");
    assert!(klaxon_testkit::smtp::messages_containing(&email).is_empty());
    let broker = klaxon_broker::Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("amqp");
    for ch in ["email", "webhook"] {
        let q = format!("{}.notify.{ch}", env.namespace);
        let depth = broker.queue_depth(&q).await.expect("depth");
        assert_eq!(depth.map(|d| d.messages), Some(0), "{q}");
    }
    broker.close().await;
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
