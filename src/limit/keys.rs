//! Every store key shape, in one place (SPEC section 4). The tenant id in
//! braces is the Redis Cluster hash tag, so one tenant's keys share a shard
//! and a multi-bucket check is one script call.

use std::fmt::Write;
use std::net::IpAddr;

/// Percent-encodes every byte outside `[A-Za-z0-9._@-]`. Injective, and the
/// output never holds `:`, `{` or `}`, so no value can forge a delimiter.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A value that is absent (a missing header): `%` alone, which `encode`
/// never produces, so it cannot collide with any real value.
pub const ABSENT: &str = "%";

pub fn tenant(prefix: &str, tid: &str, limit: &str) -> String {
    format!("{prefix}tenant:{{{tid}}}:rate:{limit}")
}

pub fn tenant_user(prefix: &str, tid: &str, uid: &str, limit: &str) -> String {
    format!("{prefix}tenant:{{{tid}}}:user:{}:rate:{limit}", encode(uid))
}

pub fn tenant_token(prefix: &str, tid: &str, jti: &str, limit: &str) -> String {
    format!(
        "{prefix}tenant:{{{tid}}}:token:{}:rate:{limit}",
        encode(jti)
    )
}

/// `{path: p}` and `{header: h}` scopes; inside the tenant when authenticated.
pub fn value(prefix: &str, tid: Option<&str>, limit: &str, value: Option<&str>) -> String {
    let v = value.map(encode).unwrap_or_else(|| ABSENT.to_string());
    match tid {
        Some(tid) => format!("{prefix}tenant:{{{tid}}}:{limit}:{{{v}}}:rate"),
        None => format!("{prefix}{limit}:{{{v}}}:rate"),
    }
}

pub fn client_ip(prefix: &str, addr: IpAddr, limit: &str) -> String {
    format!("{prefix}ip:{{{addr}}}:rate:{limit}")
}

pub fn global(prefix: &str, limit: &str) -> String {
    format!("{prefix}global:{{{limit}}}:rate")
}

pub fn slots(prefix: &str, tid: &str, name: &str) -> String {
    format!("{prefix}tenant:{{{tid}}}:slots:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_injective_and_delimiter_free() {
        assert_eq!(encode("auth0|42:rate:api"), "auth0%7C42%3Arate%3Aapi");
        assert_eq!(encode("a@b.com"), "a@b.com");
        assert_eq!(encode("{x}"), "%7Bx%7D");
        assert_eq!(encode("%41"), "%2541");
        assert_ne!(encode("%41"), encode("A"));
        for v in ["a:b", "{t}", "x}:rate:api", "ü"] {
            let e = encode(v);
            assert!(!e.contains([':', '{', '}']), "{e}");
        }
    }

    #[test]
    fn shapes() {
        assert_eq!(tenant("fw:", "acme", "api"), "fw:tenant:{acme}:rate:api");
        assert_eq!(
            tenant_user("", "acme", "auth0|42:rate:api", "auth"),
            "tenant:{acme}:user:auth0%7C42%3Arate%3Aapi:rate:auth"
        );
        assert_eq!(
            tenant_token("", "acme", "j1", "api"),
            "tenant:{acme}:token:j1:rate:api"
        );
        assert_eq!(
            value("", None, "webhooks", Some("stripe")),
            "webhooks:{stripe}:rate"
        );
        assert_eq!(
            value("", Some("acme"), "webhooks", Some("stripe")),
            "tenant:{acme}:webhooks:{stripe}:rate"
        );
        assert_eq!(value("", None, "h", None), "h:{%}:rate");
        assert_eq!(
            client_ip("", "10.0.0.1".parse().unwrap(), "anon"),
            "ip:{10.0.0.1}:rate:anon"
        );
        assert_eq!(global("", "all"), "global:{all}:rate");
        assert_eq!(slots("", "acme", "uploads"), "tenant:{acme}:slots:uploads");
    }

    #[test]
    fn a_user_id_cannot_land_on_the_tenant_or_another_user() {
        let forged = tenant_user("", "acme", "x:rate:api", "api");
        assert_ne!(forged, tenant("", "acme", "api"));
        assert_ne!(forged, tenant_user("", "acme", "x", "api"));
        assert_ne!(
            tenant_user("", "acme", "auth0|42:rate:api", "api"),
            tenant_user("", "acme", "auth0|42", "api")
        );
    }
}
