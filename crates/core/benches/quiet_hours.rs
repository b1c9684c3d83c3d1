//! What quiet hours cost a firing, in one run: the core's part of a firing (its tasks on four channels, each
//! routed: `NotificationTask::for_firing` + `route::route`) for a rule without quiet hours, with 21 windows that
//! cover the week and follow on from each other (the worst case: every firing is held, and the quiet chains
//! through the whole week), and the same 21 windows computed per firing as before #42
//! (`QuietHours::chained_window_at`, for the record).
//!
//! `cargo bench -p klaxon-core --bench quiet_hours`. Prints a Markdown table and the ratio; exits 1 when 21
//! windows cost more than twice none (issue #42's bound).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use klaxon_core::route::{route, Output};
use klaxon_core::{parse_rule_value, CompiledRule, Event, EventTask, Firing, NotificationTask, Want};
use serde_json::json;

/// How long each case runs.
const RUN_FOR: Duration = Duration::from_secs(2);
/// 2026-11-23 00:00 UTC, a Monday.
const MONDAY_MS: i64 = 1_795_392_000_000;
const WEEK_MS: i64 = 7 * 24 * 3_600_000;

fn rule(quiet: Option<serde_json::Value>) -> CompiledRule {
    let mut value = json!({
        "_id": {"$oid": "5e3eef0679fa3700a0198a4a"},
        "isEnabled": true,
        "whatToReceive": "ONLY_NEW",
        "channels": {
            "webhook": {"isEnabled": true, "endpoint": "https://hooks.example.com/w", "minPeriod": 0},
            "email": {"isEnabled": true, "endpoint": "ops@example.com", "minPeriod": 0},
            "slack": {"isEnabled": true, "endpoint": "https://hooks.slack.com/services/T/B/x", "minPeriod": 0},
            "pagerduty": {"isEnabled": true, "endpoint": "0123456789abcdef0123456789abcdef", "minPeriod": 0}
        },
    });
    if let Some(quiet) = quiet {
        value["quietHours"] = quiet;
    }
    let (rule, problems) = parse_rule_value(&value).expect("a rule");
    assert!(problems.is_empty(), "{problems:?}");
    rule
}

/// 21 windows: every day 00:00-08:00, 08:00-16:00 and 16:00-24:00 in Berlin (they follow on from each other).
fn week_of_windows() -> serde_json::Value {
    let mut out = Vec::new();
    for (from, to) in [("00:00", "08:00"), ("08:00", "16:00"), ("16:00", "24:00")] {
        for day in ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] {
            out.push(json!({"days": [day], "from": from, "to": to, "timezone": "Europe/Berlin"}));
        }
    }
    serde_json::Value::Array(out)
}

/// Firings per second of `fire` (one firing at the i-th moment), run for [`RUN_FOR`].
fn measure(mut fire: impl FnMut(i64) -> usize) -> f64 {
    let mut held = 0usize;
    for i in 0..1_000 {
        held += fire(i);
    }
    let start = Instant::now();
    let mut n: i64 = 0;
    while start.elapsed() < RUN_FOR {
        for _ in 0..1_000 {
            held += fire(n);
            n += 1;
        }
    }
    black_box(held);
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let task = EventTask {
        project_id: "5e3eef0679fa3700a0198a49".into(),
        event: Event {
            title: "TypeError: x is undefined".into(),
            group_hash: "11da44f2".into(),
            is_new: true,
            repetition_id: None,
            timestamp: None,
            user: None,
        },
    };
    // moments spread over two weeks (a prime step), so firings land inside and across the windows
    let at = |i: i64| MONDAY_MS + (i * 7_919_000) % (2 * WEEK_MS);
    let fire = |rule: &CompiledRule, i: i64| {
        let f = Firing {
            task: &task,
            project_name: None,
            rule,
            want: Want::FirstSeen,
            count: 1,
            firing: "w1",
            at_ms: at(i),
            signal: None,
        };
        let tasks = NotificationTask::for_firing(&f).tasks;
        tasks
            .iter()
            .filter(|t| route(t, Some(rule), Output::Klaxon, at(i)) != klaxon_core::route::Route::Now)
            .count()
    };
    let none = rule(None);
    let windows = rule(Some(week_of_windows()));
    assert_eq!(windows.quiet_hours.windows.len(), 21);
    let chained = |i: i64| {
        // before #42: every firing computed the windows' chain, once per channel
        let mut held = fire(&none, i);
        for _ in 0..4 {
            held += usize::from(windows.quiet_hours.chained_window_at(at(i)).is_some());
        }
        held
    };
    let rows = [
        ("no quiet hours", measure(|i| fire(&none, i))),
        (
            "21 windows (spans, once per rule version)",
            measure(|i| fire(&windows, i)),
        ),
        ("21 windows computed per firing (before #42)", measure(chained)),
    ];
    println!("| case | firings/s | µs per firing |");
    println!("|---|---|---|");
    for (case, per_s) in rows {
        println!("| {case} | {per_s:.0} | {:.2} |", 1e6 / per_s);
    }
    let ratio = rows[0].1 / rows[1].1;
    let before = rows[0].1 / rows[2].1;
    println!("\n21 windows cost {ratio:.2}× none (before #42: {before:.1}×); bound 2×");
    if ratio > 2.0 {
        std::process::exit(1);
    }
}
