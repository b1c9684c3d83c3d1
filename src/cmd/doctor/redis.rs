//! The **redis** lines: reachable, the version every script needs, cluster or not, and the eviction policy.

use std::time::Duration;

use klaxon_counter::{PolicySource, RedisHandle};

use super::{check, endpoint, Check, Status};

/// The oldest Redis whose commands every script in `lua/` can use (`ZMSCORE` came in 6.2).
pub(super) const REDIS_MIN: (u32, u32) = (6, 2);

/// What one Redis node says in `INFO server`.
struct NodeInfo {
    version: (u32, u32, u32),
    version_text: String,
    mode: String,
}

fn parse_info(text: &str) -> Option<NodeInfo> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let version_text = field("redis_version")?;
    let mut parts = version_text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    Some(NodeInfo {
        version,
        version_text,
        mode: field("redis_mode").unwrap_or_else(|| "standalone".into()),
    })
}

/// Every INFO text in a reply: one for a single node, one per primary (a map) for a cluster.
fn info_texts(v: &redis::Value, out: &mut Vec<String>) {
    match v {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => out.push(s.clone()),
        redis::Value::VerbatimString { text, .. } => out.push(text.clone()),
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, v)| info_texts(v, out)),
        redis::Value::Array(items) => items.iter().for_each(|v| info_texts(v, out)),
        _ => {}
    }
}

pub(super) async fn redis_checks(url: &str, t: Duration) -> (Vec<Check>, Option<RedisHandle>) {
    let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let cluster = nodes.len() > 1;
    let at = nodes.iter().map(|n| endpoint(n)).collect::<Vec<_>>().join(",");
    let handle = match tokio::time::timeout(t, RedisHandle::connect(url)).await {
        Err(_) => {
            return (
                vec![check(
                    Status::Fail,
                    "redis",
                    format!("{at}: no answer within {}", humantime::format_duration(t)),
                )],
                None,
            )
        }
        Ok(Err(e)) => return (vec![check(Status::Fail, "redis", format!("{at}: {e}"))], None),
        Ok(Ok(h)) => h,
    };
    let mut conn = handle.clone();
    let reply = tokio::time::timeout(
        t,
        redis::cmd("INFO")
            .arg("server")
            .query_async::<redis::Value>(&mut conn),
    )
    .await;
    let mut texts = Vec::new();
    match reply {
        Err(_) => {
            return (
                vec![check(
                    Status::Fail,
                    "redis",
                    format!(
                        "{at}: INFO got no answer within {}",
                        humantime::format_duration(t)
                    ),
                )],
                None,
            )
        }
        Ok(Err(e)) => {
            return (
                vec![check(Status::Fail, "redis", format!("{at}: INFO failed: {e}"))],
                None,
            )
        }
        Ok(Ok(v)) => info_texts(&v, &mut texts),
    }
    let infos: Vec<NodeInfo> = texts.iter().filter_map(|t| parse_info(t)).collect();
    let Some(oldest) = infos.iter().min_by_key(|i| i.version) else {
        return (
            vec![check(
                Status::Fail,
                "redis",
                format!("{at}: INFO has no redis_version"),
            )],
            None,
        );
    };
    let new_enough = (oldest.version.0, oldest.version.1) >= REDIS_MIN;
    let need = format!(
        "{}.{} or later needed: ZMSCORE in unique_users.lua",
        REDIS_MIN.0, REDIS_MIN.1
    );
    let mut out = vec![check(
        if new_enough { Status::Ok } else { Status::Fail },
        "redis",
        format!(
            "{at}: Redis {}{}, {} ({need})",
            oldest.version_text,
            if infos.len() > 1 { " (oldest node)" } else { "" },
            oldest.mode
        ),
    )];
    let in_cluster_mode = infos.iter().any(|i| i.mode == "cluster");
    if cluster {
        out.push(check(
            Status::Ok,
            "redis cluster",
            format!(
                "cluster mode detected ({} seed nodes given, {} primaries answered)",
                nodes.len(),
                infos.len()
            ),
        ));
    } else if in_cluster_mode || handle.is_cluster() {
        out.push(check(
            Status::Fail,
            "redis cluster",
            "this node runs in cluster mode but one URL was given: list the cluster's nodes, comma-separated",
        ));
        return (out, None);
    }
    out.push(eviction_check(&handle, &at, t).await);
    out.push(persistence_check(&handle, &at, t).await);
    (out, Some(handle))
}

/// What a Redis that keeps nothing across a restart loses, and the fix.
const PERSISTENCE_FIX: &str =
    "a restart loses the alerts held by quiet hours (they live only in Redis), open alerts, \
     window counters and dedup marks: set `appendonly yes` (or an RDB `save` rule, e.g. `save 60 1000`)";

/// `appendonly` and `save` on the server or on every cluster primary (see [`klaxon_counter::persistence`]): a
/// warning when a node has neither, or when `CONFIG` is refused and it cannot be checked.
async fn persistence_check(handle: &RedisHandle, at: &str, t: Duration) -> Check {
    const NAME: &str = "redis persistence";
    let nodes = match tokio::time::timeout(t, klaxon_counter::persistence(handle)).await {
        Err(_) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                "{at}: AOF/RDB persistence not checked: no answer within {}; without it {PERSISTENCE_FIX}",
                humantime::format_duration(t)
            ),
            )
        }
        Ok(Err(e)) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                "{at}: AOF/RDB persistence could not be checked ({e}; CONFIG is not allowed here?); without \
                     it {PERSISTENCE_FIX}"
            ),
            )
        }
        Ok(Ok(n)) => n,
    };
    let name_of = |node: &Option<String>| node.clone().unwrap_or_else(|| at.to_owned());
    let bare: Vec<_> = nodes.iter().filter(|n| n.keeps_nothing()).collect();
    if bare.is_empty() {
        let what = |n: &klaxon_counter::NodePersistence| match (n.appendonly, n.save.is_empty()) {
            (true, true) => "appendonly yes".to_owned(),
            (true, false) => format!("appendonly yes, save \"{}\"", n.save),
            (false, _) => format!("save \"{}\"", n.save),
        };
        return match nodes.as_slice() {
            [one] => check(Status::Ok, NAME, format!("{}: {}", name_of(&one.node), what(one))),
            all => check(
                Status::Ok,
                NAME,
                format!("{at}: AOF or RDB save rules on all {} primaries", all.len()),
            ),
        };
    }
    let names = bare
        .iter()
        .map(|n| name_of(&n.node))
        .collect::<Vec<_>>()
        .join(", ");
    let of = if nodes.len() > 1 {
        format!(" ({} of {} primaries)", bare.len(), nodes.len())
    } else {
        String::new()
    };
    check(
        Status::Warn,
        NAME,
        format!("{names}{of}: appendonly no and no save rules, Redis keeps nothing across a restart: {PERSISTENCE_FIX}"),
    )
}

/// `maxmemory-policy` on the server or on every cluster primary (see [`klaxon_counter::eviction_policies`]).
async fn eviction_check(handle: &RedisHandle, at: &str, t: Duration) -> Check {
    const NAME: &str = "redis eviction";
    let policies = match tokio::time::timeout(t, klaxon_counter::eviction_policies(handle)).await {
        Err(_) => {
            return check(
                Status::Warn,
                NAME,
                format!(
                    "{at}: maxmemory-policy not checked: no answer within {}; it must be noeviction",
                    humantime::format_duration(t)
                ),
            )
        }
        Ok(Err(e)) => {
            return check(
                Status::Warn,
                NAME,
                format!("{at}: maxmemory-policy could not be checked ({e}); it must be noeviction"),
            )
        }
        Ok(Ok(p)) => p,
    };
    let via = match policies.source {
        PolicySource::Config => "",
        PolicySource::Info => " (read from INFO memory: CONFIG is not allowed here)",
    };
    let evicting = policies.evicting();
    let name_of = |node: &Option<String>| node.clone().unwrap_or_else(|| at.to_owned());
    if evicting.is_empty() {
        let whom = if policies.nodes.len() > 1 {
            format!(
                "{at}: maxmemory-policy noeviction on all {} primaries",
                policies.nodes.len()
            )
        } else {
            format!(
                "{}: maxmemory-policy noeviction",
                policies
                    .nodes
                    .first()
                    .map_or_else(|| at.to_owned(), |n| name_of(&n.node))
            )
        };
        return check(Status::Ok, NAME, format!("{whom}{via}"));
    }
    let nodes = evicting
        .iter()
        .map(|n| format!("{}: maxmemory-policy {}", name_of(&n.node), n.policy))
        .collect::<Vec<_>>()
        .join(", ");
    let of = if policies.nodes.len() > 1 {
        format!(" ({} of {} primaries)", evicting.len(), policies.nodes.len())
    } else {
        String::new()
    };
    check(
        Status::Warn,
        NAME,
        format!(
            "{nodes}{of}{via}: Redis may evict Klaxon's keys under memory pressure: {}",
            crate::cmd::notices::EVICTION_LOSES
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_gives_version_and_mode() {
        let info = parse_info("# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n").expect("info");
        assert_eq!(info.version, (7, 0, 15));
        assert_eq!(info.mode, "cluster");
        assert!((info.version.0, info.version.1) >= REDIS_MIN);
        let old = parse_info("redis_version:6.0.9\n").expect("info");
        assert!((old.version.0, old.version.1) < REDIS_MIN);
        assert_eq!(old.mode, "standalone");
        assert!(parse_info("nothing").is_none());
    }
}
