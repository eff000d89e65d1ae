//! Canary Ingresses (`canary: "true"`): folded into the main route of the
//! same host and path, as the route's `canary` (weight, cookie, a header
//! always/never) or a header route before it (`canary-by-header-value`,
//! `-pattern`) to the canary's pool.

use std::collections::BTreeMap;

use super::annotations;
use super::backend;
use super::draft::Draft;
use super::manifests::Object;
use super::out::{Canary, HeaderMatch, HeaderValue};
use super::paths;
use super::Verdict;

/// A canary Ingress: its paths send some requests of the main route of
/// the same host and path to its backend.
pub fn fold(draft: &mut Draft<'_>, ing: &Object) {
    let mut targets = Vec::new();
    for (host, path, kind, backend) in paths::of(ing) {
        let origin = (host.clone().unwrap_or_default(), path.clone(), kind.clone());
        // Only a main of its own namespace: another's route is not its to split.
        let mine = |r: &super::routes::Route| {
            r.origin == origin
                && r.ingress.split_once('/').map(|(ns, _)| ns) == Some(&ing.namespace)
        };
        let Some(main) = draft.routes.iter().position(mine) else {
            let why = format!(
                "no main Ingress of namespace {} serves host {} path {path}",
                ing.namespace,
                host.as_deref().unwrap_or("*")
            );
            draft.line(&ing.id(), "canary", Verdict::Unsupported(why));
            continue;
        };
        if targets.iter().any(|(m, _)| *m == main) {
            continue;
        }
        if let Some(earlier) = draft.canaries.get(&draft.routes[main].name) {
            let why = format!(
                "host {} path {path} has canary Ingress {earlier} already: a rule takes one canary, \
                 as in ingress-nginx",
                host.as_deref().unwrap_or("*")
            );
            draft.line(&ing.id(), "canary", Verdict::Unsupported(why));
            continue;
        }
        let plan = super::plan::Plan {
            protocol: annotations::protocol_of(draft, ing),
            ..Default::default()
        };
        // A canary whose Service has no ready endpoint takes no share.
        if let Some(backend::Served::Pool(pool)) = backend::upstream(draft, ing, backend, &plan) {
            targets.push((main, pool));
        }
    }
    apply(draft, ing, &targets);
}

/// The main route's `canary` settings, a header route's match, and the
/// report of every annotation of a canary Ingress.
fn canary_settings(
    ann: &BTreeMap<String, String>,
) -> (Vec<(String, Verdict)>, Canary, Option<HeaderMatch>) {
    let mut lines: Vec<(String, Verdict)> = Vec::new();
    // The pool is the canary's, filled in for each main route.
    let mut settings = Canary {
        upstream: String::new(),
        cookie: None,
        header: None,
        percent: None,
    };
    let header = ann.get("canary-by-header");
    let value = ann.get("canary-by-header-value");
    let pattern = ann.get("canary-by-header-pattern");
    let mut header_match: Option<HeaderMatch> = None;
    for (key, v) in ann {
        let verdict = match key.as_str() {
            "canary" => Verdict::Mapped("folded into the main route's canary".into()),
            "canary-by-header" if value.is_none() && pattern.is_none() => {
                settings.header = Some(v.clone());
                Verdict::Mapped("canary.header (always / never)".into())
            }
            "canary-by-header" => {
                Verdict::Mapped("a route before the main one matching the header's value".into())
            }
            "canary-by-header-value" => {
                if let Some(h) = header {
                    header_match = Some(HeaderMatch {
                        name: h.clone(),
                        value: HeaderValue::Is(v.clone()),
                    });
                }
                Verdict::Mapped("match.headers on a route to the canary pool".into())
            }
            "canary-by-header-pattern" if value.is_none() => {
                if let Some(h) = header {
                    header_match = Some(HeaderMatch {
                        name: h.clone(),
                        value: HeaderValue::Regex(v.clone()),
                    });
                }
                Verdict::Mapped("match.headers regex on a route to the canary pool".into())
            }
            "canary-by-header-pattern" => Verdict::Mapped(
                "no effect: canary-by-header-value wins, as in ingress-nginx".into(),
            ),
            "canary-by-cookie" => {
                settings.cookie = Some(v.clone());
                Verdict::Mapped("canary.cookie (always / never)".into())
            }
            "canary-weight" => {
                let total: f64 = ann
                    .get("canary-weight-total")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(100.0);
                let weight: f64 = v.parse().unwrap_or(0.0);
                let percent = (weight * 100.0 / total.max(1.0)).round().clamp(0.0, 100.0) as u64;
                settings.percent = Some(percent);
                Verdict::Approximated(format!(
                    "canary.percent {percent}: ingress-nginx drew per request; fairgate picks per client (tenant, else address), so a client stays on one side"
                ))
            }
            "canary-weight-total" => Verdict::Mapped("the denominator of canary.percent".into()),
            _ => Verdict::Unsupported(
                "on a canary Ingress only canary-* annotations are imported".into(),
            ),
        };
        lines.push((key.clone(), verdict));
    }
    (lines, settings, header_match)
}

/// A canary Ingress's annotations, applied to the main routes it shadows
/// (by index, with the canary's pool).
fn apply(draft: &mut Draft<'_>, ing: &Object, targets: &[(usize, String)]) {
    let ann = annotations::of(ing, &draft.options.annotation_prefix);
    let (lines, settings, header_match) = canary_settings(&ann);
    let prefix = draft.options.annotation_prefix.clone();
    for (key, verdict) in lines {
        draft.line(&ing.id(), &format!("{prefix}/{key}"), verdict);
    }
    for (main, upstream) in targets {
        let name = draft.routes[*main].name.clone();
        if settings.cookie.is_some() || settings.header.is_some() || settings.percent.is_some() {
            draft.canaries.insert(name.clone(), ing.id());
            draft.routes[*main].keys.canary = Some(Canary {
                upstream: upstream.clone(),
                ..settings.clone()
            });
        }
        if let Some(h) = &header_match {
            draft.canaries.insert(name, ing.id());
            let mut r = draft.routes[*main].clone();
            r.name = format!("{}-canary", r.name);
            r.headers = Some(h.clone());
            r.rank = 0;
            r.keys.canary = None;
            r.keys.upstream = Some(upstream.clone());
            draft.routes.push(r);
        }
    }
}
