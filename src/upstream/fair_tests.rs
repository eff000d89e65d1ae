//! The scheduler alone: order, weights, refusals, hang-ups, reloads.

use std::time::Duration;

use super::*;
use crate::config::{Config, FairLimit, FairShare, FlowBy};

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

fn config(pools: &str) -> Config {
    let text = format!(
        "server: {{listen: [\"127.0.0.1:1\"]}}\nstore: {{kind: memory}}\n\
         acknowledge: [store.process_local]\nupstreams:\n{pools}\nroutes: []\n"
    );
    Config::from_text("t.yaml", &text, std::path::Path::new("."))
        .unwrap_or_else(|p| panic!("{:?}", p.render_errors()))
        .config
}

/// Finding 3 of the review: a pool renamed (or dropped) let every waiting
/// request through at once; now it drains at its last limit.
#[tokio::test]
async fn a_pool_gone_from_the_policy_drains_at_its_last_limit() {
    let shares = FairShares::default();
    let fair = "fair_share: {max_in_flight: 1, queue: {per_tenant: 64, timeout: 60s}}";
    shares.apply(&config(&format!(
        "  api: {{targets: [\"127.0.0.1:2\"], {fair}}}"
    )));
    let q = shares.get("api").unwrap();
    let held = q.acquire("a", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let _waiting = waiters(&q, "b", 1, 6, &order);
    settle().await;
    shares.apply(&config(&format!(
        "  api2: {{targets: [\"127.0.0.1:2\"], {fair}}}"
    )));
    settle().await;
    assert!(shares.get("api").is_none());
    assert_eq!(counts(&q), (1, 6), "let through at once");
    drop(held);
    settle().await;
    assert_eq!(counts(&q), (1, 5));
}

/// Finding 4 of the review: flows emptied by hang-ups while no permit
/// came back stayed in memory (each keyed by an 8 KB header value).
#[tokio::test]
async fn hang_ups_of_many_flows_leave_nothing_behind() {
    let q = queue(1, 64);
    let held = q.acquire("a", 1).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    for round in 0..20 {
        let names: Vec<&'static str> = (0..100)
            .map(|i| &*Box::leak(format!("{round}-{i}-{}", "x".repeat(8000)).into_boxed_str()))
            .collect();
        let gone: Vec<_> = names
            .iter()
            .flat_map(|n| waiters(&q, n, 1, 1, &order))
            .collect();
        settle().await;
        for h in gone {
            h.abort();
        }
        settle().await;
    }
    {
        let s = q.lock();
        assert_eq!((s.queued, s.flows.len()), (0, 0));
        assert!(s.ring.len() <= 2 * 100 + 64 + 1, "ring of {}", s.ring.len());
    }
    // One flow's many hang-ups: its queue is compacted, its live request kept.
    let _live = waiters(&q, "c", 1, 1, &order);
    for _ in 0..10 {
        let gone = waiters(&q, "c", 1, 5, &order);
        settle().await;
        gone.iter().for_each(|h| h.abort());
        settle().await;
    }
    {
        let s = q.lock();
        let flow = s.flows.values().next().unwrap();
        assert_eq!(flow.live(), 1);
        assert!(
            flow.waiting.len() <= 1 + 16 + 5,
            "{} kept",
            flow.waiting.len()
        );
    }
    drop(held);
    settle().await;
    assert_eq!(order.lock().unwrap().last(), Some(&"c"));
}
