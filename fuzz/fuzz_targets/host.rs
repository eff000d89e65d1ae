//! `proxy::target::host_of` and `host::normal_name`: the Host as routes see
//! it is lower case, has no port and no root dot, and reads as itself.

#![no_main]

use fairgate::host::normal_name;
use fairgate::proxy::target::host_of;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    // A name with an empty label (`a..`) loses one dot a reading: no route
    // can name one, so it matches none either way.
    let empty_label = raw.contains("..");
    let name = normal_name(raw);
    if !empty_label {
        assert_eq!(
            normal_name(&name),
            name,
            "normal_name({raw:?}) is not a fixed point"
        );
    }
    let Some(host) = host_of(raw) else {
        return;
    };
    assert!(!host.is_empty(), "{raw:?}");
    assert_eq!(host, host.to_ascii_lowercase(), "{raw:?}");
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .expect("a bracketed host ends with ]");
        let ipv6 = |b: u8| b.is_ascii_hexdigit() || b == b':' || b == b'.';
        assert!(
            !inner.is_empty() && inner.bytes().all(ipv6),
            "{raw:?} -> {host:?}"
        );
    } else {
        let name = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b);
        assert!(
            host.bytes().all(name),
            "{raw:?} -> {host:?} keeps a port or a stray byte"
        );
    }
    // The host is the text before the one port, whatever its case.
    let before_port = match raw.find(']') {
        Some(end) if raw.starts_with('[') => &raw[..=end],
        _ => raw.rsplit_once(':').map_or(raw, |(h, _)| h),
    };
    assert_eq!(normal_name(before_port), host, "{raw:?}");
    if empty_label {
        return;
    }
    assert!(host == "." || !host.ends_with('.'), "{raw:?} -> {host:?}");
    // What routes see reads as itself, with or without a port.
    assert_eq!(
        host_of(&host).as_deref(),
        Some(&*host),
        "{raw:?} -> {host:?}"
    );
    let with_port = format!("{host}:8080");
    assert_eq!(host_of(&with_port).as_deref(), Some(&*host), "{raw:?}");
});
