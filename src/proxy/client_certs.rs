//! What some hosts get at the TLS listener, at the request. A passthrough
//! host's request on a TLS connection the gateway ended is misdirected
//! (421). With client certificates (`server.tls.client_certificates`), a
//! request for the host must come on a connection whose handshake was that
//! host's (else 421, as nginx answers a Host that differs from the SNI),
//! with a certificate when the entry requires one
//! (else 400, or its error page), whose subject matches (else 403). The
//! upstream then hears what ingress-nginx tells it: `ssl-client-verify`,
//! `ssl-client-subject-dn`, `ssl-client-issuer-dn` and, if asked,
//! `ssl-client-cert`; a client's own copies never pass.

use std::sync::Arc;

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::ctx::Ctx;
use super::headers::tls_facts;
use super::respond::{Deny, Refusal};
use crate::tls::HostClients;

const VERIFY: &str = "ssl-client-verify";
const SUBJECT: &str = "ssl-client-subject-dn";
const ISSUER: &str = "ssl-client-issuer-dn";
const CERT: &str = "ssl-client-cert";

/// Why a request for a host with client certificates is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No certificate, and the host requires one.
    Missing,
    /// The connection's handshake was not this host's.
    Misdirected,
    /// The subject does not match `match_subject`.
    Unauthorized,
}

impl Refused {
    pub fn refusal(self) -> Refusal {
        match self {
            Refused::Missing => Refusal::new(
                400,
                "client-cert-missing",
                "Bad request",
                "this host needs a client certificate; none was sent",
            ),
            Refused::Misdirected => Refusal::new(
                421,
                "misdirected-request",
                "Misdirected request",
                "this connection was not set up for this host's client certificates; \
                 connect again naming the host",
            ),
            Refused::Unauthorized => Refusal::new(
                403,
                "client-cert-unauthorized",
                "Forbidden",
                "this client certificate is not allowed on this host",
            ),
        }
    }
}

/// Checks a request for `host`, keeping its entry in `ctx` for `upstream`.
pub fn check(session: &Session, ctx: &mut Ctx, host: &str) -> Result<(), Deny> {
    let hosts = &ctx.policy.tls_hosts;
    if !hosts.any() {
        return Ok(());
    }
    // A passthrough host's TLS is its backend's: a request for it on a
    // connection the gateway ended (another SNI, none, HTTP/2 coalescing)
    // must go and connect naming it.
    let passed = hosts.passed(host).is_some() && !hosts.find_exact(host);
    if passed && tls_facts(session).is_some() {
        return Err(Deny::ClientCert(Refused::Misdirected));
    }
    if hosts.no_clients() {
        return Ok(());
    }
    let Some(entry) = ctx.policy.tls_hosts.find(host).cloned() else {
        // A connection a host's own roots verified never carries a request
        // for a host the listener's `client_ca` guards.
        let own = tls_facts(session).is_some_and(|f| f.clients != 0);
        return match own && ctx.policy.client_verifier.is_some() {
            true => Err(Deny::ClientCert(Refused::Misdirected)),
            false => Ok(()),
        };
    };
    ctx.client_certs = Some(entry.clone());
    let settings = &entry.settings;
    let facts = tls_facts(session);
    let subject = match facts {
        // A plain listener: no certificate can have been asked for.
        None => None,
        Some(f) if f.clients != entry.id => return Err(Deny::ClientCert(Refused::Misdirected)),
        Some(f) => f.subject.as_ref(),
    };
    match subject {
        None if settings.required => Err(match &settings.error_page {
            Some(page) => Deny::Redirect {
                code: 302,
                location: page.clone(),
            },
            None => Deny::ClientCert(Refused::Missing),
        }),
        // As nginx's `$ssl_client_s_dn !~`: no certificate is the empty subject.
        subject => match &settings.match_subject {
            Some(re) if !re.0.is_match(subject.map_or("", |s| s.0.as_str())) => {
                Err(Deny::ClientCert(Refused::Unauthorized))
            }
            _ => Ok(()),
        },
    }
}

/// The `ssl-client-*` headers, every client copy (any spelling) removed.
pub fn upstream(
    session: &Session,
    upstream: &mut RequestHeader,
    entry: &Arc<HostClients>,
) -> pingora::Result<()> {
    let names = [VERIFY, SUBJECT, ISSUER, CERT];
    let spelled: Vec<http::HeaderName> = upstream
        .headers
        .keys()
        .filter(|k| {
            names
                .iter()
                .any(|n| super::headers::same_name(k.as_str(), n))
        })
        .cloned()
        .collect();
    for name in spelled {
        upstream.remove_header(&name);
    }
    let facts = tls_facts(session).filter(|f| f.clients == entry.id);
    let Some((facts, subject)) = facts.and_then(|f| Some((f, f.subject.as_ref()?))) else {
        return upstream.insert_header(VERIFY, "NONE");
    };
    upstream.insert_header(VERIFY, "SUCCESS")?;
    if let Ok(value) = http::HeaderValue::from_str(&subject.0) {
        upstream.insert_header(SUBJECT, value)?;
    }
    if let Some(value) = facts
        .issuer
        .as_ref()
        .and_then(|i| http::HeaderValue::from_str(&i.0).ok())
    {
        upstream.insert_header(ISSUER, value)?;
    }
    if let (true, Some(leaf)) = (entry.settings.pass_certificate, &facts.leaf) {
        upstream.insert_header(CERT, escaped_pem(leaf))?;
    }
    Ok(())
}

/// nginx's `$ssl_client_escaped_cert`: the PEM, URL-encoded.
fn escaped_pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(&pem, KEEP).to_string()
}

#[cfg(test)]
mod tests {
    use super::escaped_pem;

    #[test]
    fn the_certificate_goes_as_nginx_escapes_it() {
        let escaped = escaped_pem(&[0xfb; 60]);
        assert!(
            escaped.starts_with("-----BEGIN%20CERTIFICATE-----%0A%2B%2Fv7%2B"),
            "{escaped}"
        );
        assert!(escaped.ends_with("%0A-----END%20CERTIFICATE-----%0A"));
    }
}
