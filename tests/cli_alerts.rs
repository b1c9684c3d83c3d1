//! `klaxon alerts list|ack|resolve` through the real binary, on a real alert (opened in Redis as a worker's
//! firing opens it) and a real `klaxon sender` delivering the lifecycle messages the CLI publishes.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_are_listed_acknowledged_and_resolved_from_the_command_line() {
    let env = Env::new().set("USER", "zoe");
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = object_id();

    // Usage errors first, before anything connects: exit 2.
    for args in [
        vec!["alerts", "list", "--project", "nope"],
        vec!["alerts", "list", "--project", &project, "--state", "open"],
        vec![
            "alerts",
            "ack",
            "--project",
            &project,
            "0123456789abcdef01234567",
            "--by",
            "",
        ],
    ] {
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
    }
    let (code, out, err) = env.run(&["alerts", "list", "--project", &project, "--state", "open"]);
    assert!(
        err.contains("firing, acknowledged, resolved"),
        "{code} {out}{err}"
    );

    let (code, out, err) = env.run(&["alerts", "list", "--project", &project]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "no alerts\n", ""));

    let a = common::open_alert(
        &env,
        &project,
        &rule,
        "g1",
        "Boom\tat checkout",
        vec![common::webhook_channel(&sink.url("/hook"))],
    )
    .await;

    // The table, and the API's JSON shape.
    let (code, out, err) = env.run(&["alerts", "list", "--project", &project]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.starts_with("ALERT"), "{out}");
    let row = out.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with(&a.id) && row.contains("firing") && row.contains("Boom at checkout"),
        "{out}"
    );
    let (code, out, _) = env.run(&["alerts", "list", "--project", &project, "-o", "json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["alerts"][0]["id"].as_str(), Some(a.id.as_str()), "{v}");
    assert_eq!(v["alerts"][0]["state"], "firing", "{v}");

    // Unknown alert: exit 1 with a clear message.
    let (code, out, err) = env.run(&["alerts", "ack", "--project", &project, "0123456789abcdef01234567"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("no alert `0123456789abcdef01234567`"), "{err}");

    // Acknowledge: its result and nothing else; the sender delivers the acknowledged message.
    let sender = env.spawn("sender", &[]);
    sender.wait_ready(Duration::from_secs(30));
    let (code, out, err) = env.run(&["alerts", "ack", "--project", &project, &a.id, "--by", "ana"]);
    assert_eq!(
        (code, out.trim(), err.as_str()),
        (0, format!("acknowledged alert {} by ana", a.id).as_str(), "")
    );
    let got = sink.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "{}", sender.logs());
    let ack = klaxon_core::alert::lifecycle_tasks(&a, klaxon_core::Reason::Acknowledged, 0);
    assert_eq!(
        got[0].json()["notificationId"].as_str(),
        Some(ack[0].notification_id.as_str())
    );
    let (code, _, err) = env.run(&["alerts", "ack", "--project", &project, &a.id]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already acknowledged by ana"), "{err}");

    // Resolve, by $USER.
    let (code, out, err) = env.run(&["alerts", "resolve", "--project", &project, &a.id]);
    assert_eq!(
        (code, out.trim(), err.as_str()),
        (0, format!("resolved alert {} by zoe", a.id).as_str(), "")
    );
    let got = sink.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{}", sender.logs());
    // Acknowledging a resolved alert says so.
    let (code, _, err) = env.run(&["alerts", "ack", "--project", &project, &a.id]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is resolved by zoe"), "{err}");
    let (code, _, err) = env.run(&["alerts", "resolve", "--project", &project, &a.id]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already resolved by zoe"), "{err}");
    let (_, out, _) = env.run(&[
        "alerts",
        "list",
        "--project",
        &project,
        "--state",
        "resolved",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["alerts"][0]["resolvedBy"], "zoe", "{v}");
    // the replays were dropped by the sender: still one delivery per change
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sink.count(), 2);
}
