//! The request-target reader against a decoding upstream: a WSGI server
//! (`PATH_INFO` is the percent-decoded path) or Go's `net/http` (`URL.Path`
//! unescaped, `ServeMux` routes on the cleaned path). Whatever fairgate
//! accepts and forwards, such an upstream routes where fairgate routed:
//!
//! - decoded, the forwarded path has no dot segment (`/` or `\` separated,
//!   `;params` cut as servlet containers cut them), in every mode;
//! - decoding it a second time changes nothing (no double encoding);
//! - unless `escaped_slashes: keep` (which `check` warns about), decoding
//!   adds no separator and cleaning removes nothing: the upstream's route
//!   is fairgate's, segment for segment;
//! - it means what the raw target meant: the decoded, cleaned raw path
//!   (with `%2F` and `%5C` as `/` under `decode`) is the decoded forwarded one.
//!
//! Input: one byte of rules, then a raw origin-form target.

#![no_main]

use fairgate::config::EscapedSlashes;
use fairgate::proxy::target::{target, PathRules};
use libfuzzer_sys::fuzz_target;

/// Percent-decoding as Python's `unquote_to_bytes` and Go's `PathUnescape`
/// read a valid escape; a malformed one is left as written (Python) —
/// fairgate refuses those, so Go's error never applies.
fn decode(path: &[u8], slash_escapes_as_slash: bool) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' && i + 2 < path.len() {
            if let (Some(h), Some(l)) = (hex(path[i + 1]), hex(path[i + 2])) {
                let v = h * 16 + l;
                out.push(if slash_escapes_as_slash && v == b'\\' {
                    b'/'
                } else {
                    v
                });
                i += 3;
                continue;
            }
        }
        out.push(path[i]);
        i += 1;
    }
    out
}

/// What `ServeMux` routes on: empty segments collapsed, `.` and `..`
/// resolved (RFC 3986 5.2.4), a trailing slash kept.
fn clean(path: &[u8]) -> Vec<u8> {
    let mut segments: Vec<&[u8]> = Vec::new();
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    for (i, seg) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        match *seg {
            b"" | b"." if !last => {}
            b".." => {
                segments.pop();
            }
            b"." => {}
            s => segments.push(s),
        }
    }
    let trailing =
        path.len() > 1 && (path.ends_with(b"/") || path.ends_with(b"/.") || path.ends_with(b"/.."));
    let mut out = Vec::with_capacity(path.len());
    for seg in &segments {
        if !seg.is_empty() {
            out.push(b'/');
            out.extend_from_slice(seg);
        }
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    out
}

fn dot_segment(seg: &[u8]) -> bool {
    let seg = seg.split(|b| *b == b';').next().unwrap_or(b"");
    seg == b"." || seg == b".."
}

fuzz_target!(|data: &[u8]| {
    let Some((&rules, raw)) = data.split_first() else {
        return;
    };
    let slashes = match rules % 3 {
        0 => EscapedSlashes::Reject,
        1 => EscapedSlashes::Decode,
        _ => EscapedSlashes::Keep,
    };
    let rules = PathRules {
        escaped_slashes: slashes,
        keep_path_parameters: rules & 4 != 0,
    };
    let Ok(Some(t)) = target(raw, "GET", None, rules) else {
        return;
    };
    let shown = String::from_utf8_lossy(raw);
    let forwarded = t.path.as_bytes();
    let upstream = decode(forwarded, false);
    let seen = String::from_utf8_lossy(&upstream);
    assert!(
        !upstream
            .split(|b| *b == b'/' || *b == b'\\')
            .any(dot_segment),
        "{shown:?} -> {:?}: the upstream reads {seen:?}",
        t.path
    );
    assert_eq!(
        decode(&upstream, false),
        upstream,
        "{shown:?} -> {:?} decodes twice",
        t.path
    );
    if slashes == EscapedSlashes::Keep {
        return;
    }
    assert_eq!(
        clean(&upstream),
        upstream,
        "{shown:?} -> {:?}: the upstream cleans {seen:?}",
        t.path
    );
    assert!(!upstream.contains(&b'\\'), "{shown:?} -> {seen:?}");
    assert_eq!(
        upstream.split(|b| *b == b'/').count(),
        forwarded.split(|b| *b == b'/').count(),
        "{shown:?} -> {:?}: decoding made segments",
        t.path
    );
    // What the raw target meant, read by a decoding upstream.
    if !raw.starts_with(b"/") {
        return;
    }
    let path = raw.split(|b| *b == b'?').next().unwrap_or(raw);
    let meant = clean(&decode(path, slashes == EscapedSlashes::Decode));
    assert_eq!(String::from_utf8_lossy(&meant), seen, "{shown:?}");
});
