//! Digests (`minPeriod`) end to end: the real `klaxon` binary, RabbitMQ's delay engine, Redis buffers, and local
//! sinks playing Slack, Telegram, a webhook receiver and an SMTP server.

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

/// A SEEN_MORE rule with threshold 1 (every new group fires once per hour) on the given channels.
fn rules(project: &str, channels: serde_json::Value) -> serde_json::Value {
    json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true,
            "whatToReceive": "SEEN_MORE",
            "including": [], "excluding": [],
            "threshold": 1, "thresholdPeriod": 3_600_000,
            "channels": channels
        }]
    }])
}

/// Publishes one event to each of `n` groups `<group>-0..n` (titles `<title> (<group>-<i>)`), in one process.
fn burst(env: &Env, project: &str, title: &str, group: &str, n: u64) {
    let n = n.to_string();
    env.ok(&[
        "publish",
        "--project",
        project,
        "--title",
        title,
        "--group",
        group,
        "--count",
        &n,
        "--groups",
        &n,
    ]);
}

fn slack_text(r: &klaxon_testkit::http_sink::Request) -> String {
    r.json()["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_becomes_one_digest_after_min_period_and_the_next_burst_another() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 2}}),
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError ({})", env.namespace);

    let t0 = Instant::now();
    burst(&env, &project, &title, "a", 5);
    let got = slack.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "one digest expected; log:\n{}", k.logs());
    let after = got[0].at.duration_since(t0);
    assert!(after >= Duration::from_secs(2), "not before minPeriod: {after:?}");
    assert!(
        after < Duration::from_secs(4),
        "soon after minPeriod: {after:?}; log:\n{}",
        k.logs()
    );
    let text = slack_text(&got[0]);
    assert!(text.contains("5 errors in"), "{text}");
    for i in 0..5 {
        assert!(
            text.contains(&format!("{title} (a-{i})")),
            "group a-{i} missing from {text}"
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 1, "exactly one message for the whole burst");

    // a second burst, after the flush, is a second digest with only its own groups
    burst(&env, &project, &title, "b", 3);
    let got = slack.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "second digest expected; log:\n{}", k.logs());
    let text = slack_text(&got[1]);
    assert!(text.contains("3 errors in"), "{text}");
    assert!(text.contains(&format!("{title} (b-2)")), "{text}");
    assert!(!text.contains(&format!("{title} (a-0)")), "{text}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 2);
    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(
        metrics.contains(r#"klaxon_digest_firings_total{channel="slack"} 8"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"klaxon_digests_published_total{channel="slack"} 2"#),
        "{metrics}"
    );

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_still_send_one_digest_per_window() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 2}}),
    ));
    let mut a = env.spawn("run", &[]);
    let mut b = env.spawn("run", &[]);
    let title = format!("Timeout ({})", env.namespace);
    burst(&env, &project, &title, "g", 20);
    let got = slack.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "log a:\n{}\nlog b:\n{}", a.logs(), b.logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        slack.count(),
        1,
        "one digest per window, whatever process flushes it"
    );
    assert!(slack_text(&slack.requests()[0]).contains("20 errors in"));
    assert_eq!(a.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(b.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flusher_killed_between_claim_and_publish_still_delivers_the_digest_once() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 1}}),
    ));
    let mut sender = env.spawn("sender", &[]);
    let mut crashing = env
        .clone()
        .set("KLAXON_TEST_CRASH_AFTER_CLAIM", "1")
        .spawn("worker", &[]);
    let title = format!("Panic ({})", env.namespace);
    burst(&env, &project, &title, "k", 5);

    // the worker claims the window and aborts before publishing
    let died = klaxon_testkit::wait_for(Duration::from_secs(15), || {
        let up = crashing.get("/healthz").is_some();
        async move { (!up).then_some(()) }
    })
    .await;
    assert!(
        died.is_some(),
        "the test hook must abort the worker; log:\n{}",
        crashing.logs()
    );
    assert!(
        crashing.logs().contains("aborting between claim and publish"),
        "{}",
        crashing.logs()
    );
    assert_eq!(slack.count(), 0, "nothing was published before the crash");
    crashing.kill();

    // a healthy worker recovers the claimed window (after its lease) and publishes it, once
    let mut healthy = env.spawn("worker", &[]);
    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", healthy.logs());
    let text = slack_text(&got[0]);
    for i in 0..5 {
        assert!(
            text.contains(&format!("{title} (k-{i})")),
            "group k-{i} missing from {text}"
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 1);
    assert_eq!(healthy.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_work_on_all_four_channels() {
    const TOKEN: &str = "123456:digest-test-token";
    let hooks = HttpSink::start().await.expect("sink");
    let telegram = HttpSink::start().await.expect("sink");
    let env = Env::new()
        .set("KLAXON_TELEGRAM_API", &telegram.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TOKEN);
    let project = object_id();
    env.import(
        &rules(
            &project,
            json!({
                "slack": {"isEnabled": true, "endpoint": hooks.url("/slack"), "minPeriod": 2},
                "webhook": {"isEnabled": true, "endpoint": hooks.url("/webhook"), "minPeriod": 2},
                "telegram": {"isEnabled": true, "endpoint": "-100777", "minPeriod": 2},
                "email": {"isEnabled": true, "endpoint": format!("{}@example.test", env.namespace), "minPeriod": 2}
            }),
        ),
    );
    let mut k = env.spawn("run", &[]);
    let title = format!("DbError ({})", env.namespace);
    burst(&env, &project, &title, "c", 3);

    let got = hooks.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "slack + webhook; log:\n{}", k.logs());
    let tg = telegram.wait_for_count(1, Duration::from_secs(10)).await;
    assert_eq!(tg.len(), 1, "telegram; log:\n{}", k.logs());
    let mail = klaxon_testkit::wait_for(Duration::from_secs(10), || {
        let found = klaxon_testkit::smtp::messages_containing(&env.namespace);
        async move { (!found.is_empty()).then_some(found) }
    })
    .await
    .unwrap_or_default();
    assert_eq!(mail.len(), 1, "email; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;

    let all = hooks.requests();
    assert_eq!(all.len(), 2);
    let webhook = all
        .iter()
        .find(|r| r.uri == "/webhook")
        .expect("webhook request")
        .json();
    let events = webhook["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 3, "{webhook}");
    assert!(events
        .iter()
        .all(|e| e["count"] == 1 && e["title"].as_str().unwrap_or("").contains(&title)));
    let slack = all.iter().find(|r| r.uri == "/slack").expect("slack request");
    assert!(slack_text(slack).contains("3 errors in"), "{}", slack_text(slack));
    let tg = telegram.requests();
    assert_eq!(tg.len(), 1);
    let tg_text = tg[0].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(tg_text.contains("3 errors in"), "{tg_text}");
    assert_eq!(klaxon_testkit::smtp::messages_containing(&env.namespace).len(), 1);

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
