//! The iwpmd-rs extension block: 32 bytes after the full 64-byte form of a peer message.
//!
//! An IPv6 message has no unused address bytes, so an echo cookie needs room of its own.
//! Only iwpmd-rs daemons send the block; rdma-core receives into a 64-byte buffer, so the
//! kernel cuts an extended datagram to its first 64 bytes there and the block is never seen.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 64 | 4 | magic [`EXT_MAGIC`] (`IWRS`) |
//! | 68 | 1 | version [`EXT_VERSION`] (1) |
//! | 69 | 1 | flags: bit 0 [`PeerExtension::CAN_ECHO`]; other bits sent 0, ignored on read |
//! | 70 | 2 | reserved: sent 0, ignored on read |
//! | 72 | 24 | cookie ([`IPV4_ECHO_LEN`] bytes; zeros in a REQUEST; opaque to the codec) |
//!
//! Flags: [`PeerMessage::encode_with_extension`] masks them to
//! [`PeerExtension::KNOWN_FLAGS`] (so a caller cannot send a bit a later version would give a
//! meaning), and [`peer_extension`] hands them over as received (unknown bits are visible,
//! but [`PeerExtension::can_echo`] looks at bit 0 only).
//!
//! ```
//! use iwpm_proto::peer::{peer_extension, PeerExtension, PeerMessage, PEER_EXTENDED_LEN};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let req = PeerMessage::request(
//!     7,
//!     "[fd00::1]:5000".parse()?,
//!     "[fd00::1]:41234".parse()?,
//!     "[fd00::2]:4000".parse()?,
//! );
//! let offer = PeerExtension { flags: PeerExtension::CAN_ECHO, cookie: [0; 24] };
//! let datagram = req.encode_with_extension(&offer);
//! assert_eq!(datagram.len(), PEER_EXTENDED_LEN);
//! assert_eq!(PeerMessage::decode(&datagram)?, req); // a REQUEST keeps its mapped cp IP
//! assert!(peer_extension(&datagram).is_some_and(|e| e.can_echo()));
//! // What rdma-core reads: the first 64 bytes, the same REQUEST, no block.
//! assert_eq!(PeerMessage::decode(&datagram[..64])?, req);
//! assert_eq!(peer_extension(&datagram[..64]), None);
//! # Ok(())
//! # }
//! ```

use super::{PeerError, PeerMessage, IPV4_ECHO_LEN, PEER_REQUEST_LEN};

/// Length of the extension block.
pub const PEER_EXT_LEN: usize = 32;
/// Length of an extended datagram: the 64-byte form, then the block.
pub const PEER_EXTENDED_LEN: usize = PEER_REQUEST_LEN + PEER_EXT_LEN;
/// First 4 bytes of the block.
pub const EXT_MAGIC: [u8; 4] = *b"IWRS";
/// The block version this codec reads and writes.
pub const EXT_VERSION: u8 = 1;

const MAGIC_LEN: usize = EXT_MAGIC.len();
const VERSION_AT: usize = MAGIC_LEN;
const FLAGS_AT: usize = VERSION_AT + 1;
const COOKIE_AT: usize = 8;

/// The extension block of an extended datagram, as [`peer_extension`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerExtension {
    /// Flag bits (see [`PeerExtension::CAN_ECHO`]).
    pub flags: u8,
    /// Zeros in a REQUEST; in an answer, what the answering side's core put there.
    pub cookie: [u8; IPV4_ECHO_LEN],
}

impl PeerExtension {
    /// Flag bit 0: the sender's active side echoes an extension cookie into its ACK.
    pub const CAN_ECHO: u8 = 1;
    /// Every flag bit version 1 defines; the others are sent as 0.
    pub const KNOWN_FLAGS: u8 = Self::CAN_ECHO;

    /// True when the sender set [`PeerExtension::CAN_ECHO`] (other bits are ignored).
    pub fn can_echo(&self) -> bool {
        self.flags & Self::CAN_ECHO != 0
    }

    /// The block on the wire; unknown flag bits and the reserved bytes are zero.
    pub(super) fn to_bytes(self) -> [u8; PEER_EXT_LEN] {
        let mut b = [0u8; PEER_EXT_LEN];
        b[..MAGIC_LEN].copy_from_slice(&EXT_MAGIC);
        b[VERSION_AT] = EXT_VERSION;
        b[FLAGS_AT] = self.flags & Self::KNOWN_FLAGS;
        b[COOKIE_AT..].copy_from_slice(&self.cookie);
        b
    }
}

/// The block of a datagram: `Some` only for a [`PEER_EXTENDED_LEN`]-byte datagram whose block
/// carries [`EXT_MAGIC`] and [`EXT_VERSION`], whatever the rest of the datagram holds (like
/// [`super::ipv4_echo`], meaningful only for a datagram [`PeerMessage::decode`] accepted).
pub fn peer_extension(datagram: &[u8]) -> Option<PeerExtension> {
    if datagram.len() != PEER_EXTENDED_LEN {
        return None;
    }
    read_block(&datagram[PEER_REQUEST_LEN..]).ok()
}

/// Reads a [`PEER_EXT_LEN`]-byte block; a wrong magic or version is
/// [`PeerError::BadExtension`], naming both.
pub(super) fn read_block(block: &[u8]) -> Result<PeerExtension, PeerError> {
    let mut magic = [0u8; MAGIC_LEN];
    magic.copy_from_slice(&block[..MAGIC_LEN]);
    let version = block[VERSION_AT];
    if magic != EXT_MAGIC || version != EXT_VERSION {
        return Err(PeerError::BadExtension { magic, version });
    }
    let mut cookie = [0u8; IPV4_ECHO_LEN];
    cookie.copy_from_slice(&block[COOKIE_AT..PEER_EXT_LEN]);
    Ok(PeerExtension {
        flags: block[FLAGS_AT],
        cookie,
    })
}

impl PeerMessage {
    /// The extended form, always [`PEER_EXTENDED_LEN`] bytes: the 64-byte form (bytes 48..64
    /// carry `mapped_cp_ip` when `Some`, else zeros, whatever the type), then `ext`'s block
    /// with its flags masked to [`PeerExtension::KNOWN_FLAGS`]. Any family: IPv4 works too,
    /// with its unused address bytes zero.
    ///
    /// [`PeerMessage::decode`] of the result gives `self` with `mapped_cp_ip` made `Some`
    /// (the unspecified address of `ip_version` when it was `None`), for a consistent message.
    pub fn encode_with_extension(&self, ext: &PeerExtension) -> Vec<u8> {
        let mut b = self.encode();
        b.resize(PEER_REQUEST_LEN, 0);
        b.extend_from_slice(&ext.to_bytes());
        b
    }
}
