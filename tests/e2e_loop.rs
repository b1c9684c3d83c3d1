//! Hawk's `loop` channel end to end: the real `klaxon run` delivers to a Mattermost-compatible incoming
//! webhook (`POST`, JSON `{"text"}`), and `rules check` lists `webPush`/`desktopPush` as ignored.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_is_delivered_and_push_channels_are_listed_as_ignored() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000,
            "channels": {
                "loop": {"isEnabled": true, "endpoint": sink.url("/hooks/abc"), "minPeriod": 0},
                "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0},
                "desktopPush": {"isEnabled": true, "endpoint": "y", "minPeriod": 0}
            }
        }]
    }]));

    let (_, stdout, stderr) = env.run(&["rules", "check", "--project", &project]);
    for ch in ["webPush", "desktopPush"] {
        assert!(
            stdout.contains(&format!("channel `{ch}` is ignored")),
            "{stdout}{stderr}"
        );
    }
    assert!(!stdout.contains("channel `loop`"), "loop is delivered: {stdout}");

    let mut k = env.spawn("run", &[]);
    let title = format!("ReferenceError: *x* is not defined ({})", env.namespace);
    env.publish(&project, &title, "g1").count(3).ok();
    let got = sink.wait_for_count(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].uri, "/hooks/abc");
    let body = got[0].json();
    let text = body["text"].as_str().unwrap_or_default();
    let escaped = title.replace('*', r"\*");
    assert!(text.contains(&escaped), "{text}");
    assert!(text.contains("Seen 2 times"), "{text}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.count(), 1, "threshold crossed once, one message");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #22, end to end: an error title written to page the whole team (`@channel @all @here`), link to an
/// attacker and hide its real text behind a bidi override reaches Loop, Slack and a webhook through the real
/// `klaxon run`. Loop gets no mention (a word joiner splits each `@word`), Slack shows it in a `rich_text` block,
/// the webhook carries it exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_titles_mention_nobody_and_link_nowhere() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
            "channels": {
                "loop": {"isEnabled": true, "endpoint": sink.url("/loop"), "minPeriod": 0},
                "slack": {"isEnabled": true, "endpoint": sink.url("/slack"), "minPeriod": 0},
                "webhook": {"isEnabled": true, "endpoint": sink.url("/webhook"), "minPeriod": 0}
            }
        }]
    }]));
    let mut k = env.spawn("run", &[]);
    let title = format!(
        "boom @channel @all @here <!channel> *bold* [x](https://evil.example) Invoice \u{202E}gpj.exe\u{202C} ({})",
        env.namespace
    );
    env.publish(&project, &title, "g1").new_first().ok();
    let got = sink.wait_for_count(3, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 3, "log:\n{}", k.logs());
    let body = |path: &str| {
        got.iter()
            .find(|r| r.uri == path)
            .unwrap_or_else(|| panic!("nothing at {path}"))
            .json()
    };
    let loop_text = body("/loop")["text"].as_str().unwrap_or_default().to_owned();
    for mention in ["@channel", "@all", "@here"] {
        assert!(
            !loop_text.contains(mention),
            "{mention} pages everyone: {loop_text}"
        );
    }
    assert!(loop_text.contains("@\u{2060}channel"), "{loop_text}");
    assert!(!loop_text.contains("[x](https://"), "{loop_text}");
    assert!(
        !loop_text.contains('\u{202E}') && loop_text.contains("&lt;U+202E&gt;"),
        "{loop_text}"
    );

    let slack = body("/slack");
    assert!(!slack["text"].as_str().unwrap_or_default().contains("<!channel>"));
    let blocks = slack["blocks"].as_array().expect("blocks");
    assert!(blocks.iter().all(|b| b["type"] == "rich_text"), "{slack}");

    assert_eq!(body("/webhook")["events"][0]["title"], title.as_str());
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
