//! Slack, Telegram and webhook deliveries against local recording HTTP servers.

mod common;

use std::time::Duration;

use common::*;
use klaxon_channels::webhook::SigningKeys;
use klaxon_channels::{ChannelsConfig, DeliveryError, Secret};
use klaxon_core::{ChannelKind, Reason};
use klaxon_testkit::{HttpSink, Reply};
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(5);

fn slack_endpoint(sink: &HttpSink) -> String {
    sink.url(&format!("/services/T000/B000/{ENDPOINT_SECRET}"))
}

#[tokio::test]
async fn slack_payload_has_text_blocks_and_escaped_title() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Slack,
        &slack_endpoint(&sink),
        threshold(),
        &[("<script>&\"boom", 100)],
    );
    let delivered = ch.deliver(&t).await.expect("delivered");
    assert_eq!(delivered.messages, 1);

    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.uri, format!("/services/T000/B000/{ENDPOINT_SECRET}"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    let body = req.json();
    let text = body["text"].as_str().expect("text");
    assert!(text.contains("&lt;script&gt;&amp;\"boom"), "{text}");
    assert!(!text.contains("<script>"), "{text}");
    assert!(
        text.contains(&t.project_id) && text.contains(&t.rule_id),
        "{text}"
    );
    assert!(
        text.contains("Seen 100 times in the last minute (fixed window, threshold 100)"),
        "{text}"
    );
    assert!(text.contains("2023-11-14T22:13:20.123Z"), "{text}");
    assert_eq!(body["unfurl_links"], false);
    assert_eq!(body["unfurl_media"], false);
    // the blocks carry the title in a rich_text `text` element, shown literally by Slack (`<` + word joiner)
    let blocks = body["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty());
    assert_eq!(blocks[0]["type"], "rich_text");
    let first = &blocks[0]["elements"][0]["elements"][0];
    assert_eq!(first["type"], "text");
    assert_eq!(first["style"]["bold"], true);
    assert_eq!(first["text"], "<\u{2060}script>&\"boom");
}

#[tokio::test]
async fn telegram_payload_is_html_escaped_json() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config(&sink.url("")));
    let t = task(
        ChannelKind::Telegram,
        "-1001234567890",
        Reason::New,
        &[("<script>&\"boom", 1)],
    );
    assert_eq!(ch.deliver(&t).await.expect("delivered").messages, 1);

    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].uri, format!("/bot{TOKEN}/sendMessage"));
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    let body = reqs[0].json();
    assert_eq!(body["chat_id"], "-1001234567890");
    assert_eq!(body["parse_mode"], "HTML");
    let text = body["text"].as_str().expect("text");
    assert!(text.contains("&lt;script&gt;&amp;&quot;boom"), "{text}");
    assert!(!text.contains("<script>"), "{text}");
    assert!(
        text.starts_with(&format!("<b>New error in project {}</b>", t.project_id)),
        "{text}"
    );
}

#[tokio::test]
async fn telegram_long_message_is_split_in_order_without_loss() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config(&sink.url("/")));
    // sixteen groups of ~290 characters (digest lines show at most 300): about 4,900 characters in all,
    // over Telegram's 4,096
    let titles: Vec<String> = (0..16)
        .map(|i| format!("T{i}:{}", char::from(b'a' + i as u8).to_string().repeat(290)))
        .collect();
    let events: Vec<(&str, u64)> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), 60 - i as u64))
        .collect();
    let t = task(
        ChannelKind::Telegram,
        "12345",
        Reason::Digest {
            min_period_s: 600,
            resolved: 0,
            more: Default::default(),
        },
        &events,
    );
    let delivered = ch.deliver(&t).await.expect("delivered");
    assert_eq!(delivered.messages, 2);

    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs.len(), 2);
    let parts: Vec<String> = reqs
        .iter()
        .map(|r| r.json()["text"].as_str().expect("text").to_owned())
        .collect();
    for p in &parts {
        assert!(p.chars().count() <= 4096, "part of {} chars", p.chars().count());
    }
    assert!(parts[0].starts_with("<b>840 errors in "), "{}", &parts[0][..60]);
    assert!(parts[0].contains("in the last 10 minutes</b>"));
    let all = parts.concat();
    // every line whole and in count order, across the split
    let mut last = 0;
    for (i, title) in titles.iter().enumerate() {
        let line = format!("{} × {title}\n", 60 - i);
        let at = all.find(&line).unwrap_or_else(|| panic!("line {i} lost or cut"));
        assert!(at >= last, "line {i} out of order");
        last = at;
    }
    assert!(parts[1].trim_end().ends_with("</i>"), "footer last");
}

#[tokio::test]
async fn telegram_hawk_notify_bot_url_gets_a_form() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = sink.url(&format!("/u/{ENDPOINT_SECRET}"));
    let t = task(
        ChannelKind::Telegram,
        &endpoint,
        Reason::New,
        &[("Boom & <bang>", 1)],
    );
    ch.deliver(&t).await.expect("delivered");
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].uri, format!("/u/{ENDPOINT_SECRET}"));
    assert_eq!(
        reqs[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&reqs[0].body).into_owned().collect();
    assert_eq!(form[0].0, "message");
    assert!(form[0].1.contains("Boom &amp; &lt;bang&gt;"), "{}", form[0].1);
    assert_eq!(form[1], ("parse_mode".to_owned(), "HTML".to_owned()));
    assert_eq!(
        form[2],
        ("disable_web_page_preview".to_owned(), "true".to_owned())
    );
}

#[tokio::test]
async fn telegram_without_token_or_with_bad_chat_is_permanent_and_sends_nothing() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(ChannelsConfig {
        telegram_bot_token: None,
        ..config(&sink.url(""))
    });
    let err = ch
        .deliver(&task(ChannelKind::Telegram, "12345", Reason::New, &[("x", 1)]))
        .await
        .expect_err("no token");
    assert!(!err.is_transient(), "{err:?}");
    assert!(err.reason().contains("bot token"), "{err}");
    let ch = channels(config(&sink.url("")));
    let err = ch
        .deliver(&task(
            ChannelKind::Telegram,
            "not a chat",
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("bad chat");
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(sink.count(), 0);
}

/// HMAC-SHA256 written out from RFC 2104 with plain SHA-256, independent of the `hmac` crate.
fn reference_hmac_sha256(key: &[u8], msg: &[u8]) -> String {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let ipad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    let inner = Sha256::digest([ipad.as_slice(), msg].concat());
    let outer = Sha256::digest([opad.as_slice(), inner.as_slice()].concat());
    hex::encode(outer)
}

#[test]
fn reference_hmac_matches_rfc4231_case_2() {
    assert_eq!(
        reference_hmac_sha256(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}

#[tokio::test]
async fn webhook_body_headers_and_signature() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = sink.url(&format!("/hook?token={ENDPOINT_SECRET}"));
    let t = task(
        ChannelKind::Webhook,
        &endpoint,
        threshold(),
        &[("TypeError: <x> & \"y\"", 100)],
    );
    ch.deliver(&t).await.expect("delivered");

    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.header("x-klaxon-notification-id"),
        Some(t.notification_id.as_str())
    );
    // No KLAXON_WEBHOOK_LEGACY_SECRET: no deprecated header (it was made with the master key itself).
    assert_eq!(req.header("x-klaxon-signature"), None);
    assert!(req.header("webhook-signature").is_some());

    let body = req.json();
    let expected = serde_json::json!({
        "notificationId": t.notification_id,
        "projectId": t.project_id,
        "ruleId": t.rule_id,
        "channel": "webhook",
        "firedAt": "2023-11-14T22:13:20.123Z",
        // a threshold firing names the rule's numbers (the contract's wave 5)
        "rule": {"threshold": 100, "thresholdPeriod": 60000},
        "events": [{
            "groupHash": t.events[0].group_hash,
            "title": "TypeError: <x> & \"y\"",
            "count": 100,
            "repetitionId": t.events[0].repetition_id,
        }],
    });
    assert_eq!(body, expected);
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The Standard Webhooks headers of a recorded request: (id, timestamp, signatures).
fn standard(req: &klaxon_testkit::http_sink::Request) -> (String, String, String) {
    let h = |n: &str| {
        req.header(n)
            .unwrap_or_else(|| panic!("no {n} header"))
            .to_owned()
    };
    (h("webhook-id"), h("webhook-timestamp"), h("webhook-signature"))
}

/// 32 bytes to make a test's master key long enough.
const PAD: &str = "-0123456789abcdef0123456789abcdef";

fn signing_keys(current: &str, previous: Option<&str>) -> SigningKeys {
    let current = if current.len() >= 32 {
        current.to_owned()
    } else {
        format!("{current}{PAD}")
    };
    SigningKeys::from_settings(Some(Secret::new(current)), previous.map(Secret::new), None)
        .expect("valid")
        .expect("some")
}

/// The key of the deprecated `X-Klaxon-Signature` in these tests (`KLAXON_WEBHOOK_LEGACY_SECRET`).
const LEGACY_KEY: &str = "old-short-LEGACY-key";

/// The signature checked without our verifier: base64 of the reference HMAC over `id.timestamp.body`, under the
/// key the tenant is given (`whsec_` + base64).
fn reference_v1(whsec: &str, id: &str, ts: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64
        .decode(whsec.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 key");
    let msg = [format!("{id}.{ts}.").as_bytes(), body].concat();
    let mac = hex::decode(reference_hmac_sha256(&key, &msg)).expect("hex");
    format!("v1,{}", b64.encode(mac))
}

#[tokio::test]
async fn webhooks_carry_standard_webhooks_headers_signed_with_the_endpoints_own_secret() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(ChannelsConfig {
        webhook_keys: SigningKeys::from_settings(
            Some(Secret::new(HMAC_KEY)),
            None,
            Some(Secret::new(LEGACY_KEY)),
        )
        .expect("valid"),
        ..config("http://127.0.0.1:1")
    });
    let keys = signing_keys(HMAC_KEY, None);
    let endpoint = sink.url(&format!("/hook?token={ENDPOINT_SECRET}"));
    let mut a = task(ChannelKind::Webhook, &endpoint, Reason::New, &[("a", 1)]);
    a.project_id = "5e3eef0679fa3700a0198a49".into();
    let mut b = task(ChannelKind::Webhook, &endpoint, Reason::New, &[("b", 1)]);
    b.project_id = "65a000000000000000000001".into();
    let before = now_s();
    ch.deliver(&a).await.expect("delivered");
    ch.deliver(&b).await.expect("delivered");
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs.len(), 2);
    let secret_a = keys.endpoint_secret(&a.project_id, &endpoint);
    let secret_b = keys.endpoint_secret(&b.project_id, &endpoint);
    assert_ne!(secret_a, secret_b, "one secret per (project, endpoint)");
    for (req, t, own, other) in [
        (&reqs[0], &a, &secret_a, &secret_b),
        (&reqs[1], &b, &secret_b, &secret_a),
    ] {
        let (id, ts, sig) = standard(req);
        assert_eq!(id, t.notification_id);
        assert_eq!(req.json()["notificationId"], t.notification_id.as_str());
        let at: i64 = ts.parse().expect("integer seconds");
        assert!((before..=now_s()).contains(&at), "the attempt's time: {at}");
        assert_eq!(sig, reference_v1(&own.expose_whsec(), &id, &ts, &req.body));
        assert!(own.verify(&id, &ts, &sig, &req.body, now_s()));
        assert!(
            !other.verify(&id, &ts, &sig, &req.body, now_s()),
            "another project's secret does not verify this delivery"
        );
        // With KLAXON_WEBHOOK_LEGACY_SECRET, the deprecated header is made with that key (body only), never
        // with the master key.
        let legacy = format!(
            "sha256={}",
            reference_hmac_sha256(LEGACY_KEY.as_bytes(), &req.body)
        );
        assert_eq!(req.header("x-klaxon-signature"), Some(legacy.as_str()));
        let master = format!("sha256={}", reference_hmac_sha256(HMAC_KEY.as_bytes(), &req.body));
        assert_ne!(req.header("x-klaxon-signature"), Some(master.as_str()));
        assert!(!sig.contains(HMAC_KEY) && !own.expose_whsec().contains(HMAC_KEY));
    }
}

#[tokio::test]
async fn a_rotation_signs_with_both_secrets_and_a_retry_keeps_the_id_with_a_fresh_timestamp() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([Reply::status(503)]);
    let ch = channels(ChannelsConfig {
        // the previous key as it was the current one (padded like it)
        webhook_keys: Some(signing_keys("NEWMASTER", Some(&format!("OLDMASTER{PAD}")))),
        ..config("http://127.0.0.1:1")
    });
    let endpoint = sink.url("/h");
    let mut t = task(ChannelKind::Webhook, &endpoint, Reason::New, &[("x", 1)]);
    t.project_id = "5e3eef0679fa3700a0198a49".into();
    let err = ch.deliver(&t).await.expect_err("503 first");
    assert!(err.is_transient());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ch.deliver(&t).await.expect("delivered on the retry");
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs.len(), 2);
    let new = signing_keys("NEWMASTER", None).endpoint_secret(&t.project_id, &endpoint);
    let old = signing_keys("OLDMASTER", None).endpoint_secret(&t.project_id, &endpoint);
    let mut stamps = Vec::new();
    for req in &reqs {
        let (id, ts, sig) = standard(req);
        assert_eq!(id, t.notification_id, "the same id on every attempt");
        let entries: Vec<&str> = sig.split(' ').collect();
        assert_eq!(
            entries,
            [
                reference_v1(&new.expose_whsec(), &id, &ts, &req.body),
                reference_v1(&old.expose_whsec(), &id, &ts, &req.body)
            ],
            "current first, then previous"
        );
        assert!(new.verify(&id, &ts, &sig, &req.body, now_s()));
        assert!(old.verify(&id, &ts, &sig, &req.body, now_s()));
        stamps.push(ts.parse::<i64>().expect("seconds"));
    }
    assert!(
        stamps[1] > stamps[0],
        "each attempt is signed at its own time: {stamps:?}"
    );
}

#[tokio::test]
async fn webhook_without_secret_is_unsigned_and_repetition_id_null() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(ChannelsConfig {
        webhook_keys: None,
        ..config("http://127.0.0.1:1")
    });
    let mut t = task(ChannelKind::Webhook, &sink.url("/h"), Reason::New, &[("x", 1)]);
    t.events[0].repetition_id = None;
    ch.deliver(&t).await.expect("delivered");
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("x-klaxon-signature"), None);
    assert_eq!(reqs[0].header("webhook-signature"), None);
    assert_eq!(reqs[0].header("webhook-timestamp"), None);
    assert_eq!(reqs[0].header("webhook-id"), Some(t.notification_id.as_str()));
    assert_eq!(
        reqs[0].json()["events"][0]["repetitionId"],
        serde_json::Value::Null
    );
}

#[tokio::test]
async fn webhook_redirects_are_not_followed() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([Reply::status(302).header("location", &sink.url("/elsewhere"))]);
    let ch = channels(config("http://127.0.0.1:1"));
    let err = ch
        .deliver(&task(
            ChannelKind::Webhook,
            &sink.url("/h"),
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("redirect");
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(sink.count(), 1, "the redirect target was not requested");
}

fn expect_transient(err: &DeliveryError) -> Option<Duration> {
    match err {
        DeliveryError::Transient { retry_after, .. } => *retry_after,
        DeliveryError::Permanent { reason } => panic!("expected transient, got permanent: {reason}"),
    }
}

#[tokio::test]
async fn http_statuses_are_classified() {
    let sink = HttpSink::start().await.expect("sink");
    let in_90s = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(90));
    sink.script([
        Reply::status(500),
        Reply::status(503).header("Retry-After", "7"),
        Reply::status(408),
        Reply::status(429).header("Retry-After", "3"),
        Reply::status(429).header("Retry-After", &in_90s),
        Reply::status(404).body("no_service"),
        Reply::status(400).body("invalid_payload"),
        Reply::status(403).body("action_prohibited"),
    ]);
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Slack,
        &slack_endpoint(&sink),
        Reason::New,
        &[("x", 1)],
    );
    let mut errs = Vec::new();
    for _ in 0..8 {
        let err = ch.deliver(&t).await.expect_err("scripted failure");
        eprintln!("{err:?}");
        assert_secret_free(&err);
        errs.push(err);
    }
    assert_eq!(expect_transient(&errs[0]), None);
    assert!(errs[0].reason().contains("HTTP 500"), "{}", errs[0]);
    assert_eq!(expect_transient(&errs[1]), Some(Duration::from_secs(7)));
    assert_eq!(expect_transient(&errs[2]), None);
    assert_eq!(expect_transient(&errs[3]), Some(Duration::from_secs(3)));
    let date_wait = expect_transient(&errs[4]).expect("retry-after from HTTP-date");
    assert!(
        date_wait > Duration::from_secs(80) && date_wait <= Duration::from_secs(90),
        "{date_wait:?}"
    );
    for (err, detail) in errs[5..]
        .iter()
        .zip(["no_service", "invalid_payload", "action_prohibited"])
    {
        assert!(!err.is_transient(), "{err:?}");
        assert!(err.reason().contains(detail), "{err}");
    }
}

#[tokio::test]
async fn telegram_429_uses_retry_after_from_body_and_errors_hide_the_token() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([
        Reply::status(429).body(
            r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 11","parameters":{"retry_after":11}}"#,
        ),
        Reply::status(400).body(r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#),
        Reply::status(401).body(r#"{"ok":false,"error_code":401,"description":"Unauthorized"}"#),
    ]);
    let ch = channels(config(&sink.url("")));
    let t = task(ChannelKind::Telegram, "12345", Reason::New, &[("x", 1)]);
    let e1 = ch.deliver(&t).await.expect_err("429");
    assert_eq!(expect_transient(&e1), Some(Duration::from_secs(11)));
    let e2 = ch.deliver(&t).await.expect_err("400");
    assert!(
        !e2.is_transient() && e2.reason().contains("chat not found"),
        "{e2}"
    );
    let e3 = ch.deliver(&t).await.expect_err("401");
    assert!(!e3.is_transient(), "{e3}");
    for e in [&e1, &e2, &e3] {
        assert_secret_free(e);
    }
}

#[tokio::test]
async fn slow_reply_times_out_as_transient() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([Reply::status(200).delayed(Duration::from_secs(3))]);
    let ch = channels(ChannelsConfig {
        request_timeout: Duration::from_millis(300),
        ..config("http://127.0.0.1:1")
    });
    let t = task(
        ChannelKind::Webhook,
        &sink.url(&format!("/h/{ENDPOINT_SECRET}")),
        Reason::New,
        &[("x", 1)],
    );
    let err = ch.deliver(&t).await.expect_err("timeout");
    eprintln!("{err:?}");
    assert_eq!(expect_transient(&err), None);
    assert!(err.reason().contains("timed out"), "{err}");
    assert_secret_free(&err);
}

#[tokio::test]
async fn connection_refused_is_transient() {
    // bind, learn the port, close: nothing listens there any more
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let ch = channels(config(&format!("http://127.0.0.1:{port}")));
    for t in [
        task(
            ChannelKind::Webhook,
            &format!("http://127.0.0.1:{port}/h/{ENDPOINT_SECRET}"),
            Reason::New,
            &[("x", 1)],
        ),
        task(ChannelKind::Telegram, "12345", Reason::New, &[("x", 1)]),
    ] {
        let err = ch.deliver(&t).await.expect_err("refused");
        eprintln!("{err:?}");
        assert_eq!(expect_transient(&err), None);
        assert!(err.reason().contains("connect"), "{err}");
        assert_secret_free(&err);
    }
}

#[tokio::test]
async fn invalid_endpoints_are_permanent() {
    let ch = channels(config("http://127.0.0.1:1"));
    for (channel, endpoint) in [
        (ChannelKind::Slack, "not a url"),
        (ChannelKind::Webhook, "ftp://example.com/x"),
        (ChannelKind::Webhook, ""),
    ] {
        let err = ch
            .deliver(&task(channel, endpoint, Reason::New, &[("x", 1)]))
            .await
            .expect_err(endpoint);
        assert!(!err.is_transient(), "{endpoint}: {err:?}");
    }
    let mut empty = task(ChannelKind::Webhook, "http://127.0.0.1:1/h", Reason::New, &[]);
    empty.events.clear();
    assert!(!ch.deliver(&empty).await.expect_err("no events").is_transient());
}

#[tokio::test]
async fn digest_lists_groups_by_count_with_and_more() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let titles: Vec<String> = (0..23).map(|i| format!("Error number {i:02}")).collect();
    // counts 1..=23 in scrambled order
    let events: Vec<(&str, u64)> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), ((i * 7) % 23 + 1) as u64))
        .collect();
    let t = task(
        ChannelKind::Slack,
        &slack_endpoint(&sink),
        Reason::Digest {
            min_period_s: 300,
            resolved: 0,
            more: Default::default(),
        },
        &events,
    );
    ch.deliver(&t).await.expect("delivered");
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    let text = reqs[0].json()["text"].as_str().expect("text").to_owned();
    let total: u64 = (1..=23).sum();
    assert!(
        text.starts_with(&format!(
            "*{total} errors in {} in the last 5 minutes*\n",
            t.project_id
        )),
        "{text}"
    );
    let counts: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split_once(" × ").and_then(|(c, _)| c.parse().ok()))
        .collect();
    assert_eq!(
        counts,
        (4..=23).rev().collect::<Vec<u64>>(),
        "top 20 by count, descending"
    );
    assert!(text.contains("\nand 3 more\n"), "{text}");
}

#[tokio::test]
async fn loop_payload_is_markdown_text_with_escaped_title() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = sink.url(&format!("/hooks/{ENDPOINT_SECRET}"));
    let t = task(
        ChannelKind::Loop,
        &endpoint,
        threshold(),
        &[("*bold* [link](http://x) <b> snake_case `code`", 100)],
    );
    assert_eq!(ch.deliver(&t).await.expect("delivered").messages, 1);

    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].uri, format!("/hooks/{ENDPOINT_SECRET}"));
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    let body = reqs[0].json();
    assert_eq!(
        body.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["text".to_owned()]),
        "Mattermost's incoming-webhook shape: {body}"
    );
    let text = body["text"].as_str().expect("text");
    assert!(
        text.contains("\\*bold\\* \\[link\\](http:\u{2060}//x) &lt;b&gt; snake_case \\`code\\`"),
        "{text}"
    );
    assert!(text.starts_with("**"), "the title line is bold: {text}");
    assert!(
        text.contains("Seen 100 times in the last minute (fixed window, threshold 100)"),
        "{text}"
    );
    assert!(text.contains(&t.project_id), "{text}");

    // a plain title is shown as is
    let plain = task(
        ChannelKind::Loop,
        &endpoint,
        Reason::New,
        &[("TypeError: x is undefined", 1)],
    );
    ch.deliver(&plain).await.expect("delivered");
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert!(reqs[1].json()["text"]
        .as_str()
        .unwrap_or_default()
        .contains("TypeError: x is undefined"));
}

#[tokio::test]
async fn loop_statuses_are_classified_like_slack() {
    let sink = HttpSink::start().await.expect("sink");
    sink.script([
        Reply::status(500),
        Reply::status(429).header("Retry-After", "3"),
        Reply::status(400).body(r#"{"id":"web.incoming_webhook.text.app_error"}"#),
        Reply::status(404),
    ]);
    let ch = channels(config("http://127.0.0.1:1"));
    let t = task(
        ChannelKind::Loop,
        &sink.url(&format!("/hooks/{ENDPOINT_SECRET}")),
        Reason::New,
        &[("x", 1)],
    );
    let mut errs = Vec::new();
    for _ in 0..4 {
        let err = ch.deliver(&t).await.expect_err("scripted failure");
        assert_secret_free(&err);
        errs.push(err);
    }
    assert_eq!(expect_transient(&errs[0]), None);
    assert_eq!(expect_transient(&errs[1]), Some(Duration::from_secs(3)));
    assert!(
        !errs[2].is_transient() && errs[2].reason().contains("incoming_webhook"),
        "{}",
        errs[2]
    );
    assert!(!errs[3].is_transient(), "{:?}", errs[3]);
    // an invalid endpoint is permanent and sends nothing
    let bad = task(ChannelKind::Loop, "not a url", Reason::New, &[("x", 1)]);
    assert!(!ch.deliver(&bad).await.expect_err("invalid").is_transient());
}

/// Issue #22: a title (and a project name: tenants name their projects) written to page everyone, link to an
/// attacker and mislead, delivered to every HTTP channel. None of it may come out as a mention, a link, a
/// format or reordered text; the webhook, data for machines, carries it exactly.
#[tokio::test]
async fn hostile_titles_are_neutralised_on_every_http_channel() {
    const WJ: char = '\u{2060}';
    let title = "boom @channel @all @here @everyone <!channel> <@U123> *bold* _it_ ~s~ `code` [x](https://evil.example) ![i](https://evil.example/i.png) <https://evil.example> https://evil.example www.evil.example Invoice \u{202E}gpj.exe\u{202C} <b>x</b> &amp;";
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config(&sink.url("")));
    let hostile =
        |channel: ChannelKind, endpoint: &str| task(channel, endpoint, threshold(), &[(title, 100)]);
    ch.deliver(&hostile(ChannelKind::Loop, &sink.url("/loop")))
        .await
        .expect("loop");
    ch.deliver(&hostile(ChannelKind::Slack, &sink.url("/slack")))
        .await
        .expect("slack");
    ch.deliver(&hostile(ChannelKind::Telegram, "-100123"))
        .await
        .expect("telegram");
    ch.deliver(&hostile(ChannelKind::Webhook, &sink.url("/webhook")))
        .await
        .expect("webhook");
    let reqs = sink.wait_for_count(4, WAIT).await;
    let body = |path: &str| {
        reqs.iter()
            .find(|r| r.uri.starts_with(path))
            .unwrap_or_else(|| panic!("no request to {path}"))
            .json()
    };
    let no_hidden = |what: &str, text: &str| {
        assert!(
            !text.contains(['\u{202E}', '\u{202C}']) && text.contains("<U+202E>")
                || text.contains("&lt;U+202E&gt;"),
            "{what}: bidi override shown, not applied: {text}"
        );
    };

    // Loop / Mattermost: no mention, link, image, autolink or emphasis survives
    let loop_text = body("/loop")["text"].as_str().unwrap_or_default().to_owned();
    for mention in ["@channel", "@all", "@here", "@everyone"] {
        assert!(!loop_text.contains(mention), "{mention} in {loop_text}");
        assert!(
            loop_text.contains(&format!("@{WJ}{}", &mention[1..])),
            "{loop_text}"
        );
    }
    for markup in [
        "](https://",
        "https://",
        "<https",
        "*bold*",
        "_it_",
        "`code`",
        "<b>",
        "www.evil",
    ] {
        assert!(!loop_text.contains(markup), "{markup} in {loop_text}");
    }
    no_hidden("loop", &loop_text);

    // Slack: control sequences escaped and URLs broken in the mrkdwn fallback, tenant text only in rich_text text
    // elements in the blocks Slack shows
    let slack = body("/slack");
    let slack_text = slack["text"].as_str().unwrap_or_default();
    for markup in ["<!channel>", "<@U123>", "<https://", "https://evil"] {
        assert!(!slack_text.contains(markup), "{markup} in {slack_text}");
    }
    no_hidden("slack text", slack_text);
    let blocks = slack["blocks"].as_array().expect("blocks");
    for b in blocks {
        assert_eq!(b["type"], "rich_text", "{b}");
        for e in b["elements"][0]["elements"].as_array().expect("elements") {
            assert!(matches!(e["type"].as_str(), Some("text" | "link")), "{e}");
            let text = e["text"].as_str().unwrap_or_default();
            assert!(!text.contains("<!") && !text.contains("<@"), "{text}");
            if e["type"] == "link" {
                assert!(!e["url"].as_str().unwrap_or_default().contains("evil"), "{e}");
            }
        }
    }
    assert!(!blocks.iter().any(|b| b.to_string().contains("mrkdwn")));

    // Telegram: HTML escaped, no @mention, previews off
    let tg = body("/bot");
    assert_eq!(tg["link_preview_options"]["is_disabled"], true, "{tg}");
    let tg_text = tg["text"].as_str().unwrap_or_default();
    for markup in ["<b>x", "<https", "@channel", "@here"] {
        assert!(!tg_text.contains(markup), "{markup} in {tg_text}");
    }
    no_hidden("telegram", tg_text);

    // webhook: the data as it came
    assert_eq!(body("/webhook")["events"][0]["title"], title);
}

/// PagerDuty follows the alert: its resolve and acknowledgement are `resolve` and `acknowledge` events with the
/// firing's `dedup_key` and no payload (Events API v2); a reminder is a `trigger` on the same key.
#[tokio::test]
async fn pagerduty_resolves_and_acknowledges_the_firings_alert() {
    use klaxon_core::alert::AlertState;
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202).body(r#"{"status":"success","dedup_key":"x"}"#));
    let ch = channels(config(&sink.url("")));
    let key = format!("{ENDPOINT_SECRET}0123456789abcdefghijklmnop")[..32].to_owned();
    let resolved = alert(
        ChannelKind::Pagerduty,
        &key,
        AlertState::Resolved,
        Some("timeout"),
    );
    let firing_key = resolved.firing_notification_id(ChannelKind::Pagerduty);
    let acked = alert(
        ChannelKind::Pagerduty,
        &key,
        AlertState::Acknowledged,
        Some("cli"),
    );
    let tasks = [
        lifecycle_task(&resolved, Reason::Resolved),
        lifecycle_task(&acked, Reason::Acknowledged),
        lifecycle_task(&resolved, Reason::Reminder { number: 1, max: 2 }),
    ];
    for t in &tasks {
        ch.deliver(t).await.expect("delivered");
    }
    let reqs = sink.wait_for_count(3, WAIT).await;
    assert!(reqs.iter().all(|r| r.uri == "/v2/enqueue"));
    assert_eq!(
        reqs[0].json(),
        serde_json::json!({"routing_key": key, "event_action": "resolve", "dedup_key": firing_key})
    );
    assert_eq!(
        reqs[1].json(),
        serde_json::json!({"routing_key": key, "event_action": "acknowledge",
            "dedup_key": acked.firing_notification_id(ChannelKind::Pagerduty)})
    );
    let reminder = reqs[2].json();
    assert_eq!(reminder["event_action"], "trigger");
    assert_eq!(
        reminder["dedup_key"],
        firing_key.as_str(),
        "the firing's alert, not a new one"
    );
    let summary = reminder["payload"]["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with(&format!("Reminder: {}", resolved.title)) && summary.contains("reminder 1 of 2"),
        "{summary}"
    );
    assert_eq!(
        reminder["payload"]["custom_details"]["alertId"],
        resolved.id.as_str()
    );
    // without its alert a lifecycle task cannot name the PagerDuty alert: permanent, nothing sent
    let mut orphan = tasks[0].clone();
    orphan.alert = None;
    let err = ch.deliver(&orphan).await.expect_err("no dedup_key");
    assert!(!err.is_transient(), "{err}");
    assert_secret_free(&err);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sink.requests().len(), 3);
}

/// Every PagerDuty incident Klaxon opened for an alert follows it with the `dedup_key` it was triggered with:
/// an escalation step to a new routing key triggers its own incident (its own notification id), and once that
/// member and a digest's shared incident are in the alert's audience, the acknowledge reaches the firing's, the
/// step's and the digest's incidents, and the resolve the firing's and the step's, plus the digest's only when
/// this alert was the last one it listed (`closes`).
#[tokio::test]
async fn pagerduty_follows_every_incident_of_the_alerts_audience() {
    use klaxon_core::alert::{lifecycle_tasks, AlertChannel, AlertState};
    use klaxon_core::NotificationTask;
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202).body(r#"{"status":"success","dedup_key":"x"}"#));
    let ch = channels(config(&sink.url("")));
    let key = format!("{ENDPOINT_SECRET}0123456789abcdefghijklmnop")[..32].to_owned();
    let step_key = "Q2ndL1neR0ut1ngKey0123456789abcd".to_owned();
    let mut alert = alert(ChannelKind::Pagerduty, &key, AlertState::Firing, None);
    let firing_key = alert.firing_notification_id(ChannelKind::Pagerduty);
    // step 1 to another routing key: a new incident, keyed by the step's own id
    let (step, member) = NotificationTask::for_alert_member(
        &alert,
        &AlertChannel::of_rule(ChannelKind::Pagerduty, &step_key, None),
        Reason::Escalation { step: 1, steps: 1 },
        1_700_000_000_123,
    );
    ch.deliver(&step).await.expect("step delivered");
    let reqs = sink.wait_for_count(1, WAIT).await;
    let trigger = reqs[0].json();
    assert_eq!(
        (
            &trigger["event_action"],
            &trigger["routing_key"],
            &trigger["dedup_key"]
        ),
        (
            &serde_json::json!("trigger"),
            &serde_json::json!(step_key),
            &serde_json::json!(step.notification_id)
        )
    );
    // the audience: the firing's incident, the step's, and a digest's that listed this alert and others
    let digest_id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0".to_owned();
    alert.heard.push(member.expect("a new member"));
    alert.heard.push(AlertChannel {
        first_id: Some(digest_id.clone()),
        shared: true,
        ..AlertChannel::of_rule(ChannelKind::Pagerduty, &key, None)
    });
    async fn sent(
        ch: &klaxon_channels::Channels,
        sink: &HttpSink,
        tasks: Vec<NotificationTask>,
        from: usize,
    ) -> Vec<(String, String, String)> {
        for t in &tasks {
            ch.deliver(t).await.expect("delivered");
        }
        let reqs = sink.wait_for_count(from + tasks.len(), WAIT).await;
        reqs[from..]
            .iter()
            .map(|r| {
                let j = r.json();
                let s = |k: &str| j[k].as_str().unwrap_or_default().to_owned();
                (s("event_action"), s("routing_key"), s("dedup_key"))
            })
            .collect()
    }
    let ev =
        |action: &str, routing: &str, dedup: &str| (action.to_owned(), routing.to_owned(), dedup.to_owned());
    alert.state = AlertState::Acknowledged;
    let acks = sent(
        &ch,
        &sink,
        lifecycle_tasks(&alert, Reason::Acknowledged, 1_700_000_000_200),
        1,
    )
    .await;
    assert_eq!(
        acks,
        vec![
            ev("acknowledge", &key, &firing_key),
            ev("acknowledge", &step_key, &step.notification_id),
            ev("acknowledge", &key, &digest_id),
        ]
    );
    alert.state = AlertState::Resolved;
    let resolves = sent(
        &ch,
        &sink,
        lifecycle_tasks(&alert, Reason::Resolved, 1_700_000_000_300),
        4,
    )
    .await;
    assert_eq!(
        resolves,
        vec![
            ev("resolve", &key, &firing_key),
            ev("resolve", &step_key, &step.notification_id)
        ],
        "the digest's incident still lists open alerts"
    );
    alert.closes = vec![digest_id.clone()];
    let last = lifecycle_tasks(&alert, Reason::Resolved, 1_700_000_000_300);
    let closing: Vec<NotificationTask> = last
        .into_iter()
        .filter(|t| {
            t.alert
                .as_ref()
                .is_some_and(|a| a.firing_notification_id == digest_id)
        })
        .collect();
    assert_eq!(
        sent(&ch, &sink, closing, 6).await,
        vec![ev("resolve", &key, &digest_id)],
        "the last listed alert closes it"
    );
}

/// Webhook bodies name the alert (`alertId`) on firings and lifecycle messages, and say what happened
/// (`kind`, `alert`, `reminder`, `escalation`); a firing without an alert is unchanged.
#[tokio::test]
async fn webhook_bodies_carry_the_alert_and_its_kind() {
    use klaxon_core::alert::{AlertRef, AlertState};
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config("http://127.0.0.1:1"));
    let endpoint = sink.url("/hook");
    let resolved = alert(
        ChannelKind::Webhook,
        &endpoint,
        AlertState::Resolved,
        Some("alice"),
    );
    let mut firing = task(ChannelKind::Webhook, &endpoint, threshold(), &[("boom", 100)]);
    firing.alert = Some(AlertRef::of_firing(&resolved, ChannelKind::Webhook));
    let plain = task(ChannelKind::Webhook, &endpoint, threshold(), &[("boom", 100)]);
    let tasks = [
        firing,
        plain,
        lifecycle_task(&resolved, Reason::Resolved),
        lifecycle_task(&resolved, Reason::Acknowledged),
        lifecycle_task(&resolved, Reason::Reminder { number: 2, max: 3 }),
        lifecycle_task(&resolved, Reason::Escalation { step: 1, steps: 2 }),
    ];
    for t in &tasks {
        ch.deliver(t).await.expect("delivered");
    }
    let reqs = sink.wait_for_count(tasks.len(), WAIT).await;
    let bodies: Vec<serde_json::Value> = reqs.iter().map(|r| r.json()).collect();
    assert_eq!(bodies[0]["alertId"], resolved.id.as_str());
    assert!(
        bodies[0].get("kind").is_none() && bodies[0].get("alert").is_none(),
        "{}",
        bodies[0]
    );
    for absent in ["alertId", "kind", "alert", "reminder", "escalation"] {
        assert!(bodies[1].get(absent).is_none(), "{absent}: {}", bodies[1]);
    }
    let kinds: Vec<&str> = bodies[2..]
        .iter()
        .map(|b| b["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["resolved", "acknowledged", "reminder", "escalation"]);
    for ((b, r), t) in bodies[2..].iter().zip(&reqs[2..]).zip(&tasks[2..]) {
        assert_eq!(b["alertId"], resolved.id.as_str());
        assert_eq!(b["notificationId"], t.notification_id.as_str());
        assert_eq!(r.header("webhook-id"), Some(t.notification_id.as_str()));
    }
    assert_eq!(
        bodies[2]["alert"],
        serde_json::json!({"state": "resolved", "openedAt": "2023-11-14T19:59:20.123Z",
            "openForMs": 8_040_000, "events": 1240, "by": "alice"})
    );
    assert_eq!(bodies[2]["events"][0]["title"], resolved.title.as_str());
    assert_eq!(bodies[4]["reminder"], serde_json::json!({"number": 2, "max": 3}));
    assert_eq!(
        bodies[5]["escalation"],
        serde_json::json!({"step": 1, "steps": 2})
    );
    // each lifecycle message is its own notification (receivers deduplicate on the id)
    let mut ids: Vec<&str> = bodies
        .iter()
        .filter_map(|b| b["notificationId"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), bodies.len());
}
