//! Inbound integrations end to end (#43): the real `klaxon` binary, Redis, RabbitMQ, a webhook receiver and
//! local stubs of PagerDuty, Slack and Telegram, calling Klaxon back signed exactly as each service documents it
//! (signatures made here with a reference HMAC, not with the code under test).
//!
//! In each: an alert fires on the service and on a webhook (the "other channel"); the acknowledgement made in
//! the service comes back, the alert is acknowledged by the person (PagerDuty: `pagerduty`), the webhook gets the
//! acknowledged notice once, the next reminder is not sent, and the service's own message follows (PagerDuty gets
//! `acknowledge`; Slack's and Telegram's firing messages are edited, keeping only Resolve). Forged, unsigned,
//! stale and replayed callbacks are refused with 401, another project's alert with 403, and an integration whose
//! secret is unset answers 404; each outcome is counted in `klaxon_inbound_requests_total`.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{object_id, Env, Klaxon};
use klaxon_testkit::http_sink::Reply;
use klaxon_testkit::HttpSink;
use serde_json::{json, Value};

/// After the expected messages, keep listening this long for a (wrong) extra one.
const QUIET: Duration = Duration::from_secs(3);
/// The rules' reminder period: the first reminder is due this long after the firing.
const EVERY_MS: u64 = 10_000;
const ROUTING_KEY: &str = "R0uT1nGkEyInbound00000000000000A";

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The reference HMAC-SHA256 of `msg` under `key`, in hex.
fn sign(key: &str, msg: &[u8]) -> String {
    hex(&common::reference_hmac_sha256(key.as_bytes(), msg))
}

/// A SEEN_MORE rule (2 events fire) that never resolves by itself, reminds every [`EVERY_MS`] (at most twice),
/// with a webhook and `channel` (key, endpoint).
fn rules(project: &str, hook: &HttpSink, channel: (&str, &str)) -> Value {
    let mut r = quiet_rules(project, hook, channel);
    r["notifications"][0]["renotify"] = json!({"every": EVERY_MS, "max": 2});
    r
}

/// [`rules`] without reminders.
fn quiet_rules(project: &str, hook: &HttpSink, channel: (&str, &str)) -> Value {
    json!({
        "_id": project,
        "notifications": [{
            "isEnabled": true, "whatToReceive": "SEEN_MORE", "including": [], "excluding": [],
            "threshold": 2, "thresholdPeriod": 60_000, "resolveAfter": 0,
            "channels": {
                "webhook": {"isEnabled": true, "endpoint": hook.url("/hook"), "minPeriod": 0},
                channel.0: {"isEnabled": true, "endpoint": channel.1, "minPeriod": 0}
            }
        }]
    })
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// POSTs `body` with `headers` to `path` of `k`: (status, body).
async fn post(
    k: &Klaxon,
    path: &str,
    content_type: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, String) {
    let mut req = http()
        .post(format!("http://{}{path}", k.addr))
        .header("content-type", content_type)
        .body(body.to_owned());
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

/// The alert `alert_id` of `project` as the API shows it.
fn alert(k: &Klaxon, project: &str, alert_id: &str) -> Value {
    let (status, body) = k
        .get(&format!("/api/v1/projects/{project}/alerts"))
        .expect("alerts answer");
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).expect("json");
    list["alerts"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["id"] == alert_id).cloned())
        .unwrap_or(Value::Null)
}

fn inbound(k: &Klaxon, integration: &str, outcome: &str) -> f64 {
    k.metric(&format!(
        r#"klaxon_inbound_requests_total{{integration="{integration}",outcome="{outcome}"}}"#
    ))
}

/// After an acknowledgement: the webhook got the acknowledged notice once (its second and last request), the
/// first reminder found the alert acknowledged and sent nothing.
async fn other_channel_notified_once_and_reminders_stop(k: &Klaxon, hook: &HttpSink, alert_id: &str) {
    let got = hook.wait_for_count(2, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 2, "the acknowledged notice; log:\n{}", k.logs());
    let notice = got[1].json();
    assert_eq!(notice["kind"], "acknowledged", "{notice}");
    assert_eq!(notice["alertId"], alert_id, "{notice}");
    k.wait_metric(
        r#"klaxon_alert_reminders_total{outcome="acknowledged"}"#,
        1.0,
        Duration::from_millis(EVERY_MS) + Duration::from_secs(15),
    );
    tokio::time::sleep(QUIET).await;
    assert_eq!(hook.count(), 2, "one notice, no reminder; log:\n{}", k.logs());
    assert_eq!(k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#), 0.0);
}

// ---------------------------------------------------------------------------------------------------------
// PagerDuty

const PD_SECRET: &str = "pd-webhook-subscription-secret-e2e";

/// A PagerDuty v3 webhook payload about `incident_key`.
fn pd_event(id: &str, event_type: &str, incident_key: &str, occurred_at_ms: i64) -> String {
    json!({"event": {
        "id": id,
        "event_type": event_type,
        "resource_type": "incident",
        "occurred_at": klaxon_core::notification::rfc3339_ms(occurred_at_ms),
        "agent": {"id": "PLH1HKV", "summary": "Tenex Engineer", "type": "user_reference"},
        "client": null,
        "data": {
            "id": "PGR0VU2", "type": "incident", "number": 2,
            "status": event_type.trim_start_matches("incident."),
            "incident_key": incident_key,
            "title": "A little bump in the road",
            "service": {"id": "PF9KMXH", "summary": "API Service", "type": "service_reference"}
        }
    }})
    .to_string()
}

fn pd_signature(secret: &str, body: &str) -> String {
    format!("v1={}", sign(secret, body.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pagerduty_acknowledge_and_resolve_come_back_and_forgeries_are_refused() {
    let hook = HttpSink::start().await.expect("sink");
    let pd = HttpSink::start().await.expect("sink");
    pd.set_default(Reply::status(202).body(r#"{"status":"success","message":"Event processed"}"#));
    let env = Env::new()
        .set("KLAXON_PAGERDUTY_API", &pd.url(""))
        .set("KLAXON_PAGERDUTY_WEBHOOK_SECRET", PD_SECRET);
    let project = object_id();
    env.import(&json!([rules(&project, &hook, ("pagerduty", ROUTING_KEY))]));
    let k = env.spawn("run", &[]);
    env.publish(&project, &format!("PD ({})", env.namespace), "g")
        .count(2)
        .ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();
    let triggers = pd.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(triggers.len(), 1, "the trigger; log:\n{}", k.logs());
    let dedup_key = triggers[0].json()["dedup_key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = "/api/v1/integrations/pagerduty";
    let send = |body: String, signature: Option<String>| {
        let k = &k;
        async move {
            let headers: Vec<(&str, String)> = signature
                .into_iter()
                .map(|s| ("x-pagerduty-signature", s))
                .collect();
            post(k, path, "application/json", &headers, &body).await
        }
    };
    let now_ms = now_secs() * 1000;

    // forged, unsigned, stale: refused, the alert untouched
    let ack = pd_event("01EVACK", "incident.acknowledged", &dedup_key, now_ms);
    let forged = pd_signature("not-the-secret", &ack);
    assert_eq!(send(ack.clone(), Some(forged)).await.0, 401);
    assert_eq!(send(ack.clone(), None).await.0, 401);
    let stale = pd_event(
        "01EVSTALE",
        "incident.acknowledged",
        &dedup_key,
        now_ms - 3_600_000,
    );
    let (status, body) = send(stale.clone(), Some(pd_signature(PD_SECRET, &stale))).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(alert(&k, &project, &alert_id)["state"], "firing");
    assert_eq!(inbound(&k, "pagerduty", "bad_signature"), 1.0);
    assert_eq!(inbound(&k, "pagerduty", "unsigned"), 1.0);
    assert_eq!(inbound(&k, "pagerduty", "stale"), 1.0);

    // the acknowledgement, signed during a secret rotation (the old secret's signature first)
    let rotation = format!(
        "{}, {}",
        pd_signature("the-old-secret", &ack),
        pd_signature(PD_SECRET, &ack)
    );
    let (status, body) = send(ack.clone(), Some(rotation.clone())).await;
    assert_eq!(status, 200, "{body}; log:\n{}", k.logs());
    let a = alert(&k, &project, &alert_id);
    assert_eq!(a["state"], "acknowledged", "{a}");
    assert_eq!(a["acknowledgedBy"], "pagerduty", "{a}");
    // replayed: refused
    assert_eq!(send(ack.clone(), Some(rotation)).await.0, 401);
    assert_eq!(inbound(&k, "pagerduty", "replayed"), 1.0);
    other_channel_notified_once_and_reminders_stop(&k, &hook, &alert_id).await;
    // PagerDuty hears the acknowledge too (the same incident: idempotent there)
    let events: Vec<Value> = pd.requests().iter().map(|r| r.json()).collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1]["event_action"], "acknowledge");
    assert_eq!(events[1]["dedup_key"], dedup_key.as_str());

    // an incident Klaxon did not trigger: counted, answered 200 (PagerDuty must not retry it)
    let foreign = pd_event(
        "01EVOTHER",
        "incident.acknowledged",
        "someone-elses-incident",
        now_ms,
    );
    let (status, body) = send(foreign.clone(), Some(pd_signature(PD_SECRET, &foreign))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(inbound(&k, "pagerduty", "unknown_alert"), 1.0);

    // the resolve
    let resolve = pd_event("01EVRES", "incident.resolved", &dedup_key, now_ms);
    let (status, body) = send(resolve.clone(), Some(pd_signature(PD_SECRET, &resolve))).await;
    assert_eq!(status, 200, "{body}");
    let a = alert(&k, &project, &alert_id);
    assert_eq!(
        (a["state"].as_str(), a["resolvedBy"].as_str()),
        (Some("resolved"), Some("pagerduty")),
        "{a}"
    );
    let got = hook.wait_for_count(3, Duration::from_secs(15)).await;
    assert_eq!(got.len(), 3, "the resolved notice; log:\n{}", k.logs());
    assert_eq!(got[2].json()["kind"], "resolved");
    assert_eq!(inbound(&k, "pagerduty", "accepted"), 2.0);
    assert!(!k.logs().contains(PD_SECRET), "the secret is never logged");
    drop(k);
    common::delete_queues(&env).await;
}

// ---------------------------------------------------------------------------------------------------------
// Slack

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_TOKEN: &str = "xoxb-1-SECRETinboundE2E";
const TS: &str = "1712345678.000100";

/// Slack's interactivity request for a click on `action_id` with `value` in `channel` by `user`: the form body.
fn slack_click(action_id: &str, value: &str, channel: &str, user: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": "U0E2E", "username": user, "name": user, "team_id": "T0E2E"},
        "api_app_id": "A0E2E",
        "team": {"id": "T0E2E", "domain": "e2e"},
        "container": {"type": "message", "message_ts": TS, "channel_id": channel, "is_ephemeral": false},
        "trigger_id": "123.456.abc",
        "channel": {"id": channel, "name": "alerts"},
        "message": {"type": "message", "ts": TS, "text": "…"},
        "response_url": "https://hooks.slack.com/actions/T0E2E/1/x",
        "actions": [{
            "type": "button", "action_id": action_id, "block_id": "klaxon-alert-buttons",
            "text": {"type": "plain_text", "text": "Acknowledge"}, "value": value, "action_ts": "1712345679.1"
        }]
    });
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// Slack's signature headers of `body` sent at `ts` under `secret`.
fn slack_headers(secret: &str, ts: i64, body: &str) -> Vec<(&'static str, String)> {
    let base = format!("v0:{ts}:{body}");
    vec![
        ("x-slack-request-timestamp", ts.to_string()),
        (
            "x-slack-signature",
            format!("v0={}", sign(secret, base.as_bytes())),
        ),
    ]
}

/// The buttons block of a Slack message body.
fn slack_buttons(body: &Value) -> Vec<Value> {
    body["blocks"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["block_id"] == "klaxon-alert-buttons"))
        .and_then(|b| b["elements"].as_array().cloned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_button_acknowledges_and_the_message_updates_in_place() {
    const CHANNEL: &str = "C0INBOUND1";
    let hook = HttpSink::start().await.expect("sink");
    let slack = HttpSink::start().await.expect("sink");
    slack
        .set_default(Reply::status(200).body(&format!(r#"{{"ok":true,"channel":"{CHANNEL}","ts":"{TS}"}}"#)));
    let env = Env::new()
        .set("KLAXON_SLACK_API", &slack.url("/api"))
        .set("KLAXON_SLACK_BOT_TOKEN", SLACK_TOKEN)
        .set("KLAXON_SLACK_SIGNING_SECRET", SLACK_SECRET);
    let project = object_id();
    env.import(&json!([rules(&project, &hook, ("slack", CHANNEL))]));
    let k = env.spawn("run", &[]);
    env.publish(&project, &format!("Slack ({})", env.namespace), "g")
        .count(2)
        .ok();
    let fired = common::firing_webhook(&hook, || k.logs()).await;
    let alert_id = fired["alertId"].as_str().unwrap_or_default().to_owned();
    let posted = slack.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(posted.len(), 1, "the firing; log:\n{}", k.logs());
    let firing = posted[0].json();
    let buttons = slack_buttons(&firing);
    let ids: Vec<&str> = buttons.iter().filter_map(|b| b["action_id"].as_str()).collect();
    assert_eq!(ids, ["ack", "resolve"], "{firing}");
    let value = buttons[0]["value"].as_str().unwrap_or_default().to_owned();
    assert_eq!(value, format!("{project}:{alert_id}"));
    let path = "/api/v1/integrations/slack";
    let form = "application/x-www-form-urlencoded";
    let click = slack_click("ack", &value, CHANNEL, "ana");

    // forged, unsigned, stale, from another channel: refused, the alert untouched
    let now = now_secs();
    assert_eq!(
        post(
            &k,
            path,
            form,
            &slack_headers("wrong-secret", now, &click),
            &click
        )
        .await
        .0,
        401
    );
    assert_eq!(post(&k, path, form, &[], &click).await.0, 401);
    let stale = slack_headers(SLACK_SECRET, now - 600, &click);
    assert_eq!(post(&k, path, form, &stale, &click).await.0, 401);
    let elsewhere = slack_click("ack", &value, "C0SOMEONE2", "mallory");
    let (status, body) = post(
        &k,
        path,
        form,
        &slack_headers(SLACK_SECRET, now, &elsewhere),
        &elsewhere,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(alert(&k, &project, &alert_id)["state"], "firing");
    for (outcome, n) in [
        ("bad_signature", 1.0),
        ("unsigned", 1.0),
        ("stale", 1.0),
        ("foreign_project", 1.0),
    ] {
        assert_eq!(inbound(&k, "slack", outcome), n, "{outcome}");
    }

    // the click
    let headers = slack_headers(SLACK_SECRET, now, &click);
    let (status, body) = post(&k, path, form, &headers, &click).await;
    assert_eq!(status, 200, "{body}; log:\n{}", k.logs());
    let a = alert(&k, &project, &alert_id);
    assert_eq!(
        (a["state"].as_str(), a["acknowledgedBy"].as_str()),
        (Some("acknowledged"), Some("ana")),
        "{a}"
    );
    // replayed: refused
    assert_eq!(post(&k, path, form, &headers, &click).await.0, 401);
    assert_eq!(inbound(&k, "slack", "replayed"), 1.0);
    other_channel_notified_once_and_reminders_stop(&k, &hook, &alert_id).await;

    // the message updated in place: the firing message edited (only Resolve left), the notice in its thread
    let reqs = slack.requests();
    let uris: Vec<&str> = reqs.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "/api/chat.postMessage",
            "/api/chat.update",
            "/api/chat.postMessage"
        ],
        "{uris:?}"
    );
    let edited = reqs[1].json();
    assert_eq!(
        (edited["channel"].as_str(), edited["ts"].as_str()),
        (Some(CHANNEL), Some(TS))
    );
    let left: Vec<Value> = slack_buttons(&edited);
    assert_eq!(left.len(), 1, "{edited}");
    assert_eq!(left[0]["action_id"], "resolve");
    let notice = reqs[2].json();
    assert_eq!(notice["thread_ts"], TS, "{notice}");
    assert!(
        slack_buttons(&notice).is_empty(),
        "the notice carries no button: {notice}"
    );

    // Resolve, from the edited message
    let resolve = slack_click("resolve", &value, CHANNEL, "bob");
    let (status, body) = post(
        &k,
        path,
        form,
        &slack_headers(SLACK_SECRET, now_secs(), &resolve),
        &resolve,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let a = alert(&k, &project, &alert_id);
    assert_eq!(
        (a["state"].as_str(), a["resolvedBy"].as_str()),
        (Some("resolved"), Some("bob")),
        "{a}"
    );
    let reqs = slack.wait_for_count(5, Duration::from_secs(15)).await;
    assert_eq!(
        reqs.len(),
        5,
        "edit and notice of the resolve; log:\n{}",
        k.logs()
    );
    assert!(
        slack_buttons(&reqs[3].json()).is_empty(),
        "no button on a resolved alert"
    );
    assert!(
        !k.logs().contains("SECRETinboundE2E"),
        "the bot token is never logged"
    );
    assert!(
        !k.logs().contains(SLACK_SECRET),
        "the signing secret is never logged"
    );

    // `klaxon doctor` and the console say which integrations are on and what this process counted, never the
    // secret: 2 clicks accepted; forged, unsigned, stale, foreign and replayed ones refused
    let (_, report, err) = env
        .clone()
        .set("KLAXON_HTTP_ADDR", &k.addr)
        .run(&["doctor", "--timeout", "10s"]);
    let line = |check: &str| -> String {
        report
            .lines()
            .find(|l| l.split_whitespace().skip(1).take(2).collect::<Vec<_>>().join(" ") == check)
            .unwrap_or_else(|| panic!("no `{check}` line:\n{report}{err}"))
            .to_owned()
    };
    let slack_line = line("inbound slack");
    assert!(
        slack_line.starts_with("ok ")
            && slack_line.contains("on (KLAXON_SLACK_SIGNING_SECRET set, not shown)")
            && slack_line.contains(&format!(
                "the process at {} counted 2 accepted, 5 refused (",
                k.addr
            )),
        "{slack_line}"
    );
    for outcome in [
        "bad_signature 1",
        "unsigned 1",
        "stale 1",
        "foreign_project 1",
        "replayed 1",
    ] {
        assert!(slack_line.contains(outcome), "{outcome}: {slack_line}");
    }
    assert!(
        line("inbound pagerduty").contains("off: KLAXON_PAGERDUTY_WEBHOOK_SECRET is not set"),
        "{report}"
    );
    assert!(line("inbound telegram").contains("off:"), "{report}");
    assert!(!report.contains(SLACK_SECRET), "{report}");
    let (status, page) = k.get("/alerts").expect("console");
    assert_eq!(status, 200, "{page}");
    let row = page
        .split("id=\"inbound-slack\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("the slack row: {page}"));
    assert!(
        row.contains(">on<") && row.contains("2 accepted, 5 refused"),
        "{row}"
    );
    assert!(!page.contains(SLACK_SECRET), "{page}");
    drop(k);
    common::delete_queues(&env).await;
}

// ---------------------------------------------------------------------------------------------------------
// Telegram

const TG_SECRET: &str = "tg-webhook-secret_token-E2E";
const TG_TOKEN: &str = "123456:SECRETinboundTG";

/// A `callback_query` update: a click with `data` in chat `chat` by `@user`.
fn tg_update(update_id: i64, data: &str, chat: i64, user: &str) -> String {
    json!({
        "update_id": update_id,
        "callback_query": {
            "id": format!("cb{update_id}"),
            "from": {"id": 111, "is_bot": false, "first_name": "Ana", "username": user},
            "message": {
                "message_id": 42, "date": now_secs(),
                "chat": {"id": chat, "type": "supergroup", "title": "alerts"},
                "text": "…"
            },
            "chat_instance": "-123",
            "data": data
        }
    })
    .to_string()
}

fn tg_header(secret: &str) -> Vec<(&'static str, String)> {
    vec![("x-telegram-bot-api-secret-token", secret.to_owned())]
}

/// The `callback_data` of the inline buttons of a Bot API body.
fn tg_buttons(body: &Value) -> Vec<String> {
    body["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|row| row.as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["callback_data"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_button_acknowledges_and_another_projects_alert_is_refused() {
    const CHAT_A: i64 = -1_001_000_000_001;
    const CHAT_B: i64 = -1_001_000_000_002;
    let (hook_a, hook_b) = (
        HttpSink::start().await.expect("sink"),
        HttpSink::start().await.expect("sink"),
    );
    let tg = HttpSink::start().await.expect("sink");
    tg.set_default(Reply::status(200).body(r#"{"ok":true,"result":{"message_id":42}}"#));
    let env = Env::new()
        .set("KLAXON_TELEGRAM_API", &tg.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TG_TOKEN)
        .set("KLAXON_TELEGRAM_WEBHOOK_SECRET", TG_SECRET);
    let (project_a, project_b) = (object_id(), object_id());
    env.import(&json!([
        rules(&project_a, &hook_a, ("telegram", &CHAT_A.to_string())),
        quiet_rules(&project_b, &hook_b, ("telegram", &CHAT_B.to_string())),
    ]));
    let k = env.spawn("run", &[]);
    env.publish(&project_a, &format!("TG A ({})", env.namespace), "g")
        .count(2)
        .ok();
    let fired_a = common::firing_webhook(&hook_a, || k.logs()).await;
    env.publish(&project_b, &format!("TG B ({})", env.namespace), "g")
        .count(2)
        .ok();
    let fired_b = common::firing_webhook(&hook_b, || k.logs()).await;
    let (alert_a, alert_b) = (
        fired_a["alertId"].as_str().unwrap_or_default().to_owned(),
        fired_b["alertId"].as_str().unwrap_or_default().to_owned(),
    );
    let sent = tg.wait_for_count(2, Duration::from_secs(15)).await;
    let chat_a = CHAT_A.to_string();
    assert_eq!(sent.len(), 2, "two firings; log:\n{}", k.logs());
    let firing_a = sent
        .iter()
        .map(|r| r.json())
        .find(|b| b["chat_id"].as_str() == Some(chat_a.as_str()))
        .expect("A's firing");
    let data = tg_buttons(&firing_a);
    assert_eq!(
        data,
        [
            format!("ack:{project_a}:{alert_a}"),
            format!("resolve:{project_a}:{alert_a}")
        ],
        "{firing_a}"
    );
    assert!(
        data.iter().all(|d| d.len() <= 64),
        "Telegram's callback_data limit"
    );
    let path = "/api/v1/integrations/telegram";
    let json_type = "application/json";

    // wrong secret, no secret: refused
    let click = tg_update(1001, &data[0], CHAT_A, "ana");
    assert_eq!(
        post(&k, path, json_type, &tg_header("wrong"), &click).await.0,
        401
    );
    assert_eq!(post(&k, path, json_type, &[], &click).await.0, 401);
    // another project's alert, clicked from A's chat: refused, B's alert untouched
    let foreign = tg_update(1000, &format!("ack:{project_b}:{alert_b}"), CHAT_A, "mallory");
    let (status, body) = post(&k, path, json_type, &tg_header(TG_SECRET), &foreign).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(alert(&k, &project_b, &alert_b)["state"], "firing");
    assert_eq!(inbound(&k, "telegram", "foreign_project"), 1.0);

    // the click: the answer makes Telegram answer the callback query
    let (status, body) = post(&k, path, json_type, &tg_header(TG_SECRET), &click).await;
    assert_eq!(status, 200, "{body}; log:\n{}", k.logs());
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["method"], "answerCallbackQuery", "{answer}");
    assert_eq!(answer["callback_query_id"], "cb1001", "{answer}");
    let a = alert(&k, &project_a, &alert_a);
    assert_eq!(
        (a["state"].as_str(), a["acknowledgedBy"].as_str()),
        (Some("acknowledged"), Some("@ana")),
        "{a}"
    );
    // replayed (the same update_id): refused
    assert_eq!(
        post(&k, path, json_type, &tg_header(TG_SECRET), &click).await.0,
        401
    );
    assert_eq!(inbound(&k, "telegram", "replayed"), 1.0);
    other_channel_notified_once_and_reminders_stop(&k, &hook_a, &alert_a).await;

    // A's firing message edited, keeping only Resolve; the notice a reply without buttons
    let reqs = tg.requests();
    let uris: Vec<&str> = reqs.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(reqs.len(), 4, "two firings, A's edit and A's notice: {uris:?}");
    let edits: Vec<Value> = reqs
        .iter()
        .filter(|r| r.uri.ends_with("/editMessageText"))
        .map(|r| r.json())
        .collect();
    assert_eq!(edits.len(), 1, "{uris:?}");
    assert_eq!(edits[0]["chat_id"], CHAT_A.to_string());
    assert_eq!(tg_buttons(&edits[0]), [format!("resolve:{project_a}:{alert_a}")]);
    let replies: Vec<Value> = reqs
        .iter()
        .map(|r| r.json())
        .filter(|b| b.get("reply_parameters").is_some())
        .collect();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0]["chat_id"], CHAT_A.to_string());
    assert!(tg_buttons(&replies[0]).is_empty(), "{}", replies[0]);
    // B heard nothing of A's acknowledgement
    assert_eq!(hook_b.count(), 1, "B: its firing only");
    assert!(
        !k.logs().contains("SECRETinboundTG"),
        "the bot token is never logged"
    );
    assert!(
        !k.logs().contains(TG_SECRET),
        "the webhook secret is never logged"
    );
    drop(k);
    common::delete_queues(&env).await;
}

// ---------------------------------------------------------------------------------------------------------
// Off

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integration_without_its_secret_is_off() {
    let env = Env::new()
        .unset("KLAXON_PAGERDUTY_WEBHOOK_SECRET")
        .unset("KLAXON_SLACK_SIGNING_SECRET")
        .unset("KLAXON_TELEGRAM_WEBHOOK_SECRET");
    let k = env.spawn("run", &[]);
    for integration in ["pagerduty", "slack", "telegram"] {
        let path = format!("/api/v1/integrations/{integration}");
        let (status, body) = post(&k, &path, "application/json", &[], "{}").await;
        assert_eq!(status, 404, "{integration}: {body}");
        assert!(body.contains("KLAXON_"), "says which secret turns it on: {body}");
        assert_eq!(inbound(&k, integration, "disabled"), 1.0, "{integration}");
    }
    drop(k);
    common::delete_queues(&env).await;
}
