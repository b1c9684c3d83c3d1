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
