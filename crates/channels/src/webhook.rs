//! Generic webhooks: the notification as JSON, exactly as INTERFACE.md shows it, signed with HMAC-SHA256 when
//! a secret is configured. Two optional fields are added when known: `projectName` (Hawk's project name) and,
//! per event, `url` (from `--event-url-template`).

use hmac::{Hmac, Mac};
use klaxon_core::{NotificationEvent, NotificationTask};
use serde::Serialize;
use sha2::Sha256;

use crate::http_client::{body_detail, label, parse_http_endpoint};
use crate::render::MessageContext;
use crate::{Channels, Delivered, DeliveryError};

/// Header carrying `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Klaxon-Signature";
/// Header carrying the notification id (the same on every retry: receivers deduplicate on it).
pub const NOTIFICATION_ID_HEADER: &str = "X-Klaxon-Notification-Id";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WebhookBody<'a> {
    notification_id: &'a str,
    project_id: &'a str,
    rule_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    project_name: Option<&'a str>,
    channel: &'static str,
    fired_at: String,
    events: Vec<WebhookEvent<'a>>,
    /// The body of a direct notification (`POST /api/v1/notifications`).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

#[derive(Serialize)]
struct WebhookEvent<'a> {
    #[serde(flatten)]
    event: &'a NotificationEvent,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// The exact body POSTed for a task (no project name, no links).
pub fn webhook_body(task: &NotificationTask) -> Vec<u8> {
    webhook_body_with(task, MessageContext::default())
}

/// The exact body POSTed for a task, with `projectName` and event `url`s when the context has them.
pub fn webhook_body_with(task: &NotificationTask, ctx: MessageContext<'_>) -> Vec<u8> {
    let body = WebhookBody {
        notification_id: &task.notification_id,
        project_id: &task.project_id,
        rule_id: &task.rule_id,
        project_name: ctx.project_name,
        channel: "webhook",
        fired_at: task.fired_at_rfc3339(),
        events: task
            .events
            .iter()
            .map(|e| WebhookEvent {
                event: e,
                url: ctx
                    .links
                    .and_then(|t| t.link(&task.project_id, &e.group_hash, e.repetition_id.as_deref())),
            })
            .collect(),
        text: task.text.as_deref(),
    };
    // Serializing plain strings and integers cannot fail; an empty body would be caught by the receiver.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `sha256=<hex>` for a body and secret.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(body);
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        }
        Err(_) => String::new(),
    }
}

impl Channels {
    pub(crate) async fn deliver_webhook(
        &self,
        task: &NotificationTask,
        ctx: MessageContext<'_>,
    ) -> Result<Delivered, DeliveryError> {
        let url = parse_http_endpoint(&task.endpoint, "webhook")?;
        let what = label("webhook", &url);
        let body = webhook_body_with(task, ctx);
        let mut headers = vec![(NOTIFICATION_ID_HEADER, task.notification_id.clone())];
        let mut secrets = vec![task.endpoint.as_str()];
        if let Some(secret) = &self.inner.cfg.webhook_secret {
            headers.push((SIGNATURE_HEADER, sign(secret.expose().as_bytes(), &body)));
            secrets.push(secret.expose());
        }
        let answer = self
            .inner
            .http
            .post(&url, "application/json", &headers, body, &what, &secrets)
            .await?;
        answer.check(&what, &body_detail(&answer.body, &secrets))?;
        Ok(Delivered { messages: 1 })
    }
}
