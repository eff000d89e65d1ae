//! What the Gateway API conversion says of a route: a note for the report,
//! or why the route has no Gateway API form. The conversion's files
//! (`mod.rs`, `filters.rs`, `matches.rs`) all speak it.

use crate::import::Verdict;

/// Why a route of the policy has no Gateway API form: the report says so,
/// and the route is left out of the manifests.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Inexpressible(pub(super) String);

/// A report note: the item and what became of it.
pub(super) type Note = (String, Verdict);
