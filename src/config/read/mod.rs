//! The section readers: from the located YAML tree (`yaml`) to the typed
//! policy (`model`), reporting every problem with its place. `build` reads
//! the whole file; each section has its file. Readers check shapes,
//! references and that named files exist; they load no file (the policy
//! builder does, at the places they keep). Nothing here is kept after
//! reading: the model holds types, not readers.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::header::HeaderName;
use ipnet::IpNet;
use marked_yaml::Node;

use super::compression::*;
use super::kubernetes::*;
use super::methods::IdentityMap;
use super::model::*;
use super::place::*;
use super::route::*;
use super::schema;
use super::yaml::{self, At, Reader};

mod actions;
mod auth;
mod common;
mod fair_share;
mod forwarding;
mod kubernetes;
mod limits;
mod methods;
mod routes;
mod server;
mod store;
mod tcp;
mod tls_hosts;
mod upstreams;

use actions::*;
use auth::*;
use common::*;
use forwarding::*;
use kubernetes::*;
use limits::*;
use methods::*;
use routes::*;
use server::*;
use store::*;
use upstreams::*;

pub use actions::edit_reserved;
pub use common::name_ok;
pub use limits::parse_rate;

pub(crate) fn build(root: &Node, base: &Path, r: &mut Reader<'_>) -> Option<Config> {
    let top = r.mapping(&At::root(root), schema::TOP)?;
    let server = server(r, top.get("server"), base);
    let admin_fields = top
        .get("admin")
        .and_then(|at| r.mapping(&at, schema::ADMIN));
    let admin = Admin {
        listen: admin_fields
            .as_ref()
            .and_then(|f| socket_addr(r, &f.get("listen")?, "admin.listen_invalid")),
        token_env: admin_fields
            .as_ref()
            .and_then(|f| r.string(&f.get("token_env")?)),
    };
    let store = store(r, top.get("store"), base);
    let auth = top.get("auth").and_then(|at| auth(r, &at, base));
    let upstreams = upstreams(r, top.get("upstreams"), base);
    let limits: BTreeMap<String, Limit> = named(r, top.get("limits"), limit);
    let default_limits = default_limits(r, top.get("default_limits"));
    let concurrency = named(r, top.get("concurrency"), concurrency);
    // Names declared in the file, valid or not, so that a broken limit is
    // reported once where it is defined, not again at every use.
    let declared = |key: &str| -> BTreeSet<String> {
        top.get(key)
            .and_then(|at| {
                at.node
                    .as_mapping()
                    .map(|m| m.keys().map(|k| k.as_str().to_string()).collect())
            })
            .unwrap_or_default()
    };
    let methods = top
        .get("auth")
        .and_then(|at| at.node.as_mapping()?.get_mapping("methods"))
        .map(|m| m.keys().map(|k| k.as_str().to_string()).collect())
        .unwrap_or_default();
    let declared = Declared {
        limits: declared("limits"),
        concurrency: declared("concurrency"),
        methods,
    };
    let tenants = tenants(r, top.get("tenants"), &declared);
    let quota_headers = quota_headers(r, top.get("quota_headers"));
    let identity_headers = identity_headers(r, top.get("identity_headers"));
    let acknowledge = acknowledge(r, top.get("acknowledge"));
    let access_log = access_log(r, top.get("log"));
    let telemetry = telemetry(r, top.get("telemetry"), base);
    let kubernetes = top
        .get("kubernetes")
        .and_then(|at| kubernetes(r, &at, base));
    let mut config = Config {
        server,
        admin,
        store,
        auth,
        upstreams,
        limits,
        default_limits,
        concurrency,
        tenants,
        quota_headers,
        identity_headers,
        routes: Vec::new(),
        acknowledge,
        access_log,
        telemetry,
        kubernetes,
    };
    config.routes = routes(r, top.get("routes"), &config, &declared);
    client_cert_needs_ca(r, &config, top.get("limits"));
    tls_hosts::check_passthrough(r, &config);
    tcp::check_upstreams(r, &config);

    warnings(r, &config, &top);
    Some(config)
}

/// A mapping of operator-named entries, each read by `read`.
fn named<T>(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    read: fn(&mut Reader<'_>, &At<'_>, &str) -> Option<T>,
) -> BTreeMap<String, T> {
    let Some(at) = at else {
        return BTreeMap::new();
    };
    r.named(&at)
        .into_iter()
        .filter_map(|(name, item)| Some((name.to_string(), read(r, &item, name)?)))
        .collect()
}

fn quota_headers(r: &mut Reader<'_>, at: Option<At<'_>>) -> QuotaHeaders {
    let Some(at) = at else {
        return QuotaHeaders::Both;
    };
    match r.string(&at).as_deref() {
        Some("ietf") => QuotaHeaders::Ietf,
        Some("legacy") => QuotaHeaders::Legacy,
        Some("both") => QuotaHeaders::Both,
        Some("none") => QuotaHeaders::None,
        Some(_) => {
            r.error_value(
                &at,
                "config.quota_headers_invalid",
                "must be one of ietf, legacy, both, none",
            );
            QuotaHeaders::Both
        }
        None => QuotaHeaders::Both,
    }
}

/// `log.access.fields` (names from `ACCESS_FIELDS`) and `log.access.sample`.
fn access_log(r: &mut Reader<'_>, at: Option<At<'_>>) -> AccessLog {
    let mut out = AccessLog::default();
    let Some(access) = at
        .and_then(|at| r.mapping(&at, schema::LOG))
        .and_then(|f| f.get("access"))
    else {
        return out;
    };
    let Some(f) = r.mapping(&access, schema::LOG_ACCESS) else {
        return out;
    };
    if let Some(fields_at) = f.get("fields") {
        out.fields = 0;
        for (i, node) in r.sequence(&fields_at).into_iter().enumerate() {
            let item = fields_at.item(i, node);
            let Some(name) = r.string(&item) else {
                continue;
            };
            match ACCESS_FIELDS.iter().position(|f| *f == name) {
                Some(bit) => out.fields |= 1 << bit,
                None => r.error_value(
                    &item,
                    "log.field_unknown",
                    format!(
                        "not an access log field; one of {}",
                        ACCESS_FIELDS.join(", ")
                    ),
                ),
            }
        }
    }
    if let Some(sample_at) = f.get("sample") {
        let text = sample_at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
        match text.parse::<f64>() {
            Ok(s) if (0.0..=1.0).contains(&s) => out.sample = s,
            _ => r.error_value(
                &sample_at,
                "log.sample_invalid",
                "must be a number from 0 to 1",
            ),
        }
    }
    out
}

/// `telemetry`: the OTLP endpoint (spans are exported only with one), the
/// sampling ratio and what request spans carry.
fn telemetry(r: &mut Reader<'_>, at: Option<At<'_>>, base: &Path) -> Telemetry {
    let mut out = Telemetry::default();
    let Some(f) = at.and_then(|at| r.mapping(&at, schema::TELEMETRY)) else {
        return out;
    };
    if let Some(at) = f.get("tenant_attribute") {
        out.tenant_attribute = r.bool(&at).unwrap_or(false);
    }
    let service_name = f
        .get("service_name")
        .and_then(|at| r.string(&at))
        .unwrap_or_else(|| "fairgate".to_string());
    let mut ratio = 1.0;
    if let Some(at) = f
        .get("sampling")
        .and_then(|at| r.mapping(&at, schema::TELEMETRY_SAMPLING))
        .and_then(|s| s.get("ratio"))
    {
        let text = at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
        match text.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => ratio = x,
            _ => r.error_value(
                &at,
                "telemetry.ratio_invalid",
                "must be a number from 0 to 1",
            ),
        }
    }
    let Some(otlp) = f
        .get("otlp")
        .and_then(|at| r.mapping(&at, schema::TELEMETRY_OTLP))
    else {
        return out;
    };
    let timeout = otlp
        .get("timeout")
        .and_then(|at| r.positive_duration(&at))
        .unwrap_or(Duration::from_secs(5));
    let Some(at) = otlp.get("endpoint") else {
        r.error(
            &otlp.at,
            "telemetry.endpoint_invalid",
            "telemetry.otlp needs an endpoint",
        );
        return out;
    };
    let Some(endpoint) = r.string(&at) else {
        return out;
    };
    let endpoint = otlp_endpoint(&endpoint)
        .map_err(|why| r.error_value(&at, "telemetry.endpoint_invalid", why))
        .ok();
    // Read after a bad endpoint too, so that every problem is said at once.
    let ca_file = ca_file(r, &otlp, endpoint.as_deref(), "telemetry.ca_invalid", base);
    if let Some(endpoint) = endpoint {
        out.otlp = Some(Otlp {
            endpoint,
            timeout,
            ratio,
            service_name,
            ca_file,
        });
    }
    out
}

/// An OTLP/HTTP traces URL: `/v1/traces` is added to one without a path,
/// as the OpenTelemetry exporters do with a collector's base URL.
fn otlp_endpoint(text: &str) -> Result<String, &'static str> {
    let uri: http::Uri = text
        .parse()
        .map_err(|_| "expected an http:// or https:// URL")?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err("expected an http:// or https:// URL");
    }
    if text.contains('#') {
        return Err("no fragment: it would hide the path the spans are posted to");
    }
    if uri.query().is_some() || uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "no query or user info: collector credentials go in OTEL_EXPORTER_OTLP_HEADERS",
        );
    }
    Ok(match uri.path() {
        "" | "/" => format!("{}/v1/traces", text.trim_end_matches('/')),
        _ => text.to_string(),
    })
}

fn acknowledge(r: &mut Reader<'_>, at: Option<At<'_>>) -> BTreeSet<String> {
    let Some(at) = at else {
        return BTreeSet::new();
    };
    let mut codes = BTreeSet::new();
    for (i, node) in r.sequence(&at).into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(code) = r.string(&item) else {
            continue;
        };
        if !ACKNOWLEDGEABLE.contains(&code.as_str()) {
            let known = ACKNOWLEDGEABLE.join(", ");
            r.error_value(
                &item,
                "config.acknowledge_unknown",
                format!("not a warning code; known: {known}"),
            );
        }
        codes.insert(code);
    }
    codes
}

/// A `client_cert` scope keys on a verified client certificate, which only
/// `server.tls.client_ca` asks for.
fn client_cert_needs_ca(r: &mut Reader<'_>, config: &Config, limits: Option<At<'_>>) {
    if config
        .server
        .tls
        .as_ref()
        .is_some_and(|t| t.client_ca.is_some())
    {
        return;
    }
    let entries = limits.as_ref().and_then(|at| at.node.as_mapping());
    for (key, _) in entries.into_iter().flat_map(|m| m.iter()) {
        let scoped = config.limits.get(key.as_str()).map(|l| &l.scope);
        if scoped == Some(&Scope::ClientCert) {
            let at = key
                .span()
                .start()
                .map_or((1, 1), |m| (m.line(), m.column()));
            r.problems.push(
                at,
                "limits.scope_invalid",
                format!(
                    "limits.{}: scope client_cert needs server.tls.client_ca (no client \
                     sends a certificate unless asked)",
                    key.as_str()
                ),
            );
        }
    }
}

/// The judgement calls a file has not acknowledged.
fn warnings(r: &mut Reader<'_>, config: &Config, top: &yaml::Fields<'_>) {
    let ack = |code: &str| config.acknowledge.contains(code);
    if config.store.kind == StoreKind::Memory && !ack("store.process_local") {
        let at = top.get("store").map(|a| a.pos()).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "store.process_local",
            "store.kind \"memory\": every gateway process counts alone, so N replicas allow N \
             times each limit; use redis or redis_cluster in production, or list \
             store.process_local under `acknowledge:`",
        );
    }
    warn_client_keyed(r, config, top.get("routes"));
    // `server.tls_host_uncovered` needs the certificates' names: the
    // policy builder warns it once they are loaded.
    if config.server.escaped_slashes == EscapedSlashes::Keep && !ack("server.escaped_slashes_keep")
    {
        let at = top.get("server").map(|a| a.pos()).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "server.escaped_slashes_keep",
            "server.escaped_slashes \"keep\": fairgate routes /a%2Fb as one segment, but many \
             frameworks decode it to /a/b and route it elsewhere; make sure every upstream \
             keeps %2F escaped, or list server.escaped_slashes_keep under `acknowledge:`",
        );
    }
}

/// `auth: none` routes limited only by values the client picks: every new
/// value is a new, full bucket.
pub(super) fn warn_client_keyed(r: &mut Reader<'_>, config: &Config, routes: Option<At<'_>>) {
    if config.acknowledge.contains("limits.client_keyed") {
        return;
    }
    let nodes = routes
        .as_ref()
        .and_then(|at| at.node.as_sequence())
        .map(|s| s.iter().collect::<Vec<_>>())
        .unwrap_or_default();
    for (i, route) in config.routes.iter().enumerate() {
        let Some(names) = route
            .limits
            .as_ref()
            .filter(|_| !route.auth && !route.exempt)
        else {
            continue;
        };
        let limits: Vec<&Limit> = names.iter().filter_map(|n| config.limits.get(n)).collect();
        if limits.is_empty() || !limits.iter().all(|l| l.client_keyed()) {
            continue;
        }
        let guard = config.default_limits.unauthenticated.as_ref();
        let then = match guard {
            Some(_) if !route.client_ip_exempt => {
                "it also spends default_limits.unauthenticated per client address"
            }
            _ => "nothing else bounds it",
        };
        let at = nodes.get(i).map(|n| yaml::position(n)).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "limits.client_keyed",
            format!(
                "route \"{}\" has auth: none and only limits keyed on a path or header value the \
                 client chooses, so every new value gets a full bucket; {then}. List the accepted \
                 values (`scope: {{path: NAME, values: [...]}}`), or list limits.client_keyed \
                 under `acknowledge:`",
                route.name
            ),
        );
    }
}

/// Warning codes a file may silence under `acknowledge:`.
pub const ACKNOWLEDGEABLE: &[&str] = &[
    "store.process_local",
    "limits.client_keyed",
    "server.escaped_slashes_keep",
    "server.tls_host_uncovered",
];
