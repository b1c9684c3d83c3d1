//! Batches in flight (`--batches-in-flight`), end to end: the real `klaxon` binary, real RabbitMQ, Redis and the
//! MongoDB-wire server, a local HTTP server playing Slack. A later batch is counted and published while an earlier
//! one still waits for its ack; acks stay in order; a failed session hands every batch in flight back, and nothing
//! is counted or notified twice.
//!
//! Needs the test-only hook of feature `fault-injection` (`KLAXON_TEST_WORKER_HOLD_AFTER_PUBLISH`): the first batch
//! that published a notification waits, unacked, until a file exists, then fails its session.
#![cfg(feature = "fault-injection")]

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the last notification, keep listening this long for a (wrong) further one.
const QUIET: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_batches_count_while_an_earlier_one_waits_and_a_failed_session_hands_all_back() {
    let hold = std::env::temp_dir().join(format!("klaxon-hold-{}", klaxon_testkit::unique_namespace()));
    let env = Env::new().set(
        "KLAXON_TEST_WORKER_HOLD_AFTER_PUBLISH",
        hold.to_str().expect("utf-8 temp dir"),
    );
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 10, "thresholdPeriod": 3_600_000,
        "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 0}}}]}]));
    // room for every batch below, however the deliveries are cut into batches on a loaded machine
    let mut k = env.spawn("run", &["--batches-in-flight", "8"]);

    // Group a crosses: its batch publishes (the sender delivers the notification), then is held unacked.
    env.publish(&project, "Flight A", "a").count(10).ok();
    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "group a's notification; log:\n{}", k.logs());
    let acked_before = k.metric("klaxon_events_acked_total");
    assert!(
        acked_before < 10.0,
        "the crossing batch is held unacked ({acked_before} acked)"
    );

    // Later batches while it is held: group c stays below the threshold (5 of 10), group b crosses.
    env.publish(&project, "Flight C", "c").count(5).ok();
    env.publish(&project, "Flight B", "b").count(10).ok();
    let got = slack.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(
        got.len(),
        2,
        "a later batch must be counted and published while an earlier one waits for its ack; log:\n{}",
        k.logs()
    );
    k.wait_metric("klaxon_events_consumed_total", 25.0, Duration::from_secs(30));
    // Acks in order: the later batches are done, yet none is acked while the held one is not.
    assert_eq!(
        k.metric("klaxon_events_acked_total"),
        acked_before,
        "a batch was acked before an earlier one; log:\n{}",
        k.logs()
    );

    // The held batch fails its session: every batch in flight goes back, and is counted again idempotently.
    std::fs::write(&hold, b"go").expect("hold file");
    k.wait_acked(25, Duration::from_secs(60));
    assert!(
        k.logs().contains("injected fault"),
        "the session ended on the injected fault; log:\n{}",
        k.logs()
    );
    // Each unacked event came back exactly once: none was acked during the failed session.
    assert_eq!(
        k.metric("klaxon_events_consumed_total"),
        25.0 + (25.0 - acked_before),
        "log:\n{}",
        k.logs()
    );
    assert_eq!(k.metric("klaxon_events_acked_total"), 25.0);
    tokio::time::sleep(QUIET).await;
    let texts: Vec<String> = slack
        .requests()
        .iter()
        .map(|r| r.json()["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(texts.len(), 2, "each crossing notified once: {texts:?}");
    assert!(texts.iter().any(|t| t.contains("Flight A")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("Flight B")), "{texts:?}");

    // Group c was counted once, not twice: 4 more stay below 10 ...
    env.publish(&project, "Flight C", "c").count(4).ok();
    k.wait_acked(29, Duration::from_secs(30));
    assert_eq!(
        slack.requests().len(),
        2,
        "group c fired early: a redelivered batch was counted twice; log:\n{}",
        k.logs()
    );
    // ... and the 10th fires, once.
    env.publish(&project, "Flight C", "c").count(1).ok();
    let got = slack.wait_for_count(3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.requests().len(), 3);

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0), "exit 0 on SIGTERM");
    let _ = std::fs::remove_file(&hold);
    common::delete_queues(&env).await;
}
