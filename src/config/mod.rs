//! Configuration: the located YAML tree (`yaml`), the section readers
//! (`read`), the validated policy they build (`model`, `route`), reading a
//! file (`reading`), located problems (`error`), the list of keys
//! (`schema`) and watching the file (`reload`). It turns text into types
//! and checks that the paths it names exist; it loads none of those files
//! (the policy builder, `crate::build`, does) and imports no other module
//! of the crate but the leaves (`tenant`, `host`, `redact`).

pub mod compression;
pub mod error;
pub mod fair_share;
pub mod kubernetes;
pub mod methods;
pub mod model;
pub mod place;
mod read;
pub mod reading;
pub mod reload;
pub mod route;
pub mod schema;
pub mod schema_types;
pub mod tcp;
pub mod tls_hosts;
pub mod yaml;

pub use compression::*;
pub use error::Problems;
pub use fair_share::*;
pub use kubernetes::*;
pub use methods::*;
pub use model::*;
pub use place::*;
pub use read::{edit_reserved, name_ok, parse_rate, ACKNOWLEDGEABLE};
pub use reading::{Loaded, Reading, Source};
pub use route::*;
pub use tcp::*;
pub use tls_hosts::*;
