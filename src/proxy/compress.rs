//! Response compression (`server.compression`), as nginx's `gzip on` and
//! brotli modules do it with ingress-nginx's `proxy-buffering: off`: for
//! an HTTP/1.1 or HTTP/2 client that asks (`Accept-Encoding`, q values
//! read), a `200`, `403` or `404` of a listed type and at least
//! `min_length` long is encoded as it streams through, each piece the
//! upstream sends flushed at once (an event stream stays live). Never an
//! answer already encoded, bodiless (`HEAD`), upgraded, gRPC, or marked
//! `Cache-Control: no-transform`; never on a route with `compression:
//! false`; never beyond `max_memory` of encoders at once (then the
//! answer passes as it is).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE,
    ETAG, TRANSFER_ENCODING, VARY,
};
use pingora::http::{RequestHeader, ResponseHeader};

use crate::config::{Coding, Compression};

/// The encoder of one answer, holding its share of `max_memory`.
pub struct Encoder {
    /// None once the stream has ended.
    stream: Option<Box<dyn Coder>>,
    /// Released when the stream ends, not when the request does.
    reserved: Option<Reserved>,
}

/// A coding's writer into a buffer: what it has written so far, and its
/// end (which writes its last bytes).
trait Coder: Write + Send + Sync {
    fn written(&mut self) -> &mut Vec<u8>;
    fn end(self: Box<Self>) -> std::io::Result<Vec<u8>>;
}

impl Coder for flate2::write::GzEncoder<Vec<u8>> {
    fn written(&mut self) -> &mut Vec<u8> {
        self.get_mut()
    }
    fn end(self: Box<Self>) -> std::io::Result<Vec<u8>> {
        self.finish()
    }
}

impl Coder for brotli::CompressorWriter<Vec<u8>> {
    fn written(&mut self) -> &mut Vec<u8> {
        self.get_mut()
    }
    /// `into_inner` writes the last meta-block (Pingora's own encoder
    /// leaves it out: cloudflare/pingora#1013).
    fn end(self: Box<Self>) -> std::io::Result<Vec<u8>> {
        Ok(self.into_inner())
    }
}

impl Coder for zstd::stream::write::Encoder<'static, Vec<u8>> {
    fn written(&mut self) -> &mut Vec<u8> {
        self.get_mut()
    }
    fn end(self: Box<Self>) -> std::io::Result<Vec<u8>> {
        self.finish()
    }
}

/// Bytes of encoder state in use in this process.
static IN_USE: AtomicU64 = AtomicU64::new(0);

/// Bytes of `IN_USE` one encoder holds until it drops.
struct Reserved(u64);

impl Reserved {
    fn take(bytes: u64, max: u64) -> Option<Reserved> {
        let before = IN_USE.fetch_add(bytes, Ordering::Relaxed);
        let reserved = Reserved(bytes);
        (before + bytes <= max).then_some(reserved)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        IN_USE.fetch_sub(self.0, Ordering::Relaxed);
    }
}

impl Encoder {
    /// One piece of the body (`end`: the last, which ends the stream);
    /// what the client gets for it, flushed.
    pub fn encode(&mut self, input: &[u8], end: bool) -> std::io::Result<Bytes> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(Bytes::new());
        };
        stream.write_all(input)?;
        if !end {
            stream.flush()?;
            return Ok(std::mem::take(stream.written()).into());
        }
        self.reserved = None;
        let stream = self.stream.take().expect("checked above");
        Ok(stream.end()?.into())
    }
}

/// The encoder for this answer, its headers made to say so (coding,
/// `Vary`, a weakened `ETag`, no length, ranges or digests), or None with
/// the headers untouched but for `Vary` when the answer could have been.
pub fn start(
    c: &Compression,
    req: &RequestHeader,
    resp: &mut ResponseHeader,
) -> pingora::Result<Option<Encoder>> {
    if !eligible(c, req, resp) {
        return Ok(None);
    }
    vary(resp)?;
    let Some(coding) = chosen(c, req) else {
        return Ok(None);
    };
    let Some(encoder) = encoder(c, coding) else {
        return Ok(None);
    };
    for name in [CONTENT_LENGTH, ACCEPT_RANGES] {
        resp.remove_header(&name);
    }
    // Digests of the unencoded bytes would be wrong.
    for name in ["content-digest", "repr-digest", "digest", "content-md5"] {
        resp.remove_header(name);
    }
    resp.insert_header(CONTENT_ENCODING, coding.token())?;
    // HTTP/1.1 streams it in chunks; HTTP/2's writer drops the header.
    resp.insert_header(TRANSFER_ENCODING, "chunked")?;
    // Another representation: a strong validator becomes weak (as nginx does).
    if let Some(etag) = resp.headers.get(ETAG).map(|v| v.as_bytes().to_vec()) {
        if etag.starts_with(b"\"") {
            resp.insert_header(ETAG, [b"W/".as_slice(), &etag].concat())?;
        } else if !etag.starts_with(b"W/") {
            resp.remove_header(&ETAG);
        }
    }
    Ok(Some(encoder))
}

/// Whether the answer may be compressed, whatever the client accepts.
fn eligible(c: &Compression, req: &RequestHeader, resp: &ResponseHeader) -> bool {
    let h = &resp.headers;
    // As nginx's gzip filter: 200, 403 and 404 only, HTTP/1.1 and up.
    let status = matches!(resp.status.as_u16(), 200 | 403 | 404);
    let version = req.version >= http::Version::HTTP_11;
    let bodiless = req.method == http::Method::HEAD;
    let encoded = h
        .get_all(CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let no_transform = h.get_all(CACHE_CONTROL).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
    });
    let length = h.get(CONTENT_LENGTH).and_then(|v| {
        std::str::from_utf8(v.as_bytes())
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    let short = length.is_some_and(|n| n == 0 || n < c.min_length);
    // gRPC's answer ends in trailers, which a compressed body loses.
    let trailers = req
        .headers
        .get("te")
        .is_some_and(|v| v.as_bytes() == b"trailers");
    status
        && version
        && !bodiless
        && !encoded
        && !no_transform
        && !short
        && !trailers
        && typed(c, resp)
}

/// An encoder for `coding`, if `max_memory` has room for it.
fn encoder(c: &Compression, coding: Coding) -> Option<Encoder> {
    let reserved = Reserved::take(coding.memory(c.level(coding)), c.max_memory)?;
    let stream: Box<dyn Coder> = match coding {
        Coding::Gzip => {
            let level = flate2::Compression::new(c.gzip_level);
            Box::new(flate2::write::GzEncoder::new(Vec::new(), level))
        }
        // A 4 KiB buffer, a 512 KiB window (lgwin 19).
        Coding::Brotli => Box::new(brotli::CompressorWriter::new(
            Vec::new(),
            4096,
            c.brotli_level,
            19,
        )),
        Coding::Zstd => {
            let mut w = zstd::stream::write::Encoder::new(Vec::new(), c.zstd_level as i32).ok()?;
            // A 2 MiB window: within the 8 MiB RFC 9659 lets HTTP clients refuse beyond.
            w.window_log(21).ok()?;
            Box::new(w)
        }
    };
    Some(Encoder {
        stream: Some(stream),
        reserved: Some(reserved),
    })
}

/// Whether the answer's media type is one compressed (`text/html`
/// always, as nginx; gRPC never).
fn typed(c: &Compression, resp: &ResponseHeader) -> bool {
    let Some(ct) = resp.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media.starts_with("application/grpc") {
        return false;
    }
    let top = media.split_once('/').map_or("", |(t, _)| t);
    media == "text/html"
        || c.types.iter().any(|t| {
            t == "*" || *t == media || t.strip_suffix("/*").is_some_and(|prefix| prefix == top)
        })
}

/// The gateway's first coding the client accepts (a q above 0, by its
/// name or `*`); none without `Accept-Encoding`. At most 32 items are
/// read.
fn chosen(c: &Compression, req: &RequestHeader) -> Option<Coding> {
    // Per coding offered, and for `*`: whether its q is above 0.
    let mut said: [Option<bool>; 4] = [None; 4];
    let items = req
        .headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .take(32);
    for item in items {
        let mut parts = item.split(|b| *b == b';');
        let name = parts.next().unwrap_or_default().trim_ascii();
        let refused = parts.any(|p| {
            let p = p.trim_ascii();
            let q = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="));
            q.is_some_and(|q| {
                let q = std::str::from_utf8(q)
                    .ok()
                    .and_then(|q| q.trim().parse::<f32>().ok());
                q.is_none_or(|q| q.is_nan() || q <= 0.0)
            })
        });
        let slot = match name.to_ascii_lowercase().as_slice() {
            b"gzip" | b"x-gzip" => 0,
            b"br" => 1,
            b"zstd" => 2,
            b"*" => 3,
            _ => continue,
        };
        said[slot].get_or_insert(!refused);
    }
    let index = |coding: Coding| match coding {
        Coding::Gzip => 0,
        Coding::Brotli => 1,
        Coding::Zstd => 2,
    };
    let accepts = |coding: Coding| said[index(coding)].or(said[3]).unwrap_or(false);
    c.codings.iter().copied().find(|coding| accepts(*coding))
}

/// `Vary: Accept-Encoding` unless the answer varies by it (or by
/// everything) already.
fn vary(resp: &mut ResponseHeader) -> pingora::Result<()> {
    let said = resp.headers.get_all(VARY).iter().any(|v| {
        v.as_bytes().split(|b| *b == b',').any(|t| {
            let t = t.trim_ascii();
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !said {
        resp.append_header(VARY, "Accept-Encoding")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(codings: &[Coding]) -> Compression {
        Compression {
            codings: codings.to_vec(),
            gzip_level: 1,
            brotli_level: 4,
            zstd_level: 3,
            min_length: 256,
            types: vec!["application/json".into()],
            max_memory: 256 << 20,
        }
    }

    fn accept(values: &[&str]) -> RequestHeader {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        for v in values {
            req.append_header(ACCEPT_ENCODING, *v).unwrap();
        }
        req
    }

    #[test]
    fn the_gateways_first_coding_the_client_accepts_is_chosen() {
        use Coding::*;
        let all = config(&[Brotli, Zstd, Gzip]);
        for (values, want) in [
            (&["gzip, deflate, br, zstd"][..], Some(Brotli)),
            (&["GZIP"], Some(Gzip)),
            (&["x-gzip"], Some(Gzip)),
            (&["br;q=0, gzip;q=0.5"], Some(Gzip)),
            (&["br;q=0.000, zstd;Q=0.1"], Some(Zstd)),
            (&["br;q=nan, gzip"], Some(Gzip)),
            (&["br;q=oops, gzip"], Some(Gzip)),
            (&["*"], Some(Brotli)),
            (&["*;q=0"], None),
            (&["*;q=0, gzip"], Some(Gzip)),
            (&["br;q=0", "*"], Some(Zstd)),
            (&["identity"], None),
            (&[], None),
        ] {
            assert_eq!(chosen(&all, &accept(values)), want, "{values:?}");
        }
        // Only what the gateway offers.
        assert_eq!(chosen(&config(&[Gzip]), &accept(&["br, zstd"])), None);
    }

    #[test]
    fn only_the_first_32_items_are_read() {
        let mut many = vec!["x-unknown"; 40].join(", ");
        many.push_str(", gzip");
        assert_eq!(chosen(&config(&[Coding::Gzip]), &accept(&[&many])), None);
    }

    #[test]
    fn max_memory_bounds_the_encoders_alive_at_once() {
        let mut c = config(&[Coding::Gzip]);
        c.max_memory = 1 << 20;
        let held: Vec<Encoder> = (0..4).filter_map(|_| encoder(&c, Coding::Gzip)).collect();
        assert_eq!(held.len(), 4);
        assert!(encoder(&c, Coding::Gzip).is_none());
        drop(held);
        assert!(encoder(&c, Coding::Gzip).is_some());
    }
}
