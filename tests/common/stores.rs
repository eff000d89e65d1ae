//! The store under test of the token-bucket suites (`limits.rs`,
//! `limits_store.rs`): the in-process `memory` store, a real `redis-server`
//! or a real 3-master Redis Cluster, a gateway on it, and how to look
//! inside it; the macros that run one body on each store. Not glob-exported
//! by `common`: its `token` carries a user and a plan.

use super::*;
use serde_json::json;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Memory,
    Redis,
    Cluster,
}

/// The store under test, and how to look inside it.
pub struct Env {
    backend: Backend,
    redis: Option<Redis>,
    cluster: Option<Cluster>,
    pub upstream: Upstream,
}

impl Env {
    pub async fn new(backend: Backend) -> Env {
        Env {
            backend,
            redis: match backend {
                Backend::Redis => Some(Redis::start().await),
                _ => None,
            },
            cluster: match backend {
                Backend::Cluster => Some(Cluster::start().await),
                _ => None,
            },
            upstream: Upstream::start().await,
        }
    }

    /// The store under test's `store:` mapping; `None` for the memory store,
    /// the policy's default.
    pub fn store(&self) -> Option<String> {
        match self.backend {
            Backend::Memory => None,
            Backend::Redis => Some(format!(
                "{{kind: redis, url: \"{}\", timeout: 2s}}",
                self.redis.as_ref().unwrap().url()
            )),
            Backend::Cluster => Some(format!(
                "{{kind: redis_cluster, nodes: {:?}, timeout: 2s}}",
                self.cluster.as_ref().unwrap().urls()
            )),
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        match (&self.redis, &self.cluster) {
            (Some(r), _) => vec![r.port],
            (_, Some(c)) => c.nodes.iter().map(|n| n.port).collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_redis(&self) -> bool {
        self.backend != Backend::Memory
    }

    /// Every key in the store, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.ports().into_iter().flat_map(scan_keys).collect();
        keys.sort();
        keys
    }

    /// Script executions: EVALSHA and EVAL calls, less EVALSHAs refused
    /// with NOSCRIPT (after which the gateway sends the same call as EVAL).
    pub fn script_calls(&self) -> u64 {
        self.ports()
            .into_iter()
            .map(|p| {
                command_calls(p, "evalsha") - command_failures(p, "evalsha")
                    + command_calls(p, "eval")
            })
            .sum()
    }

    pub fn script_flush(&self) {
        for p in self.ports() {
            assert_eq!(redis_cli(p, &["SCRIPT", "FLUSH"]).unwrap().trim(), "OK");
        }
    }

    /// A gateway on the store under test with the shared HS256 key, the
    /// upstream `api`, and the test's own sections, `rest`.
    pub async fn gateway(&self, rest: &str) -> Gateway {
        let policy = Policy::new().server("shutdown_grace: 1s\nthreads: 1");
        let policy = match self.store() {
            Some(store) => policy.store(&store),
            None => policy,
        };
        policy
            .hs256()
            .sections(&format!(
                "upstreams:\n  api: {{targets: [\"{}\"]}}\n{rest}",
                self.upstream.addr
            ))
            .start()
            .await
    }
}

pub fn token(tenant: &str, user: &str, plan: Option<&str>) -> String {
    let mut claims = json!({"tid": tenant, "sub": user, "jti": format!("jti-{user}")});
    if let Some(p) = plan {
        claims["plan"] = json!(p);
    }
    hs256_token(TEST_SECRET, claims)
}

pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// Runs each named body, `async fn NAME(Backend)`, as three tests:
/// `memory::NAME`, `redis::NAME` and `cluster::NAME`.
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name($crate::common::stores::Backend::Memory).await })*
        }
        mod redis {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name($crate::common::stores::Backend::Redis).await })*
        }
        mod cluster {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name($crate::common::stores::Backend::Cluster).await })*
        }
    };
}

/// For bodies whose subject is Redis itself (its keys, its script calls,
/// its script cache): the memory store has nothing of the kind to check.
macro_rules! on_redis_stores {
    ($($name:ident),* $(,)?) => {
        mod redis_subject {
            mod redis {
                $(#[tokio::test(flavor = "multi_thread")]
                async fn $name() { super::super::$name($crate::common::stores::Backend::Redis).await })*
            }
            mod cluster {
                $(#[tokio::test(flavor = "multi_thread")]
                async fn $name() { super::super::$name($crate::common::stores::Backend::Cluster).await })*
            }
        }
    };
}
pub(crate) use {on_every_store, on_redis_stores};

/// One tenant-scoped limit `api` sized `bucket`, on every path.
pub fn tenant_limit(bucket: &str) -> String {
    format!(
        "limits:\n  api: {{scope: tenant, default: {bucket}}}\nroutes:\n  \
         - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api]}}\n"
    )
}
