//! Builds the Pingora server from a checked config (`build::Checked`): the
//! proxy listeners (plain and TLS, with the certificates and client
//! verifier the policy holds), the admin listener and one background task
//! that runs health checks, reloads on SIGHUP and drains on shutdown. It
//! opens no certificate or key file itself.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service;

use crate::admin::Admin;
use crate::build::Checked;
use crate::cluster::Controller;
use crate::config::reload;
use crate::metrics::METRICS;
use crate::proxy::bounds::Bounds;
use crate::proxy::edge::{Edge, TlsListener};
use crate::proxy::gateway::Gateway;
use crate::state::{Policy, Shared};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Build(Box<crate::state::BuildError>),
    #[error("{0}")]
    Runtime(std::io::Error),
    /// The store (`limit::Limiter::new`).
    #[error(transparent)]
    Store(#[from] crate::limit::store::OpenError),
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::StartError),
    #[error("server.tls: {0}")]
    Tls(Box<pingora::Error>),
    #[error("server.tls: no session ticket keys: {0}")]
    Tickets(String),
}

/// Runs the gateway until a shutdown signal; `config_path` is re-read on SIGHUP.
pub fn run(checked: Checked, config_path: Option<PathBuf>) -> Result<(), StartError> {
    let server_cfg = checked.config.server.clone();
    let admin_listen = checked.config.admin.listen;
    let admin_token = checked.config.admin.token_env.clone();
    let release = checked.config.store.timeout;
    let shared = shared_state(checked)?;
    let grace = server_cfg.shutdown_grace;
    // The drain's budget: the grace, then the leases' release (one store
    // timeout, all at once). Pingora's runtimes must outlive it, or a busy
    // machine loses the release to their shutdown.
    let conf = ServerConf {
        threads: server_cfg.threads,
        // Backstops only: the drain task below exits as soon as it is done.
        grace_period_seconds: Some(grace.as_secs() + release.as_secs() + 2),
        graceful_shutdown_timeout_seconds: Some(1),
        // One thread has nothing to steal from; Tokio's single-threaded
        // scheduler then runs woken tasks in order, so the Redis driver sends
        // the commands of all ready requests in one write (docs/benchmarks.md).
        work_stealing: server_cfg.threads > 1,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let mut listening = Vec::new();
    let proxy = proxy_service(&server, &shared, &server_cfg, &mut listening)?;
    server.add_service(proxy);
    if let Some(addr) = admin_listen {
        let mut admin = Service::new(
            "fairgate admin".to_string(),
            Admin {
                shared: shared.clone(),
                token: admin_token.and_then(|env| std::env::var(env).ok()),
            },
        );
        admin.add_tcp(&addr.to_string());
        server.add_service(admin);
        listening.push(addr);
    }
    server.add_service(background_service(
        "fairgate supervisor",
        Supervisor {
            shared,
            config_path,
            listening,
            grace,
        },
    ));
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals),
    });
    Ok(())
}

/// The first policy and the state that outlives it; the first JWKS fetch
/// happens here, so valid tokens pass from the start.
fn shared_state(checked: Checked) -> Result<Arc<Shared>, StartError> {
    let store_tls = checked.material.store_tls.clone();
    let otlp_roots = checked.material.otlp_roots.clone();
    let policy = Policy::build(checked, 1).map_err(|e| StartError::Build(Box::new(e)))?;
    if let Some(verifier) = &policy.verifier {
        if !verifier.remote.is_empty() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(StartError::Runtime)?;
            rt.block_on(verifier.refresh_remote(true));
        }
    }
    let limiter =
        crate::limit::Limiter::new(&policy.config, &store_tls).map_err(StartError::Store)?;
    let telemetry = match &policy.config.telemetry.otlp {
        Some(otlp) => {
            let telemetry = crate::telemetry::Telemetry::start(otlp, &otlp_roots);
            Some(telemetry.map_err(StartError::Telemetry)?)
        }
        None => None,
    };
    let shared = Arc::new(Shared {
        telemetry,
        limiter,
        auth_failures: Default::default(),
        user_failures: Default::default(),
        basic_checks: Default::default(),
        policy: ArcSwap::from_pointee(policy),
        ready: Default::default(),
        synced: AtomicBool::new(true),
        fair: Default::default(),
    });
    shared.fair.apply(&shared.policy.load().config);
    crate::state::init_series(&shared.policy.load().config);
    if shared.telemetry.is_some() {
        for result in ["exported", "failed"] {
            METRICS.trace_spans.with_label_values(&[result]);
        }
    }
    crate::state::log_new_certificates(None, shared.policy.load().certs.as_deref());
    METRICS.config_reloads.with_label_values(&["ok"]).inc();
    METRICS.config_generation.set(1);
    METRICS.config_last_success.set(crate::metrics::unix_now());
    Ok(shared)
}

/// The client-facing service: the edge around Pingora's proxy, on every
/// plain and TLS listener (added to `listening`).
fn proxy_service(
    server: &Server,
    shared: &Arc<Shared>,
    server_cfg: &crate::config::Server,
    listening: &mut Vec<SocketAddr>,
) -> Result<Service<Edge<pingora::proxy::HttpProxy<Gateway>>>, StartError> {
    let mut gateway = pingora::proxy::http_proxy(
        &server.configuration,
        Gateway {
            shared: shared.clone(),
        },
    );
    let h2 = &server_cfg.http2;
    let mut options = pingora::apps::HttpServerOptions::default();
    options.h2c = h2.h2c;
    // An HTTP/2 connection with no stream open closes like an idle HTTP/1 one.
    options.h2_idle_timeout = Some(server_cfg.keepalive_timeout);
    gateway.server_options = Some(options);
    let mut h2_options = pingora::protocols::http::v2::server::default_h2_options();
    // h2 itself sends GOAWAY when streams are reset before they were even
    // accepted; the same bound there as the edge's per second.
    h2_options
        .max_concurrent_streams(h2.max_concurrent_streams)
        .max_header_list_size(h2.max_header_list_size)
        .max_pending_accept_reset_streams(h2.max_resets_per_second as usize);
    gateway.h2_options = Some(h2_options);
    // The TLS listener is plain TCP to Pingora: the edge admits each
    // connection, then reads its PROXY header and runs its handshake
    // within `header_timeout` (Pingora's would hold it 60 s uncounted).
    let tls = match &server_cfg.tls {
        Some(tls) => Some(TlsListener {
            addr: tls.listen,
            acceptor: with_tickets(tls_settings(shared)?.build())?,
        }),
        None => None,
    };
    let names: Arc<dyn crate::proxy::edge::ByName> = Arc::new(HostAcceptors {
        shared: shared.clone(),
        made: Mutex::new(HashMap::new()),
    });
    let mut proxy = Service::new(
        "fairgate proxy".to_string(),
        Edge::new(gateway, Bounds::from_config(server_cfg), tls, Some(names)),
    );
    let tls_listen = server_cfg.tls.as_ref().map(|t| t.listen);
    let tcp = server_cfg.tcp_services.iter().map(|t| t.value.listen);
    for addr in server_cfg
        .listen
        .iter()
        .copied()
        .chain(tls_listen)
        .chain(tcp)
    {
        proxy.add_listener(ListenerConfig::tcp(addr.to_string()).l4_buffer(l4_buffers()));
        listening.push(addr);
    }
    Ok(proxy)
}

/// The TLS listener's settings: certificates chosen by SNI from the policy
/// in force at each handshake, HTTP/2 by ALPN, client certificates if asked
/// (the first policy's verifier: its roots change only by a restart).
fn tls_settings(shared: &Arc<Shared>) -> Result<TlsSettings, StartError> {
    crate::tls::install_provider();
    let mut settings =
        TlsSettings::with_callbacks(Box::new(crate::tls::ConnectionFacts::default()))
            .map_err(StartError::Tls)?;
    by_sni(shared, &mut settings);
    if let Some(verifier) = &shared.policy.load().client_verifier {
        settings.set_client_cert_verifier(verifier.clone());
    }
    Ok(settings)
}

/// Certificates by SNI from the policy in force, HTTP/2 by ALPN.
fn by_sni(shared: &Arc<Shared>, settings: &mut TlsSettings) {
    let policies = shared.clone();
    settings.set_cert_resolver(Arc::new(crate::tls::BySni(move || {
        policies.policy.load().certs.clone()
    })));
    settings.enable_h2();
}

/// The handshakes of `server.tls.client_certificates`' hosts, from the
/// policy in force at each handshake: the listener's settings with the
/// entry's verifier, made at the first handshake of its id (its roots and
/// depth) and kept across reloads while a policy has that id, so its
/// session tickets stay valid; and `server.tls.passthrough`'s pools.
struct HostAcceptors {
    shared: Arc<Shared>,
    made: Mutex<HashMap<u64, Arc<pingora::listeners::tls::Acceptor>>>,
}

impl crate::proxy::edge::ByName for HostAcceptors {
    fn any(&self) -> bool {
        self.shared.policy.load().tls_hosts.any()
    }

    fn choose(&self, sni: &str) -> crate::proxy::edge::Choice {
        use crate::proxy::edge::Choice;
        let policy = self.shared.policy.load();
        let pool = policy
            .tls_hosts
            .passed(sni)
            .and_then(|p| policy.pools.get(p));
        if let Some(pool) = pool {
            return Choice::Pass {
                pool: pool.clone(),
                sni: sni.to_string(),
                idle: policy.config.server.upgrade_idle_timeout,
            };
        }
        match self.acceptor(&policy, sni) {
            Some(acceptor) => Choice::Acceptor(acceptor),
            None => Choice::Listener,
        }
    }

    fn admits(&self, client: Option<std::net::IpAddr>) -> bool {
        let policy = self.shared.policy.load();
        let rules = &policy.config.server.addresses;
        let none = crate::config::AddressRules::default();
        crate::proxy::actions::check_address(rules, &none, client).is_ok()
    }

    fn tcp(&self, local: SocketAddr) -> Option<crate::proxy::edge::Choice> {
        let policy = self.shared.policy.load();
        let services = &policy.config.server.tcp_services;
        let service = services.iter().map(|s| &s.value).find(|s| {
            s.listen.port() == local.port()
                && (s.listen.ip().is_unspecified() || s.listen.ip() == local.ip())
        })?;
        Some(crate::proxy::edge::Choice::Pass {
            pool: policy.pools.get(&service.upstream)?.clone(),
            sni: format!("tcp {}", service.listen),
            idle: service.idle_timeout,
        })
    }
}

impl HostAcceptors {
    fn acceptor(
        &self,
        policy: &crate::state::Policy,
        sni: &str,
    ) -> Option<Arc<pingora::listeners::tls::Acceptor>> {
        let entry = policy.tls_hosts.find(sni)?;
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(acceptor) = made.get(&entry.id) {
            return Some(acceptor.clone());
        }
        let facts = crate::tls::ConnectionFacts { clients: entry.id };
        let mut settings = TlsSettings::with_callbacks(Box::new(facts)).ok()?;
        by_sni(&self.shared, &mut settings);
        settings.set_client_cert_verifier(entry.verifier.clone());
        // Not made: the listener's own, whose connections the host's
        // requests then find unverified for it (421).
        let acceptor = with_tickets(settings.build())
            .inspect_err(|e| tracing::error!(error = %e, "tls.client_acceptor_failed"))
            .ok()
            .map(Arc::new)?;
        // Only the ids of the policy in force are kept.
        made.retain(|id, _| policy.tls_hosts.has_id(*id));
        made.insert(entry.id, acceptor.clone());
        Some(acceptor)
    }
}

/// No read buffer under a client connection: Pingora's default is 64 KiB,
/// allocated at accept and held while the connection idles, the largest
/// part of an idle keep-alive connection's memory. Reads go to the socket
/// into the buffer of whoever reads (Pingora's head buffer, rustls' record
/// buffer, h2's frame buffer, the body's); a refused head, and a closing
/// connection, drain what the client already sent and nobody read
/// (`Guarded::drain`).
fn l4_buffers() -> L4BufferSettings {
    L4BufferSettings {
        read: Some(0),
        write: None,
    }
}

/// Pingora's acceptor with session tickets: a returning client resumes
/// (one key agreement, no certificate signature) whatever other clients
/// came between, where rustls' default (no tickets, 256 cached sessions)
/// resumes almost none of a busy edge's. The ticket keys are random per
/// process and rotated every 6 hours (rustls' `Ticketer`), kept only in
/// memory; no 0-RTT. Pingora's `TlsSettings` has no ticket setting, so
/// its rustls config is copied and the copy given the ticketer.
fn with_tickets(
    mut acceptor: pingora::listeners::tls::Acceptor,
) -> Result<pingora::listeners::tls::Acceptor, StartError> {
    let mut config = (**acceptor.acceptor.config()).clone();
    config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
        .map_err(|e| StartError::Tickets(e.to_string()))?;
    acceptor.acceptor = pingora::tls::TlsAcceptor::from(Arc::new(config));
    Ok(acceptor)
}

/// SIGTERM and SIGINT both mean: stop accepting, drain, exit 0.
struct Signals;

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "fairgate.stopping"),
            _ = int.recv() => tracing::info!(signal = "SIGINT", "fairgate.stopping"),
        }
        ShutdownSignal::GracefulTerminate
    }
}

struct Supervisor {
    shared: Arc<Shared>,
    config_path: Option<PathBuf>,
    listening: Vec<SocketAddr>,
    grace: Duration,
}

impl Supervisor {
    /// Ready once every listener accepts connections.
    async fn wait_listeners(&self) {
        // Not the TLS listener (a bare connect there is a failed handshake
        // in Pingora's log) nor a TCP service's (it would open a connection
        // to the service): they are bound with the plain ones, by one service.
        let skipped: Vec<SocketAddr> = {
            let policy = self.shared.policy.load();
            let server = &policy.config.server;
            let tcp = server.tcp_services.iter().map(|t| t.value.listen);
            server.tls.iter().map(|t| t.listen).chain(tcp).collect()
        };
        for addr in self.listening.iter().filter(|a| !skipped.contains(a)) {
            let mut target = *addr;
            if target.ip().is_unspecified() {
                target.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            for _ in 0..500 {
                if tokio::net::TcpStream::connect(target).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.shared.ready.store(true, Ordering::Release);
        let addrs: Vec<String> = self.listening.iter().map(|a| a.to_string()).collect();
        tracing::info!(listen = ?addrs, "fairgate.ready");
    }

    fn health_checks(&self, last: &mut HashMap<String, Instant>) {
        let policy = self.shared.policy.load();
        // Only the pools with work to do get a task: a controller's
        // 10,000 pools of endpoints have none.
        for pool in policy.pools.values().filter(|p| p.resolves()) {
            let pool = pool.clone();
            tokio::spawn(async move { pool.refresh().await });
        }
        for (name, pool) in &policy.pools {
            let Some(every) = pool.health_interval() else {
                continue;
            };
            let due = last.get(name).is_none_or(|t| t.elapsed() >= every);
            if due {
                last.insert(name.clone(), Instant::now());
                let pool = pool.clone();
                tokio::spawn(async move { pool.health_check().await });
            }
        }
    }

    /// Waits for in-flight requests, up to the grace, then ends the process.
    async fn drain(&self) -> ! {
        self.shared.ready.store(false, Ordering::Release);
        let deadline = Instant::now() + self.grace;
        while METRICS.in_flight.get() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let released = self.shared.limiter.release_all().await;
        if released > 0 {
            tracing::info!(released, "slots.released_at_shutdown");
        }
        let shared = self.shared.clone();
        // The last requests' spans; the SDK's flush blocks its caller.
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(t) = &shared.telemetry {
                t.flush();
            }
        })
        .await;
        tracing::info!(abandoned = METRICS.in_flight.get(), "fairgate.stopped");
        std::process::exit(0);
    }
}

/// The config file and the certificate files it names: watched, with a
/// digest of their bytes to tell a real change from a touch.
struct Watched {
    files: Vec<PathBuf>,
    watch: Option<reload::Watch>,
    seen: Option<u64>,
}

impl Watched {
    fn new(path: Option<&PathBuf>, shared: &Shared) -> Self {
        let files = match path {
            Some(path) => reload::files(path, &shared.policy.load().config),
            None => Vec::new(),
        };
        let watch = match files.is_empty() {
            true => None,
            false => reload::watch(&files)
                .map_err(|e| tracing::warn!(error = %e, "config.watch_unavailable"))
                .ok(),
        };
        let seen = reload::digest(&files);
        Watched { files, watch, seen }
    }

    async fn event(&mut self) -> Option<()> {
        self.watch.as_mut()?.events.recv().await
    }

    /// After a burst of events (an editor's write and rename, a Secret's
    /// `..data` swap): whether the bytes changed.
    async fn settled_change(&mut self) -> bool {
        tokio::time::sleep(Duration::from_millis(150)).await;
        if let Some(w) = self.watch.as_mut() {
            while w.events.try_recv().is_ok() {}
        }
        let now = reload::digest(&self.files);
        let changed = now.is_some() && now != self.seen;
        self.seen = now.or(self.seen);
        changed
    }
}

impl Supervisor {
    /// Reloads, then watches the files the policy in force names. In
    /// controller mode the controller builds the base with the cluster's
    /// objects: it is told to read the file again.
    async fn reload(&self, watched: &mut Watched, controller: Option<&Controller>) {
        let Some(path) = &self.config_path else {
            return;
        };
        if let Some(c) = controller {
            c.base_changed.notify_one();
            watched.seen = reload::digest(&watched.files);
            return;
        }
        watched.seen = reload::digest(&watched.files);
        let _ = crate::state::reload(&self.shared, path).await;
        let files = reload::files(path, &self.shared.policy.load().config);
        if files != watched.files {
            *watched = Watched::new(Some(path), &self.shared);
        }
    }
}

#[async_trait]
impl BackgroundService for Supervisor {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).expect("SIGHUP handler");
        // Watch before reporting ready, so no change after readiness is missed.
        let mut watched = Watched::new(self.config_path.as_ref(), &self.shared);
        let settings = self.shared.policy.load().config.kubernetes.clone();
        let controller = match (settings, &self.config_path) {
            (Some(settings), Some(path)) => {
                Some(crate::cluster::start(self.shared.clone(), path.clone(), settings).await)
            }
            _ => None,
        };
        let controller = controller.as_deref();
        self.shared.limiter.probe().await;
        self.wait_listeners().await;
        let mut last_checks = HashMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = shutdown.changed() => self.drain().await,
                _ = hangup.recv() => self.reload(&mut watched, controller).await,
                Some(()) = watched.event() => {
                    if watched.settled_change().await {
                        self.reload(&mut watched, controller).await;
                    }
                }
                _ = tick.tick() => {
                    self.health_checks(&mut last_checks);
                    if self.shared.limiter.needs_probe() {
                        let shared = self.shared.clone();
                        tokio::spawn(async move { shared.limiter.probe().await });
                    }
                    if let Some(verifier) = self.shared.policy.load().verifier.clone() {
                        tokio::spawn(async move { verifier.refresh_remote(false).await });
                    }
                }
            }
        }
    }
}
