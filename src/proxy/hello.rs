//! Reading a TLS ClientHello ahead of the handshake, to choose by its
//! server name how the connection is served (a host's own client
//! certificates, or its TLS passed through). rustls parses it; the bytes
//! read are handed back, to be replayed into the handshake or sent on.

use tokio::io::AsyncReadExt;

/// At most this many bytes are read looking for a whole ClientHello (a
/// real one is under 2 KiB; post-quantum key shares add about 1.2 KiB).
const MAX_HELLO: usize = 16 * 1024;

/// The ClientHello's server name (lower case, as sent), and every byte
/// read, `early` (read with a PROXY header) first.
pub async fn read<S>(stream: &mut S, early: Vec<u8>) -> Result<(Option<String>, Vec<u8>), String>
where
    S: tokio::io::AsyncRead + Unpin + ?Sized,
{
    let mut buf = early;
    let mut hello = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        let mut rest = &buf[fed..];
        while !rest.is_empty() {
            hello.read_tls(&mut rest).map_err(|e| e.to_string())?;
        }
        fed = buf.len();
        match hello.accept() {
            Ok(Some(accepted)) => {
                let name = accepted.client_hello().server_name().map(str::to_string);
                return Ok((name, buf));
            }
            Ok(None) => {}
            Err((e, _)) => return Err(e.to_string()),
        }
        if buf.len() >= MAX_HELLO {
            return Err(format!("no whole ClientHello in {MAX_HELLO} bytes"));
        }
        buf.reserve(4096);
        let n = stream.read_buf(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the client closed before its ClientHello".into());
        }
    }
}
