//! Kubernetes object names as the API server validates them. The import
//! turns names into file paths (`--tls-dir/NAMESPACE/SECRET/tls.crt`),
//! host names (`SERVICE.NAMESPACE.svc.DOMAIN`) and policy names that end
//! up in store keys; a name the API server would have refused (`..`, `/`,
//! `:`) is one no cluster holds, and is never let through to those.

use serde_json::Value;

use super::manifests::{text, At, Object};
use crate::k8s::Kind;

/// A DNS-1123 label (a namespace): at most 63 of `a-z`, `0-9`, `-`,
/// starting and ending with a letter or digit.
pub fn dns1123_label(name: &str) -> bool {
    name.len() <= 63 && label_chars(name)
}

/// A DNS-1123 subdomain (an Ingress's or a Secret's name): at most 253
/// characters, labels joined by `.` (the API server bounds the whole, not
/// each label).
pub fn dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(label_chars)
}

/// `a-z`, `0-9` and `-`, not empty, starting and ending with a letter or digit.
fn label_chars(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A DNS-1035 label (a Service's name): a DNS-1123 label starting with a letter.
pub fn dns1035_label(name: &str) -> bool {
    dns1123_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase())
}

/// A Kubernetes name as a fairgate name: `.` becomes `_`. Callers join a
/// namespace (a DNS label: no `_`, no `.`) and a name with `_`, so two
/// objects never share a fairgate name. Names stay within 48 bytes (a
/// longer one keeps its start and gains a hash of the whole), leaving room
/// for the suffixes callers add within fairgate's 64.
pub fn policy_name(text: &str) -> String {
    let name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.len() <= 48 {
        return name;
    }
    // FNV-1a: stable across runs and platforms, so re-imports keep names.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}-{:08x}", &name[..39], hash as u32)
}

/// A name to check: what it names, the name, the rule and how it is said.
type Check = (&'static str, String, fn(&str) -> bool, &'static str);

/// Why an Ingress's names are not ones the API server would accept: its
/// namespace, its name, its TLS Secrets, its backends' Services and ports.
pub fn ingress_problem(ing: &Object) -> Option<String> {
    let mut checks: Vec<Check> = vec![
        ("namespace", ing.namespace.clone(), dns1123_label, LABEL),
        ("name", ing.name.clone(), dns1123_subdomain, SUBDOMAIN),
    ];
    if let Some(Value::Array(sections)) = ing.value.at("/spec/tls") {
        for secret in sections.iter().filter_map(|s| text(s, &["secretName"])) {
            checks.push(("secretName", secret, dns1123_subdomain, SUBDOMAIN));
        }
    }
    let mut ports = Vec::new();
    for backend in backends(ing) {
        let service =
            text(backend, &["service", "name"]).or_else(|| text(backend, &["serviceName"]));
        if let Some(service) = service {
            checks.push((Kind::Service.name(), service, dns1035_label, LABEL_1035));
        }
        let number = text(backend, &["service", "port", "number"]).or_else(|| {
            text(backend, &["servicePort"]).filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
        });
        ports.extend(number);
    }
    if let Some(port) = ports
        .into_iter()
        .find(|p| !p.parse::<u16>().is_ok_and(|n| n > 0))
    {
        return Some(format!(
            "Service port {port:?} is not a port from 1 to 65535"
        ));
    }
    checks
        .into_iter()
        .find(|(_, name, ok, _)| !ok(name))
        .map(|(what, name, _, rule)| {
            format!("{what} {name:?} is not {rule}, as the API server requires")
        })
}

/// Why an annotation's `NAMESPACE/NAME` names no Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("{0:?} is not NAMESPACE/NAME")]
    Unqualified(String),
    /// Names the API server would have refused.
    #[error(
        "{0:?} is not NAMESPACE/NAME with {label} and {subdomain}, as the API server requires",
        label = LABEL,
        subdomain = SUBDOMAIN
    )]
    Names(String),
}

/// A Secret named by an annotation as `NAMESPACE/NAME`: the pair, when
/// both are names the API server would accept.
pub fn secret_reference(reference: &str) -> Result<(String, String), ReferenceError> {
    match reference.split_once('/') {
        Some((ns, name)) if dns1123_label(ns) && dns1123_subdomain(name) => {
            Ok((ns.to_string(), name.to_string()))
        }
        Some(_) => Err(ReferenceError::Names(reference.to_string())),
        None => Err(ReferenceError::Unqualified(reference.to_string())),
    }
}

const LABEL: &str = "a DNS-1123 label (at most 63 of a-z, 0-9 and -)";
const SUBDOMAIN: &str = "a DNS-1123 subdomain (at most 253 of a-z, 0-9, - and .)";
const LABEL_1035: &str = "a DNS-1035 label (at most 63 of a-z, 0-9 and -, starting with a letter)";

/// Every backend of an Ingress: its rules' paths and its defaultBackend.
fn backends(ing: &Object) -> Vec<&Value> {
    let mut out = Vec::new();
    if let Some(Value::Array(rules)) = ing.value.at("/spec/rules") {
        for rule in rules {
            if let Some(Value::Array(paths)) = rule.at("/http/paths") {
                out.extend(paths.iter().filter_map(|p| p.get("backend")));
            }
        }
    }
    out.extend(ing.value.at("/spec/defaultBackend"));
    out
}

/// The name the routes of Ingress `namespace/name` start with (then `-N`).
pub fn route_prefix(namespace: &str, name: &str) -> String {
    policy_name(&format!("{namespace}_{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_the_api_server_checks_them() {
        for ok in ["shop", "a", "a-1", &"a".repeat(63)] {
            assert!(dns1123_label(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a.b",
            "..",
            "a/b",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(!dns1123_label(bad), "{bad}");
        }
        assert!(dns1123_subdomain("wildcard.dev.mydomain.com"));
        assert!(dns1123_subdomain(&"a".repeat(70)));
        assert!(dns1123_subdomain(&format!("{}ab", "a.".repeat(125))));
        for bad in [
            "..",
            "../../etc",
            "a..b",
            ".a",
            "a.",
            "a/b",
            &format!("{}ab", "a.".repeat(126)),
        ] {
            assert!(!dns1123_subdomain(bad), "{bad}");
        }
        assert!(dns1035_label("api-v1") && !dns1035_label("1api"));
        assert_eq!(
            secret_reference("shop/backend-ca"),
            Ok(("shop".into(), "backend-ca".into()))
        );
        assert!(secret_reference("shop/../../x").is_err());
        assert!(secret_reference("backend-ca").is_err());
        assert_eq!(
            secret_reference("backend-ca").unwrap_err().to_string(),
            "\"backend-ca\" is not NAMESPACE/NAME"
        );
        assert_eq!(
            secret_reference("Shop/ca").unwrap_err().to_string(),
            format!("\"Shop/ca\" is not NAMESPACE/NAME with {LABEL} and {SUBDOMAIN}, as the API server requires")
        );
    }
}
