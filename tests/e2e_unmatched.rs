//! Nothing is dropped without a trace: every event for which no rule can fire is counted by reason in
//! `klaxon_events_unmatched_total{reason}` and logged once per project per interval, naming the rule database —
//! through the real `klaxon run`, with one project per reason stored the way Hawk's garage (or a broken edit)
//! leaves it.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use mongodb::bson::{doc, oid::ObjectId, Bson, Document};

const T: Duration = Duration::from_secs(15);

fn rule(enabled: bool, what: &str, email_endpoint: &str) -> Document {
    doc! {
        "_id": ObjectId::new(), "isEnabled": enabled, "whatToReceive": what, "including": [], "excluding": [],
        "threshold": 1, "thresholdPeriod": 60_000,
        "channels": {"email": {"isEnabled": true, "endpoint": email_endpoint, "minPeriod": 0}},
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_no_rule_can_evaluate_are_counted_by_reason_and_logged_once_per_project() {
    let env = Env::new();
    let db = env.namespace.clone(); // --mongo-db defaults to the namespace
    let projects = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("mongo")
        .database(&db)
        .collection::<Document>("projects");
    let ok = "ops@example.test";
    // (reason, the project's stored notifications; None = no document at all)
    let cases: Vec<(&str, Option<Vec<Document>>)> = vec![
        ("project_unknown", None),
        ("no_rules", Some(vec![])),
        ("rules_invalid", Some(vec![rule(true, "SOMETIMES", ok)])),
        ("rules_disabled", Some(vec![rule(false, "ONLY_NEW", ok)])),
        ("no_channels", Some(vec![rule(true, "ONLY_NEW", "")])),
    ];
    let mut ids = Vec::new();
    for (reason, notifications) in &cases {
        let id = object_id();
        if let Some(n) = notifications {
            let n: Vec<Bson> = n.iter().cloned().map(Bson::Document).collect();
            projects
                .insert_one(doc! {"_id": ObjectId::parse_str(&id).expect("oid"), "notifications": n})
                .await
                .expect("insert");
        }
        ids.push((*reason, id));
    }
    // and one project whose rule is evaluated and filters the event out: not "unmatched"
    let filtered = object_id();
    let mut only_new = rule(true, "ONLY_NEW", ok);
    only_new.insert("including", vec!["never in the title"]);
    projects
        .insert_one(doc! {"_id": ObjectId::parse_str(&filtered).expect("oid"), "notifications": [only_new]})
        .await
        .expect("insert");

    let k = env.spawn("run", &[]);
    let publish = |project: &str| {
        env.publish(project, "TypeError: nobody listens", "g")
            .new_first()
            .count(2)
            .ok();
    };
    // two rounds of two events per project, in different batches
    for round in 1..=2u64 {
        for (_, id) in &ids {
            publish(id);
        }
        publish(&filtered);
        k.wait_acked(round * 2 * (ids.len() as u64 + 1), T);
    }
    for (reason, _) in &ids {
        let series = format!("klaxon_events_unmatched_total{{reason=\"{reason}\"}}");
        assert_eq!(k.metric(&series), 4.0, "{series}; log:\n{}", k.logs());
    }
    assert_eq!(
        k.metric(r#"klaxon_rules_matched_total"#),
        0.0,
        "nothing passed a filter"
    );
    let logs = k.logs();
    for (reason, id) in &ids {
        let lines: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("events not evaluated") && l.contains(id.as_str()))
            .collect();
        assert_eq!(lines.len(), 1, "{reason}: logged once per project:\n{logs}");
        // the rule database read is named (the line may carry colour codes between a field and its value)
        assert!(
            lines[0].contains(reason) && lines[0].contains(&db),
            "{}",
            lines[0]
        );
    }
    assert!(
        !logs
            .lines()
            .any(|l| l.contains("events not evaluated") && l.contains(&filtered)),
        "a filtered event is evaluated, not unmatched:\n{logs}"
    );
    drop(k);
    common::delete_queues(&env).await;
}
