//! [`Clients`]: a process's clients of Redis and MongoDB, each connected once, by whichever part (worker, senders,
//! API) needs it first, and shared by all: one Redis handle and one MongoDB client per process.
//!
//! A client is connected on first use, so a part that can answer without it (the API: 503 while a service is
//! down) never waits for it at start-up, and a part that cannot (the worker) retries the same call until it
//! succeeds. A failed connect leaves nothing behind: the next call tries again.

use std::sync::Arc;

use klaxon_core::RuleDefaults;
use klaxon_counter::{CounterError, RedisHandle};
use klaxon_store::{RuleStore, RulesError};
use tokio::sync::OnceCell;

/// Where the services are, and their clients once connected. Cheap to clone: clones share the clients.
#[derive(Clone)]
pub struct Clients(Arc<Inner>);

struct Inner {
    redis_url: String,
    mongo_url: String,
    mongo_db: String,
    rule_defaults: RuleDefaults,
    redis: OnceCell<RedisHandle>,
    store: OnceCell<RuleStore>,
}

impl Clients {
    /// Clients of the Redis at `redis_url` (a comma-separated list = Redis Cluster) and of the MongoDB database
    /// `mongo_db` at `mongo_url`, whose rule store fills what rules leave unset from `rule_defaults`. Nothing is
    /// connected yet.
    pub fn new(redis_url: &str, mongo_url: &str, mongo_db: &str, rule_defaults: RuleDefaults) -> Self {
        Clients(Arc::new(Inner {
            redis_url: redis_url.to_owned(),
            mongo_url: mongo_url.to_owned(),
            mongo_db: mongo_db.to_owned(),
            rule_defaults,
            redis: OnceCell::new(),
            store: OnceCell::new(),
        }))
    }

    /// The Redis handle (a connection manager: it reconnects by itself after a failure), connected on first use.
    pub async fn redis(&self) -> Result<&RedisHandle, CounterError> {
        self.0
            .redis
            .get_or_try_init(|| RedisHandle::connect(&self.0.redis_url))
            .await
    }

    /// The rule store, the process's one MongoDB client (rules and the delivery trail), connected on first use.
    pub async fn store(&self) -> Result<&RuleStore, RulesError> {
        let c = &self.0;
        c.store
            .get_or_try_init(|| async {
                RuleStore::connect(&c.mongo_url, &c.mongo_db)
                    .await
                    .map(|s| s.with_rule_defaults(c.rule_defaults))
            })
            .await
    }

    /// The rule store if it is connected already (by whoever used [`Clients::store`] first), without connecting.
    pub fn connected_store(&self) -> Option<&RuleStore> {
        self.0.store.get()
    }

    /// The Redis URL (what the clients connect to; Redis pub/sub needs a connection of its own).
    pub fn redis_url(&self) -> &str {
        &self.0.redis_url
    }

    /// The MongoDB URL.
    pub fn mongo_url(&self) -> &str {
        &self.0.mongo_url
    }

    /// The MongoDB database rules are read from.
    pub fn mongo_db(&self) -> &str {
        &self.0.mongo_db
    }
}

impl std::fmt::Debug for Clients {
    // URLs may carry passwords: say only what is connected.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("mongo_db", &self.0.mongo_db)
            .field("redis", &self.0.redis.initialized())
            .field("store", &self.0.store.initialized())
            .finish()
    }
}
