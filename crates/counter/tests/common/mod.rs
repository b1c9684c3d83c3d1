//! Runs a test body against single-node Redis and against the 3-master cluster, each in a fresh namespace.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use klaxon_core::{Want, Window};
use klaxon_counter::{Hit, Outcome, RedisHandle, WindowCounter};

/// What a test body gets.
#[derive(Clone)]
pub struct Env {
    pub counter: WindowCounter,
    pub redis: RedisHandle,
    pub ns: String,
    pub topology: &'static str,
}

impl Env {
    /// Runs a command on the node that owns `key`.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut conn = self.redis.clone();
        match cmd.query_async(&mut conn).await {
            Ok(v) => v,
            Err(e) => panic!("[{}] {cmd:?} failed: {e}", self.topology),
        }
    }
}

/// No test body may run longer than this.
const BODY_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `body` on single-node Redis, then on Redis Cluster.
pub async fn on_both<F, Fut>(body: F)
where
    F: Fn(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    for (topology, url) in [
        ("single", klaxon_testkit::redis_url()),
        ("cluster", klaxon_testkit::redis_cluster_url()),
    ] {
        let redis = tokio::time::timeout(Duration::from_secs(15), RedisHandle::connect(&url))
            .await
            .unwrap_or_else(|_| panic!("[{topology}] connect timed out"))
            .unwrap_or_else(|e| {
                panic!("[{topology}] cannot connect ({e}); run scripts/services (or scripts/redis-cluster)")
            });
        assert_eq!(redis.is_cluster(), topology == "cluster");
        let ns = klaxon_testkit::unique_namespace();
        let env = Env {
            counter: WindowCounter::new(redis.clone(), &ns),
            redis,
            ns,
            topology,
        };
        if tokio::time::timeout(BODY_TIMEOUT, body(env)).await.is_err() {
            panic!("[{topology}] test body timed out after {BODY_TIMEOUT:?}");
        }
    }
}

pub fn fixed(threshold: u64, period_ms: u64) -> Want {
    Want::Count {
        threshold,
        period_ms,
        window: Window::Fixed,
    }
}

pub fn sliding(threshold: u64, period_ms: u64) -> Want {
    Want::Count {
        threshold,
        period_ms,
        window: Window::Sliding,
    }
}

pub async fn hit(env: &Env, hit: &Hit, now: i64) -> Outcome {
    match env.counter.hit(hit, Some(now)).await {
        Ok(o) => o,
        Err(e) => panic!("[{}] hit failed: {e}", env.topology),
    }
}

pub fn counted(count: u64) -> Outcome {
    Outcome::Counted { count }
}
