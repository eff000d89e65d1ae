//! The Gateway API conformance suite's four core GatewaySecret* tests
//! (kubernetes-sigs/gateway-api at 4564255,
//! `conformance/tests/gateway-secret-*.go`), ported one to one: an HTTPS
//! listener's certificate in another namespace, by a ReferenceGrant or
//! not; and fairgate's own check of a Secret whose key is not its
//! certificate's.

use crate::common;

use common::gateway_api::*;
use common::gateway_status::*;
use common::Pki;

/// The Gateway of the four GatewaySecret* tests: one HTTPS listener whose
/// certificate is `web-backend/certificate`.
fn secret_gateway(name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - name: https\n      port: 443\n      protocol: HTTPS\n      allowedRoutes: {{namespaces: {{from: All}}}}\n      tls:\n        certificateRefs:\n          - {{group: \"\", kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}}\n"
    )
}

/// A ReferenceGrant in `ns` from (group, kind, namespace) to (group,
/// kind, name: none for any). The suite writes them at `v1`, which the
/// standard CRD serves beside `v1beta1` (its storage version); the
/// stand-in serves `v1beta1`, the version fairgate watches.
fn grant(name: &str, ns: &str, from: (&str, &str, &str), to: (&str, &str, Option<&str>)) -> String {
    let to_name = to.2.map(|n| format!(", name: {n}")).unwrap_or_default();
    format!(
        "---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: \"{}\", kind: {}, namespace: {}}}]\n  to: [{{group: \"{}\", kind: {}{to_name}}}]\n",
        from.0, from.1, from.2, to.0, to.1
    )
}

const FROM_INFRA: (&str, &str, &str) = (GROUP, "Gateway", INFRA);
const REF_NOT_PERMITTED: Want = Want {
    name: "https",
    kinds: &["HTTPRoute"],
    conditions: &[("ResolvedRefs", "False", "RefNotPermitted")],
    attached: 0,
};
const PROGRAMMED: Want = Want {
    name: "https",
    kinds: &["HTTPRoute"],
    conditions: &[
        ("Programmed", "True", "Programmed"),
        ("ResolvedRefs", "True", ""),
    ],
    attached: 0,
};

/// Applies the Gateway `name` with `grants`, serves it, and waits for its
/// listener to be as `want`.
async fn secret_test(name: &str, grants: &str, want: Want) {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    suite_secrets(&c, &pki);
    c.apply(&format!("{}{grants}", secret_gateway(name)));
    let _gw = serve_tls(&c, name, &pki).await;
    must_have_listeners(&c, name, &[want]);
}

/// GatewaySecretMissingReferenceGrant
/// (`gateway-secret-missing-reference-grant.go`).
#[tokio::test]
async fn gateway_secret_missing_reference_grant() {
    secret_test(
        "gateway-secret-missing-reference-grant",
        "",
        REF_NOT_PERMITTED,
    )
    .await;
}

/// GatewaySecretInvalidReferenceGrant
/// (`gateway-secret-invalid-reference-grant.go`): seven grants, each
/// wrong in one place.
#[tokio::test]
async fn gateway_secret_invalid_reference_grant() {
    let secret = ("", "Secret", Some("certificate"));
    let grants = [
        grant("reference-grant-wrong-namespace", APP, FROM_INFRA, secret),
        grant(
            "reference-grant-wrong-from-group",
            WEB,
            ("not-the-group-youre-looking-for", "Gateway", INFRA),
            secret,
        ),
        grant(
            "reference-grant-wrong-from-kind",
            WEB,
            (GROUP, "HTTPRoute", INFRA),
            secret,
        ),
        grant(
            "reference-grant-wrong-from-namespace",
            WEB,
            (GROUP, "Gateway", "not-the-namespace-youre-looking-for"),
            secret,
        ),
        grant(
            "reference-grant-wrong-to-group",
            WEB,
            FROM_INFRA,
            (
                "not-the-group-youre-looking-for",
                "Secret",
                Some("not-the-certificate-youre-looking-for"),
            ),
        ),
        grant(
            "reference-grant-wrong-to-kind",
            WEB,
            FROM_INFRA,
            ("", "Service", Some("certificate")),
        ),
        grant(
            "reference-grant-wrong-to-name",
            WEB,
            FROM_INFRA,
            ("", "Secret", Some("not-the-certificate-youre-looking-for")),
        ),
    ];
    secret_test(
        "gateway-secret-invalid-reference-grant",
        &grants.concat(),
        REF_NOT_PERMITTED,
    )
    .await;
}

/// GatewaySecretReferenceGrantAllInNamespace
/// (`gateway-secret-reference-grant-all-in-namespace.go`).
#[tokio::test]
async fn gateway_secret_reference_grant_all_in_namespace() {
    let grants = grant(
        "reference-grant-all-in-namespace",
        WEB,
        FROM_INFRA,
        ("", "Secret", None),
    );
    secret_test(
        "gateway-secret-reference-grant-all-in-namespace",
        &grants,
        PROGRAMMED,
    )
    .await;
}

/// GatewaySecretReferenceGrantSpecific
/// (`gateway-secret-reference-grant-specific.go`).
#[tokio::test]
async fn gateway_secret_reference_grant_specific() {
    let grants = grant(
        "reference-grant-specific",
        WEB,
        FROM_INFRA,
        ("", "Secret", Some("certificate")),
    );
    secret_test(
        "gateway-secret-reference-grant-specific",
        &grants,
        PROGRAMMED,
    )
    .await;
}

/// Not a conformance test: a listener's Secret whose key is not its
/// certificate's (a half-rotated Secret, perhaps another team's through a
/// ReferenceGrant) is refused on that listener, as the build would refuse
/// it, and the Gateway's other listener and its route are served.
#[tokio::test]
async fn a_secret_whose_key_is_not_its_certificates_is_refused_on_its_listener_alone() {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    let (cert, _) = pki.leaf("a", "a", &["a.example"], "02");
    let (_, key) = pki.leaf("b", "b", &["b.example"], "03");
    let read = |p: std::path::PathBuf| std::fs::read(p).unwrap();
    c.api.apply(common::cluster::tls_secret(
        INFRA,
        "mixed",
        &read(cert),
        &read(key),
    ));
    let name = "gateway-mixed-secret";
    c.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - {{name: https, port: 443, protocol: HTTPS, tls: {{certificateRefs: [{{name: mixed}}]}}}}\n    - {{name: http, port: 80, protocol: HTTP}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: plain, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {name}, sectionName: http}}]\n  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]\n"
    ));
    let gw = serve_tls(&c, name, &pki).await;
    let refused = Want {
        name: "https",
        kinds: &["HTTPRoute"],
        conditions: &[
            ("ResolvedRefs", "False", "InvalidCertificateRef"),
            ("Programmed", "False", ""),
        ],
        attached: 0,
    };
    let http = Want {
        name: "http",
        kinds: &["HTTPRoute"],
        conditions: &[
            ("Accepted", "True", ""),
            ("ResolvedRefs", "True", ""),
            ("Programmed", "True", ""),
        ],
        attached: 1,
    };
    let status = must_have_listeners(&c, name, &[refused, http]);
    let https = status["status"]["listeners"].to_string();
    assert!(https.contains("key"), "the message says why: {https}");
    to(&gw, "example.com", "/", &[], "infra-backend-v1", INFRA).await;
}
