//! What an Ingress's annotations add around its paths: other names for
//! its host (`server-alias`, `from-to-www-redirect`), a Service that
//! serves them while theirs has no endpoint (`default-backend`), and the
//! upstream's cookies rewritten (`proxy-cookie-domain`, `-path`).

use super::draft::Draft;
use super::manifests::Object;
use super::plan::Plan;
use super::units::go_bool;
use super::Verdict;

/// The annotations read here (without the prefix).
pub const KEYS: &[&str] = &[
    "custom-http-errors",
    "default-backend",
    "from-to-www-redirect",
    "proxy-cookie-domain",
    "proxy-cookie-path",
    "proxy-redirect-from",
    "proxy-redirect-to",
    "server-alias",
];

/// What one of `KEYS` becomes.
pub fn verdict(
    draft: &Draft<'_>,
    ing: &Object,
    key: &str,
    value: &str,
    plan: &mut Plan,
) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    match key {
        "custom-http-errors" => {
            let fallback =
                super::annotations::get(ing, &draft.options.annotation_prefix, "default-backend");
            let codes: Result<Vec<u16>, _> =
                value.split(',').map(|c| c.trim().parse::<u16>()).collect();
            match (codes, fallback) {
                (Ok(codes), Some(_)) if codes.iter().all(|c| (400..=599).contains(c)) => {
                    plan.error_codes = codes;
                    mapped(
                        "error_pages: an answer of these statuses to a request without a body is \
                         replaced by the default-backend's page for it (X-Code, X-Format, \
                         X-Original-URI, X-Namespace, X-Ingress-Name, X-Request-ID; not X-Service-Name \
                         or X-Service-Port)",
                    )
                }
                (Ok(_), None) => Verdict::Unsupported(
                    "no default-backend annotation names the error backend (the controller's own \
                     default backend is not known): the answers pass as they are"
                        .into(),
                ),
                _ => Verdict::Unsupported(format!(
                    "{value:?}: statuses from 400 to 599, comma-separated"
                )),
            }
        }
        "proxy-cookie-domain" | "proxy-cookie-path" => cookie_rewrite(key, value, plan),
        "proxy-redirect-from" | "proxy-redirect-to" => location_rewrite(draft, ing, plan),
        "default-backend" if super::names::dns1123_label(value.trim()) => {
            plan.default_backend = Some(value.trim().to_string());
            match draft.options.cluster {
                true => mapped(
                    "a path whose Service has no ready endpoint is served by this Service of the \
                     namespace (its first port) until it has one",
                ),
                false => Verdict::Approximated(
                    "the import cannot see endpoints: the controller serves a path whose Service has \
                     none by this one"
                        .into(),
                ),
            }
        }
        "default-backend" => Verdict::Unsupported(format!("{value:?} is not a Service name")),
        "server-alias" => {
            let mut names: Vec<String> = value
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect();
            names.sort();
            names.dedup();
            match names.iter().find(|n| !super::names::dns1123_subdomain(n)) {
                Some(bad) => Verdict::Unsupported(format!("{bad:?} is not a host name")),
                None => {
                    plan.aliases = names;
                    mapped(
                        "each name (at most 16) serves the Ingress's paths as its host does, unless \
                         an older Ingress names it as its host, or it is closed or the operator's",
                    )
                }
            }
        }
        "from-to-www-redirect" => {
            plan.www_redirect = go_bool(value);
            mapped(
                "a route for the other name of each host (with or without www.) answering 308 to the \
                 host, path and query kept, unless another route serves that name",
            )
        }
        _ => Verdict::Unsupported(format!("{key} is not read here")),
    }
}

/// `proxy-cookie-domain` and `proxy-cookie-path`: `off`, or `FROM TO`.
fn cookie_rewrite(key: &str, value: &str, plan: &mut Plan) -> Verdict {
    let words: Vec<&str> = value.split_whitespace().collect();
    let ok = |w: &str| {
        w.bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b'$')
    };
    let path = key == "proxy-cookie-path";
    match words.as_slice() {
        ["off"] => Verdict::Mapped("off: nothing to do".into()),
        [from, to]
            if ok(from)
                && ok(to)
                && !from.starts_with('~')
                && (!path || from.starts_with('/') && to.starts_with('/')) =>
        {
            let pair = Some((from.to_string(), to.to_string()));
            let what = match path {
                true => {
                    plan.keys.cookie_path = pair;
                    "cookie_rewrite.path: a Set-Cookie Path starting with FROM gets TO instead"
                }
                false => {
                    plan.keys.cookie_domain = pair;
                    "cookie_rewrite.domain: a Set-Cookie Domain of FROM (case-insensitive) becomes TO"
                }
            };
            Verdict::Mapped(what.into())
        }
        _ => Verdict::Unsupported(format!(
            "{value:?}: off, or FROM TO without a regular expression (~) or nginx variables"
        )),
    }
}

/// `proxy-redirect-from` and `-to` (nginx `proxy_redirect FROM TO`): the
/// routes' `location_rewrite`; `off` (ingress-nginx's default) does nothing.
fn location_rewrite(draft: &Draft<'_>, ing: &Object, plan: &mut Plan) -> Verdict {
    let prefix = &draft.options.annotation_prefix;
    let from = super::annotations::get(ing, prefix, "proxy-redirect-from");
    let to = super::annotations::get(ing, prefix, "proxy-redirect-to");
    let plain =
        |v: &str| !v.is_empty() && !v.contains('$') && v.bytes().all(|b| b.is_ascii_graphic());
    match (from.as_deref(), to.as_deref()) {
        (None | Some("off"), _) => {
            Verdict::Mapped("off: Location passes as the upstream sent it, as in ingress-nginx".into())
        }
        (Some("default"), _) => Verdict::Approximated(
            "default: nginx rewrote a Location naming the proxied Service's URL; fairgate passes it as sent".into(),
        ),
        (Some(f), Some(t)) if plain(f) && plain(t) => {
            plan.keys.location_rewrite = Some((f.to_string(), t.to_string()));
            Verdict::Mapped(
                "location_rewrite: a Location or Refresh URL starting with FROM starts with TO instead".into(),
            )
        }
        _ => Verdict::Unsupported(
            "both proxy-redirect-from and -to, without nginx variables or spaces, are needed".into(),
        ),
    }
}
