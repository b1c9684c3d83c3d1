//! The web console (`GET /`, docs/console.md) end to end: the real `klaxon run` binary against RabbitMQ, Redis
//! and the MongoDB-wire server, over plain HTTP (login, cookies, CSRF, escaping, paging) and in a real headless
//! Chromium driven through chromedriver (editing rules, explain, mutes, dead-letter replay, screenshots).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use reqwest::header::{HeaderMap, AUTHORIZATION, COOKIE, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::{json, Value};

/// An answer, with what the tests look at.
struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The value of the first hidden `csrf` field.
    fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let at = self
            .body
            .find(marker)
            .unwrap_or_else(|| panic!("no csrf field in:\n{}", self.body))
            + marker.len();
        self.body[at..].split('"').next().unwrap_or_default().to_owned()
    }
}

/// A browser-like HTTP client: no redirects followed, the session cookie carried by hand.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookie: Option<String>,
    bearer: Option<String>,
}

impl Browser {
    fn new(k: &Klaxon) -> Self {
        Browser {
            http: reqwest::Client::builder()
                .redirect(Policy::none())
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            base: format!("http://{}", k.addr),
            cookie: None,
            bearer: None,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Page {
        let mut req = req;
        if let Some(c) = &self.cookie {
            req = req.header(COOKIE, c.as_str());
        }
        if let Some(b) = &self.bearer {
            req = req.header(AUTHORIZATION, format!("Bearer {b}"));
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r.text().await.unwrap_or_default();
        Page {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str) -> Page {
        self.send(self.http.get(format!("{}{path}", self.base))).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        self.send(self.http.post(format!("{}{path}", self.base)).form(form))
            .await
    }
}

fn webhook_rule(sink: &HttpSink, extra: Value) -> Value {
    let mut r = json!({"_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 3,
        "thresholdPeriod": 3_600_000, "including": [], "excluding": [],
        "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/hook?secret=hunter2"), "minPeriod": 0}}});
    if let (Some(r), Value::Object(e)) = (r.as_object_mut(), extra) {
        r.extend(e);
    }
    r
}

fn assert_security_headers(p: &Page) {
    assert_eq!(
        p.header("content-security-policy"),
        "default-src 'self'; style-src 'self' 'unsafe-inline'"
    );
    assert_eq!(p.header("x-frame-options"), "DENY");
    assert_eq!(p.header("referrer-policy"), "no-referrer");
}

/// Inserts `n` delivery-trail records of `project`, one notification each, the newest now: the first 600 one
/// second apart (the last hour: 400 sent, 200 dead), the rest from 70 minutes ago back (so repeated runs
/// against a shared server do not pile thousands of records into every later run's last hour).
async fn fill_trail(env: &Env, project: &str, n: usize) {
    use mongodb::bson::{doc, DateTime};
    let client = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("mongo");
    let coll = client
        .database(&env.namespace)
        .collection::<mongodb::bson::Document>("deliveries");
    let now = DateTime::now().timestamp_millis();
    let docs: Vec<_> = (0..n)
        .map(|i| {
            let at = if i < 600 {
                now - 1000 * i as i64
            } else {
                now - 4_200_000 - 1000 * i as i64
            };
            doc! {"notificationId": format!("n-{i:05}"), "projectId": project, "ruleId": "r", "channel": "webhook",
                  "destination": "http://127.0.0.1/…", "attempts": 1i64, "status": if i % 3 == 0 { "dead" } else { "sent" },
                  "lastError": mongodb::bson::Bson::Null, "firedAt": DateTime::from_millis(at), "at": DateTime::from_millis(at)}
        })
        .collect();
    for chunk in docs.chunks(500) {
        coll.insert_many(chunk.to_vec()).await.expect("insert trail");
    }
}

/// Removes what [`fill_trail`] inserted (the MongoDB-wire server may be shared by other checkouts' tests).
async fn clear_trail(project: &str) {
    use mongodb::bson::doc;
    if let Ok(client) = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url()).await {
        let coll = client
            .database("unused")
            .collection::<mongodb::bson::Document>("deliveries");
        let _ = coll.delete_many(doc! {"projectId": project, "ruleId": "r"}).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_cookie_csrf_escaping_and_paging_with_a_token() {
    let token = format!("tok-{}", object_id());
    let env = Env::new().set("KLAXON_API_TOKEN", &token);
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let evil = "<script>alert(1)</script>";
    let rule = webhook_rule(&sink, json!({"including": [evil]}));
    let rule_id = rule["_id"].as_str().expect("id").to_owned();
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn("run", &[]);
    let mut b = Browser::new(&k);

    // Without a session: every page is 401 and shows the login form; a form post is 401 too. /login is open.
    for path in ["/", &format!("/projects/{project}"), "/deliveries", "/dead"] {
        let p = b.get(path).await;
        assert_eq!(p.status, 401, "{path}: {}", p.body);
        assert!(p.body.contains("name=\"token\""), "{path}: {}", p.body);
        assert!(!p.body.contains(evil), "{path}");
    }
    let p = b.post("/dead/replay", &[("csrf", "x")]).await;
    assert_eq!(p.status, 401, "{}", p.body);
    let login = b.get("/login").await;
    assert_eq!(login.status, 200, "{}", login.body);
    assert_security_headers(&login);
    let login_csrf = login.csrf();

    // Wrong token: an error, no cookie. Right token with a wrong CSRF: 403.
    let p = b
        .post("/login", &[("csrf", &login_csrf), ("token", "wrong")])
        .await;
    assert_eq!(p.status, 401, "{}", p.body);
    assert!(p.body.contains("Wrong token"), "{}", p.body);
    assert!(p.headers.get(SET_COOKIE).is_none());
    let p = b.post("/login", &[("csrf", "nope"), ("token", &token)]).await;
    assert_eq!(p.status, 403, "{}", p.body);
    assert!(p.headers.get(SET_COOKIE).is_none());

    // Right token: a session cookie that scripts cannot read and other sites never send.
    let p = b
        .post("/login", &[("csrf", &login_csrf), ("token", &token)])
        .await;
    assert_eq!((p.status, p.header("location")), (303, "/"), "{}", p.body);
    let set = p.header("set-cookie").to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(flag), "{flag} in {set}");
    }
    let pair = set.split(';').next().unwrap_or_default().to_owned();
    let id = pair.strip_prefix("klaxon_session=").expect("cookie name");
    assert!(
        id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "{pair}"
    );
    assert!(
        !set.contains(&token) && !login.body.contains(&token),
        "the token is never echoed"
    );
    b.cookie = Some(pair.clone());

    let home = b.get("/").await;
    assert_eq!(home.status, 200, "{}", home.body);
    assert_security_headers(&home);
    assert!(home.body.contains(&project), "{}", home.body);
    assert!(
        home.body.contains(&format!("{}.events", env.namespace)),
        "queue depths"
    );
    assert!(!home.body.contains(&token));

    // Escaping: the rule's filter and an explain title with markup are shown as text; endpoints are redacted.
    let page = b.get(&format!("/projects/{project}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<script"), "{}", page.body);
    assert!(!page.body.contains("hunter2"), "the endpoint is redacted");
    let csrf = page.csrf();
    let explain = b
        .get(&format!(
            "/projects/{project}/explain?title=%3Cscript%3Ex%3C%2Fscript%3E&groupHash=g%22%3E%3Cb%3E"
        ))
        .await;
    assert_eq!(explain.status, 200, "{}", explain.body);
    assert!(
        explain.body.contains("&lt;script&gt;x&lt;&#x2f;script&gt;"),
        "{}",
        explain.body
    );
    assert!(
        !explain.body.contains("<script") && !explain.body.contains("\"><b>"),
        "{}",
        explain.body
    );
    assert!(explain.body.contains("filtered"), "a verdict: {}", explain.body);

    // Every POST needs the session's CSRF token.
    let toggle = format!("/projects/{project}/rules/{rule_id}/enabled");
    let p = b.post(&toggle, &[("enabled", "false")]).await;
    assert_eq!(p.status, 403, "no CSRF: {}", p.body);
    let p = b
        .post(
            &toggle,
            &[("enabled", "false"), ("csrf", "0123456789abcdef0123456789abcdef")],
        )
        .await;
    assert_eq!(p.status, 403, "wrong CSRF: {}", p.body);
    let api = {
        let mut a = Browser::new(&k);
        a.bearer = Some(token.clone());
        a
    };
    let stored = |body: &str| serde_json::from_str::<Value>(body).expect("rules json");
    let rules = api.get(&format!("/api/v1/projects/{project}/rules")).await;
    assert_eq!(
        stored(&rules.body)["notifications"][0]["isEnabled"],
        true,
        "nothing changed"
    );
    let p = b.post(&toggle, &[("enabled", "false"), ("csrf", &csrf)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let rules = api.get(&format!("/api/v1/projects/{project}/rules")).await;
    assert_eq!(stored(&rules.body)["notifications"][0]["isEnabled"], false);

    // The edit page validates like the PUT and keeps the user's text on error; "store anyway" stores.
    let edit = format!("/projects/{project}/edit");
    let text = b.get(&edit).await;
    assert_eq!(text.status, 200);
    let mut bad = stored(&rules.body);
    bad["notifications"][0]["threshold"] = json!(0);
    let bad_text = serde_json::to_string_pretty(&bad).expect("json");
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", &bad_text)]).await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("threshold"), "the problem: {}", p.body);
    assert!(
        p.body.contains("&quot;threshold&quot;: 0"),
        "the user's text is kept"
    );
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", "{nope")]).await;
    assert_eq!(p.status, 400);
    assert!(p.body.contains("not JSON") && p.body.contains("{nope"));
    let p = b
        .post(&edit, &[("csrf", &csrf), ("rules", &bad_text), ("force", "on")])
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let rules = api.get(&format!("/api/v1/projects/{project}/rules")).await;
    assert_eq!(stored(&rules.body)["notifications"][0]["threshold"], 0);

    // Bearer works too (no session, the process's CSRF token); a wrong one is refused.
    let p = api.get("/").await;
    assert_eq!(p.status, 200);
    let mut wrong = Browser::new(&k);
    wrong.bearer = Some("nope".into());
    assert_eq!(wrong.get("/").await.status, 401);

    // Deliveries: thousands of trail records, 50 per page, each page fast, no gaps or repeats.
    fill_trail(&env, &project, 3000).await;
    let mut next = format!("/deliveries?project={project}");
    let mut seen = std::collections::BTreeSet::new();
    let mut slowest = Duration::ZERO;
    for page_no in 0..3 {
        let t = Instant::now();
        let p = b.get(&next).await;
        slowest = slowest.max(t.elapsed());
        assert_eq!(p.status, 200, "{}", p.body);
        let ids: Vec<String> = p
            .body
            .match_indices("<td class=\"mono\">n-")
            .map(|(i, _)| p.body[i + 17..i + 24].to_owned())
            .collect();
        assert_eq!(ids.len(), 50, "page {page_no}");
        assert_eq!(ids[0], format!("n-{:05}", page_no * 50), "newest first");
        for id in ids {
            assert!(seen.insert(id), "no repeats");
        }
        let at = p.body.find("id=\"older\"").expect("an older page");
        let href = p.body[..at].rsplit("href=\"").next().unwrap_or_default();
        next = href
            .split('"')
            .next()
            .unwrap_or_default()
            .replace("&amp;", "&")
            .replace("&#x2f;", "/");
    }
    eprintln!("deliveries page over 3000 trail records: slowest of 3 pages {slowest:?}");
    assert!(slowest < Duration::from_secs(5), "a page took {slowest:?}");
    let t = Instant::now();
    let home = b.get("/").await;
    eprintln!(
        "projects page (600 of the trail records in the last hour): {:?}",
        t.elapsed()
    );
    assert_eq!(home.status, 200, "{}", home.body);
    // The counts, or (a loaded server without indexes) "unavailable" in their place, never a failed page.
    assert!(
        home.body.contains("id=\"last-hour\"") || home.body.contains("Delivery trail unavailable"),
        "{}",
        home.body
    );
    if home.body.contains("id=\"last-hour\"") {
        // The project's row: 600 notifications fired in the last hour, 400 sent, 200 dead.
        let row = home
            .body
            .split("<tr>")
            .find(|r| r.contains(&format!("/projects/{project}\"")))
            .unwrap_or_default();
        for n in [">600</td>", ">400</td>", ">200</td>"] {
            assert!(row.contains(n), "{n} in {row}");
        }
    } else {
        let why = home
            .body
            .split("Delivery trail unavailable")
            .nth(1)
            .and_then(|t| t.split("</p>").next())
            .unwrap_or_default();
        eprintln!("the last hour's counts were unavailable ({why}): not checked");
    }

    // Logout ends the session (CSRF-checked like every POST).
    assert_eq!(b.post("/logout", &[]).await.status, 403);
    let p = b.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!((p.status, p.header("location")), (303, "/login"));
    assert!(p.header("set-cookie").contains("Max-Age=0"));
    assert_eq!(b.get("/").await.status, 401, "the old cookie is dead");
    clear_trail(&project).await;
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_loopback_is_served_without_login_and_posts_still_need_csrf() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [webhook_rule(&sink, json!({}))]}]));
    let port = common::free_port();
    let k = env.spawn_at("run", &format!("0.0.0.0:{port}"), &[]);
    let b = Browser::new(&k);
    let p = b.get("/").await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains(&project));
    assert!(!p.body.contains("Log out"), "no session, nothing to log out of");
    assert_eq!(b.get("/login").await.header("location"), "/");
    let page = b.get(&format!("/projects/{project}")).await;
    let csrf = page.csrf();
    let mutes = format!("/projects/{project}/mutes");
    let p = b.post(&mutes, &[("duration", "2h"), ("group_hash", "g")]).await;
    assert_eq!(p.status, 403, "{}", p.body);
    let p = b
        .post(
            &mutes,
            &[("csrf", &csrf), ("duration", "2h"), ("group_hash", "g<i>")],
        )
        .await;
    assert_eq!(p.status, 303, "{}", p.body);
    let page = b.get(&format!("/projects/{project}")).await;
    assert!(page.body.contains("g&lt;i&gt;"), "{}", page.body);
    let p = b
        .post(
            &mutes,
            &[("csrf", &csrf), ("duration", "soon"), ("group_hash", "g")],
        )
        .await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("soon"), "{}", p.body);
    let dead = b.get("/dead").await;
    assert_eq!(dead.status, 200, "{}", dead.body);
    assert!(dead.body.contains("empty"), "{}", dead.body);

    // The same process reached over a non-loopback address: 403 (when the machine has one).
    if let Some(ip) = common::non_loopback_ip() {
        let r = reqwest::Client::new()
            .get(format!("http://{ip}:{port}/"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 403);
    } else {
        eprintln!("no non-loopback address on this machine: 403 not exercised");
    }
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backing_service_that_is_down_is_a_503_page_not_a_stack() {
    // MongoDB unreachable: the sender role (RabbitMQ only) still serves; pages needing rules answer 503.
    let env = Env::new().set(
        "KLAXON_MONGO_URL",
        &format!(
            "mongodb://127.0.0.1:{}/?serverSelectionTimeoutMS=500&connectTimeoutMS=500",
            common::free_port()
        ),
    );
    let k = env.spawn("sender", &[]);
    let b = Browser::new(&k);
    let p = b.get("/").await;
    assert_eq!(p.status, 503, "{}", p.body);
    assert!(p.body.contains("MongoDB is unavailable"), "{}", p.body);
    assert!(p.body.contains("<html"), "an HTML page: {}", p.body);
    assert_security_headers(&p);
    let p = b.get("/dead").await;
    assert_eq!(p.status, 200, "RabbitMQ is up: {}", p.body);
    common::delete_queues(&env).await;
}

// ---------------------------------------------------------------------------------------------------------
// The real browser

/// A chromedriver process on a free loopback port; killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// None (after a skip line) when the browser test is skipped by `KLAXON_SKIP_BROWSER_TESTS=1`; panics when
/// the browser is missing otherwise.
fn start_driver() -> Option<Driver> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !std::path::Path::new(p).exists())
        .collect();
    if std::env::var("KLAXON_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: the console's browser test (KLAXON_SKIP_BROWSER_TESTS=1)");
        return None;
    }
    assert!(
        missing.is_empty(),
        "{missing:?} missing: run scripts/services (it installs chromium and chromium-driver), or set KLAXON_SKIP_BROWSER_TESTS=1 to skip this test"
    );
    let port = common::free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen within 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(driver)
}

/// A headless Chromium session through `driver`, with its profile in `profile`.
async fn chromium(driver: &Driver, profile: &std::path::Path) -> fantoccini::Client {
    chromium_with(driver, profile, &[]).await
}

/// [`chromium`] with more command-line switches (e.g. `--host-resolver-rules`).
async fn chromium_with(driver: &Driver, profile: &std::path::Path, extra: &[&str]) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    let mut args = vec![
        "--headless".to_owned(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--window-size=1280,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": CHROMIUM, "args": args}),
    );
    tokio::time::timeout(
        Duration::from_secs(60),
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url),
    )
    .await
    .expect("chromium started within 60 s")
    .expect("a WebDriver session")
}

fn screens_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screens");
    std::fs::create_dir_all(&dir).expect("create target/console-screens");
    dir
}

async fn shot(c: &fantoccini::Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screens_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// The page's text; empty while a navigation is under way (no body yet).
async fn body_text(c: &fantoccini::Client) -> String {
    match c.find(fantoccini::Locator::Css("body")).await {
        Ok(body) => body.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Waits (bounded) until the page's text contains `needle`.
async fn wait_text(c: &fantoccini::Client, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = body_text(c).await;
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "`{needle}` not on the page within 20 s; it says:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_edit_explain_mute_and_replay() {
    let Some(driver) = start_driver() else {
        return;
    };
    let started = Instant::now();
    let token = format!("tok-{}", object_id());
    let env = Env::new().set("KLAXON_API_TOKEN", &token);
    let sink = HttpSink::start().await.expect("sink");
    // The webhook fails for good (400) until told otherwise: the first firing is dead-lettered.
    sink.set_default(klaxon_testkit::Reply::status(400));
    let project = object_id();
    let rules = [
        webhook_rule(&sink, json!({"threshold": 1, "including": ["checkout"]})),
        webhook_rule(&sink, json!({"threshold": 5, "window": "sliding"})),
    ];
    let ids: Vec<String> = rules
        .iter()
        .map(|r| r["_id"].as_str().expect("id").to_owned())
        .collect();
    env.import(&json!([{"_id": project, "notifications": rules}]));
    let k = env.spawn("run", &[]);
    let mut api = Browser::new(&k);
    api.bearer = Some(token.clone());
    let task = json!({"projectId": project, "event": {"title": "Boom at checkout", "groupHash": "g-dead", "isNew": false}});
    let p = api
        .send(api.http.post(format!("{}/api/v1/events", api.base)).json(&task))
        .await;
    assert_eq!(p.status, 202, "{}", p.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = api.get("/api/v1/dead").await;
        let v: Value = serde_json::from_str(&p.body).unwrap_or(Value::Null);
        if v["dead"].as_array().is_some_and(|a| a.len() == 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing dead-lettered in 30 s; log:\n{}",
            k.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let profile = tempfile::tempdir().expect("profile dir");
    let c = chromium(&driver, profile.path()).await;
    let base = format!("http://{}", k.addr);
    let result = async {
        use fantoccini::Locator::{Css, Id};
        // Log in.
        c.goto(&format!("{base}/")).await?;
        wait_text(&c, "needs the API token").await;
        shot(&c, "login").await;
        c.find(Id("token")).await?.send_keys("wrong").await?;
        c.find(Id("login")).await?.click().await?;
        wait_text(&c, "Wrong token").await;
        c.find(Id("token")).await?.send_keys(&token).await?;
        c.find(Id("login")).await?.click().await?;
        wait_text(&c, "Queues").await;
        assert!(body_text(&c).await.contains(&project));
        shot(&c, "projects").await;

        // Disable the second rule with its button.
        c.goto(&format!("{base}/projects/{project}")).await?;
        wait_text(&c, "Mutes").await;
        c.find(Css(&format!("#rule-{} button.toggle", ids[1])))
            .await?
            .click()
            .await?;
        wait_text(&c, "Rule disabled.").await;
        let row = c.find(Id(&format!("rule-{}", ids[1]))).await?.text().await?;
        assert!(row.contains("disabled"), "{row}");

        // Edit: a broken threshold shows the problem and keeps the text; a good one is saved.
        c.goto(&format!("{base}/projects/{project}/edit")).await?;
        let area = c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("rules"))
            .await?;
        let text = area.prop("value").await?.unwrap_or_default();
        let mut doc: Value = serde_json::from_str(&text).expect("the textarea holds the rules as JSON");
        assert_eq!(doc["_id"], json!(project));
        doc["notifications"][0]["threshold"] = json!(0);
        let broken = serde_json::to_string(&doc).expect("json");
        area.clear().await?;
        area.send_keys(&broken).await?;
        c.find(Id("save")).await?.click().await?;
        let said = wait_text(&c, "problem").await;
        assert!(said.contains("threshold"), "{said}");
        let kept = c
            .find(Id("rules"))
            .await?
            .prop("value")
            .await?
            .unwrap_or_default();
        assert_eq!(kept, broken, "the user's text is kept");
        shot(&c, "edit-problems").await;
        doc["notifications"][0]["threshold"] = json!(7);
        let area = c.find(Id("rules")).await?;
        area.clear().await?;
        area.send_keys(&serde_json::to_string(&doc).expect("json"))
            .await?;
        c.find(Id("save")).await?.click().await?;
        wait_text(&c, "Rules saved").await;
        let row = c.find(Id(&format!("rule-{}", ids[0]))).await?.text().await?;
        assert!(row.contains("7 in 1h"), "{row}");
        shot(&c, "project").await;
        let stored: Value =
            serde_json::from_str(&api.get(&format!("/api/v1/projects/{project}/rules")).await.body)
                .expect("json");
        assert_eq!(stored["notifications"][0]["threshold"], 7, "{stored}");
        assert_eq!(stored["notifications"][1]["isEnabled"], false, "{stored}");

        // Explain.
        c.goto(&format!("{base}/projects/{project}/explain")).await?;
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("explain-form"))
            .await?;
        c.find(Css("input[name=title]"))
            .await?
            .send_keys("Boom at checkout")
            .await?;
        c.find(Css("input[name=groupHash]"))
            .await?
            .send_keys("g-explain")
            .await?;
        c.find(Id("run-explain")).await?.click().await?;
        let table = c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("verdicts"))
            .await?;
        let verdicts = table.text().await?;
        assert!(
            verdicts.contains(&ids[0]) && verdicts.contains("counting"),
            "{verdicts}"
        );
        assert!(
            verdicts.contains(&ids[1]) && verdicts.contains("disabled"),
            "{verdicts}"
        );
        shot(&c, "explain").await;

        // Add a mute; it is listed.
        c.goto(&format!("{base}/projects/{project}")).await?;
        let form = c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("mute-form"))
            .await?;
        form.find(Css("input[name=group_hash]"))
            .await?
            .send_keys("g-muted")
            .await?;
        form.find(Css("input[name=duration]"))
            .await?
            .send_keys("2h")
            .await?;
        c.find(Id("add-mute")).await?.click().await?;
        wait_text(&c, "Mute added.").await;
        let listed = c.find(Id("mute-list")).await?.text().await?;
        assert!(
            listed.contains("g-muted") && listed.contains("every rule"),
            "{listed}"
        );
        shot(&c, "mutes").await;

        // Replay the dead letter once the endpoint works again.
        c.goto(&format!("{base}/dead")).await?;
        let dead = c
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("dead"))
            .await?;
        let listed = dead.text().await?;
        assert!(
            listed.contains(&project) && listed.contains("webhook"),
            "{listed}"
        );
        assert!(!listed.contains("hunter2"), "redacted: {listed}");
        shot(&c, "dead").await;
        sink.set_default(klaxon_testkit::Reply::status(200));
        c.find(Css("button.replay")).await?.click().await?;
        wait_text(&c, "Replayed 1 notification").await;
        shot(&c, "dead-replayed").await;
        let got = sink.wait_for_count(2, Duration::from_secs(30)).await;
        assert_eq!(got.len(), 2, "the replay was delivered; log:\n{}", k.logs());

        // The trail shows it sent.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            c.goto(&format!("{base}/deliveries?project={project}")).await?;
            let text = body_text(&c).await;
            if text.contains("sent") {
                break;
            }
            assert!(Instant::now() < deadline, "the trail never said sent:\n{text}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        shot(&c, "deliveries").await;
        c.goto(&format!("{base}/")).await?;
        wait_text(&c, "Last hour").await;
        shot(&c, "projects").await;
        Ok::<(), fantoccini::error::CmdError>(())
    }
    .await;
    let _ = c.close().await;
    drop(driver);
    result.unwrap_or_else(|e| panic!("browser step failed: {e}; log:\n{}", k.logs()));
    eprintln!(
        "browser test: {:?}; screenshots in {}",
        started.elapsed(),
        screens_dir().display()
    );
    common::delete_queues(&env).await;
}

/// The attacker's page: `fetch(…, {mode: "no-cors"})` with `text/plain` bodies, then plain HTML forms with
/// `enctype="text/plain"` (whose `name=value` body is made to read as JSON), against the state-changing API
/// endpoints of the Klaxon at `target`; "ATTACK DONE" once every request has been answered.
fn attack_page(target: &str, project: &str, hook: &str) -> String {
    let event = |how: &str| json!({"projectId": project, "event": {"title": format!("forged by {how}"), "groupHash": format!("g-{how}"), "isNew": true}});
    let notification = |how: &str| json!({"channel": "webhook", "endpoint": format!("{hook}/forged-{how}"), "title": format!("forged by {how}")});
    let mutes = format!("{target}/api/v1/projects/{project}/mutes");
    let fetches = json!([
        [mutes, json!({"for": 31_536_000}).to_string()],
        [format!("{target}/api/v1/events"), event("fetch").to_string()],
        [
            format!("{target}/api/v1/notifications"),
            notification("fetch").to_string()
        ],
        [format!("{target}/api/v1/dead/replay"), "{}"],
        [format!("{target}/api/v1/dead/replay"), null],
    ]);
    // A form field `name=value` is sent as `<name>=<value>\r\n`: a name ending in `"x":"` and the value `"}`
    // make the body `{…,"x":"="}`, valid JSON.
    let form = |i: usize, action: String, body: Value| {
        let mut text = body.to_string();
        text.pop();
        let name = format!("{text},\"x\":\"").replace('\'', "&#39;");
        format!(
            "<form method=\"POST\" enctype=\"text/plain\" target=\"f{i}\" action=\"{action}\"><input name='{name}' value='\"}}'></form><iframe name=\"f{i}\"></iframe>\n"
        )
    };
    let forms = [
        form(0, mutes.clone(), json!({"for": 31_536_000})),
        form(1, format!("{target}/api/v1/events"), event("form")),
        form(2, format!("{target}/api/v1/notifications"), notification("form")),
        form(3, format!("{target}/api/v1/dead/replay"), json!({})),
    ]
    .concat();
    format!(
        r#"<!doctype html><meta charset="utf-8"><title>a page of another site</title><body><p>Hello.</p>
{forms}<script>
(async () => {{
  for (const [url, body] of {fetches}) {{
    const init = body === null ? {{method: "POST", mode: "no-cors"}}
      : {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body}};
    try {{ await fetch(url, init); }} catch (e) {{ document.body.append(" fetch failed: " + e); }}
  }}
  for (const f of document.forms) {{
    await new Promise(done => {{
      document.querySelector(`iframe[name=${{f.target}}]`).addEventListener("load", done, {{once: true}});
      setTimeout(done, 10000);
      f.submit();
    }});
  }}
  document.body.append(" ATTACK DONE");
}})();
</script>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_another_sites_page_changes_nothing() {
    let Some(driver) = start_driver() else {
        return;
    };
    // The documented loopback-only mode (no token): the one where a page in a local browser reached the API.
    let env = Env::new();
    let hook = HttpSink::start().await.expect("hook");
    // The first delivery fails for good (400): one dead letter a forged replay would send again.
    hook.script([klaxon_testkit::Reply::status(400)]);
    let project = object_id();
    let mut rule = webhook_rule(&hook, json!({"threshold": 1}));
    rule["channels"]["webhook"]["endpoint"] = json!(hook.url("/hook"));
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn("run", &[]);
    let api = Browser::new(&k);
    let post = |path: &str, body: Value| {
        let url = format!("{}{path}", api.base);
        api.send(api.http.post(url).json(&body))
    };
    let event = |group: &str| json!({"projectId": project, "event": {"title": "Boom", "groupHash": group, "isNew": true}});
    assert_eq!(post("/api/v1/events", event("g-dead")).await.status, 202);
    let dead_ids = || async {
        let v: Value = serde_json::from_str(&api.get("/api/v1/dead").await.body).unwrap_or(Value::Null);
        v["dead"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| d["notificationId"].to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let ids = dead_ids().await;
        if ids.len() == 1 {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "nothing dead-lettered in 30 s; log:\n{}",
            k.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    k.wait_acked(1, Duration::from_secs(30));

    // The attacker's pages, served by another local server: from 127.0.0.1 on another port (the same *site*)
    // and from `localhost` (another site).
    let target = format!("http://{}", k.addr);
    let attacker = HttpSink::start().await.expect("attacker's server");
    attacker.set_default(
        klaxon_testkit::Reply::status(200)
            .header("content-type", "text/html; charset=utf-8")
            .body(&attack_page(&target, &project, &hook.url(""))),
    );
    let profile = tempfile::tempdir().expect("profile dir");
    let c = chromium(&driver, profile.path()).await;
    let port = attacker.addr().port();
    let result = async {
        for page in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
        ] {
            c.goto(&page).await?;
            let said = wait_text(&c, "ATTACK DONE").await;
            assert!(!said.contains("fetch failed"), "{page}: {said}");
        }
        shot(&c, "cross-site-attack").await;
        Ok::<(), fantoccini::error::CmdError>(())
    }
    .await;
    let _ = c.close().await;
    drop(driver);
    result.unwrap_or_else(|e| panic!("browser step failed: {e}; log:\n{}", k.logs()));

    // Nothing changed: no mute, the dead letter is still there, nothing forged was published or delivered.
    let mutes: Value =
        serde_json::from_str(&api.get(&format!("/api/v1/projects/{project}/mutes")).await.body)
            .expect("json");
    assert_eq!(
        mutes["mutes"],
        json!([]),
        "a forged mute: {mutes}; log:\n{}",
        k.logs()
    );
    assert_eq!(dead_ids().await, dead, "the dead letter was not replayed");
    // A real event after the forged ones: once its notification is delivered, anything forged before it would
    // have been too (one queue, in order).
    assert_eq!(post("/api/v1/events", event("g-control")).await.status, 202);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !hook
        .requests()
        .iter()
        .any(|r| r.json()["events"][0]["groupHash"] == "g-control")
    {
        assert!(
            Instant::now() < deadline,
            "the control event was not delivered; log:\n{}",
            k.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen: Vec<String> = hook
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.uri, r.text()))
        .collect();
    assert_eq!(
        seen.len(),
        2,
        "only the dead letter's first attempt and the control: {seen:#?}"
    );
    assert!(seen.iter().all(|r| !r.contains("forged")), "{seen:#?}");
    assert_eq!(
        k.metric("klaxon_events_acked_total"),
        2.0,
        "no forged event was published"
    );
    // And the attacker's server saw nothing but the browser loading its page.
    assert!(attacker.requests().iter().all(|r| r.method == "GET"));
    common::delete_queues(&env).await;
}

// ---------------------------------------------------------------------------------------------------------
// Signed action links (README, "Action links")

/// The mutes of a project, through the API.
async fn mutes_of(api: &Browser, project: &str) -> Vec<Value> {
    let p = api.get(&format!("/api/v1/projects/{project}/mutes")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let v: Value = serde_json::from_str(&p.body).expect("json");
    v["mutes"].as_array().cloned().unwrap_or_default()
}

/// A link from a really delivered webhook, opened in Chromium without a console login under the public URL's
/// own host name (a `*.localhost` name: the default Host allowlist does not hold it, and Chromium treats it as
/// a secure context, so it sends `Sec-Fetch-Site` over plain HTTP as it would over HTTPS): the page asks and changes nothing (neither does a scanner's GET or a POST without the
/// page's form value); confirming mutes that group for an hour, Undo removes the mute; the explain link
/// answers read-only; an expired, an altered and a cut link are refused with clear pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_an_action_link_mutes_only_after_confirming() {
    use klaxon_core::action::{Action, ActionKey, Claim};
    let Some(driver) = start_driver() else {
        return;
    };
    let token = format!("tok-{}", object_id());
    let key = format!("action-key-{}-{}", object_id(), object_id());
    let port = common::free_port();
    let public = format!("http://klaxon-public.localhost:{port}");
    let env = Env::new()
        .set("KLAXON_API_TOKEN", &token)
        .set("KLAXON_ACTION_KEY", &key)
        .set("KLAXON_PUBLIC_URL", &public);
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = webhook_rule(&sink, json!({"threshold": 1}));
    let rule_id = rule["_id"].as_str().expect("id").to_owned();
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn_at("run", &format!("127.0.0.1:{port}"), &[]);
    let mut api = Browser::new(&k);
    api.bearer = Some(token.clone());
    let task = json!({"projectId": project, "event": {"title": "Boom in <checkout>", "groupHash": "g-link", "isNew": false}});
    let p = api
        .send(api.http.post(format!("{}/api/v1/events", api.base)).json(&task))
        .await;
    assert_eq!(p.status, 202, "{}", p.body);
    let delivered = sink.wait_for_count(1, Duration::from_secs(30)).await;
    assert!(
        !delivered.is_empty(),
        "nothing delivered in 30 s; log:\n{}",
        k.logs()
    );
    let body = delivered[0].json();
    let actions = body["actions"].as_array().cloned().unwrap_or_default();
    let link = |name: &str| -> String {
        actions
            .iter()
            .find(|a| a["action"] == name)
            .and_then(|a| a["url"].as_str())
            .unwrap_or_else(|| panic!("no {name} link in {body}"))
            .to_owned()
    };
    let mute_link = link("mute-group-1h");
    let explain_link = link("explain");
    assert!(mute_link.starts_with(&format!("{public}/a/v1.")), "{mute_link}");

    // A link scanner (GET, no cookie, no token) changes nothing; the page asks.
    let scanner = reqwest::Client::builder()
        .redirect(Policy::none())
        .resolve("klaxon-public.localhost", k.addr.parse().expect("addr"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let scanned = scanner.get(&mute_link).send().await.expect("GET");
    assert_eq!(scanned.status().as_u16(), 200);
    let page = scanned.text().await.expect("page");
    assert!(
        page.contains("Mute this error for 1 h") && page.contains("g-link"),
        "{page}"
    );
    // the error's title (the group link carries it, escaped), and no section of the console lit
    assert!(page.contains("Boom in &lt;checkout&gt;"), "{page}");
    assert!(!page.contains("class=\"active\""), "{page}");
    assert!(
        !page.contains("hunter2") && !page.contains(&sink.url("")),
        "no endpoint: {page}"
    );
    // A POST without the page's form value changes nothing either.
    let forged = scanner
        .post(&mute_link)
        .form(&[("csrf", "00")])
        .send()
        .await
        .expect("POST");
    assert_eq!(forged.status().as_u16(), 403);
    assert!(
        mutes_of(&api, &project).await.is_empty(),
        "nothing muted before confirming"
    );

    // Refusals, as pages with their statuses.
    let k_sign = ActionKey::new(&key).expect("key");
    let mut old =
        Claim::for_message(Action::MuteGroup1h, &project, &rule_id, Some("g-link"), None, 0).expect("claim");
    old.expires_s = 1_000;
    let expired = format!("{public}/a/{}", k_sign.sign(&old).expect("sign"));
    let (head, sig) = mute_link.rsplit_once('.').expect("signature");
    let altered = format!("{}.{}", head.replace("v1.ey", "v1.ez"), sig);
    let cut = mute_link[..mute_link.len() - 10].replace("/a/v1.", "/a/v1x");
    for (url, status, words) in [
        (&expired, 410, "expired"),
        (&altered, 403, "not valid"),
        (&cut, 400, "not a Klaxon action link"),
    ] {
        let r = scanner.get(url).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), status, "{url}");
        let text = r.text().await.expect("page");
        assert!(text.contains(words), "{url}: {text}");
        let r = scanner
            .post(url)
            .form(&[("csrf", "00")])
            .send()
            .await
            .expect("POST");
        assert_eq!(r.status().as_u16(), status, "POST {url}");
    }

    let profile = tempfile::tempdir().expect("profile dir");
    let c = chromium_with(
        &driver,
        profile.path(),
        &["--host-resolver-rules=MAP klaxon-public.localhost 127.0.0.1"],
    )
    .await;
    let result = async {
        use fantoccini::Locator::Id;
        c.goto(&mute_link).await?;
        wait_text(&c, "Nothing happens until you press the button").await;
        shot(&c, "action-confirm").await;
        assert!(
            mutes_of(&api, &project).await.is_empty(),
            "opening the link mutes nothing"
        );
        c.find(Id("confirm")).await?.click().await?;
        let done = wait_text(&c, "Muted this rule's alerts for the group g-link until").await;
        shot(&c, "action-done").await;
        let what = c.find(Id("what")).await?.text().await?;
        let day = what
            .split("until ")
            .nth(1)
            .and_then(|t| t.get(..10))
            .unwrap_or_else(|| panic!("until when: {what}"));
        assert_eq!(what.matches(day).count(), 1, "the time once: {what}");
        let mutes = mutes_of(&api, &project).await;
        assert_eq!(mutes.len(), 1, "{mutes:?}\n{done}");
        assert_eq!(mutes[0]["groupHash"], "g-link");
        assert_eq!(mutes[0]["ruleId"], rule_id.as_str());
        // Undo: one more confirmed POST.
        c.find(Id("undo")).await?.click().await?;
        wait_text(&c, "The mute is removed").await;
        assert!(mutes_of(&api, &project).await.is_empty(), "undone");
        // Why did this fire? Read-only.
        c.goto(&explain_link).await?;
        let text = wait_text(&c, "Why did this fire?").await;
        assert!(text.contains("Boom in <checkout>"), "{text}");
        // that firing's numbers first, then the present
        let fired = c.find(Id("fired")).await?.text().await?;
        assert!(
            fired.starts_with("Fired at ")
                && fired.contains("1 event in a fixed window of 1 hour reached the threshold of 1"),
            "{fired}"
        );
        assert!(text.contains("This firing") && text.contains("Now"), "{text}");
        assert!(
            text.contains("cooling_down") || text.contains("already_notified") || text.contains("counting"),
            "{text}"
        );
        shot(&c, "action-explain").await;
        c.goto(&expired).await?;
        wait_text(&c, "This link has expired").await;
        c.goto(&altered).await?;
        wait_text(&c, "This link is not valid").await;
        shot(&c, "action-altered").await;
        Ok::<(), fantoccini::error::CmdError>(())
    }
    .await;
    let _ = c.close().await;
    drop(driver);
    result.unwrap_or_else(|e| panic!("browser step failed: {e}; log:\n{}", k.logs()));
    assert!(mutes_of(&api, &project).await.is_empty());
    assert!(!k.logs().contains(&key), "the key is never logged");
    common::delete_queues(&env).await;
}

/// The `action` and `csrf` of the form on an action page (the confirmation, or the Undo button).
fn action_form(page: &str) -> Option<(String, String)> {
    let at = page.find("<form method=\"post\" action=\"")?;
    let form = &page[at..];
    // the template escapes the value: `/` is `&#x2f;`
    let action = form
        .split("action=\"")
        .nth(1)?
        .split('"')
        .next()?
        .replace("&#x2f;", "/");
    let csrf = form
        .split("name=\"csrf\" value=\"")
        .nth(1)?
        .split('"')
        .next()?
        .to_owned();
    Some((action, csrf))
}

/// A link does its action once (issue #30): a mute link confirmed, then undone (or its mute deleted through
/// the API), then confirmed again mutes nothing, and its page says it was used; a second click while the mute
/// lasts makes no second mute and offers Undo. Plain HTTP, as a visitor without a console login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_link_mutes_once_even_after_undo_or_delete() {
    let token = format!("tok-{}", object_id());
    let key = format!("action-key-{}-{}", object_id(), object_id());
    let port = common::free_port();
    let public = format!("http://klaxon-public.localhost:{port}");
    let env = Env::new()
        .set("KLAXON_API_TOKEN", &token)
        .set("KLAXON_ACTION_KEY", &key)
        .set("KLAXON_PUBLIC_URL", &public);
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = webhook_rule(&sink, json!({"threshold": 1}));
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn_at("run", &format!("127.0.0.1:{port}"), &[]);
    let mut api = Browser::new(&k);
    api.bearer = Some(token.clone());
    let event =
        json!({"projectId": project, "event": {"title": "Boom", "groupHash": "g-once", "isNew": false}});
    let p = api
        .send(api.http.post(format!("{}/api/v1/events", api.base)).json(&event))
        .await;
    assert_eq!(p.status, 202, "{}", p.body);
    let delivered = sink.wait_for_count(1, Duration::from_secs(30)).await;
    assert!(
        !delivered.is_empty(),
        "nothing delivered in 30 s; log:\n{}",
        k.logs()
    );
    let body = delivered[0].json();
    let link = |name: &str| -> String {
        body["actions"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["action"] == name))
            .and_then(|a| a["url"].as_str())
            .unwrap_or_else(|| panic!("no {name} link in {body}"))
            .to_owned()
    };
    let visitor = reqwest::Client::builder()
        .redirect(Policy::none())
        .resolve("klaxon-public.localhost", k.addr.parse().expect("addr"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    // GET the page, POST its form: (status, page after the POST)
    let open = |url: String| {
        let visitor = visitor.clone();
        async move {
            let r = visitor.get(&url).send().await.expect("GET");
            let status = r.status().as_u16();
            (status, r.text().await.expect("page"))
        }
    };
    let post = |path: String, csrf: String| {
        let visitor = visitor.clone();
        let public = public.clone();
        async move {
            let r = visitor
                .post(format!("{public}{path}"))
                .form(&[("csrf", csrf)])
                .send()
                .await
                .expect("POST");
            let status = r.status().as_u16();
            (status, r.text().await.expect("page"))
        }
    };
    let path_of = |url: &str| url[public.len()..].to_owned();

    // 1. Confirm → muted; Undo → no mute; confirm the same link again → nothing, "already used".
    let mute_link = link("mute-group-1h");
    let (status, page) = open(mute_link.clone()).await;
    assert_eq!(status, 200, "{page}");
    let (action, csrf) = action_form(&page).unwrap_or_else(|| panic!("no form: {page}"));
    assert_eq!(action, path_of(&mute_link));
    let (status, done) = post(action.clone(), csrf.clone()).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Muted this rule"), "{done}");
    assert_eq!(mutes_of(&api, &project).await.len(), 1);
    let (undo, undo_csrf) = action_form(&done).unwrap_or_else(|| panic!("no Undo: {done}"));
    let (status, undone) = post(undo, undo_csrf).await;
    assert_eq!(status, 200, "{undone}");
    assert!(undone.contains("The mute is removed"), "{undone}");
    assert!(mutes_of(&api, &project).await.is_empty());
    let (status, again) = post(action.clone(), csrf.clone()).await;
    assert_eq!(status, 409, "a used link does nothing: {again}");
    assert!(again.contains("already used"), "{again}");
    assert!(
        mutes_of(&api, &project).await.is_empty(),
        "confirming a used link again mutes nothing; log:\n{}",
        k.logs()
    );
    // its page says so too, and offers no confirmation any more
    let (status, page) = open(mute_link.clone()).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("already used") && !page.contains("id=\"confirm\""),
        "{page}"
    );

    // 2. Confirm → muted; the mute deleted through the API; confirm again → nothing.
    let rule_link = link("mute-rule-1h");
    let (_, page) = open(rule_link.clone()).await;
    let (action, csrf) = action_form(&page).unwrap_or_else(|| panic!("no form: {page}"));
    let (status, done) = post(action.clone(), csrf.clone()).await;
    assert_eq!(status, 200, "{done}");
    let mutes = mutes_of(&api, &project).await;
    assert_eq!(mutes.len(), 1, "{mutes:?}");
    let mute_id = mutes[0]["muteId"].as_str().expect("muteId").to_owned();
    let deleted = api
        .send(
            api.http
                .delete(format!("{}/api/v1/projects/{project}/mutes/{mute_id}", api.base)),
        )
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let (status, again) = post(action, csrf).await;
    assert_eq!(status, 409, "{again}");
    assert!(again.contains("already used"), "{again}");
    assert!(
        mutes_of(&api, &project).await.is_empty(),
        "the deleted mute stays deleted"
    );

    // 3. A second click while the mute lasts: one mute, and the page offers its Undo.
    let day_link = link("mute-group-24h");
    let (_, page) = open(day_link).await;
    let (action, csrf) = action_form(&page).unwrap_or_else(|| panic!("no form: {page}"));
    let (first, _) = post(action.clone(), csrf.clone()).await;
    let (second, page) = post(action, csrf).await;
    assert_eq!((first, second), (200, 409), "{page}");
    assert!(
        page.contains("already used") && page.contains("id=\"undo\""),
        "{page}"
    );
    assert_eq!(mutes_of(&api, &project).await.len(), 1);
    let (undo, undo_csrf) = action_form(&page).expect("Undo");
    let (status, _) = post(undo, undo_csrf).await;
    assert_eq!(status, 200);
    assert!(mutes_of(&api, &project).await.is_empty());
    assert!(!k.logs().contains(&key), "the key is never logged");
    common::delete_queues(&env).await;
}

/// What on the page is wider than the page: the document scrolling sideways, a table wider than its container,
/// a cell whose content overflows it. Empty when everything fits.
const OVERFLOWS: &str = r#"
const vw = document.documentElement.clientWidth;
const out = [];
if (document.documentElement.scrollWidth > vw + 1) {
  out.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px in ${vw} px`);
}
for (const t of document.querySelectorAll('table')) {
  const r = t.getBoundingClientRect();
  const box = t.parentElement.getBoundingClientRect();
  if (r.right > vw + 1 || r.width > box.width + 1) {
    out.push(`table#${t.id} is ${Math.round(r.width)} px wide in ${Math.round(box.width)} px (right edge ${Math.round(r.right)} of ${vw})`);
  }
  for (const c of t.querySelectorAll('td, th')) {
    if (c.scrollWidth > c.clientWidth + 1) {
      out.push(`a cell of table#${t.id} overflows (${c.scrollWidth} > ${c.clientWidth}): ${c.textContent.trim().slice(0, 60)}`);
    }
  }
}
return out;
"#;

/// The share of its table's width the column headed `header` has (0 when there is none).
const COLUMN_SHARE: &str = r#"
const [id, header] = arguments;
const t = document.getElementById(id);
if (!t) return 0;
const th = [...t.querySelectorAll('th')].find(h => h.textContent.trim() === header);
return th ? th.getBoundingClientRect().width / t.getBoundingClientRect().width : 0;
"#;

/// Fails the test with what overflows on the current page.
/// The elements matching the selector (`arguments[0]`) whose text wraps over more than one line: `[text]`.
const BROKEN_WORDS: &str = "return [...document.querySelectorAll(arguments[0])].filter(e => { \
    const r = document.createRange(); r.selectNodeContents(e); \
    const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top))); \
    return lines.size > 1; }).map(e => e.textContent.trim());";

async fn assert_fits(c: &fantoccini::Client, what: &str) {
    let found = c.execute(OVERFLOWS, vec![]).await.expect("measure");
    let found: Vec<String> = serde_json::from_value(found).unwrap_or_default();
    shot(c, &format!("fits-{what}")).await;
    assert!(
        found.is_empty(),
        "{what} is wider than its page:\n{}",
        found.join("\n")
    );
}

/// The console's tables fit a 1280 px window with long ids, URLs, errors and bodies in them (the column that says
/// the most keeps a fair share), and the action-link pages fit a 390 px phone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_every_table_fits_its_page() {
    use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
    use klaxon_core::action::{Action, ActionKey, Claim, Fired};
    let Some(driver) = start_driver() else {
        return;
    };
    let key = format!("action-key-{}-{}", object_id(), object_id());
    let port = common::free_port();
    let public = format!("http://127.0.0.1:{port}");
    let env = Env::new()
        .set("KLAXON_ACTION_KEY", &key)
        .set("KLAXON_PUBLIC_URL", &public)
        .set("KLAXON_MAX_ATTEMPTS", "1");
    // The webhook refuses for good with a long answer: a dead letter with a long reason.
    let sink = HttpSink::start().await.expect("sink");
    let long_word = "x".repeat(300);
    sink.set_default(klaxon_testkit::Reply::status(400).body(&format!(
        "{{\"error\": \"invalid_payload\", \"detail\": \"{long_word}\"}}"
    )));
    let project = object_id();
    let mut rule = webhook_rule(&sink, json!({"threshold": 1}));
    rule["channels"]["webhook"]["endpoint"] = json!(sink.url(&format!(
        "/hooks/{}/{}?secret=hunter2",
        "a".repeat(80),
        "b".repeat(80)
    )));
    let rule_id = rule["_id"].as_str().expect("id").to_owned();
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn_at("run", &format!("127.0.0.1:{port}"), &[]);
    let group = format!("g-{}", "0123456789abcdef".repeat(8));
    let title = format!("TypeError: Cannot read properties of undefined (reading '{long_word}') at checkout");
    let api = Browser::new(&k);
    let task = json!({"projectId": project, "event": {"title": title, "groupHash": group, "isNew": false}});
    let p = api
        .send(api.http.post(format!("{}/api/v1/events", api.base)).json(&task))
        .await;
    assert_eq!(p.status, 202, "{}", p.body);
    // An invalid event with a long body, and trail records with long errors.
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    );
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(10))
        .await
        .expect("rabbitmq");
    let publisher = broker.publisher().await.expect("publisher");
    let body = format!(
        "{{\"projectId\": \"{project}\", \"event\": {{\"title\": \"{}\"}}}}",
        "y".repeat(3000)
    );
    publisher
        .publish_all(&[Outgoing::json(topo.events_queue(), body.into_bytes())])
        .await
        .expect("publish");
    {
        use mongodb::bson::{doc, DateTime};
        let client = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
            .await
            .expect("mongo");
        let coll = client
            .database(&env.namespace)
            .collection::<mongodb::bson::Document>("deliveries");
        let now = DateTime::now().timestamp_millis();
        let docs: Vec<_> = (0..5)
            .map(|i| {
                doc! {"notificationId": format!("{}-{i}", object_id()), "projectId": &project, "ruleId": &rule_id,
                      "channel": "webhook", "destination": format!("https://hooks.example.com/{}", "z".repeat(120)),
                      "attempts": 8i64, "status": "retrying",
                      "lastError": format!("HTTP 503 from hooks.example.com: {long_word} {long_word}"),
                      "firedAt": DateTime::from_millis(now - 1000 * i), "at": DateTime::from_millis(now - 1000 * i)}
            })
            .collect();
        coll.insert_many(docs).await.expect("insert trail");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dead: Value = serde_json::from_str(&api.get("/api/v1/dead").await.body).unwrap_or(Value::Null);
        let invalid: Value =
            serde_json::from_str(&api.get("/api/v1/invalid").await.body).unwrap_or(Value::Null);
        if dead["dead"].as_array().is_some_and(|a| !a.is_empty())
            && invalid["invalid"].as_array().is_some_and(|a| !a.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no dead letter and invalid event in 30 s: {dead} {invalid}; log:\n{}",
            k.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let sign = ActionKey::new(&key).expect("key");
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let link = |action: Action| {
        let mut claim =
            Claim::for_message(action, &project, &rule_id, Some(&group), Some(&title), now_s).expect("claim");
        if action == Action::Explain {
            claim = claim.with_fired(Fired {
                at_ms: now_s * 1000,
                count: 1,
                reason: klaxon_core::Reason::Threshold {
                    threshold: 1,
                    period_ms: 3_600_000,
                    window: klaxon_core::rule::Window::Fixed,
                },
            });
        }
        format!("{public}/a/{}", sign.sign(&claim).expect("sign"))
    };

    let profile = tempfile::tempdir().expect("profile dir");
    let c = chromium(&driver, profile.path()).await;
    let base = format!("http://{}", k.addr);
    let q = |s: &str| {
        s.replace(' ', "+")
            .replace('(', "%28")
            .replace(')', "%29")
            .replace('\'', "%27")
    };
    let result = async {
        use fantoccini::Locator::Id;
        for (name, path, table) in [
            ("projects", "/".to_owned(), "projects"),
            ("project", format!("/projects/{project}"), "rules"),
            (
                "explain",
                format!(
                    "/projects/{project}/explain?title={}&groupHash={group}",
                    q(&title)
                ),
                "verdicts",
            ),
            (
                "deliveries",
                format!("/deliveries?project={project}"),
                "deliveries",
            ),
            ("dead", "/dead".to_owned(), "dead"),
            ("invalid", "/invalid".to_owned(), "invalid"),
            ("overview", "/alerts".to_owned(), "overview"),
        ] {
            c.goto(&format!("{base}{path}")).await?;
            c.wait()
                .at_most(Duration::from_secs(20))
                .for_element(Id(table))
                .await?;
            assert_fits(&c, name).await;
        }
        // the column that says the most is not squeezed
        for (page, table, header) in [
            ("/dead", "dead", "Reason"),
            (
                &*format!("/deliveries?project={project}"),
                "deliveries",
                "Last error",
            ),
            ("/invalid", "invalid", "Body"),
        ] {
            c.goto(&format!("{base}{page}")).await?;
            c.wait()
                .at_most(Duration::from_secs(20))
                .for_element(Id(table))
                .await?;
            let share = c
                .execute(COLUMN_SHARE, vec![json!(table), json!(header)])
                .await?
                .as_f64()
                .unwrap_or(0.0);
            assert!(share >= 0.25, "`{header}` has {:.0} % of #{table}", share * 100.0);
        }
        // the overview's ids and buttons stay on one line each at 1280 px; its state pills have their own colours
        c.goto(&format!("{base}/alerts")).await?;
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("overview"))
            .await?;
        let broken = c.execute(BROKEN_WORDS, vec![json!("#overview .id, #overview button, #projects .id")]).await?;
        assert_eq!(broken, json!([]), "ids or buttons broken over lines");
        let colours = c
            .execute(
                "const f = document.querySelector('#count-firing').parentElement.querySelector('.pill'); \
                 const a = document.querySelector('#count-acknowledged').parentElement.querySelector('.pill'); \
                 return [getComputedStyle(f).backgroundColor, getComputedStyle(a).backgroundColor];",
                vec![],
            )
            .await?;
        assert_ne!(colours[0], colours[1], "firing and acknowledged look alike: {colours}");
        // the pages of action links, on a phone
        c.set_window_size(390, 844).await?;
        c.goto(&format!("{base}/alerts")).await?;
        c.wait()
            .at_most(Duration::from_secs(20))
            .for_element(Id("overview"))
            .await?;
        assert_fits(&c, "phone-overview").await;
        c.goto(&link(Action::MuteGroup1h)).await?;
        wait_text(&c, "Nothing happens until you press the button").await;
        assert_fits(&c, "phone-mute").await;
        c.find(Id("confirm")).await?.click().await?;
        wait_text(&c, "Muted this rule's alerts").await;
        assert_fits(&c, "phone-muted").await;
        c.goto(&link(Action::Explain)).await?;
        wait_text(&c, "This firing").await;
        assert_fits(&c, "phone-explain").await;
        c.goto(&link(Action::MuteRule1h)).await?;
        wait_text(&c, "Nothing happens until you press the button").await;
        assert_fits(&c, "phone-mute-rule").await;
        Ok::<(), fantoccini::error::CmdError>(())
    }
    .await;
    let _ = c.close().await;
    drop(driver);
    result.unwrap_or_else(|e| panic!("browser step failed: {e}; log:\n{}", k.logs()));
    publisher.close().await;
    broker.close().await;
    if let Ok(client) = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url()).await {
        let _ = client
            .database(&env.namespace)
            .collection::<mongodb::bson::Document>("deliveries")
            .delete_many(mongodb::bson::doc! {"projectId": &project})
            .await;
    }
    common::delete_queues(&env).await;
}

/// The alerts page (docs/console.md): open and resolved alerts with hostile titles escaped, Acknowledge and
/// Resolve behind the CSRF rule, each change delivered once to the firing's channel; and the `ack` and `resolve`
/// action links: a `GET` changes nothing, the confirmed `POST` does it once, a used link does nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_are_acknowledged_and_resolved_from_the_page_and_by_action_links_once() {
    use klaxon_core::action::{Action, ActionKey, Claim};
    let key = format!("action-key-{}-{}", object_id(), object_id());
    let port = common::free_port();
    let public = format!("http://klaxon-public.localhost:{port}");
    let env = Env::new()
        .set("KLAXON_ACTION_KEY", &key)
        .set("KLAXON_PUBLIC_URL", &public);
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let rule = webhook_rule(&sink, json!({}));
    let rule_id = rule["_id"].as_str().expect("id").to_owned();
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn_at("run", &format!("127.0.0.1:{port}"), &[]);
    k.wait_ready(Duration::from_secs(30));
    let hostile = "<script>alert(1)</script> & \"x\"";
    let ch = vec![common::webhook_channel(&sink.url("/hook"))];
    let a = common::open_alert(&env, &project, &rule_id, "g-a", hostile, ch.clone()).await;
    let b = Browser::new(&k);
    let alerts = format!("/projects/{project}/alerts");

    // Linked from the project page; the title escaped.
    let p = b.get(&format!("/projects/{project}")).await;
    assert!(
        p.body.contains(&format!("href=\"/projects/{project}/alerts\"")),
        "{}",
        p.body
    );
    let p = b.get(&alerts).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.body.contains(&a.id) && p.body.contains("firing"), "{}", p.body);
    assert!(p.body.contains("&lt;script&gt;alert(1)&lt;"), "{}", p.body);
    assert!(!p.body.contains("<script>alert(1)"), "{}", p.body);
    assert!(p.body.contains("Acknowledge</button>"), "{}", p.body);
    let csrf = p.csrf();

    // Without the CSRF value: 403, nothing changed.
    let ack = format!("{alerts}/{}/ack", a.id);
    let p = b.post(&ack, &[]).await;
    assert_eq!(p.status, 403, "{}", p.body);
    let p = b.post(&ack, &[("csrf", &csrf)]).await;
    assert_eq!(
        (p.status, p.header("location")),
        (303, format!("{alerts}?done=acknowledged").as_str()),
        "{}",
        p.body
    );
    let p = b.get(&alerts).await;
    assert!(
        p.body.contains("by console") && !p.body.contains("Acknowledge</button>"),
        "{}",
        p.body
    );
    assert_eq!(
        sink.wait_for_count(1, Duration::from_secs(30)).await.len(),
        1,
        "{}",
        k.logs()
    );
    let resolve = format!("{alerts}/{}/resolve", a.id);
    let p = b.post(&resolve, &[("csrf", &csrf)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    assert_eq!(
        sink.wait_for_count(2, Duration::from_secs(30)).await.len(),
        2,
        "{}",
        k.logs()
    );
    let p = b.post(&resolve, &[("csrf", &csrf)]).await;
    assert_eq!(p.status, 409, "{}", p.body);
    assert!(p.body.contains("already resolved by console"), "{}", p.body);
    let p = b.get(&alerts).await;
    assert!(
        p.body.contains("No open alerts") && p.body.contains("resolved-alerts"),
        "{}",
        p.body
    );
    let p = b
        .post(
            &format!("{alerts}/0123456789abcdef01234567/ack"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(p.status, 404, "{}", p.body);

    // Action links on a second alert: what a firing's message carries (crates/channels/src/action_links.rs).
    let c = common::open_alert(&env, &project, &rule_id, "g-c", hostile, ch).await;
    let signer = ActionKey::new(&key).expect("key");
    let link = |action| {
        let claim = Claim::for_alert(
            action,
            &project,
            &rule_id,
            &c.id,
            Some(hostile),
            c.fired_at_ms / 1000,
        )
        .expect("claim");
        format!("/a/{}", signer.sign(&claim).expect("sign"))
    };
    let visitor = reqwest::Client::builder()
        .redirect(Policy::none())
        .resolve("klaxon-public.localhost", k.addr.parse().expect("addr"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let open = |path: String| {
        let (visitor, public) = (visitor.clone(), public.clone());
        async move {
            let r = visitor.get(format!("{public}{path}")).send().await.expect("GET");
            (r.status().as_u16(), r.text().await.expect("page"))
        }
    };
    let post = |path: String, csrf: String| {
        let (visitor, public) = (visitor.clone(), public.clone());
        async move {
            let r = visitor
                .post(format!("{public}{path}"))
                .form(&[("csrf", csrf)])
                .send()
                .await
                .expect("POST");
            (r.status().as_u16(), r.text().await.expect("page"))
        }
    };
    let ack_link = link(Action::Ack);
    let (status, page) = open(ack_link.clone()).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("is firing") && page.contains("id=\"confirm\""),
        "{page}"
    );
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(
        alert_row(&b, &alerts, &c.id).await.contains(">firing<"),
        "a GET changes nothing"
    );
    let (action, form_csrf) = action_form(&page).unwrap_or_else(|| panic!("no form: {page}"));
    let (status, done) = post(action.clone(), form_csrf.clone()).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("acknowledged by link"), "{done}");
    let (status, again) = post(action, form_csrf).await;
    assert_eq!(status, 409, "a used link does nothing: {again}");
    assert!(
        again.contains("acknowledged by link") && again.contains("Nothing was changed"),
        "{again}"
    );
    let resolve_link = link(Action::Resolve);
    let (_, page) = open(resolve_link.clone()).await;
    assert!(
        page.contains("name=\"name\""),
        "the confirmation asks for a name: {page}"
    );
    let (action, form_csrf) = action_form(&page).unwrap_or_else(|| panic!("no form: {page}"));
    let named = |name: String| {
        let (visitor, public, action, csrf) =
            (visitor.clone(), public.clone(), action.clone(), form_csrf.clone());
        async move {
            let r = visitor
                .post(format!("{public}{action}"))
                .form(&[("csrf", csrf), ("name", name)])
                .send()
                .await
                .expect("POST");
            (r.status().as_u16(), r.text().await.expect("page"))
        }
    };
    let (status, _) = named("x".repeat(60)).await;
    assert_eq!(status, 400, "a name that does not fit is refused");
    let (status, done) = named("<b>Ana</b>".into()).await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("resolved by &lt;b&gt;Ana&lt;&#x2f;b&gt; via link"),
        "{done}"
    );
    let (status, _) = post(action, form_csrf).await;
    assert_eq!(status, 409);
    let (status, page) = open(resolve_link).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("Nothing to do") && !page.contains("id=\"confirm\""),
        "{page}"
    );
    // a wrong form value: 403
    let (status, _) = post(ack_link, "00".into()).await;
    assert_eq!(status, 403);
    // two changes of each alert: four deliveries, the replays dropped by the sender
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        sink.wait_for_count(4, Duration::from_secs(30)).await.len(),
        4,
        "{}",
        k.logs()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.count(), 4);
    common::delete_queues(&env).await;
}

/// The row of alert `id` on the alerts page `path`.
async fn alert_row(b: &Browser, path: &str, id: &str) -> String {
    let p = b.get(path).await;
    let row = p
        .body
        .split(&format!("id=\"alert-{id}\""))
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    row.split("</tr>").next().unwrap_or_default().to_owned()
}

/// The text of the page's `<textarea id="rules">`, unescaped.
fn textarea(body: &str) -> String {
    let start = body.find("id=\"rules\"").expect("the textarea");
    let start = start + body[start..].find('>').expect("its tag's end") + 1;
    let end = start + body[start..].find("</textarea>").expect("its end");
    let mut out = String::new();
    let mut rest = &body[start..end];
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let Some(semi) = rest[i..].find(';') else {
            out.push_str(&rest[i..]);
            rest = "";
            break;
        };
        let entity = &rest[i + 1..i + semi];
        let ch = match entity {
            "quot" => Some('"'),
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            e if e.starts_with("#x") => u32::from_str_radix(&e[2..], 16).ok().and_then(char::from_u32),
            e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match ch {
            Some(c) => out.push(c),
            None => out.push_str(&rest[i..=i + semi]),
        }
        rest = &rest[i + semi + 1..];
    }
    out.push_str(rest);
    out
}

/// The project page shows a rule's alert life in the core's words; the editor sets and clears `resolveAfter`,
/// `renotify`, `escalation`, `quietHours` and `quietHoursBypass` (validated like `rules check`, problems shown and
/// escaped, CSRF required), and never shows an escalation step's endpoint (a PagerDuty routing key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_editor_sets_and_clears_on_call_fields_and_the_rule_view_shows_them() {
    let env = Env::new();
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    let routing_key = "R0UTINGKEYabcdefABCDEF0123456789";
    let rule = webhook_rule(
        &sink,
        json!({"renotify": {"every": 1_800_000, "max": 3},
               "escalation": [{"after": 900_000, "channels": {"pagerduty": {"isEnabled": true, "endpoint": routing_key, "minPeriod": 0}}}]}),
    );
    env.import(&json!([{"_id": project, "notifications": [rule]}]));
    let k = env.spawn("run", &[]);
    let b = Browser::new(&k);
    let api = |path: String| {
        let b = &b;
        async move {
            let p = b.get(&path).await;
            let v: Value = serde_json::from_str(&p.body).unwrap_or_default();
            v
        }
    };
    let page = b.get(&format!("/projects/{project}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for words in [
        "reminders: every 30m, 3 times",
        "escalation: 15m→pagerduty",
        "resolves: after 1h without events",
    ] {
        assert!(page.body.contains(words), "{words}: {}", page.body);
    }
    assert!(!page.body.contains("quiet hours:"), "{}", page.body);
    let csrf = page.csrf();

    // The editor hides the step's routing key; saving it unchanged with new on-call fields keeps it.
    let edit = format!("/projects/{project}/edit");
    let shown = b.get(&edit).await;
    assert_eq!(shown.status, 200);
    assert!(!shown.body.contains(routing_key), "{}", shown.body);
    assert!(!shown.body.contains("hunter2"), "{}", shown.body);
    let mut rules: Value = serde_json::from_str(&textarea(&shown.body)).expect("the textarea's JSON");
    let r = &mut rules["notifications"][0];
    r["resolveAfter"] = json!(7_200_000);
    r["renotify"] = json!({"every": 600_000, "max": 2});
    r["quietHours"] = json!([{"days": ["mon", "tue", "wed", "thu", "fri"], "from": "22:00", "to": "07:00",
                              "timezone": "Europe/Berlin"}]);
    r["quietHoursBypass"] = json!(["pagerduty"]);
    let text = serde_json::to_string_pretty(&rules).expect("json");
    let p = b.post(&edit, &[("rules", &text)]).await;
    assert_eq!(p.status, 403, "no CSRF token: {}", p.body);
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", &text)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let stored = api(format!("/api/v1/projects/{project}/rules")).await;
    let s = &stored["notifications"][0];
    assert_eq!(
        s["escalation"][0]["channels"]["pagerduty"]["endpoint"], routing_key,
        "{stored}"
    );
    assert_eq!(s["quietHours"][0]["timezone"], "Europe/Berlin", "{stored}");
    assert_eq!(s["renotify"]["max"], 2, "{stored}");
    let page = b.get(&format!("/projects/{project}")).await;
    for words in [
        "reminders: every 10m, 2 times",
        // minijinja escapes `/` too
        "quiet hours: mon-fri 22:00-07:00 Europe&#x2f;Berlin (bypass pagerduty)",
        "resolves: after 2h without events",
    ] {
        assert!(page.body.contains(words), "{words}: {}", page.body);
    }

    // A bad window and bad steps are refused with the rule check's problems, escaped; the text is kept.
    let mut bad = rules.clone();
    bad["notifications"][0]["quietHours"][0]["timezone"] = json!("Europe/<b>Berln");
    let bad_text = serde_json::to_string_pretty(&bad).expect("json");
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", &bad_text)]).await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("is not a time zone Klaxon knows"), "{}", p.body);
    assert!(!p.body.contains("<b>"), "escaped: {}", p.body);
    let mut bad = rules.clone();
    bad["notifications"][0]["escalation"] = json!([
        {"after": 600_000, "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/a"), "minPeriod": 0}}},
        {"after": 60_000, "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/b"), "minPeriod": 0}}}
    ]);
    let bad_text = serde_json::to_string_pretty(&bad).expect("json");
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", &bad_text)]).await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("order the steps by"), "{}", p.body);

    // Cleared: the fields are gone from the store and from the page.
    let mut cleared = rules.clone();
    if let Some(r) = cleared["notifications"][0].as_object_mut() {
        for k in [
            "resolveAfter",
            "renotify",
            "escalation",
            "quietHours",
            "quietHoursBypass",
        ] {
            r.remove(k);
        }
    }
    let text = serde_json::to_string_pretty(&cleared).expect("json");
    let p = b.post(&edit, &[("csrf", &csrf), ("rules", &text)]).await;
    assert_eq!(p.status, 303, "{}", p.body);
    let stored = api(format!("/api/v1/projects/{project}/rules")).await;
    let s = &stored["notifications"][0];
    for k in [
        "resolveAfter",
        "renotify",
        "escalation",
        "quietHours",
        "quietHoursBypass",
    ] {
        assert!(s.get(k).is_none(), "{k}: {stored}");
    }
    let page = b.get(&format!("/projects/{project}")).await;
    assert!(
        !page.body.contains("reminders:") && !page.body.contains("quiet hours:"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("resolves: after 1h without events"),
        "the default: {}",
        page.body
    );
    drop(k);
    common::delete_queues(&env).await;
}
