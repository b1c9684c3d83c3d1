//! The HTTP API (INTERFACE.md, "HTTP API and console") end to end: the real `klaxon run` binary serving
//! `/api/v1` on `--http-addr`, against RabbitMQ, Redis, the MongoDB-wire server and a local HTTP sink.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// One HTTP/1.1 request to `addr`; returns (status, body as JSON or `Value::String`).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method != "GET" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    // The server may answer (413) before reading everything; a failed write is fine then.
    let _ = s.write_all(&bytes);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let payload = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    let value = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
    (status, value)
}

fn call(k: &Klaxon, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let bytes = body.map(|b| b.to_string().into_bytes());
    http(&k.addr, method, path, &[], bytes.as_deref())
}

fn error_of(v: &Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an {{\"error\"}} body: {v}"))
}

fn task(project: &str, title: &str, group: &str) -> Value {
    json!({"projectId": project, "event": {"title": title, "groupHash": group, "isNew": false}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_limits_and_errors_are_json_with_the_right_status() {
    // No token: loopback clients only.
    let env = Env::new();
    let k = env.spawn("run", &[]);
    let (st, v) = call(&k, "GET", "/api/v1/nothing-here", None);
    assert_eq!(st, 404, "{v}");
    error_of(&v);
    assert_eq!(k.get("/healthz").map(|r| r.0), Some(200));
    assert_eq!(k.get("/metrics").map(|r| r.0), Some(200));
    // Over 1 MiB: 413, as JSON.
    let big = vec![b' '; 1024 * 1024 + 10];
    let (st, v) = http(&k.addr, "POST", "/api/v1/events", &[], Some(&big));
    assert_eq!(st, 413, "{v}");
    error_of(&v);
    // Not JSON, unknown project id shape: 400.
    let (st, v) = http(&k.addr, "POST", "/api/v1/events", &[], Some(b"{nope"));
    assert_eq!(st, 400, "{v}");
    assert!(error_of(&v).contains("JSON"), "{v}");
    let (st, v) = call(&k, "GET", "/api/v1/projects/xyz/rules", None);
    assert_eq!(st, 400, "{v}");
    // A known path with the wrong method: 405, as JSON too.
    let (st, v) = call(&k, "DELETE", "/api/v1/events", None);
    assert_eq!(st, 405, "{v}");
    error_of(&v);
    drop(k);

    // The same process reached over a non-loopback address: 403 (when the machine has one).
    if let Some(ip) = common::non_loopback_ip() {
        let port = common::free_port();
        let k = env.spawn_at("run", &format!("0.0.0.0:{port}"), &[]);
        let (st, v) = http(
            &format!("{ip}:{port}"),
            "GET",
            "/api/v1/projects/000000000000000000000000/rules",
            &[],
            None,
        );
        assert_eq!(st, 403, "{v}");
        error_of(&v);
        let (st, _) = http(&format!("{ip}:{port}"), "GET", "/healthz", &[], None);
        assert_eq!(st, 200, "/healthz stays open");
        drop(k);
    } else {
        eprintln!("no non-loopback address on this machine: 403 not exercised");
    }

    // Token set: Bearer required (even from loopback); /metrics, /healthz, /readyz stay open.
    let env = Env::new().set("KLAXON_API_TOKEN", "s3cret-token");
    let k = env.spawn("run", &[]);
    let path = format!("/api/v1/projects/{}/rules", object_id());
    let (st, v) = http(&k.addr, "GET", &path, &[], None);
    assert_eq!(st, 401, "{v}");
    error_of(&v);
    let (st, _) = http(&k.addr, "GET", &path, &[("Authorization", "Bearer wrong")], None);
    assert_eq!(st, 401);
    let (st, v) = http(
        &k.addr,
        "GET",
        &path,
        &[("Authorization", "Bearer s3cret-token")],
        None,
    );
    assert_eq!(st, 404, "unknown project with the right token: {v}");
    assert!(error_of(&v).contains("unknown project"), "{v}");
    for open in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(k.get(open).map(|r| r.0), Some(200), "{open} stays open");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_validated_all_or_nothing_then_published_and_evaluated() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3, "thresholdPeriod": 3_600_000,
        "including": [], "excluding": [],
        "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}}}]}]));
    let k = env.spawn("run", &[]);

    // One bad item in three: 400 naming it, nothing published.
    let bad = json!([task(&project, "Boom", "g1"), {"projectId": project, "event": {"title": "x"}}, task(&project, "Boom", "g1")]);
    let (st, v) = call(&k, "POST", "/api/v1/events", Some(&bad));
    assert_eq!(st, 400, "{v}");
    let e = error_of(&v);
    assert!(
        e.contains("event 1") && e.contains("groupHash"),
        "names the item and the reason: {e}"
    );
    let (st, v) = call(&k, "POST", "/api/v1/events", Some(&json!([])));
    assert_eq!(st, 400, "{v}");

    // One task alone, then an array of two: accepted 1 + 2, and the third event fires the rule once.
    let (st, v) = call(&k, "POST", "/api/v1/events", Some(&task(&project, "Boom", "g1")));
    assert_eq!((st, v.clone()), (202, json!({"accepted": 1})), "{v}");
    k.wait_acked(1, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_events_acked_total"),
        1.0,
        "the rejected batch published nothing"
    );
    let two = json!([task(&project, "Boom", "g1"), task(&project, "Boom", "g1")]);
    let (st, v) = call(&k, "POST", "/api/v1/events", Some(&two));
    assert_eq!((st, v.clone()), (202, json!({"accepted": 2})), "{v}");
    let got = sink.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    assert_eq!(got[0].json()["events"][0]["groupHash"], "g1");
}

fn rule(sink: &HttpSink, including: &[&str]) -> Value {
    json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1,
           "thresholdPeriod": 60_000, "including": including, "excluding": [],
           "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_put_validates_like_import_and_running_workers_use_the_edit_within_a_second() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    // The API of one process (a sender), the rules used by another (a worker) with a long TTL: only the
    // invalidation can make the worker see the edit in time.
    let worker = env.spawn("worker", &["--rules-ttl", "600"]);
    let k = env.spawn("sender", &[]);
    let path = format!("/api/v1/projects/{project}/rules");

    let (st, v) = call(&k, "GET", &path, None);
    assert_eq!(st, 404, "{v}");

    // Invalid: 400 with the problems, nothing stored; ?force=true stores anyway.
    let mut broken = rule(&sink, &["alpha"]);
    broken["threshold"] = json!(0);
    let body = json!({"_id": project, "notifications": [broken]});
    let (st, v) = call(&k, "PUT", &path, Some(&body));
    assert_eq!(st, 400, "{v}");
    assert!(error_of(&v).contains("threshold"), "{v}");
    assert!(!v["problems"].as_array().expect("problems").is_empty(), "{v}");
    assert_eq!(call(&k, "GET", &path, None).0, 404, "nothing stored");
    let (st, v) = call(&k, "PUT", &format!("{path}?force=true"), Some(&body));
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(
        &k,
        "PUT",
        &path,
        Some(&json!({"_id": object_id(), "notifications": []})),
    );
    assert_eq!(st, 400, "another project's _id: {v}");

    // A valid rule for "alpha"; GET gives back the import/export format.
    let alpha = rule(&sink, &["alpha"]);
    let (st, v) = call(&k, "PUT", &path, Some(&json!({"notifications": [alpha.clone()]})));
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(&k, "GET", &path, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["_id"], json!(project));
    assert_eq!(v["notifications"][0]["_id"], alpha["_id"]);
    assert_eq!(v["notifications"][0]["including"], json!(["alpha"]));

    // The worker caches the "alpha" rule: a "beta" event does not fire.
    let (st, _) = call(
        &k,
        "POST",
        "/api/v1/events",
        Some(&task(&project, "beta failed", "before")),
    );
    assert_eq!(st, 202);
    worker.wait_acked(1, Duration::from_secs(30));
    assert_eq!(sink.count(), 0, "log:\n{}", worker.logs());

    // Edit the rule to "beta", then send a "beta" event (new group each) every 100 ms for a second.
    let mut beta = alpha.clone();
    beta["including"] = json!(["beta"]);
    let t0 = Instant::now();
    let (st, v) = call(
        &k,
        "PUT",
        &path,
        Some(&json!({"_id": project, "notifications": [beta]})),
    );
    assert_eq!(st, 200, "{v}");
    let put_ms = t0.elapsed().as_millis();
    let mut sent = Vec::new();
    for i in 0..=10u64 {
        let at = Duration::from_millis(100 * i);
        if let Some(wait) = at.checked_sub(t0.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let group = format!("after-{i}");
        let (st, _) = call(
            &k,
            "POST",
            "/api/v1/events",
            Some(&task(&project, "beta failed", &group)),
        );
        assert_eq!(st, 202);
        sent.push((group, t0.elapsed().as_millis()));
    }
    worker.wait_acked(12, Duration::from_secs(30));
    sink.wait_for_count(1, Duration::from_secs(30)).await;
    let fired: Vec<String> = sink
        .requests()
        .iter()
        .filter_map(|r| r.json()["events"][0]["groupHash"].as_str().map(str::to_owned))
        .collect();
    let last = &sent[sent.len() - 1];
    assert!(
        fired.contains(&last.0),
        "the event sent ≥ 1 s after the PUT used the edit; fired {fired:?}; log:\n{}",
        worker.logs()
    );
    let first = sent.iter().find(|(g, _)| fired.contains(g)).expect("one fired");
    eprintln!(
        "rule propagation: PUT answered in {put_ms} ms; first event using the edit was sent {} ms after the PUT began ({} of {} fired)",
        first.1,
        fired.len(),
        sent.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reports_each_rule_reads_only_and_follows_the_live_counts() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let k = env.spawn("run", &[]);
    let hook = json!({"webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}});
    let r = |extra: Value| {
        let mut r = json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
                           "thresholdPeriod": 3_600_000, "including": [], "excluding": [], "channels": hook});
        if let (Some(r), Value::Object(e)) = (r.as_object_mut(), extra) {
            r.extend(e);
        }
        r
    };
    let rules = [
        r(json!({})),
        r(json!({"isEnabled": false})),
        r(json!({"excluding": ["noise", "boom"]})),
        r(json!({"threshold": 0})),
        r(json!({"whatToReceive": "ONLY_NEW"})),
        r(json!({"window": "sliding", "threshold": 2})),
    ];
    let ids: Vec<&str> = rules.iter().map(|r| r["_id"].as_str().expect("id")).collect();
    let path = format!("/api/v1/projects/{project}/rules");
    let (st, v) = call(
        &k,
        "PUT",
        &format!("{path}?force=true"),
        Some(&json!({"notifications": rules})),
    );
    assert_eq!(st, 200, "{v}");

    let explain_path = format!("/api/v1/projects/{project}/explain");
    let ask = json!({"title": "Boom at checkout", "groupHash": "g-explain"});
    let verdicts = |v: &Value| -> Vec<(String, String)> {
        v["rules"]
            .as_array()
            .unwrap_or_else(|| panic!("no rules: {v}"))
            .iter()
            .map(|r| {
                (
                    r["ruleId"].as_str().unwrap_or("?").to_owned(),
                    r["verdict"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect()
    };
    let find = |v: &Value, id: &str| -> Value {
        v["rules"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["ruleId"] == id).cloned())
            .unwrap_or(Value::Null)
    };
    // Asked many times: it never counts.
    let mut v = Value::Null;
    let mut took = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let (st, got) = call(&k, "POST", &explain_path, Some(&ask));
        took.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(st, 200, "{got}");
        v = got;
    }
    took.sort_by(|a, b| a.total_cmp(b));
    eprintln!(
        "explain latency over 50 calls (6 rules, debug build, loopback): p50 {:.1} ms, p99 {:.1} ms",
        took[25], took[49]
    );
    let want: Vec<(String, String)> = [
        (ids[0], "counting"),
        (ids[1], "disabled"),
        (ids[2], "filtered"),
        (ids[3], "invalid"),
        (ids[4], "filtered"),
        (ids[5], "counting"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(verdicts(&v), want, "{v}");
    let first = find(&v, ids[0]);
    assert_eq!(
        (first["count"].clone(), first["threshold"].clone()),
        (json!(1), json!(3)),
        "{first}"
    );
    assert!(first["windowEndsAt"].is_string(), "{first}");
    assert!(
        find(&v, ids[2])["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("\"boom\""),
        "{v}"
    );
    assert!(
        find(&v, ids[3])["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("threshold"),
        "{v}"
    );
    let (_, new) = call(
        &k,
        "POST",
        &explain_path,
        Some(&json!({"title": "x", "groupHash": "g-explain", "isNew": true})),
    );
    assert_eq!(find(&new, ids[4])["verdict"], "would_fire", "{new}");

    // Two real events: the fixed rule is one away, the sliding one fired and cools down.
    let two = json!([
        task(&project, "Boom at checkout", "g-explain"),
        task(&project, "Boom at checkout", "g-explain")
    ]);
    assert_eq!(call(&k, "POST", "/api/v1/events", Some(&two)).0, 202);
    sink.wait_for_count(1, Duration::from_secs(30)).await;
    k.wait_acked(2, Duration::from_secs(30));
    let (_, v) = call(&k, "POST", &explain_path, Some(&ask));
    assert_eq!(find(&v, ids[0])["verdict"], "would_fire", "{v}");
    assert_eq!(find(&v, ids[0])["count"], 3, "{v}");
    assert_eq!(find(&v, ids[5])["verdict"], "cooling_down", "{v}");
    assert_eq!(
        call(
            &k,
            "POST",
            "/api/v1/events",
            Some(&task(&project, "Boom at checkout", "g-explain"))
        )
        .0,
        202
    );
    sink.wait_for_count(2, Duration::from_secs(30)).await;
    let (_, v) = call(&k, "POST", &explain_path, Some(&ask));
    assert_eq!(find(&v, ids[0])["verdict"], "already_notified", "{v}");

    // The CLI says the same.
    let out = env.ok(&[
        "explain",
        "--project",
        &project,
        "--title",
        "Boom at checkout",
        "--group",
        "g-explain",
    ]);
    for (id, verdict) in verdicts(&v) {
        assert!(
            out.lines().any(|l| l.starts_with(&id) && l.contains(&verdict)),
            "{id} {verdict} in:\n{out}"
        );
    }

    // Errors: unknown project 404, bad body 400.
    let (st, e) = call(
        &k,
        "POST",
        &format!("/api/v1/projects/{}/explain", object_id()),
        Some(&ask),
    );
    assert_eq!(st, 404, "{e}");
    let (st, e) = call(&k, "POST", &explain_path, Some(&json!({"title": "x"})));
    assert_eq!(st, 400, "{e}");
    assert!(error_of(&e).contains("groupHash"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutes_silence_matching_firings_which_are_counted_not_delivered() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = rule(&sink, &[]);
    let rule_id = rule["_id"].as_str().expect("id").to_owned();
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn("run", &[]);
    let mutes = format!("/api/v1/projects/{project}/mutes");

    // Bad bodies and an unknown project.
    for bad in [
        json!({}),
        json!({"for": 0}),
        json!({"until": "2001-01-01T00:00:00Z"}),
        json!({"for": 5, "until": "2999-01-01T00:00:00Z"}),
    ] {
        let (st, v) = call(&k, "POST", &mutes, Some(&bad));
        assert_eq!(st, 400, "{bad} → {v}");
        error_of(&v);
    }
    let (st, _) = call(
        &k,
        "POST",
        &format!("/api/v1/projects/{}/mutes", object_id()),
        Some(&json!({"for": 60})),
    );
    assert_eq!(st, 404);

    // Mute group g-muted of the rule for ten minutes.
    let (st, v) = call(
        &k,
        "POST",
        &mutes,
        Some(&json!({"ruleId": rule_id, "groupHash": "g-muted", "for": 600})),
    );
    assert_eq!(st, 201, "{v}");
    let mute_id = v["muteId"].as_str().expect("muteId").to_owned();
    assert!(v["until"].is_string(), "{v}");
    let (st, v) = call(&k, "GET", &mutes, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["mutes"][0]["muteId"], json!(mute_id), "{v}");
    assert_eq!(v["mutes"][0]["groupHash"], "g-muted", "{v}");

    // Explain says so.
    let (_, v) = call(
        &k,
        "POST",
        &format!("/api/v1/projects/{project}/explain"),
        Some(&json!({"title": "x", "groupHash": "g-muted"})),
    );
    assert_eq!(v["rules"][0]["verdict"], "muted", "{v}");

    // A muted group fires (counted) but nothing is delivered; another group is delivered.
    let both = json!([
        task(&project, "Boom", "g-muted"),
        task(&project, "Boom", "g-open")
    ]);
    assert_eq!(call(&k, "POST", "/api/v1/events", Some(&both)).0, 202);
    let got = sink.wait_for_count(1, Duration::from_secs(30)).await;
    k.wait_metric("klaxon_firings_muted_total", 1.0, Duration::from_secs(30));
    k.wait_acked(2, Duration::from_secs(30));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let groups: Vec<Value> = sink
        .requests()
        .iter()
        .map(|r| r.json()["events"][0]["groupHash"].clone())
        .collect();
    assert_eq!(
        groups,
        vec![json!("g-open")],
        "only the open group; {} log:\n{}",
        got.len(),
        k.logs()
    );
    assert_eq!(k.metric("klaxon_firings_muted_total"), 1.0);

    // Removing it: 204, then 404; the muted firing is not sent later.
    let (st, _) = call(&k, "DELETE", &format!("{mutes}/{mute_id}"), None);
    assert_eq!(st, 204);
    let (st, v) = call(&k, "DELETE", &format!("{mutes}/{mute_id}"), None);
    assert_eq!(st, 404, "{v}");
    let (_, v) = call(&k, "GET", &mutes, None);
    assert_eq!(v["mutes"], json!([]), "{v}");

    // The CLI: add, list, rm.
    let out = env.ok(&[
        "mute",
        "add",
        "--project",
        &project,
        "--group",
        "g-cli",
        "--for",
        "2h",
    ]);
    let id = out.split_whitespace().nth(1).expect("id").to_owned();
    let listed = env.ok(&["mute", "list", "--project", &project]);
    assert!(listed.contains(&id) && listed.contains("g-cli"), "{listed}");
    let (_, v) = call(&k, "GET", &mutes, None);
    assert_eq!(
        v["mutes"][0]["muteId"],
        json!(id),
        "the API sees the CLI's mute: {v}"
    );
    env.ok(&["mute", "rm", "--project", &project, &id]);
    assert!(env
        .ok(&["mute", "list", "--project", &project])
        .contains("no active mutes"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_and_dead_letters_are_listed_and_replayed() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    sink.set_default(klaxon_testkit::Reply::status(400));
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [rule(&sink, &[])]}]));
    let k = env.spawn("run", &[]);

    assert_eq!(call(&k, "GET", "/api/v1/dead?limit=0", None).0, 400);
    assert_eq!(call(&k, "GET", "/api/v1/deliveries?projectId=nope", None).0, 400);
    // A permanent failure (400) goes to the dead-letter queue at once.
    assert_eq!(
        call(
            &k,
            "POST",
            "/api/v1/events",
            Some(&task(&project, "Boom", "g-dead"))
        )
        .0,
        202
    );
    let dead = common::eventually(Duration::from_secs(30), || {
        let (st, v) = call(&k, "GET", "/api/v1/dead?limit=10", None);
        (st == 200 && v["dead"].as_array().is_some_and(|a| a.len() == 1)).then_some(v)
    })
    .await
    .unwrap_or_else(|| panic!("nothing dead-lettered; log:\n{}", k.logs()));
    let id = dead["dead"][0]["notificationId"].as_str().expect("id").to_owned();
    assert_eq!(dead["dead"][0]["projectId"], json!(project), "{dead}");
    assert!(
        !dead["dead"][0]["reason"].as_str().unwrap_or_default().is_empty(),
        "{dead}"
    );
    let path = format!("/api/v1/deliveries?projectId={project}&limit=5");
    let trail = common::eventually(Duration::from_secs(30), || {
        let (_, v) = call(&k, "GET", &path, None);
        (v["deliveries"][0]["status"] == "dead").then_some(v)
    })
    .await
    .expect("the trail says dead");
    assert_eq!(trail["deliveries"][0]["notificationId"], json!(id), "{trail}");

    // Replay an unknown id: nothing; then the real one, once the endpoint works again.
    let (st, v) = call(
        &k,
        "POST",
        "/api/v1/dead/replay",
        Some(&json!({"notificationIds": ["nope"]})),
    );
    assert_eq!((st, v["replayed"].clone()), (200, json!(0)), "{v}");
    let (st, v) = call(
        &k,
        "POST",
        "/api/v1/dead/replay",
        Some(&json!({"notificationIds": "x"})),
    );
    assert_eq!(st, 400, "{v}");
    sink.set_default(klaxon_testkit::Reply::status(200));
    let (st, v) = call(
        &k,
        "POST",
        "/api/v1/dead/replay",
        Some(&json!({"notificationIds": [id]})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["replayed"], 1, "{v}");
    sink.wait_for_count(2, Duration::from_secs(30)).await;
    common::eventually(Duration::from_secs(30), || {
        let (_, v) = call(&k, "GET", &path, None);
        (v["deliveries"][0]["status"] == "sent").then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("the trail says sent; log:\n{}", k.logs()));
    let (_, v) = call(&k, "GET", "/api/v1/dead", None);
    assert_eq!(v["dead"], json!([]), "{v}");
}

fn unix_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_notifications_are_delivered_once_per_key_and_never_before_send_at() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let k = env.spawn("run", &[]);
    let hook = sink.url("/direct");

    // Bad input: 400 with what is wrong, nothing queued.
    for (body, want) in [
        (
            json!({"channel": "webhook", "endpoint": hook}),
            "`title` is required",
        ),
        (
            json!({"channel": "pager", "endpoint": hook, "title": "T"}),
            "unknown channel",
        ),
        (
            json!({"channel": "webhook", "endpoint": hook, "title": "T", "sendAt": "soon"}),
            "RFC 3339",
        ),
        (
            json!({"channel": "telegram", "endpoint": "not a chat", "title": "T"}),
            "chat id",
        ),
    ] {
        let (st, v) = call(&k, "POST", "/api/v1/notifications", Some(&body));
        assert_eq!(st, 400, "{body}: {v}");
        assert!(error_of(&v).contains(want), "{body}: {v}");
    }

    // Now, with a key, twice: one id, one answer, one delivery.
    let now = json!({"channel": "webhook", "endpoint": hook, "title": "Deploy <v2> done", "text": "all green",
        "idempotencyKey": "deploy-2"});
    let (st, first) = call(&k, "POST", "/api/v1/notifications", Some(&now));
    assert_eq!(st, 202, "{first}");
    let id = first["notificationId"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 32, "{first}");
    let (st, again) = call(&k, "POST", "/api/v1/notifications", Some(&now));
    assert_eq!((st, &again), (202, &first), "the same key gives the same answer");

    // Later: sendAt 4 s ahead, never delivered before it.
    let (sys0, inst0) = (std::time::SystemTime::now(), Instant::now());
    let send_at_ms = unix_ms(sys0) + 4_000;
    let later = json!({"channel": "webhook", "endpoint": hook, "title": "Scheduled",
        "sendAt": klaxon_core::notification::rfc3339_ms(send_at_ms), "idempotencyKey": "later-1"});
    let (st, v) = call(&k, "POST", "/api/v1/notifications", Some(&later));
    assert_eq!(st, 202, "{v}");
    assert_eq!(
        v["sendAt"],
        json!(klaxon_core::notification::rfc3339_ms(send_at_ms)),
        "{v}"
    );
    let later_id = v["notificationId"].as_str().expect("id").to_owned();
    assert_ne!(later_id, id);

    let requests = sink.wait_for_count(2, Duration::from_secs(40)).await;
    assert_eq!(requests.len(), 2, "log:\n{}", k.logs());
    let by_id = |nid: &str| {
        requests
            .iter()
            .find(|r| r.json()["notificationId"] == json!(nid))
            .unwrap_or_else(|| panic!("no delivery of {nid}: {requests:?}"))
            .clone()
    };
    let direct = by_id(&id);
    assert_eq!(direct.header("x-klaxon-notification-id"), Some(id.as_str()));
    let body = direct.json();
    assert_eq!(body["events"][0]["title"], json!("Deploy <v2> done"), "{body}");
    assert_eq!(body["text"], json!("all green"), "{body}");
    assert_eq!(body["ruleId"], json!("api"), "{body}");
    let scheduled = by_id(&later_id);
    let arrived_ms = unix_ms(sys0 + scheduled.at.duration_since(inst0));
    assert!(
        arrived_ms >= send_at_ms - 5,
        "delivered {} ms before sendAt",
        send_at_ms - arrived_ms
    );
    // Nothing more comes: the repeated request was not delivered a second time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.count(), 2, "{:?}", sink.requests());
    // The trail has it, like any delivery.
    let trail = common::eventually(Duration::from_secs(20), || {
        let (_, v) = call(&k, "GET", "/api/v1/deliveries?limit=10", None);
        v["deliveries"]
            .as_array()
            .is_some_and(|a| {
                a.iter()
                    .any(|d| d["notificationId"] == json!(id) && d["status"] == "sent")
            })
            .then_some(())
    })
    .await;
    assert!(trail.is_some(), "the trail has the direct notification");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_notifications_to_private_addresses_are_refused_by_default() {
    let env = Env::new().set("KLAXON_ALLOW_PRIVATE_ENDPOINTS", "false");
    let k = env.spawn("run", &[]);
    for endpoint in [
        "http://127.0.0.1:9/h",
        "http://localhost:9/h",
        "http://10.1.2.3/h",
    ] {
        let body = json!({"channel": "webhook", "endpoint": endpoint, "title": "T"});
        let (st, v) = call(&k, "POST", "/api/v1/notifications", Some(&body));
        assert_eq!(st, 400, "{endpoint}: {v}");
        assert!(error_of(&v).contains("--allow-private-endpoints"), "{v}");
    }
}
