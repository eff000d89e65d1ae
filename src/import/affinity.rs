//! `affinity: cookie` and `session-cookie-*`: in the cluster, where a
//! pool's targets are the Service's endpoints, the pools' `affinity` (a
//! signed cookie per endpoint). From a file, a pool's one target is the
//! Service's address, which kube-proxy balances: nothing to pin.

use std::collections::BTreeMap;

use super::draft::Draft;
use super::manifests::Object;
use super::out::Affinity;
use super::plan::Plan;
use super::units::{duration, go_bool};
use super::Verdict;

/// The annotations read here (without the prefix).
pub const KEYS: &[&str] = &[
    "affinity",
    "affinity-canary-behavior",
    "affinity-mode",
    "session-cookie-change-on-failure",
    "session-cookie-conditional-samesite-none",
    "session-cookie-domain",
    "session-cookie-expires",
    "session-cookie-max-age",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-samesite",
    "session-cookie-secure",
];

/// ingress-nginx's default cookie name.
const DEFAULT_NAME: &str = "INGRESSCOOKIE";

/// Each of `KEYS` given: a line, and `plan.affinity` for `affinity: cookie`
/// (read after the retries, which `change-on-failure` needs).
pub fn read(
    draft: &Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let given: Vec<(&str, &str)> = KEYS
        .iter()
        .filter_map(|k| Some((*k, ann.get(*k)?.trim())))
        .collect();
    let mut say = |key: &str, verdict: Verdict| lines.push((key.to_string(), verdict));
    if given.is_empty() {
        return;
    }
    if !draft.options.cluster {
        for (key, _) in given {
            let why = "a pool's one target is the Service's address, which kube-proxy balances: \
                       there is no endpoint to pin (the controller pins endpoints)";
            say(key, Verdict::Unsupported(why.into()));
        }
        return;
    }
    match ann.get("affinity").map(|v| v.trim()) {
        Some("cookie") => {}
        other => {
            for (key, value) in given {
                let verdict = match (key, other) {
                    ("affinity", _) => Verdict::Unsupported(format!(
                        "{value:?}: only cookie, as in ingress-nginx; requests are balanced"
                    )),
                    _ => Verdict::Mapped(
                        "no effect without affinity: cookie, as in ingress-nginx".into(),
                    ),
                };
                say(key, verdict);
            }
            return;
        }
    }
    let mut affinity = Affinity {
        cookie: DEFAULT_NAME.into(),
        path: location(draft, ing, ann),
        ..Affinity::default()
    };
    for (key, value) in given {
        let mut verdict = attribute(key, value, ann, &mut affinity);
        if key == "session-cookie-change-on-failure"
            && affinity.change_on_failure
            && plan.keys.retries.is_none()
        {
            verdict = Verdict::Approximated(
                "affinity.change_on_failure, which acts on a retry: this Ingress's routes retry only \
                 as proxy-next-upstream says (ingress-nginx's default, error timeout, is not carried over)"
                    .into(),
            );
        }
        say(key, verdict);
    }
    plan.affinity = Some(affinity);
}

/// The cookie's default path, ingress-nginx's location path: the
/// Ingress's one path when all its paths are that one and are not regular
/// expressions; else `/` (the policy's default).
fn location(draft: &Draft<'_>, ing: &Object, ann: &BTreeMap<String, String>) -> Option<String> {
    let all = super::paths::of(ing);
    let regex = ["use-regex", "rewrite-target"]
        .iter()
        .any(|k| ann.contains_key(*k))
        || all
            .iter()
            .any(|(host, ..)| draft.regex_hosts.contains_key(host));
    let paths: std::collections::BTreeSet<String> =
        all.into_iter().map(|(_, path, _, _)| path).collect();
    match paths.into_iter().collect::<Vec<_>>().as_slice() {
        [one] if !regex && one != "/" && one.starts_with('/') && !one.contains([';', ' ']) => {
            Some(one.clone())
        }
        _ => None,
    }
}

/// `session-cookie-max-age`, `-expires` (seconds, as `Max-Age`) and
/// `-samesite`.
fn lifetime(key: &str, value: &str, ann: &BTreeMap<String, String>, a: &mut Affinity) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    // Browsers cap a cookie's age at 400 days.
    let seconds = |v: &str| {
        v.parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(|s| duration(s.min(400 * 86_400)))
    };
    match key {
        "session-cookie-max-age" | "session-cookie-expires" => match seconds(value) {
            // Max-Age wins over Expires in every browser; both are seconds here.
            Some(age)
                if key == "session-cookie-max-age"
                    || !ann.contains_key("session-cookie-max-age") =>
            {
                a.max_age = Some(age);
                mapped("affinity.max_age (browsers read Max-Age before Expires)")
            }
            Some(_) => mapped("session-cookie-max-age gives the cookie's age, as browsers read it"),
            None => Verdict::Unsupported(format!("{value:?}: seconds; a session cookie is kept")),
        },
        "session-cookie-samesite" => match value.to_ascii_lowercase().as_str() {
            "none" => {
                a.same_site = Some("none");
                a.secure = true;
                mapped("affinity.same_site: none, with Secure as browsers require")
            }
            "lax" | "strict" => {
                a.same_site = Some(if value.eq_ignore_ascii_case("lax") {
                    "lax"
                } else {
                    "strict"
                });
                mapped("affinity.same_site")
            }
            _ => Verdict::Unsupported(format!("{value:?}: None, Lax or Strict")),
        },
        _ => Verdict::Unsupported(format!("{key} is not read here")),
    }
}

/// What one annotation of an Ingress with `affinity: cookie` sets.
fn attribute(key: &str, value: &str, ann: &BTreeMap<String, String>, a: &mut Affinity) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    let attribute_ok =
        |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    match key {
        "affinity" => mapped(
            "affinity: a signed cookie names the endpoint that first answered; the client keeps \
             it while it is ready (the value names no address); Secure over TLS, as ingress-nginx",
        ),
        "affinity-mode" if value == "persistent" || value == "persistent-drainable" => {
            mapped("a client keeps its endpoint while it is ready (a terminating one takes no new requests)")
        }
        "affinity-mode" => Verdict::Approximated(
            "as persistent: ingress-nginx's balanced mode moves some sessions to new endpoints when \
             the Service scales up; fairgate keeps each on its endpoint while it is ready"
                .into(),
        ),
        "affinity-canary-behavior" => Verdict::Approximated(
            "the cookie pins a client to an endpoint of the main Service; a request the canary \
             takes (by its header, cookie or share) is balanced among the canary's endpoints"
                .into(),
        ),
        "session-cookie-name" if crate::config::cookie_name(value) => {
            a.cookie = value.to_string();
            mapped("affinity.cookie")
        }
        "session-cookie-name" => Verdict::Unsupported(format!(
            "{value:?} is not a cookie name: the cookie is {DEFAULT_NAME}"
        )),
        "session-cookie-path" if value.starts_with('/') && attribute_ok(value) => {
            a.path = (value != "/").then(|| value.to_string());
            mapped("affinity.path")
        }
        "session-cookie-path" => Verdict::Unsupported(format!(
            "{value:?} is not a cookie path (starting with /, no space or ;): the Ingress's path is kept"
        )),
        "session-cookie-domain" if attribute_ok(value) => {
            a.domain = Some(value.to_string());
            mapped("affinity.domain")
        }
        "session-cookie-max-age" | "session-cookie-expires" | "session-cookie-samesite" => lifetime(key, value, ann, a),
        "session-cookie-secure" => {
            a.secure |= go_bool(value);
            mapped("affinity.secure")
        }
        "session-cookie-change-on-failure" => {
            a.change_on_failure = go_bool(value);
            mapped("affinity.change_on_failure: a retry goes to another endpoint, which keeps the client")
        }
        "session-cookie-conditional-samesite-none" => Verdict::Approximated(
            "SameSite=None is sent to every browser: the few that mishandled it (before 2020) \
             are not told apart"
                .into(),
        ),
        _ => Verdict::Unsupported(format!("{value:?} is not a cookie attribute (no space or ;)")),
    }
}
