//! The proxy, one concern per file:
//! - `edge`: every connection first: connection caps, the PROXY header
//!   (`proxy_protocol`), the TLS handshake, HTTP/1 head bounds (`heads`)
//!   and h2c/rapid-reset reading (`h2`);
//! - `gateway`: the Pingora phases, each short and delegating;
//! - `admit`: whether a request may go upstream (hygiene, target, route,
//!   body size, auth, buckets, slot, a `fair_share` pool's permit in
//!   `queue`), with `authn` (authentication by a
//!   method of `auth.methods`), `headers` (which headers are
//!   believed, removed, written), `target` (the request target read once and
//!   the URI the upstream gets), `cors` and `actions` (a route's address
//!   rules, redirects, rewrites and header edits);
//! - `attempt`: one upstream attempt (pool, target, timeouts, retries,
//!   passive health); `access_log`: the access line;
//! - `respond`: every answer the gateway makes itself; `quota`: the quota
//!   headers; `ctx`: what one request carries between phases.

pub mod access_log;
pub mod actions;
pub mod admit;
pub mod attempt;
pub mod authn;
pub mod bounds;
pub mod client_certs;
pub mod compress;
pub mod cookies;
pub mod cors;
pub mod ctx;
pub mod edge;
pub mod error_page;
pub mod gateway;
pub mod h2;
pub mod headers;
pub mod heads;
pub mod hello;
pub mod mirror;
pub mod passthrough;
pub mod proxy_protocol;
mod queue;
pub mod quota;
pub mod respond;
pub mod target;
