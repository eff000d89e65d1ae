//! The request-target reader (`proxy::target::{target, normalize}`): the
//! normal form is a fixed point, and an accepted target is one path that
//! fairgate and a decoding upstream read alike.
//!
//! Input: one byte of rules (escaped slashes, path parameters, method,
//! Host), then the raw request target.

#![no_main]

use fairgate::config::EscapedSlashes;
use fairgate::proxy::target::{host_of, normalize, path_is_safe, target, PathRules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&rules, raw)) = data.split_first() else {
        return;
    };
    let slashes = match rules % 3 {
        0 => EscapedSlashes::Reject,
        1 => EscapedSlashes::Decode,
        _ => EscapedSlashes::Keep,
    };
    if let Ok(path) = std::str::from_utf8(raw) {
        normal_form(path, slashes);
    }
    let rules = PathRules {
        escaped_slashes: slashes,
        keep_path_parameters: rules & 4 != 0,
    };
    let method = if rules.keep_path_parameters {
        "OPTIONS"
    } else {
        "GET"
    };
    let host = (data[0] & 8 != 0).then_some("api.example.com");
    if let Ok(Some(t)) = target(raw, method, host, rules) {
        accepted(raw, &t.path, t.query, t.authority, host, rules);
    }
});

/// `normalize` accepts its own output unchanged, and its output has no
/// empty segment, no byte outside ASCII and no escaped slash it may not keep.
fn normal_form(path: &str, slashes: EscapedSlashes) {
    let Ok(once) = normalize(path, slashes) else {
        return;
    };
    assert!(once.is_ascii(), "{path:?} -> {once:?}");
    assert!(!once.contains("//"), "{path:?} -> {once:?}");
    // (`target` normalises only paths that start with `/`.)
    assert!(!path.starts_with('/') || once.starts_with('/'), "{path:?}");
    let upper = once.to_ascii_uppercase();
    if !matches!(slashes, EscapedSlashes::Keep) {
        assert!(
            !upper.contains("%2F") && !upper.contains("%5C"),
            "{path:?} -> {once:?}"
        );
    }
    // Escapes are upper case; unreserved characters are never escaped.
    for (i, _) in once.match_indices('%') {
        let hex = &once[i + 1..i + 3];
        assert_eq!(hex, hex.to_ascii_uppercase(), "{path:?} -> {once:?}");
        let v = u8::from_str_radix(hex, 16).expect("a kept escape is two hex digits");
        assert!(
            !(v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~')),
            "{path:?} -> {once:?} keeps an escaped unreserved character"
        );
    }
    let twice = normalize(&once, slashes);
    assert_eq!(
        twice.as_deref(),
        Ok(&*once),
        "{path:?} -> {once:?} is not a fixed point"
    );
}

fn accepted(
    raw: &[u8],
    path: &str,
    query: Option<&str>,
    authority: Option<&str>,
    host: Option<&str>,
    rules: PathRules,
) {
    let shown = String::from_utf8_lossy(raw);
    assert!(path.starts_with('/'), "{shown:?} -> {path:?}");
    assert!(path_is_safe(path), "{shown:?} -> {path:?}");
    assert!(!path.contains("//"), "{shown:?} -> {path:?}");
    assert!(
        !path.contains(['\0', '\\', '#', '?']),
        "{shown:?} -> {path:?}"
    );
    assert!(
        !path.split('/').any(|s| s == "." || s == ".."),
        "{shown:?} -> {path:?}"
    );
    if !rules.keep_path_parameters {
        assert!(!path.contains(';'), "{shown:?} -> {path:?}");
    }
    // Decoding adds no control byte: any in the path came as sent.
    for c in path.bytes().filter(|b| b.is_ascii_control() || *b == b' ') {
        assert!(raw.contains(&c), "{shown:?} -> {path:?} gained {c:#04x}");
    }
    // The path is in normal form already.
    assert_eq!(
        normalize(path, rules.escaped_slashes).as_deref(),
        Ok(path),
        "{shown:?}"
    );
    assert!(!query.is_some_and(|q| q.contains('#')), "{shown:?}");
    if let Some(authority) = authority {
        let named = host_of(authority).expect("an accepted authority is a host");
        assert!(host.is_none_or(|h| h == named), "{shown:?} names {named}");
    }
}
