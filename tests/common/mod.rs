//! The test harness: real processes on ephemeral loopback ports. An echo
//! and a raw upstream (`upstream`), the one builder of the configs suites
//! start (`policy`), the gateway binary with a config written to a
//! temporary directory (`gateway`), `redis-server` and Redis Cluster
//! (`redis`), clients and raw bytes (`http`). Used by path, not
//! glob-exported: the bucket suites' store under test (`stores`), the
//! edge-hardening suites' set-up (`edge_attack`) and the import suites'
//! runs of the importer (`ingress_import`). Everything started here is
//! ended by PID when its handle drops.

#![allow(dead_code, unused_imports, unused_macros)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod browser;
pub mod check;
pub mod cluster;
mod dns;
pub mod doors;
pub mod edge_attack;
pub mod failover;
pub mod forward_auth;
mod gateway;
pub mod gateway_api;
pub mod gateway_status;
mod http;
pub mod ingress_import;
pub mod kube_api;
mod otlp;
mod policy;
mod prometheus;
mod redis;
pub mod stores;
mod tls;
mod upstream;

pub use dns::*;
pub use fairgate::echo::Stats;
pub use gateway::*;
pub use http::*;
pub use otlp::*;
pub use policy::*;
pub use prometheus::*;
pub use redis::*;
pub use tls::*;
pub use upstream::*;

/// A loopback address with a free port, never the same twice in one test
/// process. Ports come from 10000-19999, below the kernel's ephemeral range
/// (so no client socket of a parallel test is handed the same port), and a
/// Redis Cluster node's bus port (+10000) stays below it too.
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 10_000;
    // nextest runs each test in a process of its own, with PIDs often
    // consecutive: spread them 211 ports apart (coprime to SPAN), or two
    // tests starting together walk the same ports and race for each.
    let start = std::process::id().wrapping_mul(211) % SPAN;
    for _ in 0..SPAN {
        let port = FIRST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        // Both the port and its cluster bus port must be free now.
        let bus = SocketAddr::from(([127, 0, 0, 1], (port + 10_000) as u16));
        if TcpListener::bind(addr).is_ok() && TcpListener::bind(bus).is_ok() {
            return addr;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + SPAN)
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
