//! [`RedisHandle`]: one cheap-to-clone connection to single-node Redis or Redis Cluster.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
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
