//! ingress-nginx's authentication annotations as one `auth.methods` entry
//! per Ingress, which its routes name: `auth-url` and its companions
//! (`auth-method`, `auth-response-headers`, `auth-signin`, the answer
//! cache, `auth-always-set-cookie`) as an `external` method; `auth-type:
//! basic` with the htpasswd entries of its `auth-secret` as a `basic`
//! one. What does not carry over is `not supported`, which withholds the
//! Ingress (`annotations::withhold`): never served with less protection.

use std::collections::BTreeMap;

use serde_json::Value;

use super::draft::Draft;
use super::manifests::{At, Object};
use super::names::{dns1123_label, dns1123_subdomain, policy_name};
use super::out::{AnswerCache, Auth, AuthMethod, BasicAuth, ExternalAuth, SignIn};
use super::paths::rule_host;
use super::plan::Plan;
use super::tls::secret_field;
use super::units::{comma_list, go_bool};
use super::{Refusal, Verdict};

/// The annotations of external authentication (without the prefix).
pub const EXTERNAL: &[&str] = &[
    "auth-always-set-cookie",
    "auth-cache-duration",
    "auth-cache-key",
    "auth-keepalive",
    "auth-keepalive-requests",
    "auth-keepalive-share-vars",
    "auth-keepalive-timeout",
    "auth-method",
    "auth-request-redirect",
    "auth-response-headers",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-snippet",
    "auth-url",
];

/// The annotations of basic authentication (without the prefix).
pub const BASIC: &[&str] = &["auth-realm", "auth-secret", "auth-secret-type", "auth-type"];

/// The header oauth2-proxy names the user in, which becomes the identity's
/// user when the Ingress copies it to the upstream.
const USER_HEADER: &str = "X-Auth-Request-User";

type Lines = Vec<(String, Verdict)>;

/// Reads the Ingress's authentication annotations into `plan`; one line each.
pub fn read(
    draft: &Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Lines,
) {
    let name = format!(
        "{}-auth",
        policy_name(&format!("{}_{}", ing.namespace, ing.name))
    );
    let (url, kind) = (ann.get("auth-url"), ann.get("auth-type"));
    let method = match (url, kind) {
        (Some(_), Some(_)) => {
            let why = "auth-url and auth-type together: a fairgate route has one method";
            for key in ["auth-url", "auth-type"] {
                lines.push((key.into(), Verdict::Unsupported(why.into())));
            }
            None
        }
        (Some(url), None) if url.contains("$host") && !every_rule_named(ing) => {
            let why = "$host in the URL of an Ingress with a rule for any host: the service's \
                       address would come from the client's Host";
            lines.push(("auth-url".into(), Verdict::Unsupported(why.into())));
            None
        }
        (Some(url), None) => external(Some(hosts_of(ing)), url, ann, lines)
            .map(|e| AuthMethod::External(Box::new(e))),
        (None, Some(_)) if global_applies(draft, ann) => {
            let why =
                "auth-type with the ConfigMap's global-auth-url: a fairgate route has one method";
            lines.push(("auth-type".into(), Verdict::Unsupported(why.into())));
            None
        }
        (None, Some(kind)) => basic(draft, ing, kind, ann, lines).map(AuthMethod::Basic),
        (None, None) => {
            global_for(draft, ing, ann, lines).map(|e| AuthMethod::External(Box::new(e)))
        }
    };
    // Companions of a method not given have no effect in ingress-nginx.
    for (keys, of) in [(EXTERNAL, "auth-url"), (BASIC, "auth-type")] {
        for key in keys.iter().filter(|k| ann.contains_key(**k)) {
            if !lines.iter().any(|(k, _)| k == key) {
                let why = format!("no effect without {of}, as in ingress-nginx");
                lines.push((key.to_string(), Verdict::Mapped(why)));
            }
        }
    }
    if ann.contains_key("enable-global-auth")
        && !lines.iter().any(|(k, _)| k == "enable-global-auth")
    {
        let why = match ann.get("enable-global-auth").is_some_and(|v| go_bool(v)) {
            true => "no effect: the Ingress's own auth-url replaces global-auth-url, as in ingress-nginx",
            false => "global-auth-url not applied, as in ingress-nginx",
        };
        lines.push(("enable-global-auth".into(), Verdict::Mapped(why.into())));
    }
    if let Some(method) = method {
        plan.keys.auth = Some(Auth::Method(name.clone()));
        plan.method = Some((name, method));
    }
}

/// Whether the ConfigMap's `global-auth-url` applies to an Ingress
/// without its own `auth-url`.
fn global_applies(draft: &Draft<'_>, ann: &BTreeMap<String, String>) -> bool {
    let off = ann.get("enable-global-auth").is_some_and(|v| !go_bool(v));
    draft.globals.global_auth.is_some() && !off
}

/// The ConfigMap's `global-auth-*` method for this Ingress: sign-in
/// redirects back to its own hosts only.
fn global_for(
    draft: &Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    lines: &mut Lines,
) -> Option<ExternalAuth> {
    let template = draft.globals.global_auth.as_ref();
    if let Some(v) = ann.get("enable-global-auth") {
        let verdict = match (go_bool(v), template) {
            (false, _) => "global-auth-url not applied: auth none, as in ingress-nginx",
            (true, Some(_)) => "the ConfigMap's global-auth-url applies",
            (true, None) => "no global-auth-url in the ConfigMap: no effect",
        };
        lines.push(("enable-global-auth".into(), Verdict::Mapped(verdict.into())));
    }
    if !global_applies(draft, ann) {
        return None;
    }
    let mut e = template?.clone();
    if let Some(s) = e.signin.as_mut() {
        s.hosts = hosts_of(ing);
    }
    e.signin = e.signin.filter(|s| !s.hosts.is_empty());
    Some(e)
}

/// The ConfigMap's `global-auth-*` keys (`no-auth-locations` too) as the
/// external method every Ingress without its own gets, and their report
/// lines; None when there is no `global-auth-url` or it does not carry over.
pub fn global(data: &BTreeMap<String, String>) -> (Option<ExternalAuth>, Lines) {
    let mut ann: BTreeMap<String, String> = data
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("global-")?.to_string(), v.clone())))
        .filter(|(k, _)| EXTERNAL.contains(&k.as_str()))
        .collect();
    let mut lines = Vec::new();
    let method = match ann.remove("auth-url") {
        Some(url) => external(None, &url, &ann, &mut lines),
        None => None,
    };
    for key in ann.keys() {
        if !lines.iter().any(|(k, _)| k == key) {
            let why = "no effect without global-auth-url, as in ingress-nginx";
            lines.push((key.clone(), Verdict::Mapped(why.into())));
        }
    }
    let mut lines: Lines = lines
        .into_iter()
        .map(|(k, v)| (format!("global-{k}"), v))
        .collect();
    if let Some(v) = data.get("no-auth-locations") {
        let why = format!(
            "the paths {v:?} that ingress-nginx exempted from global-auth-url are authenticated too              (an ACME http-01 challenge through the gateway needs a route of its own)"
        );
        lines.push(("no-auth-locations".into(), Verdict::Approximated(why)));
    }
    let carried = !lines
        .iter()
        .any(|(_, v)| matches!(v, Verdict::Unsupported(_)));
    (method.filter(|_| carried), lines)
}

/// Why an `auth-url` does not carry over, if it does not. `$host`
/// (oauth2-proxy's documented `https://$host/oauth2/auth`) is the route's
/// own exact host; any other variable is not carried over.
fn url_problem(hosts: Option<&[String]>, url: &str) -> Option<String> {
    if url.replace("$host", "").contains('$') {
        return Some(
            "nginx variables other than $host in the URL: fairgate calls one fixed URL".into(),
        );
    }
    let exact = hosts.is_some_and(|h| !h.is_empty() && h.iter().all(|h| !h.contains('*')));
    if url.contains("$host") && !exact {
        return Some(
            "$host in the URL of an Ingress without exact hosts on every rule: the service's \
             address would come from the client's Host"
                .into(),
        );
    }
    if !http_url(&url.replace("$host", "host.invalid")) {
        let shown = crate::redact::urls(url);
        return Some(format!("{shown:?} is not an http:// or https:// URL"));
    }
    None
}

/// `auth-url` and its companions, signing in back to `hosts` (None: each
/// Ingress's own); None (and a `not supported` line) when the URL does
/// not carry over.
fn external(
    hosts: Option<Vec<String>>,
    url: &str,
    ann: &BTreeMap<String, String>,
    lines: &mut Lines,
) -> Option<ExternalAuth> {
    let mut e = ExternalAuth::default();
    let mut say = |key: &str, verdict: Verdict| lines.push((key.to_string(), verdict));
    if let Some(why) = url_problem(hosts.as_deref(), url) {
        say("auth-url", Verdict::Unsupported(why));
        return None;
    }
    e.url = url.to_string();
    let why = "auth.methods external.url; the service gets Cookie and Authorization and the original \
               request's X-Original-URL, X-Original-Method and X-Forwarded-*, never the body; no answer \
               within 1s (timeout) is 503";
    let verdict = match url.starts_with("https://") {
        // nginx's auth subrequest did not verify the service (no
        // proxy_ssl_verify): fairgate does, so a private CA fails closed.
        true => Verdict::Approximated(format!(
            "{why}; the service's certificate is verified against the system's roots, which \
             ingress-nginx did not do: one signed by a private CA gets 503"
        )),
        false => Verdict::Mapped(why.into()),
    };
    say("auth-url", verdict);
    if let Some(m) = ann.get("auth-method") {
        let upper = m.trim().to_ascii_uppercase();
        match crate::config::METHODS.contains(&upper.as_str()) {
            true => {
                say(
                    "auth-method",
                    Verdict::Mapped(format!("external.method {upper}")),
                );
                e.method = Some(upper);
            }
            false => say(
                "auth-method",
                Verdict::Unsupported(format!("{m:?} is not an HTTP method")),
            ),
        }
    }
    if let Some(list) = ann.get("auth-response-headers") {
        let names = comma_list(list);
        match names.iter().find_map(|h| answered_problem(h)) {
            Some(why) => say("auth-response-headers", Verdict::Unsupported(why)),
            None => {
                e.user_header = names
                    .iter()
                    .find(|h| h.eq_ignore_ascii_case(USER_HEADER))
                    .cloned();
                let user = match &e.user_header {
                    Some(h) => format!("; identity.user from {h}"),
                    None => String::new(),
                };
                say("auth-response-headers", Verdict::Mapped(format!(
                    "external.response_headers, copied to the upstream and removed from every client request{user}"
                )));
                e.response_headers = names;
            }
        }
    }
    signin(hosts, ann, &mut e, lines);
    cache(ann, &mut e, lines);
    companions(ann, &mut e, lines);
    Some(e)
}

/// Why a header of `auth-response-headers` cannot be copied from answers.
fn answered_problem(name: &str) -> Option<String> {
    match http::HeaderName::from_bytes(name.as_bytes()) {
        Err(_) => Some(format!("{name:?} is not a header name")),
        Ok(h) if crate::config::FRAMING_HEADERS.contains(&h.as_str()) => Some(format!(
            "{name} frames the request or is written by the gateway; fairgate never takes it from the answer"
        )),
        // In any spelling: `X_Tenant_Id` reaches a CGI upstream as the real one.
        Ok(h) if identity(&h.as_str().replace('_', "-")) => Some(format!(
            "{name} is an identity header, which only the gateway writes; an auth service's answer never sets it"
        )),
        Ok(_) => None,
    }
}

/// Whether `name` (lower case) is one of the gateway's identity headers.
fn identity(name: &str) -> bool {
    let headers = crate::config::IdentityHeaders::default();
    headers.all().iter().any(|h| h.as_str() == name)
}

/// `auth-signin` (and `auth-signin-redirect-param`): a 401 sends a browser
/// there, back to the Ingress's own hosts only.
fn signin(
    hosts: Option<Vec<String>>,
    ann: &BTreeMap<String, String>,
    e: &mut ExternalAuth,
    lines: &mut Lines,
) {
    let Some(url) = ann.get("auth-signin") else {
        return;
    };
    let param = ann
        .get("auth-signin-redirect-param")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "rd".into());
    // ingress-nginx appends `rd=$scheme://$http_host$escaped_request_uri`
    // unless the URL has its own; fairgate always appends the original URL.
    let (base, own) = strip_param(url, &param);
    let verdict = if base.replace("$host", "").contains('$') {
        Verdict::Unsupported("nginx variables other than $host in the URL".into())
    } else if !http_url(&base.replace("$host", "host.invalid")) {
        Verdict::Unsupported(format!(
            "{:?} is not an http:// or https:// URL",
            crate::redact::urls(url)
        ))
    } else {
        let (hosts, on) = match hosts {
            Some(h) => (h.clone(), h.join(", ")),
            None => (Vec::new(), "each Ingress's own hosts".into()),
        };
        if hosts.is_empty() && on.is_empty() {
            Verdict::Approximated(
                "the Ingress names no host, and fairgate redirects to sign in only on listed hosts: \
                 its 401s reach the browser as the service answered them"
                    .into(),
            )
        } else {
            let said = format!(
                "external.signin: a 401 on {on} is a 302 to {base} with the original URL in {param}"
            );
            e.signin = Some(SignIn {
                url: base,
                param: (param != "rd").then(|| param.clone()),
                hosts,
            });
            match own {
                Some(v) => Verdict::Approximated(format!(
                    "{said}: the URL's own {param}={v} is replaced by the original URL as scheme://host/path?query"
                )),
                None => Verdict::Mapped(said),
            }
        }
    };
    lines.push(("auth-signin".into(), verdict));
    if ann.contains_key("auth-signin-redirect-param") {
        let why = format!("external.signin.param {param}");
        lines.push(("auth-signin-redirect-param".into(), Verdict::Mapped(why)));
    }
}

/// `auth-cache-key` and `auth-cache-duration` as the answer cache.
fn cache(ann: &BTreeMap<String, String>, e: &mut ExternalAuth, lines: &mut Lines) {
    let duration = ann.get("auth-cache-duration");
    let Some(key) = ann.get("auth-cache-key") else {
        if duration.is_some() {
            let why = "no effect without auth-cache-key, as in ingress-nginx";
            lines.push(("auth-cache-duration".into(), Verdict::Mapped(why.into())));
        }
        return;
    };
    let key = key.trim();
    let (cookie, header) = match (key.strip_prefix("$cookie_"), key.strip_prefix("$http_")) {
        (Some(c), _) if token(c) => (Some(c.to_string()), None),
        (_, Some(h)) if token(h) => (None, Some(h.replace('_', "-"))),
        _ => {
            // Leaving the cache out is strictly safe: every request asks.
            let why = "not cached: only one $cookie_NAME or $http_NAME variable names a session \
                       to fairgate, so every request asks the service";
            lines.push(("auth-cache-key".into(), Verdict::Approximated(why.into())));
            if duration.is_some() {
                lines.push((
                    "auth-cache-duration".into(),
                    Verdict::Approximated(why.into()),
                ));
            }
            return;
        }
    };
    // ingress-nginx's default.
    let spec = duration.map_or("200 202 401 5m", String::as_str);
    let Some((ttl, refusals)) = cache_ttl(spec) else {
        let why = format!("not cached: {spec:?} names no 2xx status with an nginx time");
        lines.push(("auth-cache-duration".into(), Verdict::Approximated(why)));
        lines.push((
            "auth-cache-key".into(),
            Verdict::Approximated("not cached: no usable auth-cache-duration".into()),
        ));
        return;
    };
    let by = match (&cookie, &header) {
        (Some(c), _) => format!("cookie {c}"),
        (_, h) => format!("header {}", h.clone().unwrap_or_default()),
    };
    let said = format!("external.cache by {by}, ttl {ttl}");
    lines.push(("auth-cache-key".into(), Verdict::Mapped(said.clone())));
    let verdict = match refusals {
        true => Verdict::Approximated(format!(
            "{said}: 2xx answers only; refusals (401, 403) are never cached, so a refused session asks every time"
        )),
        false => Verdict::Mapped(said),
    };
    lines.push(("auth-cache-duration".into(), verdict));
    e.cache = Some(AnswerCache {
        cookie,
        header,
        ttl,
    });
}

/// The ttl of the first entry of `200 202 401 5m, 500 1m` naming a 2xx
/// status, and whether any entry names a refusal or every status.
fn cache_ttl(spec: &str) -> Option<(String, bool)> {
    let mut ttl = None;
    let mut refusals = false;
    for entry in spec.split(',') {
        let words: Vec<&str> = entry.split_whitespace().collect();
        let (time, codes) = words.split_last()?;
        let codes: &[&str] = if codes.is_empty() {
            &["200", "301", "302"]
        } else {
            codes
        };
        refusals |= codes.iter().any(|c| *c == "any" || c.starts_with('4'));
        let success = codes.iter().any(|c| *c == "any" || c.starts_with('2'));
        if success && ttl.is_none() {
            ttl = Some(nginx_time(time)?);
        }
    }
    Some((ttl?, refusals))
}

/// An nginx time of one unit (`30s`, `5m`, `1h`, `2d`, or seconds).
fn nginx_time(text: &str) -> Option<String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok().filter(|n| *n > 0)?;
    let seconds = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return None,
    };
    Some(super::units::duration(seconds))
}

/// The rest: `auth-always-set-cookie`, `auth-request-redirect`,
/// `auth-snippet`, the keepalive settings.
fn companions(ann: &BTreeMap<String, String>, e: &mut ExternalAuth, lines: &mut Lines) {
    for (key, value) in ann.iter().filter(|(k, _)| EXTERNAL.contains(&k.as_str())) {
        let verdict = match key.as_str() {
            "auth-always-set-cookie" if go_bool(value) => {
                e.set_headers = vec!["Set-Cookie".into()];
                Verdict::Mapped(
                    "external.set_headers [Set-Cookie]: a 2xx answer's cookies reach the client"
                        .into(),
                )
            }
            "auth-always-set-cookie" => Verdict::Mapped("off".into()),
            "auth-request-redirect" if value.trim() == "$request_uri" => Verdict::Mapped(
                "X-Auth-Request-Redirect is the request's URI, as fairgate always sends it".into(),
            ),
            "auth-request-redirect" => Verdict::Approximated(format!(
                "fairgate sends X-Auth-Request-Redirect as the request's URI, not {value:?}"
            )),
            "auth-snippet" if value.trim().is_empty() => {
                Verdict::Mapped("empty: nothing to do".into())
            }
            "auth-snippet" => Verdict::Unsupported(
                "nginx configuration of the auth subrequest; never translated".into(),
            ),
            k if k.starts_with("auth-keepalive") => {
                Verdict::Mapped("fairgate pools its connections to the auth service".into())
            }
            _ => continue,
        };
        lines.push((key.clone(), verdict));
    }
}

/// `auth-type: basic` with the htpasswd entries of `auth-secret`.
fn basic(
    draft: &Draft<'_>,
    ing: &Object,
    kind: &str,
    ann: &BTreeMap<String, String>,
    lines: &mut Lines,
) -> Option<BasicAuth> {
    let refuse = |lines: &mut Lines, key: &str, why: String| {
        lines.push((key.to_string(), Verdict::Unsupported(why)));
        None
    };
    match kind {
        "basic" => {}
        "digest" => {
            return refuse(
                lines,
                "auth-type",
                "digest authentication: fairgate checks basic only".into(),
            )
        }
        other => return refuse(lines, "auth-type", format!("{other:?} is not basic")),
    }
    let Some(reference) = ann.get("auth-secret") else {
        return refuse(
            lines,
            "auth-type",
            "no auth-secret: ingress-nginx denies every request".into(),
        );
    };
    let (htpasswd, said) = match secret_entries(draft, ing, reference, ann) {
        Ok(found) => found,
        Err(why) => {
            lines.push((
                "auth-type".into(),
                Verdict::Unsupported("its auth-secret did not carry over".into()),
            ));
            return refuse(lines, "auth-secret", why.to_string());
        }
    };
    let realm = ann.get("auth-realm").cloned();
    if let Some(r) = &realm {
        if r.contains(['"', '\\']) || r.chars().any(char::is_control) {
            lines.push((
                "auth-type".into(),
                Verdict::Unsupported("its auth-realm did not carry over".into()),
            ));
            return refuse(
                lines,
                "auth-realm",
                "quotes, backslashes or control characters in the realm".into(),
            );
        }
        lines.push(("auth-realm".into(), Verdict::Mapped("basic.realm".into())));
    }
    lines.push(("auth-secret".into(), Verdict::Mapped(said)));
    if let Some(t) = ann.get("auth-secret-type") {
        lines.push((
            "auth-secret-type".into(),
            Verdict::Mapped(format!("{t}: read as such")),
        ));
    }
    let why = "auth.methods basic: Authorization: Basic checked against the entries; missing or wrong \
               credentials get 401 with WWW-Authenticate: Basic; the identity's user is the user name";
    lines.push(("auth-type".into(), Verdict::Mapped(why.into())));
    Some(BasicAuth { htpasswd, realm })
}

/// The htpasswd text of `auth-secret` (of the Ingress's namespace), and
/// what the report says of it.
fn secret_entries(
    draft: &Draft<'_>,
    ing: &Object,
    reference: &str,
    ann: &BTreeMap<String, String>,
) -> Result<(String, String), Refusal> {
    let (ns, name) = reference
        .split_once('/')
        .unwrap_or((&ing.namespace, reference));
    if !dns1123_label(ns) || !dns1123_subdomain(name) {
        return Err(Refusal::from(format!(
            "{reference:?} is not NAME or NAMESPACE/NAME, as the API server requires"
        )));
    }
    if ns != ing.namespace {
        return Err(Refusal::from(format!(
            "a Secret of namespace {ns}, not the Ingress's {}: ingress-nginx refuses it by default",
            ing.namespace
        )));
    }
    let id = format!("{ns}/{name}");
    let missing = || format!("Secret {id} is not among the manifests; its users are not known");
    let secret = draft
        .secret(ns, name)
        .ok_or_else(|| Refusal::from(missing()))?;
    let text = match ann
        .get("auth-secret-type")
        .map_or("auth-file", |t| t.as_str())
    {
        "auth-file" => secret_field(secret, "auth")
            .ok_or_else(|| Refusal::from(format!("Secret {id} has no key auth")))?,
        "auth-map" => auth_map(secret),
        other => {
            return Err(Refusal::from(format!(
                "auth-secret-type {other:?} is not auth-file or auth-map"
            )))
        }
    };
    let entries = crate::auth::basic::Htpasswd::parse(&text)
        .map_err(|e| Refusal::from(format!("Secret {id}: {e}")))
        .map(|_| {
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count()
        })?;
    let entries = match entries {
        1 => "1 entry".to_string(),
        n => format!("{n} entries"),
    };
    let said = match draft.options.cluster {
        true => format!("basic.htpasswd: the {entries} of Secret {id}, followed as it changes"),
        false => format!(
            "basic.htpasswd: the {entries} of Secret {id} written into the policy, which now holds \
             their password hashes: keep it as secret as the Secret"
        ),
    };
    Ok((text, said))
}

/// An `auth-map` Secret: each key a user, its value the hash.
fn auth_map(secret: &Object) -> String {
    let mut users: Vec<String> = Vec::new();
    for key in ["data", "stringData"] {
        if let Some(Value::Object(map)) = secret.value.get(key) {
            users.extend(map.keys().cloned());
        }
    }
    users.sort();
    users.dedup();
    users
        .iter()
        .filter_map(|u| Some(format!("{u}:{}\n", secret_field(secret, u)?.trim())))
        .collect()
}

/// Whether every rule of the Ingress names a host.
fn every_rule_named(ing: &Object) -> bool {
    match ing.value.at("/spec/rules") {
        Some(Value::Array(rules)) => rules.iter().all(|r| rule_host(r).is_some()),
        _ => false,
    }
}

/// The hosts of the Ingress's rules, lowercased, in order, once each.
fn hosts_of(ing: &Object) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if let Some(Value::Array(rules)) = ing.value.at("/spec/rules") {
        for host in rules.iter().filter_map(rule_host) {
            if !out.contains(&host) {
                out.push(host);
            }
        }
    }
    out
}

/// `url` without its `param=` query parameter, and that parameter's value.
fn strip_param(url: &str, param: &str) -> (String, Option<String>) {
    let Some((path, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut own = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(
            |pair| match pair.strip_prefix(param).and_then(|r| r.strip_prefix('=')) {
                Some(v) => {
                    own = Some(v.to_string());
                    false
                }
                None => true,
            },
        )
        .collect();
    match kept.is_empty() {
        true => (path.to_string(), own),
        false => (format!("{path}?{}", kept.join("&")), own),
    }
}

/// An absolute `http://` or `https://` URL with a host.
fn http_url(url: &str) -> bool {
    url.parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
}

/// A cookie or header name of `A-Z a-z 0-9 _ -`.
fn token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests;
