//! Bad and unusual peer datagrams: each rejection is a specific [`PeerError`] variant, and
//! what the C daemon accepts without checking is accepted here too.

use std::net::{IpAddr, Ipv4Addr};

use iwpm_proto::peer::{
    peer_extension, IpVersion, PeerError, PeerMessage, PeerMsgType, EXT_MAGIC, EXT_VERSION,
    PEER_AUTH_LEN, PEER_EXTENDED_LEN, PEER_REQUEST_LEN, PEER_SHORT_LEN,
};

fn datagram(len: usize, magic: u8) -> Vec<u8> {
    let mut b = vec![0u8; len];
    if let Some(first) = b.first_mut() {
        *first = magic;
    }
    b
}

/// A 96-byte datagram with a valid v1 extension block (flags and cookie zero).
fn extended(magic: u8) -> Vec<u8> {
    let mut b = datagram(PEER_EXTENDED_LEN, magic);
    b[64..68].copy_from_slice(&EXT_MAGIC);
    b[68] = EXT_VERSION;
    b
}

#[test]
fn every_length_but_48_64_96_and_124_is_bad_length() {
    for len in 0..=128usize {
        let mut b = datagram(len, 0x04);
        if len == PEER_EXTENDED_LEN {
            b = extended(0x04);
        }
        let r = PeerMessage::decode(&b);
        if [PEER_SHORT_LEN, PEER_REQUEST_LEN, PEER_EXTENDED_LEN].contains(&len) {
            assert!(r.is_ok(), "len {len}");
        } else if len == PEER_AUTH_LEN {
            // (the sealed form: a zero block is no authentication block)
            assert_eq!(
                r,
                Err(PeerError::BadExtension {
                    magic: [0; 4],
                    version: 0
                }),
                "len {len}"
            );
        } else {
            assert_eq!(r, Err(PeerError::BadLength { len }), "len {len}");
        }
    }
}

#[test]
fn lengths_between_and_beyond_the_extended_form_are_bad_length() {
    // A valid block at offset 64 does not help any other length: 65..=95, 97..=123 and
    // 125.. are BadLength whatever they carry (124 is the sealed form, `peer_auth_vectors`).
    for len in (65..=95)
        .chain(97..=123)
        .chain(125..=200)
        .chain([1500, 65507])
    {
        let mut b = datagram(len, 0x06);
        let end = len.min(PEER_EXTENDED_LEN);
        let block = extended(0x06);
        b[64..end].copy_from_slice(&block[64..end]);
        assert_eq!(
            PeerMessage::decode(&b),
            Err(PeerError::BadLength { len }),
            "len {len}"
        );
        assert_eq!(peer_extension(&b), None, "len {len}");
    }
}

#[test]
fn extended_datagram_with_bad_magic_is_bad_extension() {
    for (at, value) in [(64, b'i'), (65, 0x00), (66, 0xff), (67, b'Z')] {
        for first in [0x04u8, 0x06, 0x16, 0x05] {
            let mut b = extended(first);
            b[at] = value;
            let mut magic = EXT_MAGIC;
            magic[at - 64] = value;
            assert_eq!(
                PeerMessage::decode(&b),
                Err(PeerError::BadExtension {
                    magic,
                    version: EXT_VERSION
                }),
                "byte {at} = {value:#04x}, first byte {first:#04x}"
            );
            assert_eq!(peer_extension(&b), None);
        }
    }
    // All zeros: a 96-byte datagram of nobody's.
    assert_eq!(
        PeerMessage::decode(&datagram(PEER_EXTENDED_LEN, 0x04)),
        Err(PeerError::BadExtension {
            magic: [0; 4],
            version: 0
        })
    );
}

#[test]
fn extended_datagram_with_other_version_is_bad_extension() {
    for version in (0u8..=255).filter(|&v| v != EXT_VERSION) {
        let mut b = extended(0x26);
        b[68] = version;
        assert_eq!(
            PeerMessage::decode(&b),
            Err(PeerError::BadExtension {
                magic: EXT_MAGIC,
                version
            }),
            "version {version}"
        );
        assert_eq!(peer_extension(&b), None);
    }
}

#[test]
fn extension_is_checked_after_length_and_before_ip_version() {
    let mut b = extended(0x05);
    assert_eq!(
        PeerMessage::decode(&b),
        Err(PeerError::BadIpVersion { nibble: 5 })
    );
    b[68] = 2;
    assert_eq!(
        PeerMessage::decode(&b),
        Err(PeerError::BadExtension {
            magic: EXT_MAGIC,
            version: 2
        })
    );
}

#[test]
fn extension_flags_and_reserved_bytes_are_not_checked() {
    // Unknown flag bits and reserved bytes 70..72 are ignored on read: the datagram
    // decodes, and peer_extension hands the flags over as received.
    let mut b = extended(0x06);
    b[69] = 0xff;
    b[70..72].copy_from_slice(&[0xa5, 0x5a]);
    b[72..96].fill(0xc3);
    let m = PeerMessage::decode(&b).unwrap();
    assert_eq!(m.ip_version, IpVersion::V6);
    let ext = peer_extension(&b).unwrap();
    assert_eq!(ext.flags, 0xff);
    assert!(ext.can_echo());
    assert_eq!(ext.cookie, [0xc3; 24]);
    b[69] = 0xfe;
    assert!(!peer_extension(&b).unwrap().can_echo());
}

/// Writes 192.0.2.9 as the mapped IP of the ACCEPT in `b` and decodes it: the field kept.
fn accept_with_mapped_ip(b: &mut [u8]) -> PeerMessage {
    b[48..52].copy_from_slice(&[192, 0, 2, 9]);
    let m = PeerMessage::decode(b).unwrap();
    assert_eq!(m.msg_type, PeerMsgType::Accept);
    assert_eq!(
        m.mapped_cp_ip,
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)))
    );
    m
}

#[test]
fn extended_datagram_keeps_the_mapped_field() {
    let mut b = extended(0x14);
    let m = accept_with_mapped_ip(&mut b);
    // What the C daemon would read: the first 64 bytes, the same message.
    assert_eq!(PeerMessage::decode(&b[..PEER_REQUEST_LEN]), Ok(m));
}

#[test]
fn peer_extension_of_other_lengths_is_none() {
    let b = extended(0x06);
    for len in [0, 1, 48, 64, 72, 95] {
        assert_eq!(peer_extension(&b[..len]), None, "len {len}");
    }
    let mut long = b.clone();
    long.push(0);
    assert_eq!(peer_extension(&long), None);
    assert!(peer_extension(&b).is_some());
}

#[test]
fn oversize_datagrams_are_rejected_not_truncated() {
    // Intentional difference: the C daemon would accept these as their first 64 bytes.
    for len in [65, 95, 97, 100, 128, 1500, 65507] {
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
    for len in [PEER_SHORT_LEN, PEER_REQUEST_LEN, PEER_EXTENDED_LEN] {
        for high in [0x00u8, 0x10, 0x20, 0x30, 0xf0] {
            for nibble in 0u8..16 {
                let mut b = extended(high | nibble);
                b.truncate(len);
                let r = PeerMessage::decode(&b);
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
    let m = accept_with_mapped_ip(&mut b);
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
        "peer message of 7 bytes (expected 48, 64, 96 or 124)"
    );
    assert_eq!(
        PeerError::BadExtension {
            magic: *b"IWRT",
            version: 1
        }
        .to_string(),
        "96-byte peer message without an extension block v1 (magic [49, 57, 52, 54], version 1)"
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
