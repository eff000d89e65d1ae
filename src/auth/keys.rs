//! Verification keys: shared secrets from the environment, PEM public keys,
//! JWKS files and JWKS URLs. A key is always bound to one algorithm, so a
//! token can only be checked with the algorithm its key was configured for
//! (no `alg: none`, no HS256-with-a-public-key confusion).

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::config::KeySource;

pub struct VerifyKey {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

/// Loads a key source that needs no network: secret, PEM file, JWKS file.
pub fn load_static(source: &KeySource) -> Result<Vec<VerifyKey>, String> {
    match source {
        KeySource::Secret { kid, alg, env } => {
            let secret =
                std::env::var(env).map_err(|_| format!("environment variable {env} is not set"))?;
            if secret.len() < 16 {
                return Err(format!("the secret in {env} is shorter than 16 bytes"));
            }
            Ok(vec![VerifyKey {
                kid: kid.clone(),
                alg: parse_alg(alg)?,
                key: DecodingKey::from_secret(secret.as_bytes()),
            }])
        }
        KeySource::PublicKeyFile { kid, alg, path } => {
            let pem =
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let alg = parse_alg(alg)?;
            let key = match alg {
                Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512 => DecodingKey::from_rsa_pem(&pem),
                Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
                Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
                _ => return Err(format!("{alg:?} does not use a public key")),
            }
            .map_err(|e| format!("{} is not a {alg:?} public key in PEM: {e}", path.display()))?;
            Ok(vec![VerifyKey {
                kid: kid.clone(),
                alg,
                key,
            }])
        }
        KeySource::JwksFile { path } => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            parse_jwks(&text).map_err(|e| format!("{}: {e}", path.display()))
        }
        KeySource::JwksUrl { .. } => Ok(Vec::new()),
    }
}

fn parse_alg(alg: &str) -> Result<Algorithm, String> {
    Algorithm::from_str(alg).map_err(|_| format!("unknown algorithm {alg}"))
}

/// Parses a JWKS document; keys of unsupported types are skipped.
pub fn parse_jwks(text: &str) -> Result<Vec<VerifyKey>, String> {
    let set: JwkSet =
        serde_json::from_str(text).map_err(|e| format!("not a JWKS document: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let alg = match &jwk.common.key_algorithm {
            Some(a) => Algorithm::from_str(&a.to_string()).ok(),
            None => match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
                AlgorithmParameters::EllipticCurve(p) => match p.curve {
                    EllipticCurve::P256 => Some(Algorithm::ES256),
                    EllipticCurve::P384 => Some(Algorithm::ES384),
                    _ => None,
                },
                AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                    Some(Algorithm::EdDSA)
                }
                // Symmetric keys are never taken from a JWKS: they would be public.
                _ => None,
            },
        };
        let Some(alg) =
            alg.filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        keys.push(VerifyKey {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    if keys.is_empty() {
        return Err("no usable keys (RS*, PS*, ES256, ES384 or EdDSA)".into());
    }
    Ok(keys)
}

/// The most of a JWKS document read; a bigger one is refused and the last
/// good set kept.
pub const MAX_JWKS_BYTES: usize = 1 << 20;

/// A JWKS endpoint: its last good key set and when it was last asked.
pub struct RemoteJwks {
    pub url: String,
    pub refresh: Duration,
    /// Trusts the system's roots and the endpoint's `ca_file`.
    client: reqwest::Client,
    /// The URL's host and path: the metric's label, never the query.
    source: String,
    pub keys: ArcSwap<Vec<VerifyKey>>,
    last_attempt: std::sync::Mutex<Option<Instant>>,
    /// Bumped whenever `keys` is replaced, so tokens verified with the old
    /// set are checked again.
    generation: std::sync::atomic::AtomicU64,
}

/// Unknown-kid refreshes are at most this frequent, so a flood of bad kids
/// cannot turn into a flood against the identity provider.
const MIN_REFRESH_GAP: Duration = Duration::from_secs(2);

impl RemoteJwks {
    pub fn new(url: String, refresh: Duration, client: reqwest::Client) -> Self {
        let source = reqwest::Url::parse(&url)
            .map(|u| format!("{}{}", u.host_str().unwrap_or(""), u.path()))
            .unwrap_or_default();
        RemoteJwks {
            url,
            refresh,
            client,
            source,
            keys: ArcSwap::from_pointee(Vec::new()),
            last_attempt: std::sync::Mutex::new(None),
            generation: Default::default(),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Claims the right to fetch now if the last attempt is older than `gap`.
    fn claim(&self, gap: Duration) -> bool {
        let mut last = self.last_attempt.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < gap) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Fetches now (start-up, reload), restarting the refresh clock.
    pub async fn fetch_now(&self) {
        self.claim(Duration::ZERO);
        self.fetch().await;
    }

    /// Fetches the set; on any failure the last good set stays in use.
    async fn fetch(&self) {
        match fetch_jwks(&self.client, &self.url).await {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "auth.jwks_refreshed");
                self.keys.store(Arc::new(keys));
                self.generation
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                crate::metrics::METRICS
                    .jwks_last_success
                    .with_label_values(&[&self.source])
                    .set(crate::metrics::unix_now());
            }
            Err(e) => tracing::warn!(source = %self.source, error = %e, "auth.jwks_refresh_failed"),
        }
    }

    /// Periodic refresh, when due.
    pub async fn refresh_if_due(&self) {
        if self.claim(self.refresh) {
            self.fetch().await;
        }
    }

    /// Refresh because a token named a kid we do not know; rate-limited.
    pub async fn refresh_for_unknown_kid(&self) -> bool {
        if !self.claim(MIN_REFRESH_GAP) {
            return false;
        }
        self.fetch().await;
        true
    }
}

/// The client a JWKS endpoint is fetched with: the system's roots (the
/// compiled-in Mozilla set where the system has none) and `ca_file`'s.
pub fn jwks_client(
    url: &str,
    ca_file: Option<&std::path::Path>,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::limited(3))
        // An https endpoint is never followed to plain http.
        .https_only(url.starts_with("https://"));
    let system = rustls_native_certs::load_native_certs().unwrap_or_default();
    builder = builder.tls_built_in_root_certs(system.is_empty());
    let private = match ca_file {
        Some(path) => crate::tls::load_roots(path)?,
        None => Vec::new(),
    };
    for der in system.iter().chain(&private) {
        if let Ok(cert) = reqwest::Certificate::from_der(der) {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| format!("auth: cannot build the JWKS client: {e}"))
}

async fn fetch_jwks(client: &reqwest::Client, url: &str) -> Result<Vec<VerifyKey>, String> {
    // Errors without their URL: it may carry credentials or a query.
    let plain = |e: reqwest::Error| e.without_url().to_string();
    let mut response = client.get(url).send().await.map_err(plain)?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let too_big = || format!("the document is over {} KiB", MAX_JWKS_BYTES / 1024);
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(plain)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    parse_jwks(&String::from_utf8_lossy(&body))
}
