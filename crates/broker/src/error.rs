//! [`BrokerError`], the broker crate's one error enum, and the small helpers that turn lapin's errors into it
//! (`amqp(op)`, the reply code of a refused operation).

/// Errors from the broker. Connection-level problems are transient: reconnect and try again.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Connecting, a channel, or an operation failed (transient: reconnect).
    #[error("RabbitMQ {op} failed: {source}")]
    Amqp {
        /// What was being done.
        op: &'static str,
        /// The client's error.
        #[source]
        source: lapin::Error,
    },
    /// The broker refused (nacked) a published message (transient: publish again).
    #[error("RabbitMQ did not confirm a message published to `{queue}`")]
    Nacked {
        /// Target queue.
        queue: String,
    },
    /// A message published to `queue` was returned as unroutable: the queue does not exist (deleted by
    /// hand?). Transient: the next session declares its queues again; the message was not lost, since the
    /// publish reports failure and its source is not acked.
    #[error("RabbitMQ returned a message published to `{queue}` as unroutable (does the queue exist?)")]
    Unroutable {
        /// Target queue.
        queue: String,
    },
    /// A queue that must exist does not (deleted by hand?). Transient: the next session declares its queues
    /// again.
    #[error("RabbitMQ has no queue `{queue}` (was it deleted?)")]
    NoQueue {
        /// The queue.
        queue: String,
    },
    /// The AMQP URL (or one node of a comma-separated list) cannot be parsed (permanent: fix the flag). The
    /// URL itself is not repeated, since it may carry a password.
    #[error("invalid AMQP URL: {0}")]
    InvalidUrl(String),
    /// The broker does not know the shard exchange's type `x-consistent-hash`: the
    /// `rabbitmq_consistent_hash_exchange` plugin is not enabled (`--events-shards` > 1). Transient: once an
    /// operator enables the plugin, the next session declares the exchange.
    #[error(
        "RabbitMQ cannot declare exchange `{exchange}` of type x-consistent-hash ({source}): enable the plugin \
         (rabbitmq-plugins enable rabbitmq_consistent_hash_exchange) on every node, or set --events-shards 1"
    )]
    NoExchangeType {
        /// The shard exchange.
        exchange: String,
        /// The broker's error.
        #[source]
        source: lapin::Error,
    },
    /// A queue exists with other arguments (permanent until an operator fixes it).
    #[error(
        "queue `{queue}` exists with different settings ({source}); delete it or use the queue type it was made with"
    )]
    Incompatible {
        /// The queue.
        queue: String,
        /// The broker's error.
        #[source]
        source: lapin::Error,
    },
}

impl BrokerError {
    /// True when retrying (after reconnecting) may succeed.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self,
            BrokerError::Incompatible { .. } | BrokerError::InvalidUrl(_)
        )
    }
}

/// Wraps a lapin error from `op` as [`BrokerError::Amqp`].
pub(crate) fn amqp(op: &'static str) -> impl FnOnce(lapin::Error) -> BrokerError {
    move |source| BrokerError::Amqp { op, source }
}

/// The AMQP reply code of a channel error, when `e` is one (404 NOT_FOUND, 406 PRECONDITION_FAILED, …).
pub(crate) fn reply_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// 406 PRECONDITION_FAILED: e.g. `inequivalent arg 'x-queue-type'`.
pub(crate) const PRECONDITION_FAILED: u16 = 406;
/// 404 NOT_FOUND: e.g. a passive declare of a missing queue.
pub(crate) const NOT_FOUND: u16 = 404;

/// The `op` of a failed passive declare in [`BrokerError::Amqp`] (see [`Broker::queue_depth`](crate::Broker::queue_depth)).
pub const QUEUE_DECLARE_PASSIVE: &str = "queue.declare (passive)";

/// A lapin I/O error of kind `kind` (a connect that timed out, or no URL at all).
pub(crate) fn io_error(kind: std::io::ErrorKind, what: &'static str) -> lapin::Error {
    lapin::Error::from(lapin::ErrorKind::IOError(std::sync::Arc::new(
        std::io::Error::new(kind, what),
    )))
}
