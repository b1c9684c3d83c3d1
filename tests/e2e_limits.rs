//! Per-project bounds (README, "Limits per project"; docs/rules.md) end to end, through the real `klaxon`
//! binary: at most 100 rules and 1,000 active mutes per project, 50 recipients per email channel, no
//! `$`-prefixed or dotted keys in rule documents. Over a limit: 4xx from the API and the console, exit 1 from
//! the CLI (`--force` or not), and at read time the excess is reported and skipped. Private endpoints are
//! stored with a warning.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{json_file, object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use reqwest::redirect::Policy;
use serde_json::{json, Value};

/// A rule that can notify, with `endpoint` as its webhook.
fn rule(endpoint: &str) -> Value {
    json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
           "channels": {"webhook": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}})
}

/// `n` rules with a public webhook endpoint (nothing is delivered in these tests).
fn rules(n: usize) -> Vec<Value> {
    (0..n).map(|_| rule("https://hooks.example.com/x")).collect()
}

fn email_rule(recipients: usize) -> Value {
    let to: Vec<String> = (0..recipients).map(|i| format!("user{i}@example.com")).collect();
    json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "ONLY_NEW",
           "channels": {"email": {"isEnabled": true, "endpoint": to.join(", "), "minPeriod": 0}}})
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Stores `n` mutes of `project` straight into its Redis hash, as mutes made before the limit existed (or by a
/// process with a higher one) would be. They match nothing (groups no event has) and end in an hour.
async fn seed_mutes(env: &Env, project: &str, from: usize, n: usize) {
    let client = redis::Client::open(klaxon_testkit::redis_url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let key = format!("{}:mutes:{{{project}}}", env.namespace);
    let until = now_ms() + 3_600_000;
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(500) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&key);
        for i in chunk {
            let id = format!("seeded{i:05}");
            cmd.arg(&id)
                .arg(json!({"muteId": id, "groupHash": format!("never-{i}"), "untilMs": until}).to_string());
        }
        let _: i64 = cmd.query_async(&mut conn).await.expect("HSET");
    }
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(3_600_000)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
}

struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(k: &Klaxon) -> Self {
        Http {
            client: reqwest::Client::builder()
                .redirect(Policy::none())
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            base: format!("http://{}", k.addr),
        }
    }

    /// A JSON request; (status, body as JSON or `Value::String`).
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A console page: (status, location, body).
    async fn page(&self, path: &str, form: Option<&[(&str, &str)]>) -> (u16, String, String) {
        let url = format!("{}{path}", self.base);
        let req = match form {
            Some(f) => self.client.post(url).form(f),
            None => self.client.get(url),
        };
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, location, r.text().await.unwrap_or_default())
    }
}

fn error_of(v: &Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an {{\"error\"}} body: {v}"))
}

fn csrf_of(page: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("no csrf field in:\n{page}"))
        + marker.len();
    page[at..].split('"').next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_the_console_refuse_what_is_over_a_limit_and_warn_on_private_endpoints() {
    // Deliveries to private addresses are refused by default here, so storing one is warned about.
    let env = Env::new().unset("KLAXON_ALLOW_PRIVATE_ENDPOINTS");
    let k = env.spawn("run", &[]);
    let api = Http::new(&k);
    let project = object_id();
    let path = format!("/api/v1/projects/{project}/rules");

    // 101 rules: 400 naming the limit and the count, nothing stored, and `?force=true` does not lift it.
    for query in ["", "?force=true"] {
        let (st, v) = api
            .call(
                "PUT",
                &format!("{path}{query}"),
                Some(&json!({"notifications": rules(101)})),
            )
            .await;
        assert_eq!(st, 400, "{query}: {v}");
        let e = error_of(&v);
        assert!(e.contains("101 rules") && e.contains("limit of 100"), "{e}");
        assert!(e.contains("cannot be forced"), "{e}");
        assert_eq!(v["problems"][0]["limit"], json!(true), "{v}");
        assert!(v["problems"][0]["fix"]
            .as_str()
            .is_some_and(|f| f.contains("--max-rules-per-project")));
        assert_eq!(api.call("GET", &path, None).await.0, 404, "nothing stored");
    }
    // 100 is the limit, not over it.
    let (st, v) = api
        .call("PUT", &path, Some(&json!({"notifications": rules(100)})))
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(v.get("warnings").is_none(), "public endpoints: no warning: {v}");

    // Keys MongoDB would read as operators or paths, anywhere in a rule: 400, forced or not.
    let other = object_id();
    let other_path = format!("/api/v1/projects/{other}/rules");
    let mut with_where = rule("https://hooks.example.com/x");
    with_where["$where"] = json!("sleep(10000) || true");
    let mut with_dot = rule("https://hooks.example.com/x");
    with_dot["channels"]["webhook"]["a.b"] = json!(1);
    for (bad, key) in [
        (with_where, "`$where`"),
        (with_dot, "`a.b` in `channels.webhook`"),
    ] {
        let (st, v) = api
            .call(
                "PUT",
                &format!("{other_path}?force=true"),
                Some(&json!({"notifications": [bad]})),
            )
            .await;
        assert_eq!(st, 400, "{v}");
        assert!(error_of(&v).contains(key), "{v}");
    }
    assert_eq!(api.call("GET", &other_path, None).await.0, 404, "nothing stored");

    // An email channel of 51 recipients: 400; 50 are fine. A direct email to 51: 400 too.
    let (st, v) = api
        .call(
            "PUT",
            &other_path,
            Some(&json!({"notifications": [email_rule(51)]})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        error_of(&v).contains("51 recipients, over the limit of 50"),
        "{v}"
    );
    let (st, v) = api
        .call(
            "PUT",
            &other_path,
            Some(&json!({"notifications": [email_rule(50)]})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let to: Vec<String> = (0..51).map(|i| format!("u{i}@example.com")).collect();
    let (st, v) = api
        .call(
            "POST",
            "/api/v1/notifications",
            Some(&json!({"channel": "email", "endpoint": to.join(","), "title": "Hello"})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(error_of(&v).contains("51 email recipients"), "{v}");

    // A private endpoint is stored, with a warning that says what the senders will do.
    let private = object_id();
    let (st, v) = api
        .call(
            "PUT",
            &format!("/api/v1/projects/{private}/rules"),
            Some(&json!({"notifications": [rule("http://127.0.0.1:9/hook?token=s3cr3t")]})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let warning = v["warnings"][0]["message"].as_str().unwrap_or_default();
    assert!(
        warning.contains("loopback") && warning.contains("--allow-private-endpoints"),
        "{v}"
    );
    assert!(!v["warnings"].to_string().contains("s3cr3t"), "{v}");

    // Mutes: 1,000 active ones (made before the limit), then the 1,001st is a 409 from the API, the console
    // and the CLI.
    seed_mutes(&env, &project, 0, 1000).await;
    let mutes = format!("/api/v1/projects/{project}/mutes");
    let (st, v) = api
        .call("POST", &mutes, Some(&json!({"groupHash": "g", "for": 3600})))
        .await;
    assert_eq!(st, 409, "{v}");
    let e = error_of(&v);
    assert!(
        e.contains("1000 active mutes") && e.contains("limit is 1000"),
        "{e}"
    );
    let (st, v) = api.call("GET", &mutes, None).await;
    assert_eq!(st, 200);
    assert_eq!(v["mutes"].as_array().map(Vec::len), Some(1000), "nothing added");
    let (code, out, err) = env.run(&["mute", "add", "--project", &project, "--for", "1h"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("limit is 1000"), "{err}");

    let page_path = format!("/projects/{project}");
    let (_, _, page) = api.page(&page_path, None).await;
    let csrf = csrf_of(&page);
    let (st, _, body) = api
        .page(
            &format!("{page_path}/mutes"),
            Some(&[("csrf", &csrf), ("duration", "2h"), ("group_hash", "g")]),
        )
        .await;
    assert_eq!(st, 409, "{body}");
    assert!(body.contains("1000 active mutes"), "{body}");

    // More stored than the limit (1,200): the API lists 1,000 and says how many it skipped; the page says so.
    seed_mutes(&env, &project, 1000, 200).await;
    let (_, v) = api.call("GET", &mutes, None).await;
    assert_eq!(v["mutes"].as_array().map(Vec::len), Some(1000));
    assert_eq!(v["skipped"], json!(200), "{}", v["skipped"]);
    let (_, _, page) = api.page(&page_path, None).await;
    assert!(
        page.contains("200 more mutes are stored than the limit of 1000"),
        "{page}"
    );

    // The console's rule editor: over the limit is an error on the page; a private endpoint a warning.
    let (_, _, edit) = api.page(&format!("{page_path}/edit"), None).await;
    let csrf = csrf_of(&edit);
    let text = json!({"_id": project, "notifications": rules(101)}).to_string();
    let (st, _, body) = api
        .page(
            &format!("{page_path}/edit"),
            Some(&[("csrf", &csrf), ("rules", &text), ("force", "on")]),
        )
        .await;
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("101 rules, over the limit of 100"), "{body}");
    let text = json!({"_id": project, "notifications": [rule("http://10.1.2.3/hook")]}).to_string();
    let (st, location, body) = api
        .page(
            &format!("{page_path}/edit"),
            Some(&[("csrf", &csrf), ("rules", &text)]),
        )
        .await;
    assert_eq!(st, 303, "{body}");
    let (_, _, page) = api.page(&location, None).await;
    assert!(
        page.contains("an endpoint points to a loopback or private address"),
        "{page}"
    );
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_flags_of_every_process_and_the_cli_refuses_over_them_with_exit_1() {
    let env = Env::new().set("KLAXON_LOG", "warn");
    let project = object_id();
    let import = |name: &str, n: usize, extra: &[&str]| {
        let file = json_file(&env, name, &json!([{"_id": project, "notifications": rules(n)}]));
        let mut args = vec!["rules", "import", "--file", file.to_str().expect("path")];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    // Over the default limit: exit 1, forced or not, nothing stored.
    for force in [&[][..], &["--force"][..]] {
        let (code, out, err) = import("over", 101, force);
        assert_eq!(code, 1, "{force:?}: {out}{err}");
        assert!(err.contains("101 rules, over the limit of 100"), "{err}");
        assert!(
            err.contains("nothing imported (a limit cannot be forced)"),
            "{err}"
        );
    }
    let out = env.ok(&["rules", "export", "--project", &project]);
    assert!(out.contains("\"notifications\": []"), "nothing stored: {out}");
    // A lower limit from the flag, or from the environment.
    let (code, _, err) = import("three", 4, &["--max-rules-per-project", "3"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("4 rules, over the limit of 3"), "{err}");
    let low = env.clone().set("KLAXON_MAX_RULES_PER_PROJECT", "3");
    let file = json_file(
        &env,
        "four",
        &json!([{"_id": project, "notifications": rules(4)}]),
    );
    let (code, _, err) = low.run(&["rules", "import", "--file", file.to_str().expect("path")]);
    assert_eq!(code, 1, "{err}");
    // A limit out of range is a usage error, before anything connects.
    let (code, _, err) = import("zero", 1, &["--max-rules-per-project", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--max-rules-per-project must be a whole number from 1"),
        "{err}"
    );

    // At the limit, `rules add` refuses one more.
    env.ok(&[
        "rules",
        "import",
        "--file",
        import_file(&env, &project, 100).as_str(),
    ]);
    let add = |args: &[&str]| {
        let mut all = vec!["rules", "add", "--project", project.as_str(), "--only-new"];
        all.extend_from_slice(args);
        env.run(&all)
    };
    let (code, out, err) = add(&["--webhook", "https://hooks.example.com/y"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("already holds 100 rules, the limit is 100"), "{err}");

    // An email channel over the recipient limit: exit 1 from `add` and `import`.
    let fresh = object_id();
    let to: Vec<String> = (0..51).map(|i| format!("u{i}@example.com")).collect();
    let (code, _, err) = env.run(&[
        "rules",
        "add",
        "--project",
        &fresh,
        "--only-new",
        "--email",
        &to.join(","),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("51 recipients, over the limit of 50"), "{err}");
    let file = json_file(
        &env,
        "email",
        &json!([{"_id": fresh, "notifications": [email_rule(51)]}]),
    );
    let (code, _, err) = env.run(&[
        "rules",
        "import",
        "--force",
        "--file",
        file.to_str().expect("path"),
    ]);
    assert_eq!(code, 1, "{err}");

    // `$`-prefixed and dotted keys: exit 1, forced or not.
    let mut bad = rule("https://hooks.example.com/x");
    bad["channels"]["webhook"]["$inc"] = json!({"n": 1});
    let file = json_file(&env, "keys", &json!([{"_id": fresh, "notifications": [bad]}]));
    let (code, _, err) = env.run(&[
        "rules",
        "import",
        "--force",
        "--file",
        file.to_str().expect("path"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`$inc` in `channels.webhook`"), "{err}");

    // A private endpoint: stored, with a warning on stderr (none with --allow-private-endpoints).
    let private = json_file(
        &env,
        "private",
        &json!([{"_id": fresh, "notifications": [rule("http://localhost:8080/hook")]}]),
    );
    let path = private.to_str().expect("path");
    let env_default = env.clone().unset("KLAXON_ALLOW_PRIVATE_ENDPOINTS");
    let (code, out, err) = env_default.run(&["rules", "import", "--file", path]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("warning: 1 endpoint(s) on a loopback or private address"),
        "{err}"
    );
    let (code, _, err) = env_default.run(&["rules", "import", "--allow-private-endpoints", "--file", path]);
    assert_eq!(code, 0);
    assert!(!err.contains("warning"), "{err}");

    // A process with lower limits: its API refuses the third mute of two.
    let k = env.spawn(
        "sender",
        &[
            "--max-mutes-per-project",
            "2",
            "--max-rules-per-project",
            "3",
            "--max-email-recipients",
            "2",
        ],
    );
    let api = Http::new(&k);
    let mutes = format!("/api/v1/projects/{project}/mutes");
    for i in 0..2 {
        let (st, v) = api
            .call(
                "POST",
                &mutes,
                Some(&json!({"groupHash": format!("g{i}"), "for": 60})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = api
        .call("POST", &mutes, Some(&json!({"groupHash": "g2", "for": 60})))
        .await;
    assert_eq!(st, 409, "{v}");
    assert!(
        error_of(&v).contains("already has 2 active mutes, the limit is 2"),
        "{v}"
    );
    let (st, v) = api
        .call(
            "PUT",
            &format!("/api/v1/projects/{fresh}/rules"),
            Some(&json!({"notifications": [email_rule(3)]})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(error_of(&v).contains("3 recipients, over the limit of 2"), "{v}");
    // A limit out of range stops the process at start (usage error).
    let (code, _, err) = env.run(&["worker", "--max-mutes-per-project", "0"]);
    assert_eq!(code, 2, "{err}");
    common::delete_queues(&env).await;
}

fn import_file(env: &Env, project: &str, n: usize) -> String {
    json_file(
        env,
        "at-limit",
        &json!([{"_id": project, "notifications": rules(n)}]),
    )
    .to_str()
    .expect("path")
    .to_owned()
}

/// A project document over the rule limit written straight into MongoDB (by Hawk's garage, or an older
/// Klaxon): `rules check` reports it, the worker evaluates only its first 100 rules (document order) and counts
/// the skip, and another project's alert in the same batches is unaffected. Mutes over the limit are not read
/// on a firing batch either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_over_the_limit_written_elsewhere_is_reported_and_only_its_first_rules_fire() {
    use mongodb::bson::{doc, oid::ObjectId, Document};
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let (big, other) = (ObjectId::new(), ObjectId::new());
    let hawk_rule = |tag: &str, path: &str| -> Document {
        doc! {"_id": ObjectId::new(), "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [tag], "excluding": [],
        "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url(path), "minPeriod": 0}}}
    };
    let many: Vec<Document> = (0..150)
        .map(|i| hawk_rule(&format!("<r{i:03}>"), &format!("/r{i:03}")))
        .collect();
    let client = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("mongo");
    let projects = client.database(&env.namespace).collection::<Document>("projects");
    projects
        .insert_one(doc! {"_id": big, "name": "Big", "notifications": many})
        .await
        .expect("insert");
    projects
        .insert_one(doc! {"_id": other, "notifications": [hawk_rule("Boom", "/other")]})
        .await
        .expect("insert");

    let (code, out, err) = env.run(&["rules", "check", "--project", &big.to_hex()]);
    assert_eq!(code, 1, "check exits 1: {out}{err}");
    assert!(
        out.contains(&format!(
            "project {}: [over a limit] the project has 150 rules",
            big.to_hex()
        )) && out.contains("first 100 (in document order)")
            && out.contains("other 50"),
        "{out}"
    );
    let (code, out, _) = env.run(&["rules", "check", "--project", &big.to_hex(), "-o", "json"]);
    assert_eq!(code, 1);
    let found: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(found[0]["limit"], json!(true), "{out}");
    assert_eq!(found[0]["ruleId"], Value::Null, "a problem of the project: {out}");

    // Mutes past the limit (1,050 stored, none matching): a firing batch reads 1,000 of them.
    seed_mutes(&env, &big.to_hex(), 0, 1050).await;
    let k = env.spawn("run", &[]);
    for (project, title, group) in [
        (big.to_hex(), "Boom <r000> <r099> <r100> <r149>", "g1"),
        (other.to_hex(), "Boom", "g2"),
    ] {
        env.publish(&project, title, group).new_first().ok();
    }
    k.wait_acked(2, Duration::from_secs(30));
    let got = sink.wait_for_count(3, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut uris: Vec<String> = sink.requests().iter().map(|r| r.uri.clone()).collect();
    uris.sort();
    assert_eq!(
        uris,
        ["/other", "/r000", "/r099"],
        "rules 101 and 150 are past the limit; got {} requests; log:\n{}",
        got.len(),
        k.logs()
    );
    assert!(k.metric("klaxon_rules_skipped_total") >= 50.0, "{}", k.logs());
    assert!(k.metric("klaxon_mutes_skipped_total") >= 50.0, "{}", k.logs());
    let logs = k.logs();
    assert_eq!(
        logs.matches("the project has 150 rules, over the limit of 100")
            .count(),
        1,
        "logged once: {logs}"
    );
    assert!(logs.contains("more mutes than --max-mutes-per-project"), "{logs}");
    // The console shows the rules the engine evaluates, and says why the others are not there.
    let (st, _, page) = Http::new(&k)
        .page(&format!("/projects/{}", big.to_hex()), None)
        .await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(page.matches("<tr id=\"rule-").count(), 100, "{page}");
    assert!(
        page.contains("the project has 150 rules, over the limit of 100"),
        "{page}"
    );
    assert!(
        page.contains("50 more mutes are stored than the limit of 1000"),
        "{page}"
    );
    common::delete_queues(&env).await;
}
