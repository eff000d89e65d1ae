//! The gateway's data plane: proxying, routing, authentication, TLS, HTTP/2
//! and gRPC, the edge's bounds, reload, tracing, the admin listener and the
//! demo, each against the real binary.
//!
//! One test crate: the harness (`tests/common`) is compiled once here, and
//! each module is one suite (it was `tests/<module>.rs`).

#[path = "../common/mod.rs"]
mod common;

mod access_log;
mod admin_api;
mod affinity;
mod auth;
mod auth_attack;
mod auth_basic_attack;
mod auth_basic_keys;
mod auth_external;
mod auth_external_attack;
mod client_certs;
mod compression;
mod demo;
mod error_pages;
mod fair_share;
mod grpc;
mod hardening;
mod hardening_resources;
mod http2;
mod jwks;
mod mirror;
mod ops;
mod passthrough;
mod pingora_upgrade;
mod proxy;
mod proxy_protocol;
mod quota_headers;
mod reload;
mod routing;
mod routing_upstreams;
mod slots;
mod tls;
mod tls_sessions;
mod token_cache;
mod tracing;
