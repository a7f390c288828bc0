//! Fuzz oracles: one function per parser, shared by the cargo-fuzz targets in `fuzz/` and by
//! the stable-toolchain corpus replay test (`tests/fuzz_corpus.rs`), so CI exercises every
//! committed corpus input on every run.
//!
//! Each oracle must not panic on any input; where the format allows, it also checks the
//! round trip (`decode(encode(m)) == m` for messages, canonical re-encoding for every frame)
//! and panics on a mismatch (that is the finding a fuzzer reports).
#![expect(
    clippy::expect_used,
    reason = "a fuzz oracle panics on purpose: the failed expectation is the finding"
)]

use crate::config::parse_config_bytes;
use crate::consts::{IWPM_UABI_VERSION, IWPM_UABI_VERSION_MIN};
use crate::netlink::{decode_datagram, frames, DaemonMsg, Frame, KernelMsg, NetlinkMessage};
use crate::peer::PeerMessage;

/// Netlink datagram: framing, both receivers' rules, both ABIs, and the re-encode round
/// trip of everything that decoded.
pub fn netlink_datagram(data: &[u8]) {
    for abi in [IWPM_UABI_VERSION_MIN, IWPM_UABI_VERSION] {
        round_trip::<KernelMsg>(data, abi);
    }
    round_trip::<DaemonMsg>(data, IWPM_UABI_VERSION);
}

/// The oracle for one receiver: every frame that decoded re-encodes to one frame that
/// decodes again, a message to the same value, and the encoding is canonical.
fn round_trip<M>(data: &[u8], abi: u16)
where
    M: NetlinkMessage + std::fmt::Debug + PartialEq,
{
    let framed = frames(data).count();
    let decoded = decode_datagram::<M>(data, abi);
    assert!(
        decoded.len() <= framed + 1,
        "more frames decoded than framed"
    );
    for frame in decoded.into_iter().flatten() {
        let mut bytes = Vec::new();
        frame.encode(&mut bytes);
        let again = decode_datagram::<M>(&bytes, abi);
        assert_eq!(again.len(), 1, "re-encoded frame split: {frame:?}");
        let again = again[0].as_ref().expect("re-encoded frame must decode");
        if let Frame::Msg(..) = frame {
            assert_eq!(again, &frame, "message round trip");
        }
        let mut canonical = Vec::new();
        again.encode(&mut canonical);
        assert_eq!(canonical, bytes, "encoding must be canonical");
    }
}

/// Peer UDP datagram: decode, and the round trip of what decoded.
pub fn peer_datagram(data: &[u8]) {
    if let Ok(msg) = PeerMessage::decode(data) {
        let bytes = msg.encode();
        let again = PeerMessage::decode(&bytes).expect("re-encoded peer message must decode");
        if msg.is_consistent() {
            assert_eq!(again, msg, "peer round trip");
        }
        assert_eq!(again.encode(), bytes, "peer encoding must be canonical");
    }
}

/// `iwpmd.conf` text: parse, and check every diagnostic names a line that exists.
pub fn config_text(data: &[u8]) {
    let (_config, diagnostics) = parse_config_bytes(data);
    let lines = data.split(|&b| b == b'\n').count().max(1);
    for d in &diagnostics {
        assert!(
            d.line() >= 1 && d.line() <= lines,
            "diagnostic on line {} of {lines}",
            d.line()
        );
        let _ = d.to_string();
    }
}
