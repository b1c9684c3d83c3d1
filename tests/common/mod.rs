//! Shared plumbing for the end-to-end tests: run the real `klaxon` binary against the real services.
#![allow(dead_code)]

pub mod shards;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_klaxon");

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The environment every klaxon process of a test shares.
#[derive(Clone)]
pub struct Env {
    pub namespace: String,
    pub vars: Vec<(String, String)>,
    /// Deletes the namespace's queues when the last clone of this environment is dropped (also when the test
    /// panics), so no test leaves idle queues on the shared broker.
    cleanup: std::sync::Arc<Cleanup>,
}

/// The queues a test's namespace may have made, deleted on drop if a `klaxon` process ever ran in it.
struct Cleanup {
    namespace: String,
    events_queue: std::sync::Mutex<String>,
    used: std::sync::atomic::AtomicBool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.used.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let namespace = self.namespace.clone();
        let events = self.events_queue.lock().map(|q| q.clone()).unwrap_or_default();
        // Its own thread and runtime: the drop may run inside a test's runtime, which cannot block on another.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(delete_namespace(&namespace, &events));
        })
        .join();
    }
}

impl Env {
    pub fn new() -> Self {
        let namespace = klaxon_testkit::unique_namespace();
        let vars = vec![
            ("KLAXON_NAMESPACE".into(), namespace.clone()),
            ("KLAXON_AMQP_URL".into(), klaxon_testkit::amqp_url()),
            ("KLAXON_REDIS_URL".into(), klaxon_testkit::redis_url()),
            ("KLAXON_MONGO_URL".into(), klaxon_testkit::mongo_url()),
            ("KLAXON_SMTP_URL".into(), klaxon_testkit::smtp_url()),
            ("KLAXON_ALLOW_PRIVATE_ENDPOINTS".into(), "true".into()),
            ("KLAXON_LOG".into(), "info,lapin=warn".into()),
        ];
        let cleanup = std::sync::Arc::new(Cleanup {
            events_queue: std::sync::Mutex::new(format!("{namespace}.events")),
            namespace: namespace.clone(),
            used: std::sync::atomic::AtomicBool::new(false),
        });
        Env {
            namespace,
            vars,
            cleanup,
        }
    }

    /// This environment in namespace `ns` (its own `KLAXON_NAMESPACE`, events queue and clean-up).
    pub fn in_namespace(&self, ns: &str) -> Env {
        let mut e = self.clone().set("KLAXON_NAMESPACE", ns);
        e.namespace = ns.to_owned();
        e.cleanup = std::sync::Arc::new(Cleanup {
            events_queue: std::sync::Mutex::new(format!("{ns}.events")),
            namespace: ns.to_owned(),
            used: std::sync::atomic::AtomicBool::new(false),
        });
        e
    }

    pub fn set(mut self, k: &str, v: &str) -> Self {
        // Only a queue of this namespace is ever deleted: a test that names a shared queue keeps it.
        if k == "KLAXON_EVENTS_QUEUE" && v.starts_with(&self.namespace) {
            if let Ok(mut q) = self.cleanup.events_queue.lock() {
                *q = v.to_owned();
            }
        }
        self.vars.retain(|(name, _)| name != k);
        self.vars.push((k.into(), v.into()));
        self
    }

    /// Leaves `k` unset in the processes (it is never inherited: `KLAXON_*` variables of the test's own
    /// environment are removed, and so is `RUST_LOG`).
    pub fn unset(mut self, k: &str) -> Self {
        self.vars.retain(|(name, _)| name != k);
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        self.cleanup
            .used
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut cmd = Command::new(BIN);
        cmd.args(args).stdin(Stdio::null()).env_remove("RUST_LOG");
        for (k, _) in std::env::vars() {
            if k.starts_with("KLAXON_") && !k.starts_with("KLAXON_TEST_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs a one-shot subcommand; returns (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.command(args).output().expect("run klaxon");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// [`Env::run`] with `input` (if any) written to the command's standard input, which is then closed; the
    /// command is killed after 60 s.
    pub async fn run_with_input(&self, args: &[&str], input: Option<&str>) -> (i32, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::from(self.command(args))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn klaxon");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(text) = input {
            stdin.write_all(text.as_bytes()).await.expect("write stdin");
        }
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("klaxon {args:?} did not finish within 60 s"))
            .expect("wait");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// [`Env::run`] with stdout and stderr into one stream, in the order they were written: (exit code, output).
    pub fn run_merged(&self, args: &[&str]) -> (i32, String) {
        let path = std::env::temp_dir().join(format!("{}-merged-{}.out", self.namespace, free_port()));
        let file = std::fs::File::create(&path).expect("output file");
        let status = self
            .command(args)
            .stdout(file.try_clone().expect("clone"))
            .stderr(file)
            .status()
            .expect("run klaxon");
        let out = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        (status.code().unwrap_or(-1), out)
    }

    /// Runs a one-shot subcommand that must succeed.
    pub fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "klaxon {args:?} failed: {out}\n{err}");
        out
    }

    /// Stores rules with `klaxon rules import` (the JSON format of the README's "Rules"); the import must succeed.
    pub fn import(&self, rules: &serde_json::Value) {
        let file = json_file(self, "rules", rules);
        self.ok(&["rules", "import", "--file", file.to_str().expect("path")]);
    }

    /// [`Env::import`] with `--force`: rules the engine cannot use are stored too.
    pub fn import_force(&self, rules: &serde_json::Value) {
        let file = json_file(self, "rules", rules);
        self.ok(&[
            "rules",
            "import",
            "--force",
            "--file",
            file.to_str().expect("path"),
        ]);
    }

    /// `klaxon webhook secret -o json` for `endpoint` of `project`: the one JSON object it prints.
    pub fn webhook_secret(&self, project: &str, endpoint: &str) -> serde_json::Value {
        let args = [
            "webhook",
            "secret",
            "--project",
            project,
            "--endpoint",
            endpoint,
            "-o",
            "json",
        ];
        let out = self.ok(&args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("one JSON object, not {out}: {e}"))
    }

    /// `klaxon publish` of test events of `project` titled `title` in group `group`; the builder's methods add
    /// options and [`Publish::ok`] runs it: `env.publish(&project, "Boom", "g").new_first().count(3).ok()`.
    pub fn publish(&self, project: &str, title: &str, group: &str) -> Publish<'_> {
        let args = [
            "publish",
            "--project",
            project,
            "--title",
            title,
            "--group",
            group,
        ];
        Publish {
            env: self,
            args: args.map(str::to_owned).to_vec(),
        }
    }

    /// Starts a long-running process (`run`, `worker`, `sender`) and waits until /readyz answers 200.
    pub fn spawn(&self, sub: &str, extra: &[&str]) -> Klaxon {
        self.spawn_at(sub, &format!("127.0.0.1:{}", free_port()), extra)
    }

    /// [`Env::spawn`] with the HTTP server on `bind` (e.g. `0.0.0.0:<port>`); the test talks to it on loopback.
    pub fn spawn_at(&self, sub: &str, bind: &str, extra: &[&str]) -> Klaxon {
        let k = self.start_at(sub, bind, extra);
        k.wait_ready(Duration::from_secs(60));
        k
    }

    /// [`Env::spawn_at`] without waiting for /readyz.
    pub fn start_at(&self, sub: &str, bind: &str, extra: &[&str]) -> Klaxon {
        let port = bind.rsplit(':').next().unwrap_or_default();
        let addr = format!("127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("{}-{sub}-{port}.log", self.namespace));
        let file = std::fs::File::create(&log).expect("log file");
        let mut args = vec![sub, "--http-addr", bind];
        args.extend_from_slice(extra);
        let child = self
            .command(&args)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn klaxon");
        Klaxon {
            child: Some(child),
            addr,
            log,
        }
    }
}

/// A `klaxon publish` being put together by [`Env::publish`]; nothing is published before [`Publish::ok`].
#[must_use = "nothing is published until `.ok()`"]
pub struct Publish<'a> {
    env: &'a Env,
    args: Vec<String>,
}

impl Publish<'_> {
    /// `--new`: the first event is a first occurrence (`isNew: true`).
    pub fn new_first(self) -> Self {
        self.arg("--new")
    }

    /// `--count n`: how many events.
    pub fn count(self, n: u64) -> Self {
        self.arg("--count").arg(&n.to_string())
    }

    /// `--groups n`: the events spread round-robin over `n` groups (`<group>-0` …).
    pub fn groups(self, n: u64) -> Self {
        self.arg("--groups").arg(&n.to_string())
    }

    /// `--user id`: the affected user.
    pub fn user(self, id: &str) -> Self {
        self.arg("--user").arg(id)
    }

    /// `--users n`: the events spread round-robin over `n` users (`<user>-0` …).
    pub fn users(self, n: u64) -> Self {
        self.arg("--users").arg(&n.to_string())
    }

    fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// Runs the command, which must succeed; returns its standard output.
    pub fn ok(self) -> String {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.env.ok(&args)
    }
}

/// `GET path` on `addr` (bounded: 1 s to connect, 5 s to read): the status code and body, if an answer came.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path)
}

/// `method path` on `addr` with an empty JSON body (e.g. `POST …/alerts/{id}/ack`), bounded as [`http_get`].
pub fn http_request(addr: &str, method: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let length = if method == "GET" {
        ""
    } else {
        "Content-Type: application/json\r\nContent-Length: 0\r\n"
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{length}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

pub struct Klaxon {
    child: Option<Child>,
    pub addr: String,
    pub log: PathBuf,
}

impl Klaxon {
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&self.addr, path)
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let ready = klaxon_testkit::eventually_blocking(timeout, || {
            matches!(self.get("/readyz"), Some((200, _))).then_some(())
        });
        assert!(
            ready.is_some(),
            "klaxon at {} not ready in {timeout:?}; log:\n{}",
            self.addr,
            self.logs()
        );
    }

    /// The value of one exported series, `name` or `name{labels}` exactly as `/metrics` prints it; 0 when the
    /// series is absent or the process does not answer.
    pub fn metric(&self, series: &str) -> f64 {
        self.get("/metrics")
            .map_or(0.0, |(_, body)| metric_in(&body, series))
    }

    /// Waits (bounded) until `series` is at least `at_least`; panics with the process log otherwise.
    pub fn wait_metric(&self, series: &str, at_least: f64, within: Duration) {
        let reached =
            klaxon_testkit::eventually_blocking(within, || (self.metric(series) >= at_least).then_some(()));
        assert!(
            reached.is_some(),
            "{series} = {} < {at_least} after {within:?}; log:\n{}",
            self.metric(series),
            self.logs()
        );
    }

    /// Waits until `n` events are acked: counted, their tasks published and the batch acked. This is the point
    /// where a test may assume the events' effects are durable (unlike `klaxon_events_consumed_total`, which
    /// rises when a batch starts).
    pub fn wait_acked(&self, n: u64, within: Duration) {
        self.wait_metric("klaxon_events_acked_total", n as f64, within);
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGTERM, then wait (bounded) for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let exited =
            klaxon_testkit::eventually_blocking(within, || child.try_wait().ok().flatten().map(|s| s.code()));
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        exited.flatten()
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Klaxon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of `series` in a Prometheus text body, 0 when absent.
pub fn metric_in(body: &str, series: &str) -> f64 {
    klaxon_engine::metrics::series_value(body, series).unwrap_or(0.0)
}

#[allow(unused_imports)] // not every test binary polls
pub use klaxon_testkit::eventually;

/// A fresh project or rule id (24 hex digits).
pub fn object_id() -> String {
    mongodb::bson::oid::ObjectId::new().to_hex()
}

/// Writes `value` to a temp file and returns its path.
pub fn json_file(env: &Env, name: &str, value: &serde_json::Value) -> PathBuf {
    let p = std::env::temp_dir().join(format!("{}-{name}.json", env.namespace));
    std::fs::write(&p, serde_json::to_vec_pretty(value).expect("json")).expect("write");
    p
}

/// Removes the namespace's queues so tests leave nothing behind (also done when the last clone of the test's
/// [`Env`] is dropped).
pub async fn delete_queues(env: &Env) {
    let events = env
        .cleanup
        .events_queue
        .lock()
        .map(|q| q.clone())
        .unwrap_or_default();
    delete_namespace(&env.namespace, &events).await;
}

async fn delete_namespace(namespace: &str, events_queue: &str) {
    let Ok(broker) =
        klaxon_broker::Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(5)).await
    else {
        return;
    };
    let topo = klaxon_broker::Topology::new(namespace, events_queue, klaxon_broker::QueueType::Classic);
    let _ = broker.delete_topology(&topo).await;
    // shard queues of a sharded test (`--events-shards`, at most 8 here): each delete on a channel of its own, so
    // a missing one costs nothing
    for i in 0..8 {
        let _ = broker.delete_queue(&format!("{events_queue}.shard.{i}")).await;
    }
    let _ = broker.delete_exchange(&format!("{events_queue}.shards")).await;
    broker.close().await;
}

/// A non-loopback address of this machine, if it has one (the route to a public address; nothing is sent).
pub fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Decodes quoted-printable soft line breaks and `=XX` escapes (enough for the sink's raw messages).
pub fn qp_decode(raw: &str) -> String {
    let raw = raw.replace("=\r\n", "").replace("=\n", "");
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'=', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// HMAC-SHA256 written out from RFC 2104 with plain SHA-256 (independent of the code under test).
pub fn reference_hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |x: u8| block.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let inner = Sha256::digest([pad(0x36).as_slice(), msg].concat());
    Sha256::digest([pad(0x5c).as_slice(), inner.as_slice()].concat()).to_vec()
}

/// Opens a `firing` alert of (project, rule, group) in `env`'s namespace straight in Redis, as a worker's firing
/// does (`klaxon_counter::Alerts::open`), with `channels` as the channels that delivered its firing;
/// `resolveAfter` 0 (only a hand resolves it). Each call is another firing: a fresh alert once the last one of
/// its (rule, group) is resolved.
pub async fn open_alert(
    env: &Env,
    project: &str,
    rule: &str,
    group: &str,
    title: &str,
    channels: Vec<klaxon_core::alert::AlertChannel>,
) -> klaxon_core::alert::Alert {
    use klaxon_core::alert::{alert_id, Alert, AlertState};
    let redis = klaxon_counter::RedisHandle::connect(&klaxon_testkit::redis_url())
        .await
        .expect("redis");
    let alerts = klaxon_counter::Alerts::new(redis, &env.namespace);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .expect("clock");
    let firing = format!("{now}-{}", rand::random::<u32>());
    let alert = Alert {
        id: alert_id(project, rule, group, &firing),
        project_id: project.to_owned(),
        project_name: None,
        rule_id: rule.to_owned(),
        group: group.to_owned(),
        title: title.to_owned(),
        state: AlertState::Firing,
        firing,
        fired_at_ms: now,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 1,
        last_event_at_ms: now,
        resolve_after_ms: 0,
        channels,
        heard: Vec::new(),
        closes: Vec::new(),
    };
    let opened = alerts
        .open(std::slice::from_ref(&alert), None)
        .await
        .expect("open the alert");
    match opened.into_iter().next() {
        Some(klaxon_counter::Opened::New(a)) => a,
        other => panic!("the alert did not open: {other:?}"),
    }
}

/// A webhook channel to `url`, as an alert's channel.
pub fn webhook_channel(url: &str) -> klaxon_core::alert::AlertChannel {
    klaxon_core::alert::AlertChannel::of_rule(klaxon_core::ChannelKind::Webhook, url, None)
}

/// The delivery trail's records of `project` with status `shadow` (`klaxon deliveries list -o ndjson`), once
/// there are at least `n` of them (within `within`; the panic shows `logs`).
pub fn shadow_records(
    env: &Env,
    project: &str,
    n: usize,
    within: Duration,
    logs: impl Fn() -> String,
) -> Vec<serde_json::Value> {
    klaxon_testkit::eventually_blocking(within, || {
        let out = env.ok(&[
            "deliveries",
            "list",
            "--project",
            project,
            "--status",
            "shadow",
            "-o",
            "ndjson",
        ]);
        let r: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (r.len() >= n).then_some(r)
    })
    .unwrap_or_else(|| panic!("{n} shadow records; log:\n{}", logs()))
}

/// Waits (at most `within`) until the binary's test-only fault injection aborted `k`, which logs `said` as it
/// does.
pub async fn wait_for_abort(k: &Klaxon, within: Duration, said: &str) {
    let died = klaxon_testkit::wait_for(within, || {
        let up = k.get("/healthz").is_some();
        async move { (!up).then_some(()) }
    })
    .await;
    assert!(
        died.is_some(),
        "the test hook must abort the worker; log:\n{}",
        k.logs()
    );
    assert!(k.logs().contains(said), "{}", k.logs());
}

/// The webhook body of an alert's firing: the first request of `hook` (within 15 s), which names its alert and
/// has no `kind`.
pub async fn firing_webhook(hook: &klaxon_testkit::HttpSink, logs: impl Fn() -> String) -> serde_json::Value {
    let got = hook.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 1, "the firing's webhook; log:\n{}", logs());
    let body = got[0].json();
    assert!(body.get("kind").is_none(), "a firing has no kind: {body}");
    assert_eq!(
        body["alertId"].as_str().map(str::len),
        Some(24),
        "the firing names its alert: {body}"
    );
    body
}

/// A quiet window in UTC that covers now and ends at a minute boundary at least 25 s away (so what a test makes
/// fire inside it has time to): (`from`, `to`, the end as unix seconds).
pub fn quiet_window() -> (String, String, u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let end = (now + 25).div_ceil(60) * 60;
    let from = now / 60 * 60 - 60;
    let hm = |s: u64| format!("{:02}:{:02}", s / 3600 % 24, s / 60 % 60);
    (hm(from), hm(end), end)
}

/// How long from now until unix second `end`.
pub fn until(end: u64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    Duration::from_secs(end).saturating_sub(now)
}

/// The sum of `series` over the processes of a fleet (the killed ones count 0: their counters died with them).
pub fn fleet_metric(fleet: &[Klaxon], series: &str) -> f64 {
    fleet.iter().map(|k| k.metric(series)).sum()
}

/// The logs of a fleet's processes, each under its address.
pub fn fleet_logs(fleet: &[Klaxon]) -> String {
    fleet
        .iter()
        .map(|k| format!("--- {} ---\n{}", k.addr, k.logs()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sleeps until `offset_ms` into the next bucket of `bucket_ms` (buckets are aligned on the epoch; Redis runs on
/// this machine's clock): SPIKE tests publish their buckets' events inside one bucket.
pub async fn next_bucket(bucket_ms: u64, offset_ms: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let at = (now / bucket_ms + 1) * bucket_ms + offset_ms;
    tokio::time::sleep(Duration::from_millis(at - now)).await;
}
