//! Basic auth and API keys through the real gateway: htpasswd entries
//! written by Apache's own `htpasswd` (bcrypt, SHA-1, MD5) name the user
//! the upstream is told; wrong passwords spend the address's failure
//! bucket while other addresses and users verified before keep working;
//! API keys name the tenant whose bucket is spent; a key in the query
//! reaches neither the upstream nor a log line; a user or key removed from
//! its watched file stops working after the reload.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::*;

const REALM: &str = "Staff Area";
const CHALLENGE: &str = "Basic realm=\"Staff Area\", charset=\"UTF-8\"";
const HINT: &str = "htpasswd is needed: apt-get install apache2-utils (scripts/deps does)";
/// How long a changed watched file may take to be served.
const RELOAD: Duration = Duration::from_secs(10);

pub(super) fn local(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Runs the real `htpasswd` with `args`; fails with the install hint when
/// it is missing.
pub(super) fn htpasswd(args: &[&str]) {
    let out = std::process::Command::new("htpasswd")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}: {HINT}"));
    assert!(
        out.status.success(),
        "htpasswd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An htpasswd file made by the tool: ann in bcrypt, bob in SHA-1, cy in
/// Apache MD5, each with the password `pw-<user>`.
fn htpasswd_file(dir: &Path) -> String {
    let file = dir.join("users.htpasswd").display().to_string();
    htpasswd(&["-c", "-b", "-B", &file, "ann", "pw-ann"]);
    htpasswd(&["-b", "-s", &file, "bob", "pw-bob"]);
    htpasswd(&["-b", "-m", &file, "cy", "pw-cy"]);
    let text = std::fs::read_to_string(&file).unwrap();
    let forms: Vec<&str> = text
        .lines()
        .map(|l| l.split(':').nth(1).unwrap_or(""))
        .collect();
    assert!(forms[0].starts_with("$2y$"), "{text}");
    assert!(forms[1].starts_with("{SHA}"), "{text}");
    assert!(forms[2].starts_with("$apr1$"), "{text}");
    file
}

/// Method `staff` (basic over `file`, tenant `staff` for everyone) with
/// more `auth:` keys in `extra`, and a route on `/` behind it.
pub(super) fn basic_policy(file: &str, extra: &str, upstream: SocketAddr) -> Policy {
    Policy::new()
        .auth(&format!(
            r#"{extra}
methods:
    staff:
      basic: {{htpasswd_file: "{file}", realm: "{REALM}"}}
      identity: {{tenant: {{value: staff}}}}"#
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{upstream}"]}}}}
routes:
  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: staff, limits: []}}
"#
        ))
}

pub(super) fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A GET of `target` from `source`, raw over TCP, with `headers`; the raw
/// answer.
pub(super) async fn raw_get(
    gw: &Gateway,
    source: IpAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> String {
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: app.test\r\n");
    for (name, value) in headers {
        request += &format!("{name}: {value}\r\n");
    }
    request += "Connection: close\r\n\r\n";
    raw_http_from(source, gw.listen, request.as_bytes()).await
}

/// Every value of header `name` in a raw answer's head.
pub(super) fn header_of(answer: &str, name: &str) -> Vec<String> {
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// The body of a raw answer.
pub(super) fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// Asserts a raw answer is the basic-auth 401 with its exact challenge.
pub(super) fn assert_basic_401(answer: &str) {
    assert_eq!(status_of(answer), 401, "{answer}");
    assert_eq!(
        header_of(answer, "www-authenticate"),
        [CHALLENGE],
        "{answer}"
    );
    assert_eq!(
        header_of(answer, "content-type"),
        ["application/problem+json"],
        "{answer}"
    );
}

/// The identity headers one upstream request carried: tenant, user, plan.
fn identity_of(got: &Received) -> [Vec<String>; 3] {
    [
        got.cgi_header("x-tenant-id"),
        got.cgi_header("x-user-id"),
        got.cgi_header("x-plan"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_the_real_htpasswd_wrote_authenticate_and_refusals_reach_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = htpasswd_file(dir.path());
    let up = RawUpstream::start().await;
    let gw = basic_policy(&file, "", up.addr).start().await;

    for (i, user) in ["ann", "bob", "cy"].into_iter().enumerate() {
        let auth = basic(user, &format!("pw-{user}"));
        let answer = raw_get(&gw, local(1), "/who", &[("Authorization", &auth)]).await;
        assert_eq!(status_of(&answer), 200, "{user}: {answer}");
        assert_eq!(body_of(&answer), "ok");
        let got = up.received();
        assert_eq!(got.len(), i + 1);
        assert_eq!(got[i].request_line(), "GET /who HTTP/1.1");
        assert_eq!(got[i].cgi_header("x-user-id"), [user], "{}", got[i].head);
        assert_eq!(got[i].cgi_header("x-tenant-id"), ["staff"]);
    }

    // Another user's password, a wrong one, an unknown user, another
    // scheme, none at all: the same challenge, nothing upstream.
    let refused = [
        Some(basic("ann", "pw-bob")),
        Some(basic("bob", "wrong")),
        Some(basic("cy", "")),
        Some(basic("dan", "pw-dan")),
        Some("Bearer abc".to_string()),
        None,
    ];
    for auth in &refused {
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        let answer = raw_get(&gw, local(1), "/who", &headers).await;
        assert_basic_401(&answer);
        assert!(body_of(&answer).contains("\"status\":401"), "{answer}");
    }
    assert_eq!(up.count(), 3, "no refusal reached the upstream");
    let metrics = gw.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "fairgate_auth_failures_total{reason=\"wrong_password\"}"
        ),
        Some(4.0),
        "{metrics}"
    );
    for reason in ["missing", "malformed"] {
        let sample = format!("fairgate_auth_failures_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(&metrics, &sample), Some(1.0), "{metrics}");
    }
}

/// The throttled answer: 429, Retry-After of the hour the one token takes.
fn assert_throttled(answer: &str) {
    assert_eq!(status_of(answer), 429, "{answer}");
    let retry = header_of(answer, "retry-after");
    assert_eq!(retry.len(), 1, "{answer}");
    let seconds: u64 = retry[0].parse().unwrap();
    assert!((3590..=3600).contains(&seconds), "{answer}");
    assert_eq!(
        header_of(answer, "content-type"),
        ["application/problem+json"]
    );
    assert!(header_of(answer, "www-authenticate").is_empty(), "{answer}");
    assert!(body_of(answer).contains("auth-throttled"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_passwords_throttle_their_address_only_and_spare_a_user_verified_before() {
    let dir = tempfile::tempdir().unwrap();
    let file = htpasswd_file(dir.path());
    let up = RawUpstream::start().await;
    let limit = "failure_limit: {capacity: 5, rate: 1/h}";
    let gw = basic_policy(&file, limit, up.addr).start().await;
    let (flooder, other) = (local(2), local(3));
    let ann = basic("ann", "pw-ann");
    let bob = basic("bob", "pw-bob");
    let wrong = basic("cy", "not-cy's");

    // ann signs in from the flooding address before the flood.
    let answer = raw_get(&gw, flooder, "/a", &[("Authorization", &ann)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");

    let mut statuses = Vec::new();
    for i in 0..30 {
        let answer = raw_get(&gw, flooder, "/a", &[("Authorization", &wrong)]).await;
        statuses.push(status_of(&answer));
        match i < 5 {
            true => assert_basic_401(&answer),
            false => assert_throttled(&answer),
        }
    }
    assert_eq!(statuses[..5], [401; 5]);
    assert_eq!(statuses[5..], [429; 25]);

    // Another address: unaffected, bob's password is checked.
    let answer = raw_get(&gw, other, "/b", &[("Authorization", &bob)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // ann's credentials, verified before, are remembered (5 minutes).
    let answer = raw_get(&gw, flooder, "/c", &[("Authorization", &ann)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // bob's were verified a moment ago from 127.0.0.3: what is remembered
    // is the credentials, not the address, so they pass here too. cy's
    // right password was never verified: 429, unchecked.
    let answer = raw_get(&gw, flooder, "/d", &[("Authorization", &bob)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let cy = basic("cy", "pw-cy");
    let answer = raw_get(&gw, flooder, "/e", &[("Authorization", &cy)]).await;
    assert_throttled(&answer);
    // And the other address still checks cy's password.
    let answer = raw_get(&gw, other, "/f", &[("Authorization", &cy)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");

    let got = up.received();
    let lines: Vec<&str> = got.iter().map(Received::request_line).collect();
    assert_eq!(
        lines,
        [
            "GET /a HTTP/1.1",
            "GET /b HTTP/1.1",
            "GET /c HTTP/1.1",
            "GET /d HTTP/1.1",
            "GET /f HTTP/1.1"
        ]
    );
    let users: Vec<Vec<String>> = got.iter().map(|g| g.cgi_header("x-user-id")).collect();
    assert_eq!(users, [["ann"], ["bob"], ["ann"], ["bob"], ["cy"]]);
    let metrics = gw.metrics().await;
    assert_eq!(
        metric(&metrics, "fairgate_auth_throttled_total"),
        Some(26.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "fairgate_auth_failures_total{reason=\"wrong_password\"}"
        ),
        Some(5.0),
        "{metrics}"
    );
}

/// Polls a GET of `target` with `credentials` until it is refused,
/// within `RELOAD`; the refusal.
async fn refused_within_reload(gw: &Gateway, target: &str, credentials: (&str, &str)) -> String {
    let last = std::cell::RefCell::new(String::new());
    let refused = eventually(RELOAD, || async {
        let answer = raw_get(gw, local(1), target, &[credentials]).await;
        let served = status_of(&answer) == 200;
        *last.borrow_mut() = answer;
        !served
    })
    .await;
    let last = last.into_inner();
    assert!(refused, "still served {RELOAD:?} after the change: {last}");
    last
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_htpasswd_removes_is_refused_after_the_reload() {
    let dir = tempfile::tempdir().unwrap();
    let file = htpasswd_file(dir.path());
    let up = RawUpstream::start().await;
    let gw = basic_policy(&file, "", up.addr).start().await;
    let (ann, bob) = (basic("ann", "pw-ann"), basic("bob", "pw-bob"));
    for auth in [&ann, &bob] {
        let answer = raw_get(&gw, local(1), "/x", &[("Authorization", auth)]).await;
        assert_eq!(status_of(&answer), 200, "{answer}");
    }

    // ann's credentials are remembered; removing her must still end them.
    htpasswd(&["-D", &file, "ann"]);
    assert!(!std::fs::read_to_string(&file).unwrap().contains("ann:"));
    let last = refused_within_reload(&gw, "/x", ("Authorization", &ann)).await;
    assert_basic_401(&last);
    let answer = raw_get(&gw, local(1), "/x", &[("Authorization", &bob)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let metrics = gw.metrics().await;
    assert!(
        metric(&metrics, "fairgate_config_reloads_total{result=\"ok\"}") >= Some(1.0),
        "{metrics}"
    );
}

fn sha256_hex(key: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// 40 random hex digits: a key no other text could contain by chance.
fn random_key() -> String {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; 20];
    aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut bytes)
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A keys file's text: each key's hash and the rest of its entry.
fn keys_text(entries: &[(&str, &str)]) -> String {
    let mut out = String::from("keys:\n");
    for (key, rest) in entries {
        out += &format!("  - {{sha256: {}, {rest}}}\n", sha256_hex(key));
    }
    out
}

/// `acme` (plan pro, user ci-bot) and `globex` (expired in 2020).
fn two_keys(acme: &str, globex: &str) -> String {
    keys_text(&[
        (acme, "tenant: acme, user: ci-bot, plan: pro"),
        (globex, "tenant: globex, expires: \"2020-01-01T00:00:00Z\""),
    ])
}

/// Method `keys` (header `X-Api-Key`, query `api_key`, over `file`) and a
/// route on `/` behind it spending `calls` (`capacity` a tenant, 1/h).
fn key_policy(file: &Path, upstream: SocketAddr, capacity: u32) -> Policy {
    Policy::new()
        .auth(&format!(
            r#"methods:
    keys:
      api_key: {{header: X-Api-Key, query: api_key, keys_file: "{}"}}"#,
            file.display()
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{upstream}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: {capacity}, rate: 1/h}}}}
routes:
  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: keys, limits: [calls]}}
"#
        ))
}

fn assert_key_401(answer: &str) {
    assert_eq!(status_of(answer), 401, "{answer}");
    assert_eq!(
        header_of(answer, "www-authenticate"),
        ["ApiKey"],
        "{answer}"
    );
    assert_eq!(
        header_of(answer, "content-type"),
        ["application/problem+json"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_spends_its_tenants_bucket_and_unknown_or_expired_keys_are_401() {
    let (acme, globex) = (random_key(), random_key());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, two_keys(&acme, &globex)).unwrap();
    let up = RawUpstream::start().await;
    let gw = key_policy(&file, up.addr, 3).start().await;
    let policy = "\"calls\";q=3;w=10800";

    for i in 0..3 {
        let answer = raw_get(&gw, local(1), "/v1/x", &[("X-Api-Key", &acme)]).await;
        assert_eq!(status_of(&answer), 200, "{i}: {answer}");
        assert_eq!(header_of(&answer, "ratelimit-policy"), [policy]);
    }
    let answer = raw_get(&gw, local(1), "/v1/x", &[("X-Api-Key", &acme)]).await;
    assert_eq!(status_of(&answer), 429, "{answer}");
    assert_eq!(header_of(&answer, "ratelimit-policy"), [policy]);
    let retry: u64 = header_of(&answer, "retry-after")[0].parse().unwrap();
    assert!((3590..=3600).contains(&retry), "{answer}");
    assert!(body_of(&answer).contains("rate-limited"), "{answer}");

    let got = up.received();
    assert_eq!(got.len(), 3);
    for g in &got {
        assert_eq!(
            identity_of(g),
            [["acme"], ["ci-bot"], ["pro"]],
            "{}",
            g.head
        );
    }

    let unknown = random_key();
    for headers in [
        vec![("X-Api-Key", unknown.as_str())],
        vec![("X-Api-Key", globex.as_str())],
        vec![],
    ] {
        let answer = raw_get(&gw, local(1), "/v1/x", &headers).await;
        assert_key_401(&answer);
        assert!(header_of(&answer, "ratelimit-policy").is_empty());
    }
    assert_eq!(up.count(), 3, "no refusal reached the upstream");
    let metrics = gw.metrics().await;
    assert_eq!(
        metric_sum(&metrics, "fairgate_auth_failures_total{"),
        3.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn identity_headers_a_client_sends_are_replaced_by_the_keys() {
    let (acme, globex) = (random_key(), random_key());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, two_keys(&acme, &globex)).unwrap();
    let up = RawUpstream::start().await;
    let gw = key_policy(&file, up.addr, 3).start().await;
    let forged = [
        ("X-Api-Key", acme.as_str()),
        ("X-Tenant-Id", "globex"),
        ("X-User-Id", "root"),
        ("X-Plan", "enterprise"),
        ("X_Tenant_Id", "globex"),
    ];
    let answer = raw_get(&gw, local(1), "/y", &forged).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(
        identity_of(&got[0]),
        [["acme"], ["ci-bot"], ["pro"]],
        "{}",
        got[0].head
    );
    // The bucket spent is acme's: two left of three.
    assert_eq!(
        header_of(&answer, "ratelimit-policy"),
        ["\"calls\";q=3;w=10800"]
    );
    assert_eq!(header_of(&answer, "ratelimit"), ["\"calls\";r=2;t=3600"]);
}

/// The gateway's log, once its access lines number `n`.
async fn logs_after(gw: &Gateway, n: usize) -> String {
    let written = eventually(Duration::from_secs(5), || async {
        gw.log_lines()
            .iter()
            .filter(|l| l["target"] == "access")
            .count()
            >= n
    })
    .await;
    assert!(written, "{n} access lines: {}", gw.logs());
    gw.logs()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_in_the_query_never_reaches_the_upstream_or_a_log_line() {
    let (acme, globex) = (random_key(), random_key());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, two_keys(&acme, &globex)).unwrap();
    let up = RawUpstream::start().await;
    // Every level the gateway writes (dependencies' wire debug stays off
    // without FAIRGATE_UNSAFE_WIRE_DEBUG), so no line escapes the check.
    let gw = key_policy(&file, up.addr, 100)
        .env("RUST_LOG", "trace")
        .start()
        .await;

    let answer = raw_get(&gw, local(1), &format!("/x?a=1&api_key={acme}&b=two"), &[]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let target = format!("/x?api%5Fkey={acme}&c=%2F+3");
    let answer = raw_get(&gw, local(1), &target, &[]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let answer = raw_get(&gw, local(1), &format!("/only?api_key={acme}"), &[]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    let targets: Vec<&str> = got.iter().map(Received::target).collect();
    assert_eq!(targets, ["/x?a=1&b=two", "/x?c=%2F+3", "/only"]);
    for g in &got {
        assert!(!g.head.contains(&acme), "{}", g.head);
        assert_eq!(identity_of(g), [["acme"], ["ci-bot"], ["pro"]]);
    }
    let logs = logs_after(&gw, 3).await;
    assert!(!logs.contains(&acme), "the key is in the log:\n{logs}");

    // An invalid key: refused, never forwarded, never logged, not echoed.
    let bad = random_key();
    let answer = raw_get(&gw, local(1), &format!("/x?a=1&api_key={bad}&b=two"), &[]).await;
    assert_key_401(&answer);
    assert!(!answer.contains(&bad), "{answer}");
    assert_eq!(up.count(), 3);
    let logs = logs_after(&gw, 4).await;
    assert!(!logs.contains(&bad), "the bad key is in the log:\n{logs}");

    // The header wins, and the query's key is taken out all the same.
    let other = random_key();
    let target = format!("/h?api_key={other}&z=9");
    let answer = raw_get(&gw, local(1), &target, &[("X-Api-Key", &acme)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].target(), "/h?z=9");
    assert!(!got[3].head.contains(&other), "{}", got[3].head);
    let logs = logs_after(&gw, 5).await;
    assert!(
        !logs.contains(&other),
        "the query's key is in the log:\n{logs}"
    );
    assert!(!logs.contains(&acme), "a key is in the log:\n{logs}");
}

/// Issue 40, finding 16: a key sent in its header is taken out before the
/// request goes upstream, as the query's is; the upstream hears who the
/// gateway says the client is, never the credential.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_16_a_key_in_its_header_never_reaches_the_upstream() {
    let (acme, globex) = (random_key(), random_key());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, two_keys(&acme, &globex)).unwrap();
    let up = RawUpstream::start().await;
    let gw = key_policy(&file, up.addr, 100).start().await;
    let headers = [("X-Api-Key", acme.as_str()), ("x-api-key", globex.as_str())];
    let answer = raw_get(&gw, local(1), "/orders", &headers).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert!(!got[0].head.contains(&acme), "{}", got[0].head);
    assert!(!got[0].head.contains(&globex), "{}", got[0].head);
    assert!(
        !got[0].head.to_ascii_lowercase().contains("x-api-key"),
        "{}",
        got[0].head
    );
    assert_eq!(identity_of(&got[0]), [["acme"], ["ci-bot"], ["pro"]]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_revoked_from_the_keys_file_is_401_after_the_reload() {
    let (revoked, kept) = (random_key(), random_key());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.yaml");
    let both = keys_text(&[
        (&revoked, "tenant: acme, user: old-bot"),
        (&kept, "tenant: initech, user: new-bot"),
    ]);
    std::fs::write(&file, both).unwrap();
    let up = RawUpstream::start().await;
    let gw = key_policy(&file, up.addr, 1000).start().await;
    for key in [&revoked, &kept] {
        let answer = raw_get(&gw, local(1), "/z", &[("X-Api-Key", key)]).await;
        assert_eq!(status_of(&answer), 200, "{answer}");
    }

    std::fs::write(
        &file,
        keys_text(&[(&kept, "tenant: initech, user: new-bot")]),
    )
    .unwrap();
    let last = refused_within_reload(&gw, "/z", ("X-Api-Key", &revoked)).await;
    assert_key_401(&last);
    let before = up.count();
    let answer = raw_get(&gw, local(1), "/z", &[("X-Api-Key", &revoked)]).await;
    assert_key_401(&answer);
    assert_eq!(up.count(), before, "a revoked key reaches nothing");
    let answer = raw_get(&gw, local(1), "/z", &[("X-Api-Key", &kept)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    let last_seen = got.last().unwrap();
    assert_eq!(last_seen.cgi_header("x-tenant-id"), ["initech"]);
    assert_eq!(last_seen.cgi_header("x-user-id"), ["new-bot"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_map_names_each_users_tenant_and_plan_and_their_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let file = htpasswd_file(dir.path());
    let users = dir.path().join("users.yaml");
    std::fs::write(
        &users,
        "users:\n  ann: {tenant: acme, plan: pro}\n  bob: {tenant: acme}\n",
    )
    .unwrap();
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            r#"methods:
    staff:
      basic: {{htpasswd_file: "{file}", realm: "{REALM}", users_file: "{}"}}"#,
            users.display()
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: 3, rate: 1/h}}}}
routes:
  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: staff, limits: [calls]}}
"#,
            up.addr
        ))
        .start()
        .await;
    let gw = &gw;
    let as_user = |user: &str, password: &str| {
        let auth = basic(user, password);
        async move { raw_get(gw, local(1), "/x", &[("authorization", &auth)]).await }
    };
    let first = as_user("ann", "pw-ann").await;
    assert_eq!(status_of(&first), 200, "{first}");
    assert_eq!(header_of(&first, "ratelimit"), ["\"calls\";r=2;t=3600"]);
    assert_eq!(
        identity_of(&up.received()[0]),
        [
            vec!["acme".to_string()],
            vec!["ann".into()],
            vec!["pro".into()]
        ]
    );
    // bob shares acme's bucket: two left, then none.
    assert_eq!(status_of(&as_user("bob", "pw-bob").await), 200);
    assert_eq!(
        identity_of(&up.received()[1])[2],
        ["free"],
        "the default plan"
    );
    assert_eq!(status_of(&as_user("bob", "pw-bob").await), 200);
    assert_eq!(status_of(&as_user("ann", "pw-ann").await), 429);
    // cy is a valid user with no tenant: a tenant-scoped route cannot key her.
    let cy = as_user("cy", "pw-cy").await;
    assert_eq!(status_of(&cy), 401, "{cy}");
    assert_eq!(up.count(), 3);
}
