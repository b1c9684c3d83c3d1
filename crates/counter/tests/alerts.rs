//! Alerts (`lua/alert_*.lua`, `lua/alerts_read.lua`) against real Redis, single node and cluster: one alert per
//! firing across concurrent workers and retried batches, events counted while open, `resolveAfter` resolving once
//! and only when due (also when an event races the timer), acknowledge and resolve by hand with their replays, the
//! per-project cap, and every key expiring.

mod common;

use common::{on_both, Env};
use klaxon_core::alert::{alert_id, Alert, AlertChannel, AlertState, RESOLVED_RETENTION_MS};
use klaxon_core::ChannelKind;
use klaxon_counter::{Alerts, Change, Opened, Touch};

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
    for g in ["g1", "g2", "g3"] {
        let o = open(&env, &a, &[opening("r", g, "w", T0, 0)], &[], T0).await;
        assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    }
    // three open alerts: the fourth does not open
    let o = open(&env, &a, &[opening("r", "g4", "w", T0, 0)], &[], T0).await;
    assert_eq!(o, vec![Opened::Full], "[{t}]");
    // one resolved: it is forgotten first, and the fourth opens
    let g1 = alert_id("proj", "r", "g1", "w");
    change(&env, a.resolve("proj", &g1, "ana", Some(T0 + 1)).await).await;
    let o = open(&env, &a, &[opening("r", "g4", "w", T0 + 2, 0)], &[], T0 + 2).await;
    assert!(matches!(o[0], Opened::New(_)), "[{t}] {o:?}");
    assert_eq!(a.list("proj", None, 100).await.expect("list").len(), 3, "[{t}]");
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
