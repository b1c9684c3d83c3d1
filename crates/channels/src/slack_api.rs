//! Slack through the Web API, for an endpoint that is a channel id (`C0123ABCD`): `chat.postMessage` with the
//! operator's bot token (`KLAXON_SLACK_BOT_TOKEN`, `Authorization: Bearer …`) and the message `slack.rs`
//! renders (`text` + `blocks`). An alert is one conversation: its first firing's answer (`channel`, `ts`) is
//! remembered by the sender ([`MessageRef`], `message_id` = `<channel>/<ts>`); a lifecycle message first edits
//! that message (`chat.update`: a bold line with the alert's state above the firing message) and is then posted
//! in its thread (`thread_ts`).
//!
//! The Web API answers most failures with HTTP 200 and `{"ok": false, "error": "<code>"}`, so the body decides:
//! `ratelimited` (with HTTP 429 and `Retry-After`) and Slack's own trouble (`internal_error`, `fatal_error`,
//! `service_unavailable`, `request_timeout`) are transient; every other code (`channel_not_found`,
//! `not_in_channel`, `is_archived`, `invalid_auth`, `token_revoked`, `missing_scope`, `invalid_blocks`, …) is
//! permanent, with a hint for the common ones. The token is only ever in a header, and scrubbed from every reason.

use klaxon_core::rule::is_slack_channel_id;
use klaxon_core::NotificationTask;
use serde_json::{json, Value};
use url::Url;

use crate::buttons::Press;
use crate::error::tidy;
use crate::http_client::{label, Answer, Request};
use crate::render::{escape_slack_text, slack_literal, MessageContext, View, ROOMS};
use crate::slack::{rich_text, within_limits};
use crate::{Channels, Delivered, DeliveryError, Edit, MessageRef};

/// A message timestamp (`1712345678.123456`), Slack's message id.
fn is_ts(s: &str) -> bool {
    s.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.len() <= 12
            && b.len() <= 9
            && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
    })
}

/// The remembered message id: `<channel>/<ts>`; None for anything else read back.
fn parse_message_id(id: &str) -> Option<(&str, &str)> {
    let (channel, ts) = id.split_once('/')?;
    (is_slack_channel_id(channel) && is_ts(ts)).then_some((channel, ts))
}

/// The `ts` and `channel` of a `chat.postMessage` answer, as `<channel>/<ts>`.
fn sent_message_id(answer: &Value) -> Option<String> {
    let ts = answer.get("ts")?.as_str()?;
    let channel = answer.get("channel")?.as_str()?;
    (is_slack_channel_id(channel) && is_ts(ts)).then(|| format!("{channel}/{ts}"))
}

/// What to do about an `{"ok": false}` error code: transient (Slack's own trouble, rate limits) or permanent,
/// with a hint for the codes an operator or tenant can fix.
fn classify_error(code: &str) -> (bool, Option<&'static str>) {
    match code {
        "ratelimited" | "rate_limited" => (true, None),
        "internal_error" | "fatal_error" | "service_unavailable" | "request_timeout" => (true, None),
        "channel_not_found" => (
            false,
            Some("the channel id is wrong, or the channel is private and the bot is not in it"),
        ),
        "not_in_channel" => (false, Some("invite the bot to the channel (/invite @<bot>)")),
        "is_archived" => (false, Some("the channel is archived")),
        "invalid_auth" | "not_authed" | "account_inactive" | "token_revoked" | "token_expired" => (
            false,
            Some("check KLAXON_SLACK_BOT_TOKEN (a bot token, xoxb-…, of an installed app)"),
        ),
        "missing_scope" => (false, Some("give the app the chat:write scope and reinstall it")),
        _ => (false, None),
    }
}

/// Classifies a Web API answer: HTTP first (429 with `Retry-After`, 5xx transient; other non-2xx permanent),
/// then the body's `ok`. Returns the parsed body on success. Nothing of the token can reach a reason.
fn check(answer: &Answer, what: &str, method: &str, secrets: &[&str]) -> Result<Value, DeliveryError> {
    answer.check_body(what, secrets).map_err(|e| match e {
        DeliveryError::Transient {
            reason,
            retry_after,
            rate_limited,
        } => DeliveryError::Transient {
            reason,
            retry_after,
            rate_limited: rate_limited || answer.status == 429,
        },
        permanent => permanent,
    })?;
    let Ok(body) = serde_json::from_str::<Value>(&answer.body) else {
        return Err(DeliveryError::transient(format!(
            "{what}: {method} answered {} with a body that is not JSON ({})",
            answer.status,
            tidy(&answer.body, secrets)
        )));
    };
    if body.get("ok").and_then(Value::as_bool) == Some(true) {
        return Ok(body);
    }
    let code = tidy(
        body.get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown_error"),
        secrets,
    );
    let code = klaxon_core::text::one_line(&code, 80);
    let (transient, hint) = classify_error(&code);
    let reason = match hint {
        Some(hint) => format!("{what}: {method} failed: {code} ({hint})"),
        None => format!("{what}: {method} failed: {code}"),
    };
    if transient {
        let rate_limited = code == "ratelimited" || code == "rate_limited";
        Err(DeliveryError::Transient {
            reason: klaxon_core::text::reason(&reason),
            retry_after: answer.retry_after,
            rate_limited,
        })
    } else {
        Err(DeliveryError::permanent(reason))
    }
}

/// The `chat.update` body: the firing message `firing` (its `chat.postMessage` request) with a bold line
/// showing the state the lifecycle message's `view` reports above it, in `text` and as a first block; None when
/// the firing message cannot be read or the result would exceed Slack's limits. The firing's Acknowledge and
/// Resolve buttons are replaced by `buttons` (project, alert, the new state's presses; none: removed).
fn edited_message(
    channel: &str,
    ts: &str,
    firing: &str,
    view: &View,
    buttons: Option<(&str, &str, &[Press])>,
) -> Option<Value> {
    let firing: Value = serde_json::from_str(firing).ok()?;
    let mut elements = vec![json!({"type": "text", "text": view.status, "style": {"bold": true}})];
    if let Some(by) = view.by.as_deref().filter(|b| !b.is_empty()) {
        elements.push(json!({"type": "text", "text": slack_literal(by), "style": {"bold": true}}));
    }
    if !view.status_end.is_empty() {
        elements.push(json!({"type": "text", "text": view.status_end, "style": {"bold": true}}));
    }
    let mut blocks = vec![rich_text(elements)];
    blocks.extend(firing.get("blocks")?.as_array()?.iter().cloned());
    let (project, alert, presses) = buttons.unwrap_or(("", "", &[]));
    crate::buttons::replace_slack_block(&mut blocks, project, alert, presses);
    let by = view.by.as_deref().map(escape_slack_text).unwrap_or_default();
    let text = format!(
        "*{}{by}{}*\n{}",
        view.status,
        view.status_end,
        firing.get("text")?.as_str()?
    );
    let body = json!({
        "channel": channel,
        "ts": ts,
        "text": text,
        "blocks": blocks,
    });
    within_limits(&body).then_some(body)
}

impl Channels {
    /// The `chat.postMessage` request of `task` to `channel` (in the thread of `thread_ts`, if any).
    pub(crate) fn slack_api_body(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
        channel: &str,
        thread_ts: Option<&str>,
    ) -> Result<Value, DeliveryError> {
        // with the Acknowledge and Resolve buttons, the ack and resolve links become the footer "or open: …"
        let ctx = MessageContext {
            buttons: self.slack_buttons(task, false).is_some(),
            ..ctx
        };
        let mut body = self.slack_message(task, ctx)?;
        body["channel"] = Value::from(channel);
        if let Some(ts) = thread_ts {
            body["thread_ts"] = Value::from(ts);
        }
        self.add_slack_buttons(task, &mut body);
        Ok(body)
    }

    /// The Acknowledge and Resolve buttons of a Web API message of `task` (or, `edit`, of its edit of the
    /// firing message), when Slack's buttons are on ([`crate::buttons`]).
    fn slack_buttons<'t>(
        &self,
        task: &'t NotificationTask,
        edit: bool,
    ) -> Option<(&'t str, &'t str, &'static [Press])> {
        self.buttons
            .slack
            .then(|| crate::buttons::presses(task, edit))
            .flatten()
    }

    /// Appends the buttons block to `body` when the message carries buttons and the result keeps within Slack's
    /// limits (a message at the 50-block bound goes without them).
    fn add_slack_buttons(&self, task: &NotificationTask, body: &mut Value) {
        let Some((project, alert, presses)) = self.slack_buttons(task, false) else {
            return;
        };
        let Some(block) = crate::buttons::slack_block(project, alert, presses) else {
            return;
        };
        let mut with = body.clone();
        if let Some(blocks) = with["blocks"].as_array_mut() {
            crate::buttons::place_slack_block(blocks, block);
            if within_limits(&with) {
                *body = with;
            }
        }
    }

    /// One Web API call: `POST <slack-api>/<method>` with the bot token, classified ([`check`]).
    async fn slack_call(
        &self,
        method: &str,
        body: &Value,
        token: &str,
        what: &str,
    ) -> Result<Value, DeliveryError> {
        let url = Url::parse(&format!(
            "{}/{method}",
            self.inner.slack_api.as_str().trim_end_matches('/')
        ))
        .map_err(|_| DeliveryError::permanent("slack: the Web API URL is invalid"))?;
        let secrets = [token];
        let headers = [("authorization", format!("Bearer {token}"))];
        let request = Request {
            content_type: "application/json; charset=utf-8",
            headers: &headers,
            ..Request::json(reqwest::Method::POST)
        };
        let answer = self
            .inner
            .http
            .send(&url, request, body.to_string().into_bytes(), what, &secrets)
            .await?;
        check(&answer, what, method, &secrets)
    }

    pub(crate) async fn deliver_slack_api(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
        firing: Option<&MessageRef>,
    ) -> Result<Delivered, DeliveryError> {
        let endpoint = task.endpoint.trim();
        if !is_slack_channel_id(endpoint) {
            return Err(DeliveryError::permanent(
                "slack: endpoint is neither a channel id (C0123ABCD) nor an incoming-webhook URL",
            ));
        }
        let token = self
            .inner
            .cfg
            .slack_bot_token
            .as_ref()
            .map(|t| t.expose().trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                DeliveryError::permanent("slack: no bot token configured (KLAXON_SLACK_BOT_TOKEN)")
            })?;
        let what = label("slack", &self.inner.slack_api);
        // a lifecycle message in the alert's conversation: the firing message shows the state, the message goes
        // in its thread
        let firing = firing.and_then(|f| {
            let (channel, ts) = parse_message_id(&f.message_id)?;
            Some((f, channel, ts))
        });
        let mut edit = None;
        if let Some((f, channel, ts)) = firing {
            let view = self.inner.renderer.view_in(task, ctx, ROOMS[0]);
            edit = Some(
                match f
                    .body
                    .as_deref()
                    .and_then(|b| edited_message(channel, ts, b, &view, self.slack_buttons(task, true)))
                {
                    None => Edit::Failed,
                    Some(body) => match self.slack_call("chat.update", &body, token, &what).await {
                        Ok(_) => Edit::Edited,
                        Err(e) => {
                            tracing::info!(
                                channel = "slack",
                                notification_id = %klaxon_core::text::one_line(&task.notification_id, 256),
                                reason = e.reason(),
                                "editing the alert's firing message failed; the message is sent all the same"
                            );
                            Edit::Failed
                        }
                    },
                },
            );
        }
        let (channel, thread) = match firing {
            Some((_, channel, ts)) => (channel, Some(ts)),
            None => (endpoint, None),
        };
        let body = self.slack_api_body(task, ctx, channel, thread)?;
        let answer = self.slack_call("chat.postMessage", &body, token, &what).await?;
        let sent = Channels::opens_conversation(task)
            .then(|| sent_message_id(&answer))
            .flatten()
            .map(|message_id| MessageRef {
                message_id,
                destination: Channels::destination_key(task),
                body: Some(body.to_string()),
            });
        Ok(Delivered {
            sent,
            edit,
            ..Delivered::messages(1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_ids_and_message_ids() {
        for ok in ["C0123ABCD", "G0123ABCDEF", "D012345678", "C01234567890123456789"] {
            assert!(is_slack_channel_id(ok), "{ok}");
        }
        for bad in [
            "",
            "C0123",
            "#alerts",
            "c0123abcd",
            "U0123ABCD",
            "C0123ABC-",
            "C0123ABCD/../x",
        ] {
            assert!(!is_slack_channel_id(bad), "{bad}");
        }
        assert_eq!(
            parse_message_id("C0123ABCD/1712345678.123456"),
            Some(("C0123ABCD", "1712345678.123456"))
        );
        for bad in [
            "C0123ABCD",
            "C0123ABCD/x",
            "x/1.2",
            "C0123ABCD/1.2/3",
            "C0123ABCD/.5",
        ] {
            assert_eq!(parse_message_id(bad), None, "{bad}");
        }
        let answer = json!({"ok": true, "channel": "C0123ABCD", "ts": "1712345678.123456"});
        assert_eq!(
            sent_message_id(&answer).as_deref(),
            Some("C0123ABCD/1712345678.123456")
        );
        assert_eq!(sent_message_id(&json!({"ok": true, "ts": "1.2"})), None);
    }

    #[test]
    fn error_codes() {
        for (code, transient) in [
            ("ratelimited", true),
            ("internal_error", true),
            ("service_unavailable", true),
            ("channel_not_found", false),
            ("not_in_channel", false),
            ("invalid_auth", false),
            ("token_revoked", false),
            ("invalid_blocks", false),
            ("something_new", false),
        ] {
            assert_eq!(classify_error(code).0, transient, "{code}");
        }
    }
}
