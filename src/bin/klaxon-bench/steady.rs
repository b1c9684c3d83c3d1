//! `klaxon-bench steady`: what one `klaxon run` costs per event when events arrive paced, as real error traffic
//! does, at each of several rates, next to the same process draining a backlog.
//!
//! The bench starts a `klaxon run` child (evaluate + deliver, one process; `--klaxon` picks the binary, so two
//! builds compare side by side) and an HTTP receiver of its own on loopback, then publishes a Hawk-shaped stream:
//! 5 projects with 13 rules between them (SEEN_MORE fixed and sliding, ONLY_NEW), groups drawn from a Zipf
//! distribution, crossings delivered as webhooks to the receiver. One event in ten (at most 50/s, at least 5/s) is a
//! probe: a fresh group under a threshold-1 rule, so a crossing whose latency from `basic.publish` to the receiver
//! having read the webhook is measured.
//!
//! Each rate runs for `--seconds`; events are published on their schedule (every 2 ms, what is due). Measured over
//! the window from just before the first event to 2 s after the last (longer if the child still had events to
//! take), from `/proc`:
//! - CPU of the whole process, all threads: the sum of every thread's on-CPU time (`/proc/<pid>/task/*/schedstat`,
//!   nanoseconds) when no thread ended in the window, else `/proc/<pid>/stat` utime + stime (10 ms ticks);
//! - context switches: the sum over `/proc/<pid>/task/*/status` of `voluntary_ctxt_switches` and
//!   `nonvoluntary_ctxt_switches`;
//! - the thread count (`Threads:` of `/proc/<pid>/status`) at the end of the window.
//!
//! The child is not asked anything (no `/metrics`) inside a window. The idle row is the child ready and given no
//! events; the backlog row is `--backlog` events published before a second child starts, drained, minus the CPU
//! the first child took to start and become ready. With `--backlog-probe` the backlog is all of one project and one
//! crossing of another project waits behind it: the row's latency is how long after the second child was ready
//! that other project's first alert was delivered (how much one project's backlog delays another's alerts). With
//! `--shards N` both children run with `--events-shards N` and the backlog and its probe go through the shard
//! exchange, the probe's project on another shard than the backlog's: the same question for a sharded fleet.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::latency::{percentile, receiver, terminate, Seen};
use crate::pipeline::{http_get, label, metric, proc_cpu_ticks, TICKS_PER_S};
use crate::GlobalOpts;

#[derive(Debug, Args)]
pub struct SteadyArgs {
    /// Paced rates, events per second, comma-separated; each runs for `--seconds`.
    #[arg(long, value_delimiter = ',', default_values_t = [50u64, 200, 1000, 5000])]
    pub rates: Vec<u64>,
    /// Seconds of paced events at each rate.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Events of the backlog row, published before a second child starts (0: no backlog row).
    #[arg(long, default_value_t = 20_000)]
    pub backlog: u64,
    /// Backlog fairness: the backlog's events are all of one project, and behind them one crossing of another
    /// project is queued; the backlog row's p50/p99/max is then how long after the draining child was ready that
    /// other project's first alert was delivered.
    #[arg(long)]
    pub backlog_probe: bool,
    /// Shard queues (`--events-shards` of both children): the backlog row's events and probe are published as
    /// Klaxon's producers publish them, to the shard exchange keyed by project, and with `--backlog-probe` the
    /// probe's project is one the broker routes to another shard than the backlog's (found by routing one marker
    /// event per candidate project before the backlog). The paced rows publish to the events queue as before
    /// (a worker drains it beside the shards).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub shards: u16,
    /// Seconds of the idle row (the child ready and its warm-up settled, no events).
    #[arg(long, default_value_t = 10)]
    pub idle_seconds: u64,
    /// Distinct groups per rate (Zipf-weighted: the most frequent group is the most likely).
    #[arg(long, default_value_t = 500)]
    pub groups: u64,
    /// The `klaxon` binary to measure (default: the one next to this binary), e.g. an older build to compare.
    #[arg(long, value_name = "PATH")]
    pub klaxon: Option<PathBuf>,
    /// Queue type of the child's queues: classic or quorum.
    #[arg(long, default_value = "classic")]
    pub queue_type: QueueType,
    /// Print one JSON document (every number) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One row: a paced rate, the backlog or idle.
#[derive(Debug, Serialize)]
struct Row {
    /// `idle`, `50/s`, …, `backlog`.
    load: String,
    rate_target: u64,
    rate_achieved: f64,
    /// Events the child took in the window.
    events: u64,
    window_s: f64,
    cpu_s: f64,
    /// `schedstat` (ns, every thread) or `stat` (10 ms ticks, when a thread ended in the window).
    cpu_source: &'static str,
    cpu_us_per_event: f64,
    /// In % of one core, over the window.
    cpu_pct: f64,
    context_switches: u64,
    switches_per_event: f64,
    threads: u64,
    probes_sent: u64,
    probes_delivered: u64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
    /// Webhooks of the Hawk-shaped rules the receiver got in the window (crossings other than the probes').
    deliveries: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    klaxon: String,
    queue_type: String,
    projects: usize,
    rules: usize,
    groups: u64,
    rows: Vec<Row>,
}

/// A snapshot of the child's CPU and context switches.
struct Sample {
    ticks: u64,
    task_ns: HashMap<u32, u64>,
    /// Voluntary + involuntary context switches of each thread.
    task_switches: HashMap<u32, u64>,
}

impl Sample {
    /// Context switches since `before`: every thread alive now, since `before` or since it started. A thread
    /// that ended in between (an idle blocking-pool thread of tokio timing out) takes its own with it.
    fn switches_since(&self, before: &Sample) -> u64 {
        self.task_switches
            .iter()
            .map(|(t, n)| n.saturating_sub(before.task_switches.get(t).copied().unwrap_or(0)))
            .sum()
    }
}

fn tasks(pid: u32) -> anyhow::Result<Vec<u32>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).context("read /proc/<pid>/task")? {
        if let Some(tid) = e
            .ok()
            .and_then(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        {
            out.push(tid);
        }
    }
    Ok(out)
}

fn sample(pid: u32) -> anyhow::Result<Sample> {
    let mut task_ns = HashMap::new();
    let mut task_switches = HashMap::new();
    for tid in tasks(pid)? {
        // a thread may end between the listing and the read: it then counts in neither
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")) {
            if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
                task_ns.insert(tid, ns);
            }
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) {
            let n = s
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("voluntary_ctxt_switches:")
                        .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                })
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum::<u64>();
            task_switches.insert(tid, n);
        }
    }
    Ok(Sample {
        ticks: proc_cpu_ticks(pid)?,
        task_ns,
        task_switches,
    })
}

/// CPU seconds between two samples, and where they come from: every thread's on-CPU time (ns) when every thread
/// of `before` is still there, else the larger of that (threads that ended lose their part) and the process's
/// utime + stime (10 ms ticks, ended threads included).
fn cpu_between(before: &Sample, after: &Sample) -> (f64, &'static str) {
    let ns: u64 = after
        .task_ns
        .iter()
        .map(|(t, a)| a.saturating_sub(before.task_ns.get(t).copied().unwrap_or(0)))
        .sum();
    let precise = ns as f64 / 1e9;
    if before.task_ns.keys().all(|t| after.task_ns.contains_key(t)) {
        return (precise, "schedstat");
    }
    let ticks = after.ticks.saturating_sub(before.ticks) as f64 / TICKS_PER_S;
    if ticks > precise {
        (ticks, "stat")
    } else {
        (precise, "schedstat")
    }
}

fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The Hawk-shaped workload: projects, their rules, and the probe project.
struct Workload {
    projects: Vec<String>,
    probe_project: String,
    /// More projects with the probe's rule: with shards, the backlog row's probe is the first of them (or
    /// `probe_project`) that the broker routes to another shard than the backlog's.
    probe_candidates: Vec<String>,
    /// Cumulative Zipf weights of the groups (s = 1).
    cdf: Vec<f64>,
}

const RULES_PER_PROJECT: [usize; 5] = [3, 3, 3, 2, 2];

/// Probe projects besides `probe_project` (see [`Workload::probe_candidates`]): with 3 shards, the chance that
/// none of the 9 lands off the backlog's shard is (1/3)^9.
const PROBE_CANDIDATES: u64 = 8;

/// The title word of a shard marker event, which the probe rule excludes (a marker crosses nothing).
const MARKER: &str = "shardmarker";

impl Workload {
    fn new(groups: u64) -> Self {
        let projects = (0..RULES_PER_PROJECT.len() as u64)
            .map(|p| format!("{:024x}", 0x57ea_d000_0000u64 + p))
            .collect();
        let mut acc = 0.0;
        let cdf = (1..=groups)
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect();
        Workload {
            projects,
            probe_project: format!("{:024x}", 0x57ea_dfff_0000u64),
            probe_candidates: (1..=PROBE_CANDIDATES)
                .map(|k| format!("{:024x}", 0x57ea_dfff_0000u64 + k))
                .collect(),
            cdf,
        }
    }

    fn import(&self, base: &str) -> serde_json::Value {
        let channels =
            |url: &str| serde_json::json!({"webhook": {"isEnabled": true, "endpoint": url, "minPeriod": 0}});
        let load = format!("{base}/load");
        let all = [
            serde_json::json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 50,
                "thresholdPeriod": 3_600_000, "window": "fixed", "channels": channels(&load)}),
            serde_json::json!({"isEnabled": true, "whatToReceive": "ONLY_NEW", "excluding": ["healthcheck"],
                "channels": channels(&load)}),
            serde_json::json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 500,
                "thresholdPeriod": 60_000, "window": "sliding", "including": ["typeerror"],
                "channels": channels(&load)}),
        ];
        let mut import: Vec<serde_json::Value> = self
            .projects
            .iter()
            .zip(RULES_PER_PROJECT)
            .map(|(p, n)| serde_json::json!({"_id": p, "notifications": all[..n].to_vec()}))
            .collect();
        for p in std::iter::once(&self.probe_project).chain(&self.probe_candidates) {
            import.push(serde_json::json!({"_id": p, "notifications": [
                {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1, "thresholdPeriod": 3_600_000,
                 "excluding": [MARKER], "channels": channels(&format!("{base}/probe"))}]}));
        }
        serde_json::Value::Array(import)
    }

    /// A probe: a fresh group of the probe project under its threshold-1 rule, so a crossing of its own.
    fn probe(&self, probe: u64) -> Vec<u8> {
        Self::probe_of(&self.probe_project, probe)
    }

    /// [`Workload::probe`] of `project` (the probe project or a candidate).
    fn probe_of(project: &str, probe: u64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "projectId": project,
            "event": {"title": format!("Probe crossing {probe}"), "groupHash": format!("probe-{probe}"),
                      "isNew": true, "repetitionId": null}
        }))
        .unwrap_or_default()
    }

    /// `n` events of run `tag`, every `probe_every`-th a probe (numbered from `first_probe`); the probes' numbers.
    fn events(
        &self,
        tag: &str,
        n: u64,
        probe_every: u64,
        first_probe: u64,
        rng: &mut rand::rngs::StdRng,
    ) -> (Vec<Vec<u8>>, Vec<Option<u64>>) {
        self.events_of(tag, n, probe_every, first_probe, rng, None)
    }

    /// [`Workload::events`], all of project `only` when given.
    fn events_of(
        &self,
        tag: &str,
        n: u64,
        probe_every: u64,
        first_probe: u64,
        rng: &mut rand::rngs::StdRng,
        only: Option<usize>,
    ) -> (Vec<Vec<u8>>, Vec<Option<u64>>) {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let mut seen = HashSet::new();
        let mut probe = first_probe;
        let mut bodies = Vec::with_capacity(n as usize);
        let mut probes = Vec::with_capacity(n as usize);
        for i in 0..n {
            if probe_every > 0 && i % probe_every == probe_every - 1 {
                bodies.push(self.probe(probe));
                probes.push(Some(probe));
                probe += 1;
                continue;
            }
            let x = rng.random::<f64>() * total;
            let g = self.cdf.partition_point(|c| *c < x) as u64;
            let project = &self.projects[only.unwrap_or((g % self.projects.len() as u64) as usize)];
            let title = if g % 7 == 3 {
                format!("ReferenceError: {tag} handler is not defined (group {g})")
            } else {
                format!("TypeError: cannot read property 'id' of undefined (group {g})")
            };
            bodies.push(
                serde_json::to_vec(&serde_json::json!({
                    "projectId": project,
                    "event": {"title": title, "groupHash": format!("{tag}-group-{g:04}"),
                              "isNew": seen.insert(g), "repetitionId": null}
                }))
                .unwrap_or_default(),
            );
            probes.push(None);
        }
        (bodies, probes)
    }
}

pub async fn steady(args: SteadyArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(!args.rates.is_empty(), "--rates needs at least one rate");
    anyhow::ensure!(
        args.rates.iter().all(|r| *r > 0),
        "every rate of --rates must be > 0"
    );
    anyhow::ensure!(
        args.seconds > 0 && args.groups > 0,
        "--seconds and --groups must be > 0"
    );
    let exe = match &args.klaxon {
        Some(p) => {
            anyhow::ensure!(p.is_file(), "--klaxon {}: no such file", p.display());
            p.clone()
        }
        None => crate::klaxon_exe()?,
    };
    let ns = format!(
        "bench_steady_{:08x}",
        std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
    );
    let stop_receiver = tokio_util::sync::CancellationToken::new();
    let seen = Arc::new(Seen::default());
    let base = receiver(seen.clone(), stop_receiver.clone()).await?;
    let work = Workload::new(args.groups);
    let result = measure(&args, global, &exe, &ns, &base, &seen, &work).await;
    stop_receiver.cancel();
    if let Ok(broker) = Broker::connect(&global.amqp_url, Duration::from_secs(10)).await {
        let _ = broker
            .delete_topology(
                &Topology::new(&ns, &format!("{ns}.events"), args.queue_type).with_shards(args.shards),
            )
            .await;
        broker.close().await;
    }
    let rows = result?;
    let lost: u64 = rows.iter().map(|r| r.probes_sent - r.probes_delivered).sum();
    let report = Report {
        klaxon: exe.display().to_string(),
        queue_type: label(args.queue_type).to_owned(),
        projects: work.projects.len(),
        rules: RULES_PER_PROJECT.iter().sum(),
        groups: args.groups,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, args.seconds);
    }
    Ok(if lost == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("klaxon bench steady: {lost} probe crossing(s) were not delivered");
        ExitCode::FAILURE
    })
}

fn print_table(r: &Report, seconds: u64) {
    println!(
        "klaxon bench steady: one `klaxon run` ({}), {} s per rate, {} projects, {} rules, {} Zipf groups, {} queues",
        r.klaxon, seconds, r.projects, r.rules, r.groups, r.queue_type
    );
    println!(
        "| load | events/s | events | µs CPU/event | switches/event | threads | p50 ms | p99 ms | CPU % |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &r.rows {
        let lat = |v: f64| {
            if row.probes_delivered == 0 {
                "–".to_owned()
            } else {
                format!("{v:.1}")
            }
        };
        let per_event = |v: f64| {
            if row.events == 0 {
                "–".to_owned()
            } else {
                format!("{v:.1}")
            }
        };
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {:.2} |",
            row.load,
            row.rate_achieved,
            row.events,
            per_event(row.cpu_us_per_event),
            per_event(row.switches_per_event),
            row.threads,
            lat(row.latency_p50_ms),
            lat(row.latency_p99_ms),
            row.cpu_pct
        );
    }
}

/// `klaxon run` on the bench's namespace and services, delivering webhooks to loopback.
fn start_child(
    exe: &std::path::Path,
    addr: &str,
    qt: QueueType,
    ns: &str,
    shards: u16,
    global: &GlobalOpts,
) -> anyhow::Result<tokio::process::Child> {
    crate::klaxon_child(exe, "run", addr, qt, ns, global)
        .env("KLAXON_EVENTS_SHARDS", shards.to_string())
        .env("KLAXON_ALLOW_PRIVATE_ENDPOINTS", "true")
        .env_remove("KLAXON_MONGO_DB")
        .env_remove("KLAXON_EVENTS_QUEUE")
        .spawn()
        .context("start klaxon run")
}

async fn wait_ready(addr: &str, child: &mut tokio::process::Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(addr, "/readyz").await, Some((200, _))) {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("the bench's `klaxon run` exited early: {status}");
        }
        if Instant::now() > deadline {
            bail!("the bench's `klaxon run` did not become ready in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn free_addr() -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    Ok(format!("127.0.0.1:{port}"))
}

async fn consumed(addr: &str) -> u64 {
    let m = http_get(addr, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    metric(&m, "klaxon_events_consumed_total")
}

async fn measure(
    args: &SteadyArgs,
    global: &GlobalOpts,
    exe: &std::path::Path,
    ns: &str,
    base: &str,
    seen: &Arc<Seen>,
    work: &Workload,
) -> anyhow::Result<Vec<Row>> {
    let store = klaxon_store::RuleStore::connect(&global.mongo_url, ns)
        .await
        .context("MongoDB (--mongo-url)")?;
    store
        .replace(&klaxon_store::parse_import(&serde_json::to_string(
            &work.import(base),
        )?)?)
        .await?;
    let qt = args.queue_type;
    let addr = free_addr()?;
    let mut child = start_child(exe, &addr, qt, ns, args.shards, global)?;
    let result = paced(args, global, ns, &addr, &mut child, seen, work).await;
    terminate(&mut child).await;
    let (mut rows, startup) = result?;
    if args.backlog > 0 {
        rows.push(backlog(args, global, exe, ns, &startup, work, seen).await?);
    }
    Ok(rows)
}

/// The idle row, then every rate on one child; also the CPU seconds the child took to start and become ready.
async fn paced(
    args: &SteadyArgs,
    global: &GlobalOpts,
    ns: &str,
    addr: &str,
    child: &mut tokio::process::Child,
    seen: &Arc<Seen>,
    work: &Workload,
) -> anyhow::Result<(Vec<Row>, Startup)> {
    let pid = child.id().context("child pid")?;
    let spawned = sample(pid)?;
    wait_ready(addr, child).await?;
    let ready = sample(pid)?;
    let startup = Startup {
        cpu_s: cpu_between(&spawned, &ready).0,
        switches: ready.switches_since(&spawned),
    };
    let mut rows = Vec::new();

    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("RabbitMQ (--amqp-url)")?;
    let publisher = broker.publisher().await?;
    let queue = format!("{ns}.events");
    // Warm the rule cache, the scripts and the webhook connection outside every window: a probe crossing
    // and an event of each project.
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let (warm, _) = work.events("warm", 50, 10, 1_000_000_000, &mut rng);
    let msgs: Vec<Outgoing> = warm.into_iter().map(|b| Outgoing::json(&queue, b)).collect();
    let consumed_before = consumed(addr).await;
    publisher.publish_all(&msgs).await?;
    // Settled: the warm-up consumed (bounded), then its deliveries, trail writes and the connections' first
    // exchanges done, so the idle row measures idle and not the warm-up's tail.
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumed(addr).await < consumed_before + msgs.len() as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    if args.idle_seconds > 0 {
        let before = sample(pid)?;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
        let after = sample(pid)?;
        let window = started.elapsed().as_secs_f64();
        let (cpu_s, cpu_source) = cpu_between(&before, &after);
        rows.push(Row {
            load: "idle".to_owned(),
            rate_target: 0,
            rate_achieved: 0.0,
            events: 0,
            window_s: window,
            cpu_s,
            cpu_source,
            cpu_us_per_event: 0.0,
            cpu_pct: cpu_s / window * 100.0,
            context_switches: after.switches_since(&before),
            switches_per_event: 0.0,
            threads: threads(pid),
            probes_sent: 0,
            probes_delivered: 0,
            latency_p50_ms: 0.0,
            latency_p99_ms: 0.0,
            latency_max_ms: 0.0,
            deliveries: 0,
        });
    }

    let mut next_probe = 0u64;
    for (i, &rate) in args.rates.iter().enumerate() {
        let n = rate * args.seconds;
        // one event in ten a probe, 5 to 50 probes a second
        let probe_every = (rate / rate.div_ceil(10).clamp(5, 50).min(rate)).max(1);
        let (bodies, probe_ids) = work.events(&format!("r{i}"), n, probe_every, next_probe, &mut rng);
        let probes_sent = probe_ids.iter().flatten().count() as u64;
        next_probe += probes_sent;
        let consumed_before = consumed(addr).await;
        let load_before = seen.load.load(Ordering::Relaxed);
        let mut sent_at: HashMap<u64, Instant> = HashMap::with_capacity(probes_sent as usize);

        let before = sample(pid)?;
        let started = Instant::now();
        let mut sent = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(2));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while sent < n {
            tick.tick().await;
            let due = ((started.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(n);
            if due <= sent {
                continue;
            }
            let now = Instant::now();
            let msgs: Vec<Outgoing> = (sent..due)
                .map(|k| {
                    if let Some(p) = probe_ids[k as usize] {
                        sent_at.insert(p, now);
                    }
                    let mut m = Outgoing::json(&queue, bodies[k as usize].clone());
                    m.message_id = Some(format!("{ns}-r{i}-{k}"));
                    m
                })
                .collect();
            publisher.publish_all(&msgs).await?;
            sent = due;
        }
        let last = Instant::now();
        let publish_s = started.elapsed().as_secs_f64();

        // 2 s after the last event, or once the child has taken every event (bounded)
        let deadline = last + Duration::from_secs(60);
        tokio::time::sleep_until((last + Duration::from_secs(2)).into()).await;
        let (after, window) = loop {
            let after = sample(pid)?;
            let window = started.elapsed().as_secs_f64();
            if consumed(addr).await >= consumed_before + n || Instant::now() > deadline {
                break (after, window);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let events = consumed(addr).await.saturating_sub(consumed_before);
        let threads_now = threads(pid);
        // every probe of this rate should arrive (bounded)
        let wait_until = Instant::now() + Duration::from_secs(15);
        loop {
            let arrived = {
                let got = seen.probes.lock().unwrap_or_else(|p| p.into_inner());
                sent_at.keys().filter(|p| got.contains_key(p)).count()
            };
            if arrived == sent_at.len() || Instant::now() > wait_until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut lat: Vec<f64> = {
            let got = seen.probes.lock().unwrap_or_else(|p| p.into_inner());
            sent_at
                .iter()
                .filter_map(|(p, at)| Some(got.get(p)?.saturating_duration_since(*at).as_secs_f64() * 1e3))
                .collect()
        };
        lat.sort_by(|a, b| a.total_cmp(b));
        let (cpu_s, cpu_source) = cpu_between(&before, &after);
        let switches = after.switches_since(&before);
        let per = |v: f64| if events == 0 { 0.0 } else { v / events as f64 };
        rows.push(Row {
            load: format!("{rate}/s"),
            rate_target: rate,
            rate_achieved: n as f64 / publish_s,
            events,
            window_s: window,
            cpu_s,
            cpu_source,
            cpu_us_per_event: per(cpu_s * 1e6),
            cpu_pct: cpu_s / window * 100.0,
            context_switches: switches,
            switches_per_event: per(switches as f64),
            threads: threads_now,
            probes_sent,
            probes_delivered: lat.len() as u64,
            latency_p50_ms: percentile(&lat, 50.0),
            latency_p99_ms: percentile(&lat, 99.0),
            latency_max_ms: lat.last().copied().unwrap_or(0.0),
            deliveries: seen.load.load(Ordering::Relaxed) - load_before,
        });
    }
    publisher.close().await;
    broker.close().await;
    Ok((rows, startup))
}

/// The `projectId` of an event body the workload made ('' when it has none).
fn project_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("projectId").and_then(|p| p.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

/// The shard the broker routes an event of `project` to: one marker event (excluded by the probe rule, matched by
/// no other) is published as producers publish, and the shard queue that grew is the one (no consumer runs
/// between the two children, so the queues only grow by it).
async fn shard_of(
    broker: &Broker,
    publisher: &klaxon_broker::Publisher,
    topology: &Topology,
    project: &str,
) -> anyhow::Result<usize> {
    let depths = || async {
        let mut out = Vec::new();
        for q in topology.shard_queues() {
            out.push(broker.queue_depth(&q).await?.map_or(0, |d| d.messages));
        }
        anyhow::Ok(out)
    };
    let before = depths().await?;
    let body = serde_json::to_vec(&serde_json::json!({
        "projectId": project,
        "event": {"title": MARKER, "groupHash": MARKER, "isNew": false, "repetitionId": null}
    }))?;
    publisher.publish_all(&[topology.event(project, body)]).await?;
    let after = depths().await?;
    after
        .iter()
        .zip(&before)
        .position(|(a, b)| a > b)
        .with_context(|| {
            format!(
                "no shard queue of {} grew after a marker event",
                topology.events_queue()
            )
        })
}

/// A probe project the broker routes to another shard than `backlog_project`'s, and how many marker events
/// finding it published.
async fn probe_off_shard(
    broker: &Broker,
    publisher: &klaxon_broker::Publisher,
    topology: &Topology,
    backlog_project: &str,
    work: &Workload,
) -> anyhow::Result<(String, u64)> {
    let backlog_shard = shard_of(broker, publisher, topology, backlog_project).await?;
    let mut markers = 1;
    for p in std::iter::once(&work.probe_project).chain(&work.probe_candidates) {
        markers += 1;
        if shard_of(broker, publisher, topology, p).await? != backlog_shard {
            return Ok((p.clone(), markers));
        }
    }
    bail!("every probe project shares the backlog's shard {backlog_shard}")
}

/// What the first child took to start and become ready (subtracted from the backlog row).
struct Startup {
    cpu_s: f64,
    switches: u64,
}

/// `--backlog` events published first, then a second child started to drain them: its CPU from start to 2 s
/// after the last event was taken, minus `startup` (what the first child took to start and become ready).
async fn backlog(
    args: &SteadyArgs,
    global: &GlobalOpts,
    exe: &std::path::Path,
    ns: &str,
    startup: &Startup,
    work: &Workload,
    seen: &Arc<Seen>,
) -> anyhow::Result<Row> {
    // the first child declared the topology (the shard exchange and queues too)
    let topology = Topology::new(ns, &format!("{ns}.events"), args.queue_type).with_shards(args.shards);
    let broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("RabbitMQ (--amqp-url)")?;
    let publisher = broker.publisher().await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3131);
    let only = args.backlog_probe.then_some(0);
    let (bodies, _) = work.events_of("backlog", args.backlog, 0, 0, &mut rng, only);
    let mut bodies: Vec<(String, Vec<u8>)> = bodies.into_iter().map(|b| (project_of(&b), b)).collect();
    // the other project's crossing, queued behind the whole backlog (on another shard when sharded)
    let probe = 2_000_000_000u64;
    let mut markers = 0;
    if args.backlog_probe {
        let project = if topology.sharded() {
            let (p, m) = probe_off_shard(&broker, &publisher, &topology, &work.projects[0], work).await?;
            markers = m;
            p
        } else {
            work.probe_project.clone()
        };
        let body = Workload::probe_of(&project, probe);
        bodies.push((project, body));
    }
    let n = bodies.len() as u64 + markers;
    for (c, chunk) in bodies.chunks(500).enumerate() {
        let msgs: Vec<Outgoing> = chunk
            .iter()
            .enumerate()
            .map(|(k, (project, b))| {
                let mut m = topology.event(project, b.clone());
                m.message_id = Some(format!("{ns}-backlog-{}", c * 500 + k));
                m
            })
            .collect();
        publisher.publish_all(&msgs).await?;
    }
    publisher.close().await;
    broker.close().await;

    let addr = free_addr()?;
    let mut child = start_child(exe, &addr, args.queue_type, ns, args.shards, global)?;
    let result = async {
        let pid = child.id().context("child pid")?;
        let before = sample(pid)?;
        let started = Instant::now();
        wait_ready(&addr, &mut child).await?;
        let ready_at = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut done_at: Option<Instant> = None;
        let (after, window) = loop {
            let after = sample(pid)?;
            let window = started.elapsed().as_secs_f64();
            let done = consumed(&addr).await >= n;
            if done && done_at.is_none() {
                done_at = Some(Instant::now());
            }
            if done_at.is_some_and(|d| d.elapsed() >= Duration::from_secs(2)) || Instant::now() > deadline {
                break (after, window);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let events = consumed(&addr).await;
        // how long after the child was ready the other project's first alert arrived (bounded)
        let mut fairness = Vec::new();
        if args.backlog_probe {
            let until = Instant::now() + Duration::from_secs(15);
            loop {
                let got = seen
                    .probes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&probe)
                    .copied();
                if let Some(at) = got {
                    fairness.push(at.saturating_duration_since(ready_at).as_secs_f64() * 1e3);
                    break;
                }
                if Instant::now() > until {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let (cpu_s, cpu_source) = cpu_between(&before, &after);
        let cpu_s = (cpu_s - startup.cpu_s).max(0.0);
        let switches = after.switches_since(&before).saturating_sub(startup.switches);
        let per = |v: f64| if events == 0 { 0.0 } else { v / events as f64 };
        anyhow::Ok(Row {
            load: "backlog".to_owned(),
            rate_target: 0,
            // the drain rate, start-up included
            rate_achieved: done_at.map_or(0.0, |d| events as f64 / d.duration_since(started).as_secs_f64()),
            events,
            window_s: window,
            cpu_s,
            cpu_source,
            cpu_us_per_event: per(cpu_s * 1e6),
            cpu_pct: cpu_s / window * 100.0,
            context_switches: switches,
            switches_per_event: per(switches as f64),
            threads: threads(pid),
            probes_sent: u64::from(args.backlog_probe),
            probes_delivered: fairness.len() as u64,
            latency_p50_ms: percentile(&fairness, 50.0),
            latency_p99_ms: percentile(&fairness, 99.0),
            latency_max_ms: fairness.last().copied().unwrap_or(0.0),
            deliveries: 0,
        })
    }
    .await;
    terminate(&mut child).await;
    result
}
