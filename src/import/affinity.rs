//! `affinity: cookie` and `session-cookie-*`: in the cluster, where a
//! pool's targets are the Service's endpoints, the pools' `affinity` (a
//! signed cookie per endpoint). From a file, a pool's one target is the
//! Service's address, which kube-proxy balances: nothing to pin.

use std::collections::BTreeMap;

use super::draft::Draft;
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

/// Each of `KEYS` given: a line, and `plan.affinity` for `affinity: cookie`.
pub fn read(
    draft: &Draft<'_>,
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
        ..Affinity::default()
    };
    for (key, value) in given {
        let verdict = attribute(key, value, ann, &mut affinity);
        say(key, verdict);
    }
    plan.affinity = Some(affinity);
}

/// What one annotation of an Ingress with `affinity: cookie` sets.
fn attribute(key: &str, value: &str, ann: &BTreeMap<String, String>, a: &mut Affinity) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    let seconds = |v: &str| v.parse::<u64>().ok().filter(|s| *s > 0).map(duration);
    let attribute_ok =
        |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    match key {
        "affinity" => mapped(
            "affinity: a signed cookie names the endpoint that first answered; the client keeps \
             it while it is ready (the value names no address)",
        ),
        "affinity-mode" if value == "persistent" => mapped("a client keeps its endpoint while it is ready"),
        "affinity-mode" => Verdict::Approximated(
            "as persistent: ingress-nginx's balanced mode moves some sessions to new endpoints when \
             the Service scales up; fairgate keeps each on its endpoint while it is ready"
                .into(),
        ),
        "affinity-canary-behavior" => Verdict::Approximated(
            "each request draws main or canary by its share; a client's cookie pins it to an \
             endpoint of the pool that set it, and the other pool sets its own"
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
        "session-cookie-domain" if attribute_ok(value) => {
            a.domain = Some(value.to_string());
            mapped("affinity.domain")
        }
        "session-cookie-max-age" | "session-cookie-expires" => match seconds(value) {
            // Max-Age wins over Expires in every browser; both are seconds here.
            Some(age) if key == "session-cookie-max-age" || !ann.contains_key("session-cookie-max-age") => {
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
                a.same_site = Some(if value.eq_ignore_ascii_case("lax") { "lax" } else { "strict" });
                mapped("affinity.same_site")
            }
            _ => Verdict::Unsupported(format!("{value:?}: None, Lax or Strict")),
        },
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
