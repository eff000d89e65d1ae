//! Targets given as DNS names, looked up again and again: every
//! `resolve_every`, or sooner when the answer's TTL runs out, through the
//! system's resolver configuration (`/etc/resolv.conf` and the hosts file)
//! or the pool's own `resolver`. A headless Kubernetes Service so yields
//! one target per pod.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError;
use hickory_resolver::TokioResolver;

/// Why the targets' names gave no addresses.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("resolver: {0}")]
    Resolver(Box<NetError>),
    #[error("{host}: {source}")]
    Lookup { host: String, source: Box<NetError> },
    #[error("no addresses")]
    NoAddresses,
    /// The runtime a look-up from sync code runs on.
    #[error("{0}")]
    Runtime(std::io::Error),
    #[error("resolver thread failed")]
    Thread,
}

/// How a pool's targets are looked up.
pub struct Names {
    /// A DNS server of the pool's own; `None`: the system's configuration.
    server: Option<SocketAddr>,
    /// `host` and port of each target; IP literals pass through.
    targets: Vec<(String, u16)>,
    every: Duration,
}

impl Names {
    /// `None` when every target is an address (nothing to look up).
    pub fn new(
        targets: &[String],
        resolver: Option<SocketAddr>,
        every: Duration,
    ) -> Result<Option<Names>, ResolveError> {
        let targets: Vec<(String, u16)> = targets
            .iter()
            .filter_map(|t| {
                let (host, port) = t.rsplit_once(':')?;
                Some((
                    host.trim_matches(['[', ']']).to_string(),
                    port.parse().ok()?,
                ))
            })
            .collect();
        if targets.iter().all(|(h, _)| h.parse::<IpAddr>().is_ok()) {
            return Ok(None);
        }
        let names = Names {
            server: resolver,
            targets,
            every,
        };
        names.resolver()?;
        Ok(Some(names))
    }

    /// A resolver for one round of look-ups: its connections live on the
    /// runtime that runs them, and our schedule, not its cache, decides
    /// when to ask again.
    fn resolver(&self) -> Result<TokioResolver, ResolveError> {
        let provider = TokioRuntimeProvider::default();
        let builder = match self.server {
            Some(server) => {
                let mut ns = NameServerConfig::udp_and_tcp(server.ip());
                for c in &mut ns.connections {
                    c.port = server.port();
                }
                let config = ResolverConfig::from_parts(None, Vec::new(), vec![ns]);
                TokioResolver::builder_with_config(config, provider)
            }
            None => {
                TokioResolver::builder(provider).map_err(|e| ResolveError::Resolver(Box::new(e)))?
            }
        };
        builder
            .build()
            .map_err(|e| ResolveError::Resolver(Box::new(e)))
    }

    /// Every address the targets name now, sorted, and when to look again.
    pub async fn resolve(&self) -> Result<(Vec<SocketAddr>, Instant), ResolveError> {
        let resolver = self.resolver()?;
        let mut out = Vec::new();
        let mut next = Instant::now() + self.every;
        for (host, port) in &self.targets {
            if let Ok(ip) = host.parse::<IpAddr>() {
                out.push(SocketAddr::new(ip, *port));
                continue;
            }
            let found =
                resolver
                    .lookup_ip(host.as_str())
                    .await
                    .map_err(|source| ResolveError::Lookup {
                        host: host.clone(),
                        source: Box::new(source),
                    })?;
            next = next.min(found.valid_until());
            out.extend(found.iter().map(|ip| SocketAddr::new(ip, *port)));
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err(ResolveError::NoAddresses);
        }
        // Not more often than once a second, whatever the TTL.
        Ok((out, next.max(Instant::now() + Duration::from_secs(1))))
    }

    /// `resolve` from sync code (building a policy): on a thread of its own,
    /// so it works inside a runtime too.
    pub fn resolve_now(&self) -> Result<(Vec<SocketAddr>, Instant), ResolveError> {
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(ResolveError::Runtime)?
                    .block_on(self.resolve())
            })
            .join()
            .unwrap_or(Err(ResolveError::Thread))
        })
    }
}
