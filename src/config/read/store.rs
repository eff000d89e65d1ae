//! Reads `store`: the kind, its URLs and the failure policy.

use super::*;

pub(super) fn store(r: &mut Reader<'_>, at: Option<At<'_>>) -> Store {
    let mut store = Store {
        kind: StoreKind::Memory,
        urls: Vec::new(),
        password_env: None,
        key_prefix: String::new(),
        timeout: Duration::from_millis(50),
        on_unavailable: OnUnavailable::Local,
        local_divisor: NonZeroU64::MIN,
    };
    let Some(at) = at else { return store };
    let Some(f) = r.mapping(&at, schema::STORE) else {
        return store;
    };
    if let Some(at) = f.get("kind") {
        store.kind = match r.string(&at).as_deref() {
            Some("memory") => StoreKind::Memory,
            Some("redis") => StoreKind::Redis,
            Some("redis_cluster") => StoreKind::RedisCluster,
            Some(_) => {
                r.error_value(
                    &at,
                    "store.kind_invalid",
                    "must be one of redis, redis_cluster, memory",
                );
                StoreKind::Memory
            }
            None => StoreKind::Memory,
        };
    }
    connection(r, &at, &f, &mut store);
    if let Some(at) = f.get("key_prefix") {
        store.key_prefix = at
            .node
            .as_scalar()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        if store.key_prefix.contains(['{', '}']) {
            r.error_value(&at, "store.key_prefix_invalid", "must not contain { or }");
        }
    }
    if let Some(d) = f.get("timeout").and_then(|at| r.positive_duration(&at)) {
        store.timeout = d;
    }
    if let Some(at) = f.get("on_unavailable") {
        store.on_unavailable = match r.string(&at).as_deref() {
            Some("local") => OnUnavailable::Local,
            Some("allow") => OnUnavailable::Allow,
            Some("deny") => OnUnavailable::Deny,
            Some(_) => {
                r.error_value(
                    &at,
                    "store.on_unavailable_invalid",
                    "must be one of local, allow, deny",
                );
                OnUnavailable::Local
            }
            None => OnUnavailable::Local,
        };
    }
    if let Some(at) = f.get("local_divisor") {
        if let Some(n) = r.count(&at, "store.local_divisor_invalid") {
            store.local_divisor = n;
        }
    }
    store
}

/// Where the store is: `url` or `nodes` as the kind needs, and the password.
fn connection(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>, store: &mut Store) {
    let mut check_url = |r: &mut Reader<'_>, at: &At<'_>, text: String| {
        if redis_url_ok(&text) {
            store.urls.push(text);
        } else {
            r.error_value(
                at,
                "store.url_invalid",
                "expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]",
            );
        }
    };
    match store.kind {
        StoreKind::Redis => match f.get("url") {
            Some(at) => {
                if let Some(text) = r.string(&at) {
                    check_url(r, &at, text);
                }
            }
            None => r.error(at, "store.url_invalid", "kind redis needs `url`"),
        },
        StoreKind::RedisCluster => match f.get("nodes") {
            Some(at) => {
                let items = r.sequence(&at);
                for (i, node) in items.into_iter().enumerate() {
                    let item = at.item(i, node);
                    if let Some(text) = r.string(&item) {
                        check_url(r, &item, text);
                    }
                }
                if store.urls.is_empty() {
                    r.error(&at, "store.url_invalid", "needs at least one node URL");
                }
            }
            None => r.error(at, "store.url_invalid", "kind redis_cluster needs `nodes`"),
        },
        StoreKind::Memory => {}
    }
    if let Some(at) = f.get("password_env") {
        store.password_env = r.string(&at);
        if let Some(env) = &store.password_env {
            if std::env::var_os(env).is_none() {
                r.error_value(
                    &at,
                    "store.password_missing",
                    format!("environment variable {env} is not set"),
                );
            }
        }
    }
    if let (StoreKind::Redis, Some(n)) = (store.kind, f.get("nodes")) {
        r.error(
            &n,
            "store.url_invalid",
            "nodes is for kind redis_cluster; kind redis takes url",
        );
    }
    if let (StoreKind::RedisCluster, Some(u)) = (store.kind, f.get("url")) {
        r.error(
            &u,
            "store.url_invalid",
            "url is for kind redis; kind redis_cluster takes nodes",
        );
    }
    if store.kind == StoreKind::Memory {
        for key in ["url", "nodes", "password_env"] {
            if let Some(k) = f.get(key) {
                r.error(&k, "store.url_invalid", "kind memory connects to nothing");
            }
        }
    }
}

pub(super) fn redis_url_ok(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("redis://")
        .or_else(|| text.strip_prefix("rediss://"))
    else {
        return false;
    };
    let host_port = rest.rsplit('@').next().unwrap_or(rest);
    let host_port = host_port.split('/').next().unwrap_or("");
    !host_port.is_empty() && !host_port.contains(char::is_whitespace)
}
