//! `klaxon-bench latency`: crossing → delivered under a steady load, and the memory it takes.
//!
//! The bench starts a real `klaxon run` child process (evaluate + deliver, one process) and an HTTP receiver of
//! its own on loopback. It then publishes, on two connections of its own:
//! - a steady background load of `--rate` events/s (10 projects × 3 rules that count and never fire), and
//! - a probe every `--probe-every-ms`: an event of a fresh group under a rule with threshold 1, so each probe is a
//!   threshold crossing that the child delivers as a webhook to the receiver.
//!
//! A probe's latency is from just before its `basic.publish` to the moment the receiver has read the webhook
//! request: broker, worker batch, Redis, notification task, sender, HTTP. Probes of the warm-up are not counted.
//! Memory is the child's, from `/proc/<pid>/status`: `VmHWM` (peak resident set since start) and the largest
//! `VmRSS` sampled while the load runs, next to the resident set once ready and idle.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use klaxon_broker::{Broker, Outgoing, QueueType, Topology};
use serde::Serialize;

use crate::pipeline::{http_get, label, metric, metric_sum, proc_cpu_ticks, TICKS_PER_S};
use crate::GlobalOpts;

#[derive(Debug, Args)]
pub struct LatencyArgs {
    /// Background events per second.
    #[arg(long, default_value_t = 5_000)]
    pub rate: u64,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Seconds of load and probes before the measurement starts (not counted).
    #[arg(long, default_value_t = 5)]
    pub warmup: u64,
    /// Milliseconds between two probe crossings.
    #[arg(long, default_value_t = 50)]
    pub probe_every_ms: u64,
    /// Distinct groups of the background load.
    #[arg(long, default_value_t = 200)]
    pub groups: u64,
    /// Projects of the background load (each with 3 rules: SEEN_MORE fixed, SEEN_MORE sliding, ONLY_NEW).
    #[arg(long, default_value_t = 10)]
    pub projects: u64,
    /// Queue type of the child's queues: classic or quorum.
    #[arg(long, default_value = "classic")]
    pub queue_type: QueueType,
    /// The child's `--prefetch`.
    #[arg(long, default_value_t = 512)]
    pub prefetch: u16,
    /// The child's `--batch-max`.
    #[arg(long, default_value_t = 256)]
    pub batch_max: usize,
    /// The child's `--batch-wait-ms`.
    #[arg(long, default_value_t = 2)]
    pub batch_wait_ms: u64,
    /// Print one JSON document (every number) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Every number the bench measured.
#[derive(Debug, Serialize)]
struct Report {
    queue_type: String,
    rate_target: u64,
    rate_achieved: f64,
    duration_s: f64,
    probe_every_ms: u64,
    probes_sent: u64,
    probes_delivered: u64,
    probes_lost: u64,
    latency_p50_ms: f64,
    latency_p90_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
    latency_mean_ms: f64,
    /// Resident set of the child once ready, before any load (runtime, connections, libraries).
    rss_idle_mib: f64,
    /// Largest resident set sampled (every 250 ms) during the measured load.
    rss_steady_max_mib: f64,
    /// The kernel's peak resident set of the child since it started (`VmHWM`).
    rss_peak_mib: f64,
    /// The child's CPU (user + system) during the measured load, in % of one core.
    child_cpu_pct: f64,
    child_cpu_us_per_event: f64,
    prefetch: u16,
    batch_max: usize,
    batch_wait_ms: u64,
    /// Notifications the background load produced (its rules are not meant to fire: should be 0).
    load_deliveries: u64,
    events_consumed: u64,
    /// Deliveries the child made (every outcome), warm-up included.
    deliveries_total: u64,
}

/// What the receiver saw.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) probes: Mutex<HashMap<u64, Instant>>,
    pub(crate) load: AtomicU64,
}

async fn probe_handler(
    axum::extract::State(seen): axum::extract::State<Arc<Seen>>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let at = Instant::now();
    let n = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["events"][0]["groupHash"]
                .as_str()
                .and_then(|g| g.strip_prefix("probe-"))
                .and_then(|n| n.parse::<u64>().ok())
        });
    if let Some(n) = n {
        // the first arrival counts; a duplicate would not change the latency
        seen.probes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(n)
            .or_insert(at);
    }
    axum::http::StatusCode::OK
}

async fn load_handler(axum::extract::State(seen): axum::extract::State<Arc<Seen>>) -> axum::http::StatusCode {
    seen.load.fetch_add(1, Ordering::Relaxed);
    axum::http::StatusCode::OK
}

/// Starts the receiver on a free loopback port; returns its base URL.
pub(crate) async fn receiver(
    seen: Arc<Seen>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new()
        .route("/probe", axum::routing::post(probe_handler))
        .route("/load", axum::routing::post(load_handler))
        .with_state(seen);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(url)
}

/// `(VmRSS, VmHWM)` of `pid`, in bytes.
pub(crate) fn proc_rss(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("read /proc/<pid>/status")?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // nearest rank
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn load_body(project: &str, g: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "projectId": project,
        "event": {
            "title": format!("TypeError: cannot read property of undefined (group {g})"),
            "groupHash": format!("group-{g:04}"),
            "isNew": false,
            "repetitionId": null,
        }
    }))
    .unwrap_or_default()
}

fn probe_body(project: &str, n: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "projectId": project,
        "event": {"title": format!("Probe crossing {n}"), "groupHash": format!("probe-{n}"), "isNew": false}
    }))
    .unwrap_or_default()
}

/// Publishes `rate` events/s from `bodies` (round robin) until `stop`, counting what is confirmed in `published`.
async fn steady_load(
    broker: Broker,
    queue: String,
    bodies: Vec<Vec<u8>>,
    rate: u64,
    published: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let publisher = broker.publisher().await?;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let run = format!("{:x}", std::process::id());
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        // catch up with the schedule, at most 100 ms of it at once
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        let n = due.saturating_sub(sent).min((rate / 10).max(1));
        if n == 0 {
            continue;
        }
        let msgs: Vec<Outgoing> = (sent..sent + n)
            .map(|i| {
                let mut m = Outgoing::json(&queue, bodies[(i % bodies.len() as u64) as usize].clone());
                m.message_id = Some(format!("lat-{run}-{i}"));
                m
            })
            .collect();
        publisher.publish_all(&msgs).await?;
        sent += n;
        published.store(sent, Ordering::Relaxed);
    }
    publisher.close().await;
    Ok(())
}

/// Publishes one probe every `every` until `stop`, recording when each was handed to the broker.
async fn probes(
    broker: Broker,
    queue: String,
    project: String,
    every: Duration,
    sent_at: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let publisher = broker.publisher().await?;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let mut m = Outgoing::json(&queue, probe_body(&project, n));
        m.message_id = Some(format!("probe-{n}"));
        sent_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Instant::now());
        publisher.publish_all(std::slice::from_ref(&m)).await?;
        n += 1;
    }
    publisher.close().await;
    Ok(())
}

/// Sends SIGTERM and waits (bounded) for the child to exit; kills it after 10 s.
pub(crate) async fn terminate(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

pub async fn latency(args: LatencyArgs, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.rate > 0 && args.groups > 0 && args.projects > 0,
        "--rate, --groups and --projects must be > 0"
    );
    anyhow::ensure!(
        args.duration > 0 && args.probe_every_ms > 0,
        "--duration and --probe-every-ms must be > 0"
    );
    let qt = args.queue_type;
    let ns = format!(
        "bench_latency_{:08x}",
        std::process::id()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0))
    );
    let stop_receiver = tokio_util::sync::CancellationToken::new();
    let seen = Arc::new(Seen::default());
    let base = receiver(seen.clone(), stop_receiver.clone()).await?;
    let result = measure(&args, global, &ns, qt, &base, &seen).await;
    stop_receiver.cancel();

    // Leave no queue behind (rules and Redis keys stay in the bench's own namespace, as with `bench pipeline`).
    if let Ok(broker) = Broker::connect(&global.amqp_url, Duration::from_secs(10)).await {
        let _ = broker
            .delete_topology(&Topology::new(&ns, &format!("{ns}.events"), qt))
            .await;
        broker.close().await;
    }
    let r = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "klaxon bench latency: {} events/s target ({:.0} achieved) for {:.0} s, a probe crossing every {} ms, \
             `klaxon run` child ({} queues, prefetch {}, batch {}, batch wait {} ms)",
            r.rate_target,
            r.rate_achieved,
            r.duration_s,
            r.probe_every_ms,
            r.queue_type,
            r.prefetch,
            r.batch_max,
            r.batch_wait_ms
        );
        println!("| probes delivered | p50 ms | p90 ms | p99 ms | max ms | RSS idle MiB | RSS steady max MiB | RSS peak (VmHWM) MiB | child CPU % |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {}/{} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
            r.probes_delivered,
            r.probes_sent,
            r.latency_p50_ms,
            r.latency_p90_ms,
            r.latency_p99_ms,
            r.latency_max_ms,
            r.rss_idle_mib,
            r.rss_steady_max_mib,
            r.rss_peak_mib,
            r.child_cpu_pct
        );
    }
    Ok(if r.probes_lost == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "klaxon bench latency: {} probe(s) were not delivered",
            r.probes_lost
        );
        ExitCode::FAILURE
    })
}

async fn measure(
    args: &LatencyArgs,
    global: &GlobalOpts,
    ns: &str,
    qt: QueueType,
    base: &str,
    seen: &Arc<Seen>,
) -> anyhow::Result<Report> {
    let projects: Vec<String> = (0..args.projects)
        .map(|p| format!("{:024x}", 0x1a7e_0000_0000u64 + p))
        .collect();
    let probe_project = format!("{:024x}", 0x1a7e_ffff_0000u64);
    let load_hook = format!("{base}/load");
    let never = klaxon_core::rule::MAX_THRESHOLD;
    let channels =
        |url: &str| serde_json::json!({"webhook": {"isEnabled": true, "endpoint": url, "minPeriod": 0}});
    let mut import: Vec<serde_json::Value> = projects
        .iter()
        .map(|p| {
            serde_json::json!({"_id": p, "notifications": [
                {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": never, "thresholdPeriod": 3_600_000,
                 "window": "fixed", "channels": channels(&load_hook)},
                {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": never, "thresholdPeriod": 60_000,
                 "window": "sliding", "including": ["typeerror"], "channels": channels(&load_hook)},
                {"isEnabled": true, "whatToReceive": "ONLY_NEW", "excluding": ["healthcheck"],
                 "channels": channels(&load_hook)},
            ]})
        })
        .collect();
    import.push(serde_json::json!({"_id": probe_project, "notifications": [
        {"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1, "thresholdPeriod": 3_600_000,
         "channels": channels(&format!("{base}/probe"))}]}));
    let store = klaxon_store::RuleStore::connect(&global.mongo_url, ns)
        .await
        .context("MongoDB (--mongo-url)")?;
    store
        .replace(&klaxon_store::parse_import(&serde_json::to_string(&import)?)?)
        .await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = crate::klaxon_child(&crate::klaxon_exe()?, "run", &addr, qt, ns, global)
        .args([
            "--prefetch",
            &args.prefetch.to_string(),
            "--batch-max",
            &args.batch_max.to_string(),
            "--batch-wait-ms",
            &args.batch_wait_ms.to_string(),
        ])
        .env("KLAXON_ALLOW_PRIVATE_ENDPOINTS", "true")
        .env_remove("KLAXON_MONGO_DB")
        .env_remove("KLAXON_EVENTS_QUEUE")
        .spawn()
        .context("start klaxon run")?;
    let result = drive(
        args,
        global,
        ns,
        &probe_project,
        &projects,
        &addr,
        &mut child,
        seen,
    )
    .await;
    terminate(&mut child).await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    args: &LatencyArgs,
    global: &GlobalOpts,
    ns: &str,
    probe_project: &str,
    projects: &[String],
    addr: &str,
    child: &mut tokio::process::Child,
    seen: &Arc<Seen>,
) -> anyhow::Result<Report> {
    let pid = child.id().context("child pid")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(addr, "/readyz").await, Some((200, _))) {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("the bench's `klaxon run` exited early: {status}");
        }
        if Instant::now() > deadline {
            bail!("the bench's `klaxon run` did not become ready in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (rss_idle, _) = proc_rss(pid)?;

    let queue = format!("{ns}.events");
    let bodies: Vec<Vec<u8>> = (0..args.groups)
        .map(|g| load_body(&projects[(g % args.projects) as usize], g))
        .collect();
    let load_broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("RabbitMQ (--amqp-url)")?;
    let probe_broker = Broker::connect(&global.amqp_url, Duration::from_secs(10))
        .await
        .context("RabbitMQ (--amqp-url)")?;
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let sent_at = Arc::new(Mutex::new(Vec::new()));
    let load = tokio::spawn(steady_load(
        load_broker.clone(),
        queue.clone(),
        bodies,
        args.rate,
        published.clone(),
        stop.clone(),
    ));
    let probing = tokio::spawn(probes(
        probe_broker.clone(),
        queue,
        probe_project.to_owned(),
        Duration::from_millis(args.probe_every_ms),
        sent_at.clone(),
        stop.clone(),
    ));

    // Warm-up: same load, probes not counted.
    let warmup_end = Instant::now() + Duration::from_secs(args.warmup);
    while Instant::now() < warmup_end && !load.is_finished() && !probing.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_probe = sent_at.lock().unwrap_or_else(|p| p.into_inner()).len();
    let before = http_get(addr, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    let cpu_before = proc_cpu_ticks(pid)?;
    let published_before = published.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut rss_max = 0u64;
    let end = started + Duration::from_secs(args.duration);
    while Instant::now() < end && !load.is_finished() && !probing.is_finished() {
        rss_max = rss_max.max(proc_rss(pid)?.0);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu_after = proc_cpu_ticks(pid)?;
    let published_in_window = published.load(Ordering::Relaxed) - published_before;
    let after = http_get(addr, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    load.await.context("load task")??;
    probing.await.context("probe task")??;
    load_broker.close().await;
    probe_broker.close().await;
    let sent_at = std::mem::take(&mut *sent_at.lock().unwrap_or_else(|p| p.into_inner()));
    let last_probe = sent_at.len();

    // Every probe of the measured window should arrive; wait for them (bounded).
    let want: Vec<u64> = (first_probe as u64..last_probe as u64).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let arrived = {
            let got = seen.probes.lock().unwrap_or_else(|p| p.into_inner());
            want.iter().filter(|n| got.contains_key(n)).count()
        };
        if arrived == want.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, hwm) = proc_rss(pid)?;
    let final_metrics = http_get(addr, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    let mut lat: Vec<f64> = {
        let got = seen.probes.lock().unwrap_or_else(|p| p.into_inner());
        want.iter()
            .filter_map(|n| {
                let at = got.get(n)?;
                Some(at.saturating_duration_since(sent_at[*n as usize]).as_secs_f64() * 1e3)
            })
            .collect()
    };
    lat.sort_by(|a, b| a.total_cmp(b));
    let consumed =
        metric(&after, "klaxon_events_consumed_total") - metric(&before, "klaxon_events_consumed_total");
    let cpu_s = (cpu_after - cpu_before) as f64 / TICKS_PER_S;
    let rate_achieved = published_in_window as f64 / elapsed;
    Ok(Report {
        queue_type: label(args.queue_type).to_owned(),
        rate_target: args.rate,
        rate_achieved,
        duration_s: elapsed,
        probe_every_ms: args.probe_every_ms,
        probes_sent: want.len() as u64,
        probes_delivered: lat.len() as u64,
        probes_lost: (want.len() - lat.len()) as u64,
        latency_p50_ms: percentile(&lat, 50.0),
        latency_p90_ms: percentile(&lat, 90.0),
        latency_p99_ms: percentile(&lat, 99.0),
        latency_max_ms: lat.last().copied().unwrap_or(0.0),
        latency_mean_ms: if lat.is_empty() {
            0.0
        } else {
            lat.iter().sum::<f64>() / lat.len() as f64
        },
        rss_idle_mib: rss_idle as f64 / MIB,
        rss_steady_max_mib: rss_max as f64 / MIB,
        rss_peak_mib: hwm as f64 / MIB,
        child_cpu_pct: cpu_s / elapsed * 100.0,
        child_cpu_us_per_event: if consumed == 0 {
            0.0
        } else {
            cpu_s * 1e6 / consumed as f64
        },
        prefetch: args.prefetch,
        batch_max: args.batch_max,
        batch_wait_ms: args.batch_wait_ms,
        load_deliveries: seen.load.load(Ordering::Relaxed),
        events_consumed: consumed,
        deliveries_total: metric_sum(&final_metrics, "klaxon_deliveries_total{"),
    })
}
