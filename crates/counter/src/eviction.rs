//! Redis's `maxmemory-policy`, read from the server or from every primary of a cluster.
//!
//! Klaxon's state in Redis is not a cache: window counters, first-seen marks, sliding-window members, dedup
//! leases and `sent` marks, digest buffers and claims, mutes. Every one of those keys has a TTL, so any policy but
//! `noeviction` (the `volatile-*` ones included) lets Redis delete them under memory pressure, and then windows
//! start again (alerts are late or never sent), first-seen marks vanish (a new error notifies twice), dedup marks
//! vanish (a notification is delivered twice) and digests lose their buffered firings — silently. With
//! `noeviction` a full Redis refuses writes instead: Klaxon's batches fail, are retried, and `/readyz` and the
//! error metrics say so.
//!
//! `CONFIG GET maxmemory-policy` is asked first; where `CONFIG` is refused (managed services rename or forbid it),
//! `INFO memory`'s `maxmemory_policy` field is read instead.

use redis::Value;

use crate::{CounterError, RedisHandle};

/// The only policy under which Redis never deletes Klaxon's keys.
pub const NO_EVICTION: &str = "noeviction";

/// Where the policies were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    /// `CONFIG GET maxmemory-policy`.
    Config,
    /// `INFO memory` (`maxmemory_policy`), because `CONFIG` was refused.
    Info,
}

/// One node's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePolicy {
    /// The primary's address in a cluster; `None` for a single server.
    pub node: Option<String>,
    /// Its `maxmemory-policy`, e.g. `noeviction`, `allkeys-lru`.
    pub policy: String,
}

/// Every primary's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionPolicies {
    /// One entry per node, in the order the nodes answered.
    pub nodes: Vec<NodePolicy>,
    /// How they were read.
    pub source: PolicySource,
}

impl EvictionPolicies {
    /// The nodes whose policy can delete Klaxon's keys (anything but [`NO_EVICTION`]).
    pub fn evicting(&self) -> Vec<&NodePolicy> {
        self.nodes.iter().filter(|n| n.policy != NO_EVICTION).collect()
    }
}

/// Reads `maxmemory-policy` from the server, or from every primary of a cluster. Fails with
/// [`CounterError::Refused`] when neither `CONFIG GET` nor `INFO memory` says it, and with
/// [`CounterError::Unavailable`] when Redis does not answer.
pub async fn eviction_policies(redis: &RedisHandle) -> Result<EvictionPolicies, CounterError> {
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy");
    let replies = redis.on_every_primary(config).await?;
    if let Some(nodes) = all_parsed(&replies, policy_from_config) {
        return Ok(EvictionPolicies {
            nodes,
            source: PolicySource::Config,
        });
    }
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    let replies = redis.on_every_primary(info).await?;
    if let Some(nodes) = all_parsed(&replies, policy_from_info) {
        return Ok(EvictionPolicies {
            nodes,
            source: PolicySource::Info,
        });
    }
    Err(CounterError::BadReply {
        script: "maxmemory-policy",
        detail: "CONFIG GET maxmemory-policy was refused and INFO memory has no maxmemory_policy".into(),
    })
}

/// Each node's policy, or `None` when any node's reply does not say it.
fn all_parsed(
    replies: &[(Option<String>, Value)],
    parse: fn(&Value) -> Option<String>,
) -> Option<Vec<NodePolicy>> {
    if replies.is_empty() {
        return None;
    }
    replies
        .iter()
        .map(|(node, v)| {
            parse(v).map(|policy| NodePolicy {
                node: node.clone(),
                policy,
            })
        })
        .collect()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// `CONFIG GET maxmemory-policy`'s value: `[name, value]` (RESP2) or `{name: value}` (RESP3).
fn policy_from_config(v: &Value) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((c.first()?, c.get(1)?)))
            .collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case("maxmemory-policy")))
        .and_then(|(_, v)| text(v))
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty())
}

/// What one node keeps across a restart (`CONFIG GET appendonly` and `CONFIG GET save`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePersistence {
    /// The primary's address in a cluster; `None` for a single server.
    pub node: Option<String>,
    /// `appendonly yes`: the AOF.
    pub appendonly: bool,
    /// The RDB `save` rules (`3600 1 300 100`), empty for none.
    pub save: String,
}

impl NodePersistence {
    /// Neither an AOF nor an RDB `save` rule: a restart empties the node — the alerts held by quiet hours
    /// (which live only in Redis), open alerts, window counters and dedup marks with it.
    pub fn keeps_nothing(&self) -> bool {
        !self.appendonly && self.save.trim().is_empty()
    }
}

/// Reads `appendonly` and `save` from the server, or from every primary of a cluster. Fails with
/// [`CounterError::BadReply`] when `CONFIG GET` is refused (managed services rename or forbid it: then it cannot
/// be checked from here), and with [`CounterError::Unavailable`] when Redis does not answer.
pub async fn persistence(redis: &RedisHandle) -> Result<Vec<NodePersistence>, CounterError> {
    let get = |name: &str| {
        let mut c = redis::cmd("CONFIG");
        c.arg("GET").arg(name);
        c
    };
    let refused = |name: &'static str| CounterError::BadReply {
        script: name,
        detail: format!("CONFIG GET {name} was refused"),
    };
    let aof = redis.on_every_primary(get("appendonly")).await?;
    let save = redis.on_every_primary(get("save")).await?;
    if aof.is_empty() {
        return Err(refused("appendonly"));
    }
    aof.iter()
        .map(|(node, v)| {
            let appendonly = config_value(v, "appendonly").ok_or_else(|| refused("appendonly"))?;
            let rules = save
                .iter()
                .find(|(n, _)| n == node)
                .and_then(|(_, v)| config_value(v, "save"))
                .ok_or_else(|| refused("save"))?;
            Ok(NodePersistence {
                node: node.clone(),
                appendonly: appendonly.trim().eq_ignore_ascii_case("yes"),
                save: rules.trim().to_owned(),
            })
        })
        .collect()
}

/// The value of `name` in a `CONFIG GET` reply: `[name, value]` (RESP2) or `{name: value}` (RESP3).
fn config_value(v: &Value, name: &str) -> Option<String> {
    let pairs: Vec<(&Value, &Value)> = match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((c.first()?, c.get(1)?)))
            .collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case(name)))
        .and_then(|(_, v)| text(v))
}

/// `INFO memory`'s `maxmemory_policy:<policy>` line.
fn policy_from_info(v: &Value) -> Option<String> {
    text(v)?
        .lines()
        .find_map(|l| l.strip_prefix("maxmemory_policy:"))
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn policies_are_read_from_config_and_info_replies() {
        type Parse = fn(&Value) -> Option<String>;
        let cases: [(Value, Parse, Option<&str>); 7] = [
            (
                Value::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru")]),
                policy_from_config,
                Some("allkeys-lru"),
            ),
            (
                Value::Map(vec![(bulk("maxmemory-policy"), bulk("noeviction"))]),
                policy_from_config,
                Some("noeviction"),
            ),
            // not a CONFIG GET reply (a refusal is a ServerError: neither says a policy)
            (Value::Int(1), policy_from_config, None),
            (Value::Array(vec![]), policy_from_config, None),
            (
                bulk("# Memory\r\nused_memory:1\r\nmaxmemory:0\r\nmaxmemory_policy:volatile-ttl\r\n"),
                policy_from_info,
                Some("volatile-ttl"),
            ),
            (bulk("# Memory\r\nused_memory:1\r\n"), policy_from_info, None),
            (Value::Nil, policy_from_info, None),
        ];
        for (i, (v, parse, want)) in cases.into_iter().enumerate() {
            assert_eq!(parse(&v).as_deref(), want, "case {i}: {v:?}");
        }
    }

    #[test]
    fn one_node_without_an_answer_means_the_policies_are_unknown() {
        let config = Value::Array(vec![bulk("maxmemory-policy"), bulk("allkeys-lru")]);
        let nodes = all_parsed(
            &[
                (Some("a:1".into()), config.clone()),
                (Some("b:2".into()), Value::Nil),
            ],
            policy_from_config,
        );
        assert_eq!(nodes, None);
        let nodes = all_parsed(&[(Some("a:1".into()), config)], policy_from_config).expect("parsed");
        let p = EvictionPolicies {
            nodes,
            source: PolicySource::Config,
        };
        assert_eq!(p.evicting().len(), 1);
        assert_eq!(all_parsed(&[], policy_from_config), None);
    }
}
