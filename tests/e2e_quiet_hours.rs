//! Quiet hours (`quietHours`, #34) end to end: the real `klaxon` binary, Redis holds, RabbitMQ's delay engine and
//! local receivers playing a webhook, Slack and PagerDuty. A quiet window that covers "now" and ends at the next
//! minute boundary at least 25 s away holds two firings (and their resolves) on the webhook and Slack, lets the
//! bypassed PagerDuty fire at once, and releases one message per held channel at its end — once, also when the
//! flusher is killed between claim and publish.

mod common;

use std::time::Duration;

use common::{object_id, quiet_window as window, until, Env};
use klaxon_testkit::http_sink::Reply;
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);
const ROUTING_KEY: &str = "0123456789abcdef0123456789abcdef";

/// A SEEN_MORE rule (every group fires on its first event), resolving 3 s after its last event, quiet now.
fn rule(project: &str, channels: Value, from: &str, to: &str) -> Value {
    json!([{"_id": project, "notifications": [{
        "isEnabled": true,
        "whatToReceive": "SEEN_MORE",
        "including": [], "excluding": [],
        "threshold": 1, "thresholdPeriod": 3_600_000,
        "resolveAfter": 3_000,
        "channels": channels,
        "quietHours": [{"from": from, "to": to, "timezone": "UTC"}],
        "quietHoursBypass": ["pagerduty"]
    }]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_window_holds_two_firings_and_releases_one_message_per_channel_while_pagerduty_fires_at_once()
{
    let hooks = HttpSink::start().await.expect("sink");
    let pd = HttpSink::start().await.expect("sink");
    pd.set_default(
        Reply::status(202).body(r#"{"status":"success","message":"Event processed","dedup_key":"k"}"#),
    );
    let env = Env::new().set("KLAXON_PAGERDUTY_API", &pd.url(""));
    let project = object_id();
    let (from, to, end) = window();
    env.import(&rule(
        &project,
        json!({
            "webhook": {"isEnabled": true, "endpoint": hooks.url("/webhook"), "minPeriod": 0},
            "slack": {"isEnabled": true, "endpoint": hooks.url("/slack"), "minPeriod": 60},
            "pagerduty": {"isEnabled": true, "endpoint": ROUTING_KEY, "minPeriod": 0}
        }),
        &from,
        &to,
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("NightError ({})", env.namespace);
    env.publish(&project, &title, "q").groups(2).count(2).ok();

    // PagerDuty bypasses the quiet: both firings at once, then both resolves (resolveAfter 3 s)
    let paged = pd.wait_for_count(4, Duration::from_secs(15)).await;
    assert_eq!(
        paged.len(),
        4,
        "two triggers and two resolves; log:\n{}",
        k.logs()
    );
    let actions: Vec<String> = paged
        .iter()
        .map(|r| r.json()["event_action"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "trigger").count(),
        2,
        "{actions:?}"
    );
    assert_eq!(
        actions.iter().filter(|a| *a == "resolve").count(),
        2,
        "{actions:?}"
    );
    assert!(
        until(end) > Duration::from_secs(2),
        "the test window left too little time: it must cover the firings and resolves"
    );

    // the held channels hear nothing during the window
    tokio::time::sleep(until(end).saturating_sub(Duration::from_secs(1))).await;
    assert_eq!(
        hooks.count(),
        0,
        "nothing before the window ends; log:\n{}",
        k.logs()
    );

    // at its end: one message on each held channel, listing both firings and both resolves
    let got = hooks.wait_for_count(2, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 2, "one release per held channel; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        hooks.count(),
        2,
        "one message per channel, once; log:\n{}",
        k.logs()
    );
    let hook = got
        .iter()
        .find(|r| r.uri == "/webhook")
        .expect("the webhook's release")
        .json();
    assert_eq!(hook["kind"], "quiet", "{hook}");
    assert_eq!(hook["quiet"]["fired"], 2, "{hook}");
    assert_eq!(hook["quiet"]["resolved"], 2, "{hook}");
    let events = hook["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 4, "{hook}");
    let resolved = events.iter().filter(|e| e["resolved"] == true).count();
    assert_eq!(resolved, 2, "{hook}");
    for i in 0..2 {
        let name = format!("{title} (q-{i})");
        assert_eq!(
            events.iter().filter(|e| e["title"] == name.as_str()).count(),
            2,
            "fired and resolved: {hook}"
        );
    }
    let slack = got
        .iter()
        .find(|r| r.uri == "/slack")
        .expect("slack's release")
        .json();
    let text = slack["text"].as_str().unwrap_or_default();
    assert!(text.contains("in quiet hours (2 fired, 2 resolved)"), "{text}");
    assert!(
        text.contains(&format!("{title} (q-0)")) && text.contains(&format!("{title} (q-1)")),
        "{text}"
    );
    // each resolved line says how long its alert was open
    assert_eq!(text.matches("Resolved after ").count(), 2, "{text}");
    assert_eq!(k.metric(r#"klaxon_quiet_released_total{channel="webhook"}"#), 1.0);
    assert_eq!(k.metric(r#"klaxon_quiet_released_total{channel="slack"}"#), 1.0);
    assert_eq!(
        k.metric(r#"klaxon_quiet_held_total{channel="webhook",what="fired"}"#),
        2.0
    );
    assert_eq!(pd.count(), 4, "PagerDuty gets no release: it held nothing");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

// Needs the binary's test-only fault injection (`scripts/test` builds the tests with it).
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_killed_between_claim_and_publish_is_sent_once_by_a_fleet_of_three() {
    let hooks = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    let (from, to, end) = window();
    env.import(&rule(
        &project,
        json!({"webhook": {"isEnabled": true, "endpoint": hooks.url("/webhook"), "minPeriod": 0}}),
        &from,
        &to,
    ));
    let mut sender = env.spawn("sender", &[]);
    let mut crashing = env
        .clone()
        .set("KLAXON_TEST_CRASH_AFTER_CLAIM", "1")
        .spawn("worker", &[]);
    let title = format!("NightPanic ({})", env.namespace);
    env.publish(&project, &title, "k").groups(2).count(2).ok();

    // the worker holds both firings, claims the release at the window's end and aborts before publishing it
    let died = klaxon_testkit::wait_for(until(end) + Duration::from_secs(20), || {
        let up = crashing.get("/healthz").is_some();
        async move { (!up).then_some(()) }
    })
    .await;
    assert!(
        died.is_some(),
        "the test hook must abort the worker; log:\n{}",
        crashing.logs()
    );
    assert!(
        crashing.logs().contains("aborting between claim and publish"),
        "{}",
        crashing.logs()
    );
    assert_eq!(hooks.count(), 0, "nothing was published before the crash");
    crashing.kill();

    // three healthy workers: the claimed release is recovered after its lease and published once
    let mut fleet: Vec<_> = (0..3).map(|_| env.spawn("worker", &[])).collect();
    let logs = |fleet: &[common::Klaxon]| fleet.iter().map(|k| k.logs()).collect::<Vec<_>>().join("\n---\n");
    let got = hooks.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "logs:\n{}", logs(&fleet));
    tokio::time::sleep(QUIET).await;
    assert_eq!(hooks.count(), 1, "the release once; logs:\n{}", logs(&fleet));
    let body = got[0].json();
    assert_eq!(body["kind"], "quiet", "{body}");
    assert_eq!(body["quiet"]["fired"], 2, "{body}");
    for k in &mut fleet {
        assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    }
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// `klaxon deliveries list`, `GET /api/v1/deliveries` and the console list what a quiet window holds as `held`:
/// its channel, its destination redacted as the trail shows it, the groups it holds (tenant text as data, escaped
/// on the page) and until when; after the release, the same id is the delivery's record, never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_messages_are_listed_as_held_until_their_release_then_as_its_delivery() {
    let hooks = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    let (from, to, end) = window();
    let endpoint = hooks.url("/hooks/SECRETPATH0123456789");
    env.import(&rule(
        &project,
        json!({"webhook": {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}),
        &from,
        &to,
    ));
    let mut k = env.spawn("run", &[]);
    let title = format!("<script>alert(1)</script> & \"held\" ({})", env.namespace);
    env.publish(&project, &title, "h").ok();
    let until_rfc = klaxon_core::notification::rfc3339_ms(end as i64 * 1000);
    let destination = klaxon_channels::redact_endpoint(klaxon_core::ChannelKind::Webhook, &endpoint);
    assert!(!destination.contains("SECRETPATH"), "{destination}");

    // the CLI: one held row, until the window's end
    let list = |status: Option<&str>| -> Vec<Value> {
        let mut args = vec!["deliveries", "list", "--project", &project, "-o", "json"];
        if let Some(s) = status {
            args.extend(["--status", s]);
        }
        let out = env.ok(&args);
        serde_json::from_str::<Vec<Value>>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let held = klaxon_testkit::wait_for(Duration::from_secs(20), || {
        let rows = list(None);
        async move { (rows.len() == 1 && rows[0]["status"] == "held").then_some(rows) }
    })
    .await
    .unwrap_or_else(|| panic!("one held row; log:\n{}", k.logs()));
    let row = &held[0];
    assert!(
        until(end) > Duration::from_secs(1),
        "the test window left too little time to see the hold"
    );
    assert_eq!(row["channel"], "webhook", "{row}");
    assert_eq!(row["destination"], destination.as_str(), "{row}");
    assert_eq!(row["heldUntil"], until_rfc.as_str(), "{row}");
    assert_eq!(row["attempts"], 0, "{row}");
    assert_eq!(row["held"]["fired"], 1, "{row}");
    assert_eq!(row["held"]["groups"][0]["group"], "h", "{row}");
    assert_eq!(row["held"]["groups"][0]["title"], title.as_str(), "{row}");
    // the alert the held firing opened
    let alerts: Value =
        serde_json::from_str(&env.ok(&["alerts", "list", "--project", &project, "-o", "json"]))
            .expect("alerts json");
    let alert_id = alerts["alerts"][0]["id"].as_str().expect("an alert").to_owned();
    assert_eq!(row["held"]["groups"][0]["alertId"], alert_id.as_str(), "{row}");
    let id = row["notificationId"].as_str().expect("an id").to_owned();
    assert_eq!(list(Some("held")).len(), 1);
    assert!(list(Some("sent")).is_empty());
    // the table says until when
    let table = env.ok(&["deliveries", "list", "--project", &project, "-o", "table"]);
    assert!(
        table.contains("held") && table.contains(&format!("held until {until_rfc}")),
        "{table}"
    );
    assert!(!table.contains("SECRETPATH"), "{table}");

    // the API and the console (the title escaped: data, not markup)
    let (status, body) = k
        .get(&format!("/api/v1/deliveries?projectId={project}"))
        .expect("api");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(api["deliveries"][0]["status"], "held", "{api}");
    assert_eq!(api["deliveries"][0]["notificationId"], id.as_str(), "{api}");
    assert_eq!(api["deliveries"][0]["heldUntil"], until_rfc.as_str(), "{api}");
    let (status, page) = k.get(&format!("/deliveries?project={project}")).expect("console");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("class=\"held-row\""), "{page}");
    assert!(page.contains(&id), "{page}");
    let shown_until = format!("until {} {}Z", &until_rfc[..10], &until_rfc[11..19]);
    assert!(page.contains(&shown_until), "{shown_until}: {page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(!page.contains("SECRETPATH"), "{page}");

    // the release: the same id, now the delivery's record; nothing held any more, nothing twice
    tokio::time::sleep(until(end)).await;
    let got = hooks.wait_for_count(1, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 1, "the release; log:\n{}", k.logs());
    let after = klaxon_testkit::wait_for(Duration::from_secs(20), || {
        let rows = list(None);
        async move { (rows.len() == 1 && rows[0]["status"] == "sent").then_some(rows) }
    })
    .await
    .unwrap_or_else(|| panic!("the release's record; rows: {:?}", list(None)));
    assert_eq!(after[0]["notificationId"], id.as_str(), "{after:?}");
    assert_eq!(after[0]["destination"], destination.as_str(), "{after:?}");
    assert!(list(Some("held")).is_empty());
    let (_, body) = k
        .get(&format!("/api/v1/deliveries?projectId={project}"))
        .expect("api");
    let api: Value = serde_json::from_str(&body).expect("json");
    let ids: Vec<&str> = api["deliveries"]
        .as_array()
        .map(|a| a.iter().filter_map(|d| d["notificationId"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [id.as_str()], "{api}");
    let (_, page) = k.get(&format!("/deliveries?project={project}")).expect("console");
    assert!(!page.contains("class=\"held-row\""), "{page}");
    assert_eq!(page.matches(&id).count(), 1, "{page}");
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #42: a quiet-hours check costs O(log n) per firing (the rule's windows become merged spans once per rule
/// version). A project whose rule has 21 windows touching each other — the whole week quiet, the case that once
/// chained windows up to 168 times per firing per channel and held another tenant's alert 5–6 s behind 15 of its
/// events — does not delay another project's first alert: ≤ 2 s from its publish to its delivery, right behind
/// 15 firings of the quiet project, which are all held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_one_quiet_windows_of_one_project_do_not_delay_another_projects_first_alert() {
    let hooks = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let (quiet, other) = (object_id(), object_id());
    let windows: Vec<Value> = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        .iter()
        .flat_map(|d| {
            [("00:00", "08:00"), ("08:00", "16:00"), ("16:00", "00:00")]
                .map(|(from, to)| json!({"days": [d], "from": from, "to": to, "timezone": "Europe/Berlin"}))
        })
        .collect();
    assert_eq!(windows.len(), 21);
    let rule = |path: &str| {
        json!({"isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 1, "thresholdPeriod": 3_600_000,
               "channels": {"webhook": {"isEnabled": true, "endpoint": hooks.url(path), "minPeriod": 0}}})
    };
    let mut held_rule = rule("/quiet");
    held_rule["quietHours"] = json!(windows);
    env.import(&json!([
        {"_id": quiet, "notifications": [held_rule]},
        {"_id": other, "notifications": [rule("/other")]}
    ]));
    let mut k = env.spawn("run", &[]);
    // both projects' rules loaded and the path warm: one firing each (the quiet one held)
    env.publish(&quiet, "Warm", "warm").ok();
    env.publish(&other, "Warm", "warm").ok();
    let warm = hooks.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(warm.len(), 1, "the other project's warm-up; log:\n{}", k.logs());

    env.publish(&quiet, "NightError", "night")
        .groups(15)
        .count(15)
        .ok();
    let published = std::time::Instant::now();
    env.publish(&other, "DayError", "day").ok();
    let got = hooks.wait_for_count(2, Duration::from_secs(30)).await;
    let took = published.elapsed();
    assert_eq!(got.len(), 2, "the other project's alert; log:\n{}", k.logs());
    assert!(
        got.iter().all(|r| r.uri == "/other"),
        "the quiet project's firings are held: {:?}",
        got.iter().map(|r| &r.uri).collect::<Vec<_>>()
    );
    eprintln!("another project's first alert behind 15 firings of a project with 21 quiet windows: {took:?}");
    assert!(
        took <= Duration::from_secs(2),
        "another project's alert waited {took:?} behind the quiet project's firings; log:\n{}",
        k.logs()
    );
    let held = r#"klaxon_quiet_held_total{channel="webhook",what="fired"}"#;
    k.wait_metric(held, 16.0, Duration::from_secs(15));
    assert_eq!(
        k.metric(held),
        16.0,
        "every firing of the quiet project held; log:\n{}",
        k.logs()
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #42: a quiet window's release never drops silently. 1,200 groups fire inside the window (their alerts
/// resolve inside it too, as many as the project's alert slots opened): the release lists 1,000 firings and up to
/// 1,000 resolves beside them (`"quiet"` counts what it lists), and `"more"` says exactly how many more fired and
/// resolved — listed + more equal to what the worker held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1200_group_quiet_window_releases_exact_counts_of_what_fired_and_resolved() {
    let hooks = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    let (from, to, end) = window();
    env.import(&rule(
        &project,
        json!({"webhook": {"isEnabled": true, "endpoint": hooks.url("/webhook"), "minPeriod": 0}}),
        &from,
        &to,
    ));
    let mut k = env.spawn("run", &[]);
    env.publish(&project, "Storm", "s").groups(1200).count(1200).ok();
    let held = r#"klaxon_quiet_held_total{channel="webhook",what="fired"}"#;
    k.wait_metric(held, 1200.0, Duration::from_secs(15));
    assert_eq!(k.metric(held), 1200.0, "every firing held; log:\n{}", k.logs());
    assert!(
        until(end) > Duration::from_secs(4),
        "the test window left too little time for the resolves (3 s after each alert's event)"
    );
    let got = hooks
        .wait_for_count(1, until(end) + Duration::from_secs(30))
        .await;
    assert_eq!(got.len(), 1, "one release; log:\n{}", k.logs());
    tokio::time::sleep(QUIET).await;
    assert_eq!(hooks.count(), 1, "one release, once");
    let resolved = k.metric(r#"klaxon_quiet_held_total{channel="webhook",what="resolved"}"#);
    assert!(resolved >= 1.0, "resolves were held too; log:\n{}", k.logs());
    let body = got[0].json();
    assert_eq!(body["kind"], "quiet");
    let events = body["events"].as_array().cloned().unwrap_or_default();
    let listed_resolved = events.iter().filter(|e| e["resolved"] == true).count();
    let listed_fired = events.len() - listed_resolved;
    assert_eq!(listed_fired, 1000, "the list's bound of firings");
    // `quiet` counts what `events` lists, `more` what it could not
    assert_eq!(body["quiet"]["fired"], listed_fired, "{}", body["quiet"]);
    assert_eq!(body["quiet"]["resolved"], listed_resolved, "{}", body["quiet"]);
    assert_eq!(
        listed_fired as u64 + body["more"]["fired"].as_u64().unwrap_or(0),
        1200,
        "{}",
        body["more"]
    );
    assert_eq!(
        listed_resolved as f64 + body["more"]["resolved"].as_f64().unwrap_or(0.0),
        resolved,
        "{}",
        body["more"]
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
