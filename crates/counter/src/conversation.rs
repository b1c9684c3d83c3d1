//! [`Conversations`]: the firing message of each alert on the channels that keep an alert as one conversation
//! (Discord webhooks, the Telegram Bot API, the Slack Web API), so that its lifecycle messages can edit it and
//! reply to it.
//!
//! The sender remembers the message after an alert's first firing on a channel and reads it back before that
//! alert's resolve, acknowledgement, reminders and escalations. Keys are
//! `<ns>:cv:{<project>}:<alertId>:<channel>` (the project's hash tag, as the alert's own keys), each a small JSON
//! value ([`Conversation`], at most [`MAX_CONVERSATION_BYTES`]: a body that does not fit is left out) that expires
//! after `RESOLVED_RETENTION_MS + OPEN_RETENTION_MS`, longer than any alert stays open plus its retention.
//! Nothing in it is a secret: the destination is the sender's hashed destination key.

use std::time::Duration;

use klaxon_core::alert::{is_alert_id, OPEN_RETENTION_MS, RESOLVED_RETENTION_MS};
use klaxon_core::ChannelKind;
use serde::{Deserialize, Serialize};

use crate::script_io::ms;
use crate::{CounterError, RedisHandle};

/// Largest value kept, in bytes: a Discord message's JSON or a Telegram message's HTML fits.
pub const MAX_CONVERSATION_BYTES: usize = 64 * 1024;

/// How long a conversation is kept: an alert's longest open life plus its retention once resolved.
pub const CONVERSATION_TTL: Duration =
    Duration::from_millis((RESOLVED_RETENTION_MS + OPEN_RETENTION_MS).unsigned_abs());

/// An alert's firing message on one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// The channel's message id.
    #[serde(rename = "m")]
    pub message_id: String,
    /// The destination it was sent to (the sender's hashed destination key).
    #[serde(rename = "d")]
    pub destination: String,
    /// The message as sent, what an edit starts from; None when it did not fit.
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// Typed front of the conversation keys. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Conversations {
    redis: RedisHandle,
    namespace: String,
    ttl: Duration,
}

impl Conversations {
    /// Conversations kept for [`CONVERSATION_TTL`].
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Conversations {
            redis,
            namespace: namespace.to_owned(),
            ttl: CONVERSATION_TTL,
        }
    }

    /// The key of an alert's conversation on `channel`; None for a project id that would break the hash tag or an
    /// alert id that is not one.
    pub fn key(&self, project_id: &str, alert_id: &str, channel: ChannelKind) -> Option<String> {
        let project_ok = !project_id.is_empty()
            && project_id.len() <= 64
            && project_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        (project_ok && is_alert_id(alert_id)).then(|| {
            format!(
                "{}:cv:{{{project_id}}}:{alert_id}:{}",
                self.namespace,
                channel.as_str()
            )
        })
    }

    /// Remembers the firing message of an alert on `channel` (its body left out when the value would exceed
    /// [`MAX_CONVERSATION_BYTES`]); false when nothing was stored (ids that make no key, an id too large).
    pub async fn remember(
        &self,
        project_id: &str,
        alert_id: &str,
        channel: ChannelKind,
        conversation: &Conversation,
    ) -> Result<bool, CounterError> {
        let Some(key) = self.key(project_id, alert_id, channel) else {
            return Ok(false);
        };
        let mut value = serde_json::to_string(conversation).unwrap_or_default();
        if value.len() > MAX_CONVERSATION_BYTES {
            let without_body = Conversation {
                body: None,
                ..conversation.clone()
            };
            value = serde_json::to_string(&without_body).unwrap_or_default();
        }
        if value.is_empty() || value.len() > MAX_CONVERSATION_BYTES {
            return Ok(false);
        }
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ms(self.ttl))
            .query_async::<()>(&mut self.redis.clone())
            .await?;
        Ok(true)
    }

    /// The firing message of an alert on `channel`, if one was remembered (and is still readable).
    pub async fn recall(
        &self,
        project_id: &str,
        alert_id: &str,
        channel: ChannelKind,
    ) -> Result<Option<Conversation>, CounterError> {
        let Some(key) = self.key(project_id, alert_id, channel) else {
            return Ok(None);
        };
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
    }
}
