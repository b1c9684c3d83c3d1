//! Mutes in Redis: one hash per project, `<ns>:mutes:{<project>}`, field = mute id, value = the
//! [`Mute`] as JSON. Expired mutes are ignored when read and removed when the project's mutes are listed or
//! changed; the key itself expires with its last mute (`PEXPIREAT … NX` then `GT`), so nothing outlives them.
//!
//! Bounded both ways (`--max-mutes-per-project`, [`Mutes::with_limit`]): `lua/mute_add.lua` refuses a mute
//! when the project already has the limit of active ones (check and write in one step), and
//! `lua/mutes_read.lua` never reads more than the limit of a project, whatever is stored (mutes written
//! before the limit, or by a process with a higher one): the excess is counted ([`ReadMutes::unread`]), not
//! read.
//!
//! A mute made by an action link records the link's use in the same script (`<ns>:link-used:{<project>}:<mute
//! id>`, expiring with the link; [`Mutes::add_once`]): a link mutes once, and confirming it again after its mute
//! was undone or deleted does nothing ([`Added::Used`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use klaxon_core::limits::DEFAULT_MAX_MUTES;
use klaxon_core::mute::Mute;
use redis::{AsyncCommands, Script, Value};

use crate::script_io::{bad, int, now_arg, text};
use crate::{CounterError, RedisHandle};

static ADD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/mute_add.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/mutes_read.lua")));

/// Bound on the projects remembered as "already reported over the limit" (cleared past it).
const MAX_REPORTED: usize = 10_000;

/// The mutes of every project of a namespace. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Mutes {
    redis: RedisHandle,
    namespace: String,
    limit: usize,
    reported: Arc<Mutex<HashSet<(String, u64)>>>,
}

/// The answer to [`Mutes::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Stored; the project now has `active` stored mutes.
    Stored {
        /// Stored mutes of the project, this one included.
        active: u64,
    },
    /// Refused: the project already has `active` active mutes, the limit.
    Full {
        /// Active mutes of the project.
        active: u64,
    },
    /// Refused: the action link was used already ([`Mutes::add_once`]); nothing was written.
    Used {
        /// When it was used, unix ms.
        at_ms: i64,
    },
}

/// One project's mutes as read: at most the limit of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadMutes {
    /// The mutes read (expired ones included by [`Mutes::of_projects`]; [`Mute::matches`] checks the time).
    pub mutes: Vec<Mute>,
    /// Stored mutes not read because the project is over the limit.
    pub unread: u64,
}

impl Mutes {
    /// Mutes under `<namespace>:mutes:`, at most [`DEFAULT_MAX_MUTES`] per project.
    pub fn new(redis: RedisHandle, namespace: &str) -> Self {
        Mutes {
            redis,
            namespace: namespace.to_owned(),
            limit: DEFAULT_MAX_MUTES,
            reported: Arc::default(),
        }
    }

    /// At most `limit` active mutes per project (`--max-mutes-per-project`, ≥ 1): more are refused by
    /// [`Mutes::add`] and never read.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }

    /// The most active mutes a project may have.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn key(&self, project_id: &str) -> String {
        format!("{}:mutes:{{{}}}", self.namespace, project_id.to_ascii_lowercase())
    }

    /// Stores a mute unless the project already has [`Mutes::limit`] active ones (expired ones do not count:
    /// they are removed first); the project's key lives at least until the mute ends. `now_ms`: the clock the
    /// mute was made on (`None`: Redis `TIME`).
    pub async fn add(
        &self,
        project_id: &str,
        mute: &Mute,
        now_ms: Option<i64>,
    ) -> Result<Added, CounterError> {
        self.store(project_id, mute, now_ms, None).await
    }

    /// [`Mutes::add`] for an action link whose mute is `mute` (its id derived from the link): stored only when
    /// the link was never used, and the use is recorded in the same step, until `link_expires_ms`. A link used
    /// before answers [`Added::Used`], also after its mute was undone or deleted; a refused mute
    /// ([`Added::Full`]) does not use the link.
    pub async fn add_once(
        &self,
        project_id: &str,
        mute: &Mute,
        now_ms: Option<i64>,
        link_expires_ms: i64,
    ) -> Result<Added, CounterError> {
        self.store(project_id, mute, now_ms, Some(link_expires_ms)).await
    }

    /// When the action link whose mute id is `mute_id` was used (unix ms), if it was.
    pub async fn link_used(&self, project_id: &str, mute_id: &str) -> Result<Option<i64>, CounterError> {
        let used: Option<i64> = self.redis.clone().get(self.link_key(project_id, mute_id)).await?;
        Ok(used)
    }

    fn link_key(&self, project_id: &str, mute_id: &str) -> String {
        format!(
            "{}:link-used:{{{}}}:{mute_id}",
            self.namespace,
            project_id.to_ascii_lowercase()
        )
    }

    async fn store(
        &self,
        project_id: &str,
        mute: &Mute,
        now_ms: Option<i64>,
        link_expires_ms: Option<i64>,
    ) -> Result<Added, CounterError> {
        const SCRIPT: &str = "mute_add.lua";
        let value = serde_json::to_string(mute).map_err(|e| bad(SCRIPT, e.to_string()))?;
        let mut call = ADD.key(self.key(project_id));
        if link_expires_ms.is_some() {
            // same `{project}` hash tag: one slot in a cluster
            call.key(self.link_key(project_id, &mute.mute_id));
        }
        call.arg(now_arg(now_ms))
            .arg(&mute.mute_id)
            .arg(value)
            .arg(mute.until_ms)
            .arg(self.limit);
        if let Some(expires) = link_expires_ms {
            call.arg(expires);
        }
        let reply: Value = call.invoke_async(&mut self.redis.clone()).await?;
        let Value::Array(items) = &reply else {
            return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
        };
        match items.as_slice() {
            [stored, active] => {
                let active = u64::try_from(int(active, SCRIPT)?).unwrap_or(0);
                Ok(match int(stored, SCRIPT)? {
                    1 => Added::Stored { active },
                    _ => Added::Full { active },
                })
            }
            [_, _, at] => Ok(Added::Used {
                at_ms: int(at, SCRIPT)?,
            }),
            _ => Err(bad(SCRIPT, format!("expected 2 or 3 items, got {}", items.len()))),
        }
    }

    /// The project's mutes still active at `now_ms` (at most [`Mutes::limit`] of them: [`ReadMutes::unread`]
    /// says how many more are stored); expired ones among those read are deleted.
    pub async fn list(&self, project_id: &str, now_ms: i64) -> Result<ReadMutes, CounterError> {
        let key = self.key(project_id);
        let mut read = self.read(std::slice::from_ref(&key)).await?;
        let (fields, unread) = read.pop().unwrap_or_default();
        let (active, expired): (Vec<(String, Option<Mute>)>, Vec<_>) = fields
            .into_iter()
            .map(|(id, v)| (id, serde_json::from_str::<Mute>(&v).ok()))
            .partition(|(_, m)| m.as_ref().is_some_and(|m| m.until_ms > now_ms));
        if !expired.is_empty() {
            let ids: Vec<String> = expired.into_iter().map(|(id, _)| id).collect();
            let _: i64 = self.redis.clone().hdel(&key, ids).await?;
        }
        let mut mutes: Vec<Mute> = active.into_iter().filter_map(|(_, m)| m).collect();
        mutes.sort_by(|a, b| a.until_ms.cmp(&b.until_ms).then(a.mute_id.cmp(&b.mute_id)));
        // What was not read may be expired too: it is counted as unread, not as active.
        Ok(ReadMutes { mutes, unread })
    }

    /// Removes a mute; false when it did not exist.
    pub async fn remove(&self, project_id: &str, mute_id: &str) -> Result<bool, CounterError> {
        let n: i64 = self.redis.clone().hdel(self.key(project_id), mute_id).await?;
        Ok(n > 0)
    }

    /// The stored mutes of several projects (expired ones included; [`Mute::matches`] checks the time), at
    /// most [`Mutes::limit`] per project, in one round trip on a single Redis (one per project, concurrently,
    /// in a cluster). A project over the limit has [`ReadMutes::unread`] > 0: those mutes are not applied.
    pub async fn of_projects(&self, projects: &[&str]) -> Result<HashMap<String, ReadMutes>, CounterError> {
        let mut out = HashMap::new();
        if projects.is_empty() {
            return Ok(out);
        }
        let keys: Vec<String> = projects.iter().map(|p| self.key(p)).collect();
        let read = self.read(&keys).await?;
        for (p, (fields, unread)) in projects.iter().zip(read) {
            let mutes = fields
                .into_iter()
                .filter_map(|(_, v)| serde_json::from_str(&v).ok())
                .collect();
            out.insert((*p).to_owned(), ReadMutes { mutes, unread });
        }
        Ok(out)
    }

    /// True the first time a project is seen over the limit with `unread` unread mutes (by this handle and
    /// its clones): the reader says so once, not on every batch.
    pub fn first_report(&self, project_id: &str, unread: u64) -> bool {
        self.reported.lock().is_ok_and(|mut seen| {
            if seen.len() > MAX_REPORTED {
                seen.clear();
            }
            seen.insert((project_id.to_owned(), unread))
        })
    }

    /// Reads each key through `lua/mutes_read.lua`: the (field, value) pairs read and how many stored ones
    /// were not, per key, in order.
    async fn read(&self, keys: &[String]) -> Result<Vec<(Vec<(String, String)>, u64)>, CounterError> {
        let replies: Vec<Value> = if self.redis.is_cluster() || keys.len() == 1 {
            // One slot per call in a cluster: one key each, concurrently.
            let asks = keys.iter().map(|key| {
                let mut conn = self.redis.clone();
                let mut call = READ.key(key);
                call.arg(self.limit);
                async move {
                    let reply: Value = call.invoke_async(&mut conn).await?;
                    match reply {
                        Value::Array(mut items) if items.len() == 1 => Ok(items.remove(0)),
                        other => Err(bad(
                            "mutes_read.lua",
                            format!("expected one reply, got {other:?}"),
                        )),
                    }
                }
            });
            futures_util::future::join_all(asks)
                .await
                .into_iter()
                .collect::<Result<_, CounterError>>()?
        } else {
            let mut call = READ.prepare_invoke();
            for key in keys {
                call.key(key);
            }
            call.arg(self.limit);
            match call.invoke_async(&mut self.redis.clone()).await? {
                Value::Array(items) if items.len() == keys.len() => items,
                other => {
                    return Err(bad(
                        "mutes_read.lua",
                        format!("expected {} replies, got {other:?}", keys.len()),
                    ))
                }
            }
        };
        replies.iter().map(decode_read).collect()
    }
}

/// One key's reply of `mutes_read.lua`: `{stored, field, value, …}`. A field read twice (HSCAN may repeat one)
/// is kept once.
fn decode_read(reply: &Value) -> Result<(Vec<(String, String)>, u64), CounterError> {
    const SCRIPT: &str = "mutes_read.lua";
    let Value::Array(items) = reply else {
        return Err(bad(SCRIPT, format!("expected an array, got {reply:?}")));
    };
    let Some((stored, pairs)) = items.split_first() else {
        return Err(bad(SCRIPT, "empty reply"));
    };
    let stored = u64::try_from(int(stored, SCRIPT)?).unwrap_or(0);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        let [field, value] = pair else {
            return Err(bad(SCRIPT, "a field without its value"));
        };
        let field = text(field, SCRIPT)?;
        if seen.insert(field.clone()) {
            out.push((field, text(value, SCRIPT)?));
        }
    }
    let unread = stored.saturating_sub(out.len() as u64);
    Ok((out, unread))
}
