//! [`RedisHandle`]: one cheap-to-clone connection to single-node Redis or Redis Cluster.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::CounterError;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request (a whole pipeline) may take before it fails as transient.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A cheap-to-clone handle to single-node Redis or Redis Cluster, chosen from the URL: a comma-separated list
/// of `redis://` URLs is a cluster (its seed nodes), a single URL is one server.
///
/// Both kinds multiplex every clone onto one connection (per node), reconnect by themselves, and time
/// requests out after 10 s. The handle implements [`redis::aio::ConnectionLike`], so other crates can run
/// their own commands and scripts through it (clone it and pass `&mut clone`). In a cluster, a pipeline must
/// keep to one slot (give its keys one `{hash tag}`).
#[derive(Clone)]
pub struct RedisHandle {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisHandle {
    // The URL may carry a password: say only what kind of server this is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisHandle")
            .field("cluster", &self.is_cluster())
            .finish_non_exhaustive()
    }
}

impl RedisHandle {
    /// Connects to `url`: one `redis://` URL, or a comma-separated list of them for Redis Cluster.
    ///
    /// Fails with [`CounterError::InvalidUrl`] (permanent) when the URL cannot be parsed, and with
    /// [`CounterError::Unavailable`] (transient) when no server answers.
    pub async fn connect(url: &str) -> Result<Self, CounterError> {
        let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        match nodes.as_slice() {
            [] => Err(CounterError::InvalidUrl("no Redis URL given".into())),
            [one] => {
                let client = redis::Client::open(*one).map_err(|e| {
                    CounterError::InvalidUrl(format!("cannot parse the URL ({:?})", e.kind()))
                })?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(3);
                let manager = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(CounterError::from_redis)?;
                Ok(RedisHandle {
                    inner: Inner::Single(manager),
                })
            }
            many => {
                let client = ClusterClientBuilder::new(many.to_vec())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .build()
                    .map_err(|e| {
                        CounterError::InvalidUrl(format!("cannot use the cluster node list ({:?})", e.kind()))
                    })?;
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(CounterError::from_redis)?;
                Ok(RedisHandle {
                    inner: Inner::Cluster(conn),
                })
            }
        }
    }

    /// True when connected to Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// Sends `cmd` to the one server, or to every primary of a cluster (a command like `CONFIG GET` would
    /// otherwise reach one random node). One reply per node: the node's address in a cluster (`None` for a
    /// single server) and its reply, a refusal being `Value::ServerError` there rather than an error.
    pub(crate) async fn on_every_primary(
        &self,
        cmd: redis::Cmd,
    ) -> Result<Vec<(Option<String>, Value)>, redis::RedisError> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        match &self.inner {
            Inner::Single(c) => {
                let mut c = c.clone();
                match cmd.query_async::<Value>(&mut c).await {
                    Ok(v) => Ok(vec![(None, v)]),
                    Err(e) => match redis::ServerError::try_from(e) {
                        Ok(refused) => Ok(vec![(None, Value::ServerError(refused))]),
                        Err(e) => Err(e),
                    },
                }
            }
            Inner::Cluster(c) => {
                let reply = c
                    .clone()
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await?;
                Ok(match reply {
                    Value::Map(pairs) => pairs
                        .into_iter()
                        .map(|(node, v)| {
                            let node = match node {
                                Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                                Value::SimpleString(s) => s,
                                other => format!("{other:?}"),
                            };
                            (Some(node), v)
                        })
                        .collect(),
                    other => vec![(None, other)],
                })
            }
        }
    }

    /// Checks a `--redis-url` value without connecting: one `redis://` (or `rediss://`, `unix://`) URL, or a
    /// comma-separated list of them (Redis Cluster). [`CounterError::InvalidUrl`] names the node (by position)
    /// that cannot be read and never quotes the URL, which may carry a password.
    pub fn check_url(url: &str) -> Result<(), CounterError> {
        let nodes: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if nodes.is_empty() {
            return Err(CounterError::InvalidUrl("no Redis URL given".into()));
        }
        for (i, node) in nodes.iter().enumerate() {
            if let Err(e) = redis::IntoConnectionInfo::into_connection_info(*node) {
                let which = if nodes.len() > 1 {
                    format!("node #{}: ", i + 1)
                } else {
                    String::new()
                };
                // the client's own words, unless they could quote the URL (and its password)
                let said = e.to_string();
                let said = said.trim_end_matches(" - InvalidClientConfig");
                let said = if said.contains('@') || said.contains(node) {
                    "it cannot be parsed"
                } else {
                    said
                };
                return Err(CounterError::InvalidUrl(format!(
                    "{which}{said}; expected redis://[:password@]host:6379/[db], or a comma-separated list of \
                     redis:// node URLs for Redis Cluster"
                )));
            }
        }
        Ok(())
    }

    /// Every key matching `pattern` (a `SCAN … MATCH` glob), from every node that holds keys: the server, or
    /// every master of a cluster (a cluster's `SCAN` is per node). Stops after `limit` keys; SCAN may return a
    /// key twice, so the answer is sorted and deduplicated.
    pub async fn scan_keys(&self, pattern: &str, limit: usize) -> Result<Vec<String>, CounterError> {
        let mut keys = Vec::new();
        match &self.inner {
            Inner::Single(c) => {
                let conn = c.clone();
                scan_loop(pattern, limit, &mut keys, |cmd| {
                    let mut conn = conn.clone();
                    async move { conn.req_packed_command(&cmd).await }
                })
                .await?;
            }
            Inner::Cluster(c) => {
                for (host, port) in cluster_masters(&mut c.clone()).await? {
                    let remaining = limit.saturating_sub(keys.len());
                    if remaining == 0 {
                        break;
                    }
                    let conn = c.clone();
                    scan_loop(pattern, remaining, &mut keys, |cmd| {
                        let mut conn = conn.clone();
                        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        });
                        async move { conn.route_command(cmd, route).await }
                    })
                    .await?;
                }
            }
        }
        keys.sort();
        keys.dedup();
        keys.truncate(limit);
        Ok(keys)
    }

    /// How many nodes [`RedisHandle::scan_keys`] reads: 1, or the number of a cluster's masters.
    pub async fn key_nodes(&self) -> Result<usize, CounterError> {
        match &self.inner {
            Inner::Single(_) => Ok(1),
            Inner::Cluster(c) => Ok(cluster_masters(&mut c.clone()).await?.len()),
        }
    }

    /// Deletes `keys` (`UNLINK`, one key per command, up to 100 per pipeline; in a cluster a pipeline keeps to one
    /// slot); returns how many existed.
    pub async fn unlink(&self, keys: &[String]) -> Result<u64, CounterError> {
        let mut by_slot: std::collections::HashMap<Option<redis::cluster_routing::Slot>, Vec<&String>> =
            std::collections::HashMap::new();
        for k in keys {
            let slot = self
                .is_cluster()
                .then(|| redis::cluster_routing::Slot::for_key(k.as_bytes()));
            by_slot.entry(slot).or_default().push(k);
        }
        let mut conn = self.clone();
        let mut removed = 0u64;
        for keys in by_slot.values() {
            for chunk in keys.chunks(100) {
                let mut pipe = redis::pipe();
                for k in chunk {
                    pipe.cmd("UNLINK").arg(*k);
                }
                let counts: Vec<u64> = pipe.query_async(&mut conn).await?;
                removed += counts.iter().sum::<u64>();
            }
        }
        Ok(removed)
    }
}

/// One node's `SCAN … MATCH pattern COUNT 1000` loop, each step sent by `send`. Bounded: at most `limit` keys
/// and 1,000,000 round trips.
async fn scan_loop<F, Fut>(
    pattern: &str,
    limit: usize,
    out: &mut Vec<String>,
    send: F,
) -> Result<(), CounterError>
where
    F: Fn(Cmd) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<Value>>,
{
    let start = out.len();
    let mut cursor: u64 = 0;
    for _ in 0..1_000_000 {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
        let (next, keys): (u64, Vec<String>) =
            redis::from_redis_value(send(cmd).await?).map_err(|e| CounterError::BadReply {
                script: "SCAN",
                detail: e.to_string(),
            })?;
        out.extend(keys);
        cursor = next;
        if cursor == 0 || out.len() - start >= limit {
            break;
        }
    }
    Ok(())
}

/// The (host, port) of every master of the cluster that serves slots, from `CLUSTER NODES`.
async fn cluster_masters(conn: &mut ClusterConnection) -> Result<Vec<(String, u16)>, CounterError> {
    let reply = conn
        .route_command(
            redis::cmd("CLUSTER").arg("NODES").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    let text: String = redis::from_redis_value(reply).map_err(|e| CounterError::BadReply {
        script: "CLUSTER NODES",
        detail: e.to_string(),
    })?;
    Ok(parse_cluster_masters(&text))
}

/// Masters with slots from `CLUSTER NODES` text: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong>
/// <epoch> <link> <slot>…`.
fn parse_cluster_masters(text: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 9 {
            continue; // no slots: nothing to scan
        }
        let flags: Vec<&str> = f[2].split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|x| *x == "fail" || *x == "noaddr") {
            continue;
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        if let Some((host, port)) = addr.rsplit_once(':') {
            if let Ok(port) = port.parse() {
                out.push((host.trim_matches(['[', ']']).to_owned(), port));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

impl ConnectionLike for RedisHandle {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Single(c) => c.req_packed_command(cmd),
            Inner::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Single(c) => c.get_db(),
            Inner::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_masters_with_slots() {
        let text = "\
07c3 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:7001@17001,node-b master - 0 1 2 connected 5461-10922
292f 127.0.0.1:7003@17003 slave 07c3 0 1 4 connected
e7d1 127.0.0.1:7002@17002 master,fail - 0 1 3 disconnected 10923-16383
aa01 [::1]:7004@17004 master - 0 1 5 connected 16000
bb02 127.0.0.1:7005@17005 master - 0 1 6 connected
";
        assert_eq!(
            parse_cluster_masters(text),
            vec![
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001),
                ("::1".to_owned(), 7004)
            ]
        );
    }

    #[test]
    fn urls_are_checked_without_connecting_and_never_quoted() {
        for ok in ["redis://127.0.0.1:6379/", "redis://a:7000/, redis://b:7001/"] {
            assert!(RedisHandle::check_url(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("::", "expected redis://"),
            ("rediss://:secret@h:6380/2", "TLS"),
            ("", "no Redis URL"),
            ("redis://a:7000/,secret-pw-x", "node #2"),
        ] {
            let e = RedisHandle::check_url(bad).expect_err(bad).to_string();
            assert!(e.contains(says) && !e.contains("secret"), "{bad}: {e}");
        }
    }
}
