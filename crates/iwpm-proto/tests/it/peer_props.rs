//! Property tests of the peer codec: lossless round trips for every message type and both
//! IP versions, in the plain and the extended (96-byte) form, canonicalisation of arbitrary
//! datagrams, and no panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use iwpm_proto::peer::{
    peer_extension, IpVersion, PeerError, PeerExtension, PeerMessage, PeerMsgType, EXT_MAGIC,
    EXT_VERSION, PEER_AUTH_LEN, PEER_EXTENDED_LEN, PEER_REQUEST_LEN, PEER_SHORT_LEN,
};
use proptest::prelude::*;

fn msg_type() -> impl Strategy<Value = PeerMsgType> {
    prop_oneof![
        Just(PeerMsgType::Request),
        Just(PeerMsgType::Accept),
        Just(PeerMsgType::Ack),
        Just(PeerMsgType::Reject),
    ]
}

fn ip_of(version: IpVersion) -> BoxedStrategy<IpAddr> {
    match version {
        IpVersion::V4 => any::<[u8; 4]>()
            .prop_map(|o| IpAddr::V4(Ipv4Addr::from(o)))
            .boxed(),
        IpVersion::V6 => any::<[u8; 16]>()
            .prop_map(|o| IpAddr::V6(Ipv6Addr::from(o)))
            .boxed(),
    }
}

/// Every consistent message: all types, both families, any field values, with or without
/// the 64-byte mapped field.
fn message() -> impl Strategy<Value = PeerMessage> {
    prop_oneof![Just(IpVersion::V4), Just(IpVersion::V6)].prop_flat_map(message_of)
}

fn message_of(v: IpVersion) -> impl Strategy<Value = PeerMessage> {
    (
        (0u8..4, msg_type(), any::<u8>(), any::<u16>()),
        (any::<u16>(), any::<u16>(), any::<u64>()),
        (ip_of(v), ip_of(v), proptest::option::of(ip_of(v))),
    )
        .prop_map(
            move |(
                (version, msg_type, pmtime, reserved_port),
                (ap_port, cp_port, assoc_handle),
                (cp_ip, ap_ip, mapped_cp_ip),
            )| PeerMessage {
                version,
                msg_type,
                ip_version: v,
                pmtime,
                reserved_port,
                ap_port,
                cp_port,
                assoc_handle,
                cp_ip,
                ap_ip,
                mapped_cp_ip,
            },
        )
}

fn socket_addr_of(version: IpVersion) -> BoxedStrategy<SocketAddr> {
    (ip_of(version), any::<u16>())
        .prop_map(|(ip, port)| SocketAddr::new(ip, port))
        .boxed()
}

/// A 48- or 64-byte datagram with a valid IP nibble and arbitrary other bytes.
fn valid_datagram() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just(PEER_SHORT_LEN), Just(PEER_REQUEST_LEN)],
        prop_oneof![Just(4u8), Just(6u8)],
    )
        .prop_flat_map(|(len, nibble)| {
            proptest::collection::vec(any::<u8>(), len).prop_map(move |mut b| {
                b[0] = (b[0] & 0xf0) | nibble;
                b
            })
        })
}

/// A 96-byte datagram with a valid IP nibble, a v1 extension block (any flags, reserved
/// bytes and cookie) and arbitrary other bytes.
fn valid_extended_datagram() -> impl Strategy<Value = Vec<u8>> {
    (prop_oneof![Just(4u8), Just(6u8)],).prop_flat_map(|(nibble,)| {
        proptest::collection::vec(any::<u8>(), PEER_EXTENDED_LEN).prop_map(move |mut b| {
            b[0] = (b[0] & 0xf0) | nibble;
            b[64..68].copy_from_slice(&EXT_MAGIC);
            b[68] = EXT_VERSION;
            b
        })
    })
}

fn extension() -> impl Strategy<Value = PeerExtension> {
    (any::<u8>(), any::<[u8; 24]>()).prop_map(|(flags, cookie)| PeerExtension { flags, cookie })
}

fn unspecified(v: IpVersion) -> IpAddr {
    match v {
        IpVersion::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpVersion::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// The IPv4 padding of a 64- or 96-byte datagram zeroed (the 64-byte form's bytes only).
fn zero_ipv4_padding(b: &mut [u8]) {
    b[20..32].fill(0);
    b[36..48].fill(0);
    if b.len() >= PEER_REQUEST_LEN {
        b[52..64].fill(0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The extended round trip: `decode(encode_with_extension(m, e))` is `m` with
    /// `mapped_cp_ip` made `Some` (the unspecified address of its family when it was
    /// `None`), the first 64 bytes are the 64-byte form of that message, and
    /// `peer_extension` gives `e` back with its flags masked to the bits v1 defines.
    #[test]
    fn extended_form_round_trips(m in message(), e in extension()) {
        let bytes = m.encode_with_extension(&e);
        prop_assert_eq!(bytes.len(), PEER_EXTENDED_LEN);
        let expected = PeerMessage {
            mapped_cp_ip: Some(m.mapped_cp_ip.unwrap_or(unspecified(m.ip_version))),
            ..m
        };
        prop_assert_eq!(PeerMessage::decode(&bytes), Ok(expected));
        prop_assert_eq!(bytes[..PEER_REQUEST_LEN].to_vec(), expected.encode());
        // What rdma-core reads (the first 64 bytes) is the same message.
        prop_assert_eq!(PeerMessage::decode(&bytes[..PEER_REQUEST_LEN]), Ok(expected));
        prop_assert_eq!(
            peer_extension(&bytes),
            Some(PeerExtension { flags: e.flags & PeerExtension::KNOWN_FLAGS, ..e })
        );
        prop_assert_eq!(&bytes[64..68], &EXT_MAGIC[..]);
        prop_assert_eq!(bytes[68], EXT_VERSION);
        prop_assert_eq!(bytes[69] & !PeerExtension::KNOWN_FLAGS, 0);
        prop_assert_eq!(&bytes[70..72], &[0u8, 0][..]);
        prop_assert_eq!(&bytes[72..], &e.cookie[..]);
    }

    /// With flags holding only `CAN_ECHO` (set or not), the block round-trips exactly.
    #[test]
    fn extension_with_known_flags_round_trips_exactly(
        m in message(),
        can_echo in any::<bool>(),
        cookie in any::<[u8; 24]>(),
    ) {
        let e = PeerExtension {
            flags: if can_echo { PeerExtension::CAN_ECHO } else { 0 },
            cookie,
        };
        let got = peer_extension(&m.encode_with_extension(&e));
        prop_assert_eq!(got, Some(e));
        prop_assert_eq!(got.map(|g| g.can_echo()), Some(can_echo));
    }

    #[test]
    fn valid_extended_datagrams_canonicalise(b in valid_extended_datagram()) {
        let m = PeerMessage::decode(&b).unwrap();
        prop_assert!(m.is_consistent());
        prop_assert!(m.mapped_cp_ip.is_some());
        prop_assert_eq!(PeerMessage::decode(&b[..PEER_REQUEST_LEN]), Ok(m));
        let ext = peer_extension(&b).unwrap();
        prop_assert_eq!(ext.flags, b[69]);
        prop_assert_eq!(&ext.cookie[..], &b[72..]);
        let again = m.encode_with_extension(&ext);
        // Canonical: IPv4 padding, unknown flag bits and reserved bytes zeroed.
        let mut canonical = b.clone();
        if m.ip_version == IpVersion::V4 {
            zero_ipv4_padding(&mut canonical);
        }
        canonical[69] &= PeerExtension::KNOWN_FLAGS;
        canonical[70..72].fill(0);
        prop_assert_eq!(&again, &canonical);
        prop_assert_eq!(PeerMessage::decode(&again), Ok(m));
    }

    #[test]
    fn decode_encode_round_trips(m in message()) {
        prop_assert!(m.is_consistent());
        let bytes = m.encode();
        prop_assert_eq!(bytes.len(), m.encoded_len());
        prop_assert_eq!(
            bytes.len(),
            if m.mapped_cp_ip.is_some() { PEER_REQUEST_LEN } else { PEER_SHORT_LEN }
        );
        prop_assert_eq!(PeerMessage::decode(&bytes), Ok(m));
    }

    #[test]
    fn encoding_never_puts_bytes_in_ipv4_padding(m in message_of(IpVersion::V4)) {
        let b = m.encode();
        prop_assert!(b[20..32].iter().all(|&x| x == 0));
        prop_assert!(b[36..48].iter().all(|&x| x == 0));
        if b.len() == PEER_REQUEST_LEN {
            prop_assert!(b[52..64].iter().all(|&x| x == 0));
        }
        let x = m.encode_with_extension(&PeerExtension::default());
        for r in [20..32, 36..48, 52..64] {
            prop_assert!(x[r].iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn valid_datagrams_canonicalise(b in valid_datagram()) {
        let m = PeerMessage::decode(&b).unwrap();
        prop_assert!(m.is_consistent());
        prop_assert_eq!(m.mapped_cp_ip.is_some(), b.len() == PEER_REQUEST_LEN);
        let again = m.encode();
        prop_assert_eq!(again.len(), b.len());
        if m.ip_version == IpVersion::V6 {
            // Nothing is padding in an IPv6 message: the round trip is exact.
            prop_assert_eq!(&again, &b);
        } else {
            let mut canonical = b.clone();
            zero_ipv4_padding(&mut canonical);
            prop_assert_eq!(&again, &canonical);
        }
        prop_assert_eq!(PeerMessage::decode(&again), Ok(m));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        b in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            valid_extended_datagram(),
        ]
    ) {
        let ext = peer_extension(&b);
        match PeerMessage::decode(&b) {
            Ok(m) => {
                prop_assert!([PEER_SHORT_LEN, PEER_REQUEST_LEN, PEER_EXTENDED_LEN, PEER_AUTH_LEN]
                    .contains(&b.len()));
                prop_assert!(m.is_consistent());
                prop_assert_eq!(ext.is_some(), b.len() == PEER_EXTENDED_LEN);
            }
            Err(PeerError::BadLength { len }) => {
                prop_assert_eq!(len, b.len());
                prop_assert!(![PEER_SHORT_LEN, PEER_REQUEST_LEN, PEER_EXTENDED_LEN, PEER_AUTH_LEN]
                    .contains(&len));
                prop_assert_eq!(ext, None);
            }
            Err(PeerError::BadIpVersion { nibble }) => {
                prop_assert_eq!(nibble, b[0] & 0x0f);
                prop_assert!(nibble != 4 && nibble != 6);
            }
            Err(PeerError::BadExtension { magic, version }) => {
                prop_assert!(b.len() == PEER_EXTENDED_LEN || b.len() == PEER_AUTH_LEN);
                prop_assert_eq!(&magic[..], &b[64..68]);
                prop_assert_eq!(version, b[68]);
                prop_assert!(
                    b.len() == PEER_AUTH_LEN || magic != EXT_MAGIC || version != EXT_VERSION
                );
                prop_assert_eq!(ext, None);
            }
        }
    }

    #[test]
    fn encode_of_any_message_decodes_consistently(
        m in message(),
        swap_cp in any::<bool>(),
        version in any::<u8>(),
        v4 in any::<[u8; 4]>(),
        v6 in any::<[u8; 16]>(),
    ) {
        // Inconsistent messages (an address of the other family, version > 3) still encode
        // to a valid datagram; the documented conversion is applied.
        let mut m = m;
        m.version = version;
        let other = match m.ip_version {
            IpVersion::V4 => IpAddr::V6(Ipv6Addr::from(v6)),
            IpVersion::V6 => IpAddr::V4(Ipv4Addr::from(v4)),
        };
        if swap_cp { m.cp_ip = other } else { m.ap_ip = other }
        let d = PeerMessage::decode(&m.encode()).unwrap();
        prop_assert!(d.is_consistent());
        prop_assert_eq!(d.version, version & 0b11);
        let expected = match (m.ip_version, other) {
            (IpVersion::V6, IpAddr::V4(a)) => IpAddr::V6(a.to_ipv6_mapped()),
            (IpVersion::V4, IpAddr::V6(a)) => {
                IpAddr::V4(a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED))
            }
            _ => unreachable!(),
        };
        prop_assert_eq!(if swap_cp { d.cp_ip } else { d.ap_ip }, expected);
    }

    #[test]
    fn constructors_follow_the_echo_rules(
        v in prop_oneof![Just(IpVersion::V4), Just(IpVersion::V6)]
            .prop_flat_map(|v| (Just(v), socket_addr_of(v), socket_addr_of(v),
                                socket_addr_of(v), socket_addr_of(v))),
        handle in any::<u64>(),
        version in 0u8..4,
        pmtime in any::<u8>(),
    ) {
        let (ipv, local, mapped_local, remote, mapped_remote) = v;
        let req = PeerMessage::request(handle, local, mapped_local, remote);
        prop_assert_eq!(req.msg_type, PeerMsgType::Request);
        prop_assert_eq!((req.version, req.pmtime), (0, 0));
        prop_assert_eq!(req.ip_version, ipv);
        prop_assert_eq!(req.cp(), local);
        prop_assert_eq!(req.ap(), remote);
        prop_assert_eq!(req.mapped_cp(), Some(mapped_local));
        prop_assert_eq!(req.encode().len(), PEER_REQUEST_LEN);

        // Answers to a peer that set version and pmtime echo both.
        let req = PeerMessage { version, pmtime, ..req };
        let accept = PeerMessage::accept_for(&req, mapped_remote);
        prop_assert_eq!(accept.msg_type, PeerMsgType::Accept);
        prop_assert_eq!((accept.version, accept.pmtime), (version, pmtime));
        prop_assert_eq!(accept.ip_version, ipv);
        prop_assert_eq!(accept.assoc_handle, handle);
        prop_assert_eq!(accept.cp(), local);
        prop_assert_eq!(accept.ap(), mapped_remote);
        prop_assert_eq!((accept.reserved_port, accept.mapped_cp_ip), (0, None));
        prop_assert_eq!(accept.encode().len(), PEER_SHORT_LEN);

        let ack = PeerMessage::ack_for(&accept);
        prop_assert_eq!(ack, PeerMessage { msg_type: PeerMsgType::Ack, ..accept });

        let reject = PeerMessage::reject_for(&req);
        prop_assert_eq!(reject.msg_type, PeerMsgType::Reject);
        prop_assert_eq!((reject.version, reject.pmtime), (version, pmtime));
        prop_assert_eq!(reject.cp(), local);
        prop_assert_eq!(reject.ap(), remote);
        prop_assert_eq!((reject.reserved_port, reject.mapped_cp_ip), (0, None));
        prop_assert_eq!(reject.assoc_handle, handle);
    }
}
