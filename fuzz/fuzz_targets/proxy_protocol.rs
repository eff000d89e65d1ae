//! The PROXY protocol v1/v2 reader (`proxy::proxy_protocol::parse`): the
//! header it takes is within the bounds it declares (107 bytes for v1, the
//! v2 length field), reads nothing past itself, and the edge, which reads a
//! connection in pieces, gets the same answer however the bytes arrive.

#![no_main]

use fairgate::proxy::proxy_protocol::{parse, Header};
use libfuzzer_sys::fuzz_target;

const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    let Ok(Some((header, used))) = parsed else {
        if parsed == Ok(None) {
            // More bytes are needed: none of the prefixes was refused either.
            for cut in 0..data.len() {
                assert_eq!(
                    parse(&data[..cut]),
                    Ok(None),
                    "prefix {cut} of a wanting header"
                );
            }
        }
        return;
    };
    assert!(
        used > 0 && used <= data.len(),
        "used {used} of {}",
        data.len()
    );
    if data.starts_with(V2_SIGNATURE) {
        let declared = 16 + usize::from(u16::from_be_bytes([data[14], data[15]]));
        assert_eq!(used, declared, "v2 takes exactly the declared length");
    } else {
        assert!(used <= 107, "a v1 line is at most 107 bytes, took {used}");
        assert_eq!(&data[used - 2..used], b"\r\n");
    }
    // Reads nothing past the header: the header alone, or with any rest, is the same.
    assert_eq!(
        parse(&data[..used]),
        Ok(Some((header, used))),
        "the header alone"
    );
    let mut longer = data[..used].to_vec();
    longer.extend_from_slice(b"GET / HTTP/1.1\r\n");
    assert_eq!(
        parse(&longer).map(|p| p.map(|(_, u)| u)),
        Ok(Some(used)),
        "with a request after it"
    );
    // The edge reads in pieces: every prefix of it waits for more.
    for cut in 0..used {
        assert_eq!(
            parse(&data[..cut]),
            Ok(None),
            "prefix {cut} of a {used}-byte header"
        );
    }
    if let Ok(Some((Header::Client(addr), _))) = parse(data) {
        // An IPv4 client is never shown as ::ffff:a.b.c.d.
        assert_eq!(addr.ip(), addr.ip().to_canonical(), "{addr}");
    }
});
