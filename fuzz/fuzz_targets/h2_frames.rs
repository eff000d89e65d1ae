//! The edge's HTTP/2 frame counter (`proxy::h2::Resets`): it counts the
//! RST_STREAM frames and sees the first whole request head exactly as a
//! frame-by-frame reading of the same bytes does, however they are cut.
//!
//! Input: one byte for the limit, one that cuts the rest into pieces, then
//! the frames a client sends after the preface.

#![no_main]

use std::time::Instant;

use fairgate::proxy::h2::{Resets, H2_PREFACE};
use libfuzzer_sys::fuzz_target;

/// What a frame-by-frame reading finds, one entry per whole frame header:
/// whether it is a reset, and whether it ends a request head (HEADERS or
/// CONTINUATION with END_HEADERS).
fn frames(bytes: &[u8]) -> Vec<(bool, bool)> {
    let mut seen = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let head = &bytes[at..at + 9];
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let request = matches!(head[3], 1 | 9) && head[4] & 0x4 != 0;
        seen.push((head[3] == 3, request));
        at += 9 + len;
    }
    seen
}

fuzz_target!(|data: &[u8]| {
    let [limit, piece, frames_bytes @ ..] = data else {
        return;
    };
    let limit = u32::from(*limit % 8);
    let piece = usize::from(*piece) + 1;
    let mut stream = H2_PREFACE.to_vec();
    stream.extend_from_slice(frames_bytes);

    let started = Instant::now();
    let mut resets = Resets::new(limit);
    let over = stream.chunks(piece).position(|c| resets.over(c));
    // Counting is per one-second window: a slow run proves nothing.
    if started.elapsed().as_millis() > 500 {
        return;
    }
    let model = frames(frames_bytes);
    // The reset that crosses the limit, and the frames read up to it.
    let mut count = 0;
    let crossing = model.iter().position(|(reset, _)| {
        count += u32::from(*reset);
        *reset && count > limit
    });
    assert_eq!(
        over.is_some(),
        crossing.is_some(),
        "limit {limit}, pieces of {piece}"
    );
    let read = crossing.map_or(model.len(), |i| i + 1);
    let request = model[..read].iter().any(|(_, request)| *request);
    // Stopped at a crossing reset, it has read no frame after it.
    assert_eq!(
        resets.seen_request, request,
        "limit {limit}, pieces of {piece}"
    );
});
