//! fairgate: a fair, multi-tenant rate-limiting reverse proxy on Pingora.
//! The modules follow one request's path: `proxy::edge` → `proxy::gateway`
//! → `proxy::admit` (`proxy::target`, `auth`, `limit`) → `upstream` →
//! `proxy::respond`, over the process `state` built from `config`, with
//! `admin` and `metrics` beside them.

pub mod admin;
pub mod admin_api;
pub mod auth;
pub mod breaker;
pub mod build;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod echo;
pub mod gcra;
pub mod host;
pub mod import;
pub mod k8s;
pub mod limit;
pub mod metrics;
pub mod proxy;
pub mod redact;
pub mod routing;
pub mod server;
pub mod state;
pub mod telemetry;
pub mod tenant;
pub mod tls;
pub mod upstream;
