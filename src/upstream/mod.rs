//! Upstream pools: round-robin over a pool's targets, skipping those the
//! TCP health check found down (pingora-load-balancing does both) and
//! those passive health took out; targets named by DNS are looked up
//! again as their answers expire (`names`).

mod names;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;

use pingora::lb::{selection::RoundRobin, LoadBalancer};
use pingora::upstreams::peer::HttpPeer;

use pingora::utils::tls::WrappedX509;

use crate::config::{Config, Upstream, UpstreamProtocol};

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
    /// Failures in a row per target, and until when it is out of rotation.
    passive: Mutex<HashMap<std::net::SocketAddr, (u32, Option<Instant>)>>,
}

impl Pool {
    fn new(name: &str, upstream: &Upstream) -> Result<Self, String> {
        let names =
            names::Names::new(&upstream.targets, upstream.resolver, upstream.resolve_every)?;
        let (addrs, next) = match &names {
            Some(n) => n
                .resolve_now()
                .map_err(|e| format!("cannot resolve targets: {e}"))?,
            None => (Vec::new(), Instant::now()),
        };
        let balancer = match &names {
            Some(_) => balancer(upstream, addrs.iter().map(|a| a.to_string())),
            None => balancer(upstream, upstream.targets.iter().cloned()),
        }
        .map_err(|e| format!("cannot resolve targets: {e}"))?;
        let sni = upstream.sni.clone().unwrap_or_else(|| {
            let first = &upstream.targets[0];
            first
                .rsplit_once(':')
                .map_or(first.as_str(), |(h, _)| h)
                .to_string()
        });
        let ca = match &upstream.ca_file {
            Some(path) => {
                let roots = crate::tls::load_roots(path)?;
                let wrapped = roots
                    .iter()
                    .map(|der| WrappedX509::new(der.to_vec(), pingora::utils::tls::parse_x509));
                Some(wrapped.collect::<Vec<_>>().into())
            }
            None => None,
        };
        Ok(Pool {
            name: name.to_string(),
            passive: Mutex::new(HashMap::new()),
            balancer: ArcSwap::from_pointee(balancer),
            names,
            resolved: Mutex::new((addrs, next)),
            upstream: upstream.clone(),
            sni,
            ca,
        })
    }

    /// The next healthy target; if none is healthy, the next target anyway,
    /// so the client gets a real 502 rather than a guess.
    pub fn peer(&self) -> Option<HttpPeer> {
        let now = Instant::now();
        let out = |b: &pingora::lb::Backend| {
            let addr = b.addr.as_inet().copied();
            let passive = self.passive.lock().unwrap_or_else(|e| e.into_inner());
            addr.and_then(|a| passive.get(&a)?.1)
                .is_some_and(|until| until > now)
        };
        let balancer = self.balancer.load();
        let backend = balancer
            .select_with(b"", 256, |b, healthy| healthy && !out(b))
            .or_else(|| balancer.select_with(b"", 256, |_, _| true))?;
        let mut peer = HttpPeer::new(backend.addr, self.upstream.tls, self.sni.clone());
        peer.options.connection_timeout = Some(self.upstream.connect_timeout);
        peer.options.total_connection_timeout = Some(self.upstream.connect_timeout * 2);
        peer.options.read_timeout = Some(self.upstream.read_timeout);
        peer.options.write_timeout = Some(self.upstream.read_timeout);
        peer.options.verify_cert = self.upstream.tls_verify;
        peer.options.verify_hostname = self.upstream.tls_verify;
        peer.options.ca = self.ca.clone();
        if self.upstream.protocol != UpstreamProtocol::Http1 {
            // HTTP/2 only (ALPN h2 on TLS, prior knowledge in the clear),
            // many streams on one connection, as gRPC servers expect.
            peer.options.set_http_version(2, 2);
            peer.options.max_h2_streams = 100;
        }
        Some(peer)
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

    pub fn health_interval(&self) -> std::time::Duration {
        self.upstream.health_interval
    }
}

/// A round-robin balancer over `targets` with the pool's TCP health check.
fn balancer(
    upstream: &Upstream,
    targets: impl Iterator<Item = String>,
) -> std::io::Result<LoadBalancer<RoundRobin>> {
    let targets: Vec<String> = targets.collect();
    let mut b = LoadBalancer::try_from_iter(targets.iter().map(String::as_str))?;
    b.set_health_check(pingora::lb::health_check::TcpHealthCheck::new());
    b.health_check_frequency = Some(upstream.health_interval);
    b.parallel_health_check = true;
    Ok(b)
}

/// Builds every pool a config names; fails, with the pool's name and why,
/// when a target cannot be resolved.
pub fn build_pools(config: &Config) -> Result<HashMap<String, Arc<Pool>>, (String, String)> {
    config
        .upstreams
        .iter()
        .map(|(name, up)| {
            Pool::new(name, up)
                .map(|p| (name.clone(), Arc::new(p)))
                .map_err(|e| (name.clone(), e))
        })
        .collect()
}
