//! The token buckets and their stores: the bucket suite on every store, what
//! Redis holds, and Redis over TLS, failing and failing over.
//!
//! One test crate: the harness (`tests/common`) is compiled once here, and
//! each module is one suite (it was `tests/<module>.rs`).

#[path = "../common/mod.rs"]
mod common;

mod limits;
mod limits_store;
mod redis_tls;
mod store_failover;
mod store_failure;
