//! docs/hawk.md's cut-over runbook, run as written: the page's commands are read from the page itself and run in
//! its order against a Hawk-shaped installation — a classic `notifier` queue declared as Hawk's grouper declares it
//! (`assertQueue`: durable, no arguments), rules written in Hawk's shape (hawk.api's default rule) into a database
//! named like Hawk's accounts database (`hawk`), and the settings of deploy/kubernetes/configmap.yaml
//! (`KLAXON_QUEUE_TYPE: "quorum"` included). Checked on the way: Klaxon consumes Hawk's classic queue as it is (no
//! PRECONDITION_FAILED loop), shadow mode records and publishes nothing, `--output hawk` publishes Hawk's sender
//! tasks with `"repetitionId": null`, events of an unknown project are counted, and the full-delivery line puts a
//! link to Hawk's garage in the email.
//!
//! Only what is specific to an installation is the test's own: the connection URLs (the page shows placeholders),
//! the namespaces (unique per run, `klaxon-shadow` becomes `<ns>-shadow`) and `<projectId>`. `notifier` and
//! `sender/email` are global names on the broker: this file keeps to one end-to-end test and looks only at its own
//! project's messages.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_broker::{Broker, BrokerError, Consumer, Outgoing, QueueType, Topology};
use mongodb::bson::{doc, oid::ObjectId, Document};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(10);

/// The runbook's command lines, in the order the page gives them and this test runs them.
const CHECK: &str = "klaxon rules check --project <projectId>";
const SHADOW: &str = "klaxon run --output shadow --namespace klaxon-shadow";
const LIST_SHADOW: &str = "klaxon deliveries list --status shadow";
const SWITCH: &str = "klaxon run --output hawk";
const FULL_DELIVERY: &str = "klaxon run --event-url-template \
    'https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview'";
const COMMANDS: [&str; 5] = [CHECK, SHADOW, LIST_SHADOW, SWITCH, FULL_DELIVERY];
/// The variables the runbook exports; the URLs among them are placeholders this test replaces with its services.
const EXPORTED: [&str; 6] = [
    "KLAXON_AMQP_URL",
    "KLAXON_MONGO_URL",
    "KLAXON_MONGO_DB",
    "KLAXON_REDIS_URL",
    "KLAXON_EVENTS_QUEUE",
    "KLAXON_INCLUDING_CASE",
];
const SERVICE_URLS: [&str; 3] = ["KLAXON_AMQP_URL", "KLAXON_MONGO_URL", "KLAXON_REDIS_URL"];

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Words of a shell line: blanks split, single quotes group (all the runbook uses).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {line:?}");
    if any {
        out.push(cur);
    }
    out
}

/// The runbook as the page has it: exported variables (name, value) and command lines, from the `sh` blocks of
/// its "## Cut-over runbook" section. Any other line in those blocks fails: the test would not run it.
fn runbook() -> (Vec<(String, String)>, Vec<String>) {
    let doc = std::fs::read_to_string(root().join("docs/hawk.md")).expect("docs/hawk.md");
    let section = doc
        .split("\n## Cut-over runbook\n")
        .nth(1)
        .expect("docs/hawk.md has a `## Cut-over runbook` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let (mut exports, mut commands) = (Vec::new(), Vec::new());
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim()) {
            (false, "```sh") => in_block = true,
            (false, l) if l.starts_with("```") => panic!("runbook blocks are `sh` blocks: {l}"),
            (true, "```") => in_block = false,
            (true, l) if l.is_empty() || l.starts_with('#') => {}
            (true, l) if l.starts_with("export ") => {
                let (k, v) = l["export ".len()..]
                    .split_once('=')
                    .unwrap_or_else(|| panic!("export without a value: {l}"));
                let v = words(v);
                assert_eq!(v.len(), 1, "one value: {l}");
                exports.push((k.to_owned(), v[0].clone()));
            }
            (true, l) if l.starts_with("klaxon ") => commands.push(l.to_owned()),
            (true, l) => panic!("a runbook line this test does not run: {l}"),
            (false, _) => {}
        }
    }
    (exports, commands)
}

/// The page's commands are exactly the ones the test below runs, in the same order.
#[test]
fn runbook_commands_are_the_ones_this_test_runs() {
    let (exports, commands) = runbook();
    let ours: Vec<String> = COMMANDS.iter().map(|c| words(c).join(" ")).collect();
    let page: Vec<String> = commands.iter().map(|c| words(c).join(" ")).collect();
    assert_eq!(
        page, ours,
        "docs/hawk.md's runbook (left) and tests/e2e_cutover.rs (right) differ"
    );
    let names: Vec<&str> = exports.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, EXPORTED, "the variables the runbook exports");
    let value = |k: &str| exports.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(value("KLAXON_EVENTS_QUEUE"), Some("notifier"));
    assert_eq!(value("KLAXON_MONGO_DB"), Some("hawk"));
}

/// deploy/kubernetes/configmap.yaml's `data`, as (name, value).
fn configmap() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("deploy/kubernetes/configmap.yaml")).expect("configmap");
    let data = text.split("\ndata:\n").nth(1).expect("a data: section");
    data.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| l.starts_with("KLAXON_"))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.trim().trim_matches('"').to_owned()))
        .collect()
}

/// A command line of the runbook as arguments for the binary (without `klaxon`), with the test's own
/// project id and shadow namespace.
fn args(line: &str, project: &str, env: &Env) -> Vec<String> {
    let w = words(line);
    assert_eq!(w.first().map(String::as_str), Some("klaxon"), "{line}");
    w[1..]
        .iter()
        .map(|a| match a.as_str() {
            "<projectId>" => project.to_owned(),
            "klaxon-shadow" => format!("{}-shadow", env.namespace),
            _ => a.clone(),
        })
        .collect()
}

fn run_line(env: &Env, line: &str, project: &str) -> String {
    let a = args(line, project, env);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    env.ok(&a)
}

fn spawn_line(env: &Env, line: &str, project: &str) -> common::Klaxon {
    let a = args(line, project, env);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    assert_eq!(a.first(), Some(&"run"), "{line}");
    env.spawn("run", &a[1..])
}

/// hawk.api's default rule (`SEEN_MORE`, email on, the other channels off with an empty endpoint, `minPeriod: 60`
/// everywhere), with the given kind, threshold and `including`.
fn hawk_rule(id: ObjectId, what: &str, threshold: i32, including: &[&str], email: &str) -> Document {
    let off = doc! {"isEnabled": false, "endpoint": "", "minPeriod": 60};
    doc! {
        "_id": id, "uidAdded": ObjectId::new(), "isEnabled": true, "whatToReceive": what,
        "including": including.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "excluding": Vec::<String>::new(),
        "threshold": threshold, "thresholdPeriod": 3_600_000_i64,
        "channels": {
            "email": {"isEnabled": true, "endpoint": email, "minPeriod": 60},
            "telegram": off.clone(), "slack": off.clone(), "loop": off,
        },
    }
}

/// An event as Hawk's grouper publishes it: default exchange, routing key `notifier`, no `message_id`.
fn grouper_task(project: &str, title: &str, group: &str, is_new: bool, repetition: Option<&str>) -> Outgoing {
    let body = json!({"projectId": project,
        "event": {"title": title, "groupHash": group, "isNew": is_new, "repetitionId": repetition}});
    Outgoing::json("notifier", body.to_string().into_bytes())
}

/// True when `queue` is a plain classic queue (Hawk's `assertQueue(name)` agrees with it).
async fn is_plain_classic(queue: &str) -> bool {
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("amqp");
    let publisher = broker.publisher().await.expect("publisher");
    let plain = publisher.declare_plain(queue).await;
    broker.close().await;
    match plain {
        Ok(()) => true,
        Err(BrokerError::Incompatible { .. }) => false,
        Err(e) => panic!("declaring {queue}: {e}"),
    }
}

/// Takes `project`'s tasks from `consumer` for `within` (at most `n`); others' are acked and dropped.
async fn take(consumer: &mut Consumer, project: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let Some(Some(Ok(d))) = consumer.next_within(left).await else {
            break;
        };
        consumer.ack(d.delivery_tag).await.expect("ack");
        let body: Value = serde_json::from_slice(&d.data).unwrap_or(Value::Null);
        if body["payload"]["projectId"] == project {
            out.push(body);
        }
    }
    out
}

fn no_precondition_loop(k: &common::Klaxon) {
    let logs = k.logs();
    assert!(
        !logs.contains("PRECONDITION_FAILED") && !logs.contains("session ended"),
        "Klaxon must use Hawk's queue as it is:\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cutover_runbook_runs_as_written() {
    // the deployment's settings, then the runbook's exports (URLs replaced by this machine's services)
    let mut env = Env::new();
    let settings = configmap();
    assert!(
        settings
            .iter()
            .any(|(k, v)| k == "KLAXON_QUEUE_TYPE" && v == "quorum"),
        "the configmap deploys quorum queues: {settings:?}"
    );
    for (k, v) in &settings {
        if !["KLAXON_NAMESPACE", "KLAXON_HTTP_ADDR", "KLAXON_LOG"].contains(&k.as_str()) {
            env = env.set(k, v);
        }
    }
    let (exports, commands) = runbook();
    assert_eq!(
        commands.len(),
        COMMANDS.len(),
        "see runbook_commands_are_the_ones_this_test_runs"
    );
    for (k, v) in &exports {
        if !SERVICE_URLS.contains(&k.as_str()) {
            env = env.set(k, v);
        }
    }
    let db = exports
        .iter()
        .find(|(k, _)| k == "KLAXON_MONGO_DB")
        .map(|(_, v)| v.clone())
        .expect("the runbook sets the database");

    // Hawk's side: the grouper's classic queue, and a project with two rules in Hawk's accounts database.
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("amqp");
    let grouper = broker.publisher().await.expect("publisher");
    if let Err(BrokerError::Incompatible { .. }) = grouper.declare_plain("notifier").await {
        // left over as another type by someone else's run: make it Hawk's again
        broker.delete_queue("notifier").await.expect("delete");
    }
    let grouper = broker.publisher().await.expect("publisher");
    grouper
        .declare_plain("notifier")
        .await
        .expect("Hawk's assertQueue");
    let project = object_id();
    let (seen_more, only_new) = (ObjectId::new(), ObjectId::new());
    let email = format!("team-{}@example.test", env.namespace);
    let mongo = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("mongo");
    mongo
        .database(&db)
        .collection::<Document>("projects")
        .insert_one(doc! {
            "_id": ObjectId::parse_str(&project).expect("oid"),
            "name": format!("Cut-over {}", env.namespace),
            "notifications": [
                hawk_rule(seen_more, "SEEN_MORE", 2, &[], &email),
                hawk_rule(only_new, "ONLY_NEW", 1, &["TypeError"], &email),
            ],
        })
        .await
        .expect("insert the project as Hawk's garage does");
    let unknown = object_id();
    let ns = env.namespace.clone();

    // 1. rules read from Hawk's database
    let out = run_line(&env, commands[0].as_str(), &project);
    assert!(out.contains("2 rule(s) in 1 project(s): no problems"), "{out}");

    // 2. shadow run: consumes Hawk's classic queue, records, publishes nothing
    let mut shadow = spawn_line(&env, &commands[1], &project);
    let title = format!("TypeError: cut-over {ns}");
    grouper
        .publish_all(&[
            // ONLY_NEW fires; SEEN_MORE counts 1
            grouper_task(&project, &title, "g1", true, None),
            // SEEN_MORE reaches 2 and fires
            grouper_task(&project, &title, "g1", false, Some("6b02d7e1bd0871205ff67971")),
            // `including: ["TypeError"]` compared case-sensitively (KLAXON_INCLUDING_CASE=sensitive): no firing
            grouper_task(&project, &format!("typeerror: lower case {ns}"), "g2", true, None),
            grouper_task(
                &unknown,
                "TypeError: of a project Hawk's database does not have",
                "g",
                true,
                None,
            ),
        ])
        .await
        .expect("publish as the grouper");
    shadow.wait_acked(4, T);
    no_precondition_loop(&shadow);
    shadow.wait_metric(
        r#"klaxon_events_unmatched_total{reason="project_unknown"}"#,
        1.0,
        T,
    );
    shadow.wait_metric(r#"klaxon_notifications_shadowed_total{channel="email"}"#, 2.0, T);
    assert_eq!(
        common::metric_in(
            &shadow.get("/metrics").map(|(_, b)| b).unwrap_or_default(),
            r#"klaxon_notifications_published_total{channel="email"}"#
        ),
        0.0,
        "shadow mode publishes nothing"
    );
    assert!(
        shadow.logs().contains("events not evaluated") && shadow.logs().contains(&unknown),
        "the unknown project is logged:\n{}",
        shadow.logs()
    );
    // the trail, read with the page's own command line (a table: NOTIFICATION PROJECT RULE CHANNEL STATUS
    // ATTEMPTS AT DESTINATION …); the trail is written in the background, so a bounded wait
    let records = klaxon_testkit::eventually_blocking(T, || {
        let out = run_line(&env, &commands[2], &project);
        let mine: Vec<Vec<String>> = out
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .filter(|cols| cols.get(1) == Some(&project))
            .collect();
        (mine.len() >= 2).then_some(mine)
    })
    .unwrap_or_else(|| panic!("two shadow records of {project}; log:\n{}", shadow.logs()));
    let rules: BTreeSet<&str> = records.iter().map(|r| r[2].as_str()).collect();
    assert_eq!(
        rules,
        BTreeSet::from([seen_more.to_hex().as_str(), only_new.to_hex().as_str()])
    );
    for r in &records {
        assert_eq!(
            (r[3].as_str(), r[4].as_str(), r[5].as_str()),
            ("email", "shadow", "0"),
            "{r:?}"
        );
        assert!(!r[7].contains(&email), "redacted: {r:?}");
    }
    assert_eq!(records.len(), 2, "{records:?}");
    let shadow_topology = Topology::new(&format!("{ns}-shadow"), "notifier", QueueType::Quorum);
    let own = broker
        .queue_depth(&shadow_topology.notify_queue(klaxon_core::ChannelKind::Email))
        .await
        .expect("depth");
    assert_eq!(own.map(|d| d.messages), Some(0), "nothing on Klaxon's own queues");
    assert_eq!(shadow.terminate(T), Some(0));

    // 3. switch: Hawk's sender tasks, `repetitionId: null`, the unknown project still counted
    let mut hawk = spawn_line(&env, &commands[3], &project);
    let mut sender = broker
        .consume("sender/email", 16, "cutover-email")
        .await
        .expect("Klaxon declared Hawk's sender queue");
    let after = format!("TypeError: after the switch {ns}");
    grouper
        .publish_all(&[
            grouper_task(&project, &after, "g3", true, None),
            grouper_task(&unknown, "TypeError: still unknown", "g", true, None),
        ])
        .await
        .expect("publish as the grouper");
    let tasks = take(&mut sender, &project, 2, Duration::from_secs(5)).await;
    assert_eq!(
        tasks,
        vec![
            json!({"type": "event", "payload": {"projectId": project, "ruleId": only_new.to_hex(),
            "events": [{"key": "g3", "count": 1, "repetitionId": null}]}})
        ],
        "exactly the one firing after the switch (the shadow run published nothing); log:\n{}",
        hawk.logs()
    );
    hawk.wait_acked(2, T);
    hawk.wait_metric(
        r#"klaxon_events_unmatched_total{reason="project_unknown"}"#,
        1.0,
        T,
    );
    no_precondition_loop(&hawk);
    assert_eq!(hawk.terminate(T), Some(0));
    sender.close().await;

    // full delivery: the email carries a link to Hawk's garage
    let mut full = spawn_line(&env, &commands[4], &project);
    let delivered = format!("TypeError: full delivery {ns}");
    let repetition = "6b02d7e1bd0871205ff67972";
    grouper
        .publish_all(&[
            grouper_task(&project, &delivered, "g4", false, None),
            grouper_task(&project, &delivered, "g4", false, Some(repetition)),
        ])
        .await
        .expect("publish as the grouper");
    let mail = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        let m = klaxon_testkit::smtp::messages_containing(&email);
        (!m.is_empty()).then_some(m)
    })
    .unwrap_or_else(|| panic!("an email to {email}; log:\n{}", full.logs()));
    assert_eq!(mail.len(), 1);
    let raw = common::qp_decode(&mail[0].replace("\r\n ", " "));
    let link = format!("https://garage.hawk.so/project/{project}/event/g4/{repetition}/overview");
    assert!(raw.contains(&link), "{link} in\n{raw}");
    no_precondition_loop(&full);
    assert_eq!(full.terminate(T), Some(0));

    // Hawk's queue kept its type throughout
    assert!(is_plain_classic("notifier").await);
    grouper.close().await;
    for namespace in [ns.clone(), format!("{ns}-shadow")] {
        let events = format!("{namespace}.events");
        let _ = broker
            .delete_topology(&Topology::new(&namespace, &events, QueueType::Classic))
            .await;
    }
    broker.delete_queue("notifier").await.expect("delete notifier");
    broker.close().await;
}
