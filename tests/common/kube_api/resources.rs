//! The resources the stand-in serves (one static table) and the documents
//! that describe them: legacy discovery (`/api`, `/apis`, APIResourceList)
//! and the minimal OpenAPI v3 that tells kubectl the server validates
//! fields itself. Owns no objects.

use serde_json::{json, Value};

/// One served resource: a group/version, its plural, and how it is scoped.
#[derive(Debug)]
pub struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource: writes to the main resource keep the
    /// stored `.status`, writes to `/status` change only `.status`.
    pub status: bool,
    pub short: &'static [&'static str],
}

const fn r(
    gv: (&'static str, &'static str),
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
    short: &'static [&'static str],
) -> Resource {
    Resource {
        group: gv.0,
        version: gv.1,
        plural,
        singular,
        kind,
        namespaced,
        status,
        short,
    }
}

const CORE: (&str, &str) = ("", "v1");
const NET: (&str, &str) = ("networking.k8s.io", "v1");
const GW: (&str, &str) = ("gateway.networking.k8s.io", "v1");
const GW_BETA: (&str, &str) = ("gateway.networking.k8s.io", "v1beta1");

/// Every resource served. Add a row to serve another kind (a CRD included).
pub static RESOURCES: &[Resource] = &[
    r(
        CORE,
        "namespaces",
        "namespace",
        "Namespace",
        false,
        true,
        &["ns"],
    ),
    r(CORE, "services", "service", "Service", true, true, &["svc"]),
    r(
        CORE,
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        false,
        &["ep"],
    ),
    r(CORE, "secrets", "secret", "Secret", true, false, &[]),
    r(
        CORE,
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        false,
        &["cm"],
    ),
    r(CORE, "events", "event", "Event", true, false, &["ev"]),
    r(CORE, "pods", "pod", "Pod", true, true, &["po"]),
    r(NET, "ingresses", "ingress", "Ingress", true, true, &["ing"]),
    r(
        ("admissionregistration.k8s.io", "v1"),
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        false,
        false,
        &[],
    ),
    r(
        NET,
        "ingressclasses",
        "ingressclass",
        "IngressClass",
        false,
        false,
        &[],
    ),
    r(
        ("discovery.k8s.io", "v1"),
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
        false,
        &[],
    ),
    r(
        ("coordination.k8s.io", "v1"),
        "leases",
        "lease",
        "Lease",
        true,
        false,
        &[],
    ),
    r(
        ("events.k8s.io", "v1"),
        "events",
        "event",
        "Event",
        true,
        false,
        &["ev"],
    ),
    r(
        ("apps", "v1"),
        "deployments",
        "deployment",
        "Deployment",
        true,
        true,
        &["deploy"],
    ),
    r(
        ("autoscaling", "v2"),
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        true,
        true,
        &["hpa"],
    ),
    r(
        GW,
        "gatewayclasses",
        "gatewayclass",
        "GatewayClass",
        false,
        true,
        &["gc"],
    ),
    r(GW, "gateways", "gateway", "Gateway", true, true, &["gtw"]),
    r(GW, "httproutes", "httproute", "HTTPRoute", true, true, &[]),
    r(GW, "grpcroutes", "grpcroute", "GRPCRoute", true, true, &[]),
    r(
        ("fairgate.dev", "v1alpha1"),
        "routepolicies",
        "routepolicy",
        "RoutePolicy",
        true,
        false,
        &[],
    ),
    r(
        GW_BETA,
        "referencegrants",
        "referencegrant",
        "ReferenceGrant",
        true,
        false,
        &["refgrant"],
    ),
];

impl Resource {
    /// `v1` or `networking.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `v1/secrets` or `networking.k8s.io/v1/ingresses`: how tests name it.
    pub fn gvr(&self) -> String {
        format!("{}/{}", self.api_version(), self.plural)
    }

    /// `secrets` or `ingresses.networking.k8s.io`, as error messages say.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `/api/v1` or `/apis/networking.k8s.io/v1`.
    pub fn prefix(&self) -> String {
        if self.group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{}", self.api_version())
        }
    }

    /// The collection path in namespace `ns` ("" for cluster-wide).
    pub fn collection_path(&self, ns: &str) -> String {
        if self.namespaced && !ns.is_empty() {
            format!("{}/namespaces/{ns}/{}", self.prefix(), self.plural)
        } else {
            format!("{}/{}", self.prefix(), self.plural)
        }
    }
}

/// The resource named like `v1/secrets` or `networking.k8s.io/v1/ingresses`.
pub fn by_gvr(gvr: &str) -> &'static Resource {
    RESOURCES
        .iter()
        .find(|r| r.gvr() == gvr)
        .unwrap_or_else(|| panic!("the API stand-in serves no resource {gvr:?}"))
}

/// The resource of an object, by its `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// The resource `plural` of group/version `gv` (as in a request path).
pub fn by_plural(gv: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == gv && r.plural == plural)
}

/// Every group/version served, in table order, each once.
fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

const VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// `GET /api/v1` or `/apis/G/V`: the APIResourceList, `x/status` included.
pub fn resource_list(gv: &str) -> Option<Value> {
    let mut items = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.api_version() == gv) {
        items.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS, "shortNames": r.short,
        }));
        if r.status {
            items.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    (!items.is_empty()).then(|| {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items})
    })
}

/// `GET /api`.
pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

/// `GET /apis/G` (None if no such group), one entry of `GET /apis`.
pub fn api_group(group: &str) -> Option<Value> {
    let versions: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group && !group.is_empty())
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": versions, "preferredVersion": preferred,
    }))
}

/// `GET /apis`.
pub fn group_list() -> Value {
    let mut names: Vec<&str> = Vec::new();
    for (g, _) in group_versions() {
        if !g.is_empty() && !names.contains(&g) {
            names.push(g);
        }
    }
    let groups: Vec<Value> = names.iter().filter_map(|g| api_group(g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "35", "gitVersion": "v1.35.0",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25.0",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

/// `openapi/v3` path of a group/version: `api/v1` or `apis/G/V`.
fn openapi_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: one entry per group/version served.
pub fn openapi_root() -> Value {
    let mut paths = serde_json::Map::new();
    for (g, v) in group_versions() {
        let path = openapi_path(g, v);
        let url = format!("/openapi/v3/{path}?hash=0");
        paths.insert(path, json!({ "serverRelativeURL": url }));
    }
    json!({ "paths": paths })
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/G/V`: no schemas, only
/// each object path's PATCH with its `x-kubernetes-group-version-kind` and
/// the `fieldValidation` query parameter (on the operation, where
/// cli-runtime's `supportsQueryParamV3` looks). That is what kubectl's field
/// validation check looks for; finding it, kubectl leaves validation to the
/// server (which here accepts any field) and needs no schema.
pub fn openapi_group_version(path: &str) -> Option<Value> {
    let (g, v) = group_versions()
        .into_iter()
        .find(|(g, v)| openapi_path(g, v) == path)?;
    let mut paths = serde_json::Map::new();
    for r in RESOURCES.iter().filter(|r| r.group == g && r.version == v) {
        let gvk = json!({"group": g, "version": v, "kind": r.kind});
        let param = json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}});
        let patch = json!({
            "operationId": format!("patch{}", r.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [param],
            "responses": {"200": {"description": "OK"}},
        });
        let object_path = format!("{}/{{name}}", r.collection_path("{namespace}"));
        paths.insert(object_path, json!({ "patch": patch }));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": paths,
    }))
}
