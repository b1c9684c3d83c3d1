//! Mutes against real Redis (single node and cluster): the per-project limit holds on write, also under
//! concurrent adds, and reads are bounded whatever is stored.

mod common;

use common::{on_both, Env};
use klaxon_core::mute::Mute;
use klaxon_counter::mutes::{Added, ReadMutes};
use klaxon_counter::Mutes;

const NOW: i64 = 1_900_000_000_000;

fn mute(id: &str, until_ms: i64) -> Mute {
    Mute {
        mute_id: id.into(),
        rule_id: None,
        group_hash: Some(format!("g-{id}")),
        until_ms,
    }
}

async fn add(mutes: &Mutes, env: &Env, project: &str, m: &Mute) -> Added {
    match mutes.add(project, m, Some(NOW)).await {
        Ok(a) => a,
        Err(e) => panic!("[{}] add failed: {e}", env.topology),
    }
}

/// Stores `n` mutes straight into the project's hash, as mutes made before the limit existed.
async fn seed(env: &Env, project: &str, n: usize, until_ms: i64) {
    let key = format!("{}:mutes:{{{project}}}", env.ns);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&key);
        for i in chunk {
            let m = mute(&format!("seed{i:05}"), until_ms);
            cmd.arg(&m.mute_id).arg(serde_json::to_string(&m).expect("json"));
        }
        env.query::<i64>(&cmd).await;
    }
    env.query::<i64>(redis::cmd("PEXPIRE").arg(&key).arg(60_000))
        .await;
}

async fn limit_holds_on_write(env: Env) {
    let t = env.topology;
    let mutes = Mutes::new(env.redis.clone(), &env.ns).with_limit(3);
    let p = "5e3eef0679fa3700a0198a49";
    for i in 0..3 {
        let got = add(&mutes, &env, p, &mute(&format!("m{i}"), NOW + 60_000)).await;
        assert_eq!(got, Added::Stored { active: i + 1 }, "[{t}]");
    }
    assert_eq!(
        add(&mutes, &env, p, &mute("m3", NOW + 60_000)).await,
        Added::Full { active: 3 },
        "[{t}] the 4th of 3"
    );
    // Replacing a stored id is not one more.
    assert_eq!(
        add(&mutes, &env, p, &mute("m1", NOW + 90_000)).await,
        Added::Stored { active: 3 },
        "[{t}]"
    );
    // Another project has its own limit.
    let q = "5e3eef0679fa3700a0198a4a";
    assert_eq!(
        add(&mutes, &env, q, &mute("q0", NOW + 60_000)).await,
        Added::Stored { active: 1 },
        "[{t}]"
    );
    // An expired mute does not count: it is swept when the project is at the limit.
    let r = "5e3eef0679fa3700a0198a4b";
    add(&mutes, &env, r, &mute("old", NOW + 1)).await;
    add(&mutes, &env, r, &mute("a", NOW + 60_000)).await;
    add(&mutes, &env, r, &mute("b", NOW + 60_000)).await;
    let later = mutes.add(r, &mute("c", NOW + 60_000), Some(NOW + 10)).await;
    assert_eq!(later.expect("add"), Added::Stored { active: 3 }, "[{t}]");
    let listed = mutes.list(r, NOW + 10).await.expect("list");
    let ids: Vec<&str> = listed.mutes.iter().map(|m| m.mute_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "[{t}]");

    // Concurrent adds never pass the limit together.
    let s = "5e3eef0679fa3700a0198a4c";
    let tries = (0..20).map(|i| {
        let mutes = mutes.clone();
        async move {
            mutes
                .add(s, &mute(&format!("c{i}"), NOW + 60_000), Some(NOW))
                .await
        }
    });
    let results = futures_util::future::join_all(tries).await;
    let stored = results
        .iter()
        .filter(|r| matches!(r, Ok(Added::Stored { .. })))
        .count();
    assert_eq!(stored, 3, "[{t}] {results:?}");
    assert_eq!(mutes.list(s, NOW).await.expect("list").mutes.len(), 3, "[{t}]");
}

#[tokio::test]
async fn the_limit_holds_on_write_also_under_concurrent_adds() {
    on_both(limit_holds_on_write).await;
}

async fn reads_are_bounded(env: Env) {
    let t = env.topology;
    let mutes = Mutes::new(env.redis.clone(), &env.ns);
    assert_eq!(mutes.limit(), 1000, "the default");
    let (big, small, none) = (
        "5e3eef0679fa3700a0198a49",
        "5e3eef0679fa3700a0198a4a",
        "5e3eef0679fa3700a0198a4b",
    );
    seed(&env, big, 1500, NOW + 60_000).await;
    seed(&env, small, 7, NOW + 60_000).await;
    let read = mutes.of_projects(&[big, small, none]).await.expect("read");
    assert_eq!(read[big].mutes.len(), 1000, "[{t}] at most the limit is read");
    assert_eq!(read[big].unread, 500, "[{t}]");
    assert_eq!(read[small].mutes.len(), 7, "[{t}]");
    assert_eq!(read[small].unread, 0, "[{t}]");
    assert_eq!(read[none], ReadMutes::default(), "[{t}]");
    // The same mutes on every read while nothing changes.
    let again = mutes.of_projects(&[big]).await.expect("read");
    let ids = |r: &ReadMutes| {
        let mut v: Vec<String> = r.mutes.iter().map(|m| m.mute_id.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&again[big]), ids(&read[big]), "[{t}]");
    // A lower limit reads less; the API's list too.
    let few = Mutes::new(env.redis.clone(), &env.ns).with_limit(5);
    let read = few.of_projects(&[small]).await.expect("read");
    assert_eq!((read[small].mutes.len(), read[small].unread), (5, 2), "[{t}]");
    let listed = few.list(big, NOW).await.expect("list");
    assert_eq!((listed.mutes.len(), listed.unread), (5, 1495), "[{t}]");
    // Over the limit, adding is refused until enough have expired.
    assert_eq!(
        add(&mutes, &env, big, &mute("one-more", NOW + 60_000)).await,
        Added::Full { active: 1500 },
        "[{t}]"
    );
    assert!(mutes.first_report(big, 500) && !mutes.first_report(big, 500));
    assert!(
        mutes.clone().first_report(big, 501),
        "another count is reported again"
    );
}

#[tokio::test]
async fn reads_are_bounded_whatever_is_stored() {
    on_both(reads_are_bounded).await;
}

/// An action link mutes once (issue #30): its use is recorded with its mute in one script, and outlives the
/// mute (removed, or replaced) until the link expires; a refused mute does not use the link; concurrent
/// confirmations of one link store one mute.
async fn a_link_mutes_once(env: Env) {
    let t = env.topology;
    let mutes = Mutes::new(env.redis.clone(), &env.ns).with_limit(2);
    let p = "5e3eef0679fa3700a0198a49";
    let link_expires = NOW + 7 * 86_400_000;
    let m = mute("link1", NOW + 3_600_000);
    assert_eq!(mutes.link_used(p, "link1").await.expect("read"), None, "[{t}]");
    let first = mutes.add_once(p, &m, Some(NOW), link_expires).await;
    assert_eq!(first.expect("add"), Added::Stored { active: 1 }, "[{t}]");
    assert_eq!(
        mutes.link_used(p, "link1").await.expect("read"),
        Some(NOW),
        "[{t}]"
    );
    assert!(mutes.remove(p, "link1").await.expect("remove"), "[{t}]");
    let again = mutes.add_once(p, &m, Some(NOW + 5), link_expires).await;
    assert_eq!(
        again.expect("add"),
        Added::Used { at_ms: NOW },
        "[{t}] undone, then confirmed again"
    );
    assert!(
        mutes.list(p, NOW + 5).await.expect("list").mutes.is_empty(),
        "[{t}]"
    );
    // the record expires with the link, not with the mute
    let key = format!("{}:link-used:{{{p}}}:link1", env.ns);
    let pexpiretime: i64 = env.query(redis::cmd("PEXPIRETIME").arg(&key)).await;
    assert_eq!(pexpiretime, link_expires, "[{t}]");
    // a full project refuses the mute and leaves the link unused
    for id in ["a", "b"] {
        add(&mutes, &env, p, &mute(id, NOW + 60_000)).await;
    }
    let full = mutes
        .add_once(p, &mute("link2", NOW + 60_000), Some(NOW), link_expires)
        .await;
    assert_eq!(full.expect("add"), Added::Full { active: 2 }, "[{t}]");
    assert_eq!(mutes.link_used(p, "link2").await.expect("read"), None, "[{t}]");
    // concurrent confirmations of one link: one is stored, the others see it used
    let q = "5e3eef0679fa3700a0198a4a";
    let tries = (0..10).map(|_| {
        let mutes = mutes.clone();
        async move {
            mutes
                .add_once(q, &mute("link3", NOW + 60_000), Some(NOW), link_expires)
                .await
        }
    });
    let results = futures_util::future::join_all(tries).await;
    let stored = results
        .iter()
        .filter(|r| matches!(r, Ok(Added::Stored { .. })))
        .count();
    let used = results
        .iter()
        .filter(|r| matches!(r, Ok(Added::Used { .. })))
        .count();
    assert_eq!((stored, used), (1, 9), "[{t}] {results:?}");
}

#[tokio::test]
async fn an_action_link_mutes_once_even_after_its_mute_is_removed() {
    on_both(a_link_mutes_once).await;
}
