//! The fuzz oracle of the control socket's decoder (`fuzz/fuzz_targets/control_frame.rs`,
//! and the stable replay of its corpus in `tests/it/fuzz_corpus.rs`): arbitrary bytes, split
//! at an arbitrary point, through the daemon's decoder. It must never panic, never buffer
//! past the limit, and every request it accepts must survive an encode/decode round trip.
#![expect(
    clippy::expect_used,
    reason = "a fuzz oracle panics on purpose: the failed expectation is the finding"
)]

use crate::codec::{
    decode_request, decode_response, encode_frame, FrameDecoder, HEADER_LEN, MAX_REQUEST_LEN,
};

/// Feeds `data` to a request decoder in two pieces and checks the invariants.
pub fn control_frame(data: &[u8]) {
    let split = data
        .first()
        .map_or(0, |b| usize::from(*b) % (data.len() + 1));
    let (first, second) = data.split_at(split);
    let mut d = FrameDecoder::new(MAX_REQUEST_LEN);
    for piece in [first, second] {
        // Feed only what the decoder asks for, as the daemon does.
        let mut rest = piece;
        while !rest.is_empty() {
            let want = d.wanted();
            assert!((1..=HEADER_LEN + MAX_REQUEST_LEN).contains(&want));
            let (now, later) = rest.split_at(want.min(rest.len()));
            d.push(now);
            rest = later;
            assert!(d.buffered() <= HEADER_LEN + MAX_REQUEST_LEN);
            loop {
                match d.next_body() {
                    Ok(Some(body)) => check_body(&body),
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    }
}

fn check_body(body: &[u8]) {
    if let Ok(req) = decode_request(body) {
        let frame = encode_frame(&req);
        let again = decode_request(&frame[HEADER_LEN..]).expect("re-encoded request decodes");
        assert_eq!(again, req);
    }
    // The client's decoder sees the same kind of bytes from the daemon.
    if let Ok(resp) = decode_response(body) {
        let frame = encode_frame(&resp);
        let again = decode_response(&frame[HEADER_LEN..]).expect("re-encoded response decodes");
        assert_eq!(again, resp);
    }
}
