//! Bad and unusual peer datagrams: each rejection is a specific [`PeerError`] variant, and
//! what the C daemon accepts without checking is accepted here too.

use std::net::{IpAddr, Ipv4Addr};

use iwpm_proto::peer::{
    IpVersion, PeerError, PeerMessage, PeerMsgType, PEER_REQUEST_LEN, PEER_SHORT_LEN,
};

fn datagram(len: usize, magic: u8) -> Vec<u8> {
    let mut b = vec![0u8; len];
    if let Some(first) = b.first_mut() {
        *first = magic;
    }
    b
}

#[test]
fn every_length_but_48_and_64_is_bad_length() {
    for len in 0..=128usize {
        let r = PeerMessage::decode(&datagram(len, 0x04));
        if len == PEER_SHORT_LEN || len == PEER_REQUEST_LEN {
            assert!(r.is_ok(), "len {len}");
        } else {
            assert_eq!(r, Err(PeerError::BadLength { len }), "len {len}");
        }
    }
}

#[test]
fn oversize_datagrams_are_rejected_not_truncated() {
    // Intentional difference: the C daemon would accept these as their first 64 bytes.
    for len in [65, 100, 128, 1500, 65507] {
        assert_eq!(
            PeerMessage::decode(&datagram(len, 0x04)),
            Err(PeerError::BadLength { len })
        );
    }
}

#[test]
fn length_is_checked_before_ip_version() {
    assert_eq!(
        PeerMessage::decode(&datagram(47, 0x05)),
        Err(PeerError::BadLength { len: 47 })
    );
    assert_eq!(
        PeerMessage::decode(&[]),
        Err(PeerError::BadLength { len: 0 })
    );
}

#[test]
fn every_nibble_but_4_and_6_is_bad_ip_version() {
    for len in [PEER_SHORT_LEN, PEER_REQUEST_LEN] {
        for high in [0x00u8, 0x10, 0x20, 0x30, 0xf0] {
            for nibble in 0u8..16 {
                let r = PeerMessage::decode(&datagram(len, high | nibble));
                match nibble {
                    4 => assert_eq!(r.unwrap().ip_version, IpVersion::V4),
                    6 => assert_eq!(r.unwrap().ip_version, IpVersion::V6),
                    _ => assert_eq!(r, Err(PeerError::BadIpVersion { nibble })),
                }
            }
        }
    }
}

#[test]
fn version_bits_are_not_checked() {
    for version in 0u8..4 {
        for code in 0u8..4 {
            let m = PeerMessage::decode(&datagram(PEER_SHORT_LEN, version << 6 | code << 4 | 4))
                .unwrap();
            assert_eq!(m.version, version);
            assert_eq!(m.msg_type, PeerMsgType::from_code(code));
            assert_eq!(m.msg_type.code(), code);
        }
    }
}

#[test]
fn short_request_is_accepted_without_mapped_address() {
    // Pre-2014 peers sent 48-byte REQUESTs.
    let mut b = datagram(PEER_SHORT_LEN, 0x04);
    b[2..4].copy_from_slice(&41234u16.to_be_bytes());
    b[16..20].copy_from_slice(&[10, 0, 0, 1]);
    let m = PeerMessage::decode(&b).unwrap();
    assert_eq!(m.msg_type, PeerMsgType::Request);
    assert_eq!(m.mapped_cp_ip, None);
    assert_eq!(m.mapped_cp(), None);
    assert_eq!(m.reserved_port, 41234);
    assert_eq!(m.cp_ip, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(m.encode(), b);
}

#[test]
fn long_answers_keep_the_mapped_field() {
    // A 64-byte ACCEPT is accepted; its mapped field is kept so the round trip is lossless.
    let mut b = datagram(PEER_REQUEST_LEN, 0x14);
    b[48..52].copy_from_slice(&[192, 0, 2, 9]);
    let m = PeerMessage::decode(&b).unwrap();
    assert_eq!(m.msg_type, PeerMsgType::Accept);
    assert_eq!(
        m.mapped_cp_ip,
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)))
    );
    assert_eq!(m.encode(), b);
}

#[test]
fn ipv4_padding_garbage_is_ignored() {
    let mut b = datagram(PEER_REQUEST_LEN, 0x04);
    b[16..20].copy_from_slice(&[10, 0, 0, 1]);
    b[32..36].copy_from_slice(&[10, 0, 0, 2]);
    b[48..52].copy_from_slice(&[10, 0, 0, 3]);
    let clean = PeerMessage::decode(&b).unwrap();
    for r in [20..32, 36..48, 52..64] {
        b[r].fill(0xa5);
    }
    let dirty = PeerMessage::decode(&b).unwrap();
    assert_eq!(clean, dirty);
    assert_ne!(dirty.encode(), b);
    assert!(dirty.encode()[20..32].iter().all(|&x| x == 0));
}

#[test]
fn errors_display_the_offending_value() {
    assert_eq!(
        PeerError::BadLength { len: 7 }.to_string(),
        "peer message of 7 bytes (expected 48 or 64)"
    );
    assert_eq!(
        PeerError::BadIpVersion { nibble: 5 }.to_string(),
        "peer message with invalid IP version nibble 5"
    );
}

#[test]
fn type_and_version_codes() {
    for t in [
        PeerMsgType::Request,
        PeerMsgType::Accept,
        PeerMsgType::Ack,
        PeerMsgType::Reject,
    ] {
        assert_eq!(PeerMsgType::from_code(t.code()), t);
    }
    assert_eq!(PeerMsgType::Reject.to_string(), "REJECT");
    assert_eq!(IpVersion::from_nibble(4), Some(IpVersion::V4));
    assert_eq!(IpVersion::from_nibble(6), Some(IpVersion::V6));
    assert_eq!(IpVersion::from_nibble(0), None);
    assert_eq!(IpVersion::V6.nibble(), 6);
}
