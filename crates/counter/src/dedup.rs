//! [`Dedup`]: delivery deduplication in Redis, so a notification delivered once is never delivered again.
//!
//! Each attempt first *claims* the notification id (`lua/dedup_claim.lua`): the claim fails when the id is
//! already marked `sent`, and is deferred while another sender holds a lease on it, so a task that is
//! redelivered (consumer crash, lost ack) or published twice never produces a second message, not even when
//! both copies are in flight on two processes at once. After a successful send the key becomes `sent` for
//! the dedup TTL; after a failed one the lease is released (`lua/dedup_release.lua`) so the retry can claim
//! it. A sender that crashes mid-send leaves a lease that runs out after [`Dedup::lease`]. What the sender
//! does with each answer is its own policy (`klaxon_engine::sender`).
//!
//! Keys are `<ns>:{dd:<notificationId>}`: one key per call, so every call stays in one cluster slot.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::script_io::ms;
use crate::{CounterError, RedisHandle};

static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/dedup_claim.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/dedup_release.lua")));

/// How long a `sent` mark lives by default: 7 days, longer than any retry schedule or consumer outage.
pub const DEFAULT_DEDUP_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The answer to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This attempt may deliver; it must then call [`Dedup::mark_sent`] or [`Dedup::release`].
    Claimed,
    /// Already delivered: drop the task without sending.
    AlreadySent,
    /// Another sender is delivering it right now; ask again after this long.
    Busy(Duration),
}

/// Typed front of the dedup scripts. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Dedup {
    redis: RedisHandle,
    namespace: String,
    ttl: Duration,
    lease: Duration,
}

impl Dedup {
    /// Marks live for `ttl`; a lease for `lease` (make it longer than one delivery attempt can take).
    pub fn new(redis: RedisHandle, namespace: &str, ttl: Duration, lease: Duration) -> Self {
        Dedup {
            redis,
            namespace: namespace.to_owned(),
            ttl: ttl.max(Duration::from_millis(1)),
            lease: lease.max(Duration::from_millis(1)),
        }
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The Redis key of a notification id.
    pub fn key(&self, notification_id: &str) -> String {
        format!("{}:{{dd:{}}}", self.namespace, notification_id)
    }

    /// Claims `notification_id` for the attempt identified by `token` (`lua/dedup_claim.lua`).
    pub async fn claim(&self, notification_id: &str, token: &str) -> Result<Claim, CounterError> {
        let (state, ms_left): (i64, i64) = CLAIM
            .key(self.key(notification_id))
            .arg(token)
            .arg(ms(self.lease))
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(match state {
            1 => Claim::Claimed,
            0 => Claim::AlreadySent,
            _ => Claim::Busy(Duration::from_millis(u64::try_from(ms_left).unwrap_or(0))),
        })
    }

    /// Marks `notification_id` delivered for the dedup TTL.
    pub async fn mark_sent(&self, notification_id: &str) -> Result<(), CounterError> {
        redis::cmd("SET")
            .arg(self.key(notification_id))
            .arg("sent")
            .arg("PX")
            .arg(ms(self.ttl))
            .query_async::<()>(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// Gives up the lease of a failed attempt (`lua/dedup_release.lua`); true when it was still ours.
    pub async fn release(&self, notification_id: &str, token: &str) -> Result<bool, CounterError> {
        let released: i64 = RELEASE
            .key(self.key(notification_id))
            .arg(token)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(released == 1)
    }
}
