//! Configuration: the YAML file (`file`), the validated policy (`model`),
//! located problems (`error`).

pub mod error;
pub mod file;
pub mod model;
pub mod reload;
pub mod schema;

pub use error::Problems;
pub use model::*;
