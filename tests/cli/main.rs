//! The command line and the shipped files: `fairgate check` on every fixture,
//! the docs and schema against the reader, the deployment kit, the fuzz
//! findings.
//!
//! One test crate: the harness (`tests/common`) is compiled once here, and
//! each module is one suite (it was `tests/<module>.rs`).

#[path = "../common/mod.rs"]
mod common;

mod check_build;
mod config_check;
mod config_docs;
mod config_retries;
mod config_schema;
mod deploy_kit;
mod fuzz_regressions;
mod layout;
