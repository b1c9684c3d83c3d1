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
    env.ok(&[
        "publish",
        "--project",
        &project,
        "--title",
        &title,
        "--group",
        "g1",
        "--count",
        "3",
    ]);
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
