//! Discord, Microsoft Teams and PagerDuty end to end: rules stored by `klaxon rules add|import`, events evaluated
//! and delivered by the real `klaxon run` to local servers playing each service, with the sender's retries (a 429's
//! wait honoured, a 5xx retried under the same PagerDuty `dedup_key`) and the routing key kept secret.

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::{HttpSink, Reply};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);
/// A routing key of the Events API v2's shape.
const ROUTING_KEY: &str = "R0utingKeyE2eSecret0123456789abc";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_gets_embeds_that_ping_nobody_and_a_429_is_waited_out() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    // Discord limits the first attempt: the sender waits what the body says, then delivers
    sink.script([Reply::status(429)
        .header("Retry-After", "1")
        .body(r#"{"message": "You are being rate limited.", "retry_after": 1.5, "global": false}"#)]);
    sink.set_default(Reply::status(204));
    let project = object_id();
    let endpoint = sink.url("/api/webhooks/123456789/discord-token");
    env.ok(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--discord",
        &endpoint,
    ]);
    let mut k = env.spawn("run", &[]);
    let title = format!(
        "boom @everyone <@123> **bold** [x](https://evil.example) ({})",
        env.namespace
    );
    env.publish(&project, &title, "g1").new_first().ok();
    let got = sink.wait_for_count(2, WAIT).await;
    assert_eq!(got.len(), 2, "a 429, then the retry; log:\n{}", k.logs());
    let gap = got[1].at.duration_since(got[0].at);
    assert!(
        gap >= Duration::from_millis(1400),
        "retry_after honoured: {gap:?}"
    );
    assert_eq!(got[0].json(), got[1].json(), "the same message");
    let body = got[1].json();
    // the alert's first firing asks for the message (`?wait=true`), so the alert's later messages can edit it
    assert_eq!(got[1].uri, "/api/webhooks/123456789/discord-token?wait=true");
    assert_eq!(body["allowed_mentions"], json!({"parse": []}));
    let embed = &body["embeds"][0];
    let shown = format!("{} {}", embed["title"], embed["description"]);
    for markup in ["@everyone", "<@123>", "**bold**", "](https://"] {
        assert!(!shown.contains(markup), "{markup} in {shown}");
    }
    assert!(embed["title"]
        .as_str()
        .unwrap_or_default()
        .starts_with("New error in project"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sink.count(), 2, "delivered once");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_gets_an_adaptive_card_and_a_local_http_receiver_passes_rules_check() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202));
    let project = object_id();
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000,
            "channels": {"teams": {"isEnabled": true, "endpoint": sink.url("/workflows/abc"), "minPeriod": 0}}
        }]
    }]));
    // plain http to a loopback receiver is no problem (a public http URL is: tests/e2e_newcomer.rs)
    let (code, stdout, stderr) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        !stdout.contains("Teams Workflows webhooks are https"),
        "{stdout}{stderr}"
    );

    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: <at>Bob</at> **x** ({})", env.namespace);
    env.publish(&project, &title, "g1").count(2).ok();
    let got = sink.wait_for_count(1, WAIT).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    assert_eq!(got[0].uri, "/workflows/abc");
    let body = got[0].json();
    assert_eq!(body["type"], "message");
    assert_eq!(
        body["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &body["attachments"][0]["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    let first = &card["body"][0];
    assert_eq!(first["type"], "RichTextBlock");
    assert_eq!(
        first["inlines"][0]["text"],
        title.replace('<', "<\u{2060}").as_str(),
        "the title, literal in a TextRun"
    );
    assert!(card.to_string().contains("Seen 2 times"), "{card}");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagerduty_retries_under_one_dedup_key_and_the_routing_key_stays_secret() {
    let sink = HttpSink::start().await.expect("sink");
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &sink.url(""));
    // PagerDuty fails once (5xx): the retry must be the same alert
    sink.script([Reply::status(502)]);
    sink.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let project = object_id();
    let added = env.ok(&[
        "rules",
        "add",
        "--project",
        &project,
        "--seen-more",
        "3/1m",
        "--pagerduty",
        ROUTING_KEY,
        "--severity",
        "critical",
        "--json",
    ]);
    assert!(added.contains("\"severity\":\"critical\""), "{added}");

    let started = Instant::now();
    let mut k = env.spawn("run", &[]);
    let title = format!("DB timeout ({})", env.namespace);
    env.publish(&project, &title, "g1").count(3).ok();
    let got = sink.wait_for_count(2, WAIT).await;
    assert_eq!(got.len(), 2, "a 502, then the retry; log:\n{}", k.logs());
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.uri, "/v2/enqueue");
    }
    let (first, retry) = (got[0].json(), got[1].json());
    assert_eq!(first["dedup_key"], retry["dedup_key"], "one incident");
    assert_eq!(retry["routing_key"], ROUTING_KEY);
    assert_eq!(retry["event_action"], "trigger");
    let payload = &retry["payload"];
    assert_eq!(payload["severity"], "critical");
    assert_eq!(payload["source"], project.as_str());
    assert_eq!(payload["custom_details"]["events"][0]["title"], title.as_str());
    assert_eq!(payload["custom_details"]["events"][0]["count"], 3);
    let nid = retry["dedup_key"].as_str().expect("dedup_key").to_owned();
    assert!(!nid.is_empty() && started.elapsed() < WAIT);

    // the trail shows the routing key as a fingerprint only
    let trail = env.ok(&["deliveries", "list", "--project", &project, "-o", "json"]);
    assert!(trail.contains(&nid), "{trail}");
    assert!(trail.contains("routing key …#"), "{trail}");
    assert!(!trail.contains(ROUTING_KEY), "{trail}");
    // and test-notify too
    let (code, out, err) = env.run(&[
        "test-notify",
        "--channel",
        "pagerduty",
        "--endpoint",
        ROUTING_KEY,
        "--severity",
        "info",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("sent: test notification") && out.contains("routing key …#"),
        "{out}"
    );
    assert!(
        !out.contains(ROUTING_KEY) && !err.contains(ROUTING_KEY),
        "{out}{err}"
    );
    let got = sink.wait_for_count(3, WAIT).await;
    assert_eq!(got[2].json()["payload"]["severity"], "info");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    assert!(
        !k.logs().contains(ROUTING_KEY),
        "the routing key reached the logs"
    );
    common::delete_queues(&env).await;
}
