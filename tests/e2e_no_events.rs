//! NO_EVENTS end to end (#34): the real `klaxon` binary, Redis, RabbitMQ's delay engine and a webhook receiver.
//! A project with a NO_EVENTS rule (`quietPeriod` 10 s, the shortest) sends an event, then stops: its timer,
//! armed when `klaxon rules import` stored the rule, comes due, finds the later event and moves to it, then fires
//! once; the project's next event resolves the alert with one resolved message.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use serde_json::json;

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_project_fires_once_and_its_next_event_resolves_it() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [{
        "isEnabled": true,
        "whatToReceive": "NO_EVENTS",
        "quietPeriod": 10_000,
        "channels": {"webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0}}
    }]}]));
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
