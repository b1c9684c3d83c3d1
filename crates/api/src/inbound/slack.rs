//! `POST /api/v1/integrations/slack`: the Slack app's interactivity Request URL, where a click on a message's
//! Acknowledge or Resolve button arrives (`block_actions`; the buttons: `klaxon_channels::buttons`).
//!
//! Verified as Slack documents ("Verifying requests from Slack"): `X-Slack-Signature` is `v0=` and the hex
//! HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{raw body}` under the app's signing secret
//! (`KLAXON_SLACK_SIGNING_SECRET`); a timestamp more than [`STALE_AFTER`] (5 minutes) from now is stale; each
//! (timestamp, signature) is accepted once.
//!
//! The body is a form with one field, `payload`, holding JSON. A button `ack` or `resolve` with the value
//! `<projectId>:<alertId>` acknowledges or resolves that alert by the Slack user's name — when the channel the
//! click came from (`channel.id`) is one the alert was sent to; otherwise it is another project's alert and
//! refused (403). The message itself is updated in place by the alert's lifecycle message (`chat.update` of the
//! firing message, the notice in its thread), like every other acknowledgement. Other interactions (the action
//! links' URL buttons `klaxon-*`, shortcuts) are answered 200 and ignored.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use klaxon_channels::buttons::{parse_value, Press};
use klaxon_core::ChannelKind;
use serde_json::{json, Value};

use super::{
    act, claim, finish, fresh, hmac_matches, now_secs, person, verify, Acted, Integration, Outcome, Verified,
};
use crate::rest::alerts::HandAction;
use crate::Api;

/// How far `X-Slack-Request-Timestamp` may be from now (Slack's own advice: 5 minutes).
pub const STALE_AFTER: Duration = Duration::from_secs(5 * 60);
/// How long a (timestamp, signature) is remembered: longer than it stays fresh.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(15 * 60);

const I: Integration = Integration::Slack;

/// Whether `signature` (`v0=<hex>`) is Slack's signature of `body` sent at `timestamp`.
pub(crate) fn signature_matches(secret: &str, timestamp: &str, signature: &str, body: &[u8]) -> bool {
    signature
        .strip_prefix("v0=")
        .is_some_and(|hex| hmac_matches(secret, &[b"v0:", timestamp.as_bytes(), b":", body], hex))
}

/// The `payload` field of the form body, as JSON.
fn payload(body: &[u8]) -> Option<Value> {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == "payload")
        .and_then(|(_, v)| serde_json::from_str(&v).ok())
}

pub(crate) async fn receive(State(api): State<Api>, req: Request) -> Response {
    let (secret, client, headers, body) = match super::accept(&api, I, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (Some(timestamp), Some(signature)) = (
        super::header_str(&headers, "x-slack-request-timestamp").filter(|s| !s.is_empty()),
        super::header_str(&headers, "x-slack-signature").filter(|s| !s.is_empty()),
    ) else {
        return finish(
            I,
            Outcome::Unsigned,
            "no X-Slack-Signature or X-Slack-Request-Timestamp header",
            None,
        );
    };
    if let Verified::No(outcome, why) = verify(&api, client, || {
        signature_matches(&secret, timestamp, signature, &body)
    }) {
        return finish(I, outcome, why, None);
    }
    let Ok(ts) = timestamp.parse::<i64>() else {
        return finish(
            I,
            Outcome::Stale,
            "X-Slack-Request-Timestamp is not unix seconds",
            None,
        );
    };
    if !fresh(ts, now_secs(), STALE_AFTER) {
        return finish(
            I,
            Outcome::Stale,
            "X-Slack-Request-Timestamp is more than 5 minutes from now",
            None,
        );
    }
    let claimed = match claim(&api, I, &format!("{timestamp}:{signature}"), REPLAY_WINDOW).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Some(payload) = payload(&body) else {
        return finish(
            I,
            Outcome::Invalid,
            "the body has no `payload` field holding JSON",
            None,
        );
    };
    if payload["type"] != "block_actions" {
        return finish(I, Outcome::Ignored, "not a button (block_actions)", None);
    }
    let action = &payload["actions"][0];
    let Some(press) = action["action_id"].as_str().and_then(Press::parse) else {
        // the action links' URL buttons (`klaxon-…`) open a page; Slack reports their clicks too
        return finish(I, Outcome::Ignored, "not an Acknowledge or Resolve button", None);
    };
    let Some((project_id, alert_id)) = action["value"].as_str().and_then(parse_value) else {
        return finish(
            I,
            Outcome::UnknownAlert,
            "the button's value names no alert",
            None,
        );
    };
    let (alert, claimed) = match super::clicked_alert(&api, I, claimed, &project_id, &alert_id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let channel = payload["channel"]["id"].as_str().unwrap_or_default();
    if channel.is_empty() || !super::hears(&alert, ChannelKind::Slack, |endpoint| endpoint == channel) {
        return finish(
            I,
            Outcome::ForeignProject,
            "the alert was not sent to this Slack channel: another project's alert",
            None,
        );
    }
    let user = &payload["user"];
    let name = ["username", "name", "id"]
        .iter()
        .find_map(|k| user[*k].as_str().filter(|s| !s.trim().is_empty()));
    let by = person(name, "slack");
    let hand = match press {
        Press::Ack => HandAction::Acknowledge,
        Press::Resolve => HandAction::Resolve,
    };
    match act(&api, &project_id, &alert_id, hand, &by).await {
        Acted::Done(a, now) => {
            let detail = if now {
                format!("alert {} {}", a.id, hand.done())
            } else {
                format!("alert {} was {} already", a.id, a.state)
            };
            let body = json!({"ok": true, "outcome": "accepted", "alertId": a.id, "state": a.state});
            finish(I, Outcome::Accepted, &detail, Some(body))
        }
        Acted::Unknown => finish(I, Outcome::UnknownAlert, "no such alert", None),
        Acted::Unavailable(why) => {
            claimed.give_back().await;
            finish(I, Outcome::Unavailable, &why, None)
        }
    }
}
