//! Upstream pools: round-robin over a pool's targets, skipping those the
//! TCP health check found down (pingora-load-balancing does both).

use std::collections::HashMap;
use std::sync::Arc;

use pingora::lb::{selection::RoundRobin, LoadBalancer};
use pingora::upstreams::peer::HttpPeer;

use pingora::utils::tls::WrappedX509;

use crate::config::{Config, Upstream, UpstreamProtocol};

pub struct Pool {
    balancer: LoadBalancer<RoundRobin>,
    upstream: Upstream,
    sni: String,
    /// `ca_file`'s roots, trusted instead of the system's.
    ca: Option<Arc<[WrappedX509]>>,
}

impl Pool {
    fn new(upstream: &Upstream) -> Result<Self, String> {
        let mut balancer = LoadBalancer::try_from_iter(upstream.targets.iter().map(String::as_str))
            .map_err(|e| format!("cannot resolve targets: {e}"))?;
        balancer.set_health_check(pingora::lb::health_check::TcpHealthCheck::new());
        balancer.health_check_frequency = Some(upstream.health_interval);
        balancer.parallel_health_check = true;
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
            balancer,
            upstream: upstream.clone(),
            sni,
            ca,
        })
    }

    /// The next healthy target; if none is healthy, the next target anyway,
    /// so the client gets a real 502 rather than a guess.
    pub fn peer(&self) -> Option<HttpPeer> {
        let backend = self
            .balancer
            .select(b"", 256)
            .or_else(|| self.balancer.select_with(b"", 256, |_, _| true))?;
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

    pub async fn health_check(&self) {
        self.balancer.backends().run_health_check(true).await;
    }

    pub fn health_interval(&self) -> std::time::Duration {
        self.upstream.health_interval
    }
}

/// Builds every pool a config names; fails, with the pool's name and why,
/// when a target cannot be resolved.
pub fn build_pools(config: &Config) -> Result<HashMap<String, Arc<Pool>>, (String, String)> {
    config
        .upstreams
        .iter()
        .map(|(name, up)| {
            Pool::new(up)
                .map(|p| (name.clone(), Arc::new(p)))
                .map_err(|e| (name.clone(), e))
        })
        .collect()
}
