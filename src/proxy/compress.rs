//! Response compression (`server.compression`), as nginx's `gzip on` and
//! brotli modules do it: for a client that asks (`Accept-Encoding`, q
//! values read), an answer of a listed type and at least `min_length`
//! long is encoded as it streams through (Pingora's encoders; nothing is
//! held whole). Never an answer already encoded, partial (`206`), bodiless
//! (`HEAD`, `204`, `304`), upgraded, or marked `Cache-Control:
//! no-transform`; never on a route with `compression: false`.

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, TRANSFER_ENCODING, VARY,
};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::compression::{Algorithm, Encode};

use crate::config::{Coding, Compression};

/// The encoder of one answer.
pub type Encoder = Box<dyn Encode + Send + Sync>;

/// The encoder for this answer, its headers made to say so (coding,
/// `Vary`, a weakened `ETag`, no length or ranges), or None with the
/// headers untouched but for `Vary` when the answer could have been.
pub fn start(
    c: &Compression,
    req: &RequestHeader,
    resp: &mut ResponseHeader,
) -> pingora::Result<Option<Encoder>> {
    let status = resp.status.as_u16();
    let h = &resp.headers;
    let bodiless =
        req.method == http::Method::HEAD || matches!(status, 100..=199 | 204 | 206 | 304);
    let encoded = h
        .get(CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    let no_transform = h.get_all(CACHE_CONTROL).iter().any(|v| {
        let v = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
        v.split(',').any(|d| d.trim() == "no-transform")
    });
    let short = h
        .get(CONTENT_LENGTH)
        .and_then(|v| {
            std::str::from_utf8(v.as_bytes())
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .is_some_and(|n| n < c.min_length);
    if bodiless
        || encoded
        || no_transform
        || short
        || h.contains_key(CONTENT_RANGE)
        || !typed(c, resp)
    {
        return Ok(None);
    }
    vary(resp)?;
    let Some(coding) = chosen(c, req) else {
        return Ok(None);
    };
    let encoder = match coding {
        Coding::Gzip => Algorithm::Gzip.compressor(c.gzip_level),
        Coding::Brotli => Some(Box::new(Brotli::new(c.brotli_level)) as Encoder),
        Coding::Zstd => Algorithm::Zstd.compressor(c.zstd_level),
    };
    let Some(encoder) = encoder else {
        return Ok(None);
    };
    resp.remove_header(&CONTENT_LENGTH);
    resp.remove_header(&ACCEPT_RANGES);
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

/// One piece of the body through the encoder (`end`: the last, which
/// flushes what the encoder holds).
pub fn body(encoder: &mut Encoder, body: &mut Option<Bytes>, end: bool) -> pingora::Result<()> {
    let input = body.as_deref().unwrap_or_default();
    *body = Some(encoder.encode(input, end)?);
    Ok(())
}

/// A brotli stream that ends with its last meta-block (Pingora's encoder
/// leaves it out: cloudflare/pingora#1013).
struct Brotli {
    writer: Option<brotli::CompressorWriter<Vec<u8>>>,
    stat: (usize, usize, std::time::Duration),
}

impl Brotli {
    fn new(level: u32) -> Self {
        Brotli {
            // A 4 KiB buffer, a 512 KiB window (lgwin 19), as Pingora's.
            writer: Some(brotli::CompressorWriter::new(Vec::new(), 4096, level, 19)),
            stat: (0, 0, std::time::Duration::ZERO),
        }
    }
}

impl Encode for Brotli {
    fn encode(&mut self, input: &[u8], end: bool) -> pingora::Result<Bytes> {
        use pingora::OrErr;
        use std::io::Write;
        let started = std::time::Instant::now();
        let Some(writer) = self.writer.as_mut() else {
            return Ok(Bytes::new());
        };
        writer.write_all(input).or_err(
            pingora::ErrorType::InternalError,
            "while compressing brotli",
        )?;
        let out = match end {
            // `into_inner` writes the last meta-block.
            true => self
                .writer
                .take()
                .map(|w| w.into_inner())
                .unwrap_or_default(),
            false => std::mem::take(writer.get_mut()),
        };
        self.stat.0 += input.len();
        self.stat.1 += out.len();
        self.stat.2 += started.elapsed();
        Ok(out.into())
    }

    fn stat(&self) -> (&'static str, usize, usize, std::time::Duration) {
        ("br", self.stat.0, self.stat.1, self.stat.2)
    }
}

/// Whether the answer's media type is one compressed.
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
    let top = media.split_once('/').map_or("", |(t, _)| t);
    c.types.iter().any(|t| {
        t == "*" || *t == media || t.strip_suffix("/*").is_some_and(|prefix| prefix == top)
    })
}

/// The gateway's first coding the client accepts (a q above 0, by its
/// name or `*`); none without `Accept-Encoding`.
fn chosen(c: &Compression, req: &RequestHeader) -> Option<Coding> {
    let mut offered: Vec<(String, bool)> = Vec::new();
    for value in req.headers.get_all(ACCEPT_ENCODING) {
        for item in String::from_utf8_lossy(value.as_bytes()).split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                let p = p.trim();
                let q = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="));
                q.is_some_and(|q| q.trim().parse::<f32>().map_or(true, |q| q <= 0.0))
            });
            let name = if name == "x-gzip" {
                "gzip".into()
            } else {
                name
            };
            offered.push((name, !refused));
        }
    }
    let accepts = |token: &str| {
        let named = offered.iter().find(|(n, _)| n == token);
        let any = offered.iter().find(|(n, _)| n == "*");
        named.or(any).is_some_and(|(_, ok)| *ok)
    };
    c.codings
        .iter()
        .copied()
        .find(|coding| accepts(coding.token()))
}

/// `Vary: Accept-Encoding` unless the answer varies by it (or by
/// everything) already.
fn vary(resp: &mut ResponseHeader) -> pingora::Result<()> {
    let said = resp.headers.get_all(VARY).iter().any(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .split(',')
            .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept-encoding"))
    });
    if !said {
        resp.append_header(VARY, "Accept-Encoding")?;
    }
    Ok(())
}
