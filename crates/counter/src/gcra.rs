//! [`Gcra`]: fleet-wide rate limiting in Redis, GCRA (`lua/gcra_reserve.lua`).
//!
//! One call reserves a send slot under one limit, or says how far away the next free slot is when that is
//! further than the caller accepts to wait. Because every sender of the namespace reserves slots in the same
//! Redis key on the Redis clock, a limit holds across processes. Which limits apply to a message, and what to
//! do with a far slot, is the caller's policy (`klaxon_engine::ratelimit`).
//!
//! Keys are `<ns>:{rl:<destination>}`: one key per call, so every call stays in one cluster slot.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::script_io::now_arg;
use crate::{CounterError, RedisHandle};

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/gcra_reserve.lua")));

/// The answer to a slot request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// A slot is reserved this far from now (zero = now): sleep, then send.
    Reserved(Duration),
    /// No slot within the accepted wait: delay the message about this long and ask again.
    Later(Duration),
}

/// Typed front of `lua/gcra_reserve.lua`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gcra {
    redis: RedisHandle,
    namespace: String,
}

impl Gcra {
    /// Rate-limit keys under `<namespace>:{rl:…}`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Gcra {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    /// One GCRA reservation on `<ns>:{rl:<key>}`: `per_second` with a burst of `burst` messages, accepting
    /// a wait up to `max_wait`; `now_ms` is the Redis clock unless given (tests).
    pub async fn reserve(
        &self,
        key: &str,
        per_second: f64,
        burst: u32,
        max_wait: Duration,
        now_ms: Option<u64>,
    ) -> Result<Slot, CounterError> {
        let interval_ms = (1000.0 / per_second).ceil().max(1.0) as u64;
        let tolerance_ms = interval_ms.saturating_mul(u64::from(burst.max(1) - 1));
        let (reserved, wait_ms): (i64, i64) = RESERVE
            .key(format!("{}:{{rl:{}}}", self.namespace, key))
            .arg(now_arg(now_ms))
            .arg(interval_ms)
            .arg(tolerance_ms)
            .arg(u64::try_from(max_wait.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        Ok(if reserved == 1 {
            Slot::Reserved(wait)
        } else {
            Slot::Later(wait)
        })
    }
}
