//! Client certificates: the verifier built from the roots of
//! `server.tls.client_ca`, and what a handshake learnt (the verified
//! certificate's subject as RFC 4514 text, the SNI), kept with the
//! connection for scopes, identity headers and the access log. It reads no
//! file: the policy builder hands it decoded roots.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

/// Why the roots cannot verify client certificates.
#[derive(Debug, thiserror::Error)]
#[error("{ca}: {source}")]
pub struct ClientCaError {
    ca: String,
    source: rustls::server::VerifierBuilderError,
}

/// Verifies client certificates against `roots` (decoded from `ca`, the
/// name errors show); `required`: a handshake without one fails.
pub fn client_verifier(
    ca: &str,
    roots: Vec<CertificateDer<'static>>,
    required: bool,
) -> Result<Arc<dyn ClientCertVerifier>, ClientCaError> {
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(roots);
    let builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(store), Arc::new(super::provider()));
    let builder = if required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder.build().map_err(|source| ClientCaError {
        ca: ca.to_string(),
        source,
    })
}

/// Keeps what a handshake learnt with the connection (Pingora's
/// `SslDigest` extension): the subject of a verified client certificate,
/// for scopes and identity headers, and the SNI, for the access log. On a
/// host's own acceptor (`server.tls.client_certificates`), also which
/// entry verified, the issuer and the certificate itself.
#[derive(Default)]
pub struct ConnectionFacts {
    /// The entry's id (`HostClients::id`); 0 on the listener's acceptor.
    pub clients: u64,
}

/// What [`ConnectionFacts`] keeps of one handshake.
#[derive(Debug, Clone, Default)]
pub struct TlsFacts {
    pub subject: Option<ClientSubject>,
    /// The server name the client asked for, as sent (at most 255 bytes).
    pub sni: Option<String>,
    /// Which `client_certificates` entry verified (0: none).
    pub clients: u64,
    /// The verified certificate's issuer and DER (per-host entries only).
    pub issuer: Option<ClientSubject>,
    pub leaf: Option<Arc<[u8]>>,
}

#[async_trait::async_trait]
impl pingora::listeners::TlsAccept for ConnectionFacts {
    async fn handshake_complete_callback(
        &self,
        tls: &pingora::protocols::tls::TlsRef,
    ) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let der = tls.peer_certificate_der();
        let mut facts = TlsFacts {
            subject: der.and_then(ClientSubject::of),
            sni: tls
                .server_name()
                .filter(|s| s.len() <= 255)
                .map(str::to_string),
            clients: self.clients,
            ..TlsFacts::default()
        };
        if self.clients != 0 {
            facts.issuer = der.and_then(ClientSubject::issuer_of);
            facts.leaf = der.filter(|_| facts.subject.is_some()).map(Arc::from);
        }
        Some(Arc::new(facts))
    }
}

/// Bytes of subject text kept; beyond, the certificate names no subject.
const MAX_SUBJECT: usize = 1024;

/// The subject of a verified client certificate, as RFC 4514 text
/// (`CN=billing,O=Acme`); `None` without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSubject(pub String);

impl ClientSubject {
    /// RFC 4514: the last RDN first, multi-valued RDNs joined with `+`,
    /// special characters escaped, non-string values as `#` and hex; so
    /// two different subjects never read the same.
    pub fn of(der: &[u8]) -> Option<ClientSubject> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        Self::text(cert.subject())
    }

    /// The issuer of the certificate, as the same text.
    pub fn issuer_of(der: &[u8]) -> Option<ClientSubject> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        Self::text(cert.issuer())
    }

    fn text(name: &x509_parser::x509::X509Name<'_>) -> Option<ClientSubject> {
        let registry = x509_parser::objects::oid_registry();
        let rdns: Vec<String> = name
            .iter_rdn()
            .map(|rdn| {
                let parts: Vec<String> = rdn
                    .iter()
                    .map(|atv| {
                        let key = x509_parser::objects::oid2abbrev(atv.attr_type(), registry)
                            .map_or_else(|_| atv.attr_type().to_id_string(), str::to_string);
                        let value = match atv.as_str() {
                            Ok(text) => escape_dn_value(text),
                            Err(_) => format!("#{}", hex(atv.as_slice())),
                        };
                        format!("{key}={value}")
                    })
                    .collect();
                parts.join("+")
            })
            .collect();
        let text: Vec<&str> = rdns.iter().rev().map(String::as_str).collect();
        let text = text.join(",");
        // Too long for a header line: no subject (client_cert routes refuse).
        (!text.is_empty() && text.len() <= MAX_SUBJECT).then_some(ClientSubject(text))
    }
}

/// RFC 4514 section 2.4: `"+,;<>\` escaped anywhere, `#` and space first,
/// space last; control characters as `\XX` per byte.
fn escape_dn_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\{byte:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::escape_dn_value;

    #[test]
    fn subject_values_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape_dn_value("Acme, Inc."), r"Acme\, Inc.");
        assert_eq!(escape_dn_value("a+b=c"), r"a\+b=c");
        assert_eq!(escape_dn_value("#1 "), r"\#1\ ");
        assert_eq!(escape_dn_value(" x"), r"\ x");
        assert_eq!(escape_dn_value("line\nbreak"), r"line\0Abreak");
        assert_eq!(escape_dn_value("café"), "café");
    }
}
