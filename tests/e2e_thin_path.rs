//! The walking skeleton, end to end: the real `klaxon` binary, real RabbitMQ, Redis and the MongoDB-wire server,
//! and a local HTTP server playing Slack.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the first notification, keep listening this long for a (wrong) second one.
const QUIET: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_more_fires_exactly_once_for_250_events_with_threshold_100() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rules = json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true,
            "whatToReceive": "SEEN_MORE",
            "including": [], "excluding": [],
            "threshold": 100, "thresholdPeriod": 3_600_000,
            "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/services/T/B/X"), "minPeriod": 0}}
        }]
    }]);
    env.import(&rules);

    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: x is undefined ({})", env.namespace);
    env.publish(&project, &title, "11da").count(250).ok();

    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "one notification expected; log:\n{}", k.logs());
    // All 250 counted and acked: one task was published, and nothing more can fire.
    k.wait_acked(250, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0
    );
    tokio::time::sleep(QUIET).await;
    let got = slack.requests();
    assert_eq!(got.len(), 1, "exactly one notification for one crossing");
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].uri, "/services/T/B/X");
    let text = got[0].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains(&title),
        "slack text {text:?} must contain the title"
    );

    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(metrics.contains("klaxon_events_consumed_total 250"), "{metrics}");

    assert_eq!(
        k.terminate(Duration::from_secs(10)),
        Some(0),
        "exit 0 on SIGTERM within 10 s"
    );
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_new_fires_once_per_group() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rules = json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true,
            "whatToReceive": "ONLY_NEW",
            "including": ["db"], "excluding": [],
            "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 0}}
        }]
    }]);
    env.import(&rules);
    let mut k = env.spawn("run", &[]);

    let title = format!("DB connection lost ({})", env.namespace);
    // not new: never notifies
    env.publish(&project, &title, "g-old").count(3).ok();
    // new, then the same group flagged new again (a redelivered first occurrence)
    env.publish(&project, &title, "g-new").new_first().count(3).ok();
    env.publish(&project, &title, "g-new").new_first().ok();
    // new but filtered out by `including`
    env.publish(&project, "Cache miss", "g-other").new_first().ok();

    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    // All 7 events acked: exactly one task was published for them.
    k.wait_acked(7, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0
    );
    tokio::time::sleep(QUIET).await;
    let got = slack.requests();
    assert_eq!(got.len(), 1, "one notification for one new group");
    assert!(got[0].json()["text"]
        .as_str()
        .unwrap_or_default()
        .contains(&title));

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_health_and_clean_shutdown() {
    let env = Env::new();
    let mut k = env.spawn("run", &[]);
    assert_eq!(k.get("/healthz").map(|r| r.0), Some(200));
    assert_eq!(k.get("/readyz").map(|r| r.0), Some(200));
    // `klaxon probe` (the image's healthcheck): 0 while ready, 3 when nothing answers
    let (code, out, err) = env.run(&["probe", "--http-addr", &k.addr]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("/readyz: 200"), "{out}");
    let addr = k.addr.clone();
    let started = std::time::Instant::now();
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10));
    let (code, _, err) = env.run(&["probe", "--http-addr", &addr]);
    assert_eq!(code, 3, "nothing answers: {err}");
    common::delete_queues(&env).await;
}
