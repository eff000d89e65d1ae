//! What the edge reads of HTTP/2 itself: whether a plain connection opens
//! with the preface (h2c), and the frame headers a client sends, to count
//! its stream resets (rapid reset) and see its first whole request head.

use std::time::Duration;

use pingora::protocols::Stream;
use tokio::time::Instant;

/// Whether a plain connection opens with the HTTP/2 preface (h2c prior
/// knowledge), reading only until its bytes differ from the preface (a
/// short HTTP/1 request is never kept waiting for 24 bytes). What was read
/// is left in `early`; `None` when nothing decides it within `wait`.
pub async fn opens_with_preface(
    stream: &mut Stream,
    early: &mut Vec<u8>,
    wait: Duration,
) -> Option<bool> {
    use tokio::io::AsyncReadExt;
    let deadline = Instant::now() + wait;
    loop {
        let n = early.len().min(H2_PREFACE.len());
        if early[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        let mut buf = [0u8; 24];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) => return Some(false),
            Ok(Ok(read)) => early.extend_from_slice(&buf[..read]),
            _ => return None,
        }
    }
}

pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Counts the RST_STREAM frames a client sends on an HTTP/2 connection, by
/// reading the frame headers as they pass (HTTP/2 rapid reset,
/// CVE-2023-44487: each reset stream cost the server a request).
#[derive(Debug)]
pub struct Resets {
    /// Preface bytes still to pass.
    preface: usize,
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    payload: usize,
    window: Instant,
    count: u32,
    pub limit: u32,
    /// A whole request head (HEADERS, and CONTINUATIONs, to END_HEADERS)
    /// has arrived: until then the connection has `header_timeout`.
    pub seen_request: bool,
}

impl Resets {
    pub fn new(limit: u32) -> Self {
        Resets {
            preface: H2_PREFACE.len(),
            head: [0; 9],
            have: 0,
            payload: 0,
            window: Instant::now(),
            count: 0,
            limit,
            seen_request: false,
        }
    }

    /// Reads `bytes` of the stream; true once the client has reset more
    /// than `limit` streams within one second.
    pub fn over(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            let skip = if self.preface > 0 {
                &mut self.preface
            } else {
                &mut self.payload
            };
            if *skip > 0 {
                let n = (*skip).min(bytes.len());
                *skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 9 {
                break;
            }
            self.have = 0;
            self.payload =
                u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize;
            const HEADERS: u8 = 1;
            const RST_STREAM: u8 = 3;
            const CONTINUATION: u8 = 9;
            const END_HEADERS: u8 = 0x4;
            let kind = self.head[3];
            if matches!(kind, HEADERS | CONTINUATION) && self.head[4] & END_HEADERS != 0 {
                self.seen_request = true;
            }
            if kind == RST_STREAM && self.count_one() {
                return true;
            }
        }
        false
    }

    fn count_one(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.count = 0;
        }
        self.count += 1;
        self.count > self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame header: 24-bit length, type, flags, stream id.
    fn frame(kind: u8, len: usize) -> Vec<u8> {
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        f.extend(std::iter::repeat_n(0xAA, len));
        f
    }

    #[test]
    fn resets_are_counted_across_any_split_of_the_frames() {
        let mut stream = H2_PREFACE.to_vec();
        stream.extend(frame(4, 6)); // SETTINGS
        for _ in 0..3 {
            stream.extend(frame(1, 40)); // HEADERS
            stream.extend(frame(3, 4)); // RST_STREAM
        }
        for piece in [1, 5, 9, 13, stream.len()] {
            let mut resets = Resets::new(3);
            let over = stream.chunks(piece).any(|c| resets.over(c));
            assert!(!over, "3 resets within a limit of 3 (pieces of {piece})");
            assert_eq!(resets.count, 3, "pieces of {piece}");
            assert!(resets.over(&frame(3, 4)), "the 4th reset is over the limit");
        }
        // A payload that looks like a RST_STREAM header is not one.
        let mut resets = Resets::new(0);
        let mut data = H2_PREFACE.to_vec();
        data.extend(frame(0, 9));
        let n = data.len();
        data[n - 9..].copy_from_slice(&frame(3, 0));
        assert!(!resets.over(&data));
    }
}
