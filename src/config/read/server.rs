//! Reads `server` and `admin`: listeners, TLS, threads, and the edge's bounds.

use super::*;

pub(super) fn server(r: &mut Reader<'_>, at: Option<At<'_>>, base: &Path) -> Server {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut server = Server {
        listen: vec!["0.0.0.0:8080".parse().expect("literal address")],
        tls: None,
        threads: cpus,
        shutdown_grace: Duration::from_secs(10),
        trusted_proxies: Vec::new(),
        escaped_slashes: EscapedSlashes::Reject,
        max_header_size: 32 * 1024,
        max_header_field_size: 8 * 1024,
        header_timeout: Duration::from_secs(10),
        body_idle_timeout: Duration::from_secs(30),
        upgrade_idle_timeout: Duration::from_secs(3600),
        keepalive_timeout: Duration::from_secs(60),
        keep_path_parameters: false,
        max_connections: 10_000,
        max_connections_per_ip: 256,
        allow_underscores_in_headers: false,
        ipv6_prefix: 64,
        proxy_protocol: false,
        http2: Http2 {
            h2c: false,
            max_concurrent_streams: 100,
            max_header_list_size: 32 * 1024,
            max_resets_per_second: 100,
        },
        addresses: AddressRules::default(),
        compression: None,
        tcp_services: Vec::new(),
    };
    let Some(at) = at else { return server };
    let Some(f) = r.mapping(&at, schema::SERVER) else {
        return server;
    };
    listeners(r, &f, base, &mut server);
    proxy_protocol(r, &f, &mut server);
    path_rules(r, &f, &mut server);
    edge_bounds(r, &at, &f, &mut server);
    server.http2.max_header_list_size = server.max_header_size as u32;
    if let Some(at) = f.get("http2") {
        http2(r, &at, &mut server.http2);
    }
    server.compression = f.get("compression").and_then(|c| compression(r, &c));
    server
}

/// The media types compressed by default: ingress-nginx's `gzip-types`
/// and `text/html`, which nginx always compresses.
pub const COMPRESSED_TYPES: &[&str] = &[
    "application/atom+xml",
    "application/javascript",
    "application/json",
    "application/rss+xml",
    "application/vnd.ms-fontobject",
    "application/x-font-ttf",
    "application/x-javascript",
    "application/x-web-app-manifest+json",
    "application/xhtml+xml",
    "application/xml",
    "font/opentype",
    "image/svg+xml",
    "image/x-icon",
    "text/css",
    "text/html",
    "text/javascript",
    "text/plain",
    "text/x-component",
];

/// `server.compression.algorithms`: gzip, br, zstd, each once, in order.
fn codings(r: &mut Reader<'_>, list: &At<'_>) -> Vec<Coding> {
    let mut codings = Vec::new();
    for (i, node) in r.sequence(list).into_iter().enumerate() {
        let item = list.item(i, node);
        let coding = match r.string(&item).as_deref() {
            Some("gzip") => Coding::Gzip,
            Some("br") => Coding::Brotli,
            Some("zstd") => Coding::Zstd,
            Some(_) => {
                r.error_value(&item, "server.compression_invalid", "gzip, br or zstd");
                continue;
            }
            None => continue,
        };
        if !codings.contains(&coding) {
            codings.push(coding);
        }
    }
    if codings.is_empty() {
        r.error(
            list,
            "server.compression_invalid",
            "needs at least one of gzip, br, zstd",
        );
    }
    codings
}

/// `server.compression: {algorithms, gzip_level, brotli_level, zstd_level,
/// min_length, types, max_memory}`.
fn compression(r: &mut Reader<'_>, at: &At<'_>) -> Option<Compression> {
    let f = r.mapping(at, schema::COMPRESSION)?;
    let mut out = Compression {
        codings: vec![Coding::Gzip],
        gzip_level: 1,
        brotli_level: 4,
        zstd_level: 3,
        min_length: 256,
        types: COMPRESSED_TYPES.iter().map(|t| t.to_string()).collect(),
        max_memory: 256 << 20,
    };
    if let Some(list) = f.get("algorithms") {
        out.codings = codings(r, &list);
    }
    for (key, slot, max) in [
        ("gzip_level", &mut out.gzip_level, 9),
        ("brotli_level", &mut out.brotli_level, 11),
        ("zstd_level", &mut out.zstd_level, 9),
    ] {
        let Some(at) = f.get(key) else { continue };
        match r.count(&at, "server.compression_invalid").map(|n| n.get()) {
            Some(n) if n <= max => *slot = n as u32,
            Some(_) => r.error_value(&at, "server.compression_invalid", format!("1 to {max}")),
            None => {}
        }
    }
    if let Some(at) = f.get("min_length") {
        out.min_length = r.size(&at).unwrap_or(out.min_length);
    }
    if let Some(at) = f.get("max_memory") {
        match r.size(&at) {
            Some(n) if n >= 1 << 20 => out.max_memory = n,
            Some(_) => r.error_value(&at, "server.compression_invalid", "at least 1MiB"),
            None => {}
        }
    }
    if let Some(at) = f.get("types") {
        out.types = r
            .strings(&at)
            .iter()
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        for t in &out.types {
            if t != "*"
                && !t
                    .split_once('/')
                    .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
            {
                r.error(
                    &at,
                    "server.compression_invalid",
                    format!("{t:?} is not a media type (type/subtype, type/* or *)"),
                );
            }
        }
    }
    Some(out)
}

/// `server.tls`: the listener, its certificates (a list, or `cert` and
/// `key` for one) and client certificates. The files must exist; the
/// policy builder loads them, reporting at the places kept here.
fn tls(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<ServerTls> {
    let t = r.mapping(at, schema::SERVER_TLS)?;
    if t.get("listen").is_none() {
        missing(r, at, "listen");
    }
    let listen = t
        .get("listen")
        .and_then(|a| socket_addr(r, &a, "server.listen_invalid"));
    let certificates = match (t.get("certificates"), t.get("cert")) {
        (Some(list), None) => certificates(r, &list, base),
        (None, Some(_)) => {
            let cert = file_path(r, &t, "cert", base);
            let key = file_path(r, &t, "key", base);
            let one = cert.zip(key).map(|(cert, key)| Located {
                value: Certificate {
                    cert: PemSource::File(cert),
                    key: PemSource::File(key),
                    hosts: Vec::new(),
                },
                place: at.place(),
            });
            one.into_iter().collect()
        }
        (Some(_), Some(_)) => {
            r.error(
                at,
                "server.tls_invalid",
                "give certificates or cert and key, not both",
            );
            return None;
        }
        // A listener that only passes TLS through needs none of its own.
        (None, None) if t.get("passthrough").is_some() => Vec::new(),
        (None, None) => {
            missing(r, at, "certificates");
            return None;
        }
    };
    let client_ca = t.get("client_ca").and_then(|ca_at| {
        let path = file_path(r, &t, "client_ca", base)?;
        Some(Located {
            value: PemSource::File(path),
            place: ca_at.place_value(),
        })
    });
    let client_cert_required = match t.get("client_auth") {
        None => true,
        Some(a) => match r.string(&a).as_deref() {
            Some("required") => true,
            Some("optional") => false,
            _ => {
                r.error_value(&a, "server.tls_invalid", "must be required or optional");
                true
            }
        },
    };
    if let (Some(a), None) = (t.get("client_auth"), t.get("client_ca")) {
        r.error(&a, "server.tls_invalid", "client_auth needs client_ca");
    }
    let clients = t
        .get("client_certificates")
        .map(|c| super::tls_hosts::client_certificates(r, &c, base))
        .unwrap_or_default();
    let passthrough = t
        .get("passthrough")
        .map(|p| super::tls_hosts::passthrough(r, &p, &clients))
        .unwrap_or_default();
    // A missing or bad `listen` is already an error; the section is still
    // kept so the builder checks its certificates in the same run.
    let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    Some(ServerTls {
        listen: listen.unwrap_or(unspecified),
        certificates,
        client_ca,
        client_cert_required,
        clients,
        passthrough,
    })
}

/// The items of `server.tls.certificates`, with where each is written.
fn certificates(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Vec<Located<Certificate>> {
    let mut out = Vec::new();
    let items = r.sequence(at);
    if items.is_empty() {
        r.error(at, "server.tls_invalid", "needs at least one certificate");
    }
    for (i, node) in items.into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(c) = r.mapping(&item, schema::SERVER_TLS_CERT) else {
            continue;
        };
        let cert = pem_source(r, &c, "cert", base);
        let key = pem_source(r, &c, "key", base);
        let hosts = c.get("hosts").map(|h| r.strings(&h)).unwrap_or_default();
        if let (Some(cert), Some(key)) = (cert, key) {
            let hosts = hosts.iter().map(|h| crate::host::normal_name(h)).collect();
            out.push(Located {
                value: Certificate { cert, key, hosts },
                place: item.place(),
            });
        }
    }
    out
}

/// `server.http2`: what one HTTP/2 client connection may ask of the gateway.
fn http2(r: &mut Reader<'_>, at: &At<'_>, h2: &mut Http2) {
    let Some(f) = r.mapping(at, schema::SERVER_HTTP2) else {
        return;
    };
    if let Some(b) = f.get("h2c").and_then(|a| r.bool(&a)) {
        h2.h2c = b;
    }
    for (key, slot, max) in [
        (
            "max_concurrent_streams",
            &mut h2.max_concurrent_streams,
            10_000,
        ),
        (
            "max_resets_per_second",
            &mut h2.max_resets_per_second,
            100_000,
        ),
    ] {
        if let Some(at) = f.get(key) {
            match r.count(&at, "server.http2_invalid") {
                Some(n) if n.get() <= max => *slot = n.get() as u32,
                Some(_) => {
                    r.error_value(&at, "server.http2_invalid", format!("must be 1 to {max}"))
                }
                None => {}
            }
        }
    }
    if let Some(at) = f.get("max_header_list_size") {
        match r.size(&at) {
            Some(n @ 1024..=1_048_576) => h2.max_header_list_size = n as u32,
            Some(_) => r.error_value(&at, "server.size_invalid", "must be 1KiB to 1MiB"),
            None => {}
        }
    }
}

/// Listeners, TLS, threads, grace and the trusted proxies.
fn listeners(r: &mut Reader<'_>, f: &yaml::Fields<'_>, base: &Path, server: &mut Server) {
    if let Some(at) = f.get("listen") {
        let items = r.sequence(&at);
        server.listen = items
            .into_iter()
            .enumerate()
            .filter_map(|(i, node)| socket_addr(r, &at.item(i, node), "server.listen_invalid"))
            .collect();
        if at.node.as_sequence().is_some_and(|s| s.is_empty()) {
            r.error(&at, "server.listen_invalid", "needs at least one address");
        }
    }
    if let Some(at) = f.get("tls") {
        server.tls = tls(r, &at, base);
    }
    if let Some(at) = f.get("tcp_services") {
        server.tcp_services = super::tcp::tcp_services(r, &at);
    }
    if let Some(at) = f.get("threads") {
        match r.u64(&at, "server.threads_invalid") {
            Some(n @ 1..=1024) => server.threads = n as usize,
            Some(_) => r.error_value(&at, "server.threads_invalid", "must be 1 to 1024"),
            None => {}
        }
    }
    if let Some(d) = f.get("shutdown_grace").and_then(|at| r.duration(&at)) {
        server.shutdown_grace = d;
    }
    if let Some(at) = f.get("trusted_proxies") {
        for (i, node) in r.sequence(&at).into_iter().enumerate() {
            if let Some(net) = cidr(r, &at.item(i, node)) {
                server.trusted_proxies.push(net);
            }
        }
    }
    server.addresses = address_rules(r, f);
}

/// PROXY protocol is believed only from trusted proxies, so it needs some.
fn proxy_protocol(r: &mut Reader<'_>, f: &yaml::Fields<'_>, server: &mut Server) {
    let Some(at) = f.get("proxy_protocol") else {
        return;
    };
    server.proxy_protocol = r.bool(&at).unwrap_or(false);
    if server.proxy_protocol && server.trusted_proxies.is_empty() {
        r.error(
            &at,
            "server.proxy_protocol_untrusted",
            "PROXY protocol is believed only from trusted_proxies; list the load balancers there",
        );
    }
}

/// How paths are read: escaped slashes and `;` path parameters.
fn path_rules(r: &mut Reader<'_>, f: &yaml::Fields<'_>, server: &mut Server) {
    if let Some(at) = f.get("escaped_slashes") {
        match r.string(&at).as_deref() {
            Some("reject") => server.escaped_slashes = EscapedSlashes::Reject,
            Some("decode") => server.escaped_slashes = EscapedSlashes::Decode,
            Some("keep") => server.escaped_slashes = EscapedSlashes::Keep,
            Some(_) => r.error_value(
                &at,
                "server.escaped_slashes_invalid",
                "must be one of reject, decode, keep",
            ),
            None => {}
        }
    }
    if let Some(at) = f.get("path_parameters") {
        match r.string(&at).as_deref() {
            Some("reject") => server.keep_path_parameters = false,
            Some("keep") => server.keep_path_parameters = true,
            Some(_) => r.error_value(
                &at,
                "server.path_parameters_invalid",
                "must be one of reject, keep",
            ),
            None => {}
        }
    }
}

/// What one client may make the gateway hold (the edge's bounds).
fn edge_bounds(r: &mut Reader<'_>, at: &At<'_>, f: &yaml::Fields<'_>, server: &mut Server) {
    for (key, slot, min, max) in [
        (
            "max_header_size",
            &mut server.max_header_size,
            1024,
            1 << 20,
        ),
        (
            "max_header_field_size",
            &mut server.max_header_field_size,
            256,
            1 << 20,
        ),
    ] {
        if let Some(at) = f.get(key) {
            match r.size(&at) {
                Some(n) if (min..=max).contains(&n) => *slot = n,
                Some(_) => r.error_value(
                    &at,
                    "server.size_invalid",
                    format!("must be {min} bytes to 1MiB"),
                ),
                None => {}
            }
        }
    }
    if server.max_header_field_size > server.max_header_size {
        r.error(
            at,
            "server.size_invalid",
            "max_header_field_size cannot exceed max_header_size",
        );
    }
    for (key, slot) in [
        ("header_timeout", &mut server.header_timeout),
        ("body_idle_timeout", &mut server.body_idle_timeout),
        ("upgrade_idle_timeout", &mut server.upgrade_idle_timeout),
        ("keepalive_timeout", &mut server.keepalive_timeout),
    ] {
        if let Some(d) = f.get(key).and_then(|at| r.positive_duration(&at)) {
            *slot = d;
        }
    }
    for (key, slot) in [
        ("max_connections", &mut server.max_connections),
        ("max_connections_per_ip", &mut server.max_connections_per_ip),
    ] {
        if let Some(n) = f
            .get(key)
            .and_then(|at| r.count(&at, "server.connections_invalid"))
        {
            *slot = n.get();
        }
    }
    if let Some(b) = f
        .get("allow_underscores_in_headers")
        .and_then(|at| r.bool(&at))
    {
        server.allow_underscores_in_headers = b;
    }
    if let Some(at) = f.get("ipv6_prefix") {
        match r.u64(&at, "server.ipv6_prefix_invalid") {
            Some(n @ 48..=128) => server.ipv6_prefix = n as u8,
            Some(_) => r.error_value(&at, "server.ipv6_prefix_invalid", "must be 48 to 128"),
            None => {}
        }
    }
}

/// A certificate's `cert` or `key`: `{what}_file` (a path), or `{what}_pem`
/// (the PEM text itself, as the Kubernetes controller hands over a
/// Secret's), exactly one of them.
pub(super) fn pem_source(
    r: &mut Reader<'_>,
    c: &yaml::Fields<'_>,
    what: &str,
    base: &Path,
) -> Option<PemSource> {
    pem_source_in(r, c, what, base, "server.tls_invalid")
}

/// `WHAT_file` or `WHAT_pem`, one of the two (else `code`).
pub(super) fn pem_source_in(
    r: &mut Reader<'_>,
    c: &yaml::Fields<'_>,
    what: &str,
    base: &Path,
    code: &'static str,
) -> Option<PemSource> {
    let (file, pem) = (format!("{what}_file"), format!("{what}_pem"));
    match (c.get(&file), c.get(&pem)) {
        (Some(_), Some(at)) => {
            r.error(&at, code, format!("give {file} or {pem}, not both"));
            None
        }
        (None, Some(at)) => {
            let text = r.string(&at)?;
            Some(PemSource::Pem {
                name: at.path.clone(),
                bytes: text.into_bytes().into(),
            })
        }
        (_, None) => file_path(r, c, &file, base).map(PemSource::File),
    }
}
