//! Annotations fairgate answers its own way: each is reported, mapped as
//! nothing to do or approximated with the reason, and never withholds an
//! Ingress (none of them guards access; `satisfy: any` only loosens it).

use super::Verdict;

/// The annotations read here (without the prefix).
pub const KEYS: &[&str] = &[
    "connection-proxy-header",
    "enable-opentelemetry",
    "http2-push-preload",
    "modsecurity-snippet",
    "modsecurity-transaction-id",
    "opentelemetry-trust-incoming-span",
    "preserve-trailing-slash",
    "proxy-http-version",
    "proxy-ssl-ciphers",
    "proxy-ssl-protocols",
    "proxy-ssl-verify-depth",
    "satisfy",
    "ssl-ciphers",
    "ssl-prefer-server-ciphers",
    "upstream-hash-by-subset",
    "upstream-hash-by-subset-size",
];

/// What one of `KEYS` becomes; `modsecurity`: whether the Ingress turns
/// ModSecurity on (which withholds it, `enable-modsecurity`).
pub fn verdict(key: &str, value: &str, modsecurity: bool) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    let approximated = |s: &str| Verdict::Approximated(s.to_string());
    match (key, value.trim()) {
        ("modsecurity-snippet" | "modsecurity-transaction-id", _) if modsecurity => {
            Verdict::Unsupported("fairgate has no web application firewall (the Ingress is withheld)".into())
        }
        ("modsecurity-snippet" | "modsecurity-transaction-id", _) => {
            mapped("no effect without enable-modsecurity, as in ingress-nginx")
        }
        ("http2-push-preload", _) => mapped(
            "nothing to push: browsers dropped HTTP/2 server push (Chrome 106, Firefox 132) and nginx 1.25.1 removed it",
        ),
        ("enable-opentelemetry", _) => approximated(
            "fairgate traces all routes or none (the policy's telemetry section, OTLP); there is no switch per Ingress",
        ),
        ("opentelemetry-trust-incoming-span", _) => approximated(
            "fairgate continues an incoming W3C traceparent on every route; there is no switch per Ingress",
        ),
        ("ssl-ciphers", _) => approximated(
            "the TLS listener offers its library's modern suites (TLS 1.3, TLS 1.2 ECDHE with AES-GCM or \
             ChaCha20); a list per Ingress is not read",
        ),
        ("ssl-prefer-server-ciphers", _) => approximated(
            "the suite is chosen by the TLS library's (rustls) rules; a switch per Ingress is not read",
        ),
        ("proxy-ssl-ciphers", _) => approximated(
            "the backend connection offers the TLS library's modern suites; a list is not read",
        ),
        ("proxy-ssl-protocols", _) => approximated("TLS 1.2 and 1.3 are offered to the backend, never older versions"),
        ("proxy-ssl-verify-depth", _) => approximated(
            "the backend's chain is verified whatever its length (the verifier has no depth limit)",
        ),
        ("connection-proxy-header", _) => approximated(
            "fairgate keeps backend connections alive and writes Connection itself; the value is not sent",
        ),
        ("preserve-trailing-slash", "true") => mapped("the HTTPS redirect keeps the path as sent, trailing slash included"),
        ("preserve-trailing-slash", _) => approximated(
            "the HTTPS redirect keeps the path as sent: a trailing slash stays, where ingress-nginx removed it",
        ),
        ("proxy-http-version", "1.1") => mapped("fairgate speaks HTTP/1.1 to backends"),
        ("proxy-http-version", _) => approximated(
            "fairgate speaks HTTP/1.1 to backends (an HTTP/1.0 server answers it as 1.0)",
        ),
        ("satisfy", "any") => approximated(
            "a request must pass both the authentication and the address rules (satisfy all): clients that \
             passed only one are refused now, nothing is opened",
        ),
        ("satisfy", _) => mapped("authentication and address rules both apply, as satisfy all"),
        ("upstream-hash-by-subset", "true") => approximated(
            "each key reaches one endpoint, not a subset of them (rendezvous hashing)",
        ),
        ("upstream-hash-by-subset", _) => mapped("off: each key reaches one endpoint"),
        _ => approximated("no subsets: each key reaches one endpoint"),
    }
}
