//! Discord, Microsoft Teams (Workflows) and PagerDuty (Events API v2) deliveries against local recording HTTP
//! servers playing each service: payload shape and limits, status classes, rate limits, secrets.

mod common;

use std::time::Duration;

use common::*;
use klaxon_channels::{redact_endpoint, DeliveryError};
use klaxon_core::{ChannelKind, Reason, Severity};
use klaxon_testkit::{HttpSink, Reply};

const WAIT: Duration = Duration::from_secs(5);
const WJ: char = '\u{2060}';
/// A title written to page, link and format on every channel.
const HOSTILE: &str = "boom @everyone @here <@123> <@&456> <#789> **bold** __u__ ~~s~~ ||spoiler|| `code` [x](https://evil.example) https://evil.example # h <at>Bob</at>";

fn expect_transient(err: &DeliveryError) -> Option<Duration> {
    match err {
        DeliveryError::Transient { retry_after, .. } => *retry_after,
        DeliveryError::Permanent { reason } => panic!("expected transient, got permanent: {reason}"),
    }
}

fn discord_endpoint(sink: &HttpSink) -> String {
    sink.url(&format!("/api/webhooks/123456789/{ENDPOINT_SECRET}"))
}

/// A routing key of the documented shape that carries a test secret.
fn routing_key() -> String {
    let key = format!("{ENDPOINT_SECRET}0123456789abcdefghijklmnop");
    key[..32].to_owned()
}

fn errors(n: usize) -> Vec<(String, u64)> {
    (0..n)
        .map(|i| (format!("Error {i} {}", "x".repeat(280)), 2))
        .collect()
}

#[tokio::test]
async fn discord_posts_embeds_with_mentions_off() {
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(204));
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Discord,
        &discord_endpoint(&sink),
        threshold(),
        &[(HOSTILE, 100)],
    );
    assert_eq!(ch.deliver(&t).await.expect("delivered").messages, 1);
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].uri, format!("/api/webhooks/123456789/{ENDPOINT_SECRET}"));
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    let body = reqs[0].json();
    assert_eq!(body["allowed_mentions"], serde_json::json!({"parse": []}));
    let embeds = body["embeds"].as_array().expect("embeds");
    assert_eq!(embeds.len(), 1);
    let shown = format!(
        "{} {}",
        embeds[0]["title"].as_str().unwrap_or_default(),
        embeds[0]["description"].as_str().unwrap_or_default()
    );
    for markup in [
        "@everyone",
        "@here",
        "<@123>",
        "<@&",
        "<#",
        "**bold**",
        "__u__",
        "~~s~~",
        "||spoiler||",
        "`code`",
        "](https://",
        "https://evil",
        "\n# h",
    ] {
        assert!(!shown.contains(markup), "{markup} in {shown}");
    }
    assert!(shown.contains(&format!("@{WJ}everyone")), "{shown}");
    // the project id is tenant text too: escaped (Discord shows `proj-…` again)
    let project = klaxon_channels::render::escape_discord(&t.project_id);
    assert!(shown.contains(&project), "{shown}");
    assert!(
        shown.contains("Seen 100 times in the last minute (fixed window, threshold 100)"),
        "{shown}"
    );
    assert_eq!(embeds[0]["timestamp"], "2023-11-14T22:13:20.123Z");
}

#[tokio::test]
async fn discord_messages_stay_within_discord_limits() {
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(204));
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = discord_endpoint(&sink);
    let long = "T".repeat(300);
    ch.deliver(&task(
        ChannelKind::Discord,
        &endpoint,
        threshold(),
        &[(&long, 100)],
    ))
    .await
    .expect("long title");
    let many = errors(15);
    let events: Vec<(&str, u64)> = many.iter().map(|(t, c)| (t.as_str(), *c)).collect();
    ch.deliver(&task(
        ChannelKind::Discord,
        &endpoint,
        Reason::Digest {
            min_period_s: 60,
            resolved: 0,
            more: Default::default(),
        },
        &events,
    ))
    .await
    .expect("digest");
    let reqs = sink.wait_for_count(2, WAIT).await;
    let title = reqs[0].json()["embeds"][0]["title"]
        .as_str()
        .expect("title")
        .to_owned();
    assert_eq!(title.chars().count(), 256, "a 300-character title is cut to 256");
    let digest = reqs[1].json();
    let embeds = digest["embeds"].as_array().expect("embeds");
    assert!(embeds.len() <= 10, "{} embeds", embeds.len());
    assert_eq!(embeds.len(), 10, "header, 8 groups, and K more");
    assert_eq!(embeds[9]["title"], "and 7 more");
    let total: usize = embeds
        .iter()
        .map(|e| {
            ["/title", "/description", "/footer/text"]
                .iter()
                .filter_map(|p| e.pointer(p).and_then(|v| v.as_str()))
                .map(|s| s.chars().count())
                .sum::<usize>()
        })
        .sum();
    assert!(total <= 6000, "{total} characters");
    assert!(embeds
        .iter()
        .all(|e| e["title"].as_str().is_some_and(|t| t.chars().count() <= 256)));
}

#[tokio::test]
async fn discord_statuses_and_rate_limits() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([
        Reply::status(200).body(r#"{"id": "1"}"#),
        Reply::status(429)
            .header("Retry-After", "1")
            .body(r#"{"message": "You are being rate limited.", "retry_after": 0.75, "global": false}"#),
        Reply::status(429).header("Retry-After", "2"),
        Reply::status(500),
        Reply::status(400).body(r#"{"message": "Invalid Form Body", "code": 50035}"#),
        Reply::status(404).body(r#"{"message": "Unknown Webhook", "code": 10015}"#),
        Reply::status(401),
    ]);
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Discord,
        &discord_endpoint(&sink),
        Reason::New,
        &[("x", 1)],
    );
    assert_eq!(ch.deliver(&t).await.expect("200 is delivered").messages, 1);
    let mut errs = Vec::new();
    for _ in 0..6 {
        let err = ch.deliver(&t).await.expect_err("scripted failure");
        assert_secret_free(&err);
        errs.push(err);
    }
    assert_eq!(
        expect_transient(&errs[0]),
        Some(Duration::from_millis(750)),
        "the body's retry_after (seconds, a float) wins"
    );
    assert_eq!(
        expect_transient(&errs[1]),
        Some(Duration::from_secs(2)),
        "else Retry-After"
    );
    assert_eq!(expect_transient(&errs[2]), None);
    for e in &errs[3..] {
        assert!(!e.is_transient(), "4xx is permanent: {e:?}");
    }
    assert!(errs[4].reason().contains("Unknown Webhook"), "{}", errs[4]);
    // an invalid endpoint is permanent and sends nothing
    let before = sink.count();
    let bad = task(ChannelKind::Discord, "not a url", Reason::New, &[("x", 1)]);
    assert!(!ch.deliver(&bad).await.expect_err("invalid").is_transient());
    assert_eq!(sink.count(), before);
}

#[tokio::test]
async fn teams_posts_an_adaptive_card() {
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202));
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = sink.url(&format!(
        "/workflows/abc/triggers/manual/paths/invoke?sig={ENDPOINT_SECRET}"
    ));
    let t = task(ChannelKind::Teams, &endpoint, threshold(), &[(HOSTILE, 100)]);
    assert_eq!(ch.deliver(&t).await.expect("202 is delivered").messages, 1);
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    let body = reqs[0].json();
    assert_eq!(body["type"], "message");
    assert_eq!(
        body["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &body["attachments"][0]["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    let mut texts = String::new();
    for block in card["body"].as_array().expect("body") {
        assert_eq!(
            block["type"], "RichTextBlock",
            "never a Markdown TextBlock: {block}"
        );
        for run in block["inlines"].as_array().expect("inlines") {
            assert_eq!(run["type"], "TextRun");
            texts.push_str(run["text"].as_str().unwrap_or_default());
            texts.push('\n');
        }
    }
    assert!(texts.contains(&t.project_id), "{texts}");
    for markup in ["<at>", "@everyone", "https://evil"] {
        assert!(!texts.contains(markup), "{markup} in {texts}");
    }
    assert!(texts.contains(&format!("<{WJ}at>")), "{texts}");
}

#[tokio::test]
async fn teams_statuses_are_classified() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([
        Reply::status(200),
        Reply::status(429).header("Retry-After", "4"),
        Reply::status(502),
        Reply::status(400).body(r#"{"error":{"code":"InvalidRequestContent","message":"bad card"}}"#),
        Reply::status(401),
    ]);
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Teams,
        &sink.url(&format!("/workflows/{ENDPOINT_SECRET}")),
        Reason::New,
        &[("x", 1)],
    );
    ch.deliver(&t).await.expect("200 is delivered");
    let mut errs = Vec::new();
    for _ in 0..4 {
        let err = ch.deliver(&t).await.expect_err("scripted failure");
        assert_secret_free(&err);
        errs.push(err);
    }
    assert_eq!(expect_transient(&errs[0]), Some(Duration::from_secs(4)));
    assert_eq!(expect_transient(&errs[1]), None);
    assert!(!errs[2].is_transient() && errs[2].reason().contains("InvalidRequestContent"));
    assert!(!errs[3].is_transient());
}

#[tokio::test]
async fn pagerduty_triggers_one_alert_per_notification() {
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"x"}"#),
    );
    let ch = channels(config(&sink.url("")));
    let key = routing_key();
    let mut t = task(
        ChannelKind::Pagerduty,
        &key,
        threshold(),
        &[(HOSTILE, 100), ("second", 3)],
    );
    t.reason = Reason::Digest {
        min_period_s: 300,
        resolved: 0,
        more: Default::default(),
    };
    t.severity = Some(Severity::Warning);
    t.project_name = Some("Acme shop".into());
    ch.deliver(&t).await.expect("delivered");
    // a retried delivery carries the same dedup_key: one alert in PagerDuty
    ch.deliver(&t).await.expect("delivered again");
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].uri, "/v2/enqueue");
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    let body = reqs[0].json();
    assert_eq!(body["routing_key"], key.as_str());
    assert_eq!(body["event_action"], "trigger");
    assert_eq!(body["dedup_key"], t.notification_id.as_str());
    assert_eq!(reqs[1].json()["dedup_key"], body["dedup_key"]);
    let payload = &body["payload"];
    assert_eq!(payload["severity"], "warning");
    assert_eq!(payload["source"], "Acme shop");
    assert_eq!(payload["timestamp"], "2023-11-14T22:13:20.123Z");
    let summary = payload["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with("103 errors in Acme shop in the last 5 minutes: "),
        "{summary}"
    );
    let events = payload["custom_details"]["events"].as_array().expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["title"], HOSTILE);
    assert_eq!(events[0]["count"], 100);
    assert_eq!(events[1]["groupHash"], t.events[1].group_hash.as_str());
    // the key never shows where endpoints are shown
    let shown = redact_endpoint(ChannelKind::Pagerduty, &key);
    assert!(
        !shown.contains(ENDPOINT_SECRET) && shown.starts_with("routing key …#"),
        "{shown}"
    );
    // the default severity, and a summary within 1,024 characters
    let mut long = task(
        ChannelKind::Pagerduty,
        &key,
        Reason::New,
        &[(&"é".repeat(5000), 1)],
    );
    long.severity = None;
    ch.deliver(&long).await.expect("delivered");
    let reqs = sink.wait_for_count(3, WAIT).await;
    let payload = &reqs[2].json()["payload"];
    assert_eq!(payload["severity"], "error");
    assert!(payload["summary"].as_str().expect("summary").chars().count() <= 1024);
}

#[tokio::test]
async fn pagerduty_statuses_are_classified_and_the_key_never_leaks() {
    let sink = HttpSink::start().await.expect("sink");
    let key = routing_key();
    sink.script([
        Reply::status(400).body(&format!(
            r#"{{"status":"invalid event","message":"Event object is invalid","errors":["routing_key {key} is invalid"]}}"#
        )),
        Reply::status(429).body(r#"{"status":"throttle exceeded"}"#),
        Reply::status(429).header("Retry-After", "6"),
        Reply::status(500),
        Reply::status(503),
        Reply::status(202),
    ]);
    let ch = channels(config(&sink.url("")));
    let t = task(ChannelKind::Pagerduty, &key, Reason::New, &[("x", 1)]);
    let mut errs = Vec::new();
    for _ in 0..5 {
        let err = ch.deliver(&t).await.expect_err("scripted failure");
        assert_secret_free(&err);
        assert!(!err.reason().contains(&key), "{err}");
        errs.push(err);
    }
    assert!(!errs[0].is_transient(), "400 is permanent: {:?}", errs[0]);
    assert!(
        errs[0].reason().contains("Event object is invalid"),
        "{}",
        errs[0]
    );
    assert_eq!(expect_transient(&errs[1]), None, "429 is retried with backoff");
    assert_eq!(expect_transient(&errs[2]), Some(Duration::from_secs(6)));
    assert_eq!(expect_transient(&errs[3]), None);
    assert_eq!(expect_transient(&errs[4]), None);
    ch.deliver(&t).await.expect("202 is delivered");
    // no routing key: permanent, nothing sent
    let before = sink.count();
    let none = task(ChannelKind::Pagerduty, "  ", Reason::New, &[("x", 1)]);
    assert!(!ch.deliver(&none).await.expect_err("no key").is_transient());
    assert_eq!(sink.count(), before);
}
