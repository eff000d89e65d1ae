//! One translation, two doors: every case of the import corpus
//! (`tests/ingress-nginx/`) created in the API stand-in with `kubectl
//! create -f`, served by a controller-mode gateway, gives the policy that
//! `fairgate import ingress-nginx` writes from the same file: the same
//! routes, key for key, the same pools but for their targets (endpoint
//! addresses in the cluster, Service DNS names from the import) and the
//! same certificates but for where their PEM comes from.
//!
//! `legacy` is not fed through the cluster door: it is made of
//! `extensions/v1beta1` Ingresses, which no API server has served since
//! Kubernetes 1.22.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::cluster::*;
use common::doors::{complete_cluster, controller_configmap};
use common::kube_api::KubeApi;
use common::*;
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

const TOKEN: &str = "doors-admin-token-0123456789abcdef";

/// The policy's tree with what differs by door taken out: the listeners,
/// admin and store (the base's in the cluster), pool targets (and, from
/// the `cluster`, their `health_check: false`), and where certificates
/// come from.
fn comparable(doc: &Yaml, cluster: bool) -> Yaml {
    let mut doc = doc.clone();
    let Yaml::Hash(top) = &mut doc else {
        panic!("not a mapping: {doc:?}")
    };
    for key in ["admin", "store"] {
        top.remove(&Yaml::String(key.into()));
    }
    if let Some(Yaml::Hash(pools)) = top.get_mut(&Yaml::String("upstreams".into())) {
        for (_, pool) in pools.iter_mut() {
            if let Yaml::Hash(p) = pool {
                // Endpoints (unchecked: Kubernetes checks their readiness)
                // in the cluster, the Service's DNS name in a file.
                assert_eq!(
                    p.remove(&Yaml::String("health_check".into())),
                    cluster.then_some(Yaml::Boolean(false)),
                );
                p.remove(&Yaml::String("targets".into()));
                // Checked against a CA either way: a file or the Secret's PEM.
                for key in ["ca_file", "ca_pem"] {
                    if p.remove(&Yaml::String(key.into())).is_some() {
                        p.insert(Yaml::String("ca".into()), Yaml::Boolean(true));
                    }
                }
            }
        }
    }
    if let Some(Yaml::Hash(server)) = top.get_mut(&Yaml::String("server".into())) {
        server.remove(&Yaml::String("listen".into()));
        if let Some(Yaml::Hash(tls)) = server.get_mut(&Yaml::String("tls".into())) {
            tls.remove(&Yaml::String("listen".into()));
            if let Some(Yaml::Array(certs)) = tls.get_mut(&Yaml::String("certificates".into())) {
                for c in certs.iter_mut() {
                    if let Yaml::Hash(c) = c {
                        c.retain(|k, _| k.as_str() == Some("hosts"));
                    }
                }
            }
        }
    }
    doc
}

fn base(dir: &Path, pki: &Pki, configmap: Option<&str>) -> String {
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let configmap = configmap.map_or(String::new(), |c| format!("  configmap: {c}\n"));
    let _ = dir;
    format!(
        "server:\n  listen: [\"$LISTEN\"]\n  tls:\n    listen: \"{tls}\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}\n\
         admin: {{listen: \"$ADMIN\", token_env: FAIRGATE_TEST_ADMIN}}\n\
         store: {{kind: memory}}\n\
         default_limits: none\n\
         kubernetes:\n  watch_without_class: true\n  allow_local_endpoints: true\n  publish_address: [\"203.0.113.7\"]\n{configmap}",
        cert.display(),
        key.display(),
        tls = free_addr(),
    )
}

/// The cluster's part of the policy the gateway serves (`GET /v1/policy`'s
/// second document).
async fn served_policy(admin: SocketAddr) -> Yaml {
    let body: Value = client()
        .get(format!("http://{admin}/v1/policy"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = body["policy"].as_str().unwrap();
    let docs = YamlLoader::load_from_str(text).unwrap();
    assert_eq!(docs.len(), 2, "{text}");
    docs[1].clone()
}

async fn case(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "doors");
    let api = KubeApi::start();
    let kc = api.kubeconfig(dir.path());
    let manifest = format!("tests/ingress-nginx/{name}/ingress.yaml");
    kubectl(&kc, &["create", "-f", &manifest], None).expect("kubectl create -f the case");
    // Endpoints no request reaches: the policies are compared, not answers.
    complete_cluster(&api, &pki, &mut |_, _, port| {
        SocketAddr::from(([127, 0, 0, 9], 8000 + port))
    });
    let configmap = controller_configmap(&api);
    let options = GatewayOptions {
        env: vec![
            ("KUBECONFIG".into(), kc.display().to_string()),
            ("FAIRGATE_TEST_ADMIN".into(), TOKEN.into()),
        ],
        ..Default::default()
    };
    let gw = Gateway::start_with(&base(dir.path(), &pki, configmap.as_deref()), options).await;
    let cluster = comparable(&served_policy(gw.admin).await, true);

    let (text, _, _) = ingress_import::import_with(&["--replicas", "1", &manifest]);
    let redacted = fairgate::admin_api::redact(&text);
    let imported = comparable(&YamlLoader::load_from_str(&redacted).unwrap()[0], false);
    assert_eq!(
        cluster,
        imported,
        "case {name}: the doors differ\n{}",
        gw.logs()
    );
}

macro_rules! doors {
    ($($test:ident => $case:literal),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            case($case).await;
        }
    )*};
}

doors! {
    auth_through_both_doors => "auth",
    canary_through_both_doors => "canary",
    cors_through_both_doors => "cors",
    defaults_through_both_doors => "defaults",
    grpc_through_both_doors => "grpc",
    rate_limit_through_both_doors => "rate-limit",
    regex_host_through_both_doors => "regex-host",
    rewrite_through_both_doors => "rewrite",
    snippets_through_both_doors => "snippets",
    tls_through_both_doors => "tls",
    upstream_tls_through_both_doors => "upstream-tls",
}
