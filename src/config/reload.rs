//! What reload needs from the config side: which changes only a restart can
//! apply, watching the file (and the directory swaps of a ConfigMap), and a
//! digest to tell a real change. Swapping the policy is `state::reload`.

use std::path::{Path, PathBuf};

use super::{Config, Server, Store};

/// Fields whose change only a restart can apply: listeners, threads and
/// grace are fixed when the process starts, and the store connection (and
/// its fallback settings) lives as long as the process.
pub fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = server_changes(&old.server, &new.server);
    changed.extend(store_changes(&old.store, &new.store));
    changed.push(("admin.listen", old.admin != new.admin));
    // The watches, the Lease and what they answer to are set up at start.
    changed.push(("kubernetes", old.kubernetes != new.kubernetes));
    // The exporter and its sampler live as long as the process.
    changed.push((
        "telemetry (otlp, sampling, service_name)",
        old.telemetry.otlp != new.telemetry.otlp,
    ));
    changed
        .into_iter()
        .filter_map(|(field, changed)| changed.then_some(field))
        .collect()
}

/// The TCP services' addresses, in any order.
fn tcp_listens(s: &Server) -> std::collections::BTreeSet<std::net::SocketAddr> {
    s.tcp_services.iter().map(|x| x.value.listen).collect()
}

/// The `server` keys a restart applies, each with whether it changed.
fn server_changes(s: &Server, t: &Server) -> Vec<(&'static str, bool)> {
    vec![
        ("server.listen", s.listen != t.listen),
        (
            "server.tcp_services[].listen",
            tcp_listens(s) != tcp_listens(t),
        ),
        // Certificates reload; the listener and client-certificate roots do not.
        (
            "server.tls.listen",
            s.tls.as_ref().map(|x| x.listen) != t.tls.as_ref().map(|x| x.listen),
        ),
        (
            "server.tls.client_ca",
            // Its source, not where the file names it.
            s.tls
                .as_ref()
                .map(|x| x.client_ca.as_ref().map(|c| &c.value))
                != t.tls
                    .as_ref()
                    .map(|x| x.client_ca.as_ref().map(|c| &c.value)),
        ),
        (
            "server.tls.client_auth",
            s.tls.as_ref().map(|x| x.client_cert_required)
                != t.tls.as_ref().map(|x| x.client_cert_required),
        ),
        ("server.http2", s.http2 != t.http2),
        ("server.threads", s.threads != t.threads),
        (
            "server.shutdown_grace",
            s.shutdown_grace != t.shutdown_grace,
        ),
        (
            "server.trusted_proxies",
            s.trusted_proxies != t.trusted_proxies,
        ),
        // The edge's bounds are fixed when the listeners start.
        (
            "server.max_header_size",
            s.max_header_size != t.max_header_size,
        ),
        (
            "server.header_timeout",
            s.header_timeout != t.header_timeout,
        ),
        (
            "server.keepalive_timeout",
            s.keepalive_timeout != t.keepalive_timeout,
        ),
        (
            "server.max_connections",
            s.max_connections != t.max_connections,
        ),
        (
            "server.max_connections_per_ip",
            s.max_connections_per_ip != t.max_connections_per_ip,
        ),
        ("server.ipv6_prefix", s.ipv6_prefix != t.ipv6_prefix),
        (
            "server.proxy_protocol",
            s.proxy_protocol != t.proxy_protocol,
        ),
    ]
}

/// The `store` keys a restart applies: the connection and its fallback
/// live as long as the process.
fn store_changes(o: &Store, n: &Store) -> Vec<(&'static str, bool)> {
    // Its files, not where the file names them.
    let tls = |s: &Store| {
        let t = &s.tls;
        let client = t.client.as_ref().map(|c| c.value.clone());
        (
            t.ca_file.as_ref().map(|c| c.value.clone()),
            t.verify,
            client,
        )
    };
    vec![
        ("store.kind", o.kind != n.kind),
        ("store.url", o.urls != n.urls),
        ("store.master_name", o.master_name != n.master_name),
        ("store.password_env", o.password_env != n.password_env),
        (
            "store TLS (ca_file, tls_verify, cert_file, key_file)",
            tls(o) != tls(n),
        ),
        ("store.key_prefix", o.key_prefix != n.key_prefix),
        ("store.timeout", o.timeout != n.timeout),
        ("store.on_unavailable", o.on_unavailable != n.on_unavailable),
        ("store.local_divisor", o.local_divisor != n.local_divisor),
        ("store.durability", o.durability != n.durability),
    ]
}

/// Notices changes to the config file: in-place writes, editors' write-and-
/// rename, and the atomic `..data` symlink swap of a Kubernetes ConfigMap
/// volume. It watches the file's directory (the file itself may be replaced)
/// and says only "something changed"; the caller debounces and compares
/// contents.
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
    pub events: tokio::sync::mpsc::UnboundedReceiver<()>,
}

/// Why the files cannot be watched (reload then waits for SIGHUP).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch: {0}")]
    Start(notify::Error),
    #[error("cannot watch {}: {source}", dir.display())]
    Directory { dir: PathBuf, source: notify::Error },
}

/// Watches the directory of each file (so atomic renames and symlink swaps
/// are seen, not only writes in place).
pub fn watch(files: &[PathBuf]) -> Result<Watch, WatchError> {
    use notify::Watcher;
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(WatchError::Start)?;
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .map(|f| {
            f.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    for dir in dirs {
        watcher
            .watch(&dir, notify::RecursiveMode::NonRecursive)
            .map_err(|source| WatchError::Directory {
                dir: dir.clone(),
                source,
            })?;
    }
    Ok(Watch {
        _watcher: watcher,
        events,
    })
}

/// The files a policy reads: the config itself, then every certificate
/// and key file, htpasswd file and API keys file it names (a change on
/// disk is a reload too: a revoked key stops working within the reload
/// time).
pub fn files(path: &Path, config: &Config) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    if let Some(tls) = &config.server.tls {
        for c in &tls.certificates {
            let pair = [&c.value.cert, &c.value.key];
            out.extend(
                pair.into_iter()
                    .filter_map(|s| s.path())
                    .map(Path::to_path_buf),
            );
        }
    }
    let methods = config.auth.iter().flat_map(|a| a.methods.values());
    for method in methods {
        if let super::MethodKind::Basic(b) = &method.kind {
            let users = b.users.as_ref().and_then(|u| u.value.path());
            out.extend(users.map(Path::to_path_buf));
        }
        let source = match &method.kind {
            super::MethodKind::Basic(b) => &b.htpasswd.value,
            super::MethodKind::ApiKey(k) => &k.keys.value,
            super::MethodKind::External(_) => continue,
        };
        out.extend(source.path().map(Path::to_path_buf));
    }
    out
}

/// A digest of the files as they read now (through any symlinks); `None`
/// when the first (the config) cannot be read.
pub fn digest(files: &[PathBuf]) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(files.first()?).ok()?.hash(&mut h);
    for f in &files[1..] {
        std::fs::read(f).ok().hash(&mut h);
    }
    Some(h.finish())
}
