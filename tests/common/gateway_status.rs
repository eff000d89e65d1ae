//! The Gateway API conformance suite's checks of a Gateway's status, as
//! its helpers make them (`conformance/utils/kubernetes/helpers.go` at
//! kubernetes-sigs/gateway-api 4564255): `GatewayStatusMustHaveListeners`,
//! `GatewayMustHaveCondition`, `NamespacesMustBeReady` for the Gateways a
//! test serves; and what the Gateway and Secret tests set up with.

use serde_json::Value;

use super::cluster::{kubectl, secret_for};
use super::gateway_api::{condition_is, Conformance, INFRA, WEB};
use super::{Gateway, Pki};

pub const GROUP: &str = "gateway.networking.k8s.io";

/// A listener's status as the suite expects it: its kinds (empty: none
/// at all), conditions `(type, status, reason)` (an empty reason: any),
/// attached routes.
pub struct Want {
    pub name: &'static str,
    pub kinds: &'static [&'static str],
    pub conditions: &'static [(&'static str, &'static str, &'static str)],
    pub attached: u64,
}

/// `ConditionsHaveLatestObservedGeneration` on the object's own
/// conditions. The CRD defaults them to `Unknown` at no generation, which
/// the stand-in does not, so none at all is not taken as current here.
pub fn latest(o: &Value) -> bool {
    let generation = &o["metadata"]["generation"];
    o["status"]["conditions"].as_array().is_some_and(|list| {
        !list.is_empty() && list.iter().all(|c| &c["observedGeneration"] == generation)
    })
}

/// `findConditionInList`: a condition of that type with that status and
/// (unless empty) reason.
pub fn find(conditions: &Value, want: (&str, &str, &str)) -> bool {
    let list = conditions.as_array();
    list.is_some_and(|list| list.iter().any(|c| condition_is(c, want)))
}

/// `gatewayListenersMatch`: as many listeners as wanted, each by name
/// (in any order) with the kinds wanted (none when none are), the same
/// attached routes and the conditions wanted among its own.
pub fn listeners_match(gw: &Value, want: &[Want]) -> bool {
    let Some(got) = gw["status"]["listeners"].as_array() else {
        return false;
    };
    latest(gw)
        && got.len() == want.len()
        && want.iter().all(|w| {
            got.iter()
                .find(|l| l["name"] == w.name)
                .is_some_and(|l| listener_is(l, w))
        })
}

pub fn listener_is(l: &Value, w: &Want) -> bool {
    let kinds: Vec<(&str, &str)> = l["supportedKinds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            (
                k["group"].as_str().unwrap_or(GROUP),
                k["kind"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let kinds_ok = match w.kinds.is_empty() {
        true => kinds.is_empty(),
        false => w.kinds.iter().all(|k| kinds.contains(&(GROUP, *k))),
    };
    kinds_ok
        && l["attachedRoutes"] == w.attached
        && w.conditions.iter().all(|c| find(&l["conditions"], *c))
}

/// `GatewayStatusMustHaveListeners`.
pub fn must_have_listeners(c: &Conformance, gateway: &str, want: &[Want]) -> Value {
    c.gateway_status(gateway, |g| listeners_match(g, want))
}

/// `GatewayMustHaveLatestConditions` and `GatewayMustHaveCondition`.
pub fn must_have_condition(c: &Conformance, gateway: &str, want: (&str, &str, &str)) -> Value {
    c.gateway_status(gateway, |g| {
        latest(g) && find(&g["status"]["conditions"], want)
    })
}

/// `NamespacesMustBeReady` for the Gateways the test serves: Accepted and
/// Programmed, at their generation.
pub fn ready(c: &Conformance, gateways: &[&str]) {
    for gateway in gateways {
        must_have_condition(c, gateway, ("Accepted", "True", ""));
        must_have_condition(c, gateway, ("Programmed", "True", ""));
    }
}

/// `client.Patch(ctx, mutate, client.MergeFrom(original))`: a JSON merge
/// patch of the Gateway.
pub fn merge_patch(c: &Conformance, gateway: &str, patch: &Value) {
    let patch = patch.to_string();
    let args = [
        "patch", "gateways", gateway, "-n", INFRA, "--type", "merge", "-p", &patch,
    ];
    kubectl(&c.kc, &args, None).unwrap_or_else(|e| panic!("kubectl patch {gateway}: {e}"));
}

/// A fairgate serving `gateway` with a TLS listener (its HTTPS listeners'
/// certificates are served there).
pub async fn serve_tls(c: &Conformance, gateway: &str, pki: &Pki) -> Gateway {
    let tls = super::free_addr();
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let base = format!(
        "server:\n  listen: [\"$LISTEN\"]\n  tls:\n    listen: \"{tls}\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}\nstore: {{kind: memory}}",
        cert.display(),
        key.display()
    );
    c.start_base(gateway, &base, 0).await
}

/// The suite's programmatic Secrets `infra/tls-validity-checks-certificate`
/// and `web-backend/certificate` (any valid pair: these tests read no
/// names from them).
pub fn suite_secrets(c: &Conformance, pki: &Pki) {
    let names = ["secure.test.com", "data.test.com"];
    c.api.apply(secret_for(
        pki,
        INFRA,
        "tls-validity-checks-certificate",
        &names,
        "02",
    ));
    c.api
        .apply(secret_for(pki, WEB, "certificate", &names, "03"));
}
