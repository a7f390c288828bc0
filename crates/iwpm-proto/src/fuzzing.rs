//! Fuzz oracles: one function per parser, shared by the cargo-fuzz targets in `fuzz/` and by
//! the stable-toolchain corpus replay test (`tests/it/fuzz_corpus.rs`), so CI exercises every
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
use crate::peer::{
    peer_extension, IpVersion, PeerError, PeerExtension, PeerMessage, IPV4_ECHO_LEN,
    PEER_EXTENDED_LEN, PEER_REQUEST_LEN,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Peer UDP datagram: decode, the round trip of what decoded, in the plain form and in the
/// extended form (with the datagram's own extension block if it has one, else one made from
/// its last bytes), and the extension block's reader.
pub fn peer_datagram(data: &[u8]) {
    let ext = peer_extension(data);
    let decoded = PeerMessage::decode(data);
    let block_ok =
        data.len() == PEER_EXTENDED_LEN && !matches!(decoded, Err(PeerError::BadExtension { .. }));
    assert_eq!(
        ext.is_some(),
        block_ok,
        "peer_extension and decode disagree about the block"
    );
    if let Ok(msg) = decoded {
        let bytes = msg.encode();
        let again = PeerMessage::decode(&bytes).expect("re-encoded peer message must decode");
        if msg.is_consistent() {
            assert_eq!(again, msg, "peer round trip");
        }
        assert_eq!(again.encode(), bytes, "peer encoding must be canonical");
        peer_extended_round_trip(&msg, &ext.unwrap_or_else(|| extension_from(data)));
    }
    peer_sealed(data);
}

/// The sealed form (`peer::auth`): a datagram with an authentication block unseals to an
/// inner datagram that seals back to the same bytes under the key it verifies with (none
/// here: a fuzzer cannot hold the MAC, so a fixed key re-seals and must verify), and one
/// without a block neither unseals nor verifies.
fn peer_sealed(data: &[u8]) {
    use crate::fleet_key::FleetKey;
    use crate::peer::auth::{auth_block, seal, unseal, verify};
    let Some(key) = FleetKey::new(1, vec![0x42; 32], false) else {
        return;
    };
    let Some(block) = auth_block(data) else {
        assert!(unseal(data).is_none(), "unsealed without a block");
        assert!(!verify(data, &key), "verified without a block");
        return;
    };
    let inner = unseal(data).expect("a datagram with a block unseals");
    let resealed = seal(&inner, &key, block.stamp_us);
    if let Ok(resealed) = resealed {
        assert!(verify(&resealed, &key), "a sealed datagram verifies");
        assert_eq!(
            unseal(&resealed).as_deref(),
            Some(&inner[..]),
            "seal round trip"
        );
        // (the message's own bytes: a 48-byte inner form is padded with zeros when sealed,
        // whatever a received datagram carried there)
        let kept = inner.len().min(64);
        assert_eq!(resealed[..kept], data[..kept], "the message bytes are kept");
    }
}

/// `decode(encode_with_extension(m, e))` is `m` with `mapped_cp_ip` made `Some` (the
/// unspecified address when it was `None`); `peer_extension` gives `e` back with its flags
/// masked; the first 64 bytes are what rdma-core would read, the same message.
fn peer_extended_round_trip(msg: &PeerMessage, ext: &PeerExtension) {
    let bytes = msg.encode_with_extension(ext);
    assert_eq!(bytes.len(), PEER_EXTENDED_LEN, "extended length");
    let again = PeerMessage::decode(&bytes).expect("extended peer message must decode");
    let expected = PeerMessage {
        mapped_cp_ip: Some(msg.mapped_cp_ip.unwrap_or(match msg.ip_version {
            IpVersion::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpVersion::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        })),
        ..*msg
    };
    if msg.is_consistent() {
        assert_eq!(again, expected, "extended peer round trip");
    }
    assert_eq!(
        PeerMessage::decode(&bytes[..PEER_REQUEST_LEN]).as_ref(),
        Ok(&again),
        "the first 64 bytes of an extended message are the same message"
    );
    let masked = PeerExtension {
        flags: ext.flags & PeerExtension::KNOWN_FLAGS,
        ..*ext
    };
    assert_eq!(peer_extension(&bytes), Some(masked), "extension round trip");
    assert_eq!(
        again.encode_with_extension(&masked),
        bytes,
        "extended encoding must be canonical"
    );
}

/// An extension made of the input's last bytes (flags, then the cookie), so every decoded
/// datagram also drives the extended encoder with fuzzed flags and cookies.
fn extension_from(data: &[u8]) -> PeerExtension {
    let mut tail = data.iter().rev().copied();
    let flags = tail.next().unwrap_or(0);
    let mut cookie = [0u8; IPV4_ECHO_LEN];
    for (c, b) in cookie.iter_mut().zip(tail) {
        *c = b;
    }
    PeerExtension { flags, cookie }
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

/// Fleet key file (`crate::keyfile`): no panic; an error names a line that exists and
/// shows no run of 8 or more hex digits (key material is never quoted); an accepted file
/// yields a set whose signing key is its highest key not marked accept-only, and which
/// reads back the same from its canonical text.
pub fn key_file(data: &[u8]) {
    use crate::keyfile::{parse_key_file, parse_key_file_bytes};
    let lines = data.split(|&b| b == b'\n').count();
    match parse_key_file_bytes(data) {
        Err(e) => {
            if let Some(line) = e.line() {
                assert!(
                    line >= 1 && line <= lines,
                    "error on line {line} of {lines}"
                );
            }
            let shown = e.to_string();
            let longest_hex_run = shown
                .split(|c: char| !c.is_ascii_hexdigit())
                .map(str::len)
                .max()
                .unwrap_or(0);
            // Ids, lengths and line numbers are decimal: at most 10 digits (u32::MAX).
            assert!(
                longest_hex_run <= 10,
                "message may show key material: {shown}"
            );
        }
        Ok(keys) => {
            let signing = keys.signing();
            assert!(!signing.accept_only(), "the signing key is accept-only");
            let highest = keys
                .iter()
                .filter(|k| !k.accept_only())
                .map(|k| k.id())
                .max();
            assert_eq!(
                Some(signing.id()),
                highest,
                "signing key is not the highest"
            );
            let canonical: String = keys
                .iter()
                .map(|k| {
                    let hex: String = k.secret().iter().map(|b| format!("{b:02x}")).collect();
                    let flag = if k.accept_only() { " accept-only" } else { "" };
                    format!("{} {hex}{flag}\n", k.id())
                })
                .collect();
            let again = parse_key_file(&canonical).expect("canonical key file must parse");
            assert_eq!(again.len(), keys.len(), "key count round trip");
            for (a, b) in again.iter().zip(keys.iter()) {
                assert_eq!(
                    (a.id(), a.accept_only(), a.secret()),
                    (b.id(), b.accept_only(), b.secret()),
                    "key round trip"
                );
            }
        }
    }
}
