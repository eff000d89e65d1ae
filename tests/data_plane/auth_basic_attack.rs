//! Basic authentication attacked as issue 40 did: password guesses from
//! eight loopback addresses at once, raw over TCP, against a real gateway.
//! An address gets one bcrypt check at a time (its others are 429 at
//! once), so a user's first login waits behind at most one check an
//! address; guesses at one user spread over many addresses run dry on
//! that user's bucket, while credentials verified before still pass.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::auth_basic_keys::{
    assert_basic_401, basic, basic_policy, body_of, header_of, htpasswd, local, raw_get,
};

/// The attacking addresses: 127.0.0.2 to 127.0.0.9.
const ATTACKERS: std::ops::RangeInclusive<u8> = 2..=9;
/// The signed-in user's own address.
const USER: u8 = 10;

/// An htpasswd file of ann and bob (passwords `pw-ann`, `pw-bob`) in
/// bcrypt of `cost`, written by Apache's `htpasswd`.
fn users_file(dir: &std::path::Path, cost: u32) -> String {
    let file = dir.join("users.htpasswd").display().to_string();
    let cost = cost.to_string();
    htpasswd(&["-c", "-b", "-B", "-C", &cost, &file, "ann", "pw-ann"]);
    htpasswd(&["-b", "-B", "-C", &cost, &file, "bob", "pw-bob"]);
    file
}

/// A connection from `source`, open before anything is written, so a
/// burst's requests reach the gateway together.
async fn connect_from(source: IpAddr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    socket.connect(to).await.expect("connect")
}

/// A GET of `target` with basic credentials, as raw bytes.
fn get(target: &str, authorization: &str) -> String {
    format!(
        "GET {target} HTTP/1.1\r\nHost: app.test\r\nAuthorization: {authorization}\r\n\
         Connection: close\r\n\r\n"
    )
}

/// The whole answer on `stream`, and its place among the burst's answers.
async fn answer_of(mut stream: TcpStream, answered: &AtomicUsize) -> (String, usize) {
    let mut out = Vec::new();
    let read = stream.read_to_end(&mut out);
    let _ = tokio::time::timeout(Duration::from_secs(60), read).await;
    let place = answered.fetch_add(1, Ordering::SeqCst);
    (String::from_utf8_lossy(&out).into_owned(), place)
}

/// The 429 of a refusal before any check: as the address's failure
/// bucket's (Retry-After, problem+json, no challenge), saying why, with a
/// Retry-After in `seconds`.
fn assert_refused_unchecked(answer: &str, why: &str, seconds: std::ops::RangeInclusive<u64>) {
    assert_eq!(status_of(answer), 429, "{answer}");
    let retry = header_of(answer, "retry-after");
    assert_eq!(retry.len(), 1, "{answer}");
    let retry: u64 = retry[0].parse().unwrap();
    assert!(seconds.contains(&retry), "{answer}");
    assert_eq!(
        header_of(answer, "content-type"),
        ["application/problem+json"]
    );
    assert!(header_of(answer, "www-authenticate").is_empty(), "{answer}");
    assert!(body_of(answer).contains("auth-throttled"), "{answer}");
    assert!(body_of(answer).contains(why), "{answer}");
}

/// Issue 40, finding 12: eight addresses guessing at cost 12 were never
/// throttled, and a user's first correct login waited 22.5 s in the check
/// queue behind every guess queued before it. Now each address has one
/// check at a time: five guesses at once from each of eight addresses
/// buy eight bcrypt checks (one an address) and 32 immediate 429s, and
/// ann's first login, sent with them, is answered 200 after at most the
/// eight checks an address each had queued (main: 40 checks, all 401,
/// 11 to 34 of them answered before her 200 in three runs).
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_12_a_login_waits_behind_one_check_an_address_not_every_guess() {
    let dir = tempfile::tempdir().unwrap();
    let file = users_file(dir.path(), 12);
    let up = RawUpstream::start().await;
    let gw = basic_policy(&file, "", up.addr).start().await;

    let mut guesses = Vec::new();
    for last in ATTACKERS {
        for _ in 0..5 {
            guesses.push((last, connect_from(local(last), gw.listen).await));
        }
    }
    let mut login = connect_from(local(USER), gw.listen).await;
    // Every guess is written, then the login, then the answers are read.
    let answered = Arc::new(AtomicUsize::new(0));
    let mut reading = Vec::new();
    for (i, (last, mut stream)) in guesses.into_iter().enumerate() {
        let guess = get("/guess", &basic("ann", &format!("guess-{i}")));
        stream.write_all(guess.as_bytes()).await.unwrap();
        let answered = answered.clone();
        let answer = tokio::spawn(async move { answer_of(stream, &answered).await });
        reading.push((last, answer));
    }
    let request = get("/login", &basic("ann", "pw-ann"));
    login.write_all(request.as_bytes()).await.unwrap();
    let (answer, login_place) = answer_of(login, &answered).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(body_of(&answer), "ok");

    let mut checked_before_login = 0;
    for last in ATTACKERS {
        let mut statuses = Vec::new();
        for (_, task) in reading.iter_mut().filter(|(l, _)| *l == last) {
            let (answer, place) = task.await.unwrap();
            match status_of(&answer) {
                401 => {
                    assert_basic_401(&answer);
                    checked_before_login += usize::from(place < login_place);
                }
                _ => assert_refused_unchecked(&answer, "checked already", 1..=1),
            }
            statuses.push(status_of(&answer));
        }
        statuses.sort_unstable();
        assert_eq!(statuses, [401, 429, 429, 429, 429], "127.0.0.{last}");
    }
    assert!(
        checked_before_login <= ATTACKERS.len(),
        "{checked_before_login} guesses were checked before the login was answered"
    );

    let metrics = gw.metrics().await;
    let wrong = "fairgate_auth_failures_total{reason=\"wrong_password\"}";
    assert_eq!(metric(&metrics, wrong), Some(8.0), "{metrics}");
    let queued = "fairgate_basic_auth_throttled_total{reason=\"queued\"}";
    assert_eq!(metric(&metrics, queued), Some(32.0), "{metrics}");
    let now = "fairgate_basic_auth_checks_queued";
    assert_eq!(metric(&metrics, now), Some(0.0), "{metrics}");
    // Answered, an address checks again: the place was given back.
    let guess = basic("ann", "x");
    let again = raw_get(&gw, local(2), "/again", &[("Authorization", &guess)]).await;
    assert_basic_401(&again);
    let got = up.received();
    assert_eq!(got.len(), 1, "only the login reached the upstream");
    assert_eq!(got[0].request_line(), "GET /login HTTP/1.1");
    assert_eq!(got[0].cgi_header("x-user-id"), ["ann"]);
}

/// Forty wrong passwords for `user`, sent one after another from the
/// eight attacking addresses in turn; each answer's status (each 401 the
/// basic challenge, each 429 the user name's refusal).
async fn guesses_at(gw: &Gateway, user: &str) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 0..40u8 {
        let source = local(ATTACKERS.start() + i % 8);
        let auth = basic(user, &format!("guess-{i}"));
        let answer = raw_get(gw, source, "/guess", &[("Authorization", &auth)]).await;
        match status_of(&answer) {
            401 => assert_basic_401(&answer),
            _ => assert_refused_unchecked(&answer, "user name", 50..=60),
        }
        statuses.push(status_of(&answer));
    }
    statuses
}

/// Issue 40, finding 12, the guesses: spread over eight addresses, five
/// each, 40 guesses at ann never emptied an address's bucket (20, 1/s)
/// and were all checked (main: 40 x 401). Now they spend ann's own
/// bucket (`auth.user_failure_limit`, 20, 1/min): 20 x 401, then 429
/// without a check. ann's credentials verified before still pass from
/// anywhere, bob is unaffected, and an unknown name is treated exactly
/// as ann is, so the 429 tells no one that a user exists.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_12_guesses_at_one_user_from_8_addresses_run_dry_on_her_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let file = users_file(dir.path(), 5);
    let up = RawUpstream::start().await;
    let gw = basic_policy(&file, "", up.addr).start().await;
    let ann = basic("ann", "pw-ann");
    let answer = raw_get(&gw, local(USER), "/a", &[("Authorization", &ann)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");

    let statuses = guesses_at(&gw, "ann").await;
    assert_eq!(statuses[..20], [401; 20], "{statuses:?}");
    assert_eq!(statuses[20..], [429; 20], "{statuses:?}");

    // Verified before: remembered, no bucket asked, from any address.
    for source in [local(2), local(USER)] {
        let answer = raw_get(&gw, source, "/b", &[("Authorization", &ann)]).await;
        assert_eq!(status_of(&answer), 200, "{answer}");
    }
    // Her password in a header never verified waits for her bucket too.
    let unverified = ann.replacen("Basic", "basic", 1);
    let answer = raw_get(&gw, local(USER), "/c", &[("Authorization", &unverified)]).await;
    assert_refused_unchecked(&answer, "user name", 50..=60);
    let bob = basic("bob", "pw-bob");
    let answer = raw_get(&gw, local(2), "/d", &[("Authorization", &bob)]).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // A name nobody has: the same 20 checks, then the same 429.
    assert_eq!(guesses_at(&gw, "zed").await, statuses);

    let metrics = gw.metrics().await;
    let wrong = "fairgate_auth_failures_total{reason=\"wrong_password\"}";
    assert_eq!(metric(&metrics, wrong), Some(40.0), "{metrics}");
    let user = "fairgate_basic_auth_throttled_total{reason=\"user\"}";
    assert_eq!(metric(&metrics, user), Some(41.0), "{metrics}");
    let address = "fairgate_auth_throttled_total";
    assert_eq!(metric(&metrics, address), Some(0.0), "{metrics}");
    let got = up.received();
    let lines: Vec<&str> = got.iter().map(Received::request_line).collect();
    assert_eq!(
        lines,
        [
            "GET /a HTTP/1.1",
            "GET /b HTTP/1.1",
            "GET /b HTTP/1.1",
            "GET /d HTTP/1.1"
        ]
    );
}
