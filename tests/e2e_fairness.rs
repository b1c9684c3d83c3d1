//! Fairness of paced channels, end to end (issue #42): the real `klaxon run` against Redis, RabbitMQ, the rule
//! store and local servers playing the Telegram Bot API and a webhook receiver.
//!
//! * One tenant's reminders (100 rules, `renotify` every second, on 100 Telegram chats: far more than the bot's
//!   30 messages a second) do not hold another tenant's first alert on the same bot: firings go before
//!   reminders, and the bot's budget is shared per project.
//! * On one paced webhook, a new alert's firing goes out before the reminders already waiting for the
//!   endpoint's slots.
//!
//! The reminder budget is switched off here (`KLAXON_REMINDER_BUDGET=0`): what is measured is the order, not the
//! budget (which would soon drop tenant A's reminders and hide it).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{object_id, Env};
use klaxon_testkit::{HttpSink, Reply, Request};
use serde_json::{json, Value};

const TOKEN: &str = "123456:fairness-e2e-token";
/// The contract's bound for another tenant's first alert (issue #42: "beyond 2 s").
const FIRST_ALERT_WITHIN: Duration = Duration::from_secs(2);

/// An ONLY_NEW rule on one channel with a reminder every second (at most 100), never resolved by itself.
fn reminding_rule(channel: &str, endpoint: &str) -> Value {
    json!({
        "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
        "resolveAfter": 0,
        "renotify": {"every": 1_000, "max": 100},
        "channels": {channel: {"isEnabled": true, "endpoint": endpoint, "minPeriod": 0}}
    })
}

fn chat_of(r: &Request) -> String {
    match &r.json()["chat_id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The most requests `requests` has in any window of `window` (their arrival times).
fn busiest(requests: &[Request], window: Duration) -> usize {
    let mut at: Vec<Instant> = requests.iter().map(|r| r.at).collect();
    at.sort();
    let mut best = 0;
    let mut start = 0;
    for end in 0..at.len() {
        while at[end].duration_since(at[start]) >= window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// Waits (bounded) until `matches` picks at least `n` of the sink's requests; `Some` if it did.
async fn wait_for(
    sink: &HttpSink,
    n: usize,
    within: Duration,
    matches: impl Fn(&Request) -> bool,
) -> Option<()> {
    let start = Instant::now();
    while start.elapsed() < within {
        if sink.requests().iter().filter(|r| matches(r)).count() >= n {
            return Some(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_reminders_on_the_telegram_bot_do_not_hold_another_tenants_first_alert() {
    let bot = HttpSink::start().await.expect("sink");
    let env = Env::new()
        .set("KLAXON_TELEGRAM_API", &bot.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TOKEN)
        .set("KLAXON_REMINDER_BUDGET", "0");
    let (a, b) = (object_id(), object_id());
    // tenant A: 100 rules, each on a chat of its own, each reminding every second
    let a_rules: Vec<Value> = (0..100)
        .map(|i| reminding_rule("telegram", &format!("-1001{i:03}")))
        .collect();
    let b_chat = "-2002000";
    env.import(&json!([
        {"_id": a, "notifications": a_rules},
        {"_id": b, "notifications": [reminding_rule("telegram", b_chat)]}
    ]));
    let mut k = env.spawn("run", &[]);

    // A's one new error fires its 100 rules: 100 firings, then 100 reminders a second on a bot paced at 30/s
    env.publish(&a, &format!("TypeError in A ({})", env.namespace), "ga")
        .new_first()
        .ok();
    let is_a = |r: &Request| chat_of(r).starts_with("-1001");
    // the firings are out and the reminders have filled the bot for a while (~10 s of its pace)
    let busy = wait_for(&bot, 300, Duration::from_secs(40), is_a).await;
    assert!(
        busy.is_some(),
        "tenant A's firings and reminders ({} messages); log:\n{}",
        bot.requests().iter().filter(|r| is_a(r)).count(),
        k.logs()
    );
    let reminders_before = k.metric(r#"klaxon_alert_reminders_total{outcome="sent"}"#);

    let published = Instant::now();
    env.publish(&b, &format!("TypeError in B ({})", env.namespace), "gb")
        .new_first()
        .ok();
    let is_b = |r: &Request| chat_of(r) == b_chat;
    // measured from before `klaxon publish` started, so the publishing process's own time counts too
    let took = wait_for(&bot, 1, Duration::from_secs(30), is_b)
        .await
        .map(|_| published.elapsed());
    let a_count = bot.requests().iter().filter(|r| is_a(r)).count();
    eprintln!(
        "measured: tenant B's first Telegram alert {took:?} after it was published, behind {a_count} messages of \
         tenant A ({reminders_before} reminders sent before B's event)"
    );
    let took = took.unwrap_or_else(|| panic!("tenant B's first alert never came; log:\n{}", k.logs()));
    assert!(
        took <= FIRST_ALERT_WITHIN,
        "tenant B's first alert took {took:?} (more than {FIRST_ALERT_WITHIN:?}) behind tenant A's reminders; log:\n{}",
        k.logs()
    );
    // the reminders kept coming at the bot's pace, and the pace held
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = bot.requests();
    let peak = busiest(&all, Duration::from_secs(1));
    eprintln!(
        "measured: {} bot requests, at most {peak} in any second",
        all.len()
    );
    assert!(
        peak <= 36,
        "the bot's 30/s pace was exceeded: {peak} requests in one second"
    );
    assert!(
        all.iter().filter(|r| is_a(r)).count() > a_count,
        "tenant A's reminders stopped"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    assert!(!k.logs().contains(TOKEN), "the bot token reached the logs");
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_alert_on_a_paced_webhook_goes_out_before_queued_reminders() {
    let hook = HttpSink::start().await.expect("sink");
    let env = Env::new().set("KLAXON_REMINDER_BUDGET", "0");
    let project = object_id();
    env.import(&json!([{"_id": project, "notifications": [reminding_rule("webhook", &hook.url("/hook"))]}]));
    // one message a second to the endpoint: 5 alerts reminding every second need 5
    let mut k = env.spawn("run", &["--rate-webhook", "1"]);

    let title = format!("TypeError ({})", env.namespace);
    let mut opened: HashMap<String, Instant> = HashMap::new();
    for g in 0..5 {
        let group = format!("g{g}");
        opened.insert(group.clone(), Instant::now());
        env.publish(&project, &title, &group).new_first().ok();
    }
    // the 5 firings, then reminders piling up behind the endpoint's pace
    let firings = wait_for(&hook, 8, Duration::from_secs(30), |_| true).await;
    assert!(firings.is_some(), "firings and reminders; log:\n{}", k.logs());
    tokio::time::sleep(Duration::from_secs(4)).await;

    let published = Instant::now();
    // reminders due by now (every second since each alert opened) that the endpoint has not had yet
    let due: u64 = opened
        .values()
        .map(|o| published.duration_since(*o).as_secs())
        .sum();
    let delivered = hook
        .requests()
        .iter()
        .filter(|r| r.json()["kind"] == "reminder")
        .count() as u64;
    let backlog = due.saturating_sub(delivered);
    env.publish(&project, &title, "fresh").new_first().ok();
    let is_fresh = |r: &Request| {
        let body = r.json();
        body.get("kind").is_none() && body["events"][0]["groupHash"] == "fresh"
    };
    let took = wait_for(&hook, 1, Duration::from_secs(30), is_fresh)
        .await
        .map(|_| published.elapsed());
    let got = hook.requests();
    eprintln!(
        "measured: the new alert's firing {took:?} after it was published, with {backlog} reminders due and not yet \
         sent ({} messages to the endpoint so far)",
        got.len()
    );
    assert!(
        backlog >= 10,
        "no backlog of reminders ({backlog}): the test did not load the endpoint"
    );
    let took = took.unwrap_or_else(|| panic!("the new alert never came; log:\n{}", k.logs()));
    assert!(
        took <= Duration::from_secs(3),
        "the new alert's firing waited {took:?} behind reminders; log:\n{}",
        k.logs()
    );

    // Reminders that were due before the new alert was published and went out after its firing: the firing
    // overtook them. Alert → group from the firings; reminder n of a group is due n s after it opened.
    let fired_at = got
        .iter()
        .find(|r| is_fresh(r))
        .map(|r| r.at)
        .expect("the firing");
    let mut group_of: HashMap<String, String> = HashMap::new();
    for r in &got {
        let body = r.json();
        if body.get("kind").is_none() {
            if let (Some(alert), Some(group)) =
                (body["alertId"].as_str(), body["events"][0]["groupHash"].as_str())
            {
                group_of.insert(alert.to_owned(), group.to_owned());
            }
        }
    }
    // The reminders that were due come back from their parking at the endpoint's pace, each after its own
    // park (up to ~1.5× the slot distance it was refused): waited for (bounded), not a fixed 2 s, which a loaded
    // machine sometimes missed.
    let overtaken_now = || {
        hook.requests()
            .iter()
            .filter(|r| r.at > fired_at)
            .filter(|r| {
                let body = r.json();
                let n = body["reminder"]["number"].as_u64().unwrap_or(0);
                let opened_at = body["alertId"]
                    .as_str()
                    .and_then(|a| group_of.get(a))
                    .and_then(|g| opened.get(g));
                body["kind"] == "reminder"
                    && opened_at
                        .is_some_and(|o| *o + Duration::from_secs(n) + Duration::from_secs(1) < published)
            })
            .count()
    };
    let overtaken = klaxon_testkit::eventually(Duration::from_secs(10), || {
        let n = overtaken_now();
        (n >= 1).then_some(n)
    })
    .await
    .unwrap_or(0);
    eprintln!("measured: {overtaken} reminders due before the new alert went out after its firing");
    assert!(
        overtaken >= 1,
        "no reminder was waiting when the new alert fired: the test did not load the endpoint; log:\n{}",
        k.logs()
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

/// Issue #42: a Telegram conversation spent two Bot API calls (the edit of the alert's firing message, then the
/// reply) per slot of the bot's pace, so lifecycle messages went out at up to twice the pace. Ten alerts on ten
/// chats acknowledged at once, the bot paced at 5/s: each edit and each reply takes its own slot, so no second
/// holds more than the pace (+1 for slots that straddle a second's edge).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_conversations_edit_and_reply_each_take_a_slot_of_the_bots_pace() {
    const PACE: usize = 5;
    const ALERTS: usize = 10;
    let bot = HttpSink::start().await.expect("sink");
    // every call answers a message id: the firings' messages are kept, so lifecycle messages edit and reply
    bot.set_default(Reply::status(200).body(r#"{"ok":true,"result":{"message_id":42}}"#));
    let env = Env::new()
        .set("KLAXON_TELEGRAM_API", &bot.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TOKEN)
        .set("KLAXON_RATE_TELEGRAM_BOT", &PACE.to_string())
        .set("KLAXON_REMINDER_BUDGET", "0");
    let project = object_id();
    let rules: Vec<Value> = (0..ALERTS)
        .map(|i| {
            json!({
                "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
                "resolveAfter": 0,
                "channels": {"telegram": {"isEnabled": true, "endpoint": format!("-3003{i:03}"), "minPeriod": 0}}
            })
        })
        .collect();
    env.import(&json!([{"_id": project, "notifications": rules}]));
    let mut k = env.spawn("run", &[]);
    env.publish(&project, &format!("TypeError ({})", env.namespace), "g")
        .new_first()
        .ok();
    let firings = wait_for(&bot, ALERTS, Duration::from_secs(30), |_| true).await;
    assert!(firings.is_some(), "the firings; log:\n{}", k.logs());

    let ids = klaxon_testkit::eventually(Duration::from_secs(10), || {
        let (_, body) = k.get(&format!("/api/v1/projects/{project}/alerts"))?;
        let list: Value = serde_json::from_str(&body).ok()?;
        let ids: Vec<String> = list["alerts"]
            .as_array()?
            .iter()
            .filter_map(|a| a["id"].as_str().map(str::to_owned))
            .collect();
        (ids.len() == ALERTS).then_some(ids)
    })
    .await
    .unwrap_or_else(|| panic!("{ALERTS} alerts; log:\n{}", k.logs()));
    // the firings' messages are remembered once delivered: a moment for the last one
    tokio::time::sleep(Duration::from_millis(500)).await;
    let acked_at = Instant::now();
    for id in &ids {
        let path = format!("/api/v1/projects/{project}/alerts/{id}/ack");
        let answer = common::http_request(&k.addr, "POST", &path);
        assert!(matches!(answer, Some((200, _))), "{answer:?}");
    }
    let is_edit = |r: &Request| r.uri.ends_with("/editMessageText");
    let is_reply =
        |r: &Request| r.uri.ends_with("/sendMessage") && r.json().get("reply_parameters").is_some();
    let done = wait_for(&bot, 2 * ALERTS, Duration::from_secs(30), |r| {
        r.at >= acked_at && (is_edit(r) || is_reply(r))
    })
    .await;
    let calls: Vec<Request> = bot.requests().into_iter().filter(|r| r.at >= acked_at).collect();
    let edits = calls.iter().filter(|r| is_edit(r)).count();
    let replies = calls.iter().filter(|r| is_reply(r)).count();
    assert!(
        done.is_some(),
        "{edits} edits and {replies} replies of {ALERTS} acknowledgements; log:\n{}",
        k.logs()
    );
    let peak = busiest(&calls, Duration::from_secs(1));
    let spread = calls
        .iter()
        .map(|r| r.at)
        .max()
        .zip(calls.iter().map(|r| r.at).min())
        .map(|(last, first)| last.duration_since(first));
    eprintln!(
        "measured: {ALERTS} acknowledgements = {} Bot API calls ({edits} edits, {replies} replies) over {spread:?}, \
         at most {peak} in any second (bot paced at {PACE}/s)",
        calls.len()
    );
    assert_eq!((edits, replies), (ALERTS, ALERTS), "one edit and one reply each");
    assert!(
        peak <= PACE + 1,
        "{peak} Bot API calls in one second, pace {PACE}/s: an edit and its reply share a slot"
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
