//! The controller's policy build at cluster scale: `cluster_build
//! [INGRESSES] [ENDPOINTS_PER_SERVICE] [BUILDS]` (default 1000, 5, 5) makes
//! INGRESSES Ingresses in 50 namespaces (two paths each; one in ten with a
//! `limit-rps` annotation, one in twenty with a TLS section and its
//! Secret), a Service and an EndpointSlice of ENDPOINTS_PER_SERVICE ready
//! endpoints behind each, builds the policy BUILDS times as the controller
//! does (translation, merge into the base, reading, loading, pools), and
//! prints one JSON line: the median and slowest build and the process's
//! memory (resident before the first build, after the last with its policy
//! held, and the peak).

use std::time::Instant;

use fairgate::cluster::compose::Composer;
use fairgate::config::CONTROLLER_NAME;
use fairgate::import::Object;
use serde_json::json;

// The gateway's allocator (src/main.rs), so the build is measured as the
// gateway runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn object(kind: &str, ns: &str, name: &str, value: serde_json::Value) -> Object {
    Object {
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        value: value.into(),
    }
}

/// A certificate and key for `*.example.com`, made by `openssl`.
fn wildcard(dir: &std::path::Path) -> (String, String) {
    let (cert, key) = (dir.join("wildcard.pem"), dir.join("wildcard.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=bench"])
        .args(["-addext", "subjectAltName=DNS:*.example.com", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let read = |p| std::fs::read_to_string(p).unwrap();
    (read(&cert), read(&key))
}

fn cluster(ingresses: usize, per_service: usize, pem: &(String, String)) -> Vec<Object> {
    let mut out = vec![object(
        "IngressClass",
        "",
        "fairgate",
        json!({"spec": {"controller": CONTROLLER_NAME}}),
    )];
    for i in 0..ingresses {
        let (ns, name) = (format!("team-{}", i % 50), format!("app-{i}"));
        let backend = json!({"service": {"name": name, "port": {"number": 80}}});
        let host = format!("app-{i}.example.com");
        let mut ingress = json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
            "spec": {"ingressClassName": "fairgate", "rules": [{"host": host, "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend},
                {"path": "/api", "pathType": "Prefix", "backend": backend}]}}]}
        });
        if i % 10 == 0 {
            ingress["metadata"]["annotations"] =
                json!({"nginx.ingress.kubernetes.io/limit-rps": "50"});
        }
        if i % 20 == 0 {
            let secret = format!("{name}-tls");
            ingress["spec"]["tls"] = json!([{"hosts": [host], "secretName": secret}]);
            out.push(object(
                "Secret",
                &ns,
                &secret,
                json!({
                    "type": "kubernetes.io/tls",
                    "data": {"tls.crt": base64(&pem.0), "tls.key": base64(&pem.1)}
                }),
            ));
        }
        out.push(object("Ingress", &ns, &name, ingress));
        out.push(object(
            "Service",
            &ns,
            &name,
            json!({
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            }),
        ));
        let endpoints: Vec<_> = (0..per_service)
            .map(|e| json!({"addresses": [format!("10.{}.{}.{}", i / 250, i % 250, e + 1)], "conditions": {"ready": true}}))
            .collect();
        out.push(object(
            "EndpointSlice",
            &ns,
            &format!("{name}-x"),
            json!({
                "metadata": {"labels": {"kubernetes.io/service-name": name}},
                "ports": [{"name": "http", "port": 8080}],
                "endpoints": endpoints
            }),
        ));
    }
    out
}

const CERT: &str = include_str!("../tests/fixtures/gw.pem");
const KEY: &str = include_str!("../tests/fixtures/gw.key");

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn status_kib(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ingresses = args.first().copied().unwrap_or(1000);
    let per_service = args.get(1).copied().unwrap_or(5);
    let builds = args.get(2).copied().unwrap_or(5).max(1);
    let dir = std::env::temp_dir().join(format!("cluster-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("fairgate.yaml");
    std::fs::write(dir.join("gw.pem"), CERT).unwrap();
    std::fs::write(dir.join("gw.key"), KEY).unwrap();
    let text = "server: {listen: [\"127.0.0.1:0\"], tls: {listen: \"127.0.0.1:0\", cert: gw.pem, key: gw.key}}\nstore: {kind: memory}\nacknowledge: [store.process_local]\ndefault_limits: none\nkubernetes: {}\n";
    std::fs::write(&base, text).unwrap();
    let settings = fairgate::config::Config::from_text("base", text, &dir)
        .unwrap_or_else(|p| panic!("{:?}", p.render_errors()))
        .config
        .kubernetes
        .expect("the kubernetes section");
    let objects = cluster(ingresses, per_service, &wildcard(&dir));
    let rss_before = status_kib("VmRSS:");
    let mut composer = Composer::new(settings, base);
    let mut times = Vec::new();
    let mut routes = 0;
    let mut held = None;
    for generation in 1..=builds {
        let started = Instant::now();
        let composed = composer
            .compose(&objects)
            .unwrap_or_else(|p| panic!("{:?}", p.render_errors()));
        routes = composed.checked.config.routes.len();
        if std::env::var_os("CLUSTER_BUILD_NOTES").is_some() {
            for n in &composed.notes {
                eprintln!("{n:?}");
            }
        }
        let policy =
            fairgate::state::Policy::build(composed.checked, generation as u64).expect("pools");
        // The policy in force stays until the next one replaces it; the
        // gateway frees the old one on a thread of its own
        // (`state::put_in_force`).
        let old = held.replace(policy);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        std::thread::spawn(move || drop(old)).join().unwrap();
    }
    let steady = status_kib("VmRSS:");
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
    times.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({
            "ingresses": ingresses,
            "endpoints": ingresses * per_service,
            "routes": routes,
            "builds": builds,
            "median_ms": times[times.len() / 2],
            "max_ms": times[times.len() - 1],
            "rss_before_mib": rss_before as f64 / 1024.0,
            "steady_mib": steady as f64 / 1024.0,
            "peak_mib": status_kib("VmHWM:") as f64 / 1024.0,
        })
    );
}
