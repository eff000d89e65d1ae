//! `mirror-target`, `mirror-request-body` and `mirror-host`: a copy of
//! each request to another HTTP service, as the routes' `mirror`. The
//! target is `http://HOST[:PORT]/$request_uri` (ingress-nginx's documented
//! form); in the cluster HOST must be a Service of the Ingress's own
//! namespace (`NAME.NAMESPACE.svc`, its cluster domain optional), whose
//! endpoints become the mirror pool: a tenant's copies never go to another
//! namespace, the metadata service or the gateway itself.

use std::collections::BTreeMap;

use super::backend::{self, Protocol, Served};
use super::draft::Draft;
use super::manifests::Object;
use super::out::{Mirror, Pool};
use super::plan::Plan;
use super::{Refusal, Verdict};

/// The annotations this module reads (without the prefix).
pub const KEYS: &[&str] = &["mirror-host", "mirror-request-body", "mirror-target"];

/// Where the copies go, read from the annotations; made a pool in `apply`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    host: String,
    port: u16,
    header: String,
    body: bool,
}

/// Reads the `mirror-*` annotations into `plan.mirror`, a line each.
pub fn read(
    draft: &Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let given = super::annotations::present(KEYS, ann);
    if given.is_empty() {
        return;
    }
    let Some(target) = ann.get("mirror-target") else {
        let why = Verdict::Mapped("no effect without mirror-target, as in ingress-nginx".into());
        lines.extend(given.iter().map(|k| (k.to_string(), why.clone())));
        return;
    };
    let verdict = match target_of(draft, ing, target) {
        Ok((host, port)) => {
            // Without mirror-host ingress-nginx sends the target's host.
            let header = ann
                .get("mirror-host")
                .map_or_else(|| host.clone(), |h| h.trim().to_ascii_lowercase());
            let body = ann.get("mirror-request-body").map(String::as_str) != Some("off");
            plan.mirror = Some(Target {
                host,
                port,
                header,
                body,
            });
            Verdict::Mapped(
                "mirror: a copy of each request (its body too, up to 1 MiB) goes there once the \
                 exchange is over; its answer is dropped, and at most 256 copies are in flight"
                    .into(),
            )
        }
        // Not an access rule: the Ingress is served without its copies.
        Err(why) => Verdict::from(why),
    };
    for key in given {
        let line = match key {
            "mirror-target" => verdict.clone(),
            "mirror-host" if plan.mirror.is_some() => Verdict::Mapped("mirror.host".into()),
            "mirror-request-body" if plan.mirror.is_some() => Verdict::Mapped("mirror.body".into()),
            _ => Verdict::Mapped("no effect: mirror-target is not carried over".into()),
        };
        lines.push((key.to_string(), line));
    }
}

/// `http://HOST[:PORT]/$request_uri`: the host and port, or why not.
fn target_of(draft: &Draft<'_>, ing: &Object, target: &str) -> Result<(String, u16), Refusal> {
    let rest = target.strip_prefix("http://").ok_or_else(|| {
        Refusal::from(format!(
            "{target:?}: fairgate mirrors over plain HTTP (http://) only"
        ))
    })?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if path != "$request_uri" && !(path.is_empty() && authority.ends_with("$request_uri")) {
        return Err(Refusal::from(format!(
            "{target:?}: only http://HOST[:PORT]/$request_uri is carried over"
        )));
    }
    let authority = authority.trim_end_matches("$request_uri");
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| Refusal::from(format!("{target:?}: not a port")))?,
        ),
        None => (authority, 80),
    };
    let host = host.to_ascii_lowercase();
    if host.is_empty() || !super::names::dns1123_subdomain(&host) || port == 0 {
        return Err(Refusal::from(format!(
            "{target:?}: not a host name and port"
        )));
    }
    if draft.options.cluster {
        let own = [
            format!(".{}.svc", ing.namespace),
            format!(".{}.svc.{}", ing.namespace, draft.options.cluster_domain),
        ];
        let service = own
            .iter()
            .find_map(|suffix| host.strip_suffix(suffix.as_str()));
        if !service.is_some_and(super::names::dns1123_label) {
            return Err(Refusal::from(format!(
                "{host}: in the cluster a mirror is a Service of the Ingress's own namespace \
                 (NAME.{}.svc)",
                ing.namespace
            )));
        }
    }
    Ok((host, port))
}

/// The mirror pool of `plan.mirror` (in the cluster, the Service's
/// endpoints), as the routes' `mirror`.
pub fn apply(draft: &mut Draft<'_>, ing: &Object, plan: &mut Plan) {
    let Some(target) = plan.mirror.take() else {
        return;
    };
    let upstream = match draft.options.cluster {
        true => {
            let name = target.host.split('.').next().unwrap_or_default();
            let value =
                serde_json::json!({"service": {"name": name, "port": {"number": target.port}}});
            let plain = Plan {
                protocol: Protocol::Http,
                ..Plan::default()
            };
            match backend::upstream(draft, ing, &value, &plain) {
                Some(Served::Pool(pool)) => pool,
                _ => return,
            }
        }
        false => {
            let name =
                super::names::policy_name(&format!("mirror_{}-{}", target.host, target.port));
            let node = Pool {
                targets: vec![format!("{}:{}", target.host, target.port)],
                tls: None,
                protocol: None,
                connect_timeout: "5s".into(),
                health_check: true,
                balance: None,
                affinity: None,
                fair_share: None,
            };
            // Never another pool's name (an Ingress's `NAMESPACE_SERVICE-PORT`).
            let mut name = name;
            while draft.upstreams.get(&name).is_some_and(|p| *p != node) {
                name.push('_');
            }
            draft.upstreams.insert(name.clone(), node);
            name
        }
    };
    plan.keys.mirror = Some(Mirror {
        upstream,
        host: Some(target.header),
        body: target.body,
    });
}
