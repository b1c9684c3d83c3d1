//! Alerts (`lua/alert_*.lua`, `lua/alerts_read.lua`) against real Redis, single node and cluster: one alert per
//! firing across concurrent workers and retried batches, events counted while open, `resolveAfter` resolving once
//! and only when due (also when an event races the timer), acknowledge and resolve by hand with their replays, the
//! per-project cap (a resolved alert's slot reusable at once, the share of alerts resolved by hand only), titles
//! cut to 1 KiB, and every key expiring.

mod common;

use common::{on_both, Env};
use klaxon_core::alert::{
    alert_id, bounded_group, Alert, AlertChannel, AlertState, MAX_ALERT_TITLE_BYTES, RESOLVED_RETENTION_MS,
};
use klaxon_core::ChannelKind;
use klaxon_counter::{Alerts, Change, NotOpened, Opened, Touch, Usage};

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

fn alerts(env: &Env) -> Alerts {
    Alerts::new(env.redis.clone(), &env.ns)
}

/// The alert a firing of (rule, group) with `firing` as its token would open at `at`.
fn opening(rule: &str, group: &str, firing: &str, at: i64, resolve_after_ms: u64) -> Alert {
    Alert {
        id: alert_id("proj", rule, group, firing),
        project_id: "proj".into(),
        project_name: Some("Shop".into()),
        rule_id: rule.into(),
        group: group.into(),
        title: format!("TypeError in {group}"),
        state: AlertState::Firing,
        firing: firing.into(),
        fired_at_ms: at,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 0,
        last_event_at_ms: at,
        resolve_after_ms,
        channels: vec![
            AlertChannel::of_rule(ChannelKind::Webhook, "https://example.com/hook", None),
            AlertChannel::of_rule(
                ChannelKind::Pagerduty,
                "R0UTINGKEY",
                Some(klaxon_core::Severity::Critical),
            ),
        ],
        heard: Vec::new(),
        closes: Vec::new(),
    }
}

fn touch<'a>(rule: &'a str, group: &'a str, events: u64, at_ms: i64) -> Touch<'a> {
    Touch {
        project_id: "proj",
        rule_id: rule,
        group,
        events,
        at_ms,
    }
}

async fn open(env: &Env, a: &Alerts, opens: &[Alert], touches: &[Touch<'_>], now: i64) -> Vec<Opened> {
    let opened = match a.open(opens, Some(now)).await {
        Ok(o) => o,
        Err(e) => panic!("[{}] open failed: {e}", env.topology),
    };
    if let Err(e) = a.touch(touches).await {
        panic!("[{}] touch failed: {e}", env.topology);
    }
    opened
}

async fn change(env: &Env, c: Result<Change, klaxon_counter::CounterError>) -> Change {
    c.unwrap_or_else(|e| panic!("[{}] change failed: {e}", env.topology))
}

async fn opens_once_counts_events_and_resolves_when_due(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let first = opening("r", "g", "w1", T0, 5 * MIN as u64);
    let o = open(
        &env,
        &a,
        std::slice::from_ref(&first),
        &[touch("r", "g", 1, T0)],
        T0,
    )
    .await;
    let Opened::New(opened) = &o[0] else {
        panic!("[{t}] the first firing opens: {o:?}")
    };
    assert_eq!(opened.id, first.id);
    assert_eq!(opened.channels, first.channels, "[{t}] the channels are kept");
    assert_eq!(opened.project_name.as_deref(), Some("Shop"));
    // the same firing again (a redelivered event, another worker): the same alert, not a new one
    let o = open(&env, &a, std::slice::from_ref(&first), &[], T0 + 1).await;
    assert!(
        matches!(&o[0], Opened::Again(x) if x.id == first.id),
        "[{t}] {o:?}"
    );
    // another firing while it is open repeats it
    let second = opening("r", "g", "w2", T0 + MIN, 5 * MIN as u64);
    let o = open(&env, &a, &[second], &[touch("r", "g", 4, T0 + MIN)], T0 + MIN).await;
    assert!(
        matches!(&o[0], Opened::Repeat(x) if x.id == first.id),
        "[{t}] {o:?}"
    );
    // events counted: 1 + 4, the last at T0 + 1 min
    let got = a.get("proj", &first.id).await.expect("get").expect("exists");
    assert_eq!((got.events, got.last_event_at_ms), (5, T0 + MIN), "[{t}]");
    assert_eq!(
        a.current("proj", "r", "g").await.expect("current").map(|x| x.id),
        Some(first.id.clone())
    );
    // the timer at T0 + 5 min is early: an event came at T0 + 1 min, so it is due at T0 + 6 min
    let c = change(&env, a.resolve_due("proj", &first.id, Some(T0 + 5 * MIN)).await).await;
    assert_eq!(c, Change::NotDue { at_ms: T0 + 6 * MIN }, "[{t}]");
    let c = change(&env, a.resolve_due("proj", &first.id, Some(T0 + 6 * MIN)).await).await;
    let Change::Done(resolved) = c else {
        panic!("[{t}] due at T0 + 6 min: {c:?}")
    };
    assert_eq!(resolved.state, AlertState::Resolved);
    assert_eq!(resolved.resolved_at_ms, Some(T0 + 6 * MIN));
    assert_eq!(resolved.resolved_by.as_deref(), Some("timeout"));
    // a redelivered timer finds it resolved: the same answer to republish from, nothing changes
    let c = change(&env, a.resolve_due("proj", &first.id, Some(T0 + 7 * MIN)).await).await;
    assert!(
        matches!(&c, Change::AlreadyResolved(x) if x.resolved_at_ms == Some(T0 + 6 * MIN)),
        "[{t}] {c:?}"
    );
    // the (rule, group) is free: events touch nothing, and the next firing opens a new alert
    assert!(a.current("proj", "r", "g").await.expect("current").is_none());
    let third = opening("r", "g", "w3", T0 + 8 * MIN, 5 * MIN as u64);
    let o = open(
        &env,
        &a,
        std::slice::from_ref(&third),
        &[touch("r", "g", 1, T0 + 8 * MIN)],
        T0 + 8 * MIN,
    )
    .await;
    assert!(
        matches!(&o[0], Opened::New(x) if x.id == third.id && x.id != first.id),
        "[{t}] {o:?}"
    );
    let old = a
        .get("proj", &first.id)
        .await
        .expect("get")
        .expect("kept for its history");
    assert_eq!(old.events, 5, "[{t}] a resolved alert counts nothing more");
    // the list: newest first, by state
    let all = a.list("proj", None, 100).await.expect("list");
    assert_eq!(
        all.iter().map(|x| (x.id.as_str(), x.state)).collect::<Vec<_>>(),
        vec![
            (third.id.as_str(), AlertState::Firing),
            (first.id.as_str(), AlertState::Resolved)
        ],
        "[{t}]"
    );
    let resolved = a
        .list("proj", Some(AlertState::Resolved), 100)
        .await
        .expect("list");
    assert_eq!(resolved.len(), 1);
    // every key expires: the resolved alert after its retention
    let key = format!("{}:al:{{proj}}:a:{}", env.ns, first.id);
    let pttl: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    assert!(
        (RESOLVED_RETENTION_MS - 60_000..=RESOLVED_RETENTION_MS).contains(&pttl),
        "[{t}] kept {RESOLVED_RETENTION_MS} ms after its resolve: {pttl}"
    );
    for k in [
        format!("{}:al:{{proj}}:idx", env.ns),
        format!("{}:al:{{proj}}:cur:r:g", env.ns),
        format!("{}:al:{{proj}}:a:{}", env.ns, third.id),
    ] {
        let ttl: i64 = env.query(redis::cmd("PTTL").arg(&k)).await;
        assert!(ttl > 0, "[{t}] {k} expires ({ttl})");
    }
}

#[tokio::test]
async fn an_alert_opens_once_counts_its_events_and_resolves_when_due() {
    on_both(opens_once_counts_events_and_resolves_when_due).await;
}

/// `alert_open.lua` answers a new alert with its id only; the alert the caller gets is built from what it sent and
/// must be exactly what the hash holds (a long group and title are stored bounded, the events and times as sent).
async fn a_new_alerts_answer_is_what_its_hash_holds(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let mut first = opening("r", &"g".repeat(300), "w1", T0, 5 * MIN as u64);
    first.title = "T".repeat(MAX_ALERT_TITLE_BYTES + 100);
    first.events = 3;
    let o = open(&env, &a, std::slice::from_ref(&first), &[], T0).await;
    let Opened::New(opened) = &o[0] else {
        panic!("[{t}] opens: {o:?}")
    };
    let stored = a.get("proj", &first.id).await.expect("get").expect("the alert");
    assert_eq!(opened, &stored, "[{t}] the answer is the stored alert");
    assert_eq!(stored.group, bounded_group(&first.group), "[{t}]");
    assert_eq!((stored.events, stored.last_event_at_ms), (3, T0), "[{t}]");
}

#[tokio::test]
async fn a_new_alerts_answer_is_what_its_hash_holds_on_both() {
    on_both(a_new_alerts_answer_is_what_its_hash_holds).await;
}

async fn concurrent_workers_open_one_alert(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    // 8 workers see the same firing (a redelivery storm) at once: one New, the rest Again, one alert
    let al = opening("r", "hot", "w1", T0, 0);
    let calls = (0..8).map(|i| {
        let a = a.clone();
        let al = al.clone();
        async move { a.open(&[al], Some(T0 + i)).await }
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut new = 0;
    for answer in answers {
        match answer.expect("open").as_slice() {
            [Opened::New(x)] => {
                new += 1;
                assert_eq!(x.id, al.id);
            }
            [Opened::Again(x)] => assert_eq!(x.id, al.id),
            other => panic!("[{t}] {other:?}"),
        }
    }
    assert_eq!(new, 1, "[{t}] one worker opens it");
    // 8 workers with 8 different firings of one (rule, group) (e.g. windows crossing on several workers): one
    // alert, the others repeat it
    let calls = (0..8).map(|i| {
        let a = a.clone();
        let al = opening("r", "other", &format!("w{i}"), T0, 0);
        async move { a.open(&[al], Some(T0)).await }
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut ids = std::collections::BTreeSet::new();
    let mut new = 0;
    for answer in answers {
        match answer.expect("open").as_slice() {
            [Opened::New(x)] => {
                new += 1;
                ids.insert(x.id.clone());
            }
            [Opened::Repeat(x)] => {
                ids.insert(x.id.clone());
            }
            other => panic!("[{t}] {other:?}"),
        }
    }
    assert_eq!((new, ids.len()), (1, 1), "[{t}] one alert: {ids:?}");
    assert_eq!(
        a.list("proj", Some(AlertState::Firing), 100)
            .await
            .expect("list")
            .len(),
        2
    );
}

#[tokio::test]
async fn concurrent_workers_open_one_alert_per_rule_and_group() {
    on_both(concurrent_workers_open_one_alert).await;
}

async fn resolve_races_an_event(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let al = opening("r", "g", "w1", T0, MIN as u64);
    open(&env, &a, std::slice::from_ref(&al), &[touch("r", "g", 1, T0)], T0).await;
    // the timer and an event at the same instant, concurrently: whichever Redis runs first wins, and the result
    // is consistent — resolved with the event not counted, or not due with the event counted
    let due = T0 + MIN;
    let racing = [touch("r", "g", 1, due)];
    let (c, touched) = tokio::join!(a.resolve_due("proj", &al.id, Some(due)), a.touch(&racing));
    touched.expect("touch");
    let after = a.get("proj", &al.id).await.expect("get").expect("exists");
    match c.expect("resolve") {
        Change::Done(x) => {
            assert_eq!(x.state, AlertState::Resolved);
            // the event came after the resolve (it counted nothing) or just before it (counted, then resolved)
            assert!(after.events == 1 || after.events == 2, "[{t}] {after:?}");
            assert_eq!(after.state, AlertState::Resolved);
        }
        Change::NotDue { at_ms } => {
            assert_eq!(at_ms, due + MIN, "[{t}] the event moved the due time");
            assert_eq!((after.events, after.state), (2, AlertState::Firing), "[{t}]");
        }
        other => panic!("[{t}] {other:?}"),
    }
}

#[tokio::test]
async fn a_resolve_racing_a_new_event_is_consistent() {
    on_both(resolve_races_an_event).await;
}

async fn ack_and_hand_resolve(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let al = opening("r", "g", "w1", T0, 0);
    open(&env, &a, std::slice::from_ref(&al), &[], T0).await;
    // resolveAfter 0: the timer never resolves it
    let c = change(&env, a.resolve_due("proj", &al.id, Some(T0 + 100 * MIN)).await).await;
    assert!(matches!(c, Change::Never(_)), "[{t}] {c:?}");
    let c = change(&env, a.acknowledge("proj", &al.id, "ana", Some(T0 + MIN)).await).await;
    let Change::Done(acked) = c else {
        panic!("[{t}] {c:?}")
    };
    assert_eq!(acked.state, AlertState::Acknowledged);
    assert_eq!(
        (acked.acknowledged_at_ms, acked.acknowledged_by.as_deref()),
        (Some(T0 + MIN), Some("ana"))
    );
    let c = change(
        &env,
        a.acknowledge("proj", &al.id, "bob", Some(T0 + 2 * MIN)).await,
    )
    .await;
    assert!(
        matches!(&c, Change::AlreadyAcknowledged(x) if x.acknowledged_by.as_deref() == Some("ana")),
        "[{t}] {c:?}"
    );
    // an acknowledged alert is still open: a firing repeats it
    let o = open(
        &env,
        &a,
        &[opening("r", "g", "w2", T0 + 3 * MIN, 0)],
        &[],
        T0 + 3 * MIN,
    )
    .await;
    assert!(matches!(&o[0], Opened::Repeat(x) if x.id == al.id), "[{t}] {o:?}");
    let c = change(&env, a.resolve("proj", &al.id, "bob", Some(T0 + 4 * MIN)).await).await;
    assert!(
        matches!(&c, Change::Done(x) if x.resolved_by.as_deref() == Some("bob") && x.acknowledged_by.as_deref() == Some("ana")),
        "[{t}] {c:?}"
    );
    let c = change(
        &env,
        a.acknowledge("proj", &al.id, "ana", Some(T0 + 5 * MIN)).await,
    )
    .await;
    assert!(
        matches!(c, Change::AlreadyResolved(_)),
        "[{t}] ack of a resolved alert says so: {c:?}"
    );
    let c = change(&env, a.resolve("proj", &al.id, "ana", Some(T0 + 5 * MIN)).await).await;
    assert!(
        matches!(&c, Change::AlreadyResolved(x) if x.resolved_by.as_deref() == Some("bob")),
        "[{t}] {c:?}"
    );
    // unknown ids
    let unknown = alert_id("proj", "r", "g", "never");
    for c in [
        a.acknowledge("proj", &unknown, "x", Some(T0)).await,
        a.resolve("proj", &unknown, "x", Some(T0)).await,
        a.resolve_due("proj", &unknown, Some(T0)).await,
    ] {
        assert_eq!(change(&env, c).await, Change::NotFound, "[{t}]");
    }
    assert!(a.get("proj", &unknown).await.expect("get").is_none());
    assert!(
        a.get("other", &al.id).await.expect("get").is_none(),
        "[{t}] alerts are per project"
    );
}

#[tokio::test]
async fn acknowledge_and_resolve_by_hand_with_their_replays() {
    on_both(ack_and_hand_resolve).await;
}

async fn the_cap(env: Env) {
    let t = env.topology;
    let a = alerts(&env).with_limit(3);
    let pages = 5 * MIN as u64;
    for g in ["g1", "g2", "g3"] {
        let o = open(&env, &a, &[opening("r", g, "w", T0, pages)], &[], T0).await;
        assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    }
    // three open alerts: the fourth does not open
    let o = open(&env, &a, &[opening("r", "g4", "w", T0, pages)], &[], T0).await;
    assert_eq!(o, vec![Opened::Full(NotOpened::ProjectFull)], "[{t}]");
    let full = a.full_projects(T0, 10).await.expect("full projects");
    assert_eq!(
        full,
        vec![("proj".to_owned(), T0)],
        "[{t}] the project is said to be full"
    );
    // one resolved: its slot is reusable at once, the fourth opens, and the resolved one is forgotten
    let g1 = alert_id("proj", "r", "g1", "w");
    change(&env, a.resolve("proj", &g1, "ana", Some(T0 + 1)).await).await;
    let o = open(&env, &a, &[opening("r", "g4", "w", T0 + 2, pages)], &[], T0 + 2).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert_eq!(a.list("proj", None, 100).await.expect("list").len(), 3, "[{t}]");
    assert!(
        a.get("proj", &g1).await.expect("get").is_none(),
        "[{t}] a forgotten resolved alert's state is deleted, not left to expire"
    );
}

#[tokio::test]
async fn a_project_keeps_at_most_its_limit_of_alerts() {
    on_both(the_cap).await;
}

async fn retried_batch(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    // a batch opens two alerts and counts its events; the worker crashes before acking; the batch comes back
    let opens = [
        opening("r", "a", "w1", T0, MIN as u64),
        opening("r", "b", "w1", T0, MIN as u64),
    ];
    let touches = [touch("r", "a", 3, T0), touch("r", "b", 2, T0)];
    let first = open(&env, &a, &opens, &touches, T0).await;
    assert!(
        first.iter().all(|o| matches!(o, Opened::New(_))),
        "[{t}] {first:?}"
    );
    let again = open(&env, &a, &opens, &touches, T0 + 5).await;
    assert!(
        again.iter().all(|o| matches!(o, Opened::Again(_))),
        "[{t}] {again:?}"
    );
    assert_eq!(
        first
            .iter()
            .map(|o| o.alert().map(|x| x.id.clone()))
            .collect::<Vec<_>>(),
        again
            .iter()
            .map(|o| o.alert().map(|x| x.id.clone()))
            .collect::<Vec<_>>(),
        "[{t}] the same alerts"
    );
    assert_eq!(
        a.list("proj", None, 100).await.expect("list").len(),
        2,
        "[{t}] two alerts, not four"
    );
}

#[tokio::test]
async fn a_retried_batch_opens_no_second_alert() {
    on_both(retried_batch).await;
}

/// Removes every key of the project's alerts that `ids` name (the big tests leave nothing behind).
async fn clean(env: &Env, groups: &[String], ids: &[String]) {
    let prefix = format!("{}:al:{{proj}}:", env.ns);
    let mut keys: Vec<String> = ["idx", "open", "hand", "res"]
        .iter()
        .map(|z| format!("{prefix}{z}"))
        .collect();
    keys.extend(groups.iter().map(|g| format!("{prefix}cur:r:{g}")));
    keys.extend(groups.iter().map(|g| format!("{prefix}cur:h:{g}")));
    keys.extend(ids.iter().map(|id| format!("{prefix}a:{id}")));
    keys.push(format!("{}:al:full", env.ns));
    env.redis.unlink(&keys).await.expect("unlink");
}

/// Issue #42: 16 alerts resolved by hand only (ONLY_NEW's default, open 30 days) and 984 resolved alerts used to
/// stop the project from opening any alert. A resolved alert's slot is reusable at once, so a new firing opens
/// its alert.
async fn resolved_slots_are_reused_at_once(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    assert_eq!((a.limit(), a.by_hand_limit()), (1000, 500));
    let pages = 5 * MIN as u64;
    let mut groups = Vec::new();
    let mut ids = Vec::new();
    // 16 by hand, opened first (the oldest)
    let by_hand: Vec<Alert> = (0..16)
        .map(|i| opening("h", &format!("hand{i}"), "w", T0 + i, 0))
        .collect();
    let o = open(&env, &a, &by_hand, &[], T0 + 16).await;
    assert!(o.iter().all(|x| matches!(x, Opened::New(_))), "[{t}] {o:?}");
    groups.extend((0..16).map(|i| format!("hand{i}")));
    ids.extend(by_hand.iter().map(|x| x.id.clone()));
    // 984 that page, opened and resolved
    let paging: Vec<Alert> = (0..984)
        .map(|i| opening("r", &format!("g{i}"), "w", T0 + 100 + i, pages))
        .collect();
    for chunk in paging.chunks(200) {
        let o = open(&env, &a, chunk, &[], T0 + 2000).await;
        assert!(o.iter().all(|x| matches!(x, Opened::New(_))), "[{t}] {o:?}");
    }
    groups.extend((0..984).map(|i| format!("g{i}")));
    ids.extend(paging.iter().map(|x| x.id.clone()));
    for (i, p) in paging.iter().enumerate() {
        // resolved one after the other: the first resolved is the first to expire
        let c = change(
            &env,
            a.resolve("proj", &p.id, "ana", Some(T0 + 3000 + i as i64)).await,
        )
        .await;
        assert!(matches!(c, Change::Done(_)), "[{t}] {c:?}");
    }
    assert_eq!(
        a.usage("proj").await.expect("usage"),
        Usage {
            kept: 1000,
            open: 16,
            by_hand: 16,
            limit: 1000,
            by_hand_limit: 500
        },
        "[{t}]"
    );
    // a new firing opens its alert: one resolved alert (the one that expires first) makes room
    let fresh = opening("r", "fresh", "w", T0 + 4000, pages);
    let o = open(&env, &a, std::slice::from_ref(&fresh), &[], T0 + 4000).await;
    assert!(matches!(&o[0], Opened::New(x) if x.id == fresh.id), "[{t}] {o:?}");
    groups.push("fresh".into());
    ids.push(fresh.id.clone());
    assert!(
        a.get("proj", &paging[0].id).await.expect("get").is_none(),
        "[{t}] the oldest resolved alert is forgotten"
    );
    assert!(
        a.get("proj", &paging[1].id).await.expect("get").is_some(),
        "[{t}]"
    );
    for h in &by_hand {
        assert!(
            a.current("proj", "h", &h.group).await.expect("current").is_some(),
            "[{t}]"
        );
    }
    let u = a.usage("proj").await.expect("usage");
    assert_eq!((u.kept, u.open, u.by_hand), (1000, 17, 16), "[{t}]");
    assert!(
        a.full_projects(0, 10).await.expect("full").is_empty(),
        "[{t}] the project was never full"
    );
    clean(&env, &groups, &ids).await;
}

#[tokio::test]
async fn sixteen_alerts_by_hand_and_984_resolved_leave_room_for_a_new_alert() {
    on_both(resolved_slots_are_reused_at_once).await;
}

/// Alerts that resolve only by hand hold at most half of the slots: the alerts that page always find room.
async fn the_by_hand_share(env: Env) {
    let t = env.topology;
    let a = alerts(&env).with_limit(4);
    assert_eq!(a.by_hand_limit(), 2);
    for g in ["h1", "h2"] {
        let o = open(&env, &a, &[opening("r", g, "w", T0, 0)], &[], T0).await;
        assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    }
    let o = open(&env, &a, &[opening("r", "h3", "w", T0 + 1, 0)], &[], T0 + 1).await;
    assert_eq!(o, vec![Opened::Full(NotOpened::ByHandShare)], "[{t}]");
    let u = a.usage("proj").await.expect("usage");
    assert_eq!(u.full(true), Some(NotOpened::ByHandShare), "[{t}] {u:?}");
    assert_eq!(u.full(false), None, "[{t}] {u:?}");
    // the alerts that page still open, up to the project's limit
    for g in ["p1", "p2"] {
        let o = open(
            &env,
            &a,
            &[opening("r", g, "w", T0 + 2, 5 * MIN as u64)],
            &[],
            T0 + 2,
        )
        .await;
        assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    }
    let o = open(
        &env,
        &a,
        &[opening("r", "p3", "w", T0 + 3, 5 * MIN as u64)],
        &[],
        T0 + 3,
    )
    .await;
    assert_eq!(o, vec![Opened::Full(NotOpened::ProjectFull)], "[{t}]");
    // one resolved by hand: its share has room again (and its slot too)
    let h1 = alert_id("proj", "r", "h1", "w");
    change(&env, a.resolve("proj", &h1, "ana", Some(T0 + 4)).await).await;
    let o = open(&env, &a, &[opening("r", "h3", "w", T0 + 5, 0)], &[], T0 + 5).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    let full = a.full_projects(T0, 10).await.expect("full");
    assert_eq!(
        full,
        vec![("proj".to_owned(), T0 + 3)],
        "[{t}] the last time it was full"
    );
}

#[tokio::test]
async fn alerts_resolved_by_hand_only_cannot_take_every_slot() {
    on_both(the_by_hand_share).await;
}

/// Issue #42: alert state kept the event's title uncut (up to 256 KiB) — 231 KB of shared Redis per firing. 100
/// firings with 200 KB titles, open and then resolved, grow the project's alert keys by at most 1 MB.
async fn titles_are_cut(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let title = format!("Err {}", "é".repeat(100 * 1024));
    let mut opens = Vec::new();
    for i in 0..100 {
        let mut o = opening("r", &format!("g{i}"), "w", T0, 5 * MIN as u64);
        o.title = title.clone();
        opens.push(o);
    }
    let o = open(&env, &a, &opens, &[], T0).await;
    let Opened::New(first) = &o[0] else {
        panic!("[{t}] {o:?}")
    };
    assert!(
        first.title.len() <= MAX_ALERT_TITLE_BYTES,
        "[{t}] {}",
        first.title.len()
    );
    assert!(
        first.title.starts_with("Err éé") && first.title.ends_with('…'),
        "[{t}]"
    );
    for x in &opens[..50] {
        change(&env, a.resolve("proj", &x.id, "ana", Some(T0 + 1)).await).await;
    }
    let listed = a.list("proj", None, 1000).await.expect("list");
    assert_eq!(listed.len(), 100, "[{t}]");
    assert!(
        listed.iter().all(|x| x.title.len() <= MAX_ALERT_TITLE_BYTES),
        "[{t}] every listed title is cut"
    );
    let prefix = format!("{}:al:{{proj}}:", env.ns);
    let mut keys: Vec<String> = ["idx", "open", "hand", "res"]
        .iter()
        .map(|z| format!("{prefix}{z}"))
        .collect();
    keys.extend((0..100).map(|i| format!("{prefix}cur:r:g{i}")));
    keys.extend(opens.iter().map(|x| format!("{prefix}a:{}", x.id)));
    let mut bytes = 0u64;
    for k in &keys {
        let used: Option<u64> = env.query(redis::cmd("MEMORY").arg("USAGE").arg(k)).await;
        bytes += used.unwrap_or(0);
    }
    eprintln!("measured: [{t}] {bytes} bytes of alert state for 100 alerts with 200 KB titles");
    assert!(bytes <= 1_000_000, "[{t}] {bytes} bytes for 100 alerts");
    let groups: Vec<String> = (0..100).map(|i| format!("g{i}")).collect();
    let ids: Vec<String> = opens.iter().map(|x| x.id.clone()).collect();
    clean(&env, &groups, &ids).await;
}

#[tokio::test]
async fn a_hundred_alerts_with_200_kb_titles_keep_under_1_mb() {
    on_both(titles_are_cut).await;
}

/// The wall clock, unix ms (touches run on Redis's clock, `TIME`).
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The `exp` field of alert hash `ak` and its PTTL.
async fn expiry(env: &Env, ak: &str) -> (Option<i64>, i64) {
    let e: Option<i64> = env.query(redis::cmd("HGET").arg(ak).arg("exp")).await;
    let p: i64 = env.query(redis::cmd("PTTL").arg(ak)).await;
    (e, p)
}

async fn hot_alert_expiry_steps(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let now = wall_ms();
    let after = 5 * MIN as u64;
    let mut first = opening("r", "hot", "w1", now, after);
    // an alert opens with the events of its firing
    first.events = 3;
    let o = open(&env, &a, std::slice::from_ref(&first), &[], now).await;
    let Opened::New(opened) = &o[0] else {
        panic!("[{t}] opens: {o:?}")
    };
    assert_eq!(opened.events, 3, "[{t}] it opens with its firing's events");
    let ak = format!("{}:al:{{proj}}:a:{}", env.ns, first.id);
    // the first touch extends the keys past what the event asks, by a step
    let asked = |last: i64| last + after as i64 + klaxon_core::alert::OPEN_RETENTION_MS;
    a.touch(&[touch("r", "hot", 2, now)]).await.expect("touch");
    let (e1, pttl1) = expiry(&env, &ak).await;
    let e1 = e1.unwrap_or_else(|| panic!("[{t}] the touch records when the keys expire"));
    assert!(
        e1 > asked(now),
        "[{t}] extended past what was asked: {e1} vs {}",
        asked(now)
    );
    assert!(
        pttl1 >= asked(now) - wall_ms(),
        "[{t}] never before its lifetime ({pttl1})"
    );
    // a touch a second later writes no expiry (inside the step), but counts and moves `last`
    a.touch(&[touch("r", "hot", 4, now + 1_000)])
        .await
        .expect("touch");
    let (e2, pttl2) = expiry(&env, &ak).await;
    assert_eq!(e2, Some(e1), "[{t}] no new expiry inside the step");
    assert!(
        pttl2 >= asked(now + 1_000) - wall_ms(),
        "[{t}] still never before its lifetime ({pttl2})"
    );
    let got = a.get("proj", &first.id).await.expect("get").expect("kept");
    assert_eq!((got.events, got.last_event_at_ms), (9, now + 1_000), "[{t}]");
    // an event past the step extends the keys again, and the open alert's entry follows
    a.touch(&[touch("r", "hot", 1, now + 2 * MIN)])
        .await
        .expect("touch");
    let (e3, _) = expiry(&env, &ak).await;
    let e3 = e3.expect("exp");
    assert!(e3 > asked(now + 2 * MIN), "[{t}] {e3}");
    let score: Option<f64> = env
        .query(
            redis::cmd("ZSCORE")
                .arg(format!("{}:al:{{proj}}:open", env.ns))
                .arg(&first.id),
        )
        .await;
    assert_eq!(
        score.map(|s| s as i64),
        Some(e3),
        "[{t}] the open entry says when its keys expire"
    );
}

#[tokio::test]
async fn a_hot_alert_extends_its_keys_once_a_step_and_opens_with_its_firing_events() {
    on_both(hot_alert_expiry_steps).await;
}

/// Issue #42: an event's group went into alert keys and the stored alert as it came — a 200 KB group made a
/// 200 KB `cur:` key name and a 200 KB field. Past `MAX_GROUP_KEY_BYTES` the group is held as its digest,
/// in the counting keys, the `cur:` key and the stored alert alike, so the event's group still finds its alert:
/// touched, looked up, resolved by hand (which reads the stored group back), and opened again after that.
async fn groups_are_bounded(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let group = format!("G{}", "x".repeat(200 * 1024));
    let short = "g-short".to_owned();
    let digest = bounded_group(&group).into_owned();
    assert!(digest.len() < 64 && digest.starts_with('#'), "{digest}");
    assert_eq!(
        bounded_group(&short),
        short.as_str(),
        "a short group is kept as it is"
    );

    // counting: the window's keys hold the digest, and the same group counts into the same window
    let spec = common::fixed(3, 10 * MIN as u64);
    let h = klaxon_counter::Hit::new("r", group.as_str(), spec).with_project("proj");
    let counting = env.counter.keys_of(&h);
    assert!(
        counting.iter().all(|k| k.len() < 200),
        "[{t}] {:?}",
        counting.iter().map(String::len).collect::<Vec<_>>()
    );
    assert_eq!(common::hit(&env, &h, T0).await, common::counted(1), "[{t}]");
    assert_eq!(common::hit(&env, &h, T0 + 1).await, common::counted(2), "[{t}]");

    // the alert: opened with the event's group, held by its digest
    let opening_of = |firing: &str| opening("r", &group, firing, T0, 0);
    let first = opening_of("w1");
    let o = open(
        &env,
        &a,
        std::slice::from_ref(&first),
        &[touch("r", &group, 2, T0 + 5)],
        T0,
    )
    .await;
    let Opened::New(opened) = &o[0] else {
        panic!("[{t}] {o:?}")
    };
    assert_eq!(opened.group, digest, "[{t}] the stored group is the digest");
    let prefix = format!("{}:al:{{proj}}:", env.ns);
    let cur = format!("{prefix}cur:r:{digest}");
    let raw_cur = format!("{prefix}cur:r:{group}");
    let exists = |k: String| {
        let env = env.clone();
        async move { env.query::<i64>(redis::cmd("EXISTS").arg(k)).await }
    };
    assert_eq!(exists(cur.clone()).await, 1, "[{t}] the cur: key by digest");
    assert_eq!(
        exists(raw_cur.clone()).await,
        0,
        "[{t}] no cur: key named by the 200 KB group"
    );
    let mut bytes = 0u64;
    let mut keys = vec![cur.clone(), format!("{prefix}a:{}", first.id)];
    keys.extend(counting.iter().cloned());
    for k in &keys {
        let used: Option<u64> = env.query(redis::cmd("MEMORY").arg("USAGE").arg(k)).await;
        eprintln!("[{t}] {used:?} bytes: {k}");
        bytes += used.unwrap_or(0);
    }
    eprintln!("measured: [{t}] {bytes} bytes of alert and counting state for one 200 KB group");
    assert!(
        bytes < 8 * 1024,
        "[{t}] {bytes} bytes for one alert of a 200 KB group"
    );

    // the event's (full) group finds it: counted into, looked up
    a.touch(&[touch("r", &group, 3, T0 + 10)]).await.expect("touch");
    let current = a.current("proj", "r", &group).await.expect("current");
    let current = current.unwrap_or_else(|| panic!("[{t}] the event's group finds its alert"));
    assert_eq!(current.id, first.id, "[{t}]");
    assert_eq!(current.events, 5, "[{t}] both touches counted");
    // the ids made from either form agree (the firing's notification id, as PagerDuty and email thread on it)
    assert_eq!(
        current.firing_notification_id(klaxon_core::ChannelKind::Webhook),
        klaxon_core::notification::notification_id(
            "proj",
            "r",
            &group,
            "w1",
            klaxon_core::ChannelKind::Webhook
        ),
        "[{t}]"
    );
    assert_eq!(
        alert_id("proj", "r", &group, "w1"),
        alert_id("proj", "r", &digest, "w1")
    );

    // resolved by hand (the script finds the cur: key from the stored group), then a new firing opens anew
    let done = change(&env, a.resolve("proj", &first.id, "ana", Some(T0 + 20)).await).await;
    assert!(matches!(done, Change::Done(_)), "[{t}] {done:?}");
    assert_eq!(
        exists(cur.clone()).await,
        0,
        "[{t}] the resolve freed the cur: key"
    );
    let second = opening_of("w2");
    let o = open(&env, &a, std::slice::from_ref(&second), &[], T0 + 30).await;
    assert!(
        matches!(&o[0], Opened::New(x) if x.id == second.id),
        "[{t}] {o:?}"
    );

    let ids = vec![first.id.clone(), second.id.clone()];
    clean(&env, &[digest], &ids).await;
    env.redis.unlink(&counting).await.expect("unlink");
}

#[tokio::test]
async fn a_200_kb_group_makes_no_200_kb_key_and_still_finds_its_alert() {
    on_both(groups_are_bounded).await;
}

/// Alerts opened before `<ns>:al:projects` existed (their project not registered) are found by the backfill
/// once, on the server and on every master of a cluster; a key that only looks like an index is not taken, a
/// second run does nothing (its record says what the first did), and the cross-project list then shows them.
async fn backfill(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    // three projects' alerts, as an earlier version left them: indexes without the registry
    let projects = [
        "aaaaaaaaaaaaaaaaaaaaaaa1",
        "bbbbbbbbbbbbbbbbbbbbbbb2",
        "ccccccccccccccccccccccc3",
    ];
    for p in projects {
        let mut opening = opening("r1", "g", "w1", T0, MIN as u64);
        opening.project_id = p.into();
        opening.id = alert_id(p, "r1", "g", "w1");
        let opened = a.open(&[opening], Some(T0)).await.expect("open");
        assert!(matches!(opened[0], Opened::New(_)), "[{t}] {opened:?}");
    }
    let _: i64 = env
        .query(redis::cmd("DEL").arg(format!("{}:al:projects", env.ns)))
        .await;
    // a group holding `}:idx` makes a key the pattern matches: not a project
    let _: () = env
        .query(
            redis::cmd("SET")
                .arg(format!("{}:al:{{zz}}:cur:r:x}}:idx", env.ns))
                .arg("1"),
        )
        .await;
    assert!(
        a.list_all(None, 10).await.expect("list").is_empty(),
        "[{t}] nothing listed before"
    );
    assert_eq!(a.backfill_record().await.expect("record"), None);

    let done = a.backfill_projects(T0).await.expect("backfill");
    assert_eq!(
        done,
        klaxon_counter::Backfilled::Done {
            projects: 3,
            capped: false
        },
        "[{t}]"
    );
    let mut listed: Vec<String> = a
        .list_all(None, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|x| x.project_id)
        .collect();
    listed.sort();
    assert_eq!(listed, projects, "[{t}]");
    assert_eq!(
        a.projects().await.expect("projects"),
        projects,
        "[{t}] zz is not a project"
    );
    // once per namespace: the record stays, a second start does nothing
    let record = a.backfill_record().await.expect("record").expect("a record");
    let v: serde_json::Value = serde_json::from_str(&record).expect("json");
    assert_eq!(
        (v["at"].as_i64(), v["projects"].as_u64()),
        (Some(T0), Some(3)),
        "[{t}] {record}"
    );
    assert_eq!(
        a.backfill_projects(T0 + 1).await.expect("again"),
        klaxon_counter::Backfilled::Already(record),
        "[{t}]"
    );
    // another process holding the lease: this one skips it
    let _: i64 = env
        .query(redis::cmd("DEL").arg(format!("{}:al:projects:backfilled", env.ns)))
        .await;
    let _: () = env
        .query(
            redis::cmd("SET")
                .arg(format!("{}:al:projects:backfill-lease", env.ns))
                .arg("1"),
        )
        .await;
    assert_eq!(
        a.backfill_projects(T0 + 2).await.expect("busy"),
        klaxon_counter::Backfilled::Busy,
        "[{t}]"
    );
}

#[tokio::test]
async fn alerts_opened_before_the_registry_are_backfilled_once() {
    on_both(backfill).await;
}

/// A process registers a project for the cross-project list with its first open, and trusts that registration
/// for `REGISTERED_TRUST`: its next opens of the project send no `SADD` (a registry emptied by hand stays empty
/// for it), another process (a new handle) registers it again, and a registry member the list forgets (its
/// index gone) is registered again by this process's next open.
async fn registration_trusted(env: Env) {
    let t = env.topology;
    let registered = |env: &Env| {
        let key = format!("{}:al:projects", env.ns);
        let redis = env.redis.clone();
        async move {
            let members: Vec<String> = redis::cmd("SMEMBERS")
                .arg(key)
                .query_async(&mut redis.clone())
                .await
                .expect("smembers");
            members
        }
    };
    let a = alerts(&env);
    let first = opening("r", "g1", "w1", T0, MIN as u64);
    let o = open(&env, &a, std::slice::from_ref(&first), &[], T0).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert_eq!(
        registered(&env).await,
        ["proj"],
        "[{t}] registered with its first open"
    );

    let _: i64 = env
        .query(redis::cmd("DEL").arg(format!("{}:al:projects", env.ns)))
        .await;
    let second = opening("r", "g2", "w1", T0 + 1, MIN as u64);
    let o = open(&env, &a, std::slice::from_ref(&second), &[], T0 + 1).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert!(
        registered(&env).await.is_empty(),
        "[{t}] the same process trusts its registration: no second SADD"
    );

    let other = alerts(&env);
    let third = opening("r", "g3", "w1", T0 + 2, MIN as u64);
    let o = open(&env, &other, std::slice::from_ref(&third), &[], T0 + 2).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert_eq!(
        registered(&env).await,
        ["proj"],
        "[{t}] another process registers it"
    );

    let ids = vec![first.id.clone(), second.id.clone(), third.id.clone()];
    clean(&env, &["g1".into(), "g2".into(), "g3".into()], &ids).await;
    // the index is gone: the list forgets the project, and this process registers it again with its next open
    let _: i64 = env
        .query(redis::cmd("DEL").arg(format!("{}:al:{{proj}}:idx", env.ns)))
        .await;
    assert!(a.list_all(None, 10).await.expect("list").is_empty(), "[{t}]");
    assert!(registered(&env).await.is_empty(), "[{t}] forgotten");
    let fourth = opening("r", "g4", "w1", T0 + 3, MIN as u64);
    let o = open(&env, &a, std::slice::from_ref(&fourth), &[], T0 + 3).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert_eq!(
        registered(&env).await,
        ["proj"],
        "[{t}] registered again after the list forgot it"
    );
    clean(&env, &["g4".into()], std::slice::from_ref(&fourth.id)).await;
    env.redis
        .unlink(&[format!("{}:al:projects", env.ns)])
        .await
        .expect("unlink");
}

#[tokio::test]
async fn a_process_registers_a_project_once_per_trust_period() {
    on_both(registration_trusted).await;
}
