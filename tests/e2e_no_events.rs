//! NO_EVENTS end to end (#34): the real `klaxon` binary, Redis, RabbitMQ's delay engine and a webhook receiver.
//! A project with a NO_EVENTS rule (`quietPeriod` 10 s, the shortest) sends an event, then stops: its timer,
//! armed when `klaxon rules import` stored the rule, comes due, finds the later event and moves to it, then fires
//! once; the project's next event resolves the alert with one resolved message. Inside a quiet window the
//! firing and the resolve are held into the window's one release while a bypassed PagerDuty gets them at once;
//! and a fleet of three delivers the firing once when the worker that claimed it dies before publishing. On a
//! channel with `minPeriod`, the resolve joins the channel's digest like a firing.

mod common;

use std::time::Duration;

use common::{object_id, quiet_window, until, Env};
use klaxon_testkit::http_sink::Reply;
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

/// A project's rules: one NO_EVENTS rule, silent after 10 s (the shortest), on `channels`, with `extra` fields.
fn rules(project: &str, channels: Value, extra: Value) -> Value {
    let mut rule = json!({
        "isEnabled": true,
        "whatToReceive": "NO_EVENTS",
        "quietPeriod": 10_000,
        "channels": channels,
    });
    if let (Some(rule), Value::Object(extra)) = (rule.as_object_mut(), extra) {
        rule.extend(extra);
    }
    json!([{"_id": project, "notifications": [rule]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_project_fires_once_and_its_next_event_resolves_it() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}}),
        json!({}),
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("Ping ({})", env.namespace);
    env.publish(&project, &title, "g").ok();
    // silent for 10 s after that event: one firing (the storing's timer moved to the event, then fired)
    let got = hook.wait_for_count(1, Duration::from_secs(40)).await;
    assert_eq!(got.len(), 1, "the firing; log:\n{}", k.logs());
    let fired = got[0].json();
    assert_eq!(fired["kind"], "no_events", "{fired}");
    assert_eq!(fired["projectId"], project.as_str(), "{fired}");
    assert_eq!(fired["events"][0]["groupHash"], "", "{fired}");
    assert_eq!(fired["noEvents"]["quietPeriodMs"], 10_000, "{fired}");
    assert!(fired["noEvents"]["lastSeenAt"].is_string(), "{fired}");
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();
    assert_eq!(alert_id.len(), 24, "{fired}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 1, "fired once; log:\n{}", k.logs());
    // the next event ends the silence: one resolved message for the alert
    env.publish(&project, &title, "g").ok();
    let got = hook.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "the resolve; log:\n{}", k.logs());
    let resolved = got[1].json();
    assert_eq!(resolved["kind"], "resolved", "{resolved}");
    assert_eq!(resolved["alertId"], alert_id.as_str(), "{resolved}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 2, "resolved once; log:\n{}", k.logs());
    assert_eq!(k.metric(r#"klaxon_no_events_timers_total{outcome="fired"}"#), 1.0);
    assert_eq!(k.metric(r#"klaxon_alerts_resolved_total{by="event"}"#), 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// On a webhook with `minPeriod` 20 s the silence's firing goes out at once (the channel was quiet), and the
/// event that ends it right after is inside the period: its resolve waits in the channel's digest, which lists it
/// (`"resolved": true`, the project's group `""`) 20 s after the firing; no resolved message of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resolve_of_a_silence_joins_the_channels_digest() {
    let hook = HttpSink::start().await.expect("sink");
    let chat = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&rules(
        &project,
        json!({
            "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 20},
            "slack": {"isEnabled": true, "endpoint": chat.url("/slack"), "minPeriod": 20}
        }),
        json!({}),
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("Tick ({})", env.namespace);
    env.publish(&project, &title, "g").ok();
    let got = hook.wait_for_count(1, Duration::from_secs(40)).await;
    assert_eq!(got.len(), 1, "the firing, at once; log:\n{}", k.logs());
    assert_eq!(got[0].json()["kind"], "no_events", "{}", got[0].json());
    // the silence ends inside the channel's period
    env.publish(&project, &title, "g").ok();
    k.wait_metric(
        r#"klaxon_alerts_resolved_total{by="event"}"#,
        1.0,
        Duration::from_secs(10),
    );
    let got = hook.wait_for_count(2, Duration::from_secs(20 + 15)).await;
    assert_eq!(got.len(), 2, "the digest; log:\n{}", k.logs());
    let digest = got[1].json();
    assert!(
        digest.get("kind").is_none(),
        "a digest, not a resolved message: {digest}"
    );
    let resolved: Vec<&Value> = digest["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["resolved"] == true)
        .collect();
    assert_eq!(resolved.len(), 1, "the silence's resolve: {digest}");
    assert_eq!(resolved[0]["groupHash"], "", "{digest}");
    let after = got[1].at.duration_since(got[0].at);
    assert!(
        after >= Duration::from_millis(19_800),
        "minPeriod after the firing, not at the resolve: {after:?}"
    );
    // people read the same digest: nothing in it counted, so its header says what happened, not "0 errors"
    let said = chat.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(
        said.len(),
        2,
        "slack: the firing, then the digest; log:\n{}",
        k.logs()
    );
    let text = said[1].json()["text"].as_str().unwrap_or_default().to_owned();
    // (the next silence may have fired inside the period too: "P: no events for 10 seconds, 1 resolved (…)")
    let head = text.lines().next().unwrap_or_default();
    assert!(
        head.starts_with(&format!("*{project}: "))
            && head.contains("1 resolved")
            && head.contains("the last 20 seconds"),
        "{text}"
    );
    assert!(
        text.contains("Resolved after ") && text.contains(": No events from "),
        "{text}"
    );
    assert!(!text.contains("0 errors") && !text.contains("0 ×"), "{text}");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// A quiet window covers the silence and the event that ends it: PagerDuty (bypassed) is paged and resolved at
/// once; the webhook hears nothing until the window ends, then one message listing the silence and its resolve.
/// The next silence, after the window, is sent at once to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_window_holds_the_silence_and_its_resolve_while_pagerduty_hears_them_at_once() {
    let hook = HttpSink::start().await.expect("sink");
    let pd = HttpSink::start().await.expect("sink");
    pd.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &pd.url(""));
    let project = object_id();
    let (from, to, end) = quiet_window();
    env.import(&rules(
        &project,
        json!({
            "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0},
            "pagerduty": {"isEnabled": true, "endpoint": "0123456789abcdef0123456789abcdef", "minPeriod": 0}
        }),
        json!({
            "quietHours": [{"from": from, "to": to, "timezone": "UTC"}],
            "quietHoursBypass": ["pagerduty"]
        }),
    ));
    let mut k = env.spawn("run", &[]);
    // silent for 10 s after the storing: PagerDuty is paged at once
    let paged = pd.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(paged.len(), 1, "the trigger; log:\n{}", k.logs());
    assert_eq!(paged[0].json()["event_action"], "trigger", "{}", paged[0].json());
    // the next event, 6 s before the window ends, ends the silence: PagerDuty's resolve at once, the webhook's
    // held. (Its clock starts again: silent 10 s later, after the window, the rule fires again, at once.)
    assert!(
        until(end) > Duration::from_secs(8),
        "the test window left too little time: it must cover the firing and the resolve"
    );
    tokio::time::sleep(until(end).saturating_sub(Duration::from_secs(6))).await;
    assert_eq!(hook.count(), 0, "nothing held is sent early; log:\n{}", k.logs());
    env.publish(&project, &format!("Back ({})", env.namespace), "g")
        .ok();
    let paged = pd.wait_for_count(2, Duration::from_secs(5)).await;
    assert_eq!(paged.len(), 2, "the resolve; log:\n{}", k.logs());
    assert_eq!(paged[1].json()["event_action"], "resolve", "{}", paged[1].json());
    tokio::time::sleep(until(end).saturating_sub(Duration::from_millis(500))).await;
    assert_eq!(
        hook.count(),
        0,
        "nothing before the window ends; log:\n{}",
        k.logs()
    );

    // at its end: one message on the webhook, the silence and its resolve; then the next silence, not held
    let got = hook.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "the release, the next firing; log:\n{}", k.logs());
    let paged = pd.wait_for_count(3, Duration::from_secs(10)).await;
    assert_eq!(paged.len(), 3, "the next trigger; log:\n{}", k.logs());
    assert_eq!(paged[2].json()["event_action"], "trigger", "{}", paged[2].json());
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 2, "released once; log:\n{}", k.logs());
    assert_eq!(pd.count(), 3, "PagerDuty gets no release: it held nothing");
    let bodies: Vec<Value> = got.iter().map(|r| r.json()).collect();
    let body = bodies
        .iter()
        .find(|b| b["kind"] == "quiet")
        .unwrap_or_else(|| panic!("a release in {bodies:?}"));
    assert_eq!(
        (
            body["quiet"]["fired"].as_u64(),
            body["quiet"]["resolved"].as_u64()
        ),
        (Some(1), Some(1)),
        "{body}"
    );
    let events = body["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 2, "{body}");
    for e in &events {
        assert_eq!(e["title"], "No events for 10 seconds", "{body}");
        assert_eq!(e["groupHash"], "", "{body}");
    }
    assert_eq!(events[1]["resolved"], true, "{body}");
    assert!(
        bodies.iter().any(|b| b["kind"] == "no_events"),
        "the next silence is sent at once: {bodies:?}"
    );
    assert_eq!(k.metric(r#"klaxon_no_events_timers_total{outcome="fired"}"#), 2.0);
    assert_eq!(
        k.metric(r#"klaxon_quiet_held_total{channel="webhook",what="fired"}"#),
        1.0
    );
    assert_eq!(
        k.metric(r#"klaxon_quiet_held_total{channel="webhook",what="resolved"}"#),
        1.0
    );
    assert_eq!(k.metric(r#"klaxon_quiet_released_total{channel="webhook"}"#), 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// The worker that claims the silence's firing dies (abort, as a `kill -9`) before publishing it: RabbitMQ gives
/// the timer to one of a fleet of three, which fires once; then the one that fired is killed with SIGKILL and
/// the project's next event resolves the alert once through the survivors.
// Needs the binary's test-only fault injection (`scripts/test` builds the tests with it).
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_three_fires_once_when_the_claiming_worker_dies_and_resolves_once() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&rules(
        &project,
        json!({"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}}),
        json!({}),
    ));
    let mut sender = env.spawn("sender", &[]);
    let mut crashing = env
        .clone()
        .set("KLAXON_TEST_CRASH_AFTER_NO_EVENTS", "1")
        .spawn("worker", &[]);
    // 10 s after the storing the timer is due: the worker claims the firing and aborts before publishing it
    common::wait_for_abort(
        &crashing,
        Duration::from_secs(40),
        "aborting between a NO_EVENTS firing's claim and its publish",
    )
    .await;
    assert_eq!(hook.count(), 0, "nothing was published before the crash");
    crashing.kill();

    // three workers (started only now, so the timer surely was the dead one's): the redelivered timer fires once
    let mut fleet: Vec<common::Klaxon> = (0..3).map(|_| env.spawn("worker", &[])).collect();
    let got = hook.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "the firing; logs:\n{}", common::fleet_logs(&fleet));
    let fired = got[0].json();
    assert_eq!(fired["kind"], "no_events", "{fired}");
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();
    assert_eq!(alert_id.len(), 24, "{fired}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        hook.count(),
        1,
        "fired once; logs:\n{}",
        common::fleet_logs(&fleet)
    );
    let series = r#"klaxon_no_events_timers_total{outcome="fired"}"#;
    assert_eq!(
        common::fleet_metric(&fleet, series),
        1.0,
        "the timer handled once"
    );

    // kill -9 the one that fired: the state is in Redis, the survivors resolve on the next event
    let firer = fleet.iter().position(|k| k.metric(series) >= 1.0).unwrap_or(0);
    fleet[firer].kill();
    env.publish(&project, &format!("Back ({})", env.namespace), "g")
        .ok();
    let got = hook.wait_for_count(2, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 2, "the resolve; logs:\n{}", common::fleet_logs(&fleet));
    let resolved = got[1].json();
    assert_eq!(resolved["kind"], "resolved", "{resolved}");
    assert_eq!(resolved["alertId"], alert_id.as_str(), "{resolved}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        hook.count(),
        2,
        "resolved once; logs:\n{}",
        common::fleet_logs(&fleet)
    );
    assert_eq!(
        common::fleet_metric(&fleet, r#"klaxon_alerts_resolved_total{by="event"}"#),
        1.0
    );
    for k in &mut fleet {
        k.terminate(Duration::from_secs(10));
    }
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
