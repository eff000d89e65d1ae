//! Authentication: verifies the bearer JWT and turns its claims into an
//! `Identity`, remembering tokens verified before (`verified`); counts
//! failed authentications per address and per basic-auth user name
//! (`failures`) and queues slow checks, one place an address (`checks`).
//! Knows nothing of limits or responses; a failure is an `AuthError` that
//! `proxy::respond` turns into a 401. It opens no key file: the policy builder loads `auth.keys`
//! once per load and hands a `KeySet` over.

pub mod api_keys;
pub mod basic;
pub mod checks;
pub mod external;
pub mod failures;
pub mod keys;
pub mod methods;
pub mod users;
pub mod verified;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::Value;

use crate::config::{Auth, KeySource, TenantOverride};
pub use crate::tenant::{tenant_id_ok, TenantId};
use keys::{RemoteJwks, VerifyKey};

/// Who a request is, from verified claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub tenant: TenantId,
    pub user: Option<String>,
    pub plan: String,
    pub token: Option<String>,
}

/// Why a request was refused. `reason()` is a bounded metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    Missing,
    Malformed,
    AlgorithmNotAllowed,
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    MissingClaim,
    TenantInvalid,
    ClaimInvalid,
}

impl AuthError {
    pub const ALL: [AuthError; 12] = [
        AuthError::Missing,
        AuthError::Malformed,
        AuthError::AlgorithmNotAllowed,
        AuthError::UnknownKey,
        AuthError::BadSignature,
        AuthError::Expired,
        AuthError::NotYetValid,
        AuthError::WrongIssuer,
        AuthError::WrongAudience,
        AuthError::MissingClaim,
        AuthError::TenantInvalid,
        AuthError::ClaimInvalid,
    ];

    pub fn reason(self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::AlgorithmNotAllowed => "algorithm_not_allowed",
            AuthError::UnknownKey => "unknown_key",
            AuthError::BadSignature => "bad_signature",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::WrongIssuer => "wrong_issuer",
            AuthError::WrongAudience => "wrong_audience",
            AuthError::MissingClaim => "missing_claim",
            AuthError::TenantInvalid => "tenant_invalid",
            AuthError::ClaimInvalid => "claim_invalid",
        }
    }

    /// Words for `error_description` and the problem `detail`. Never echoes
    /// the token or a claim value.
    pub fn description(self) -> &'static str {
        match self {
            AuthError::Missing => "no bearer token",
            AuthError::Malformed => "the token is malformed",
            AuthError::AlgorithmNotAllowed => "the token's algorithm is not accepted",
            AuthError::UnknownKey => "the token names an unknown key",
            AuthError::BadSignature => "the token's signature is invalid",
            AuthError::Expired => "the token has expired",
            AuthError::NotYetValid => "the token is not valid yet",
            AuthError::WrongIssuer => "the token has the wrong issuer",
            AuthError::WrongAudience => "the token has the wrong audience",
            AuthError::MissingClaim => "the token lacks a required claim",
            AuthError::TenantInvalid => "the token's tenant id is not acceptable",
            AuthError::ClaimInvalid => "a claim of the token is too long or not a string",
        }
    }
}

/// Longest user id or token id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

pub struct Verifier {
    static_keys: Vec<VerifyKey>,
    pub remote: Vec<Arc<RemoteJwks>>,
    allowed: HashSet<Algorithm>,
    auth: Auth,
    plans: BTreeMap<String, String>,
    verified: verified::Verified,
}

/// The key material of `auth.keys`, as the policy builder loaded it, in
/// the order it is written (keys are tried in that order).
#[derive(Default)]
pub struct KeySet {
    pub fixed: Vec<VerifyKey>,
    pub remote: Vec<Arc<RemoteJwks>>,
}

impl Verifier {
    /// A verifier for `auth` over the keys the policy builder loaded.
    pub fn new(auth: &Auth, tenants: &BTreeMap<String, TenantOverride>, keys: KeySet) -> Self {
        let mut allowed: HashSet<Algorithm> = keys.fixed.iter().map(|k| k.alg).collect();
        if !keys.remote.is_empty() {
            // A JWKS may hold any asymmetric key; its keys bind their own alg.
            allowed.extend([
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
                Algorithm::ES256,
                Algorithm::ES384,
                Algorithm::EdDSA,
            ]);
        }
        Verifier {
            static_keys: keys.fixed,
            remote: keys.remote,
            allowed,
            auth: auth.clone(),
            plans: tenants
                .iter()
                .filter_map(|(t, o)| o.plan.clone().map(|p| (t.clone(), p)))
                .collect(),
            verified: verified::Verified::default(),
        }
    }

    /// Which key set tokens are checked against: changes whenever a JWKS
    /// refresh stores keys (static keys change only by reload, which builds
    /// a new verifier and so a new cache).
    fn key_set(&self) -> u64 {
        self.remote.iter().map(|r| r.generation()).sum()
    }

    /// The identity of a token verified before, still before its `exp`
    /// and with the same keys. No signature check.
    pub fn known(&self, token: &str) -> Option<Identity> {
        let known = self.verified.get(token, unix_now(), self.key_set());
        let m = &crate::metrics::METRICS;
        match known {
            Some(_) => m.token_cache_hits.inc(),
            None => m.token_cache_misses.inc(),
        }
        known
    }

    /// Fetches every JWKS URL once (at start) and then when due.
    pub async fn refresh_remote(&self, force: bool) {
        for remote in &self.remote {
            if force {
                remote.fetch_now().await;
            } else {
                remote.refresh_if_due().await;
            }
        }
    }

    /// Verifies a bearer token (from `bearer`), or knows it from before.
    pub async fn verify(&self, token: Option<&str>) -> Result<Identity, AuthError> {
        if let Some(identity) = token.and_then(|t| self.known(t)) {
            return Ok(identity);
        }
        self.verify_fresh(token).await
    }

    /// Checks a token's signature and claims, and remembers it when valid;
    /// for a token `known` did not know.
    pub async fn verify_fresh(&self, token: Option<&str>) -> Result<Identity, AuthError> {
        let token = token.ok_or(AuthError::Missing)?;
        let keys = self.key_set();
        let (identity, exp) = self.verify_uncached(token).await?;
        self.verified
            .insert(token, identity.clone(), exp, unix_now(), keys);
        Ok(identity)
    }

    async fn verify_uncached(&self, token: &str) -> Result<(Identity, u64), AuthError> {
        let alg = header_alg(token)?;
        if !self.allowed.contains(&alg) {
            return Err(AuthError::AlgorithmNotAllowed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Malformed)?;
        match self.check(token, alg, header.kid.as_deref()) {
            Err(AuthError::UnknownKey) if !self.remote.is_empty() => {
                // The refreshes run on their own tasks: a slow identity
                // provider costs this request at most `jwks_timeout`, and
                // the keys it sends still arrive for the next one.
                let refreshes = self.remote.iter().map(|remote| {
                    let remote = remote.clone();
                    tokio::spawn(async move { remote.refresh_for_unknown_kid().await })
                });
                let waited = tokio::time::timeout(
                    self.auth.jwks_timeout,
                    futures_util::future::join_all(refreshes),
                )
                .await;
                let refreshed = waited.is_ok_and(|r| r.into_iter().any(|r| r.unwrap_or(false)));
                if !refreshed {
                    return Err(AuthError::UnknownKey);
                }
                self.check(token, alg, header.kid.as_deref())
            }
            result => result,
        }
    }

    fn check(
        &self,
        token: &str,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<(Identity, u64), AuthError> {
        let remote: Vec<_> = self.remote.iter().map(|r| r.keys.load()).collect();
        let candidates = self
            .static_keys
            .iter()
            .chain(remote.iter().flat_map(|k| k.iter()))
            .filter(|k| k.alg == alg)
            // Tried by kid; keys configured without a kid are tried for any token.
            .filter(|k| kid.is_none() || k.kid.is_none() || k.kid.as_deref() == kid);
        let validation = self.validation(alg);
        let mut tried = false;
        for key in candidates {
            tried = true;
            crate::metrics::METRICS.auth_verifications.inc();
            match jsonwebtoken::decode::<Value>(token, &key.key, &validation) {
                Ok(data) => {
                    let exp = data.claims.get("exp").and_then(Value::as_u64);
                    let exp = exp.ok_or(AuthError::MissingClaim)?;
                    return Ok((self.identity(&data.claims)?, exp));
                }
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => continue,
                Err(e) => return Err(classify(e.kind())),
            }
        }
        Err(if tried {
            AuthError::BadSignature
        } else {
            AuthError::UnknownKey
        })
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = self.auth.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        // jsonwebtoken compares iss/aud only when the token has them, so a
        // configured check must also make the claim required.
        v.required_spec_claims = ["exp".to_string()].into_iter().collect();
        if let Some(iss) = &self.auth.issuer {
            v.set_issuer(&[iss]);
            v.required_spec_claims.insert("iss".into());
        }
        if self.auth.audience.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&self.auth.audience);
            v.required_spec_claims.insert("aud".into());
        }
        v
    }

    fn identity(&self, claims: &Value) -> Result<Identity, AuthError> {
        let names = &self.auth.claims;
        let tenant = claim(claims, &names.tenant)?.ok_or(AuthError::MissingClaim)?;
        let tenant = TenantId::new(tenant).ok_or(AuthError::TenantInvalid)?;
        let user = claim(claims, &names.user)?;
        let token = claim(claims, &names.token)?;
        for id in [&user, &token].into_iter().flatten() {
            if id.is_empty() || id.len() > MAX_ID_BYTES {
                return Err(AuthError::ClaimInvalid);
            }
        }
        let plan = match self.plans.get(tenant.as_str()) {
            Some(p) => p.clone(),
            None => claim(claims, &names.plan)?.unwrap_or_else(|| self.auth.default_plan.clone()),
        };
        // The plan is forwarded as a header and selects a policy: keep it plain.
        if plan.len() > 64 || !plan.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AuthError::ClaimInvalid);
        }
        Ok(Identity {
            tenant,
            user,
            plan,
            token,
        })
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The token of `Authorization: Bearer <token>`.
pub fn bearer(value: Option<&[u8]>) -> Option<&str> {
    let value = std::str::from_utf8(value?).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The `alg` of a token's header, read before any key is chosen, so that
/// `none` and unknown algorithms are told apart from malformed tokens.
fn header_alg(token: &str) -> Result<Algorithm, AuthError> {
    let header = token.split('.').next().ok_or(AuthError::Malformed)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .map_err(|_| AuthError::Malformed)?;
    let json: Value = serde_json::from_slice(&bytes).map_err(|_| AuthError::Malformed)?;
    let alg = json
        .get("alg")
        .and_then(Value::as_str)
        .ok_or(AuthError::Malformed)?;
    alg.parse().map_err(|_| AuthError::AlgorithmNotAllowed)
}

fn classify(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(_) => AuthError::MissingClaim,
        ErrorKind::InvalidSignature => AuthError::BadSignature,
        ErrorKind::InvalidAlgorithm => AuthError::AlgorithmNotAllowed,
        _ => AuthError::Malformed,
    }
}

/// A claim by dotted path (`org.id`), as a string; numbers are accepted.
fn claim(claims: &Value, path: &str) -> Result<Option<String>, AuthError> {
    let mut value = claims;
    for part in path.split('.') {
        match value.get(part) {
            Some(v) => value = v,
            None => return Ok(None),
        }
    }
    match value {
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Null => Ok(None),
        _ => Err(AuthError::ClaimInvalid),
    }
}

/// Why `fairgate token` cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("the config has no HS256/384/512 key (secret_env) to sign with")]
    NoSecretKey,
    #[error("environment variable {0} is not set")]
    SecretUnset(String),
    #[error("{0}")]
    Clock(std::time::SystemTimeError),
    #[error("bad alg")]
    Algorithm,
    #[error("{0}")]
    Sign(jsonwebtoken::errors::Error),
}

/// Signs a development token with the config's first HS key (`fairgate token`).
pub fn mint(
    auth: &Auth,
    tenant: &str,
    user: Option<&str>,
    plan: Option<&str>,
    ttl: Duration,
) -> Result<String, MintError> {
    let (alg, env) = auth
        .keys
        .iter()
        .find_map(|k| match &k.value {
            KeySource::Secret { alg, env, .. } => Some((alg.clone(), env.clone())),
            _ => None,
        })
        .ok_or(MintError::NoSecretKey)?;
    let kid = auth.keys.iter().find_map(|k| match &k.value {
        KeySource::Secret { kid, .. } => kid.clone(),
        _ => None,
    });
    let secret = std::env::var(&env).map_err(|_| MintError::SecretUnset(env.clone()))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(MintError::Clock)?
        .as_secs();
    let mut claims = Value::Object(Default::default());
    let names = &auth.claims;
    set_claim(&mut claims, &names.tenant, tenant);
    if let Some(user) = user {
        set_claim(&mut claims, &names.user, user);
    }
    if let Some(plan) = plan {
        set_claim(&mut claims, &names.plan, plan);
    }
    set_claim(
        &mut claims,
        &names.token,
        &uuid::Uuid::new_v4().simple().to_string(),
    );
    claims["iat"] = now.into();
    claims["exp"] = (now + ttl.as_secs()).into();
    if let Some(iss) = &auth.issuer {
        claims["iss"] = iss.as_str().into();
    }
    if let Some(aud) = auth.audience.first() {
        claims["aud"] = aud.as_str().into();
    }
    let mut header = jsonwebtoken::Header::new(alg.parse().map_err(|_| MintError::Algorithm)?);
    header.kid = kid;
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .map_err(MintError::Sign)
}

fn set_claim(claims: &mut Value, path: &str, value: &str) {
    let mut target = claims;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        if !target.get(*part).is_some_and(Value::is_object) {
            target[*part] = Value::Object(Default::default());
        }
        target = &mut target[*part];
    }
    target[parts[parts.len() - 1]] = value.into();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer(Some(b"Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some(b"bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some(b"Basic abc")), None);
        assert_eq!(bearer(Some(b"Bearer ")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn dotted_claims() {
        let v = serde_json::json!({"org": {"id": "acme", "n": 7}, "sub": "u"});
        assert_eq!(claim(&v, "org.id"), Ok(Some("acme".into())));
        assert_eq!(claim(&v, "org.n"), Ok(Some("7".into())));
        assert_eq!(claim(&v, "org.missing"), Ok(None));
        assert_eq!(claim(&v, "org"), Err(AuthError::ClaimInvalid));
    }
}
