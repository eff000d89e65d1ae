//! gRPC through the gateway with a real gRPC server and client on both
//! ends (Python `grpcio`, `tests/peers/grpc_peer.py`): unary and every
//! streaming kind pass through over h2c and over TLS on both sides; the
//! gateway's own answers are gRPC answers (RESOURCE_EXHAUSTED with the quota
//! as metadata, UNAUTHENTICATED, UNAVAILABLE), never a problem body.

use crate::common;

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::Value;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/grpc_peer.py");

/// The gRPC server of `grpc_peer.py` on a free port; ended on drop.
struct GrpcServer {
    child: Child,
    port: u16,
}

impl GrpcServer {
    fn start(tls: Option<(&Path, &Path)>) -> GrpcServer {
        let mut cmd = Command::new("python3");
        cmd.args([PEER, "serve", "--port", "0"]);
        if let Some((cert, key)) = tls {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 is needed: apt-get install python3; then scripts/deps for grpcio");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("ready ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "grpc_peer.py did not start ({line:?}); is grpcio installed? run scripts/deps"
                )
            });
        GrpcServer { child, port }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call with `grpc_peer.py call`; its JSON report.
fn call(target: &str, method: &str, args: &[&str]) -> Value {
    let out = Command::new("python3")
        .args([PEER, "call", "--target", target, "--method", method])
        .args(args)
        .output()
        .expect("python3 is needed");
    assert!(
        out.status.success(),
        "grpc_peer.py call: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn bearer(tenant: &str) -> String {
    format!("authorization=Bearer {}", token(tenant))
}

const METHOD: &str = "/fairgate.test.Echo/";

/// The gateway, h2c on, in front of `upstream` (the pool's mapping): one
/// limited unary method, one client stream holding a slot, the rest open;
/// `server_extra` adds `server:` keys.
async fn gateway(upstream: &str, server_extra: &str) -> Gateway {
    Policy::new()
        .server("http2: {h2c: true}")
        .server(server_extra)
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  grpc: {upstream}
limits:
  calls: {{scope: tenant, default: {{capacity: 2, rate: 1/h}}}}
concurrency:
  uploads: {{scope: tenant, slots: 1, lease: 30s}}
routes:
  - {{name: unary, match: {{path: {METHOD}Unary}}, upstream: grpc, limits: [calls]}}
  - {{name: upload, match: {{path: {METHOD}ClientStream}}, upstream: grpc, concurrency: uploads, limits: []}}
  - {{name: echo, match: {{path_prefix: {METHOD}}}, upstream: grpc, limits: []}}
"#
        ))
        .start()
        .await
}

/// The arguments of a call carrying `auth` as metadata and each of
/// `messages` in order.
fn with_messages<'a>(auth: &'a str, messages: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--metadata", auth];
    for m in messages {
        args.extend(["--message", m]);
    }
    args
}

/// The upload-style stream took a slot of its concurrency policy, and
/// gave it back (the held gauge drops in the logging phase, after the
/// call's trailers went out).
async fn assert_the_upload_slot_was_taken_and_freed(gw: &Gateway) {
    let freed = eventually(std::time::Duration::from_secs(2), || async {
        metric(
            &gw.metrics().await,
            "fairgate_slots_held{policy=\"uploads\"}",
        ) == Some(0.0)
    })
    .await;
    assert!(freed, "the upload's slot is still held");
    assert_eq!(
        metric(
            &gw.metrics().await,
            "fairgate_slots_acquired_total{policy=\"uploads\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unary_and_streaming_calls_pass_through_h2c() {
    let peer = GrpcServer::start(None);
    let gw = gateway(
        &format!("{{targets: [\"127.0.0.1:{}\"], protocol: h2c}}", peer.port),
        "",
    )
    .await;
    let target = gw.listen.to_string();
    let auth = bearer("acme");

    let r = call(&target, &format!("{METHOD}Unary"), &["--metadata", &auth]);
    assert_eq!(r["code"], "OK", "{r}");
    assert_eq!(r["responses"], serde_json::json!(["echo:hi"]));
    // The upstream sees the gateway's identity header, and its trailers come back.
    assert_eq!(r["initial_metadata"]["x-peer-saw-tenant"], "acme");
    assert_eq!(r["trailing_metadata"]["x-peer-trailer"], "done");

    let r = call(
        &target,
        &format!("{METHOD}Bidi"),
        &with_messages(&auth, &["one", "two", "three"]),
    );
    assert_eq!(r["code"], "OK", "{r}");
    assert_eq!(
        r["responses"],
        serde_json::json!(["echo:one", "echo:two", "echo:three"])
    );

    let r = call(
        &target,
        &format!("{METHOD}ServerStream"),
        &with_messages(&auth, &["5"]),
    );
    assert_eq!(
        r["responses"],
        serde_json::json!(["msg-0", "msg-1", "msg-2", "msg-3", "msg-4"])
    );

    let r = call(
        &target,
        &format!("{METHOD}ClientStream"),
        &with_messages(&auth, &["a", "bb", "ccc"]),
    );
    assert_eq!(
        r["responses"],
        serde_json::json!(["count=3 bytes=6"]),
        "{r}"
    );
    assert_the_upload_slot_was_taken_and_freed(&gw).await;

    // The upstream's own statuses pass through untouched.
    let r = call(&target, &format!("{METHOD}Fail"), &["--metadata", &auth]);
    assert_eq!(
        (r["code"].as_str(), r["details"].as_str()),
        (Some("INVALID_ARGUMENT"), Some("peer says no"))
    );
}

/// `ratelimit` and `retry-after` of the exhausted "calls" limit (capacity
/// 2, one per hour): seconds from now, the full window and one token's
/// time, less the seconds the three calls took (each a process of its own).
fn assert_quota_exhausted(md: &serde_json::Value) {
    let ratelimit = md["ratelimit"].as_str().unwrap_or_default();
    let reset: u64 = ratelimit
        .strip_prefix("\"calls\";r=0;t=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{ratelimit}"));
    assert!((7140..=7200).contains(&reset), "{ratelimit}");
    let retry = md["retry-after"].as_str().unwrap_or_default();
    let retry: u64 = retry.parse().unwrap_or_else(|_| panic!("{retry}"));
    assert_eq!(
        7200 - reset,
        3600 - retry,
        "one token sooner than the full window"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_own_answers_are_grpc_statuses() {
    let peer = GrpcServer::start(None);
    let gw = gateway(
        &format!("{{targets: [\"127.0.0.1:{}\"], protocol: h2c}}", peer.port),
        "",
    )
    .await;
    let target = gw.listen.to_string();
    let unary = format!("{METHOD}Unary");
    let auth = bearer("acme");
    for _ in 0..2 {
        assert_eq!(call(&target, &unary, &["--metadata", &auth])["code"], "OK");
    }
    // The limit (capacity 2) is spent: RESOURCE_EXHAUSTED with the quota.
    let r = call(&target, &unary, &["--metadata", &auth]);
    assert_eq!(r["code"], "RESOURCE_EXHAUSTED", "{r}");
    assert_eq!(
        r["details"],
        "the \"calls\" limit is exhausted; retry later"
    );
    let md = &r["trailing_metadata"];
    assert_eq!(md["ratelimit-policy"], "\"calls\";q=2;w=7200");
    assert_quota_exhausted(md);
    assert!(r["initial_metadata"]["x-request-id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    assert_eq!(r["responses"], serde_json::json!([]));
    // Another tenant has its own bucket.
    assert_eq!(
        call(&target, &unary, &["--metadata", &bearer("globex")])["code"],
        "OK"
    );

    // No token, or a bad one: UNAUTHENTICATED.
    let r = call(&target, &unary, &[]);
    assert_eq!(r["code"], "UNAUTHENTICATED", "{r}");
    assert_eq!(r["trailing_metadata"]["www-authenticate"], "Bearer");
    let r = call(
        &target,
        &unary,
        &["--metadata", "authorization=Bearer not.a.token"],
    );
    assert_eq!(r["code"], "UNAUTHENTICATED", "{r}");

    // No route: UNIMPLEMENTED.
    let r = call(&target, "/other.Service/Method", &["--metadata", &auth]);
    assert_eq!(r["code"], "UNIMPLEMENTED", "{r}");
    // Seven calls, one access line each, with the decided statuses (a line is
    // written after its call's trailers went out).
    let statuses = || -> Vec<u64> {
        gw.log_lines()
            .iter()
            .filter(|l| l["target"] == "access")
            .filter_map(|l| l["status"].as_u64())
            .collect()
    };
    let logged = eventually(std::time::Duration::from_secs(2), || async {
        statuses().len() >= 7
    })
    .await;
    let statuses = statuses();
    assert!(logged, "{statuses:?}");
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 401).count(),
        2,
        "{statuses:?}"
    );

    // The upstream gone: UNAVAILABLE.
    drop(peer);
    let r = call(&target, &unary, &["--metadata", &bearer("initech")]);
    assert_eq!(r["code"], "UNAVAILABLE", "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_over_tls_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let edge = Pki::new(dir.path(), "edge");
    let inside = Pki::new(dir.path(), "inside");
    let (gw_cert, gw_key) = edge.leaf("gw", "gw", &["grpc.example.test"], "4A01");
    let (up_cert, up_key) = inside.leaf("up", "up", &["jobs.internal"], "4A02");
    let peer = GrpcServer::start(Some((&up_cert, &up_key)));
    let tls = free_addr();
    let gw = gateway(
        &format!(
            "{{targets: [\"127.0.0.1:{}\"], protocol: h2, tls: true, sni: jobs.internal, ca_file: \"{}\"}}",
            peer.port,
            inside.ca().display()
        ),
        &format!(
            "tls: {{listen: \"{tls}\", certificates: [{{cert_file: \"{}\", key_file: \"{}\"}}]}}",
            gw_cert.display(),
            gw_key.display()
        ),
    )
    .await;
    let ca = edge.ca().display().to_string();
    let tls_args = ["--ca", ca.as_str(), "--authority", "grpc.example.test"];
    let auth = bearer("acme");
    let target = tls.to_string();
    let mut args = vec!["--metadata", auth.as_str()];
    args.extend(tls_args);
    let r = call(&target, &format!("{METHOD}Unary"), &args);
    assert_eq!(r["code"], "OK", "{r}");
    assert_eq!(r["responses"], serde_json::json!(["echo:hi"]));
    args.extend(["--message", "x", "--message", "y"]);
    let r = call(&target, &format!("{METHOD}Bidi"), &args);
    assert_eq!(
        r["responses"],
        serde_json::json!(["echo:x", "echo:y"]),
        "{r}"
    );
    let _ = gw;
}
