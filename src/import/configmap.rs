//! The controller's ConfigMap (found by name, or `--configmap`): each key
//! becomes a default of every route (`Globals`), a `server` key, or, for
//! a rule over every Ingress that does not carry over, what withholds
//! them all; every key gets a report line.

use std::collections::BTreeMap;

use serde_json::Value;

use super::auth;
use super::draft::{Draft, Globals, Hsts};
use super::emit::Key;
use super::manifests::{text, Object};
use super::out::{ServerKey, ServerSetting};
use super::streaming;
use super::units;
use super::Verdict;

use crate::k8s::Kind;

/// Keys that size nginx's own workers, connections, buffers and hash
/// tables: nothing of them carries over, and nothing is lost.
const NGINX_TUNING: &[&str] = &[
    "enable-multi-accept",
    "map-hash-bucket-size",
    "max-worker-connections",
    "max-worker-open-files",
    "proxy-headers-hash-bucket-size",
    "proxy-headers-hash-max-size",
    "reuse-port",
    "server-name-hash-bucket-size",
    "server-name-hash-max-size",
    "ssl-buffer-size",
    "variables-hash-bucket-size",
    "variables-hash-max-size",
    "worker-cpu-affinity",
    "worker-processes",
    "worker-shutdown-timeout",
];

/// Keys of nginx's access and error logs.
const NGINX_LOGS: &[&str] = &[
    "access-log-params",
    "access-log-path",
    "disable-access-log",
    "error-log-level",
    "error-log-path",
    "log-format-escape-json",
    "log-format-escape-none",
    "log-format-stream",
    "log-format-upstream",
];

/// The controller's ConfigMap: its keys become defaults of every route.
pub fn read(draft: &mut Draft<'_>) {
    let named = |o: &&Object| match &draft.options.configmap {
        Some(id) => &o.id() == id,
        None => matches!(
            o.name.as_str(),
            "ingress-nginx-controller" | "nginx-configuration" | "nginx-ingress-controller"
        ),
    };
    let Some(cm) = draft
        .objects
        .iter()
        .copied()
        .filter(|o| o.is(Kind::ConfigMap))
        .find(named)
    else {
        let verdict = match &draft.options.configmap {
            Some(id) => Verdict::Unsupported(format!(
                "ConfigMap {id} is not among the inputs; its settings are not known"
            )),
            None => Verdict::Approximated(
                "no controller ConfigMap among the inputs: ingress-nginx's defaults assumed \
                 (give it, or name it with --configmap NS/NAME)"
                    .into(),
            ),
        };
        draft.line("controller", "configmap", verdict);
        return;
    };
    let subject = format!("configmap {}", cm.id());
    let Some(Value::Object(data)) = cm.value.get("data") else {
        return;
    };
    let strings: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.clone(), text(v, &[]).unwrap_or_default()))
        .collect();
    let mut said = Vec::new();
    if strings.keys().any(|k| k.starts_with("global-auth-")) {
        let (method, lines) = auth::global(&strings);
        if lines
            .iter()
            .any(|(_, v)| matches!(v, Verdict::Unsupported(_)))
        {
            draft.withheld = Some("the ConfigMap's global-auth-* did not carry over".into());
        }
        draft.globals.global_auth = method;
        said = lines;
    }
    let (compression, lines) = super::compression::read(&strings);
    said.extend(lines);
    if let Some(c) = compression {
        draft.server.push(ServerSetting::Compression(c));
    }
    for (key, value) in &strings {
        let verdict = match said.iter().position(|(k, _)| k == key) {
            Some(at) => said.remove(at).1,
            None => setting(draft, key, value),
        };
        draft.line(&subject, key, verdict);
    }
}

/// What one key of the ConfigMap becomes.
fn setting(draft: &mut Draft<'_>, key: &str, value: &str) -> Verdict {
    let g = &mut draft.globals;
    match key {
        "limit-req-status-code" | "limit-conn-status-code" => refusal_status(g, key, value),
        "proxy-body-size" => match units::nginx_size(value) {
            Some(size) => {
                g.body_size = size;
                Verdict::Mapped("the max_body of routes without their own".into())
            }
            None => Verdict::Unsupported(format!("{value:?} is not an nginx size")),
        },
        "ssl-redirect" | "force-ssl-redirect" => {
            let on = value == "true";
            if key == "ssl-redirect" {
                g.ssl_redirect = on;
            } else {
                g.force_ssl_redirect = on;
            }
            Verdict::Mapped("the https_redirect of routes without the annotation".into())
        }
        "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => {
            timeout(g, key, value)
        }
        "hsts" | "hsts-max-age" | "hsts-include-subdomains" | "hsts-preload" => {
            hsts_key(&mut g.hsts, key, value)
        }
        k if streaming::KEYS.contains(&k) => streaming::verdict(k, value),
        "proxy-next-upstream" => {
            g.next_upstream = Some(value.to_string());
            Verdict::Mapped("the retries of routes without their own".into())
        }
        "proxy-next-upstream-tries" => {
            g.next_upstream_tries = Some(value.to_string());
            Verdict::Mapped("the retries of routes without their own".into())
        }
        "enable-underscores-in-headers" => {
            let on = value == "true";
            draft.server.push(ServerSetting::AllowUnderscoresInHeaders(on));
            let key = ServerKey::AllowUnderscoresInHeaders.as_str();
            Verdict::Mapped(format!("server.{key}"))
        }
        "use-forwarded-headers" | "compute-full-forwarded-for" | "forwarded-for-header" => {
            Verdict::Approximated(
                "list the load balancer's addresses in server.trusted_proxies: the manifests do not say them"
                    .into(),
            )
        }
        "whitelist-source-range" | "denylist-source-range" | "block-cidrs"
        | "block-user-agents" | "block-referers" => access(draft, key, value),
        k if k.ends_with("-snippet") || k.starts_with("global-auth-") => access(draft, key, value),
        "use-proxy-protocol" if value == "true" => Verdict::Unsupported(
            "set server.proxy_protocol: true and list the load balancer in server.trusted_proxies \
             (the only peers whose PROXY header is believed); the manifests do not say its addresses"
                .into(),
        ),
        "allow-snippet-annotations" => {
            draft.globals.snippets = value == "true";
            let why = match draft.globals.snippets {
                true => "snippet annotations are read (their header directives translated)",
                false => "snippet annotations are ignored, as ingress-nginx ignores them",
            };
            Verdict::Mapped(why.into())
        }
        "enable-modsecurity" | "enable-owasp-modsecurity-crs" => waf(draft, key, value),
        "annotations-risk-level" => {
            Verdict::Mapped("nothing to do: fairgate runs no nginx snippets".into())
        }
        k if NGINX_TUNING.contains(&k) => Verdict::Mapped(
            "nothing to do: it tunes nginx's own processes, buffers or tables".into(),
        ),
        k if NGINX_LOGS.contains(&k) => Verdict::Approximated(
            "fairgate writes its own access log lines (JSON, one per request); nginx's log \
             formats and files are not read"
                .into(),
        ),
        _ => Verdict::Unsupported("no fairgate equivalent".into()),
    }
}

/// `enable-modsecurity` and `enable-owasp-modsecurity-crs`: a WAF for
/// every Ingress, which fairgate does not have, withholds them all.
fn waf(draft: &mut Draft<'_>, key: &str, value: &str) -> Verdict {
    if !units::go_bool(value) {
        return Verdict::Mapped("off: nothing to do".into());
    }
    draft.withheld = Some(format!("the ConfigMap's {key} did not carry over"));
    Verdict::Unsupported(
        "fairgate has no web application firewall: every Ingress is withheld rather than \
         served without the rules that guarded it"
            .into(),
    )
}

/// The ConfigMap's rules for every Ingress: address lists, or what
/// withholds them all.
fn access(draft: &mut Draft<'_>, key: &str, value: &str) -> Verdict {
    let lost = format!("the ConfigMap's {key} did not carry over");
    let target = match key {
        "whitelist-source-range" => ServerKey::AllowCidrs,
        "denylist-source-range" => ServerKey::DenyCidrs,
        k if k.ends_with("-snippet") => {
            draft.withheld = Some(lost);
            return Verdict::Unsupported(
                "nginx configuration for every Ingress; never translated".into(),
            );
        }
        _ => {
            draft.withheld = Some(lost);
            return Verdict::Unsupported(
                "a rule for every Ingress that fairgate cannot carry over".into(),
            );
        }
    };
    match units::cidrs(value) {
        Ok(list) => {
            draft.server.push(match target {
                ServerKey::AllowCidrs => ServerSetting::AllowCidrs(list),
                _ => ServerSetting::DenyCidrs(list),
            });
            Verdict::Mapped(format!("server.{}", target.as_str()))
        }
        Err(why) => {
            draft.withheld = Some(lost);
            Verdict::Unsupported(why.to_string())
        }
    }
}

/// `limit-req-status-code`, `limit-conn-status-code`.
fn refusal_status(g: &mut Globals, key: &str, value: &str) -> Verdict {
    match value.parse::<u16>() {
        Ok(s @ 400..=599) => {
            let (slot, target) = if key == "limit-req-status-code" {
                (&mut g.limit_req_status, "limits")
            } else {
                (&mut g.limit_conn_status, "concurrency")
            };
            *slot = s;
            Verdict::Mapped(format!("status: {s} on every imported {target} policy"))
        }
        _ => Verdict::Unsupported(format!("{value:?} is not a status from 400 to 599")),
    }
}

/// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
fn timeout(g: &mut Globals, key: &str, value: &str) -> Verdict {
    let i = [
        "proxy-connect-timeout",
        "proxy-read-timeout",
        "proxy-send-timeout",
    ]
    .iter()
    .position(|k| *k == key)
    .unwrap_or(0);
    match units::seconds(value) {
        Some(d) => {
            g.timeouts[i] = Some(d);
            Verdict::Mapped(match i {
                0 => "the connect_timeout of every pool".into(),
                _ => "the timeouts of routes without their own".into(),
            })
        }
        None => Verdict::Unsupported(format!("{value:?} is not a number of seconds")),
    }
}

/// One of the ConfigMap's `hsts*` keys.
fn hsts_key(hsts: &mut Hsts, key: &str, value: &str) -> Verdict {
    let flag = match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    };
    match (key, flag) {
        ("hsts", Some(on)) => hsts.on = on,
        ("hsts-include-subdomains", Some(on)) => hsts.include_subdomains = on,
        ("hsts-preload", Some(on)) => hsts.preload = on,
        ("hsts-max-age", _) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
            hsts.max_age = value.to_string()
        }
        ("hsts-max-age", _) => {
            return Verdict::Unsupported(format!("{value:?} is not a number of seconds"))
        }
        _ => return Verdict::Unsupported(format!("{value:?} is not true or false")),
    }
    Verdict::Mapped(
        "the Strict-Transport-Security header of the routes of hosts with a TLS section".into(),
    )
}
