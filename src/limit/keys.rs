//! Every store key shape, in one place (SPEC section 4). The tenant id in
//! braces is the Redis Cluster hash tag, so one tenant's keys share a shard
//! and a multi-bucket check is one script call.

use std::fmt::Write;
use std::net::IpAddr;

use crate::auth::TenantId;

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

/// What a key counts: a token bucket or a set of slot leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rate,
    Slots,
}

/// The value a scope keys on for one request, resolved by `limit::scoped`.
/// A `TenantId` holds no delimiter by construction; every other value is
/// `encode`d here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoped<'a> {
    Tenant(&'a TenantId),
    TenantUser(&'a TenantId, &'a str),
    TenantToken(&'a TenantId, &'a str),
    ClientIp(IpAddr),
    /// The subject of a verified client certificate.
    ClientCert(&'a str),
    Global,
    /// A `{path}` or `{header}` value (`None`: absent), inside the tenant
    /// on authenticated routes.
    Value {
        tenant: Option<&'a TenantId>,
        value: Option<&'a str>,
    },
}

/// The one place a store key is shaped (SPEC section 4).
pub fn key(prefix: &str, scoped: Scoped<'_>, name: &str, kind: Kind) -> String {
    let k = match kind {
        Kind::Rate => "rate",
        Kind::Slots => "slots",
    };
    match scoped {
        Scoped::Tenant(t) => format!("{prefix}tenant:{{{t}}}:{k}:{name}"),
        Scoped::TenantUser(t, uid) => {
            format!("{prefix}tenant:{{{t}}}:user:{}:{k}:{name}", encode(uid))
        }
        Scoped::TenantToken(t, jti) => {
            format!("{prefix}tenant:{{{t}}}:token:{}:{k}:{name}", encode(jti))
        }
        Scoped::ClientIp(addr) => format!("{prefix}ip:{{{addr}}}:{k}:{name}"),
        Scoped::ClientCert(subject) => format!("{prefix}cert:{{{}}}:{k}:{name}", encode(subject)),
        Scoped::Global => format!("{prefix}global:{{{name}}}:{k}"),
        Scoped::Value { tenant, value } => {
            let v = value.map(encode).unwrap_or_else(|| ABSENT.to_string());
            match tenant {
                Some(t) => format!("{prefix}tenant:{{{t}}}:{name}:{{{v}}}:{k}"),
                None => format!("{prefix}{name}:{{{v}}}:{k}"),
            }
        }
    }
}

/// The key the store probe writes: inside the configured namespace, so an
/// ACL scoped to the prefix allows it, and under its own hash tag.
pub fn probe(prefix: &str) -> String {
    format!("{prefix}fairgate:{{probe}}")
}

/// The probe key on `near`'s shard: `probe`'s key (`probe_key`) with
/// `near`'s hash tag instead of its own, so that on a Redis Cluster the
/// probe asks the shard that failed. `None` when `near` has no hash tag.
pub fn probe_near(probe_key: &str, near: &str) -> Option<String> {
    let prefix = probe_key.strip_suffix("fairgate:{probe}")?;
    let open = near.find('{')?;
    let len = near[open + 1..].find('}')?;
    let tag = &near[open + 1..open + 1 + len];
    (!tag.is_empty()).then(|| format!("{prefix}fairgate:probe:{{{tag}}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str) -> TenantId {
        TenantId::new(id).unwrap()
    }

    #[test]
    fn the_probe_near_a_key_shares_its_hash_tag() {
        let probe = probe("app:");
        let near = probe_near(&probe, "app:tenant:{acme}:rate:api").unwrap();
        assert_eq!(near, "app:fairgate:probe:{acme}");
        assert_eq!(probe_near(&probe, "app:no-tag"), None);
        assert_eq!(probe_near(&probe, "app:{}:x"), None);
    }

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
    fn every_shape_of_spec_section_4() {
        use Kind::Rate;
        let acme = t("acme");
        let ip = "10.0.0.1".parse().unwrap();
        let user = Scoped::TenantUser(&acme, "auth0|42:rate:api");
        let value = |tenant, value| Scoped::Value { tenant, value };
        let table = [
            (
                Scoped::Tenant(&acme),
                "api",
                Rate,
                "fw:tenant:{acme}:rate:api",
            ),
            (
                user,
                "auth",
                Rate,
                "fw:tenant:{acme}:user:auth0%7C42%3Arate%3Aapi:rate:auth",
            ),
            (
                Scoped::TenantToken(&acme, "j1"),
                "api",
                Rate,
                "fw:tenant:{acme}:token:j1:rate:api",
            ),
            (
                value(None, Some("stripe")),
                "webhooks",
                Rate,
                "fw:webhooks:{stripe}:rate",
            ),
            (
                value(Some(&acme), Some("stripe")),
                "webhooks",
                Rate,
                "fw:tenant:{acme}:webhooks:{stripe}:rate",
            ),
            (value(None, None), "h", Rate, "fw:h:{%}:rate"),
            (
                Scoped::ClientIp(ip),
                "anon",
                Rate,
                "fw:ip:{10.0.0.1}:rate:anon",
            ),
            (
                Scoped::ClientCert("CN=billing,O=Acme {x}"),
                "svc",
                Rate,
                "fw:cert:{CN%3Dbilling%2CO%3DAcme%20%7Bx%7D}:rate:svc",
            ),
            (Scoped::Global, "all", Rate, "fw:global:{all}:rate"),
        ];
        for (scoped, name, kind, want) in table {
            assert_eq!(key("fw:", scoped, name, kind), want);
        }
        assert_eq!(probe("fw:"), "fw:fairgate:{probe}");
    }

    #[test]
    fn every_slot_shape() {
        use Kind::Slots;
        let acme = t("acme");
        let ip = "10.0.0.1".parse().unwrap();
        let user = Scoped::TenantUser(&acme, "auth0|42:rate:api");
        let value = |tenant, value| Scoped::Value { tenant, value };
        let table = [
            (
                Scoped::Tenant(&acme),
                "uploads",
                Slots,
                "fw:tenant:{acme}:slots:uploads",
            ),
            (
                user,
                "up",
                Slots,
                "fw:tenant:{acme}:user:auth0%7C42%3Arate%3Aapi:slots:up",
            ),
            (
                Scoped::TenantToken(&acme, "j1"),
                "up",
                Slots,
                "fw:tenant:{acme}:token:j1:slots:up",
            ),
            (value(None, Some("p/1")), "up", Slots, "fw:up:{p%2F1}:slots"),
            (
                value(Some(&acme), Some("p")),
                "up",
                Slots,
                "fw:tenant:{acme}:up:{p}:slots",
            ),
            (
                Scoped::ClientIp(ip),
                "up",
                Slots,
                "fw:ip:{10.0.0.1}:slots:up",
            ),
            (Scoped::Global, "up", Slots, "fw:global:{up}:slots"),
        ];
        for (scoped, name, kind, want) in table {
            assert_eq!(key("fw:", scoped, name, kind), want);
        }
    }

    #[test]
    fn a_user_id_cannot_land_on_the_tenant_or_another_user() {
        let acme = t("acme");
        let k = |scoped| key("", scoped, "api", Kind::Rate);
        let forged = k(Scoped::TenantUser(&acme, "x:rate:api"));
        assert_ne!(forged, k(Scoped::Tenant(&acme)));
        assert_ne!(forged, k(Scoped::TenantUser(&acme, "x")));
        assert_ne!(
            k(Scoped::TenantUser(&acme, "auth0|42:rate:api")),
            k(Scoped::TenantUser(&acme, "auth0|42"))
        );
    }
}
