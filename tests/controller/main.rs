//! Controller mode and the import: Ingresses and the Gateway API through the
//! API stand-in and the real kubectl, and `fairgate import`.
//!
//! One test crate: the harness (`tests/common`) is compiled once here, and
//! each module is one suite (it was `tests/<module>.rs`).

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod annotations_routing;
mod annotations_served;
mod fair_share;
mod fourth_attack;
mod fourth_attack_bounds;
mod gateway_api_attack;
mod gateway_api_extended;
mod gateway_api_filters;
mod gateway_api_gateways;
mod gateway_api_grpc;
mod gateway_api_hostnames;
mod gateway_api_isolation;
mod gateway_api_matching;
mod gateway_api_policy;
mod gateway_api_redirects;
mod gateway_api_refs;
mod gateway_api_secrets;
mod import;
mod import_gateway_api;
mod import_gateway_api_built;
mod import_served;
mod kit;
mod kube_api;
mod kube_api_schema;
mod kube_attack;
mod kube_auth;
mod kube_controller;
mod kube_doors;
mod kube_scale;
mod kube_traffic;
mod migration_parity;
mod third_attack;
mod tls_hosts;
