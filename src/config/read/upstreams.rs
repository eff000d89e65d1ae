//! Reads `upstreams`: pools of targets and their timeouts.

use super::*;

pub(super) fn upstreams(r: &mut Reader<'_>, at: Option<At<'_>>) -> BTreeMap<String, Upstream> {
    let mut out = BTreeMap::new();
    let Some(at) = at else { return out };
    for (name, at) in r.named(&at) {
        let Some(f) = r.mapping(&at, schema::UPSTREAM) else {
            continue;
        };
        let mut targets = Vec::new();
        match f.get("targets") {
            Some(t) => {
                for (i, node) in r.sequence(&t).into_iter().enumerate() {
                    let item = t.item(i, node);
                    let Some(text) = r.string(&item) else {
                        continue;
                    };
                    if target_ok(&text) {
                        targets.push(text);
                    } else {
                        r.error_value(&item, "upstreams.target_invalid", "expected HOST:PORT");
                    }
                }
                if t.node.as_sequence().is_some_and(|s| s.is_empty()) {
                    r.error(&t, "upstreams.target_invalid", "needs at least one target");
                }
            }
            None => missing(r, &at, "targets"),
        }
        let flag = |r: &mut Reader<'_>, key: &str, default: bool| {
            f.get(key).and_then(|at| r.bool(&at)).unwrap_or(default)
        };
        let tls = flag(r, "tls", false);
        let tls_verify = flag(r, "tls_verify", true);
        let dur = |r: &mut Reader<'_>, key: &str, default: u64| {
            f.get(key)
                .and_then(|at| r.positive_duration(&at))
                .unwrap_or(Duration::from_millis(default))
        };
        out.insert(
            name.to_string(),
            Upstream {
                targets,
                tls,
                sni: f.get("sni").and_then(|at| r.string(&at)),
                tls_verify,
                connect_timeout: dur(r, "connect_timeout", 1_000),
                read_timeout: dur(r, "read_timeout", 60_000),
                health_interval: dur(r, "health_check_interval", 5_000),
            },
        );
    }
    out
}

pub(super) fn target_ok(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}
