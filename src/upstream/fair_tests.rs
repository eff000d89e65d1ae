//! The scheduler alone: order, weights, refusals, hang-ups, reloads.

use std::time::Duration;

use super::*;
use crate::config::{FairLimit, FairShare, FlowBy};

fn settings(limit: usize, per_tenant: usize) -> FairShare {
    FairShare {
        limit: FairLimit::Fixed(limit),
        by: FlowBy::Tenant,
        per_tenant,
        timeout: Duration::from_secs(60),
        weights: Default::default(),
    }
}

fn queue(limit: usize, per_tenant: usize) -> Arc<Queue> {
    let q = Arc::new(Queue::new("test"));
    q.configure(Some(settings(limit, per_tenant)));
    q
}

fn counts(q: &Queue) -> (usize, usize) {
    let s = q.lock();
    (s.in_flight, s.queued)
}

/// Queues `n` requests of `flow` as tasks that record their flow in
/// `order` when granted and hold their permit until `release` fires.
fn waiters(
    q: &Arc<Queue>,
    flow: &'static str,
    weight: u32,
    n: usize,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> Vec<tokio::task::JoinHandle<Result<Permit, Refused>>> {
    (0..n)
        .map(|_| {
            let (q, order) = (q.clone(), order.clone());
            tokio::spawn(async move {
                let permit = q.acquire(flow, weight).await?;
                order.lock().unwrap().push(flow);
                Ok(permit)
            })
        })
        .collect()
}

/// As `waiters`, but each request gives its permit back once granted.
fn served(
    q: &Arc<Queue>,
    flow: &'static str,
    weight: u32,
    n: usize,
    order: &Arc<Mutex<Vec<&'static str>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (q, order) = (q.clone(), order.clone());
            tokio::spawn(async move {
                let permit = q.acquire(flow, weight).await.unwrap();
                order.lock().unwrap().push(flow);
                drop(permit);
            })
        })
        .collect()
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_flow_with_one_waiting_request_waits_one_turn_not_a_backlog() {
    let q = queue(2, 8);
    // A lone flow may use the whole pool.
    let a = q.acquire("noisy", 1).await.unwrap();
    let b = q.acquire("noisy", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let _backlog = waiters(&q, "noisy", 1, 4, &order);
    settle().await;
    assert_eq!(counts(&q), (2, 4));
    let _quiet = waiters(&q, "quiet", 1, 1, &order);
    settle().await;
    assert_eq!(counts(&q), (2, 5));
    drop(a);
    settle().await;
    drop(b);
    settle().await;
    // The noisy flow had its turn, then the quiet one: not its backlog of 4.
    assert_eq!(*order.lock().unwrap(), ["noisy", "quiet"]);
    assert_eq!(counts(&q), (2, 3));
}

#[tokio::test]
async fn weights_serve_flows_in_proportion() {
    let q = queue(1, 100);
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = q.acquire("x", 1).await.unwrap();
    let heavy = served(&q, "gold", 4, 40, &order);
    let light = served(&q, "free", 1, 40, &order);
    settle().await;
    drop(first);
    // Each grant's task ends at once (its permit dropped), freeing the next.
    for h in heavy.into_iter().chain(light) {
        h.await.unwrap();
    }
    let order = order.lock().unwrap();
    let gold = order[..25].iter().filter(|f| **f == "gold").count();
    assert_eq!(gold, 20, "of the first 25 grants: {order:?}");
    assert_eq!(counts(&q), (0, 0));
}

#[tokio::test]
async fn a_full_queue_refuses_at_once_and_a_timeout_leaves() {
    let q = queue(1, 2);
    let held = q.acquire("a", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let _waiting = waiters(&q, "a", 1, 2, &order);
    settle().await;
    assert_eq!(q.acquire("a", 1).await.err(), Some(Refused::Full));
    // Another flow still queues.
    let mut s = settings(1, 2);
    s.timeout = Duration::from_millis(20);
    q.configure(Some(s));
    assert_eq!(q.acquire("b", 1).await.err(), Some(Refused::Timeout));
    assert_eq!(counts(&q), (1, 2));
    drop(held);
}

#[tokio::test]
async fn clients_that_hang_up_leave_the_queue_and_no_permit_leaks() {
    let q = queue(1, 64);
    let held = q.acquire("a", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let gone = waiters(&q, "b", 1, 20, &order);
    settle().await;
    assert_eq!(counts(&q), (1, 20));
    for h in &gone {
        h.abort();
    }
    settle().await;
    assert_eq!(counts(&q), (1, 0));
    drop(held);
    assert_eq!(counts(&q), (0, 0));
    // Hang-ups racing grants: every permit comes back.
    let held = q.acquire("a", 1).await.unwrap();
    let racing = waiters(&q, "c", 1, 30, &order);
    settle().await;
    drop(held);
    for (i, h) in racing.iter().enumerate() {
        if i % 2 == 0 {
            h.abort();
        }
    }
    for h in racing {
        if let Ok(Ok(p)) = h.await {
            drop(p);
        }
    }
    settle().await;
    assert_eq!(counts(&q), (0, 0));
}

#[tokio::test]
async fn a_reload_keeps_waiting_requests_and_applies_the_new_limit() {
    let q = queue(1, 64);
    let held = q.acquire("a", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiting = waiters(&q, "b", 1, 5, &order);
    settle().await;
    assert_eq!(counts(&q), (1, 5));
    q.configure(Some(settings(4, 64)));
    settle().await;
    assert_eq!(counts(&q), (4, 2));
    assert_eq!(order.lock().unwrap().len(), 3);
    // A lower limit: permits out stay out; none is handed on until under it.
    q.configure(Some(settings(2, 64)));
    drop(held);
    settle().await;
    assert_eq!(counts(&q), (3, 2));
    // No fair_share any more: everyone waiting goes.
    q.configure(None);
    settle().await;
    assert_eq!(counts(&q).1, 0);
    for h in waiting {
        drop(h.await.unwrap().unwrap());
    }
}

#[test]
fn flows_are_keyed_by_what_by_names() {
    use crate::auth::Identity;
    let id = Identity {
        tenant: crate::tenant::TenantId::new("acme").unwrap(),
        user: Some("ann".into()),
        plan: "pro".into(),
        token: None,
    };
    let ip = Some("127.0.0.7".parse().unwrap());
    let mut headers = http::HeaderMap::new();
    headers.insert("x-team", "blue".parse().unwrap());
    let key = |by: &FlowBy, id| flow_key(by, id, (ip, 64), &headers);
    assert_eq!(key(&FlowBy::Tenant, Some(&id)), "t:acme");
    assert_eq!(key(&FlowBy::Tenant, None), "ip:127.0.0.7");
    assert_eq!(key(&FlowBy::TenantUser, Some(&id)), "u:acme\u{0}ann");
    assert_eq!(key(&FlowBy::ClientIp, Some(&id)), "ip:127.0.0.7");
    let header = FlowBy::Header("x-team".parse().unwrap());
    assert_eq!(key(&header, None), "h:blue");
    let other = FlowBy::Header("x-other".parse().unwrap());
    assert_eq!(key(&other, None), "ip:127.0.0.7");
    // An IPv6 client is its /64 (`server.ipv6_prefix`), as limits count it.
    let v6 = Some("2001:db8:1:2:3:4:5:6".parse().unwrap());
    let key = flow_key(&FlowBy::ClientIp, None, (v6, 64), &headers);
    assert_eq!(key, "ip:2001:db8:1:2::");
}
