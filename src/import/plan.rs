//! `Plan`: what one Ingress's annotations make of each of its routes,
//! filled in by the annotation families and read when its routes are
//! built. Types only.

use super::backend::{Protocol, Verify};
use super::out::{AuthMethod, RouteKeys};

/// What an Ingress's annotations make of each of its routes.
#[derive(Debug, Default)]
pub struct Plan {
    pub keys: RouteKeys,
    pub rewrite_target: Option<String>,
    pub vhost: Option<String>,
    pub protocol: Protocol,
    /// How a TLS backend is checked (`proxy-ssl-*`).
    pub verify: Verify,
    /// How its pools pick an endpoint (`load-balance`, `upstream-hash-by`).
    pub balance: Option<super::out::Balance>,
    /// Cookie affinity for its pools (`affinity: cookie`).
    pub affinity: Option<super::out::Affinity>,
    /// Its pools' `fair_share` (`fairgate.dev/fair-share`), as given.
    pub fair_share: Option<super::emit::Node>,
    /// `ssl-redirect` when the annotation says it.
    pub ssl_redirect: Option<bool>,
    pub force_ssl_redirect: bool,
    /// `from-to-www-redirect: "true"`.
    pub www_redirect: bool,
    /// `server-alias`: more names for the Ingress's host.
    pub aliases: Vec<String>,
    /// `default-backend`: the Service (of the Ingress's namespace) that
    /// serves its paths while their own has no ready endpoint.
    pub default_backend: Option<String>,
    /// `mirror-target`: where copies go, made a pool with the routes.
    pub mirror: Option<super::mirror::Target>,
    /// `ssl-passthrough: "true"`, mapped: its hosts' TLS passes through.
    pub passthrough: bool,
    /// `auth-tls-*`: client certificates for its hosts (hosts not set).
    pub client_certs: Option<super::out::ClientCerts>,
    /// `custom-http-errors`: the statuses the default backend answers for.
    pub error_codes: Vec<u16>,
    /// ImplementationSpecific paths read as prefixes, reported once.
    pub loose_prefix_reported: bool,
    /// The `auth.methods` entry its routes name (`auth-url`, `auth-type`),
    /// added to the policy only when the Ingress is imported.
    pub method: Option<(String, AuthMethod)>,
    /// Why the Ingress's paths are not imported at all: an access rule the
    /// import cannot carry over would leave them open.
    pub withheld: Option<String>,
}
