//! Sharded input (`--events-shards 3`) end to end, through the real binary: Klaxon's producers (`klaxon publish`,
//! `POST /api/v1/ingest`) route through the x-consistent-hash exchange, each project to one shard in publish order;
//! `klaxon doctor` reads the shards; three workers consuming three shards count every event exactly once through a
//! worker's `kill -9` (a duplicate would cross a threshold early, a loss would keep it from crossing); SPIKE and
//! NO_EVENTS fire once per crossing with each project's events on its own shard and every worker on every shard;
//! a flood of one project on one shard does not hold back another shard's project's first alert.
//! Needs the broker's rabbitmq_consistent_hash_exchange plugin (`scripts/services` enables it). A shard leader's
//! loss on a 3-node cluster and a broker without the plugin are in tests/e2e_chaos.rs (its own cluster).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use common::shards::{event, publish, read_all};
use common::{object_id, Env, Klaxon};
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
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

/// After the expected notifications, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

/// `per_shard` fresh project ids on each shard (index = shard number), the namespace's topology declared.
async fn projects_per_shard(env: &Env, per_shard: usize) -> Vec<Vec<String>> {
    let b = broker().await;
    let on = common::shards::projects_per_shard(&b, &topology(env), per_shard).await;
    b.close().await;
    on
}

/// Waits (bounded) until the fleet has acked `n` events in all.
async fn wait_fleet_acked(fleet: &[Klaxon], n: usize) {
    for _ in 0..300 {
        if common::fleet_metric(fleet, "klaxon_events_acked_total") >= n as f64 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the fleet did not ack {n} events in 30 s; logs:\n{}",
        common::fleet_logs(fleet)
    );
}

/// (projectId, kind, alertId) of every webhook delivery so far.
fn deliveries(hook: &HttpSink) -> Vec<(String, String, String)> {
    hook.requests()
        .iter()
        .map(|r| {
            let v = r.json();
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("projectId"), s("kind"), s("alertId"))
        })
        .collect()
}

/// One project on each shard, a SPIKE rule (3 s buckets) and a NO_EVENTS rule (10 s) each, three workers splitting
/// every shard's stream in small batches: three steady buckets, a burst (one spike per project), silence (one
/// NO_EVENTS firing per project), one more event (one resolve per project). SPIKE baselines and the NO_EVENTS
/// notes live in Redis, so which worker or shard saw an event does not matter: each fires exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_three_workers_fire_every_spike_and_every_silence_exactly_once() {
    const BUCKET: u64 = 3000;
    let started = Instant::now();
    let env = sharded(&Env::new());
    let hook = HttpSink::start().await.expect("sink");
    // one project on each shard: each shard's events are split over the three workers (small batches)
    let projects: Vec<String> = projects_per_shard(&env, 1).await.concat();
    let channels = json!({"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}});
    let rules: Vec<serde_json::Value> = projects
        .iter()
        .map(|p| {
            json!({"_id": p, "notifications": [
                // `resolveAfter: 0`: the spike's alert stays open, so only firings (and the silence's resolve)
                // reach the webhook
                {"isEnabled": true, "whatToReceive": "SPIKE", "thresholdPeriod": BUCKET, "baselineWindows": 3,
                 "factor": 5, "threshold": 10, "resolveAfter": 0, "channels": channels},
                {"isEnabled": true, "whatToReceive": "NO_EVENTS", "quietPeriod": 10_000, "channels": channels},
            ]})
        })
        .collect();
    let run = |env: &Env| env.spawn("run", &["--batch-max", "8", "--prefetch", "16"]);
    let mut fleet: Vec<Klaxon> = (0..3).map(|_| run(&env)).collect();
    // Stored now, with the fleet up: each NO_EVENTS clock starts here and the first events follow within a bucket.
    env.import(&json!(rules));
    let b = broker().await;
    let topo = topology(&env);
    let mut sent = Vec::new();
    let mut burst = |per_project: usize, tag: &str| -> Vec<Outgoing> {
        let msgs: Vec<Outgoing> = projects
            .iter()
            .flat_map(|p| (0..per_project).map(move |i| (p, i)))
            .map(|(p, i)| event(&topo, p, "g", &format!("{tag}-{p}-{i}")))
            .collect();
        sent.extend(msgs.iter().map(|m| m.message_id.clone()));
        msgs
    };

    // Three buckets at a steady 3 events per project: a steady rate never spikes.
    for bucket in 0..3 {
        common::next_bucket(BUCKET, 200).await;
        publish(&b, &burst(3, &format!("steady{bucket}"))).await;
    }
    let steady = 3 * 3 * projects.len();
    wait_fleet_acked(&fleet, steady).await;
    assert_eq!(hook.count(), 0, "{:?}", deliveries(&hook));

    // The burst: 30 per project, each needs max(10, 5 × 3) = 15 and fires once; then every project falls silent.
    common::next_bucket(BUCKET, 200).await;
    publish(&b, &burst(30, "burst")).await;
    wait_fleet_acked(&fleet, steady + 30 * projects.len()).await;
    // spikes at once, the silences 10 s after each project's last event
    let want = 2 * projects.len();
    hook.wait_for_count(want, Duration::from_secs(60)).await;
    tokio::time::sleep(QUIET).await;
    let got = deliveries(&hook);
    assert_eq!(
        got.len(),
        want,
        "one spike and one silence per project: {got:?}\n{}",
        common::fleet_logs(&fleet)
    );

    // The next event of each project ends its silence: one resolved message for each silence's alert.
    publish(&b, &burst(1, "back")).await;
    let want = 3 * projects.len();
    hook.wait_for_count(want, Duration::from_secs(30)).await;
    tokio::time::sleep(QUIET).await;
    let got = deliveries(&hook);
    assert_eq!(
        got.len(),
        want,
        "and one resolve per project: {got:?}\n{}",
        common::fleet_logs(&fleet)
    );
    for p in &projects {
        let of = |kind: &str| -> Vec<&String> {
            got.iter()
                .filter(|(q, k, _)| q == p && k == kind)
                .map(|(_, _, a)| a)
                .collect()
        };
        let (spike, silence, resolved) = (of("spike"), of("no_events"), of("resolved"));
        assert_eq!(
            (spike.len(), silence.len(), resolved.len()),
            (1, 1, 1),
            "{p}: {got:?}"
        );
        assert_eq!(silence, resolved, "{p}: the resolve is the silence's alert's");
    }
    // decided once by the fleet, not merely delivered once
    let spikes = common::fleet_metric(&fleet, r#"klaxon_thresholds_crossed_total{window="spike"}"#);
    let silences = common::fleet_metric(&fleet, r#"klaxon_no_events_timers_total{outcome="fired"}"#);
    assert_eq!((spikes, silences), (3.0, 3.0));
    // every event counted once across the fleet: consumed = acked = published (no redelivery here)
    let acked = common::fleet_metric(&fleet, "klaxon_events_acked_total");
    assert_eq!(acked as usize, sent.len());
    let busy = fleet
        .iter()
        .filter(|k| k.metric("klaxon_events_acked_total") > 0.0)
        .count();
    println!(
        "spike/no_events across 3 shards: {} events, {busy} of 3 workers took events, {:.0} s",
        sent.len(),
        started.elapsed().as_secs_f64()
    );
    for k in &mut fleet {
        assert_eq!(k.terminate(T), Some(0), "{}", k.logs());
    }
    b.close().await;
    cleanup(&env).await;
}

/// A backlog of 60k events of one project on shard 0, three workers on it, then one crossing event of a project
/// on shard 1: its firing reaches the webhook within 2 s of its publish (the test prints the time), while most of
/// the flood is still queued. Each worker consumes each shard on a channel of its own with its own prefetch and
/// its own consume loop, so a shard's backlog never stands in front of another shard's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_shard_does_not_delay_another_shards_first_alert() {
    const FLOOD: usize = 60_000;
    const LIMIT: Duration = Duration::from_secs(2);
    let started = Instant::now();
    let env = sharded(&Env::new());
    let hook = HttpSink::start().await.expect("sink");
    let on = projects_per_shard(&env, 1).await;
    let (flooding, other) = (on[0][0].clone(), on[1][0].clone());
    let channels = json!({"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}});
    // the flood is counted (real work per event) and never fires; the other project fires on its first event
    env.import(&json!([
        {"_id": flooding, "notifications": [{"isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 1_000_000, "thresholdPeriod": 3_600_000, "channels": channels}]},
        {"_id": other, "notifications": [{"isEnabled": true, "whatToReceive": "SEEN_MORE",
            "threshold": 1, "thresholdPeriod": 3_600_000, "channels": channels}]},
    ]));
    let b = broker().await;
    let topo = topology(&env);
    let depth = |q: String| {
        let b = &b;
        async move { b.queue_depth(&q).await.expect("depth").map_or(0, |d| d.messages) }
    };
    // The flood, queued before any worker runs (as fast as the test's publisher goes, confirmed in chunks).
    let flood: Vec<Outgoing> = (0..FLOOD)
        .map(|i| event(&topo, &flooding, &format!("g{}", i % 50), &format!("flood-{i}")))
        .collect();
    let t_flood = Instant::now();
    publish(&b, &flood).await;
    let flood_publish = t_flood.elapsed();
    assert_eq!(depth(topo.shard_queue(0)).await as usize, FLOOD);
    // Three workers (default prefetch and batches) start together on the backlog; once all three consume every
    // shard, the other project's one event is published behind what is left of the flood.
    let mut fleet: Vec<Klaxon> = (0..3)
        .map(|_| env.start_at("run", &format!("127.0.0.1:{}", common::free_port()), &[]))
        .collect();
    for k in &fleet {
        k.wait_ready(Duration::from_secs(60));
    }
    let backlog_before = depth(topo.shard_queue(0)).await;

    // The other shard's project's one crossing event, timed from its publish to the webhook.
    let t0 = Instant::now();
    publish(&b, &[event(&topo, &other, "first", "other-0")]).await;
    let mut latency = None;
    while t0.elapsed() < Duration::from_secs(60) {
        if hook.count() > 0 {
            latency = Some(t0.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let backlog_after = depth(topo.shard_queue(0)).await;
    let latency =
        latency.unwrap_or_else(|| panic!("no firing in 60 s; logs:\n{}", common::fleet_logs(&fleet)));
    println!(
        "flood on shard 0: {FLOOD} events queued in {} ms; with 3 workers on it, the other shard's first \
         alert reached the webhook {} ms after its publish, with {backlog_before} → {backlog_after} of the flood \
         still ready in shard 0 ({:.0} s in all)",
        flood_publish.as_millis(),
        latency.as_millis(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        backlog_after > 0,
        "the flood was over before the measure ended: the test measured nothing (raise FLOOD)"
    );

    let got = deliveries(&hook);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, other);
    assert!(
        latency <= LIMIT,
        "the other shard's first alert took {latency:?} (> {LIMIT:?}) behind a flood of {FLOOD}; logs:\n{}",
        common::fleet_logs(&fleet)
    );
    for k in &mut fleet {
        k.kill();
    }
    b.close().await;
    cleanup(&env).await;
}
