//! Rules end to end: a broken rule beside a good one — the good one still notifies, the broken one is reported.

mod common;

use std::time::Duration;

use common::{json_file, object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rule_beside_a_good_one_is_reported_and_the_good_one_fires() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    let bad_id = "5f0000000000000000000b0d";
    let rules = json!([{
        "_id": project,
        "notifications": [
            {"_id": bad_id, "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 0, "thresholdPeriod": 60000,
             "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/bad"), "minPeriod": 0}}},
            {"isEnabled": true, "whatToReceive": "ONLY_NEW", "uidAdded": "5e0000000000000000000001",
             "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/good"), "minPeriod": 0},
                          "webPush": {"isEnabled": true, "endpoint": "x", "minPeriod": 0}}}
        ]
    }]);
    let file = json_file(&env, "rules", &rules);
    let (code, _, err) = env.run(&["rules", "import", "--file", file.to_str().expect("path")]);
    assert_ne!(code, 0, "import refuses an unusable rule without --force");
    assert!(err.contains(bad_id), "{err}");
    env.import_force(&rules);

    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 1, "check exits 1 when a rule has a problem: {out}{err}");
    assert!(format!("{out}{err}").contains(bad_id));
    assert!(format!("{out}{err}").contains("threshold"));

    let mut k = env.spawn("run", &[]);
    let title = format!("Fresh error ({})", env.namespace);
    env.publish(&project, &title, "fresh").new_first().ok();
    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    assert_eq!(got[0].uri, "/good");
    k.wait_acked(1, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0,
        "the bad rule beside it published nothing"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(slack.count(), 1);
    assert!(
        k.logs().contains(bad_id),
        "the unusable rule is reported in the log"
    );
    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert!(!metrics.contains("klaxon_rules_problems_total 0\n"), "{metrics}");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// A hostile `minPeriod` (1e19 s: PEXPIRE out of range, and it used to wrap negative) makes its rule unusable at
/// read time — refused by import, reported by check — and never a Redis error at run time: the project's sane rule
/// and another project's events in the same batches still fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_min_period_is_refused_and_the_sane_rules_beside_it_fire() {
    let env = Env::new();
    let slack = HttpSink::start().await.expect("sink");
    let (project, other) = (object_id(), object_id());
    let hostile_id = "5f0000000000000000000b0e";
    let rules = json!([
        {"_id": project, "notifications": [
            {"_id": hostile_id, "isEnabled": true, "whatToReceive": "ONLY_NEW",
             "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/hostile"), "minPeriod": 1e19}}},
            {"isEnabled": true, "whatToReceive": "ONLY_NEW",
             "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/sane"), "minPeriod": 0}}}]},
        {"_id": other, "notifications": [
            {"isEnabled": true, "whatToReceive": "ONLY_NEW",
             "channels": {"slack": {"isEnabled": true, "endpoint": slack.url("/other"), "minPeriod": 0}}}]}
    ]);
    let file = json_file(&env, "hostile", &rules);
    let path = file.to_str().expect("path");
    let (code, _, err) = env.run(&["rules", "import", "--file", path]);
    assert_ne!(code, 0, "import refuses the hostile rule without --force");
    assert!(err.contains(hostile_id) && err.contains("minPeriod"), "{err}");
    env.ok(&["rules", "import", "--force", "--file", path]);
    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(format!("{out}{err}").contains("over the limit"), "{out}{err}");

    let k = env.spawn("run", &[]);
    for (p, g) in [(&project, "h1"), (&other, "o1"), (&project, "h2")] {
        env.publish(p, "Boom", g).new_first().ok();
    }
    k.wait_acked(3, Duration::from_secs(30));
    let got = slack.wait_for_count(3, Duration::from_secs(30)).await;
    let mut uris: Vec<String> = got.iter().map(|r| r.uri.clone()).collect();
    uris.sort();
    assert_eq!(uris, ["/other", "/sane", "/sane"], "log:\n{}", k.logs());
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        3.0,
        "the hostile rule published nothing"
    );
    common::delete_queues(&env).await;
}
