//! NO_EVENTS state (`lua/no_events_*.lua`) against real Redis, single node and cluster: one timer per rule (not
//! per event), a due timer that fires once across concurrent workers and duplicates, reschedules while events
//! come, answers a redelivery as the first time, the next event ending the silence, the clock starting at a rule's
//! storing, lost timers found again, and the hash expiring.

mod common;

use common::{on_both, Env};
use klaxon_counter::no_events::{Due, NoEvents, Seen, SeenBy, Watched, KEEP_AFTER_MS};

const T0: i64 = 1_700_000_000_000;
const Q: u64 = 60_000;
const EVENTS: SeenBy = SeenBy::Events { redelivered: false };

fn state(env: &Env) -> NoEvents {
    NoEvents::new(env.redis.clone(), &env.ns)
}

fn rules(quiet: u64) -> Vec<(&'static str, Vec<Watched<'static>>)> {
    vec![(
        "Proj",
        vec![Watched {
            rule_id: "r",
            quiet_period_ms: quiet,
        }],
    )]
}

async fn seen(env: &Env, s: &NoEvents, by: SeenBy, quiet: u64, now: i64) -> Seen {
    let mut out = s
        .seen(&rules(quiet), by, Some(now))
        .await
        .unwrap_or_else(|e| panic!("[{}] seen failed: {e}", env.topology));
    assert_eq!(out.len(), 1);
    out.remove(0)
}

async fn due(env: &Env, s: &NoEvents, at: i64, quiet: Option<u64>, redelivered: bool, now: i64) -> Due {
    s.due("Proj", "r", at, quiet, redelivered, Some(now))
        .await
        .unwrap_or_else(|e| panic!("[{}] due failed: {e}", env.topology))
}

fn schedule(at: i64) -> Seen {
    Seen {
        schedule: vec![("r".into(), at)],
        resolve: vec![],
    }
}

async fn one_timer_fires_once_and_the_next_event_ends_it(env: Env) {
    let t = env.topology;
    let s = state(&env);
    // the first event asks for the timer; the next ones do not (one is pending)
    assert_eq!(
        seen(&env, &s, EVENTS, Q, T0).await,
        schedule(T0 + Q as i64),
        "[{t}]"
    );
    for i in 1..5 {
        assert_eq!(
            seen(&env, &s, EVENTS, Q, T0 + i * 1_000).await,
            Seen::default(),
            "[{t}]"
        );
    }
    let last = T0 + 4_000;
    assert_eq!(s.last_event("proj").await.ok().flatten(), Some(last), "[{t}]");
    // the timer comes due: events came since, so it moves to the last event + quietPeriod
    let first = T0 + Q as i64;
    let next = last + Q as i64;
    assert_eq!(
        due(&env, &s, first, Some(Q), false, first).await,
        Due::Reschedule { at_ms: next },
        "[{t}]"
    );
    // a duplicate of the first timer is stale; redelivered, it names the same next timer again
    assert_eq!(
        due(&env, &s, first, Some(Q), false, first + 5).await,
        Due::Stale,
        "[{t}]"
    );
    assert_eq!(
        due(&env, &s, first, Some(Q), true, first + 5).await,
        Due::Reschedule { at_ms: next },
        "[{t}]"
    );
    // not quiet long enough yet (a timer that came early): the same time again
    assert_eq!(
        due(&env, &s, next, Some(Q), false, next - 10).await,
        Due::Reschedule { at_ms: next },
        "[{t}]"
    );
    // silent for quietPeriod: three workers with the same timer, one fires
    let calls = (0..3).map(|_| s.due("Proj", "r", next, Some(Q), false, Some(next + 7)));
    let answers: Vec<Due> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("[{t}] due failed: {e}")))
        .collect();
    let fire = Due::Fire {
        since_ms: last,
        last_event_ms: Some(last),
        at_ms: next + 7,
    };
    assert_eq!(
        answers.iter().filter(|a| **a == fire).count(),
        1,
        "[{t}] {answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|a| **a == Due::Stale).count(),
        2,
        "[{t}] {answers:?}"
    );
    // a redelivered firing timer fires again (same silence: same ids downstream); a duplicate does not
    assert!(
        matches!(due(&env, &s, next, Some(Q), true, next + 9).await, Due::Fire { since_ms, .. } if since_ms == last),
        "[{t}]"
    );
    assert_eq!(
        due(&env, &s, next, Some(Q), false, next + 9).await,
        Due::Stale,
        "[{t}]"
    );
    // no timer pending while the silence is open: nothing fires twice
    // the next event ends the silence and restarts the clock
    let back = next + 30_000;
    let want = Seen {
        schedule: vec![("r".into(), back + Q as i64)],
        resolve: vec![("r".into(), last)],
    };
    assert_eq!(seen(&env, &s, EVENTS, Q, back).await, want, "[{t}]");
    // until it is settled, every batch says so again (the resolve is idempotent downstream)
    assert_eq!(
        seen(&env, &s, EVENTS, Q, back + 1).await.resolve,
        want.resolve,
        "[{t}]"
    );
    assert_eq!(s.settle("Proj", "r", last).await.ok(), Some(true), "[{t}]");
    assert_eq!(s.settle("Proj", "r", last).await.ok(), Some(false), "[{t}]");
    assert_eq!(
        seen(&env, &s, EVENTS, Q, back + 2).await,
        Seen::default(),
        "[{t}]"
    );
    // the hash expires: a little after the longest quietPeriod, as long as an alert while a silence is open
    let key = format!("{}:ne:{{proj}}", env.ns);
    let ttl: i64 = env.query(redis::cmd("PTTL").arg(&key)).await;
    assert!(
        ttl > 0 && ttl <= (Q + KEEP_AFTER_MS) as i64 + 1_000,
        "[{t}] {ttl}"
    );
}

#[tokio::test]
async fn one_timer_per_rule_fires_once_and_the_next_event_ends_the_silence() {
    on_both(one_timer_fires_once_and_the_next_event_ends_it).await;
}

async fn armed_and_lost(env: Env) {
    let t = env.topology;
    let s = state(&env);
    let q = Q as i64;
    // stored through Klaxon before any event: the clock starts at the storing, once
    assert_eq!(
        seen(&env, &s, SeenBy::Armed, Q, T0).await,
        schedule(T0 + q),
        "[{t}]"
    );
    assert_eq!(
        seen(&env, &s, SeenBy::Armed, Q, T0 + 5_000).await,
        Seen::default(),
        "[{t}]"
    );
    // a shorter quietPeriod stored since: the timer is asked for earlier
    assert_eq!(
        seen(&env, &s, SeenBy::Armed, Q / 2, T0 + 6_000).await,
        schedule(T0 + q / 2),
        "[{t}]"
    );
    // the earlier timer is now stale; the new one fires from the storing, no event ever seen
    assert_eq!(
        due(&env, &s, T0 + q, Some(Q / 2), false, T0 + q).await,
        Due::Stale,
        "[{t}]"
    );
    assert_eq!(
        due(&env, &s, T0 + q / 2, Some(Q / 2), false, T0 + q / 2).await,
        Due::Fire {
            since_ms: T0,
            last_event_ms: None,
            at_ms: T0 + q / 2
        },
        "[{t}]"
    );
    // storing it again while the silence is open neither restarts it nor schedules a second firing
    assert_eq!(
        seen(&env, &s, SeenBy::Armed, Q / 2, T0 + q).await,
        Seen::default(),
        "[{t}]"
    );
    // the rule's first event ends it
    let ev = T0 + 2 * q;
    let got = seen(&env, &s, EVENTS, Q, ev).await;
    assert_eq!(got.resolve, vec![("r".to_owned(), T0)], "[{t}]");
    assert_eq!(got.schedule, vec![("r".to_owned(), ev + q)], "[{t}]");
    // a redelivered batch asks for its pending timer again (the first delivery may have died before publishing)
    let again = seen(&env, &s, SeenBy::Events { redelivered: true }, Q, ev + 1).await;
    assert_eq!(again.schedule, vec![("r".to_owned(), ev + q)], "[{t}]");
    // a pending timer a minute late was lost: the next event asks for a new one
    let late = ev + q + 61_000;
    assert_eq!(
        seen(&env, &s, EVENTS, Q, late).await.schedule,
        vec![("r".to_owned(), late + q)],
        "[{t}]"
    );
    // the rule deleted (or disabled): its timer forgets it
    assert_eq!(
        due(&env, &s, late + q, None, false, late + q).await,
        Due::Forgotten,
        "[{t}]"
    );
    assert_eq!(
        due(&env, &s, late + q, Some(Q), false, late + q).await,
        Due::Stale,
        "[{t}]"
    );
    // a project without watched rules costs no call and answers nothing
    let none: Vec<(&str, Vec<Watched<'_>>)> = vec![("other", vec![])];
    assert_eq!(
        s.seen(&none, EVENTS, Some(T0)).await.ok(),
        Some(vec![Seen::default()]),
        "[{t}]"
    );
    let other: bool = env
        .query(redis::cmd("EXISTS").arg(format!("{}:ne:{{other}}", env.ns)))
        .await;
    assert!(!other, "[{t}]");
}

#[tokio::test]
async fn the_clock_starts_at_the_storing_and_lost_timers_are_found_again() {
    on_both(armed_and_lost).await;
}
