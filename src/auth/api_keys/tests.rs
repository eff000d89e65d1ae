//! Unit tests of `api_keys`.

use super::*;

/// printf %s foo | sha256sum
const FOO: &str = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
/// printf %s bar | sha256sum
const BAR: &str = "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9";
/// 2027-01-01T00:00:00Z
const EXPIRES: i64 = 1_798_761_600;

fn valid() -> String {
    format!(
        "# keys\nkeys:\n  - sha256: {FOO}\n    tenant: acme\n    user: ci-bot\n    plan: pro\n    expires: \"2027-01-01T00:00:00Z\"\n  - sha256: {}\n    tenant: globex\n",
        BAR.to_uppercase()
    )
}

fn error_of(text: &str) -> String {
    match ApiKeys::parse(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

/// One entry with `line` (written as line 4) added after its sha256.
fn entry_with(line: &str) -> String {
    format!("keys:\n  - tenant: acme\n    sha256: {FOO}\n    {line}\n")
}

#[test]
fn parses_and_checks_a_valid_file() {
    let keys = ApiKeys::parse(&valid()).expect("valid file");
    assert_eq!(keys.len(), 2);
    assert!(!keys.is_empty());
    let foo = keys.check("foo", 0).expect("foo");
    assert_eq!(
        foo,
        &KeyRecord {
            tenant: "acme".into(),
            user: Some("ci-bot".into()),
            plan: Some("pro".into()),
            expires: Some(EXPIRES),
        }
    );
    let bar = keys.check("bar", i64::MAX).expect("bar never expires");
    assert_eq!(bar.tenant, "globex");
    assert_eq!((bar.user.as_deref(), bar.plan.as_deref()), (None, None));
    assert_eq!(bar.expires, None);
}

#[test]
fn unknown_empty_and_long_keys() {
    let keys = ApiKeys::parse(&valid()).expect("valid file");
    assert_eq!(keys.check("baz", 0), Err(ApiKeyError::Unknown));
    assert_eq!(keys.check("", 0), Err(ApiKeyError::Unknown));
    assert_eq!(keys.check(&"f".repeat(1025), 0), Err(ApiKeyError::Unknown));
    assert_eq!(keys.check("Foo", 0), Err(ApiKeyError::Unknown));
}

#[test]
fn expiry_boundary() {
    let keys = ApiKeys::parse(&valid()).expect("valid file");
    assert!(keys.check("foo", EXPIRES - 1).is_ok());
    assert_eq!(keys.check("foo", EXPIRES), Err(ApiKeyError::Expired));
    assert_eq!(keys.check("foo", EXPIRES + 1), Err(ApiKeyError::Expired));
}

#[test]
fn empty_list_refuses_every_key() {
    let keys = ApiKeys::parse("keys: []\n").expect("empty list");
    assert!(keys.is_empty());
    assert_eq!(keys.check("foo", 0), Err(ApiKeyError::Unknown));
}

#[test]
fn reasons_and_descriptions() {
    let reasons: Vec<_> = ApiKeyError::ALL.iter().map(|e| e.reason()).collect();
    assert_eq!(reasons, ["missing", "unknown_key", "expired_key"]);
    assert_eq!(ApiKeyError::Missing.description(), "no API key");
    assert_eq!(
        ApiKeyError::Unknown.description(),
        "the API key is not valid"
    );
    assert_eq!(
        ApiKeyError::Expired.description(),
        "the API key has expired"
    );
}

#[test]
fn entry_errors_name_line_and_field_without_the_digest() {
    let cases = [
        ("colour: red", "line 4: keys[0].colour: unknown field"),
        (
            "tenantId: x",
            "line 4: keys[0].(name not shown): unknown field",
        ),
        (
            "user: \"a\\tb\"",
            "line 4: keys[0].user: must be 1 to 256 bytes",
        ),
        (
            "plan: \"a b\"",
            "line 4: keys[0].plan: must be 1 to 64 printable",
        ),
        (
            "expires: tomorrow",
            "line 4: keys[0].expires: must be an RFC 3339",
        ),
        (
            "expires: 2027-01-01",
            "line 4: keys[0].expires: must be an RFC 3339",
        ),
    ];
    for (line, want) in cases {
        let error = error_of(&entry_with(line));
        assert!(error.starts_with(want), "{line}: {error}");
        assert!(!error.contains(FOO), "{error}");
    }
    let long_user = format!("user: {}", "u".repeat(257));
    let error = error_of(&entry_with(&long_user));
    assert!(error.starts_with("line 4: keys[0].user: must be 1 to 256"));
    let longest_user = format!("user: {}", "u".repeat(256));
    assert!(ApiKeys::parse(&entry_with(&longest_user)).is_ok());
}

#[test]
fn tenant_errors() {
    let bad = format!("keys:\n  - sha256: {FOO}\n    tenant: \"a b\"\n");
    let error = error_of(&bad);
    assert_eq!(
        error,
        "line 3: keys[0].tenant: must be 1 to 128 of A-Z a-z 0-9 . _ @ -"
    );
    let missing = format!("keys:\n  - sha256: {FOO}\n    user: u\n");
    assert_eq!(error_of(&missing), "line 2: keys[0].tenant: required");
    let null = format!("keys:\n  - sha256: {FOO}\n    tenant: ~\n");
    assert_eq!(error_of(&null), "line 2: keys[0].tenant: required");
}

#[test]
fn sha256_errors_never_echo_it() {
    let short = &FOO[..63];
    let not_hex = format!("{}g", &FOO[..63]);
    for sha in [short, not_hex.as_str(), "foo"] {
        let text = format!("keys:\n  - tenant: acme\n  - sha256: {sha}\n    tenant: acme\n");
        let error = error_of(&text);
        assert!(
            error.contains("line 3: keys[1].sha256: must be 64 hex digits"),
            "{error}"
        );
        assert!(!error.contains(short), "{error}");
    }
    let missing = "keys:\n  - tenant: acme\n";
    assert_eq!(error_of(missing), "line 2: keys[0].sha256: required");
}

#[test]
fn duplicates_compare_case_insensitively() {
    let text = format!(
        "keys:\n  - sha256: {FOO}\n    tenant: a\n  - sha256: {BAR}\n    tenant: b\n  - sha256: {}\n    tenant: c\n",
        FOO.to_uppercase()
    );
    let error = error_of(&text);
    assert_eq!(error, "line 6: keys[2].sha256: the same key as keys[0]");
    assert!(!error.to_lowercase().contains(FOO));
}

#[test]
fn file_shape_errors() {
    assert_eq!(error_of("{}\n"), "line 1: keys: required");
    assert_eq!(error_of("keys: 3\n"), "line 1: keys: must be a list");
    assert_eq!(
        error_of("keys: []\nextra: 1\n"),
        "line 2: extra: unknown field; expected one of keys"
    );
    assert_eq!(
        error_of("keys:\n  - just-a-string\n"),
        "line 2: keys[0]: must be a mapping"
    );
    assert!(error_of("keys: [\n").starts_with("line "));
    let dup = format!("keys:\n  - sha256: {FOO}\n    sha256: {FOO}\n    tenant: a\n");
    let error = error_of(&dup);
    assert_eq!(error, "line 3: sha256: duplicate key");
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = format!(
        "keys:\n  - sha256: {FOO}\n    tenant: \"a b\"\n  - sha256: nope\n    tenant: b\n    expires: soon\n"
    );
    let error = ApiKeys::parse(&text).expect_err("three problems");
    let KeysError::Several(problems) = &error else {
        panic!("{error}");
    };
    assert_eq!(problems.len(), 3);
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(lines[0].starts_with("line 3: keys[0].tenant"));
    assert!(lines[1].starts_with("line 4: keys[1].sha256"));
    assert!(lines[2].starts_with("line 6: keys[1].expires"));
    assert!(!error.to_string().contains(FOO));
}

fn take(query: &str) -> (Option<String>, String) {
    take_query_param(query, "api_key")
}

#[test]
fn query_param_positions() {
    assert_eq!(take("api_key=k"), (Some("k".into()), String::new()));
    assert_eq!(take("api_key=k&a=1"), (Some("k".into()), "a=1".into()));
    assert_eq!(
        take("a=1&api_key=k&b=2"),
        (Some("k".into()), "a=1&b=2".into())
    );
    assert_eq!(take("a=1&api_key=k"), (Some("k".into()), "a=1".into()));
}

#[test]
fn query_param_repeated_bare_and_encoded_names() {
    assert_eq!(
        take("api_key=one&a=1&api_key=two"),
        (Some("one".into()), "a=1".into())
    );
    assert_eq!(take("a=1&api_key"), (None, "a=1".into()));
    assert_eq!(take("api_key&api_key=k"), (Some("k".into()), String::new()));
    assert_eq!(take("api_key=&a"), (Some(String::new()), "a".into()));
    assert_eq!(
        take("api%5Fkey=k&b=%41"),
        (Some("k".into()), "b=%41".into())
    );
    assert_eq!(take("api%5fkey=k"), (Some("k".into()), String::new()));
    assert_eq!(take("api_keys=k"), (None, "api_keys=k".into()));
}

#[test]
fn query_param_value_decoding() {
    assert_eq!(take("api_key=a+b"), (Some("a b".into()), String::new()));
    assert_eq!(take("api_key=a%20b"), (Some("a b".into()), String::new()));
    assert_eq!(take("api_key=%2B%2b"), (Some("++".into()), String::new()));
    assert_eq!(take("api_key=100%"), (Some("100%".into()), String::new()));
    assert_eq!(take("api_key=%zz"), (Some("%zz".into()), String::new()));
    assert_eq!(
        take("api_key=%C3%A9"),
        (Some("\u{e9}".into()), String::new())
    );
}

#[test]
fn query_without_the_param_is_unchanged() {
    assert_eq!(take("a=1&&b=%2"), (None, "a=1&&b=%2".into()));
    assert_eq!(take(""), (None, String::new()));
    assert_eq!(take("&"), (None, "&".into()));
}
