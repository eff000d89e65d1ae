//! The proxy: the edge every connection passes (`edge`), the Pingora phases
//! (`gateway`), admission (`admit`), header policy (`headers`), route
//! choice and the one routed path (`route`), the request context (`ctx`)
//! and the gateway's own answers (`respond`).

pub mod access_log;
pub mod admit;
pub mod attempt;
pub mod cors;
pub mod ctx;
pub mod directives;
pub mod edge;
pub mod gateway;
pub mod h2;
pub mod headers;
pub mod heads;
pub mod proxy_protocol;
pub mod quota;
pub mod respond;
pub mod route;
