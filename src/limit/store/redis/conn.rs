//! The connections under the Redis store: one server's shared connection
//! (`Server`), the cluster's (`ClusterConn`) and the master that Redis
//! Sentinel names (`SentinelConn`, followed on `+switch-master`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{ErrorKind, Pipeline, RedisError, ServerErrorKind, Value};

/// The shared connection is made on first use and dropped by `probe` when
/// it stops answering, so a connection stuck in a bad state (e.g. a failed
/// AUTH it will not retry) is replaced rather than waited on.
pub(super) enum Conn {
    /// Boxed: a client with TLS settings is some hundred bytes.
    Single {
        server: Box<Server>,
        timeout: Duration,
    },
    Cluster(Arc<ClusterConn>),
    Sentinel(Arc<SentinelConn>),
}

/// One server and the shared connection to it, made on first use.
pub(super) struct Server {
    pub(super) client: redis::Client,
    pub(super) manager: ArcSwapOption<ConnectionManager>,
}

impl Server {
    pub(super) fn new(client: redis::Client) -> Self {
        Server {
            client,
            manager: ArcSwapOption::empty(),
        }
    }

    pub(super) fn connection(&self, timeout: Duration) -> Result<ConnectionManager, RedisError> {
        if let Some(m) = self.manager.load_full() {
            return Ok((*m).clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout.max(Duration::from_millis(100))))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let m = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
        self.manager.store(Some(Arc::new(m.clone())));
        Ok(m)
    }
}

/// The shared cluster connection and the one attempt at making it. The
/// attempt runs as its own task (spawned from a request, so on the proxy's
/// runtime): a request that stops waiting at `store.timeout` does not cancel
/// it, and concurrent requests wait for the same attempt instead of each
/// connecting to every node.
pub(super) struct ClusterConn {
    pub(super) client: redis::cluster::ClusterClient,
    pub(super) conn: ArcSwapOption<ClusterConnection>,
    pub(super) connecting: std::sync::atomic::AtomicBool,
    pub(super) made: tokio::sync::Notify,
}

impl ClusterConn {
    pub(super) async fn get(self: &Arc<Self>) -> Result<ClusterConnection, RedisError> {
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

/// The master of a group that Redis Sentinel monitors, as the sentinels
/// last named it. A lookup asks the sentinels (a few at once) and confirms
/// with `ROLE` on the node they name; like the cluster connection it runs as
/// its own task, one at a time, so a request that stops waiting at
/// `store.timeout` leaves it running and waiters share it.
pub(super) struct SentinelConn {
    pub(super) sentinels: Vec<redis::ConnectionInfo>,
    pub(super) master_name: String,
    /// How to connect to the data nodes (their password).
    pub(super) node: SentinelNodeConnectionInfo,
    pub(super) timeout: Duration,
    pub(super) master: ArcSwapOption<Server>,
    pub(super) looking: AtomicBool,
    pub(super) found: tokio::sync::Notify,
    /// Why the last lookup failed, for the error a waiting request gets.
    pub(super) last_error: Mutex<String>,
    /// Whether `watch` runs (started by the first request, on the proxy's runtime).
    pub(super) watching: AtomicBool,
}

/// The longest one lookup may take (a sentinel that accepts and never answers).
pub(super) const LOOKUP_BOUND: Duration = Duration::from_secs(2);

impl SentinelConn {
    /// The master: the one last found, or a fresh lookup's.
    pub(super) async fn master(self: &Arc<Self>) -> Result<Arc<Server>, RedisError> {
        if !self.watching.swap(true, Ordering::AcqRel) {
            tokio::spawn(watch(Arc::downgrade(self)));
        }
        loop {
            let found = self.found.notified();
            if let Some(m) = self.master.load_full() {
                return Ok(m);
            }
            if !self.looking.swap(true, Ordering::AcqRel) {
                let this = self.clone();
                tokio::spawn(async move {
                    match this.lookup().await {
                        Ok(client) => this.master.store(Some(Arc::new(Server::new(client)))),
                        Err(e) => {
                            *this.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                                e.detail().unwrap_or_default().to_string();
                        }
                    }
                    this.looking.store(false, Ordering::Release);
                    this.found.notify_waiters();
                });
            }
            found.await;
            if self.master.load().is_none() {
                let why = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
                return Err(no_master(why.clone()));
            }
        }
    }

    /// Asks the sentinels for the master and checks it says it is one. A
    /// new `Sentinel` each time: lookups are rare (start, failover), and no
    /// connection to a sentinel outlives one, so none goes stale.
    /// Every failure is `unreachable` for the breaker: whether no sentinel
    /// answers or none names a live master (mid-failover), there is no
    /// store to decide with.
    pub(super) async fn lookup(&self) -> Result<redis::Client, RedisError> {
        let mut sentinel = Sentinel::build(self.sentinels.clone())?;
        let ask = sentinel.async_master_for(&self.master_name, Some(&self.node));
        match tokio::time::timeout(LOOKUP_BOUND.max(self.timeout), ask).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(no_master(e.to_string())),
            Err(_) => Err(no_master("no answer in time".into())),
        }
    }

    /// Stops using `master` (if it is still the one in use): the next call
    /// asks the sentinels again.
    pub(super) fn forget(&self, master: &Arc<Server>) {
        self.master.compare_and_swap(master, None::<Arc<Server>>);
    }

    /// The probe: through the shared connection when requests have made
    /// one, dropping the master on failure; otherwise a lookup and a
    /// throwaway connection, and on success the master is kept for requests
    /// (their connection is still made by them, on the proxy's runtime).
    pub(super) async fn probe(&self, pipe: &Pipeline) -> Result<Vec<Value>, RedisError> {
        let current = self.master.load_full();
        if let Some(master) = current.filter(|m| m.manager.load().is_some()) {
            let mut conn = master.connection(self.timeout)?;
            let ask = pipe.query_async::<Vec<Value>>(&mut conn);
            let reply = tokio::time::timeout(self.timeout, ask)
                .await
                .unwrap_or_else(|_| Err(RedisError::from((ErrorKind::Io, "probe timed out"))));
            if reply.is_err() {
                self.forget(&master);
            }
            return reply;
        }
        let client = self.lookup().await?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let values = pipe.query_async::<Vec<Value>>(&mut conn).await?;
        self.master
            .compare_and_swap(&None::<Arc<Server>>, Some(Arc::new(Server::new(client))));
        Ok(values)
    }
}

/// Follows Sentinel's `+switch-master` announcements, so that a planned
/// failover (the old master keeps answering until Sentinel demotes it, some
/// seconds later) moves decisions as soon as the new master is named. Best
/// effort, one sentinel at a time: a missed announcement still ends at the
/// old master's demotion, which fails a call and forgets it. Ends when the
/// store is dropped.
pub(super) async fn watch(conn: Weak<SentinelConn>) {
    use futures_util::StreamExt;
    for turn in 0usize.. {
        let Some(info) = conn
            .upgrade()
            .map(|c| c.sentinels[turn % c.sentinels.len()].clone())
        else {
            return;
        };
        let subscribe = async {
            let mut pubsub = redis::Client::open(info)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        if let Ok(Ok(pubsub)) = tokio::time::timeout(LOOKUP_BOUND, subscribe).await {
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                let Some(conn) = conn.upgrade() else {
                    return;
                };
                conn.switched(&message.get_payload::<String>().unwrap_or_default());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl SentinelConn {
    /// `+switch-master`: `NAME OLD_IP OLD_PORT NEW_IP NEW_PORT`.
    pub(super) fn switched(&self, payload: &str) {
        let fields: Vec<&str> = payload.split(' ').collect();
        let [name, _, _, ip, port] = fields[..] else {
            return;
        };
        if name != self.master_name {
            return;
        }
        tracing::info!(master_name = name, address = %format!("{ip}:{port}"), "store.master_switched");
        let current = self.master.load_full();
        let new = redis::ConnectionAddr::Tcp(ip.to_string(), port.parse().unwrap_or(0));
        if let Some(master) = current.filter(|m| *m.client.get_connection_info().addr() != new) {
            self.forget(&master);
        }
    }
}

pub(super) fn no_master(why: String) -> RedisError {
    RedisError::from((ErrorKind::Io, "no Redis master from the sentinels", why))
}

/// The node no longer answers as the master: gone, unreachable, or
/// demoted to a replica (`READONLY`).
pub(super) fn not_the_master(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}
