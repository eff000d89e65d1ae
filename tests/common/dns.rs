//! A DNS server the test controls, on a free loopback UDP port: it answers
//! every A question with the addresses it is told (TTL 1 s) and every
//! other question with no records. Enough for a resolver to follow a name
//! as the test moves it.

use super::*;

pub struct Dns {
    pub addr: SocketAddr,
    answers: Arc<std::sync::Mutex<Vec<std::net::Ipv4Addr>>>,
}

impl Dns {
    pub async fn start(first: &[std::net::Ipv4Addr]) -> Dns {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let answers = Arc::new(std::sync::Mutex::new(first.to_vec()));
        let current = answers.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let ips = current.lock().unwrap().clone();
                if let Some(reply) = answer(&buf[..n], &ips) {
                    let _ = socket.send_to(&reply, from).await;
                }
            }
        });
        Dns { addr, answers }
    }

    pub fn set(&self, ips: &[std::net::Ipv4Addr]) {
        *self.answers.lock().unwrap() = ips.to_vec();
    }
}

/// The reply to one query: its id and question, then A records.
fn answer(query: &[u8], ips: &[std::net::Ipv4Addr]) -> Option<Vec<u8>> {
    // Header (12 bytes), then the question: labels, a zero, type, class.
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + *query.get(end)? as usize;
    }
    let question = query.get(12..end + 5)?;
    let qtype = u16::from_be_bytes([query[end + 1], query[end + 2]]);
    let ips: &[std::net::Ipv4Addr] = if qtype == 1 { ips } else { &[] };
    let mut out = vec![query[0], query[1], 0x81, 0x80, 0, 1];
    out.extend((ips.len() as u16).to_be_bytes());
    out.extend([0, 0, 0, 0]);
    out.extend(question);
    for ip in ips {
        // A pointer to the question's name, type A, class IN, TTL 1, 4 bytes.
        out.extend([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
        out.extend(ip.octets());
    }
    Some(out)
}
