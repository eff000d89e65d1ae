//! The controller ConfigMap's compression keys (`use-gzip`,
//! `enable-brotli`, their levels, types and minimum lengths): one
//! `server.compression`, as nginx's gzip and brotli modules compress.

use std::collections::BTreeMap;

use super::out::Compression;
use super::units::go_bool;
use super::Verdict;

/// The keys read here.
pub const KEYS: &[&str] = &[
    "brotli-level",
    "brotli-min-length",
    "brotli-types",
    "enable-brotli",
    "gzip-disable",
    "gzip-level",
    "gzip-min-length",
    "gzip-types",
    "use-gzip",
];

/// `server.compression` from the ConfigMap's `strings`, and a line for
/// each of `KEYS` it gives.
pub fn read(strings: &BTreeMap<String, String>) -> (Option<Compression>, Vec<(String, Verdict)>) {
    let on = |k: &str| strings.get(k).is_some_and(|v| go_bool(v.trim()));
    let (gzip, brotli) = (on("use-gzip"), on("enable-brotli"));
    let mut lines = Vec::new();
    let mut c = Compression::default();
    if brotli {
        c.algorithms.push("br");
    }
    if gzip {
        c.algorithms.push("gzip");
    }
    for key in KEYS {
        let Some(value) = strings.get(*key).map(|v| v.trim()) else {
            continue;
        };
        let family = if key.contains("brotli") { brotli } else { gzip };
        let verdict = match *key {
            "use-gzip" | "enable-brotli" if family => Verdict::Mapped(
                "server.compression.algorithms (br before gzip, as nginx's brotli module)".into(),
            ),
            "use-gzip" | "enable-brotli" => Verdict::Mapped("off: nothing to do".into()),
            _ if !family => {
                Verdict::Mapped("no effect while its coding is off, as in nginx".into())
            }
            "gzip-level" | "brotli-level" => level(key, value, &mut c),
            "gzip-min-length" | "brotli-min-length" => {
                min_length(key, value, gzip && brotli, &mut c)
            }
            "gzip-types" | "brotli-types" => types(value, &mut c),
            _ => Verdict::Approximated(
                "no user agent is left out: the few that mishandled compressed answers are retired"
                    .into(),
            ),
        };
        lines.push((key.to_string(), verdict));
    }
    // ingress-nginx's brotli-min-length default (20) when brotli alone is on.
    if brotli && !gzip && c.min_length.is_none() {
        c.min_length = Some(20);
    }
    // A coding whose types are not given keeps ingress-nginx's defaults
    // beside the other's list.
    if c.types.is_some() {
        let defaults = |key: &str| match key {
            "gzip-types" => GZIP_TYPES,
            _ => BROTLI_TYPES,
        };
        for (key, on) in [("gzip-types", gzip), ("brotli-types", brotli)] {
            if on && !strings.contains_key(key) {
                types(defaults(key), &mut c);
            }
        }
    }
    let compression = (gzip || brotli).then_some(c);
    (compression, lines)
}

/// ingress-nginx's default `gzip-types`.
const GZIP_TYPES: &str = "application/atom+xml application/javascript application/x-javascript \
    application/json application/rss+xml application/vnd.ms-fontobject application/x-font-ttf \
    application/x-web-app-manifest+json application/xhtml+xml application/xml font/opentype \
    image/svg+xml image/x-icon text/css text/javascript text/plain text/x-component";

/// ingress-nginx's default `brotli-types`.
const BROTLI_TYPES: &str = "application/xml+rss application/atom+xml application/javascript \
    application/x-javascript application/json application/rss+xml application/vnd.ms-fontobject \
    application/x-font-ttf application/x-web-app-manifest+json application/xhtml+xml \
    application/xml font/opentype image/svg+xml image/x-icon text/css text/javascript \
    text/plain text/x-component";

fn level(key: &str, value: &str, c: &mut Compression) -> Verdict {
    let max = if key == "gzip-level" { 9 } else { 11 };
    if key == "brotli-level" && value == "0" {
        c.brotli_level = Some(1);
        return Verdict::Approximated("brotli_level 1, fairgate's fastest".into());
    }
    match value.parse::<u32>() {
        Ok(n @ 1..) if n <= max => {
            let slot = if key == "gzip-level" {
                &mut c.gzip_level
            } else {
                &mut c.brotli_level
            };
            *slot = Some(n);
            Verdict::Mapped(format!("server.compression.{}", key.replace('-', "_")))
        }
        _ => Verdict::Unsupported(format!("{value:?}: 1 to {max}; the default is kept")),
    }
}

/// One `min_length` for both codings: gzip's when both are on.
fn min_length(key: &str, value: &str, both: bool, c: &mut Compression) -> Verdict {
    let Ok(n) = value.parse::<u64>() else {
        return Verdict::Unsupported(format!("{value:?} is not a number of bytes"));
    };
    if key == "brotli-min-length" && both {
        return Verdict::Approximated(
            "gzip-min-length is the one minimum length of both codings".into(),
        );
    }
    c.min_length = Some(n);
    Verdict::Mapped("server.compression.min_length".into())
}

/// The types of either coding join one list (with `text/html`, which
/// nginx always compresses).
fn types(value: &str, c: &mut Compression) -> Verdict {
    let list: Vec<String> = value
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    if list.iter().any(|t| {
        t != "*"
            && !t
                .split_once('/')
                .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty())
    }) {
        return Verdict::Unsupported(format!("{value:?}: media types, space-separated"));
    }
    let types = c.types.get_or_insert_with(|| vec!["text/html".into()]);
    for t in list {
        if !types.contains(&t) {
            types.push(t);
        }
    }
    Verdict::Mapped(
        "server.compression.types (with text/html, which nginx always compresses)".into(),
    )
}
