//! Reads `upstreams`: pools of targets and their timeouts.

use super::*;

pub(super) fn upstreams(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    base: &Path,
) -> BTreeMap<String, Upstream> {
    let mut out = BTreeMap::new();
    let Some(at) = at else { return out };
    for (name, at) in r.named(&at) {
        let Some(f) = r.mapping(&at, schema::UPSTREAM) else {
            continue;
        };
        let mut targets = Vec::new();
        match f.get("targets") {
            Some(t) => {
                for (i, node) in r.sequence(&t).into_iter().enumerate() {
                    let item = t.item(i, node);
                    let Some(text) = r.string(&item) else {
                        continue;
                    };
                    if target_ok(&text) {
                        targets.push(text);
                    } else {
                        r.error_value(&item, "upstreams.target_invalid", "expected HOST:PORT");
                    }
                }
                if t.node.as_sequence().is_some_and(|s| s.is_empty()) {
                    r.error(&t, "upstreams.target_invalid", "needs at least one target");
                }
            }
            None => missing(r, &at, "targets"),
        }
        let flag = |r: &mut Reader<'_>, key: &str, default: bool| {
            f.get(key).and_then(|at| r.bool(&at)).unwrap_or(default)
        };
        let tls = flag(r, "tls", false);
        let tls_verify = flag(r, "tls_verify", true);
        let protocol = protocol(r, &f, tls);
        let ca_file = ca(r, &f, tls, base);
        let client_cert = client_cert(r, &f, tls, base);
        let dur = |r: &mut Reader<'_>, key: &str, default: u64| {
            f.get(key)
                .and_then(|at| r.positive_duration(&at))
                .unwrap_or(Duration::from_millis(default))
        };
        out.insert(
            name.to_string(),
            Upstream {
                targets,
                tls,
                sni: f.get("sni").and_then(|at| r.string(&at)),
                tls_verify,
                ca_file,
                client_cert,
                protocol,
                passive_health: f.get("passive_health").and_then(|p| passive_health(r, &p)),
                resolve_every: dur(r, "resolve_every", 5_000),
                balance: f
                    .get("balance")
                    .map_or(Balance::RoundRobin, |b| balance(r, &b)),
                affinity: f.get("affinity").and_then(|a| affinity(r, &a)),
                resolver: f
                    .get("resolver")
                    .and_then(|a| socket_addr(r, &a, "upstreams.resolver_invalid")),
                connect_timeout: dur(r, "connect_timeout", 1_000),
                read_timeout: dur(r, "read_timeout", 60_000),
                health_interval: dur(r, "health_check_interval", 5_000),
                health_check: flag(r, "health_check", true),
                fair_share: f
                    .get("fair_share")
                    .and_then(|a| super::fair_share::fair_share(r, &a)),
                place: at.place(),
            },
        );
    }
    out
}

/// `balance: round_robin | least_requests | hash_tenant | hash_client_ip |
/// hash_uri | {hash_header: NAME} | {hash_cookie: NAME}`.
fn balance(r: &mut Reader<'_>, at: &At<'_>) -> Balance {
    const HELP: &str = "must be round_robin, least_requests, hash_tenant, hash_client_ip, \
                        hash_uri, {hash_header: NAME} or {hash_cookie: NAME}";
    if let Some(m) = at.node.as_mapping() {
        let key = match m.iter().next() {
            Some((k, v)) if m.len() == 1 => v.as_scalar().and_then(|v| {
                let v = v.as_str();
                match k.as_str() {
                    "hash_header" => HeaderName::from_bytes(v.as_bytes())
                        .ok()
                        .map(HashKey::Header),
                    "hash_cookie" if cookie_name(v) => Some(HashKey::Cookie(v.to_string())),
                    _ => None,
                }
            }),
            _ => None,
        };
        return match key {
            Some(key) => Balance::Hash(key),
            None => {
                r.error(at, "upstreams.balance_invalid", HELP);
                Balance::RoundRobin
            }
        };
    }
    match r.string(at).as_deref() {
        Some("round_robin") => Balance::RoundRobin,
        Some("least_requests") => Balance::LeastRequests,
        Some("hash_tenant") => Balance::Hash(HashKey::Tenant),
        Some("hash_client_ip") => Balance::Hash(HashKey::ClientIp),
        Some("hash_uri") => Balance::Hash(HashKey::Uri),
        Some(_) => {
            r.error_value(at, "upstreams.balance_invalid", HELP);
            Balance::RoundRobin
        }
        None => Balance::RoundRobin,
    }
}

/// `affinity: {cookie: NAME, path, domain, max_age, same_site, secure,
/// change_on_failure}`.
fn affinity(r: &mut Reader<'_>, at: &At<'_>) -> Option<Affinity> {
    let f = r.mapping(at, schema::AFFINITY)?;
    let text = |r: &mut Reader<'_>, key: &str| f.get(key).and_then(|at| r.string(&at));
    let cookie = match f.get("cookie") {
        Some(c) => {
            let name = r.string(&c)?;
            if !cookie_name(&name) {
                r.error_value(
                    &c,
                    "upstreams.affinity_invalid",
                    "a cookie name has no separators or spaces",
                );
            }
            name
        }
        None => {
            missing(r, at, "cookie");
            return None;
        }
    };
    let attribute_ok =
        |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    let path = text(r, "path").unwrap_or_else(|| "/".into());
    if !path.starts_with('/') || !attribute_ok(&path) {
        let at = f.get("path").unwrap_or(at.clone());
        let why = "a cookie path starts with / and has no spaces or ;";
        r.error_value(&at, "upstreams.affinity_invalid", why);
    }
    let domain = text(r, "domain");
    if domain.as_deref().is_some_and(|d| !attribute_ok(d)) {
        let at = f.get("domain").unwrap_or(at.clone());
        let why = "a cookie domain is a host name, without spaces or ;";
        r.error_value(&at, "upstreams.affinity_invalid", why);
    }
    let max_age = f.get("max_age").and_then(|at| {
        let age = r.positive_duration(&at)?;
        if age.subsec_nanos() != 0 {
            r.error_value(
                &at,
                "upstreams.affinity_invalid",
                "Max-Age is whole seconds",
            );
        }
        Some(age)
    });
    let same_site = f
        .get("same_site")
        .and_then(|at| match r.string(&at).as_deref() {
            Some("lax") => Some(SameSite::Lax),
            Some("strict") => Some(SameSite::Strict),
            Some("none") => Some(SameSite::None),
            _ => {
                r.error_value(
                    &at,
                    "upstreams.affinity_invalid",
                    "same_site is lax, strict or none",
                );
                None
            }
        });
    let flag =
        |r: &mut Reader<'_>, key: &str| f.get(key).and_then(|at| r.bool(&at)).unwrap_or(false);
    Some(Affinity {
        cookie,
        path,
        domain,
        max_age,
        same_site,
        secure: flag(r, "secure") || same_site == Some(SameSite::None),
        change_on_failure: flag(r, "change_on_failure"),
    })
}

fn passive_health(r: &mut Reader<'_>, at: &At<'_>) -> Option<PassiveHealth> {
    let f = r.mapping(at, schema::PASSIVE_HEALTH)?;
    let failures = match f.get("failures") {
        Some(n) => r
            .count(&n, "upstreams.passive_health_invalid")?
            .get()
            .min(1000) as u32,
        None => 3,
    };
    let cooldown = match f.get("cooldown") {
        Some(d) => r.positive_duration(&d)?,
        None => Duration::from_secs(10),
    };
    Some(PassiveHealth { failures, cooldown })
}

/// `protocol: http1 | h2 | h2c`; h2 is negotiated by ALPN, so it needs TLS,
/// and h2c is the clear-text form, so it cannot have it.
fn protocol(r: &mut Reader<'_>, f: &yaml::Fields<'_>, tls: bool) -> UpstreamProtocol {
    let Some(at) = f.get("protocol") else {
        return UpstreamProtocol::Http1;
    };
    let (protocol, conflict) = match r.string(&at).as_deref() {
        Some("http1") => (UpstreamProtocol::Http1, None),
        Some("h2") => (
            UpstreamProtocol::H2,
            (!tls).then_some("h2 needs tls: true (use h2c)"),
        ),
        Some("h2c") => (
            UpstreamProtocol::H2c,
            tls.then_some("h2c is HTTP/2 without TLS (use h2)"),
        ),
        Some(_) => {
            r.error_value(
                &at,
                "upstreams.protocol_invalid",
                "must be one of http1, h2, h2c",
            );
            return UpstreamProtocol::Http1;
        }
        None => return UpstreamProtocol::Http1,
    };
    if let Some(message) = conflict {
        r.error_value(&at, "upstreams.protocol_invalid", message);
    }
    protocol
}

pub(super) fn target_ok(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

/// `client_cert_file` and `client_key_file` (or `_pem`, as the controller
/// hands over a Secret's `tls.crt` and `tls.key`): both or neither, on a
/// TLS pool. The builder checks they are a pair.
fn client_cert(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    tls: bool,
    base: &Path,
) -> Option<Located<(PemSource, PemSource)>> {
    let given = [
        "client_cert_file",
        "client_cert_pem",
        "client_key_file",
        "client_key_pem",
    ];
    let at = given.iter().find_map(|k| f.get(k))?;
    if !tls {
        r.error(
            &at,
            "upstreams.tls_invalid",
            "a client certificate needs tls: true",
        );
        return None;
    }
    let cert = super::server::pem_source_in(r, f, "client_cert", base, "upstreams.tls_invalid");
    let key = super::server::pem_source_in(r, f, "client_key", base, "upstreams.tls_invalid");
    Some(Located {
        value: (cert?, key?),
        place: at.place(),
    })
}

/// `ca_file` (a path) or `ca_pem` (the PEM itself, as the controller hands
/// over a Secret's `ca.crt`): the roots a TLS pool's targets are checked
/// against.
fn ca(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    tls: bool,
    base: &Path,
) -> Option<Located<PemSource>> {
    let (file, pem) = (f.get("ca_file"), f.get("ca_pem"));
    let at = file.clone().or(pem.clone())?;
    if !tls {
        let key = if file.is_some() { "ca_file" } else { "ca_pem" };
        r.error(
            &at,
            "upstreams.tls_invalid",
            format!("{key} needs tls: true"),
        );
    }
    let value = match (file, pem) {
        (Some(_), Some(p)) => {
            r.error(
                &p,
                "upstreams.tls_invalid",
                "give ca_file or ca_pem, not both",
            );
            return None;
        }
        (Some(_), None) => PemSource::File(file_path(r, f, "ca_file", base)?),
        (None, Some(p)) => PemSource::Pem {
            name: p.path.clone(),
            bytes: r.string(&p)?.into_bytes().into(),
        },
        (None, None) => return None,
    };
    Some(Located {
        value,
        place: at.place_value(),
    })
}
