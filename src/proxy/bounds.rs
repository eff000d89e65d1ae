//! What one client may make the gateway hold (`Bounds`, from the
//! policy's `server` section), and the answers the edge gives when a
//! client goes over them (`Answers`): what the edge (`edge.rs`) and the
//! head reader (`heads.rs`) share.

use std::time::Duration;

use ipnet::IpNet;

use crate::config::Server;
use crate::proxy::respond::Deny;

/// What one client may make the gateway hold.
#[derive(Debug, Clone)]
pub struct Bounds {
    pub max_header_size: usize,
    pub header_timeout: Duration,
    /// Idle time allowed between two requests on one connection.
    pub keepalive_timeout: Duration,
    /// IPv6 peers are capped per network of this many bits.
    pub ipv6_prefix: u8,
    pub max_connections: u64,
    pub max_connections_per_ip: u64,
    /// Peers not capped per address (load balancers, proxies).
    pub trusted: Vec<IpNet>,
    /// Plain connections start with a PROXY protocol header (TLS ones had
    /// theirs read before the handshake).
    pub proxy_protocol: bool,
    /// Plain connections may open with the HTTP/2 preface (h2c).
    pub h2c: bool,
    /// RST_STREAM frames one HTTP/2 connection may send per second.
    pub h2_resets_per_second: u32,
}

impl Bounds {
    pub fn from_config(server: &Server) -> Self {
        Bounds {
            max_header_size: server.max_header_size as usize,
            header_timeout: server.header_timeout,
            keepalive_timeout: server.keepalive_timeout,
            ipv6_prefix: server.ipv6_prefix,
            max_connections: server.max_connections,
            max_connections_per_ip: server.max_connections_per_ip,
            trusted: server.trusted_proxies.clone(),
            proxy_protocol: server.proxy_protocol,
            h2c: server.http2.h2c,
            h2_resets_per_second: server.http2.max_resets_per_second,
        }
    }
}

/// The answers the edge writes itself, rendered once by the one answer
/// builder (`respond.rs`).
pub(crate) struct Answers {
    pub(crate) too_many_connections: Vec<u8>,
    pub(crate) head_too_large: Vec<u8>,
    pub(crate) head_timeout: Vec<u8>,
}

impl Answers {
    pub(crate) fn new(bounds: &Bounds) -> Self {
        Answers {
            too_many_connections: Deny::TooManyConnections.refusal().wire(),
            head_too_large: Deny::HeadTooLarge {
                max: bounds.max_header_size,
            }
            .refusal()
            .wire(),
            head_timeout: Deny::HeadTimeout.refusal().wire(),
        }
    }
}
