//! Picks a request's route: the first, in file order, whose host, path,
//! method, headers and query match. `Table` indexes a policy's routes so a
//! request is checked against only those that could match it.

use crate::config::{Condition, Config, HostMatch, PathMatch, Route, Segment, ValueMatch};

/// The chosen route and the values of its path captures.
#[derive(Debug)]
pub struct Matched<'c> {
    pub index: usize,
    pub route: &'c Route,
    pub captures: Vec<(&'c str, String)>,
}

/// What else of a request routes may match on: its headers and query,
/// and the listener it came in on.
pub struct Carried<'a> {
    pub headers: &'a http::HeaderMap,
    pub query: Option<&'a str>,
    /// On the TLS listener.
    pub tls: bool,
}

impl Carried<'_> {
    fn holds(&self, condition: &Condition) -> bool {
        let matches = |want: &ValueMatch, value: Option<&[u8]>| match (want, value) {
            (ValueMatch::Present, v) => v.is_some(),
            (ValueMatch::Exact(w), Some(v)) => w.as_bytes() == v,
            (ValueMatch::Regex(re), Some(v)) => {
                std::str::from_utf8(v).is_ok_and(|v| re.0.is_match(v))
            }
            (_, None) => false,
        };
        match condition {
            Condition::Tls(tls) => self.tls == *tls,
            // A value is matched only when it is there exactly once: of
            // two, the route would see one and the upstream may read the
            // other. Presence needs any.
            Condition::Header(name, want) => {
                let mut values = self.headers.get_all(name).iter();
                match (want, values.next(), values.next()) {
                    (ValueMatch::Present, first, _) => first.is_some(),
                    (_, Some(one), None) => matches(want, Some(one.as_bytes())),
                    _ => false,
                }
            }
            Condition::Query(key, want) => {
                let mut values = self
                    .query
                    .unwrap_or("")
                    .split('&')
                    .filter(|p| !p.is_empty())
                    .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
                    .filter(|(k, _)| decoded(k) == key.as_bytes());
                match (want, values.next(), values.next()) {
                    (ValueMatch::Present, first, _) => first.is_some(),
                    (_, Some((_, v)), None) => matches(want, Some(&decoded(v))),
                    _ => false,
                }
            }
        }
    }
}

/// A query key or value as the application reads it: `%XX` and `+` decoded.
fn decoded(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |at: usize| b.get(at).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
            (b'+', ..) => out.push(b' '),
            (c, ..) => out.push(c),
        }
        i += 1;
    }
    out
}

/// The routes indexed so that a request is checked against only those
/// that could match it: by exact host, then by the first path segment a
/// route's path fixes; `path_regex` routes through one `RegexSet`; the
/// rest always. First match wins, in file order, as without the index.
#[derive(Debug)]
pub struct Table {
    by_host: std::collections::HashMap<String, Index>,
    any_host: Index,
}

#[derive(Debug, Default)]
struct Index {
    by_first: std::collections::HashMap<String, Vec<usize>>,
    always: Vec<usize>,
    regex: Option<(regex::RegexSet, Vec<usize>)>,
}

impl Table {
    pub fn new(routes: &[Route]) -> Table {
        let mut by_host: std::collections::HashMap<String, Vec<usize>> = Default::default();
        let mut any_host = Vec::new();
        for (i, route) in routes.iter().enumerate() {
            match &route.host {
                Some(HostMatch::Exact(h)) => by_host.entry(h.clone()).or_default().push(i),
                _ => any_host.push(i),
            }
        }
        Table {
            by_host: by_host
                .into_iter()
                .map(|(h, list)| (h, Index::new(routes, &list)))
                .collect(),
            any_host: Index::new(routes, &any_host),
        }
    }

    /// `host` is the request's Host without port, lower-cased.
    pub fn find<'c>(
        &self,
        config: &'c Config,
        host: &str,
        method: &str,
        path: &str,
        carried: &Carried<'_>,
    ) -> Option<Matched<'c>> {
        let mut candidates = self.any_host.candidates(path);
        let named = self.by_host.get(host);
        if let Some(index) = named {
            candidates.extend(index.candidates(path));
            candidates.sort_unstable();
        }
        let request = Request {
            host,
            named: named.is_some(),
            method,
            path,
        };
        first_match(config, candidates, &request, carried)
    }
}

impl Index {
    fn new(routes: &[Route], list: &[usize]) -> Index {
        let mut index = Index::default();
        let mut regexes = (Vec::new(), Vec::new());
        for &i in list {
            match &routes[i].path {
                PathMatch::Regex(re) => {
                    regexes.0.push(re.0.as_str().to_string());
                    regexes.1.push(i);
                }
                path => match first_segment(path) {
                    Some(seg) => index.by_first.entry(seg).or_default().push(i),
                    None => index.always.push(i),
                },
            }
        }
        if !regexes.0.is_empty() {
            // Each compiled alone at load, so the set compiles too.
            let set = regex::RegexSetBuilder::new(&regexes.0)
                .size_limit(64 << 20)
                .build()
                .ok();
            match set {
                Some(set) => index.regex = Some((set, regexes.1)),
                None => index.always.extend(regexes.1),
            }
            index.always.sort_unstable();
        }
        index
    }

    /// The routes that could match `path`, in file order.
    fn candidates(&self, path: &str) -> Vec<usize> {
        let first = path
            .strip_prefix('/')
            .and_then(|p| p.split('/').next())
            .unwrap_or("");
        let mut out = self.always.clone();
        if let Some(list) = self.by_first.get(first) {
            out.extend(list);
        }
        if let Some((set, ids)) = &self.regex {
            out.extend(set.matches(path).iter().map(|m| ids[m]));
        }
        out.sort_unstable();
        out
    }
}

/// The first path segment every path the route matches has, if fixed.
fn first_segment(path: &PathMatch) -> Option<String> {
    let fixed = |p: &str| p.strip_prefix('/')?.split('/').next().map(str::to_string);
    match path {
        PathMatch::Exact(p) | PathMatch::Prefix(p) => fixed(p),
        PathMatch::Pattern(segments) => match segments.first()? {
            Segment::Literal(l) => Some(l.clone()),
            Segment::Capture(_) => None,
        },
        PathMatch::Any | PathMatch::Regex(_) => None,
    }
}

/// `host` is the request's Host without port, lower-cased. The plain scan
/// `Table::find` must agree with (tests compare them).
pub fn find<'c>(
    config: &'c Config,
    host: &str,
    method: &str,
    path: &str,
    carried: &Carried<'_>,
) -> Option<Matched<'c>> {
    let named = config
        .routes
        .iter()
        .any(|r| matches!(&r.host, Some(HostMatch::Exact(h)) if h == host));
    let request = Request {
        host,
        named,
        method,
        path,
    };
    first_match(config, 0..config.routes.len(), &request, carried)
}

/// What a route is matched against: the request's host (and whether some
/// route names it exactly), method and path.
struct Request<'r> {
    host: &'r str,
    named: bool,
    method: &'r str,
    path: &'r str,
}

/// The first of `indices` (in the order given) whose route matches.
fn first_match<'c>(
    config: &'c Config,
    indices: impl IntoIterator<Item = usize>,
    request: &Request<'_>,
    carried: &Carried<'_>,
) -> Option<Matched<'c>> {
    indices.into_iter().find_map(|index| {
        let route = &config.routes[index];
        matches(route, request, carried).map(|captures| Matched {
            index,
            route,
            captures,
        })
    })
}

/// The captures, when `route` matches the request.
fn matches<'c>(
    route: &'c Route,
    request: &Request<'_>,
    carried: &Carried<'_>,
) -> Option<Vec<(&'c str, String)>> {
    let Request {
        host,
        named,
        method,
        path,
    } = *request;
    // A named host is closed: a fallback never answers it.
    if route.fallback && named {
        return None;
    }
    if !host_matches(route.host.as_ref(), host) {
        return None;
    }
    if !route.methods.is_empty() && !route.methods.iter().any(|m| m == method) {
        return None;
    }
    if !route.when.iter().all(|c| carried.holds(c)) {
        return None;
    }
    path_matches(&route.path, path)
}

fn host_matches(want: Option<&HostMatch>, host: &str) -> bool {
    match want {
        None => true,
        Some(HostMatch::Exact(h)) => h == host,
        Some(HostMatch::Suffix(s)) => host.len() > s.len() && host.ends_with(s.as_str()),
    }
}

fn path_matches<'c>(want: &'c PathMatch, path: &str) -> Option<Vec<(&'c str, String)>> {
    match want {
        PathMatch::Any => Some(Vec::new()),
        PathMatch::Exact(p) => (p == path).then(Vec::new),
        // A prefix matches whole segments: `/v1/files` matches `/v1/files` and
        // `/v1/files/x`, never `/v1/filesystem`.
        PathMatch::Prefix(p) => {
            let rest = path.strip_prefix(p.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(Vec::new)
        }
        PathMatch::Regex(re) => {
            let found = re.0.captures(path)?;
            let names = re.0.capture_names().flatten();
            let captures = names
                .filter_map(|name| Some((name, found.name(name)?.as_str().to_string())))
                .collect();
            Some(captures)
        }
        PathMatch::Pattern(segments) => {
            let mut parts = path.strip_prefix('/')?.split('/');
            let mut captures = Vec::new();
            for seg in segments {
                let part = parts.next()?;
                match seg {
                    Segment::Literal(l) if l == part => {}
                    Segment::Literal(_) => return None,
                    Segment::Capture(_) if part.is_empty() => return None,
                    Segment::Capture(name) => captures.push((name.as_str(), part.to_string())),
                }
            }
            parts.next().is_none().then_some(captures)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index picks what the plain scan in file order picks.
    #[test]
    fn the_table_agrees_with_a_scan_in_file_order() {
        let yaml = r#"
store: {kind: memory}
acknowledge: [store.process_local]
upstreams: {api: {targets: ["127.0.0.1:3000"]}}
routes:
  - {name: h1, match: {host: a.test, path_prefix: /api}, upstream: api, auth: none}
  - {name: x1, match: {path_regex: "/api/v(?<n>[0-9])/.*"}, upstream: api, auth: none}
  - {name: p1, match: {path_prefix: /api/v1}, upstream: api, auth: none}
  - {name: c1, match: {path: "/{tenant}/items"}, upstream: api, auth: none}
  - {name: e1, match: {path: /health, methods: [GET]}, upstream: api, auth: none}
  - {name: w1, match: {host: "*.b.test", path_prefix: /}, upstream: api, auth: none}
  - {name: h2, match: {host: a.test, path: /only}, upstream: api, auth: none}
  - {name: q1, match: {path_prefix: /q, query: {v: "2"}}, upstream: api, auth: none}
  - {name: fb, match: {path_prefix: /fb}, upstream: api, auth: none, fallback: true}
  - {name: fw, match: {host: "*.test", path_prefix: /fw}, upstream: api, auth: none, fallback: true}
  - {name: any, match: {path_prefix: /}, upstream: api, auth: none}
"#;
        let config = Config::from_text("t.yaml", yaml, std::path::Path::new("."))
            .unwrap()
            .config;
        let table = Table::new(&config.routes);
        let headers = http::HeaderMap::new();
        let hosts = ["a.test", "x.b.test", "other.test", ""];
        let paths = [
            "/api",
            "/api/v1",
            "/api/v1/x",
            "/api/v9/y",
            "/acme/items",
            "/health",
            "/only",
            "/q",
            "/q/z",
            "/",
            "/apix",
            "/x/y/z",
            "/fb/1",
            "/fw",
        ];
        for host in hosts {
            for path in paths {
                for (method, query) in [("GET", None), ("POST", Some("v=2"))] {
                    let carried = Carried {
                        headers: &headers,
                        query,
                        tls: false,
                    };
                    let want = find(&config, host, method, path, &carried).map(|m| m.index);
                    let got = table
                        .find(&config, host, method, path, &carried)
                        .map(|m| m.index);
                    assert_eq!(got, want, "{method} {host}{path}?{query:?}");
                }
            }
        }
    }

    /// A fallback answers only hosts no route names exactly: `a.test`'s
    /// unmatched paths are not another's catch-all's, whatever the order.
    #[test]
    fn a_fallback_never_answers_a_named_host() {
        let yaml = r#"
store: {kind: memory}
acknowledge: [store.process_local]
upstreams: {api: {targets: ["127.0.0.1:3000"]}}
routes:
  - {name: wild, match: {host: "*.test", path_prefix: /}, upstream: api, auth: none, fallback: true}
  - {name: all, match: {path_prefix: /}, upstream: api, auth: none, fallback: true}
  - {name: a, match: {host: a.test, path_prefix: /api}, upstream: api, auth: none}
  - {name: open, match: {path_prefix: /open}, upstream: api, auth: none}
"#;
        let config = Config::from_text("t.yaml", yaml, std::path::Path::new("."))
            .unwrap()
            .config;
        let table = Table::new(&config.routes);
        let headers = http::HeaderMap::new();
        let carried = Carried {
            headers: &headers,
            query: None,
            tls: false,
        };
        let name = |host: &str, path: &str| {
            let found = table.find(&config, host, "GET", path, &carried);
            found
                .map(|m| m.route.name.as_str())
                .unwrap_or("-")
                .to_string()
        };
        assert_eq!(name("a.test", "/api/x"), "a");
        assert_eq!(name("a.test", "/login"), "-");
        assert_eq!(
            name("a.test", "/open/1"),
            "open",
            "not a fallback: file order"
        );
        assert_eq!(name("b.test", "/login"), "wild");
        assert_eq!(name("other.example", "/login"), "all");
    }
}
