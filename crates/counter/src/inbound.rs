//! [`Inbound`]: what the inbound integrations (PagerDuty, Slack, Telegram calling Klaxon back) keep in Redis.
//!
//! - **Replays**: each verified request's id (PagerDuty's webhook event id, Slack's timestamp and signature,
//!   Telegram's `update_id`) is claimed once with `SET NX PX` under `<ns>:in:seen:<integration>:<32 hex of its
//!   SHA-256>` for a bounded time ([`Inbound::first_time`]): a second request with the same id inside that time is
//!   a replay. A request whose handling failed on our side (Redis or RabbitMQ down) gives its claim back
//!   ([`Inbound::forget`]), so the service's own retry is not refused.
//! - **PagerDuty incidents**: PagerDuty's v3 webhooks name an incident by its `incident_key`, the Events API
//!   `dedup_key` Klaxon triggered it with — a notification id, a hash that names no project. The sender remembers
//!   each trigger's key with the project and the alerts it is about ([`Inbound::remember_incident`], key
//!   `<ns>:pd:<dedup_key>`, kept as long as an alert's conversation), and the webhook reads it back
//!   ([`Inbound::incident`]).
//!
//! Single-key commands only: any key may live on any node of a Redis Cluster.

use std::time::Duration;

use klaxon_core::alert::is_alert_id;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::conversation::CONVERSATION_TTL;
use crate::script_io::ms;
use crate::{CounterError, RedisHandle};

/// Most alerts one incident is remembered with (a digest's incident lists several).
pub const MAX_INCIDENT_ALERTS: usize = 100;

/// A PagerDuty incident Klaxon triggered: the project and the alerts its trigger was about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incident {
    /// The project.
    #[serde(rename = "p")]
    pub project_id: String,
    /// The alerts (one for a firing, a reminder or an escalation step; those a digest listed).
    #[serde(rename = "a")]
    pub alert_ids: Vec<String>,
}

/// Typed front of the inbound integrations' keys. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Inbound {
    redis: RedisHandle,
    namespace: String,
}

/// A `dedup_key` we could have sent: 1 to 255 characters of letters, digits, `-`, `_`, `:` and `.`.
fn dedup_key_ok(key: &str) -> bool {
    (1..=255).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'))
}

impl Inbound {
    /// The keys of `namespace`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Inbound {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    fn seen_key(&self, integration: &str, id: &str) -> String {
        let digest = Sha256::digest(id.as_bytes());
        format!(
            "{}:in:seen:{integration}:{}",
            self.namespace,
            hex::encode(&digest[..16])
        )
    }

    fn incident_key(&self, dedup_key: &str) -> String {
        format!("{}:pd:{dedup_key}", self.namespace)
    }

    /// Claims request `id` of `integration` for `ttl`: true the first time, false for a replay within `ttl`.
    pub async fn first_time(&self, integration: &str, id: &str, ttl: Duration) -> Result<bool, CounterError> {
        let set: Option<String> = redis::cmd("SET")
            .arg(self.seen_key(integration, id))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ms(ttl).max(1))
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(set.is_some())
    }

    /// Gives back the claim of request `id` (its handling failed on our side: the service may retry it).
    pub async fn forget(&self, integration: &str, id: &str) -> Result<(), CounterError> {
        redis::cmd("DEL")
            .arg(self.seen_key(integration, id))
            .query_async::<()>(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// Remembers that the PagerDuty incident of `dedup_key` is about `alert_ids` of `project_id` (at most
    /// [`MAX_INCIDENT_ALERTS`], malformed ids left out); false when nothing was stored (no alert, a key we never
    /// send).
    pub async fn remember_incident(
        &self,
        dedup_key: &str,
        project_id: &str,
        alert_ids: &[&str],
    ) -> Result<bool, CounterError> {
        let mut ids: Vec<String> = Vec::new();
        for id in alert_ids.iter().filter(|id| is_alert_id(id)) {
            if ids.len() < MAX_INCIDENT_ALERTS && !ids.iter().any(|k| k == id) {
                ids.push((*id).to_owned());
            }
        }
        if ids.is_empty() || !dedup_key_ok(dedup_key) || !klaxon_core::event::is_object_id(project_id) {
            return Ok(false);
        }
        let value = serde_json::to_string(&Incident {
            project_id: project_id.to_owned(),
            alert_ids: ids,
        })
        .unwrap_or_default();
        redis::cmd("SET")
            .arg(self.incident_key(dedup_key))
            .arg(value)
            .arg("PX")
            .arg(ms(CONVERSATION_TTL))
            .query_async::<()>(&mut self.redis.clone())
            .await?;
        Ok(true)
    }

    /// The incident Klaxon triggered with `dedup_key`, if it remembers one.
    pub async fn incident(&self, dedup_key: &str) -> Result<Option<Incident>, CounterError> {
        if !dedup_key_ok(dedup_key) {
            return Ok(None);
        }
        let value: Option<String> = redis::cmd("GET")
            .arg(self.incident_key(dedup_key))
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_we_could_have_sent_are_looked_up() {
        assert!(dedup_key_ok("0f1e2d3c4b5a69788796a5b4c3d2e1f0"));
        for bad in ["", "a b", "a\nb", "x*", &"a".repeat(256)] {
            assert!(!dedup_key_ok(bad), "{bad}");
        }
    }
}
