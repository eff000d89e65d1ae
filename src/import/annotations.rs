//! What each ingress-nginx annotation of a main Ingress becomes: a `Plan`
//! of route keys, each annotation reported once. The families with a file
//! of their own (limits, CORS, retries, timeouts, `proxy-ssl-*`, headers,
//! snippets, buffering) are called from `plan`; the annotations that stand
//! alone (redirects, `backend-protocol`, body size, address ranges,
//! rewrites) are read here, and so is what withholds an Ingress whose
//! access rules do not carry over. `KNOWN` lists every annotation mapped;
//! `ALIASES` the canonical names ingress-nginx reads an older name for.

use std::collections::BTreeMap;

use super::backend::Protocol;
use super::draft::Draft;
use super::emit::Key;
use super::manifests::Object;
pub use super::manifests::{annotation as get, annotations as of};
use super::out::{Balance, EditKey, Redirect, RouteKey, Side};
use super::plan::Plan;
use super::units::{cidrs, go_bool, nginx_size};
use super::Verdict;
use super::{
    affinity, auth, cors, headers, limits, nginx, notes, proxy_ssl, retries, servers, streaming,
    timeouts,
};

/// Every annotation the import maps or approximates (without the prefix);
/// any other is reported `not supported`. docs/migrating-from-ingress-nginx.md
/// has a row for each (a test holds them together).
pub const KNOWN: &[&str] = &[
    "affinity",
    "affinity-canary-behavior",
    "affinity-mode",
    "allowlist-source-range",
    "app-root",
    "auth-always-set-cookie",
    "auth-cache-duration",
    "auth-cache-key",
    "auth-keepalive",
    "auth-keepalive-requests",
    "auth-keepalive-share-vars",
    "auth-keepalive-timeout",
    "auth-method",
    "auth-realm",
    "auth-request-redirect",
    "auth-response-headers",
    "auth-secret",
    "auth-secret-type",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-snippet",
    "auth-tls-error-page",
    "auth-tls-match-cn",
    "auth-tls-pass-certificate-to-upstream",
    "auth-tls-secret",
    "auth-tls-verify-client",
    "auth-tls-verify-depth",
    "auth-type",
    "auth-url",
    "backend-protocol",
    "canary",
    "canary-by-cookie",
    "canary-by-header",
    "canary-by-header-pattern",
    "canary-by-header-value",
    "canary-weight",
    "canary-weight-total",
    "client-body-buffer-size",
    "configuration-snippet",
    "connection-proxy-header",
    "cors-allow-credentials",
    "cors-allow-headers",
    "cors-allow-methods",
    "cors-allow-origin",
    "cors-expose-headers",
    "cors-max-age",
    "custom-headers",
    "custom-http-errors",
    "default-backend",
    "denylist-source-range",
    "enable-access-log",
    "enable-cors",
    "enable-global-auth",
    "enable-modsecurity",
    "enable-opentelemetry",
    "enable-owasp-core-rules",
    "enable-rewrite-log",
    "force-ssl-redirect",
    "from-to-www-redirect",
    "http2-push-preload",
    "limit-allowlist",
    "limit-burst-multiplier",
    "limit-connections",
    "limit-rpm",
    "limit-rps",
    "limit-whitelist",
    "load-balance",
    "mirror-host",
    "mirror-request-body",
    "mirror-target",
    "modsecurity-snippet",
    "modsecurity-transaction-id",
    "opentelemetry-trust-incoming-span",
    "permanent-redirect",
    "permanent-redirect-code",
    "preserve-trailing-slash",
    "proxy-body-size",
    "proxy-buffer-size",
    "proxy-buffering",
    "proxy-buffers-number",
    "proxy-busy-buffers-size",
    "proxy-connect-timeout",
    "proxy-cookie-domain",
    "proxy-cookie-path",
    "proxy-http-version",
    "proxy-max-temp-file-size",
    "proxy-next-upstream",
    "proxy-next-upstream-timeout",
    "proxy-next-upstream-tries",
    "proxy-read-timeout",
    "proxy-redirect-from",
    "proxy-redirect-to",
    "proxy-request-buffering",
    "proxy-send-timeout",
    "proxy-ssl-ciphers",
    "proxy-ssl-name",
    "proxy-ssl-protocols",
    "proxy-ssl-secret",
    "proxy-ssl-server-name",
    "proxy-ssl-verify",
    "proxy-ssl-verify-depth",
    "rewrite-target",
    "satisfy",
    "server-alias",
    "server-snippet",
    "service-upstream",
    "session-cookie-change-on-failure",
    "session-cookie-conditional-samesite-none",
    "session-cookie-domain",
    "session-cookie-expires",
    "session-cookie-max-age",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-samesite",
    "session-cookie-secure",
    "ssl-ciphers",
    "ssl-passthrough",
    "ssl-prefer-server-ciphers",
    "ssl-redirect",
    "temporal-redirect",
    "temporal-redirect-code",
    "upstream-hash-by",
    "upstream-hash-by-subset",
    "upstream-hash-by-subset-size",
    "upstream-vhost",
    "use-regex",
    "whitelist-source-range",
    "x-forwarded-prefix",
];

/// Each canonical name and the alias ingress-nginx still reads for it.
/// Its parser reads the alias only when the canonical annotation is
/// absent or empty (`checkAnnotation` in `annotations/parser`), so one of
/// the two is read and the other is not.
pub const ALIASES: &[(&str, &str)] = &[
    ("allowlist-source-range", "whitelist-source-range"),
    ("limit-allowlist", "limit-whitelist"),
];

/// `backend-protocol`, or HTTP.
pub fn protocol_of(draft: &Draft<'_>, ing: &Object) -> Protocol {
    match get(ing, &draft.options.annotation_prefix, "backend-protocol").as_deref() {
        Some("HTTPS") => Protocol::Https,
        Some("GRPC") => Protocol::Grpc,
        Some("GRPCS") => Protocol::Grpcs,
        _ => Protocol::Http,
    }
}

/// Which of `keys` the Ingress's annotations give, in `keys`' order.
pub fn present<'k>(keys: &[&'k str], ann: &BTreeMap<String, String>) -> Vec<&'k str> {
    keys.iter()
        .copied()
        .filter(|k| ann.contains_key(*k))
        .collect()
}

/// Reads every annotation of a main Ingress once, reporting each.
pub fn plan(draft: &mut Draft<'_>, ing: &Object) -> Plan {
    let mut ann = of(ing, &draft.options.annotation_prefix);
    let mut plan = Plan::default();
    let mut lines: Vec<(String, Verdict)> = Vec::new();
    unread_aliases(&mut ann, &draft.options.annotation_prefix, &mut lines);
    if !draft.globals.snippets {
        snippets_ignored(&mut ann, &mut lines);
    }
    limits::read(draft, ing, &ann, &mut plan, &mut lines);
    cors::read(&ann, &mut plan, &mut lines);
    retries::read(draft, &ann, &mut plan, &mut lines);
    affinity::read(draft, ing, &ann, &mut plan, &mut lines);
    timeouts::read(draft, &ann, &mut plan, &mut lines);
    let protocol = protocol_of(draft, ing);
    proxy_ssl::read(draft, &ing.namespace, protocol, &ann, &mut plan, &mut lines);
    super::client_tls::read(draft, ing, &ann, &mut plan, &mut lines);
    super::mirror::read(draft, ing, &ann, &mut plan, &mut lines);
    auth::read(draft, ing, &ann, &mut plan, &mut lines);
    for (key, value) in &ann {
        if lines.iter().any(|(k, _)| k == key) {
            continue;
        }
        let verdict = single(draft, ing, key, value, &mut plan);
        lines.push((key.clone(), verdict));
    }
    if plan.keys.max_body.is_none() {
        plan.keys.max_body = draft.globals.body_size.clone();
    }
    withhold(&lines, &mut plan);
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let prefix = draft.options.annotation_prefix.clone();
    for (key, verdict) in lines {
        draft.line(&ing.id(), &format!("{prefix}/{key}"), verdict);
    }
    let method = plan.keys.auth.clone();
    for (item, verdict) in super::fairgate::read(ing, &mut plan, draft.options) {
        draft.line(&ing.id(), &item, verdict);
    }
    if plan.method.is_some() && plan.keys.auth != method {
        // fairgate.dev/auth would replace the Ingress's own authentication.
        plan.withheld.get_or_insert_with(|| {
            "fairgate.dev/auth and ingress-nginx's authentication both say how its routes authenticate".into()
        });
    }
    plan
}

/// Snippet annotations, which ingress-nginx (since 1.9) ignores unless its
/// ConfigMap sets `allow-snippet-annotations: "true"`: out of `ann`, each
/// with a line saying so. A snippet inert before the move stays inert.
fn snippets_ignored(ann: &mut BTreeMap<String, String>, lines: &mut Vec<(String, Verdict)>) {
    let snippets: Vec<String> = ann
        .keys()
        .filter(|k| k.ends_with("-snippet"))
        .cloned()
        .collect();
    for key in snippets {
        ann.remove(&key);
        let why =
            "ignored, as ingress-nginx ignores snippet annotations unless its ConfigMap sets \
                   allow-snippet-annotations: \"true\" (its default since 1.9)";
        lines.push((key, Verdict::Approximated(why.into())));
    }
}

/// Of a canonical name and its alias both given, the one ingress-nginx
/// does not read: out of `ann`, with a line saying so.
fn unread_aliases(
    ann: &mut BTreeMap<String, String>,
    prefix: &str,
    lines: &mut Vec<(String, Verdict)>,
) {
    for (canonical, alias) in ALIASES {
        let (Some(value), Some(_)) = (ann.get(*canonical), ann.get(*alias)) else {
            continue;
        };
        let why = match value.is_empty() {
            false => format!(
                "not read: {prefix}/{canonical} is given, and ingress-nginx reads its alias only when it is not"
            ),
            true => format!("empty, so not read: ingress-nginx reads {prefix}/{alias} instead"),
        };
        let unread = if value.is_empty() { canonical } else { alias };
        ann.remove(*unread);
        lines.push((unread.to_string(), Verdict::Mapped(why)));
    }
}

/// Access rules that did not carry over (authentication, a source range
/// that did not parse, a snippet not fully translated) and a backend
/// protocol fairgate does not speak withhold the Ingress: serving its paths
/// without them would open what was closed, or break it.
fn withhold(lines: &[(String, Verdict)], plan: &mut Plan) {
    // A snippet not fully translated may hold an access rule in any form
    // (`if (...) { return 403; }`, `limit_except`, `deny`): withheld too.
    // A WAF's rules are access rules; a backend that ends TLS itself
    // would be broken behind a gateway that ends it first.
    let access = |key: &str| {
        key.starts_with("auth-")
            || key.ends_with("source-range")
            || key.ends_with("snippet")
            || matches!(
                key,
                "enable-modsecurity" | "enable-owasp-core-rules" | "ssl-passthrough"
            )
    };
    let lost: Vec<&str> = lines
        .iter()
        .filter(|(k, v)| {
            matches!(v, Verdict::Unsupported(_))
                && (access(k) || k == "backend-protocol" || proxy_ssl::KEYS.contains(&k.as_str()))
        })
        .map(|(k, _)| k.as_str())
        .collect();
    if !lost.is_empty() {
        plan.withheld = Some(format!(
            "{} did not carry over; its paths served without them would be open or broken",
            lost.join(", ")
        ));
    }
}

/// Annotations that stand alone.
fn single(draft: &mut Draft<'_>, ing: &Object, key: &str, value: &str, plan: &mut Plan) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    match key {
        "use-regex" if go_bool(value) => mapped(
            "paths as path_regex: case-insensitive, matching from the start as nginx does; \
             every other path of its hosts too, whichever Ingress it comes from",
        ),
        "use-regex" => mapped("off"),
        "rewrite-target" => {
            if value.contains(['{', '}']) {
                return Verdict::Unsupported("a { or } in the target".into());
            }
            plan.rewrite_target = Some(value.to_string());
            mapped("rewrite.path, $N as the path's numbered groups; the paths become regular expressions as in ingress-nginx, \
                    and every other path of their hosts too")
        }
        k if servers::KEYS.contains(&k) => servers::verdict(draft, ing, k, value, plan),
        "ssl-passthrough" if go_bool(value) => super::passthrough::verdict(draft, ing, plan),
        "app-root" if value.starts_with('/') => {
            plan.keys.app_root = Some(value.to_string());
            mapped("app_root: / answers 302 to it")
        }
        "ssl-redirect" => {
            plan.ssl_redirect = Some(value == "true");
            mapped("https_redirect on hosts with a TLS section")
        }
        "force-ssl-redirect" if value == "true" && draft.certs.is_empty() && !passes_through(draft, ing) => Verdict::Unsupported(
            "no Ingress has a TLS section, and fairgate redirects only when it has a TLS listener; \
             behind a load balancer that ends TLS, redirect there"
                .into(),
        ),
        "force-ssl-redirect" => {
            plan.force_ssl_redirect = value == "true";
            mapped("https_redirect")
        }
        "permanent-redirect" | "temporal-redirect" => redirect(ing, draft, key, value, plan),
        "permanent-redirect-code" | "temporal-redirect-code" => mapped("redirect.code"),
        "proxy-body-size" => match nginx_size(value) {
            Some(Some(size)) => {
                plan.keys.max_body = Some(size);
                mapped("max_body; bigger bodies get 413")
            }
            Some(None) => {
                plan.keys.max_body = Some("1TiB".into());
                mapped("0 is no limit: max_body 1TiB")
            }
            None => Verdict::Unsupported(format!("{value:?} is not an nginx size")),
        },
        "allowlist-source-range" | "whitelist-source-range" | "denylist-source-range" => {
            source_range(key, value, plan)
        }
        "backend-protocol" => backend_protocol(draft, ing, value, plan),
        "upstream-vhost" => {
            plan.vhost = Some(value.to_string());
            mapped("rewrite.host")
        }
        "x-forwarded-prefix" if value.contains(['{', '}']) => Verdict::Unsupported("a { or } in the value".into()),
        "x-forwarded-prefix" => headers::edit(plan, Side::Request, EditKey::Set, "X-Forwarded-Prefix", value)
            .map_or_else(|why| Verdict::Unsupported(why.to_string()), |_| mapped("request_headers.set X-Forwarded-Prefix")),
        "custom-headers" => headers::custom_headers(draft, ing, value, plan),
        "configuration-snippet" => nginx::snippet(value, plan),
        "server-snippet" => nginx::server_snippet(value, plan),
        "service-upstream" => mapped("fairgate always forwards to the Service's address"),
        k if streaming::KEYS.contains(&k) => streaming::verdict(k, value),
        k if notes::KEYS.contains(&k) => {
            let waf = get(ing, &draft.options.annotation_prefix, "enable-modsecurity");
            notes::verdict(k, value, waf.is_some_and(|v| go_bool(&v)))
        }
        k if k.starts_with("canary") => mapped("no effect without canary: \"true\", as in ingress-nginx"),
        "load-balance" | "upstream-hash-by" if draft.options.cluster => balancing(key, value, plan),
        other => unsupported(other, value),
    }
}

/// `allowlist-source-range` (or its alias) and `denylist-source-range`.
fn source_range(key: &str, value: &str, plan: &mut Plan) -> Verdict {
    match cidrs(value) {
        Ok(list) => {
            let target = if key == "denylist-source-range" {
                plan.keys.deny_cidrs = Some(list);
                RouteKey::DenyCidrs
            } else {
                plan.keys.allow_cidrs = Some(list);
                RouteKey::AllowCidrs
            };
            Verdict::Mapped(format!("{}; others get 403", target.as_str()))
        }
        Err(why) => Verdict::Unsupported(why.to_string()),
    }
}

/// `backend-protocol`, with the verification `proxy-ssl-*` gave.
fn backend_protocol(draft: &Draft<'_>, ing: &Object, value: &str, plan: &mut Plan) -> Verdict {
    if !matches!(value, "HTTP" | "HTTPS" | "GRPC" | "GRPCS") {
        return Verdict::Unsupported(format!("{value} backends"));
    }
    plan.protocol = protocol_of(draft, ing);
    let why = match (plan.protocol, plan.verify.on) {
        (Protocol::Http, _) => "protocol http1",
        (Protocol::Https, false) => {
            "tls: true, tls_verify: false, as ingress-nginx does without proxy-ssl-verify"
        }
        (Protocol::Https, true) => "tls: true, tls_verify: true as proxy-ssl-verify says",
        (Protocol::Grpc, _) => "protocol: h2c",
        (Protocol::Grpcs, false) => "protocol: h2, tls: true, tls_verify: false",
        (Protocol::Grpcs, true) => {
            "protocol: h2, tls: true, tls_verify: true as proxy-ssl-verify says"
        }
    };
    Verdict::Mapped(why.into())
}

/// `load-balance` and `upstream-hash-by` in the cluster, where a pool's
/// targets are the Service's endpoints: the pools' `balance`. A hash
/// (read after `load-balance`, in name order) wins, as in ingress-nginx.
fn balancing(key: &str, value: &str, plan: &mut Plan) -> Verdict {
    let value = value.trim();
    let (balance, verdict) = match (key, value) {
        ("load-balance", "round_robin") => {
            (None, Verdict::Mapped("round robin, the default".into()))
        }
        ("load-balance", "ewma" | "least_conn") => (
            Some(Balance::LeastRequests),
            Verdict::Approximated(
                "balance: least_requests: of two endpoints drawn at random, the one with fewer \
                 requests in flight from this gateway (peak EWMA is not built)"
                    .into(),
            ),
        ),
        ("upstream-hash-by", v) => match hash_key(v) {
            Some(balance) => {
                let why = "balance: the same key reaches the same endpoint while it is ready; one \
                           leaving moves only its own keys (rendezvous, not nginx's ring: a move \
                           after the switch reshuffles keys once)";
                (Some(balance), Verdict::Mapped(why.into()))
            }
            None => {
                let why =
                    "only one of $http_NAME, $cookie_NAME, $remote_addr, $binary_remote_addr \
                           or $request_uri: requests take the endpoints in turn";
                return Verdict::Unsupported(why.into());
            }
        },
        (_, v) => return Verdict::Unsupported(format!("{v:?}: round_robin, ewma or least_conn")),
    };
    if key == "upstream-hash-by" || plan.balance.is_none() {
        plan.balance = balance;
    }
    verdict
}

/// The key of `upstream-hash-by` when it is one nginx variable fairgate
/// hashes by.
fn hash_key(value: &str) -> Option<Balance> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    match value {
        "$remote_addr" | "$binary_remote_addr" => Some(Balance::ClientIp),
        "$request_uri" => Some(Balance::Uri),
        v => match (v.strip_prefix("$http_"), v.strip_prefix("$cookie_")) {
            (Some(h), _) if name_ok(h) => {
                Some(Balance::Header(h.replace('_', "-").to_ascii_lowercase()))
            }
            (_, Some(c)) if name_ok(c) => Some(Balance::Cookie(c.to_string())),
            _ => None,
        },
    }
}

/// Whether the Ingress asks for its TLS to be passed through (then the
/// gateway has a TLS listener for its hosts).
fn passes_through(draft: &Draft<'_>, ing: &Object) -> bool {
    get(ing, &draft.options.annotation_prefix, "ssl-passthrough").is_some_and(|v| go_bool(&v))
}

/// Why an annotation without a mapping has none (or why it needs none).
fn unsupported(key: &str, value: &str) -> Verdict {
    match key {
        "enable-modsecurity" | "enable-owasp-core-rules" | "ssl-passthrough" if !go_bool(value) => {
            Verdict::Mapped("off: nothing to do".into())
        }
        // Withheld (`withhold`): an access rule.
        "enable-modsecurity" | "enable-owasp-core-rules" => Verdict::Unsupported(
            "fairgate has no web application firewall: served without it, its paths would lose \
             the rules that guarded them"
                .into(),
        ),
        "enable-access-log" | "enable-rewrite-log" => Verdict::Approximated(
            "fairgate's access log is one per process (the log level says what it writes); \
             there is no switch per Ingress"
                .into(),
        ),
        "load-balance" | "upstream-hash-by" => Verdict::Unsupported(
            "a pool's one target is the Service's address, which kube-proxy balances; \
             the choice of endpoint by algorithm, key or cookie is lost"
                .into(),
        ),
        _ => Verdict::Unsupported("no fairgate equivalent".into()),
    }
}

fn redirect(ing: &Object, draft: &Draft<'_>, key: &str, url: &str, plan: &mut Plan) -> Verdict {
    let permanent = key == "permanent-redirect";
    let code_key = format!("{key}-code");
    let code = get(ing, &draft.options.annotation_prefix, &code_key)
        .map(|c| c.parse::<u64>().unwrap_or(0))
        .unwrap_or(if permanent { 301 } else { 302 });
    if !matches!(code, 301 | 302 | 307 | 308) {
        return Verdict::Unsupported(format!(
            "code {code}: fairgate redirects with 301, 302, 307 or 308"
        ));
    }
    if url.contains(['{', '}']) {
        return Verdict::Unsupported("a { or } in the URL".into());
    }
    plan.keys.redirect = Some(Redirect {
        to: url.to_string(),
        code,
    });
    Verdict::Mapped(format!(
        "redirect {code} to the URL as given (the path is not appended, as in ingress-nginx)"
    ))
}
