//! Verification keys: shared secrets from the environment, PEM public keys,
//! JWKS documents and JWKS URLs. A key is always bound to one algorithm, so
//! a token can only be checked with the algorithm its key was configured for
//! (no `alg: none`, no HS256-with-a-public-key confusion). It decodes what
//! the policy builder read (it opens no file itself) and fetches JWKS URLs.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use rustls::pki_types::CertificateDer;

use crate::tls::pem::{Pem, PemError};

pub struct VerifyKey {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

/// Why a key source gives no key; `check` reports it as `auth.key_invalid`.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("environment variable {0} is not set")]
    SecretUnset(String),
    #[error("the secret in {0} is shorter than 16 bytes")]
    SecretShort(String),
    #[error("unknown algorithm {0}")]
    UnknownAlgorithm(String),
    #[error("{0:?} does not use a public key")]
    NotPublic(Algorithm),
    #[error("cannot read {name}: {source}")]
    Unreadable {
        name: String,
        source: std::io::Error,
    },
    #[error("{name}: {bytes} bytes, over the 1 MiB a key file may hold")]
    TooBig { name: String, bytes: u64 },
    #[error("{name} is not a {alg:?} public key in PEM: {source}")]
    NotPublicKey {
        name: String,
        alg: Algorithm,
        source: jsonwebtoken::errors::Error,
    },
    /// A PEM that is not a public key of the algorithm's kind (a private
    /// key, a certificate, another curve): jsonwebtoken would take some of
    /// them and then refuse every token.
    #[error("{name} is not a {alg:?} public key in PEM: {why}")]
    WrongKey {
        name: String,
        alg: Algorithm,
        why: &'static str,
    },
    #[error("{name}: {source}")]
    Jwks { name: String, source: JwksError },
    /// The roots a `jwks_url` trusts (its `ca_file`).
    #[error(transparent)]
    Roots(PemError),
    #[error("auth: cannot build the JWKS client: {0}")]
    Client(reqwest::Error),
}

/// Why a JWKS document (a file's, or an endpoint's answer) gives no keys.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("not a JWKS document: {0}")]
    NotJwks(serde_json::Error),
    #[error("no usable keys (RS*, PS*, ES256, ES384 or EdDSA)")]
    NoUsableKeys,
    /// Without its URL: it may carry credentials or a query.
    #[error("{0}")]
    Fetch(reqwest::Error),
    #[error("HTTP {0}")]
    Status(u16),
    #[error("the document is over {} KiB", MAX_JWKS_BYTES / 1024)]
    TooBig,
}

/// Reads a public key or JWKS file, for the policy builder.
pub fn read(path: &std::path::Path) -> Result<Pem, KeyError> {
    Pem::read(path).map_err(|e| match e {
        PemError::Unreadable { name, source } => KeyError::Unreadable { name, source },
        PemError::TooBig { name, bytes } => KeyError::TooBig { name, bytes },
        other => KeyError::Roots(other),
    })
}

/// A shared secret from the environment variable `env`: at least 16 bytes.
pub fn secret(kid: Option<&str>, alg: &str, env: &str) -> Result<VerifyKey, KeyError> {
    let secret = std::env::var(env).map_err(|_| KeyError::SecretUnset(env.to_string()))?;
    if secret.len() < 16 {
        return Err(KeyError::SecretShort(env.to_string()));
    }
    Ok(VerifyKey {
        kid: kid.map(str::to_string),
        alg: parse_alg(alg)?,
        key: DecodingKey::from_secret(secret.as_bytes()),
    })
}

/// A PEM public key for `alg` (an RS*, PS*, ES* or EdDSA algorithm).
pub fn public_key(kid: Option<&str>, alg: &str, pem: Pem) -> Result<VerifyKey, KeyError> {
    let alg = parse_alg(alg)?;
    if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(KeyError::NotPublic(alg));
    }
    let name = pem.name().to_string();
    let pem = pem.into_bytes();
    if let Err(why) = public_key_of(alg, &pem) {
        return Err(KeyError::WrongKey { name, alg, why });
    }
    let key = match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => DecodingKey::from_rsa_pem(&pem),
        Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(&pem),
        Algorithm::EdDSA => DecodingKey::from_ed_pem(&pem),
        _ => return Err(KeyError::NotPublic(alg)),
    }
    .map_err(|source| KeyError::NotPublicKey { name, alg, source })?;
    Ok(VerifyKey {
        kid: kid.map(str::to_string),
        alg,
        key,
    })
}

/// Whether `pem`'s first block (the one jsonwebtoken reads) is a public
/// key `alg` verifies with: a `PUBLIC KEY` (SubjectPublicKeyInfo) of
/// rsaEncryption for RS*/PS*, of the ECDSA curve of `alg` with an
/// uncompressed point (P-256 for ES256, P-384 for ES384; aws-lc-rs verifies with
/// no other), or Ed25519; or a PKCS#1 `RSA PUBLIC KEY` for RS*/PS*.
fn public_key_of(alg: Algorithm, pem: &[u8]) -> Result<(), &'static str> {
    use x509_parser::oid_registry::{
        OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION,
        OID_PKCS1_RSASSAPSS, OID_SIG_ED25519,
    };
    use x509_parser::prelude::FromDer;
    use x509_parser::public_key::RSAPublicKey;
    use x509_parser::x509::SubjectPublicKeyInfo;
    let rsa = matches!(
        alg,
        Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512
    );
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|_| "no PEM block")?;
    match block.label.as_str() {
        "PUBLIC KEY" => {}
        "RSA PUBLIC KEY" if rsa => {
            return RSAPublicKey::from_der(&block.contents)
                .map(|_| ())
                .map_err(|_| "not a PKCS#1 RSA public key")
        }
        "CERTIFICATE" => return Err("a certificate, not its public key"),
        label if label.ends_with("PRIVATE KEY") => {
            return Err("a private key; give the public key")
        }
        _ => return Err("not a PUBLIC KEY block"),
    }
    let (_, spki) = SubjectPublicKeyInfo::from_der(&block.contents)
        .map_err(|_| "not a SubjectPublicKeyInfo")?;
    let kind = &spki.algorithm.algorithm;
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok());
    let point = spki.subject_public_key.data.as_ref();
    let uncompressed = |len: usize| point.len() == len && point[0] == 0x04;
    let fits = match alg {
        _ if rsa => *kind == OID_PKCS1_RSAENCRYPTION,
        Algorithm::ES256 => {
            *kind == OID_KEY_TYPE_EC_PUBLIC_KEY && curve == Some(OID_EC_P256) && uncompressed(65)
        }
        Algorithm::ES384 => {
            *kind == OID_KEY_TYPE_EC_PUBLIC_KEY
                && curve == Some(OID_NIST_EC_P384)
                && uncompressed(97)
        }
        Algorithm::EdDSA => *kind == OID_SIG_ED25519 && point.len() == 32,
        _ => false,
    };
    match fits {
        true => Ok(()),
        false if rsa && *kind == OID_PKCS1_RSASSAPSS => {
            Err("an RSASSA-PSS key; give it as an rsaEncryption public key")
        }
        false => Err("a public key of another algorithm or curve, or a compressed point"),
    }
}

/// The keys of a JWKS file.
pub fn jwks_document(pem: Pem) -> Result<Vec<VerifyKey>, KeyError> {
    let name = pem.name().to_string();
    let text = String::from_utf8(pem.into_bytes()).map_err(|_| KeyError::Unreadable {
        name: name.clone(),
        // What reading a file into a string says of the same bytes.
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ),
    })?;
    parse_jwks(&text).map_err(|source| KeyError::Jwks { name, source })
}

fn parse_alg(alg: &str) -> Result<Algorithm, KeyError> {
    Algorithm::from_str(alg).map_err(|_| KeyError::UnknownAlgorithm(alg.to_string()))
}

/// Parses a JWKS document; keys of unsupported types are skipped.
pub fn parse_jwks(text: &str) -> Result<Vec<VerifyKey>, JwksError> {
    let set: JwkSet = serde_json::from_str(text).map_err(JwksError::NotJwks)?;
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
        return Err(JwksError::NoUsableKeys);
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
/// compiled-in Mozilla set where the system has none) and `ca_file`'s
/// (`private`, decoded by the policy builder).
pub fn jwks_client(
    url: &str,
    private: &[CertificateDer<'static>],
) -> Result<reqwest::Client, KeyError> {
    let roots = crate::tls::trust::client_roots(private);
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::limited(3))
        // An https endpoint is never followed to plain http.
        .https_only(url.starts_with("https://"))
        .tls_built_in_root_certs(roots.built_in);
    for cert in roots.certs {
        builder = builder.add_root_certificate(cert);
    }
    builder.build().map_err(KeyError::Client)
}

async fn fetch_jwks(client: &reqwest::Client, url: &str) -> Result<Vec<VerifyKey>, JwksError> {
    // Errors without their URL: it may carry credentials or a query.
    let plain = |e: reqwest::Error| JwksError::Fetch(e.without_url());
    let mut response = client.get(url).send().await.map_err(plain)?;
    if !response.status().is_success() {
        return Err(JwksError::Status(response.status().as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(JwksError::TooBig);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(plain)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooBig);
        }
        body.extend_from_slice(&chunk);
    }
    parse_jwks(&String::from_utf8_lossy(&body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(file: &str) -> Vec<u8> {
        std::fs::read(format!("tests/fixtures/keys/{file}")).unwrap()
    }

    #[test]
    fn a_public_key_must_be_public_and_of_the_algorithms_kind() {
        const OTHER: &str = "a public key of another algorithm or curve, or a compressed point";
        let api_cert = std::fs::read("config/certs/api.pem").unwrap();
        // jsonwebtoken reads the first block: a public one after it is no help.
        let private_then_public = [pem("rs256.key"), pem("rs256.pkcs1.pub.pem")].concat();
        let cases: [(Algorithm, Vec<u8>, Result<(), &str>); 12] = [
            (Algorithm::RS256, pem("rs256.pub.pem"), Ok(())),
            (Algorithm::PS512, pem("rs256.pub.pem"), Ok(())),
            (Algorithm::RS256, pem("rs256.pkcs1.pub.pem"), Ok(())),
            (Algorithm::ES256, pem("es256.pub.pem"), Ok(())),
            (Algorithm::EdDSA, pem("ed25519.pub.pem"), Ok(())),
            (
                Algorithm::RS256,
                pem("rs256.key"),
                Err("a private key; give the public key"),
            ),
            (
                Algorithm::RS256,
                private_then_public,
                Err("a private key; give the public key"),
            ),
            (Algorithm::ES384, pem("es256.pub.pem"), Err(OTHER)),
            (Algorithm::RS256, pem("es256.pub.pem"), Err(OTHER)),
            (
                Algorithm::ES256,
                pem("es256.compressed.pub.pem"),
                Err(OTHER),
            ),
            (
                Algorithm::PS256,
                pem("rsa-pss.pub.pem"),
                Err("an RSASSA-PSS key; give it as an rsaEncryption public key"),
            ),
            (
                Algorithm::ES256,
                api_cert,
                Err("a certificate, not its public key"),
            ),
        ];
        for (alg, pem, expected) in cases {
            assert_eq!(public_key_of(alg, &pem), expected, "{alg:?}");
        }
    }
}
