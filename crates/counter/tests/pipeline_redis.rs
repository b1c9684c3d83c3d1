//! The delivery pipeline's Redis scripts (dedup, GCRA) against real single-node Redis and the 3-master cluster.

mod common;

use std::time::Duration;

use common::{on_both, Env};
use klaxon_counter::dedup::{Claim, Dedup};
use klaxon_counter::{Gcra, Slot};

#[tokio::test]
async fn dedup_claims_once_marks_and_releases() {
    on_both(dedup_claims).await;
}

async fn dedup_claims(env: Env) {
    let name = env.topology;
    let d = Dedup::new(
        env.redis,
        &env.ns,
        Duration::from_secs(60),
        Duration::from_secs(30),
    );
    assert_eq!(d.claim("n1", "a").await.expect("claim"), Claim::Claimed, "{name}");
    // the same attempt may claim again (it refreshes its lease), another is told to wait
    assert_eq!(d.claim("n1", "a").await.expect("claim"), Claim::Claimed, "{name}");
    match d.claim("n1", "b").await.expect("claim") {
        Claim::Busy(left) => assert!(left > Duration::from_secs(25) && left <= Duration::from_secs(30)),
        other => panic!("{name}: {other:?}"),
    }
    // only the holder releases
    assert!(!d.release("n1", "b").await.expect("release"), "{name}");
    assert!(d.release("n1", "a").await.expect("release"), "{name}");
    assert_eq!(d.claim("n1", "b").await.expect("claim"), Claim::Claimed, "{name}");
    d.mark_sent("n1").await.expect("mark");
    for token in ["a", "b", "c"] {
        assert_eq!(
            d.claim("n1", token).await.expect("claim"),
            Claim::AlreadySent,
            "{name}"
        );
    }
    assert!(
        !d.release("n1", "b").await.expect("release"),
        "a sent mark is never released"
    );
    assert_eq!(
        d.claim("n2", "a").await.expect("claim"),
        Claim::Claimed,
        "ids are independent"
    );
}

#[tokio::test]
async fn gcra_reserves_slots_one_interval_apart_and_defers_far_ones() {
    on_both(gcra_reserves).await;
}

async fn gcra_reserves(env: Env) {
    let name = env.topology;
    let rl = Gcra::new(env.redis, &env.ns);
    let t0 = 1_000_000u64;
    let max = Duration::from_millis(2500);
    let ms = Duration::from_millis;
    // (now offset ms, expected): 1/s, burst 1
    let table = [
        (0, Slot::Reserved(ms(0))),
        (0, Slot::Reserved(ms(1000))),
        (0, Slot::Reserved(ms(2000))),
        (0, Slot::Later(ms(3000))), // beyond max_wait: nothing reserved
        (500, Slot::Reserved(ms(2500))),
        (5000, Slot::Reserved(ms(0))), // idle again
    ];
    for (i, (at, want)) in table.into_iter().enumerate() {
        let got = rl
            .reserve("dest", 1.0, 1, max, Some(t0 + at))
            .await
            .expect("reserve");
        assert_eq!(got, want, "{name} step {i}");
    }
    // a burst of 3 at 10/s: three at once, then 100 ms apart
    let got: Vec<Slot> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(
                rl.reserve("burst", 10.0, 3, max, Some(t0))
                    .await
                    .expect("reserve"),
            );
        }
        v
    };
    assert_eq!(
        got,
        vec![
            Slot::Reserved(ms(0)),
            Slot::Reserved(ms(0)),
            Slot::Reserved(ms(0)),
            Slot::Reserved(ms(100))
        ],
        "{name}"
    );
    // the Redis clock path works too
    assert!(matches!(
        rl.reserve("clock", 1.0, 1, max, None).await.expect("reserve"),
        Slot::Reserved(_)
    ));
}

#[tokio::test]
async fn gcra_shares_a_destination_fairly_between_projects() {
    on_both(gcra_shares).await;
}

async fn gcra_shares(env: Env) {
    let name = env.topology;
    let rl = Gcra::new(env.redis, &env.ns);
    let t0 = 2_000_000u64;
    let ms = Duration::from_millis;
    let grace = ms(1000);
    let horizon = ms(1000);
    let ask = |project: &'static str, at: u64| {
        let rl = rl.clone();
        async move {
            rl.reserve_shared("bot", Some((project, grace)), 10.0, 1, horizon, Some(t0 + at))
                .await
                .expect("reserve")
        }
    };
    // (project, now offset ms, expected): 10/s, burst 1, a 1 s horizon
    let table = [
        // A alone has the whole rate: slots 100 ms apart, reserved up to the horizon
        ("a", 0, Slot::Reserved(ms(0))),
        ("a", 0, Slot::Reserved(ms(100))),
        ("a", 0, Slot::Reserved(ms(200))),
        ("a", 0, Slot::Reserved(ms(300))),
        // B arrives: the next free slot of the destination, not behind a queue of A's
        ("b", 0, Slot::Reserved(ms(400))),
        // now two projects have demand and A's own clock moves two intervals per message: A's next slot (+400)
        // is not later than the destination's, so A has it…
        ("a", 0, Slot::Reserved(ms(500))),
        // …but then its own clock (+700) is later than the destination's next slot (+600): A is over its share
        // and reserves nothing…
        ("a", 0, Slot::Later(ms(700))),
        // …and B's next message gets the destination's next slot
        ("b", 0, Slot::Reserved(ms(600))),
        // once B's demand is over (its slot passed, plus the grace), A has the whole rate again
        ("a", 3_000, Slot::Reserved(ms(0))),
        ("a", 3_000, Slot::Reserved(ms(100))),
    ];
    for (i, (project, at, want)) in table.into_iter().enumerate() {
        assert_eq!(
            ask(project, at).await,
            want,
            "{name} step {i} ({project} at +{at} ms)"
        );
    }
    // a lower priority's horizon (0: only a slot free now) reserves nothing while the destination is booked
    let got = rl
        .reserve_shared("bot", Some(("c", grace)), 10.0, 1, ms(0), Some(t0 + 3_000))
        .await
        .expect("reserve");
    assert_eq!(got, Slot::Later(ms(200)), "{name}");
}

/// Issue #42: a Telegram conversation (edit + reply) spent one slot for two Bot API calls. A reservation of
/// `calls` takes that many consecutive slots and charges the project's share that many messages.
#[tokio::test]
async fn gcra_reserves_one_slot_per_call_of_a_delivery() {
    on_both(gcra_calls).await;
}

async fn gcra_calls(env: Env) {
    let name = env.topology;
    let rl = Gcra::new(env.redis, &env.ns);
    let t0 = 3_000_000u64;
    let ms = Duration::from_millis;
    let max = ms(2_000);
    assert_eq!(Gcra::interval(10.0), ms(100));
    assert_eq!(
        Gcra::interval(30.0),
        ms(34),
        "whole milliseconds, rounded up as the script counts"
    );
    // unshared, 10/s: a two-call delivery at 0 (slots 0 and 100), the next one-call delivery at 200, a
    // three-call one at 300 (300, 400, 500), then 600
    for (i, (calls, want)) in [(2, 0), (1, 200), (3, 300), (1, 600)].into_iter().enumerate() {
        let got = rl
            .reserve_calls("conv", None, 10.0, 1, calls, max, Some(t0))
            .await
            .expect("reserve");
        assert_eq!(got, Slot::Reserved(ms(want)), "{name} step {i}");
    }
    // shared: with two projects active, a two-call delivery costs its project two messages at its share
    let grace = ms(1_000);
    let ask = |project: &'static str, calls: u32| {
        let rl = rl.clone();
        async move {
            rl.reserve_calls("bot2", Some((project, grace)), 10.0, 1, calls, max, Some(t0))
                .await
                .expect("reserve")
        }
    };
    assert_eq!(ask("a", 1).await, Slot::Reserved(ms(0)), "{name}");
    assert_eq!(
        ask("b", 2).await,
        Slot::Reserved(ms(100)),
        "{name}: b's edit at 100, its reply at 200"
    );
    // a's own clock (+100, from when it was alone) is not later than the destination's next slot (+300)
    assert_eq!(ask("a", 1).await, Slot::Reserved(ms(300)), "{name}");
    // b's own clock: 100 + 2 calls × 2 intervals = +500, later than the destination's +400: over its share
    assert_eq!(ask("b", 1).await, Slot::Later(ms(500)), "{name}");
}

#[tokio::test]
async fn a_reminder_budget_counts_each_reminder_once_per_hour() {
    on_both(reminder_budget).await;
}

async fn reminder_budget(env: Env) {
    let name = env.topology;
    let budgets = klaxon_counter::Budgets::new(env.redis, &env.ns);
    let hour = 3_600_000i64;
    let t0 = 500_000 * hour + 1_000;
    // (project, reminder id, now, taken): a budget of 3 an hour
    let table = [
        ("p", "r1", t0, true),
        ("p", "r2", t0, true),
        // the same reminder asking again (parked, retried) takes nothing more
        ("p", "r1", t0 + 10, true),
        ("p", "r3", t0 + 20, true),
        ("p", "r4", t0 + 30, false),
        ("p", "r1", t0 + 40, true),
        // another project has its own budget
        ("q", "r4", t0 + 50, true),
        // the next clock hour starts afresh
        ("p", "r4", t0 + hour, true),
    ];
    for (i, (project, id, now, want)) in table.into_iter().enumerate() {
        let got = budgets.take_reminder(project, id, 3, now).await.expect("take");
        assert_eq!(got, want, "{name} step {i}: {project} {id}");
    }
}
