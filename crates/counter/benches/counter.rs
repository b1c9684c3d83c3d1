//! Counting throughput, sliding-window memory and SPIKE / REAPPEARED memory per (rule, group), against one Redis,
//! in one run.
//!
//! `cargo bench -p klaxon-counter` (Redis from `KLAXON_TEST_REDIS_URL`, default 127.0.0.1:6379; set it to
//! a comma-separated node list to measure the cluster). Prints a Markdown table (see README.md).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use klaxon_core::{Want, Window};
use klaxon_counter::{Hit, RedisHandle, WindowCounter};

const BATCH: usize = 1000;
const HOT_KEYS: usize = 50;
/// How long each batched case runs.
const BATCHED_FOR: Duration = Duration::from_secs(3);
/// How long each one-at-a-time case runs.
const SINGLE_FOR: Duration = Duration::from_secs(2);
const HAWK_STYLE: &str = include_str!("hawk_style.lua");

struct Row {
    case: String,
    hits_per_s: f64,
    /// Microseconds the server spent per hit (top-level commands' `INFO commandstats` time), single node only.
    server_us: Option<f64>,
}

/// Runs `step` (which does `per_step` hits) for about `dur`; returns hits/s and the server's µs per hit.
async fn measure<F, Fut>(
    redis: &RedisHandle,
    dur: Duration,
    per_step: usize,
    mut step: F,
) -> (f64, Option<f64>)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Warm-up (script load, connection).
    step(0).await;
    let before = server_usec(redis).await;
    let start = Instant::now();
    let mut n: u64 = 0;
    // Bounded: stops after `dur` or 10 million steps.
    while start.elapsed() < dur && n < 10_000_000 {
        n += 1;
        step(n).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let hits = n as f64 * per_step as f64;
    let server = match (before, server_usec(redis).await) {
        (Some(b), Some(a)) => Some((a - b) / hits),
        _ => None,
    };
    (hits / elapsed, server)
}

/// Total microseconds the server has spent in the commands a client sends here (EVALSHA, EVAL, INCR), from
/// `INFO commandstats` (a script's inner calls are part of its EVALSHA time). `None` on a cluster.
async fn server_usec(redis: &RedisHandle) -> Option<f64> {
    if redis.is_cluster() {
        return None;
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.clone())
        .await
        .ok()?;
    let mut total = 0.0;
    for line in info.lines() {
        let Some((name, stats)) = line.split_once(':') else {
            continue;
        };
        if !matches!(name, "cmdstat_evalsha" | "cmdstat_eval" | "cmdstat_incr") {
            continue;
        }
        let usec = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("usec="))
            .and_then(|v| v.parse::<f64>().ok())?;
        total += usec;
    }
    Some(total)
}

fn hits(spec: Want, keys: usize, offset: usize) -> Vec<Hit> {
    (0..BATCH)
        .map(|i| Hit::new("bench-rule", format!("group-{}", (offset + i) % keys), spec))
        .collect()
}

/// The cases to run: every case whose name contains one of the words given after `--`
/// (`cargo bench -p klaxon-counter --bench counter -- cold`); all of them when none is given. The raw INCR
/// baselines always run.
fn wanted(case: &str) -> bool {
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    words.is_empty() || words.iter().any(|w| case.contains(w.as_str()))
}

#[tokio::main]
async fn main() {
    let url = klaxon_testkit::redis_url();
    let redis = RedisHandle::connect(&url).await.expect("redis");
    let ns = klaxon_testkit::unique_namespace();
    let counter = WindowCounter::new(redis.clone(), &ns);
    counter.load_scripts().await.unwrap();
    let hour = 3_600_000;
    let specs = [
        (
            "fixed",
            Want::Count {
                threshold: 1_000_000_000,
                period_ms: hour,
                window: Window::Fixed,
            },
        ),
        (
            "sliding (threshold 100)",
            Want::Count {
                threshold: 100,
                period_ms: hour,
                window: Window::Sliding,
            },
        ),
        ("first-seen", Want::FirstSeen),
        (
            "spike (1 h buckets, baseline 24)",
            Want::Spike(klaxon_core::Spike {
                period_ms: hour,
                baseline_windows: 24,
                factor_milli: 5000,
                threshold: 1_000_000,
            }),
        ),
        (
            "spike (1 h buckets, baseline 168)",
            Want::Spike(klaxon_core::Spike {
                period_ms: hour,
                baseline_windows: 168,
                factor_milli: 5000,
                threshold: 1_000_000,
            }),
        ),
        (
            "reappeared (quiet 7 d)",
            Want::Reappeared {
                quiet_period_ms: 7 * 24 * hour,
                armed_at_ms: 0,
                is_new: false,
            },
        ),
    ];
    let mut rows: Vec<Row> = Vec::new();

    // Raw INCR, pipelined the same way (one batch of 1,000 = one pipeline) and one at a time.
    for (label, keys) in [("hot: 50 keys", HOT_KEYS), ("cold: 1,000 keys", BATCH)] {
        let (r, server_us) = measure(&redis, BATCHED_FOR, BATCH, |n| {
            let mut conn = redis.clone();
            let ns = ns.clone();
            async move {
                let mut pipe = redis::pipe();
                for i in 0..BATCH {
                    pipe.cmd("INCR")
                        .arg(format!("{ns}:incr:{}", (n as usize * 7 + i) % keys))
                        .ignore();
                }
                let () = pipe.query_async(&mut conn).await.unwrap();
            }
        })
        .await;
        rows.push(Row {
            case: format!("raw INCR, pipelined batches of 1,000 ({label})"),
            hits_per_s: r,
            server_us,
        });
        for (name, spec) in specs {
            let case = format!("{name}, hit_batch of 1,000 ({label})");
            if !wanted(&case) {
                continue;
            }
            let c = counter.clone();
            let (r, server_us) = measure(&redis, BATCHED_FOR, BATCH, |n| {
                let c = c.clone();
                async move {
                    let batch = hits(spec, keys, n as usize * 7);
                    c.hit_batch(&batch, None).await.unwrap();
                }
            })
            .await;
            rows.push(Row {
                case,
                hits_per_s: r,
                server_us,
            });
        }
    }

    if !wanted("one at a time") {
        print_rows(&redis, &url, &rows);
        if wanted("spike and reappeared memory") {
            signal_memory(&redis, &counter, hour).await;
        }
        return cleanup(&redis, &ns).await;
    }
    let (r, server_us) = measure(&redis, SINGLE_FOR, 1, |n| {
        let mut conn = redis.clone();
        let key = format!("{ns}:incr1:{}", n as usize % HOT_KEYS);
        async move {
            let _: i64 = redis::cmd("INCR").arg(key).query_async(&mut conn).await.unwrap();
        }
    })
    .await;
    rows.push(Row {
        case: "raw INCR, one at a time".into(),
        hits_per_s: r,
        server_us,
    });
    for (name, spec) in specs {
        let c = counter.clone();
        let (r, server_us) = measure(&redis, SINGLE_FOR, 1, |n| {
            let c = c.clone();
            async move {
                let h = Hit::new("bench-rule-1", format!("group-{}", n as usize % HOT_KEYS), spec);
                c.hit(&h, None).await.unwrap();
            }
        })
        .await;
        rows.push(Row {
            case: format!("{name}, hit one at a time"),
            hits_per_s: r,
            server_us,
        });
    }
    // Hawk's notifier: the script text sent with EVAL for every event, one at a time.
    let (r, server_us) = measure(&redis, SINGLE_FOR, 1, |n| {
        let mut conn = redis.clone();
        let key = format!("{ns}:hawk:{}", n as usize % HOT_KEYS);
        async move {
            let now = 1_700_000_000_000_i64 + n as i64;
            let _: i64 = redis::cmd("EVAL")
                .arg(HAWK_STYLE)
                .arg(1)
                .arg(key)
                .arg(now)
                .arg(hour)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    })
    .await;
    rows.push(Row {
        case: "Hawk's way: EVAL with the script text per hit, one at a time".into(),
        hits_per_s: r,
        server_us,
    });

    print_rows(&redis, &url, &rows);
    if wanted("spike and reappeared memory") {
        signal_memory(&redis, &counter, hour).await;
    }
    if !wanted("sliding memory") {
        return cleanup(&redis, &ns).await;
    }
    sliding_memory(&redis, &counter, hour).await;
    cleanup(&redis, &ns).await;
}

fn print_rows(redis: &RedisHandle, url: &str, rows: &[Row]) {
    let incr_hot = rows[0].hits_per_s;
    println!(
        "\nRedis: {} ({})\n",
        if redis.is_cluster() {
            "cluster"
        } else {
            "single node"
        },
        url
    );
    println!(
        "| case | hits/s | × raw pipelined INCR (hot) | × raw pipelined INCR (same keys) | server µs/hit |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut same_keys = incr_hot;
    for row in rows {
        if row.case.starts_with("raw INCR, pipelined") {
            same_keys = row.hits_per_s;
        }
        let server = row.server_us.map_or("–".to_string(), |us| format!("{us:.2}"));
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {server} |",
            row.case,
            row.hits_per_s,
            row.hits_per_s / incr_hot,
            row.hits_per_s / same_keys,
        );
    }
}

/// Memory of a full sliding key (exactly `threshold` members kept), per threshold.
async fn sliding_memory(redis: &RedisHandle, counter: &WindowCounter, hour: u64) {
    // Memory of a full sliding key (exactly `threshold` members kept), per threshold.
    println!("\n| sliding threshold | members kept | encoding | bytes/key, 36-char event ids | bytes/key, no ids | cooldown key bytes |");
    println!("|---:|---:|---|---:|---:|---:|");
    for threshold in [10_u64, 100, 1000] {
        let spec = Want::Count {
            threshold,
            period_ms: hour,
            window: Window::Sliding,
        };
        let mut sizes = Vec::new();
        let mut members: i64 = 0;
        let mut encoding = String::new();
        let mut cooldown = 0;
        for with_ids in [true, false] {
            let rule = format!("mem-{threshold}-{with_ids}");
            let batch: Vec<Hit> = (0..threshold * 2)
                .map(|i| {
                    let h = Hit::new(rule.as_str(), "g", spec);
                    if with_ids {
                        h.with_event_id(format!("{:08x}-4b1e-4f5a-9c3d-{:012x}", i, i * 7919))
                    } else {
                        h
                    }
                })
                .collect();
            counter.hit_batch(&batch, None).await.unwrap();
            let keys = counter.keys_of(&batch[0]);
            let mut conn = redis.clone();
            let bytes: i64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&keys[0])
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut conn)
                .await
                .unwrap();
            members = redis::cmd("ZCARD")
                .arg(&keys[0])
                .query_async(&mut conn)
                .await
                .unwrap();
            encoding = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&keys[0])
                .query_async(&mut conn)
                .await
                .unwrap();
            cooldown = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&keys[1])
                .query_async(&mut conn)
                .await
                .unwrap();
            sizes.push(bytes);
        }
        println!(
            "| {threshold} | {members} | {encoding} | {} | {} | {cooldown} |",
            sizes[0], sizes[1]
        );
    }
}

/// Memory per (rule, group) of a SPIKE key whose ring is full (an event in each of `baselineWindows + 1` buckets),
/// with and without event ids in the current bucket, and of a REAPPEARED mark.
async fn signal_memory(redis: &RedisHandle, counter: &WindowCounter, hour: u64) {
    let usage = |key: String| {
        let mut conn = redis.clone();
        async move {
            let bytes: Option<i64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut conn)
                .await
                .unwrap();
            let encoding: Option<String> = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            (bytes, encoding.unwrap_or_default())
        }
    };
    println!("\n| key | state | keys: encoding bytes | bytes per (rule, group) |");
    println!("|---|---|---|---:|");
    let t0 = 1_700_000_000_000_i64 - 1_700_000_000_000_i64 % hour as i64;
    for windows in [24_u32, 168] {
        let spec = Want::Spike(klaxon_core::Spike {
            period_ms: hour,
            baseline_windows: windows,
            factor_milli: 5000,
            threshold: 1_000_000,
        });
        for ids in [0_usize, 100] {
            let rule = format!("spike-mem-{windows}-{ids}");
            for b in 0..=i64::from(windows) {
                let h = Hit::new(rule.as_str(), "g", spec);
                counter.hit(&h, Some(t0 + b * hour as i64)).await.unwrap();
            }
            let now = t0 + i64::from(windows) * hour as i64 + 1;
            let batch: Vec<Hit> = (0..ids)
                .map(|i| {
                    Hit::new(rule.as_str(), "g", spec).with_event_id(format!(
                        "{:08x}-4b1e-4f5a-9c3d-{:012x}",
                        i,
                        i * 7919
                    ))
                })
                .collect();
            counter.hit_batch(&batch, Some(now)).await.unwrap();
            // every key of the (rule, group) that exists: `MEMORY USAGE` of a missing key is nil
            let mut parts = Vec::new();
            for key in counter.keys_of(&Hit::new(rule.as_str(), "g", spec)) {
                if let (Some(bytes), encoding) = usage(key.clone()).await {
                    let suffix = key.rsplit(':').next().unwrap_or_default().to_owned();
                    parts.push((suffix, bytes, encoding));
                }
            }
            let total: i64 = parts.iter().map(|(_, b, _)| b).sum();
            let keys: Vec<String> = parts.iter().map(|(s, b, e)| format!("`:{s}` {e} {b}")).collect();
            println!(
                "| SPIKE, baselineWindows {windows} | {} buckets held, {ids} event ids (36 chars) in the current one | {} | {total} |",
                windows + 1,
                keys.join(" + ")
            );
        }
    }
    let spec = Want::Reappeared {
        quiet_period_ms: 7 * 24 * hour,
        armed_at_ms: 0,
        is_new: false,
    };
    let h = Hit::new("reappeared-mem", "g", spec).with_event_id("8c1e0f3a-4b1e-4f5a-9c3d-0000000001f7");
    counter.hit(&h, Some(t0)).await.unwrap();
    counter
        .hit(
            &h.clone().with_event_id("8c1e0f3a-4b1e-4f5a-9c3d-0000000002f7"),
            Some(t0 + 8 * 24 * hour as i64),
        )
        .await
        .unwrap();
    let (bytes, encoding) = usage(counter.keys_of(&h)[0].clone()).await;
    let bytes = bytes.unwrap_or_default();
    println!(
        "| REAPPEARED | last seen and a reappearance (36-char event id) | `:rp` {encoding} {bytes} | {bytes} |"
    );
}

/// Leaves nothing behind.
async fn cleanup(redis: &RedisHandle, ns: &str) {
    let mut conn = redis.clone();
    if !redis.is_cluster() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{ns}:*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        for chunk in keys.chunks(500) {
            let _: i64 = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await.unwrap();
        }
    }
}
