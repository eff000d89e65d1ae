//! Where a route forwards besides its one pool: the pool named, the
//! weighted split, the canary, and the retries of a failed attempt.

use super::*;

/// `retries: {attempts, retry_on, methods}`; `on` is the old name of
/// `retry_on`, still read, with a warning.
pub(super) fn retries(r: &mut Reader<'_>, at: &At<'_>) -> Option<Retries> {
    let f = retries_mapping(r, at)?;
    let attempts = match f.get("attempts") {
        None => 2,
        Some(a) => match r.u64(&a, "routes.retries_invalid")? {
            n @ 2..=10 => n as u32,
            _ => {
                r.error_value(
                    &a,
                    "routes.retries_invalid",
                    "must be 2 to 10 (the first attempt included)",
                );
                return None;
            }
        },
    };
    let on_at = retry_on(r, &f);
    let on = match &on_at {
        Some(o) => r.strings(o),
        None => vec!["connect_failure".into(), "reset".into()],
    };
    let mut on_status = Vec::new();
    for when in &on {
        match when.as_str() {
            "connect_failure" | "reset" => {}
            "502" | "503" | "504" => on_status.push(when.parse().unwrap_or(502)),
            _ => r.error(
                on_at.as_ref()?,
                "routes.retries_invalid",
                format!("{when}: one of connect_failure, reset, 502, 503, 504"),
            ),
        }
    }
    let methods: Vec<String> = match f.get("methods") {
        Some(m) => r
            .strings(&m)
            .iter()
            .map(|m| m.to_ascii_uppercase())
            .collect(),
        None => ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]
            .map(String::from)
            .to_vec(),
    };
    if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        let m = f.get("methods")?;
        r.error(
            &m,
            "routes.retries_invalid",
            format!("{bad} is not an HTTP method"),
        );
    }
    Some(Retries {
        attempts,
        on_connect_failure: on.iter().any(|o| o == "connect_failure"),
        on_reset: on.iter().any(|o| o == "reset"),
        on_status,
        methods,
    })
}

/// What YAML 1.1 makes of the key `on:` (Helm's `toYaml`, PyYAML, go-yaml v2).
const YAML11_ON: &str = "true";

/// The `retries` mapping. A key `true` is `on:` after a YAML 1.1 tool
/// rewrote the file; it gets its own error, which says so, rather than the
/// unknown-field one.
fn retries_mapping<'a>(r: &mut Reader<'_>, at: &At<'a>) -> Option<yaml::Fields<'a>> {
    let rewritten = at
        .node
        .as_mapping()
        .is_some_and(|m| m.keys().any(|k| k.as_str() == YAML11_ON));
    if !rewritten {
        return r.mapping(at, schema::RETRIES);
    }
    let keys: Vec<&str> = schema::RETRIES.iter().copied().chain([YAML11_ON]).collect();
    let f = r.mapping(at, &keys)?;
    if let Some(t) = f.get(YAML11_ON) {
        r.problems.push(
            t.key_pos,
            "routes.retries_invalid",
            format!(
                "{}: a YAML 1.1 tool (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as \
                 true; name it retry_on:",
                t.path
            ),
        );
    }
    Some(f)
}

/// `retry_on`, or its old name `on` with the warning `routes.retries_on_deprecated`.
fn retry_on<'a>(r: &mut Reader<'_>, f: &yaml::Fields<'a>) -> Option<At<'a>> {
    let old = f.get("on");
    match (f.get("retry_on"), old) {
        (Some(new), Some(old)) => {
            r.error(
                &old,
                "routes.retries_invalid",
                "retry_on and on are the same key; keep retry_on",
            );
            Some(new)
        }
        (Some(new), None) => Some(new),
        (None, Some(old)) => {
            r.problems.warn(
                old.key_pos,
                "routes.retries_on_deprecated",
                format!(
                    "{}: YAML 1.1 tools (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as \
                     true:, which fairgate refuses; name it retry_on:",
                    old.path
                ),
            );
            Some(old)
        }
        (None, None) => None,
    }
}

fn pool_name(r: &mut Reader<'_>, at: &At<'_>, config: &Config) -> Option<String> {
    let name = r.string(at)?;
    if !config.upstreams.contains_key(&name) {
        r.error_value(at, "routes.upstream_unknown", "no upstream with this name");
    }
    Some(name)
}

/// `upstreams: [{name, weight}]`.
pub(super) fn split(r: &mut Reader<'_>, at: &At<'_>, config: &Config) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for (i, node) in r.sequence(at).into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(f) = r.mapping(&item, schema::SPLIT) else {
            continue;
        };
        let Some(name) = f.get("name").and_then(|n| pool_name(r, &n, config)) else {
            missing(r, &item, "name");
            continue;
        };
        let weight = match f.get("weight") {
            None => 1,
            Some(w) => match r.u64(&w, "routes.split_invalid") {
                Some(n @ 0..=1_000_000) => n as u32,
                Some(_) => {
                    r.error_value(&w, "routes.split_invalid", "must be 0 to 1000000");
                    continue;
                }
                None => continue,
            },
        };
        out.push((name, weight));
    }
    if !out.is_empty() && out.iter().all(|(_, w)| *w == 0) {
        r.error(
            at,
            "routes.split_invalid",
            "at least one weight must be above 0",
        );
    }
    out
}

pub(super) fn canary(r: &mut Reader<'_>, at: &At<'_>, config: &Config) -> Option<Canary> {
    let f = r.mapping(at, schema::CANARY)?;
    let Some(upstream) = f.get("upstream").and_then(|u| pool_name(r, &u, config)) else {
        missing(r, at, "upstream");
        return None;
    };
    let list =
        |r: &mut Reader<'_>, key: &str| f.get(key).map(|a| r.strings(&a)).unwrap_or_default();
    let percent = match f.get("percent") {
        None => 0,
        Some(p) => match r.u64(&p, "routes.split_invalid") {
            Some(n @ 0..=100) => n as u8,
            Some(_) => {
                r.error_value(&p, "routes.split_invalid", "must be 0 to 100");
                0
            }
            None => 0,
        },
    };
    let header = f.get("header").and_then(|h| {
        let text = r.string(&h)?;
        HeaderName::from_bytes(text.as_bytes())
            .map_err(|_| r.error_value(&h, "config.header_invalid", "not a valid header name"))
            .ok()
    });
    Some(Canary {
        upstream,
        tenants: list(r, "tenants"),
        plans: list(r, "plans"),
        percent,
        header,
        cookie: f.get("cookie").and_then(|c| r.string(&c)),
    })
}

/// `error_pages: {codes: [STATUS...], upstream: NAME, headers: {NAME: VALUE}}`.
pub(super) fn error_pages(r: &mut Reader<'_>, at: &At<'_>, config: &Config) -> Option<ErrorPages> {
    let f = r.mapping(at, schema::ERROR_PAGES)?;
    let Some(upstream) = f.get("upstream").and_then(|u| pool_name(r, &u, config)) else {
        missing(r, at, "upstream");
        return None;
    };
    let mut codes = Vec::new();
    let Some(list) = f.get("codes") else {
        missing(r, at, "codes");
        return None;
    };
    for (i, node) in r.sequence(&list).into_iter().enumerate() {
        let item = list.item(i, node);
        match r.u64(&item, "routes.error_pages_invalid") {
            Some(n @ 400..=599) => codes.push(n as u16),
            Some(_) => r.error_value(
                &item,
                "routes.error_pages_invalid",
                "a status from 400 to 599",
            ),
            None => {}
        }
    }
    let mut headers = Vec::new();
    if let Some(h) = f.get("headers") {
        for (name, item) in r.named(&h) {
            let Some(value) = r.string(&item) else {
                continue;
            };
            let name = http::HeaderName::from_bytes(name.as_bytes());
            match (name, http::HeaderValue::from_str(&value)) {
                (Ok(n), Ok(v)) => headers.push((n, v)),
                _ => r.error(
                    &item,
                    "config.header_invalid",
                    "not a valid header name or value",
                ),
            }
        }
    }
    Some(ErrorPages {
        codes,
        upstream,
        headers,
    })
}

/// `mirror: {upstream: NAME, host: NAME, body: BOOL}`: a pool that speaks
/// plain HTTP.
pub(super) fn mirror(r: &mut Reader<'_>, at: &At<'_>, config: &Config) -> Option<Mirror> {
    const CODE: &str = "routes.mirror_invalid";
    let f = r.mapping(at, schema::MIRROR)?;
    let Some(upstream) = f.get("upstream").and_then(|u| pool_name(r, &u, config)) else {
        missing(r, at, "upstream");
        return None;
    };
    if config.upstreams.get(&upstream).is_some_and(|u| u.tls) {
        r.error(at, CODE, "a mirror pool speaks plain HTTP (tls: false)");
        return None;
    }
    let host = f.get("host").and_then(|h| {
        let text = r.string(&h)?;
        let ok = !text.is_empty()
            && text.len() <= 253
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
        if !ok {
            r.error_value(&h, CODE, "not a host name");
        }
        ok.then_some(text)
    });
    Some(Mirror {
        upstream,
        host,
        body: f.get("body").and_then(|b| r.bool(&b)).unwrap_or(true),
    })
}
