//! No tenant text can forge a log line (#42): the real `klaxon run`, once with `--log-format text` and once with
//! `json`, driven through every lifecycle and on-call path with hostile titles, group hashes, `by` names, project
//! ids, endpoints and receivers' answers — each holding `\n`, `\r`, an ANSI escape, a fake text log line
//! (`1999-… ERROR klaxon: FORGED`), fake `level=ERROR msg=FORGED` fields and a fake JSON record. Its whole stderr
//! is then read back: every line is one record (a real header, or one JSON object with a real level), the hostile
//! text appears only inside a quoted value (text) or a string value (JSON), and no escape byte reaches the log.
//!
//! Paths: firing, alert opened, reminder, escalation step, acknowledge by hand, resolve by `resolveAfter`, digest,
//! quiet hours held and released, a retried delivery, a dead letter (webhook 400, Telegram 400), the endpoint's
//! breaker opening, an invalid event, a refused inbound request.

mod common;

use std::time::Duration;

use common::{object_id, Env, Klaxon};
use klaxon_testkit::{HttpSink, Reply};
use serde_json::{json, Value};

/// The word every hostile text carries, so the check can find where it landed.
const MARK: &str = "FORGED";

/// `tag` followed by everything a log line must not take as its own: a newline and a carriage return starting a
/// fake record, an ANSI colour, fake logfmt fields and a fake JSON record.
fn hostile(tag: &str) -> String {
    format!(
        "{tag}\n1999-01-01T00:00:00.000000Z ERROR klaxon: {MARK} {tag}\r\u{1b}[31m level=ERROR msg={MARK} \
         {{\"level\":\"ERROR\",\"message\":\"{MARK}\"}}\u{1b}[0m"
    )
}

const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// The rules of the hostile project: one rule per path, every one matching every event.
fn rules(project: &str, hook: &HttpSink, telegram_chat: &str) -> Value {
    let webhook = |path: &str, min_period: u64| json!({"webhook": {"isEnabled": true, "endpoint": hook.url(path), "minPeriod": min_period}});
    let (from, to, _) = common::quiet_window();
    let base = |channels: Value, extra: Value| {
        let mut r = json!({
            "_id": object_id(), "isEnabled": true, "whatToReceive": "SEEN_MORE",
            "including": [], "excluding": [], "threshold": 1, "thresholdPeriod": 600_000,
            "resolveAfter": 0, "channels": channels
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            r[k] = v;
        }
        r
    };
    json!([{"_id": project, "notifications": [
        // firing, alert opened, reminder, escalation, acknowledge, resolve
        base(webhook("/hook", 0), json!({
            "resolveAfter": 4_000,
            "renotify": {"every": 1_000, "max": 1},
            "escalation": [{"after": 1_500, "channels": {
                "webhook": {"isEnabled": true, "endpoint": hook.url("/escalated"), "minPeriod": 0}}}]
        })),
        // a digest of the second firing
        base(webhook("/digest", 2), json!({})),
        // held by quiet hours, released at the window's end
        base(webhook("/quiet", 0), json!({"quietHours": [{"from": from, "to": to, "timezone": "UTC"}]})),
        // a receiver answering 500 with a hostile body: retried, then dead, its breaker opened
        base(webhook("/fail", 0), json!({})),
        // a receiver answering 400 with a hostile body: dead at once
        base(webhook("/bad", 0), json!({})),
        // a hostile chat id, which the stub bot refuses with a hostile description
        base(json!({"telegram": {"isEnabled": true, "endpoint": telegram_chat, "minPeriod": 0}}), json!({})),
    ]}])
}

/// A text log line's header: `<timestamp> <LEVEL> <target>: `, the timestamp this century's.
fn text_header(line: &str) -> Result<(), String> {
    let mut words = line.split_whitespace();
    let ts = words.next().unwrap_or_default();
    let level = words.next().unwrap_or_default();
    let target = words.next().unwrap_or_default();
    let real_ts = ts.len() >= 20
        && ts.starts_with("20")
        && ts.ends_with('Z')
        && ts.chars().all(|c| c.is_ascii_digit() || "-:.TZ".contains(c));
    if !real_ts || !LEVELS.contains(&level) || !target.ends_with(':') {
        return Err(format!("not a record's header: {line:?}"));
    }
    Ok(())
}

/// Where in `line` the quoted values are (byte ranges inside `"…"`, backslash escapes honoured).
fn quoted_ranges(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match (start, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(s), '"') => {
                out.push((s, i));
                start = None;
            }
            (None, '"') => start = Some(i),
            _ => {}
        }
    }
    out
}

/// Every line of a text log is one record and hostile text sits only inside quoted values; the lines that
/// carry hostile text.
fn check_text(log: &str) -> Vec<String> {
    let mut carrying = Vec::new();
    for line in log.lines() {
        if let Err(e) = text_header(line) {
            panic!("{e}\nlog:\n{log}");
        }
        let quoted = quoted_ranges(line);
        for bad in [MARK, "level=", "\"level\""] {
            for (at, _) in line.match_indices(bad) {
                let inside = quoted.iter().any(|&(s, e)| s < at && at + bad.len() <= e);
                // a JSON fragment's own quotes are escaped inside a quoted value: `\"level\"` is inside
                let escaped = bad.starts_with('"') && line[..at].ends_with('\\');
                assert!(
                    inside || escaped,
                    "{bad:?} outside a quoted value at byte {at}: {line}\nlog:\n{log}"
                );
            }
        }
        if line.contains(MARK) {
            carrying.push(line.to_owned());
        }
    }
    carrying
}

/// Every line of a JSON log is one object with a real level and timestamp; the lines that carry hostile text
/// (in a string value: serde wrote it).
fn check_json(log: &str) -> Vec<String> {
    let mut carrying = Vec::new();
    for line in log.lines() {
        let record: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON record ({e}): {line:?}\nlog:\n{log}"));
        let level = record["level"].as_str().unwrap_or_default();
        let ts = record["timestamp"].as_str().unwrap_or_default();
        assert!(
            LEVELS.contains(&level) && ts.starts_with("20"),
            "not a real record: {line}"
        );
        if line.contains(MARK) {
            let in_values = record
                .as_object()
                .into_iter()
                .flatten()
                .any(|(k, v)| k != "level" && v.as_str().is_some_and(|s| s.contains(MARK)));
            assert!(in_values, "hostile text outside a string value: {line}");
            carrying.push(line.to_owned());
        }
    }
    carrying
}

/// The record of `message` (text or JSON) among `lines`.
fn has(lines: &[String], message: &str) -> bool {
    lines.iter().any(|l| l.contains(message))
}

async fn post(k: &Klaxon, path: &str, headers: &[(&str, &str)], body: String) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut req = client
        .post(format!("http://{}{path}", k.addr))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let r = req.send().await.expect("request");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

async fn hostile_run(format: &str) {
    let hook = HttpSink::start().await.expect("sink");
    let bot = HttpSink::start().await.expect("sink");
    let answer = |status: u16, tag: &str| {
        Reply::status(status)
            .body(&json!({"ok": false, "description": hostile(tag), "error": hostile(tag)}).to_string())
    };
    hook.route(|r| r.uri.starts_with("/fail"), answer(500, "receiver-500"));
    hook.route(|r| r.uri.starts_with("/bad"), answer(400, "receiver-400"));
    bot.set_default(answer(400, "telegram-400"));
    let env = Env::new()
        .set("KLAXON_LOG_FORMAT", format)
        .set("KLAXON_TELEGRAM_API", &bot.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", "123456:log-forging-e2e")
        .set("KLAXON_PAGERDUTY_WEBHOOK_SECRET", "log-forging-e2e-secret")
        .set("KLAXON_MAX_ATTEMPTS", "3")
        .set("KLAXON_RETRY_SCHEDULE", "1,1")
        .set("KLAXON_BREAKER_MIN_REQUESTS", "2");
    let project = object_id();
    env.import_force(&rules(&project, &hook, &hostile("chat")));
    let mut k = env.spawn("run", &[]);

    // two hostile groups, each with a hostile title: every rule fires twice
    let title = hostile(&format!("title ({})", env.namespace));
    let groups = [hostile("group-1"), hostile("group-2")];
    for g in &groups {
        env.publish(&project, &title, g).ok();
    }
    // an invalid event with a hostile project id
    let body =
        json!({"projectId": hostile("project"), "event": {"title": title, "groupHash": "g"}}).to_string();
    env.ok(&["publish", "--body", &body]);
    // a refused inbound request with a hostile body
    let (status, _) = post(
        &k,
        "/api/v1/integrations/pagerduty",
        &[("x-pagerduty-signature", "v1=00")],
        json!({"event": {"id": hostile("inbound"), "event_type": hostile("type")}}).to_string(),
    )
    .await;
    assert_eq!(status, 401, "a wrong signature is refused");

    // both firings' alerts open; the second is acknowledged by a hostile name
    let firings = klaxon_testkit::eventually(Duration::from_secs(30), || {
        let n = hook.requests().iter().filter(|r| r.uri == "/hook").count();
        (n >= 2).then_some(n)
    })
    .await;
    assert!(firings.is_some(), "the two firings; log:\n{}", k.logs());
    let alerts = klaxon_testkit::eventually(Duration::from_secs(20), || {
        let (_, body) = k.get(&format!("/api/v1/projects/{project}/alerts"))?;
        let list: Value = serde_json::from_str(&body).ok()?;
        let alerts = list["alerts"].as_array()?.clone();
        let of_groups = alerts
            .iter()
            .filter(|a| groups.iter().any(|g| a["group"] == g.as_str()))
            .count();
        (of_groups >= 2).then_some(alerts)
    })
    .await
    .unwrap_or_else(|| panic!("two alerts; log:\n{}", k.logs()));
    let second = alerts
        .iter()
        .find(|a| a["group"] == groups[1].as_str() && a["state"] == "firing")
        .and_then(|a| a["id"].as_str())
        .unwrap_or_else(|| panic!("the second group's alert: {alerts:?}"))
        .to_owned();
    let (status, answer) = post(
        &k,
        &format!("/api/v1/projects/{project}/alerts/{second}/ack"),
        &[],
        json!({"by": format!("ana {MARK} level=ERROR")}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // every path taken (bounded waits): reminder, escalation, resolve, digest, dead letters, breaker, release
    let within = Duration::from_secs(30);
    for series in [
        r#"klaxon_alert_reminders_total{outcome="sent"}"#,
        r#"klaxon_alert_escalations_total{outcome="sent"}"#,
        r#"klaxon_alerts_resolved_total{by="timeout"}"#,
        r#"klaxon_digests_published_total{channel="webhook"}"#,
        r#"klaxon_deliveries_total{channel="webhook",outcome="dead"}"#,
        r#"klaxon_deliveries_total{channel="telegram",outcome="dead"}"#,
        r#"klaxon_breaker_transitions_total{state="open"}"#,
        "klaxon_events_invalid_total",
    ] {
        k.wait_metric(series, 1.0, within);
    }
    k.wait_metric(
        r#"klaxon_quiet_released_total{channel="webhook"}"#,
        1.0,
        Duration::from_secs(100),
    );
    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));

    let log = k.logs();
    assert!(!log.contains('\u{1b}'), "an escape byte reached the log:\n{log}");
    assert!(!log.contains('\r'), "a carriage return reached the log:\n{log}");
    let carrying = match format {
        "json" => check_json(&log),
        _ => check_text(&log),
    };
    // the paths were logged, and the hostile text reached the lines that quote tenant text
    for message in [
        "rule fired",
        "alert opened",
        "alert on-call timer",
        "alert changed by hand",
        "alert resolved",
        "digest published",
        "held by quiet hours",
        "quiet hours over",
        "delivery failed, will retry",
        "notification dead-lettered",
        "circuit breaker opened",
        "invalid event set aside",
        "inbound request refused",
    ] {
        assert!(log.contains(message), "{format}: no {message:?} line:\n{log}");
    }
    for message in [
        "alert opened",
        "alert changed by hand",
        "delivery failed, will retry",
        "notification dead-lettered",
    ] {
        assert!(
            has(&carrying, message),
            "{format}: the {message:?} line does not carry the hostile text (the test must reach it):\n{log}"
        );
    }
    eprintln!(
        "measured ({format}): {} log lines, {} carrying hostile text, none forged",
        log.lines().count(),
        carrying.len()
    );
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_cannot_forge_a_text_log_line() {
    hostile_run("text").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_cannot_forge_a_json_log_line() {
    hostile_run("json").await;
}

#[test]
fn the_checks_catch_a_forged_line() {
    // the checks themselves: a raw newline, a raw field and a raw JSON fragment are each caught
    let real = "2026-11-28T00:00:00.000000Z  INFO klaxon_engine: alert opened";
    let forged = [
        format!("{real} group=x\n1999-01-01T00:00:00.000000Z ERROR klaxon: {MARK}"),
        format!("{real} group=x level=ERROR msg={MARK}"),
        format!("{real} group=\"x\" {MARK}"),
    ];
    for log in &forged {
        assert!(std::panic::catch_unwind(|| check_text(log)).is_err(), "{log}");
    }
    let fine = format!("{real} group=\"x\\n level=ERROR msg={MARK} {{\\\"level\\\":1}}\"");
    assert_eq!(check_text(&fine).len(), 1);
    assert!(std::panic::catch_unwind(|| check_json("{\"level\":\"INFO\"}\nnot json")).is_err());
}
