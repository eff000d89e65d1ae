//! The deployment kit as a newcomer reads it: what the Kubernetes Services
//! publish, what the image says it listens on, and what the ingress
//! controller may do against the API, read from the shipped files
//! (`scripts/lint-deploy` validates their schema in CI).

use std::collections::{BTreeMap, BTreeSet};

use yaml_rust2::{Yaml, YamlLoader};

fn documents(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    YamlLoader::load_from_str(&text).unwrap()
}

/// Each Service's name and the target ports it publishes.
fn services(path: &str) -> Vec<(String, BTreeSet<String>)> {
    documents(path)
        .iter()
        .filter(|d| d["kind"].as_str() == Some("Service"))
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            let ports = d["spec"]["ports"].as_vec().unwrap().iter();
            let targets = ports.map(|p| p["targetPort"].as_str().unwrap().to_string());
            (name, targets.collect())
        })
        .collect()
}

#[test]
fn finding_14_the_traffic_service_never_publishes_the_admin_port() {
    let services = services("deploy/kubernetes/service.yaml");
    let ports = |name: &str| {
        let found = services.iter().find(|(n, _)| n == name);
        found
            .unwrap_or_else(|| panic!("no Service {name}"))
            .1
            .clone()
    };
    assert_eq!(
        ports("fairgate"),
        BTreeSet::from(["http".into(), "https".into()])
    );
    assert_eq!(ports("fairgate-admin"), BTreeSet::from(["admin".into()]));
}

#[test]
fn finding_14_the_image_exposes_every_port_the_pod_listens_on() {
    let deployment = &documents("deploy/kubernetes/deployment.yaml")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let listened: BTreeSet<i64> = container["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let exposed: BTreeSet<i64> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|ports| ports.split_whitespace().map(|p| p.parse().unwrap()))
        .collect();
    assert_eq!(exposed, listened);
    assert_eq!(listened, BTreeSet::from([8080, 8443, 9090]));
}

const CONTROLLER: &str = "deploy/kubernetes/controller";

/// The one document of this kind and name in a controller kit file.
fn controller_object(file: &str, kind: &str, name: &str) -> Yaml {
    documents(&format!("{CONTROLLER}/{file}"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in {CONTROLLER}/{file}"))
}

fn strings(list: &Yaml) -> BTreeSet<String> {
    let items = list.as_vec().expect("a list").iter();
    items
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// What a Role or ClusterRole grants: for each "group/resource", its verbs.
/// A rule may not narrow by name or name non-resource URLs: the expected
/// sets below are the whole grant.
fn grants(role: &Yaml) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_vec().expect("rules") {
        let keys: BTreeSet<&str> = rule
            .as_hash()
            .unwrap()
            .keys()
            .filter_map(Yaml::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(["apiGroups", "resources", "verbs"]));
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let verbs = out.entry(format!("{group}/{resource}")).or_default();
                verbs.extend(strings(&rule["verbs"]));
            }
        }
    }
    out
}

fn expected(grants: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    let verbs = |v: &[&str]| v.iter().map(|v| v.to_string()).collect();
    grants
        .iter()
        .map(|(r, v)| (r.to_string(), verbs(v)))
        .collect()
}

/// Binds `role` (of `kind`) to the ServiceAccount ingress/fairgate.
fn assert_binds_the_controller(binding: &Yaml, kind: &str, role: &str) {
    assert_eq!(binding["roleRef"]["kind"].as_str(), Some(kind));
    assert_eq!(binding["roleRef"]["name"].as_str(), Some(role));
    let subjects = binding["subjects"].as_vec().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"].as_str(), Some("ServiceAccount"));
    assert_eq!(subjects[0]["name"].as_str(), Some("fairgate"));
    assert_eq!(subjects[0]["namespace"].as_str(), Some("ingress"));
}

#[test]
fn controller_cluster_role_grants_exactly_what_the_controller_does() {
    let role = controller_object("rbac.yaml", "ClusterRole", "fairgate-ingress-controller");
    const READ: &[&str] = &["get", "list", "watch"];
    assert_eq!(
        grants(&role),
        expected(&[
            ("networking.k8s.io/ingressclasses", READ),
            ("networking.k8s.io/ingresses", READ),
            ("/services", READ),
            ("/configmaps", READ),
            ("/secrets", READ),
            ("discovery.k8s.io/endpointslices", READ),
            ("networking.k8s.io/ingresses/status", &["update", "patch"]),
            ("/events", &["create", "patch"]),
        ])
    );
    let binding = controller_object(
        "rbac.yaml",
        "ClusterRoleBinding",
        "fairgate-ingress-controller",
    );
    assert_binds_the_controller(&binding, "ClusterRole", "fairgate-ingress-controller");
}

#[test]
fn controller_role_grants_only_its_lease_in_its_own_namespace() {
    let role = controller_object("rbac.yaml", "Role", "fairgate-leader-election");
    assert_eq!(role["metadata"]["namespace"].as_str(), Some("ingress"));
    assert_eq!(
        grants(&role),
        expected(&[("coordination.k8s.io/leases", &["get", "create", "update"])])
    );
    let binding = controller_object("rbac.yaml", "RoleBinding", "fairgate-leader-election");
    assert_eq!(binding["metadata"]["namespace"].as_str(), Some("ingress"));
    assert_binds_the_controller(&binding, "Role", "fairgate-leader-election");
}

#[test]
fn controller_service_never_publishes_the_admin_port() {
    let deployment = controller_object("deployment.yaml", "Deployment", "fairgate");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let container_port = |name: &str| {
        let mut ports = container["ports"].as_vec().unwrap().iter();
        let found = ports.find(|p| p["name"].as_str() == Some(name));
        found.unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
            .as_i64()
            .unwrap()
    };
    // The port the policy's admin listener is on, by its container port's name.
    let configmap = controller_object("configmap.yaml", "ConfigMap", "fairgate-policy");
    let policy = YamlLoader::load_from_str(configmap["data"]["fairgate.yaml"].as_str().unwrap());
    let admin_listen = policy.unwrap()[0]["admin"]["listen"]
        .as_str()
        .unwrap()
        .to_string();
    let admin_port: i64 = admin_listen.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(container_port("admin"), admin_port);

    let service = controller_object("service.yaml", "Service", "fairgate");
    assert_eq!(service["spec"]["type"].as_str(), Some("LoadBalancer"));
    let published: BTreeMap<i64, i64> = service["spec"]["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                container_port(p["targetPort"].as_str().unwrap()),
            )
        })
        .collect();
    assert_eq!(published, BTreeMap::from([(80, 8080), (443, 8443)]));
    assert!(!published.values().any(|p| *p == admin_port));

    // The admin port has its own Service, inside the cluster only.
    let admin = controller_object("service.yaml", "Service", "fairgate-admin");
    assert_eq!(admin["spec"]["type"].as_str(), Some("ClusterIP"));
    let services = services(&format!("{CONTROLLER}/service.yaml"));
    let targets = services
        .iter()
        .find(|(n, _)| n == "fairgate-admin")
        .unwrap();
    assert_eq!(targets.1, BTreeSet::from(["admin".into()]));
}

#[test]
fn controller_deployment_names_its_pod_from_the_downward_api() {
    let deployment = controller_object("deployment.yaml", "Deployment", "fairgate");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"].as_str(), Some("fairgate"));
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(true));
    let env = pod["containers"][0]["env"].as_vec().unwrap();
    let field = |name: &str| {
        let var = env.iter().find(|e| e["name"].as_str() == Some(name));
        let var = var.unwrap_or_else(|| panic!("no env {name}"));
        assert!(var["value"].is_badvalue(), "{name} has a literal value");
        var["valueFrom"]["fieldRef"]["fieldPath"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
    assert_eq!(
        field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
}

/// Issue 39, item 1: the image's build stage sees exactly what its `COPY`
/// lines bring (less `.dockerignore`), and cargo accepts that manifest
/// there. `cargo fetch --locked --offline` parses every target the
/// manifest names, as `docker build`'s `cargo build --locked` does first,
/// without compiling; `.ci/run` builds the staged context too.
#[test]
fn item_1_the_image_build_context_holds_every_target_cargo_names() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let context = dir.path().join("context");
    let staged = std::process::Command::new(format!("{root}/scripts/docker-context"))
        .arg(&context)
        .output()
        .expect("run scripts/docker-context (needs python3)");
    assert!(staged.status.success(), "{staged:?}");
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "src/main.rs",
        "lua/slots.lua",
        "config/demo.yaml",
    ] {
        assert!(context.join(file).is_file(), "the build stage lacks {file}");
    }
    assert!(
        !context.join("tests").exists(),
        ".dockerignore keeps tests/ out"
    );
    let host = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .unwrap();
    let host = String::from_utf8(host.stdout).unwrap();
    let host = host.lines().find_map(|l| l.strip_prefix("host: ")).unwrap();
    let fetch = std::process::Command::new(env!("CARGO"))
        .args(["fetch", "--locked", "--offline", "--target", host])
        .current_dir(&context)
        .output()
        .unwrap();
    assert!(
        fetch.status.success(),
        "cargo refuses the image's build context:\n{}",
        String::from_utf8_lossy(&fetch.stderr)
    );
}
