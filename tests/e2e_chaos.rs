//! Chaos on real clusters: a fleet of 3 `klaxon worker` and 2 `klaxon sender` processes on a 3-node RabbitMQ
//! cluster (quorum queues) and a Redis Cluster of 3 masters + 3 replicas, while 50 groups cross their thresholds
//! and, one after the other:
//!   (a) the RabbitMQ node that leads the events queue is stopped, then started again;
//!   (b) a Redis master is killed (kill -9) and its replica promoted, then the old master comes back as a replica;
//!   (c) a worker is killed (kill -9) and started again.
//! Every crossing must reach the webhook receiver exactly once (one request per group, no notificationId twice),
//! and every process must recover by itself. The test prints what the fleet did in each fault (time to recover,
//! redeliveries, duplicates suppressed). Then, on the same clusters:
//!   (d) with `--events-shards 3` (quorum shard queues), the node leading one shard is stopped while 3 workers
//!       consume every shard: nothing is lost (every group crosses on its last event) and nothing is counted
//!       twice (no group crosses before it);
//!   (e) with the `rabbitmq_consistent_hash_exchange` plugin disabled on the node the processes use, `klaxon
//!       doctor --events-shards 3` FAILs saying which plugin to enable, `klaxon publish` fails saying so, and a worker
//!       stays not ready, logging why, until the plugin is enabled again — then it consumes by itself.
//!
//! The clusters are the test's own, started with `scripts/rabbitmq-cluster` and `scripts/redis-cluster` on free
//! ports, in a directory of their own, and removed at the end; the shared services are never touched (only the
//! MongoDB-wire server holds the rules, in the test's own database). `KLAXON_TEST_CHAOS_LONG=1` runs the three
//! faults three times with more groups per round.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{object_id, Env, Klaxon};
use klaxon_broker::shards::CONSISTENT_HASH_PLUGIN;
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use klaxon_testkit::HttpSink;
use serde_json::json;

const GROUPS: u64 = 50;
/// The rule's threshold: each group gets exactly this many events, so each crosses exactly once.
const THRESHOLD: u64 = 5;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name)
}

fn port_free(p: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
}

/// A base port whose whole family is free: `n` consecutive ports plus the `offsets` each one implies
/// (RabbitMQ: distribution +20000, CLI +30000…+30010; Redis: cluster bus +10000).
fn free_family(lo: u16, hi: u16, n: u16, offsets: &[u16]) -> u16 {
    let seed = std::process::id() as u16 ^ (Instant::now().elapsed().subsec_nanos() as u16);
    for i in 0..200u16 {
        let base = lo + (seed.wrapping_add(i.wrapping_mul(37)) % ((hi - lo) / 10)) * 10;
        if (0..n).all(|k| offsets.iter().chain([0].iter()).all(|o| port_free(base + k + o))) {
            return base;
        }
    }
    panic!("no free port family in {lo}..{hi}");
}

/// Runs a cluster script; panics with its output when it fails.
fn run_script(name: &str, env: &[(&str, String)], args: &[&str]) -> String {
    let mut cmd = Command::new(script(name));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {name}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
    text
}

struct Clusters {
    dir: PathBuf,
    rmq_ports: Vec<u16>,
    redis_base: u16,
}

impl Clusters {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("klaxon-chaos-{}", klaxon_testkit::unique_namespace()));
        std::fs::create_dir_all(&dir).expect("dir");
        let rmq = free_family(21000, 24900, 3, &[20000, 30000, 30010]);
        // Redis nodes bind 30 s later (after RabbitMQ has booted): their ports and cluster bus ports (+10000)
        // stay below the kernel's ephemeral range (32768+), so no outgoing connection can take one meanwhile.
        let redis_base = free_family(5000, 9000, 6, &[10000]);
        let c = Clusters {
            dir,
            rmq_ports: vec![rmq, rmq + 1, rmq + 2],
            redis_base,
        };
        c.rmq(&["start"]);
        c.redis(&["start"]);
        c
    }

    fn rmq_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KLAXON_RUN_DIR", self.dir.display().to_string()),
            (
                "KLAXON_RMQ_CLUSTER_PORTS",
                self.rmq_ports
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        ]
    }

    fn redis_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KLAXON_RUN_DIR", self.dir.display().to_string()),
            ("KLAXON_REDIS_CLUSTER_PORT", self.redis_base.to_string()),
            // promote a failed master's replica after 2 s instead of 5
            ("KLAXON_REDIS_NODE_TIMEOUT", "2000".into()),
        ]
    }

    fn rmq(&self, args: &[&str]) -> String {
        run_script("rabbitmq-cluster", &self.rmq_env(), args)
    }

    fn redis(&self, args: &[&str]) -> String {
        run_script("redis-cluster", &self.redis_env(), args)
    }

    fn amqp_url(&self) -> String {
        self.rmq(&["urls"]).trim().to_owned()
    }

    fn redis_url(&self) -> String {
        (0..6)
            .map(|k| format!("redis://127.0.0.1:{}/", self.redis_base + k))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `queue`'s row of `rabbitmqctl list_queues name <columns…>`, asked of each node in turn until one answers.
    fn queue_row(&self, queue: &str, columns: &[&str]) -> Option<serde_json::Value> {
        for i in 1..=self.rmq_ports.len() {
            let node = i.to_string();
            let mut args = vec!["ctl", node.as_str(), "list_queues", "name"];
            args.extend_from_slice(columns);
            args.extend_from_slice(&["--formatter", "json"]);
            let Ok(out) = Command::new(script("rabbitmq-cluster"))
                .envs(self.rmq_env())
                .args(&args)
                .output()
            else {
                continue;
            };
            let Ok(rows) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                continue;
            };
            if let Some(row) = rows
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["name"] == queue))
            {
                return Some(row.clone());
            }
        }
        None
    }

    /// The 1-based index of the node leading the quorum queue `queue`.
    fn leader_of(&self, queue: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = self
                .queue_row(queue, &["leader"])
                .and_then(|r| r["leader"].as_str().map(str::to_owned));
            if let Some(leader) = leader {
                if let Some(k) = self
                    .rmq_ports
                    .iter()
                    .position(|p| leader == format!("klaxon-{p}@localhost"))
                {
                    return k + 1;
                }
            }
            assert!(Instant::now() < deadline, "no leader found for {queue}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// True when the broker holds no message of `queue`, ready or unacknowledged (asked of any running node).
    fn queue_drained(&self, queue: &str) -> bool {
        self.queue_row(queue, &["messages_ready", "messages_unacknowledged"])
            .is_some_and(|row| row["messages_ready"] == 0 && row["messages_unacknowledged"] == 0)
    }

    /// True when the broker holds no message of any of `queues`, ready or unacknowledged (one `list_queues`,
    /// asked of each node in turn until one answers).
    fn queues_drained(&self, queues: &[String]) -> bool {
        for i in 1..=self.rmq_ports.len() {
            let node = i.to_string();
            let Ok(out) = Command::new(script("rabbitmq-cluster"))
                .envs(self.rmq_env())
                .args([
                    "ctl",
                    &node,
                    "list_queues",
                    "name",
                    "messages_ready",
                    "messages_unacknowledged",
                ])
                .args(["--formatter", "json"])
                .output()
            else {
                continue;
            };
            let Ok(rows) = serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout) else {
                continue;
            };
            return queues.iter().all(|q| {
                rows.iter().any(|r| {
                    r["name"] == q.as_str() && r["messages_ready"] == 0 && r["messages_unacknowledged"] == 0
                })
            });
        }
        false
    }

    /// `rabbitmq-plugins <args>` on node `i` (1-based).
    fn plugins(&self, i: usize, args: &[&str]) {
        let node = i.to_string();
        let mut all = vec!["plugins", node.as_str()];
        all.extend_from_slice(args);
        self.rmq(&all);
    }

    /// `master` or `slave`: the role of the Redis node on `port`.
    fn redis_role(&self, port: u16) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "role"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines().next().unwrap_or_default().trim().to_owned()
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        let _ = Command::new(script("rabbitmq-cluster"))
            .envs(self.rmq_env())
            .arg("clean")
            .output();
        let _ = Command::new(script("redis-cluster"))
            .envs(self.redis_env())
            .arg("stop")
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn metric(k: &Klaxon, series: &str) -> u64 {
    k.metric(series) as u64
}

/// The sender's "already delivered, not sent again" outcome.
const DUPLICATE: &str = "klaxon_deliveries_total{channel=\"webhook\",outcome=\"duplicate\"}";

struct Fleet {
    env: Env,
    workers: Vec<Klaxon>,
    senders: Vec<Klaxon>,
    /// Events consumed by workers that were killed (their counters died with them).
    dead_consumed: u64,
    /// Events acked by workers that were killed.
    dead_done: u64,
}

impl Fleet {
    fn all(&self) -> impl Iterator<Item = &Klaxon> {
        self.workers.iter().chain(self.senders.iter())
    }

    fn consumed(&self) -> u64 {
        self.dead_consumed
            + self
                .workers
                .iter()
                .map(|w| metric(w, "klaxon_events_consumed_total"))
                .sum::<u64>()
    }

    /// Events acked (counted, their tasks published, the batch acked).
    fn done(&self) -> u64 {
        self.dead_done
            + self
                .workers
                .iter()
                .map(|w| metric(w, "klaxon_events_acked_total"))
                .sum::<u64>()
    }

    fn duplicates(&self) -> u64 {
        self.senders.iter().map(|s| metric(s, DUPLICATE)).sum()
    }

    fn all_ready(&self) -> bool {
        self.all().all(|k| k.get("/readyz").map(|r| r.0) == Some(200))
    }

    fn logs(&self) -> String {
        self.all()
            .map(|k| format!("==== {} ====\n{}", k.log.display(), tail(&k.logs(), 60)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Polls every process's /readyz every 100 ms from a fault on, to report who lost readiness and for how long.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
}

impl Sampler {
    fn start(fleet: &Fleet) -> Self {
        let addrs: Vec<String> = fleet.all().map(|k| k.addr.clone()).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut down = vec![Duration::ZERO; addrs.len()];
            let deadline = Instant::now() + Duration::from_secs(300);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                let t = Instant::now();
                for (i, a) in addrs.iter().enumerate() {
                    if common::http_get(a, "/readyz").map(|r| r.0) != Some(200) {
                        down[i] += Duration::from_millis(100);
                    }
                }
                std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
            }
            down
        });
        Sampler { stop, thread }
    }

    /// (processes that were not ready at some point, the longest such time)
    fn finish(self) -> (usize, Duration) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let down = self.thread.join().unwrap_or_default();
        (
            down.iter().filter(|d| !d.is_zero()).count(),
            down.into_iter().max().unwrap_or_default(),
        )
    }
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Publishes with confirms through the cluster, reconnecting (to any node) until every message is confirmed.
async fn publish_reliably(url: &str, msgs: &[Outgoing]) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut retries = 0;
    loop {
        let attempt = async {
            let broker = Broker::connect(url, Duration::from_secs(5)).await?;
            let publisher = broker.publisher().await?;
            let r = tokio::time::timeout(Duration::from_secs(15), publisher.publish_all(msgs)).await;
            publisher.close().await;
            broker.close().await;
            match r {
                Ok(r) => r,
                Err(_) => Err(klaxon_broker::BrokerError::Nacked {
                    queue: "confirm timed out".into(),
                }),
            }
        };
        match attempt.await {
            Ok(()) => return retries,
            Err(e) => {
                retries += 1;
                assert!(Instant::now() < deadline, "could not publish for 90 s: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The events of `round` for groups `first` … `first + GROUPS - 1`: one for every group whose window of
/// `THRESHOLD` rounds covers it (group g starts at round g % 10, so crossings are spread over rounds
/// THRESHOLD-1 … THRESHOLD+8, across the faults).
fn round_events(queue: &str, project: &str, round: u64, first: u64) -> Vec<Outgoing> {
    (first..first + GROUPS)
        .filter(|g| round >= g % 10 && round < g % 10 + THRESHOLD)
        .map(|g| {
            let body = json!({"projectId": project,
                "event": {"title": format!("Chaos group {g}"), "groupHash": format!("chaos-{g:03}"), "isNew": false}});
            let mut m = Outgoing::json(queue, serde_json::to_vec(&body).expect("json"));
            m.message_id = Some(format!("chaos-{g}-{round}"));
            m
        })
        .collect()
}

/// `n` events of a project that has no rules: consumed and acked, never counted.
fn filler(queue: &str, n: u64, cycle: u64) -> Vec<Outgoing> {
    let project = format!("{:024x}", 0xf111_0000u64 + cycle);
    (0..n)
        .map(|i| {
            let body = json!({"projectId": project, "event": {"title": "filler", "groupHash": "filler"}});
            let mut m = Outgoing::json(queue, serde_json::to_vec(&body).expect("json"));
            m.message_id = Some(format!("filler-{cycle}-{i}"));
            m
        })
        .collect()
}

const ROUNDS: u64 = THRESHOLD + 9;

struct FaultReport {
    name: String,
    recover_s: f64,
    publish_retries: u32,
    not_ready: (usize, Duration),
    redeliveries: u64,
}

/// Waits until every process is ready and every published event's batch is done; returns the seconds it took.
///
/// "Done" is counted from the workers' acked metrics. A worker killed with -9 takes its last acks with it: the
/// count read just before the kill can miss a batch acked in between. So once a worker has been killed, and the
/// publishing is over (it always is when this is called), the broker is asked instead: nothing ready and nothing
/// unacknowledged in the events queue means every event was acked.
fn wait_recovered(
    fleet: &Fleet,
    clusters: &Clusters,
    queue: &str,
    published: u64,
    since: Instant,
    within: Duration,
) -> f64 {
    let deadline = Instant::now() + within;
    let mut asked_broker = Instant::now() - Duration::from_secs(10);
    loop {
        if fleet.all_ready() {
            if fleet.done() >= published {
                return since.elapsed().as_secs_f64();
            }
            if fleet.dead_consumed > 0 && asked_broker.elapsed() >= Duration::from_secs(2) {
                asked_broker = Instant::now();
                if clusters.queue_drained(queue) {
                    return since.elapsed().as_secs_f64();
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the fleet did not recover within {within:?}: ready={} done={} published={published}\n{}",
            fleet.all_ready(),
            fleet.done(),
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_survives_broker_redis_and_worker_failures_without_losing_or_duplicating() {
    let long = std::env::var("KLAXON_TEST_CHAOS_LONG").is_ok_and(|v| v == "1");
    let cycles = if long { 3 } else { 1 };
    let groups = GROUPS * cycles;
    let started = Instant::now();
    let clusters = Clusters::start();
    let cluster_boot_s = started.elapsed().as_secs_f64();
    let amqp = clusters.amqp_url();
    let env = Env::new()
        .set("KLAXON_AMQP_URL", &amqp)
        .set("KLAXON_REDIS_URL", &clusters.redis_url())
        .set("KLAXON_QUEUE_TYPE", "quorum")
        .set("KLAXON_RETRY_SCHEDULE", "1,2,5");
    let sink = HttpSink::start().await.expect("sink");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": THRESHOLD, "thresholdPeriod": 3_600_000,
        "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}}}]}]));

    let mut fleet = Fleet {
        workers: (0..3).map(|_| env.spawn("worker", &[])).collect(),
        senders: (0..2).map(|_| env.spawn("sender", &[])).collect(),
        env: env.clone(),
        dead_consumed: 0,
        dead_done: 0,
    };
    let queue = format!("{}.events", env.namespace);
    let mut published = 0u64;
    let mut reports = Vec::new();
    let mut round = 0u64;
    let total_rounds = ROUNDS * cycles;
    // groups of cycle c are c*50 … c*50+49; each cycle runs its own ROUNDS rounds
    let send_round = |round: u64| round_events(&queue, &project, round % ROUNDS, (round / ROUNDS) * GROUPS);

    for cycle in 0..cycles {
        // two quiet rounds
        for _ in 0..2 {
            let msgs = send_round(round);
            publish_reliably(&amqp, &msgs).await;
            published += msgs.len() as u64;
            round += 1;
        }
        wait_recovered(
            &fleet,
            &clusters,
            &queue,
            published,
            Instant::now(),
            Duration::from_secs(60),
        );

        // (a) the node leading the events queue stops
        let leader = clusters.leader_of(&queue);
        let (consumed0, published0) = (fleet.consumed(), published);
        let sampler = Sampler::start(&fleet);
        let t = Instant::now();
        clusters.rmq(&["stop-node", &leader.to_string()]);
        let mut retries = 0;
        for _ in 0..3 {
            let msgs = send_round(round);
            retries += publish_reliably(&amqp, &msgs).await;
            published += msgs.len() as u64;
            round += 1;
        }
        let recover = wait_recovered(&fleet, &clusters, &queue, published, t, Duration::from_secs(120));
        let not_ready = sampler.finish();
        clusters.rmq(&["start-node", &leader.to_string()]);
        let new_leader = clusters.leader_of(&queue);
        reports.push(FaultReport {
            name: format!("(a) RabbitMQ leader node {leader} stopped (new leader: node {new_leader})"),
            recover_s: recover,
            publish_retries: retries,
            not_ready,
            redeliveries: (fleet.consumed() - consumed0).saturating_sub(published - published0),
        });
        wait_recovered(
            &fleet,
            &clusters,
            &queue,
            published,
            Instant::now(),
            Duration::from_secs(120),
        );

        // (b) a Redis master dies; its replica takes over
        let master = clusters.redis_base;
        let replica = clusters.redis_base + 3;
        let (master, replica) = if clusters.redis_role(master) == "master" {
            (master, replica)
        } else {
            (replica, master)
        };
        let (consumed0, published0) = (fleet.consumed(), published);
        let sampler = Sampler::start(&fleet);
        let t = Instant::now();
        clusters.redis(&["kill-node", &master.to_string()]);
        let mut retries = 0;
        for _ in 0..3 {
            let msgs = send_round(round);
            retries += publish_reliably(&amqp, &msgs).await;
            published += msgs.len() as u64;
            round += 1;
        }
        let promoted = {
            let deadline = Instant::now() + Duration::from_secs(60);
            while clusters.redis_role(replica) != "master" {
                assert!(Instant::now() < deadline, "replica {replica} was not promoted");
                std::thread::sleep(Duration::from_millis(100));
            }
            t.elapsed().as_secs_f64()
        };
        let recover = wait_recovered(&fleet, &clusters, &queue, published, t, Duration::from_secs(120));
        let not_ready = sampler.finish();
        clusters.redis(&["start-node", &master.to_string()]);
        reports.push(FaultReport {
            name: format!(
                "(b) Redis master {master} killed, replica {replica} promoted after {promoted:.1} s"
            ),
            recover_s: recover,
            publish_retries: retries,
            not_ready,
            redeliveries: (fleet.consumed() - consumed0).saturating_sub(published - published0),
        });

        // (c) a worker is killed while a round is being published and consumed, then started again
        let (consumed0, published0) = (fleet.consumed(), published);
        let sampler = Sampler::start(&fleet);
        let mut msgs = send_round(round);
        round += 1;
        // and a burst of events of a project without rules, so that the worker holds unacked deliveries when it dies
        msgs.extend(filler(&queue, 3000, cycle));
        published += msgs.len() as u64;
        let publishing = {
            let amqp = amqp.clone();
            tokio::spawn(async move { publish_reliably(&amqp, &msgs).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        let t = Instant::now();
        let consumed_at_kill = metric(&fleet.workers[0], "klaxon_events_consumed_total");
        let acked_at_kill = metric(&fleet.workers[0], "klaxon_events_acked_total");
        fleet.workers[0].kill();
        fleet.dead_consumed += consumed_at_kill;
        fleet.dead_done += acked_at_kill;
        let in_flight = consumed_at_kill.saturating_sub(acked_at_kill);
        let retries = publishing.await.expect("publish task");
        fleet.workers[0] = fleet.env.spawn("worker", &[]);
        let recover = wait_recovered(&fleet, &clusters, &queue, published, t, Duration::from_secs(120));
        let not_ready = sampler.finish();
        reports.push(FaultReport {
            name: format!(
                "(c) worker 1 killed (-9) mid-round holding {in_flight} unacked event(s), restarted"
            ),
            recover_s: recover,
            publish_retries: retries,
            not_ready,
            redeliveries: (fleet.consumed() - consumed0).saturating_sub(published - published0),
        });

        // the rest of the cycle's rounds
        while round < (cycle + 1) * ROUNDS {
            let msgs = send_round(round);
            publish_reliably(&amqp, &msgs).await;
            published += msgs.len() as u64;
            round += 1;
        }
    }
    assert_eq!(round, total_rounds);
    assert_eq!(
        published,
        groups * THRESHOLD + cycles * 3000,
        "each group got exactly THRESHOLD events (and each cycle 3000 fillers)"
    );

    // Every crossing delivered, exactly once.
    let got = sink
        .wait_for_count(groups as usize, Duration::from_secs(120))
        .await;
    // anything late or duplicated would arrive within the retry schedule: give it that time
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = if sink.count() > got.len() {
        sink.requests()
    } else {
        got
    };
    let mut per_group: HashMap<String, u32> = HashMap::new();
    let mut ids = HashSet::new();
    let mut duplicate_ids = 0;
    for r in &got {
        let body = r.json();
        let group = body["events"][0]["groupHash"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        *per_group.entry(group).or_default() += 1;
        if !ids.insert(body["notificationId"].as_str().unwrap_or_default().to_owned()) {
            duplicate_ids += 1;
        }
    }
    let consumed = fleet.consumed();
    let duplicates = fleet.duplicates();
    println!("chaos: clusters booted in {cluster_boot_s:.0} s; {published} events, {groups} groups, threshold {THRESHOLD}");
    for r in &reports {
        println!(
            "chaos: {}: fleet ready and caught up {:.1} s after the fault; {} process(es) not ready for up to \
             {:.1} s; redeliveries {}; producer publish retries {}",
            r.name,
            r.recover_s,
            r.not_ready.0,
            r.not_ready.1.as_secs_f64(),
            r.redeliveries,
            r.publish_retries
        );
    }
    println!(
        "chaos: events consumed by workers {consumed} for {published} published → {} redeliveries; \
         duplicates suppressed by senders {duplicates}; webhook requests {} for {} groups; total {:.0} s",
        consumed.saturating_sub(published),
        got.len(),
        per_group.len(),
        started.elapsed().as_secs_f64()
    );
    let missing: Vec<u64> = (0..groups)
        .filter(|g| !per_group.contains_key(&format!("chaos-{g:03}")))
        .collect();
    let twice: Vec<(&String, &u32)> = per_group.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        missing.is_empty() && twice.is_empty() && duplicate_ids == 0,
        "missing groups {missing:?}, groups delivered more than once {twice:?}, repeated notificationIds \
         {duplicate_ids}\n{}",
        fleet.logs()
    );
    assert_eq!(got.len() as u64, groups);
    assert!(
        fleet.all_ready(),
        "every process is ready at the end\n{}",
        fleet.logs()
    );
    drop(fleet);
    shard_leader_stops(&clusters).await;
    plugin_missing(&clusters).await;
}

const SHARDS: u16 = 3;
/// Groups of each sharded project: each gets THRESHOLD - 1 events around the fault, then its crossing one.
const SHARD_GROUPS: u64 = 10;

/// The fleet's environment on the test's clusters: quorum queues, `--events-shards 3`.
fn sharded_env(clusters: &Clusters) -> (Env, Topology) {
    let env = Env::new()
        .set("KLAXON_AMQP_URL", &clusters.amqp_url())
        .set("KLAXON_REDIS_URL", &clusters.redis_url())
        .set("KLAXON_QUEUE_TYPE", "quorum")
        .set("KLAXON_RETRY_SCHEDULE", "1,2,5")
        .set("KLAXON_EVENTS_SHARDS", &SHARDS.to_string());
    let topo = Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Quorum,
    )
    .with_shards(SHARDS);
    (env, topo)
}

/// The events of one round: one per group.
fn per_round(projects: &[String]) -> u64 {
    projects.len() as u64 * SHARD_GROUPS
}

/// One event for every group of every project, numbered `round`.
fn shard_round(topo: &Topology, projects: &[String], round: u64) -> Vec<Outgoing> {
    projects
        .iter()
        .flat_map(|p| (0..SHARD_GROUPS).map(move |g| (p, g)))
        .map(|(p, g)| {
            common::shards::event(
                topo,
                p,
                &format!("shard-{g:02}"),
                &format!("shard-{p}-{g}-{round}"),
            )
        })
        .collect()
}

/// Waits until every process is ready and the broker holds nothing of `queues`, ready or unacked.
fn wait_queues_drained(fleet: &Fleet, clusters: &Clusters, queues: &[String], within: Duration) -> f64 {
    let t = Instant::now();
    while !(fleet.all_ready() && clusters.queues_drained(queues)) {
        assert!(
            t.elapsed() < within,
            "not drained within {within:?}: ready={}\n{}",
            fleet.all_ready(),
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    t.elapsed().as_secs_f64()
}

/// (d) The node leading one shard queue stops while three workers consume the three shards.
async fn shard_leader_stops(clusters: &Clusters) {
    let started = Instant::now();
    let (env, topo) = sharded_env(clusters);
    let amqp = clusters.amqp_url();
    let b = Broker::connect(&amqp, Duration::from_secs(10))
        .await
        .expect("connect");
    // per shard: a project with a rule, and a project without any (its events are consumed and acked, never
    // counted: a stream that keeps the workers busy on every shard when the node stops)
    let on = common::shards::projects_per_shard(&b, &topo, 2).await;
    b.close().await;
    let projects: Vec<String> = on.iter().map(|s| s[0].clone()).collect();
    let fillers: Vec<String> = on.iter().map(|s| s[1].clone()).collect();
    let leaders: Vec<usize> = (0..SHARDS)
        .map(|i| clusters.leader_of(&topo.shard_queue(i)))
        .collect();
    // declared by one client on one node, each shard asks for the node with the fewest quorum leaders
    // (x-queue-leader-locator: balanced). Where they land depends on the leaders the earlier phases left on the
    // nodes (all three can go to the one node that led none), so the argument is what is asserted; the
    // placement is reported.
    for i in 0..SHARDS {
        let q = topo.shard_queue(i);
        let args = clusters
            .queue_row(&q, &["arguments"])
            .map(|r| r["arguments"].to_string())
            .unwrap_or_default();
        assert!(
            args.contains("x-queue-leader-locator") && args.contains("balanced"),
            "{q} is declared without x-queue-leader-locator: balanced: {args}"
        );
    }
    eprintln!("chaos (d): shard leaders on nodes {leaders:?}");
    let sink = HttpSink::start().await.expect("sink");
    let rules: Vec<serde_json::Value> = projects
        .iter()
        .map(|p| {
            json!({"_id": p, "notifications": [{
                "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": THRESHOLD, "thresholdPeriod": 3_600_000,
                "channels": {"webhook": {"isEnabled": true, "endpoint": sink.url("/hook"), "minPeriod": 0}}}]})
        })
        .collect();
    env.import(&json!(rules));
    let fleet = Fleet {
        workers: (0..3)
            .map(|_| env.spawn("worker", &["--batch-max", "32", "--prefetch", "64"]))
            .collect(),
        senders: vec![env.spawn("sender", &[])],
        env: env.clone(),
        dead_consumed: 0,
        dead_done: 0,
    };
    let queues = topo.event_queues();
    let mut published = 0u64;
    for round in 0..2 {
        let msgs = shard_round(&topo, &projects, round);
        publish_reliably(&amqp, &msgs).await;
        published += msgs.len() as u64;
    }
    wait_queues_drained(&fleet, clusters, &queues, Duration::from_secs(60));

    // The stop, with the fillers' stream in flight on every shard and two more rounds published through it.
    let leader = leaders[0];
    let filler: Vec<Outgoing> = fillers
        .iter()
        .flat_map(|p| (0..3000).map(move |i| (p, i)))
        .map(|(p, i)| common::shards::event(&topo, p, "filler", &format!("filler-{p}-{i}")))
        .collect();
    let fillers_sent = filler.len();
    published += filler.len() as u64;
    let publishing = {
        let amqp = amqp.clone();
        tokio::spawn(async move { publish_reliably(&amqp, &filler).await })
    };
    // the stop comes while the fillers are being published and consumed (bounded by the publish itself)
    while fleet.consumed() < 500 + 2 * per_round(&projects) && !publishing.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_flight: u64 = fleet
        .workers
        .iter()
        .map(|w| {
            metric(w, "klaxon_events_consumed_total").saturating_sub(metric(w, "klaxon_events_acked_total"))
        })
        .sum();
    let sampler = Sampler::start(&fleet);
    let t = Instant::now();
    clusters.rmq(&["stop-node", &leader.to_string()]);
    let stop_s = t.elapsed().as_secs_f64();
    let mut retries = publishing.await.expect("filler publish task");
    for round in 2..THRESHOLD - 1 {
        let msgs = shard_round(&topo, &projects, round);
        retries += publish_reliably(&amqp, &msgs).await;
        published += msgs.len() as u64;
    }
    wait_queues_drained(&fleet, clusters, &queues, Duration::from_secs(120));
    let recover_s = t.elapsed().as_secs_f64();
    let not_ready = sampler.finish();
    let new_leader = clusters.leader_of(&topo.shard_queue(0));
    // THRESHOLD - 1 events per group so far: a firing now would be an event counted twice
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        sink.count(),
        0,
        "a group crossed early (an event counted twice): {:?}\n{}",
        sink.requests().iter().map(|r| r.json()).collect::<Vec<_>>(),
        fleet.logs()
    );
    clusters.rmq(&["start-node", &leader.to_string()]);

    // The last event of every group: each crosses exactly now (an event lost would keep it under).
    let msgs = shard_round(&topo, &projects, THRESHOLD - 1);
    publish_reliably(&amqp, &msgs).await;
    published += msgs.len() as u64;
    let want = projects.len() * SHARD_GROUPS as usize;
    sink.wait_for_count(want, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = sink.requests();
    let mut per: HashMap<(String, String), u32> = HashMap::new();
    let mut ids = HashSet::new();
    for r in &got {
        let body = r.json();
        let key = (
            body["projectId"].as_str().unwrap_or_default().to_owned(),
            body["events"][0]["groupHash"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        *per.entry(key).or_default() += 1;
        ids.insert(body["notificationId"].as_str().unwrap_or_default().to_owned());
    }
    wait_queues_drained(&fleet, clusters, &queues, Duration::from_secs(60));
    let redeliveries = fleet.consumed().saturating_sub(published);
    println!(
        "chaos: (d) 3 shards × 3 workers, shard leaders on nodes {leaders:?}: node {leader} (leading shard 0) \
         stopped in {stop_s:.1} s while {fillers_sent} filler events were being published and consumed ({in_flight} \
         consumed, not yet acked); fleet caught up {recover_s:.1} s after the \
         stop; {} process(es) not ready for up to {:.1} s; new leader of shard 0: node {new_leader}; \
         redeliveries {redeliveries}; producer publish retries {retries}; {published} events, {} crossings, \
         webhook requests {}; {:.0} s",
        not_ready.0,
        not_ready.1.as_secs_f64(),
        want,
        got.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        (got.len(), per.len(), ids.len()),
        (want, want, want),
        "every group of every shard crossed exactly once: {per:?}\n{}",
        fleet.logs()
    );
    assert!(per.values().all(|n| *n == 1), "{per:?}");
    drop(fleet);
}

/// (e) No x-consistent-hash exchange type on the broker: node 1's plugin disabled (the processes talk to node 1
/// alone; the exchange type is registered per node), then enabled again.
async fn plugin_missing(clusters: &Clusters) {
    let started = Instant::now();
    clusters.plugins(1, &["disable", CONSISTENT_HASH_PLUGIN]);
    let (env, _) = sharded_env(clusters);
    let node1 = clusters
        .amqp_url()
        .split(',')
        .next()
        .unwrap_or_default()
        .to_owned();
    let env = env.set("KLAXON_AMQP_URL", &node1);
    let (code, out, err) = env.run(&["doctor", "-o", "table"]);
    let line = out
        .lines()
        .find(|l| l.contains("shards plugin"))
        .unwrap_or_default();
    assert!(
        code == 1
            && line.starts_with("FAIL")
            && line.contains(&format!("rabbitmq-plugins enable {CONSISTENT_HASH_PLUGIN}")),
        "doctor without the plugin: exit {code}\n{out}\n{err}"
    );
    let (code, out, err) = env.run(&[
        "publish",
        "--project",
        &object_id(),
        "--title",
        "t",
        "--group",
        "g",
    ]);
    assert!(
        code != 0 && err.contains(CONSISTENT_HASH_PLUGIN),
        "publish without the plugin: exit {code}\n{out}\n{err}"
    );
    // A worker: never ready, the log saying why, retrying.
    let worker = env.start_at("worker", &format!("127.0.0.1:{}", common::free_port()), &[]);
    let said = Instant::now();
    while !worker
        .logs()
        .contains(&format!("enable {CONSISTENT_HASH_PLUGIN}"))
    {
        assert!(
            said.elapsed() < Duration::from_secs(30),
            "the worker does not say why it cannot start:\n{}",
            worker.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_ne!(
        worker.get("/readyz").map(|r| r.0),
        Some(200),
        "ready without its shards:\n{}",
        worker.logs()
    );
    let failures = worker.logs().matches("session ended; reconnecting").count();
    // The operator enables the plugin: the same worker declares its shards and consumes, by itself.
    clusters.plugins(1, &["enable", CONSISTENT_HASH_PLUGIN]);
    let enabled = Instant::now();
    worker.wait_ready(Duration::from_secs(60));
    println!(
        "chaos: (e) plugin disabled on node 1: doctor FAILs ({line:?}), publish fails, the worker logged \
         {failures} failed session(s) saying why and was not ready; ready {:.1} s after the plugin was enabled \
         again; {:.0} s",
        enabled.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(worker);
}
