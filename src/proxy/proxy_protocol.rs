//! PROXY protocol v1 and v2 (HAProxy's), read by the edge before TLS on
//! listeners that expect it (`server.proxy_protocol: true`): the address it carries
//! becomes the connection's peer, so `client_ip` limits, `X-Forwarded-For`,
//! the connection caps and the logs see the real client. It is believed
//! only from `trusted_proxies`; a connection from anyone else, or without a
//! valid header, is dropped before a byte of HTTP is read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use pingora::protocols::l4::socket::SocketAddr as PeerAddr;
use pingora::protocols::{GetSocketDigest, SocketDigest};
use pingora::{Error, ErrorType, Result};

use tokio::io::{AsyncRead, AsyncReadExt};

/// v2's fixed signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 line is at most 107 bytes; a v2 header with TLVs is bounded here.
const MAX_HEADER: usize = 536;

/// What a PROXY header says about the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// The client's address, as the proxy saw it.
    Client(SocketAddr),
    /// A health check or `UNKNOWN`/`LOCAL`: keep the proxy's own address.
    Local,
}

/// Parses a complete header at the start of `buf`: the header and its
/// length, `Ok(None)` when more bytes are needed, `Err` when it is not one.
/// An IPv4 client carried as `::ffff:a.b.c.d` is the IPv4 address.
pub fn parse(buf: &[u8]) -> std::result::Result<Option<(Header, usize)>, &'static str> {
    let parsed = if buf.len() >= 12 && &buf[..12] == V2_SIGNATURE {
        parse_v2(buf)?
    } else if V2_SIGNATURE.starts_with(&buf[..buf.len().min(12)]) && buf.len() < 12 {
        None
    } else {
        parse_v1(buf)?
    };
    Ok(parsed.map(|(header, used)| match header {
        Header::Client(a) => (
            Header::Client(SocketAddr::new(a.ip().to_canonical(), a.port())),
            used,
        ),
        local => (local, used),
    }))
}

fn parse_v1(buf: &[u8]) -> std::result::Result<Option<(Header, usize)>, &'static str> {
    if !b"PROXY ".starts_with(&buf[..buf.len().min(6)]) {
        return Err("not a PROXY protocol header");
    }
    // The line ends within its 107 bytes, however the bytes arrive: a CRLF
    // further on would accept a line that, read in pieces, was refused.
    let line = &buf[..buf.len().min(107)];
    let Some(end) = line.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() > 107 {
            Err("PROXY v1 line too long")
        } else {
            Ok(None)
        };
    };
    let line = std::str::from_utf8(&buf[..end]).map_err(|_| "PROXY v1 line is not text")?;
    let parts: Vec<&str> = line.split(' ').collect();
    let header = match parts.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Header::Local,
        ["PROXY", family @ ("TCP4" | "TCP6"), src, _dst, sport, _dport] => {
            let ip: IpAddr = src.parse().map_err(|_| "PROXY v1 source address")?;
            if ip.is_ipv4() != (*family == "TCP4") {
                return Err("PROXY v1 address family");
            }
            let port: u16 = sport.parse().map_err(|_| "PROXY v1 source port")?;
            Header::Client(SocketAddr::new(ip, port))
        }
        _ => return Err("PROXY v1 line malformed"),
    };
    Ok(Some((header, end + 2)))
}

fn parse_v2(buf: &[u8]) -> std::result::Result<Option<(Header, usize)>, &'static str> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 || command > 1 {
        return Err("PROXY v2 version or command");
    }
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > MAX_HEADER {
        return Err("PROXY v2 header too long");
    }
    if buf.len() < len {
        return Ok(None);
    }
    let body = &buf[16..len];
    // LOCAL (health checks from the proxy itself), or a family not carried.
    let header = match (command, buf[13] >> 4) {
        (0, _) => Header::Local,
        (_, 1) if body.len() >= 12 => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            Header::Client(SocketAddr::new(
                ip.into(),
                u16::from_be_bytes([body[8], body[9]]),
            ))
        }
        (_, 2) if body.len() >= 36 => {
            let octets: [u8; 16] = body[..16].try_into().expect("16 bytes");
            let port = u16::from_be_bytes([body[32], body[33]]);
            Header::Client(SocketAddr::new(Ipv6Addr::from(octets).into(), port))
        }
        (_, 0) => Header::Local,
        _ => return Err("PROXY v2 address block"),
    };
    Ok(Some((header, len)))
}

/// Reads a PROXY header from a connection of a trusted proxy. Returns the
/// client's address (`None` for `LOCAL`/`UNKNOWN`) and the bytes read past
/// the header, which belong to the client's first request.
pub async fn read_header<S>(
    stream: &mut S,
    trusted: &[IpNet],
) -> Result<(Option<SocketAddr>, Vec<u8>)>
where
    S: AsyncRead + Unpin + GetSocketDigest + ?Sized,
{
    let drop = |why: &str| Error::e_explain(ErrorType::AcceptError, why.to_string());
    let proxy = stream
        .get_socket_digest()
        .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
        .map(|ip| ip.to_canonical());
    if !proxy.is_some_and(|ip| trusted.iter().any(|n| n.contains(&ip))) {
        return drop("PROXY protocol from a peer not in trusted_proxies");
    }
    let mut buf = Vec::with_capacity(128);
    loop {
        let mut chunk = [0u8; 256];
        // The edge bounds the whole header by `header_timeout`.
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| Error::because(ErrorType::AcceptError, "PROXY header", e))?;
        if n == 0 {
            return drop("closed before a PROXY header");
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse(&buf) {
            Ok(Some((header, used))) => {
                let client = match header {
                    Header::Client(addr) => Some(addr),
                    Header::Local => None,
                };
                return Ok((client, buf.split_off(used)));
            }
            Ok(None) if buf.len() <= MAX_HEADER => continue,
            Ok(None) => return drop("PROXY header too long"),
            Err(why) => return drop(why),
        }
    }
}

/// Makes `client` the peer of the connection behind descriptor `fd`.
pub fn set_peer<S: GetSocketDigest + ?Sized>(stream: &mut S, fd: i32, client: SocketAddr) {
    let digest = SocketDigest::from_raw_fd(fd);
    let _ = digest.peer_addr.set(Some(PeerAddr::Inet(client)));
    stream.set_socket_digest(digest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1() {
        let line = b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 443\r\nGET / HTTP/1.1\r\n";
        let (h, used) = parse(line).unwrap().unwrap();
        assert_eq!(h, Header::Client("203.0.113.7:5555".parse().unwrap()));
        assert_eq!(&line[used..used + 3], b"GET");
        let v6 = b"PROXY TCP6 2001:db8::1 ::1 1 2\r\n";
        assert!(matches!(parse(v6), Ok(Some((Header::Client(_), 32)))));
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n").unwrap().unwrap().0,
            Header::Local
        );
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4"), Ok(None));
        assert!(parse(b"GET / HTTP/1.1\r\n").is_err());
        assert!(parse(b"PROXY TCP4 2001:db8::1 ::1 1 2\r\n").is_err());
        assert!(parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 x 2\r\n").is_err());
    }

    /// Finding 12 of the third attack: a mapped address reached
    /// `X-Forwarded-For` and the access log as `::ffff:a.b.c.d`.
    #[test]
    fn finding_12_an_ipv4_mapped_client_is_its_ipv4_address() {
        let v1 = b"PROXY TCP6 ::ffff:203.0.113.7 ::1 5555 443\r\n";
        let (h, _) = parse(v1).unwrap().unwrap();
        assert_eq!(h, Header::Client("203.0.113.7:5555".parse().unwrap()));
        let mut v2 = V2_SIGNATURE.to_vec();
        v2.extend([0x21, 0x21, 0, 36]);
        v2.extend(Ipv4Addr::new(198, 51, 100, 9).to_ipv6_mapped().octets());
        v2.extend([0u8; 16]);
        v2.extend([0x1f, 0x90, 0x01, 0xbb]);
        let (h, _) = parse(&v2).unwrap().unwrap();
        assert_eq!(h, Header::Client("198.51.100.9:8080".parse().unwrap()));
    }

    #[test]
    fn v2() {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([
            0x21, 0x11, 0, 12, 198, 51, 100, 9, 10, 0, 0, 1, 0x1f, 0x90, 0x01, 0xbb,
        ]);
        h.extend(b"GET");
        let (header, used) = parse(&h).unwrap().unwrap();
        assert_eq!(header, Header::Client("198.51.100.9:8080".parse().unwrap()));
        assert_eq!(&h[used..], b"GET");
        assert_eq!(parse(&h[..20]), Ok(None));
        let mut local = V2_SIGNATURE.to_vec();
        local.extend([0x20, 0x00, 0, 0]);
        assert_eq!(parse(&local).unwrap().unwrap().0, Header::Local);
        let mut bad = V2_SIGNATURE.to_vec();
        bad.extend([0x31, 0x11, 0, 0]);
        assert!(parse(&bad).is_err());
    }
}
