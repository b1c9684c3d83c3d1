//! Alerts end to end (#33): the real `klaxon` binary, Redis, RabbitMQ's delay engine, a webhook receiver and a
//! local PagerDuty. A firing opens an alert; when its group has had no matching event for `resolveAfter`, the
//! alert resolves by itself and every channel that delivered the firing gets exactly one resolved message —
//! also while the rule is muted, and across a crash between the resolve and its publishing. On a channel with
//! `minPeriod > 0` the resolve goes through the channel's digest like a firing (PagerDuty's stays immediate).

mod common;

use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::http_sink::{Reply, Request};
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);
/// The rules' `resolveAfter`.
const RESOLVE_AFTER: Duration = Duration::from_secs(3);
const ROUTING_KEY: &str = "R0uT1nGkEyAlerts0000000000000000";

/// A webhook receiver and a PagerDuty stub (202 like the Events API), and an environment pointed at them.
struct Stubs {
    hook: HttpSink,
    pd: HttpSink,
}

async fn stubs() -> (Stubs, Env) {
    let hook = HttpSink::start().await.expect("sink");
    let pd = HttpSink::start().await.expect("sink");
    pd.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &pd.url(""));
    (Stubs { hook, pd }, env)
}

/// A SEEN_MORE rule: 2 events in a minute fire (once per window), `resolveAfter` 3 s, webhook + PagerDuty.
fn rules(project: &str, hook: &HttpSink) -> Value {
    json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true,
            "whatToReceive": "SEEN_MORE",
            "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000,
            "resolveAfter": RESOLVE_AFTER.as_millis() as u64,
            "channels": {
                "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0},
                "pagerduty": {"isEnabled": true, "endpoint": ROUTING_KEY, "minPeriod": 0}
            }
        }]
    }])
}

/// The firing on both channels: (webhook body, PagerDuty event).
async fn firing(s: &Stubs, logs: impl Fn() -> String) -> (Value, Value) {
    let hook = common::firing_webhook(&s.hook, &logs).await;
    let pds = s.pd.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(pds.len(), 1, "the firing's PagerDuty trigger; log:\n{}", logs());
    let pd = pds[0].json();
    assert_eq!(pd["event_action"], "trigger", "{pd}");
    assert!(pd["dedup_key"].as_str().is_some_and(|k| !k.is_empty()), "{pd}");
    (hook, pd)
}

/// The resolved messages (the second request of each stub), checked against the firing's.
async fn resolved(s: &Stubs, fired: &(Value, Value), logs: impl Fn() -> String) -> (Request, Request) {
    let within = RESOLVE_AFTER + Duration::from_secs(15);
    let hooks = s.hook.wait_for_count(2, within).await;
    assert_eq!(hooks.len(), 2, "one resolved webhook; log:\n{}", logs());
    let pds = s.pd.wait_for_count(2, within).await;
    assert_eq!(pds.len(), 2, "one PagerDuty resolve; log:\n{}", logs());
    let (hook, pd) = (hooks[1].json(), pds[1].json());
    assert_eq!(hook["kind"], "resolved", "{hook}");
    assert_eq!(hook["alertId"], fired.0["alertId"], "the firing's alert: {hook}");
    assert_eq!(pd["event_action"], "resolve", "{pd}");
    assert_eq!(
        pd["dedup_key"], fired.1["dedup_key"],
        "the firing's dedup_key: {pd}"
    );
    assert_eq!(pd["routing_key"], ROUTING_KEY);
    // exactly one per channel
    tokio::time::sleep(QUIET).await;
    assert_eq!(s.hook.count(), 2, "one resolved webhook only; log:\n{}", logs());
    assert_eq!(s.pd.count(), 2, "one PagerDuty resolve only; log:\n{}", logs());
    (hooks[1].clone(), pds[1].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_resolves_by_itself_once_on_every_channel_that_delivered_its_firing() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut k = env.spawn("run", &[]);
    let title = format!("Timeout ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = firing(&s, || k.logs()).await;
    let fired_at = s.hook.requests()[0].at;
    let (hook, _) = resolved(&s, &fired, || k.logs()).await;
    let after = hook.at.duration_since(fired_at);
    assert!(
        after >= RESOLVE_AFTER - Duration::from_millis(200) && after < RESOLVE_AFTER + Duration::from_secs(5),
        "resolved resolveAfter after the last event: {after:?}"
    );
    eprintln!(
        "measured: resolved message {after:?} after the firing message (resolveAfter {RESOLVE_AFTER:?})"
    );
    k.wait_metric("klaxon_alerts_opened_total", 1.0, Duration::from_secs(5));
    assert_eq!(k.metric(r#"klaxon_alerts_resolved_total{by="timeout"}"#), 1.0);
    assert_eq!(k.metric(r#"klaxon_alert_timers_total{outcome="resolved"}"#), 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_muted_rule_still_resolves_what_was_delivered_and_a_muted_firing_opens_no_alert() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut k = env.spawn("run", &[]);
    let title = format!("DbError ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = firing(&s, || k.logs()).await;
    // the whole project muted right after the firing was delivered
    env.ok(&["mute", "add", "--project", &project, "--for", "1h"]);
    // a firing of another group while muted: counted, not delivered, no alert (so nothing resolves for it)
    env.publish(&project, &title, "muted").count(2).ok();
    k.wait_metric("klaxon_firings_muted_total", 1.0, Duration::from_secs(10));
    resolved(&s, &fired, || k.logs()).await;
    assert_eq!(k.metric("klaxon_alerts_opened_total"), 1.0);
    assert_eq!(k.metric(r#"klaxon_alerts_resolved_total{by="timeout"}"#), 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_keep_coming_postpone_the_resolve() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut k = env.spawn("run", &[]);
    let title = format!("Slow ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = firing(&s, || k.logs()).await;
    // one matching event a second for 5 s: longer than resolveAfter, never a gap as long
    let mut last = Instant::now();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        last = Instant::now();
        env.publish(&project, &title, "g").ok();
        assert_eq!(
            s.hook.count(),
            1,
            "not resolved while events come; log:\n{}",
            k.logs()
        );
    }
    k.wait_acked(7, Duration::from_secs(10));
    let (hook, _) = resolved(&s, &fired, || k.logs()).await;
    let after = hook.at.duration_since(last);
    assert!(
        after >= RESOLVE_AFTER - Duration::from_millis(200),
        "resolved resolveAfter after the last event, not before: {after:?}"
    );
    eprintln!("measured: resolved message {after:?} after the last event was published");
    // the alert counted the events while it was open (the firing's own included)
    assert!(
        hook.json()["alert"]["events"].as_u64().unwrap_or(0) >= 6,
        "{}",
        hook.json()
    );
    assert!(k.metric(r#"klaxon_alert_timers_total{outcome="rescheduled"}"#) >= 1.0);
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

// Needs the binary's test-only fault injection (`scripts/test` builds the tests with it).
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_resolve_and_its_publishing_still_delivers_the_resolved_message_once() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut sender = env.spawn("sender", &[]);
    let mut crashing = env
        .clone()
        .set("KLAXON_TEST_CRASH_AFTER_RESOLVE", "1")
        .spawn("worker", &[]);
    let title = format!("Panic ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let fired = firing(&s, || crashing.logs()).await;

    // resolveAfter later the timer resolves the alert in Redis, and the worker aborts before publishing
    common::wait_for_abort(
        &crashing,
        RESOLVE_AFTER + Duration::from_secs(15),
        "aborting between resolve and publish",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        s.hook.count(),
        1,
        "nothing resolved was published before the crash"
    );
    assert_eq!(s.pd.count(), 1);
    crashing.kill();

    // the timer comes back to a healthy worker: the alert is resolved already, its messages go out, once
    let mut healthy = env.spawn("worker", &[]);
    resolved(&s, &fired, || healthy.logs()).await;
    assert_eq!(
        healthy.metric(r#"klaxon_alert_timers_total{outcome="already_resolved"}"#),
        1.0
    );
    assert_eq!(healthy.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// The window of risk, measured: Redis holds the alerts, so an alert Redis lost (restarted empty, no
/// persistence) cannot resolve: its timer finds nothing (`not_found`) and no resolved message is sent. Here the
/// project's alert keys are deleted between the firing and the resolve, as a restart without AOF would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_that_redis_lost_resolves_with_no_message() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut k = env.spawn("run", &[]);
    let title = format!("Lost ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    firing(&s, || k.logs()).await;
    k.wait_metric("klaxon_alerts_opened_total", 1.0, Duration::from_secs(5));
    let client = redis::Client::open(klaxon_testkit::redis_url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:al:{{{project}}}:*", env.namespace))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert!(keys.len() >= 3, "the alert's keys (idx, cur, a): {keys:?}");
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    k.wait_metric(
        r#"klaxon_alert_timers_total{outcome="not_found"}"#,
        1.0,
        RESOLVE_AFTER + Duration::from_secs(15),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(s.hook.count(), 1, "no resolved message for an alert Redis lost");
    assert_eq!(
        s.pd.count(),
        1,
        "the PagerDuty incident stays open (resolve it there or by hand)"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// `--output shadow` tracks alerts as usual and records the resolved messages in the trail like the firings,
/// sending nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_records_the_resolved_messages_and_sends_nothing() {
    let (s, env) = stubs().await;
    let env = env.set("KLAXON_OUTPUT", "shadow");
    let project = object_id();
    env.import(&rules(&project, &s.hook));
    let mut k = env.spawn("run", &[]);
    let title = format!("Shadow ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    k.wait_metric(
        r#"klaxon_alerts_resolved_total{by="timeout"}"#,
        1.0,
        RESOLVE_AFTER + Duration::from_secs(15),
    );
    // the firing and the resolved message, on each channel
    let records = common::shadow_records(&env, &project, 4, Duration::from_secs(10), || k.logs());
    assert_eq!(records.len(), 4, "{records:?}");
    let by = |ch: &str| records.iter().filter(|r| r["channel"] == ch).count();
    assert_eq!((by("webhook"), by("pagerduty")), (2, 2), "{records:?}");
    let mut ids: Vec<&str> = records
        .iter()
        .filter_map(|r| r["notificationId"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "a notification each: {records:?}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        (s.hook.count(), s.pd.count()),
        (0, 0),
        "shadow mode sends nothing"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Discord keeps an alert as one conversation through the real binary: the firing asks for its message
/// (`?wait=true`), and when the alert resolves by itself that message is edited (`PATCH …/messages/<id>`) to
/// show the state, then the resolve is posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_firing_message_is_edited_when_its_alert_resolves() {
    const MESSAGE_ID: &str = "998877665544332211";
    let discord = HttpSink::start().await.expect("sink");
    discord.route(
        |r| r.method == "POST" && r.uri.contains("wait=true"),
        Reply::status(200).body(&format!(r#"{{"id":"{MESSAGE_ID}","type":0,"embeds":[]}}"#)),
    );
    discord.route(
        |r| r.method == "PATCH",
        Reply::status(200).body(&format!(r#"{{"id":"{MESSAGE_ID}"}}"#)),
    );
    discord.set_default(Reply::status(204));
    let env = Env::new();
    let project = object_id();
    let path = "/api/webhooks/1/t0ken";
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000,
            "resolveAfter": RESOLVE_AFTER.as_millis() as u64,
            "channels": {"discord": {"isEnabled": true, "endpoint": discord.url(path), "minPeriod": 0}}
        }]
    }]));
    let mut k = env.spawn("run", &[]);
    let title = format!("Discord ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let reqs = discord
        .wait_for_count(3, RESOLVE_AFTER + Duration::from_secs(20))
        .await;
    assert_eq!(reqs.len(), 3, "firing, edit, resolve; log:\n{}", k.logs());
    let (post, patch, resolve) = (&reqs[0], &reqs[1], &reqs[2]);
    assert_eq!(
        (post.method.as_str(), post.uri.as_str()),
        ("POST", format!("{path}?wait=true").as_str())
    );
    assert_eq!(
        (patch.method.as_str(), patch.uri.as_str()),
        ("PATCH", format!("{path}/messages/{MESSAGE_ID}").as_str())
    );
    let (fired, edited) = (post.json(), patch.json());
    assert_eq!(
        edited["embeds"][0]["title"], fired["embeds"][0]["title"],
        "the firing's title stays: {edited}"
    );
    let description = edited["embeds"][0]["description"].as_str().unwrap_or_default();
    assert!(
        description.starts_with("**Resolved after "),
        "the state above the firing: {description}"
    );
    assert_eq!((resolve.method.as_str(), resolve.uri.as_str()), ("POST", path));
    let resolved_title = resolve.json()["embeds"][0]["title"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(resolved_title.starts_with("Resolved: "), "{resolved_title}");
    k.wait_metric(
        r#"klaxon_conversation_edits_total{channel="discord",outcome="edited"}"#,
        1.0,
        Duration::from_secs(5),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(discord.count(), 3, "nothing more; log:\n{}", k.logs());
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// With `--output shadow`, an acknowledgement or a resolve by hand (the API, `klaxon alerts`) records its
/// messages in the delivery trail like the worker's firings and resolves, and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_records_the_messages_of_hand_changes() {
    let (s, env) = stubs().await;
    let env = env.set("KLAXON_OUTPUT", "shadow");
    let project = object_id();
    let rule = object_id();
    env.import(&rules(&project, &s.hook));
    let channels = || vec![common::webhook_channel(&s.hook.url("/hook"))];
    let acked = common::open_alert(&env, &project, &rule, "g1", "Shadow ack", channels()).await;
    let resolved = common::open_alert(&env, &project, &rule, "g2", "Shadow resolve", channels()).await;
    let mut k = env.spawn("run", &[]);
    k.wait_ready(Duration::from_secs(15));

    let ack = format!("/api/v1/projects/{project}/alerts/{}/ack", acked.id);
    let (status, body) = common::http_request(&k.addr, "POST", &ack).expect("an answer");
    assert_eq!(status, 200, "{body}");
    let out = env.ok(&["alerts", "resolve", "--project", &project, &resolved.id]);
    assert!(out.contains("resolved alert"), "{out}");

    let records: Vec<Value> = klaxon_testkit::eventually_blocking(Duration::from_secs(10), || {
        let out = env.ok(&[
            "deliveries",
            "list",
            "--project",
            &project,
            "--status",
            "shadow",
            "-o",
            "ndjson",
        ]);
        let r: Vec<Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (r.len() >= 2).then_some(r)
    })
    .unwrap_or_else(|| panic!("two shadow records; log:\n{}", k.logs()));
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records.iter().all(|r| r["channel"] == "webhook"), "{records:?}");
    assert_ne!(records[0]["notificationId"], records[1]["notificationId"]);
    // the API's change counted as shadowed in the serving process
    k.wait_metric(
        r#"klaxon_notifications_shadowed_total{channel="webhook"}"#,
        1.0,
        Duration::from_secs(5),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(s.hook.count(), 0, "shadow mode sends nothing");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Slack through the Web API with a bot token, through the real binary: the firing is a `chat.postMessage` to
/// the channel id, and when the alert resolves by itself that message is edited (`chat.update`) and the resolve
/// goes into its thread (`thread_ts`). The token travels only in the `Authorization` header and is in no log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_web_api_firing_is_edited_and_the_resolve_goes_into_its_thread() {
    const TOKEN: &str = "xoxb-1-SECRETslackE2E";
    const CHANNEL: &str = "C0E2EALERT";
    const TS: &str = "1712345678.000100";
    let slack = HttpSink::start().await.expect("sink");
    slack
        .set_default(Reply::status(200).body(&format!(r#"{{"ok":true,"channel":"{CHANNEL}","ts":"{TS}"}}"#)));
    let env = Env::new()
        .set("KLAXON_SLACK_API", &slack.url("/api"))
        .set("KLAXON_SLACK_BOT_TOKEN", TOKEN);
    let project = object_id();
    env.import(&json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000,
            "resolveAfter": RESOLVE_AFTER.as_millis() as u64,
            "channels": {"slack": {"isEnabled": true, "endpoint": CHANNEL, "minPeriod": 0}}
        }]
    }]));
    let mut k = env.spawn("run", &[]);
    let title = format!("Slack ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).ok();
    let reqs = slack
        .wait_for_count(3, RESOLVE_AFTER + Duration::from_secs(20))
        .await;
    assert_eq!(reqs.len(), 3, "firing, edit, resolve; log:\n{}", k.logs());
    let uris: Vec<&str> = reqs.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "/api/chat.postMessage",
            "/api/chat.update",
            "/api/chat.postMessage"
        ]
    );
    for r in &reqs {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
    }
    let (fired, edited, resolve) = (reqs[0].json(), reqs[1].json(), reqs[2].json());
    assert_eq!(fired["channel"], CHANNEL);
    assert!(
        fired["text"].as_str().unwrap_or_default().contains(&title),
        "{fired}"
    );
    assert_eq!(
        (edited["channel"].as_str(), edited["ts"].as_str()),
        (Some(CHANNEL), Some(TS))
    );
    assert!(
        edited["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("*Resolved after "),
        "{edited}"
    );
    assert_eq!(resolve["thread_ts"], TS, "{resolve}");
    assert!(
        resolve["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Resolved: "),
        "{resolve}"
    );
    k.wait_metric(
        r#"klaxon_conversation_edits_total{channel="slack",outcome="edited"}"#,
        1.0,
        Duration::from_secs(5),
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    assert!(!k.logs().contains("SECRETslackE2E"), "the token is never logged");
    common::delete_queues(&env).await;
}

/// A SEEN_MORE rule whose every group fires on its first event, `resolveAfter` `resolve_after`, on a webhook and
/// PagerDuty that both have a digest period of `min_period_s`.
fn digest_rules(project: &str, hook: &HttpSink, min_period_s: u64, resolve_after: Duration) -> Value {
    json!([{
        "_id": project,
        "notifications": [{
            "isEnabled": true,
            "whatToReceive": "SEEN_MORE",
            "including": [], "excluding": [],
            "threshold": 1, "thresholdPeriod": 3_600_000,
            "resolveAfter": resolve_after.as_millis() as u64,
            "channels": {
                "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": min_period_s},
                "pagerduty": {"isEnabled": true, "endpoint": ROUTING_KEY, "minPeriod": min_period_s}
            }
        }]
    }])
}

/// Digests carry resolves like firings: two groups fire at once on a webhook with `minPeriod` 10 s (the first
/// goes out alone, the second waits in the digest window), the rule is muted, both alerts resolve 3 s later,
/// inside the window: the webhook gets no resolved message of its own, and the one digest lists the group that
/// fired and both that resolved (`"resolved": true`). PagerDuty is never digested for a resolve: its resolve of
/// the leading firing's incident arrives at once, before the digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolve_on_a_digest_channel_joins_its_digest_and_pagerduty_resolves_at_once() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&digest_rules(&project, &s.hook, 10, RESOLVE_AFTER));
    let mut k = env.spawn("run", &[]);
    let title = format!("Crash ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).groups(2).ok();
    let lead = common::firing_webhook(&s.hook, || k.logs()).await;
    let lead_events = lead["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(lead_events.len(), 1, "the leading firing, alone: {lead}");
    let lead_group = lead_events[0]["groupHash"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let other_group = if lead_group == "g-0" { "g-1" } else { "g-0" };
    // muted from now on: what was delivered (or is waiting in the digest) still resolves
    env.ok(&["mute", "add", "--project", &project, "--for", "1h"]);

    // resolveAfter later both alerts resolve, inside the 10 s window: into the digest, due 10 s after the lead
    let hooks = s.hook.wait_for_count(2, Duration::from_secs(10 + 15)).await;
    assert_eq!(hooks.len(), 2, "the digest; log:\n{}", k.logs());
    let digest = hooks[1].json();
    assert!(
        digest.get("kind").is_none(),
        "a digest, not a resolved message: {digest}"
    );
    assert!(
        digest.get("alertId").is_none(),
        "a digest names no one alert: {digest}"
    );
    assert_ne!(digest["notificationId"], lead["notificationId"]);
    let entries: Vec<(String, bool)> = digest["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["groupHash"].as_str().unwrap_or_default().to_owned(),
                        e["resolved"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut resolved: Vec<&str> = entries
        .iter()
        .filter(|(_, r)| *r)
        .map(|(g, _)| g.as_str())
        .collect();
    resolved.sort_unstable();
    let fired: Vec<&str> = entries
        .iter()
        .filter(|(_, r)| !*r)
        .map(|(g, _)| g.as_str())
        .collect();
    assert_eq!(fired, [other_group], "what fired in the window: {digest}");
    assert_eq!(
        resolved,
        ["g-0", "g-1"],
        "both resolves, after what fired: {digest}"
    );
    assert!(!entries[0].1, "what fired comes first: {digest}");
    // each resolved entry says how long its alert was open (about resolveAfter: both fired at the start)
    for e in digest["events"].as_array().into_iter().flatten() {
        let open = e["openForMs"].as_u64();
        if e["resolved"] == true {
            assert!(
                open.is_some_and(|ms| ms >= RESOLVE_AFTER.as_millis() as u64 - 500),
                "{e}"
            );
        } else {
            assert_eq!(open, None, "a firing has no openForMs: {e}");
        }
    }
    let after = hooks[1].at.duration_since(hooks[0].at);
    assert!(
        after >= Duration::from_millis(9_800),
        "the digest went out minPeriod after the lead, not at the resolve: {after:?}"
    );

    // PagerDuty: the leading trigger's incident resolved at once (before the webhook's digest), on its dedup_key
    let pds = s.pd.wait_for_count(4, Duration::from_secs(15)).await;
    let trigger = pds[0].json();
    assert_eq!(trigger["event_action"], "trigger", "{trigger}");
    let resolve = pds
        .iter()
        .find(|r| r.json()["event_action"] == "resolve" && r.json()["dedup_key"] == trigger["dedup_key"])
        .unwrap_or_else(|| panic!("the lead's PagerDuty resolve; log:\n{}", k.logs()));
    assert!(
        resolve.at < hooks[1].at,
        "PagerDuty's resolve is not digested: it came before the webhook digest"
    );

    // nothing else: no resolved message of its own on the webhook
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        s.hook.count(),
        2,
        "the lead and the digest only; log:\n{}",
        k.logs()
    );
    let actions: Vec<String> =
        s.pd.requests()
            .iter()
            .map(|r| r.json()["event_action"].as_str().unwrap_or_default().to_owned())
            .collect();
    let resolves = actions.iter().filter(|a| *a == "resolve").count();
    assert_eq!(
        (actions.len(), resolves),
        (4, 2),
        "PagerDuty: the lead and its digest trigger, two resolves at once: {actions:?}"
    );
    // the digest's own incident listed only alerts that had resolved before it went out: its resolve follows
    // it (klaxon_engine::flushes::CLOSED_INCIDENT_RESOLVE_AFTER), once, on its own key
    let digest_trigger = pds
        .iter()
        .map(|r| r.json())
        .find(|e| e["event_action"] == "trigger" && e["dedup_key"] != trigger["dedup_key"])
        .unwrap_or_else(|| panic!("the digest's trigger; log:\n{}", k.logs()));
    let pds = s.pd.wait_for_count(5, Duration::from_secs(30)).await;
    let closing: Vec<Value> = pds
        .iter()
        .map(|r| r.json())
        .filter(|e| e["dedup_key"] == digest_trigger["dedup_key"] && e["event_action"] == "resolve")
        .collect();
    assert_eq!(
        closing.len(),
        1,
        "the digest's incident resolved once: {closing:?}; log:\n{}",
        k.logs()
    );
    assert_eq!(closing[0]["routing_key"], ROUTING_KEY);
    assert_eq!(k.metric(r#"klaxon_alerts_resolved_total{by="timeout"}"#), 2.0);
    assert_eq!(
        k.metric(r#"klaxon_digests_published_total{channel="webhook"}"#),
        1.0
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Like a firing, a resolve on a digest channel that has been quiet for `minPeriod` goes out at once, as the
/// ordinary resolved message (`kind: "resolved"`, the firing's `alertId`), and nothing more follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolve_on_a_quiet_digest_channel_goes_out_at_once_as_itself() {
    let (s, env) = stubs().await;
    let project = object_id();
    let resolve_after = Duration::from_secs(5);
    env.import(&digest_rules(&project, &s.hook, 2, resolve_after));
    let mut k = env.spawn("run", &[]);
    let title = format!("Quiet ({})", env.namespace);
    env.publish(&project, &title, "g").ok();
    let fired = common::firing_webhook(&s.hook, || k.logs()).await;
    let hooks = s
        .hook
        .wait_for_count(2, resolve_after + Duration::from_secs(15))
        .await;
    assert_eq!(hooks.len(), 2, "the resolved message; log:\n{}", k.logs());
    let body = hooks[1].json();
    assert_eq!(body["kind"], "resolved", "{body}");
    assert_eq!(body["alertId"], fired["alertId"], "{body}");
    let after = hooks[1].at.duration_since(hooks[0].at);
    assert!(
        after >= resolve_after - Duration::from_millis(200) && after < resolve_after + Duration::from_secs(5),
        "at once when it resolved, not a digest later: {after:?}"
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(s.hook.count(), 2, "no digest after it; log:\n{}", k.logs());
    assert_eq!(
        k.metric(r#"klaxon_digests_published_total{channel="webhook"}"#),
        0.0
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// A digest on PagerDuty opens an incident of its own (its `dedup_key` is the digest's notification id): every
/// alert it lists that is still open hears of it, and the resolve of the last one resolves it, once. Two groups
/// fire at once with `minPeriod` 3 s (the lead alone, the other in the digest), both alerts resolve 6 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digests_pagerduty_incident_resolves_with_the_last_alert_it_listed() {
    let (s, env) = stubs().await;
    let project = object_id();
    env.import(&digest_rules(&project, &s.hook, 3, Duration::from_secs(6)));
    let mut k = env.spawn("run", &[]);
    let title = format!("Listed ({})", env.namespace);
    env.publish(&project, &title, "g").count(2).groups(2).ok();
    // the lead's trigger, then the digest's (3 s later) on a key of its own
    let pds = s.pd.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(pds.len(), 2, "two triggers; log:\n{}", k.logs());
    let (lead, digest) = (pds[0].json(), pds[1].json());
    assert_eq!(
        (&lead["event_action"], &digest["event_action"]),
        (&json!("trigger"), &json!("trigger")),
        "{lead} {digest}"
    );
    assert_ne!(lead["dedup_key"], digest["dedup_key"]);
    // both alerts resolve: the digest's incident is resolved on its own key, once
    let resolved = Instant::now();
    let digest_resolve = loop {
        let found = s.pd.requests().into_iter().find(|r| {
            let e = r.json();
            e["event_action"] == "resolve" && e["dedup_key"] == digest["dedup_key"]
        });
        if let Some(r) = found {
            break r.json();
        }
        assert!(
            resolved.elapsed() < Duration::from_secs(20),
            "the digest's incident was never resolved: {:?}; log:\n{}",
            s.pd.requests().iter().map(|r| r.json()).collect::<Vec<_>>(),
            k.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(digest_resolve["routing_key"], ROUTING_KEY);
    tokio::time::sleep(QUIET).await;
    let on_digest =
        s.pd.requests()
            .iter()
            .filter(|r| r.json()["dedup_key"] == digest["dedup_key"])
            .count();
    assert_eq!(on_digest, 2, "its trigger and one resolve; log:\n{}", k.logs());
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
