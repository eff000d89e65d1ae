//! Reads `routes`: matches, the limits and policies each route names, and
//! the checks that a route's scopes can be computed on it.

use super::*;

pub(super) fn routes(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    config: &Config,
    declared: &Declared,
) -> Vec<Route> {
    let mut out: Vec<Route> = Vec::new();
    let Some(at) = at else {
        // In controller mode the cluster's Ingresses are the routes.
        if config.kubernetes.is_none() {
            r.problems
                .push((1, 1), "config.missing_field", "routes: required");
        }
        return out;
    };
    let mut names = std::collections::HashSet::new();
    for (i, node) in r.sequence(&at).into_iter().enumerate() {
        if let Some(route) = route(r, &at.item(i, node), config, declared) {
            if !names.insert(route.name.clone()) {
                r.error(
                    &at.item(i, node),
                    "routes.name_duplicate",
                    format!("route name \"{}\" is used twice", route.name),
                );
            }
            out.push(route);
        }
    }
    out
}

pub(super) fn route(
    r: &mut Reader<'_>,
    at: &At<'_>,
    config: &Config,
    declared: &Declared,
) -> Option<Route> {
    let f = r.mapping(at, schema::ROUTE)?;
    let name = route_name(r, at, &f)?;
    let (host, path, methods, when) = route_match(r, at, &f);
    let actions = actions(r, &f, &path, config);
    let upstream = route_upstream(r, at, &f, config, &actions)?;
    // A redirect or a direct response answers before authentication: it
    // needs none.
    let (auth, method, identity) = match answers_itself(&f) {
        false => route_auth(r, at, &f, config, declared),
        true => (false, None, None),
    };
    let exempt = f.get("exempt").and_then(|e| r.bool(&e)).unwrap_or(false);
    let flag = |r: &mut Reader<'_>, key: &str, default: bool| {
        f.get(key).and_then(|a| r.bool(&a)).unwrap_or(default)
    };
    let client_ip_exempt = flag(r, "client_ip_exempt", false);
    let forward_authorization = flag(r, "forward_authorization", true);
    let fallback = flag(r, "fallback", false) && fallback_ok(r, at, host.as_ref());
    let limits = f
        .get("limits")
        .map(|l| route_limits(r, &l, config, declared, auth, &path));
    let concurrency = f
        .get("concurrency")
        .and_then(|c| route_concurrency(r, &c, config, declared, auth, &path));
    if config.store.kind == StoreKind::RedisCluster && !exempt {
        if let Some(names) = &limits {
            check_one_slot(r, at, config, names, auth, client_ip_exempt);
        }
    }
    if !exempt && limits.is_none() {
        let default = match auth {
            true => &config.default_limits.authenticated,
            false => &config.default_limits.unauthenticated,
        };
        if let Some(d) = default {
            check_scope(r, at, &d.scope, auth, &path);
        }
    }
    let cost = f
        .get("cost")
        .and_then(|c| r.count(&c, "routes.cost_invalid"))
        .unwrap_or(NonZeroU64::MIN);
    let max_body = f.get("max_body").and_then(|m| r.size(&m));
    let strip_prefix = f
        .get("strip_prefix")
        .and_then(|s| strip_prefix(r, &s, &path));
    Some(Route {
        name,
        host,
        path,
        methods,
        upstream,
        auth,
        method,
        identity,
        exempt,
        limits,
        concurrency,
        cost,
        max_body,
        strip_prefix,
        forward_authorization,
        client_ip_exempt,
        fallback,
        when,
        actions,
        place: at.place(),
        origin: None,
    })
}

/// Whether a `fallback: true` route may be one: it has no exact host.
fn fallback_ok(r: &mut Reader<'_>, at: &At<'_>, host: Option<&HostMatch>) -> bool {
    if let Some(HostMatch::Exact(_)) = host {
        r.error(
            at,
            "routes.fallback_invalid",
            "fallback: only a host-less or wildcard route yields to the hosts routes name",
        );
        return false;
    }
    true
}

/// Whether the route answers every request itself: a `redirect`, or a
/// `direct_response` that is not a share of a split.
fn answers_itself(f: &yaml::Fields<'_>) -> bool {
    f.get("redirect").is_some()
        || (f.get("direct_response").is_some() && f.get("upstreams").is_none())
}

/// The route's pool: `upstream`, the first of `upstreams`, or none for a redirect.
fn route_upstream(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
    config: &Config,
    actions: &Actions,
) -> Option<String> {
    Some(match f.get("upstream") {
        Some(u) if f.get("upstreams").is_some() => {
            r.error(
                &u,
                "routes.split_invalid",
                "give upstream or upstreams, not both",
            );
            return None;
        }
        Some(u) => {
            let name = r.string(&u)?;
            if !config.upstreams.contains_key(&name) {
                r.error_value(&u, "routes.upstream_unknown", "no upstream with this name");
            }
            name
        }
        // A redirect or direct response (even a broken one) answers every
        // request itself.
        None if answers_itself(f) => String::new(),
        None if f.get("upstreams").is_some() => actions
            .split
            .first()
            .map(|s| s.0.clone())
            .unwrap_or_default(),
        None => {
            missing(r, at, "upstream");
            String::new()
        }
    })
}

fn route_concurrency(
    r: &mut Reader<'_>,
    c: &At<'_>,
    config: &Config,
    declared: &Declared,
    auth: bool,
    path: &PathMatch,
) -> Option<String> {
    let name = r.string(c)?;
    match config.concurrency.get(&name) {
        None if declared.concurrency.contains(&name) => {}
        None => r.error_value(
            c,
            "routes.concurrency_unknown",
            "no concurrency policy with this name",
        ),
        Some(policy) => check_scope(r, c, &policy.scope, auth, path),
    }
    Some(name)
}

fn route_name(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>) -> Option<String> {
    let Some(n) = f.get("name") else {
        missing(r, at, "name");
        return None;
    };
    let name = r.string(&n)?;
    if !name_ok(&name) {
        r.error_value(
            &n,
            "routes.name_invalid",
            "route names use A-Z a-z 0-9 _ - only",
        );
    }
    Some(name)
}

/// `match` (and the route-level `host`): host, path, methods, and the
/// header and query conditions.
fn route_match(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
) -> (Option<HostMatch>, PathMatch, Vec<String>, Vec<Condition>) {
    let mut host = f.get("host").and_then(|h| host_match(r, &h));
    let mut path = PathMatch::Any;
    let mut methods = Vec::new();
    let Some(m) = f.get("match") else {
        missing(r, at, "match");
        return (host, path, methods, Vec::new());
    };
    let Some(mf) = r.mapping(&m, schema::ROUTE_MATCH) else {
        return (host, path, methods, Vec::new());
    };
    if let Some(h) = mf.get("host") {
        host = host_match(r, &h);
    }
    let given: Vec<At<'_>> = ["path", "path_prefix", "path_regex"]
        .iter()
        .filter_map(|k| mf.get(k))
        .collect();
    match (mf.get("path"), mf.get("path_prefix"), mf.get("path_regex")) {
        _ if given.len() > 1 => r.error(
            &given[1],
            "routes.match_invalid",
            "use one of path, path_prefix, path_regex",
        ),
        (Some(p), ..) => path = path_match(r, &p, false),
        (_, Some(p), _) => path = path_match(r, &p, true),
        (.., Some(p)) => path = path_regex(r, &p),
        _ => {}
    }
    if let Some(ms) = mf.get("methods") {
        for (i, node) in r.sequence(&ms).into_iter().enumerate() {
            let item = ms.item(i, node);
            let Some(text) = r.string(&item) else {
                continue;
            };
            let upper = text.to_ascii_uppercase();
            if METHODS.contains(&upper.as_str()) {
                methods.push(upper);
            } else {
                r.error_value(&item, "routes.method_invalid", "not an HTTP method");
            }
        }
    }
    let when = conditions(r, &mf);
    (host, path, methods, when)
}

/// `auth:`: none, required (a bearer JWT, the default) or a method of
/// `auth.methods`; with the route's `identity:` over the method's own.
fn route_auth(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
    config: &Config,
    declared: &Declared,
) -> (bool, Option<String>, Option<IdentityMap>) {
    let methods = config.auth.as_ref().map(|a| &a.methods);
    let (auth, method) = match f.get("auth") {
        Some(a) => match r.string(&a).as_deref() {
            Some("none") => (false, None),
            Some("required") => (true, None),
            Some(name) if declared.methods.contains(name) => (true, Some(name.to_string())),
            _ => {
                r.error_value(
                    &a,
                    "routes.auth_invalid",
                    "must be none, required (a bearer JWT) or a name under auth.methods",
                );
                (false, None)
            }
        },
        None => (true, None),
    };
    let jwt = config.auth.as_ref().is_some_and(|a| !a.keys.is_empty());
    if auth && method.is_none() && !jwt {
        r.error(
            at,
            "routes.auth_unconfigured",
            "this route authenticates with a bearer JWT (the default) but there is no `auth` section with keys; add one, name a method of auth.methods or set `auth: none`",
        );
    }
    let identity = f.get("identity").and_then(|i| {
        let kind = &methods?.get(method.as_deref()?)?.kind;
        Some(identity_map(r, &i, kind))
    });
    if let (Some(i), None, None) = (f.get("identity"), &identity, &method) {
        r.error(
            &i,
            "auth.identity_invalid",
            "identity: applies to routes with `auth: NAME` of auth.methods",
        );
    }
    (auth, method, identity)
}

fn route_limits(
    r: &mut Reader<'_>,
    l: &At<'_>,
    config: &Config,
    declared: &Declared,
    auth: bool,
    path: &PathMatch,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, node) in r.sequence(l).into_iter().enumerate() {
        let item = l.item(i, node);
        let Some(name) = r.string(&item) else {
            continue;
        };
        if names.contains(&name) {
            r.error_value(
                &item,
                "routes.limit_duplicate",
                "this limit is listed twice",
            );
            continue;
        }
        match config.limits.get(&name) {
            Some(limit) => check_scope(r, &item, &limit.scope, auth, path),
            None if declared.limits.contains(&name) => {}
            None => r.error_value(&item, "routes.limit_unknown", "no limit with this name"),
        }
        names.push(name);
    }
    names
}

/// On redis_cluster one atomic script call reaches one hash slot, so all
/// keys a route spends must share the tenant's hash tag.
fn check_one_slot(
    r: &mut Reader<'_>,
    at: &At<'_>,
    config: &Config,
    names: &[String],
    auth: bool,
    client_ip_exempt: bool,
) {
    let limits: Vec<&Limit> = names.iter().filter_map(|n| config.limits.get(n)).collect();
    if names.len() > 1 && !limits.iter().all(|l| l.scope.tenant_tagged(auth)) {
        r.error(
            at,
            "routes.cross_slot",
            "on redis_cluster one atomic check needs one hash slot: a route with several \
             limits must key them all by tenant",
        );
    }
    // Only when every name is a known limit: a broken one is reported once, where it is.
    let client_keyed =
        !names.is_empty() && limits.len() == names.len() && limits.iter().all(|l| l.client_keyed());
    if !auth && client_keyed && !client_ip_exempt && config.default_limits.unauthenticated.is_some()
    {
        r.error(
            at,
            "routes.cross_slot",
            "on redis_cluster this auth: none route, limited only by client-chosen \
             values, cannot also spend the per-address default in one atomic check: \
             list the accepted values in the limit's scope, or set client_ip_exempt: true",
        );
    }
}

fn strip_prefix(r: &mut Reader<'_>, s: &At<'_>, path: &PathMatch) -> Option<String> {
    match s.node.as_scalar().and_then(|n| n.as_bool()) {
        Some(true) => match path {
            PathMatch::Prefix(p) => Some(p.clone()),
            _ => {
                r.error(
                    s,
                    "routes.strip_prefix_invalid",
                    "true needs match.path_prefix",
                );
                None
            }
        },
        Some(false) => None,
        None => {
            let text = r.string(s)?;
            if !text.starts_with('/') {
                r.error_value(s, "routes.strip_prefix_invalid", "must start with /");
            }
            Some(text)
        }
    }
}

/// A scope must be computable on the route that uses it.
pub(super) fn check_scope(
    r: &mut Reader<'_>,
    at: &At<'_>,
    scope: &Scope,
    auth: bool,
    path: &PathMatch,
) {
    match scope {
        Scope::Tenant | Scope::TenantUser | Scope::TenantToken if !auth => r.error_value(
            at,
            "routes.scope_needs_auth",
            "this limit is scoped by tenant but the route has `auth: none`",
        ),
        Scope::Path(capture) if !path.captures().contains(&capture.as_str()) => r.error_value(
            at,
            "routes.path_capture_unknown",
            format!("the limit uses path capture {{{capture}}} but the route's path has none"),
        ),
        _ => {}
    }
}

pub(super) fn host_match(r: &mut Reader<'_>, at: &At<'_>) -> Option<HostMatch> {
    let text = crate::host::normal_name(&r.string(at)?);
    if text
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
    {
        r.error_value(at, "routes.match_invalid", "hosts match without the port");
        return None;
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        return Some(HostMatch::Suffix(format!(".{suffix}")));
    }
    if text.contains(['/', ' ', '*']) {
        r.error_value(
            at,
            "routes.match_invalid",
            "expected a host name or *.domain",
        );
        return None;
    }
    Some(HostMatch::Exact(text))
}

/// `path_regex`: anchored at both ends, named groups as captures.
fn path_regex(r: &mut Reader<'_>, at: &At<'_>) -> PathMatch {
    let Some(text) = r.string(at) else {
        return PathMatch::Any;
    };
    let anchored = format!(
        "^(?:{})$",
        text.trim_start_matches('^').trim_end_matches('$')
    );
    let built = regex::RegexBuilder::new(&anchored)
        .size_limit(1 << 20)
        .build();
    match built {
        Ok(re) if re.capture_names().flatten().all(name_ok) => PathMatch::Regex(PathRegex(re)),
        Ok(_) => {
            r.error_value(
                at,
                "routes.match_invalid",
                "group names use A-Z a-z 0-9 _ only",
            );
            PathMatch::Any
        }
        Err(e) => {
            let why = e.to_string().lines().last().unwrap_or("").to_string();
            r.error_value(
                at,
                "routes.match_invalid",
                format!("not a regular expression: {why}"),
            );
            PathMatch::Any
        }
    }
}

pub(super) fn path_match(r: &mut Reader<'_>, at: &At<'_>, prefix: bool) -> PathMatch {
    let Some(text) = r.string(at) else {
        return PathMatch::Any;
    };
    if !text.starts_with('/') {
        r.error_value(at, "routes.match_invalid", "paths start with /");
        return PathMatch::Any;
    }
    if prefix {
        if text.contains(['{', '}']) {
            r.error_value(
                at,
                "routes.match_invalid",
                "path_prefix cannot hold {captures}",
            );
        }
        let trimmed = text.trim_end_matches('/');
        return if trimmed.is_empty() {
            PathMatch::Any
        } else {
            PathMatch::Prefix(trimmed.to_string())
        };
    }
    if !text.contains(['{', '}']) {
        return PathMatch::Exact(text);
    }
    let mut segments = Vec::new();
    for seg in text[1..].split('/') {
        if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            if !name_ok(name) {
                r.error_value(
                    at,
                    "routes.match_invalid",
                    "a capture is {NAME} with NAME of A-Z a-z 0-9 _ -",
                );
            }
            if segments
                .iter()
                .any(|s| matches!(s, Segment::Capture(c) if c == name))
            {
                r.error_value(
                    at,
                    "routes.match_invalid",
                    format!("capture {{{name}}} appears twice"),
                );
            }
            segments.push(Segment::Capture(name.to_string()));
        } else if seg.contains(['{', '}']) {
            r.error_value(
                at,
                "routes.match_invalid",
                "a capture must be a whole path segment",
            );
        } else {
            segments.push(Segment::Literal(seg.to_string()));
        }
    }
    PathMatch::Pattern(segments)
}
