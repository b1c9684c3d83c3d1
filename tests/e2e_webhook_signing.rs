//! Webhook signing end to end (#22): the real `klaxon run` delivers to local receivers, and what a tenant is
//! given — the secret from the API (`GET /api/v1/projects/{id}/webhook-secret`) or `klaxon webhook secret` —
//! verifies its own project's deliveries and nothing else, only within the 5-minute tolerance, across retries and
//! through a key rotation. Verification is the Standard Webhooks check of `klaxon_channels::webhook` (checked
//! against the spec's own example in its unit tests; docs/webhook.md's Python and Node verifiers and the reference
//! libraries are run on a real delivery by tests/docs.rs).

mod common;

use std::time::Duration;

use common::{object_id, reference_hmac_sha256, Env, Klaxon};
use klaxon_channels::webhook::{EndpointSecret, TOLERANCE_SECS};
use klaxon_testkit::{HttpSink, Reply, Request};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// One ONLY_NEW rule of `project` with a webhook channel to `endpoint`.
fn rules(project: &str, endpoint: &str) -> Value {
    json!({"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
        "channels": {"webhook": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}}]})
}

fn publish(env: &Env, project: &str, group: &str) {
    let title = format!("TypeError: {group} ({})", env.namespace);
    env.publish(project, &title, group).new_first().ok();
}

/// The Standard Webhooks headers of a request: (id, timestamp, signatures).
fn standard(req: &Request) -> (String, String, String) {
    let h = |n: &str| {
        req.header(n)
            .unwrap_or_else(|| panic!("no {n} header: {:?}", req.headers))
            .to_owned()
    };
    (h("webhook-id"), h("webhook-timestamp"), h("webhook-signature"))
}

/// Verifies `req` with `secret` at `now_s` as a receiver does.
fn verifies(secret: &EndpointSecret, req: &Request, now_s: i64) -> bool {
    let (id, ts, sig) = standard(req);
    secret.verify(&id, &ts, &sig, &req.body, now_s)
}

/// The time of the attempt, from its header.
fn stamp(req: &Request) -> i64 {
    standard(req).1.parse().expect("integer seconds")
}

fn whsec(v: &Value, field: &str) -> EndpointSecret {
    v[field]
        .as_str()
        .and_then(EndpointSecret::from_whsec)
        .unwrap_or_else(|| panic!("`{field}` is a whsec_ secret: {v}"))
}

/// `GET path` on the running process, with a bearer token if given: (status, body).
async fn get_page(k: &Klaxon, path: &str, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(format!("http://{}{path}", k.addr))
        .timeout(Duration::from_secs(10));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("the console answers");
    (resp.status().as_u16(), resp.text().await.unwrap_or_default())
}

/// How the console's HTML shows a secret (minijinja escapes `/`).
fn in_html(secret: &EndpointSecret) -> String {
    secret.expose_whsec().replace('/', "&#x2f;")
}

/// `GET /api/v1/projects/{project}/webhook-secret?endpoint=` on the running process.
async fn api_secret(k: &Klaxon, project: &str, endpoint: &str) -> (u16, Value, Option<String>) {
    let resp = reqwest::Client::new()
        .get(format!(
            "http://{}/api/v1/projects/{project}/webhook-secret",
            k.addr
        ))
        .query(&[("endpoint", endpoint)])
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("API answers");
    let status = resp.status().as_u16();
    let cache = resp
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, resp.json().await.unwrap_or(Value::Null), cache)
}

/// Two tenants whose rules point at the same receiver URL (the worst case: a hostile tenant copies another's
/// endpoint) get different secrets, and neither secret verifies the other project's delivery. A captured request
/// stops verifying once it is older than the tolerance. Direct notifications are signed with their project's
/// secret, or the project-less one. No secret reaches the log or the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_project_gets_its_own_secret_and_a_captured_request_expires() {
    const MASTER: &str = "MASTERwebhookKEY-e2e-0123456789abcdef";
    let env = Env::new().set("KLAXON_WEBHOOK_SECRET", MASTER).set(
        "KLAXON_LOG",
        "debug,lapin=warn,hyper=warn,hyper_util=warn,reqwest=warn,h2=warn,rustls=warn",
    );
    let hook = HttpSink::start().await.expect("sink");
    let endpoint = hook.url("/tenant-a/hook");
    let (a, b) = (object_id(), object_id());
    env.import(&json!([rules(&a, &endpoint), rules(&b, &endpoint)]));
    let mut k = env.spawn("run", &[]);
    publish(&env, &a, "ga");
    let first = hook.wait_for_count(1, WAIT).await;
    assert_eq!(first.len(), 1, "log:\n{}", k.logs());
    publish(&env, &b, "gb");
    let got = hook.wait_for_count(2, WAIT).await;
    assert_eq!(got.len(), 2, "log:\n{}", k.logs());
    let (req_a, req_b) = (&got[0], &got[1]);
    assert_eq!(req_a.json()["projectId"], a.as_str());
    assert_eq!(req_b.json()["projectId"], b.as_str());

    // What each tenant is given: A through the API, B through the CLI (the same derivation).
    let (status, v, cache) = api_secret(&k, &a, &endpoint).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(cache.as_deref(), Some("no-store"));
    assert_eq!(v["projectId"], a.as_str());
    let secret_a = whsec(&v, "secret");
    assert_eq!(
        whsec(&env.webhook_secret(&a, &endpoint), "secret"),
        secret_a,
        "API and CLI agree"
    );
    let secret_b = whsec(&env.webhook_secret(&b, &endpoint), "secret");
    assert_ne!(secret_a, secret_b, "two projects, two secrets for one endpoint");
    let (status, html) = get_page(&k, &format!("/projects/{a}"), None).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains(&in_html(&secret_a)), "A's page shows A's secret");
    assert!(!html.contains(&in_html(&secret_b)), "and not B's");

    for req in [req_a, req_b] {
        let (id, _, sig) = standard(req);
        assert_eq!(
            req.json()["notificationId"],
            id.as_str(),
            "webhook-id is the notificationId"
        );
        assert_eq!(sig.split(' ').count(), 1, "one signature outside a rotation");
        assert!(
            req.header("x-klaxon-signature").is_none(),
            "no KLAXON_WEBHOOK_LEGACY_SECRET: no deprecated header"
        );
    }
    let now = |req: &Request| stamp(req) + 1;
    assert!(
        verifies(&secret_a, req_a, now(req_a)),
        "A verifies its own delivery"
    );
    assert!(
        verifies(&secret_b, req_b, now(req_b)),
        "B verifies its own delivery"
    );
    assert!(
        !verifies(&secret_a, req_b, now(req_b)),
        "A's secret does not verify B's delivery"
    );
    assert!(
        !verifies(&secret_b, req_a, now(req_a)),
        "B's secret does not verify A's delivery"
    );

    // Replay: the captured request verifies within the tolerance and never after it; a fresh timestamp on the
    // captured signature does not verify either.
    let t = stamp(req_a);
    assert!(verifies(&secret_a, req_a, t + TOLERANCE_SECS));
    assert!(
        !verifies(&secret_a, req_a, t + TOLERANCE_SECS + 1),
        "replayed 5 min 1 s later"
    );
    assert!(!verifies(&secret_a, req_a, t + 24 * 3600), "replayed a day later");
    let (id, _, sig) = standard(req_a);
    let later = (t + 3600).to_string();
    assert!(
        !secret_a.verify(&id, &later, &sig, &req_a.body, t + 3600),
        "re-stamped"
    );

    // Direct notifications: with a projectId, signed with that project's secret; without one, with the
    // endpoint's project-less secret (`GET /api/v1/webhook-secret`), which verifies no project's delivery.
    let client = reqwest::Client::new();
    for body in [
        json!({"channel": "webhook", "endpoint": endpoint, "title": "deploy", "projectId": a}),
        json!({"channel": "webhook", "endpoint": endpoint, "title": "deploy"}),
    ] {
        let resp = client
            .post(format!("http://{}/api/v1/notifications", k.addr))
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("API answers");
        assert_eq!(resp.status().as_u16(), 202);
    }
    let got = hook.wait_for_count(4, WAIT).await;
    assert_eq!(
        got.len(),
        4,
        "log:
{}",
        k.logs()
    );
    let (direct_a, direct_none) = if got[2].json()["projectId"] == a.as_str() {
        (&got[2], &got[3])
    } else {
        (&got[3], &got[2])
    };
    let none: Value = client
        .get(format!("http://{}/api/v1/webhook-secret", k.addr))
        .query(&[("endpoint", &endpoint)])
        .send()
        .await
        .expect("API answers")
        .json()
        .await
        .expect("JSON");
    assert_eq!(none["projectId"], Value::Null);
    let secret_none = whsec(&none, "secret");
    assert!(verifies(&secret_a, direct_a, stamp(direct_a) + 1));
    assert!(verifies(&secret_none, direct_none, stamp(direct_none) + 1));
    assert!(!verifies(&secret_none, direct_a, stamp(direct_a) + 1));
    assert!(!verifies(&secret_a, direct_none, stamp(direct_none) + 1));
    assert!(
        !verifies(&secret_none, req_a, stamp(req_a) + 1),
        "the project-less secret verifies no project's"
    );

    // The API refuses what is not a webhook URL; no master key, no secret.
    let (status, v, _) = api_secret(&k, &a, "ftp://x").await;
    assert_eq!(status, 400, "{v}");
    let (code, _, err) = env.clone().unset("KLAXON_WEBHOOK_SECRET").run(&[
        "webhook",
        "secret",
        "--project",
        &a,
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("KLAXON_WEBHOOK_SECRET is not set"), "{err}");

    let (_, metrics) = k.get("/metrics").expect("metrics");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    let logs = k.logs();
    for secret in [
        MASTER.to_owned(),
        secret_a.expose_whsec(),
        secret_b.expose_whsec(),
    ] {
        let bare = secret.trim_start_matches("whsec_");
        assert!(!logs.contains(bare), "a secret in the log:\n{logs}");
        assert!(!metrics.contains(bare), "a secret in the metrics");
    }
    common::delete_queues(&env).await;
}

/// A receiver that fails once: both attempts carry the notification's id, each is signed at its own time, and
/// during a rotation each carries two signatures — one verifies with the secret the tenant had before the
/// rotation, the other with the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_keeps_the_id_and_a_rotation_verifies_with_the_old_and_the_new_secret() {
    const TOKEN: &str = "console-token-e2e";
    let before = Env::new().set("KLAXON_WEBHOOK_SECRET", "OLDmasterKEY-e2e-0123456789abcdef");
    let env = before
        .clone()
        .set("KLAXON_WEBHOOK_SECRET", "NEWmasterKEY-e2e-0123456789abcdef")
        .set(
            "KLAXON_WEBHOOK_SECRET_PREVIOUS",
            "OLDmasterKEY-e2e-0123456789abcdef",
        )
        .set("KLAXON_API_TOKEN", TOKEN);
    let hook = HttpSink::start().await.expect("sink");
    hook.script([Reply::status(500)]);
    let endpoint = hook.url("/hook");
    let project = object_id();
    env.import(&json!([rules(&project, &endpoint)]));
    let mut k = env.spawn("run", &["--retry-schedule", "1"]);
    publish(&env, &project, "g1");
    let got = hook.wait_for_count(2, WAIT).await;
    assert_eq!(got.len(), 2, "a failed attempt, then a retry; log:\n{}", k.logs());

    let old = whsec(&before.webhook_secret(&project, &endpoint), "secret");
    let rotating = env.webhook_secret(&project, &endpoint);
    let new = whsec(&rotating, "secret");
    assert_eq!(
        whsec(&rotating, "previousSecret"),
        old,
        "the previous secret is the one before the rotation"
    );
    assert_ne!(new, old);
    let id = got[0].json()["notificationId"].as_str().expect("id").to_owned();
    for req in &got {
        let (h_id, _, sig) = standard(req);
        assert_eq!(h_id, id, "webhook-id is the notificationId on every attempt");
        assert_eq!(
            sig.split(' ').count(),
            2,
            "two signatures during a rotation: {sig}"
        );
        let now = stamp(req) + 1;
        assert!(verifies(&new, req, now), "the new secret verifies");
        assert!(
            verifies(&old, req, now),
            "the secret from before the rotation still verifies"
        );
        let stranger = whsec(&env.webhook_secret(&object_id(), &endpoint), "secret");
        assert!(!verifies(&stranger, req, now));
    }
    assert!(
        stamp(&got[1]) >= stamp(&got[0]),
        "each attempt carries its own time"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// #30: a master key shorter than 32 bytes is refused before anything connects (exit 2, naming the command that
/// makes one, never echoing the key) by every command that reads it, and `klaxon doctor` FAILs it.
#[test]
fn a_short_master_key_is_a_start_up_error_and_a_doctor_failure() {
    const SHORT: &str = "changeme";
    let env = Env::new().set("KLAXON_WEBHOOK_SECRET", SHORT);
    let port = common::free_port().to_string();
    let bind = format!("127.0.0.1:{port}");
    for args in [
        vec!["run", "--http-addr", bind.as_str()],
        vec!["sender", "--http-addr", bind.as_str()],
        vec!["webhook", "secret", "--endpoint", "https://h.example/x"],
    ] {
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.contains("KLAXON_WEBHOOK_SECRET must be at least 32 bytes"),
            "{args:?}: {err}"
        );
        assert!(err.contains("openssl rand -base64 32"), "{args:?}: {err}");
        assert!(
            !err.contains(SHORT) && !out.contains(SHORT),
            "the key is never echoed: {err}"
        );
    }
    let (code, out, err) = env.run(&["doctor", "--timeout", "2s"]);
    assert_eq!(code, 1, "a FAIL line: {out}{err}");
    let line = out
        .lines()
        .find(|l| l.contains("webhook signing"))
        .unwrap_or_else(|| panic!("a webhook signing line: {out}"));
    assert!(line.starts_with("FAIL"), "{line}");
    assert!(line.contains("openssl rand -base64 32"), "{line}");
    assert!(!out.contains(SHORT) && !err.contains(SHORT), "{out}{err}");
    // A long key passes; a legacy key equal to the master key is refused like a short one.
    let long = "a-master-key-of-thirty-two-bytes-or-more";
    let (code, out, _) = env
        .clone()
        .set("KLAXON_WEBHOOK_SECRET", long)
        .run(&["doctor", "--timeout", "2s"]);
    let line = out
        .lines()
        .find(|l| l.contains("webhook signing"))
        .unwrap_or_default();
    assert!(line.starts_with("ok"), "{code}: {out}");
    let (code, _, err) = env
        .clone()
        .set("KLAXON_WEBHOOK_SECRET", long)
        .set("KLAXON_WEBHOOK_LEGACY_SECRET", long)
        .run(&["run", "--http-addr", bind.as_str()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("KLAXON_WEBHOOK_LEGACY_SECRET must not be a master key") && !err.contains(long),
        "{err}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// #30: the deprecated `X-Klaxon-Signature` is absent by default (see the test above it) and, with
/// `KLAXON_WEBHOOK_LEGACY_SECRET`, present and made with that key — never with the master key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_header_is_made_with_the_legacy_key_only_when_it_is_set() {
    const MASTER: &str = "MASTER-legacy-e2e-0123456789abcdef0123";
    const LEGACY: &str = "changeme";
    let env = Env::new()
        .set("KLAXON_WEBHOOK_SECRET", MASTER)
        .set("KLAXON_WEBHOOK_LEGACY_SECRET", LEGACY);
    let hook = HttpSink::start().await.expect("sink");
    let endpoint = hook.url("/legacy/hook");
    let project = object_id();
    env.import(&json!([rules(&project, &endpoint)]));
    let mut k = env.spawn("run", &[]);
    publish(&env, &project, "g-legacy");
    let got = hook.wait_for_count(1, WAIT).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    let req = &got[0];
    let with = |key: &str| {
        format!(
            "sha256={}",
            hex(&reference_hmac_sha256(key.as_bytes(), &req.body))
        )
    };
    assert_eq!(
        req.header("x-klaxon-signature"),
        Some(with(LEGACY).as_str()),
        "made with the legacy key"
    );
    assert_ne!(
        req.header("x-klaxon-signature"),
        Some(with(MASTER).as_str()),
        "never the master key"
    );
    // The standard signature is unchanged: the tenant's secret verifies it.
    let secret = whsec(&env.webhook_secret(&project, &endpoint), "secret");
    assert!(verifies(&secret, req, stamp(req) + 1));
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    let logs = k.logs();
    assert!(
        !logs.contains(MASTER) && !logs.contains(LEGACY),
        "no key in the log"
    );
    common::delete_queues(&env).await;
}
