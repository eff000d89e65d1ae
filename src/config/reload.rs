//! What reload needs from the config side: which changes only a restart can
//! apply, watching the file (and the directory swaps of a ConfigMap), and a
//! digest to tell a real change. Swapping the policy is `state::reload`.

use std::path::Path;

use super::Config;

/// Fields whose change only a restart can apply: listeners, threads and
/// grace are fixed when the process starts, and the store connection (and
/// its fallback settings) lives as long as the process.
pub fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    let (s, t) = (&old.server, &new.server);
    let (o, n) = (&old.store, &new.store);
    [
        ("server.listen", s.listen != t.listen),
        ("server.tls", s.tls != t.tls),
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
        ("admin.listen", old.admin != new.admin),
        ("store.kind", o.kind != n.kind),
        ("store.url", o.urls != n.urls),
        ("store.password_env", o.password_env != n.password_env),
        ("store.key_prefix", o.key_prefix != n.key_prefix),
        ("store.timeout", o.timeout != n.timeout),
        ("store.on_unavailable", o.on_unavailable != n.on_unavailable),
        ("store.local_divisor", o.local_divisor != n.local_divisor),
    ]
    .into_iter()
    .filter_map(|(field, changed)| changed.then_some(field))
    .collect()
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

pub fn watch(path: &Path) -> Result<Watch, String> {
    use notify::Watcher;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    watcher
        .watch(&dir, notify::RecursiveMode::NonRecursive)
        .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    Ok(Watch {
        _watcher: watcher,
        events,
    })
}

/// A digest of the file as it reads now (through any symlinks).
pub fn digest(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}
