//! [`DirectKeys`]: the idempotency keys of direct notifications (`POST /api/v1/notifications` with an
//! `idempotencyKey`), so that a repeated request answers with the first one's `sendAt` and is not queued twice.
//!
//! One key per notification id (the id is derived from the idempotency key): `<ns>:{direct:<id>}`, holding
//! `<state>:<sendAtMs>` ([`KeyState`]). A request records its key `pending` before it publishes (`SET NX`), and
//! marks it `queued` once the broker confirmed (`SET XX KEEPTTL`). A repeat that finds `queued` only answers; one
//! that finds `pending` (the first request may have died between the record and the publish) publishes again, at
//! the first one's time: the senders deliver one id once, so that costs no second message. A key lives until
//! [`KEY_RETENTION_MS`] after its send time ([`key_ttl_ms`]).

use crate::{CounterError, RedisHandle};

/// How long an idempotency key is remembered after its `sendAt` (as long as the senders' default dedup TTL).
pub const KEY_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;

/// The state of an idempotency key in Redis: `<state>:<sendAtMs>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Recorded, not known to be published yet (a retry publishes again; the senders deduplicate).
    Pending(i64),
    /// Published with confirms: a repeat only answers.
    Queued(i64),
}

impl KeyState {
    /// The stored form.
    pub fn encode(self) -> String {
        match self {
            KeyState::Pending(ms) => format!("pending:{ms}"),
            KeyState::Queued(ms) => format!("queued:{ms}"),
        }
    }

    /// Parses the stored form.
    pub fn decode(s: &str) -> Option<Self> {
        let (state, ms) = s.split_once(':')?;
        let ms = ms.parse().ok()?;
        match state {
            "pending" => Some(KeyState::Pending(ms)),
            "queued" => Some(KeyState::Queued(ms)),
            _ => None,
        }
    }
}

/// The Redis key remembering an idempotency key's notification.
pub fn key_of(namespace: &str, notification_id: &str) -> String {
    format!("{namespace}:{{direct:{notification_id}}}")
}

/// How long the record lives: until [`KEY_RETENTION_MS`] after the send time.
pub fn key_ttl_ms(send_at_ms: i64, now_ms: i64) -> i64 {
    send_at_ms
        .saturating_sub(now_ms)
        .max(0)
        .saturating_add(KEY_RETENTION_MS)
}

/// Typed front of the direct notifications' idempotency keys. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DirectKeys {
    redis: RedisHandle,
    namespace: String,
}

impl DirectKeys {
    /// The keys of `namespace`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        DirectKeys {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    /// Records `notification_id` as pending, to be sent at `send_at_ms`, unless it is recorded already: None
    /// when this call recorded it (a fresh request, or the earlier record expired in between), else what the
    /// earlier request left.
    pub async fn record(
        &self,
        notification_id: &str,
        send_at_ms: i64,
        now_ms: i64,
    ) -> Result<Option<KeyState>, CounterError> {
        let key = key_of(&self.namespace, notification_id);
        let mut redis = self.redis.clone();
        let fresh: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(KeyState::Pending(send_at_ms).encode())
            .arg("NX")
            .arg("PX")
            .arg(key_ttl_ms(send_at_ms, now_ms))
            .query_async(&mut redis)
            .await?;
        if fresh.is_some() {
            return Ok(None);
        }
        let stored: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut redis).await?;
        Ok(stored.as_deref().and_then(KeyState::decode))
    }

    /// Marks a recorded `notification_id` queued (sent at `send_at_ms`), keeping its expiry; nothing when the
    /// record is gone.
    pub async fn mark_queued(&self, notification_id: &str, send_at_ms: i64) -> Result<(), CounterError> {
        redis::cmd("SET")
            .arg(key_of(&self.namespace, notification_id))
            .arg(KeyState::Queued(send_at_ms).encode())
            .arg("XX")
            .arg("KEEPTTL")
            .query_async::<Option<String>>(&mut self.redis.clone())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn key_states_round_trip() {
        for s in [KeyState::Pending(5), KeyState::Queued(1_800_000_000_000)] {
            assert_eq!(KeyState::decode(&s.encode()), Some(s));
        }
        assert_eq!(KeyState::decode("other:5"), None);
        assert_eq!(KeyState::decode("queued:x"), None);
        assert_eq!(key_ttl_ms(NOW, NOW), KEY_RETENTION_MS);
        assert_eq!(key_ttl_ms(NOW + 10, NOW), KEY_RETENTION_MS + 10);
        assert_eq!(key_of("ns", "abc"), "ns:{direct:abc}");
    }
}
