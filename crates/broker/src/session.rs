//! [`Session`]: a connection, its publisher and the topology declared, as every Klaxon loop opens it; and the
//! jittered [`backoff`] those loops wait between sessions after a failure.

use std::time::Duration;

use crate::{Broker, BrokerError, Publisher, Topology};

/// A session with RabbitMQ as every Klaxon loop opens it: a connection of its own named after its role
/// ([`Broker::connect_as`]), a publisher in confirm mode, and the topology declared. The worker, the digest
/// flusher and each sender own their session and open a new one to reconnect after a failure (the engine's
/// `supervise`); the HTTP API keeps one for all its requests.
pub struct Session {
    /// The connection (more channels for consumers and one-off operations).
    pub broker: Broker,
    /// The confirm-mode channel the topology was declared on.
    pub publisher: Publisher,
}

impl Session {
    /// Connects as `role` (each connect attempt bounded by `timeout`), opens the publisher and declares
    /// `topology` ([`Publisher::declare`]). A failure after connecting closes the connection.
    pub async fn open(
        url: &str,
        timeout: Duration,
        role: &str,
        topology: &Topology,
    ) -> Result<Session, BrokerError> {
        let broker = Broker::connect_as(url, timeout, role).await?;
        let publisher = match broker.publisher().await {
            Ok(p) => p,
            Err(e) => {
                broker.close().await;
                return Err(e);
            }
        };
        if let Err(e) = publisher.declare(topology).await {
            publisher.close().await;
            broker.close().await;
            return Err(e);
        }
        Ok(Session { broker, publisher })
    }

    /// Closes the publisher's channel, then the connection.
    pub async fn close(&self) {
        self.publisher.close().await;
        self.broker.close().await;
    }
}

/// A jittered, capped exponential backoff for reconnect loops: 0.5 s, 1 s, 2 s … up to `cap`, ±25 %.
pub fn backoff(attempt: u32, cap: Duration) -> Duration {
    use rand::Rng;
    let base = Duration::from_millis(500).saturating_mul(1u32 << attempt.min(16));
    let d = base.min(cap);
    let jitter = rand::rng().random_range(0.75..1.25);
    d.mul_f64(jitter)
}
