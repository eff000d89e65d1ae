//! `server.tcp_services`: byte-stream listeners and their pools.

use std::collections::BTreeSet;
use std::time::Duration;

use super::super::place::Located;
use super::super::schema;
use super::super::tcp::TcpService;
use super::super::yaml::{At, Reader};
use super::common::{missing, socket_addr};

const CODE: &str = "server.tcp_invalid";

/// The entries, each at its own address (not one of the HTTP listeners':
/// `check_upstreams` checks that and the pools once all is read).
pub(super) fn tcp_services(r: &mut Reader<'_>, at: &At<'_>) -> Vec<Located<TcpService>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, node) in r.sequence(at).into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(t) = r.mapping(&item, schema::SERVER_TCP) else {
            continue;
        };
        let listen = match t.get("listen") {
            Some(l) => socket_addr(r, &l, CODE),
            None => {
                missing(r, &item, "listen");
                None
            }
        };
        let upstream = match t.get("upstream") {
            Some(u) => r.string(&u),
            None => {
                missing(r, &item, "upstream");
                None
            }
        };
        // ingress-nginx's `proxy-stream-timeout` default.
        let idle_timeout = t
            .get("idle_timeout")
            .and_then(|d| r.positive_duration(&d))
            .unwrap_or(Duration::from_secs(600));
        let (Some(listen), Some(upstream)) = (listen, upstream) else {
            continue;
        };
        if !seen.insert(listen) {
            r.error(&item, CODE, format!("{listen} is in two entries"));
        }
        out.push(Located {
            value: TcpService {
                listen,
                upstream,
                idle_timeout,
            },
            place: item.place(),
        });
    }
    out
}

/// Each entry's pool exists and does not speak TLS (the bytes are the
/// client's), and its address is no HTTP listener's.
pub(super) fn check_upstreams(r: &mut Reader<'_>, config: &super::super::Config) {
    let server = &config.server;
    let http: Vec<std::net::SocketAddr> = server
        .listen
        .iter()
        .copied()
        .chain(server.tls.as_ref().map(|t| t.listen))
        .collect();
    for entry in &server.tcp_services {
        let s = &entry.value;
        let why = match config.upstreams.get(&s.upstream) {
            _ if http.contains(&s.listen) => format!("{} is an HTTP listener's address", s.listen),
            None => format!("upstream {:?}: no upstream with this name", s.upstream),
            Some(pool) if pool.tls => format!(
                "upstream {:?} has tls: true; a TCP service passes the client's bytes as they are",
                s.upstream
            ),
            Some(_) => continue,
        };
        r.problems.push_at(&entry.place, CODE, why);
    }
}
