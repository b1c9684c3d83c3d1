//! Acknowledge and Resolve buttons (the contract's "Close the loop"): interactive buttons on the messages of an
//! alert where the channel can call Klaxon back — Slack through the Web API with a bot token (a Block Kit
//! `actions` block whose buttons post to the app's interactivity URL, `POST /api/v1/integrations/slack`) and
//! Telegram through the Bot API (an inline keyboard whose `callback_query` reaches the bot's webhook,
//! `POST /api/v1/integrations/telegram`).
//!
//! Each integration is off until its secret is set (`KLAXON_SLACK_SIGNING_SECRET`,
//! `KLAXON_TELEGRAM_WEBHOOK_SECRET`): a process that delivers shows a channel's buttons only when that secret is set
//! in its environment too ([`Buttons`]), so no message carries a button nobody answers.
//!
//! A message with buttons keeps its `ack` and `resolve` action links (the contract wants them on firings,
//! reminders and escalation steps), but shows them apart, as a footer "or open: ack · resolve"
//! (`MessageContext::buttons`, on Slack a `rich_text` block [`SLACK_OPEN_LINKS_ID`] after the buttons), so the
//! message does not read as two Acknowledge controls.
//!
//! Which messages: an alert's firing, its reminders and its escalation steps, and the edit of its firing message
//! when it is acknowledged or resolved (so the buttons follow the state): `firing` shows Acknowledge and Resolve,
//! `acknowledged` shows Resolve, `resolved` none. A digest, a quiet-hours release, a direct notification and a
//! message without an alert carry none.
//!
//! What a button carries names the alert: its project and its id, both of our making (24 hex characters each).
//! Slack: `action_id` `ack` or `resolve`, `value` `<projectId>:<alertId>` ([`value`]); Telegram: `callback_data`
//! `ack:<projectId>:<alertId>` or `resolve:…` (at most 57 bytes; Telegram's limit is 64, [`callback_data`]). The
//! inbound endpoint does not trust it: it acts only when the chat or channel the click came from is in the alert's
//! audience, so a value copied into another project's channel is refused.

use klaxon_core::alert::{is_alert_id, AlertState};
use klaxon_core::{NotificationTask, Reason};
use serde_json::{json, Value};

/// Which channels' messages carry buttons (each when its inbound integration's secret is set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Buttons {
    /// Slack through the Web API (`KLAXON_SLACK_SIGNING_SECRET` is set).
    pub slack: bool,
    /// Telegram through the Bot API (`KLAXON_TELEGRAM_WEBHOOK_SECRET` is set).
    pub telegram: bool,
}

/// What a button asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Press {
    /// Acknowledge the alert.
    Ack,
    /// Resolve the alert.
    Resolve,
}

impl Press {
    /// `ack` or `resolve`: Slack's `action_id`, the start of Telegram's `callback_data`.
    pub fn as_str(self) -> &'static str {
        match self {
            Press::Ack => "ack",
            Press::Resolve => "resolve",
        }
    }

    /// The button's label.
    pub fn label(self) -> &'static str {
        match self {
            Press::Ack => "Acknowledge",
            Press::Resolve => "Resolve",
        }
    }

    /// `ack` or `resolve`; None for anything else.
    pub fn parse(s: &str) -> Option<Press> {
        match s {
            "ack" => Some(Press::Ack),
            "resolve" => Some(Press::Resolve),
            _ => None,
        }
    }
}

/// The buttons an alert in `state` shows: firing both, acknowledged Resolve, resolved none.
pub fn presses_for_state(state: AlertState) -> &'static [Press] {
    match state {
        AlertState::Firing => &[Press::Ack, Press::Resolve],
        AlertState::Acknowledged => &[Press::Resolve],
        AlertState::Resolved => &[],
    }
}

/// The alert a message of `task` carries buttons for, and which: (project id, alert id, presses). A firing, a
/// reminder or an escalation step carries them (`edit` false); an acknowledged or resolved message does not, but
/// its edit of the firing message (`edit` true) shows the buttons of the new state. None for a digest, a
/// release, a direct notification, a message without a (well-formed) alert, or a state that shows no button.
pub fn presses(task: &NotificationTask, edit: bool) -> Option<(&str, &str, &'static [Press])> {
    let alert = task.alert.as_ref()?;
    let state = match task.reason {
        Reason::Digest { .. } | Reason::QuietHours { .. } | Reason::Direct => return None,
        Reason::Acknowledged | Reason::Resolved if !edit => return None,
        Reason::Acknowledged => AlertState::Acknowledged,
        Reason::Resolved => AlertState::Resolved,
        Reason::Reminder { .. } | Reason::Escalation { .. } => AlertState::Firing,
        _ => alert.state,
    };
    let ids_ok = is_alert_id(&alert.id) && klaxon_core::event::is_object_id(&task.project_id);
    let presses = presses_for_state(state);
    (ids_ok && !presses.is_empty()).then_some((task.project_id.as_str(), alert.id.as_str(), presses))
}

/// Slack's button `value`: `<projectId>:<alertId>`.
pub fn value(project_id: &str, alert_id: &str) -> String {
    format!("{project_id}:{alert_id}")
}

/// (project id, alert id) of a Slack button's `value`; None unless both are well-formed.
pub fn parse_value(value: &str) -> Option<(String, String)> {
    let (project, alert) = value.split_once(':')?;
    (klaxon_core::event::is_object_id(project) && is_alert_id(alert))
        .then(|| (project.to_ascii_lowercase(), alert.to_owned()))
}

/// Telegram's `callback_data`: `ack:<projectId>:<alertId>` or `resolve:…` (≤ 57 bytes).
pub fn callback_data(press: Press, project_id: &str, alert_id: &str) -> String {
    format!("{}:{}", press.as_str(), value(project_id, alert_id))
}

/// (press, project id, alert id) of a `callback_data`; None for anything else.
pub fn parse_callback_data(data: &str) -> Option<(Press, String, String)> {
    let (press, rest) = data.split_once(':')?;
    let press = Press::parse(press)?;
    let (project, alert) = parse_value(rest)?;
    Some((press, project, alert))
}

/// The id of the `actions` block that holds Slack's buttons: an edit finds and replaces it by it.
pub const SLACK_BLOCK_ID: &str = "klaxon-alert-buttons";

/// The id of the footer block "or open: ack · resolve" (the `ack` and `resolve` links of a message with buttons):
/// the buttons block goes right before it ([`place_slack_block`]).
pub const SLACK_OPEN_LINKS_ID: &str = "klaxon-open-links";

/// Puts the buttons block into `blocks`: before the footer of links ([`SLACK_OPEN_LINKS_ID`]) when there is one,
/// last otherwise.
pub fn place_slack_block(blocks: &mut Vec<Value>, block: Value) {
    let footer = blocks
        .iter()
        .position(|b| b.get("block_id").and_then(Value::as_str) == Some(SLACK_OPEN_LINKS_ID));
    match footer {
        Some(i) => blocks.insert(i, block),
        None => blocks.push(block),
    }
}

/// Slack's `actions` block of interactive buttons (no `url`: a click posts to the app's interactivity URL).
pub fn slack_block(project_id: &str, alert_id: &str, presses: &[Press]) -> Option<Value> {
    if presses.is_empty() {
        return None;
    }
    let buttons: Vec<Value> = presses
        .iter()
        .map(|p| {
            let mut b = json!({
                "type": "button",
                "action_id": p.as_str(),
                "text": {"type": "plain_text", "text": p.label()},
                "value": value(project_id, alert_id),
            });
            if *p == Press::Ack {
                b["style"] = Value::from("primary");
            }
            b
        })
        .collect();
    Some(json!({"type": "actions", "block_id": SLACK_BLOCK_ID, "elements": buttons}))
}

/// Telegram's `reply_markup`: one row of inline buttons with `callback_data`.
pub fn telegram_markup(project_id: &str, alert_id: &str, presses: &[Press]) -> Option<Value> {
    if presses.is_empty() {
        return None;
    }
    let row: Vec<Value> = presses
        .iter()
        .map(|p| json!({"text": p.label(), "callback_data": callback_data(*p, project_id, alert_id)}))
        .collect();
    Some(json!({"inline_keyboard": [row]}))
}

/// Slack blocks with the buttons set for the state (`presses`): the old buttons block (by [`SLACK_BLOCK_ID`])
/// removed, the new one (if any) appended.
pub fn replace_slack_block(blocks: &mut Vec<Value>, project_id: &str, alert_id: &str, presses: &[Press]) {
    blocks.retain(|b| b.get("block_id").and_then(Value::as_str) != Some(SLACK_BLOCK_ID));
    if let Some(b) = slack_block(project_id, alert_id, presses) {
        place_slack_block(blocks, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "5e3eef0679fa3700a0198a49";
    const A: &str = "0123456789abcdef01234567";

    #[test]
    fn values_and_callback_data_round_trip_and_fit() {
        assert_eq!(parse_value(&value(P, A)), Some((P.to_owned(), A.to_owned())));
        for press in [Press::Ack, Press::Resolve] {
            let data = callback_data(press, P, A);
            assert!(data.len() <= 64, "Telegram's limit: {data}");
            assert_eq!(
                parse_callback_data(&data),
                Some((press, P.to_owned(), A.to_owned()))
            );
        }
        for bad in [
            "",
            "ack",
            "ack:",
            "mute:5e3eef0679fa3700a0198a49:0123456789abcdef01234567",
            "ack:5e3eef0679fa3700a0198a49",
            "ack:5e3eef0679fa3700a0198a4:0123456789abcdef01234567",
            "ack:5e3eef0679fa3700a0198a49:0123456789ABCDEF01234567",
            "ack:5e3eef0679fa3700a0198a49:0123456789abcdef01234567:x",
        ] {
            assert_eq!(parse_callback_data(bad), None, "{bad}");
        }
    }

    #[test]
    fn buttons_follow_the_state() {
        assert_eq!(
            presses_for_state(AlertState::Firing),
            [Press::Ack, Press::Resolve]
        );
        assert_eq!(presses_for_state(AlertState::Acknowledged), [Press::Resolve]);
        assert!(presses_for_state(AlertState::Resolved).is_empty());
        let mut blocks = vec![json!({"type": "rich_text"})];
        replace_slack_block(&mut blocks, P, A, &[Press::Ack, Press::Resolve]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1]["elements"][0]["action_id"], "ack");
        assert_eq!(blocks[1]["elements"][1]["value"], value(P, A));
        replace_slack_block(&mut blocks, P, A, &[Press::Resolve]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[1]["elements"].as_array().map(Vec::len), Some(1));
        replace_slack_block(&mut blocks, P, A, &[]);
        assert_eq!(blocks.len(), 1);
        let markup = telegram_markup(P, A, &[Press::Ack]).expect("markup");
        assert_eq!(
            markup["inline_keyboard"][0][0]["callback_data"],
            callback_data(Press::Ack, P, A)
        );
        assert!(telegram_markup(P, A, &[]).is_none());
    }
}
