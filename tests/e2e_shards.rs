//! Sharded input (`--events-shards 3`) end to end, through the real binary: Klaxon's producers (`klaxon publish`,
//! `POST /api/v1/ingest`) route through the x-consistent-hash exchange, each project to one shard in publish order;
//! `klaxon doctor` reads the shards; three workers consuming three shards count every event exactly once through a
//! worker's `kill -9` (a duplicate would cross a threshold early, a loss would keep it from crossing).
//! Needs the broker's rabbitmq_consistent_hash_exchange plugin (`scripts/services` enables it).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use common::{object_id, Env, Klaxon};
use klaxon_broker::{Broker, QueueType, Topology};
use klaxon_testkit::HttpSink;
use serde_json::json;

const T: Duration = Duration::from_secs(10);
const SHARDS: u16 = 3;

fn sharded(env: &Env) -> Env {
    env.clone().set("KLAXON_EVENTS_SHARDS", &SHARDS.to_string())
}

fn topology(env: &Env) -> Topology {
    Topology::new(
        &env.namespace,
        &format!("{}.events", env.namespace),
        QueueType::Classic,
    )
    .with_shards(SHARDS)
}

async fn broker() -> Broker {
    Broker::connect(&klaxon_testkit::amqp_url(), T)
        .await
        .expect("connect")
}

/// Deletes the namespace's queues, the shard queues and the shard exchange.
async fn cleanup(env: &Env) {
    let b = broker().await;
    let _ = b.delete_topology(&topology(env)).await;
    // a doctor run with a larger N finds nothing more to delete, but be sure
    for i in SHARDS..SHARDS + 2 {
        let _ = b.delete_queue(&topology(env).shard_queue(i)).await;
    }
    b.close().await;
}

/// `POST path` with a JSON body on `addr`: the status code and body.
async fn post(addr: &str, path: &str, body: &serde_json::Value) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(body)
        .timeout(T)
        .send()
        .await
        .expect("POST");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// Every message of `queue`, read one at a time and acked: (projectId, message_id) in queue order.
async fn read_all(b: &Broker, queue: &str) -> Vec<(String, String)> {
    let reader = b.reader().await.expect("reader");
    let mut out = Vec::new();
    // bounded: the test publishes far fewer
    for _ in 0..10_000 {
        let Some(d) = reader.get(queue).await.expect("basic.get") else {
            break;
        };
        reader.ack(d.delivery_tag).await.expect("ack");
        let body: serde_json::Value = serde_json::from_slice(&d.data).expect("json body");
        let id = d.properties.message_id().map(str::to_owned).unwrap_or_default();
        out.push((body["projectId"].as_str().unwrap_or_default().to_owned(), id));
    }
    reader.close().await;
    out
}

/// The sequence number a producer gave a message id (`publish-<run>-<i>`, `api-<batch>-<i>`).
fn seq(id: &str) -> u64 {
    id.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_ingest_route_each_project_to_one_shard_in_order_and_doctor_reads_the_shards() {
    let env = sharded(&Env::new());
    let projects: Vec<String> = (0..12).map(|_| object_id()).collect();
    for p in &projects {
        let out = env.publish(p, "Boom", "g").count(20).ok();
        assert!(
            out.contains(&format!("to exchange {}.events.shards (3 shards)", env.namespace)),
            "{out}"
        );
    }
    // the API's ingest (a sender serves the API and consumes no events), both of its names
    let api = env.spawn("sender", &[]);
    let events = |p: &str, n: usize| -> serde_json::Value {
        (0..n)
            .map(|i| json!({"projectId": p, "event": {"title": format!("api {i}"), "groupHash": "g"}}))
            .collect()
    };
    let (status, body) = post(&api.addr, "/api/v1/ingest", &events(&projects[0], 5)).await;
    assert_eq!((status, body.as_str()), (202, r#"{"accepted":5}"#));
    let (status, _) = post(&api.addr, "/api/v1/events", &events(&projects[1], 5)).await;
    assert_eq!(status, 202);

    // doctor, before anything consumes: the plugin, the exchange, each shard queue without consumers
    let (code, out, err) = env.run(&["doctor", "-o", "table"]);
    assert!(code == 0 || code == 1, "{out}\n{err}");
    assert!(
        out.contains("shards plugin") && out.contains("rabbitmq_consistent_hash_exchange enabled"),
        "{out}"
    );
    assert!(out.contains(&format!("{}.events.shards", env.namespace)), "{out}");
    for i in 0..SHARDS {
        let line = out
            .lines()
            .find(|l| l.contains(&format!("queue {}.events.shard.{i} ", env.namespace)))
            .unwrap_or_else(|| panic!("no line for shard {i}:\n{out}"));
        assert!(line.starts_with("warn") && line.contains("0 consumers"), "{line}");
    }
    // a smaller N than the shard queues that exist: said
    let (_, out, _) = env
        .clone()
        .set("KLAXON_EVENTS_SHARDS", "2")
        .run(&["doctor", "-o", "table"]);
    assert!(
        out.contains("beyond --events-shards 2")
            && out.contains(&format!("{}.events.shard.2", env.namespace)),
        "{out}"
    );
    drop(api);

    let b = broker().await;
    let topo = topology(&env);
    let depth = b
        .queue_depth(topo.events_queue())
        .await
        .expect("depth")
        .expect("declared");
    assert_eq!(
        depth.messages, 0,
        "nothing goes to the plain events queue when sharded"
    );
    let mut shard_of: HashMap<String, u16> = HashMap::new();
    let mut total = 0;
    let mut used = 0;
    for i in 0..SHARDS {
        let msgs = read_all(&b, &topo.shard_queue(i)).await;
        total += msgs.len();
        used += usize::from(!msgs.is_empty());
        let mut last: BTreeMap<(String, &str), u64> = BTreeMap::new();
        for (project, id) in &msgs {
            if let Some(other) = shard_of.insert(project.clone(), i) {
                assert_eq!(other, i, "project {project} in shards {other} and {i}");
            }
            // in publish order within each producer's run
            let producer = if id.starts_with("api-") { "api" } else { "publish" };
            let n = seq(id);
            let prev = last.insert((project.clone(), producer), n);
            assert!(
                prev.is_none_or(|p| p < n),
                "{project}: {id} after #{prev:?} in shard {i}"
            );
        }
    }
    assert_eq!(total, 12 * 20 + 10, "every event in exactly one shard");
    assert_eq!(shard_of.len(), 12);
    assert!(used >= 2, "12 projects hashed onto {used} of 3 shards");
    b.close().await;
    cleanup(&env).await;
}

/// (projectId, ruleId) of every webhook delivery so far.
fn firings(hook: &HttpSink) -> Vec<(String, String)> {
    hook.requests()
        .iter()
        .map(|r| {
            let v = r.json();
            (
                v["projectId"].as_str().unwrap_or_default().to_owned(),
                v["ruleId"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits until the events queue and every shard are empty and no live worker holds an unacked event, twice in a
/// row a second apart.
async fn wait_drained(b: &Broker, topo: &Topology, fleet: &[Klaxon]) {
    let mut calm = 0;
    for _ in 0..120 {
        let mut ready = 0;
        for q in topo.event_queues() {
            ready += b.queue_depth(&q).await.ok().flatten().map_or(1, |d| d.messages);
        }
        let in_flight: f64 = fleet
            .iter()
            .map(|k| k.metric("klaxon_events_consumed_total") - k.metric("klaxon_events_acked_total"))
            .sum();
        calm = if ready == 0 && in_flight == 0.0 {
            calm + 1
        } else {
            0
        };
        if calm >= 2 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("not drained in 120 s; log:\n{}", common::fleet_logs(fleet));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_three_workers_count_every_event_exactly_once_through_a_kill_9() {
    const THRESHOLD: u64 = 150;
    let env = sharded(&Env::new());
    let hook = HttpSink::start().await.expect("sink");
    let projects: Vec<String> = (0..6).map(|_| object_id()).collect();
    let channels = json!({"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}});
    let rules: Vec<serde_json::Value> = projects
        .iter()
        .map(|p| {
            json!({"_id": p, "notifications": [
                {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": THRESHOLD,
                 "thresholdPeriod": 3_600_000, "window": "fixed", "channels": channels},
                {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": THRESHOLD,
                 "thresholdPeriod": 3_600_000, "window": "sliding", "channels": channels},
                {"isEnabled": true, "whatToReceive": "ONLY_NEW", "channels": channels},
            ]})
        })
        .collect();
    env.import(&json!(rules));
    let run = |env: &Env| env.spawn("run", &["--batch-max", "16", "--prefetch", "32"]);
    let mut fleet: Vec<Klaxon> = (0..3).map(|_| run(&env)).collect();

    // One short of every threshold, the first event of each project new; a worker killed mid-stream.
    let publisher = {
        let env = env.clone();
        let projects = projects.clone();
        std::thread::spawn(move || {
            for p in &projects {
                env.publish(p, "Crash", "g").new_first().count(THRESHOLD - 1).ok();
            }
        })
    };
    fleet[0].wait_metric("klaxon_events_consumed_total", 40.0, Duration::from_secs(60));
    fleet[0].kill();
    fleet[0] = run(&env);
    publisher.join().expect("publisher thread");
    let b = broker().await;
    let topo = topology(&env);
    wait_drained(&b, &topo, &fleet).await;

    // Only the ONLY_NEW firings: a duplicate count would have crossed a SEEN_MORE threshold.
    hook.wait_for_count(projects.len(), Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = firings(&hook);
    assert_eq!(
        got.len(),
        projects.len(),
        "one ONLY_NEW firing per project and no SEEN_MORE yet (a duplicate count would cross {THRESHOLD}): \
         {got:?}\n{}",
        common::fleet_logs(&fleet)
    );
    let new_projects: HashSet<String> = got.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(new_projects.len(), projects.len(), "{got:?}");

    // The last event of each project: both SEEN_MORE rules cross exactly now (a lost event would keep them under).
    for p in &projects {
        env.publish(p, "Crash", "g").ok();
    }
    let want = projects.len() * 3;
    hook.wait_for_count(want, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = firings(&hook);
    let mut per: HashMap<(String, String), usize> = HashMap::new();
    for f in &got {
        *per.entry(f.clone()).or_default() += 1;
    }
    assert_eq!(
        got.len(),
        want,
        "each project's 3 rules fired exactly once: {per:?}\n{}",
        common::fleet_logs(&fleet)
    );
    assert!(per.values().all(|n| *n == 1), "a rule fired twice: {per:?}");
    for p in &projects {
        assert_eq!(per.keys().filter(|(q, _)| q == p).count(), 3, "{p}: {per:?}");
    }
    // every worker consumed every shard: each shard has the fleet's consumers
    for i in 0..SHARDS {
        let d = b
            .queue_depth(&topo.shard_queue(i))
            .await
            .expect("depth")
            .expect("shard");
        assert_eq!(d.consumers, 3, "shard {i}");
    }
    // per-shard gauges: a worker's first beat counts the shard's consumers, its own among them
    for i in 0..SHARDS {
        let series = format!("klaxon_events_shard_consumers{{shard=\"{i}\"}}");
        fleet[0].wait_metric(&series, 1.0, Duration::from_secs(15));
    }
    for mut k in fleet {
        assert_eq!(k.terminate(T), Some(0), "{}", k.logs());
    }
    b.close().await;
    cleanup(&env).await;
}
