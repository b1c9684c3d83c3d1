//! Fleet-wide rule invalidation: after the API stores a project's rules it publishes the project id on the
//! Redis channel `<ns>:rules:invalidate`; every worker subscribes and drops that project from its
//! [`RuleCache`], so an edit is used within a second instead of after `--rules-ttl` (which stays as the
//! safety net for a missed message).

use std::time::Duration;

use futures_util::StreamExt;
use klaxon_counter::RedisHandle;
use klaxon_rules::RuleCache;
use tokio_util::sync::CancellationToken;

/// The pub/sub channel of a namespace.
pub fn channel(namespace: &str) -> String {
    format!("{namespace}:rules:invalidate")
}

/// Publishes that `project_id`'s rules changed. In Redis Cluster, PUBLISH reaches subscribers on every node.
pub async fn publish(
    mut redis: RedisHandle,
    namespace: &str,
    project_id: &str,
) -> Result<(), redis::RedisError> {
    redis::cmd("PUBLISH")
        .arg(channel(namespace))
        .arg(project_id)
        .query_async::<i64>(&mut redis)
        .await
        .map(|_| ())
}

/// Subscribes to the invalidation channel until `shutdown`, reconnecting with a capped backoff. After every
/// (re)subscription the whole cache is marked stale, since messages sent while disconnected are lost.
pub async fn subscribe(redis_url: String, namespace: String, cache: RuleCache, shutdown: CancellationToken) {
    // Any node of a cluster relays every PUBLISH, so the first URL is enough.
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
                let wait = klaxon_broker::backoff(attempt, Duration::from_secs(10));
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
