//! `upstreams.<name>.fair_share` (SPEC §12): how many requests a pool may
//! have in flight from this process, and how the requests waiting for one
//! are told apart (flows) and weighed.

use std::collections::BTreeMap;
use std::time::Duration;

use http::HeaderName;

/// A pool's fair share of its in-flight permits among the flows waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairShare {
    pub limit: FairLimit,
    /// What tells one flow from another.
    pub by: FlowBy,
    /// Requests one flow may have waiting; one more is refused at once.
    pub per_tenant: usize,
    /// The longest a request waits for its permit.
    pub timeout: Duration,
    /// Weights by plan (default 1): a flow of weight 4 is served four
    /// requests for each one of a flow of weight 1 while both wait.
    pub weights: BTreeMap<String, u32>,
}

impl FairShare {
    pub const DEFAULT_PER_TENANT: usize = 32;
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const MAX_LIMIT: u64 = 1_000_000;
    pub const MAX_WEIGHT: u64 = 1_000;
    pub const MAX_PER_TENANT: u64 = 100_000;

    /// A plan's weight.
    pub fn weight(&self, plan: Option<&str>) -> u32 {
        plan.and_then(|p| self.weights.get(p)).copied().unwrap_or(1)
    }
}

/// `max_in_flight`: a number, or `adaptive` within `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairLimit {
    Fixed(usize),
    Adaptive { min: usize, max: usize },
}

impl FairLimit {
    pub const ADAPTIVE_MIN: usize = 4;
    pub const ADAPTIVE_MAX: usize = 512;
}

/// `by`: the tenant (the default), the tenant and user, the client's
/// address, or a header's value. A request without the tenant (or the
/// header) is its client address's flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowBy {
    Tenant,
    TenantUser,
    ClientIp,
    Header(HeaderName),
}
