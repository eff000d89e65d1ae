//! The edge's head scanner (`proxy::heads::HeadEnd`), which decides when an
//! HTTP/1 head has ended and so stops bounding it: it ends a head where
//! httparse (Pingora's parser) does, never before the head is whole, and
//! reads the same bytes alike however they arrive.
//!
//! Input: one byte that cuts the rest into pieces, then the bytes a client
//! sends.

#![no_main]

use fairgate::proxy::heads::HeadEnd;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    // Byte by byte: where the scanner says the head ended.
    let mut one = HeadEnd::default();
    let end = bytes
        .iter()
        .position(|b| one.scan(std::slice::from_ref(b)))
        .map(|i| i + 1);

    // In pieces: it ends in the piece holding that byte.
    let piece = usize::from(piece % 16) + 1;
    let mut scan = HeadEnd::default();
    let ended_in = bytes.chunks(piece).position(|c| scan.scan(c));
    assert_eq!(ended_in, end.map(|e| (e - 1) / piece), "pieces of {piece}");

    let mut headers = [httparse::EMPTY_HEADER; 128];
    let parsed = httparse::Request::new(&mut headers).parse(bytes);
    if let Ok(httparse::Status::Complete(n)) = parsed {
        assert_eq!(end, Some(n), "httparse read a head of {n} bytes");
    }
    if let Some(end) = end {
        // Ended early would let the rest of a head past the size bound.
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let whole = httparse::Request::new(&mut headers).parse(&bytes[..end]);
        assert!(
            !matches!(whole, Ok(httparse::Status::Partial)),
            "ended at {end} in a partial head"
        );
    }
});
