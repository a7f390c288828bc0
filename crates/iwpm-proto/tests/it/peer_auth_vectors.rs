//! Golden vectors of the sealed (authenticated) peer datagram (`tests/vectors/peer/auth-*.hex`,
//! `docs/protocol.md` §6.14). They are written by `scripts/peer-auth-vectors.py` from the
//! documented layout with Python's `hmac`, an oracle independent of this codec: the codec
//! must produce them byte for byte, verify them, and give their inner datagram back.

use std::path::Path;

use iwpm_proto::fleet_key::FleetKey;
use iwpm_proto::peer::auth::{auth_block, seal, unseal, verify, AUTH_MAC_LEN};
use iwpm_proto::peer::{
    peer_extension, PeerMessage, PeerMsgType, PEER_AUTH_LEN, PEER_EXTENDED_LEN, PEER_REQUEST_LEN,
    PEER_SHORT_LEN,
};

fn vector(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors/peer")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(str::split_whitespace)
        .map(|pair| u8::from_str_radix(pair, 16).unwrap())
        .collect()
}

fn key1() -> FleetKey {
    FleetKey::new(1, (0x10..0x30).collect(), false).unwrap()
}

fn key7() -> FleetKey {
    FleetKey::new(7, b"fleet-key-seven!".to_vec(), false).unwrap()
}

/// Each vector: its key, its stamp, the inner form's length and type.
fn cases() -> [(&'static str, FleetKey, u64, usize, PeerMsgType); 3] {
    [
        (
            "auth-request-v4.hex",
            key1(),
            1_765_000_000_000_000,
            PEER_REQUEST_LEN,
            PeerMsgType::Request,
        ),
        (
            "auth-accept-v6.hex",
            key7(),
            1_765_000_000_123_456,
            PEER_EXTENDED_LEN,
            PeerMsgType::Accept,
        ),
        (
            "auth-ack-v4-short.hex",
            key1(),
            1_765_000_000_000_001,
            PEER_SHORT_LEN,
            PeerMsgType::Ack,
        ),
    ]
}

#[test]
fn the_codec_writes_and_reads_every_vector() {
    for (name, key, stamp, inner_len, ty) in cases() {
        let sealed = vector(name);
        assert_eq!(sealed.len(), PEER_AUTH_LEN, "{name}");
        let block = auth_block(&sealed).unwrap_or_else(|| panic!("{name}: no block"));
        assert_eq!((block.key_id, block.stamp_us), (key.id(), stamp), "{name}");
        assert!(verify(&sealed, &key), "{name}: MAC");
        let inner = unseal(&sealed).unwrap();
        assert_eq!(inner.len(), inner_len, "{name}");
        assert_eq!(seal(&inner, &key, stamp).unwrap(), sealed, "{name}: seal");
        let msg = PeerMessage::decode(&sealed).unwrap();
        assert_eq!(msg.msg_type, ty, "{name}");
        // rdma-core reads the first 64 bytes: the same message.
        let plain = PeerMessage::decode(&sealed[..PEER_REQUEST_LEN]).unwrap();
        assert_eq!(plain, msg, "{name}");
    }
}

#[test]
fn the_version_one_block_inside_comes_back() {
    let inner = unseal(&vector("auth-accept-v6.hex")).unwrap();
    let ext = peer_extension(&inner).unwrap();
    assert!(ext.can_echo());
    assert_eq!(ext.cookie.to_vec(), (0xa0..0xb8).collect::<Vec<u8>>());
}

#[test]
fn a_wrong_key_a_wrong_id_or_a_changed_stamp_fails() {
    let sealed = vector("auth-request-v4.hex");
    let same_bytes_other_id = FleetKey::new(2, (0x10..0x30).collect(), false).unwrap();
    assert!(!verify(&sealed, &same_bytes_other_id));
    assert!(!verify(
        &sealed,
        &FleetKey::new(1, b"fleet-key-seven!".to_vec(), false).unwrap()
    ));
    let mut restamped = sealed.clone();
    restamped[PEER_AUTH_LEN - AUTH_MAC_LEN - 1] ^= 1;
    assert!(!verify(&restamped, &key1()));
    let mut re_keyed = sealed.clone();
    re_keyed[99] = 7;
    assert!(!verify(&re_keyed, &key7()));
}
