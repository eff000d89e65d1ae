//! The Gateway API conformance suite's extended redirect and rewrite
//! tests (kubernetes-sigs/gateway-api at 4564255, `conformance/tests/`):
//! HTTPRouteRedirectScheme, HTTPRouteRedirectPort, HTTPRouteRedirectPath,
//! HTTPRoute307Redirect, HTTPRoute308Redirect, HTTPRouteRewriteHost and
//! HTTPRouteRewritePath, ported one to one. A
//! redirect's `Location` is compared as the suite compares it: parsed
//! against the request's URL, by scheme, host (when the case names one),
//! port (none meaning the scheme's) and path.

use crate::common;

use common::gateway_api::*;
use common::Gateway;

const ROUTES: &str = "httproutes";
const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";

/// A redirect the suite expects: the request's path, the status, and the
/// `Location`'s scheme, host (empty: any), port and path.
type Redirect = (
    &'static str,
    u16,
    &'static str,
    &'static str,
    u16,
    &'static str,
);

/// Serves `manifest`'s route `name` on `same-namespace` and checks each
/// redirect, each seen three times in a row.
async fn redirects(manifest: &str, name: &str, cases: &[Redirect]) {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(manifest);
    c.accepted(ROUTES, INFRA, name, "same-namespace", "True");
    for case in cases {
        redirected(&gw, case).await;
    }
}

async fn redirected(gw: &Gateway, case: &Redirect) {
    let (path, code, scheme, host, port, to) = *case;
    let got = status(gw, "example.com", path, &[], code).await;
    let location = got.location.clone().unwrap_or_default();
    let base = reqwest::Url::parse(&format!("http://example.com{path}")).unwrap();
    let url = base
        .join(&location)
        .unwrap_or_else(|e| panic!("{path}: Location {location:?}: {e}"));
    let host_ok = host.is_empty() || url.host_str() == Some(host);
    let ok = url.scheme() == scheme
        && host_ok
        && url.port_or_known_default() == Some(port)
        && url.path() == to;
    assert!(
        ok,
        "{path}: Location {location:?}, want {scheme}://{host}:{port}{to}"
    );
}

const REDIRECT_SCHEME: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: redirect-scheme
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches: [{path: {type: PathPrefix, value: /scheme}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: "https"}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, scheme: "https"}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: "https", statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: "https", statusCode: 302, hostname: example.org}}]
"#;

/// HTTPRouteRedirectScheme (`httproute-redirect-scheme.go`).
#[tokio::test]
async fn httproute_redirect_scheme() {
    let cases: &[Redirect] = &[
        ("/scheme", 302, "https", "", 443, "/scheme"),
        (
            "/scheme-and-host",
            302,
            "https",
            "example.org",
            443,
            "/scheme-and-host",
        ),
        (
            "/scheme-and-status",
            301,
            "https",
            "",
            443,
            "/scheme-and-status",
        ),
        (
            "/scheme-and-host-and-status",
            302,
            "https",
            "example.org",
            443,
            "/scheme-and-host-and-status",
        ),
    ];
    redirects(REDIRECT_SCHEME, "redirect-scheme", cases).await;
}

const REDIRECT_PORT: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: redirect-port
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, port: 8083}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, hostname: example.org, statusCode: 302}}]
"#;

/// HTTPRouteRedirectPort (`httproute-redirect-port.go`).
#[tokio::test]
async fn httproute_redirect_port() {
    let cases: &[Redirect] = &[
        ("/port", 302, "http", "", 8083, "/port"),
        (
            "/port-and-host",
            302,
            "http",
            "example.org",
            8083,
            "/port-and-host",
        ),
        (
            "/port-and-status",
            301,
            "http",
            "",
            8083,
            "/port-and-status",
        ),
        (
            "/port-and-host-and-status",
            302,
            "http",
            "example.org",
            8083,
            "/port-and-host-and-status",
        ),
    ];
    redirects(REDIRECT_PORT, "redirect-port", cases).await;
}

const REDIRECT_PATH: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: redirect-path
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}}]
  - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
  - matches: [{path: {type: PathPrefix, value: /path-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /full-path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}}]
  - matches: [{path: {type: PathPrefix, value: /full-path-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301}}]
"#;

const REDIRECT_307: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: 307-redirect, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /temporary}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 307}}]
"#;

/// HTTPRoute307Redirect (extended: HTTPRoute307RedirectStatusCode),
/// `httproute-307-redirect.go`.
#[tokio::test]
async fn httproute_307_redirect() {
    let cases: &[Redirect] = &[("/temporary", 307, "http", "", 80, "/temporary")];
    redirects(REDIRECT_307, "307-redirect", cases).await;
}

const REDIRECT_308: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: 308-redirect, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /permanent}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 308}}]
"#;

/// HTTPRoute308Redirect (extended: HTTPRoute308RedirectStatusCode),
/// `httproute-308-redirect.go`.
#[tokio::test]
async fn httproute_308_redirect() {
    let cases: &[Redirect] = &[("/permanent", 308, "http", "", 80, "/permanent")];
    redirects(REDIRECT_308, "308-redirect", cases).await;
}

/// HTTPRouteRedirectPath (`httproute-redirect-path.go`).
#[tokio::test]
async fn httproute_redirect_path() {
    let cases: &[Redirect] = &[
        (
            "/original-prefix/lemon",
            302,
            "http",
            "",
            80,
            "/replacement-prefix/lemon",
        ),
        (
            "/full/path/original",
            302,
            "http",
            "",
            80,
            "/full-path-replacement",
        ),
        (
            "/path-and-host",
            302,
            "http",
            "example.org",
            80,
            "/replacement-prefix",
        ),
        (
            "/path-and-status",
            301,
            "http",
            "",
            80,
            "/replacement-prefix",
        ),
        (
            "/full-path-and-host",
            302,
            "http",
            "example.org",
            80,
            "/replacement-full",
        ),
        (
            "/full-path-and-status",
            301,
            "http",
            "",
            80,
            "/replacement-full",
        ),
    ];
    redirects(REDIRECT_PATH, "redirect-path", cases).await;
}

/// The suite's header edits beside a rewrite, and what the backend sees.
const EDITS: &str = "{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}], add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}], remove: [X-Header-Remove]}}";

fn edited(got: &Exchange) {
    let header = |name: &str| got.headers.get(name).map(String::as_str);
    assert_eq!(header("x-header-add"), Some("header-val-1"), "{got:?}");
    assert_eq!(
        header("x-header-add-append"),
        Some("append-val-1,header-val-2"),
        "{got:?}"
    );
    assert_eq!(
        header("x-header-set"),
        Some("set-overwrites-values"),
        "{got:?}"
    );
    assert_eq!(header("x-header-remove"), None, "{got:?}");
}

/// A 200 from `backend` whose backend got `seen`.
async fn rewritten(
    gw: &Gateway,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    backend: &str,
    seen: &str,
) -> Exchange {
    let want = Expect {
        host,
        path,
        headers,
        status: 200,
        backend,
        namespace: INFRA,
        seen,
        ..Expect::default()
    };
    expect(gw, &want).await
}

/// HTTPRouteRewriteHost (`httproute-rewrite-host.go`).
#[tokio::test]
async fn httproute_rewrite_host() {
    let manifest = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: rewrite-host, namespace: gateway-conformance-infra}}\nspec:\n  hostnames: [\"rewrite.example\"]\n  parentRefs: [{{name: same-namespace}}]\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: /one}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{hostname: one.example.org}}}}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n  - filters: [{{type: URLRewrite, urlRewrite: {{hostname: example.org}}}}]\n    backendRefs: [{{name: infra-backend-v2, port: 8080}}]\n  - matches: [{{path: {{type: PathPrefix, value: /rewrite-host-and-modify-headers}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{hostname: test.example.org}}}}, {EDITS}]\n    backendRefs: [{{name: infra-backend-v2, port: 8080}}]\n"
    );
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(&manifest);
    c.accepted(ROUTES, INFRA, "rewrite-host", "same-namespace", "True");
    let host = "rewrite.example";
    let got = to(&gw, host, "/one", &[], V1, INFRA).await;
    assert_eq!(got.host, "one.example.org");
    let got = to(&gw, host, "/two", &[], V2, INFRA).await;
    assert_eq!(got.host, "example.org");
    let path = "/rewrite-host-and-modify-headers";
    let sent = [
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
    ];
    let got = to(&gw, host, path, &sent, V2, INFRA).await;
    assert_eq!(got.host, "test.example.org");
    edited(&got);
}

/// HTTPRouteRewritePath (`httproute-rewrite-path.go`).
#[tokio::test]
async fn httproute_rewrite_path() {
    let manifest = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: rewrite-path, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: same-namespace}}]\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: /prefix/one}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /one}}}}}}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n  - matches: [{{path: {{type: PathPrefix, value: /strip-prefix}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}}}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n  - matches: [{{path: {{type: PathPrefix, value: /full/one}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /one}}}}}}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n  - matches: [{{path: {{type: PathPrefix, value: /full/rewrite-path-and-modify-headers}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /test}}}}}}, {EDITS}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n  - matches: [{{path: {{type: PathPrefix, value: /prefix/rewrite-path-and-modify-headers}}}}]\n    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /prefix}}}}}}, {EDITS}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
    );
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(&manifest);
    c.accepted(ROUTES, INFRA, "rewrite-path", "same-namespace", "True");
    let host = "example.com";
    for (path, seen) in [
        ("/prefix/one/two", "/one/two"),
        ("/strip-prefix/three", "/three"),
        ("/strip-prefix", "/"),
        ("/full/one/two", "/one"),
    ] {
        rewritten(&gw, host, path, &[], V1, seen).await;
    }
    let sent = [
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Set", "set-val"),
    ];
    for (path, seen) in [
        ("/full/rewrite-path-and-modify-headers/test", "/test"),
        ("/prefix/rewrite-path-and-modify-headers/one", "/prefix/one"),
    ] {
        edited(&rewritten(&gw, host, path, &sent, V1, seen).await);
    }
}
