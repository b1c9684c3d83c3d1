//! SPIKE and REAPPEARED end to end: the real `klaxon` binary, RabbitMQ, Redis (on its own clock: buckets and quiet
//! periods are real time here), the MongoDB-wire server and local HTTP servers playing the receivers.

mod common;

use std::time::Duration;

use common::{object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the expected notifications, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

fn wait_acked(k: &Klaxon, n: u64) {
    k.wait_metric("klaxon_events_acked_total", n as f64, Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_ten_times_a_groups_steady_rate_fires_once_and_the_same_burst_for_an_always_loud_group_does_not(
) {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    const BUCKET: u64 = 3000;
    // `resolveAfter: 0`: the alert the spike opens is not resolved by itself (its default, one bucket, would put
    // a resolved message on both channels 3 s after the burst: tests/e2e_alerts.rs is about those), so only
    // firings reach the sink
    env.import(&json!([{"_id": project, "notifications": [
        {"isEnabled": true, "whatToReceive": "SPIKE", "thresholdPeriod": BUCKET, "baselineWindows": 3, "factor": 5,
         "threshold": 10, "resolveAfter": 0, "channels": {
            "webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0},
            "slack": {"isEnabled": true, "endpoint": sink.url("/slack"), "minPeriod": 0}}}]}]));
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: checkout failed ({})", env.namespace);
    let publish = |group: &str, n: u64| env.publish(&project, &title, group).count(n).ok();

    // Three buckets at a steady rate: "steady" 3 events a bucket, "loud" 30. A group's first bucket never fires.
    let mut sent = 0;
    for _ in 0..3 {
        common::next_bucket(BUCKET, 200).await;
        publish("loud", 30);
        publish("steady", 3);
        sent += 33;
    }
    wait_acked(&k, sent);
    assert_eq!(
        sink.requests().len(),
        0,
        "steady rates never spike; log:\n{}",
        k.logs()
    );

    // The burst: 30 for both. Steady needs max(10, 5 × 3) = 15 and fires once; loud needs 5 × 30 = 150.
    common::next_bucket(BUCKET, 200).await;
    publish("steady", 30);
    publish("loud", 30);
    sent += 60;
    let got = sink.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "webhook and slack; log:\n{}", k.logs());
    wait_acked(&k, sent);
    tokio::time::sleep(QUIET).await;
    let got = sink.requests();
    assert_eq!(got.len(), 2, "exactly once; log:\n{}", k.logs());
    let hook = got.iter().find(|r| r.uri == "/hook").expect("the webhook");
    let body = hook.json();
    assert_eq!(body["kind"], "spike", "{body}");
    assert_eq!(body["events"][0]["groupHash"], "steady", "{body}");
    assert_eq!(body["events"][0]["count"], 15, "{body}");
    assert_eq!(body["spike"]["needed"], 15, "{body}");
    assert_eq!(body["spike"]["baseline"], 3.0, "{body}");
    assert_eq!(body["spike"]["bucketMs"], BUCKET, "{body}");
    let slack = got.iter().find(|r| r.uri == "/slack").expect("slack");
    let text = slack.json()["text"]
        .as_str()
        .unwrap_or_default()
        .replace('\u{2060}', "");
    assert!(
        text.contains(&format!(
            "Spike in project {project}: 15 in the last 3 seconds, usually ~3 (5.0×)"
        )),
        "{text}"
    );
    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(
        metrics.contains(r#"klaxon_thresholds_crossed_total{window="spike"} 1"#),
        "{metrics}"
    );

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_silent_past_its_quiet_period_fires_once_when_seen_again_and_not_for_its_next_events() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [
        {"isEnabled": true, "whatToReceive": "REAPPEARED", "quietPeriod": 1500, "channels": {
            "webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}}}]}]));
    let mut k = env.spawn("run", &[]);
    let title = format!("DB timeout ({})", env.namespace);
    let publish = || env.publish(&project, &title, "g");

    // A new group, then more of it within the quiet period: nothing (a new group is ONLY_NEW's business).
    publish().new_first().count(3).ok();
    publish().count(3).ok();
    wait_acked(&k, 6);
    tokio::time::sleep(Duration::from_millis(500)).await;
    publish().count(2).ok();
    wait_acked(&k, 8);
    assert_eq!(sink.requests().len(), 0, "log:\n{}", k.logs());

    // Quiet for more than 1.5 s, then seen again: one notification, and none for its next events.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    publish().count(5).ok();
    let got = sink.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    publish().count(5).ok();
    wait_acked(&k, 18);
    tokio::time::sleep(QUIET).await;
    let got = sink.requests();
    assert_eq!(got.len(), 1, "once per reappearance; log:\n{}", k.logs());
    let body = got[0].json();
    assert_eq!(body["kind"], "reappeared", "{body}");
    assert_eq!(body["reappeared"]["quietPeriodMs"], 1500, "{body}");
    let quiet = body["reappeared"]["quietForMs"].as_u64().expect("known quiet");
    assert!((1500..30_000).contains(&quiet), "{body}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_add_check_list_and_explain_know_spike_and_reappeared() {
    let env = Env::new();
    let project = object_id();
    let hook = "https://hooks.example.com/x";
    // `rules check --file`: each field problem with its fix, exit 1
    let bad = json!([{"_id": project, "notifications": [
        {"_id": object_id(), "isEnabled": true, "whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000, "factor": 1,
         "channels": {"webhook": {"isEnabled": true, "endpoint": hook, "minPeriod": 0}}},
        {"_id": object_id(), "isEnabled": true, "whatToReceive": "REAPPEARED", "quietPeriod": 500,
         "channels": {"webhook": {"isEnabled": true, "endpoint": hook, "minPeriod": 0}}}]}]);
    let file = common::json_file(&env, "bad", &bad);
    let (code, out, err) = env.run(&["rules", "check", "--file", file.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("`factor` must be between 1.5 and 100, got 1"),
        "{all}"
    );
    assert!(
        all.contains("`quietPeriod` must be milliseconds between 1000"),
        "{all}"
    );
    assert!(all.contains("fix"), "{all}");

    // `rules add` and `rules list`
    env.ok(&[
        "rules",
        "add",
        "--project",
        &project,
        "--spike",
        "5x/1h",
        "--webhook",
        hook,
    ]);
    env.ok(&[
        "rules",
        "add",
        "--project",
        &project,
        "--reappeared",
        "7d",
        "--webhook",
        hook,
    ]);
    let (code, _, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--spike",
        "1x/1h",
        "--webhook",
        hook,
    ]);
    assert_eq!(code, 2, "a bad flag value is a usage error: {err}");
    assert!(err.contains("`factor` must be between 1.5 and 100"), "{err}");
    let list = env.ok(&["rules", "list", "--project", &project]);
    assert!(list.contains("SPIKE 5x/1h over 24 (min 10)"), "{list}");
    assert!(list.contains("REAPPEARED after 7d"), "{list}");

    // `explain`: a first bucket cannot spike; a group without a mark for a rule created just now cannot be a
    // reappearance (the rule has not watched for 7 days)
    let out = env.ok(&[
        "explain",
        "--project",
        &project,
        "--title",
        "TypeError",
        "--group",
        "g",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let rules = v["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 2, "{v}");
    assert_eq!(rules[0]["verdict"], "counting", "{v}");
    assert!(
        rules[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("with no baseline it cannot spike"),
        "{v}"
    );
    assert_eq!(rules[1]["verdict"], "counting", "{v}");
    assert!(
        rules[1]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not seen since the rule began watching"),
        "{v}"
    );
}
