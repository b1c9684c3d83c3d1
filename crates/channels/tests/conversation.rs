//! An alert as one conversation, against local recording HTTP servers: Discord (`?wait=true` answers the
//! message id, lifecycle messages `PATCH …/messages/<id>` and post anew) and the Telegram Bot API (`sendMessage`
//! answers `result.message_id`, lifecycle messages `editMessageText` and reply with `reply_parameters`). An edit
//! that fails never stops the lifecycle message.

mod common;

use std::time::Duration;

use common::*;
use klaxon_channels::{Channels, Delivered, Edit, MessageRef};
use klaxon_core::alert::{Alert, AlertState};
use klaxon_core::{ChannelKind, NotificationTask, Reason};
use klaxon_testkit::{HttpSink, Reply};

const WAIT: Duration = Duration::from_secs(5);
const DISCORD_ID: &str = "112233445566778899";

/// The alert's first firing on its channel, as the engine publishes it.
fn first_firing(alert: &Alert) -> NotificationTask {
    let ch = &alert.channels[0];
    let mut t = task(ch.channel, &ch.endpoint, threshold(), &[(&alert.title, 100)]);
    t.project_id = alert.project_id.clone();
    t.rule_id = alert.rule_id.clone();
    t.notification_id = alert.firing_notification_id(ch.channel);
    t.alert = Some(alert.reference(ch.channel));
    t
}

/// The same alert later, in `state`, `by` who did it.
fn later(alert: &Alert, state: AlertState, by: &str) -> Alert {
    let mut a = alert.clone();
    a.state = state;
    match state {
        AlertState::Resolved => a.resolved_by = Some(by.into()),
        AlertState::Acknowledged => a.acknowledged_by = Some(by.into()),
        AlertState::Firing => {}
    }
    a
}

fn discord_sink_replies(sink: &HttpSink) {
    sink.route(
        |r| r.method == "POST" && r.uri.contains("wait=true"),
        Reply::status(200).body(&format!(r#"{{"id":"{DISCORD_ID}","type":0,"embeds":[]}}"#)),
    );
    sink.route(|r| r.method == "PATCH", Reply::status(200).body(r#"{"id":"x"}"#));
    sink.set_default(Reply::status(204));
}

#[tokio::test]
async fn discord_edits_the_firing_message_and_posts_the_resolve() {
    let sink = HttpSink::start().await.expect("sink");
    discord_sink_replies(&sink);
    let ch = channels(config("http://127.0.0.1:1"));
    let path = format!("/api/webhooks/1/{ENDPOINT_SECRET}");
    let opened = alert(ChannelKind::Discord, &sink.url(&path), AlertState::Firing, None);
    let firing = first_firing(&opened);
    assert!(Channels::opens_conversation(&firing));

    let delivered = ch.deliver(&firing).await.expect("firing delivered");
    let sent = delivered.sent.clone().expect("the firing's message is named");
    assert_eq!(sent.message_id, DISCORD_ID);
    assert_eq!(sent.destination, Channels::destination_key(&firing));
    assert!(
        !sent.destination.contains(ENDPOINT_SECRET),
        "{}",
        sent.destination
    );
    let reqs = sink.wait_for_count(1, WAIT).await;
    assert_eq!(reqs[0].uri, format!("{path}?wait=true"));
    assert_eq!(
        sent.body.as_deref(),
        Some(reqs[0].text().as_str()),
        "the body as sent"
    );

    // a later firing of the same alert (another notification id) is a plain message: no wait, nothing to keep
    let mut again = firing.clone();
    again.notification_id.push_str("-again");
    assert!(!Channels::opens_conversation(&again));
    assert_eq!(ch.deliver(&again).await.expect("delivered").sent, None);
    assert_eq!(sink.wait_for_count(2, WAIT).await[1].uri, path);

    let resolve = lifecycle_task(&later(&opened, AlertState::Resolved, "timeout"), Reason::Resolved);
    let delivered = ch
        .deliver_in(&resolve, Some(&sent))
        .await
        .expect("resolve delivered");
    assert_eq!(delivered.edit, Some(Edit::Edited));
    assert_eq!(delivered.sent, None);
    let reqs = sink.wait_for_count(4, WAIT).await;
    let (patch, post) = (&reqs[2], &reqs[3]);
    assert_eq!(patch.method, "PATCH");
    assert_eq!(patch.uri, format!("{path}/messages/{DISCORD_ID}"));
    let edited = patch.json();
    let first = &edited["embeds"][0];
    let description = first["description"].as_str().expect("description");
    assert!(
        description.starts_with("**Resolved after 2 h 14 min, 1,240 events · resolved automatically**\n"),
        "{description}"
    );
    let original: serde_json::Value =
        serde_json::from_str(sent.body.as_deref().unwrap_or_default()).expect("json");
    let original_description = original["embeds"][0]["description"]
        .as_str()
        .expect("description");
    assert!(description.ends_with(original_description), "{description}");
    assert_eq!(
        first["title"], original["embeds"][0]["title"],
        "the firing's title stays"
    );
    assert_eq!(first["color"], 0x0057_F287, "green: resolved");
    assert_eq!(edited["allowed_mentions"], serde_json::json!({"parse": []}));
    // then the resolve as a message of its own, as before
    assert_eq!((post.method.as_str(), post.uri.as_str()), ("POST", path.as_str()));
    let title = post.json()["embeds"][0]["title"]
        .as_str()
        .expect("title")
        .to_owned();
    assert!(title.starts_with("Resolved: TypeError"), "{title}");
}

#[tokio::test]
async fn discord_sends_the_lifecycle_message_when_the_edit_fails_or_cannot_be_made() {
    let sink = HttpSink::start().await.expect("sink");
    sink.route(
        |r| r.method == "PATCH",
        Reply::status(404).body(r#"{"message": "Unknown Message", "code": 10008}"#),
    );
    sink.set_default(Reply::status(204));
    let ch = channels(config("http://127.0.0.1:1"));
    let path = format!("/api/webhooks/1/{ENDPOINT_SECRET}");
    let opened = alert(ChannelKind::Discord, &sink.url(&path), AlertState::Firing, None);
    let ack = lifecycle_task(
        &later(&opened, AlertState::Acknowledged, "alice"),
        Reason::Acknowledged,
    );
    let firing = MessageRef {
        message_id: DISCORD_ID.into(),
        destination: Channels::destination_key(&ack),
        body: Some(r#"{"embeds":[{"title":"TypeError","description":"Seen 100 times","color":1}]}"#.into()),
    };

    // the message was deleted: 404 on the edit, the acknowledgement is sent all the same
    let delivered = ch.deliver_in(&ack, Some(&firing)).await.expect("delivered");
    assert_eq!(delivered.edit, Some(Edit::Failed));
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs[0].method, "PATCH");
    let state = reqs[0].json()["embeds"][0]["description"]
        .as_str()
        .expect("d")
        .to_owned();
    assert!(
        state.starts_with("**Acknowledged by alice · firing for 2 h 14 min, 1,240 events**\n"),
        "{state}"
    );
    assert_eq!(
        (reqs[1].method.as_str(), reqs[1].uri.as_str()),
        ("POST", path.as_str())
    );

    // another destination's message (an escalation's own webhook), an id that is not one, or no body: no
    // PATCH, the message goes out
    let elsewhere = MessageRef {
        destination: "discord:example.com/other".into(),
        ..firing.clone()
    };
    let bad_id = MessageRef {
        message_id: "../../x".into(),
        ..firing.clone()
    };
    let no_body = MessageRef {
        body: None,
        ..firing.clone()
    };
    let mut n = 2;
    for (f, edit) in [
        (&elsewhere, None),
        (&bad_id, Some(Edit::Failed)),
        (&no_body, Some(Edit::Failed)),
    ] {
        let d: Delivered = ch.deliver_in(&ack, Some(f)).await.expect("delivered");
        assert_eq!(d.edit, edit, "{f:?}");
        n += 1;
        let reqs = sink.wait_for_count(n, WAIT).await;
        assert_eq!(reqs.len(), n);
        assert_eq!(reqs[n - 1].method, "POST");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(sink.requests().iter().filter(|r| r.method == "PATCH").count() == 1);
}

fn telegram_sink_replies(sink: &HttpSink, edit: Reply) {
    sink.route(|r| r.uri.ends_with("/editMessageText"), edit);
    sink.set_default(
        Reply::status(200).body(r#"{"ok":true,"result":{"message_id":42,"chat":{"id":-100123}}}"#),
    );
}

#[tokio::test]
async fn telegram_edits_the_firing_message_and_replies_to_it() {
    let sink = HttpSink::start().await.expect("sink");
    telegram_sink_replies(
        &sink,
        Reply::status(200).body(r#"{"ok":true,"result":{"message_id":42}}"#),
    );
    let ch = channels(config(&sink.url("")));
    let opened = alert(ChannelKind::Telegram, "-1001234567890", AlertState::Firing, None);
    let firing = first_firing(&opened);

    let delivered = ch.deliver(&firing).await.expect("firing delivered");
    let sent = delivered.sent.clone().expect("the firing's message is named");
    assert_eq!(sent.message_id, "42");
    let reqs = sink.wait_for_count(1, WAIT).await;
    let firing_text = reqs[0].json()["text"].as_str().expect("text").to_owned();
    assert_eq!(sent.body.as_deref(), Some(firing_text.as_str()));
    assert!(
        reqs[0].json().get("reply_parameters").is_none(),
        "a firing replies to nothing"
    );

    let ack = lifecycle_task(
        &later(&opened, AlertState::Acknowledged, "<b>alice</b>"),
        Reason::Acknowledged,
    );
    let delivered = ch.deliver_in(&ack, Some(&sent)).await.expect("ack delivered");
    assert_eq!(delivered.edit, Some(Edit::Edited));
    let reqs = sink.wait_for_count(3, WAIT).await;
    assert_eq!(reqs[1].uri, format!("/bot{TOKEN}/editMessageText"));
    let edit = reqs[1].json();
    assert_eq!(edit["chat_id"], "-1001234567890");
    assert_eq!(edit["message_id"], 42);
    assert_eq!(edit["parse_mode"], "HTML");
    let text = edit["text"].as_str().expect("text");
    assert_eq!(
        text,
        format!(
            "<b>Acknowledged by &lt;b&gt;alice&lt;/b&gt; · firing for 2 h 14 min, 1,240 events</b>\n{firing_text}"
        )
    );
    assert_eq!(reqs[2].uri, format!("/bot{TOKEN}/sendMessage"));
    let reply = reqs[2].json();
    assert_eq!(
        reply["reply_parameters"],
        serde_json::json!({"message_id": 42, "allow_sending_without_reply": true})
    );
    assert!(reply["text"]
        .as_str()
        .expect("text")
        .starts_with("<b>Acknowledged: TypeError"));
}

#[tokio::test]
async fn telegram_replies_when_the_edit_fails() {
    let sink = HttpSink::start().await.expect("sink");
    telegram_sink_replies(
        &sink,
        Reply::status(400)
            .body(r#"{"ok":false,"error_code":400,"description":"Bad Request: message to edit not found"}"#),
    );
    let ch = channels(config(&sink.url("")));
    let opened = alert(ChannelKind::Telegram, "-1001234567890", AlertState::Firing, None);
    let resolve = lifecycle_task(&later(&opened, AlertState::Resolved, "timeout"), Reason::Resolved);
    let firing = MessageRef {
        message_id: "42".into(),
        destination: Channels::destination_key(&resolve),
        body: Some("<b>TypeError</b>\nSeen 100 times".into()),
    };
    let delivered = ch.deliver_in(&resolve, Some(&firing)).await.expect("delivered");
    assert_eq!(delivered.edit, Some(Edit::Failed));
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert!(reqs[0].uri.ends_with("/editMessageText"));
    assert!(reqs[0].json()["text"].as_str().expect("text").starts_with(
        "<b>Resolved after 2 h 14 min, 1,240 events · resolved automatically</b>\n<b>TypeError</b>"
    ));
    assert!(reqs[1].uri.ends_with("/sendMessage"));
    assert_eq!(reqs[1].json()["reply_parameters"]["message_id"], 42);

    // no remembered message: a plain message, as before
    let plain = ch.deliver_in(&resolve, None).await.expect("delivered");
    assert_eq!(plain.edit, None);
    let reqs = sink.wait_for_count(3, WAIT).await;
    assert!(reqs[2].uri.ends_with("/sendMessage"));
    assert!(reqs[2].json().get("reply_parameters").is_none());
}

const SLACK_CHANNEL: &str = "C0123ABCD";
const SLACK_TS: &str = "1712345678.123456";

/// The Slack Web API: `chat.postMessage` answers the message's `channel` and `ts`, `chat.update` answers ok
/// unless `update` says otherwise.
fn slack_sink_replies(sink: &HttpSink, update: Reply) {
    sink.route(|r| r.uri == "/chat.update", update);
    sink.set_default(Reply::status(200).body(&format!(
        r#"{{"ok":true,"channel":"{SLACK_CHANNEL}","ts":"{SLACK_TS}","message":{{"text":"x"}}}}"#
    )));
}

#[tokio::test]
async fn slack_web_api_edits_the_firing_message_and_replies_in_its_thread() {
    let sink = HttpSink::start().await.expect("sink");
    slack_sink_replies(&sink, Reply::status(200).body(r#"{"ok":true}"#));
    let ch = channels(config(&sink.url("")));
    let opened = alert(ChannelKind::Slack, SLACK_CHANNEL, AlertState::Firing, None);
    let firing = first_firing(&opened);
    assert!(Channels::opens_conversation(&firing));
    assert_eq!(Channels::host_key(&firing), "slack-api");

    let delivered = ch.deliver(&firing).await.expect("firing delivered");
    let sent = delivered.sent.clone().expect("the firing's message is named");
    assert_eq!(sent.message_id, format!("{SLACK_CHANNEL}/{SLACK_TS}"));
    assert_eq!(sent.destination, Channels::destination_key(&firing));
    let reqs = sink.wait_for_count(1, WAIT).await;
    let post = &reqs[0];
    assert_eq!(
        (post.method.as_str(), post.uri.as_str()),
        ("POST", "/chat.postMessage")
    );
    assert_eq!(
        post.header("authorization"),
        Some(format!("Bearer {SLACK_TOKEN}").as_str())
    );
    assert!(post
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
    let body = post.json();
    assert_eq!(body["channel"], SLACK_CHANNEL);
    assert!(body.get("thread_ts").is_none(), "a firing starts the thread");
    assert!(body["text"].as_str().expect("text").contains("TypeError"));
    assert_eq!(body["blocks"][0]["type"], "rich_text");
    assert!(!post.text().contains(SLACK_TOKEN), "the token only in the header");
    // the preview shows the same request
    let preview = ch.preview(&firing).expect("preview");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&preview.bodies[0]).expect("json")["channel"],
        SLACK_CHANNEL
    );

    let ack = lifecycle_task(
        &later(&opened, AlertState::Acknowledged, "*alice*"),
        Reason::Acknowledged,
    );
    let delivered = ch.deliver_in(&ack, Some(&sent)).await.expect("ack delivered");
    assert_eq!(delivered.edit, Some(Edit::Edited));
    assert_eq!(delivered.sent, None);
    let reqs = sink.wait_for_count(3, WAIT).await;
    let (update, reply) = (&reqs[1], &reqs[2]);
    assert_eq!(update.uri, "/chat.update");
    let edit = update.json();
    assert_eq!(
        (edit["channel"].as_str(), edit["ts"].as_str()),
        (Some(SLACK_CHANNEL), Some(SLACK_TS))
    );
    let text = edit["text"].as_str().expect("text");
    assert!(
        text.starts_with("*Acknowledged by "),
        "the state line first: {text}"
    );
    assert!(text.ends_with(body["text"].as_str().expect("text")), "{text}");
    // the state as the first block, `by` shown literally (tenant text), then the firing's blocks
    let state = &edit["blocks"][0]["elements"][0]["elements"];
    assert_eq!(state[0]["text"], "Acknowledged by ");
    assert_eq!(state[1]["text"], "*alice*");
    assert_eq!(state[2]["text"], " · firing for 2 h 14 min, 1,240 events");
    assert_eq!(edit["blocks"][1], body["blocks"][0]);
    assert_eq!(reply.uri, "/chat.postMessage");
    let reply = reply.json();
    assert_eq!(reply["channel"], SLACK_CHANNEL);
    assert_eq!(reply["thread_ts"], SLACK_TS);
    assert!(reply["text"].as_str().expect("text").contains("Acknowledged: "));
}

#[tokio::test]
async fn slack_web_api_replies_when_the_edit_fails_and_posts_plainly_without_a_conversation() {
    let sink = HttpSink::start().await.expect("sink");
    slack_sink_replies(
        &sink,
        Reply::status(200).body(r#"{"ok":false,"error":"message_not_found"}"#),
    );
    let ch = channels(config(&sink.url("")));
    let opened = alert(ChannelKind::Slack, SLACK_CHANNEL, AlertState::Firing, None);
    let resolve = lifecycle_task(&later(&opened, AlertState::Resolved, "timeout"), Reason::Resolved);
    let firing = MessageRef {
        message_id: format!("{SLACK_CHANNEL}/{SLACK_TS}"),
        destination: Channels::destination_key(&resolve),
        body: Some(r#"{"text":"*TypeError*","blocks":[]}"#.into()),
    };
    let delivered = ch.deliver_in(&resolve, Some(&firing)).await.expect("delivered");
    assert_eq!(delivered.edit, Some(Edit::Failed));
    let reqs = sink.wait_for_count(2, WAIT).await;
    assert_eq!(reqs[0].uri, "/chat.update");
    assert_eq!(reqs[1].uri, "/chat.postMessage");
    assert_eq!(reqs[1].json()["thread_ts"], SLACK_TS);

    // an id read back that is not `<channel>/<ts>`: no edit, a plain message to the endpoint
    let bad = MessageRef {
        message_id: "C0123ABCD/../../x".into(),
        ..firing.clone()
    };
    let plain = ch.deliver_in(&resolve, Some(&bad)).await.expect("delivered");
    assert_eq!(plain.edit, None);
    let reqs = sink.wait_for_count(3, WAIT).await;
    assert_eq!(reqs[2].uri, "/chat.postMessage");
    assert!(reqs[2].json().get("thread_ts").is_none());
    assert_eq!(reqs[2].json()["channel"], SLACK_CHANNEL);
}

#[tokio::test]
async fn slack_web_api_errors_are_classified_and_never_show_the_token() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config(&sink.url("")));
    let t = task(ChannelKind::Slack, SLACK_CHANNEL, threshold(), &[("boom", 100)]);
    let cases = [
        (
            Reply::status(200).body(r#"{"ok":false,"error":"channel_not_found"}"#),
            false,
            "channel_not_found",
        ),
        (
            Reply::status(200).body(r#"{"ok":false,"error":"not_in_channel"}"#),
            false,
            "/invite",
        ),
        (
            Reply::status(200).body(r#"{"ok":false,"error":"invalid_auth"}"#),
            false,
            "KLAXON_SLACK_BOT_TOKEN",
        ),
        (
            Reply::status(200).body(r#"{"ok":false,"error":"internal_error"}"#),
            true,
            "internal_error",
        ),
        (
            Reply::status(429)
                .header("Retry-After", "7")
                .body(r#"{"ok":false,"error":"ratelimited"}"#),
            true,
            "429",
        ),
        (Reply::status(503).body("upstream down"), true, "503"),
        // an answer that echoes the token is scrubbed
        (
            Reply::status(200).body(&format!(r#"{{"ok":false,"error":"bad {SLACK_TOKEN}"}}"#)),
            false,
            "failed",
        ),
        (Reply::status(200).body("<html>proxy</html>"), true, "not JSON"),
    ];
    for (reply, transient, says) in cases {
        sink.script([reply]);
        let err = ch.deliver(&t).await.expect_err("fails");
        assert_eq!(err.is_transient(), transient, "{err:?}");
        assert!(err.reason().contains(says), "{says}: {err}");
        assert_secret_free(&err);
        if says == "429" {
            assert!(err.is_rate_limited(), "{err:?}");
            assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        }
    }

    // no token, or an endpoint that is neither a channel id nor a URL: permanent, nothing sent
    let before = sink.count();
    let no_token = channels(klaxon_channels::ChannelsConfig {
        slack_bot_token: None,
        ..config(&sink.url(""))
    });
    let err = no_token.deliver(&t).await.expect_err("no token");
    assert!(
        !err.is_transient() && err.reason().contains("KLAXON_SLACK_BOT_TOKEN"),
        "{err}"
    );
    let err = ch
        .deliver(&task(ChannelKind::Slack, "#alerts", threshold(), &[("boom", 1)]))
        .await
        .expect_err("a channel name");
    assert!(
        !err.is_transient() && err.reason().contains("channel id"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(sink.count(), before);
}
