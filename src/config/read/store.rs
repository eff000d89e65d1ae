//! Reads `store`: the kind, where it is (URLs, sentinels), how it is
//! reached over TLS, and the failure policy.

use super::*;

pub(super) fn store(r: &mut Reader<'_>, at: Option<At<'_>>, base: &Path) -> Store {
    let mut store = Store {
        kind: StoreKind::Memory,
        urls: Vec::new(),
        master_name: None,
        password_env: None,
        tls: StoreTls::default(),
        key_prefix: String::new(),
        timeout: Duration::from_millis(50),
        on_unavailable: OnUnavailable::Local,
        local_divisor: NonZeroU64::MIN,
        durability: Durability::Fast,
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
            Some("redis_sentinel") => StoreKind::RedisSentinel,
            Some(_) => {
                r.error_value(
                    &at,
                    "store.kind_invalid",
                    "must be one of redis, redis_cluster, redis_sentinel, memory",
                );
                StoreKind::Memory
            }
            None => StoreKind::Memory,
        };
    }
    connection(r, &at, &f, &mut store);
    tls(r, &f, base, &mut store);
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
    durability(r, &f, &mut store);
    store
}

/// `durability`: `fast` or `replicated`; a replica acknowledges writes only
/// on Redis, so `replicated` with the memory store is refused.
fn durability(r: &mut Reader<'_>, f: &yaml::Fields<'_>, store: &mut Store) {
    let Some(at) = f.get("durability") else {
        return;
    };
    store.durability = match r.string(&at).as_deref() {
        Some("fast") => Durability::Fast,
        Some("replicated") if store.kind == StoreKind::Memory => {
            r.error_value(
                &at,
                "store.durability_invalid",
                "kind memory has no replicas; replicated needs kind redis, redis_cluster \
                 or redis_sentinel",
            );
            Durability::Fast
        }
        Some("replicated") => Durability::Replicated,
        Some(_) => {
            r.error_value(
                &at,
                "store.durability_invalid",
                "must be one of fast, replicated",
            );
            Durability::Fast
        }
        None => Durability::Fast,
    };
}

/// The keys that say where the store is, and the kind each belongs to.
const ADDRESS_KEYS: [(&str, StoreKind); 4] = [
    ("url", StoreKind::Redis),
    ("nodes", StoreKind::RedisCluster),
    ("sentinels", StoreKind::RedisSentinel),
    ("master_name", StoreKind::RedisSentinel),
];

/// Where the store is: `url`, `nodes` or `sentinels` and `master_name` as
/// the kind needs, and the password.
fn connection(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>, store: &mut Store) {
    match store.kind {
        StoreKind::Redis => match f.get("url") {
            Some(at) => {
                if let Some(text) = r.string(&at) {
                    check_url(r, &at, text, store);
                }
            }
            None => r.error(at, "store.url_invalid", "kind redis needs `url`"),
        },
        StoreKind::RedisCluster => url_list(r, at, f, "nodes", store),
        StoreKind::RedisSentinel => {
            url_list(r, at, f, "sentinels", store);
            master_name(r, at, f, store);
        }
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
    if store.kind == StoreKind::Memory {
        let keys = ["url", "nodes", "sentinels", "master_name", "password_env"];
        for key in keys.into_iter().chain(TLS_KEYS) {
            if let Some(k) = f.get(key) {
                r.error(&k, "store.url_invalid", "kind memory connects to nothing");
            }
        }
        return;
    }
    for (key, owner) in ADDRESS_KEYS {
        if let (true, Some(k)) = (owner != store.kind, f.get(key)) {
            let message = format!(
                "{key} is for kind {}; kind {} takes {}",
                kind_name(owner),
                kind_name(store.kind),
                takes(store.kind)
            );
            r.error(&k, "store.url_invalid", message);
        }
    }
}

/// Sentinel's lookup verifies a master with the client's own roots only, so
/// a private CA could not be honoured there; refused rather than half done.
const SENTINEL_TLS: &str = "kind redis_sentinel does not support TLS yet; its sentinels and \
     data nodes are reached over plain TCP";

/// The keys of TLS to the store, which only `rediss://` URLs use.
const TLS_KEYS: [&str; 4] = ["ca_file", "tls_verify", "cert_file", "key_file"];

/// `ca_file`, `tls_verify`, `cert_file` and `key_file`. Each file is read
/// here once to check it, so that what `check` accepts is what `serve` can
/// load.
fn tls(r: &mut Reader<'_>, f: &yaml::Fields<'_>, base: &Path, store: &mut Store) {
    let Some(first) = TLS_KEYS.iter().find_map(|k| f.get(k)) else {
        return;
    };
    let url_key = match store.kind {
        StoreKind::Memory => return,
        StoreKind::Redis => "url",
        StoreKind::RedisCluster => "nodes",
        StoreKind::RedisSentinel => {
            r.error(&first, "store.tls_invalid", SENTINEL_TLS);
            return;
        }
    };
    if !store.urls.iter().all(|u| u.starts_with("rediss://")) {
        let message = format!("TLS settings need rediss:// URLs; store.{url_key} uses redis://");
        r.error(&first, "store.tls_invalid", message);
        return;
    }
    if let Some(at) = f.get("tls_verify") {
        store.tls.verify = r.bool(&at).unwrap_or(true);
    }
    if let Some(ca_at) = f.get("ca_file") {
        let path = file_path(r, f, "ca_file", base);
        match path {
            Some(_) if !store.tls.verify => r.error(
                &ca_at,
                "store.tls_invalid",
                "tls_verify: false accepts any certificate, so ca_file would not be used; \
                 keep one of them",
            ),
            Some(value) => {
                let place = ca_at.place_value();
                store.tls.ca_file = Some(Located { value, place });
            }
            None => {}
        }
    }
    if f.get("cert_file").is_some() || f.get("key_file").is_some() {
        let cert = file_path(r, f, "cert_file", base);
        let key = file_path(r, f, "key_file", base);
        if let (Some(cert), Some(key), Some(at)) = (cert, key, f.get("cert_file")) {
            let place = at.place();
            store.tls.client = Some(Located {
                value: (cert, key),
                place,
            });
        }
    }
}

fn kind_name(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Memory => "memory",
        StoreKind::Redis => "redis",
        StoreKind::RedisCluster => "redis_cluster",
        StoreKind::RedisSentinel => "redis_sentinel",
    }
}

fn takes(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Redis => "url",
        StoreKind::RedisCluster => "nodes",
        StoreKind::RedisSentinel => "sentinels and master_name",
        StoreKind::Memory => "nothing",
    }
}

fn check_url(r: &mut Reader<'_>, at: &At<'_>, text: String, store: &mut Store) {
    if !redis_url_ok(&text) {
        r.error_value(
            at,
            "store.url_invalid",
            "expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]",
        );
    } else if text.contains('#') {
        // The client reads `#insecure` as "verify nothing": say it in the file.
        r.error_value(
            at,
            "store.url_invalid",
            "no #fragment: TLS settings are store keys (tls_verify, ca_file)",
        );
    } else if store.kind == StoreKind::RedisSentinel && text.starts_with("rediss://") {
        r.error_value(at, "store.tls_invalid", SENTINEL_TLS);
        // Kept, so that it is not also reported missing.
        store.urls.push(text);
    } else if store.kind == StoreKind::RedisSentinel && url_db(&text).is_some_and(|db| db != "0") {
        // A sentinel has no databases: the client's SELECT would fail on it.
        r.error_value(at, "store.url_invalid", "a sentinel URL takes no /DB");
    } else {
        store.urls.push(text);
    }
}

/// `nodes` of a cluster or `sentinels`: a list of at least one URL.
fn url_list(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>, key: &str, store: &mut Store) {
    let Some(list) = f.get(key) else {
        let kind = kind_name(store.kind);
        r.error(
            at,
            "store.url_invalid",
            format!("kind {kind} needs `{key}`"),
        );
        return;
    };
    let items = r.sequence(&list);
    for (i, node) in items.into_iter().enumerate() {
        let item = list.item(i, node);
        if let Some(text) = r.string(&item) {
            check_url(r, &item, text, store);
        }
    }
    let tls = store
        .urls
        .iter()
        .filter(|u| u.starts_with("rediss://"))
        .count();
    if tls != 0 && tls != store.urls.len() {
        r.error(
            &list,
            "store.url_invalid",
            "mixes redis:// and rediss:// URLs; use one scheme for all",
        );
    }
    if store.urls.is_empty() {
        let what = match store.kind {
            StoreKind::RedisSentinel => "sentinel",
            _ => "node",
        };
        r.error(
            &list,
            "store.url_invalid",
            format!("needs at least one {what} URL"),
        );
    }
}

/// The name Sentinel monitors the master under (`sentinel monitor NAME ...`).
fn master_name(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>, store: &mut Store) {
    let Some(name_at) = f.get("master_name") else {
        r.error(
            at,
            "store.master_name_invalid",
            "kind redis_sentinel needs `master_name`",
        );
        return;
    };
    let Some(name) = r.string(&name_at) else {
        return;
    };
    if name.contains(char::is_whitespace) {
        r.error_value(
            &name_at,
            "store.master_name_invalid",
            "must not contain spaces",
        );
    } else {
        store.master_name = Some(name);
    }
}

/// The `/DB` part of a Redis URL, when it has one.
fn url_db(text: &str) -> Option<&str> {
    let rest = text.split_once("://")?.1;
    let host_port_db = rest.rsplit('@').next().unwrap_or(rest);
    let (_, db) = host_port_db.split_once('/')?;
    (!db.is_empty()).then_some(db)
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
    // And as the client will read it at start (port, database, brackets).
    !host_port.is_empty()
        && !host_port.contains(char::is_whitespace)
        && redis::IntoConnectionInfo::into_connection_info(text).is_ok()
}
