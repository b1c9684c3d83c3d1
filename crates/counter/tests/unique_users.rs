//! Unique-users thresholds (`lua/unique_users.lua`) against real Redis, single node and cluster, with
//! injected time.

mod common;

use common::{counted, fixed, hit, on_both, sliding, Env};
use klaxon_core::{Want, Window};
use klaxon_counter::{Hit, Outcome};

const T0: i64 = 1_700_000_000_000;
const MINUTE: i64 = 60_000;

fn users(threshold: u64, period_ms: u64, window: Window) -> Want {
    Want::UniqueUsers {
        threshold,
        period_ms,
        window,
    }
}

fn user_hit(spec: Want, user: &str) -> Hit {
    Hit::new("rule", "group", spec).with_user(user)
}

async fn zcard(env: &Env, key: &str) -> i64 {
    env.query(redis::cmd("ZCARD").arg(key)).await
}

// --- Fixed ----------------------------------------------------------------------------------------------

async fn fixed_counts_distinct_users(env: Env) {
    let spec = users(3, 10_000, Window::Fixed);
    let t = env.topology;
    // The same user many times: one user, never fires.
    for i in 0..10 {
        assert_eq!(
            hit(&env, &user_hit(spec, "ann"), T0 + i).await,
            counted(1),
            "[{t}]"
        );
    }
    // Events without a user are not counted and do not fire.
    for i in 0..5 {
        let no_user = Hit::new("rule", "group", spec);
        assert_eq!(hit(&env, &no_user, T0 + 10 + i).await, counted(1), "[{t}]");
    }
    assert_eq!(
        hit(&env, &user_hit(spec, "bob"), T0 + 20).await,
        counted(2),
        "[{t}]"
    );
    let keys = env.counter.keys_of(&user_hit(spec, "x"));
    assert_eq!(zcard(&env, &keys[0]).await, 2, "[{t}] the users so far are kept");
    // The third distinct user fires, once; the window's token is its start (the first user's event).
    let fired = hit(&env, &user_hit(spec, "cid"), T0 + 30).await;
    assert_eq!(
        fired,
        Outcome::Fired {
            count: 3,
            firing: T0.to_string(),
            at_ms: T0 + 30,
            signal: None,
        },
        "[{t}]"
    );
    // Once fired, nothing more is kept (memory O(threshold) at most, O(1) after the firing) …
    assert_eq!(
        zcard(&env, &keys[0]).await,
        0,
        "[{t}] users dropped after the firing"
    );
    // … and nothing fires again in this window, however many users come.
    for (i, u) in ["dan", "eve", "ann", "fay"].into_iter().enumerate() {
        let o = hit(&env, &user_hit(spec, u), T0 + 40 + i as i64).await;
        assert_eq!(o, counted(3), "[{t}] {u}");
    }
    // Both keys expire when the window ends.
    let pttl: i64 = env.query(redis::cmd("PTTL").arg(&keys[1])).await;
    assert!(pttl > 0 && pttl <= 10_000, "[{t}] pttl {pttl}");

    // After the window a new one starts at the next user's event and needs three users again.
    let next = T0 + 10_000;
    assert_eq!(hit(&env, &user_hit(spec, "ann"), next).await, counted(1), "[{t}]");
    assert_eq!(
        hit(&env, &user_hit(spec, "bob"), next + 1).await,
        counted(2),
        "[{t}]"
    );
    let again = hit(&env, &user_hit(spec, "ann"), next + 2).await;
    assert_eq!(again, counted(2), "[{t}] a repeated user is not a new one");
    assert_eq!(
        hit(&env, &user_hit(spec, "cid"), next + 3).await.firing(),
        Some(next.to_string().as_str()),
        "[{t}]"
    );
}

#[tokio::test]
async fn fixed_fires_once_when_the_threshold_of_distinct_users_is_reached() {
    on_both(fixed_counts_distinct_users).await;
}

async fn fixed_window_starts_at_the_first_user(env: Env) {
    let spec = users(2, 10_000, Window::Fixed);
    let t = env.topology;
    // An event without a user does not open a window.
    assert_eq!(
        hit(&env, &Hit::new("rule", "group", spec), T0).await,
        counted(0),
        "[{t}]"
    );
    let keys = env.counter.keys_of(&user_hit(spec, "x"));
    let exists: i64 = env.query(redis::cmd("EXISTS").arg(&keys[0]).arg(&keys[1])).await;
    assert_eq!(exists, 0, "[{t}] nothing stored for an event without a user");
    assert_eq!(
        hit(&env, &user_hit(spec, "ann"), T0 + 9_000).await,
        counted(1),
        "[{t}]"
    );
    // 10 s after the user-less event but 1 s after the first user: still the same window.
    let o = hit(&env, &user_hit(spec, "bob"), T0 + 10_000).await;
    assert_eq!(o.firing(), Some((T0 + 9_000).to_string().as_str()), "[{t}]");
}

#[tokio::test]
async fn fixed_window_opens_at_the_first_event_with_a_user() {
    on_both(fixed_window_starts_at_the_first_user).await;
}

// --- Sliding --------------------------------------------------------------------------------------------

async fn sliding_counts_users_in_the_trailing_window(env: Env) {
    let period = MINUTE as u64;
    let spec = users(3, period, Window::Sliding);
    let t = env.topology;
    assert_eq!(hit(&env, &user_hit(spec, "ann"), T0).await, counted(1), "[{t}]");
    assert_eq!(
        hit(&env, &user_hit(spec, "bob"), T0 + 1_000).await,
        counted(2),
        "[{t}]"
    );
    // ann ages out of (now - 60 s, now]: cid makes two users, not three.
    assert_eq!(
        hit(&env, &user_hit(spec, "cid"), T0 + MINUTE).await,
        counted(2),
        "[{t}]"
    );
    // ann again is seen anew (her last-seen time moves): three users in the trailing minute, fires.
    let fired = hit(&env, &user_hit(spec, "ann"), T0 + MINUTE + 10).await;
    assert_eq!(
        fired,
        Outcome::Fired {
            count: 3,
            firing: (T0 + MINUTE + 10).to_string(),
            at_ms: T0 + MINUTE + 10,
            signal: None,
        },
        "[{t}]"
    );
    // Cooldown: new users do not fire until a period has passed since the firing.
    for (i, u) in ["dan", "eve", "fay", "gus"].into_iter().enumerate() {
        let o = hit(&env, &user_hit(spec, u), T0 + MINUTE + 20 + i as i64).await;
        assert!(!o.is_fired(), "[{t}] {u} in the cooldown: {o:?}");
    }
    // Memory is bounded by the threshold: only the three most recently seen users are kept.
    let keys = env.counter.keys_of(&user_hit(spec, "x"));
    assert_eq!(zcard(&env, &keys[0]).await, 3, "[{t}]");
    // After the cooldown, users still in the trailing window count: the next user event fires again.
    let after = T0 + 2 * MINUTE + 10;
    let o = hit(&env, &user_hit(spec, "hal"), after).await;
    assert_eq!(o.firing(), Some(after.to_string().as_str()), "[{t}] {o:?}");
    // Without a user nothing is counted, even past the cooldown.
    let o = hit(&env, &Hit::new("rule", "group", spec), after + 3 * MINUTE).await;
    assert_eq!(o, counted(0), "[{t}]");
}

#[tokio::test]
async fn sliding_fires_on_the_user_that_makes_threshold_in_the_trailing_window() {
    on_both(sliding_counts_users_in_the_trailing_window).await;
}

async fn sliding_one_user_flooding(env: Env) {
    let spec = users(2, MINUTE as u64, Window::Sliding);
    let t = env.topology;
    let flood: Vec<Hit> = (0..500).map(|_| user_hit(spec, "ann")).collect();
    let out = env.counter.hit_batch(&flood, Some(T0)).await.expect("batch");
    assert!(out.iter().all(|o| *o == counted(1)), "[{t}] one user is one user");
    let keys = env.counter.keys_of(&flood[0]);
    assert_eq!(zcard(&env, &keys[0]).await, 1, "[{t}]");
}

#[tokio::test]
async fn sliding_one_user_flooding_never_fires() {
    on_both(sliding_one_user_flooding).await;
}

async fn sliding_keeps_the_most_recent_users(env: Env) {
    let spec = users(100, MINUTE as u64, Window::Sliding);
    let t = env.topology;
    // 150 distinct users in one batch: the 100th fires, and only 100 users are kept, in compact encoding.
    let first: Vec<Hit> = (0..150).map(|i| user_hit(spec, &format!("u{i}"))).collect();
    let out = env.counter.hit_batch(&first, Some(T0)).await.expect("batch");
    assert_eq!(out.iter().position(Outcome::is_fired), Some(99), "[{t}]");
    let keys = env.counter.keys_of(&first[0]);
    assert_eq!(zcard(&env, &keys[0]).await, 100, "[{t}]");
    let enc: String = env
        .query(redis::cmd("OBJECT").arg("ENCODING").arg(&keys[0]))
        .await;
    assert_eq!(enc, "listpack", "[{t}]");
    // 50 new users half a minute later (in the cooldown) replace the 50 seen longest ago.
    let second: Vec<Hit> = (0..50).map(|i| user_hit(spec, &format!("v{i}"))).collect();
    let out = env
        .counter
        .hit_batch(&second, Some(T0 + 30_000))
        .await
        .expect("batch");
    assert!(out.iter().all(|o| *o == counted(100)), "[{t}] {:?}", &out[..3]);
    assert_eq!(zcard(&env, &keys[0]).await, 100, "[{t}]");
    // A minute after the first batch its users have aged out; the 50 recent ones are still counted.
    let o = hit(&env, &user_hit(spec, "w"), T0 + MINUTE + 1_000).await;
    assert_eq!(o, counted(51), "[{t}]");
}

#[tokio::test]
async fn sliding_keeps_the_threshold_most_recent_users_in_compact_encoding() {
    on_both(sliding_keeps_the_most_recent_users).await;
}

// --- Both windows ---------------------------------------------------------------------------------------

async fn redelivered_firing_fires_again(env: Env) {
    for window in [Window::Fixed, Window::Sliding] {
        let spec = users(2, MINUTE as u64, window);
        let t = env.topology;
        let h = |u: &str, id: &str| {
            Hit::new(format!("rule-{window}"), "g", spec)
                .with_user(u)
                .with_event_id(id)
        };
        assert_eq!(hit(&env, &h("ann", "e1"), T0).await, counted(1), "[{t}] {window}");
        let first = hit(&env, &h("bob", "e2"), T0 + 5).await;
        assert!(first.is_fired(), "[{t}] {window} {first:?}");
        // The worker crashed before publishing: the same event comes back and is answered with the same firing.
        let again = hit(&env, &h("bob", "e2"), T0 + 500).await;
        assert_eq!(again, first, "[{t}] {window}");
        // Another event of the same user is not the firing.
        let other = hit(&env, &h("bob", "e3"), T0 + 600).await;
        assert!(!other.is_fired(), "[{t}] {window} {other:?}");
    }
}

#[tokio::test]
async fn a_redelivered_firing_event_fires_again_with_the_same_token() {
    on_both(redelivered_firing_fires_again).await;
}

async fn batch_equals_singles(env: Env) {
    // One batch mixing every script, including both unique-users modes, in one round trip.
    let batch: Vec<Hit> = (0..40)
        .map(|i| {
            let u = format!("user-{}", i % 7);
            match i % 4 {
                0 => Hit::new("uf", "g", users(5, MINUTE as u64, Window::Fixed)).with_user(u),
                1 => Hit::new("us", "g", users(4, MINUTE as u64, Window::Sliding)).with_user(u),
                2 => Hit::new("fx", "g", fixed(6, MINUTE as u64)),
                _ => Hit::new("sl", "g", sliding(6, MINUTE as u64)).with_event_id(format!("e{i}")),
            }
        })
        .collect();
    let batched = env.counter.hit_batch(&batch, Some(T0)).await.expect("batch");
    // The same hits one by one, in another namespace.
    let other = klaxon_counter::WindowCounter::new(env.redis.clone(), &format!("{}-single", env.ns));
    let mut singles = Vec::new();
    for h in &batch {
        singles.push(other.hit(h, Some(T0)).await.expect("single"));
    }
    assert_eq!(batched, singles, "[{}]", env.topology);
    let fired: Vec<&str> = batch
        .iter()
        .zip(&batched)
        .filter(|(_, o)| o.is_fired())
        .map(|(h, _)| &*h.rule_id)
        .collect();
    assert_eq!(
        fired,
        vec!["us", "uf", "fx", "sl"],
        "[{}] each rule fires once",
        env.topology
    );
}

#[tokio::test]
async fn a_mixed_batch_gives_the_same_outcomes_as_single_calls() {
    on_both(batch_equals_singles).await;
}

async fn concurrent_exactly_one(env: Env) {
    for window in [Window::Fixed, Window::Sliding] {
        let spec = users(50, MINUTE as u64, window);
        let tasks = (0..8).map(|w| {
            let counter = env.counter.clone();
            async move {
                let mut fired = 0;
                for i in 0..25 {
                    let h = Hit::new("conc", format!("g-{window}"), spec)
                        .with_user(format!("u{}", (w * 25 + i) % 120));
                    if counter.hit(&h, None).await.expect("hit").is_fired() {
                        fired += 1;
                    }
                }
                fired
            }
        });
        let fired: usize = futures_util::future::join_all(tasks).await.into_iter().sum();
        assert_eq!(
            fired, 1,
            "[{}] {window}: 120 distinct users, threshold 50",
            env.topology
        );
    }
}

#[tokio::test]
async fn eight_concurrent_workers_fire_exactly_once() {
    on_both(concurrent_exactly_one).await;
}

async fn long_user_ids_are_digested(env: Env) {
    let spec = users(2, MINUTE as u64, Window::Fixed);
    let a = "a".repeat(200);
    let b = format!("{}b", "a".repeat(199));
    assert_eq!(hit(&env, &user_hit(spec, &a), T0).await, counted(1));
    assert_eq!(
        hit(&env, &user_hit(spec, &a), T0 + 1).await,
        counted(1),
        "same long id, same user"
    );
    assert!(
        hit(&env, &user_hit(spec, &b), T0 + 2).await.is_fired(),
        "[{}]",
        env.topology
    );
}

#[tokio::test]
async fn long_user_ids_are_stored_as_digests_and_still_told_apart() {
    on_both(long_user_ids_are_digested).await;
}
