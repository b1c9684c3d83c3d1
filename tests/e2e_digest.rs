//! Digests (`minPeriod`, leading edge) end to end: the real `klaxon` binary, RabbitMQ's delay engine, Redis buffers, and local
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

/// Publishes the leading edge (one group `<group>-0`) and checks that it arrives within a second, alone.
/// Returns when it arrived.
async fn leading_edge(
    env: &Env,
    sink: &HttpSink,
    project: &str,
    title: &str,
    group: &str,
    before: usize,
) -> Instant {
    burst(env, project, title, group, 1);
    let published = Instant::now();
    let got = sink.wait_for_count(before + 1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), before + 1, "the leading edge must be sent at once");
    let at = got[before].at;
    assert!(
        at.duration_since(published) < Duration::from_secs(1),
        "the first message of a quiet channel waits for nothing: {:?}",
        at.duration_since(published)
    );
    let text = slack_text(&got[before]);
    assert!(
        text.contains(title) && text.contains("Seen 1 times"),
        "a single notification: {text}"
    );
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_firing_goes_at_once_and_the_window_after_it_becomes_one_digest() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 2}}),
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError ({})", env.namespace);

    let first = leading_edge(&env, &slack, &project, &title, "lead", 0).await;
    // four more firings within minPeriod: one digest, minPeriod after the first message
    burst(&env, &project, &title, "a", 4);
    let got = slack.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "one digest expected; log:\n{}", k.logs());
    let after = got[1].at.duration_since(first);
    assert!(after >= Duration::from_secs(2), "not before minPeriod: {after:?}");
    assert!(
        after < Duration::from_secs(4),
        "soon after minPeriod: {after:?}; log:\n{}",
        k.logs()
    );
    let text = slack_text(&got[1]);
    assert!(text.contains("4 errors in"), "{text}");
    for i in 0..4 {
        assert!(
            text.contains(&format!("{title} (a-{i})")),
            "group a-{i} missing from {text}"
        );
    }
    assert!(!text.contains("lead"), "{text}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 2, "exactly one message for the whole window");

    // minPeriod after the digest the channel is quiet again: a new leading edge goes at once
    let again = leading_edge(&env, &slack, &project, &title, "b", 2).await;
    burst(&env, &project, &title, "c", 2);
    let got = slack.wait_for_count(4, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 4, "second digest expected; log:\n{}", k.logs());
    assert!(got[3].at.duration_since(again) >= Duration::from_secs(2));
    let text = slack_text(&got[3]);
    assert!(text.contains("2 errors in"), "{text}");
    assert!(text.contains(&format!("{title} (c-1)")), "{text}");
    assert!(!text.contains(&format!("{title} (a-0)")), "{text}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 4);
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
async fn three_processes_send_one_leading_edge_then_one_digest_per_window() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 2}}),
    ));
    let mut fleet: Vec<_> = (0..3).map(|_| env.spawn("run", &["--prefetch", "4"])).collect();
    let title = format!("Timeout ({})", env.namespace);
    let first = leading_edge(&env, &slack, &project, &title, "lead", 0).await;
    burst(&env, &project, &title, "g", 20);
    let got = slack.wait_for_count(2, Duration::from_secs(15)).await;
    let logs = || fleet.iter().map(|k| k.logs()).collect::<Vec<_>>().join("\n---\n");
    assert_eq!(got.len(), 2, "logs:\n{}", logs());
    assert!(got[1].at.duration_since(first) >= Duration::from_secs(2));
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        slack.count(),
        2,
        "one leading edge and one digest per window, whatever process sends them"
    );
    assert!(slack_text(&slack.requests()[1]).contains("20 errors in"));
    for k in &mut fleet {
        assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    }
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
    // the leading edge is not a digest: it goes out at once, before any claim
    leading_edge(&env, &slack, &project, &title, "lead", 0).await;
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
    assert_eq!(slack.count(), 1, "no digest was published before the crash");
    crashing.kill();

    // a healthy worker recovers the claimed window (after its lease) and publishes it, once
    let mut healthy = env.spawn("worker", &[]);
    let got = slack.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "log:\n{}", healthy.logs());
    let text = slack_text(&got[1]);
    for i in 0..5 {
        assert!(
            text.contains(&format!("{title} (k-{i})")),
            "group k-{i} missing from {text}"
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 2);
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

    // each channel: the leading edge (c-0) at once, then one digest of the other two groups
    let got = hooks.wait_for_count(4, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 4, "slack + webhook, twice; log:\n{}", k.logs());
    let tg = telegram.wait_for_count(2, Duration::from_secs(10)).await;
    assert_eq!(tg.len(), 2, "telegram; log:\n{}", k.logs());
    let mail = klaxon_testkit::wait_for(Duration::from_secs(10), || {
        let found = klaxon_testkit::smtp::messages_containing(&env.namespace);
        async move { (found.len() >= 2).then_some(found) }
    })
    .await
    .unwrap_or_default();
    assert_eq!(mail.len(), 2, "email; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;

    let all = hooks.requests();
    assert_eq!(all.len(), 4);
    let webhook = all
        .iter()
        .rfind(|r| r.uri == "/webhook")
        .expect("webhook request")
        .json();
    let events = webhook["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 2, "{webhook}");
    assert!(events
        .iter()
        .all(|e| e["count"] == 1 && e["title"].as_str().unwrap_or("").contains(&title)));
    let slack = all.iter().rfind(|r| r.uri == "/slack").expect("slack request");
    assert!(slack_text(slack).contains("2 errors in"), "{}", slack_text(slack));
    let tg = telegram.requests();
    assert_eq!(tg.len(), 2);
    let tg_text = tg[1].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(tg_text.contains("2 errors in"), "{tg_text}");
    assert_eq!(klaxon_testkit::smtp::messages_containing(&env.namespace).len(), 2);

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
