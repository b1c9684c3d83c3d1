//! The delivery pipeline end to end: the real `klaxon` binary (`sender`, `run`, `dead`, `deliveries`,
//! `test-notify`) against real RabbitMQ, Redis, the MongoDB-wire server and the SMTP sink, with local HTTP
//! servers playing Slack, Telegram and webhook receivers.
//!
//! Most tests publish notification tasks straight to `<ns>.notify.<channel>` (what a worker would publish), so
//! that they control ids and endpoints; one goes the whole way from events.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, object_id, Env};
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use klaxon_core::{ChannelKind, NotificationEvent, NotificationTask, Reason};
use klaxon_testkit::{HttpSink, Reply};
use serde_json::{json, Value};

/// After the expected deliveries, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

fn task(env: &Env, channel: ChannelKind, endpoint: &str, n: usize) -> NotificationTask {
    NotificationTask {
        notification_id: format!("{}-n{n}", env.namespace),
        project_id: "5e3eef0679fa3700a0198a49".into(),
        project_name: None,
        rule_id: "rule-1".into(),
        channel,
        endpoint: endpoint.to_owned(),
        min_period_s: 0,
        fired_at_ms: 1_700_000_000_000,
        reason: Reason::New,
        events: vec![NotificationEvent {
            group_hash: format!("g{n}"),
            title: format!("TypeError {n} ({})", env.namespace),
            count: 1,
            repetition_id: None,
            open_for_ms: None,
            silence_period_ms: None,
            alert_id: None,
        }],
        text: None,
        send_at_ms: None,
        alert: None,
        severity: None,
    }
}

fn topology(env: &Env) -> Topology {
    Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    )
}

/// Publishes tasks to their channel queues, as a worker would.
async fn publish(env: &Env, tasks: &[NotificationTask]) {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(5))
        .await
        .expect("amqp");
    let publisher = broker.publisher().await.expect("publisher");
    let topo = topology(env);
    publisher.declare(&topo).await.expect("declare");
    let msgs: Vec<Outgoing> = tasks
        .iter()
        .map(|t| {
            let mut m = Outgoing::json(topo.notify_queue(t.channel), serde_json::to_vec(t).expect("json"));
            m.message_id = Some(t.notification_id.clone());
            m
        })
        .collect();
    publisher.publish_all(&msgs).await.expect("publish");
    publisher.close().await;
    broker.close().await;
}

/// The log without ANSI colour codes.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn dead_list(env: &Env) -> Vec<Value> {
    json_lines(&env.ok(&["dead", "list", "--json"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_retry_then_deliver_once_with_one_notification_id() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.script([Reply::status(500), Reply::status(500)]);
    let project = object_id();
    let rules = json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
            "channels": {"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}}
        }]
    }]);
    env.import(&rules);
    let mut k = env.spawn("run", &[]);
    let title = format!("Flaky receiver ({})", env.namespace);
    env.publish(&project, &title, "g1").new_first().ok();

    // 500 → ~1 s → 500 → ~5 s → 200
    let got = hook.wait_for_count(3, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 3, "three attempts expected; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;
    let got = hook.requests();
    assert_eq!(got.len(), 3, "no attempt after the successful one");
    let ids: Vec<String> = got
        .iter()
        .map(|r| r.json()["notificationId"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!ids[0].is_empty());
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one notificationId on every retry: {ids:?}"
    );
    let gap = got[1].at.duration_since(got[0].at);
    assert!(
        gap >= Duration::from_millis(900),
        "retries wait in the delay engine ({gap:?})"
    );
    assert_eq!(
        k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"retried\"}"),
        2.0
    );
    assert_eq!(
        k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"sent\"}"),
        1.0
    );

    // The trail: sent after 3 attempts, the earlier attempts recorded as retrying.
    let sent = eventually(Duration::from_secs(10), || {
        let rows = json_lines(&env.ok(&["deliveries", "list", "--project", &project, "--json"]));
        rows.into_iter().find(|r| r["status"] == "sent")
    })
    .await
    .expect("trail shows the delivery as sent");
    assert_eq!(sent["notificationId"], ids[0].as_str());
    assert_eq!(sent["attempts"], 3);
    assert_eq!(sent["channel"], "webhook");
    // redacted: scheme and host, and a fingerprint of the whole endpoint (the path may be a secret)
    let destination = sent["destination"].as_str().unwrap_or_default();
    let fingerprint = destination
        .strip_prefix("http://127.0.0.1/…#")
        .unwrap_or_default();
    assert!(
        fingerprint.len() == 6
            && fingerprint.chars().all(|c| c.is_ascii_hexdigit())
            && !destination.contains("hook"),
        "destination is redacted: {destination}"
    );
    assert_eq!(
        destination,
        klaxon_channels::redact_endpoint(klaxon_core::ChannelKind::Webhook, &hook.url("/hook"))
    );
    let retrying = env.ok(&[
        "deliveries",
        "list",
        "--project",
        &project,
        "--status",
        "retrying",
        "--json",
    ]);
    assert!(
        json_lines(&retrying).is_empty(),
        "the latest state wins: {retrying}"
    );
    let table = env.ok(&["deliveries", "list", "--project", &project]);
    assert!(table.contains(&ids[0]) && table.contains("sent"), "{table}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_is_dead_at_once_and_can_be_replayed() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.script([Reply::status(404)]);
    let mut k = env.spawn("sender", &[]);
    let t = task(&env, ChannelKind::Webhook, &hook.url("/gone"), 1);
    publish(&env, std::slice::from_ref(&t)).await;

    let dead = eventually(Duration::from_secs(15), || {
        let rows = dead_list(&env);
        (!rows.is_empty()).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("dead-lettered; log:\n{}", k.logs()));
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["notificationId"], t.notification_id.as_str());
    assert_eq!(dead[0]["attempts"], 1, "a permanent failure is not retried");
    assert!(
        dead[0]["reason"].as_str().unwrap_or_default().contains("404"),
        "{:?}",
        dead[0]
    );
    assert_eq!(hook.count(), 1);
    // listing leaves it in place
    assert_eq!(dead_list(&env).len(), 1);

    let out = env.ok(&["dead", "replay", "--id", &t.notification_id]);
    assert!(out.contains("1 replayed"), "{out}");
    let got = hook.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "replayed and delivered; log:\n{}", k.logs());
    assert_eq!(got[1].json()["notificationId"], t.notification_id.as_str());
    assert!(
        dead_list(&env).is_empty(),
        "replayed messages leave the dead-letter queue"
    );
    let (code, out, _) = env.run(&["dead", "replay", "--all"]);
    assert_eq!(code, 1, "nothing left to replay: {out}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_transient_failures_go_dead_with_reason_and_attempts() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.set_default(Reply::status(503));
    // default --max-attempts 8; a 1 s schedule keeps the test short
    // (and a breaker that cannot open, so that every attempt reaches the host)
    let mut k = env.spawn(
        "sender",
        &["--retry-schedule", "1", "--breaker-min-requests", "1000"],
    );
    let t = task(&env, ChannelKind::Webhook, &hook.url("/down"), 1);
    publish(&env, std::slice::from_ref(&t)).await;

    let dead = eventually(Duration::from_secs(40), || {
        let rows = dead_list(&env);
        (!rows.is_empty()).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("dead-lettered; log:\n{}", k.logs()));
    assert_eq!(dead[0]["attempts"], 8);
    let reason = dead[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("gave up after 8 attempts") && reason.contains("503"),
        "{reason}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(hook.count(), 8, "exactly 8 attempts");
    let trail = eventually(Duration::from_secs(10), || {
        let rows = json_lines(&env.ok(&["deliveries", "list", "--status", "dead", "--json"]));
        rows.into_iter()
            .find(|r| r["notificationId"] == t.notification_id.as_str())
    })
    .await
    .expect("trail shows dead");
    assert_eq!(trail["attempts"], 8);

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_retry_never_waits_behind_a_long_one() {
    let env = Env::new();
    let slow = HttpSink::start().await.expect("sink");
    slow.set_default(Reply::status(429).header("Retry-After", "3600"));
    let fast = HttpSink::start().await.expect("sink");
    fast.script([Reply::status(500)]);
    let mut k = env.spawn("sender", &[]);

    let long = task(&env, ChannelKind::Webhook, &slow.url("/slow"), 1);
    publish(&env, &[long]).await;
    let got = slow.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    // The 1 h retry is now queued in the delay engine; a 1 s retry published after it must not wait for it.
    let short = task(&env, ChannelKind::Webhook, &fast.url("/fast"), 2);
    let started = Instant::now();
    publish(&env, &[short]).await;
    let got = fast.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "the short retry arrived; log:\n{}", k.logs());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(slow.count(), 1, "the long retry is still waiting");
    assert!(
        plain(&k.logs()).contains("retry_in_ms=3600000"),
        "Retry-After honoured"
    );

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_task_sends_no_second_message() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.set_default(Reply::status(200).delayed(Duration::from_millis(300)));
    let mut k = env.spawn("sender", &[]);
    let t = task(&env, ChannelKind::Webhook, &hook.url("/once"), 1);
    // Two copies at once (both in flight together: the second finds the first's lease) ...
    publish(&env, &[t.clone(), t.clone()]).await;
    let got = hook.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    // ... and one redelivered after the delivery was recorded as sent.
    k.wait_metric(
        "klaxon_deliveries_total{channel=\"webhook\",outcome=\"sent\"}",
        1.0,
        Duration::from_secs(15),
    );
    publish(&env, &[t]).await;
    let dups = eventually(Duration::from_secs(15), || {
        let n = k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"duplicate\"}");
        (n >= 2.0).then_some(n)
    })
    .await;
    assert_eq!(dups, Some(2.0), "both copies recognised; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 1, "one message for one notificationId");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_rate_limit_holds_across_two_sender_processes() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    // default: 1 message per second per Slack webhook, shared through Redis
    let mut a = env.spawn("sender", &[]);
    let mut b = env.spawn("sender", &[]);
    let endpoint = slack.url("/services/T/B/X");
    let tasks: Vec<NotificationTask> = (0..5)
        .map(|n| task(&env, ChannelKind::Slack, &endpoint, n))
        .collect();
    publish(&env, &tasks).await;

    let got = slack.wait_for_count(5, Duration::from_secs(40)).await;
    assert_eq!(got.len(), 5, "never dropped; logs:\n{}\n{}", a.logs(), b.logs());
    let mut at: Vec<Instant> = got.iter().map(|r| r.at).collect();
    at.sort();
    // The limiter hands out send slots 1 s apart; what the sink sees is the slot plus each request's own
    // latency, which a loaded machine stretches for one request and not the next. So: the five posts span at
    // least four slots (minus scheduling noise), and no two arrive together (without the shared limit all
    // five arrive within a few milliseconds).
    let span = at[4].duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(3_800),
        "five Slack posts within {span:?}"
    );
    for w in at.windows(2) {
        let gap = w[1].duration_since(w[0]);
        assert!(gap >= Duration::from_millis(400), "two Slack posts {gap:?} apart");
    }
    for (name, k) in [("a", &a), ("b", &b)] {
        let logs = k.logs();
        assert!(
            logs.contains("delivered") || logs.contains("delivery parked"),
            "sender {name} took part:\n{logs}"
        );
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!(slack.count(), 5);

    assert_eq!(a.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(b.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_parks_tasks_and_recovers() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    hook.set_default(Reply::status(500));
    let mut k = env.spawn(
        "sender",
        &[
            "--breaker-min-requests",
            "3",
            "--breaker-open",
            "3",
            "--retry-schedule",
            "1",
            "--max-attempts",
            "30",
        ],
    );
    let tasks: Vec<NotificationTask> = (0..4)
        .map(|n| task(&env, ChannelKind::Webhook, &hook.url(&format!("/h{n}")), n))
        .collect();
    publish(&env, &tasks).await;

    // The host's breaker: an endpoint's may open first (a project holds at most half of the host's slots, so
    // two of the four tasks go first and the others follow), and the other endpoints' tasks then still go.
    let opened = eventually(Duration::from_secs(20), || {
        let host_open = k.logs().lines().any(|l| {
            l.contains("circuit breaker opened")
                && ["scope=host", "scope=\"host\"", "\"scope\":\"host\""]
                    .iter()
                    .any(|s| l.contains(s))
        });
        (host_open && k.metric("klaxon_breaker_transitions_total{state=\"open\"}") >= 1.0).then_some(())
    })
    .await;
    assert!(opened.is_some(), "the host's breaker opened; log:\n{}", k.logs());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = hook.count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        hook.count(),
        before,
        "no request reaches the host while the breaker is open"
    );
    // The failed tasks come back from the delay engine (1 s retry) and meet the open breaker: parked. On a
    // loaded machine the hop can take longer than the quiet period above, so wait for the outcome.
    let parked = eventually(Duration::from_secs(15), || {
        (k.metric("klaxon_deliveries_parked_total{channel=\"webhook\"}") >= 1.0).then_some(())
    })
    .await;
    assert!(parked.is_some(), "tasks parked; log:\n{}", k.logs());

    hook.set_default(Reply::status(200));
    let sent = eventually(Duration::from_secs(30), || {
        (k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"sent\"}") >= 4.0).then_some(())
    })
    .await;
    assert!(sent.is_some(), "all delivered after recovery; log:\n{}", k.logs());
    assert!(k.metric("klaxon_breaker_transitions_total{state=\"closed\"}") >= 1.0);
    assert!(k.logs().contains("circuit breaker closed"));

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_endpoints_are_refused_by_default_and_test_notify_works() {
    let env = Env::new().set("KLAXON_ALLOW_PRIVATE_ENDPOINTS", "false");
    let hook = HttpSink::start().await.expect("sink");
    let mut k = env.spawn("sender", &[]);
    let t = task(&env, ChannelKind::Webhook, &hook.url("/private"), 1);
    publish(&env, std::slice::from_ref(&t)).await;
    let dead = eventually(Duration::from_secs(15), || {
        let rows = dead_list(&env);
        (!rows.is_empty()).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("refused → dead; log:\n{}", k.logs()));
    assert_eq!(dead[0]["attempts"], 1);
    assert!(
        dead[0]["reason"].as_str().unwrap_or_default().contains("refused"),
        "{:?}",
        dead[0]
    );
    assert_eq!(hook.count(), 0, "not a byte sent to a private address");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));

    // test-notify: refused too by default, sent when allowed
    let (code, out, err) = env.run(&[
        "test-notify",
        "--channel",
        "webhook",
        "--endpoint",
        &hook.url("/t"),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("refused") && out.is_empty(),
        "failures go to stderr: {out}{err}"
    );
    let out = env.ok(&[
        "test-notify",
        "--channel",
        "slack",
        "--endpoint",
        &hook.url("/t"),
        "--allow-private-endpoints",
    ]);
    assert!(out.starts_with("sent"), "{out}");
    let got = hook.wait_for_count(1, Duration::from_secs(5)).await;
    assert!(
        got[0].text().contains("Klaxon test notification"),
        "{}",
        got[0].text()
    );
    // email goes to the real SMTP sink
    let to = format!("{}@example.com", env.namespace);
    let out = env.ok(&["test-notify", "--channel", "email", "--endpoint", &to]);
    assert!(out.starts_with("sent"), "{out}");
    let mails = eventually(Duration::from_secs(10), || {
        let m = klaxon_testkit::smtp::messages_containing(&to);
        (!m.is_empty()).then_some(m)
    })
    .await
    .expect("test email in the SMTP sink");
    assert!(mails[0].contains("Klaxon test notification"));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_logs_metrics_or_the_dead_letter_listing() {
    const TOKEN: &str = "123456:TOKENSECRETxyz";
    let secrets = [
        "TOKENSECRETxyz",
        "HMACSECRETxyz",
        "LEGACYSECRETxyz",
        "PASSWORDSECRETxyz",
        "SLACKPATHSECRET",
        "HOOKSECRET",
        "9876543210",
    ];
    let tg = HttpSink::start().await.expect("sink");
    tg.set_default(Reply::status(400).body(r#"{"ok":false,"description":"Bad Request: chat not found"}"#));
    let env = Env::new()
        .set(
            "KLAXON_LOG",
            "debug,lapin=warn,hyper=warn,hyper_util=warn,reqwest=warn,h2=warn,rustls=warn",
        )
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TOKEN)
        .set(
            "KLAXON_WEBHOOK_SECRET",
            "HMACSECRETxyz-0123456789abcdef0123456789",
        )
        .set("KLAXON_WEBHOOK_LEGACY_SECRET", "LEGACYSECRETxyz")
        .set("KLAXON_TELEGRAM_API", &tg.url(""))
        .set("KLAXON_SMTP_URL", "smtp://user:PASSWORDSECRETxyz@127.0.0.1:2525");
    let hook = HttpSink::start().await.expect("sink");
    hook.script([Reply::status(500)]);
    let slack = HttpSink::start().await.expect("sink");
    let mut k = env.spawn("sender", &["--retry-schedule", "1"]);
    let tasks = vec![
        task(&env, ChannelKind::Telegram, "-1009876543210", 1),
        task(
            &env,
            ChannelKind::Slack,
            &slack.url("/services/T/B/SLACKPATHSECRET"),
            2,
        ),
        task(&env, ChannelKind::Webhook, &hook.url("/h?token=HOOKSECRET"), 3),
        task(
            &env,
            ChannelKind::Email,
            &format!("{}@example.com", env.namespace),
            4,
        ),
    ];
    publish(&env, &tasks).await;
    let done = eventually(Duration::from_secs(30), || {
        let logs = k.logs();
        tasks
            .iter()
            .all(|t| {
                logs.lines().any(|l| {
                    l.contains(&t.notification_id) && (l.contains("delivered") || l.contains("dead-lettered"))
                })
            })
            .then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "every task reached an outcome; log:\n{}",
        k.logs()
    );
    assert_eq!(tg.count(), 1, "log:\n{}", k.logs());
    assert!(
        tg.requests()[0].uri.contains("TOKENSECRETxyz"),
        "the token is used where it must be"
    );
    assert_eq!(hook.count(), 2, "the webhook was retried once");
    assert!(
        hook.requests()[0].header("x-klaxon-signature").is_some(),
        "KLAXON_WEBHOOK_LEGACY_SECRET is set: the deprecated header is sent"
    );
    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    let dead = env.ok(&["dead", "list"]);
    let logs = k.logs();
    for s in secrets {
        assert!(!logs.contains(s), "secret {s} in the log:\n{logs}");
        assert!(!metrics.contains(s), "secret {s} in the metrics");
        assert!(!dead.contains(s), "secret {s} in `dead list`:\n{dead}");
    }
    common::delete_queues(&env).await;
}

/// A webhook endpoint with a 60,000-character hostname fails (it cannot resolve); its reason goes into logs, the
/// trail and the retry or dead-letter header bounded, so the header frame stays small, the broker keeps the
/// sender's connection, and the next task is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_hostname_fails_alone_and_the_sender_keeps_delivering() {
    let env = Env::new();
    let hook = HttpSink::start().await.expect("sink");
    let k = env.spawn("sender", &[]);
    let huge = format!("http://{}.example/hook", "a".repeat(60_000));
    let bad = task(&env, ChannelKind::Webhook, &huge, 1);
    let good = task(&env, ChannelKind::Webhook, &hook.url("/after"), 2);
    publish(&env, &[bad]).await;
    let failed = eventually(Duration::from_secs(20), || {
        let n = k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"dead\"}")
            + k.metric("klaxon_deliveries_total{channel=\"webhook\",outcome=\"retried\"}");
        (n >= 1.0).then_some(n)
    })
    .await;
    assert!(
        failed.is_some(),
        "the bad task failed on its own; log:\n{}",
        k.logs()
    );
    publish(&env, &[good]).await;
    let got = hook.wait_for_count(1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "the next task is delivered; log:\n{}", k.logs());
    assert_eq!(
        k.get("/readyz").map(|r| r.0),
        Some(200),
        "the sender is still consuming"
    );
    let longest = k.logs().lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4_000, "log lines stay bounded: {longest} bytes");
    common::delete_queues(&env).await;
}

/// Issue #22: a message to many recipients used to carry its whole `To:` list on one line (RFC 5322 allows 998
/// octets); the SMTP server answered `500 Line too long` and the notification was dead-lettered. Through the
/// binary, 50 recipients (the per-channel cap at write time) with long addresses: one line would be ~1,700 octets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_to_many_recipients_is_delivered_with_a_folded_to_header() {
    let env = Env::new();
    let recipients: Vec<String> = (0..50)
        .map(|i| format!("recipient-{i:02}-{}@example.com", env.namespace))
        .collect();
    let out = env.ok(&[
        "test-notify",
        "--channel",
        "email",
        "--endpoint",
        &recipients.join(","),
    ]);
    assert!(out.starts_with("sent"), "{out}");
    let mail = eventually(Duration::from_secs(10), || {
        klaxon_testkit::smtp::messages_containing(&recipients[49])
            .into_iter()
            .next()
    })
    .await
    .expect("the message in the SMTP sink");
    let headers = mail.split("\r\n\r\n").next().unwrap_or_default();
    // the sink's own X-Envelope-To line lists RCPT TO: every recipient got the message
    let envelope = headers
        .lines()
        .find_map(|l| l.strip_prefix("X-Envelope-To: "))
        .expect("envelope");
    for r in &recipients {
        assert!(envelope.contains(r.as_str()), "{r} not in RCPT TO");
    }
    for line in headers.split("\r\n").filter(|l| !l.starts_with("X-Envelope-")) {
        assert!(line.len() <= 78, "{} octets: {line}", line.len());
    }
}
