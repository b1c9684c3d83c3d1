//! Golden files of what every channel sends (`tests/golden/<channel>/<case>.txt`), and every channel's own
//! documented limits checked on worst-case messages. The `hostile` and `hostile_digest` cases carry a title and a
//! project name made of every markup we know (mentions, links, formatting, HTML, bidi overrides): the files show
//! how each channel neutralises them. U+2060 WORD JOINER, invisible, is written `{WJ}` in the files.
//!
//! Re-bless after an intended change: `KLAXON_BLESS=1 cargo test -p klaxon-channels --test golden`, then
//! review the diff of `tests/golden/`.

mod common;

use std::path::PathBuf;

use klaxon_channels::{ActionLinks, Channels, Preview, PublicUrl, MAX_SUBJECT_CHARS};
use klaxon_core::action::{Action, ActionKey};
use klaxon_core::alert::{AlertRef, AlertState};
use klaxon_core::{ChannelKind, NotificationEvent, NotificationTask, Reason, Window};

const HAWK_GARAGE: &str =
    "https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview";
const PROJECT: &str = "5e3eef0679fa3700a0198a49";
const NAME: &str = "Acme <web> & \"shop\"";
/// A title written to page, link, format and mislead on every channel (issue #22).
const HOSTILE: &str = "boom @channel @all @here <!channel> <@U123> *bold* _it_ ~s~ `code` [x](https://evil.example) https://evil.example \u{202E}gpj.exe\u{202C} <b>x</b> &amp;";
/// A project name that tries the same.
const HOSTILE_NAME: &str = "@here *Acme* <!channel> [p](https://evil.example)";
/// The channels with golden files.
const CHANNELS: [ChannelKind; 8] = [
    ChannelKind::Slack,
    ChannelKind::Telegram,
    ChannelKind::Email,
    ChannelKind::Loop,
    ChannelKind::Webhook,
    ChannelKind::Discord,
    ChannelKind::Teams,
    ChannelKind::Pagerduty,
];
/// A routing key of the Events API v2's shape.
const ROUTING_KEY: &str = "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE";

/// The action-link key of these tests (`KLAXON_ACTION_KEY`).
const ACTION_KEY: &str = "golden-action-key-0123456789abcdef";
const PUBLIC_URL: &str = "https://klaxon.example.com";

fn action_key() -> ActionKey {
    ActionKey::new(ACTION_KEY).expect("key")
}

fn channels() -> Channels {
    common::channels(common::config("http://127.0.0.1:9"))
        .with_event_url_template(HAWK_GARAGE)
        .expect("template")
        .with_action_links(Some(ActionLinks::new(
            PublicUrl::parse(PUBLIC_URL).expect("url"),
            action_key(),
        )))
        .with_buttons(klaxon_channels::buttons::Buttons {
            slack: true,
            telegram: true,
        })
}

fn task(channel: ChannelKind, reason: Reason, events: &[(&str, u64, Option<&str>)]) -> NotificationTask {
    NotificationTask {
        notification_id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        project_id: PROJECT.into(),
        project_name: None,
        rule_id: "5e3eef0679fa3700a0198a4a".into(),
        channel,
        endpoint: match channel {
            ChannelKind::Email => "ops@example.com".into(),
            ChannelKind::Telegram => "-1001234567890".into(),
            ChannelKind::Loop => "https://loop.example.com/hooks/X".into(),
            ChannelKind::Discord => "https://discord.com/api/webhooks/123456789/X".into(),
            ChannelKind::Teams => "https://prod-00.westeurope.logic.azure.com/workflows/X".into(),
            ChannelKind::Pagerduty => ROUTING_KEY.into(),
            _ => "https://hooks.example.com/services/T/B/X".into(),
        },
        min_period_s: 300,
        fired_at_ms: 1_700_000_000_123,
        reason,
        events: events
            .iter()
            .enumerate()
            .map(|(i, (title, count, rep))| NotificationEvent {
                group_hash: format!("{i:02}da7c0ffee"),
                title: (*title).to_owned(),
                count: *count,
                repetition_id: rep.map(str::to_owned),
                open_for_ms: None,
                silence_period_ms: None,
                alert_id: None,
            })
            .collect(),
        text: None,
        send_at_ms: None,
        alert: None,
        severity: None,
    }
}

/// What `ch` would send for `t` when the worker gave the task the project's name `name`.
fn preview(ch: &Channels, t: &NotificationTask, name: Option<&str>) -> Preview {
    let named = NotificationTask {
        project_name: name.map(str::to_owned),
        ..t.clone()
    };
    ch.preview(&named).expect("renders")
}

fn cases(channel: ChannelKind) -> Vec<(&'static str, NotificationTask)> {
    let title = "TypeError: Cannot read properties of undefined (reading 'id') <App> & \"more\"";
    vec![
        (
            "new",
            task(
                channel,
                Reason::New,
                &[(title, 1, Some("6a1b2c3d4e5f60718293a4b5"))],
            ),
        ),
        (
            "threshold",
            task(
                channel,
                Reason::Threshold {
                    threshold: 100,
                    period_ms: 3_600_000,
                    window: Window::Fixed,
                },
                &[(title, 100, Some("6a1b2c3d4e5f60718293a4b5"))],
            ),
        ),
        (
            "users",
            task(
                channel,
                Reason::UniqueUsers {
                    threshold: 50,
                    period_ms: 86_400_000,
                    window: Window::Sliding,
                },
                &[(title, 50, None)],
            ),
        ),
        (
            "no_events",
            NotificationTask {
                min_period_s: 0,
                events: vec![NotificationEvent {
                    group_hash: String::new(),
                    title: klaxon_core::kind::no_events::title(3_600_000),
                    count: 0,
                    repetition_id: None,
                    open_for_ms: None,
                    silence_period_ms: Some(3_600_000),
                    alert_id: None,
                }],
                ..task(
                    channel,
                    Reason::NoEvents {
                        quiet_period_ms: 3_600_000,
                        last_event_ms: Some(1_700_000_000_123 - 3_725_000),
                    },
                    &[],
                )
            },
        ),
        (
            "digest",
            task(
                channel,
                Reason::Digest {
                    min_period_s: 300,
                    resolved: 0,
                    more: Default::default(),
                },
                &[
                    ("DB timeout after 30s", 3, None),
                    (title, 12, Some("6a1b2c3d4e5f60718293a4b5")),
                    ("ReferenceError: x is not defined", 5, Some("7b")),
                ],
            ),
        ),
        (
            "hostile",
            task(
                channel,
                Reason::Threshold {
                    threshold: 100,
                    period_ms: 3_600_000,
                    window: Window::Fixed,
                },
                &[(HOSTILE, 100, Some("6a1b2c3d4e5f60718293a4b5"))],
            ),
        ),
        ("hostile_new", task(channel, Reason::New, &[(HOSTILE, 1, None)])),
        (
            "hostile_digest",
            task(
                channel,
                Reason::Digest {
                    min_period_s: 300,
                    resolved: 0,
                    more: Default::default(),
                },
                &[
                    (HOSTILE, 7, Some("6a1b2c3d4e5f60718293a4b5")),
                    (
                        "# heading? - list? > quote? @bob #tag ~town www.evil.example",
                        3,
                        None,
                    ),
                ],
            ),
        ),
        // a firing that opened an alert: it names the alert (the lifecycle messages below are about it)
        (
            "threshold_alert",
            with_alert(
                task(
                    channel,
                    Reason::Threshold {
                        threshold: 100,
                        period_ms: 3_600_000,
                        window: Window::Fixed,
                    },
                    &[(title, 100, Some("6a1b2c3d4e5f60718293a4b5"))],
                ),
                AlertState::Firing,
                None,
            ),
        ),
        (
            "resolved",
            lifecycle(channel, Reason::Resolved, AlertState::Resolved, Some("timeout")),
        ),
        (
            "resolved_by_hand",
            lifecycle(
                channel,
                Reason::Resolved,
                AlertState::Resolved,
                Some("alice (API token)"),
            ),
        ),
        (
            "acknowledged",
            lifecycle(
                channel,
                Reason::Acknowledged,
                AlertState::Acknowledged,
                Some("cli"),
            ),
        ),
        (
            "reminder",
            lifecycle(
                channel,
                Reason::Reminder { number: 2, max: 3 },
                AlertState::Firing,
                None,
            ),
        ),
        (
            "escalation",
            lifecycle(
                channel,
                Reason::Escalation { step: 1, steps: 2 },
                AlertState::Firing,
                None,
            ),
        ),
        // a quiet window's release: what fired, then what resolved (NotificationTask::for_held)
        ("quiet_hours", quiet_release(channel, title)),
        // a digest window that saw resolves: what fired, then what resolved (an alert's resolve on a channel with
        // `minPeriod > 0` joins its digest like a firing)
        ("digest_resolved", digest_with_resolves(channel, title)),
        // nothing in them counted: the header says what happened instead of "0 errors" (#33)
        ("digest_only_resolves", digest_only_resolves(channel, title)),
        ("quiet_hours_no_events", quiet_release_of_a_silence(channel)),
        // past the list's bound (1,000 groups of each kind): how many more fired and resolved, exactly (#42)
        (
            "quiet_hours_more",
            quiet_release(channel, title).with_unlisted(klaxon_core::notification::Unlisted {
                fired: 200,
                resolved: 6,
            }),
        ),
        (
            "digest_more",
            digest_with_resolves(channel, title).with_unlisted(klaxon_core::notification::Unlisted {
                fired: 1_180,
                resolved: 0,
            }),
        ),
        // who resolved it is tenant text (an API token's label): escaped like titles
        (
            "hostile_resolved",
            with_alert(
                task(channel, Reason::Resolved, &[(HOSTILE, 1_240, None)]),
                AlertState::Resolved,
                Some(HOSTILE),
            ),
        ),
    ]
}

/// A quiet window's release as the flush loop makes it: two groups fired, one of them (and a third) resolved.
fn quiet_release(channel: ChannelKind, title: &str) -> NotificationTask {
    let t = task(
        channel,
        Reason::New,
        &[
            (title, 12, Some("6a1b2c3d4e5f60718293a4b5")),
            ("DB timeout after 30s", 3, None),
            (title, 40, None),
            ("ReferenceError: x is not defined", 5, None),
        ],
    );
    let window = klaxon_core::notification::DigestWindow {
        project_id: &t.project_id,
        project_name: None,
        rule_id: &t.rule_id,
        channel,
        endpoint: &t.endpoint,
        min_period_s: 0,
        severity: None,
        // 2023-11-14T23:00:00Z
        window_start_ms: 1_700_002_800_000,
    };
    let (fired, resolved) = t.events.split_at(2);
    let mut out = NotificationTask::for_held(&window, t.fired_at_ms, fired.to_vec(), resolved.to_vec());
    out.notification_id = t.notification_id.clone();
    out
}

/// A digest window as the flush loop makes it: two groups fired, one of them (and a third) resolved, the first
/// resolve with how long its alert was open.
fn digest_with_resolves(channel: ChannelKind, title: &str) -> NotificationTask {
    let mut out = quiet_release(channel, title);
    let window = klaxon_core::notification::DigestWindow {
        project_id: &out.project_id,
        project_name: None,
        rule_id: &out.rule_id,
        channel,
        endpoint: &out.endpoint,
        min_period_s: 300,
        severity: None,
        window_start_ms: 1_700_000_000_123 - 300_000,
    };
    let (fired, resolved) = out.held_parts().expect("a release in parts");
    let mut resolved = resolved.to_vec();
    // the first resolved alert was open 2 h 14 min 5 s (the flush loop knows it); the second's is unknown
    resolved[0].open_for_ms = Some((2 * 3600 + 14 * 60 + 5) * 1000);
    let t = NotificationTask::for_digest(&window, out.fired_at_ms, fired.to_vec(), resolved);
    out = NotificationTask {
        notification_id: out.notification_id.clone(),
        ..t
    };
    out
}

/// A digest window in which nothing fired and one alert resolved (open 2 h 14 min 5 s, 40 events).
fn digest_only_resolves(channel: ChannelKind, title: &str) -> NotificationTask {
    let out = digest_with_resolves(channel, title);
    let window = klaxon_core::notification::DigestWindow {
        project_id: &out.project_id,
        project_name: None,
        rule_id: &out.rule_id,
        channel,
        endpoint: &out.endpoint,
        min_period_s: 300,
        severity: None,
        window_start_ms: 1_700_000_000_123 - 300_000,
    };
    let (_, resolved) = out.held_parts().expect("a digest in parts");
    NotificationTask {
        notification_id: out.notification_id.clone(),
        ..NotificationTask::for_digest(&window, out.fired_at_ms, Vec::new(), resolved[..1].to_vec())
    }
}

/// A quiet window's release that held only a NO_EVENTS firing (the project went silent for an hour at night).
fn quiet_release_of_a_silence(channel: ChannelKind) -> NotificationTask {
    let t = task(channel, Reason::New, &[]);
    let window = klaxon_core::notification::DigestWindow {
        project_id: &t.project_id,
        project_name: None,
        rule_id: &t.rule_id,
        channel,
        endpoint: &t.endpoint,
        min_period_s: 0,
        severity: None,
        window_start_ms: 1_700_002_800_000,
    };
    let silence = NotificationEvent {
        group_hash: String::new(),
        title: klaxon_core::kind::no_events::title(3_600_000),
        count: 0,
        repetition_id: None,
        open_for_ms: None,
        silence_period_ms: Some(3_600_000),
        alert_id: None,
    };
    NotificationTask {
        notification_id: t.notification_id.clone(),
        ..NotificationTask::for_held(&window, t.fired_at_ms, vec![silence], Vec::new())
    }
}

/// The alert of the lifecycle cases: opened 2 h 14 min 5 s before the task's time, 1,240 events.
const ALERT_ID: &str = "a1e2c3d4e5f60718293a4b5c";
const OPENED_AT_MS: i64 = 1_700_000_000_123 - (2 * 3600 + 14 * 60 + 5) * 1000;
/// The notification id of the alert's firing on the channel (PagerDuty's `dedup_key`, the email's Message-ID).
const FIRING_ID: &str = "f1f2f3f4f5f6f7f8f9f0e1e2e3e4e5e6";

fn with_alert(mut t: NotificationTask, state: AlertState, by: Option<&str>) -> NotificationTask {
    t.min_period_s = 0;
    t.alert = Some(AlertRef {
        id: ALERT_ID.into(),
        state,
        opened_at_ms: OPENED_AT_MS,
        events: 1_240,
        by: by.map(str::to_owned),
        firing_notification_id: FIRING_ID.into(),
    });
    t
}

/// A lifecycle task as `NotificationTask::for_alert` makes it: one event, the alert's title and events.
fn lifecycle(channel: ChannelKind, reason: Reason, state: AlertState, by: Option<&str>) -> NotificationTask {
    let title = "TypeError: Cannot read properties of undefined (reading 'id') <App> & \"more\"";
    with_alert(task(channel, reason, &[(title, 1_240, None)]), state, by)
}

/// The project name a case is shown with.
fn name_for(case: &str) -> &'static str {
    if case.starts_with("hostile") {
        HOSTILE_NAME
    } else {
        NAME
    }
}

/// Invisible characters made visible for review: the word joiner the escapers add shows as `{WJ}`; any other
/// character that hides or reorders text must never be in a message (the renderer reveals those).
fn visible(text: &str) -> String {
    for c in text.chars() {
        assert!(
            c == '\u{2060}' || !klaxon_core::text::is_hidden(c),
            "hidden U+{:04X} in {text}",
            u32::from(c)
        );
    }
    text.replace('\u{2060}', "{WJ}")
}

/// JSON with its keys sorted at every level, so the golden files do not depend on whether serde_json's
/// `preserve_order` feature happens to be enabled in a build.
fn canonical(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<(String, serde_json::Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, canonical(v))).collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(canonical).collect())
        }
        other => other,
    }
}

/// A preview as one reviewable text: the subject, then each body (JSON pretty-printed, keys sorted).
fn as_text(p: &Preview) -> String {
    let mut out = String::new();
    if let Some(s) = &p.subject {
        out.push_str(&format!("=== subject\n{s}\n"));
    }
    for (i, b) in p.bodies.iter().enumerate() {
        let shown = serde_json::from_str::<serde_json::Value>(b)
            .ok()
            .filter(serde_json::Value::is_object)
            .and_then(|v| serde_json::to_string_pretty(&canonical(v)).ok())
            .unwrap_or_else(|| b.clone());
        out.push_str(&format!("=== body {}\n{shown}\n", i + 1));
    }
    out
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[tokio::test]
async fn every_channel_matches_its_golden_files() {
    let bless = std::env::var("KLAXON_BLESS").is_ok_and(|v| v == "1");
    let ch = channels();
    let mut mismatches = Vec::new();
    for channel in CHANNELS {
        for (case, t) in cases(channel) {
            let rendered = preview(&ch, &t, Some(name_for(case)));
            let mut got = if channel == ChannelKind::Webhook {
                // data for machines: carried exactly, bidi characters included (JSON shows them escaped)
                as_text(&rendered)
                    .replace('\u{202E}', "\\u202e")
                    .replace('\u{202C}', "\\u202c")
            } else {
                visible(&as_text(&rendered))
            };
            if channel == ChannelKind::Email {
                // an alert's later emails reply to its firing's (the headers besides the subject)
                if let Some(firing) = klaxon_channels::email_replies_to(&t) {
                    got.insert_str(0, &format!("=== In-Reply-To, References\n{firing}\n"));
                }
            }
            let path = golden_dir().join(channel.as_str()).join(format!("{case}.txt"));
            if bless {
                std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
                std::fs::write(&path, &got).expect("write golden");
                continue;
            }
            let want = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (bless with KLAXON_BLESS=1)", path.display()));
            if got != want {
                mismatches.push(format!("--- {}\n{got}", path.display()));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "rendered output differs from the golden files (KLAXON_BLESS=1 to accept):\n{}",
        mismatches.join("\n")
    );
}

/// Slack through the Web API (a channel-id endpoint, the bot token): the `chat.postMessage` bodies of an alert's
/// firing, reminder, escalation and acknowledgement, in `tests/golden/slack_api/` — the firing, reminder and
/// escalation end with the Acknowledge and Resolve buttons (`klaxon_channels::buttons`), the acknowledgement
/// (a notice in the thread) carries none.
#[tokio::test]
async fn slack_web_api_messages_match_their_golden_files_with_buttons() {
    let bless = std::env::var("KLAXON_BLESS").is_ok_and(|v| v == "1");
    let ch = channels();
    let mut mismatches = Vec::new();
    let wanted = ["threshold_alert", "reminder", "escalation", "acknowledged"];
    for (case, mut t) in cases(ChannelKind::Slack) {
        if !wanted.contains(&case) {
            continue;
        }
        t.endpoint = "C0123ABCD".into();
        let got = visible(&as_text(&preview(&ch, &t, Some(name_for(case)))));
        let buttons = got.contains("klaxon-alert-buttons");
        assert_eq!(buttons, case != "acknowledged", "{case}: {got}");
        let path = golden_dir().join("slack_api").join(format!("{case}.txt"));
        if bless {
            std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
            std::fs::write(&path, &got).expect("write golden");
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (bless with KLAXON_BLESS=1)", path.display()));
        if got != want {
            mismatches.push(format!("--- {}\n{got}", path.display()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "rendered output differs from the golden files (KLAXON_BLESS=1 to accept):\n{}",
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn without_a_name_or_template_messages_show_the_id_and_no_link() {
    let ch = common::channels(common::config("http://127.0.0.1:9"));
    for channel in CHANNELS {
        let (_, t) = cases(channel).remove(1);
        let text = as_text(&preview(&ch, &t, None));
        assert!(text.contains(PROJECT), "{channel}: {text}");
        assert!(
            !text.contains("garage.hawk.so") && !text.contains("Acme"),
            "{channel}: {text}"
        );
        assert!(
            !text.contains("/a/v1.") && !text.contains("Mute this") && !text.contains("\"actions\""),
            "no action links without --public-url and a key: {channel}: {text}"
        );
    }
}

/// The worst we can be asked to render: 25 groups (20 shown) whose titles are long and made of characters
/// every channel must escape, and a single notification with such a title.
fn worst_cases(channel: ChannelKind) -> Vec<NotificationTask> {
    let nasty: String = "<&\">😀é".repeat(1500);
    let titles: Vec<String> = (0..25).map(|i| format!("{i} {nasty}")).collect();
    let digest: Vec<(&str, u64, Option<&str>)> = titles
        .iter()
        .map(|t| (t.as_str(), 7, Some("6a1b2c3d4e5f60718293a4b5")))
        .collect();
    vec![
        task(
            channel,
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            },
            &digest,
        ),
        task(channel, Reason::New, &[(&nasty, 1, Some("r"))]),
        task(
            channel,
            Reason::Threshold {
                threshold: 5,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            &[(&nasty, 5, None)],
        ),
    ]
}

#[tokio::test]
async fn slack_blocks_stay_within_slack_limits() {
    let ch = channels();
    for t in worst_cases(ChannelKind::Slack) {
        let p = preview(&ch, &t, Some(&"N".repeat(500)));
        let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
        let text = body["text"].as_str().expect("text");
        assert!(
            text.chars().count() <= 40_000,
            "text {} chars",
            text.chars().count()
        );
        let blocks = body["blocks"].as_array().expect("blocks");
        assert!(
            !blocks.is_empty() && blocks.len() <= 50,
            "{} blocks",
            blocks.len()
        );
        let (last, text_blocks) = blocks.split_last().expect("blocks");
        let buttons = last["elements"].as_array().expect("the actions block");
        assert_eq!(last["type"], "actions", "the action links end the message");
        assert!(
            !buttons.is_empty() && buttons.len() <= 25,
            "{} buttons",
            buttons.len()
        );
        for b in buttons {
            assert_eq!(b["type"], "button");
            let url = b["url"].as_str().expect("url");
            assert!(url.len() <= 3000 && url.starts_with(PUBLIC_URL), "{url}");
            assert!(b["text"]["text"].as_str().expect("label").chars().count() <= 75);
        }
        for b in text_blocks {
            assert_eq!(b["type"], "rich_text", "tenant text never in mrkdwn");
            let elements = b["elements"][0]["elements"].as_array().expect("section elements");
            let chars: usize = elements
                .iter()
                .map(|e| e["text"].as_str().unwrap_or_default().chars().count())
                .sum();
            assert!(chars > 0 && chars <= 3000, "block {chars} chars");
            for e in elements {
                assert!(
                    ["text", "link"].contains(&e["type"].as_str().unwrap_or_default()),
                    "{e}"
                );
                assert!(!e["text"].as_str().unwrap_or_default().is_empty(), "{e}");
            }
        }
    }
}

#[tokio::test]
async fn telegram_parts_stay_within_4096_and_balanced_html() {
    let ch = channels();
    for t in worst_cases(ChannelKind::Telegram) {
        let p = preview(&ch, &t, Some(NAME));
        assert!(!p.bodies.is_empty());
        for body in &p.bodies {
            let v: serde_json::Value = serde_json::from_str(body).expect("json");
            assert_eq!(v["parse_mode"], "HTML");
            let text = v["text"].as_str().expect("text");
            let units: usize = text.chars().map(char::len_utf16).sum();
            assert!(units <= 4096, "{units} UTF-16 units");
            // Only Telegram's HTML subset, and every tag closed in the same part.
            let mut stack: Vec<String> = Vec::new();
            let mut rest = text;
            while let Some(at) = rest.find('<') {
                let end = rest[at..].find('>').expect("tag closes") + at;
                let tag = &rest[at + 1..end];
                let name: String = tag
                    .trim_start_matches('/')
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                assert!(
                    ["b", "i", "a", "code"].contains(&name.as_str()),
                    "tag <{tag}> outside the subset"
                );
                if tag.starts_with('/') {
                    assert_eq!(
                        stack.pop().as_deref(),
                        Some(name.as_str()),
                        "unbalanced in {text:.80}"
                    );
                } else {
                    stack.push(name);
                }
                rest = &rest[end + 1..];
            }
            assert!(stack.is_empty(), "unclosed {stack:?}");
            // Entities are whole: every `&` starts one of the four Telegram knows.
            for (i, _) in text.match_indices('&') {
                let ok = ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| text[i..].starts_with(e));
                assert!(ok, "broken entity at {i}");
            }
        }
    }
}

#[tokio::test]
async fn email_subjects_are_one_line_of_at_most_200_chars() {
    let ch = channels();
    for t in worst_cases(ChannelKind::Email) {
        let p = preview(&ch, &t, Some(&format!("Acme\r\n{}", "n".repeat(400))));
        let subject = p.subject.expect("subject");
        assert!(!subject.contains(['\r', '\n']), "{subject:?}");
        assert!(
            subject.chars().count() <= MAX_SUBJECT_CHARS,
            "{} chars",
            subject.chars().count()
        );
        assert!(subject.starts_with("[Klaxon] "), "{subject}");
        assert_eq!(p.bodies.len(), 2, "text and HTML parts");
    }
}

#[tokio::test]
async fn webhook_bodies_carry_every_group_with_links() {
    let ch = channels();
    let t = worst_cases(ChannelKind::Webhook).remove(0);
    let p = preview(&ch, &t, Some(NAME));
    let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
    assert_eq!(body["projectName"], NAME);
    let events = body["events"].as_array().expect("events");
    assert_eq!(events.len(), 25, "data, not text: nothing is cut");
    assert_eq!(events[0]["title"], t.events[0].title, "titles untouched");
    assert!(events[0]["url"]
        .as_str()
        .expect("url")
        .starts_with("https://garage.hawk.so/project/5e3eef0679fa3700a0198a49/event/00da7c0ffee/"));
}

/// The action links, checked through the channel's own shape: the four links of a one-group message (and only
/// "mute this rule" in a digest), each a console URL whose token names this project, rule and group.
#[tokio::test]
async fn action_links_render_natively_on_every_channel() {
    let ch = channels();
    let key = action_key();
    let now_s = 1_700_000_000;
    // every link of a rendered text, in order
    let links_in = |text: &str| -> Vec<String> {
        let prefix = format!("{PUBLIC_URL}/a/");
        text.match_indices(&prefix)
            .map(|(i, _)| {
                text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || "-_./:".contains(*c))
                    .collect()
            })
            .collect()
    };
    let check = |url: &str, want: Action, group: Option<&str>| {
        let token = url.rsplit('/').next().expect("token");
        let claim = key.verify(token, now_s).expect("valid token");
        assert_eq!(claim.action, want, "{url}");
        assert_eq!(claim.project_id, PROJECT);
        assert_eq!(claim.rule_id, "5e3eef0679fa3700a0198a4a");
        assert_eq!(claim.group_hash.as_deref(), group);
    };
    let want = [
        (Action::MuteGroup1h, Some("00da7c0ffee")),
        (Action::MuteGroup24h, Some("00da7c0ffee")),
        (Action::MuteRule1h, None),
        (Action::Explain, Some("00da7c0ffee")),
    ];
    for channel in CHANNELS {
        let (_, t) = cases(channel).remove(0);
        let p = preview(&ch, &t, Some(NAME));
        let urls: Vec<String> = match channel {
            ChannelKind::Slack => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let blocks = body["blocks"].as_array().expect("blocks");
                let last = blocks.last().expect("a block");
                assert_eq!(last["type"], "actions");
                let buttons: Vec<String> = last["elements"]
                    .as_array()
                    .expect("buttons")
                    .iter()
                    .map(|b| {
                        assert_eq!(b["type"], "button");
                        b["url"].as_str().expect("url").to_owned()
                    })
                    .collect();
                let text = body["text"].as_str().expect("text");
                assert!(text.contains("|Mute this error for 1 h>"), "{text}");
                assert_eq!(links_in(text), buttons, "the text fallback has the same links");
                buttons
            }
            ChannelKind::Telegram => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let text = body["text"].as_str().expect("text");
                assert!(text.contains(&format!("<a href=\"{PUBLIC_URL}/a/")), "{text}");
                assert!(text.contains(">Why did this fire?</a>"), "{text}");
                links_in(text)
            }
            ChannelKind::Email => {
                let (text, html) = (&p.bodies[0], &p.bodies[1]);
                assert!(
                    text.contains(&format!("Mute this error for 24 h: {PUBLIC_URL}/a/")),
                    "{text}"
                );
                assert!(html.contains(&format!("<a href=\"{PUBLIC_URL}/a/")), "{html}");
                assert_eq!(links_in(text), links_in(html), "both parts have the same links");
                links_in(text)
            }
            ChannelKind::Loop => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let text = body["text"].as_str().expect("text");
                assert!(
                    text.contains(&format!("[Mute this rule for 1 h]({PUBLIC_URL}/a/")),
                    "{text}"
                );
                links_in(text)
            }
            ChannelKind::Webhook => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let actions = body["actions"].as_array().expect("actions");
                for a in actions {
                    assert_eq!(a["expiresAt"], "2023-11-21T22:13:20Z", "{a}");
                    assert!(a["label"].as_str().is_some_and(|l| !l.is_empty()), "{a}");
                }
                let names: Vec<&str> = actions.iter().filter_map(|a| a["action"].as_str()).collect();
                assert_eq!(
                    names,
                    ["mute-group-1h", "mute-group-24h", "mute-rule-1h", "explain"]
                );
                actions
                    .iter()
                    .map(|a| a["url"].as_str().expect("url").to_owned())
                    .collect()
            }
            ChannelKind::Discord => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let embeds = body["embeds"].as_array().expect("embeds");
                let last = embeds.last().expect("an embed")["description"]
                    .as_str()
                    .expect("the links' embed");
                assert!(
                    last.contains(&format!("[Mute this error for 1 h]({PUBLIC_URL}/a/")),
                    "{last}"
                );
                links_in(last)
            }
            ChannelKind::Teams => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                let actions = body["attachments"][0]["content"]["actions"]
                    .as_array()
                    .expect("card actions");
                actions
                    .iter()
                    .map(|a| {
                        assert_eq!(a["type"], "Action.OpenUrl");
                        a["url"].as_str().expect("url").to_owned()
                    })
                    .collect()
            }
            ChannelKind::Pagerduty => {
                let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
                body["links"]
                    .as_array()
                    .expect("links")
                    .iter()
                    .filter_map(|l| l["href"].as_str())
                    .filter(|h| h.starts_with(PUBLIC_URL))
                    .map(str::to_owned)
                    .collect()
            }
        };
        assert_eq!(urls.len(), 4, "{channel}: {urls:?}");
        for (url, (action, group)) in urls.iter().zip(want) {
            check(url, action, group);
        }
        // A digest: only "mute this rule".
        let (_, d) = cases(channel).remove(3);
        let text = as_text(&preview(&ch, &d, Some(NAME)));
        let urls = links_in(&text);
        assert!(!urls.is_empty(), "{channel}: {text}");
        for url in &urls {
            check(url, Action::MuteRule1h, None);
        }
        assert!(!text.contains("Mute this error"), "{channel}: {text}");
    }
}

#[tokio::test]
async fn discord_embeds_stay_within_discord_limits() {
    let ch = channels();
    let long_title = "T".repeat(300);
    let fifteen: Vec<String> = (0..15)
        .map(|i| format!("Error {i} {}", "é".repeat(290)))
        .collect();
    let mut tasks = worst_cases(ChannelKind::Discord);
    tasks.push(task(ChannelKind::Discord, Reason::New, &[(&long_title, 1, None)]));
    tasks.push(task(
        ChannelKind::Discord,
        Reason::Threshold {
            threshold: 5,
            period_ms: 60_000,
            window: Window::Fixed,
        },
        &[(&long_title, 5, None)],
    ));
    tasks.push(task(
        ChannelKind::Discord,
        Reason::Digest {
            min_period_s: 60,
            resolved: 0,
            more: Default::default(),
        },
        &fifteen
            .iter()
            .map(|t| (t.as_str(), 2, Some("r")))
            .collect::<Vec<_>>(),
    ));
    let mut direct = task(ChannelKind::Discord, Reason::Direct, &[(&long_title, 1, None)]);
    direct.text = Some("<&\">*".repeat(2000));
    tasks.push(direct);
    for t in &tasks {
        let p = preview(&ch, t, Some(&"N".repeat(500)));
        let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
        assert_eq!(body["allowed_mentions"], serde_json::json!({"parse": []}));
        let embeds = body["embeds"].as_array().expect("embeds");
        assert!(
            !embeds.is_empty() && embeds.len() <= 10,
            "{} embeds",
            embeds.len()
        );
        let mut total = 0;
        for e in embeds {
            let count = |p: &str| {
                e.pointer(p)
                    .and_then(|v| v.as_str())
                    .map_or(0, |s| s.chars().count())
            };
            let (title, description, footer) =
                (count("/title"), count("/description"), count("/footer/text"));
            assert!(title > 0 && title <= 256, "title {title}");
            assert!(description <= 4096, "description {description}");
            assert!(footer <= 2048, "footer {footer}");
            total += title + description + footer;
        }
        assert!(total <= 6000, "total {total}");
    }
    // a 300-character title is cut to 256 (with the ellipsis)
    let p = preview(&ch, &tasks[4], None);
    let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
    let title = body["embeds"][0]["title"].as_str().expect("title");
    assert_eq!(title.chars().count(), 256);
    assert!(title.ends_with('…'));
    // 15 groups: the header, 7 groups, "and 8 more" and the action links' embed (without links, 8 groups and
    // "and 7 more")
    let p = preview(&ch, &tasks[5], None);
    let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
    let embeds = body["embeds"].as_array().expect("embeds");
    assert_eq!(embeds.len(), 10);
    assert_eq!(embeds[8]["title"], "and 8 more");
    assert_eq!(embeds[9]["title"], "Actions");
    let plain = common::channels(common::config("http://127.0.0.1:9"));
    let p = preview(&plain, &tasks[5], None);
    let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
    let embeds = body["embeds"].as_array().expect("embeds");
    assert_eq!(embeds.len(), 10);
    assert_eq!(embeds[9]["title"], "and 7 more");
    assert!(embeds[0]["title"]
        .as_str()
        .expect("header")
        .starts_with("30 errors in "));
}

#[tokio::test]
async fn teams_cards_are_adaptive_cards_of_text_runs() {
    let ch = channels();
    for t in worst_cases(ChannelKind::Teams) {
        let p = preview(&ch, &t, Some(NAME));
        let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
        assert_eq!(body["type"], "message");
        let attachments = body["attachments"].as_array().expect("attachments");
        assert_eq!(attachments.len(), 1);
        assert_eq!(
            attachments[0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        let card = &attachments[0]["content"];
        assert_eq!(card["type"], "AdaptiveCard");
        let blocks = card["body"].as_array().expect("body");
        assert!(!blocks.is_empty());
        for b in blocks {
            // tenant text never in a TextBlock (which parses Markdown): only RichTextBlocks of TextRuns
            assert_eq!(b["type"], "RichTextBlock", "{b}");
            for run in b["inlines"].as_array().expect("inlines") {
                assert_eq!(run["type"], "TextRun", "{run}");
                assert!(!run["text"].as_str().unwrap_or_default().is_empty(), "{run}");
            }
        }
        // Teams refuses cards over 28 KB
        assert!(p.bodies[0].len() < 28 * 1024, "{} bytes", p.bodies[0].len());
    }
}

#[tokio::test]
async fn pagerduty_events_follow_the_events_api() {
    let ch = channels();
    for t in worst_cases(ChannelKind::Pagerduty) {
        let mut t = t;
        t.severity = Some(klaxon_core::Severity::Critical);
        let p = preview(&ch, &t, Some(NAME));
        let body: serde_json::Value = serde_json::from_str(&p.bodies[0]).expect("json");
        assert_eq!(body["routing_key"], ROUTING_KEY);
        assert_eq!(body["event_action"], "trigger");
        assert_eq!(body["dedup_key"], t.notification_id.as_str());
        assert!(t.notification_id.len() <= 255);
        let payload = &body["payload"];
        assert_eq!(payload["severity"], "critical");
        assert_eq!(payload["source"], NAME);
        assert_eq!(payload["timestamp"], "2023-11-14T22:13:20.123Z");
        let summary = payload["summary"].as_str().expect("summary");
        assert!(
            !summary.is_empty() && summary.chars().count() <= 1024,
            "{}",
            summary.chars().count()
        );
        let events = payload["custom_details"]["events"].as_array().expect("events");
        assert!(!events.is_empty() && events.len() <= 20, "{}", events.len());
        assert!(events[0]["count"].is_u64() && events[0]["groupHash"].is_string());
    }
    // the default severity
    let t = task(ChannelKind::Pagerduty, Reason::New, &[("x", 1, None)]);
    let body: serde_json::Value = serde_json::from_str(&preview(&ch, &t, None).bodies[0]).expect("json");
    assert_eq!(body["payload"]["severity"], "error");
    assert_eq!(body["payload"]["source"], PROJECT);
}

/// SPIKE and REAPPEARED say their numbers on the channels that build their own bodies (Discord embeds, Teams
/// cards, PagerDuty's summary), not a digest's wording.
#[tokio::test]
async fn spike_and_reappeared_say_their_numbers_on_discord_teams_and_pagerduty() {
    let ch = channels();
    let spike = Reason::Spike {
        spike: klaxon_core::Spike {
            period_ms: 3_600_000,
            baseline_windows: 24,
            factor_milli: 5000,
            threshold: 10,
        },
        baseline: klaxon_core::Baseline {
            sum: 480,
            buckets: 24,
            needed: 100,
        },
    };
    let back = Reason::Reappeared {
        quiet_period_ms: 7 * 86_400_000,
        last_seen_ms: Some(1_700_000_000_000 - 12 * 86_400_000),
    };
    for channel in [ChannelKind::Discord, ChannelKind::Teams, ChannelKind::Pagerduty] {
        for (reason, count, what, says) in [
            (
                spike,
                312,
                "Spike in ",
                "312 in the last hour, usually ~20 (15.6×)",
            ),
            (back, 1, "Reappeared in ", "back after 12 days quiet"),
            (
                Reason::NoEvents {
                    quiet_period_ms: 3_600_000,
                    last_event_ms: Some(1_700_000_000_123 - 3_725_000),
                },
                0,
                "No events in ",
                "last event 1 hour ago, at 2023-11-14T",
            ),
        ] {
            let mut t = task(channel, reason, &[("TypeError: boom", count, None)]);
            t.min_period_s = 0;
            let text = as_text(&preview(&ch, &t, Some("Acme")));
            assert!(text.contains(what), "{channel}: {text}");
            assert!(text.contains(says), "{channel}: {text}");
            assert!(
                !text.contains("errors in"),
                "{channel}: not a digest's words: {text}"
            );
        }
    }
}
