//! Upstream pools: round-robin over a pool's targets, skipping those the
//! TCP health check found down (pingora-load-balancing does both) and
//! those passive health took out; targets named by DNS are looked up
//! again as their answers expire (`names`). A pool's `ca_file` roots come
//! decoded from the policy builder; nothing here opens a file.

pub mod fair;
mod gradient;
mod names;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;

use pingora::lb::health_check::{HealthCheck, TcpHealthCheck};
use pingora::lb::{selection::RoundRobin, Backend, LoadBalancer};
use pingora::upstreams::peer::HttpPeer;

use pingora::utils::tls::WrappedX509;
use rustls::pki_types::CertificateDer;

use crate::config::{Affinity, Balance, Config, Upstream, UpstreamProtocol};

pub use names::ResolveError;

/// Why a pool cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No resolver for the targets' names.
    #[error(transparent)]
    Resolver(ResolveError),
    #[error("cannot resolve targets: {0}")]
    Resolve(ResolveError),
    #[error("cannot resolve targets: {0}")]
    Targets(std::io::Error),
}

pub struct Pool {
    name: String,
    /// Replaced whole when a look-up finds other addresses.
    balancer: ArcSwap<LoadBalancer<RoundRobin>>,
    names: Option<names::Names>,
    /// The addresses in rotation and when to look the names up again.
    resolved: Mutex<(Vec<std::net::SocketAddr>, Instant)>,
    upstream: Upstream,
    sni: String,
    /// `ca_file`'s roots, trusted instead of the system's.
    ca: Option<Arc<[WrappedX509]>>,
    /// Pingora's connection-reuse group: a digest of the roots, so pools
    /// that trust other CAs never share a verified connection.
    group_key: u64,
    /// The certificate shown to the targets (`client_cert_*`).
    client: Option<Arc<pingora::utils::tls::CertKey>>,
    /// Failures in a row per target, and until when it is out of rotation.
    passive: Mutex<HashMap<std::net::SocketAddr, (u32, Option<Instant>)>>,
    /// Requests in flight per target (for `least_requests`).
    busy: Mutex<HashMap<std::net::SocketAddr, u64>>,
    /// The affinity cookie values of a rotation's targets, made at the
    /// first request that needs them (the rotation is held, so a new one
    /// is never taken for it).
    pins: Mutex<Option<Arc<Pins>>>,
}

/// One request in flight to a target; counted out when dropped.
pub struct Busy {
    pool: Arc<Pool>,
    addr: std::net::SocketAddr,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut busy = self.pool.busy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = busy.get_mut(&self.addr) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                busy.remove(&self.addr);
            }
        }
    }
}

impl Pool {
    /// A pool trusting `roots` (its `ca_file`'s, decoded) if given.
    fn new(
        name: &str,
        upstream: &Upstream,
        roots: Option<&[CertificateDer<'static>]>,
        client: Option<Arc<pingora::utils::tls::CertKey>>,
    ) -> Result<Self, PoolError> {
        let names = names::Names::new(&upstream.targets, upstream.resolver, upstream.resolve_every)
            .map_err(PoolError::Resolver)?;
        let (addrs, next) = match &names {
            Some(n) => n.resolve_now().map_err(PoolError::Resolve)?,
            None => (Vec::new(), Instant::now()),
        };
        let balancer = match &names {
            Some(_) => balancer(upstream, addrs.iter().map(|a| a.to_string())),
            None => balancer(upstream, upstream.targets.iter().cloned()),
        }
        .map_err(PoolError::Targets)?;
        let sni = upstream.sni.clone().unwrap_or_else(|| {
            let first = &upstream.targets[0];
            first
                .rsplit_once(':')
                .map_or(first.as_str(), |(h, _)| h)
                .to_string()
        });
        // Pingora reuses a pooled connection for any peer with the same
        // address, SNI and verify flags; its CA is not part of that. A pool
        // trusting other roots gets connections of its own.
        let mut group_key = 0;
        let ca = match roots {
            Some(roots) => {
                group_key =
                    stable_hash(&roots.iter().flat_map(|d| d.to_vec()).collect::<Vec<u8>>());
                let wrapped = roots
                    .iter()
                    .map(|der| WrappedX509::new(der.to_vec(), pingora::utils::tls::parse_x509));
                Some(wrapped.collect::<Vec<_>>().into())
            }
            None => None,
        };
        // Pingora tells client certificates apart by their serials only:
        // a pool showing another certificate gets connections of its own.
        if let Some(client) = &client {
            let mut bytes = client.key().clone();
            for cert in std::iter::once(client.leaf()).chain(client.intermediates()) {
                bytes.extend_from_slice(cert.borrow_raw_cert());
            }
            group_key ^= stable_hash(&bytes).rotate_left(1);
        }
        Ok(Pool {
            name: name.to_string(),
            passive: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashMap::new()),
            pins: Mutex::new(None),
            balancer: ArcSwap::from_pointee(balancer),
            names,
            resolved: Mutex::new((addrs, next)),
            upstream: upstream.clone(),
            sni,
            ca,
            group_key,
            client,
        })
    }

    pub fn balance(&self) -> &Balance {
        &self.upstream.balance
    }

    pub fn affinity(&self) -> Option<&Affinity> {
        self.upstream.affinity.as_ref()
    }

    /// The affinity cookie values of the rotation in force, both ways.
    pub fn pins(&self) -> Arc<Pins> {
        let balancer = self.balancer.load_full();
        let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        match pins.as_ref() {
            Some(p) if Arc::ptr_eq(&p.rotation, &balancer) => p.clone(),
            _ => {
                let cookie = self.affinity().map_or("", |a| a.cookie.as_str());
                let targets = balancer.backends().get_backend();
                let addrs = targets.iter().filter_map(|b| b.addr.as_inet().copied());
                let by_addr: HashMap<_, _> = addrs.map(|a| (a, pin(cookie, a))).collect();
                let by_value = by_addr.iter().map(|(a, v)| (v.clone(), *a)).collect();
                let made = Arc::new(Pins {
                    rotation: balancer,
                    by_value,
                    by_addr,
                });
                *pins = Some(made.clone());
                made
            }
        }
    }

    /// A target in rotation (healthy, not ejected): `pinned` (an affinity
    /// cookie's) while it is, else by the pool's `balance` (`key`: what a
    /// hash balance hashes), other than `avoid` (a retry's failed target)
    /// while another is in rotation; if none is in rotation, one anyway,
    /// so the client gets a real 502 rather than a guess.
    pub fn peer(
        &self,
        key: Option<&[u8]>,
        avoid: Option<std::net::SocketAddr>,
        pinned: Option<std::net::SocketAddr>,
    ) -> Option<HttpPeer> {
        let now = Instant::now();
        let out = |b: &pingora::lb::Backend| {
            let addr = b.addr.as_inet().copied();
            let passive = self.passive.lock().unwrap_or_else(|e| e.into_inner());
            addr.and_then(|a| passive.get(&a)?.1)
                .is_some_and(|until| until > now)
        };
        let avoided =
            |b: &pingora::lb::Backend| avoid.is_some() && b.addr.as_inet() == avoid.as_ref();
        let balancer = self.balancer.load();
        let pin = pinned.and_then(|addr| {
            let all = balancer.backends().get_backend();
            let b = all.iter().find(|b| b.addr.as_inet() == Some(&addr))?;
            (balancer.backends().ready(b) && !out(b)).then(|| b.clone())
        });
        let backend = match (&self.upstream.balance, key) {
            _ if pin.is_some() => pin?,
            (Balance::RoundRobin, _) | (Balance::Hash(_), None) => balancer
                .select_with(b"", 256, |b, healthy| healthy && !out(b) && !avoided(b))
                .or_else(|| balancer.select_with(b"", 256, |b, healthy| healthy && !out(b)))
                .or_else(|| balancer.select_with(b"", 256, |_, _| true))?,
            (policy, key) => {
                let all = balancer.backends().get_backend();
                let ready = |b: &&pingora::lb::Backend| balancer.backends().ready(b) && !out(b);
                let mut live: Vec<&pingora::lb::Backend> = all.iter().filter(ready).collect();
                if live.iter().any(|b| !avoided(b)) {
                    live.retain(|b| !avoided(b));
                }
                if live.is_empty() {
                    live = all.iter().collect();
                }
                self.pick(policy, key, &live)?.clone()
            }
        };
        let mut peer = HttpPeer::new(backend.addr, self.upstream.tls, self.sni.clone());
        peer.options.connection_timeout = Some(self.upstream.connect_timeout);
        peer.options.total_connection_timeout = Some(self.upstream.connect_timeout * 2);
        peer.options.read_timeout = Some(self.upstream.read_timeout);
        peer.options.write_timeout = Some(self.upstream.read_timeout);
        peer.options.verify_cert = self.upstream.tls_verify;
        peer.options.verify_hostname = self.upstream.tls_verify;
        peer.options.ca = self.ca.clone();
        peer.group_key = self.group_key;
        peer.client_cert_key = self.client.clone();
        if self.upstream.protocol != UpstreamProtocol::Http1 {
            // HTTP/2 only (ALPN h2 on TLS, prior knowledge in the clear),
            // many streams on one connection, as gRPC servers expect.
            peer.options.set_http_version(2, 2);
            peer.options.max_h2_streams = 100;
        }
        Some(peer)
    }

    /// Least requests: the less busy of two drawn at random. Hash: the
    /// target whose hash with the key is highest (rendezvous hashing).
    fn pick<'b>(
        &self,
        policy: &Balance,
        key: Option<&[u8]>,
        live: &[&'b pingora::lb::Backend],
    ) -> Option<&'b pingora::lb::Backend> {
        let addr = |b: &pingora::lb::Backend| b.addr.to_string();
        match (policy, key) {
            (Balance::Hash(_), Some(key)) => live
                .iter()
                .max_by_key(|b| stable_hash(&[key, addr(b).as_bytes()].concat()))
                .copied(),
            _ => {
                // Two different targets (the same one when there is one).
                let draw = uuid::Uuid::new_v4().as_u128();
                let n = live.len().max(1) as u128;
                let i = draw % n;
                let j = (i + 1 + (draw >> 64) % (n - 1).max(1)) % n;
                let (a, b) = (live.get(i as usize)?, live.get(j as usize)?);
                let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
                let load = |x: &pingora::lb::Backend| {
                    x.addr
                        .as_inet()
                        .and_then(|s| busy.get(s))
                        .copied()
                        .unwrap_or(0)
                };
                Some(if load(b) < load(a) { b } else { a })
            }
        }
    }

    /// Counts a request in flight to `addr` until the guard drops.
    pub fn busy(self: &Arc<Self>, addr: std::net::SocketAddr) -> Busy {
        *self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr)
            .or_insert(0) += 1;
        Busy {
            pool: self.clone(),
            addr,
        }
    }

    /// One exchange with `addr` ended: `ok`, or a connect failure, reset or
    /// 5xx. `passive_health.failures` of those in a row take it out of
    /// rotation for the cooldown.
    pub fn record(&self, addr: std::net::SocketAddr, ok: bool) {
        let Some(rule) = self.upstream.passive_health else {
            return;
        };
        let mut passive = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        let entry = passive.entry(addr).or_insert((0, None));
        if ok {
            *entry = (0, None);
            return;
        }
        entry.0 += 1;
        if entry.0 >= rule.failures {
            entry.0 = 0;
            entry.1 = Some(Instant::now() + rule.cooldown);
            crate::metrics::METRICS
                .upstream_ejections
                .with_label_values(&[self.name.as_str()])
                .inc();
            tracing::warn!(upstream = %self.name, target = %addr, "upstream.target_ejected");
        }
    }

    pub async fn health_check(&self) {
        let balancer = self.balancer.load_full();
        balancer.backends().run_health_check(true).await;
    }

    /// Looks the targets' names up again if their answers expired; a new
    /// set of addresses replaces the rotation (a failed look-up keeps it).
    pub async fn refresh(&self) {
        let Some(names) = &self.names else { return };
        {
            let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if resolved.1 > now {
                return;
            }
            // One look-up at a time: the next tick finds it not yet due.
            resolved.1 = now + std::time::Duration::from_secs(10);
        }
        match names.resolve().await {
            Ok((addrs, next)) => {
                let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
                resolved.1 = next;
                if addrs == resolved.0 {
                    return;
                }
                if let Ok(b) = balancer(&self.upstream, addrs.iter().map(|a| a.to_string())) {
                    self.balancer.store(Arc::new(b));
                    // Targets gone from the answer take their passive state along.
                    let mut passive = self.passive.lock().unwrap_or_else(|e| e.into_inner());
                    passive.retain(|addr, _| addrs.contains(addr));
                    drop(passive);
                    tracing::info!(upstream = %self.name, targets = addrs.len(), "upstream.resolved");
                    resolved.0 = addrs;
                }
            }
            Err(e) => {
                let retry = Instant::now() + std::time::Duration::from_secs(1);
                self.resolved.lock().unwrap_or_else(|e| e.into_inner()).1 = retry;
                tracing::warn!(upstream = %self.name, error = %e, "upstream.resolve_failed");
            }
        }
    }

    /// Replaces the rotation with `targets` (`ip:port`: a Service's
    /// endpoints moved), as a look-up of names does; targets gone take
    /// their passive state along.
    pub fn set_targets(&self, targets: &[String]) -> std::io::Result<()> {
        let b = balancer(&self.upstream, targets.iter().cloned())?;
        self.balancer.store(Arc::new(b));
        let kept: Vec<std::net::SocketAddr> =
            targets.iter().filter_map(|t| t.parse().ok()).collect();
        let mut passive = self.passive.lock().unwrap_or_else(|e| e.into_inner());
        passive.retain(|addr, _| kept.contains(addr));
        Ok(())
    }

    /// How often its targets are checked; None: never (`health_check: false`).
    pub fn health_interval(&self) -> Option<std::time::Duration> {
        self.upstream
            .health_check
            .then_some(self.upstream.health_interval)
    }

    /// Whether its targets are names looked up again (`refresh`).
    pub fn resolves(&self) -> bool {
        self.names.is_some()
    }
}

/// The affinity cookie values of one rotation.
pub struct Pins {
    rotation: Arc<LoadBalancer<RoundRobin>>,
    by_value: HashMap<String, std::net::SocketAddr>,
    by_addr: HashMap<std::net::SocketAddr, String>,
}

impl Pins {
    /// The target a cookie value names, if it is one of this rotation's.
    pub fn target(&self, value: &str) -> Option<std::net::SocketAddr> {
        self.by_value.get(value).copied()
    }

    /// The cookie value naming `addr`.
    pub fn value(&self, addr: std::net::SocketAddr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

/// The affinity cookie value of `addr`: HMAC-SHA256 of the cookie's name
/// and the address under the process's key, 128 bits in hex. Not of the
/// pool's name, which a controller may change as Ingresses come and go:
/// a value is only ever looked up among one pool's targets.
fn pin(cookie: &str, addr: std::net::SocketAddr) -> String {
    let message = format!("{cookie}\0{addr}");
    let tag = aws_lc_rs::hmac::sign(affinity_key(), message.as_bytes());
    let mut out = String::with_capacity(32);
    for b in &tag.as_ref()[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The key affinity cookies are signed with: `FAIRGATE_AFFINITY_KEY` (the
/// same on every replica, so a cookie one gave is honoured by all), else
/// one drawn at start (a cookie then holds on this process only).
fn affinity_key() -> &'static aws_lc_rs::hmac::Key {
    static KEY: std::sync::OnceLock<aws_lc_rs::hmac::Key> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let secret = match shared_key() {
            Some(k) => k.into_bytes(),
            None => {
                let mut k = [0u8; 32];
                aws_lc_rs::rand::SecureRandom::fill(&aws_lc_rs::rand::SystemRandom::new(), &mut k)
                    .expect("the system's random source");
                k.to_vec()
            }
        };
        aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret)
    })
}

/// `FAIRGATE_AFFINITY_KEY` when it is a key: 32 bytes or more, not the
/// kit's placeholder (which is public).
fn shared_key() -> Option<String> {
    let k = std::env::var("FAIRGATE_AFFINITY_KEY").ok()?;
    (k.len() >= 32 && !k.starts_with("PLACEHOLDER")).then_some(k)
}

/// Whether affinity cookies are signed with a key of the operator's
/// (`FAIRGATE_AFFINITY_KEY`), so every replica honours every cookie.
pub fn affinity_key_shared() -> bool {
    shared_key().is_some()
}

/// FNV-1a, then a 64-bit finaliser (FNV's low bits alone are poorly
/// mixed for keys that differ in their last byte): the same on every
/// replica and release.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// One TCP health check for every pool. Pingora's `TcpHealthCheck::new()`
/// makes a connector that reads the system's root certificates (it could
/// speak TLS): 1.6 ms a pool, 45% of a controller's policy build of 1,000
/// Services (perf, `examples/cluster_build.rs`). A connect has no state to
/// share, so all pools use this one.
static TCP_CHECK: std::sync::LazyLock<Arc<TcpHealthCheck>> =
    std::sync::LazyLock::new(|| Arc::new(*TcpHealthCheck::new()));

struct SharedTcpCheck(Arc<TcpHealthCheck>);

#[async_trait::async_trait]
impl HealthCheck for SharedTcpCheck {
    async fn check(&self, target: &Backend) -> pingora::Result<()> {
        self.0.check(target).await
    }

    fn health_threshold(&self, success: bool) -> usize {
        self.0.health_threshold(success)
    }
}

/// A round-robin balancer over `targets` with the pool's TCP health check.
fn balancer(
    upstream: &Upstream,
    targets: impl Iterator<Item = String>,
) -> std::io::Result<LoadBalancer<RoundRobin>> {
    let targets: Vec<String> = targets.collect();
    let mut b = LoadBalancer::try_from_iter(targets.iter().map(String::as_str))?;
    if upstream.health_check {
        b.set_health_check(Box::new(SharedTcpCheck(TCP_CHECK.clone())));
        b.health_check_frequency = Some(upstream.health_interval);
        b.parallel_health_check = true;
    }
    Ok(b)
}

/// Builds every pool a config names, each trusting its `ca_file`'s roots
/// (`roots`, by pool name, as the policy builder decoded them); fails, with
/// the pool's name and why, when a target cannot be resolved.
pub fn build_pools(
    config: &Config,
    roots: &HashMap<String, Vec<CertificateDer<'static>>>,
    clients: &HashMap<String, Arc<pingora::utils::tls::CertKey>>,
) -> Result<HashMap<String, Arc<Pool>>, (String, PoolError)> {
    let sticky = config.upstreams.iter().find(|(_, u)| u.affinity.is_some());
    if let Some((name, _)) = sticky.filter(|_| !affinity_key_shared()) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            tracing::warn!(
                upstream = %name,
                "upstream.affinity_key_local: affinity cookies are signed with a key of this \
                 process; set FAIRGATE_AFFINITY_KEY (32 random bytes or more, not the kit's \
                 placeholder) on every replica so that all honour them"
            )
        });
    }
    config
        .upstreams
        .iter()
        .map(|(name, up)| {
            Pool::new(
                name,
                up,
                roots.get(name).map(Vec::as_slice),
                clients.get(name).cloned(),
            )
            .map(|p| (name.clone(), Arc::new(p)))
            .map_err(|e| (name.clone(), e))
        })
        .collect()
}
