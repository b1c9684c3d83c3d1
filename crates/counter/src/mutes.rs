//! Mutes in Redis: one hash per project, `<ns>:mutes:{<project>}`, field = mute id, value = the
//! [`Mute`] as JSON. Expired mutes are ignored when read and removed when the project's mutes are listed or
//! changed; the key itself expires with its last mute (`PEXPIREAT … NX` then `GT`), so nothing outlives them.

use std::collections::HashMap;

use klaxon_core::mute::Mute;
use redis::AsyncCommands;

use crate::{CounterError, RedisHandle};

/// The mutes of every project of a namespace. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Mutes {
    redis: RedisHandle,
    namespace: String,
}

impl Mutes {
    /// Mutes under `<namespace>:mutes:`.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Mutes {
            redis,
            namespace: namespace.to_owned(),
        }
    }

    fn key(&self, project_id: &str) -> String {
        format!("{}:mutes:{{{}}}", self.namespace, project_id.to_ascii_lowercase())
    }

    /// Stores a mute; the project's key lives at least until it ends.
    pub async fn add(&self, project_id: &str, mute: &Mute) -> Result<(), CounterError> {
        let key = self.key(project_id);
        let value = serde_json::to_string(mute).map_err(|e| CounterError::BadReply {
            script: "mutes",
            detail: e.to_string(),
        })?;
        redis::pipe()
            .atomic()
            .hset(&key, &mute.mute_id, value)
            .ignore()
            .cmd("PEXPIREAT")
            .arg(&key)
            .arg(mute.until_ms)
            .arg("NX")
            .ignore()
            .cmd("PEXPIREAT")
            .arg(&key)
            .arg(mute.until_ms)
            .arg("GT")
            .ignore()
            .query_async::<()>(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// The project's mutes still active at `now_ms`; expired ones are deleted.
    pub async fn list(&self, project_id: &str, now_ms: i64) -> Result<Vec<Mute>, CounterError> {
        let key = self.key(project_id);
        let all: HashMap<String, String> = self.redis.clone().hgetall(&key).await?;
        let (active, expired): (Vec<(String, Option<Mute>)>, Vec<_>) = all
            .into_iter()
            .map(|(id, v)| (id, serde_json::from_str::<Mute>(&v).ok()))
            .partition(|(_, m)| m.as_ref().is_some_and(|m| m.until_ms > now_ms));
        if !expired.is_empty() {
            let ids: Vec<String> = expired.into_iter().map(|(id, _)| id).collect();
            let _: i64 = self.redis.clone().hdel(&key, ids).await?;
        }
        let mut out: Vec<Mute> = active.into_iter().filter_map(|(_, m)| m).collect();
        out.sort_by(|a, b| a.until_ms.cmp(&b.until_ms).then(a.mute_id.cmp(&b.mute_id)));
        Ok(out)
    }

    /// Removes a mute; false when it did not exist.
    pub async fn remove(&self, project_id: &str, mute_id: &str) -> Result<bool, CounterError> {
        let n: i64 = self.redis.clone().hdel(self.key(project_id), mute_id).await?;
        Ok(n > 0)
    }

    /// The stored mutes of several projects (expired ones included; [`Mute::matches`] checks the time), in
    /// one round trip on a single Redis (one per project, concurrently, in a cluster).
    pub async fn of_projects(&self, projects: &[&str]) -> Result<HashMap<String, Vec<Mute>>, CounterError> {
        let parse = |all: HashMap<String, String>| -> Vec<Mute> {
            all.values()
                .filter_map(|v| serde_json::from_str(v).ok())
                .collect()
        };
        let mut out = HashMap::new();
        if projects.is_empty() {
            return Ok(out);
        }
        if self.redis.is_cluster() {
            let asks = projects.iter().map(|p| {
                let mut conn = self.redis.clone();
                let key = self.key(p);
                async move { conn.hgetall::<_, HashMap<String, String>>(key).await }
            });
            for (p, r) in projects.iter().zip(futures_util::future::join_all(asks).await) {
                out.insert((*p).to_owned(), parse(r?));
            }
        } else {
            let mut pipe = redis::pipe();
            for p in projects {
                pipe.hgetall(self.key(p));
            }
            let all: Vec<HashMap<String, String>> = pipe.query_async(&mut self.redis.clone()).await?;
            for (p, m) in projects.iter().zip(all) {
                out.insert((*p).to_owned(), parse(m));
            }
        }
        Ok(out)
    }
}
