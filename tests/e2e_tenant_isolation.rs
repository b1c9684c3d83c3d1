//! Tenant isolation on shared SaaS hosts, end to end (issue #30 item 1): the real `klaxon sender` delivers to
//! local servers playing PagerDuty's Events API, Discord and a webhook receiver, where one tenant's endpoint is
//! throttled (429 with `Retry-After`), failing (500) or slow, while another tenant's endpoint on the same host is
//! fine. The other tenant's message must arrive within a few seconds (the contract's "Tenant safety"): breakers,
//! throttles and bulkheads are per endpoint, and a host breaker opens only across many endpoints.
//!
//! Tasks are published straight to `<ns>.notify.<channel>` (what a worker would publish), the throttled tenant's
//! many tasks first, so that the other tenant's task queues behind them.

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use klaxon_core::{ChannelKind, NotificationEvent, NotificationTask, Reason};
use klaxon_testkit::{HttpSink, Reply};

/// How long the other tenant's message may take: the contract's "a few seconds".
const FEW_SECONDS: Duration = Duration::from_secs(5);
/// Bound on waiting for the throttled tenant's first requests.
const WAIT: Duration = Duration::from_secs(30);
const KEY_A: &str = "TenantAroutingKey0123456789abcde";
const KEY_B: &str = "TenantBroutingKey0123456789abcde";

fn task(project: &str, channel: ChannelKind, endpoint: &str, id: String, n: usize) -> NotificationTask {
    NotificationTask {
        notification_id: id,
        project_id: project.to_owned(),
        project_name: None,
        rule_id: "rule-1".into(),
        channel,
        endpoint: endpoint.to_owned(),
        min_period_s: 0,
        fired_at_ms: 1_700_000_000_000,
        reason: Reason::New,
        events: vec![NotificationEvent {
            group_hash: format!("g{n}"),
            title: format!("TypeError {n}"),
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

/// `count` tasks of one tenant (`project`, `endpoint`), ids prefixed with `tag`.
fn tenant(
    env: &Env,
    tag: &str,
    project: &str,
    channel: ChannelKind,
    endpoint: &str,
    count: usize,
) -> Vec<NotificationTask> {
    (0..count)
        .map(|n| {
            task(
                project,
                channel,
                endpoint,
                format!("{}-{tag}{n}", env.namespace),
                n,
            )
        })
        .collect()
}

/// Publishes tasks to their channel queues, in order, as a worker would.
async fn publish(env: &Env, tasks: &[NotificationTask]) {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(5))
        .await
        .expect("amqp");
    let publisher = broker.publisher().await.expect("publisher");
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    );
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

/// Requests the sink got that `matches` picks.
fn count(sink: &HttpSink, matches: impl Fn(&klaxon_testkit::Request) -> bool) -> usize {
    sink.requests().iter().filter(|r| matches(r)).count()
}

/// Waits (bounded by `within`) until `matches` picks at least `n` requests; true if it did.
async fn wait_for(
    sink: &HttpSink,
    n: usize,
    within: Duration,
    matches: impl Fn(&klaxon_testkit::Request) -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if count(sink, &matches) >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    count(sink, &matches) >= n
}

fn routing_key(r: &klaxon_testkit::Request) -> String {
    r.json()["routing_key"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_pagerduty_routing_key_does_not_hold_another_tenants_page() {
    let sink = HttpSink::start().await.expect("sink");
    // PagerDuty's API throttles tenant A's routing key only, for 30 s; everyone else is accepted
    sink.route(
        |r| r.json()["routing_key"] == KEY_A,
        Reply::status(429).header("Retry-After", "30").body(
            r#"{"status":"throttle event","message":"Requests for this service are arriving too quickly."}"#,
        ),
    );
    sink.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &sink.url(""));
    let mut k = env.spawn("sender", &[]);

    let (project_a, project_b) = (object_id(), object_id());
    // 40 by default; KLAXON_TEST_TENANT_A_TASKS=3000 measures how long thousands of A's tasks queued ahead of
    // B's (and parked, since A is throttled) hold B's page up
    let a_tasks: usize = std::env::var("KLAXON_TEST_TENANT_A_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(40);
    publish(
        &env,
        &tenant(&env, "a", &project_a, ChannelKind::Pagerduty, KEY_A, a_tasks),
    )
    .await;
    let is_a = |r: &klaxon_testkit::Request| routing_key(r) == KEY_A;
    assert!(
        wait_for(&sink, 1, WAIT, is_a).await,
        "tenant A's first page; log:\n{}",
        k.logs()
    );
    if a_tasks <= 100 {
        // A's 429s have been answered and A's tasks are parked and coming back
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let sent = Instant::now();
    publish(
        &env,
        &tenant(&env, "b", &project_b, ChannelKind::Pagerduty, KEY_B, 1),
    )
    .await;
    let is_b = |r: &klaxon_testkit::Request| routing_key(r) == KEY_B;
    let arrived = wait_for(&sink, 1, FEW_SECONDS, is_b).await;
    eprintln!(
        "{a_tasks} tasks of A: B's page arrived: {arrived}, {:?} after it was queued",
        sent.elapsed()
    );
    assert!(
        arrived,
        "tenant B's page not delivered within {FEW_SECONDS:?} of being queued behind tenant A's throttled \
         ones ({} requests for A so far); log:\n{}",
        count(&sink, is_a),
        k.logs()
    );
    let b = sink
        .requests()
        .into_iter()
        .find(|r| is_b(r))
        .expect("B's request");
    assert_eq!(b.json()["payload"]["source"], project_b.as_str());
    // A's Retry-After holds A's tasks back: a couple of requests in flight when the first 429 came, no more
    assert!(
        count(&sink, is_a) <= 4,
        "A's Retry-After was not honoured: {} requests",
        count(&sink, is_a)
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    assert!(
        !k.logs().contains(KEY_A) && !k.logs().contains(KEY_B),
        "a routing key reached the logs"
    );
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_and_failing_discord_webhooks_do_not_hold_another_webhook_on_the_host() {
    let sink = HttpSink::start().await.expect("sink");
    // one stub host, three webhooks: A is rate limited for 30 s, C answers 500, B is fine
    sink.route(
        |r| r.uri.starts_with("/api/webhooks/1/"),
        Reply::status(429)
            .header("Retry-After", "30")
            .body(r#"{"message": "You are being rate limited.", "retry_after": 30.0, "global": false}"#),
    );
    sink.route(|r| r.uri.starts_with("/api/webhooks/3/"), Reply::status(500));
    sink.set_default(Reply::status(204));
    let env = Env::new();
    let mut k = env.spawn("sender", &["--retry-schedule", "1"]);

    let (hook_a, hook_b, hook_c) = (
        sink.url("/api/webhooks/1/tenant-a-token"),
        sink.url("/api/webhooks/2/tenant-b-token"),
        sink.url("/api/webhooks/3/tenant-c-token"),
    );
    let (project_a, project_b, project_c) = (object_id(), object_id(), object_id());
    let mut first = tenant(&env, "a", &project_a, ChannelKind::Discord, &hook_a, 20);
    first.extend(tenant(&env, "c", &project_c, ChannelKind::Discord, &hook_c, 20));
    publish(&env, &first).await;
    let is_a = |r: &klaxon_testkit::Request| r.uri.starts_with("/api/webhooks/1/");
    let is_c = |r: &klaxon_testkit::Request| r.uri.starts_with("/api/webhooks/3/");
    // C fails often enough to open a breaker (its own: 5 outcomes, half of them failures)
    assert!(
        wait_for(&sink, 5, WAIT, is_c).await && count(&sink, is_a) >= 1,
        "A's and C's first messages; log:\n{}",
        k.logs()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    publish(
        &env,
        &tenant(&env, "b", &project_b, ChannelKind::Discord, &hook_b, 1),
    )
    .await;
    let is_b = |r: &klaxon_testkit::Request| r.uri.starts_with("/api/webhooks/2/");
    let arrived = wait_for(&sink, 1, FEW_SECONDS, is_b).await;
    assert!(
        arrived,
        "webhook B's message not delivered within {FEW_SECONDS:?} while A is throttled ({} requests) and C \
         fails ({} requests); log:\n{}",
        count(&sink, is_a),
        count(&sink, is_c),
        k.logs()
    );
    assert!(
        count(&sink, is_a) <= 4,
        "A's retry_after was not honoured: {}",
        count(&sink, is_a)
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    let logs = k.logs();
    assert!(
        !logs.contains("tenant-a-token") && !logs.contains("tenant-c-token"),
        "an endpoint reached the logs"
    );
    common::delete_queues(&env).await;
}

/// One host with slow receivers under `/slow` (8 s, under the 10 s request timeout) and fast ones elsewhere.
async fn slow_and_fast_sink() -> HttpSink {
    let sink = HttpSink::start().await.expect("sink");
    sink.route(
        |r| r.uri.starts_with("/slow"),
        Reply::status(200).delayed(Duration::from_secs(8)),
    );
    sink.set_default(Reply::status(200));
    sink
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_webhook_does_not_fill_its_hosts_bulkhead() {
    // A's receiver takes 8 s to answer; B on the same host answers at once
    let sink = slow_and_fast_sink().await;
    let env = Env::new();
    let mut k = env.spawn("sender", &[]);

    let (project_a, project_b) = (object_id(), object_id());
    publish(
        &env,
        &tenant(
            &env,
            "a",
            &project_a,
            ChannelKind::Webhook,
            &sink.url("/slow"),
            12,
        ),
    )
    .await;
    let is_a = |r: &klaxon_testkit::Request| r.uri.starts_with("/slow");
    assert!(
        wait_for(&sink, 1, WAIT, is_a).await,
        "A's first request; log:\n{}",
        k.logs()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    publish(
        &env,
        &tenant(&env, "b", &project_b, ChannelKind::Webhook, &sink.url("/fast"), 1),
    )
    .await;
    let is_b = |r: &klaxon_testkit::Request| r.uri.starts_with("/fast");
    let arrived = wait_for(&sink, 1, FEW_SECONDS, is_b).await;
    assert!(
        arrived,
        "B's webhook not delivered within {FEW_SECONDS:?} while A's receiver is slow ({} of A's requests \
         open); log:\n{}",
        count(&sink, is_a),
        k.logs()
    );
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #42: the host bulkhead (4 concurrent deliveries per host, half per endpoint) was shared first come,
/// first served: two slow endpoints of one tenant on one host held all 4 slots, and another tenant's delivery to
/// that host waited for one of them to answer. A project now holds at most half of a host's slots, all its
/// endpoints together, so the other tenant's delivery goes out at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_slow_webhooks_of_one_tenant_do_not_hold_another_tenants_delivery_on_the_host() {
    // A's two receivers take 8 s to answer; B on the same host answers at once
    let sink = slow_and_fast_sink().await;
    let env = Env::new();
    let mut k = env.spawn("sender", &[]);

    let (project_a, project_b) = (object_id(), object_id());
    let mut a_tasks = tenant(
        &env,
        "a1-",
        &project_a,
        ChannelKind::Webhook,
        &sink.url("/slow-1"),
        6,
    );
    a_tasks.extend(tenant(
        &env,
        "a2-",
        &project_a,
        ChannelKind::Webhook,
        &sink.url("/slow-2"),
        6,
    ));
    publish(&env, &a_tasks).await;
    let is_a = |r: &klaxon_testkit::Request| r.uri.starts_with("/slow");
    assert!(
        wait_for(&sink, 2, WAIT, is_a).await,
        "A's first requests; log:\n{}",
        k.logs()
    );
    // both of A's endpoints have had the time to take every slot they may
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let published = Instant::now();
    publish(
        &env,
        &tenant(&env, "b", &project_b, ChannelKind::Webhook, &sink.url("/fast"), 1),
    )
    .await;
    let is_b = |r: &klaxon_testkit::Request| r.uri.starts_with("/fast");
    let arrived = wait_for(&sink, 1, Duration::from_secs(15), is_b).await;
    let took = published.elapsed();
    let a_open = count(&sink, is_a);
    eprintln!(
        "measured: B's webhook {took:?} after it was published, while A's two slow endpoints had {a_open} \
         requests open on the host"
    );
    assert!(arrived, "B's webhook never came; log:\n{}", k.logs());
    assert!(
        took <= Duration::from_secs(2),
        "B's webhook waited {took:?} behind A's slow endpoints on the host; log:\n{}",
        k.logs()
    );
    assert!(
        a_open <= 2,
        "A held {a_open} of the host's slots at once (its share is 2 of 4)"
    );
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_parked_tasks_of_a_throttled_tenant_do_not_hold_another_tenants_page() {
    let sink = HttpSink::start().await.expect("sink");
    // A's routing key is throttled with a short Retry-After, so A's tasks come back every few seconds, meet the
    // throttle again (one probe each time) and are parked again: thousands of them keep passing through the
    // pagerduty sender while B's page arrives
    sink.route(
        |r| r.json()["routing_key"] == KEY_A,
        Reply::status(429).header("Retry-After", "3").body(
            r#"{"status":"throttle event","message":"Requests for this service are arriving too quickly."}"#,
        ),
    );
    sink.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &sink.url(""));
    let mut k = env.spawn("sender", &[]);

    let (project_a, project_b) = (object_id(), object_id());
    const A_TASKS: usize = 2_000;
    publish(
        &env,
        &tenant(&env, "a", &project_a, ChannelKind::Pagerduty, KEY_A, A_TASKS),
    )
    .await;
    // every one of A's tasks was parked once, and they are coming back (parked again)
    let parked = r#"klaxon_deliveries_parked_total{channel="pagerduty"}"#;
    k.wait_metric(parked, (A_TASKS + A_TASKS / 4) as f64, Duration::from_secs(90));

    let before = k.metric(parked);
    let sent = Instant::now();
    publish(
        &env,
        &tenant(&env, "b", &project_b, ChannelKind::Pagerduty, KEY_B, 1),
    )
    .await;
    let is_b = |r: &klaxon_testkit::Request| routing_key(r) == KEY_B;
    let arrived = wait_for(&sink, 1, Duration::from_secs(30), is_b).await;
    let took = sent.elapsed();
    let during = k.metric(parked) - before;
    eprintln!(
        "measured: {A_TASKS} parked tasks of A: B's page arrived: {arrived}, {took:?} after it was queued \
         ({during} of A's tasks parked again meanwhile)"
    );
    assert!(
        arrived && took <= Duration::from_secs(2),
        "tenant B's page took {took:?} (arrived: {arrived}) behind tenant A's {A_TASKS} parked tasks; log:\n{}",
        k.logs()
    );
    assert!(
        during > 0.0,
        "A's tasks were not coming back while B's page waited: the test did not load the sender"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
