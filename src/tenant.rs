//! Tenant ids: the one alphabet and length bound a tenant id must meet,
//! and `TenantId`, the type that can only hold one that does. Shared by
//! the config reader (tenant overrides), auth (claims), the admin API and
//! the store keys. A leaf: it imports nothing from the crate.

/// Longest tenant id accepted, in bytes.
pub const MAX_TENANT_BYTES: usize = 128;

/// A tenant id that passed the alphabet check. It becomes part of store keys
/// verbatim (as the Redis Cluster hash tag), so `new` is the only way to
/// make one, and `limit::keys` can rely on it holding no delimiter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantId(String);

impl TenantId {
    pub fn new(id: impl Into<String>) -> Option<Self> {
        let id = id.into();
        tenant_id_ok(&id).then_some(TenantId(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Tenant ids become part of store keys verbatim, so only a safe alphabet is
/// accepted: `[A-Za-z0-9._@-]{1,128}`.
pub fn tenant_id_ok(id: &str) -> bool {
    (1..=MAX_TENANT_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids() {
        assert!(tenant_id_ok("acme"));
        assert!(tenant_id_ok("a.b_c@d-e"));
        assert!(!tenant_id_ok("a:b"));
        assert!(!tenant_id_ok("{x}"));
        assert!(!tenant_id_ok(""));
        assert!(!tenant_id_ok(&"a".repeat(129)));
        assert!(tenant_id_ok(&"a".repeat(128)));
        assert!(TenantId::new("a b").is_none());
        assert_eq!(TenantId::new("acme").unwrap().as_str(), "acme");
    }
}
