//! `fairgate demo`, the README's first command: the gateway on
//! 127.0.0.1:8080 with the memory store and the built-in echo upstream,
//! printing tokens and curl lines that show a 200, quota headers and a 429.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// Ends the demo process (by its own PID) however the test ends.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The demo's banner, read from its output up to the end of the
/// instructions.
fn read_banner(out: &mut impl BufRead) -> String {
    let mut banner = String::new();
    while !banner.contains("Press Ctrl-C") {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("demo ended early:\n{banner}");
        }
        banner.push_str(&line);
    }
    banner
}

/// The token the banner prints as `NAME=...`.
fn banner_token(banner: &str, name: &str) -> String {
    banner
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}=")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {name} token in:\n{banner}"))
        .to_string()
}

/// What the banner's loop line promises after its first curl, e.g.
/// `200 x4, then 429 x3`.
fn loop_promise(banner: &str) -> &str {
    banner
        .lines()
        .find(|l| l.contains("for i in $(seq 7)"))
        .and_then(|l| l.split("# after the curl above: ").nth(1))
        .unwrap_or_else(|| panic!("no loop line in:\n{banner}"))
}

/// SIGINT ends the demo, cleanly, within 10 s.
async fn assert_stops_on_sigint(child: &mut std::process::Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let exited = eventually(Duration::from_secs(10), || {
        let done = child.try_wait().unwrap().is_some();
        async move { done }
    })
    .await;
    assert!(exited, "the demo did not stop on SIGINT");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_17_the_demo_shows_a_200_quota_headers_and_the_429s_its_banner_promises() {
    let mut demo = Demo(
        Command::new(env!("CARGO_BIN_EXE_fairgate"))
            .arg("demo")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fairgate demo"),
    );
    let child = &mut demo.0;
    // The banner comes first; read it up to the end of the instructions.
    let banner = read_banner(&mut BufReader::new(child.stdout.take().unwrap()));
    let (acme, globex) = (
        banner_token(&banner, "ACME"),
        banner_token(&banner, "GLOBEX"),
    );
    assert!(banner
        .contains("curl -i -H \"Authorization: Bearer $ACME\" http://127.0.0.1:8080/v1/hello"));

    let c = client();
    let up = eventually(Duration::from_secs(20), || async {
        c.get("http://127.0.0.1:9090/readyz")
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(up, "the demo never became ready:\n{banner}");
    let call = |t: &str| {
        c.get("http://127.0.0.1:8080/v1/hello")
            .bearer_auth(t.to_string())
            .send()
    };

    let r = call(&acme).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], r#""api";q=5;w=10"#);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "4");
    // The banner's loop, run after its first curl, gives what it promises.
    let promise = loop_promise(&banner);
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(call(&acme).await.unwrap().status().as_u16());
    }
    let count = |s: u16| statuses.iter().filter(|&&x| x == s).count();
    let seen = format!("200 x{}, then 429 x{}", count(200), count(429));
    assert_eq!(promise.trim(), seen);
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429]);
    // Another tenant on another plan is unaffected.
    let r = call(&globex).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], r#""api";q=20;w=4"#);
    let r = c
        .get("http://127.0.0.1:8080/v1/hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    assert_stops_on_sigint(child).await;
}
