//! A `fair_share` pool's permit (SPEC §12), taken after the limits and the
//! concurrency slot: at once while the pool has room, else after the
//! request's turn in its flow's queue. A client that hangs up while its
//! request waits leaves the queue at once: HTTP/1 by its connection's
//! end (read closed, as nginx's broken-connection check sees it), HTTP/2
//! by its stream's reset.

use std::os::fd::{BorrowedFd, OwnedFd};

use pingora::proxy::Session;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::actions;
use super::ctx::Ctx;
use super::respond::{Deny, Refusal};
use crate::upstream::fair::{flow_key, Refused};

/// Takes the permit of the pool this request goes to, when that pool has
/// `fair_share`; the pool is then kept for every attempt of the request.
pub async fn take_permit(
    shared: &crate::state::Shared,
    session: &mut Session,
    ctx: &mut Ctx,
) -> Result<(), Deny> {
    let policy = ctx.policy.clone();
    let route = ctx.route().ok_or(Deny::NoRoute)?;
    let pool = actions::pool(session, ctx, route).to_string();
    // A split or canary with a `fair_share` pool among its sides: the pool
    // drawn now is the request's, so no attempt reaches that pool without
    // its permit.
    if fair_side(&policy.config, route) {
        ctx.upstream.picked = Some(pool.clone());
    }
    let (Some(queue), Some(settings)) = (
        shared.fair.get(&pool),
        policy
            .config
            .upstreams
            .get(&pool)
            .and_then(|u| u.fair_share.as_ref()),
    ) else {
        return Ok(());
    };
    let identity = ctx.identity.as_ref();
    let headers = &session.req_header().headers;
    let address = (ctx.client_ip, policy.config.server.ipv6_prefix);
    let flow = flow_key(&settings.by, identity, address, headers);
    let weight = settings.weight(identity.map(|i| i.plan.as_str()));
    let answer = tokio::select! {
        biased;
        answer = queue.acquire(&flow, weight) => answer,
        () = client_gone(session) => return Err(Deny::ClientGone),
    };
    match answer {
        Ok(permit) => {
            ctx.upstream.permit = Some(permit);
            ctx.upstream.picked = Some(pool);
            Ok(())
        }
        refused => {
            // The access line names the pool that refused.
            ctx.upstream.pool = Some(pool.clone());
            match refused {
                Err(Refused::Full) => Err(Deny::QueueFull { pool }),
                _ => Err(Deny::QueueTimeout {
                    pool,
                    timeout: settings.timeout,
                }),
            }
        }
    }
}

/// Whether a pool the route may draw (its `upstream`, a split's or its
/// canary's) has a `fair_share`.
fn fair_side(config: &crate::config::Config, route: &crate::config::Route) -> bool {
    let actions = &route.actions;
    let sides = std::iter::once(&route.upstream)
        .chain(actions.split.iter().map(|(name, _)| name))
        .chain(actions.canary.iter().map(|c| &c.upstream));
    let fair = |name: &String| {
        config
            .upstreams
            .get(name)
            .is_some_and(|u| u.fair_share.is_some())
    };
    (!actions.split.is_empty() || actions.canary.is_some()) && sides.into_iter().any(fair)
}

/// The answers of a `fair_share` pool: its flow's queue full, the wait
/// too long, the client gone.
pub(super) fn refusal(deny: Deny) -> Refusal {
    match deny {
        Deny::QueueFull { pool } => Refusal::new(
            429,
            "queue-full",
            "Too many requests",
            format!(
                "the upstream \"{pool}\" is saturated and this client's share of its \
                 queue is full; retry later"
            ),
        )
        .header(http::header::RETRY_AFTER, "1"),
        Deny::QueueTimeout { pool, timeout } => Refusal::new(
            503,
            "queue-timeout",
            "Service unavailable",
            format!(
                "the upstream \"{pool}\" is saturated and this request waited {} ms \
                 for its turn; retry later",
                timeout.as_millis()
            ),
        )
        .header(http::header::RETRY_AFTER, "1"),
        // Never seen: the client is gone (nginx's 499 in the access log).
        Deny::ClientGone => Refusal::new(
            499,
            "client-gone",
            "Client closed request",
            "the client hung up while its request waited",
        )
        .close(),
        other => other.refusal(),
    }
}

/// Resolves when the client is gone: its HTTP/2 stream reset or closed,
/// or its connection's read side closed (or failed). Pends forever when
/// that cannot be watched.
async fn client_gone(session: &mut Session) {
    let downstream = session.as_downstream_mut();
    if let Some(closed) = downstream.watch_h2_stream_close() {
        let _ = closed.await;
        return;
    }
    let Some(fd) = downstream.stream().map(|s| s.id()) else {
        return std::future::pending().await;
    };
    // A second descriptor of the same socket, watched on its own (the
    // first is registered with the runtime by the connection).
    // SAFETY: `fd` is the open socket of this session, which outlives
    // this future (the session is borrowed for its whole life).
    let owned: std::io::Result<OwnedFd> =
        unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned();
    // SAFETY: the descriptor is owned by the `AsyncFd` it is given to.
    let watched = owned
        .ok()
        .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok());
    let Some(watched) = watched else {
        return std::future::pending().await;
    };
    loop {
        let Ok(mut ready) = watched.readable().await else {
            return;
        };
        let r = ready.ready();
        if r.is_read_closed() || r.is_error() {
            return;
        }
        // Bytes of a body or a pipelined request: not a hang-up.
        ready.clear_ready();
    }
}
