//! Telegram: the Bot API's `sendMessage` with HTML parse mode, or — for Hawk compatibility — a form POST to
//! Hawk's notify-bot when the endpoint is a URL.
//!
//! Messages over 4096 characters are split on line boundaries and sent in order. If a later part fails, the
//! error says how many parts went out; a retry sends them all again (Telegram has no idempotency key).

use klaxon_core::NotificationTask;
use url::Url;

use crate::http_client::{body_detail, label, parse_http_endpoint, Answer, Request};
use crate::render::{
    escape_telegram, fit, split_html, utf16_len, MessageContext, View, ROOMS, TELEGRAM, TELEGRAM_MAX,
};
use crate::{Channels, Delivered, DeliveryError, Edit, MessageRef};

/// A chat id: an integer (users, groups, `-100…` channels) or a public `@channelusername`.
fn valid_chat_id(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let numeric = !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit());
    let username = s.strip_prefix('@').is_some_and(|u| {
        (4..=64).contains(&u.len()) && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    numeric || username
}

/// True when every `<` of `part` opens a tag that closes (`>`) within the part: a tag is never cut.
fn tags_whole(part: &str) -> bool {
    let mut rest = part;
    while let Some(at) = rest.find('<') {
        let after = &rest[at + 1..];
        match after.find(['<', '>']) {
            Some(end) if after.as_bytes()[end] == b'>' => rest = &after[end + 1..],
            _ => return false,
        }
    }
    true
}

/// Telegram's own rate-limit hint: `{"parameters": {"retry_after": N}}` on 429.
fn body_retry_after(body: &str) -> Option<std::time::Duration> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.pointer("/parameters/retry_after")
        .and_then(serde_json::Value::as_u64)
        .map(std::time::Duration::from_secs)
}

/// Telegram's `description` (e.g. `Bad Request: chat not found`), else the raw body.
fn body_description(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("description").and_then(|d| d.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

/// The `sendMessage` body for one part: HTML parse mode, and link previews off (`link_preview_options`, Bot API
/// 7.0, which replaced `disable_web_page_preview`), so a URL in a title never turns into a preview card under
/// the alert.
pub(crate) fn send_message(chat_id: &str, text: &str) -> serde_json::Value {
    serde_json::json!({
        "chat_id": chat_id,
        "text": text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
    })
}

/// `message_id` as the Bot API takes it (a positive integer); None for anything else read back.
fn bot_message_id(id: &str) -> Option<i64> {
    id.parse::<i64>().ok().filter(|n| *n > 0)
}

/// The id of the message `sendMessage` answered (`{"ok": true, "result": {"message_id": 42, …}}`).
fn sent_message_id(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let id = v.pointer("/result/message_id")?.as_i64()?;
    (id > 0).then(|| id.to_string())
}

/// The `editMessageText` body: the firing message's first part `firing` under a bold line with the state the
/// lifecycle message's `view` reports, split (never cut through a tag) to Telegram's limit; `markup` the buttons
/// for the alert's new state (none: Telegram removes the old keyboard).
fn edit_message(
    chat_id: &str,
    message_id: i64,
    firing: &str,
    view: &View,
    markup: Option<serde_json::Value>,
) -> serde_json::Value {
    let by = view.by.as_deref().map(escape_telegram).unwrap_or_default();
    let text = format!("<b>{}{by}{}</b>\n{firing}", view.status, view.status_end);
    let text = if utf16_len(&text) <= TELEGRAM_MAX {
        text
    } else {
        split_html(&text, TELEGRAM_MAX)
            .into_iter()
            .next()
            .unwrap_or_default()
    };
    let mut body = serde_json::json!({
        "chat_id": chat_id,
        "message_id": message_id,
        "text": text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
    });
    if let Some(markup) = markup {
        body["reply_markup"] = markup;
    }
    body
}

impl Channels {
    /// The Acknowledge and Resolve buttons (`reply_markup`) of a Bot API message of `task` (or, `edit`, of its
    /// edit of the firing message), when Telegram's buttons are on and the alert's state shows some
    /// ([`crate::buttons`]).
    fn telegram_markup(&self, task: &NotificationTask, edit: bool) -> Option<serde_json::Value> {
        if !self.buttons.telegram || task.endpoint.contains("://") {
            return None;
        }
        let (project, alert, presses) = crate::buttons::presses(task, edit)?;
        crate::buttons::telegram_markup(project, alert, presses)
    }

    /// The `sendMessage` body of part `i` of `task`'s message: the first part carries the buttons, if any.
    pub(crate) fn telegram_request(
        &self,
        task: &NotificationTask,
        i: usize,
        part: &str,
    ) -> serde_json::Value {
        let mut body = send_message(task.endpoint.trim(), part);
        if i == 0 {
            if let Some(markup) = self.telegram_markup(task, false) {
                body["reply_markup"] = markup;
            }
        }
        body
    }

    /// The message as Telegram receives it: balanced HTML parts of at most 4096 characters.
    pub(crate) fn telegram_parts(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Vec<String>, DeliveryError> {
        // Split, never cut: a part over the limit can only come from one tag longer than a part (a link of an
        // operator's very long template); the message is then rendered in a smaller room, without such links.
        let renderer = &self.inner.renderer;
        // with the Acknowledge and Resolve buttons, the ack and resolve links become the footer "or open: …"
        let ctx = MessageContext {
            buttons: self.telegram_markup(task, false).is_some(),
            ..ctx
        };
        fit(
            |room| {
                let text = renderer.render_view(TELEGRAM, &renderer.view_in(task, ctx, room))?;
                Ok(split_html(&text, TELEGRAM_MAX))
            },
            |parts: &Vec<String>| {
                parts
                    .iter()
                    .all(|p| utf16_len(p) <= TELEGRAM_MAX && tags_whole(p))
            },
        )
    }

    pub(crate) async fn deliver_telegram(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
        firing: Option<&MessageRef>,
        gap: std::time::Duration,
    ) -> Result<Delivered, DeliveryError> {
        let endpoint = task.endpoint.trim();
        let parts = self.telegram_parts(task, ctx)?;
        if endpoint.starts_with("https://") || endpoint.starts_with("http://") {
            return self.deliver_notify_bot(task, endpoint, &parts).await;
        }
        if !valid_chat_id(endpoint) {
            return Err(DeliveryError::permanent(
                "telegram: endpoint is not a chat id or a URL",
            ));
        }
        let token = self
            .inner
            .cfg
            .telegram_bot_token
            .as_ref()
            .filter(|t| !t.expose().is_empty())
            .ok_or_else(|| DeliveryError::permanent("telegram: no bot token configured"))?;
        let secrets = [token.expose(), endpoint];
        let method_url = |method: &str| {
            Url::parse(&format!(
                "{}/bot{}/{method}",
                self.inner.telegram_api.as_str().trim_end_matches('/'),
                token.expose()
            ))
            .map_err(|_| DeliveryError::permanent("telegram: bot token does not fit in a URL"))
        };
        let url = method_url("sendMessage")?;
        let what = label("telegram", &url);
        let check = |answer: &Answer| {
            let detail = body_detail(&body_description(&answer.body), &secrets);
            answer.check(&what, &detail).map_err(|e| match e {
                DeliveryError::Transient {
                    reason,
                    retry_after,
                    rate_limited,
                } => DeliveryError::Transient {
                    rate_limited,
                    reason,
                    retry_after: retry_after.or_else(|| body_retry_after(&answer.body)),
                },
                permanent => permanent,
            })
        };
        // a lifecycle message in the alert's conversation: the firing message shows the state, the message
        // replies to it
        let firing = firing.and_then(|f| Some((f, bot_message_id(&f.message_id)?)));
        let mut edit = None;
        if let Some((firing, message_id)) = firing {
            let view = self.inner.renderer.view_in(task, ctx, ROOMS[0]);
            edit = Some(match firing.body.as_deref() {
                None => Edit::Failed,
                Some(text) => {
                    let markup = self.telegram_markup(task, true);
                    let body = edit_message(endpoint, message_id, text, &view, markup).to_string();
                    let edit_url = method_url("editMessageText")?;
                    let result = async {
                        let answer = self
                            .inner
                            .http
                            .send(
                                &edit_url,
                                Request::json(reqwest::Method::POST),
                                body.into_bytes(),
                                &what,
                                &secrets,
                            )
                            .await?;
                        check(&answer)
                    }
                    .await;
                    // the reply is the bot's next call: its own slot of the bot's pace (`Channels::calls`)
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    match result {
                        Ok(()) => Edit::Edited,
                        Err(e) => {
                            tracing::info!(
                                channel = "telegram",
                                notification_id = %klaxon_core::text::one_line(&task.notification_id, 256),
                                reason = e.reason(),
                                "editing the alert's firing message failed; the message is sent all the same"
                            );
                            Edit::Failed
                        }
                    }
                }
            });
        }
        let reply_to = firing.map(|(_, id)| id);
        let request = |i: usize, part: &str| {
            let mut body = self.telegram_request(task, i, part);
            if let (0, Some(id)) = (i, reply_to) {
                body["reply_parameters"] =
                    serde_json::json!({"message_id": id, "allow_sending_without_reply": true});
            }
            ("application/json", body.to_string().into_bytes())
        };
        let opens = Channels::opens_conversation(task);
        let mut first = None;
        let check_part = |i: usize, answer: &Answer| {
            check(answer)?;
            Ok((i == 0 && opens).then(|| sent_message_id(&answer.body)).flatten())
        };
        let delivered = self
            .send_parts(&url, &what, &secrets, &parts, opens, request, |i, a| {
                let id = check_part(i, a)?;
                if id.is_some() {
                    first = id;
                }
                Ok(())
            })
            .await?;
        let sent = first.map(|message_id| MessageRef {
            message_id,
            destination: Channels::destination_key(task),
            body: parts.first().cloned(),
        });
        Ok(Delivered {
            sent,
            edit,
            ..delivered
        })
    }

    /// Hawk's notify-bot: `POST <endpoint>` with a form `message=…&parse_mode=HTML&disable_web_page_preview=true`
    /// (the codex-bot notify API takes the older Bot API's preview switch).
    async fn deliver_notify_bot(
        &self,
        task: &NotificationTask,
        endpoint: &str,
        parts: &[String],
    ) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(endpoint, "telegram")?;
        let what = label("telegram", &url);
        let secrets = [task.endpoint.as_str()];
        let request = |_: usize, part: &str| {
            let body = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("message", part)
                .append_pair("parse_mode", "HTML")
                .append_pair("disable_web_page_preview", "true")
                .finish();
            ("application/x-www-form-urlencoded", body.into_bytes())
        };
        let check = |_: usize, answer: &Answer| answer.check_body(&what, &secrets);
        self.send_parts(&url, &what, &secrets, parts, false, request, check)
            .await
    }

    /// POSTs the parts of one message in order, one request each (`request` gives part `i`'s content type and
    /// body, `check` classifies its answer; `read_first`: the first answer is read whole, for its message id),
    /// and stops at the first failure, whose reason then says how many parts went out.
    #[allow(clippy::too_many_arguments)]
    async fn send_parts(
        &self,
        url: &Url,
        what: &str,
        secrets: &[&str],
        parts: &[String],
        read_first: bool,
        request: impl Fn(usize, &str) -> (&'static str, Vec<u8>),
        mut check: impl FnMut(usize, &Answer) -> Result<(), DeliveryError>,
    ) -> Result<Delivered, DeliveryError> {
        for (i, part) in parts.iter().enumerate() {
            let (content_type, body) = request(i, part);
            let result = async {
                let answer = if i == 0 && read_first {
                    let req = Request {
                        content_type,
                        ..Request::json(reqwest::Method::POST)
                    };
                    self.inner.http.send(url, req, body, what, secrets).await?
                } else {
                    self.inner
                        .http
                        .post(url, content_type, &[], body, what, secrets)
                        .await?
                };
                check(i, &answer)
            }
            .await;
            result.map_err(|e| after_parts(e, i, parts.len()))?;
        }
        Ok(Delivered::messages(parts.len()))
    }
}

/// Notes in the reason how many parts of a split message already went out.
fn after_parts(e: DeliveryError, sent: usize, total: usize) -> DeliveryError {
    if sent == 0 {
        return e;
    }
    let note = format!(" (after {sent} of {total} parts were sent)");
    match e {
        DeliveryError::Transient {
            reason,
            retry_after,
            rate_limited,
        } => DeliveryError::Transient {
            rate_limited,
            reason: reason + &note,
            retry_after,
        },
        DeliveryError::Permanent { reason } => DeliveryError::Permanent {
            reason: reason + &note,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_ids() {
        for ok in ["12345", "-1001234567890", "@my_channel"] {
            assert!(valid_chat_id(ok), "{ok}");
        }
        for bad in ["", "-", "12a", "@ab", "@bad-name", "../x", "1 2"] {
            assert!(!valid_chat_id(bad), "{bad}");
        }
    }

    #[test]
    fn telegram_bodies() {
        let body = r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}"#;
        assert_eq!(body_retry_after(body), Some(std::time::Duration::from_secs(7)));
        assert_eq!(body_description(body), "Too Many Requests: retry after 7");
        assert_eq!(body_retry_after("nope"), None);
        assert_eq!(body_description("nope"), "nope");
    }
}
