//! What some hosts get at the TLS listener instead of its own handshake:
//! `server.tls.client_certificates` (the roots a client certificate must
//! chain to, and what the upstream is told of it) and `server.tls.passthrough`
//! (the TLS passed to a pool unterminated). The reader builds them; the
//! edge picks by the ClientHello's SNI.

use super::place::PemSource;
use super::route::PathRegex;

/// One entry: client certificates for these hosts, as ingress-nginx's
/// `auth-tls-*` annotations ask of one server.
#[derive(Debug, Clone, PartialEq)]
pub struct HostClientCerts {
    /// Lower-case names, exact or `*.domain`; each in one entry only.
    pub hosts: Vec<String>,
    /// The roots (PEM) a client certificate must chain to.
    pub ca: PemSource,
    /// A request without a certificate is refused (`400`, or the error page).
    pub required: bool,
    /// At most this many intermediate certificates a client may send.
    pub depth: u8,
    /// The certificate itself goes upstream (`ssl-client-cert`, URL-encoded PEM).
    pub pass_certificate: bool,
    /// A verified subject (RFC 4514 text) this does not match gets `403`.
    pub match_subject: Option<PathRegex>,
    /// Where a request without a certificate is sent (`302`) instead of `400`.
    pub error_page: Option<String>,
}

/// One `server.tls.passthrough` entry: connections whose SNI names these
/// hosts are passed, TLS and all, to a target of `upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    /// Lower-case names, exact or `*.domain`; each in one entry only.
    pub hosts: Vec<String>,
    pub upstream: String,
}
