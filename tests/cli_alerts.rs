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

/// `klaxon alerts list` without `--project` lists the alerts of every project, each with its project's name:
/// one named by `klaxon projects name`, one by `rules import`'s `name`, one with none (its id is shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_of_every_project_are_listed_with_their_names() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let (named, imported, bare) = (object_id(), object_id(), object_id());
    let rule = object_id();

    // Names: checked before anything connects (exit 2), then stored.
    for bad in ["", "   ", &"x".repeat(101), "a\nb"] {
        let (code, out, err) = env.run(&["projects", "name", "--project", &named, bad]);
        assert_eq!(code, 2, "{bad:?}: {out}{err}");
        assert!(err.contains("project name"), "{err}");
    }
    let (code, out, err) = env.run(&["projects", "name", "--project", &named, "Acme <web> shop"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(out.trim(), format!("project {named} is named Acme <web> shop"));
    let (code, out, _) = env.run(&["projects", "name", "--project", &named]);
    assert_eq!((code, out.as_str()), (0, "Acme <web> shop\n"));
    env.import(&serde_json::json!([{"_id": imported, "name": "Billing", "notifications": []}]));

    let mut opened = Vec::new();
    for (i, p) in [&named, &imported, &bare].into_iter().enumerate() {
        let a = common::open_alert(
            &env,
            p,
            &rule,
            &format!("g{i}"),
            &format!("Boom {i}"),
            vec![common::webhook_channel(&sink.url("/hook"))],
        )
        .await;
        opened.push(a);
    }

    let (code, out, err) = env.run(&["alerts", "list", "-o", "json"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let list = v["alerts"].as_array().expect("alerts");
    assert_eq!(list.len(), 3, "{v}");
    let name_of = |project: &str| {
        list.iter()
            .find(|a| a["projectId"] == project)
            .map(|a| a["projectName"].clone())
            .unwrap_or_default()
    };
    assert_eq!(name_of(&named), "Acme <web> shop", "{v}");
    assert_eq!(name_of(&imported), "Billing", "{v}");
    assert_eq!(name_of(&bare), bare.as_str(), "no name: the id");
    for a in &opened {
        assert!(
            list.iter()
                .any(|x| x["id"] == a.id.as_str() && x["state"] == "firing"),
            "{v}"
        );
    }

    let (code, out, _) = env.run(&["alerts", "list"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("ALERT") && out.contains("PROJECT"), "{out}");
    assert!(
        out.contains("Acme <web> shop") && out.contains("Billing"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 4, "{out}");

    // State filters across projects.
    let (code, out, err) = env.run(&[
        "alerts",
        "ack",
        "--project",
        &imported,
        &opened[1].id,
        "--by",
        "ana",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, out, _) = env.run(&["alerts", "list", "--state", "acknowledged", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["alerts"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["alerts"][0]["projectName"], "Billing");
    assert_eq!(v["alerts"][0]["acknowledgedBy"], "ana");
    let (code, _, err) = env.run(&["alerts", "list", "--limit", "1001"]);
    assert_eq!(code, 2, "{err}");
    common::delete_queues(&env).await;
}

/// Alerts opened before the cross-project registry existed (`<ns>:al:projects` missing, as an earlier version
/// left Redis) are listed once a worker has started: `klaxon worker` registers them in the background, once per
/// namespace, and records that it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_from_before_the_registry_are_listed_after_a_worker_starts() {
    let env = Env::new();
    let (a, b) = (object_id(), object_id());
    let rule = object_id();
    for p in [&a, &b] {
        common::open_alert(&env, p, &rule, "g", "Old alert", Vec::new()).await;
    }
    let redis = klaxon_counter::RedisHandle::connect(&klaxon_testkit::redis_url())
        .await
        .expect("redis");
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{}:al:projects", env.namespace))
        .query_async(&mut redis.clone())
        .await
        .expect("del");
    let listed = |env: &Env| -> Vec<String> {
        let out = env.ok(&["alerts", "list", "-o", "json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut p: Vec<String> = v["alerts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["projectId"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        p.sort();
        p
    };
    assert!(listed(&env).is_empty(), "not found before the backfill");

    let mut k = env.spawn("worker", &[]);
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    let found = klaxon_testkit::wait_for(Duration::from_secs(20), || {
        let got = listed(&env);
        let ok = got == want;
        async move { ok.then_some(()) }
    })
    .await;
    assert!(found.is_some(), "{:?}; log:\n{}", listed(&env), k.logs());
    assert!(
        k.logs().contains("registered for the cross-project list"),
        "{}",
        k.logs()
    );
    let record: Option<String> = redis::cmd("GET")
        .arg(format!("{}:al:projects:backfilled", env.namespace))
        .query_async(&mut redis.clone())
        .await
        .expect("get");
    let record: Value = serde_json::from_str(&record.expect("recorded")).expect("json");
    assert_eq!(record["projects"], 2, "{record}");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
}
