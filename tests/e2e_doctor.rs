//! The deployment traps `klaxon doctor` (and the running processes) must name, through the real binary: an
//! evicting Redis (its own `redis-server`, also one whose `CONFIG` is renamed away as managed services do), a
//! consumer of the events queue that is not Klaxon (a plain lapin consumer, as Hawk's notifier would be),
//! `--output hawk` queues nobody consumes, and events flowing while the rule database holds no rule (its own
//! empty MongoDB-wire server, as an operator pointing `--mongo-db` at the wrong database would have).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{free_port, Env};
use klaxon_broker::Broker;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

const T: Duration = Duration::from_secs(10);

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

/// A server process of the test's own (redis-server, PoloDB), killed on drop.
struct Own {
    port: u16,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl Own {
    fn redis(extra: &[&str]) -> Self {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        Self::started(port, child, None)
    }

    fn started(port: u16, child: Child, dir: Option<tempfile::TempDir>) -> Self {
        let up = klaxon_testkit::eventually_blocking(T, || port_open(port).then_some(()));
        assert!(up.is_some(), "own server on port {port} did not start");
        Own {
            port,
            child,
            _dir: dir,
        }
    }

    fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An empty rule database: a PoloDB server of the test's own (PoloDB serves one database whatever the name, so
/// the shared one holds every test's rules), or, where the shared server is a real MongoDB (no PoloDB installed),
/// a database name nobody used.
fn empty_rule_db() -> (String, String, Option<Own>) {
    let db = format!("wrong_{}", klaxon_testkit::unique_namespace());
    match klaxon_testkit::polodb_bin() {
        Some(bin) => {
            let dir = tempfile::tempdir().expect("tmp");
            let port = free_port();
            let child = klaxon_testkit::polodb_serve(&bin, port, &dir.path().join("data")).expect("polodb");
            let own = Own::started(port, child, Some(dir));
            (format!("mongodb://127.0.0.1:{port}"), db, Some(own))
        }
        None => (klaxon_testkit::mongo_url(), db, None),
    }
}

/// `klaxon doctor` (10 s per check: this machine's cores are shared): exit code and report.
fn doctor(env: &Env) -> (i32, String) {
    let (code, out, err) = env.run(&["doctor", "--timeout", "10s"]);
    assert!(!out.is_empty(), "doctor printed nothing: {err}");
    (code, out)
}

/// The report's line of `check` (its status is the first word, the check's name follows).
fn line<'a>(out: &'a str, check: &str) -> &'a str {
    out.lines()
        .find(|l| {
            l.split_once(' ')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(&format!("{check}  ")))
        })
        .unwrap_or_else(|| panic!("no `{check}` line:\n{out}"))
}

fn count_in(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[test]
fn an_evicting_redis_is_warned_by_doctor_and_once_when_a_process_starts() {
    let lru = Own::redis(&["--maxmemory-policy", "allkeys-lru", "--maxmemory", "200mb"]);
    let env = Env::new().set("KLAXON_REDIS_URL", &lru.redis_url());
    let (code, out) = doctor(&env);
    assert_eq!(code, 0, "a warning, not a failure:\n{out}");
    let l = line(&out, "redis eviction");
    assert!(l.starts_with("warn"), "{l}");
    for said in [
        "allkeys-lru",
        "first-seen marks",
        "dedup leases",
        "digest state",
        "noeviction",
    ] {
        assert!(l.contains(said), "`{said}` in: {l}");
    }

    // A managed Redis that renamed CONFIG away: the policy is read from INFO memory.
    let managed = Own::redis(&[
        "--maxmemory-policy",
        "volatile-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let (code, out) = doctor(&env.clone().set("KLAXON_REDIS_URL", &managed.redis_url()));
    assert_eq!(code, 0, "{out}");
    let l = line(&out, "redis eviction");
    assert!(
        l.starts_with("warn") && l.contains("volatile-lru") && l.contains("INFO memory"),
        "{l}"
    );

    // The shared Redis and the shared cluster run noeviction: every primary is asked.
    let (_, out) = doctor(&env.clone().set("KLAXON_REDIS_URL", &klaxon_testkit::redis_url()));
    assert!(line(&out, "redis eviction").starts_with("ok"), "{out}");
    let (_, out) = doctor(
        &env.clone()
            .set("KLAXON_REDIS_URL", &klaxon_testkit::redis_cluster_url()),
    );
    let l = line(&out, "redis eviction");
    assert!(l.starts_with("ok") && l.contains("noeviction on all"), "{l}");

    // `run` (the evaluate side's connection) and `sender` (its own) warn once at start.
    const WARNING: &str = "Redis may evict Klaxon's keys";
    for sub in ["run", "sender"] {
        let mut k = env.spawn(sub, &[]);
        let warned = klaxon_testkit::eventually_blocking(T, || k.logs().contains(WARNING).then_some(()));
        assert!(warned.is_some(), "{sub}: no warning; log:\n{}", k.logs());
        let logs = k.logs();
        assert!(logs.contains("allkeys-lru"), "{logs}");
        assert_eq!(k.terminate(T), Some(0));
        assert_eq!(count_in(&k.logs(), WARNING), 1, "{sub}: once:\n{}", k.logs());
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(common::delete_queues(&env));
}

/// A Redis that keeps nothing across a restart (no AOF, no RDB `save` rule — the held quiet-hours alerts live only
/// there) is a doctor warning naming the fix; one with either is ok; one whose `CONFIG` is refused cannot be
/// checked, and doctor says so. Warnings keep the exit code 0.
#[test]
fn a_redis_that_keeps_nothing_across_a_restart_is_warned_by_doctor() {
    let bare = Own::redis(&[]);
    let env = Env::new().set("KLAXON_REDIS_URL", &bare.redis_url());
    let (code, out) = doctor(&env);
    assert_eq!(code, 0, "a warning, not a failure:\n{out}");
    let l = line(&out, "redis persistence");
    assert!(l.starts_with("warn"), "{l}");
    for said in [
        "keeps nothing across a restart",
        "quiet hours",
        "appendonly yes",
        "save",
    ] {
        assert!(l.contains(said), "`{said}` in: {l}");
    }

    let dir = tempfile::tempdir().expect("tmp");
    let dir = dir.path().to_str().expect("utf-8 path");
    let aof = Own::redis(&["--dir", dir, "--appendonly", "yes"]);
    let (_, out) = doctor(&env.clone().set("KLAXON_REDIS_URL", &aof.redis_url()));
    let l = line(&out, "redis persistence");
    assert!(l.starts_with("ok") && l.contains("appendonly yes"), "{l}");
    let rdb = Own::redis(&["--dir", dir, "--save", "3600 1"]);
    let (_, out) = doctor(&env.clone().set("KLAXON_REDIS_URL", &rdb.redis_url()));
    let l = line(&out, "redis persistence");
    assert!(l.starts_with("ok") && l.contains("save \"3600 1\""), "{l}");

    let managed = Own::redis(&["--rename-command", "CONFIG", ""]);
    let (code, out) = doctor(&env.clone().set("KLAXON_REDIS_URL", &managed.redis_url()));
    assert_eq!(code, 0, "{out}");
    let l = line(&out, "redis persistence");
    assert!(l.starts_with("warn") && l.contains("could not be checked"), "{l}");
}

/// A consumer that is not Klaxon: a plain lapin connection with a name and a tag of its own, as Hawk's notifier
/// holds one on `notifier`. It declares the queue as Klaxon does (durable, classic).
async fn foreign_consumer(queue: &str) -> (Connection, lapin::Consumer) {
    let conn = Connection::connect(
        &klaxon_testkit::amqp_url(),
        ConnectionProperties::default().with_connection_name("hawk notifier".into()),
    )
    .await
    .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    ch.basic_qos(1, BasicQosOptions::default()).await.expect("qos");
    let consumer = ch
        .basic_consume(
            queue.into(),
            "hawk-notifier".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    (conn, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_the_events_queue_that_is_not_klaxon_is_warned_by_doctor_and_by_the_worker() {
    let env = Env::new();
    let queue = format!("{}.events", env.namespace);
    let (conn, consumer) = foreign_consumer(&queue).await;

    let doc = |env: &Env| {
        let env = env.clone();
        tokio::task::spawn_blocking(move || doctor(&env))
    };
    let (code, out) = doc(&env).await.expect("join");
    assert_eq!(code, 0, "{out}");
    let l = line(&out, "consumers");
    assert!(l.starts_with("warn"), "{l}");
    assert!(
        l.contains("1 consumer(s), no registered Klaxon worker: 1 consumer(s) are not Klaxon processes"),
        "{l}"
    );
    assert!(l.contains("under-counted"), "{l}");

    // The worker sees it at once (its first count follows its first consume) and exports the count.
    let k = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.spawn("worker", &[]))
            .await
            .expect("join")
    };
    let said = "not Klaxon workers of this namespace";
    let warned = klaxon_testkit::eventually(T, || k.logs().contains(said).then_some(())).await;
    assert!(warned.is_some(), "no warning; log:\n{}", k.logs());
    let logs = k.logs();
    assert_eq!(count_in(&logs, said), 1, "warned once: {logs}");
    assert_eq!(k.metric("klaxon_events_foreign_consumers"), 1.0);

    // doctor tells the worker (by its registered label: role, host, pid) from the other consumer.
    let (code, out) = doc(&env).await.expect("join");
    assert_eq!(code, 0, "{out}");
    let l = line(&out, "consumers");
    assert!(
        l.starts_with("warn") && l.contains("2 consumer(s), 1 registered Klaxon worker(s) (klaxon worker "),
        "{l}"
    );
    assert!(
        l.contains(&format!(" {})", k.pid())),
        "the worker's pid in its label: {l}"
    );
    assert!(l.contains("1 consumer(s) are not Klaxon processes"), "{l}");

    // The other consumer gone: all clear. The connection is closed before the consumer is dropped: dropping it
    // first starts closing its channel, and a connection close that meets a channel in `Closing` fails.
    conn.close(200, "bye".into()).await.expect("close");
    drop(consumer);
    let (code, out) = doc(&env).await.expect("join");
    assert_eq!(code, 0, "{out}");
    let l = line(&out, "consumers");
    assert!(
        l.starts_with("ok") && l.contains("1 consumer(s), all registered Klaxon workers"),
        "{l}"
    );
    drop(k);
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hawk_sender_queues_without_consumers_are_warned_with_output_hawk() {
    let env = Env::new().set("KLAXON_OUTPUT", "hawk");
    // `sender/<channel>` names are global on the broker (Hawk's): declared as Hawk's workers declare them.
    let broker = Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect");
    let publisher = broker.publisher().await.expect("channel");
    for channel in klaxon_core::ChannelKind::ALL {
        publisher
            .declare_plain(&klaxon_engine::sink::hawk_queue(channel))
            .await
            .expect("declare");
    }
    // Hawk's slack sender runs; the others do not.
    let slack = broker
        .consume("sender/slack", 1, "hawk-sender-slack")
        .await
        .expect("consume");

    let out = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || {
            let (code, out) = doctor(&env);
            assert_eq!(code, 0, "warnings only:\n{out}");
            out
        })
        .await
        .expect("join")
    };
    assert!(line(&out, "queue sender/slack").starts_with("ok"), "{out}");
    // Another test on this machine may consume a sender queue right now: the doctor's line must agree with what
    // the broker says about each, and at least one queue (in CI: all but slack) has no consumer.
    let mut warned = 0;
    for channel in klaxon_core::ChannelKind::ALL {
        let queue = klaxon_engine::sink::hawk_queue(channel);
        let l = line(&out, &format!("queue {queue}"));
        if l.contains(" 0 consumers") {
            assert!(l.starts_with("warn"), "{l}");
            assert!(
                l.contains(&format!("Hawk's {channel} sender is not running")),
                "{l}"
            );
            assert!(l.contains("pile up"), "{l}");
            warned += 1;
        } else {
            assert!(l.starts_with("ok"), "{l}");
        }
    }
    assert!(warned >= 1, "{out}");

    // Without --output hawk the sender queues are none of doctor's business.
    let plain = env.clone().unset("KLAXON_OUTPUT");
    let out = tokio::task::spawn_blocking(move || doctor(&plain).1)
        .await
        .expect("join");
    assert!(!out.contains("sender/"), "{out}");
    slack.close().await;
    broker.close().await;
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_flowing_into_an_empty_rule_database_fail_doctor_naming_the_database() {
    let (mongo_url, db, _own) = empty_rule_db();
    let env = Env::new()
        .set("KLAXON_MONGO_URL", &mongo_url)
        .set("KLAXON_MONGO_DB", &db);
    let doc = |env: &Env| {
        let env = env.clone();
        tokio::task::spawn_blocking(move || doctor(&env))
    };
    let in_db = format!("database `{db}` (collection `projects`) holds no project with rules");

    // No rules and no traffic yet (a fresh install): not a failure.
    let (code, out) = doc(&env).await.expect("join");
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "rules").starts_with("ok") && out.contains(&in_db),
        "{out}"
    );
    assert!(
        out.contains(&format!("database `{db}`, collection `projects`")),
        "{out}"
    );

    // Events wait on the queue: every one of them would be dropped.
    let project = common::object_id();
    let publish = |env: &Env| {
        let env = env.clone();
        let project = project.clone();
        tokio::task::spawn_blocking(move || env.publish(&project, "Boom", "g").count(3).ok())
    };
    publish(&env).await.expect("join");
    let (code, out) = doc(&env).await.expect("join");
    assert_eq!(code, 1, "{out}");
    let l = line(&out, "rules");
    assert!(l.starts_with("FAIL") && l.contains(&in_db), "{l}");
    assert!(l.contains("3 messages ready") && l.contains("--mongo-db"), "{l}");

    // A worker pointed at the same database drains the queue (and drops everything): still a failure, seen
    // through the worker's report of events taken.
    let k = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || env.spawn("worker", &[]))
            .await
            .expect("join")
    };
    k.wait_acked(3, T);
    let failed = {
        let env = env.clone();
        tokio::task::spawn_blocking(move || {
            klaxon_testkit::eventually_blocking(T, || {
                let (code, out) = doctor(&env);
                (code == 1 && line(&out, "rules").contains("a Klaxon worker took events")).then_some(out)
            })
        })
        .await
        .expect("join")
    };
    let out = failed.unwrap_or_else(|| panic!("no FAIL from the worker's report; worker log:\n{}", k.logs()));
    let l = line(&out, "rules");
    assert!(
        l.starts_with("FAIL") && l.contains(&in_db) && !l.contains("messages ready"),
        "{l}"
    );

    // The database that holds the rules: no such failure.
    let right = env
        .clone()
        .set("KLAXON_MONGO_URL", &klaxon_testkit::mongo_url())
        .set("KLAXON_MONGO_DB", &env.namespace);
    let rules = serde_json::json!([{"_id": project, "notifications": [{"_id": common::object_id(),
        "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
        "channels": {"email": {"isEnabled": true, "endpoint": "dev@example.com", "minPeriod": 0}}}]}]);
    {
        let right = right.clone();
        tokio::task::spawn_blocking(move || right.import(&rules))
            .await
            .expect("join");
    }
    let (_, out) = doc(&right).await.expect("join");
    assert!(!line(&out, "rules").starts_with("FAIL"), "{out}");
    drop(k);
    common::delete_queues(&env).await;
}
