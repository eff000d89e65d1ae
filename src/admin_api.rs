//! The admin listener's `/v1/` API, for operators: a tenant's live buckets
//! read from the store without spending (`GET /v1/tenants/{tid}/limits`),
//! one reset to full (`DELETE /v1/tenants/{tid}/limits/{limit}`, logged as
//! `admin.limit_reset`), and the policy in force (`GET /v1/policy`).
//! Every request needs `Authorization: Bearer` with the token in the
//! environment variable `admin.token_env` names; without one configured the
//! API refuses everything. `/healthz`, `/readyz` and `/metrics` stay open.

use http::{Method, Response};
use serde_json::{json, Value};

use std::sync::Arc;

use crate::auth::{Identity, TenantId};
use crate::limit::Planned;
use crate::state::{Policy, Shared};

/// Answers one `/v1/` request; `token` is the configured bearer token.
pub async fn answer(
    shared: &Shared,
    token: Option<&str>,
    head: &pingora::http::RequestHeader,
) -> Response<Vec<u8>> {
    let Some(token) = token.filter(|t| !t.trim().is_empty()) else {
        return json_response(
            403,
            json!({"error": "the admin API is off: set admin.token_env to an environment variable holding its token"}),
        );
    };
    let given = head
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, t)| t.trim());
    if !same(given.as_bytes(), token.trim().as_bytes()) {
        let mut r = json_response(401, json!({"error": "a valid bearer token is needed"}));
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        return r;
    }
    let path = head.uri.path();
    let segments: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
    match (&head.method, segments.as_slice()) {
        (&Method::GET, ["tenants", tenant, "limits"]) => limits(shared, tenant, head).await,
        (&Method::DELETE, ["tenants", tenant, "limits", limit]) => {
            reset(shared, tenant, limit).await
        }
        (&Method::GET, ["policy"]) => policy(shared),
        _ => json_response(404, json!({"error": "no such endpoint"})),
    }
}

/// A tenant's buckets as the policy in force sizes them.
struct Tenant {
    policy: Arc<Policy>,
    /// The tenant and its plan: the tenant's override, else `?plan=`, else
    /// `auth.default_plan`.
    identity: Identity,
    buckets: Vec<Planned>,
}

/// `None` for a string that is not a tenant id.
fn tenant_buckets(shared: &Shared, tenant: &str, plan: Option<&str>) -> Option<Tenant> {
    let policy = shared.policy.load_full();
    let config = &policy.config;
    let plan = config
        .tenants
        .get(tenant)
        .and_then(|t| t.plan.clone())
        .or(plan.map(str::to_string))
        .or(config.auth.as_ref().map(|a| a.default_plan.clone()))
        .unwrap_or_else(|| crate::config::DEFAULT_PLAN.into());
    let identity = Identity {
        tenant: TenantId::new(tenant)?,
        user: None,
        plan,
        token: None,
    };
    let buckets = crate::limit::tenant_buckets(config, &identity);
    Some(Tenant {
        policy,
        identity,
        buckets,
    })
}

fn not_a_tenant() -> Response<Vec<u8>> {
    json_response(
        400,
        json!({"error": "not a tenant id ([A-Za-z0-9._@-]{1,128})"}),
    )
}

fn unavailable(e: crate::limit::store::StoreError) -> Response<Vec<u8>> {
    json_response(
        503,
        json!({"error": "the store is unavailable", "reason": crate::limit::Fallback::of(&e).as_str()}),
    )
}

async fn limits(
    shared: &Shared,
    tenant: &str,
    head: &pingora::http::RequestHeader,
) -> Response<Vec<u8>> {
    let plan = head
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("plan="));
    let Some(Tenant {
        policy,
        identity,
        buckets: planned,
    }) = tenant_buckets(shared, tenant, plan)
    else {
        return not_a_tenant();
    };
    let spends: Vec<_> = planned.iter().map(Planned::spend).collect();
    let states = match shared.limiter.peek(&spends).await {
        Ok(states) => states,
        Err(e) => return unavailable(e),
    };
    let limits: Vec<Value> = planned
        .iter()
        .zip(&states)
        .map(|(p, s)| {
            json!({
                "limit": p.limit,
                "capacity": p.bucket.capacity.get(),
                "refill": {"tokens": p.bucket.rate.count.get(), "per_seconds": p.bucket.rate.period.as_secs()},
                "remaining": s.remaining,
                "reset_seconds": s.reset_after_ms.div_ceil(1000),
                "shadow": p.shadow,
            })
        })
        .collect();
    json_response(
        200,
        json!({
            "tenant": identity.tenant.as_str(),
            "plan": identity.plan,
            "generation": policy.generation,
            "limits": limits,
        }),
    )
}

async fn reset(shared: &Shared, tenant: &str, limit: &str) -> Response<Vec<u8>> {
    let Some(Tenant {
        identity,
        buckets: planned,
        ..
    }) = tenant_buckets(shared, tenant, None)
    else {
        return not_a_tenant();
    };
    let Some(bucket) = planned.iter().find(|p| p.limit == limit) else {
        return json_response(
            404,
            json!({"error": "no limit of that name is keyed by the tenant alone"}),
        );
    };
    match shared
        .limiter
        .forget(std::slice::from_ref(&bucket.key))
        .await
    {
        Ok(()) => {
            tracing::info!(
                tenant = identity.tenant.as_str(),
                limit,
                "admin.limit_reset"
            );
            json_response(
                200,
                json!({"tenant": identity.tenant.as_str(), "limit": limit, "reset": true}),
            )
        }
        Err(e) => unavailable(e),
    }
}

/// The policy in force: its generation, the SHA-256 of the file it was read
/// from, and that text with any password in a URL replaced by `***`.
fn policy(shared: &Shared) -> Response<Vec<u8>> {
    let policy = shared.policy.load();
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, policy.source.text().as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    json_response(
        200,
        json!({
            "generation": policy.generation,
            "digest": format!("sha256:{hex}"),
            "policy": redact(policy.source.text()),
        }),
    )
}

/// The policy as parsed, re-emitted as YAML, with what may be a secret
/// shown as `***`: every scalar under a key naming an authorization,
/// cookie, token, secret, password, API key or credential (a fixed
/// `Authorization` in `request_headers`, say), and any URL's userinfo and
/// query. Redacting the parsed tree, not the text, catches every YAML
/// spelling of a key or value (escapes, quoting, block scalars); comments
/// are not shown. Over-redacting is fine.
pub fn redact(text: &str) -> String {
    use yaml_rust2::{YamlEmitter, YamlLoader};
    let Ok(docs) = YamlLoader::load_from_str(text) else {
        return "***".to_string();
    };
    let mut out = String::new();
    for doc in docs {
        let mut emitter = YamlEmitter::new(&mut out);
        if emitter.dump(&redact_node(doc, false)).is_err() {
            return "***".to_string();
        }
        out.push('\n');
    }
    out
}

fn redact_node(node: yaml_rust2::Yaml, secret: bool) -> yaml_rust2::Yaml {
    use yaml_rust2::Yaml;
    match node {
        Yaml::Hash(map) => Yaml::Hash(
            map.into_iter()
                .map(|(k, v)| {
                    let secret = secret || k.as_str().is_some_and(names_a_secret);
                    (k, redact_node(v, secret))
                })
                .collect(),
        ),
        Yaml::Array(items) => {
            Yaml::Array(items.into_iter().map(|v| redact_node(v, secret)).collect())
        }
        Yaml::String(_) | Yaml::Integer(_) | Yaml::Real(_) | Yaml::Boolean(_) if secret => {
            Yaml::String("***".to_string())
        }
        Yaml::String(s) => Yaml::String(crate::redact::urls(&s).into_owned()),
        other => other,
    }
}

/// Whether a key names a secret; `*_env` keys name environment variables,
/// and the names are not secrets.
fn names_a_secret(key: &str) -> bool {
    const SECRETS: [&str; 9] = [
        "authorization",
        "cookie",
        "token",
        "secret",
        "password",
        "passwd",
        "apikey",
        "credential",
        // `key_pem`: a private key in the policy (the controller's Secrets).
        "pem",
    ];
    let key = key.to_ascii_lowercase();
    let bare: String = key.chars().filter(|c| !matches!(c, '-' | '_')).collect();
    !key.ends_with("_env") && SECRETS.iter().any(|s| bare.contains(s))
}

/// Compares the SHA-256 of both in constant time: the time says neither
/// where they differ nor how long the token is.
fn same(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, a),
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b),
    );
    a.as_ref()
        .iter()
        .zip(b.as_ref())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn json_response(status: u16, body: Value) -> Response<Vec<u8>> {
    let body = body.to_string().into_bytes();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-store")
        .body(body)
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn what_may_be_a_secret_is_redacted() {
        let text = "sentinels: [\"redis://:s3cret@10.0.0.1:26379\", \"redis://10.0.0.2:26379\"]\n\
                    url: redis://:p@ss@h:6379/0\n\
                    jwks: [{jwks_url: \"https://idp/keys?api_key=abc\", refresh: 5m}]\n\
                    set: {Authorization: \"Bearer xyz\", X-Api-Key: k1, Accept: text/csv}\n\
                    token_env: FAIRGATE_ADMIN_TOKEN\n\
                    session_token: abc";
        let out = redact(text);
        for secret in ["s3cret", "p@ss", "api_key=abc", "xyz", "k1", "abc\n"] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        for kept in [
            "redis://***@10.0.0.1:26379",
            "redis://10.0.0.2:26379",
            "redis://***@h:6379/0",
            "https://idp/keys?***",
            "Accept: text/csv",
            "token_env: FAIRGATE_ADMIN_TOKEN",
            "refresh: 5m",
        ] {
            assert!(out.contains(kept), "{kept} not in {out}");
        }
    }

    /// Finding 7 of the third attack: the text was redacted line by line,
    /// so these spellings came back in clear.
    #[test]
    fn finding_7_secrets_are_redacted_whatever_their_yaml_spelling() {
        let text = "routes:\n\
                    \x20 - request_headers:\n\
                    \x20     set:\n\
                    \x20       Authorization: >-\n\
                    \x20         Bearer FOLDED-SECRET\n\
                    \x20       \"X-Api-K\\x65y\": ESCAPED-KEY-SECRET\n\
                    \x20       'Cookie': |\n\
                    \x20         LITERAL-SECRET\n\
                    store: {url: \"redis://:ESCAPED-AT-SECRET\\x40redis:6379/0\"}\n";
        let out = redact(text);
        for secret in [
            "FOLDED-SECRET",
            "ESCAPED-KEY-SECRET",
            "LITERAL-SECRET",
            "ESCAPED-AT-SECRET",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(out.contains("redis://***@redis:6379/0"), "{out}");
    }
}
