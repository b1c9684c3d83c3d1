//! Failures mid-stream: Redis and RabbitMQ restarted under a running Klaxon. These tests never touch the shared
//! services other tests use: each starts its own `redis-server` or RabbitMQ node on free loopback ports, and they
//! run one at a time.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, object_id, Env, Klaxon};
use klaxon_testkit::HttpSink;
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

fn wait_port(port: u16, open: bool, within: Duration) {
    let became = klaxon_testkit::eventually_blocking(within, || (port_open(port) == open).then_some(()));
    assert!(
        became.is_some(),
        "port {port} did not become {}",
        if open { "open" } else { "closed" }
    );
}

fn wait_status(k: &Klaxon, path: &str, want: u16, within: Duration) {
    let answered = klaxon_testkit::eventually_blocking(within, || {
        (k.get(path).map(|r| r.0) == Some(want)).then_some(())
    });
    assert!(
        answered.is_some(),
        "{path} did not answer {want} within {within:?}; log:\n{}",
        k.logs()
    );
}

struct OwnRedis {
    port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    fn start(port: u16) -> Self {
        Self::start_with(port, &["--appendonly", "no"])
    }

    /// With an append-only file fsynced on every write, in `dir`: a kill -9 loses nothing the server answered
    /// (or was about to answer).
    fn start_persistent(port: u16, dir: &std::path::Path) -> Self {
        let dir = dir.to_str().expect("utf-8 dir");
        Self::start_with(
            port,
            &["--appendonly", "yes", "--appendfsync", "always", "--dir", dir],
        )
    }

    fn start_with(port: u16, extra: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        wait_port(port, true, Duration::from_secs(10));
        OwnRedis {
            port,
            child: Some(child),
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        wait_port(self.port, false, Duration::from_secs(10));
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A RabbitMQ node of our own: its own node name, AMQP and distribution ports, data and log directories.
struct OwnRabbit {
    dir: PathBuf,
    port: u16,
    dist_port: u16,
    child: Option<Child>,
}

impl OwnRabbit {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("klaxon-rmq-{}", klaxon_testkit::unique_namespace()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("plugins file");
        let mut r = OwnRabbit {
            dir,
            port: free_port(),
            dist_port: free_port(),
            child: None,
        };
        r.boot();
        r
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn boot(&mut self) {
        let d = &self.dir;
        let child = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .current_dir(d)
            .env("HOME", d)
            .env("RABBITMQ_NODENAME", format!("klaxon{}@localhost", self.port))
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
            .env("RABBITMQ_PID_FILE", d.join("pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rabbitmq-server (apt-get install rabbitmq-server)");
        self.child = Some(child);
        wait_port(self.port, true, Duration::from_secs(90));
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // The node's Erlang VM may outlive the wrapper script: stop it by its pid file.
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pid")) {
            let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
        }
        wait_port(self.port, false, Duration::from_secs(30));
    }
}

impl Drop for OwnRabbit {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn import_rule(env: &Env, project: &str, threshold: u64, endpoint: &str) {
    let rules = json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": threshold, "thresholdPeriod": 3_600_000,
        "channels": {"slack": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}}]}]);
    env.import(&rules);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_mid_stream_loses_no_unacked_event() {
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let mut redis = OwnRedis::start(port);
    let env = Env::new().set("KLAXON_REDIS_URL", &format!("redis://127.0.0.1:{port}/"));
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    import_rule(&env, &project, 50, &slack.url("/hook"));
    let k = env.spawn("run", &[]);

    env.publish(&project, "group A", "a").count(20).ok();
    // Only once A's batch is acked is its count of 20 known to be in this Redis: stopping Redis while the batch
    // is inside its script call would lose the reply, leave the batch unacked, and count it again after the
    // restart (see the README's "Failure behaviour").
    k.wait_acked(20, Duration::from_secs(20));

    redis.stop();
    wait_status(&k, "/readyz", 503, Duration::from_secs(15));
    let sessions_ended = || worker_sessions_ended(&k.logs());
    let ended_before = sessions_ended();
    // Published while Redis is down: consumed, not countable, so not acked.
    env.publish(&project, "group B", "b").count(50).ok();
    // The worker has taken B, or part of it, while Redis is down (consumed rises when a batch starts; how B is cut
    // into batches is the worker's business: a lone first event is processed at once), failed to count it and
    // ended its session: the unacked events went back to the queue. None of B is acked.
    k.wait_metric("klaxon_events_consumed_total", 21.0, Duration::from_secs(20));
    let ended = klaxon_testkit::eventually_blocking(Duration::from_secs(20), || {
        (sessions_ended() > ended_before).then_some(())
    });
    assert!(
        ended.is_some(),
        "the worker's session did not end on Redis; log:\n{}",
        k.logs()
    );
    assert_eq!(
        k.metric("klaxon_events_acked_total"),
        20.0,
        "nothing acked while Redis is down"
    );
    let _redis = OwnRedis::start(port);
    wait_status(&k, "/readyz", 200, Duration::from_secs(45));

    // All 50 events of B come back and are counted (the threshold is 50: one event lost and B never fires): B
    // fires exactly once.
    let got = slack.wait_for_count(1, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    // A's 20 counts were in the lost Redis: 30 more start a new window at 1 and do not reach 50.
    env.publish(&project, "group A", "a").count(30).ok();
    // Every event is now counted and acked, and any firing's task was published before its batch was acked.
    k.wait_acked(100, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0,
        "only B fired; log:\n{}",
        k.logs()
    );
    let got = slack.requests();
    assert_eq!(got.len(), 1, "only B fired");
    assert!(got[0].json()["text"]
        .as_str()
        .unwrap_or_default()
        .contains("group B"));
    common::delete_queues(&env).await;
}

/// How many times the worker's session ended on an error (`supervise`'s "session ended; reconnecting", role
/// worker) in `log`.
fn worker_sessions_ended(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("session ended; reconnecting")
                && (l.contains("role=\"worker\"") || l.contains("role=worker "))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_restart_mid_stream_recovers_by_itself() {
    let _serial = SERIAL.lock().await;
    let mut rabbit = OwnRabbit::start();
    let env = Env::new().set("KLAXON_AMQP_URL", &rabbit.url());
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    import_rule(&env, &project, 100, &slack.url("/hook"));
    let k = env.spawn("run", &[]);

    env.publish(&project, "Disk full", "d").count(60).ok();
    k.wait_acked(60, Duration::from_secs(20));

    rabbit.stop();
    wait_status(&k, "/readyz", 503, Duration::from_secs(15));
    rabbit.boot();
    wait_status(&k, "/readyz", 200, Duration::from_secs(60));

    // The 60 acked events stayed counted; 40 more cross the threshold once.
    env.publish(&project, "Disk full", "d").count(40).ok();
    let got = slack.wait_for_count(1, Duration::from_secs(60)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    // All 100 acked (the process kept its metrics across the broker restart): nothing else can fire now.
    k.wait_acked(100, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0
    );
    assert_eq!(slack.count(), 1);
    assert!(
        k.logs().contains("reconnecting"),
        "the worker noticed and reconnected"
    );
}

/// Redis killed while a batch may be inside its script call: Redis may have counted the batch (and kept it: AOF,
/// fsync always) while the reply is lost, so the batch is not acked and comes back. Its events carry AMQP
/// `message_id`s (as `klaxon publish` sets them), so the retry counts nothing twice: the 50th event, not an
/// earlier one, fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_retried_after_a_redis_crash_mid_script_is_not_counted_twice() {
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("klaxon-aof-{}", klaxon_testkit::unique_namespace()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut redis = OwnRedis::start_persistent(port, &dir);
    let env = Env::new().set("KLAXON_REDIS_URL", &format!("redis://127.0.0.1:{port}/"));
    let slack = HttpSink::start().await.expect("sink");
    let project = object_id();
    import_rule(&env, &project, 50, &slack.url("/hook"));
    let k = env.spawn("run", &[]);
    let publish = |n: u64| {
        env.publish(&project, "Crash", "c").count(n).ok();
    };

    publish(20);
    // The batch has started (consumed rises first): kill Redis now, possibly inside the script call.
    k.wait_metric("klaxon_events_consumed_total", 20.0, Duration::from_secs(20));
    redis.stop();
    let _redis = OwnRedis::start_persistent(port, &dir);
    k.wait_acked(20, Duration::from_secs(60));

    // Counted exactly 20 times, whatever the kill interrupted: 29 more stay below 50 ...
    publish(29);
    k.wait_acked(49, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        0.0,
        "fired early: the retried batch was counted twice; log:\n{}",
        k.logs()
    );
    // ... and the 50th fires, once.
    publish(1);
    let got = slack.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}", k.logs());
    k.wait_acked(50, Duration::from_secs(30));
    assert_eq!(
        k.metric("klaxon_notifications_published_total{channel=\"slack\"}"),
        1.0
    );
    common::delete_queues(&env).await;
    let _ = std::fs::remove_dir_all(&dir);
}
