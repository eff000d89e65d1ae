//! The reference point of `docs/benchmarks.md`: the smallest Pingora reverse
//! proxy, built with fairgate's release settings (mimalloc, fat LTO) and
//! runtime choices (one thread, no work stealing, no compression module),
//! and nothing else: no routing, headers, metrics or logs. What fairgate
//! costs above it is fairgate's; what it costs above nginx is Pingora's.
//!
//!   cargo run --release --example bare_pingora -- 127.0.0.1:8081 127.0.0.1:8080

use async_trait::async_trait;
use pingora::modules::http::HttpModules;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bare {
    upstream: String,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: bare_pingora LISTEN_ADDR UPSTREAM_ADDR");
        std::process::exit(2);
    };
    let conf = ServerConf {
        threads: 1,
        work_stealing: false,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = http_proxy_service(&server.configuration, Bare { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.run_forever();
}
