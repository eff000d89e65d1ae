//! `server.tls.client_certificates`: the hosts whose clients must (or may)
//! show a certificate, the roots it must chain to, and what the upstream
//! is told of it. The reader builds it; the policy builder loads the roots
//! and the edge picks each handshake's verifier by SNI.

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
