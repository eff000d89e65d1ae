//! `routes[].error_pages` (ingress-nginx `custom-http-errors` with its
//! default backend): a listed status from the application is replaced by
//! the error pool's page, which gets the headers ingress-nginx's error
//! backends read; other statuses, and requests with a body, pass as the
//! application answered.

use crate::common;

use common::*;

/// The application and the error pages, two echo processes.
async fn gateway(app: &EchoProcess, pages: &EchoProcess) -> Gateway {
    Policy::new()
        .sections(&format!(
            r#"
upstreams: {{app: {{targets: ["{}"]}}, pages: {{targets: ["{}"]}}}}
routes:
  - name: shop
    match: {{path_prefix: /}}
    upstream: app
    auth: none
    exempt: true
    error_pages: {{codes: [404, 503], upstream: pages, headers: {{X-Namespace: shop, X-Ingress-Name: web}}}}
"#,
            app.addr, pages.addr
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_status_is_answered_by_the_error_pool() {
    let (app, pages) = (
        EchoProcess::start_as([127, 7, 0, 1], "app", "shop"),
        EchoProcess::start_as([127, 7, 0, 2], "pages", "shop"),
    );
    let gw = gateway(&app, &pages).await;
    let c = client();
    let r = c
        .get(gw.url("/missing/item?status=404&x=1"))
        .header("accept", "application/json")
        .header("x-request-id", "0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap();
    // The error pool's answer (its echo), to a GET of the same target.
    assert_eq!(
        r.status(),
        404,
        "the pool answers the status it was asked for"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["pod"], "pages");
    assert_eq!(
        (body["method"].as_str(), body["path"].as_str()),
        (Some("GET"), Some("/missing/item"))
    );
    let h = |name: &str| body["headers"][name][0].as_str().map(str::to_string);
    assert_eq!(h("x-code").as_deref(), Some("404"));
    assert_eq!(h("x-format").as_deref(), Some("application/json"));
    assert_eq!(
        h("x-original-uri").as_deref(),
        Some("/missing/item?status=404&x=1")
    );
    assert_eq!(
        h("x-request-id").as_deref(),
        Some("0123456789abcdef0123456789abcdef")
    );
    assert_eq!(
        (h("x-namespace").as_deref(), h("x-ingress-name").as_deref()),
        (Some("shop"), Some("web"))
    );
    assert_eq!((app.requests(), pages.requests()), (1, 1));
    // Another status, and a request with a body: the application's answer.
    let r = c.get(gw.url("/x?status=500")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["pod"], "app");
    let r = c
        .post(gw.url("/x?status=404"))
        .body("order=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["pod"], "app");
    assert_eq!((app.requests(), pages.requests()), (3, 1));
}
