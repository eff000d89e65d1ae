//! `server.tcp_services`: listeners whose connections are not HTTP but
//! bytes, passed to a pool (ingress-nginx's `tcp-services` ConfigMap). The
//! reader builds them; the edge admits each connection and relays it.

use std::net::SocketAddr;
use std::time::Duration;

/// One listener and where its connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpService {
    /// Fixed for the life of the process (a restart applies a change).
    pub listen: SocketAddr,
    pub upstream: String,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
}
