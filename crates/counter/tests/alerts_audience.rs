//! An alert's audience (`lua/alert_hear.lua`, the resolve's incident bookkeeping in `lua/alert_change.lua`)
//! against real Redis, single node and cluster: who heard of an alert after it opened is recorded once, at most
//! `MAX_HEARD_MEMBERS` per alert, never for a resolved or missing alert, and read back everywhere an alert is
//! read; a shared incident (a digest or release on PagerDuty) listed by several alerts is closed by the resolve of
//! the last of them only, and a redelivered resolve answers the same.

mod common;

use common::{on_both, Env};
use klaxon_core::alert::{alert_id, lifecycle_tasks, Alert, AlertChannel, AlertState, MAX_HEARD_MEMBERS};
use klaxon_core::{ChannelKind, Reason};
use klaxon_counter::{Alerts, Change, Heard, Hearing, Opened};

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

fn alerts(env: &Env) -> Alerts {
    Alerts::new(env.redis.clone(), &env.ns)
}

/// The alert a firing of (project, rule, group) opens at T0, with a Slack and a PagerDuty channel.
fn opening(project: &str, group: &str, resolve_after_ms: u64) -> Alert {
    Alert {
        id: alert_id(project, "r", group, "w1"),
        project_id: project.into(),
        project_name: None,
        rule_id: "r".into(),
        group: group.into(),
        title: format!("TypeError in {group}"),
        state: AlertState::Firing,
        firing: "w1".into(),
        fired_at_ms: T0,
        acknowledged_at_ms: None,
        acknowledged_by: None,
        resolved_at_ms: None,
        resolved_by: None,
        events: 0,
        last_event_at_ms: T0,
        resolve_after_ms,
        channels: vec![
            AlertChannel::of_rule(ChannelKind::Slack, "https://hooks.slack.test/A", None),
            AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", None),
        ],
        heard: Vec::new(),
        closes: Vec::new(),
    }
}

/// A member heard of on its own (an escalation step's new endpoint), its first message `first`.
fn step(channel: ChannelKind, endpoint: &str, first: &str) -> AlertChannel {
    AlertChannel {
        first_id: Some(first.into()),
        ..AlertChannel::of_rule(channel, endpoint, None)
    }
}

/// A shared member: the PagerDuty incident `first` (a digest or release that listed several alerts).
fn incident(first: &str) -> AlertChannel {
    AlertChannel {
        first_id: Some(first.into()),
        shared: true,
        ..AlertChannel::of_rule(ChannelKind::Pagerduty, "R0UTINGKEY", None)
    }
}

async fn open_all(env: &Env, a: &Alerts, opens: &[Alert]) {
    let opened = a
        .open(opens, Some(T0))
        .await
        .unwrap_or_else(|e| panic!("[{}] open failed: {e}", env.topology));
    assert!(
        opened.iter().all(|o| matches!(o, Opened::New(_))),
        "[{}] {opened:?}",
        env.topology
    );
}

async fn hear(env: &Env, a: &Alerts, records: &[Heard<'_>]) -> Vec<Hearing> {
    a.hear(records)
        .await
        .unwrap_or_else(|e| panic!("[{}] hear failed: {e}", env.topology))
}

fn heard<'a>(project: &'a str, alert: &'a Alert, member: &'a AlertChannel) -> Heard<'a> {
    Heard {
        project_id: project,
        alert_id: &alert.id,
        member,
    }
}

async fn get(env: &Env, a: &Alerts, project: &str, id: &str) -> Alert {
    a.get(project, id)
        .await
        .unwrap_or_else(|e| panic!("[{}] get failed: {e}", env.topology))
        .unwrap_or_else(|| panic!("[{}] alert {id} exists", env.topology))
}

async fn hear_once_bounded_and_only_while_open(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let al = opening("proj", "g", 0);
    let other = opening("other", "g", 0);
    open_all(&env, &a, std::slice::from_ref(&al)).await;
    open_all(&env, &a, std::slice::from_ref(&other)).await;
    let email = step(ChannelKind::Email, "oncall@example.com", "step1mail");
    let again = step(ChannelKind::Email, "oncall@example.com", "step2mail");
    let pd = step(ChannelKind::Pagerduty, "OTHERKEY", "step1pd");
    // two projects in one call: one answer per record, in order
    let got = hear(
        &env,
        &a,
        &[
            heard("proj", &al, &email),
            heard("other", &other, &pd),
            heard("proj", &al, &again),
            heard("proj", &al, &email),
        ],
    )
    .await;
    assert_eq!(
        got,
        vec![Hearing::Added, Hearing::Added, Hearing::Known, Hearing::Known],
        "[{t}] one member per (channel, endpoint), the first message wins"
    );
    let back = get(&env, &a, "proj", &al.id).await;
    assert_eq!(back.heard, vec![email.clone()], "[{t}]");
    assert_eq!(
        get(&env, &a, "other", &other.id).await.heard,
        vec![pd.clone()],
        "[{t}]"
    );
    // read back wherever an alert is read: a replayed open, the list, the open (rule, group)
    let o = a
        .open(std::slice::from_ref(&al), Some(T0 + 1))
        .await
        .expect("open");
    assert!(
        matches!(&o[0], Opened::Again(x) if x.heard == vec![email.clone()]),
        "[{t}] {o:?}"
    );
    let listed = a.list("proj", None, 10).await.expect("list");
    assert_eq!(listed[0].heard, vec![email.clone()], "[{t}]");
    let cur = a.current("proj", "r", "g").await.expect("current").expect("open");
    assert_eq!(
        cur.audience().len(),
        3,
        "[{t}] Slack, PagerDuty, the step's email"
    );
    // an acknowledged alert still hears (its resolve is to come); the acknowledge answers with its audience
    let c = a
        .acknowledge("proj", &al.id, "ana", Some(T0 + MIN))
        .await
        .expect("ack");
    assert!(
        matches!(&c, Change::Done(x) if x.heard == vec![email.clone()]),
        "[{t}] {c:?}"
    );
    // bounded: at most MAX_HEARD_MEMBERS members, the rest dropped and said so
    let many: Vec<AlertChannel> = (0..MAX_HEARD_MEMBERS + 5)
        .map(|i| {
            step(
                ChannelKind::Webhook,
                &format!("https://hooks.example.com/{i}"),
                &format!("step{i}"),
            )
        })
        .collect();
    let records: Vec<Heard<'_>> = many.iter().map(|m| heard("proj", &al, m)).collect();
    let got = hear(&env, &a, &records).await;
    let added = got.iter().filter(|h| **h == Hearing::Added).count();
    let full = got.iter().filter(|h| **h == Hearing::Full).count();
    assert_eq!((added, full), (MAX_HEARD_MEMBERS - 1, 6), "[{t}] {got:?}");
    assert_eq!(got.last(), Some(&Hearing::Full), "[{t}] the latest are dropped");
    // a member recorded already is still known when the alert is full
    assert_eq!(
        hear(&env, &a, &[heard("proj", &al, &email)]).await,
        vec![Hearing::Known],
        "[{t}]"
    );
    let back = get(&env, &a, "proj", &al.id).await;
    assert_eq!(back.heard.len(), MAX_HEARD_MEMBERS, "[{t}]");
    assert!(back.heard.contains(&email), "[{t}]");
    // resolved or missing: nothing recorded
    let c = a
        .resolve("proj", &al.id, "ana", Some(T0 + 2 * MIN))
        .await
        .expect("resolve");
    assert!(
        matches!(&c, Change::Done(x) if x.heard.len() == MAX_HEARD_MEMBERS),
        "[{t}]"
    );
    let late = step(ChannelKind::Telegram, "12345", "late");
    let missing = opening("proj", "never", 0);
    assert_eq!(
        hear(
            &env,
            &a,
            &[heard("proj", &al, &late), heard("proj", &missing, &late)]
        )
        .await,
        vec![Hearing::Gone, Hearing::Gone],
        "[{t}]"
    );
    assert!(
        !get(&env, &a, "proj", &al.id).await.heard.contains(&late),
        "[{t}]"
    );
    assert!(
        a.get("proj", &missing.id).await.expect("get").is_none(),
        "[{t}] hear creates no alert"
    );
    // a shared member without its incident's id is refused before Redis
    let bad = AlertChannel {
        first_id: None,
        ..incident("x")
    };
    assert!(a.hear(&[heard("other", &other, &bad)]).await.is_err(), "[{t}]");
    assert!(a.hear(&[]).await.expect("nothing to hear").is_empty());
}

#[tokio::test]
async fn hear_records_a_member_once_at_most_the_bound_and_only_while_the_alert_is_open() {
    on_both(hear_once_bounded_and_only_while_open).await;
}

async fn the_last_resolve_closes_a_shared_incident(env: Env) {
    let t = env.topology;
    let a = alerts(&env);
    let (x, y, z) = (
        opening("proj", "x", 0),
        opening("proj", "y", MIN as u64),
        opening("proj", "z", 0),
    );
    open_all(&env, &a, &[x.clone(), y.clone(), z.clone()]).await;
    // digest d1 listed all three; release q2 listed x only
    let (d1, q2) = (incident("d1"), incident("q2"));
    let got = hear(
        &env,
        &a,
        &[
            heard("proj", &x, &d1),
            heard("proj", &y, &d1),
            heard("proj", &z, &d1),
            heard("proj", &x, &q2),
        ],
    )
    .await;
    assert_eq!(got, vec![Hearing::Added; 4], "[{t}]");
    let set = format!("{}:al:{{proj}}:inc:d1", env.ns);
    let members: Vec<String> = env.query(redis::cmd("SMEMBERS").arg(&set)).await;
    assert_eq!(members.len(), 3, "[{t}] {members:?}");
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(&set)).await;
    assert!(ttl > 0, "[{t}] the incident's set expires ({ttl})");
    // x resolves: it was q2's only alert (closes it), d1 still lists y and z
    let c = a
        .resolve("proj", &x.id, "ana", Some(T0 + MIN))
        .await
        .expect("resolve");
    let Change::Done(rx) = c else {
        panic!("[{t}] {c:?}")
    };
    assert_eq!(rx.closes, vec!["q2".to_owned()], "[{t}]");
    let firsts = |tasks: Vec<klaxon_core::NotificationTask>| -> Vec<String> {
        tasks
            .into_iter()
            .map(|task| task.alert.expect("a ref").firing_notification_id)
            .filter(|f| f.len() == 2)
            .collect()
    };
    assert_eq!(
        firsts(lifecycle_tasks(&rx, Reason::Resolved, T0 + MIN)),
        vec!["q2"],
        "[{t}]"
    );
    // y resolves by its timer: d1 still lists z
    let c = a
        .resolve_due("proj", &y.id, Some(T0 + 2 * MIN))
        .await
        .expect("due");
    assert!(
        matches!(&c, Change::Done(ry) if ry.closes.is_empty()),
        "[{t}] {c:?}"
    );
    // z, the last: its resolve closes d1; its acknowledge before reached d1 (an ack of any listed alert)
    let c = a
        .acknowledge("proj", &z.id, "bob", Some(T0 + 2 * MIN))
        .await
        .expect("ack");
    let Change::Done(az) = c else {
        panic!("[{t}] {c:?}")
    };
    assert_eq!(
        firsts(lifecycle_tasks(&az, Reason::Acknowledged, T0)),
        vec!["d1"],
        "[{t}]"
    );
    let c = a
        .resolve("proj", &z.id, "bob", Some(T0 + 3 * MIN))
        .await
        .expect("resolve");
    let Change::Done(rz) = c else {
        panic!("[{t}] {c:?}")
    };
    assert_eq!(rz.closes, vec!["d1".to_owned()], "[{t}]");
    assert_eq!(
        firsts(lifecycle_tasks(&rz, Reason::Resolved, T0)),
        vec!["d1"],
        "[{t}]"
    );
    let exists: i64 = env.query(redis::cmd("EXISTS").arg(&set)).await;
    assert_eq!(exists, 0, "[{t}] an empty incident leaves no key");
    // a redelivered resolve (a retried request, a timer) answers the same closes
    let c = a
        .resolve("proj", &z.id, "bob", Some(T0 + 4 * MIN))
        .await
        .expect("resolve");
    assert!(
        matches!(&c, Change::AlreadyResolved(r) if r.closes == vec!["d1".to_owned()]),
        "[{t}] {c:?}"
    );
    let c = a
        .resolve_due("proj", &x.id, Some(T0 + 5 * MIN))
        .await
        .expect("due");
    assert!(
        matches!(&c, Change::AlreadyResolved(r) if r.closes == vec!["q2".to_owned()]),
        "[{t}] {c:?}"
    );
    // and the list reads them too
    let listed = a
        .list("proj", Some(AlertState::Resolved), 10)
        .await
        .expect("list");
    let closes: Vec<Vec<String>> = listed.iter().map(|l| l.closes.clone()).collect();
    assert!(
        closes.contains(&vec!["d1".to_owned()]) && closes.contains(&vec![]),
        "[{t}] {closes:?}"
    );
}

#[tokio::test]
async fn a_shared_incident_listed_by_three_alerts_closes_with_the_last_resolve_only() {
    on_both(the_last_resolve_closes_a_shared_incident).await;
}
