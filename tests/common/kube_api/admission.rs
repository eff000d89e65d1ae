//! Validating admission, as the API server does it for webhooks
//! (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/>):
//! before a create or an update is stored, every webhook of every stored
//! ValidatingWebhookConfiguration whose rules match the write (API group,
//! version, resource, operation; `*` matches any) is sent an
//! `admission.k8s.io/v1` AdmissionReview over HTTPS (`clientConfig.url`,
//! trusted by `caBundle`, within `timeoutSeconds`, default 10). A denial is
//! the write's answer, in the API server's words ("admission webhook NAME
//! denied the request: MESSAGE", the webhook's code, else 400); a webhook
//! that cannot be called, or answers nonsense, fails the write only under
//! `failurePolicy: Fail` (the API server's default). `warnings` are
//! returned for the `Warning` headers kubectl prints; an answer must carry
//! the review's `uid`. A PATCH (`kubectl apply`, server-side apply) is
//! admitted as the update or create it makes. Not implemented:
//! `clientConfig.service` (the stand-in reaches no Service), namespace and
//! object selectors, match conditions, mutating webhooks.

use serde_json::{json, Value};

use super::resources::{self, Resource};
use super::store::{ApiError, Store};

/// Each warning as the API server sends it, a `Warning` header kubectl prints.
pub fn with_warnings(mut reply: super::http::Reply, warnings: &[String]) -> super::http::Reply {
    for w in warnings {
        let value = format!("299 - {:?}", w);
        if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
            reply.headers_mut().append("warning", v);
        }
    }
    reply
}

/// The webhooks of the stored configurations, copied out so that no call
/// is made while the store is locked.
pub fn hooks(store: &Store) -> Vec<Value> {
    let configs =
        resources::by_gvr("admissionregistration.k8s.io/v1/validatingwebhookconfigurations");
    store
        .items(configs, "", &Default::default())
        .into_iter()
        .flat_map(|(_, c)| c["webhooks"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The warnings of the webhooks that allowed the write, or the refusal.
pub fn admit(
    hooks: &[Value],
    r: &Resource,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    {
        for hook in hooks {
            if !matches(hook, r, operation) {
                continue;
            }
            let review = review(r, operation, object, old);
            match call(hook, &review) {
                Ok(answer) => {
                    let response = &answer["response"];
                    warnings.extend(
                        response["warnings"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|w| w.as_str().map(String::from)),
                    );
                    if response["allowed"] != true {
                        return Err(denied(hook, response));
                    }
                }
                Err(why) if hook["failurePolicy"] == "Ignore" => {
                    let _ = why;
                }
                Err(why) => {
                    let name = hook["name"].as_str().unwrap_or("");
                    let message =
                        format!("Internal error occurred: failed calling webhook {name:?}: {why}");
                    return Err(ApiError::new(500, "InternalError", message));
                }
            }
        }
    }
    Ok(warnings)
}

fn matches(hook: &Value, r: &Resource, operation: &str) -> bool {
    let has = |list: &Value, want: &str| {
        list.as_array()
            .into_iter()
            .flatten()
            .any(|v| v == "*" || v == want)
    };
    hook["rules"].as_array().into_iter().flatten().any(|rule| {
        has(&rule["apiGroups"], r.group)
            && has(&rule["apiVersions"], r.version)
            && has(&rule["resources"], r.plural)
            && has(&rule["operations"], operation)
    })
}

fn review(r: &Resource, operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
    // As the API server sends it: a new object has its creation time set
    // before admission.
    let mut object = object.clone();
    if object["metadata"]["creationTimestamp"].is_null() {
        object["metadata"]["creationTimestamp"] = json!(super::store::now_rfc3339());
    }
    let meta = &object["metadata"];
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("{:x}", rand_uid()),
            "kind": gvk, "requestKind": gvk,
            "resource": {"group": r.group, "version": r.version, "resource": r.plural},
            "name": meta["name"], "namespace": meta["namespace"],
            "operation": operation,
            "userInfo": {"username": "kubectl"},
            "object": &object, "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": false,
        }
    })
}

fn rand_uid() -> u128 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// POSTs the review on a thread of its own (the stand-in's handlers are
/// synchronous): the webhook's answer, or why there is none.
fn call(hook: &Value, review: &Value) -> Result<Value, String> {
    use base64::Engine;
    let url = hook["clientConfig"]["url"]
        .as_str()
        .ok_or("no clientConfig.url (the stand-in reaches no Service)")?
        .to_string();
    let ca = hook["clientConfig"]["caBundle"].as_str().unwrap_or("");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .map_err(|e| format!("caBundle: {e}"))?;
    let timeout = hook["timeoutSeconds"].as_u64().unwrap_or(10);
    let body = review.to_string();
    let sent_uid = review["request"]["uid"].clone();
    std::thread::spawn(move || {
        let mut client = reqwest::blocking::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(timeout));
        if !ca.is_empty() {
            let cert = reqwest::Certificate::from_pem(&ca).map_err(|e| e.to_string())?;
            client = client.add_root_certificate(cert);
        }
        let client = client.build().map_err(|e| e.to_string())?;
        let answer = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .map_err(|e| e.to_string())?;
        let status = answer.status();
        let answer: Value = answer.json().map_err(|e| e.to_string())?;
        let uid_kept = answer["response"]["uid"] == sent_uid;
        if !status.is_success() || answer["response"]["allowed"].as_bool().is_none() || !uid_kept {
            return Err(format!("the webhook answered {status}: {answer}"));
        }
        Ok(answer)
    })
    .join()
    .map_err(|_| "the call panicked".to_string())?
}

fn denied(hook: &Value, response: &Value) -> ApiError {
    let name = hook["name"].as_str().unwrap_or("");
    let status = &response["status"];
    let code = status["code"].as_u64().map_or(400, |c| c as u16);
    let message = status["message"].as_str().unwrap_or("");
    let message = format!("admission webhook {name:?} denied the request: {message}");
    ApiError::new(
        code,
        if code == 403 {
            "Forbidden"
        } else {
            "BadRequest"
        },
        message,
    )
}
