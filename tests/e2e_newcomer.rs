//! What a newcomer trips over (issue #35), each through the real binary: the warning of `rules add` names the
//! rule it stored, misspelt keys are a `rules check` warning, `klaxon run` names the service it waits for,
//! Teams to a local http receiver, boolean variables spelt the usual ways.

mod common;

use std::time::Duration;

use common::{free_port, json_file, object_id, Env};
use klaxon_testkit::http_sink::{HttpSink, Reply};
use serde_json::{json, Value};

/// An environment where private endpoints are not allowed (the default a newcomer has), warnings only.
fn newcomer() -> Env {
    Env::new()
        .unset("KLAXON_ALLOW_PRIVATE_ENDPOINTS")
        .set("KLAXON_LOG", "warn")
}

/// Item 1: the warning names the id `rules add` printed (the stored one), and comes after the result.
#[test]
fn rules_add_warns_about_the_rule_it_stored_after_saying_so() {
    let env = newcomer();
    let project = object_id();
    let (code, out) = env.run_merged(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--webhook",
        "http://127.0.0.1:9/hook",
    ]);
    assert_eq!(code, 0, "{out}");
    let added = out
        .lines()
        .find_map(|l| l.strip_prefix("added rule "))
        .unwrap_or_else(|| panic!("no added line: {out}"));
    let id = added.split_whitespace().next().expect("an id").to_owned();
    let (at_added, at_warning) = (
        out.find("added rule").expect("added"),
        out.find("warning:")
            .unwrap_or_else(|| panic!("no warning: {out}")),
    );
    assert!(at_added < at_warning, "the result first:\n{out}");
    assert!(
        out[at_warning..].contains(&format!("rule {id}")),
        "the warning names the stored rule {id}:\n{out}"
    );
    assert_eq!(
        out.matches("rule ").count(),
        2,
        "no other rule id is named:\n{out}"
    );
    // the id it names is one `rules rm` knows
    let removed = env.ok(&["rules", "rm", "--project", &project, &id]);
    assert!(removed.starts_with(&format!("removed rule {id}")), "{removed}");
}

/// Item 2: a key one edit from a known one, and `patterns`, are warnings with "did you mean".
#[test]
fn misspelt_keys_are_rules_check_warnings_with_did_you_mean() {
    let env = newcomer();
    let project = object_id();
    let file = json_file(
        &env,
        "typos.json",
        &json!([{"_id": project, "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW",
            "includng": ["database"], "patterns": ["^Type"], "uidAdded": "5e3eef0679fa3700a0198a50",
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let file = file.to_str().expect("path");
    let (code, out, err) = env.run(&["rules", "check", "--file", file]);
    assert_eq!(code, 1, "warnings are problems: {out}{err}");
    assert!(
        out.contains("unknown key `includng` is ignored; did you mean `including`?"),
        "{out}"
    );
    assert!(
        out.contains("unknown key `patterns` is ignored; did you mean `includingPatterns`?"),
        "{out}"
    );
    assert!(!out.contains("uidAdded"), "Hawk's own keys stay silent: {out}");
    // the rule is still usable: imported with a warning, as Hawk's unknown keys are kept
    let (code, out, err) = env.run(&["rules", "import", "--file", file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("did you mean `including`?"), "{err}");

    // a rule without the typo has no problem
    let clean = json_file(
        &env,
        "clean.json",
        &json!([{"_id": object_id(), "notifications": [{
            "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": ["database"],
            "includingPatterns": ["^Type"],
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let (code, out, err) = env.run(&["rules", "check", "--file", clean.to_str().expect("path")]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Item 8: no Rust debug formatting in the message about an unknown `whatToReceive`.
#[test]
fn an_unknown_what_to_receive_is_quoted_as_json() {
    let env = newcomer();
    let file = json_file(
        &env,
        "moar.json",
        &json!([{"_id": object_id(), "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MOAR", "threshold": 2, "thresholdPeriod": 60000,
            "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}
        }]}]),
    );
    let (code, out, err) = env.run(&["rules", "check", "--file", file.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("unknown `whatToReceive` \"SEEN_MOAR\""), "{out}");
    assert!(!out.contains("Some("), "{out}");
}

/// Item 6: an unreachable Redis is named with its address, never its password, in the log and in /readyz.
#[test]
fn run_names_the_unreachable_redis_and_its_address() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let env = Env::new()
        .set("KLAXON_REDIS_URL", &format!("redis://:hunter2pw@{address}/0"))
        .set("KLAXON_LOG", "info,lapin=warn");
    let mut k = env.start_at("run", &format!("127.0.0.1:{}", free_port()), &[]);
    let want = format!("not ready: waiting for redis at {address}");
    let seen = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        k.get("/readyz")
            .filter(|(status, body)| *status == 503 && body.contains(&want))
    });
    assert!(
        seen.is_some(),
        "/readyz: {:?}; log:\n{}",
        k.get("/readyz"),
        k.logs()
    );
    let logged = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        let logs = k.logs();
        logs.lines()
            .any(|l| l.contains("cannot connect; retrying") && l.contains("redis") && l.contains(&address))
            .then_some(logs)
    });
    let logs = logged.unwrap_or_else(|| panic!("no retry line naming {address}:\n{}", k.logs()));
    assert!(
        !logs.contains("hunter2pw"),
        "the password is never logged:\n{logs}"
    );
    assert!(!seen.expect("seen").1.contains("hunter2pw"));
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0), "{}", k.logs());
}

/// Item 7: with --allow-private-endpoints, `rules add --teams http://127.0.0.1:…` stores what `test-notify`
/// delivers to; Teams itself stays https.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_to_a_local_http_receiver_is_stored_as_test_notify_delivers() {
    let env = newcomer();
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(Reply::status(202));
    let url = sink.url("/workflows/local");
    let project = object_id();
    let (code, out, err) = env.run(&[
        "test-notify",
        "--channel",
        "teams",
        "--endpoint",
        &url,
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 0, "test-notify delivers: {out}{err}");
    assert_eq!(sink.wait_for_count(1, Duration::from_secs(10)).await.len(), 1);
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        &url,
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 0, "rules add agrees: {out}{err}");
    assert!(out.starts_with("added rule "), "{out}");
    assert_eq!(err, "", "nothing to warn about: {err}");
    let (code, out, err) = env.run(&["rules", "check", "--project", &project]);
    assert_eq!(code, 0, "{out}{err}");
    // without the flag: stored, with the private-address warning (the senders would refuse it)
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        &url,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("--allow-private-endpoints"), "{err}");
    // a public http URL is not Teams
    let (code, out, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &project,
        "--only-new",
        "--teams",
        "http://teams.example.com/workflows/x",
        "--allow-private-endpoints",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("Teams Workflows webhooks are https"), "{err}");
}

/// Item 8: KLAXON_ALLOW_PRIVATE_ENDPOINTS takes the usual boolean spellings.
#[test]
fn boolean_variables_take_the_usual_spellings() {
    let add = |value: &str| {
        let env = newcomer().set("KLAXON_ALLOW_PRIVATE_ENDPOINTS", value);
        env.run(&[
            "rules",
            "add",
            "--project",
            &object_id(),
            "--only-new",
            "--webhook",
            "http://127.0.0.1:9/hook",
        ])
    };
    for yes in ["1", "true", "yes", "on", "TRUE", "Yes"] {
        let (code, out, err) = add(yes);
        assert_eq!(code, 0, "{yes}: {out}{err}");
        assert!(!err.contains("warning"), "{yes} allows: {err}");
    }
    for no in ["0", "false", "no", "off"] {
        let (code, out, err) = add(no);
        assert_eq!(code, 0, "{no}: {out}{err}");
        assert!(err.contains("warning"), "{no} does not allow: {err}");
    }
    let (code, out, err) = add("maybe");
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("KLAXON_ALLOW_PRIVATE_ENDPOINTS") || err.contains("maybe"),
        "{err}"
    );
}

/// A JSON `POST` to a running klaxon on loopback: (status, body).
fn post_json(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let payload = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    (status, serde_json::from_str(payload).unwrap_or(Value::Null))
}

/// `klaxon invalid list -o json` in `env`.
fn invalid_list(env: &Env) -> Vec<Value> {
    let out = env.ok(&["invalid", "list", "-o", "json"]);
    serde_json::from_str::<Vec<Value>>(&out).unwrap_or_else(|e| panic!("a JSON array ({e}): {out}"))
}

/// Item 3: invalid events are listed with their reason, shown byte for byte, replayed to the events queue
/// unchanged — in the CLI, the API and the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_events_are_listed_shown_and_replayed() {
    use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
    let env = Env::new().set("KLAXON_LOG", "info,lapin=warn");
    let mut k = env.spawn("run", &[]);
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    );
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let publisher = broker.publisher().await.expect("publisher");
    let not_json = b"{\"projectId\": oops".to_vec();
    let no_group = json!({"projectId": object_id(), "event": {"title": "Boom"}})
        .to_string()
        .into_bytes();
    let mut with_id = Outgoing::json(topo.events_queue(), no_group.clone());
    with_id.message_id = Some("m-no-group".into());
    publisher
        .publish_all(&[Outgoing::json(topo.events_queue(), not_json.clone()), with_id])
        .await
        .expect("publish");
    let listed = klaxon_testkit::eventually_blocking(Duration::from_secs(30), || {
        let l = invalid_list(&env);
        (l.len() == 2).then_some(l)
    })
    .unwrap_or_else(|| panic!("two invalid events listed; log:\n{}", k.logs()));
    let by_body = |b: &[u8]| -> Value {
        listed
            .iter()
            .find(|i| i["body"] == String::from_utf8_lossy(b).as_ref())
            .cloned()
            .unwrap_or_else(|| panic!("{listed:?}"))
    };
    let (first, second) = (by_body(&not_json), by_body(&no_group));
    let (id1, id2) = (
        first["id"].as_str().expect("id").to_owned(),
        second["id"].as_str().expect("id").to_owned(),
    );
    assert!(first["reason"].as_str().is_some_and(|r| !r.is_empty()), "{first}");
    assert!(
        second["reason"].as_str().is_some_and(|r| r.contains("groupHash")),
        "{second}"
    );
    assert_eq!(second["messageId"], "m-no-group");
    assert_eq!(first["bytes"], not_json.len());
    // the table names both, with their reasons
    let table = env.ok(&["invalid", "list"]);
    assert!(
        table.starts_with("ID") && table.contains(&id1) && table.contains(&id2),
        "{table}"
    );
    // show: the body exactly
    assert_eq!(env.ok(&["invalid", "show", &id1]).into_bytes(), not_json);
    let (code, out, err) = env.run(&["invalid", "show", "0000000000000000"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no invalid event 0000000000000000"), "{err}");

    // API: the list, and a replay through the running worker, which sets it aside again with a fresh reason
    let (status, body) = common::http_get(&k.addr, "/api/v1/invalid?limit=1").expect("GET");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["invalid"].as_array().map(Vec::len), Some(1), "{v}");
    let (status, body) = common::http_get(&k.addr, "/api/v1/invalid?offset=1").expect("GET");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        v["invalid"].as_array().map(Vec::len),
        Some(1),
        "the page after the first: {v}"
    );
    let (status, body) = common::http_get(&k.addr, "/api/v1/invalid?offset=x").expect("GET");
    assert_eq!(status, 400, "{body}");
    let (status, v) = post_json(&k.addr, "/api/v1/invalid/replay", &json!({"ids": [id2]}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, json!({"replayed": 1, "ids": [id2]}));
    k.wait_metric("klaxon_events_invalid_total", 3.0, Duration::from_secs(30));
    assert_eq!(invalid_list(&env).len(), 2, "set aside again");
    let (status, v) = post_json(&k.addr, "/api/v1/invalid/replay", &json!({"ids": "x"}));
    assert_eq!(status, 400, "{v}");
    // the console's page lists them
    let (status, page) = common::http_get(&k.addr, "/invalid").expect("GET /invalid");
    assert_eq!(status, 200, "{page}\n{}", k.logs());
    assert!(
        page.contains("Invalid events") && page.contains(&id1) && page.contains(&id2),
        "{page}"
    );
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));

    // CLI replay with no worker running: the events queue gets the body unchanged, with its message id
    let out = env.ok(&["invalid", "replay", "--id", &id2]);
    assert_eq!(
        out,
        format!("replayed {id2} to {}\n1 replayed\n", topo.events_queue())
    );
    let mut consumer = broker
        .consume(topo.events_queue(), 10, "newcomer-test")
        .await
        .expect("consume");
    let replayed = match consumer.next_within(Duration::from_secs(10)).await {
        Some(Some(Ok(d))) => d,
        other => panic!("the replayed event on the events queue: {other:?}"),
    };
    assert_eq!(replayed.data, no_group, "the body untouched");
    assert_eq!(
        replayed.properties.message_id().as_ref().map(|m| m.to_string()),
        Some("m-no-group".to_owned())
    );
    assert_eq!(
        klaxon_broker::header(&replayed.properties, klaxon_broker::ERROR_HEADER),
        None,
        "the reason is not carried back"
    );
    consumer.ack(replayed.delivery_tag).await.expect("ack");
    consumer.close().await;
    assert_eq!(invalid_list(&env).len(), 1);
    let out = env.ok(&["invalid", "replay", "--all"]);
    assert!(out.ends_with("1 replayed\n"), "{out}");
    let (code, out, _) = env.run(&["invalid", "replay", "--all"]);
    assert_eq!((code, out.as_str()), (1, "0 replayed\n"));
    publisher.close().await;
    broker.close().await;
    common::delete_queues(&env).await;
}

/// Item 8: doctor shows the PagerDuty URL with its path, and under `--output shadow` checks no sender.
#[test]
fn doctor_shows_the_pagerduty_path_and_skips_senders_in_shadow_mode() {
    let env = newcomer()
        .set("KLAXON_PAGERDUTY_API", "http://127.0.0.1:9/pd")
        .set("KLAXON_SMTP_URL", &format!("smtp://127.0.0.1:{}", free_port()));
    let (_, out, err) = env.run(&["doctor", "--timeout", "10s"]);
    let pd = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("pagerduty"))
        .unwrap_or_else(|| panic!("a pagerduty line: {out}{err}"));
    assert!(pd.contains("http://127.0.0.1:9/pd/v2/enqueue"), "{pd}");
    assert!(
        out.lines().any(|l| l.split_whitespace().nth(1) == Some("smtp")),
        "{out}"
    );
    let (code, out, err) = env
        .set("KLAXON_OUTPUT", "shadow")
        .run(&["doctor", "--timeout", "10s"]);
    for sender in ["smtp", "telegram", "pagerduty"] {
        assert!(
            !out.lines().any(|l| l.split_whitespace().nth(1) == Some(sender)),
            "{sender} is not checked in shadow mode:\n{out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.contains("senders") && l.contains("--output shadow")),
        "{out}"
    );
    assert_eq!(
        code, 0,
        "the unreachable SMTP is no failure in shadow mode: {out}{err}"
    );
}

/// Item 8: `explain` of an unknown project names the database it read.
#[test]
fn explain_of_an_unknown_project_names_the_database() {
    let env = newcomer().set("KLAXON_MONGO_DB", "hawk_typo");
    let (code, out, err) = env.run(&[
        "explain",
        "--project",
        &object_id(),
        "--title",
        "Boom",
        "--group",
        "g",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("MongoDB database `hawk_typo`") && err.contains("--mongo-db"),
        "{err}"
    );
}

/// Item 8: `rules list` shows a window only for the kinds that count in one; numbers start at 1; the start-up
/// log on a server without change streams has no raw BSON.
#[test]
fn rules_list_windows_numbering_and_a_readable_start_up() {
    let env = newcomer();
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [
        {"isEnabled": true, "whatToReceive": "ONLY_NEW",
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}},
        {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 60000,
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}},
        {"isEnabled": true, "whatToReceive": "SPIKE", "thresholdPeriod": 3_600_000,
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}},
        {"isEnabled": true, "whatToReceive": "REAPPEARED",
         "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}}
    ]}]));
    let out = env.ok(&["rules", "list", "--project", &project]);
    let window_of = |what: &str| -> String {
        let header = out.lines().next().expect("header");
        let at = header.find("WINDOW").expect("a WINDOW column");
        let line = out
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what}: {out}"));
        line[at..].split_whitespace().next().unwrap_or("").to_owned()
    };
    assert_eq!(window_of("ONLY_NEW"), "-", "{out}");
    assert_eq!(window_of("SEEN_MORE"), "fixed", "{out}");
    assert_eq!(window_of("SPIKE"), "-", "{out}");
    assert_eq!(window_of("REAPPEARED"), "-", "{out}");

    // the second rule of the second project without an _id is `#2`
    let file = json_file(
        &env,
        "numbered.json",
        &json!([
            {"_id": object_id(), "notifications": []},
            {"_id": object_id(), "notifications": [
                {"isEnabled": true, "whatToReceive": "ONLY_NEW",
                 "channels": {"slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/x", "minPeriod": 0}}},
                {"_id": "nothex"}
            ]}
        ]),
    );
    let (code, out, err) = env.run(&["rules", "check", "--file", file.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("rule #2: invalid rule id"), "{err}");
    let bad_item = json_file(
        &env,
        "item.json",
        &json!([{"_id": object_id(), "notifications": []}, 7]),
    );
    let (_, out, err) = env.run(&["rules", "check", "--file", bad_item.to_str().expect("path")]);
    assert!(err.contains("item #2:"), "{out}{err}");

    let mut k = env.clone().set("KLAXON_LOG", "info,lapin=warn").spawn("run", &[]);
    let logs = k.logs();
    assert!(
        !logs.contains("RawDocumentBuf") && !logs.contains("labels: {"),
        "no Rust debug output at start-up:\n{logs}"
    );
    assert_eq!(k.terminate(Duration::from_secs(15)), Some(0));
}

/// `klaxon invalid show` never writes a body's terminal escape sequences to the operator's terminal: control
/// characters other than line breaks and tabs are shown as `<U+XXXX>`; `-o json` keeps the exact body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_show_neutralises_a_bodys_control_characters() {
    use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
    let env = Env::new();
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    );
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare(&topo).await.expect("declare");
    let hostile = "{\"title\": \"\u{1b}]0;owned\u{7}\u{1b}[2J\rFORGED\u{9b}31m\"}\n";
    publisher
        .publish_all(&[Outgoing::json(topo.invalid_queue(), hostile.as_bytes().to_vec())])
        .await
        .expect("publish");
    let listed = klaxon_testkit::eventually_blocking(Duration::from_secs(10), || {
        let l = invalid_list(&env);
        (l.len() == 1).then_some(l)
    })
    .expect("the invalid event listed");
    let id = listed[0]["id"].as_str().expect("id").to_owned();
    let shown = env.ok(&["invalid", "show", &id]);
    assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{shown:?}");
    assert_eq!(
        shown,
        "{\"title\": \"<U+001B>]0;owned<U+0007><U+001B>[2J<U+000D>FORGED<U+009B>31m\"}\n"
    );
    let json: Value = serde_json::from_str(&env.ok(&["invalid", "show", &id, "-o", "json"])).expect("json");
    assert_eq!(json["body"], hostile, "-o json keeps the exact body");
    publisher.close().await;
    broker.close().await;
}

/// Invalid events past the 1,000th are reachable: a list page after an offset, `show` and `replay` of one near the
/// end of a 1,005-message queue (each pass reads at most the queue's messages, one at a time; a consumer's prefetch
/// of 1,000 stopped every pass at the 1,000th).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_events_past_the_1000th_are_listed_shown_and_replayed() {
    use klaxon_api::rest::invalid::{id_of, pass, Pass};
    use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
    const N: usize = 1_005;
    let env = Env::new();
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    );
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let publisher = broker.publisher().await.expect("publisher");
    publisher.declare(&topo).await.expect("declare");
    let body = |n: usize| format!("{{\"n\": {n}}}").into_bytes();
    let messages: Vec<Outgoing> = (0..N)
        .map(|n| Outgoing::json(topo.invalid_queue(), body(n)))
        .collect();
    publisher.publish_all(&messages).await.expect("publish");
    let depth = |queue: String| {
        let broker = &broker;
        async move {
            broker
                .queue_depth(&queue)
                .await
                .expect("depth")
                .expect("queue")
                .messages
        }
    };
    assert_eq!(depth(topo.invalid_queue()).await, N as u32);

    let page = pass(
        &broker,
        &publisher,
        &topo,
        Pass::Page {
            offset: 1_000,
            limit: 10,
        },
    )
    .await
    .expect("page");
    let bodies: Vec<&str> = page.iter().map(|i| i.body.as_str()).collect();
    assert_eq!(
        bodies,
        [
            "{\"n\": 1000}",
            "{\"n\": 1001}",
            "{\"n\": 1002}",
            "{\"n\": 1003}",
            "{\"n\": 1004}"
        ]
    );
    assert_eq!(
        depth(topo.invalid_queue()).await,
        N as u32,
        "a page leaves every message"
    );
    let first = pass(&broker, &publisher, &topo, Pass::List(1_000))
        .await
        .expect("list");
    assert_eq!(first.len(), 1_000, "a page is bounded");
    assert_eq!(first[0].body, "{\"n\": 0}", "in the queue's order again");

    let near_end = [id_of(&body(1_003))];
    let shown = pass(&broker, &publisher, &topo, Pass::Show(&near_end))
        .await
        .expect("show");
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].body, "{\"n\": 1003}");

    let last = [id_of(&body(1_004))];
    let replayed = pass(&broker, &publisher, &topo, Pass::Replay(Some(&last)))
        .await
        .expect("replay");
    assert_eq!(replayed.len(), 1);
    assert_eq!(depth(topo.invalid_queue()).await, N as u32 - 1);
    assert_eq!(
        depth(topo.events_queue().to_owned()).await,
        1,
        "replayed to the events queue"
    );

    // the CLI's page
    let out = env.ok(&["invalid", "list", "--offset", "1002", "-o", "json"]);
    let listed: Vec<Value> = serde_json::from_str(&out).expect("json");
    let bodies: Vec<&str> = listed.iter().filter_map(|i| i["body"].as_str()).collect();
    assert_eq!(bodies, ["{\"n\": 1002}", "{\"n\": 1003}"], "{out}");
    publisher.close().await;
    broker.close().await;
}
