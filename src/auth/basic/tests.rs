//! Unit tests of `basic`.

use super::*;

// Written by Apache's htpasswd 2.4: -nbB (cost 5), -nbs, -nbm, -nbp, -nbd.
const BCRYPT: &str = "alice:$2y$05$6AzQ3okzVIfl7J6oglLqTucx2iJlh8KSE0hdGSEj3X3UcSm.Nq38y";
const BCRYPT_BOB: &str = "bob:$2y$05$m9JSq0363HPWRNuXt3VKIeddLEi.NEZp5VLi313pH3dK6PqoevGP.";
const SHA1: &str = "alice:{SHA}G0Fp6QeezSSoSjB067ntnWhh0qw=";
const SHA1_EMPTY: &str = "dave:{SHA}2jmj7l5rSw0yVb/vlWAYkK/YBwk=";
const APR1: &str = "alice:$apr1$enUi5mBf$D5iFd3ekOF4luJRFzb2dG/";
const APR1_UTF8: &str = "carol:$apr1$Jbso8Oh8$B8QrJcZZk2VZKbGVNI.J/.";
const APR1_LONG: &str = "eve:$apr1$aMrqkdLF$/lUlXmMK.sW6c1RiNzJlR/";
const APR1_EMPTY: &str = "frank:$apr1$abvr4Jys$/CKg6oYJmFqtYlMRoO2dZ1";
const PLAIN: &str = "alice:s3cret:pw";
const CRYPT: &str = "alice:uAEgO3gOrJqss";
// openssl passwd -1 / -5 / -6 -salt abc pw
const MD5_CRYPT: &str = "alice:$1$abc$Kb85XxsXB.VXinPhbS4431";
const SHA256_CRYPT: &str = "alice:$5$abc$/LKlXd6vuvdFX3oWbf2vGk3DgflzzsvOtMZsiOxqqY5";
const SHA512_CRYPT: &str = "alice:$6$abc$MtSdWSZbhct2oe.SOqOUM2M/GA/uj5.vyVtJgRHgKi9uqXuWuJqOYE7H/YlsYGVg/YYzDV0xt3fEIwYt580.5.";
const PASSWORD: &str = "s3cret:pw";
const LONG: &str = "a-rather-long-password-of-40-characters!";

fn parse(lines: &[&str]) -> Htpasswd {
    Htpasswd::parse(&lines.join("\n")).expect("valid htpasswd")
}

fn header(user_password: &str) -> Vec<u8> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
    format!("Basic {encoded}").into_bytes()
}

#[test]
fn a_bcrypt_cost_over_the_bound_is_refused_with_its_line() {
    let salt_and_sum = DECOY_BCRYPT;
    let text = format!("ann:$2y$05${salt_and_sum}\nbob:$2y$13${salt_and_sum}\n");
    let e = Htpasswd::parse(&text).unwrap_err();
    assert_eq!(e, HtpasswdError::CostTooHigh { line: 2, cost: 13 });
    assert!(
        e.to_string()
            .starts_with("line 2: bcrypt cost 13 is over 12"),
        "{e}"
    );
    let ok = format!("ann:$2y$12${salt_and_sum}\n");
    let h = Htpasswd::parse(&ok).unwrap();
    assert_eq!(h.check("ann", "x").1, [Work::Bcrypt { cost: 12 }]);
}

#[test]
fn bcrypt_entries_verify() {
    let h = parse(&[BCRYPT, BCRYPT_BOB]);
    assert_eq!(h.len(), 2);
    assert!(h.verify("alice", PASSWORD));
    assert!(!h.verify("alice", "s3cret"));
    assert!(h.verify("bob", "hunter2"));
    assert!(!h.verify("bob", "hunter3"));
    assert!(!h.verify("bob", PASSWORD));
}

#[test]
fn sha1_entries_verify() {
    let h = parse(&[SHA1, SHA1_EMPTY]);
    assert!(h.verify("alice", PASSWORD));
    assert!(!h.verify("alice", "s3cret:pW"));
    assert!(h.verify("dave", ""));
    assert!(!h.verify("dave", " "));
}

#[test]
fn apr1_entries_verify() {
    let h = parse(&[APR1, APR1_UTF8, APR1_LONG, APR1_EMPTY]);
    assert!(h.verify("alice", PASSWORD));
    assert!(!h.verify("alice", "s3cret:p"));
    assert!(h.verify("carol", "pässwörd"));
    assert!(!h.verify("carol", "passwort"));
    assert!(h.verify("eve", LONG));
    assert!(!h.verify("eve", &LONG[..39]));
    assert!(h.verify("frank", ""));
    assert!(!h.verify("frank", "x"));
}

#[test]
fn apr1_known_vector() {
    // openssl passwd -apr1 -salt xxxxxxxx password
    assert_eq!(
        &apr1_sum(b"password", b"xxxxxxxx"),
        b"dxHfLAsjHkDRmG83UXe8K0"
    );
}

#[test]
fn unknown_user_is_refused() {
    let h = parse(&[BCRYPT, SHA1_EMPTY]);
    assert!(!h.verify("mallory", PASSWORD));
    assert!(!h.verify("", ""));
    assert!(
        !h.verify("Alice", PASSWORD),
        "user names are case-sensitive"
    );
}

/// Issue 40, finding 14: a known user with a wrong password cost one
/// `$apr1$` check (0.38 ms) and an unknown user one bcrypt (2.27 ms); with
/// bcrypt of costs 5 and 12, 3.9 against 388 ms. Now every check, of any
/// user, known or not, right or wrong, computes the same hashes: one of
/// each kind the file holds.
#[test]
fn issue_40_finding_14_every_name_costs_the_same_hashes_known_or_not() {
    // htpasswd -nbB -C 7 gil pw-gil
    let dear = "gil:$2y$07$XGjzUnHN7XbmYR7pB7LztOcAGbBJKoUJ/YljoQz0bJvHgySKG4y9y";
    let h = parse(&[BCRYPT, APR1_UTF8, SHA1_EMPTY, dear, BCRYPT_BOB]);
    let every = [
        Work::Sha1,
        Work::Apr1,
        Work::Bcrypt { cost: 5 },
        Work::Bcrypt { cost: 7 },
    ];
    let tries = [
        ("alice", PASSWORD, true),
        ("alice", "wrong", false),
        ("bob", "hunter2", true),
        ("carol", "pässwörd", true),
        ("carol", "wrong", false),
        ("dave", "", true),
        ("dave", "wrong", false),
        ("gil", "pw-gil", true),
        ("gil", "wrong", false),
        ("mallory", "wrong", false),
        ("", "", false),
        ("Alice", PASSWORD, false),
    ];
    for (user, password, valid) in tries {
        assert_eq!(h.check(user, password), (valid, every.to_vec()), "{user}");
    }
    // A file of one kind costs one hash a check, known or not.
    let h = parse(&[APR1, APR1_EMPTY]);
    for user in ["alice", "frank", "mallory"] {
        assert_eq!(h.check(user, "x"), (false, vec![Work::Apr1]), "{user}");
    }
    // The decoys answer no password, not even the one their bcrypt was of.
    for work in every {
        for password in ["", "x", PASSWORD] {
            assert!(!Hash::decoy(work).matches(password.as_bytes()), "{work:?}");
        }
    }
}

#[test]
fn blank_lines_comments_crlf_and_extra_fields() {
    let text = format!("# users\r\n\r\n{BCRYPT}\r\n   \n{SHA1_EMPTY}:admins\n#{PLAIN}\n");
    let h = Htpasswd::parse(&text).expect("valid");
    assert_eq!(h.len(), 2);
    assert!(!h.is_empty());
    assert!(h.verify("dave", ""));
    assert!(h.verify("alice", PASSWORD));
}

fn refused(lines: &[&str]) -> HtpasswdError {
    match Htpasswd::parse(&lines.join("\n")) {
        Ok(_) => panic!("accepted {lines:?}"),
        Err(e) => e,
    }
}

#[test]
fn refused_forms_name_their_line() {
    use HtpasswdError::*;
    let cases = [
        (PLAIN, PlainText { line: 3 }),
        (CRYPT, Crypt { line: 3 }),
        ("alice:$2x$05$abc", PlainText { line: 3 }),
        (
            MD5_CRYPT,
            Unsupported {
                line: 3,
                scheme: "MD5-crypt ($1$)",
            },
        ),
        (
            SHA256_CRYPT,
            Unsupported {
                line: 3,
                scheme: "SHA-256-crypt ($5$)",
            },
        ),
        (
            SHA512_CRYPT,
            Unsupported {
                line: 3,
                scheme: "SHA-512-crypt ($6$)",
            },
        ),
        ("alice", NoColon { line: 3 }),
        (":{SHA}G0Fp6QeezSSoSjB067ntnWhh0qw=", EmptyUser { line: 3 }),
    ];
    for (entry, expected) in cases {
        let error = refused(&["# first", SHA1_EMPTY, entry]);
        assert_eq!(error, expected, "{entry}");
        let message = error.to_string();
        assert!(message.starts_with("line 3: "), "{message}");
        let hash = entry.split_once(':').map_or("", |(_, h)| h);
        assert!(hash.is_empty() || !message.contains(hash), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
    let message = refused(&[MD5_CRYPT]).to_string();
    assert!(message.contains(
        "not a format htpasswd writes with -B, -s or -m; re-create the entry with htpasswd -B"
    ));
}

#[test]
fn malformed_hashes_of_accepted_forms() {
    use HtpasswdError::Malformed;
    let unread = format!("a:$2y$05${}", "a".repeat(53));
    let cases = [
        ("a:$2y$05$short", "bcrypt"),
        // bcrypt's alphabet, but not what its base64 writes: bits past the
        // salt's 16 bytes and the sum's 23 (the crate would check nothing).
        (&unread, "bcrypt"),
        (
            "a:$2y$05$6AzQ3okzVIfl7J6oglLqTucx2iJlh8KSE0hdGSEj3X3UcSm.Nq38z",
            "bcrypt",
        ),
        (
            "a:$2y$99$6AzQ3okzVIfl7J6oglLqTucx2iJlh8KSE0hdGSEj3X3UcSm.Nq38y",
            "bcrypt",
        ),
        ("a:{SHA}G0Fp6QeezSSoSjB067ntnWhh0q==", "{SHA}"),
        ("a:{SHA}not base64", "{SHA}"),
        ("a:$apr1$enUi5mBfx$D5iFd3ekOF4luJRFzb2dG/", "$apr1$"),
        ("a:$apr1$enUi5mBf$D5iFd3ekOF4luJRFzb2dG", "$apr1$"),
        ("a:$apr1$enUi5mBf", "$apr1$"),
    ];
    for (entry, scheme) in cases {
        assert_eq!(refused(&[entry]), Malformed { line: 1, scheme }, "{entry}");
    }
}

#[test]
fn duplicate_users_and_empty_files() {
    let error = refused(&[SHA1, "", APR1]);
    assert_eq!(error, HtpasswdError::DuplicateUser { line: 3, first: 1 });
    assert_eq!(
        error.to_string(),
        "line 3: the user is given twice (first on line 1)"
    );
    assert_eq!(refused(&[]), HtpasswdError::Empty { lines: 0 });
    assert_eq!(
        refused(&["# only", "", "#"]),
        HtpasswdError::Empty { lines: 3 }
    );
}

#[test]
fn credentials_of_headers() {
    let ok = |user: &str, password: &str| Some((user.to_string(), password.to_string()));
    assert_eq!(
        credentials(Some(&header("alice:s3cret:pw"))),
        ok("alice", PASSWORD)
    );
    assert_eq!(credentials(Some(b"basic YTpi")), ok("a", "b"));
    assert_eq!(credentials(Some(b"BASIC   YTpi ")), ok("a", "b"));
    assert_eq!(credentials(Some(&header(":"))), ok("", ""));
    assert_eq!(
        credentials(Some(&header("u:pässwörd"))),
        ok("u", "pässwörd")
    );
    let user = "u".repeat(MAX_USER_BYTES);
    assert_eq!(
        credentials(Some(&header(&format!("{user}:p")))),
        ok(&user, "p")
    );
}

#[test]
fn credentials_refused() {
    let long_user = format!("{}:p", "u".repeat(MAX_USER_BYTES + 1));
    let long_password = format!("u:{}", "p".repeat(MAX_HEADER_BYTES));
    let refused: [&[u8]; 12] = [
        b"Bearer YTpi",
        b"Basic",
        b"Basic ",
        b"BasicYTpi",
        b"Basic YTpi!",
        b"Basic YTpiYw",
        b"Basic YT pi",
        b"Basic YWI=",
        b"Basic /w==",
        b"\xffBasic YTpi",
        &header(&long_user),
        &header(&long_password),
    ];
    for value in refused {
        assert_eq!(credentials(Some(value)), None, "{value:?}");
    }
    assert_eq!(credentials(None), None);
    assert_eq!(
        credentials(Some(b"Basic YTpiYw==")),
        Some(("a".into(), "bc".into()))
    );
}

fn basic(lines: &[&str]) -> BasicAuth {
    BasicAuth::new(parse(lines), "fairgate".into())
}

#[test]
fn known_after_success_only() {
    let auth = basic(&[SHA1, APR1_UTF8]);
    assert_eq!(auth.realm(), "fairgate");
    let good = header("alice:s3cret:pw");
    let bad = header("alice:s3cret");
    assert_eq!(auth.known(Some(&good)), None);
    assert_eq!(auth.verify(Some(&bad)), Err(BasicError::Wrong));
    assert_eq!(auth.known(Some(&bad)), None, "failures are not cached");
    assert_eq!(auth.verify(Some(&good)), Ok("alice".into()));
    assert_eq!(auth.known(Some(&good)), Some("alice".into()));
    assert_eq!(auth.known(Some(&header("carol:pässwörd"))), None);
    assert_eq!(auth.known(None), None);
}

#[test]
fn verify_errors() {
    let auth = basic(&[BCRYPT]);
    assert_eq!(auth.verify(None), Err(BasicError::Missing));
    assert_eq!(auth.verify(Some(b"Bearer x")), Err(BasicError::Malformed));
    assert_eq!(auth.verify(Some(b"Basic YTpi")), Err(BasicError::Wrong));
    assert_eq!(
        auth.verify(Some(&header("alice:s3cret:pw"))),
        Ok("alice".into())
    );
    let reasons: Vec<_> = BasicError::ALL.iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, ["missing", "malformed", "wrong_password"]);
}

#[test]
fn remembered_credentials_expire() {
    let auth = BasicAuth::with_ttl(parse(&[SHA1]), "r".into(), Duration::ZERO);
    let good = header("alice:s3cret:pw");
    assert_eq!(auth.verify(Some(&good)), Ok("alice".into()));
    assert_eq!(auth.known(Some(&good)), None);
    assert!(auth.verified.lock().expect("lock").is_empty(), "removed");
}

#[test]
fn the_cache_is_bounded() {
    let auth = basic(&[SHA1]);
    let now = Instant::now();
    for i in 0..CACHE_ENTRIES + 10 {
        auth.remember(format!("Basic {i}").as_bytes(), "alice", now);
    }
    let held = auth.verified.lock().expect("lock").len();
    assert!(held <= CACHE_ENTRIES && held > 0, "{held}");
    auth.remember(&vec![b'x'; MAX_HEADER_BYTES + 1], "alice", now);
    assert_eq!(auth.verified.lock().expect("lock").len(), held);
}
