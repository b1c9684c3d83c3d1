//! The on-call overview and project names end to end (the contract's "Close the loop"): the real `klaxon run`
//! against RabbitMQ, Redis and the MongoDB-wire server, a local webhook receiver and a PagerDuty stub.
//! Names set by `rules import` and `PUT /api/v1/projects/{id}` reach the webhook body, PagerDuty's `source` and
//! `GET /api/v1/alerts`; an alert fired by 3 events says 3; webhook firings carry the rule's threshold and period.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{object_id, Env, Klaxon};
use klaxon_testkit::{HttpSink, Reply};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const ROUTING_KEY: &str = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";

/// One HTTP/1.1 request with a JSON body (or none); (status, body as JSON or `Value::String`).
fn call(k: &Klaxon, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(&k.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        k.addr
    );
    if method != "GET" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(&body);
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
    (
        status,
        serde_json::from_str(payload).unwrap_or(Value::String(payload.to_owned())),
    )
}

fn rule(hook: &HttpSink, project: &str) -> Value {
    json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
        "thresholdPeriod": 60_000, "resolveAfter": 0,
        "channels": {
            "webhook": {"isEnabled": true, "endpoint": hook.url(&format!("/h/{project}")), "minPeriod": 0},
            "pagerduty": {"isEnabled": true, "endpoint": ROUTING_KEY, "minPeriod": 0}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_reach_messages_and_the_cross_project_list_which_counts_every_event() {
    let hook = HttpSink::start().await.expect("hook");
    let pd = HttpSink::start().await.expect("pagerduty");
    pd.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &pd.url(""));
    let (imported, named, bare) = (object_id(), object_id(), object_id());
    env.import(&json!([
        {"_id": imported, "name": "Billing <eu>", "notifications": [rule(&hook, &imported)]},
        {"_id": named, "notifications": [rule(&hook, &named)]},
        {"_id": bare, "notifications": [rule(&hook, &bare)]},
    ]));
    let mut k = env.spawn("run", &[]);
    k.wait_ready(WAIT);

    // Names: 1 to 100 characters without control characters, else 400 and nothing stored.
    let path = format!("/api/v1/projects/{named}");
    for bad in [
        json!({"name": ""}),
        json!({"name": "x".repeat(101)}),
        json!({"name": "a\u{7}b"}),
        json!({"name": 3}),
        json!({}),
    ] {
        let (st, v) = call(&k, "PUT", &path, Some(&bad));
        assert_eq!(st, 400, "{bad}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let (st, v) = call(&k, "GET", &path, None);
    assert_eq!(
        (st, &v["name"]),
        (200, &Value::Null),
        "imported without a name: {v}"
    );
    let (st, v) = call(&k, "PUT", &path, Some(&json!({"name": "x".repeat(100)})));
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(&k, "PUT", &path, Some(&json!({"name": " Shop & *co* "})));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v, json!({"projectId": named, "name": "Shop & *co*"}));
    let (st, v) = call(&k, "GET", &path, None);
    assert_eq!((st, v["name"].as_str()), (200, Some("Shop & *co*")), "{v}");
    let (st, v) = call(&k, "GET", &format!("/api/v1/projects/{imported}"), None);
    assert_eq!((st, v["name"].as_str()), (200, Some("Billing <eu>")), "{v}");
    assert_eq!(
        call(&k, "GET", &format!("/api/v1/projects/{}", object_id()), None).0,
        404
    );
    assert_eq!(call(&k, "GET", "/api/v1/projects/nope", None).0, 400);

    // Three events per project fire each rule once.
    for p in [&imported, &named, &bare] {
        env.publish(p, &format!("Boom in {p}"), "g1").count(3).ok();
    }
    let got = hook.wait_for_count(3, WAIT).await;
    assert_eq!(got.len(), 3, "{}", k.logs());
    for r in &got {
        let body = r.json();
        let project = body["projectId"].as_str().expect("projectId").to_owned();
        assert_eq!(r.uri, format!("/h/{project}"));
        let want = if project == imported {
            json!("Billing <eu>")
        } else if project == named {
            json!("Shop & *co*")
        } else {
            Value::Null
        };
        assert_eq!(body["projectName"], want, "{body}");
        assert_eq!(
            body["rule"],
            json!({"threshold": 3, "thresholdPeriod": 60_000}),
            "{body}"
        );
        assert_eq!(body["events"][0]["count"], 3, "{body}");
    }
    let got = pd.wait_for_count(3, WAIT).await;
    let mut sources: Vec<String> = got
        .iter()
        .map(|r| {
            r.json()["payload"]["source"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    sources.sort();
    let mut want = vec!["Billing <eu>".to_owned(), "Shop & *co*".to_owned(), bare.clone()];
    want.sort();
    assert_eq!(sources, want, "PagerDuty's source is the name, the id when none");

    // Every project's firing alerts, with names, each counting the 3 events that made it fire.
    let (st, v) = call(&k, "GET", "/api/v1/alerts?state=firing", None);
    assert_eq!(st, 200, "{v}");
    let list = v["alerts"].as_array().expect("alerts").clone();
    assert_eq!(list.len(), 3, "{v}");
    for a in &list {
        assert_eq!(a["events"], 3, "{a}");
        assert_eq!(a["state"], "firing", "{a}");
        let p = a["projectId"].as_str().expect("projectId");
        let want = if p == imported {
            "Billing <eu>"
        } else if p == named {
            "Shop & *co*"
        } else {
            bare.as_str()
        };
        assert_eq!(a["projectName"], want, "{a}");
    }
    assert_eq!(call(&k, "GET", "/api/v1/alerts?state=open", None).0, 400);
    let (_, v) = call(&k, "GET", "/api/v1/alerts?state=resolved", None);
    assert_eq!(v["alerts"], json!([]), "{v}");

    // A resolve says 3 events too.
    let alert = list
        .iter()
        .find(|a| a["projectId"] == bare.as_str())
        .expect("bare's alert");
    let id = alert["id"].as_str().expect("id");
    let (st, v) = call(
        &k,
        "POST",
        &format!("/api/v1/projects/{bare}/alerts/{id}/resolve"),
        Some(&json!({"by": "ana"})),
    );
    assert_eq!(st, 200, "{v}");
    let got = hook.wait_for_count(4, WAIT).await;
    let resolved = got
        .iter()
        .map(|r| r.json())
        .find(|b| b["kind"] == "resolved")
        .unwrap_or_else(|| panic!("no resolved message: {}", k.logs()));
    assert_eq!(resolved["alert"]["events"], 3, "{resolved}");
    assert!(resolved.get("rule").is_none(), "firings only: {resolved}");
    let (_, v) = call(&k, "GET", "/api/v1/alerts?state=resolved", None);
    assert_eq!(v["alerts"][0]["resolvedBy"], "ana", "{v}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
