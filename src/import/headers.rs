//! Header edits on a route (`request_headers`, `response_headers`): the
//! one way every family adds one, never a header the gateway sets itself;
//! `custom-headers` (a ConfigMap of response headers) and the
//! `Strict-Transport-Security` header ingress-nginx sent on TLS hosts.

use serde_json::Value;

use super::draft::Draft;
use super::manifests::{text, Object};
use super::out::{EditKey, RouteKeys, Side};
use super::plan::Plan;
use super::Verdict;

/// A header the gateway sets itself: no edit may touch it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is set by the gateway itself")]
pub struct Reserved(pub String);

/// Adds a header edit to `request_headers` or `response_headers`.
pub fn edit(
    plan: &mut Plan,
    side: Side,
    op: EditKey,
    name: &str,
    value: &str,
) -> Result<(), Reserved> {
    if crate::config::edit_reserved(name) {
        return Err(Reserved(name.to_string()));
    }
    plan.keys.edits(side).edit(op, name, value);
    Ok(())
}

/// `custom-headers`: a ConfigMap of response headers.
pub fn custom_headers(
    draft: &Draft<'_>,
    ing: &Object,
    reference: &str,
    plan: &mut Plan,
) -> Verdict {
    if let Some((ns, _)) = reference
        .split_once('/')
        .filter(|(ns, _)| *ns != ing.namespace)
    {
        return Verdict::Unsupported(format!(
            "a ConfigMap of namespace {ns}, not the Ingress's {}: ingress-nginx refuses it by default \
             (allow-cross-namespace-resources: false), and so does fairgate",
            ing.namespace
        ));
    }
    let Some(Value::Object(data)) = draft.configmap_data(&ing.namespace, reference) else {
        return Verdict::Unsupported(format!("ConfigMap {reference} is not among the inputs"));
    };
    for (name, value) in data {
        let value = text(value, &[]).unwrap_or_default();
        // A header edit sets a value: the policy reader refuses an empty one.
        if value.is_empty() {
            return Verdict::Unsupported(format!("the empty value of {name}"));
        }
        if value.contains(['{', '}']) {
            return Verdict::Unsupported(format!("a {{ or }} in the value of {name}"));
        }
        if let Err(why) = edit(plan, Side::Response, EditKey::Set, name, &value) {
            return Verdict::Unsupported(why.to_string());
        }
    }
    Verdict::Mapped(format!("response_headers.set from ConfigMap {reference}"))
}

/// `Strict-Transport-Security` on the answers of a TLS host's route, as
/// ingress-nginx sends it, unless the Ingress sets it itself.
pub fn hsts(keys: &mut RouteKeys, value: &str) {
    let edits = keys.edits(Side::Response);
    edits.set_if_unset("Strict-Transport-Security", value);
}
