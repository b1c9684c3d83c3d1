//! `klaxon-bench pipeline`: worker events/s next to the raw broker rate.
//!
//! `klaxon-bench pipeline` publishes the same events twice against the same RabbitMQ and queue settings: once to
//! a plain queue drained by a do-nothing consumer (publish + consume + ack: the raw broker rate), once to the
//! events queue of a real `klaxon worker` child process (parse, rules, one Redis round trip per batch, publish of
//! notification tasks with confirms, multiple-ack). It prints both rates, their ratio, the worker's own CPU time
//! per event (from /proc/<pid>/stat) and Redis round trips per event.
//!
//! `--shards 1,3 --workers 1,3` measures every (shards, workers) pair side by side: the workers run with
//! `--events-shards`, and the events are published as Klaxon's producers publish them (to the shard exchange keyed
//! by project when sharded). The raw broker rate stays one queue's, the ceiling sharding is meant to pass.
//!
//! `--batches-in-flight 1,2` (the default) runs the workers with each `--batches-in-flight`, side by side: one batch
//! at a time next to batches in flight, same events, same raw rate.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use serde::Serialize;

use crate::{latency, steady, GlobalOpts};

#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// Worker events/s next to the raw broker rate for the same messages and queue settings.
    Pipeline(PipelineArgs),
    /// Crossing → delivered latency (p50/p99/max) under a steady load, and the peak RSS of the process.
    Latency(latency::LatencyArgs),
    /// CPU per event, context switches per event, threads and crossing → delivered latency of one `klaxon run`
    /// at paced rates, next to idle and a drained backlog.
    Steady(steady::SteadyArgs),
}

#[derive(Debug, Args)]
pub struct PipelineArgs {
    /// Events per run.
    #[arg(long, default_value_t = 20_000)]
    pub events: u64,
    /// Distinct groups, spread round-robin over the projects.
    #[arg(long, default_value_t = 200)]
    pub groups: u64,
    /// Projects (each with 3 rules: SEEN_MORE fixed, SEEN_MORE sliding, ONLY_NEW).
    #[arg(long, default_value_t = 10)]
    pub projects: u64,
    /// Queue types to compare: classic, quorum or both.
    #[arg(long, default_value = "both", value_parser = ["classic", "quorum", "both"])]
    pub queue_type: String,
    /// Worker prefetch.
    #[arg(long, default_value_t = 512)]
    pub prefetch: u16,
    /// Worker batch size.
    #[arg(long, default_value_t = 256)]
    pub batch_max: usize,
    /// Batches each worker processes at once (the workers' `--batches-in-flight`); a comma-separated list measures
    /// each (`1,2`: one batch at a time next to two in flight), × every `--shards` and `--workers`.
    #[arg(long, default_value = "1,2", value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=16))]
    pub batches_in_flight: Vec<u16>,
    /// Worker processes sharing the events queue; a comma-separated list measures each count (`1,3`).
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: Vec<u16>,
    /// Shard queues the events are spread over (the workers' `--events-shards`; the events are published to the
    /// shard exchange keyed by project); a comma-separated list measures each count (`1,3`), × every `--workers`.
    #[arg(long, default_value = "1", value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=64))]
    pub shards: Vec<u16>,
    /// Declare the shard queues with `x-single-active-consumer` before the workers start (each shard then has one
    /// active worker, the others stand by): to compare with Klaxon's every-worker-consumes-every-shard.
    #[arg(long)]
    pub single_active_consumer: bool,
    /// The raw consumer waits this long before each multiple-ack, as a worker does while it counts a batch
    /// (its ack latency): the raw broker rate for a consumer that cannot ack at once. 0 = ack at once.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub raw_ack_delay_ms: u64,
    /// Also report the CPU of this process over the workers' window (repeatable), e.g. `rabbitmq=$(pgrep beam.smp)`.
    #[arg(long, value_parser = parse_watch_pid)]
    pub watch_pid: Vec<WatchPid>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A process whose CPU the bench reports next to the workers' (`--watch-pid NAME=PID`).
#[derive(Debug, Clone)]
pub struct WatchPid {
    name: String,
    pid: u32,
}

fn parse_watch_pid(s: &str) -> Result<WatchPid, String> {
    let (name, pid) = s.split_once('=').ok_or("expected NAME=PID, e.g. rabbitmq=1234")?;
    let pid = pid.trim().parse().map_err(|_| format!("`{pid}` is not a pid"))?;
    Ok(WatchPid {
        name: name.trim().to_owned(),
        pid,
    })
}

#[derive(Debug, Clone, Serialize)]
struct Watched {
    name: String,
    pid: u32,
    /// In % of one core, over the measured window (the raw rate's or the workers').
    cpu_pct: f64,
    cpu_us_per_event: f64,
}

#[derive(Debug, Serialize)]
struct Row {
    queue_type: String,
    events: u64,
    groups: u64,
    projects: u64,
    rules_per_project: u64,
    prefetch: u16,
    batch_max: usize,
    batches_in_flight: u16,
    worker_seconds: f64,
    worker_cpu_seconds: f64,
    workers: u16,
    shards: u16,
    single_active_consumer: bool,
    /// All workers together, in % of one core.
    worker_cpu_pct: f64,
    /// Other processes (`--watch-pid`) over the same window as the workers.
    watched: Vec<Watched>,
    raw_broker_msgs_per_s: f64,
    /// The raw rate's measurement: the machine's and the watched processes' CPU while it ran.
    raw: Raw,
    /// The whole machine's busy CPU over the workers' window, in % of one core.
    machine_cpu_pct: f64,
    /// Cores of this machine (the ceiling of the two above is 100 × this).
    cores: usize,
    worker_events_per_s: f64,
    ratio: f64,
    worker_cpu_us_per_event: f64,
    redis_round_trips_per_event: f64,
    batches: u64,
    notification_tasks: u64,
}

pub async fn run(what: BenchWhat, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    match what {
        BenchWhat::Pipeline(p) => pipeline(p, global).await,
        BenchWhat::Latency(l) => latency::latency(l, global).await,
        BenchWhat::Steady(s) => steady::steady(s, global).await,
    }
}

const CHUNK: usize = 500;

/// The events: (project, body).
fn bodies(args: &PipelineArgs, projects: &[String]) -> Vec<(String, Vec<u8>)> {
    (0..args.events)
        .map(|i| {
            let g = i % args.groups;
            let project = &projects[(g % args.projects) as usize];
            let body = serde_json::to_vec(&serde_json::json!({
                "projectId": project,
                "event": {
                    "title": format!("TypeError: cannot read property of undefined (group {g})"),
                    "groupHash": format!("group-{g:04}"),
                    "isNew": i < args.groups,
                    "repetitionId": null,
                }
            }))
            .unwrap_or_default();
            (project.clone(), body)
        })
        .collect()
}

/// Publishes every event as producers do ([`Topology::event`]: to the events queue, or to the shard exchange
/// keyed by project) with confirms, `CHUNK` at a time.
async fn publish(
    broker: &Broker,
    topology: &Topology,
    bodies: &[(String, Vec<u8>)],
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let publisher = broker.publisher().await?;
    for (n, chunk) in bodies.chunks(CHUNK).enumerate() {
        let msgs: Vec<Outgoing> = chunk
            .iter()
            .enumerate()
            .map(|(i, (project, b))| {
                let mut m = topology.event(project, b.clone());
                m.message_id = Some(format!("bench-{}", n * CHUNK + i));
                m
            })
            .collect();
        publisher.publish_all(&msgs).await?;
        progress.inc(chunk.len() as u64);
    }
    publisher.close().await;
    Ok(())
}

pub(crate) fn proc_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("read /proc/<pid>/stat")?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let stime: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(utime + stime)
}

/// Clock ticks per second for /proc times (the kernel's USER_HZ, 100 on Linux).
pub(crate) const TICKS_PER_S: f64 = 100.0;

/// The whole machine's busy CPU time so far, in clock ticks summed over its cores (`/proc/stat`'s `cpu` line:
/// every field but idle and iowait).
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    f.iter().sum::<u64>() - f.get(3).copied().unwrap_or(0) - f.get(4).copied().unwrap_or(0)
}

/// Busy CPU of the whole machine between `before` ([`machine_busy_ticks`]) and now, over `seconds`, in % of one
/// core.
fn machine_pct(before: u64, seconds: f64) -> f64 {
    machine_busy_ticks().saturating_sub(before) as f64 / TICKS_PER_S / seconds * 100.0
}

pub(crate) fn metric(text: &str, name: &str) -> u64 {
    klaxon_engine::metrics::series_value(text, name).unwrap_or(0.0) as u64
}

pub(crate) fn metric_sum(text: &str, prefix: &str) -> u64 {
    klaxon_engine::metrics::series_sum(text, prefix) as u64
}

pub(crate) async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut buf))
        .await
        .ok()?
        .ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        status,
        buf.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default(),
    ))
}

fn bar(len: u64, what: &str, hidden: bool) -> indicatif::ProgressBar {
    let pb = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(len)
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg:28} [{bar:30}] {pos}/{len} {per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// The raw broker rate and what the machine and the watched processes spent on it.
#[derive(Debug, Clone, Serialize)]
struct Raw {
    msgs_per_s: f64,
    /// The whole machine's busy CPU while the raw rate was measured, in % of one core (200 = two cores busy).
    machine_cpu_pct: f64,
    /// The `--watch-pid` processes over the same window.
    watched: Vec<Watched>,
}

async fn raw_rate(
    broker: &Broker,
    ns: &str,
    qt: QueueType,
    bodies: &[(String, Vec<u8>)],
    args: &PipelineArgs,
) -> anyhow::Result<Raw> {
    let queue = format!("{ns}.raw");
    let topo = Topology::new(ns, &queue, qt);
    let publisher = broker.publisher().await?;
    publisher.declare(&topo).await?;
    publisher.close().await;
    let mut consumer = broker.consume(&queue, args.prefetch, "bench-raw").await?;
    let total = bodies.len() as u64;
    let pb = bar(total, &format!("raw broker ({})", label(qt)), args.json);
    let started = Instant::now();
    let busy_before = machine_busy_ticks();
    let watch = Watch::start(&args.watch_pid);
    let consumed = Arc::new(AtomicU64::new(0));
    let drain = {
        let consumed = consumed.clone();
        let batch_max = args.batch_max;
        let ack_delay = Duration::from_millis(args.raw_ack_delay_ms);
        async move {
            let mut pending = 0usize;
            let mut last = 0u64;
            while consumed.load(Ordering::Relaxed) < total {
                match consumer.next_within(Duration::from_millis(2)).await {
                    Some(Some(Ok(d))) => {
                        last = d.delivery_tag;
                        pending += 1;
                        consumed.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(Some(Err(e))) => return Err(anyhow::Error::from(e)),
                    Some(None) => bail!("raw consumer closed"),
                    None => {}
                }
                // Ack like the worker does: one multiple-ack per batch.
                if pending >= batch_max || (pending > 0 && consumed.load(Ordering::Relaxed) == total) {
                    if !ack_delay.is_zero() {
                        tokio::time::sleep(ack_delay).await;
                    }
                    consumer.ack_up_to(last).await?;
                    pending = 0;
                }
            }
            if pending > 0 {
                consumer.ack_up_to(last).await?;
            }
            consumer.close().await;
            Ok(())
        }
    };
    let (p, d) = tokio::join!(publish(broker, &topo, bodies, &pb), drain);
    p?;
    d?;
    let elapsed = started.elapsed().as_secs_f64();
    let busy = machine_pct(busy_before, elapsed);
    let watched = watch.finish(elapsed, total);
    pb.finish_and_clear();
    Ok(Raw {
        msgs_per_s: total as f64 / elapsed,
        machine_cpu_pct: busy,
        watched,
    })
}

/// The CPU of the `--watch-pid` processes from now on.
struct Watch<'a> {
    pids: &'a [WatchPid],
    before: Vec<u64>,
}

impl<'a> Watch<'a> {
    fn start(pids: &'a [WatchPid]) -> Self {
        let before = pids.iter().map(|w| proc_cpu_ticks(w.pid).unwrap_or(0)).collect();
        Watch { pids, before }
    }

    /// What each spent since [`Watch::start`], over `elapsed` seconds and `events` events.
    fn finish(self, elapsed: f64, events: u64) -> Vec<Watched> {
        self.pids
            .iter()
            .zip(self.before)
            .map(|(w, b)| {
                let s = proc_cpu_ticks(w.pid).unwrap_or(b).saturating_sub(b) as f64 / TICKS_PER_S;
                Watched {
                    name: w.name.clone(),
                    pid: w.pid,
                    cpu_pct: s / elapsed * 100.0,
                    cpu_us_per_event: s * 1e6 / events.max(1) as f64,
                }
            })
            .collect()
    }
}

pub(crate) fn label(qt: QueueType) -> &'static str {
    match qt {
        QueueType::Classic => "classic",
        QueueType::Quorum => "quorum",
    }
}

/// One row: `workers` worker processes with `--events-shards shards`, next to the raw broker rate `raw` (measured
/// here when `None`: once per queue type).
async fn one(
    global: &GlobalOpts,
    args: &PipelineArgs,
    qt: QueueType,
    (shards, workers, in_flight): (u16, u16, u16),
    raw: Option<Raw>,
) -> anyhow::Result<Row> {
    // a namespace per row: counters, rules and queues of one row never meet another's
    let ns = format!(
        "bench_{}_{shards}s{workers}w{in_flight}f_{:08x}",
        label(qt),
        std::process::id() ^ rand::random::<u32>()
    );
    let projects: Vec<String> = (0..args.projects)
        .map(|p| format!("{:024x}", 0xbe7c_0000_0000u64 + p))
        .collect();
    let store = klaxon_store::RuleStore::connect(&global.mongo_url, &ns)
        .await
        .context("MongoDB (--mongo-url)")?;
    let rule = |kind: &str| match kind {
        "fixed" => serde_json::json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100,
            "thresholdPeriod": 3_600_000, "window": "fixed",
            "channels": {"webhook": {"isEnabled": true, "endpoint": "http://127.0.0.1:9/bench", "minPeriod": 0}}}),
        "sliding" => serde_json::json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 100,
            "thresholdPeriod": 3_600_000, "window": "sliding", "including": ["typeerror"],
            "channels": {"webhook": {"isEnabled": true, "endpoint": "http://127.0.0.1:9/bench", "minPeriod": 0}}}),
        _ => serde_json::json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "excluding": ["healthcheck"],
            "channels": {"webhook": {"isEnabled": true, "endpoint": "http://127.0.0.1:9/bench", "minPeriod": 0}}}),
    };
    let import: Vec<serde_json::Value> = projects
        .iter()
        .map(
            |p| serde_json::json!({"_id": p, "notifications": [rule("fixed"), rule("sliding"), rule("new")]}),
        )
        .collect();
    let parsed = klaxon_store::parse_import(&serde_json::to_string(&import)?)?;
    store.replace(&parsed).await?;
    let bodies = bodies(args, &projects);
    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("RabbitMQ (--amqp-url)")?;

    let raw = match raw {
        Some(r) => r,
        None => raw_rate(&broker, &ns, qt, &bodies, args).await?,
    };
    let topology = Topology::new(&ns, &format!("{ns}.events"), qt).with_shards(shards);

    let sac = args.single_active_consumer && shards > 1;
    if sac {
        for i in 0..shards {
            broker.declare_single_active(&topology.shard_queue(i), qt).await?;
        }
    }
    // The workers, as processes of their own, so that their CPU time is theirs.
    let exe = crate::klaxon_exe()?;
    let mut children = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..workers {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let child = crate::klaxon_child(&exe, "worker", &addr, qt, &ns, global)
            .args([
                "--prefetch",
                &args.prefetch.to_string(),
                "--batch-max",
                &args.batch_max.to_string(),
                "--batches-in-flight",
                &in_flight.to_string(),
            ])
            .env("KLAXON_EVENTS_SHARDS", shards.to_string())
            .spawn()
            .context("start klaxon worker")?;
        children.push(child);
        addrs.push(addr);
    }
    let pids: Vec<u32> = children
        .iter()
        .map(|c| c.id().context("worker pid"))
        .collect::<anyhow::Result<_>>()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    for addr in &addrs {
        while !matches!(http_get(addr, "/readyz").await, Some((200, _))) {
            if Instant::now() > deadline {
                bail!("the bench worker did not become ready in 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Warm the rule cache and the scripts with one event per project per worker, outside the measurement.
    let warm: Vec<(String, Vec<u8>)> = (0..workers)
        .flat_map(|_| projects.iter())
        .map(|p| {
            let body = serde_json::to_vec(
                &serde_json::json!({"projectId": p, "event": {"title": "warm-up", "groupHash": "warm"}}),
            )
            .unwrap_or_default();
            (p.clone(), body)
        })
        .collect();
    let hidden = indicatif::ProgressBar::hidden();
    publish(&broker, &topology, &warm, &hidden).await?;
    let warm_n = warm.len() as u64;
    // The workers' metrics, summed.
    let scrape = |addrs: Vec<String>| async move {
        let mut all = String::new();
        for addr in &addrs {
            all.push_str(
                &http_get(addr, "/metrics")
                    .await
                    .map(|(_, m)| m)
                    .unwrap_or_default(),
            );
        }
        all
    };
    let wait_consumed = |n: u64| {
        let addrs = addrs.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(600);
            loop {
                // `klaxon_batch_size_sum` counts events of batches that are done (published and acked);
                // `klaxon_events_consumed_total` would also count the batch still being processed.
                let m = scrape(addrs.clone()).await;
                if metric_sum(&m, "klaxon_batch_size_sum ") >= n {
                    return Ok(m);
                }
                if Instant::now() > deadline {
                    bail!("the bench workers did not finish {n} events in 600 s");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let before = wait_consumed(warm_n).await?;
    let cpu_of = |pids: &[u32]| -> anyhow::Result<u64> { pids.iter().map(|p| proc_cpu_ticks(*p)).sum() };
    let cpu_before = cpu_of(&pids)?;
    let pb = bar(
        bodies.len() as u64,
        &format!(
            "klaxon worker ×{workers}, {shards} shard(s), {in_flight} in flight ({})",
            label(qt)
        ),
        args.json,
    );
    let started = Instant::now();
    let busy_before = machine_busy_ticks();
    let watch = Watch::start(&args.watch_pid);
    publish(&broker, &topology, &bodies, &pb).await?;
    let after = wait_consumed(warm_n + bodies.len() as u64).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let busy = machine_pct(busy_before, elapsed);
    let cpu_after = cpu_of(&pids)?;
    let watched = watch.finish(elapsed, bodies.len() as u64);
    pb.finish_and_clear();
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }

    let n = bodies.len() as f64;
    let batches =
        metric_sum(&after, "klaxon_batch_size_count ") - metric_sum(&before, "klaxon_batch_size_count ");
    let tasks = metric_sum(&after, "klaxon_notifications_published_total{")
        - metric_sum(&before, "klaxon_notifications_published_total{");
    let rate = n / elapsed;

    // Leave nothing behind.
    let _ = broker.delete_topology(&topology).await;
    let _ = broker.delete_queue(&format!("{ns}.raw")).await;
    broker.close().await;
    Ok(Row {
        queue_type: label(qt).to_owned(),
        events: bodies.len() as u64,
        groups: args.groups,
        projects: args.projects,
        rules_per_project: 3,
        prefetch: args.prefetch,
        batch_max: args.batch_max,
        batches_in_flight: in_flight,
        worker_seconds: elapsed,
        worker_cpu_seconds: (cpu_after - cpu_before) as f64 / TICKS_PER_S,
        workers,
        shards,
        single_active_consumer: sac,
        worker_cpu_pct: (cpu_after - cpu_before) as f64 / TICKS_PER_S / elapsed * 100.0,
        watched,
        raw_broker_msgs_per_s: raw.msgs_per_s,
        raw: raw.clone(),
        machine_cpu_pct: busy,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        worker_events_per_s: rate,
        ratio: rate / raw.msgs_per_s,
        worker_cpu_us_per_event: (cpu_after - cpu_before) as f64 / TICKS_PER_S * 1e6 / n,
        redis_round_trips_per_event: batches as f64 / n,
        batches,
        notification_tasks: tasks,
    })
}

async fn pipeline(args: PipelineArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.events > 0 && args.groups > 0 && args.projects > 0,
        "--events, --groups and --projects must be > 0"
    );
    let types: Vec<QueueType> = match args.queue_type.as_str() {
        "classic" => vec![QueueType::Classic],
        "quorum" => vec![QueueType::Quorum],
        _ => vec![QueueType::Classic, QueueType::Quorum],
    };
    let mut rows: Vec<Row> = Vec::new();
    for qt in types {
        let mut raw = None;
        for &shards in &args.shards {
            for &workers in &args.workers {
                for &in_flight in &args.batches_in_flight {
                    let row = one(global, &args, qt, (shards, workers, in_flight), raw).await?;
                    raw = Some(row.raw.clone());
                    rows.push(row);
                }
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "klaxon bench pipeline: {} events, {} groups, {} projects × 3 rules, prefetch {}, batch {}",
            args.events, args.groups, args.projects, args.prefetch, args.batch_max
        );
        let watched: String = args
            .watch_pid
            .iter()
            .map(|w| format!(" {} CPU % raw / workers |", w.name))
            .collect();
        println!(
            "| queue | shards | workers | in flight | raw broker msg/s (one queue) | worker events/s | ratio | \
             worker CPU µs/event | workers' CPU % | machine CPU % raw / workers (of {}) | Redis round trips/event | \
             tasks |{watched}",
            rows.first().map_or(100, |r| r.cores * 100)
        );
        println!(
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}",
            "---:|".repeat(args.watch_pid.len())
        );
        for r in &rows {
            let watched: String = r
                .raw
                .watched
                .iter()
                .zip(&r.watched)
                .map(|(raw, w)| format!(" {:.0} / {:.0} |", raw.cpu_pct, w.cpu_pct))
                .collect();
            println!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.0} | {:.0} / {:.0} | {:.4} | {} |{watched}",
                r.queue_type,
                if r.single_active_consumer {
                    format!("{} (SAC)", r.shards)
                } else {
                    r.shards.to_string()
                },
                r.workers,
                r.batches_in_flight,
                r.raw_broker_msgs_per_s,
                r.worker_events_per_s,
                r.ratio,
                r.worker_cpu_us_per_event,
                r.worker_cpu_pct,
                r.raw.machine_cpu_pct,
                r.machine_cpu_pct,
                r.redis_round_trips_per_event,
                r.notification_tasks
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
