//! Configuration: the located YAML tree (`yaml`), the section readers
//! (`read`), the validated policy they build (`model`), located problems
//! (`error`), the list of keys (`schema`) and watching the file (`reload`).

pub mod error;
pub mod model;
mod read;
pub mod reload;
pub mod schema;
pub mod yaml;

pub use error::Problems;
pub use model::*;
pub use read::{edit_reserved, parse_rate, ACKNOWLEDGEABLE};
