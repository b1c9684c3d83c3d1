//! Unique-users thresholds end to end: the real `klaxon` binary, RabbitMQ, Redis, the MongoDB-wire server and
//! a local HTTP server playing Slack.

mod common;

use std::time::Duration;

use common::{object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the expected notifications, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

/// Waits (≤ 30 s) until the process has acked at least `n` events: their outcome is then durable (any
/// notification published).
fn wait_acked(k: &Klaxon, n: u64) {
    k.wait_metric("klaxon_events_acked_total", n as f64, Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_users_fire_once_in_fixed_and_sliding_windows_and_repeats_or_anonymous_events_do_not() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = |window: &str, path: &str| {
        json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 3_600_000,
               "window": window, "uniqueUsers": true, "including": [], "excluding": [],
               "channels": {"slack": {"isEnabled": true, "endpoint": slack.url(path), "minPeriod": 0}}})
    };
    env.import(
        &json!([{"_id": project, "notifications": [rule("fixed", "/fixed"), rule("sliding", "/sliding")]}]),
    );
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: checkout failed ({})", env.namespace);

    // 40 events from one user and 40 without a user: one user counted, never three.
    let publish = || env.publish(&project, &title, "g-users");
    publish().user("ann").count(40).ok();
    publish().count(40).ok();
    wait_acked(&k, 80);
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        slack.requests().len(),
        0,
        "one user is not three; log:\n{}",
        k.logs()
    );

    // Two more users (many events each): the third distinct user fires each rule exactly once.
    publish().user("bob").users(2).count(30).ok();
    let got = slack.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "one per rule; log:\n{}", k.logs());
    // More users in the same window: no second notification.
    publish().user("cid").users(10).count(30).ok();
    wait_acked(&k, 140);
    tokio::time::sleep(QUIET).await;
    let got = slack.requests();
    assert_eq!(got.len(), 2, "exactly once per rule; log:\n{}", k.logs());
    let mut paths: Vec<&str> = got.iter().map(|r| r.uri.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, vec!["/fixed", "/sliding"]);
    for r in &got {
        let text = r.json()["text"].as_str().unwrap_or_default().to_owned();
        assert!(text.contains(&title), "{text}");
        assert!(text.contains("Seen by 3 users in the last hour"), "{text}");
    }
    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(metrics.contains("klaxon_events_consumed_total 140"), "{metrics}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_add_list_and_check_explain_unique_users() {
    let env = Env::new();
    let project = object_id();
    let out = env.ok(&[
        "rules",
        "add",
        "--project",
        &project,
        "--seen-more",
        "50/1h",
        "--unique-users",
        "--window",
        "sliding",
        "--webhook",
        "https://hooks.example.com/x",
        "--json",
    ]);
    assert!(out.contains(r#""uniqueUsers":true"#), "{out}");
    let list = env.ok(&["rules", "list", "--project", &project]);
    assert!(list.contains("SEEN_MORE 50 users/1h"), "{list}");

    // --unique-users needs a threshold.
    let (code, _, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--unique-users",
        "--webhook",
        "https://x.test/h",
    ]);
    assert_ne!(code, 0, "{err}");

    // A stored rule with a wrong uniqueUsers is explained by `rules check`, with the fix.
    let bad = json!([{"_id": project, "notifications": [
        {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 60000,
         "uniqueUsers": "yes", "channels": {"webhook": {"isEnabled": true, "endpoint": "https://x.test/h"}}},
        {"isEnabled": true, "whatToReceive": "ONLY_NEW", "uniqueUsers": true,
         "channels": {"webhook": {"isEnabled": true, "endpoint": "https://x.test/h"}}}
    ]}]);
    env.import_force(&bad);
    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("`uniqueUsers` must be a boolean"), "{out}");
    assert!(
        out.contains("count distinct users (`event.user.id`) instead of events"),
        "{out}"
    );
    assert!(out.contains("ONLY_NEW rule has no threshold"), "{out}");
}
