//! Fleet-wide rule invalidation over Redis pub/sub: after a process stores a project's rules (the API, the
//! console) it [`publish`]es the project id on the channel `<ns>:rules:invalidate`; every worker
//! [`subscribe`]s and drops that project from its [`RuleCache`], so an edit is used within a second instead of
//! after `--rules-ttl` (which stays as the safety net for a missed message).
//!
//! ```text
//!  PUT rules ──▶ RuleStore::replace ──▶ publish(<ns>:rules:invalidate, projectId) ──▶ Redis (any node relays)
//!                                                                                        │
//!  every worker: subscribe ──▶ RuleCache::invalidate(projectId)   (after a reconnect: invalidate_all) ◀──┘
//! ```
//!
//! The change stream of [`RuleCache::start_invalidation`] does the same where MongoDB offers one; this path
//! works on every server Klaxon supports, and a write made through Klaxon is the one that has to show at once.

use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::RuleCache;

/// Longest wait between two attempts to (re)subscribe.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The pub/sub channel of a namespace.
pub fn channel(namespace: &str) -> String {
    format!("{namespace}:rules:invalidate")
}

/// Publishes that `project_id`'s rules changed, on any Redis connection (a cluster handle too: in Redis
/// Cluster, PUBLISH reaches subscribers on every node).
pub async fn publish(
    redis: &mut impl redis::aio::ConnectionLike,
    namespace: &str,
    project_id: &str,
) -> Result<(), redis::RedisError> {
    redis::cmd("PUBLISH")
        .arg(channel(namespace))
        .arg(project_id)
        .query_async::<i64>(redis)
        .await
        .map(|_| ())
}

/// Subscribes to the invalidation channel until `shutdown`, reconnecting with a jittered, capped backoff.
/// After every (re)subscription the whole cache is marked stale, since messages sent while disconnected are
/// lost. `redis_url` is `--redis-url` as given (a comma-separated list for a cluster: any node relays every
/// PUBLISH, so the first is enough).
pub async fn subscribe(redis_url: String, namespace: String, cache: RuleCache, shutdown: CancellationToken) {
    let url = redis_url
        .split(',')
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or_default()
        .to_owned();
    let chan = channel(&namespace);
    let mut attempt = 0u32;
    while !shutdown.is_cancelled() {
        match listen(&url, &chan, &cache, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                let wait = backoff(attempt);
                attempt = attempt.saturating_add(1);
                tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "rule invalidation subscription lost; rules refresh on their TTL meanwhile");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// 0.5 s doubling per attempt up to [`MAX_BACKOFF`], ±25 % jitter (the broker's reconnect schedule), so a
/// fleet that lost Redis together does not come back in lockstep.
fn backoff(attempt: u32) -> Duration {
    let base = Duration::from_millis(500).saturating_mul(1u32 << attempt.min(16));
    base.min(MAX_BACKOFF)
        .mul_f64(rand::rng().random_range(0.75..1.25))
}

/// One subscription: `Ok` on shutdown, `Err` when the connection fails or ends.
async fn listen(
    url: &str,
    chan: &str,
    cache: &RuleCache,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let client =
        redis::Client::open(url).map_err(|e| format!("cannot parse the Redis URL ({:?})", e.kind()))?;
    let mut pubsub = tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub())
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    pubsub.subscribe(chan).await.map_err(|e| e.to_string())?;
    tracing::info!(channel = chan, "subscribed to rule invalidations");
    cache.invalidate_all();
    let mut messages = pubsub.on_message();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            m = messages.next() => match m {
                Some(msg) => {
                    let project: String = msg.get_payload().unwrap_or_default();
                    tracing::debug!(project_id = %project, "rules invalidated");
                    cache.invalidate(project.trim());
                }
                None => return Err("the subscription ended".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter() {
        for (attempt, base_ms) in [
            (0, 500),
            (1, 1_000),
            (3, 4_000),
            (4, 8_000),
            (5, 10_000),
            (40, 10_000),
        ] {
            let d = backoff(attempt).as_millis() as u64;
            assert!(
                (base_ms * 3 / 4..=base_ms * 5 / 4).contains(&d),
                "attempt {attempt}: {d} ms"
            );
        }
        assert_eq!(channel("ns"), "ns:rules:invalidate");
    }
}
