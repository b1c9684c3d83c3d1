//! The crate's one error type.

/// Why a counting call failed. Every variant says whether retrying can help ([`CounterError::is_transient`]).
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// Permanent: the Redis URL (or node list) cannot be used. The URL itself is not repeated, since it may
    /// carry a password.
    #[error("invalid Redis URL: {0}")]
    InvalidUrl(String),
    /// Transient: Redis could not be reached, timed out, dropped the connection, is loading, or the cluster is
    /// re-sharding (MOVED/ASK/TRYAGAIN/CLUSTERDOWN). Retry with backoff; the hits were not counted, or a
    /// hit with an event id will be recognised when retried.
    #[error("Redis unavailable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Permanent: Redis refused the call (script error, wrong key type, authentication). Retrying the same
    /// call will fail the same way.
    #[error("Redis refused the call: {0}")]
    Refused(#[source] redis::RedisError),
    /// Permanent: a script answered something this version does not understand (mismatched script/client).
    #[error("unexpected reply from {script}: {detail}")]
    BadReply {
        /// Which script.
        script: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// Permanent: the hit cannot be counted (threshold or period 0); the rule should have been rejected.
    #[error("invalid hit for rule {rule_id}: {reason}")]
    InvalidHit {
        /// The rule of the hit.
        rule_id: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl CounterError {
    /// True when the same call may succeed later (connection trouble, timeouts, cluster changes).
    pub fn is_transient(&self) -> bool {
        matches!(self, CounterError::Unavailable(_))
    }

    /// Sorts a redis error into transient or permanent.
    pub(crate) fn from_redis(e: redis::RedisError) -> Self {
        use redis::{ErrorKind, RetryMethod};
        let permanent = matches!(e.retry_method(), RetryMethod::NoRetry)
            || matches!(e.kind(), ErrorKind::AuthenticationFailed | ErrorKind::Parse);
        if permanent && !e.is_timeout() && !e.is_connection_dropped() {
            CounterError::Refused(e)
        } else {
            CounterError::Unavailable(e)
        }
    }
}

impl From<redis::RedisError> for CounterError {
    fn from(e: redis::RedisError) -> Self {
        CounterError::from_redis(e)
    }
}
