//! [`Gcra`]: fleet-wide rate limiting in Redis, GCRA (`lua/gcra_reserve.lua`).
//!
//! One call reserves a send slot under one limit, or says how far away the next free slot is when that is
//! further than the caller accepts to wait. Because every sender of the namespace reserves slots in the same
//! Redis key on the Redis clock, a limit holds across processes. Which limits apply to a message, and what to
//! do with a far slot, is the caller's policy (`klaxon_engine::ratelimit`).
//!
//! Keys are `<ns>:{rl:<destination>}` (and, shared per project, `…:p:<project>` and `…:active` under the same
//! hash tag): every call stays in one cluster slot.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::script_io::{key_part, now_arg};
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
        self.reserve_shared(key, None, per_second, burst, max_wait, now_ms)
            .await
    }

    /// [`Gcra::reserve`] shared fairly between the projects using the destination (`share`: the asking project
    /// and the grace it stays active after its demand ends): while other projects have demand, one project gets
    /// at most its share of the rate (`lua/gcra_reserve.lua`).
    pub async fn reserve_shared(
        &self,
        key: &str,
        share: Option<(&str, Duration)>,
        per_second: f64,
        burst: u32,
        max_wait: Duration,
        now_ms: Option<u64>,
    ) -> Result<Slot, CounterError> {
        self.reserve_calls(key, share, per_second, burst, 1, max_wait, now_ms)
            .await
    }

    /// The emission interval of `per_second`, as the script counts it (whole milliseconds, at least 1): how far
    /// apart the requests of one [`Gcra::reserve_calls`] reservation go.
    pub fn interval(per_second: f64) -> Duration {
        Duration::from_millis((1000.0 / per_second).ceil().max(1.0) as u64)
    }

    /// [`Gcra::reserve_shared`] for `calls` (≥ 1) requests sent as one delivery (a Telegram lifecycle message:
    /// an edit of the alert's firing message, then the reply): `calls` consecutive slots are reserved, the first
    /// `wait` away (the answer), each next one [`Gcra::interval`] later, and the project's share is charged
    /// `calls` messages. The caller spaces its requests by the interval.
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_calls(
        &self,
        key: &str,
        share: Option<(&str, Duration)>,
        per_second: f64,
        burst: u32,
        calls: u32,
        max_wait: Duration,
        now_ms: Option<u64>,
    ) -> Result<Slot, CounterError> {
        let interval_ms = u64::try_from(Self::interval(per_second).as_millis()).unwrap_or(u64::MAX);
        let tolerance_ms = interval_ms.saturating_mul(u64::from(burst.max(1) - 1));
        let base = format!("{}:{{rl:{}}}", self.namespace, key);
        let mut script = RESERVE.key(&base);
        script
            .arg(now_arg(now_ms))
            .arg(interval_ms)
            .arg(tolerance_ms)
            .arg(u64::try_from(max_wait.as_millis()).unwrap_or(u64::MAX));
        if let Some((project, grace)) = share {
            let project = key_part(project);
            script
                .key(format!("{base}:p:{project}"))
                .key(format!("{base}:active"))
                .arg(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX))
                .arg(project);
        }
        // the last argument after the ones above (ARGV[5] alone, ARGV[7] shared)
        script.arg(calls.max(1));
        let (reserved, wait_ms): (i64, i64) = script.invoke_async(&mut self.redis.clone()).await?;
        let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0));
        Ok(if reserved == 1 {
            Slot::Reserved(wait)
        } else {
            Slot::Later(wait)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::script_io::key_part;

    #[test]
    fn share_members_are_bounded_and_plain() {
        let table = [
            ("5e3eef0679fa3700a0198a49", "5e3eef0679fa3700a0198a49"),
            ("a}b{c:d", "abcd"),
            ("", ""),
        ];
        for (id, want) in table {
            assert_eq!(key_part(id), want);
        }
        assert_eq!(key_part(&"x".repeat(1000)).len(), 64);
    }
}
