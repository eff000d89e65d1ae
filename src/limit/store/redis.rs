//! Redis and Redis Cluster stores. One decision is one `EVALSHA` round trip
//! on a multiplexed connection (concurrent requests pipeline on it). When
//! Redis answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`), the same
//! call is sent once as `EVAL`, which runs it and caches the script on the
//! node that owns the keys — on a cluster that is the right node by
//! construction, with `MOVED`/`ASK` followed by the client.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use super::{Store, StoreError};
use crate::limit::bucket::{BucketState, Spend};

pub const TOKEN_BUCKET_LUA: &str = include_str!("../../../lua/token_bucket.lua");
pub const SLOTS_LUA: &str = include_str!("../../../lua/slots.lua");

/// A Lua script and its SHA1.
pub struct Script {
    pub source: &'static str,
    pub sha: String,
}

impl Script {
    pub fn new(source: &'static str) -> Self {
        Script {
            source,
            sha: redis::Script::new(source).get_hash().to_string(),
        }
    }

    fn call<A: redis::ToRedisArgs + Sync>(&self, by_sha: bool, keys: &[&str], args: &[A]) -> Cmd {
        let mut cmd = if by_sha {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.sha);
            c
        } else {
            let mut c = redis::cmd("EVAL");
            c.arg(self.source);
            c
        };
        cmd.arg(keys.len()).arg(keys).arg(args);
        cmd
    }
}

/// The shared connection is made on first use and dropped by `probe` when
/// it stops answering, so a connection stuck in a bad state (e.g. a failed
/// AUTH it will not retry) is replaced rather than waited on.
enum Conn {
    Single {
        client: redis::Client,
        manager: ArcSwapOption<ConnectionManager>,
        timeout: Duration,
    },
    Cluster(Arc<ClusterConn>),
}

/// The shared cluster connection and the one attempt at making it. The
/// attempt runs as its own task (spawned from a request, so on the proxy's
/// runtime): a request that stops waiting at `store.timeout` does not cancel
/// it, and concurrent requests wait for the same attempt instead of each
/// connecting to every node.
struct ClusterConn {
    client: redis::cluster::ClusterClient,
    conn: ArcSwapOption<ClusterConnection>,
    connecting: std::sync::atomic::AtomicBool,
    made: tokio::sync::Notify,
}

impl ClusterConn {
    async fn get(self: &Arc<Self>) -> Result<ClusterConnection, RedisError> {
        use std::sync::atomic::Ordering;
        loop {
            let made = self.made.notified();
            if let Some(c) = self.conn.load_full() {
                return Ok((*c).clone());
            }
            if !self.connecting.swap(true, Ordering::AcqRel) {
                let this = self.clone();
                tokio::spawn(async move {
                    match this.client.get_async_connection().await {
                        Ok(c) => this.conn.store(Some(Arc::new(c))),
                        Err(e) => tracing::debug!(error = %e, "store.cluster_connect_failed"),
                    }
                    this.connecting.store(false, Ordering::Release);
                    this.made.notify_waiters();
                });
            }
            made.await;
            if self.conn.load().is_none() {
                return Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "cannot connect to the Redis Cluster",
                )));
            }
        }
    }
}

pub struct RedisStore {
    conn: Conn,
    /// `keys::probe`: inside the configured namespace, so
    /// a Redis ACL limited to the prefix allows it.
    probe_key: String,
    bucket: Script,
    slots: Script,
}

fn classify(e: RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        StoreError::Unreachable(e.to_string())
    } else {
        StoreError::Failed(e.to_string())
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl RedisStore {
    /// A single server. Connects lazily, so the gateway starts with Redis down.
    pub fn single(
        url: &str,
        password: Option<String>,
        timeout: Duration,
        prefix: &str,
    ) -> Result<Self, String> {
        let mut info: redis::ConnectionInfo = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| format!("store.url: {e}"))?;
        if let Some(p) = password {
            let settings = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info).map_err(|e| format!("store.url: {e}"))?;
        Ok(RedisStore {
            conn: Conn::Single {
                client,
                manager: ArcSwapOption::empty(),
                timeout,
            },
            probe_key: crate::limit::keys::probe(prefix),
            bucket: Script::new(TOKEN_BUCKET_LUA),
            slots: Script::new(SLOTS_LUA),
        })
    }

    pub fn cluster(
        nodes: &[String],
        password: Option<String>,
        timeout: Duration,
        prefix: &str,
    ) -> Result<Self, String> {
        let mut builder = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .connection_timeout(timeout.max(Duration::from_millis(100)))
            .response_timeout(timeout.max(Duration::from_millis(100)));
        if let Some(p) = password {
            builder = builder.password(p);
        }
        let client = builder.build().map_err(|e| format!("store.nodes: {e}"))?;
        Ok(RedisStore {
            conn: Conn::Cluster(Arc::new(ClusterConn {
                client,
                conn: ArcSwapOption::empty(),
                connecting: Default::default(),
                made: tokio::sync::Notify::new(),
            })),
            probe_key: crate::limit::keys::probe(prefix),
            bucket: Script::new(TOKEN_BUCKET_LUA),
            slots: Script::new(SLOTS_LUA),
        })
    }

    /// Sends `cmd`, returning the reply.
    async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        match &self.conn {
            Conn::Single {
                client,
                manager,
                timeout,
            } => {
                let mut conn = match manager.load_full() {
                    Some(m) => (*m).clone(),
                    None => {
                        let config = ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(
                                (*timeout).max(Duration::from_millis(100)),
                            ))
                            .set_number_of_retries(1)
                            .set_max_delay(Duration::from_millis(500));
                        let m = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
                        manager.store(Some(Arc::new(m.clone())));
                        m
                    }
                };
                cmd.query_async(&mut conn).await
            }
            Conn::Cluster(cluster) => {
                let mut c = cluster.get().await?;
                cmd.query_async(&mut c).await
            }
        }
    }

    /// Runs a script by SHA, loading it with `EVAL` after `NOSCRIPT`.
    pub async fn run<A: redis::ToRedisArgs + Sync>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[A],
    ) -> Result<Value, StoreError> {
        match self.query(&script.call(true, keys, args)).await {
            Err(e) if is_noscript(&e) => self
                .query(&script.call(false, keys, args))
                .await
                .map_err(classify),
            other => other.map_err(classify),
        }
    }
}

fn integers(value: Value) -> Result<Vec<i64>, StoreError> {
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(n) => Ok(n),
                other => Err(StoreError::Failed(format!(
                    "unexpected reply item {other:?}"
                ))),
            })
            .collect(),
        other => Err(StoreError::Failed(format!("unexpected reply {other:?}"))),
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn spend(&self, spends: &[Spend], cost: u64) -> Result<Vec<BucketState>, StoreError> {
        let keys: Vec<&str> = spends.iter().map(|s| s.key.as_str()).collect();
        let mut args = Vec::with_capacity(1 + 3 * spends.len());
        args.push(cost);
        for s in spends {
            args.extend([s.capacity, s.interval_us.max(1), u64::from(s.shadow)]);
        }
        let reply = integers(self.run(&self.bucket, &keys, &args).await?)?;
        if reply.len() != 4 * spends.len() {
            return Err(StoreError::Failed(format!(
                "reply of {} integers",
                reply.len()
            )));
        }
        Ok(reply
            .chunks(4)
            .map(|c| BucketState {
                allowed: c[0] == 1,
                remaining: c[1].max(0) as u64,
                retry_after_ms: (c[2] >= 0).then_some(c[2] as u64),
                reset_after_ms: c[3].max(0) as u64,
            })
            .collect())
    }

    async fn acquire(
        &self,
        key: &str,
        id: &str,
        slots: u64,
        lease_us: u64,
    ) -> Result<(bool, u64), StoreError> {
        let args = [
            "acquire".to_string(),
            id.to_string(),
            slots.to_string(),
            lease_us.to_string(),
        ];
        let reply = integers(self.run(&self.slots, &[key], &args).await?)?;
        match reply.as_slice() {
            [taken, held] => Ok((*taken == 1, (*held).max(0) as u64)),
            _ => Err(StoreError::Failed(
                "slots.lua acquire: unexpected reply".into(),
            )),
        }
    }

    async fn renew(&self, key: &str, id: &str, lease_us: u64) -> Result<bool, StoreError> {
        let args = [
            "renew".to_string(),
            id.to_string(),
            "0".to_string(),
            lease_us.to_string(),
        ];
        match self.run(&self.slots, &[key], &args).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(StoreError::Failed(format!("slots.lua renew: {other:?}"))),
        }
    }

    async fn release(&self, key: &str, id: &str) -> Result<(), StoreError> {
        let args = ["release", id];
        self.run(&self.slots, &[key], &args).await.map(|_| ())
    }

    /// A real script call on a probe bucket: recovery means decisions work
    /// again, not merely that PING answers (under `maxmemory` with
    /// `noeviction`, PING works and writes fail). Through the shared
    /// connection when requests have made it, and a failure drops it so it
    /// is made afresh; otherwise on a throwaway connection, so that the
    /// shared one is always made, and driven, on the proxy's own runtime
    /// (a driver on another thread costs a cross-thread wake-up per call).
    async fn probe(&self) -> Result<(), StoreError> {
        let keys = [self.probe_key.as_str()];
        let args: [u64; 4] = [1, 1_000_000, 1, 0];
        let shared = match &self.conn {
            Conn::Single { manager, .. } => manager.load().is_some(),
            Conn::Cluster(cluster) => cluster.conn.load().is_some(),
        };
        if shared {
            let result = self.run(&self.bucket, &keys, &args).await.map(|_| ());
            if result.is_err() {
                match &self.conn {
                    Conn::Single { manager, .. } => manager.store(None),
                    Conn::Cluster(cluster) => cluster.conn.store(None),
                }
            }
            return result;
        }
        // EVAL, not EVALSHA: a fresh server may not hold the script yet.
        let cmd = self.bucket.call(false, &keys, &args);
        let reply: Result<Value, RedisError> = match &self.conn {
            Conn::Single { client, .. } => match client.get_multiplexed_async_connection().await {
                Ok(mut c) => cmd.query_async(&mut c).await,
                Err(e) => Err(e),
            },
            Conn::Cluster(cluster) => match cluster.client.get_async_connection().await {
                Ok(mut c) => cmd.query_async(&mut c).await,
                Err(e) => Err(e),
            },
        };
        reply.map(|_| ()).map_err(classify)
    }

    fn kind(&self) -> &'static str {
        match self.conn {
            Conn::Single { .. } => "redis",
            Conn::Cluster(_) => "redis_cluster",
        }
    }
}
