//! The stand-in holds custom resources to their CRDs as the API server
//! does (`common::kube_api::schema`): the Gateway API's standard-channel
//! CRDs vendored under tests/fixtures/gateway-api-crds/ and fairgate's own
//! RoutePolicy CRD. A tenant's `kubectl apply` of what a real API server
//! refuses is refused, in its words and naming each field; what it
//! defaults is defaulted; what it prunes is pruned.

use crate::common;

use common::kube_api::{KubeApi, Kubectl, Ran};
use serde_json::Value;

struct Cluster {
    api: KubeApi,
    _dir: tempfile::TempDir,
    k: Kubectl,
}

fn cluster() -> Cluster {
    let api = KubeApi::start();
    let dir = tempfile::tempdir().unwrap();
    let k = api.kubectl(dir.path());
    Cluster { api, _dir: dir, k }
}

impl Cluster {
    /// `kubectl apply -n team-a -f -` as a tenant runs it.
    fn apply(&self, yaml: &str, extra: &[&str]) -> Ran {
        let mut args = vec!["apply", "-n", "team-a", "-f", "-"];
        args.extend_from_slice(extra);
        self.k.run(&args, yaml)
    }

    fn refused(&self, yaml: &str) -> String {
        let ran = self.apply(yaml, &[]);
        assert_ne!(ran.code, 0, "accepted: {}\n{yaml}", ran.stdout);
        ran.stderr
    }

    fn stored(&self, gvr: &str, name: &str) -> Value {
        self.api.get(gvr, "team-a", name).expect("stored")
    }
}

const ROUTES: &str = "gateway.networking.k8s.io/v1/httproutes";

/// Every CEL rule of the vendored CRDs parses, and every function they
/// call is one evaluated here, in Kubernetes' meaning: so no rule is
/// refused (or let through) for want of a function in the stand-in.
#[test]
fn every_cel_rule_of_the_crds_parses_and_each_function_it_calls_works() {
    let (count, broken) = common::kube_api::crd_rules_compiled();
    assert!(count > 100, "only {count} rules found");
    assert!(broken.is_empty(), "{broken:#?}");
    let probes = [
        ("all", "[1, 2].all(x, x > 0)"),
        ("exists", "[1, 2].exists(x, x == 2)"),
        (
            "exists_one",
            "[1, 2, 2].exists_one(x, x == 1) && ![2, 2].exists_one(x, x == 2)",
        ),
        ("filter", "[1, 2, 3].filter(x, x > 1).size() == 2"),
        ("has", "has(self.a) && !has(self.b)"),
        (
            "size",
            "size('añb') == 3 && 'añb'.size() == 3 && size([1]) == 1",
        ),
        (
            "matches",
            r#"'abc'.matches(r"""^a[b-c]+$""") && !'abc'.matches('^b')"#,
        ),
        ("startsWith", "'/x'.startsWith('/')"),
        ("endsWith", "'/x/..'.endsWith('/..')"),
        ("contains", "'a//b'.contains('//')"),
        (
            "split",
            r#"'example.com/x'.split("/")[0] == 'example.com' && 'a'.split('/').size() == 1"#,
        ),
        (
            "duration",
            "duration('1h1m') > duration('61m') == false && duration('0s') == duration('0s')",
        ),
    ];
    let this = serde_json::json!({"a": 1});
    for (_, expr) in probes {
        assert_eq!(common::kube_api::eval_cel(expr, &this), Ok(true), "{expr}");
    }
    let probed: std::collections::BTreeSet<String> =
        probes.iter().map(|(f, _)| f.to_string()).collect();
    let called = common::kube_api::crd_rule_functions();
    let unprobed: Vec<&String> = called.difference(&probed).collect();
    assert!(
        unprobed.is_empty(),
        "called by the CRDs, not probed: {unprobed:?}"
    );
}

#[test]
fn a_tenant_apply_the_api_server_would_refuse_is_refused_field_by_field() {
    let c = cluster();
    let enum_and_bounds = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bad}
spec:
  parentRefs: [{name: edge}]
  rules:
  - matches: [{path: {type: Glob, value: /x}}]
    filters: [{type: RequestHeaderModifier}]
    backendRefs: [{name: web, port: 70000}]
"#;
    let said = c.refused(enum_and_bounds);
    for expected in [
        r#"The HTTPRoute "bad" is invalid"#,
        r#"spec.rules[0].matches[0].path.type: Unsupported value: "Glob": supported values: "Exact", "PathPrefix", "RegularExpression""#,
        "spec.rules[0].backendRefs[0].port: Invalid value: 70000: spec.rules[0].backendRefs[0].port in body should be less than or equal to 65535",
        // After an unsupported value, as the API server does, no CEL rule runs.
        "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid",
    ] {
        assert!(said.contains(expected), "{expected}\n{said}");
    }
    assert!(!said.contains("filter.requestHeaderModifier"), "{said}");
    // Alone, the filter without its field fails the CRD's CEL rule.
    let said = c.refused(
        &enum_and_bounds
            .replace("Glob", "Exact")
            .replace("70000", "80"),
    );
    let expected = "spec.rules[0].filters[0]: Invalid value: \"object\": filter.requestHeaderModifier must be specified for RequestHeaderModifier filter.type";
    assert!(said.contains(expected), "{expected}\n{said}");
    // Names: a custom resource's is a DNS subdomain.
    let said = c.refused(&enum_and_bounds.replace("name: bad", "name: Bad_Name"));
    assert!(
        said.contains("metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"),
        "{said}"
    );
    // A field no version of the CRD has: kubectl's strict validation.
    let unknown = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: typo}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRef: [{name: web, port: 80}]}]
"#;
    let said = c.refused(unknown);
    assert!(
        said.contains(r#"strict decoding error: unknown field "spec.rules[0].backendRef""#),
        "{said}"
    );
    assert!(c.api.list(ROUTES, "team-a").is_empty());
}

#[test]
fn twin_listeners_a_bad_address_and_a_negative_queue_are_refused() {
    let c = cluster();
    // Two listeners of one name: the list's key, and the CRD's CEL rule.
    let twins = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: twins}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: web, port: 80, protocol: HTTP}
  - {name: web, port: 8080, protocol: HTTP}
  addresses: [{type: IPAddress, value: 300.1.2.3}]
"#;
    let said = c.refused(twins);
    for expected in [
        r#"spec.listeners[1]: Duplicate value: map[string]interface {}{"name":"web"}"#,
        "spec.listeners: Invalid value: \"array\": Listener name must be unique within the Gateway",
        "spec.addresses[0]: Invalid value: \"object\": spec.addresses[0] in body must validate one and only one schema (oneOf)",
    ] {
        assert!(said.contains(expected), "{expected}\n{said}");
    }
    // fairgate's own CRD: a negative queue.
    let policy = r#"
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: greedy}
spec: {fairShare: {maxInFlight: 8, perTenant: -1}}
"#;
    let said = c.refused(policy);
    assert!(
        said.contains("in body should be greater than or equal to 0"),
        "{said}"
    );
    assert!(c
        .api
        .list("gateway.networking.k8s.io/v1/gateways", "team-a")
        .is_empty());
}

/// A CEL rule reads a property named by a CEL keyword as Kubernetes
/// escapes it (`namespace` is `__namespace__`): two parentRefs to Gateways
/// of one name in two namespaces are two parents; twice the same one is not.
#[test]
fn a_rule_reads_escaped_property_names_as_kubernetes_escapes_them() {
    let c = cluster();
    let route = |second: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
             metadata: {{name: twice}}\nspec:\n  parentRefs: [{{name: edge, namespace: infra}}, {{name: edge, namespace: {second}}}]\n"
        )
    };
    let said = c.refused(&route("infra"));
    assert!(said.contains("sectionName must be unique when parentRefs includes 2 or more references to the same parent"), "{said}");
    let ran = c.apply(&route("other"), &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // `null` where the schema is nullable is a value, not a wrong type.
    let policy = "apiVersion: fairgate.dev/v1alpha1\nkind: RoutePolicy\nmetadata: {name: open}\nspec: {allowCidrs: ~}\n";
    let ran = c.apply(policy, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

#[test]
fn a_gatewayclass_controller_name_cannot_change() {
    let c = cluster();
    let class = |controller: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
                 metadata: {{name: shared}}\nspec: {{controllerName: {controller}}}\n"
        )
    };
    let ran = c.apply(&class("fairgate.dev/gateway-controller"), &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let said = c.refused(&class("example.com/other"));
    assert!(
        said.contains("spec.controllerName: Invalid value: \"string\": field is immutable"),
        "{said}"
    );
}

#[test]
fn defaults_are_filled_and_unknown_fields_pruned_as_the_api_server_does() {
    let c = cluster();
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain}
spec:
  parentRefs: [{name: edge}]
  rules: [{backendRefs: [{name: web, port: 80}], extra: 1}]
"#;
    // `--validate=false`: the API server prunes the field instead.
    let ran = c.apply(route, &["--validate=false"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let stored = c.stored(ROUTES, "plain");
    let rule = &stored["spec"]["rules"][0];
    assert_eq!(rule.get("extra"), None, "{stored:#}");
    assert_eq!(
        rule["matches"],
        serde_json::json!([{"path": {"type": "PathPrefix", "value": "/"}}])
    );
    let backend = &rule["backendRefs"][0];
    assert_eq!(
        (&backend["group"], &backend["kind"], &backend["weight"]),
        (&"".into(), &"Service".into(), &1.into())
    );
    let parent = &stored["spec"]["parentRefs"][0];
    assert_eq!(
        (&parent["group"], &parent["kind"]),
        (&"gateway.networking.k8s.io".into(), &"Gateway".into())
    );
}
