//! Telegram: the Bot API's `sendMessage` with HTML parse mode, or — for Hawk compatibility — a form POST to
//! Hawk's notify-bot when the endpoint is a URL.
//!
//! Messages over 4096 characters are split on line boundaries and sent in order. If a later part fails, the
//! error says how many parts went out; a retry sends them all again (Telegram has no idempotency key).

use klaxon_core::NotificationTask;
use url::Url;

use crate::http_client::{body_detail, label, parse_http_endpoint, Answer};
use crate::render::{fit, split_html, utf16_len, MessageContext, TELEGRAM, TELEGRAM_MAX};
use crate::{Channels, Delivered, DeliveryError};

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

impl Channels {
    /// The message as Telegram receives it: balanced HTML parts of at most 4096 characters.
    pub(crate) fn telegram_parts(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Vec<String>, DeliveryError> {
        // Split, never cut: a part over the limit can only come from one tag longer than a part (a link of an
        // operator's very long template); the message is then rendered in a smaller room, without such links.
        let renderer = &self.inner.renderer;
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
        let url = Url::parse(&format!(
            "{}/bot{}/sendMessage",
            self.inner.telegram_api.as_str().trim_end_matches('/'),
            token.expose()
        ))
        .map_err(|_| DeliveryError::permanent("telegram: bot token does not fit in a URL"))?;
        let what = label("telegram", &url);
        let request = |part: &str| {
            let body = send_message(endpoint, part).to_string();
            ("application/json", body.into_bytes())
        };
        let check = |answer: &Answer| {
            let detail = body_detail(&body_description(&answer.body), &secrets);
            answer.check(&what, &detail).map_err(|e| match e {
                DeliveryError::Transient { reason, retry_after } => DeliveryError::Transient {
                    reason,
                    retry_after: retry_after.or_else(|| body_retry_after(&answer.body)),
                },
                permanent => permanent,
            })
        };
        self.send_parts(&url, &what, &secrets, &parts, request, check)
            .await
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
        let request = |part: &str| {
            let body = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("message", part)
                .append_pair("parse_mode", "HTML")
                .append_pair("disable_web_page_preview", "true")
                .finish();
            ("application/x-www-form-urlencoded", body.into_bytes())
        };
        let check = |answer: &Answer| answer.check_body(&what, &secrets);
        self.send_parts(&url, &what, &secrets, parts, request, check)
            .await
    }

    /// POSTs the parts of one message in order, one request each (`request` gives a part's content type and
    /// body, `check` classifies the answer), and stops at the first failure, whose reason then says how many
    /// parts went out.
    async fn send_parts(
        &self,
        url: &Url,
        what: &str,
        secrets: &[&str],
        parts: &[String],
        request: impl Fn(&str) -> (&'static str, Vec<u8>),
        check: impl Fn(&Answer) -> Result<(), DeliveryError>,
    ) -> Result<Delivered, DeliveryError> {
        for (i, part) in parts.iter().enumerate() {
            let (content_type, body) = request(part);
            let result = async {
                let answer = self
                    .inner
                    .http
                    .post(url, content_type, &[], body, what, secrets)
                    .await?;
                check(&answer)
            }
            .await;
            result.map_err(|e| after_parts(e, i, parts.len()))?;
        }
        Ok(Delivered {
            messages: parts.len(),
        })
    }
}

/// Notes in the reason how many parts of a split message already went out.
fn after_parts(e: DeliveryError, sent: usize, total: usize) -> DeliveryError {
    if sent == 0 {
        return e;
    }
    let note = format!(" (after {sent} of {total} parts were sent)");
    match e {
        DeliveryError::Transient { reason, retry_after } => DeliveryError::Transient {
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
