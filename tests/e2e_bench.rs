//! `klaxon bench` stays honest: a normal run prints its measurement (every number with `--json`) and nothing at
//! ERROR level, with the default log filter (`warn` for bench).

mod common;

use common::Env;

/// The environment of a plain `klaxon bench` run: the services, and no `KLAXON_LOG`, so the default filter applies.
fn bench_env() -> Env {
    let mut env = Env::new();
    env.vars.retain(|(k, _)| k != "KLAXON_LOG");
    env
}

fn assert_quiet(stderr: &str) {
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("INFO"),
        "a normal bench run logs nothing at ERROR or INFO:\n{stderr}"
    );
}

#[test]
fn bench_pipeline_json_has_every_number_and_no_error_lines() {
    let (code, out, err) = bench_env().run(&[
        "bench",
        "pipeline",
        "--events",
        "400",
        "--groups",
        "20",
        "--projects",
        "2",
        "--queue-type",
        "classic",
        "--workers",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "bench pipeline failed:\n{out}\n{err}");
    assert_quiet(&err);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    let row = &rows[0];
    for key in [
        "raw_broker_msgs_per_s",
        "worker_events_per_s",
        "ratio",
        "worker_cpu_us_per_event",
        "worker_cpu_pct",
        "redis_round_trips_per_event",
        "batches",
        "notification_tasks",
        "prefetch",
        "batch_max",
        "groups",
        "projects",
    ] {
        assert!(row[key].is_number(), "{key} missing in {row}");
    }
    assert_eq!(row["events"], 400);
    assert_eq!(row["workers"], 2);
    // 2 projects × 20 groups: the ONLY_NEW rule fires once per group (the first 20 events are new)
    assert_eq!(row["notification_tasks"], 20);
}

#[test]
fn bench_latency_delivers_every_probe_and_reports_memory() {
    let (code, out, err) = bench_env().run(&[
        "bench",
        "latency",
        "--rate",
        "300",
        "--duration",
        "3",
        "--warmup",
        "1",
        "--probe-every-ms",
        "100",
        "--json",
    ]);
    assert_eq!(code, 0, "bench latency failed:\n{out}\n{err}");
    assert_quiet(&err);
    let r: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert!(r["probes_sent"].as_u64().unwrap_or(0) >= 20, "{r}");
    assert_eq!(r["probes_lost"], 0, "{r}");
    assert_eq!(r["probes_delivered"], r["probes_sent"]);
    assert_eq!(r["load_deliveries"], 0, "the load's rules never fire: {r}");
    let p50 = r["latency_p50_ms"].as_f64().unwrap_or(0.0);
    let p99 = r["latency_p99_ms"].as_f64().unwrap_or(0.0);
    let max = r["latency_max_ms"].as_f64().unwrap_or(0.0);
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{r}");
    let idle = r["rss_idle_mib"].as_f64().unwrap_or(0.0);
    let peak = r["rss_peak_mib"].as_f64().unwrap_or(0.0);
    assert!(idle > 1.0 && peak >= idle, "{r}");
    assert!(r["events_consumed"].as_u64().unwrap_or(0) > 0, "{r}");
}

#[test]
fn klaxon_bench_without_klaxon_bench_beside_it_says_what_to_install() {
    // a `klaxon` alone in a directory: `klaxon bench` cannot find its harness
    let dir = tempfile::tempdir().expect("tempdir");
    let alone = dir.path().join("klaxon");
    std::fs::copy(common::BIN, &alone).expect("copy klaxon");
    let out = std::process::Command::new(&alone)
        .args(["bench", "pipeline", "--events", "10"])
        .env_remove("KLAXON_LOG")
        .output()
        .expect("run klaxon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("klaxon-bench") && err.contains("does not exist") && err.contains("beside klaxon"),
        "{err}"
    );
    // next to it, `klaxon bench --help` is klaxon-bench's own help
    let (code, help, _) = bench_env().run(&["bench", "--help"]);
    assert_eq!(code, 0);
    assert!(
        help.contains("Usage: klaxon-bench")
            && help.contains("pipeline")
            && help.contains("latency")
            && help.contains("steady"),
        "{help}"
    );
}

#[test]
fn bench_steady_json_has_a_row_per_rate_idle_and_backlog_and_delivers_every_probe() {
    let (code, out, err) = bench_env().run(&[
        "bench",
        "steady",
        "--rates",
        "100",
        "--seconds",
        "2",
        "--idle-seconds",
        "1",
        "--backlog",
        "200",
        "--groups",
        "20",
        "--json",
    ]);
    assert_eq!(code, 0, "bench steady failed:\n{out}\n{err}");
    assert_quiet(&err);
    let r: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    assert_eq!(r["rules"], 13, "{r}");
    let rows = r["rows"].as_array().expect("rows");
    let loads: Vec<&str> = rows.iter().filter_map(|row| row["load"].as_str()).collect();
    assert_eq!(loads, ["idle", "100/s", "backlog"], "{r}");
    let paced = &rows[1];
    assert!(paced["events"].as_u64().unwrap_or(0) >= 200, "{paced}");
    let probes = paced["probes_sent"].as_u64().unwrap_or(0);
    assert!(probes >= 10, "one event in ten is a probe: {paced}");
    assert_eq!(paced["probes_delivered"], probes, "{paced}");
    for key in ["cpu_us_per_event", "switches_per_event"] {
        assert!(paced[key].as_f64().unwrap_or(0.0) > 0.0, "{key} in {paced}");
    }
    assert!(paced["threads"].as_u64().unwrap_or(0) >= 2, "{paced}");
    let p50 = paced["latency_p50_ms"].as_f64().unwrap_or(0.0);
    let p99 = paced["latency_p99_ms"].as_f64().unwrap_or(0.0);
    assert!(p50 > 0.0 && p50 <= p99, "{paced}");
    assert_eq!(rows[2]["events"], 200, "the backlog is drained: {}", rows[2]);
    assert!(rows[0]["threads"].as_u64().unwrap_or(0) >= 2, "{}", rows[0]);
}
