//! Digests (`minPeriod`) end to end: the real `klaxon` binary, RabbitMQ's delay engine, Redis buffers, and local
//! sinks playing Slack, Telegram, a webhook receiver and an SMTP server.
//!
//! Leading edge: the first firing on a quiet (rule, channel) is sent at once and alone; what fires in the next
//! `minPeriod` seconds arrives as one digest `minPeriod` after that first message.

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
    env.publish(project, title, group).count(n).groups(n).ok();
}

fn slack_text(r: &klaxon_testkit::http_sink::Request) -> String {
    r.json()["text"].as_str().unwrap_or_default().to_owned()
}

/// Which of the groups `<group>-0..n` a message's text names.
fn groups_in(text: &str, title: &str, group: &str, n: usize) -> Vec<usize> {
    (0..n)
        .filter(|i| text.contains(&format!("{title} ({group}-{i})")))
        .collect()
}

/// The leading message names exactly one group, the digest every other one: together all `n`, none twice.
fn assert_split(lead: &str, digest: &str, title: &str, group: &str, n: usize) {
    let first = groups_in(lead, title, group, n);
    let rest = groups_in(digest, title, group, n);
    assert_eq!(first.len(), 1, "the first message is one firing, alone: {lead}");
    assert_eq!(
        rest.len(),
        n - 1,
        "the digest holds the other {}: {digest}",
        n - 1
    );
    assert!(!rest.contains(&first[0]), "no group twice: {lead} / {digest}");
    assert!(
        digest.contains(&format!("{} errors in", n - 1)),
        "a digest of {}: {digest}",
        n - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_firing_goes_at_once_and_the_rest_of_the_window_as_one_digest() {
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
    let published = Instant::now();
    let got = slack.wait_for_count(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "the first firing at once; log:\n{}", k.logs());
    let first_after = got[0].at.saturating_duration_since(published);
    assert!(
        first_after < Duration::from_secs(1),
        "the first message within a second: {first_after:?}"
    );
    // alone: nothing else before minPeriod has passed since it
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(slack.count(), 1, "the first message comes alone");

    let got = slack.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "one digest expected; log:\n{}", k.logs());
    let gap = got[1].at.duration_since(got[0].at);
    assert!(
        gap >= Duration::from_millis(1800),
        "the digest not before minPeriod after the first message: {gap:?}"
    );
    let after = got[1].at.duration_since(t0);
    assert!(
        after < Duration::from_secs(5),
        "soon after minPeriod: {after:?}; log:\n{}",
        k.logs()
    );
    assert_split(&slack_text(&got[0]), &slack_text(&got[1]), &title, "a", 5);
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 2, "one message at once, one digest for the rest");

    // more than minPeriod after the digest the channel is quiet again: the next burst starts with a message at
    // once, and its other groups follow as one digest that names only them
    let published = Instant::now();
    burst(&env, &project, &title, "b", 3);
    let got = slack.wait_for_count(3, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3, "log:\n{}", k.logs());
    assert!(got[2].at.saturating_duration_since(published) < Duration::from_secs(1));
    let got = slack.wait_for_count(4, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 4, "second digest expected; log:\n{}", k.logs());
    assert!(got[3].at.duration_since(got[2].at) >= Duration::from_millis(1800));
    assert_split(&slack_text(&got[2]), &slack_text(&got[3]), &title, "b", 3);
    assert!(groups_in(&slack_text(&got[3]), &title, "a", 5).is_empty());
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
async fn a_fleet_of_three_processes_sends_one_first_message_and_one_digest() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"slack": {"isEnabled": true, "endpoint": slack.url("/hook"), "minPeriod": 2}}),
    ));
    let mut fleet: Vec<_> = (0..3).map(|_| env.spawn("run", &[])).collect();
    let title = format!("Timeout ({})", env.namespace);
    burst(&env, &project, &title, "g", 20);
    let got = slack.wait_for_count(2, Duration::from_secs(15)).await;
    let logs = || fleet.iter().map(|k| k.logs()).collect::<Vec<_>>().join("\n---\n");
    assert_eq!(got.len(), 2, "logs:\n{}", logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        slack.count(),
        2,
        "one first message and one digest, whatever process handles them"
    );
    assert_split(&slack_text(&got[0]), &slack_text(&got[1]), &title, "g", 20);
    for k in &mut fleet {
        assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    }
    common::delete_queues(&env).await;
}

// Needs the binary's test-only fault injection (`scripts/test` builds the tests with it).
#[cfg(feature = "fault-injection")]
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

    // the first firing is published at once; the worker then claims the window and aborts before publishing it
    common::wait_for_abort(
        &crashing,
        Duration::from_secs(15),
        "aborting between claim and publish",
    )
    .await;
    let lead = slack.wait_for_count(1, Duration::from_secs(10)).await;
    assert_eq!(lead.len(), 1, "the first message went out before the crash");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(slack.count(), 1, "the digest was not published before the crash");
    crashing.kill();

    // a healthy worker recovers the claimed window (after its lease) and publishes it, once
    let mut healthy = env.spawn("worker", &[]);
    let got = slack.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "log:\n{}", healthy.logs());
    assert_split(&slack_text(&got[0]), &slack_text(&got[1]), &title, "k", 5);
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

    // on every channel: the first firing at once, the other two as one digest
    let got = hooks.wait_for_count(4, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 4, "slack + webhook, twice each; log:\n{}", k.logs());
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
    let webhooks: Vec<_> = all
        .iter()
        .filter(|r| r.uri == "/webhook")
        .map(|r| r.json())
        .collect();
    assert_eq!(webhooks.len(), 2);
    let sizes: Vec<usize> = webhooks
        .iter()
        .map(|w| w["events"].as_array().map(Vec::len).unwrap_or(0))
        .collect();
    assert_eq!(
        sizes,
        vec![1, 2],
        "one event at once, then a digest of two: {webhooks:?}"
    );
    assert!(webhooks
        .iter()
        .flat_map(|w| w["events"].as_array().cloned().unwrap_or_default())
        .all(|e| e["count"] == 1 && e["title"].as_str().unwrap_or("").contains(&title)));
    let slacks: Vec<String> = all.iter().filter(|r| r.uri == "/slack").map(slack_text).collect();
    assert_split(&slacks[0], &slacks[1], &title, "c", 3);
    let tg = telegram.requests();
    assert_eq!(tg.len(), 2);
    let tg_text = tg[1].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(tg_text.contains("2 errors in"), "{tg_text}");
    assert_eq!(klaxon_testkit::smtp::messages_containing(&env.namespace).len(), 2);

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
