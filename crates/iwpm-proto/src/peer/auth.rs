//! The authenticated form of a peer datagram: extension version 2, which our daemons send to
//! each other when they share a fleet key ([`crate::fleet_key`]).
//!
//! A sealed datagram is always [`PEER_AUTH_LEN`] (124) bytes: the 64-byte form of the
//! message, then a 60-byte block. rdma-core receives into a 64-byte buffer, so the kernel
//! cuts the block off there and rdma-core reads the plain message, as it does with the
//! version-1 block ([`super::PeerExtension`]).
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 64 | the message's 64-byte form (a 48-byte message padded with zeros) |
//! | 64 | 4 | magic [`super::EXT_MAGIC`] (`IWRS`) |
//! | 68 | 1 | version [`AUTH_VERSION`] (2) |
//! | 69 | 1 | flags of the inner version-1 block (bit 0 `CAN_ECHO`); 0 without one |
//! | 70 | 1 | inner form: 0 = 48 bytes, 1 = 64 bytes, 2 = 96 bytes (a version-1 block) |
//! | 71 | 1 | reserved: sent 0, ignored on read |
//! | 72 | 24 | cookie of the inner version-1 block; zeros without one |
//! | 96 | 4 | key id (big-endian) |
//! | 100 | 8 | stamp: microseconds since the Unix epoch (big-endian), unique per sender |
//! | 108 | 16 | MAC: the first 16 bytes of HMAC-SHA256(key, [`MAC_LABEL`] ‖ bytes 0..108) |
//!
//! The MAC covers every byte before it, so nothing in a sealed datagram can be changed,
//! stripped to a shorter form and still pass as sealed, or moved to another key id. The
//! label keeps the key from ever producing a MAC that means something elsewhere. The stamp
//! makes each sealed datagram unique (a sender never repeats one), which is what a
//! receiver's replay memory is keyed on; its clock window is the receiver's business.
//!
//! [`unseal`] gives back the inner datagram exactly as it was before [`seal`]: 48, 64 or 96
//! bytes. Whoever sealed it with a key we hold wrote it; the receiver handles it as it
//! handles the same datagram unsealed, minus the defences against spoofed sources.
//!
//! Why hand-written: the block is a fixed layout of five fields, and the MAC is RustCrypto's
//! `hmac` + `sha2`, never our own; the layout is fixed by the golden vectors in
//! `tests/it/peer_auth_vectors.rs`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::extension::{read_block, PeerExtension, EXT_MAGIC, PEER_EXTENDED_LEN};
use super::{PEER_REQUEST_LEN, PEER_SHORT_LEN};
use crate::fleet_key::FleetKey;

/// Length of a sealed datagram: the 64-byte form, then the 60-byte authentication block.
pub const PEER_AUTH_LEN: usize = 124;
/// The block version of a sealed datagram.
pub const AUTH_VERSION: u8 = 2;
/// Bytes of the MAC carried (HMAC-SHA256 cut to 128 bits).
pub const AUTH_MAC_LEN: usize = 16;
/// What every MAC input starts with.
pub const MAC_LABEL: &[u8] = b"iwpmd-rs peer datagram v2\0";

const BLOCK_AT: usize = PEER_REQUEST_LEN;
const VERSION_AT: usize = BLOCK_AT + 4;
const FLAGS_AT: usize = BLOCK_AT + 5;
const FORM_AT: usize = BLOCK_AT + 6;
const COOKIE_AT: usize = BLOCK_AT + 8;
const KEY_ID_AT: usize = BLOCK_AT + 32;
const STAMP_AT: usize = KEY_ID_AT + 4;
const MAC_AT: usize = STAMP_AT + 8;

const FORM_SHORT: u8 = 0;
const FORM_REQUEST: u8 = 1;
const FORM_EXTENDED: u8 = 2;

/// What a sealed datagram's block says, read without any key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AuthBlock {
    /// The key the sender says it signed with.
    pub key_id: u32,
    /// The sender's stamp (microseconds since the Unix epoch).
    pub stamp_us: u64,
    /// The MAC as received.
    pub mac: [u8; AUTH_MAC_LEN],
}

/// Why [`seal`] refused a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Only the 48-, 64- and 96-byte forms (the last with a version-1 block) are sealed.
    #[error("a {len}-byte datagram cannot be sealed (48, 64 or 96 bytes with a version-1 block)")]
    BadInner {
        /// Its length.
        len: usize,
    },
}

/// The block of a sealed datagram: `Some` only for a [`PEER_AUTH_LEN`]-byte datagram with
/// the magic, version [`AUTH_VERSION`] and a known inner form. Says nothing of the MAC.
pub fn auth_block(datagram: &[u8]) -> Option<AuthBlock> {
    if datagram.len() != PEER_AUTH_LEN
        || datagram[BLOCK_AT..VERSION_AT] != EXT_MAGIC
        || datagram[VERSION_AT] != AUTH_VERSION
        || datagram[FORM_AT] > FORM_EXTENDED
    {
        return None;
    }
    Some(AuthBlock {
        key_id: be_u32(&datagram[KEY_ID_AT..STAMP_AT]),
        stamp_us: be_u64(&datagram[STAMP_AT..MAC_AT]),
        mac: datagram[MAC_AT..].try_into().unwrap_or([0; AUTH_MAC_LEN]),
    })
}

/// The sealed form of `inner` (48, 64 or 96 bytes; see the module doc), signed with `key`
/// and stamped `stamp_us`.
pub fn seal(inner: &[u8], key: &FleetKey, stamp_us: u64) -> Result<Vec<u8>, SealError> {
    let (form, ext) = match inner.len() {
        PEER_SHORT_LEN => (FORM_SHORT, None),
        PEER_REQUEST_LEN => (FORM_REQUEST, None),
        PEER_EXTENDED_LEN => match read_block(&inner[PEER_REQUEST_LEN..]) {
            Ok(ext) => (FORM_EXTENDED, Some(ext)),
            Err(_) => return Err(SealError::BadInner { len: inner.len() }),
        },
        len => return Err(SealError::BadInner { len }),
    };
    let mut out = Vec::with_capacity(PEER_AUTH_LEN);
    out.extend_from_slice(&inner[..inner.len().min(PEER_REQUEST_LEN)]);
    out.resize(PEER_REQUEST_LEN, 0);
    out.extend_from_slice(&EXT_MAGIC);
    out.push(AUTH_VERSION);
    out.push(ext.map_or(0, |e| e.flags));
    out.push(form);
    out.push(0);
    out.extend_from_slice(&ext.map_or([0; 24], |e| e.cookie));
    out.extend_from_slice(&key.id().to_be_bytes());
    out.extend_from_slice(&stamp_us.to_be_bytes());
    let mac = mac_of(key, &out[..MAC_AT]);
    out.extend_from_slice(&mac);
    Ok(out)
}

/// True when `datagram` is sealed under `key`: the block names `key`'s id and the MAC is
/// right for its bytes (compared in constant time). The caller picks `key` by the block's
/// key id.
pub fn verify(datagram: &[u8], key: &FleetKey) -> bool {
    if auth_block(datagram).is_none_or(|b| b.key_id != key.id()) {
        return false;
    }
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.secret()) else {
        return false;
    };
    mac.update(MAC_LABEL);
    mac.update(&datagram[..MAC_AT]);
    mac.verify_truncated_left(&datagram[MAC_AT..]).is_ok()
}

/// The inner datagram of a sealed one, as it was before [`seal`] (whatever the MAC): `None`
/// when `datagram` is not sealed.
pub fn unseal(datagram: &[u8]) -> Option<Vec<u8>> {
    auth_block(datagram)?;
    let mut inner = datagram[..PEER_REQUEST_LEN].to_vec();
    match datagram[FORM_AT] {
        FORM_SHORT => inner.truncate(PEER_SHORT_LEN),
        FORM_REQUEST => {}
        _ => {
            let mut cookie = [0u8; 24];
            cookie.copy_from_slice(&datagram[COOKIE_AT..KEY_ID_AT]);
            let ext = PeerExtension {
                flags: datagram[FLAGS_AT],
                cookie,
            };
            let msg_len = inner.len();
            inner.extend_from_slice(&ext.to_bytes());
            debug_assert_eq!(msg_len + 32, PEER_EXTENDED_LEN);
        }
    }
    Some(inner)
}

fn mac_of(key: &FleetKey, signed: &[u8]) -> [u8; AUTH_MAC_LEN] {
    // (HMAC takes a key of any length; FleetKey holds 16 to 64 bytes.)
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.secret()) else {
        return [0; AUTH_MAC_LEN];
    };
    mac.update(MAC_LABEL);
    mac.update(signed);
    let full = mac.finalize().into_bytes();
    let mut out = [0u8; AUTH_MAC_LEN];
    out.copy_from_slice(&full[..AUTH_MAC_LEN]);
    out
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::PeerMessage;

    fn key(id: u32) -> FleetKey {
        FleetKey::new(id, vec![0x5a; 32], false).unwrap()
    }

    fn request() -> Vec<u8> {
        PeerMessage::request(
            7,
            "10.0.0.1:5000".parse().unwrap(),
            "10.0.0.1:41234".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        )
        .encode()
    }

    #[test]
    fn seal_then_unseal_gives_every_form_back() {
        let req = request();
        let short = req[..PEER_SHORT_LEN].to_vec();
        let ext = PeerMessage::decode(&req)
            .unwrap()
            .encode_with_extension(&PeerExtension {
                flags: PeerExtension::CAN_ECHO,
                cookie: [9; 24],
            });
        for inner in [req, short, ext] {
            let sealed = seal(&inner, &key(3), 1_700_000_000_000_000).unwrap();
            assert_eq!(sealed.len(), PEER_AUTH_LEN);
            assert!(verify(&sealed, &key(3)));
            assert_eq!(unseal(&sealed).as_deref(), Some(&inner[..]));
            let block = auth_block(&sealed).unwrap();
            assert_eq!((block.key_id, block.stamp_us), (3, 1_700_000_000_000_000));
            // What rdma-core reads: the first 64 bytes, the plain message.
            // (a 48-byte inner message reads with its zero padding as the mapped address)
            let plain = PeerMessage::decode(&sealed[..PEER_REQUEST_LEN]).unwrap();
            let inner_msg = PeerMessage::decode(&inner[..PEER_REQUEST_LEN.min(inner.len())]);
            assert_eq!(
                PeerMessage {
                    mapped_cp_ip: None,
                    ..plain
                },
                PeerMessage {
                    mapped_cp_ip: None,
                    ..inner_msg.unwrap()
                }
            );
        }
    }

    #[test]
    fn every_changed_byte_fails_the_mac() {
        let sealed = seal(&request(), &key(1), 42).unwrap();
        for at in 0..PEER_AUTH_LEN {
            let mut bad = sealed.clone();
            bad[at] ^= 0x01;
            assert!(!verify(&bad, &key(1)), "byte {at}");
        }
        let other = FleetKey::new(1, vec![0x5b; 32], false).unwrap();
        assert!(!verify(&sealed, &other));
        assert!(!verify(&sealed[..PEER_REQUEST_LEN], &key(1)));
    }

    #[test]
    fn other_lengths_are_not_sealed() {
        assert_eq!(
            seal(&[0; 50], &key(1), 0),
            Err(SealError::BadInner { len: 50 })
        );
        let mut not_v1 = request();
        not_v1.extend_from_slice(&[0; 32]);
        assert_eq!(
            seal(&not_v1, &key(1), 0),
            Err(SealError::BadInner { len: 96 })
        );
        assert_eq!(auth_block(&[0; PEER_AUTH_LEN]), None);
        assert_eq!(unseal(&[0; PEER_AUTH_LEN - 1]), None);
    }
}
