//! The HTTP face of the stand-in: reads a request, finds what its path
//! names (discovery, OpenAPI, a collection, an object, its `/status`), and
//! answers with JSON, a metav1 `Status` for every refusal. Lists are
//! paged here; watches are streamed by `watch`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::patch::{self, PatchType};
use super::resources::{self as res, Resource};
use super::select::Selectors;
use super::store::{ApiError, Part, WriteRequest};
use super::Shared;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;
pub type Reply = hyper::Response<Body>;

/// One request, read whole (no request body the API takes is large).
pub struct ApiRequest {
    pub method: hyper::Method,
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl ApiRequest {
    pub fn param(&self, name: &str) -> &str {
        self.query.get(name).map(String::as_str).unwrap_or("")
    }

    fn header(&self, name: &str) -> String {
        let value = self.headers.get(name).and_then(|v| v.to_str().ok());
        value.unwrap_or("").to_string()
    }

    /// The object a POST or PUT carries: JSON, or one of the protobuf
    /// bodies kubectl's generators send.
    fn object_body(&self) -> Result<Value, ApiError> {
        if self
            .header("content-type")
            .starts_with("application/vnd.kubernetes.protobuf")
        {
            return super::protobuf::decode(&self.body)
                .map_err(|m| ApiError::new(415, "UnsupportedMediaType", m));
        }
        self.json_body()
    }

    fn json_body(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            let message = format!("the body of the request was in an unknown format: {e}");
            ApiError::new(415, "UnsupportedMediaType", message)
        })
    }
}

/// `%XX` and `+` decoded.
fn decode(text: &str) -> String {
    let (bytes, mut out, mut i) = (text.as_bytes(), Vec::new(), 0);
    while i < bytes.len() {
        let hex = text
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(query: &str) -> HashMap<String, String> {
    let pairs = query.split('&').filter(|p| !p.is_empty());
    pairs
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

pub fn json_reply(code: u16, body: &Value) -> Reply {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap());
    hyper::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(bytes).boxed_unsync())
        .unwrap()
}

/// `GET /openapi/v2`, which kubectl reads for a manifest of `kind: List`
/// (cli-runtime never asks /openapi/v3 about a List): an empty protobuf
/// `openapi_v2.Document`, zero bytes. It defines no kind, and kubectl's
/// client-side validation passes what it has no schema for.
fn openapi_v2() -> Reply {
    hyper::Response::builder()
        .status(200)
        .header(
            "content-type",
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        )
        .body(Full::new(Bytes::new()).boxed_unsync())
        .unwrap()
}

fn not_found() -> ApiError {
    let message = "the server could not find the requested resource";
    ApiError::new(404, "NotFound", message)
}

/// The hyper service: every request, answered.
pub async fn serve(
    shared: Arc<Shared>,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<Reply, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let request = ApiRequest {
        method: parts.method,
        path: decode(parts.uri.path()),
        query: parse_query(parts.uri.query().unwrap_or("")),
        headers: parts.headers,
        body,
    };
    Ok(route(&shared, &request).unwrap_or_else(|e| json_reply(e.code, &e.status())))
}

fn route(shared: &Arc<Shared>, req: &ApiRequest) -> Result<Reply, ApiError> {
    let segments: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    if segments == ["openapi", "v2"] {
        return Ok(openapi_v2());
    }
    let found = match segments.as_slice() {
        ["version"] => Some(res::version()),
        ["healthz" | "livez" | "readyz"] => Some(json!("ok")),
        ["api"] => Some(res::core_versions(&shared.server)),
        ["apis"] => Some(res::group_list()),
        ["apis", group] => res::api_group(group),
        ["api", "v1"] => res::resource_list("v1"),
        ["apis", g, v] => res::resource_list(&format!("{g}/{v}")),
        ["openapi", "v3"] => Some(res::openapi_root()),
        ["openapi", "v3", rest @ ..] => res::openapi_group_version(&rest.join("/")),
        ["api", "v1", rest @ ..] => return resource(shared, req, "v1", rest),
        ["apis", g, v, rest @ ..] => return resource(shared, req, &format!("{g}/{v}"), rest),
        _ => None,
    };
    found.map(|v| json_reply(200, &v)).ok_or_else(not_found)
}

/// What a resource path names.
pub struct Target {
    pub resource: &'static Resource,
    /// "" for cluster-scoped resources and all-namespaces collections.
    pub ns: String,
    pub name: Option<String>,
    pub sub: Option<String>,
}

fn target(gv: &str, rest: &[&str]) -> Option<Target> {
    let (ns, rest) = match rest {
        ["namespaces", ns, plural, ..] if res::by_plural(gv, plural).is_some() => (*ns, &rest[2..]),
        _ => ("", rest),
    };
    let resource = res::by_plural(gv, rest.first()?)?;
    if rest.len() > 3 || (!ns.is_empty() && !resource.namespaced) {
        return None;
    }
    Some(Target {
        resource,
        ns: ns.to_string(),
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
}

fn resource(
    shared: &Arc<Shared>,
    req: &ApiRequest,
    gv: &str,
    rest: &[&str],
) -> Result<Reply, ApiError> {
    let t = target(gv, rest).ok_or_else(not_found)?;
    if req.method != hyper::Method::GET {
        let write = WriteRequest {
            method: req.method.to_string(),
            path: req.path.clone(),
            user_agent: req.header("user-agent"),
            content_type: req.header("content-type"),
        };
        shared.store().writes.push(write);
    }
    let part = match t.sub.as_deref() {
        None => Part::Main,
        Some("status") if t.resource.status => Part::Status,
        Some(_) => return Err(not_found()),
    };
    let method = req.method.as_str();
    match (method, &t.name) {
        ("GET", None) if is_true(req.param("watch")) => super::watch::start(shared, req, &t),
        ("GET", None) => list(shared, req, &t),
        ("POST", None) if part == Part::Main => create(shared, req, &t),
        ("GET", Some(name)) => get(shared, req, &t, name),
        ("PUT", Some(name)) => update(shared, req, &t, name, part),
        ("PATCH", Some(name)) => patch(shared, req, &t, name, part),
        ("DELETE", Some(name)) if part == Part::Main => delete(shared, &t, name),
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported here"),
        )),
    }
}

pub fn is_true(flag: &str) -> bool {
    matches!(flag, "1" | "true")
}

fn get(shared: &Shared, req: &ApiRequest, t: &Target, name: &str) -> Result<Reply, ApiError> {
    let mut store = shared.store();
    *store.gets.entry(t.resource.gvr()).or_default() += 1;
    let object = store.get(t.resource, &t.ns, name);
    let object = object.ok_or_else(|| ApiError::not_found(t.resource, name))?;
    match metadata_only(req) {
        true => Ok(json_reply(200, &partial(object))),
        false => Ok(json_reply(200, object)),
    }
}

/// Whether the client asked for metadata only (`Accept:
/// application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`,
/// as kube's `Api<PartialObjectMeta<K>>` does).
pub fn metadata_only(req: &ApiRequest) -> bool {
    req.header("accept").contains("as=PartialObjectMetadata")
}

/// An object as a metadata-only answer carries it.
pub fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": object["metadata"],
    })
}

fn create(shared: &Shared, req: &ApiRequest, t: &Target) -> Result<Reply, ApiError> {
    let mut body = req.object_body()?;
    if t.resource.namespaced && body["metadata"]["namespace"].is_null() {
        body["metadata"]["namespace"] = t.ns.clone().into();
    }
    strict(req, t.resource, &body)?;
    let hooks = super::admission::hooks(&shared.store());
    let warnings = super::admission::admit(&hooks, t.resource, "CREATE", &body, None)?;
    let created = shared.write(|s| s.create(t.resource, &t.ns, body, Part::Main))?;
    Ok(super::admission::with_warnings(
        json_reply(201, &created),
        &warnings,
    ))
}

fn update(
    shared: &Shared,
    req: &ApiRequest,
    t: &Target,
    name: &str,
    part: Part,
) -> Result<Reply, ApiError> {
    let body = req.object_body()?;
    let named = body["metadata"]["name"].as_str().unwrap_or(name);
    if named != name {
        let message = "the name of the object does not match the name on the URL";
        return Err(ApiError::new(400, "BadRequest", message));
    }
    strict(req, t.resource, &body)?;
    let (hooks, old) = {
        let store = shared.store();
        let old = store.get(t.resource, &t.ns, name).cloned();
        (super::admission::hooks(&store), old)
    };
    let warnings = match part {
        Part::Main => super::admission::admit(&hooks, t.resource, "UPDATE", &body, old.as_ref())?,
        _ => Vec::new(),
    };
    let updated = shared.write(|s| s.update(t.resource, &t.ns, name, body, part))?;
    Ok(super::admission::with_warnings(
        json_reply(200, &updated),
        &warnings,
    ))
}

fn patch(
    shared: &Shared,
    req: &ApiRequest,
    t: &Target,
    name: &str,
    part: Part,
) -> Result<Reply, ApiError> {
    let content_type = req.header("content-type");
    let kind = PatchType::from_content_type(&content_type).ok_or_else(|| {
        let message = format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})");
        ApiError::new(415, "UnsupportedMediaType", message)
    })?;
    let body = req.json_body()?;
    let (r, ns) = (t.resource, t.ns.as_str());
    let (hooks, current) = {
        let store = shared.store();
        let current = store.get(r, ns, name).cloned();
        (super::admission::hooks(&store), current)
    };
    let warnings = match (&current, part) {
        (None, Part::Main) if kind == PatchType::Apply => {
            super::admission::admit(&hooks, r, "CREATE", &body, None)?
        }
        (Some(old), Part::Main) => {
            let new =
                patch::apply(kind, old, &body).map_err(|m| ApiError::new(422, "Invalid", m))?;
            super::admission::admit(&hooks, r, "UPDATE", &new, Some(old))?
        }
        _ => Vec::new(),
    };
    let (code, patched) = shared.write(|s| {
        let Some(current) = s.get(r, ns, name) else {
            // Server-side apply creates what is missing.
            if kind == PatchType::Apply && part == Part::Main {
                return s.create(r, ns, body, part).map(|o| (201, o));
            }
            return Err(ApiError::not_found(r, name));
        };
        let new = patch::apply(kind, current, &body);
        let new = new.map_err(|m| ApiError::new(422, "Invalid", m))?;
        strict(req, r, &new)?;
        s.update(r, ns, name, new, part).map(|o| (200, o))
    })?;
    Ok(super::admission::with_warnings(
        json_reply(code, &patched),
        &warnings,
    ))
}

/// kubectl asks for `fieldValidation=Strict`: a field the schema does not
/// know is refused, not pruned.
fn strict(req: &ApiRequest, r: &Resource, object: &Value) -> Result<(), ApiError> {
    match req.param("fieldValidation") {
        "Strict" => super::schema::refuse_unknown(r, object),
        _ => Ok(()),
    }
}

fn delete(shared: &Shared, t: &Target, name: &str) -> Result<Reply, ApiError> {
    let deleted = shared.write(|s| s.delete(t.resource, &t.ns, name))?;
    Ok(json_reply(200, &deleted))
}

/// Where a paged list goes on: the list's resourceVersion and the last key.
#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    start: (String, String),
}

fn continue_token(c: &Continue) -> String {
    let text = serde_json::to_vec(c).unwrap();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

fn parse_continue(token: &str) -> Result<Continue, ApiError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token);
    let parsed = bytes.ok().and_then(|b| serde_json::from_slice(&b).ok());
    parsed.ok_or_else(|| ApiError::new(400, "BadRequest", "invalid continue token"))
}

/// A resourceVersion parameter: None for "" and "0" (any, i.e. the latest).
pub fn parse_rv(text: &str) -> Result<Option<u64>, ApiError> {
    match text {
        "" | "0" => Ok(None),
        _ => text.parse().map(Some).map_err(|_| {
            let message = format!("invalid resource version {text:?}");
            ApiError::new(400, "BadRequest", message)
        }),
    }
}

pub fn selectors(req: &ApiRequest) -> Result<Selectors, ApiError> {
    Selectors::parse(req.param("labelSelector"), req.param("fieldSelector"))
        .map_err(|m| ApiError::new(400, "BadRequest", m))
}

fn list(shared: &Shared, req: &ApiRequest, t: &Target) -> Result<Reply, ApiError> {
    let selectors = selectors(req)?;
    let limit: usize = req.param("limit").parse().unwrap_or(0);
    let mut store = shared.store();
    *store.lists.entry(t.resource.gvr()).or_default() += 1;
    let (list_rv, after) = match req.param("continue") {
        "" => (store.rv, None),
        token => {
            let c = parse_continue(token)?;
            (c.rv, Some(c.start))
        }
    };
    store.check_fresh(list_rv)?;
    if let Some(rv) = parse_rv(req.param("resourceVersion"))? {
        store.check_fresh(rv)?;
    }
    let mut items = store.items(t.resource, &t.ns, &selectors);
    drop(store);
    items.retain(|((_, ns, name), _)| after.as_ref().is_none_or(|a| (ns, name) > (&a.0, &a.1)));
    let mut metadata = json!({ "resourceVersion": list_rv.to_string() });
    if limit > 0 && items.len() > limit {
        let ((_, ns, name), _) = &items[limit - 1];
        let start = (ns.clone(), name.clone());
        metadata["continue"] = continue_token(&Continue { rv: list_rv, start }).into();
        metadata["remainingItemCount"] = (items.len() - limit).into();
        items.truncate(limit);
    }
    let r = t.resource;
    let (kind, api_version, items): (String, String, Vec<Value>) = match metadata_only(req) {
        true => (
            "PartialObjectMetadataList".into(),
            "meta.k8s.io/v1".into(),
            items.iter().map(|(_, o)| partial(o)).collect(),
        ),
        false => (
            format!("{}List", r.kind),
            r.api_version(),
            items.into_iter().map(|(_, o)| o).collect(),
        ),
    };
    let body =
        json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items});
    Ok(json_reply(200, &body))
}
