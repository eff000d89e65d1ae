//! `proxy-ssl-secret`, `proxy-ssl-verify`, `proxy-ssl-name` and
//! `proxy-ssl-server-name`: how the gateway checks a TLS backend
//! (`backend-protocol: HTTPS` or `GRPCS`). A backend ingress-nginx verified
//! is verified here too, against the same CA and name, or its Ingress is
//! withheld; it is never served unverified.

use std::collections::BTreeMap;

use super::backend::Protocol;
use super::draft::Draft;
use super::names;
use super::plan::Plan;
use super::Verdict;

/// The annotations this module reads (without the prefix).
pub const KEYS: &[&str] = &[
    "proxy-ssl-name",
    "proxy-ssl-secret",
    "proxy-ssl-server-name",
    "proxy-ssl-verify",
];

/// Reads the `proxy-ssl-*` annotations into `plan.verify`, one line each.
pub fn read(
    draft: &Draft<'_>,
    namespace: &str,
    protocol: Protocol,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let present = super::annotations::present(KEYS, ann);
    if present.is_empty() {
        return;
    }
    if !matches!(protocol, Protocol::Https | Protocol::Grpcs) {
        let why = "no effect: the backend is spoken to without TLS (backend-protocol HTTP or GRPC), as in ingress-nginx";
        lines.extend(
            present
                .iter()
                .map(|k| (k.to_string(), Verdict::Mapped(why.into()))),
        );
        return;
    }
    // ingress-nginx reads proxy-ssl-verify as on or off, anything else off.
    let verify = ann.get("proxy-ssl-verify").map(String::as_str) == Some("on");
    plan.verify.on = verify;
    if let Some(reference) = ann.get("proxy-ssl-secret") {
        lines.push((
            "proxy-ssl-secret".into(),
            secret(draft, namespace, reference, verify, plan),
        ));
    }
    if let Some(value) = ann.get("proxy-ssl-verify") {
        let secret = ann.contains_key("proxy-ssl-secret");
        lines.push(("proxy-ssl-verify".into(), verify_line(value, secret, plan)));
    }
    if let Some(name) = ann.get("proxy-ssl-name") {
        lines.push(("proxy-ssl-name".into(), server_name(name, plan)));
    }
    if let Some(value) = ann.get("proxy-ssl-server-name") {
        let verdict = match value.as_str() {
            "on" => Verdict::Mapped("fairgate always sends the server name (sni)".into()),
            _ => Verdict::Approximated(
                "fairgate always sends the server name (sni); ingress-nginx sent none".into(),
            ),
        };
        lines.push(("proxy-ssl-server-name".into(), verdict));
    }
}

/// `proxy-ssl-secret: NAMESPACE/NAME`: its `ca.crt` as `ca_file`.
fn secret(
    draft: &Draft<'_>,
    namespace: &str,
    reference: &str,
    verify: bool,
    plan: &mut Plan,
) -> Verdict {
    let (ns, name) = match names::secret_reference(reference) {
        Ok(pair) => pair,
        // ingress-nginx denies every location of the Ingress (503).
        Err(why) => return Verdict::Unsupported(why.to_string()),
    };
    if ns != namespace {
        let why = format!("a Secret of namespace {ns}, not the Ingress's {namespace}: ingress-nginx refuses it by default");
        return Verdict::Unsupported(why);
    }
    if draft.options.cluster {
        return cluster_ca(draft, &ns, &name, verify, plan);
    }
    let ca = format!("{}/{ns}/{name}/ca.crt", draft.options.tls_dir);
    let client = "its tls.crt and tls.key, which ingress-nginx presented to the backend as a client \
                  certificate, are not: fairgate presents none, so a backend that requires one refuses the gateway";
    if !verify {
        return Verdict::Approximated(format!(
            "without proxy-ssl-verify: on ingress-nginx checked nothing against its ca.crt, nor does fairgate \
             (tls_verify: false); {client}"
        ));
    }
    plan.verify.ca_file = Some(ca.clone());
    Verdict::Approximated(format!(
        "ca_file {ca}: the Secret's ca.crt must be mounted there, as the TLS certificates are; {client}"
    ))
}

/// Controller mode: the Secret's `ca.crt` itself, as `ca_pem`.
fn cluster_ca(draft: &Draft<'_>, ns: &str, name: &str, verify: bool, plan: &mut Plan) -> Verdict {
    let secret = draft.secret(ns, name);
    let Some(ca) = secret.and_then(|s| super::tls::secret_field(s, "ca.crt")) else {
        return Verdict::Unsupported(format!("Secret {ns}/{name} is missing or has no ca.crt"));
    };
    // Its tls.crt and tls.key, when it has them, are shown to the backend,
    // as ingress-nginx's proxy_ssl_certificate does.
    plan.verify.client = secret.and_then(super::tls::secret_pem);
    let client = match plan.verify.client {
        Some(_) => "its tls.crt and tls.key are the client certificate shown to the backend",
        None => {
            "it holds no tls.crt and tls.key: no client certificate is shown, as in ingress-nginx"
        }
    };
    if !verify {
        return Verdict::Mapped(format!(
            "without proxy-ssl-verify nothing is checked, as in ingress-nginx; {client}"
        ));
    }
    plan.verify.ca_pem = Some(ca);
    Verdict::Mapped(format!("ca.crt of Secret {ns}/{name}; {client}"))
}

fn verify_line(value: &str, secret: bool, plan: &Plan) -> Verdict {
    match (plan.verify.on, &plan.verify.ca_file) {
        (true, None) if secret => Verdict::Mapped("tls_verify: true, against proxy-ssl-secret's CA".into()),
        (true, Some(ca)) => Verdict::Mapped(format!(
            "tls_verify: true, against ca_file {ca}; the name checked is proxy-ssl-name, else the pool's sni \
             (the Service's DNS name)"
        )),
        // Without a Secret ingress-nginx drops every proxy-ssl-* setting and
        // verifies nothing; the annotation asked for verification, so the
        // pool verifies against the system's roots (fails closed, 502)
        // rather than trust any certificate.
        (true, None) => Verdict::Approximated(
            "tls_verify: true, against the system's roots: without proxy-ssl-secret ingress-nginx ignored \
             every proxy-ssl-* annotation and verified nothing, but the annotation asks for verification; \
             a backend certificate the system's roots do not sign gets 502 (give proxy-ssl-secret with its CA)"
                .into(),
        ),
        (false, _) if value == "off" => Verdict::Mapped("tls_verify: false, as in ingress-nginx".into()),
        (false, _) => Verdict::Mapped(format!(
            "{value:?} is not on or off: off, as ingress-nginx reads it (tls_verify: false)"
        )),
    }
}

/// `proxy-ssl-name`: the name sent and checked, as `sni`.
fn server_name(name: &str, plan: &mut Plan) -> Verdict {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if !ok {
        return Verdict::Unsupported(format!("{name:?} is not a host name"));
    }
    plan.verify.sni = Some(name.to_ascii_lowercase());
    Verdict::Mapped(
        "sni: the name sent in the handshake and checked against the certificate".into(),
    )
}
