//! Dev-only helpers shared by Klaxon's tests.
//!
//! Tests talk to real services on loopback. Their URLs come from the environment with loopback defaults
//! (the ones `scripts/services` starts), every test works in its own random namespace, and the HTTP APIs we
//! cannot reach from here (Slack, Telegram, webhook receivers) are played by [`HttpSink`], a local server that
//! records every request and answers from a script.
#![deny(missing_docs)]

pub mod http_sink;
pub mod smtp;

pub use http_sink::{HttpSink, Reply, Request};

use std::time::Duration;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Single-node Redis (`KLAXON_TEST_REDIS_URL`).
pub fn redis_url() -> String {
    env_or("KLAXON_TEST_REDIS_URL", "redis://127.0.0.1:6379/")
}

/// The 3-master Redis Cluster started by `scripts/services` (`KLAXON_TEST_REDIS_CLUSTER_URL`, a
/// comma-separated node list).
pub fn redis_cluster_url() -> String {
    env_or(
        "KLAXON_TEST_REDIS_CLUSTER_URL",
        "redis://127.0.0.1:7000/,redis://127.0.0.1:7001/,redis://127.0.0.1:7002/",
    )
}

/// RabbitMQ (`KLAXON_TEST_AMQP_URL`).
pub fn amqp_url() -> String {
    env_or("KLAXON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

/// The MongoDB-wire server (`KLAXON_TEST_MONGO_URL`).
pub fn mongo_url() -> String {
    env_or("KLAXON_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
}

/// The SMTP sink's address (`KLAXON_TEST_SMTP_URL`).
pub fn smtp_url() -> String {
    env_or("KLAXON_TEST_SMTP_URL", "smtp://127.0.0.1:2525")
}

/// A fresh namespace such as `kt_3f9a1c2b7d`, so that tests never share queues, keys or databases.
pub fn unique_namespace() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("kt_{:010x}", n & 0xff_ffff_ffff)
}

/// Polls `check` every 50 ms until it returns `Some`, or gives up after `timeout` with `None`: the one wait of
/// the async tests (a synchronous check goes through [`eventually`]).
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// [`wait_for`] with a synchronous check (a file read, an HTTP GET of the test's own blocking client).
pub async fn eventually<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    wait_for(timeout, || std::future::ready(check())).await
}

/// [`eventually`] for code that must not await (a `Drop`, a helper called from a plain function): polls on the
/// calling thread, sleeping between checks.
pub fn eventually_blocking<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// How often the waits above look again.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The PoloDB binary `scripts/services` installs, for tests that need a MongoDB-wire server of their own:
/// `KLAXON_POLODB_BIN`, else `polodb/bin/polodb` under `KLAXON_TOOLS_DIR` (default `~/.local/share/klaxon`);
/// `None` when neither is a file.
pub fn polodb_bin() -> Option<std::path::PathBuf> {
    let tools = std::env::var_os("KLAXON_TOOLS_DIR").map_or_else(
        || std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".local/share/klaxon"),
        std::path::PathBuf::from,
    );
    [
        std::env::var_os("KLAXON_POLODB_BIN").map(std::path::PathBuf::from),
        Some(tools.join("polodb/bin/polodb")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

/// Starts `polodb serve` on 127.0.0.1:`port` with its data in `data`, its output discarded. The caller owns
/// (and kills) the process and waits for it to accept connections.
pub fn polodb_serve(
    bin: &std::path::Path,
    port: u16,
    data: &std::path::Path,
) -> std::io::Result<std::process::Child> {
    std::process::Command::new(bin)
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--path",
        ])
        .arg(data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
}
