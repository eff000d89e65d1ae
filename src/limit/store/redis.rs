//! Redis, Redis Cluster and Redis Sentinel stores. One decision is one
//! `EVALSHA` round trip on a multiplexed connection (concurrent requests
//! pipeline on it). When Redis answers `NOSCRIPT` (restart, failover,
//! `SCRIPT FLUSH`), the same call is sent once as `EVAL`, which runs it and
//! caches the script on the node that owns the keys — on a cluster that is
//! the right node by construction, with `MOVED`/`ASK` followed by the client.
//! Under Sentinel the master is asked of the sentinels, and asked again when
//! it stops answering or answers `READONLY` (demoted); the lookup never makes
//! a request wait longer than `store.timeout`, which falls back meanwhile.
//! `rediss://` URLs are TLS (rustls): the server's certificate is verified
//! against the system's roots or `store.ca_file`'s, for the URL's host.
//! With `store.durability: replicated` every script call that writes is
//! pipelined with `WAIT 1` on the same connection (on a cluster, to the
//! master of the keys' slot, which is where the pipeline is routed), and a
//! write no replica acknowledged in time is `StoreError::Unconfirmed`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use redis::sentinel::SentinelNodeConnectionInfo;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, ServerErrorKind, Value,
};

use super::{OpenError, StoreTlsPem};
use super::{Store, StoreError};
use crate::gcra::{BucketState, Spend};

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

mod conn;
use conn::{not_the_master, ClusterConn, Conn, SentinelConn, Server};

/// Deletes the buckets given as KEYS (on a cluster they share a hash tag).
const FORGET_LUA: &str = "return redis.call('DEL', unpack(KEYS))";

pub struct RedisStore {
    conn: Conn,
    /// `WAIT 1 <ms>` after each write (`store.durability: replicated`);
    /// `None` answers on the master's word alone.
    wait_ms: Option<u64>,
    /// `keys::probe`: inside the configured namespace, so
    /// a Redis ACL limited to the prefix allows it.
    probe_key: String,
    bucket: Script,
    slots: Script,
    forget: Script,
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

fn is_readonly(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::ReadOnly))
}

/// `cmd` then `WAIT 1 wait_ms`, as one pipeline.
fn confirmed(cmd: Cmd, wait_ms: u64) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd)
        .add_command(redis::cmd("WAIT").arg(1).arg(wait_ms).clone());
    pipe
}

/// The replicas `WAIT` counted; 0 when it answered an error.
fn replicas(acks: &Value) -> i64 {
    match acks {
        Value::Int(n) => *n,
        _ => 0,
    }
}

/// A write the store made and no replica acknowledged in time.
fn unconfirmed(acks: Option<i64>) -> Result<(), StoreError> {
    match acks {
        Some(n) if n < 1 => Err(StoreError::Unconfirmed),
        _ => Ok(()),
    }
}

/// `store.tls`'s material (loaded by the policy builder) as the client
/// takes it. `None` when neither a CA nor a client certificate is given
/// (the system's roots, no client certificate).
fn certificates(tls: &StoreTlsPem) -> Option<redis::TlsCertificates> {
    if tls.roots.is_none() && tls.client.is_none() {
        return None;
    }
    let client_tls = tls
        .client
        .as_ref()
        .map(|(cert, key)| redis::ClientTlsConfig {
            client_cert: cert.clone(),
            client_key: key.clone(),
        });
    Some(redis::TlsCertificates {
        client_tls,
        root_cert: tls.roots.clone(),
    })
}

/// rustls finds its crypto in the process default: the same provider the
/// listeners install.
fn install_crypto_provider() {
    crate::tls::install_provider();
}

/// `info` with `store.tls` applied when it is a `rediss://` address;
/// unchanged when it is plain TCP.
fn with_tls(info: ConnectionInfo, tls: &StoreTlsPem) -> Result<ConnectionInfo, OpenError> {
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Ok(info);
    }
    install_crypto_provider();
    let info = match certificates(tls) {
        Some(certs) => redis::Client::build_with_tls(info, certs)
            .map_err(|source| OpenError::Client { key: "url", source })?
            .get_connection_info()
            .clone(),
        None => info,
    };
    match info.addr().clone() {
        ConnectionAddr::TcpTls {
            host,
            port,
            tls_params,
            ..
        } if !tls.verify => Ok(info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: true,
            tls_params,
        })),
        _ => Ok(info),
    }
}

impl RedisStore {
    /// A single server. Connects lazily, so the gateway starts with Redis down.
    pub fn single(
        url: &str,
        password: Option<String>,
        tls: &StoreTlsPem,
        timeout: Duration,
        prefix: &str,
    ) -> Result<Self, OpenError> {
        let mut info: redis::ConnectionInfo = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|source| OpenError::Client { key: "url", source })?;
        if let Some(p) = password {
            let settings = info.redis_settings().clone().set_password(p);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(with_tls(info, tls)?)
            .map_err(|source| OpenError::Client { key: "url", source })?;
        Ok(RedisStore {
            conn: Conn::Single {
                server: Box::new(Server::new(client)),
                timeout,
            },
            wait_ms: None,
            probe_key: crate::limit::keys::probe(prefix),
            bucket: Script::new(TOKEN_BUCKET_LUA),
            slots: Script::new(SLOTS_LUA),
            forget: Script::new(FORGET_LUA),
        })
    }

    /// A Redis Cluster from its seed nodes; the nodes it learns of are
    /// reached as the seeds are (TLS or not, with the same settings).
    pub fn cluster(
        nodes: &[String],
        password: Option<String>,
        tls: &StoreTlsPem,
        timeout: Duration,
        prefix: &str,
    ) -> Result<Self, OpenError> {
        let mut builder = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .connection_timeout(timeout.max(Duration::from_millis(100)))
            .response_timeout(timeout.max(Duration::from_millis(100)));
        if let Some(p) = password {
            builder = builder.password(p);
        }
        if nodes.iter().any(|n| n.starts_with("rediss://")) {
            install_crypto_provider();
            if let Some(certs) = certificates(tls) {
                builder = builder.certs(certs);
            }
            let mode = match tls.verify {
                true => redis::TlsMode::Secure,
                false => redis::TlsMode::Insecure,
            };
            builder = builder.tls(mode);
        }
        let client = builder.build().map_err(|source| OpenError::Client {
            key: "nodes",
            source,
        })?;
        Ok(RedisStore {
            conn: Conn::Cluster(Arc::new(ClusterConn {
                client,
                conn: ArcSwapOption::empty(),
                connecting: Default::default(),
                made: tokio::sync::Notify::new(),
            })),
            wait_ms: None,
            probe_key: crate::limit::keys::probe(prefix),
            bucket: Script::new(TOKEN_BUCKET_LUA),
            slots: Script::new(SLOTS_LUA),
            forget: Script::new(FORGET_LUA),
        })
    }

    /// The master of `master_name` as `sentinels` name it; `password`
    /// authenticates to the data nodes (a sentinel's own password, if it
    /// has one, goes in its URL). Looks up lazily, so the gateway starts
    /// with every sentinel down.
    pub fn sentinel(
        sentinels: &[String],
        master_name: &str,
        password: Option<String>,
        timeout: Duration,
        prefix: &str,
    ) -> Result<Self, OpenError> {
        let sentinels = sentinels
            .iter()
            .map(|url| redis::IntoConnectionInfo::into_connection_info(url.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| OpenError::Client {
                key: "sentinels",
                source,
            })?;
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(p) = password {
            settings = settings.set_password(p);
        }
        Ok(RedisStore {
            conn: Conn::Sentinel(Arc::new(SentinelConn {
                sentinels,
                master_name: master_name.to_string(),
                node: SentinelNodeConnectionInfo::default().set_redis_connection_info(settings),
                timeout,
                master: ArcSwapOption::empty(),
                looking: AtomicBool::new(false),
                found: tokio::sync::Notify::new(),
                last_error: Mutex::new(String::new()),
                watching: AtomicBool::new(false),
            })),
            wait_ms: None,
            probe_key: crate::limit::keys::probe(prefix),
            bucket: Script::new(TOKEN_BUCKET_LUA),
            slots: Script::new(SLOTS_LUA),
            forget: Script::new(FORGET_LUA),
        })
    }

    /// Every write is confirmed by a replica within `wait` (`WAIT 1`)
    /// before it counts (`store.durability: replicated`).
    pub fn replicated(mut self, wait: Duration) -> Self {
        self.wait_ms = Some((wait.as_millis() as u64).max(1));
        self
    }

    /// Sends `pipe` (its first `count` commands) on the one connection a
    /// single command would take, returning every reply, errors included
    /// as values. On a cluster the pipeline goes to the node of its first
    /// keyed command, and `MOVED`/`ASK` resend the whole of it.
    async fn query_pipe(&self, pipe: &Pipeline, count: usize) -> Result<Vec<Value>, RedisError> {
        use redis::aio::ConnectionLike;
        match &self.conn {
            Conn::Single { server, timeout } => {
                let mut conn = server.connection(*timeout)?;
                conn.req_packed_commands(pipe, 0, count).await
            }
            Conn::Cluster(cluster) => {
                let mut c = cluster.get().await?;
                c.req_packed_commands(pipe, 0, count).await
            }
            Conn::Sentinel(sentinel) => {
                let master = sentinel.master().await?;
                let mut conn = master.connection(sentinel.timeout)?;
                let reply = conn.req_packed_commands(pipe, 0, count).await;
                let demoted = match &reply {
                    Err(e) => not_the_master(e),
                    Ok(values) => values.iter().any(is_readonly),
                };
                if demoted {
                    sentinel.forget(&master);
                }
                reply
            }
        }
    }

    /// Runs a script and, in `replicated` mode, `WAIT 1` right after it on
    /// the same connection: the reply and how many replicas acknowledged
    /// (`None` in `fast` mode, where nothing is asked).
    pub async fn run_confirmed<A: redis::ToRedisArgs + Sync>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[A],
    ) -> Result<(Value, Option<i64>), StoreError> {
        let Some(wait_ms) = self.wait_ms else {
            return Ok((self.run(script, keys, args).await?, None));
        };
        let mut by_sha = true;
        loop {
            let pipe = confirmed(script.call(by_sha, keys, args), wait_ms);
            let values = self.query_pipe(&pipe, 2).await.map_err(classify)?;
            let [reply, acks]: [Value; 2] = values
                .try_into()
                .map_err(|v: Vec<Value>| StoreError::Failed(format!("{} replies", v.len())))?;
            match reply.extract_error() {
                Err(e) if by_sha && is_noscript(&e) => by_sha = false,
                Err(e) => return Err(classify(e)),
                // A replica that refuses WAIT (the node was demoted) confirms nothing.
                Ok(reply) => return Ok((reply, Some(replicas(&acks)))),
            }
        }
    }

    /// Sends `cmd`, returning the reply.
    async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        match &self.conn {
            Conn::Single { server, timeout } => {
                let mut conn = server.connection(*timeout)?;
                cmd.query_async(&mut conn).await
            }
            Conn::Cluster(cluster) => {
                let mut c = cluster.get().await?;
                cmd.query_async(&mut c).await
            }
            Conn::Sentinel(sentinel) => {
                let master = sentinel.master().await?;
                let mut conn = master.connection(sentinel.timeout)?;
                let reply = cmd.query_async(&mut conn).await;
                if reply.as_ref().is_err_and(not_the_master) {
                    sentinel.forget(&master);
                }
                reply
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
        let (reply, acks) = self.run_confirmed(&self.bucket, &keys, &args).await?;
        let reply = integers(reply)?;
        if reply.len() != 4 * spends.len() {
            return Err(StoreError::Failed(format!(
                "reply of {} integers",
                reply.len()
            )));
        }
        let states: Vec<BucketState> = reply
            .chunks(4)
            .map(|c| BucketState {
                allowed: c[0] == 1,
                remaining: c[1].max(0) as u64,
                retry_after_ms: (c[2] >= 0).then_some(c[2] as u64),
                reset_after_ms: c[3].max(0) as u64,
            })
            .collect();
        // A refusal wrote nothing, so it needs no replica: it stands.
        let wrote = states
            .iter()
            .zip(spends)
            .all(|(st, sp)| st.allowed || sp.shadow);
        if wrote {
            unconfirmed(acks)?;
        }
        Ok(states)
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
        let (reply, acks) = self.run_confirmed(&self.slots, &[key], &args).await?;
        match integers(reply)?.as_slice() {
            [taken, held] => {
                if *taken == 1 {
                    unconfirmed(acks)?;
                }
                Ok((*taken == 1, (*held).max(0) as u64))
            }
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
        match self.run_confirmed(&self.slots, &[key], &args).await? {
            (Value::Int(1), acks) => unconfirmed(acks).map(|()| true),
            (Value::Int(_), _) => Ok(false),
            (other, _) => Err(StoreError::Failed(format!("slots.lua renew: {other:?}"))),
        }
    }

    async fn release(&self, key: &str, id: &str) -> Result<(), StoreError> {
        let args = ["release", id];
        self.run(&self.slots, &[key], &args).await.map(|_| ())
    }

    async fn forget(&self, keys: &[String]) -> Result<(), StoreError> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args: [u64; 0] = [];
        self.run(&self.forget, &keys, &args).await.map(|_| ())
    }

    /// A real script call on a probe bucket (on the shard of the key that
    /// last failed, so a Cluster's outage ends when that shard is back):
    /// recovery means decisions work again, not merely that PING answers
    /// (under `maxmemory` with `noeviction`, PING works and writes fail).
    /// Through the shared connection when requests have made it, and with
    /// `renew` a failure drops it so it is made afresh; otherwise on a throwaway connection, so that the
    /// shared one is always made, and driven, on the proxy's own runtime
    /// (a driver on another thread costs a cross-thread wake-up per call).
    async fn probe(&self, near: Option<&str>, renew: bool) -> Result<(), StoreError> {
        let near = near.and_then(|k| crate::limit::keys::probe_near(&self.probe_key, k));
        let keys = [near.as_deref().unwrap_or(self.probe_key.as_str())];
        let args: [u64; 4] = [1, 1_000_000, 1, 0];
        // EVAL, not EVALSHA: a fresh server may not hold the script yet.
        let cmd = self.bucket.call(false, &keys, &args);
        let pipe = match self.wait_ms {
            Some(wait_ms) => confirmed(cmd, wait_ms),
            None => redis::pipe().add_command(cmd).clone(),
        };
        let shared = match &self.conn {
            Conn::Single { server, .. } => server.manager.load().is_some(),
            Conn::Cluster(cluster) => cluster.conn.load().is_some(),
            Conn::Sentinel(sentinel) => {
                let values = sentinel.probe(&pipe).await.map_err(classify)?;
                return self.probed(values);
            }
        };
        if shared {
            let result = self
                .run_confirmed(&self.bucket, &keys, &args)
                .await
                .and_then(|(_, acks)| unconfirmed(acks));
            if result.is_err() && renew {
                match &self.conn {
                    Conn::Single { server, .. } => server.manager.store(None),
                    Conn::Cluster(cluster) => cluster.conn.store(None),
                    Conn::Sentinel(_) => {}
                }
            }
            return result;
        }
        let reply: Result<Vec<Value>, RedisError> = match &self.conn {
            Conn::Single { server, .. } => {
                match server.client.get_multiplexed_async_connection().await {
                    Ok(mut c) => pipe.query_async(&mut c).await,
                    Err(e) => Err(e),
                }
            }
            Conn::Cluster(cluster) => match cluster.client.get_async_connection().await {
                Ok(mut c) => pipe.query_async(&mut c).await,
                Err(e) => Err(e),
            },
            Conn::Sentinel(_) => unreachable!("answered above"),
        };
        self.probed(reply.map_err(classify)?)
    }
}

impl RedisStore {
    /// The probe's replies: in `replicated` mode the write must also have
    /// reached a replica, or decisions would only fail again.
    fn probed(&self, values: Vec<Value>) -> Result<(), StoreError> {
        match self.wait_ms {
            Some(_) => unconfirmed(Some(values.get(1).map_or(0, replicas))),
            None => Ok(()),
        }
    }
}
