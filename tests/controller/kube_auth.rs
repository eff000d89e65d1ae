//! Controller mode and ingress-nginx's basic authentication: an Ingress
//! with `auth-type: basic` and `auth-secret` is served with the Secret's
//! htpasswd entries, the Secret is watched by name (a user removed from it
//! stops getting in), and a method name the base policy already has
//! withholds the Ingress.

use crate::common;

use std::time::Duration;

use common::cluster::*;
use common::*;
use serde_json::{json, Value};

const EVENTS: &str = "v1/events";

/// An Ingress of `shop` for `host` behind basic auth from Secret `secret`.
fn guarded(name: &str, host: &str, secret: &str) -> Value {
    let mut ing = shop_ingress(name, host, "/");
    ing["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": secret,
        "nginx.ingress.kubernetes.io/auth-realm": "Staff only",
    });
    ing
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b64}")
}

/// A GET of `/` on `host` with `authorization`: its status and
/// `WWW-Authenticate` (0 and empty when there was no answer).
async fn as_user(gw: &Gateway, host: &str, authorization: &str) -> (u16, String) {
    let request = client()
        .get(gw.url("/"))
        .header("host", host)
        .header("authorization", authorization);
    match request.send().await {
        Ok(r) => {
            let challenge = r
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            (r.status().as_u16(), challenge)
        }
        Err(_) => (0, String::new()),
    }
}

/// Polls until `user` gets `want` on `host`.
async fn becomes(gw: &Gateway, host: &str, user: (&str, &str), want: u16) -> bool {
    let auth = basic(user.0, user.1);
    eventually(Duration::from_secs(10), || {
        let auth = auth.clone();
        async move { as_user(gw, host, &auth).await.0 == want }
    })
    .await
}

#[tokio::test]
async fn basic_auth_from_a_watched_secret_is_served_and_follows_it() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(users("staff", &[ALICE, BOB]));
    api.apply(guarded("back-office", "office.example", "staff"));
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;

    let served = becomes(&gw, "office.example", ("alice", "wonderland"), 200).await;
    assert!(served, "not served:\n{}", gw.logs());
    let bob = basic("bob", "builder");
    assert_eq!(as_user(&gw, "office.example", &bob).await.0, 200);
    let challenge = "Basic realm=\"Staff only\", charset=\"UTF-8\"";
    for wrong in [
        basic("bob", "wonderland"),
        basic("mallory", "x"),
        String::new(),
    ] {
        let answer = as_user(&gw, "office.example", &wrong).await;
        assert_eq!(answer, (401, challenge.to_string()), "{wrong:?}");
    }

    // Refusals never reach the upstream.
    assert_eq!(echo.requests(), 2);

    // bob removed from the Secret, as an operator would: refused once the
    // controller has rebuilt, alice still in.
    kubectl(
        &kc,
        &["replace", "-f", "-"],
        Some(&users("staff", &[ALICE])),
    )
    .expect("kubectl replace");
    let removed = becomes(&gw, "office.example", ("bob", "builder"), 401).await;
    assert!(removed, "bob still gets in:\n{}", gw.logs());
    let alice = basic("alice", "wonderland");
    assert_eq!(as_user(&gw, "office.example", &alice).await.0, 200);
}

#[tokio::test]
async fn a_method_name_the_base_policy_has_withholds_the_ingress() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(users("staff", &[ALICE]));
    // The base keeps shop_taken-auth for bob alone; the Ingress whose
    // method would have that name must not replace it, nor use it.
    api.apply(guarded("taken", "taken.example", "staff"));
    api.apply(guarded("fine", "fine.example", "staff"));
    let base = base_policy("").replace(
        "default_limits: none\n",
        &format!(
            "default_limits: none\nauth:\n  methods:\n    shop_taken-auth: {{basic: {{htpasswd: \"{BOB}\\n\"}}}}\n"
        ),
    );
    let gw = controller(&base, &kc, "fairgate-0").await;
    let served = becomes(&gw, "fine.example", ("alice", "wonderland"), 200).await;
    assert!(served, "not served:\n{}", gw.logs());
    for user in [("alice", "wonderland"), ("bob", "builder")] {
        let auth = basic(user.0, user.1);
        assert_eq!(
            as_user(&gw, "taken.example", &auth).await.0,
            404,
            "{user:?}"
        );
    }
    let found = api.wait_for(Duration::from_secs(10), |api| {
        api.list(EVENTS, "shop").iter().any(|e| {
            e["involvedObject"]["name"] == "taken"
                && e["reason"] == "Withheld"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("kubernetes.name_taken: \"shop_taken-auth\""))
        })
    });
    assert!(found, "{:?}", api.list(EVENTS, "shop"));
}

#[tokio::test]
async fn an_ingress_names_a_base_method_and_its_keys_name_the_tenant() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    // The base's API keys (in a cluster: a Secret mounted as the keys
    // file); `printf %s key-acme-0001 | sha256sum`.
    let digest = {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"key-acme-0001");
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let base = base_policy("").replace(
        "default_limits: none\n",
        &format!(
            "default_limits: none\nauth:\n  methods:\n    partners: {{api_key: {{header: X-Api-Key, keys: \"keys: [{{sha256: {digest}, tenant: acme}}]\"}}}}\n\
             limits:\n  calls: {{scope: tenant, default: {{capacity: 2, rate: 1/h}}}}\n"
        ),
    );
    let mut ing = shop_ingress("partner-api", "partners.example", "/");
    ing["metadata"]["annotations"] = json!({
        "fairgate.dev/auth": "partners",
        "fairgate.dev/limits": "calls",
    });
    api.apply(ing);
    let mut unknown = shop_ingress("nobody", "nobody.example", "/");
    unknown["metadata"]["annotations"] = json!({"fairgate.dev/auth": "sso"});
    api.apply(unknown);
    // Another Ingress's own method is not the base's: naming it would put
    // this host behind that Ingress's users (and hand their passwords over).
    api.apply(users("staff", &[ALICE]));
    api.apply(guarded("office", "office.example", "staff"));
    let mut thief = shop_ingress("thief", "thief.example", "/");
    thief["metadata"]["annotations"] = json!({"fairgate.dev/auth": "shop_office-auth"});
    api.apply(thief);
    let gw = controller(&base, &kc, "fairgate-0").await;
    let ask = |key: &'static str, host: &'static str| {
        let request = client()
            .get(gw.url("/"))
            .header("host", host)
            .header("x-api-key", key);
        async move {
            request
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    let served = eventually(Duration::from_secs(10), || async {
        ask("key-acme-0001", "partners.example").await == 200
    })
    .await;
    assert!(served, "not served:\n{}", gw.logs());
    // acme's bucket of 2: the second request spends the last token.
    assert_eq!(ask("key-acme-0001", "partners.example").await, 200);
    assert_eq!(ask("key-acme-0001", "partners.example").await, 429);
    assert_eq!(ask("key-other", "partners.example").await, 401);
    assert_eq!(echo.requests(), 2);
    // A method the base lacks withholds that Ingress alone.
    assert_eq!(ask("key-acme-0001", "nobody.example").await, 404);
    let alice = basic("alice", "wonderland");
    assert_eq!(as_user(&gw, "office.example", &alice).await.0, 200);
    assert_eq!(as_user(&gw, "thief.example", &alice).await.0, 404);
}
