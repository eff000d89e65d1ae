//! The deployment kit as a newcomer reads it: what the Kubernetes Services
//! publish and what the image says it listens on, read from the shipped
//! files (`scripts/lint-deploy` validates their schema in CI).

use std::collections::BTreeSet;

use yaml_rust2::{Yaml, YamlLoader};

fn documents(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    YamlLoader::load_from_str(&text).unwrap()
}

/// Each Service's name and the target ports it publishes.
fn services() -> Vec<(String, BTreeSet<String>)> {
    documents("deploy/kubernetes/service.yaml")
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
    let services = services();
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
