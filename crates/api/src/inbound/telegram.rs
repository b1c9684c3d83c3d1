//! `POST /api/v1/integrations/telegram`: the bot's webhook (`setWebhook` with `secret_token`), where a click on a
//! message's inline Acknowledge or Resolve button arrives as a `callback_query` (the buttons:
//! `klaxon_channels::buttons`).
//!
//! Verified as Telegram documents: the header `X-Telegram-Bot-Api-Secret-Token` equals the `secret_token` given
//! to `setWebhook` (`KLAXON_TELEGRAM_WEBHOOK_SECRET`), compared in constant time. Telegram signs nothing else and
//! stamps no time on an update (a click on an old message is a fresh click), so there is no stale check; each
//! `update_id` is accepted once within [`REPLAY_WINDOW`].
//!
//! `callback_data` `ack:<projectId>:<alertId>` or `resolve:…` acknowledges or resolves that alert by the
//! Telegram user's name — when the chat the click came from is one the alert was sent to; otherwise it is
//! another project's alert and refused (403). The answer carries the `answerCallbackQuery` call (Telegram runs a
//! method given in the webhook's answer), so the button stops spinning; the message itself is edited by the
//! alert's lifecycle message (`editMessageText` of the firing message, the notice as a reply). Other updates (a
//! message to the bot, another button) are answered 200 and ignored.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use klaxon_channels::buttons::{parse_callback_data, Press};
use klaxon_core::ChannelKind;
use serde_json::{json, Value};

use super::{act, claim, finish, person, verify, Acted, Integration, Outcome, Verified};
use crate::rest::alerts::HandAction;
use crate::Api;

/// How long an `update_id` is remembered (Telegram retries an update it could not deliver for a while).
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3_600);

const I: Integration = Integration::Telegram;

/// The webhook answer that makes Telegram call `answerCallbackQuery` with `text`.
fn answer(callback_id: &str, text: &str) -> Value {
    json!({"method": "answerCallbackQuery", "callback_query_id": callback_id, "text": text})
}

/// The ways a chat may be named in an endpoint: its numeric id and, for a public chat, `@username`.
fn chat_names(chat: &Value) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(id) = chat["id"].as_i64() {
        names.push(id.to_string());
    }
    if let Some(u) = chat["username"].as_str().filter(|u| !u.is_empty()) {
        names.push(format!("@{u}"));
    }
    names
}

/// The clicking user's name: `@username`, else first and last name.
fn user_name(from: &Value) -> Option<String> {
    if let Some(u) = from["username"].as_str().filter(|u| !u.trim().is_empty()) {
        return Some(format!("@{u}"));
    }
    let full = [from["first_name"].as_str(), from["last_name"].as_str()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    (!full.trim().is_empty()).then_some(full)
}

pub(crate) async fn receive(State(api): State<Api>, req: Request) -> Response {
    let (secret, client, headers, body) = match super::accept(&api, I, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(given) =
        super::header_str(&headers, "x-telegram-bot-api-secret-token").filter(|s| !s.is_empty())
    else {
        return finish(
            I,
            Outcome::Unsigned,
            "no X-Telegram-Bot-Api-Secret-Token header",
            None,
        );
    };
    if let Verified::No(outcome, why) = verify(&api, client, || crate::same_secret(given, &secret)) {
        return finish(I, outcome, why, None);
    }
    let Ok(update) = serde_json::from_slice::<Value>(&body) else {
        return finish(I, Outcome::Invalid, "the body is not JSON", None);
    };
    let Some(update_id) = update["update_id"].as_i64() else {
        return finish(I, Outcome::Invalid, "no update_id", None);
    };
    let claimed = match claim(&api, I, &update_id.to_string(), REPLAY_WINDOW).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let query = &update["callback_query"];
    let Some(callback_id) = query["id"].as_str() else {
        return finish(I, Outcome::Ignored, "not a button (callback_query)", None);
    };
    let Some((press, project_id, alert_id)) = query["data"].as_str().and_then(parse_callback_data) else {
        let body = answer(callback_id, "Not a Klaxon button");
        return finish(
            I,
            Outcome::Ignored,
            "not an Acknowledge or Resolve button",
            Some(body),
        );
    };
    let (alert, claimed) = match super::clicked_alert(&api, I, claimed, &project_id, &alert_id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let chat = chat_names(&query["message"]["chat"]);
    if !super::hears(&alert, ChannelKind::Telegram, |endpoint| {
        chat.iter().any(|c| c == endpoint)
    }) {
        return finish(
            I,
            Outcome::ForeignProject,
            "the alert was not sent to this Telegram chat: another project's alert",
            None,
        );
    }
    let by = person(user_name(&query["from"]).as_deref(), "telegram");
    let hand = match press {
        Press::Ack => HandAction::Acknowledge,
        Press::Resolve => HandAction::Resolve,
    };
    match act(&api, &project_id, &alert_id, hand, &by).await {
        Acted::Done(a, now) => {
            let (detail, text) = if now {
                (
                    format!("alert {} {}", a.id, hand.done()),
                    format!("Alert {}", hand.done()),
                )
            } else {
                (
                    format!("alert {} was {} already", a.id, a.state),
                    format!("Already {}", a.state),
                )
            };
            finish(I, Outcome::Accepted, &detail, Some(answer(callback_id, &text)))
        }
        Acted::Unknown => finish(I, Outcome::UnknownAlert, "no such alert", None),
        Acted::Unavailable(why) => {
            claimed.give_back().await;
            finish(I, Outcome::Unavailable, &why, None)
        }
    }
}
