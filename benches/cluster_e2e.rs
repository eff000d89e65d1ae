//! The controller end to end at cluster scale (issue 41), through the API
//! stand-in with the real gateway (a release build): `bench/cluster-e2e
//! [INGRESSES]` (default 10,000). The cluster has the shape of
//! `examples/cluster_build.rs`: Ingresses in 50 namespaces, two paths
//! each, one in ten with a `limit-rps` annotation, one in twenty with TLS,
//! a Service with an EndpointSlice of 5 ready endpoints behind each. Ten of
//! the Services are backed by real pods (`fairgate echo` processes on
//! loopback addresses of their own, which name themselves in answers).
//! Measured, and printed as a table:
//! - an endpoint change (a Service moved to another pod) until the first
//!   request answered by the new pod, 50 times; and the policy builds and
//!   in-place endpoint updates the gateway counted meanwhile;
//! - an Ingress change (a new Ingress for a new host) until it answers
//!   200, 10 times;
//! - a rolling update of 100 Services at once (new pods ready, old ones
//!   terminating, then removed and stopped) while a client loops on the 10
//!   with real pods: the requests that failed.
//!
//! Times run from the API stand-in accepting the write to the first answer
//! seen by a client polling every millisecond or so.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cluster::{ingress_class, service, slice, Endpoint, CONTROLLER};
use common::kube_api::KubeApi;
use common::{client, metric, EchoProcess, Gateway, GatewayOptions};
use serde_json::{json, Value};

/// Services with real pods: `app-1`, `app-11` .. `app-91` (`real`).
const REAL: usize = 10;
/// The Services of the rolling update: the real ones and 90 more.
const ROLLED: usize = 100;
/// Endpoint changes measured.
const CHANGES: usize = 50;

fn ingress(i: usize) -> Value {
    let (ns, name) = (namespace(i), format!("app-{i}"));
    let backend = json!({"service": {"name": name, "port": {"number": 80}}});
    let host = format!("app-{i}.example.com");
    let mut ing = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ingressClassName": "fairgate", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend},
            {"path": "/api", "pathType": "Prefix", "backend": backend}]}}]}
    });
    if i.is_multiple_of(10) {
        ing["metadata"]["annotations"] = json!({"nginx.ingress.kubernetes.io/limit-rps": "50"});
    }
    if i.is_multiple_of(20) {
        ing["spec"]["tls"] = json!([{"hosts": [host], "secretName": format!("{name}-tls")}]);
    }
    ing
}

/// The `k`th Service with real pods: one with no annotation and no TLS
/// (whose plain-HTTP answers would be redirects).
fn real(k: usize) -> usize {
    k * 10 + 1
}

fn namespace(i: usize) -> String {
    format!("team-{}", i % 50)
}

/// Five endpoints no client reaches, generation `g` of Service `i`'s pods.
fn unreached(i: usize, g: usize) -> Vec<SocketAddr> {
    (0..5)
        .map(|e| {
            SocketAddr::from((
                [10, (i / 250) as u8, (i % 250) as u8, (g * 5 + e + 1) as u8],
                8080,
            ))
        })
        .collect()
}

fn ready(addrs: &[SocketAddr]) -> Vec<Endpoint<'_>> {
    addrs
        .iter()
        .map(|addr| Endpoint {
            addr,
            ready: true,
            terminating: false,
        })
        .collect()
}

fn set_slice(api: &KubeApi, i: usize, endpoints: &[Endpoint<'_>]) {
    let name = format!("app-{i}");
    api.apply(slice(&namespace(i), &format!("{name}-x"), &name, endpoints));
}

/// A pod of the `k`th real Service, generation `g`, on a loopback address
/// of its own and `port` (0: a free one; every pod of a Service listens on
/// the first's, as a Deployment's do, since a slice has one port).
fn pod(k: usize, g: usize, port: u16) -> EchoProcess {
    let name = format!("app-{}-g{g}", real(k));
    let addr = SocketAddr::from(([127, 1 + g as u8, 0, 1 + k as u8], port));
    EchoProcess::start_at(addr, &name, "")
}

/// Generation `g` of the real Services' pods, on the ports of `first`.
fn generation(g: usize, first: Option<&[EchoProcess]>) -> Vec<EchoProcess> {
    (0..REAL)
        .map(|k| pod(k, g, first.map_or(0, |f| f[k].addr.port())))
        .collect()
}

fn load(api: &KubeApi, n: usize, pods: &[EchoProcess], pem: &(String, String)) {
    api.apply(ingress_class("fairgate", CONTROLLER, false));
    let b64 = |t: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(t)
    };
    for i in 0..n {
        let (ns, name) = (namespace(i), format!("app-{i}"));
        if i.is_multiple_of(20) {
            api.apply(json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": format!("{name}-tls"), "namespace": ns},
                "data": {"tls.crt": b64(&pem.0), "tls.key": b64(&pem.1)}
            }));
        }
        api.apply(service(&ns, &name));
        match (0..REAL).find(|&k| real(k) == i) {
            Some(k) => set_slice(api, i, &ready(&[pods[k].addr])),
            None => set_slice(api, i, &ready(&unreached(i, 0))),
        }
        api.apply(ingress(i));
    }
}

/// The pod that answered a request for Service `i`, or the status.
async fn answer(gw: &Gateway, i: usize) -> Result<String, u16> {
    let r = client()
        .get(gw.url("/"))
        .header("host", format!("app-{i}.example.com"))
        .send()
        .await
        .map_err(|_| 0u16)?;
    let status = r.status().as_u16();
    if status != 200 {
        return Err(status);
    }
    let body: Value = r.json().await.map_err(|_| 0u16)?;
    Ok(body["pod"].as_str().unwrap_or_default().to_string())
}

async fn counter(gw: &Gateway, name: &str) -> f64 {
    metric(&gw.metrics().await, name).unwrap_or(0.0)
}

const BUILDS: &str = "fairgate_kubernetes_policy_builds_total{result=\"ok\"}";
const UPDATES: &str = "fairgate_kubernetes_endpoint_updates_total";

/// Polls `done` until it holds (at most `within`): the time it took.
async fn until<F: std::future::Future<Output = bool>>(
    within: Duration,
    mut done: impl FnMut() -> F,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if done().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1]
}

/// The generation of pods serving the real Services after `round` (the
/// first, 0, moves them from generation 0 to 1).
fn generation_after(round: usize) -> usize {
    (round / REAL + 1) % 2
}

/// 50 endpoint changes, each moving one real Service to its other pod.
async fn endpoint_changes(api: &KubeApi, gw: &Gateway, pods: &[Vec<EchoProcess>]) -> Vec<Duration> {
    let mut times = Vec::new();
    for round in 0..CHANGES {
        let (k, i) = (round % REAL, real(round % REAL));
        let to = generation_after(round);
        let addr = pods[to][k].addr;
        let want = format!("app-{i}-g{to}");
        let started = Instant::now();
        set_slice(api, i, &ready(&[addr]));
        let moved = until(Duration::from_secs(60), || {
            let want = want.clone();
            async move { answer(gw, i).await.is_ok_and(|p| p == want) }
        })
        .await;
        let _ = moved.expect("the new pod answers within 60 s");
        times.push(started.elapsed());
    }
    times
}

/// 10 new Ingresses, each for a host of its own: until each answers 200.
async fn ingress_changes(api: &KubeApi, gw: &Gateway) -> Vec<Duration> {
    let mut times = Vec::new();
    for k in 0..10 {
        let mut ing = ingress(real(0));
        ing["metadata"]["name"] = json!(format!("extra-{k}"));
        ing["spec"]["rules"][0]["host"] = json!(format!("extra-{k}.example.com"));
        ing["spec"].as_object_mut().unwrap().remove("tls");
        let host = format!("extra-{k}.example.com");
        let started = Instant::now();
        api.apply(ing);
        let served = until(Duration::from_secs(120), || {
            let host = host.clone();
            async move {
                let r = client().get(gw.url("/")).header("host", host).send().await;
                r.is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
        let _ = served.expect("the new Ingress serves within 120 s");
        times.push(started.elapsed());
    }
    times
}

/// A rolling update of `ROLLED` Services at once while 10 clients loop on
/// the real ones: requests sent, and those that failed by status (0: no
/// answer).
async fn rolling_update(
    api: &KubeApi,
    gw: &Gateway,
    old: Vec<EchoProcess>,
) -> (u64, std::collections::BTreeMap<u16, u64>) {
    let new = generation(2, Some(&old));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loops: Vec<_> = (0..REAL)
        .map(|k| {
            let i = real(k);
            let (stop, url) = (stop.clone(), gw.url("/"));
            tokio::spawn(async move {
                let (mut sent, mut failed) = (0u64, std::collections::BTreeMap::new());
                let c = client();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = c
                        .get(&url)
                        .header("host", format!("app-{i}.example.com"))
                        .send()
                        .await;
                    sent += 1;
                    let status = r.map_or(0, |r| r.status().as_u16());
                    if status != 200 {
                        *failed.entry(status).or_insert(0u64) += 1;
                    }
                }
                (sent, failed)
            })
        })
        .collect();
    let step = Duration::from_secs(1);
    tokio::time::sleep(step).await;
    let stage = |terminating: bool, with_old: bool| {
        // The real Services and the first others.
        let others = (0..).filter(|i| (0..REAL).all(|k| real(k) != *i));
        let rolled = (0..REAL)
            .map(|k| (Some(k), real(k)))
            .chain(others.map(|i| (None, i)));
        for (k, i) in rolled.take(ROLLED) {
            let (before, after) = match k {
                Some(k) => (vec![old[k].addr], vec![new[k].addr]),
                None => (unreached(i, 0), unreached(i, 1)),
            };
            let mut endpoints = ready(&after);
            if with_old {
                endpoints.extend(before.iter().map(|addr| Endpoint {
                    addr,
                    ready: !terminating,
                    terminating,
                }));
            }
            set_slice(api, i, &endpoints);
        }
    };
    stage(false, true); // the new pods are ready beside the old
    tokio::time::sleep(step).await;
    stage(true, true); // the old ones terminate, still serving
    tokio::time::sleep(step).await;
    stage(false, false); // and are gone from the slices
    tokio::time::sleep(step).await;
    drop(old); // then they stop
    tokio::time::sleep(2 * step).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = (0, std::collections::BTreeMap::new());
    for l in loops {
        let (sent, failed) = l.await.unwrap();
        total.0 += sent;
        for (status, count) in failed {
            *total.1.entry(status).or_insert(0) += count;
        }
    }
    drop(new);
    total
}

/// The controller, for the cluster `api` serves.
async fn gateway(api: &KubeApi, dir: &std::path::Path) -> Gateway {
    let kubeconfig = api.kubeconfig(dir).display().to_string();
    let options = GatewayOptions {
        env: vec![
            ("KUBECONFIG".into(), kubeconfig),
            ("POD_NAME".into(), "fairgate-0".into()),
            ("POD_NAMESPACE".into(), "ingress".into()),
        ],
        wait_ready: false,
        configmap: false,
    };
    Gateway::start_with(&common::cluster::base_policy(""), options).await
}

/// The time of day (UTC), as the gateway's log lines stamp it.
fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let (s, ms) = (now.as_secs() % 86_400, now.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}", s / 3600, s / 60 % 60, s % 60)
}

fn rss_mib(pid: u32, field: &str) -> f64 {
    common::proc_status_kib(pid, field) as f64 / 1024.0
}

/// A certificate and key for `*.example.com` (PEM), made in `dir`.
fn wildcard(dir: &std::path::Path) -> (String, String) {
    let pki = common::Pki::new(dir, "bench");
    let (cert, key) = pki.leaf("wildcard", "bench", &["*.example.com"], "03");
    let read = |p| std::fs::read_to_string(p).unwrap();
    (read(cert), read(key))
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    assert!(n >= ROLLED, "at least {ROLLED} Ingresses");
    let dir = tempfile::tempdir().unwrap();
    let pem = wildcard(dir.path());
    let first = generation(0, None);
    let second = generation(1, Some(&first));
    let mut pods = vec![first, second];
    let api = KubeApi::start();
    let loaded = Instant::now();
    load(&api, n, &pods[0], &pem);
    eprintln!(
        "{n} Ingresses loaded into the API stand-in in {:?}",
        loaded.elapsed()
    );
    let started = Instant::now();
    let gw = gateway(&api, dir.path()).await;
    let first = until(Duration::from_secs(600), || async {
        answer(&gw, real(0)).await.is_ok()
    })
    .await
    .expect("the gateway serves the cluster within 600 s");
    eprintln!(
        "first build served after {first:?} ({:?} since start)",
        started.elapsed()
    );
    let (builds, updates) = (counter(&gw, BUILDS).await, counter(&gw, UPDATES).await);
    let mut moved = endpoint_changes(&api, &gw, &pods).await;
    let (builds_after, updates_after) = (counter(&gw, BUILDS).await, counter(&gw, UPDATES).await);
    eprintln!("endpoint changes done; Ingress changes from {}", clock());
    let mut served = ingress_changes(&api, &gw).await;
    let old = pods.remove(generation_after(CHANGES - 1));
    let builds_before_roll = counter(&gw, BUILDS).await;
    eprintln!("rolling update from {}", clock());
    let (sent, failed) = rolling_update(&api, &gw, old).await;
    let builds_in_roll = counter(&gw, BUILDS).await - builds_before_roll;
    // Where each build's time went, as the gateway logs it.
    for line in gw
        .logs()
        .lines()
        .filter(|l| l.contains("kubernetes.applied"))
    {
        eprintln!("{line}");
    }
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    println!("| {n} Ingresses | value |\n|---|---|");
    println!(
        "| endpoint change routed, p50 / p99 / max (50 changes) | {} / {} / {} |",
        ms(percentile(&mut moved, 0.5)),
        ms(percentile(&mut moved, 0.99)),
        ms(percentile(&mut moved, 1.0))
    );
    println!(
        "| policy builds / in-place endpoint updates during them | {} / {} |",
        builds_after - builds,
        updates_after - updates
    );
    println!(
        "| Ingress change served, p50 / max (10 changes) | {} / {} |",
        ms(percentile(&mut served, 0.5)),
        ms(percentile(&mut served, 1.0))
    );
    println!(
        "| rolling update of {ROLLED} Services, 10 looped: failed of sent | {} of {sent} {failed:?} |",
        failed.values().sum::<u64>()
    );
    println!("| policy builds during the rolling update | {builds_in_roll} |");
    println!(
        "| gateway RSS now / peak | {:.0} / {:.0} MiB |",
        rss_mib(gw.pid(), "VmRSS:"),
        rss_mib(gw.pid(), "VmHWM:")
    );
}
