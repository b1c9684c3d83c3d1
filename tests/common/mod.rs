//! Shared plumbing for the end-to-end tests: run the real `klaxon` binary against the real services.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        Env { namespace, vars }
    }

    pub fn set(mut self, k: &str, v: &str) -> Self {
        self.vars.retain(|(name, _)| name != k);
        self.vars.push((k.into(), v.into()));
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args).stdin(Stdio::null());
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

    /// Runs a one-shot subcommand that must succeed.
    pub fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "klaxon {args:?} failed: {out}\n{err}");
        out
    }

    /// Stores rules with `klaxon rules import` (the INTERFACE.md JSON format); the import must succeed.
    pub fn import(&self, rules: &serde_json::Value) {
        let file = json_file(self, "rules", rules);
        self.ok(&["rules", "import", "--file", file.to_str().expect("path")]);
    }

    /// Starts a long-running process (`run`, `worker`, `sender`) and waits until /readyz answers 200.
    pub fn spawn(&self, sub: &str, extra: &[&str]) -> Klaxon {
        self.spawn_at(sub, &format!("127.0.0.1:{}", free_port()), extra)
    }

    /// [`Env::spawn`] with the HTTP server on `bind` (e.g. `0.0.0.0:<port>`); the test talks to it on loopback.
    pub fn spawn_at(&self, sub: &str, bind: &str, extra: &[&str]) -> Klaxon {
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
        let k = Klaxon {
            child: Some(child),
            addr,
            log,
        };
        k.wait_ready(Duration::from_secs(60));
        k
    }
}

/// `GET path` on `addr` (bounded: 1 s to connect, 5 s to read): the status code and body, if an answer came.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let sock: std::net::SocketAddr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
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
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some((200, _)) = self.get("/readyz") {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "klaxon at {} not ready in {timeout:?}; log:\n{}",
            self.addr,
            self.logs()
        );
    }

    /// The value of one exported series, `name` or `name{labels}` exactly as `/metrics` prints it; 0 when the
    /// series is absent or the process does not answer.
    pub fn metric(&self, series: &str) -> f64 {
        let Some((_, body)) = self.get("/metrics") else {
            return 0.0;
        };
        metric_in(&body, series)
    }

    /// Waits (bounded) until `series` is at least `at_least`; panics with the process log otherwise.
    pub fn wait_metric(&self, series: &str, at_least: f64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let v = self.metric(series);
            if v >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{series} = {v} < {at_least} after {within:?}; log:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
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
    body.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .filter(|rest| rest.starts_with(' '))
                .and_then(|rest| rest.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Polls `check` every 100 ms until it gives a value or `timeout` passes.
pub async fn eventually<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A 24-hex ObjectId-looking id, unique enough for tests.
pub fn object_id() -> String {
    let ns = klaxon_testkit::unique_namespace();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:014x}{}", t & 0xff_ffff_ffff_ffff, &ns[ns.len() - 10..])
}

/// Writes `value` to a temp file and returns its path.
pub fn json_file(env: &Env, name: &str, value: &serde_json::Value) -> PathBuf {
    let p = std::env::temp_dir().join(format!("{}-{name}.json", env.namespace));
    std::fs::write(&p, serde_json::to_vec_pretty(value).expect("json")).expect("write");
    p
}

/// Removes the namespace's queues so tests leave nothing behind.
pub async fn delete_queues(env: &Env) {
    let Ok(broker) =
        klaxon_broker::Broker::connect(&klaxon_testkit::amqp_url(), Duration::from_secs(5)).await
    else {
        return;
    };
    let Ok(ch) = broker.channel().await else { return };
    let topo = klaxon_broker::Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        klaxon_broker::QueueType::Classic,
    );
    let _ = topo.delete(&ch).await;
    broker.close().await;
}

/// A non-loopback address of this machine, if it has one (the route to a public address; nothing is sent).
pub fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}
