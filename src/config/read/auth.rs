//! Reads `auth`: issuer, audience, the failure limits, and each key source:
//! its shape, the algorithm it binds, that its files exist and its secret's
//! variable is set. The key material is the policy builder's to load.

use super::*;

pub(super) const ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "EdDSA",
];

pub(super) fn auth(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<Auth> {
    let f = r.mapping(at, schema::AUTH)?;
    let issuer = f.get("issuer").and_then(|at| r.string(&at));
    let audience = match f.get("audience") {
        Some(at) if at.node.as_sequence().is_some() => r.strings(&at),
        Some(at) => r.string(&at).into_iter().collect(),
        None => Vec::new(),
    };
    let leeway = f
        .get("leeway")
        .and_then(|at| r.duration(&at))
        .unwrap_or(Duration::from_secs(30));
    let methods = methods(r, f.get("methods"), base);
    let keys = keys(r, at, &f, base, f.get("methods").is_some());
    let claims = claims(r, &f);
    let default_plan = f
        .get("default_plan")
        .and_then(|at| r.string(&at))
        .unwrap_or_else(|| DEFAULT_PLAN.into());
    let failure_limit = f
        .get("failure_limit")
        .and_then(|at| bucket(r, &at))
        .unwrap_or(Bucket {
            capacity: NonZeroU64::new(20).expect("literal"),
            rate: Rate {
                count: NonZeroU64::MIN,
                period: Duration::from_secs(1),
            },
        });
    let user_failure_limit = f
        .get("user_failure_limit")
        .and_then(|at| bucket(r, &at))
        .unwrap_or(Bucket {
            capacity: NonZeroU64::new(20).expect("literal"),
            rate: Rate {
                count: NonZeroU64::MIN,
                period: Duration::from_secs(60),
            },
        });
    let jwks_timeout = f
        .get("jwks_timeout")
        .and_then(|at| r.positive_duration(&at))
        .unwrap_or(Duration::from_millis(500));
    Some(Auth {
        failure_limit,
        user_failure_limit,
        issuer,
        audience,
        leeway,
        keys,
        claims,
        default_plan,
        jwks_timeout,
        methods,
    })
}

/// `auth.keys`: each entry's source, placed at the entry; at least one.
fn keys(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
    base: &Path,
    methods: bool,
) -> Vec<Located<KeySource>> {
    let mut keys = Vec::new();
    if let Some(at) = f.get("keys") {
        for (i, node) in r.sequence(&at).into_iter().enumerate() {
            let item = at.item(i, node);
            if let Some(value) = key_source(r, &item, base) {
                keys.push(Located {
                    value,
                    place: item.place(),
                });
            }
        }
    }
    let listed = f
        .get("keys")
        .is_some_and(|k| k.node.as_sequence().is_some_and(|s| !s.is_empty()));
    // Without JWT keys, routes authenticate by the methods only.
    let methods_only = methods && f.get("keys").is_none();
    if !listed && !methods_only {
        r.error(
            at,
            "auth.key_missing",
            "needs at least one entry under `keys`",
        );
    }
    keys
}

/// `auth.claims`: which claims name the tenant, user, plan and token.
fn claims(r: &mut Reader<'_>, f: &yaml::Fields<'_>) -> ClaimNames {
    let mut claims = ClaimNames {
        tenant: "tid".into(),
        user: "sub".into(),
        plan: "plan".into(),
        token: "jti".into(),
    };
    if let Some(at) = f.get("claims") {
        if let Some(c) = r.mapping(&at, schema::AUTH_CLAIMS) {
            for (key, slot) in [
                ("tenant", &mut claims.tenant),
                ("user", &mut claims.user),
                ("plan", &mut claims.plan),
                ("token", &mut claims.token),
            ] {
                if let Some(v) = c.get(key).and_then(|at| r.string(&at)) {
                    *slot = v;
                }
            }
        }
    }
    claims
}

pub(super) fn key_source(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<KeySource> {
    let f = r.mapping(at, schema::AUTH_KEY)?;
    let sources: Vec<&str> = ["secret_env", "public_key_file", "jwks_file", "jwks_url"]
        .into_iter()
        .filter(|k| f.get(k).is_some())
        .collect();
    if sources.len() > 1 {
        r.error(
            at,
            "auth.key_invalid",
            format!(
                "give exactly one of secret_env, public_key_file, jwks_file, jwks_url (found {})",
                sources.join(", ")
            ),
        );
        return None;
    }
    let jwks = matches!(sources.first(), Some(&"jwks_file") | Some(&"jwks_url"));
    for key in ["kid", "alg"] {
        if let (true, Some(k)) = (jwks, f.get(key)) {
            r.error(
                &k,
                "auth.key_invalid",
                "a JWKS names its own keys' kid and alg",
            );
        }
    }
    for key in ["refresh", "ca_file"] {
        if let (false, Some(k)) = (sources.first() == Some(&"jwks_url"), f.get(key)) {
            r.error(
                &k,
                "auth.key_invalid",
                format!("{key} applies to jwks_url only"),
            );
        }
    }
    key_of_source(r, at, &f, base)
}

/// The one source an entry names, checked against its `kid` and `alg`.
fn key_of_source(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
    base: &Path,
) -> Option<KeySource> {
    let kid = f.get("kid").and_then(|at| r.string(&at));
    let alg = match f.get("alg") {
        Some(a) => {
            let alg = r.string(&a)?;
            if !ALGORITHMS.contains(&alg.as_str()) {
                r.error_value(
                    &a,
                    "auth.key_invalid",
                    format!("alg must be one of {}", ALGORITHMS.join(", ")),
                );
                return None;
            }
            Some(alg)
        }
        None => None,
    };
    let need_alg = |r: &mut Reader<'_>| {
        if alg.is_none() {
            missing(r, at, "alg");
        }
        alg.clone()
    };
    if let Some(env_at) = f.get("secret_env") {
        let env = r.string(&env_at)?;
        let alg = need_alg(r)?;
        return secret(r, at, &env_at, env, kid, alg);
    }
    if f.get("public_key_file").is_some() {
        let alg = need_alg(r)?;
        if alg.starts_with("HS") {
            r.error(
                at,
                "auth.key_invalid",
                format!("public_key_file cannot use {alg}"),
            );
            return None;
        }
        let path = key_file(r, f, "public_key_file", base)?;
        return Some(KeySource::PublicKeyFile { kid, alg, path });
    }
    if f.get("jwks_file").is_some() {
        let path = key_file(r, f, "jwks_file", base)?;
        return Some(KeySource::JwksFile { path });
    }
    if let Some(url_at) = f.get("jwks_url") {
        return jwks_url(r, f, &url_at, base);
    }
    r.error(
        at,
        "auth.key_missing",
        "needs one of secret_env, public_key_file, jwks_file, jwks_url",
    );
    None
}

/// A `jwks_url` entry: the URL, its refresh period and its own CA roots.
fn jwks_url(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    url_at: &At<'_>,
    base: &Path,
) -> Option<KeySource> {
    let url = r.string(url_at)?;
    if !url.starts_with("http://") && !url.starts_with("https://") {
        r.error_value(
            url_at,
            "auth.key_invalid",
            "expected an http:// or https:// URL",
        );
        return None;
    }
    let refresh = f
        .get("refresh")
        .and_then(|at| r.positive_duration(&at))
        .unwrap_or(Duration::from_secs(300));
    let ca_file = match f.get("ca_file") {
        Some(ca_at) => {
            let path = key_file(r, f, "ca_file", base)?;
            Some(Located {
                value: PemSource::File(path),
                place: ca_at.place_value(),
            })
        }
        None => None,
    };
    Some(KeySource::JwksUrl {
        url,
        refresh,
        ca_file,
    })
}

/// A shared secret from the environment: an HS algorithm, a set variable.
fn secret(
    r: &mut Reader<'_>,
    at: &At<'_>,
    env_at: &At<'_>,
    env: String,
    kid: Option<String>,
    alg: String,
) -> Option<KeySource> {
    if !alg.starts_with("HS") {
        r.error(
            at,
            "auth.key_invalid",
            format!("secret_env needs an HS algorithm, not {alg}"),
        );
        return None;
    }
    if std::env::var_os(&env).is_none_or(|v| v.is_empty()) {
        r.error_value(
            env_at,
            "auth.key_missing",
            format!("environment variable {env} is not set"),
        );
        return None;
    }
    Some(KeySource::Secret { kid, alg, env })
}

pub(super) fn key_file(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    key: &str,
    base: &Path,
) -> Option<PathBuf> {
    let at = f.get(key)?;
    let text = r.string(&at)?;
    let path = base.join(&text);
    if !path.is_file() {
        r.error_value(
            &at,
            "auth.key_missing",
            format!("no such file {}", path.display()),
        );
        return None;
    }
    Some(path)
}
