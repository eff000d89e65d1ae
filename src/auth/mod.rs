//! Authentication: JWT verification and the identity it yields.

/// Tenant ids become part of store keys verbatim, so only a safe alphabet is
/// accepted: `[A-Za-z0-9._@-]{1,128}`.
pub fn tenant_id_ok(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}
