//! The counting engine against real Redis, single node and cluster, with injected time.

mod common;

use common::{counted, fixed, hit, on_both, sliding, Env};
use klaxon_core::Want;
use klaxon_counter::{CounterError, Hit, Outcome, RedisHandle, WindowCounter};

const T0: i64 = 1_700_000_000_000;
const MINUTE: i64 = 60_000;

fn fired_count(outcomes: &[Outcome]) -> usize {
    outcomes.iter().filter(|o| o.is_fired()).count()
}

// --- The case that made Hawk's author want a sliding window -------------------------------------------

async fn hawk_case(env: Env) {
    // Rule: 1000 events in 2 minutes. Minute 1: 1 event; minute 2: 900; minute 3: 900.
    let mut times = vec![T0];
    times.extend((0..900).map(|i| T0 + MINUTE + i * 60));
    times.extend((0..900).map(|i| T0 + 2 * MINUTE + i * 60));
    for (spec, want) in [
        (fixed(1000, 2 * MINUTE as u64), 0),
        (sliding(1000, 2 * MINUTE as u64), 1),
    ] {
        let h = Hit::new("rule", "flood", spec);
        let mut outcomes = Vec::new();
        for &t in &times {
            outcomes.push(hit(&env, &h, t).await);
        }
        assert_eq!(fired_count(&outcomes), want, "[{}] {spec:?}", env.topology);
        if want == 1 {
            // Sliding fires on the 100th event of minute 3: 900 of minute 2 + 100 in the trailing window.
            let at = outcomes.iter().position(Outcome::is_fired).expect("fired");
            assert_eq!(at, 1 + 900 + 99, "[{}]", env.topology);
        }
    }
}

#[tokio::test]
async fn hawk_case_fixed_never_fires_sliding_fires_once() {
    on_both(hawk_case).await;
}

// --- Fixed window --------------------------------------------------------------------------------------

async fn fixed_counts_and_fires_on_equal(env: Env) {
    let period = 10_000;
    let h = Hit::new("r", "g", fixed(5, period));
    let mut got = Vec::new();
    for i in 0..7 {
        got.push(hit(&env, &h, T0 + i).await);
    }
    let fired = Outcome::Fired {
        count: 5,
        firing: T0.to_string(),
        at_ms: T0 + 4,
        signal: None,
    };
    assert_eq!(
        got,
        vec![
            counted(1),
            counted(2),
            counted(3),
            counted(4),
            fired,
            counted(6),
            counted(7)
        ],
        "[{}]",
        env.topology
    );

    // The key expires when the window ends, on the server's clock.
    let key = &env.counter.keys_of(&h)[0];
    let pttl: i64 = env.query(redis::cmd("PTTL").arg(key)).await;
    assert!(
        pttl > 0 && pttl <= period as i64,
        "[{}] pttl {pttl}",
        env.topology
    );

    // Still the same window 1 ms before its end; a new one, starting at 1, at its end.
    assert_eq!(
        hit(&env, &h, T0 + period as i64 - 1).await,
        counted(8),
        "[{}]",
        env.topology
    );
    assert_eq!(
        hit(&env, &h, T0 + period as i64).await,
        counted(1),
        "[{}]",
        env.topology
    );
}

#[tokio::test]
async fn fixed_first_count_is_one_fires_on_equal_and_restarts_after_period() {
    on_both(fixed_counts_and_fires_on_equal).await;
}

async fn fixed_threshold_change_cannot_fire_twice(env: Env) {
    let mut outcomes = Vec::new();
    for i in 0..3 {
        outcomes.push(hit(&env, &Hit::new("r", "g", fixed(3, 60_000)), T0 + i).await);
    }
    assert!(outcomes[2].is_fired(), "[{}] {outcomes:?}", env.topology);
    // The rule is edited to a higher threshold, then back to a lower one, inside the same window.
    for i in 3..6 {
        let o = hit(&env, &Hit::new("r", "g", fixed(5, 60_000)), T0 + i).await;
        assert_eq!(o, counted(i as u64 + 1), "[{}]", env.topology);
    }
    let o = hit(&env, &Hit::new("r", "g", fixed(7, 60_000)), T0 + 10).await;
    assert_eq!(o, counted(7), "[{}] the window already fired", env.topology);
}

#[tokio::test]
async fn fixed_threshold_change_cannot_make_a_window_fire_twice() {
    on_both(fixed_threshold_change_cannot_fire_twice).await;
}

/// On the server's clock (how workers count) hits without event ids take the script's short path (one
/// HINCRBY per key): the same answers as the full path — counts from 1, one firing on the hit that makes the
/// count equal the threshold with the window start as token, no second firing after a threshold change,
/// a new window once the key expires — and hits with ids on the same key share its window.
async fn fixed_on_the_server_clock(env: Env) {
    let period = 400;
    let h = Hit::new("r", "clock", fixed(3, period));
    let before = env.counter.server_time_ms().await.expect("time");
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(env.counter.hit(&h, None).await.expect("hit"));
    }
    let after = env.counter.server_time_ms().await.expect("time");
    assert_eq!(got[..2], [counted(1), counted(2)], "[{}]", env.topology);
    assert_eq!(got[3], counted(4), "[{}]", env.topology);
    let Outcome::Fired {
        count, firing, at_ms, ..
    } = &got[2]
    else {
        panic!("[{}] the third hit fires: {got:?}", env.topology);
    };
    assert_eq!(*count, 3, "[{}]", env.topology);
    let start: i64 = firing.parse().expect("token is the window start");
    assert!(
        before <= start && start <= *at_ms && *at_ms <= after,
        "[{}] {before} {start} {at_ms} {after}",
        env.topology
    );
    // An event with an id joins the same window, and so does a batch crossing a higher threshold: the window
    // has fired, so nothing fires again.
    let with_id = env
        .counter
        .hit(&h.clone().with_event_id("e1"), None)
        .await
        .expect("hit");
    assert_eq!(with_id, counted(5), "[{}]", env.topology);
    let higher = Hit::new("r", "clock", fixed(7, period));
    let out = env
        .counter
        .hit_batch(&[higher.clone(), higher.clone(), higher], None)
        .await
        .expect("batch");
    assert_eq!(
        out,
        vec![counted(6), counted(7), counted(8)],
        "[{}]",
        env.topology
    );
    // The window ends with its key; the next hit opens a new one, and a batch crossing inside one call fires
    // on exactly its third hit.
    let key = env.counter.keys_of(&h)[0].clone();
    let pttl: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    assert!(
        pttl > 0 && pttl <= period as i64,
        "[{}] pttl {pttl}",
        env.topology
    );
    tokio::time::sleep(std::time::Duration::from_millis(period + 50)).await;
    let out = env
        .counter
        .hit_batch(&[h.clone(), h.clone(), h.clone(), h], None)
        .await
        .expect("batch");
    assert_eq!(
        out.iter().map(Outcome::is_fired).collect::<Vec<_>>(),
        [false, false, true, false],
        "[{}] {out:?}",
        env.topology
    );
    assert_eq!(out[3], counted(4), "[{}]", env.topology);
}

#[tokio::test]
async fn fixed_on_the_server_clock_counts_fires_once_and_ends_with_its_key() {
    on_both(fixed_on_the_server_clock).await;
}

async fn fixed_redelivered_firing_fires_again(env: Env) {
    let spec = fixed(3, 60_000);
    let ev = |id: &str| Hit::new("r", "g", spec).with_event_id(id);
    assert_eq!(hit(&env, &ev("e1"), T0).await, counted(1));
    assert_eq!(hit(&env, &ev("e2"), T0 + 1).await, counted(2));
    let first = hit(&env, &ev("e3"), T0 + 2).await;
    assert!(first.is_fired(), "[{}] {first:?}", env.topology);
    // The worker crashed before publishing: e3 comes again, later. Same firing, not counted again.
    let again = hit(&env, &ev("e3"), T0 + 500).await;
    assert_eq!(again, first, "[{}]", env.topology);
    // Other redelivered events are recognised too: answered with the count they got, not counted again.
    assert_eq!(
        hit(&env, &ev("e2"), T0 + 600).await,
        counted(2),
        "[{}]",
        env.topology
    );
    assert_eq!(hit(&env, &ev("e4"), T0 + 650).await, counted(4));
    // Without an event id nothing is recognised: each hit counts.
    assert_eq!(hit(&env, &Hit::new("r", "g", spec), T0 + 700).await, counted(5));
    assert_eq!(hit(&env, &Hit::new("r", "g", spec), T0 + 710).await, counted(6));
}

/// A batch retried whole (Redis ran the script, the reply was lost) counts nothing twice when its events carry
/// ids, also inside one call (a batch holding the same event twice); the ids kept are bounded per window and
/// expire with it.
async fn fixed_retried_batch_counts_once(env: Env) {
    let spec = fixed(50, 60_000);
    let batch: Vec<Hit> = (0..20)
        .map(|i| Hit::new("r", "g", spec).with_event_id(format!("m{i}")))
        .collect();
    let first = env.counter.hit_batch(&batch, Some(T0)).await.expect("batch");
    assert_eq!(first.last(), Some(&counted(20)), "[{}]", env.topology);
    let retried = env
        .counter
        .hit_batch(&batch, Some(T0 + 100))
        .await
        .expect("batch");
    assert_eq!(retried, first, "[{}] the retry counts nothing", env.topology);
    let twice = vec![Hit::new("r", "g", spec).with_event_id("d"); 2];
    let o = env
        .counter
        .hit_batch(&twice, Some(T0 + 200))
        .await
        .expect("batch");
    assert_eq!(o, vec![counted(21), counted(21)], "[{}]", env.topology);
    // bounded: after 2,000 more ids the window still remembers the most recent 1,024 (their redelivery counts
    // nothing), holds at most 2,048, and its ids expire with it
    let many: Vec<Hit> = (0..2000)
        .map(|i| Hit::new("r", "g", fixed(1_000_000, 60_000)).with_event_id(format!("x{i}")))
        .collect();
    let counted_many = env.counter.hit_batch(&many, Some(T0 + 300)).await.expect("batch");
    let recent = &many[2000 - 1024..];
    let again = env
        .counter
        .hit_batch(recent, Some(T0 + 400))
        .await
        .expect("batch");
    assert_eq!(
        again,
        counted_many[2000 - 1024..],
        "[{}] the recent ids are remembered",
        env.topology
    );
    let key = env.counter.keys_of(&batch[0])[0].clone();
    let mut conn = env.counter.redis().clone();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("hkeys");
    let ids = fields.iter().filter(|f| f.starts_with("i:")).count();
    assert!((1024..=2048).contains(&ids), "[{}] {ids} ids kept", env.topology);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("pttl");
    assert!(ttl > 0 && ttl <= 60_000, "[{}] ttl {ttl}", env.topology);
}

#[tokio::test]
async fn fixed_retried_batch_with_event_ids_counts_once() {
    on_both(fixed_retried_batch_counts_once).await;
}

#[tokio::test]
async fn fixed_redelivered_firing_event_fires_again_with_the_same_token() {
    on_both(fixed_redelivered_firing_fires_again).await;
}

// --- Sliding window ------------------------------------------------------------------------------------

async fn sliding_fires_once_then_after_cooldown(env: Env) {
    let period = 10_000_i64;
    let h = Hit::new("r", "g", sliding(3, period as u64));
    let keys = env.counter.keys_of(&h);
    let mut firings = Vec::new();
    // One event per second for 25 s: fires at the 3rd (t=2 s), then at the end of each cooldown.
    for s in 0..25 {
        let t = T0 + s * 1000;
        let o = hit(&env, &h, t).await;
        if let Outcome::Fired {
            firing, at_ms, count, ..
        } = &o
        {
            assert_eq!(firing, &at_ms.to_string());
            assert_eq!(*count, 3);
            firings.push(*at_ms);
        }
        let card: u64 = env.query(redis::cmd("ZCARD").arg(&keys[0])).await;
        assert!(
            card <= 3,
            "[{}] {card} members kept for threshold 3",
            env.topology
        );
    }
    assert_eq!(
        firings,
        vec![T0 + 2000, T0 + 12_000, T0 + 22_000],
        "[{}]",
        env.topology
    );
    let pttl_set: i64 = env.query(redis::cmd("PTTL").arg(&keys[0])).await;
    let pttl_cd: i64 = env.query(redis::cmd("PTTL").arg(&keys[1])).await;
    assert!(
        pttl_set > 0 && pttl_set <= period,
        "[{}] {pttl_set}",
        env.topology
    );
    assert!(pttl_cd > 0 && pttl_cd <= period, "[{}] {pttl_cd}", env.topology);
}

#[tokio::test]
async fn sliding_fires_at_crossing_not_in_cooldown_and_again_after_it() {
    on_both(sliding_fires_once_then_after_cooldown).await;
}

async fn sliding_does_not_fire_when_rate_drops(env: Env) {
    // 3 per 10 s, but events 6 s apart: never 3 in a trailing 10 s window... until two come close.
    let h = Hit::new("r", "g", sliding(3, 10_000));
    let mut outcomes = Vec::new();
    for i in 0..6 {
        outcomes.push(hit(&env, &h, T0 + i * 6000).await);
    }
    assert_eq!(fired_count(&outcomes), 0, "[{}] {outcomes:?}", env.topology);
    assert_eq!(outcomes[5], counted(2), "[{}]", env.topology);
    // An event exactly `period` after another no longer sees it.
    assert!(
        hit(&env, &h, T0 + 5 * 6000 + 1).await.is_fired(),
        "[{}]",
        env.topology
    );
}

#[tokio::test]
async fn sliding_counts_only_the_trailing_window() {
    on_both(sliding_does_not_fire_when_rate_drops).await;
}

async fn sliding_memory_bounded_by_threshold(env: Env) {
    let h = Hit::new("r", "g", sliding(100, 60_000));
    let key = &env.counter.keys_of(&h)[0];
    // 2,000 events in batches of 200, some with long ids (digested to keep entries short).
    for b in 0..10 {
        let batch: Vec<Hit> = (0..200)
            .map(|i| {
                let id = format!("{}-{b}-{i}", "event".repeat(if i % 2 == 0 { 1 } else { 20 }));
                h.clone().with_event_id(id)
            })
            .collect();
        let out = env.counter.hit_batch(&batch, Some(T0 + b)).await.expect("batch");
        assert!(out.iter().all(|o| o.count() <= 100), "[{}]", env.topology);
        let card: u64 = env.query(redis::cmd("ZCARD").arg(key)).await;
        assert_eq!(card, 100, "[{}]", env.topology);
    }
    let encoding: String = env.query(redis::cmd("OBJECT").arg("ENCODING").arg(key)).await;
    assert_eq!(
        encoding, "listpack",
        "[{}] threshold 100 must stay compact",
        env.topology
    );
}

#[tokio::test]
async fn sliding_keeps_at_most_threshold_members_in_compact_encoding() {
    on_both(sliding_memory_bounded_by_threshold).await;
}

async fn sliding_redelivery_not_double_counted(env: Env) {
    let spec = sliding(3, 60_000);
    let ev = |id: &str| Hit::new("r", "g", spec).with_event_id(id);
    assert_eq!(hit(&env, &ev("e1"), T0).await, counted(1));
    assert_eq!(
        hit(&env, &ev("e1"), T0 + 1).await,
        counted(1),
        "[{}] redelivered",
        env.topology
    );
    assert_eq!(hit(&env, &ev("e2"), T0 + 2).await, counted(2));
    let fired = hit(&env, &ev("e3"), T0 + 3).await;
    assert_eq!(
        fired,
        Outcome::Fired {
            count: 3,
            firing: (T0 + 3).to_string(),
            at_ms: T0 + 3,
            signal: None,
        },
        "[{}]",
        env.topology
    );
    assert_eq!(
        hit(&env, &ev("e3"), T0 + 900).await,
        fired,
        "[{}] same firing",
        env.topology
    );
    assert_eq!(
        hit(&env, &ev("e4"), T0 + 901).await,
        counted(3),
        "[{}] cooldown",
        env.topology
    );
    // A redelivered event that did not fire does not fire after the cooldown either; a new one does.
    let after = T0 + 3 + 60_000;
    assert_eq!(hit(&env, &ev("e5"), after - 10).await, counted(3));
    assert_eq!(hit(&env, &ev("e7"), after - 5).await, counted(3));
    // The cooldown has ended and 3 events are in the window, but e5 was already counted: no firing.
    assert_eq!(
        hit(&env, &ev("e5"), after).await,
        counted(3),
        "[{}]",
        env.topology
    );
    assert!(
        hit(&env, &ev("e6"), after + 1).await.is_fired(),
        "[{}]",
        env.topology
    );
    // An event id that starts like a made-up member (`~`) is still recognised when redelivered.
    let tilde = Hit::new("r", "tilde", spec).with_event_id("~0123456789abcdef");
    assert_eq!(hit(&env, &tilde, T0).await, counted(1), "[{}]", env.topology);
    assert_eq!(
        hit(&env, &tilde, T0 + 1).await,
        counted(1),
        "[{}] redelivered",
        env.topology
    );
}

#[tokio::test]
async fn sliding_redelivered_event_is_not_counted_twice() {
    on_both(sliding_redelivery_not_double_counted).await;
}

// --- First seen ----------------------------------------------------------------------------------------

async fn first_seen_once(env: Env) {
    let ev = |id: &str| Hit::new("r", "g", Want::FirstSeen).with_event_id(id);
    let first = hit(&env, &ev("new-1"), T0).await;
    assert_eq!(
        first,
        Outcome::Fired {
            count: 1,
            firing: "new".into(),
            at_ms: T0,
            signal: None,
        },
        "[{}]",
        env.topology
    );
    assert_eq!(
        hit(&env, &ev("new-1"), T0 + 5000).await,
        first,
        "[{}] redelivery",
        env.topology
    );
    assert_eq!(
        hit(&env, &ev("other"), T0 + 6000).await,
        counted(0),
        "[{}]",
        env.topology
    );
    let anonymous = Hit::new("r", "g", Want::FirstSeen);
    assert_eq!(
        hit(&env, &anonymous, T0 + 7000).await,
        counted(0),
        "[{}]",
        env.topology
    );
    // Another group and another rule are independent.
    assert!(hit(&env, &Hit::new("r", "g2", Want::FirstSeen), T0)
        .await
        .is_fired());
    assert!(hit(&env, &Hit::new("r2", "g", Want::FirstSeen), T0)
        .await
        .is_fired());

    let pttl: i64 = env
        .query(redis::cmd("PTTL").arg(&env.counter.keys_of(&ev("x"))[0]))
        .await;
    let ttl = klaxon_counter::DEFAULT_FIRST_SEEN_TTL.as_millis() as i64;
    assert!(pttl > ttl - 60_000 && pttl <= ttl, "[{}] {pttl}", env.topology);
}

#[tokio::test]
async fn first_seen_fires_once_and_again_only_for_the_redelivered_event() {
    on_both(first_seen_once).await;
}

// --- Concurrency and batching --------------------------------------------------------------------------

async fn concurrent_exactly_one(env: Env) {
    for spec in [fixed(5000, 600_000), sliding(5000, 600_000)] {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let counter = env.counter.clone();
                tokio::spawn(async move {
                    let h = Hit::new("hot", "flood", spec);
                    let mut fired = 0;
                    for _ in 0..1000 {
                        // Server time: the tasks race on the real clock, as workers do.
                        if counter.hit(&h, None).await.expect("hit").is_fired() {
                            fired += 1;
                        }
                    }
                    fired
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.expect("task");
        }
        assert_eq!(total, 1, "[{}] {spec:?}", env.topology);
    }
}

#[tokio::test]
async fn eight_concurrent_tasks_on_one_key_fire_exactly_once() {
    on_both(concurrent_exactly_one).await;
}

/// 10,000 hits over 50 keys (fixed, sliding and first-seen), some with event ids and redeliveries.
fn mixed_hits() -> Vec<Hit> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..10_000)
        .map(|i| {
            let k = next() % 50;
            let spec = match k % 5 {
                0 => Want::FirstSeen,
                1 | 2 => fixed(20 + k * 3, 60_000),
                _ => sliding(20 + k * 3, 60_000),
            };
            let h = Hit::new(format!("rule{}", k % 7), format!("group{k}"), spec);
            match next() % 4 {
                0 => h,
                1 => h.with_event_id(format!("ev{}", next() % 2000)),
                _ => h.with_event_id(format!("ev-{i}")),
            }
        })
        .collect()
}

async fn batch_equals_singles(env: Env) {
    let hits = mixed_hits();
    let batched = env.counter.hit_batch(&hits, Some(T0)).await.expect("batch");
    let singles_counter = WindowCounter::new(env.redis.clone(), &format!("{}_singles", env.ns));
    let mut singles = Vec::with_capacity(hits.len());
    for h in &hits {
        singles.push(singles_counter.hit(h, Some(T0)).await.expect("single"));
    }
    assert_eq!(batched.len(), hits.len());
    let firings = fired_count(&batched);
    assert!(
        firings >= 40,
        "[{}] the mix should fire on most keys, got {firings}",
        env.topology
    );
    for (i, (b, s)) in batched.iter().zip(&singles).enumerate() {
        assert_eq!(b, s, "[{}] hit {i}: {:?}", env.topology, hits[i]);
    }
}

#[tokio::test]
async fn a_batch_gives_the_same_outcomes_as_single_calls() {
    on_both(batch_equals_singles).await;
}

async fn batch_reports_which_hit_crossed(env: Env) {
    // One hot key in one batch: one script call, and exactly the 7th hit fires.
    let h = Hit::new("r", "hot", fixed(7, 60_000));
    let cold = Hit::new("r", "cold", fixed(7, 60_000));
    let mut batch: Vec<Hit> = (0..10).map(|_| h.clone()).collect();
    batch.insert(3, cold);
    let out = env.counter.hit_batch(&batch, None).await.expect("batch");
    let fired: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, o)| o.is_fired())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(fired, vec![7], "[{}] {out:?}", env.topology);
    assert_eq!(out[3], counted(1));
    assert_eq!(out[10], counted(10));
    assert!(env.counter.hit_batch(&[], None).await.expect("empty").is_empty());

    // More keys than one script call takes (128): split over several calls, still one outcome each.
    let many: Vec<Hit> = (0..300)
        .flat_map(|k| {
            let h = Hit::new("r", format!("many{k}"), fixed(2, 60_000));
            [h.clone(), h]
        })
        .collect();
    let out = env.counter.hit_batch(&many, Some(T0)).await.expect("many");
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.is_fired(), i % 2 == 1, "[{}] hit {i}: {o:?}", env.topology);
    }
}

#[tokio::test]
async fn a_coalesced_batch_reports_which_hit_crossed() {
    on_both(batch_reports_which_hit_crossed).await;
}

// --- Connection ----------------------------------------------------------------------------------------

async fn handle_runs_other_commands_and_server_time(env: Env) {
    let key = format!("{}:{{other}}:x", env.ns);
    let _: () = env
        .query(redis::cmd("SET").arg(&key).arg("v").arg("PX").arg(10_000))
        .await;
    let v: String = env.query(redis::cmd("GET").arg(&key)).await;
    assert_eq!(v, "v");
    let now = env.counter.server_time_ms().await.expect("time");
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert!((now - local).abs() < 5000, "[{}] {now} vs {local}", env.topology);
    // Outcomes stamped with server time are near it.
    let o = env
        .counter
        .hit(&Hit::new("r", "t", Want::FirstSeen), None)
        .await
        .expect("hit");
    match o {
        Outcome::Fired { at_ms, .. } => assert!((at_ms - now).abs() < 5000),
        other => panic!("[{}] {other:?}", env.topology),
    }
    assert!(!format!("{:?}", env.redis).contains("redis://"));
}

#[tokio::test]
async fn the_handle_runs_other_commands_and_tells_server_time() {
    on_both(handle_runs_other_commands_and_server_time).await;
}

#[tokio::test]
async fn lost_scripts_are_reloaded() {
    // SCRIPT FLUSH is only done on the test cluster: the single node is shared with other test suites.
    let url = klaxon_testkit::redis_cluster_url();
    let redis = RedisHandle::connect(&url).await.expect("cluster");
    let counter = WindowCounter::new(redis.clone(), &klaxon_testkit::unique_namespace());
    counter.load_scripts().await.expect("load");
    let hits: Vec<Hit> = (0..20)
        .map(|i| Hit::new("r", format!("g{i}"), fixed(2, 60_000)))
        .collect();
    let first = counter.hit_batch(&hits, Some(T0)).await.expect("first");
    assert!(first.iter().all(|o| *o == counted(1)));
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut redis.clone())
        .await
        .expect("flush");
    let second = counter.hit_batch(&hits, Some(T0 + 1)).await.expect("after flush");
    assert_eq!(fired_count(&second), 20, "each call ran exactly once: {second:?}");
}

#[tokio::test]
async fn bad_urls_are_permanent_and_unreachable_servers_transient() {
    let bad = RedisHandle::connect("not a url").await.expect_err("bad url");
    assert!(
        matches!(bad, CounterError::InvalidUrl(_)) && !bad.is_transient(),
        "{bad:?}"
    );
    let empty = RedisHandle::connect(" , ").await.expect_err("empty");
    assert!(!empty.is_transient());
    let down = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        RedisHandle::connect("redis://:secretpw@127.0.0.1:1/"),
    )
    .await
    .expect("bounded")
    .expect_err("nothing listens on port 1");
    assert!(down.is_transient(), "{down:?}");
    assert!(!down.to_string().contains("secretpw"));
}

#[test]
fn is_new_is_read_from_a_reappeared_want_only() {
    let quiet = Want::Reappeared {
        quiet_period_ms: 1000,
        armed_at_ms: 7,
        is_new: false,
    };
    // (want, with_new, is_new afterwards)
    let cases = [
        (quiet, true, true),
        (quiet, false, false),
        (Want::FirstSeen, true, false),
        (fixed(5, 1000), true, false),
    ];
    for (want, new, is_new) in cases {
        let hit = Hit::new("r", "g", want).with_new(new);
        assert_eq!(hit.is_new(), is_new, "{want:?}");
        assert!(!Hit::new("r", "g", want).is_new(), "{want:?}");
    }
}

// --- Keys -----------------------------------------------------------------------------------------------

/// A rule id that two projects share (a copied document) shares neither windows nor first-seen marks; one
/// project's keys are the same however its id is spelled.
async fn projects_never_share_windows(env: Env) {
    let spec = fixed(2, 60_000);
    let a = Hit::new("r", "g", spec).with_project("5e3eef0679fa3700a0198a49");
    let b = Hit::new("r", "g", spec).with_project("65a000000000000000000001");
    assert!(!hit(&env, &a, T0).await.is_fired());
    assert!(
        !hit(&env, &b, T0 + 1).await.is_fired(),
        "b's first event is b's first"
    );
    assert!(hit(&env, &a, T0 + 2).await.is_fired(), "a's second event fires a");
    let upper = Hit::new("r", "g", spec).with_project("5E3EEF0679FA3700A0198A49");
    assert_eq!(env.counter.keys_of(&upper), env.counter.keys_of(&a));
    assert_ne!(env.counter.keys_of(&a), env.counter.keys_of(&b));
    let new_a = Hit::new("r", "n", Want::FirstSeen).with_project("5e3eef0679fa3700a0198a49");
    let new_b = Hit::new("r", "n", Want::FirstSeen).with_project("65a000000000000000000001");
    assert!(hit(&env, &new_a, T0).await.is_fired());
    assert!(
        hit(&env, &new_b, T0).await.is_fired(),
        "b's first occurrence is b's to notify"
    );
    for key in env.counter.keys_of(&a) {
        assert!(key.contains("{5e3eef0679fa3700a0198a49:r:g}"), "{key}");
    }
}

#[tokio::test]
async fn a_rule_id_shared_by_two_projects_shares_no_window() {
    on_both(projects_never_share_windows).await;
}
