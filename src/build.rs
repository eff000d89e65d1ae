//! The policy builder's loading: the ONE place that reads the files (or
//! the PEM handed over in memory) a config names into certificates, keys,
//! CA roots (an upstream's, a JWKS endpoint's, an external auth service's,
//! the OTLP collector's) and JWKS key sets, each exactly once per load. `check`, start
//! and every reload all go through `load`, so what `check` accepted is
//! what is served. A failure is reported where the reader found the value
//! (`FILE:LINE:COL: CODE: message`), from the places the model keeps. It
//! reads no YAML (`config` does) and serves nothing (`state` puts the
//! policy in force, `server` listens).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;

use crate::auth::keys::{self, KeyError, RemoteJwks};
use crate::auth::methods::{Authenticator, Authenticators, Kind};
use crate::auth::{KeySet, Verifier};
use crate::config::{Config, HostMatch, KeySource, PemSource, Place, Problems, Reading};
use crate::limit::store::StoreTlsPem;
use crate::tls::{CertError, Certs, Pem, PemError, Served};

/// What a policy is built from besides its config: the material its files
/// (or in-memory PEM) hold, loaded once.
pub struct Material {
    /// The certificates TLS handshakes choose from.
    pub certs: Option<Arc<Certs>>,
    /// Verifies client certificates against `server.tls.client_ca`.
    pub client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// `server.tls.client_certificates`, by host.
    pub tls_hosts: Arc<crate::tls::TlsHosts>,
    pub verifier: Option<Arc<Verifier>>,
    /// `auth.methods`, their htpasswd entries and API keys loaded.
    pub methods: Arc<Authenticators>,
    /// Each TLS pool's `ca_file` roots, by pool name.
    pub upstream_roots: HashMap<String, Vec<CertificateDer<'static>>>,
    /// Each pool's client certificate (`client_cert_*`), as Pingora shows it.
    pub upstream_clients: HashMap<String, Arc<pingora::utils::tls::CertKey>>,
    /// What `rediss://` store connections trust and present.
    pub store_tls: StoreTlsPem,
    /// `telemetry.otlp.ca_file`'s roots, trusted besides the system's.
    pub otlp_roots: Vec<CertificateDer<'static>>,
}

/// A file that read without errors and whose material loaded: what
/// `check` accepts, and what a policy is built from.
pub struct Checked {
    pub config: Config,
    pub material: Material,
    /// The reader's and the builder's warnings, as `check` prints them.
    pub warnings: Vec<String>,
    /// The text it was read from (`GET /v1/policy` shows it).
    pub text: crate::config::Source,
}

/// Reads the file at `path` and loads what it names.
pub fn load(path: &Path) -> Result<Checked, Problems> {
    checked(Config::read(path))
}

/// Reads YAML text (relative paths resolve against `base`) and loads what
/// it names.
pub fn from_text(file: &str, text: &str, base: &Path) -> Result<Checked, Problems> {
    checked(Config::read_text(file, text, base))
}

/// Loads even when the reader found errors, so the file's problems come
/// all at once; the config is given only when there are none.
pub fn checked(reading: Reading) -> Result<Checked, Problems> {
    let Reading {
        config,
        mut problems,
        text,
    } = reading;
    let Some(config) = config else {
        return Err(problems);
    };
    let material = Material::load(&config, &mut problems);
    if problems.has_errors() {
        return Err(problems);
    }
    Ok(Checked {
        warnings: problems.render_warnings(),
        config,
        material,
        text,
    })
}

impl Material {
    /// Loads every source `config` names, once; what fails (and the
    /// warnings only loaded material can tell) goes to `problems`.
    pub fn load(config: &Config, problems: &mut Problems) -> Material {
        let certs = served(config, problems).map(Arc::new);
        if let Some(certs) = &certs {
            warn_uncovered_hosts(config, certs, problems);
        }
        Material {
            certs,
            client_verifier: client_verifier(config, problems),
            tls_hosts: Arc::new(tls_hosts(config, problems)),
            verifier: verifier(config, problems).map(Arc::new),
            methods: Arc::new(methods(config, problems)),
            upstream_roots: upstream_roots(config, problems),
            upstream_clients: upstream_clients(config, problems),
            store_tls: store_tls(config, problems),
            otlp_roots: otlp_roots(config, problems),
        }
    }
}

/// Reads one PEM source: a file (bounded), or the bytes handed over.
pub fn open(source: &PemSource) -> Result<Pem, PemError> {
    match source {
        PemSource::File(path) => Pem::read(path),
        PemSource::Pem { name, bytes } => Pem::from_memory(name, bytes),
    }
}

/// `server.tls.certificates`, in order; every pair that fails is reported
/// at its item.
fn served(config: &Config, problems: &mut Problems) -> Option<Certs> {
    let tls = config.server.tls.as_ref()?;
    let first = tls.certificates.first()?;
    let mut certs = Certs::default();
    let mut failed = false;
    // Every pair is tried, so each bad one is reported in the same run.
    for c in &tls.certificates {
        let added = pair(&c.value.cert, &c.value.key)
            .and_then(|(served, _)| certs.add(served, &c.value.hosts));
        if let Err(e) = added {
            problems.push_at(&c.place, cert_code(&e), e);
            failed = true;
        }
    }
    if failed {
        return None;
    }
    certs
        .finish()
        .map_err(|e| problems.push_at(&first.place, cert_code(&e), e))
        .ok()
}

/// A certificate chain and its key, each read once and checked to be a
/// pair (the key is the certificate's), with their PEM bytes for a client
/// that decodes them itself.
fn pair(cert: &PemSource, key: &PemSource) -> Result<(Served, [Vec<u8>; 2]), CertError> {
    let (cert, key) = (open(cert)?, open(key)?);
    let bytes = [cert.bytes().to_vec(), key.bytes().to_vec()];
    Ok((crate::tls::pair(cert, key)?, bytes))
}

fn cert_code(e: &CertError) -> &'static str {
    match e {
        CertError::NameClaimedTwice { .. } => "server.tls_duplicate_name",
        _ => "server.tls_invalid",
    }
}

/// `server.tls.client_ca`: the roots client certificates must chain to.
fn client_verifier(
    config: &Config,
    problems: &mut Problems,
) -> Option<Arc<dyn ClientCertVerifier>> {
    let tls = config.server.tls.as_ref()?;
    let ca = tls.client_ca.as_ref()?;
    let pem = open(&ca.value)
        .map_err(|e| problems.push_at(&ca.place, "server.tls_invalid", e))
        .ok()?;
    let name = pem.name().to_string();
    let roots = pem
        .roots()
        .map_err(|e| problems.push_at(&ca.place, "server.tls_invalid", e))
        .ok()?;
    crate::tls::client_verifier(&name, roots, tls.client_cert_required)
        .map_err(|e| problems.push_at(&ca.place, "server.tls_invalid", e))
        .ok()
}

/// `server.tls.client_certificates` (each entry's roots, loaded once) and
/// `server.tls.passthrough`.
fn tls_hosts(config: &Config, problems: &mut Problems) -> crate::tls::TlsHosts {
    let entries = config.server.tls.iter().flat_map(|t| &t.clients);
    let (mut loaded, mut places) = (Vec::new(), Vec::new());
    for entry in entries {
        let pem = open(&entry.value.ca).and_then(|pem| {
            let name = pem.name().to_string();
            Ok((name, pem.roots()?))
        });
        match pem {
            Ok((name, roots)) => {
                loaded.push((entry.value.clone(), name, roots));
                places.push(&entry.place);
            }
            Err(e) => problems.push_at(&entry.place, "server.tls_invalid", e),
        }
    }
    let passthrough = config.server.tls.iter().flat_map(|t| &t.passthrough);
    let passthrough: Vec<_> = passthrough.cloned().collect();
    crate::tls::TlsHosts::new(loaded)
        .unwrap_or_else(|(i, e)| {
            problems.push_at(places[i], "server.tls_invalid", e);
            crate::tls::TlsHosts::default()
        })
        .with_passthrough(&passthrough)
}

/// The `ca_file` roots of each pool that speaks TLS.
fn upstream_roots(
    config: &Config,
    problems: &mut Problems,
) -> HashMap<String, Vec<CertificateDer<'static>>> {
    let mut out = HashMap::new();
    for (name, upstream) in &config.upstreams {
        let Some(ca) = upstream.ca_file.as_ref().filter(|_| upstream.tls) else {
            continue;
        };
        match open(&ca.value).and_then(Pem::roots) {
            Ok(roots) => {
                out.insert(name.clone(), roots);
            }
            Err(e) => problems.push_at(&ca.place, "upstreams.tls_invalid", e),
        }
    }
    out
}

/// Each pool's `client_cert_*` and `client_key_*`, checked to be a pair
/// (the chain parses, the key is its leaf's).
fn upstream_clients(
    config: &Config,
    problems: &mut Problems,
) -> HashMap<String, Arc<pingora::utils::tls::CertKey>> {
    let mut out = HashMap::new();
    for (name, upstream) in &config.upstreams {
        let Some(client) = &upstream.client_cert else {
            continue;
        };
        let (cert, key) = &client.value;
        let loaded = (|| -> Result<pingora::utils::tls::CertKey, CertError> {
            let (cert, key) = (open(cert)?, open(key)?);
            let copy = |p: &Pem| Pem::from_memory(p.name(), p.bytes());
            crate::tls::pair(copy(&cert)?, copy(&key)?)?;
            let chain = cert.chain()?.into_iter().map(|c| c.to_vec()).collect();
            let key = key.private_key()?.secret_der().to_vec();
            Ok(pingora::utils::tls::CertKey::new(chain, key))
        })();
        match loaded {
            Ok(pair) => {
                out.insert(name.clone(), Arc::new(pair));
            }
            Err(e) => problems.push_at(&client.place, "upstreams.tls_invalid", e),
        }
    }
    out
}

/// The roots in a `ca_file` of one of the gateway's own HTTPS clients (an
/// external auth service, the OTLP collector), reported at it as `code`.
fn client_ca(
    ca: Option<&crate::config::Located<PemSource>>,
    code: &'static str,
    problems: &mut Problems,
) -> Option<Vec<CertificateDer<'static>>> {
    let Some(ca) = ca else {
        return Some(Vec::new());
    };
    open(&ca.value)
        .and_then(Pem::roots)
        .map_err(|e| problems.push_at(&ca.place, code, e))
        .ok()
}

/// `telemetry.otlp.ca_file`: loaded here, so `check` reports it, though
/// only a start puts it in force (a change to `otlp` needs a restart).
fn otlp_roots(config: &Config, problems: &mut Problems) -> Vec<CertificateDer<'static>> {
    let ca = config
        .telemetry
        .otlp
        .as_ref()
        .and_then(|o| o.ca_file.as_ref());
    client_ca(ca, "telemetry.ca_invalid", problems).unwrap_or_default()
}

/// `store.tls`'s files, each decoded once to check it (the roots, the
/// client pair and that its key is the certificate's) and handed to the
/// Redis client as the PEM it takes.
fn store_tls(config: &Config, problems: &mut Problems) -> StoreTlsPem {
    let tls = &config.store.tls;
    let roots = tls.ca_file.as_ref().and_then(|ca| {
        let pem = Pem::read(&ca.value)
            .map_err(|e| problems.push_at(&ca.place, "store.tls_invalid", e))
            .ok()?;
        let bytes = pem.bytes().to_vec();
        pem.roots()
            .map_err(|e| problems.push_at(&ca.place, "store.tls_invalid", e))
            .ok()?;
        Some(bytes)
    });
    let client = tls.client.as_ref().and_then(|c| {
        let (cert, key) = &c.value;
        let (cert, key) = (PemSource::File(cert.clone()), PemSource::File(key.clone()));
        pair(&cert, &key)
            .map(|(_, [cert, key])| (cert, key))
            .map_err(|e| problems.push_at(&c.place, "store.tls_invalid", e))
            .ok()
    });
    StoreTlsPem {
        verify: tls.verify,
        roots,
        client,
    }
}

/// `auth.keys`, each entry's material loaded and reported at the entry
/// (a JWKS endpoint's roots at its `ca_file`).
fn verifier(config: &Config, problems: &mut Problems) -> Option<Verifier> {
    let auth = config.auth.as_ref()?;
    let mut keys = KeySet::default();
    for entry in &auth.keys {
        if let Err((place, e)) = add_keys(&entry.value, &mut keys) {
            problems.push_at(place.unwrap_or(&entry.place), "auth.key_invalid", e);
        }
    }
    Some(Verifier::new(auth, &config.tenants, keys))
}

/// `auth.methods`: each htpasswd file and keys file read once and parsed,
/// a failure reported at the key that names it.
fn methods(config: &Config, problems: &mut Problems) -> Authenticators {
    use crate::config::MethodKind;
    let Some(auth) = &config.auth else {
        return Authenticators::default();
    };
    let mut out = Vec::new();
    for (name, method) in &auth.methods {
        let kind = match &method.kind {
            MethodKind::External(e) => {
                // The answer headers its identity maps read, the routes' too.
                let routes = config
                    .routes
                    .iter()
                    .filter(|r| r.method.as_ref() == Some(name));
                let mut read = crate::auth::methods::header_sources(&method.identity);
                for map in routes.filter_map(|r| r.identity.as_ref()) {
                    read.extend(crate::auth::methods::header_sources(map));
                }
                let Some(roots) = client_ca(e.ca_file.as_ref(), "auth.ca_invalid", problems) else {
                    continue;
                };
                let external = crate::auth::external::ExternalAuth::new(name, e, read, &roots);
                Kind::External(Box::new(external))
            }
            MethodKind::Basic(b) => match basic(b, problems) {
                Some(kind) => kind,
                None => continue,
            },
            MethodKind::ApiKey(k) => {
                let loaded = text(&k.keys.value).and_then(|t| {
                    crate::auth::api_keys::ApiKeys::parse(&t).map_err(|e| e.to_string())
                });
                match loaded {
                    Ok(keys) => Kind::ApiKey {
                        config: k.clone(),
                        keys,
                    },
                    Err(e) => {
                        problems.push_at(&k.keys.place, "auth.api_keys_invalid", e);
                        continue;
                    }
                }
            }
        };
        out.push(Authenticator {
            name: name.clone(),
            kind,
            identity: method.identity.clone(),
        });
    }
    let mut methods = Authenticators::new(out);
    methods.scope_answers(&config.routes);
    methods
}

/// A basic method's htpasswd entries and user map, each reported at the
/// key that names it.
fn basic(b: &crate::config::Basic, problems: &mut Problems) -> Option<Kind> {
    let htpasswd = text(&b.htpasswd.value)
        .and_then(|t| crate::auth::basic::Htpasswd::parse(&t).map_err(|e| e.to_string()))
        .map_err(|e| problems.push_at(&b.htpasswd.place, "auth.htpasswd_invalid", e));
    let users = match &b.users {
        None => Ok(None),
        Some(u) => text(&u.value)
            .and_then(|t| crate::auth::users::UserMap::parse(&t).map_err(|e| e.to_string()))
            .map(Some)
            .map_err(|e| problems.push_at(&u.place, "auth.users_invalid", e)),
    };
    let auth = crate::auth::basic::BasicAuth::new(htpasswd.ok()?, b.realm.clone());
    Some(Kind::Basic {
        auth: Arc::new(auth),
        users: users.ok()?,
    })
}

/// Most an htpasswd or keys file may hold.
const MAX_TEXT_BYTES: usize = 16 << 20;

/// A text source (an htpasswd or keys file, or the text itself), bounded.
fn text(source: &PemSource) -> Result<String, String> {
    let (name, bytes) = match source {
        PemSource::File(path) => {
            use std::io::Read;
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(MAX_TEXT_BYTES as u64 + 1).read_to_end(&mut bytes))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            (path.display().to_string(), bytes)
        }
        PemSource::Pem { name, bytes } => (name.clone(), bytes.to_vec()),
    };
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{name}: over the {} MiB it may hold",
            MAX_TEXT_BYTES >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{name}: not UTF-8 text"))
}

/// Loads one key source into `keys`; on failure, why, and where if not at
/// the entry.
fn add_keys<'c>(
    source: &'c KeySource,
    keys: &mut KeySet,
) -> Result<(), (Option<&'c Place>, KeyError)> {
    let at_entry = |e: KeyError| (None, e);
    match source {
        KeySource::Secret { kid, alg, env } => {
            let key = keys::secret(kid.as_deref(), alg, env).map_err(at_entry)?;
            keys.fixed.push(key);
        }
        KeySource::PublicKeyFile { kid, alg, path } => {
            let pem = keys::read(path).map_err(at_entry)?;
            let key = keys::public_key(kid.as_deref(), alg, pem).map_err(at_entry)?;
            keys.fixed.push(key);
        }
        KeySource::JwksFile { path } => {
            let pem = keys::read(path).map_err(at_entry)?;
            keys.fixed
                .extend(keys::jwks_document(pem).map_err(at_entry)?);
        }
        KeySource::JwksUrl {
            url,
            refresh,
            ca_file,
        } => {
            let roots = match ca_file {
                Some(ca) => open(&ca.value)
                    .and_then(Pem::roots)
                    .map_err(|e| (Some(&ca.place), KeyError::Roots(e)))?,
                None => Vec::new(),
            };
            let client = keys::jwks_client(url, &roots).map_err(at_entry)?;
            let remote = RemoteJwks::new(url.clone(), *refresh, client);
            keys.remote.push(Arc::new(remote));
        }
    }
    Ok(())
}

/// Routes whose host no served certificate names: their TLS clients get
/// the default certificate and fail to verify it.
fn warn_uncovered_hosts(config: &Config, certs: &Certs, problems: &mut Problems) {
    if config.acknowledge.contains("server.tls_host_uncovered") {
        return;
    }
    let named: std::collections::HashSet<&String> =
        certs.served().iter().flat_map(|s| &s.names).collect();
    for route in &config.routes {
        let host = match &route.host {
            Some(HostMatch::Exact(h)) => h.clone(),
            Some(HostMatch::Suffix(s)) => format!("*.{}", s.trim_start_matches('.')),
            None => continue,
        };
        if certs.covers(&host) || named.contains(&host) {
            continue;
        }
        problems.warn(
            (route.place.line, route.place.column),
            "server.tls_host_uncovered",
            format!(
                "route \"{}\" serves host {host}, which no certificate in server.tls names; \
                 its HTTPS clients get the default certificate and fail to verify it. Add a \
                 certificate for it, or list server.tls_host_uncovered under `acknowledge:`",
                route.name
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::tls::pem::loads;

    /// Copies the repository's test PEM files into a directory of its own,
    /// so the load counter sees only this test's reads.
    fn fixtures(dir: &Path) {
        for (from, to) in [
            ("config/certs/api.pem", "api.pem"),
            ("config/certs/api.key", "api.key"),
            ("config/certs/legacy.pem", "legacy.pem"),
            ("config/certs/legacy.key", "legacy.key"),
            ("config/certs/example-ca.pem", "clients-ca.pem"),
            ("tests/fixtures/ca.pem", "upstream-ca.pem"),
            ("tests/fixtures/ca.pem", "store-ca.pem"),
            ("tests/fixtures/gw.pem", "store-client.pem"),
            ("tests/fixtures/gw.key", "store-client.key"),
            ("config/keys/rs256.pub.pem", "rs256.pub.pem"),
        ] {
            std::fs::copy(from, dir.join(to)).unwrap();
        }
    }

    const POLICY: &str = r#"
server:
  listen: ["127.0.0.1:8080"]
  tls:
    listen: "127.0.0.1:8443"
    certificates:
      - {cert_file: api.pem, key_file: api.key}
      - {cert_file: legacy.pem, key_file: legacy.key, hosts: ["*.legacy.example.com"]}
    client_ca: clients-ca.pem
    client_auth: optional
store:
  kind: redis
  url: "rediss://127.0.0.1:6379/0"
  ca_file: store-ca.pem
  cert_file: store-client.pem
  key_file: store-client.key
auth:
  keys: [{kid: rs, alg: RS256, public_key_file: rs256.pub.pem}]
upstreams:
  api: {targets: ["127.0.0.1:3000"], tls: true, ca_file: upstream-ca.pem}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, auth: none}
"#;

    #[test]
    fn every_certificate_key_and_ca_is_read_once_per_load() {
        let dir = tempfile::tempdir().unwrap();
        fixtures(dir.path());
        let prefix = dir.path().display().to_string();
        let checked =
            super::from_text("policy.yaml", POLICY, dir.path()).unwrap_or_else(|p| panic!("{p}"));
        let expected: Vec<(String, usize)> = [
            "api.key",
            "api.pem",
            "clients-ca.pem",
            "legacy.key",
            "legacy.pem",
            "rs256.pub.pem",
            "store-ca.pem",
            "store-client.key",
            "store-client.pem",
            "upstream-ca.pem",
        ]
        .iter()
        .map(|f| (dir.path().join(f).display().to_string(), 1))
        .collect();
        assert_eq!(loads::under(&prefix), expected);

        // Putting the policy in force reads nothing more.
        crate::state::Policy::build(checked, 1).unwrap();
        assert_eq!(loads::under(&prefix), expected);
    }
}
