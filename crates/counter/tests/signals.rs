//! SPIKE (`lua/spike.lua`) and REAPPEARED (`lua/reappeared.lua`) against real Redis, single node and cluster:
//! once per bucket / reappearance, also under concurrent batches and when a batch with event ids is retried.

mod common;

use common::{on_both, Env};
use klaxon_core::{Baseline, Signal, Spike, Want};
use klaxon_counter::{reappeared_ttl_ms, Hit, Outcome};

const T0: i64 = 1_700_000_000_000;
/// A bucket of 10 s; T0 is a bucket start.
const B: i64 = 10_000;

fn spike(windows: u32, factor_milli: u32, threshold: u64) -> Want {
    Want::Spike(Spike {
        period_ms: B as u64,
        baseline_windows: windows,
        factor_milli,
        threshold,
    })
}

fn reappeared(quiet: u64, armed_at_ms: i64) -> Want {
    Want::Reappeared {
        quiet_period_ms: quiet,
        armed_at_ms,
        is_new: false,
    }
}

async fn batch(env: &Env, hits: &[Hit], now: Option<i64>) -> Vec<Outcome> {
    match env.counter.hit_batch(hits, now).await {
        Ok(o) => o,
        Err(e) => panic!("[{}] batch failed: {e}", env.topology),
    }
}

/// `n` hits of one group in one batch, ids `<prefix>-<i>` (or none).
fn hits(spec: Want, group: &str, n: usize, ids: Option<&str>) -> Vec<Hit> {
    (0..n)
        .map(|i| {
            let h = Hit::new("rule", group, spec).with_project("p");
            match ids {
                Some(p) => h.with_event_id(format!("{p}-{i}")),
                None => h,
            }
        })
        .collect()
}

fn fired(outcomes: &[Outcome]) -> Vec<usize> {
    outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| o.is_fired())
        .map(|(i, _)| i)
        .collect()
}

async fn spike_steady_then_burst(env: Env) {
    let t = env.topology;
    let s = spike(3, 5000, 10);
    // the group's first bucket: 40 events, no baseline, no firing however many
    let o = batch(&env, &hits(s, "g", 40, None), Some(T0 + 5)).await;
    assert!(fired(&o).is_empty(), "[{t}] a first bucket never fires: {o:?}");
    assert_eq!(o[39], Outcome::Counted { count: 40 });
    // a steady 4 per bucket for two buckets, then an empty bucket: baseline (4 + 4 + 0) / 3 → 5 × 8/3 = 13.3 → 14
    for k in 1..=2 {
        let o = batch(&env, &hits(s, "g", 4, None), Some(T0 + k * B)).await;
        assert!(fired(&o).is_empty(), "[{t}] steady bucket {k}: {o:?}");
    }
    let o = batch(&env, &hits(s, "g", 20, None), Some(T0 + 4 * B + 1)).await;
    assert_eq!(
        fired(&o),
        vec![13],
        "[{t}] the 14th event of bucket 4 fires: {o:?}"
    );
    match &o[13] {
        Outcome::Fired {
            count,
            firing,
            at_ms,
            signal,
        } => {
            assert_eq!(*count, 14, "[{t}]");
            assert_eq!(
                firing,
                &(T0 + 4 * B).to_string(),
                "[{t}] the bucket start is the token"
            );
            assert_eq!(*at_ms, T0 + 4 * B + 1, "[{t}]");
            assert_eq!(
                *signal,
                Some(Signal::Spike(Baseline {
                    sum: 8,
                    buckets: 3,
                    needed: 14
                })),
                "[{t}]"
            );
        }
        other => panic!("[{t}] {other:?}"),
    }
    assert_eq!(o[19], Outcome::Counted { count: 20 }, "[{t}] once per bucket");
    // the same bucket later: no second firing
    let o = batch(&env, &hits(s, "g", 100, None), Some(T0 + 5 * B - 1)).await;
    assert!(fired(&o).is_empty(), "[{t}] {o:?}");
    // the next bucket's baseline holds the burst (4 + 0 + 120) / 3 → 5 × 41.3 = 206.7 → 207
    let o = batch(&env, &hits(s, "g", 207, None), Some(T0 + 5 * B)).await;
    assert_eq!(fired(&o), vec![206], "[{t}] {o:?}");
    // the key holds its buckets at most (windows + 1) buckets after its last write
    let key = &env.counter.keys_of(&hits(s, "g", 1, None)[0])[0];
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(key)).await;
    assert!(ttl > 0 && ttl <= 4 * B, "[{t}] pttl {ttl}");
}

#[tokio::test]
async fn spike_fires_once_per_bucket_against_the_groups_own_baseline() {
    on_both(spike_steady_then_burst).await;
}

async fn spike_always_loud(env: Env) {
    let t = env.topology;
    let s = spike(4, 5000, 10);
    for k in 0..8 {
        let o = batch(&env, &hits(s, "loud", 300, None), Some(T0 + k * B + 7)).await;
        assert!(
            fired(&o).is_empty(),
            "[{t}] bucket {k}: 300 is this group's usual"
        );
    }
    // a long quiet empties the baseline: 5 × (0 + 0 + 0 + 300) / 4 = 375
    let o = batch(&env, &hits(s, "loud", 400, None), Some(T0 + 11 * B)).await;
    assert_eq!(fired(&o), vec![374], "[{t}] {o:?}");
}

#[tokio::test]
async fn spike_does_not_fire_for_a_group_that_is_always_that_loud() {
    on_both(spike_always_loud).await;
}

async fn spike_factor_exactly_met_and_young_groups(env: Env) {
    let t = env.topology;
    // young group: its first bucket (10), then bucket 1: the baseline is that one bucket, not 10/24
    let s = spike(24, 1500, 1);
    batch(&env, &hits(s, "young", 10, None), Some(T0)).await;
    let o = batch(&env, &hits(s, "young", 16, None), Some(T0 + B)).await;
    assert_eq!(fired(&o), vec![14], "[{t}] 1.5 × 10 = 15 exactly: {o:?}");
    // 2.2 × 10 = 22 exactly
    let s = spike(2, 2200, 1);
    batch(&env, &hits(s, "exact", 10, None), Some(T0)).await;
    batch(&env, &hits(s, "exact", 10, None), Some(T0 + B)).await;
    let o = batch(&env, &hits(s, "exact", 30, None), Some(T0 + 2 * B)).await;
    assert_eq!(fired(&o), vec![21], "[{t}] {o:?}");
    // the threshold floors a quiet group's needed count: 5 × 0.5 = 2.5 → 10
    let s = spike(2, 5000, 10);
    batch(&env, &hits(s, "quiet", 1, None), Some(T0)).await;
    let o = batch(&env, &hits(s, "quiet", 9, None), Some(T0 + B)).await;
    assert!(
        fired(&o).is_empty(),
        "[{t}] bucket 1's baseline is 1: 9 is under the threshold, {o:?}"
    );
    let o = batch(&env, &hits(s, "quiet", 1, None), Some(T0 + 2 * B - 1)).await;
    assert_eq!(
        fired(&o),
        vec![0],
        "[{t}] the last ms of the bucket: the 10th fires, {o:?}"
    );
    // bucket 2: baseline (1 + 10) / 2 = 5.5, × 5 = 27.5 → 28
    let o = batch(&env, &hits(s, "quiet", 28, None), Some(T0 + 2 * B)).await;
    assert_eq!(fired(&o), vec![27], "[{t}] {o:?}");
    // a rule whose bucket or baseline changed starts afresh (a first bucket)
    let s2 = spike(3, 5000, 10);
    let o = batch(&env, &hits(s2, "quiet", 100, None), Some(T0 + 2 * B + 1)).await;
    assert!(fired(&o).is_empty(), "[{t}] {o:?}");
}

#[tokio::test]
async fn spike_bucket_edges_young_groups_and_factor_exactly_met() {
    on_both(spike_factor_exactly_met_and_young_groups).await;
}

async fn spike_retried_batch(env: Env) {
    let t = env.topology;
    let s = spike(2, 5000, 10);
    batch(&env, &hits(s, "g", 2, Some("warm")), Some(T0)).await;
    batch(&env, &hits(s, "g", 2, Some("warm2")), Some(T0 + B)).await;
    // baseline 2 → needs max(10, 10) = 10
    let burst = hits(s, "g", 15, Some("burst"));
    let first = batch(&env, &burst, Some(T0 + 2 * B + 5)).await;
    assert_eq!(fired(&first), vec![9], "[{t}] {first:?}");
    // the same batch again (the worker crashed before acking): same answers, same token, nothing counted twice
    let again = batch(&env, &burst, Some(T0 + 2 * B + 900)).await;
    assert_eq!(
        again, first,
        "[{t}] a retried batch is answered as the first time"
    );
    let o = batch(&env, &hits(s, "g", 1, None), Some(T0 + 2 * B + 901)).await;
    assert_eq!(o, vec![Outcome::Counted { count: 16 }], "[{t}]");
}

#[tokio::test]
async fn spike_retried_batch_with_event_ids_counts_and_fires_once() {
    on_both(spike_retried_batch).await;
}

async fn spike_concurrent(env: Env) {
    let t = env.topology;
    let s = spike(2, 5000, 10);
    batch(&env, &hits(s, "hot", 5, None), Some(T0)).await;
    batch(&env, &hits(s, "hot", 5, None), Some(T0 + B)).await;
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let counter = env.counter.clone();
            tokio::spawn(async move {
                let mut fired = 0;
                for b in 0..20 {
                    let batch = hits(s, "hot", 10, Some(&format!("w{w}-b{b}")));
                    let o = counter
                        .hit_batch(&batch, Some(T0 + 2 * B + 1))
                        .await
                        .expect("batch");
                    fired += o.iter().filter(|o| o.is_fired()).count();
                }
                fired
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, 1, "[{t}] 8 workers, 1600 events, one firing per bucket");
}

#[tokio::test]
async fn spike_concurrent_batches_fire_exactly_once() {
    on_both(spike_concurrent).await;
}

/// A small deterministic generator (xorshift), so that the walk below is the same on every run.
struct Walk(u64);

impl Walk {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What SPIKE must answer, from the core's reading (`Spike::baseline`, `Spike::needed`) of every bucket's count:
/// the script's running sum and queue must agree with it after any sequence of buckets.
#[derive(Default)]
struct Model {
    counts: std::collections::BTreeMap<i64, u64>,
    origin: Option<i64>,
    newest: i64,
    fired: Option<i64>,
}

async fn spike_random_walk(env: Env) {
    let t = env.topology;
    let windows = 5;
    let s = Spike {
        period_ms: B as u64,
        baseline_windows: windows,
        factor_milli: 2000,
        threshold: 3,
    };
    let spec = Want::Spike(s);
    let mut walk = Walk(0x9e37_79b9_7f4a_7c15);
    let mut model = Model::default();
    let mut now = T0;
    for step in 0..200 {
        // mostly the same bucket or the next ones, now and then a gap longer than the baseline or a clock stepping
        // back (counted in the newest bucket)
        now += match walk.below(20) {
            0 => (windows as i64 + 1 + walk.below(4) as i64) * B,
            1 => -(walk.below(2 * B as u64) as i64),
            2..=7 => B * (1 + walk.below(2) as i64),
            _ => walk.below(B as u64 / 4) as i64,
        };
        let cur = s.bucket(now).max(model.newest);
        let origin = *model.origin.get_or_insert(cur);
        model.newest = cur;
        let (sum, buckets) = s.baseline(origin, cur, model.counts.iter().map(|(&b, &c)| (b, c)));
        let count = model.counts.get(&cur).copied().unwrap_or(0);
        let hit = &hits(spec, "walk", 1, None)[0];
        let peek = env
            .counter
            .peek(std::slice::from_ref(hit), Some(now))
            .await
            .expect("peek");
        let place = format!("[{t}] step {step} at +{} ms (bucket {cur})", now - T0);
        assert_eq!(
            (peek[0].count, peek[0].baseline_sum, peek[0].baseline_buckets),
            (count, sum, buckets),
            "{place}: explain reads the queue as the model"
        );
        let n = 1 + walk.below(6) as usize;
        let o = batch(&env, &hits(spec, "walk", n, None), Some(now)).await;
        for (i, got) in o.iter().enumerate() {
            let count = count + 1 + i as u64;
            let fires = model.fired != Some(cur) && s.needed(sum, buckets).is_some_and(|need| count >= need);
            if fires {
                model.fired = Some(cur);
            }
            assert_eq!(
                (got.count(), got.is_fired()),
                (count, fires),
                "{place}: hit {i} of {n}, baseline {sum}/{buckets}, {got:?}"
            );
            if let Outcome::Fired { signal, .. } = got {
                assert_eq!(
                    *signal,
                    Some(Signal::Spike(Baseline {
                        sum,
                        buckets,
                        needed: s.needed(sum, buckets).unwrap_or(u64::MAX)
                    })),
                    "{place}"
                );
            }
        }
        *model.counts.entry(cur).or_default() += n as u64;
    }
    assert!(model.fired.is_some(), "[{t}] the walk fires at least once");
}

#[tokio::test]
async fn spike_running_sum_matches_every_buckets_count_over_a_random_walk() {
    on_both(spike_random_walk).await;
}

async fn spike_lifetimes(env: Env) {
    let t = env.topology;
    let s = spike(3, 5000, 10);
    let probe = &hits(s, "life", 1, None)[0];
    let keys = env.counter.keys_of(probe);
    let pttl = |k: usize| {
        let key = keys[k].clone();
        let env = env.clone();
        async move { env.query::<i64>(redis::cmd("PTTL").arg(key)).await }
    };
    // 7 s into bucket 5: bucket 5 is in the baselines of buckets 6, 7 and 8, so the key lives until bucket 8
    // ends, 3 buckets and 3 s from now, not (windows + 1) buckets after the event
    batch(&env, &hits(s, "life", 2, Some("e")), Some(T0 + 5 * B + 7_000)).await;
    let main = pttl(0).await;
    assert!(main > 0 && main <= 3 * B + 3_000, "[{t}] :sp pttl {main}");
    // the event ids are of the current bucket only: they go when it ends
    let ids = pttl(1).await;
    assert!(ids > 0 && ids <= 3_000, "[{t}] :spi pttl {ids}");
    // the next bucket, without ids: the previous bucket's ids are gone, the expiry follows the newest bucket
    batch(&env, &hits(s, "life", 1, None), Some(T0 + 6 * B + 1)).await;
    assert_eq!(pttl(1).await, -2, "[{t}] the ids of bucket 5 are deleted");
    let main = pttl(0).await;
    assert!(main > 0 && main < 4 * B, "[{t}] :sp pttl {main}");
}

#[tokio::test]
async fn spike_key_lives_until_its_newest_bucket_leaves_the_last_baseline() {
    on_both(spike_lifetimes).await;
}

async fn reappeared_once(env: Env) {
    let t = env.topology;
    let q = 1000;
    let r = reappeared(q, 0);
    let one = |is_new: bool, id: Option<&str>| {
        let h = Hit::new("rule", "g", r).with_project("p").with_new(is_new);
        vec![match id {
            Some(id) => h.with_event_id(id),
            None => h,
        }]
    };
    let quiet = |o: &[Outcome]| -> Vec<bool> { o.iter().map(Outcome::is_fired).collect() };
    // first occurrence: ONLY_NEW's business
    assert_eq!(
        quiet(&batch(&env, &one(true, Some("e0")), Some(T0)).await),
        [false],
        "[{t}]"
    );
    assert_eq!(
        quiet(&batch(&env, &one(false, Some("e1")), Some(T0 + 500)).await),
        [false],
        "[{t}]"
    );
    // 999 ms quiet: not yet
    assert_eq!(
        quiet(&batch(&env, &one(false, Some("e2")), Some(T0 + 1499)).await),
        [false],
        "[{t}]"
    );
    // exactly the quiet period: fires, once
    let o = batch(&env, &one(false, Some("e3")), Some(T0 + 2499)).await;
    assert_eq!(
        o,
        [Outcome::Fired {
            count: 1,
            firing: (T0 + 2499).to_string(),
            at_ms: T0 + 2499,
            signal: Some(Signal::Reappeared {
                last_seen_ms: Some(T0 + 1499)
            }),
        }],
        "[{t}]"
    );
    assert_eq!(
        quiet(&batch(&env, &one(false, Some("e4")), Some(T0 + 2500)).await),
        [false],
        "[{t}]"
    );
    // the firing event redelivered later: the same firing, the same token
    assert_eq!(
        batch(&env, &one(false, Some("e3")), Some(T0 + 2600)).await,
        o,
        "[{t}]"
    );
    // several hits in one batch after a quiet: the first fires, the rest do not
    let many: Vec<Hit> = (0..5)
        .map(|i| {
            Hit::new("rule", "g", r)
                .with_project("p")
                .with_event_id(format!("m{i}"))
        })
        .collect();
    let o = batch(&env, &many, Some(T0 + 5000)).await;
    assert_eq!(quiet(&o), [true, false, false, false, false], "[{t}]");
    // the mark lives quietPeriod + min(quietPeriod, 1 day)
    let key = &env.counter.keys_of(&one(false, None)[0])[0];
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(key)).await;
    assert!(ttl > 1000 && ttl <= 2000, "[{t}] pttl {ttl}");
    assert_eq!(reappeared_ttl_ms(1000), 2000);
    assert_eq!(reappeared_ttl_ms(7 * 86_400_000), 8 * 86_400_000);
}

#[tokio::test]
async fn reappeared_fires_once_per_reappearance_and_again_for_the_redelivered_firing() {
    on_both(reappeared_once).await;
}

async fn reappeared_without_a_mark(env: Env) {
    let t = env.topology;
    let q = 60_000;
    let hit = |group: &str, armed: i64, is_new: bool| {
        Hit::new("rule", group, reappeared(q, armed))
            .with_project("p")
            .with_new(is_new)
    };
    let hits = [
        // a group Hawk has seen before, no mark, a rule watching for longer than the quiet: it was quiet
        hit("old", T0 - q as i64, false),
        // the same for a rule that began watching less than the quiet ago: unknown, no firing
        hit("recent", T0 - q as i64 + 1, false),
        // a first occurrence never
        hit("new", 0, true),
    ];
    let o = batch(&env, &hits, Some(T0)).await;
    assert_eq!(
        o[0],
        Outcome::Fired {
            count: 1,
            firing: T0.to_string(),
            at_ms: T0,
            signal: Some(Signal::Reappeared { last_seen_ms: None })
        },
        "[{t}]"
    );
    assert_eq!(
        o[1..],
        [Outcome::Counted { count: 0 }, Outcome::Counted { count: 0 }],
        "[{t}]"
    );
}

#[tokio::test]
async fn reappeared_without_a_mark_trusts_is_new_once_the_rule_has_watched_long_enough() {
    on_both(reappeared_without_a_mark).await;
}

async fn reappeared_concurrent(env: Env) {
    let t = env.topology;
    let r = reappeared(1000, 0);
    batch(&env, &[Hit::new("rule", "hot", r).with_project("p")], Some(T0)).await;
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let counter = env.counter.clone();
            tokio::spawn(async move {
                let mut fired = 0;
                for b in 0..20 {
                    let batch: Vec<Hit> = (0..10)
                        .map(|i| {
                            Hit::new("rule", "hot", r)
                                .with_project("p")
                                .with_event_id(format!("{w}-{b}-{i}"))
                        })
                        .collect();
                    let o = counter.hit_batch(&batch, Some(T0 + 5000)).await.expect("batch");
                    fired += o.iter().filter(|o| o.is_fired()).count();
                }
                fired
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, 1, "[{t}] one reappearance, one firing across 8 workers");
}

#[tokio::test]
async fn reappeared_concurrent_batches_fire_exactly_once() {
    on_both(reappeared_concurrent).await;
}
