//! The daemon-to-daemon protocol on UDP port 3935 ([`crate::consts::IWPM_PEER_PORT`]).
//!
//! One fixed layout, all integers big-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | bits 7-6 version, bits 5-4 [`PeerMsgType`], bits 3-0 [`IpVersion`] nibble |
//! | 1 | 1 | `pmtime` |
//! | 2 | 2 | `reserved_port`: in a REQUEST, the connecting side's *mapped* TCP port |
//! | 4 | 2 | `ap_port`: accepting (passive) side's TCP port |
//! | 6 | 2 | `cp_port`: connecting (active) side's TCP port |
//! | 8 | 8 | `assoc_handle` |
//! | 16 | 16 | `cp_ip` |
//! | 32 | 16 | `ap_ip` |
//! | 48 | 16 | `mapped_cp_ip` (64- and 96-byte forms) |
//! | 64 | 32 | iwpmd-rs extension block (96-byte form only, see [`PeerExtension`]) |
//! | 64 | 60 | iwpmd-rs authentication block (124-byte sealed form only, see [`auth`]) |
//!
//! | length | form | sent by |
//! |---|---|---|
//! | 48 ([`PEER_SHORT_LEN`]) | ACCEPT, ACK, REJECT (and pre-2014 REQUESTs) | everyone |
//! | 64 ([`PEER_REQUEST_LEN`]) | REQUEST | everyone |
//! | 96 ([`PEER_EXTENDED_LEN`]) | any type, 64-byte form + extension block | iwpmd-rs only ([`PeerMessage::encode_with_extension`]) |
//! | 124 ([`PEER_AUTH_LEN`]) | any type, sealed: 64-byte form + authentication block | iwpmd-rs daemons with a fleet key ([`auth::seal`]) |
//!
//! An IPv4 address fills the first 4 bytes of its 16-byte field.
//!
//! The codec is written by hand rather than derived: the layout depends on the IP nibble
//! (4 or 16 address bytes), the length decides which fields exist, and bytes a field does
//! not use must be read past and written as zeros, byte for byte as the golden vectors fix.
//!
//! # Where we differ from the C daemon, on purpose
//!
//! * **Encoding never leaks.** The C daemon writes only 4 bytes of each IPv4 field and leaves
//!   uninitialised stack bytes (and a heap pointer) in the other 12; its answers echo them.
//!   [`PeerMessage::encode`] zeroes every byte it does not use. Receivers ignore those bytes,
//!   so this is invisible to C peers.
//! * **Decoding reads only meaningful bytes.** For IPv4 only the first 4 bytes of each address
//!   field are read, as the C daemon does, so garbage from a C peer is accepted and dropped.
//!   Consequently `encode(decode(b)) == b` holds only for *canonical* input (padding zero);
//!   for any input, `encode(decode(b))` equals `b` with the IPv4 padding zeroed.
//! * **Oversize datagrams are rejected, but for the extended form.** The C daemon receives
//!   into a 64-byte buffer, so a longer datagram is truncated by the kernel and accepted as
//!   its first 64 bytes (which is why a C peer never sees our extension block). We accept
//!   48, 64, 96 and 124 bytes; a 96-byte datagram must carry a version-1 extension block
//!   and a 124-byte one a version-2 authentication block ([`PeerError::BadExtension`]
//!   otherwise), and every other length is
//!   [`PeerError::BadLength`]. To see oversize datagrams at all, the IO layer must receive
//!   into a buffer of more than 124 bytes.
//!
//! Kept from the C daemon: nothing but the length and the IP nibble (and, for 96 bytes, the
//! extension block's magic and version) is validated (not the version bits, not the type
//! against the length); a 48-byte REQUEST (sent by pre-2014 peers) is accepted with
//! `mapped_cp_ip == None`.
//!
//! # Use
//!
//! ```
//! use iwpm_proto::peer::{PeerMessage, PeerMsgType};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Active side: the kernel asked to connect 10.0.0.1:5000 (mapped to :41234) to
//! // 10.0.0.2:4000. The handle is any value unique among our outstanding requests.
//! let req = PeerMessage::request(
//!     7,
//!     "10.0.0.1:5000".parse()?,
//!     "10.0.0.1:41234".parse()?,
//!     "10.0.0.2:4000".parse()?,
//! );
//! let datagram = req.encode(); // 64 bytes, to the remote's port 3935
//!
//! // Passive side: its listener 4000 is mapped to 40123.
//! let got = PeerMessage::decode(&datagram)?;
//! assert_eq!(got.mapped_cp(), Some("10.0.0.1:41234".parse()?)); // REMOTE_INFO's mapped remote
//! let accept = PeerMessage::accept_for(&got, "10.0.0.2:40123".parse()?);
//!
//! // Active side again: the ACCEPT carries the mapped remote; answer with an ACK.
//! let accept = PeerMessage::decode(&accept.encode())?;
//! assert_eq!(accept.msg_type, PeerMsgType::Accept);
//! assert_eq!(accept.ap(), "10.0.0.2:40123".parse()?);
//! let ack = PeerMessage::ack_for(&accept);
//! assert_eq!(ack.encode().len(), 48);
//! # Ok(())
//! # }
//! ```
//!
//! # The 64-byte field outside REQUEST
//!
//! `mapped_cp_ip` is `Some` exactly when the datagram was 64 or 96 bytes long, whatever its
//! type, so that decoding is lossless (`decode(encode(m)) == m` for every message; the
//! extended form always carries the field, see [`PeerMessage::encode_with_extension`]).
//! The C daemon reads the field only in REQUESTs; so should callers. For a 48-byte REQUEST the C daemon
//! reads its mapped address from uninitialised memory; what to use instead is the caller's
//! choice (`cp()` with `reserved_port` is the natural stand-in).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub mod auth;
mod extension;

pub use auth::{AUTH_VERSION, PEER_AUTH_LEN};
pub use extension::{
    peer_extension, PeerExtension, EXT_MAGIC, EXT_VERSION, PEER_EXTENDED_LEN, PEER_EXT_LEN,
};

/// Length of a REQUEST on the wire (with the mapped address field).
pub const PEER_REQUEST_LEN: usize = 64;
/// Length of ACCEPT, ACK and REJECT on the wire (and of pre-2014 REQUESTs).
pub const PEER_SHORT_LEN: usize = 48;

/// Bytes an IPv4 message carries in no field: the last 12 of the `cp_ip` field (offsets
/// 20..32) then the last 12 of the `ap_ip` field (36..48). rdma-core copies both 16-byte
/// fields whole into an answer, so whatever a REQUEST or an ACCEPT carries there comes back
/// in the REJECT, ACCEPT or ACK built from it (see [`ipv4_echo`],
/// [`PeerMessage::encode_with_echo`]).
pub const IPV4_ECHO_LEN: usize = 24;

/// The [`IPV4_ECHO_LEN`] unused bytes of an IPv4 message, in wire order.
pub type Ipv4Echo = [u8; IPV4_ECHO_LEN];

const ADDR_FIELD_LEN: usize = 16;
const IPV4_LEN: usize = 4;
const CP_IP_OFFSET: usize = 16;
const AP_IP_OFFSET: usize = 32;
const MAPPED_CP_IP_OFFSET: usize = 48;

/// Message type, bits 5-4 of byte 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerMsgType {
    /// 0: active side asks for the passive side's mapping.
    Request,
    /// 1: passive side answers with its mapped address.
    Accept,
    /// 2: active side confirms an ACCEPT (stops its retransmission).
    Ack,
    /// 3: passive side has no mapping for the requested address.
    Reject,
}

impl PeerMsgType {
    /// The 2-bit code on the wire.
    pub fn code(self) -> u8 {
        match self {
            PeerMsgType::Request => 0,
            PeerMsgType::Accept => 1,
            PeerMsgType::Ack => 2,
            PeerMsgType::Reject => 3,
        }
    }

    /// Type from its 2-bit code; only the low 2 bits of `code` are looked at, so every byte
    /// maps to a type (the field cannot be invalid).
    pub fn from_code(code: u8) -> PeerMsgType {
        match code & 0b11 {
            0 => PeerMsgType::Request,
            1 => PeerMsgType::Accept,
            2 => PeerMsgType::Ack,
            _ => PeerMsgType::Reject,
        }
    }
}

impl fmt::Display for PeerMsgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeerMsgType::Request => "REQUEST",
            PeerMsgType::Accept => "ACCEPT",
            PeerMsgType::Ack => "ACK",
            PeerMsgType::Reject => "REJECT",
        })
    }
}

/// Address family of the message, bits 3-0 of byte 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// Nibble 4: addresses are the first 4 bytes of each 16-byte field.
    V4,
    /// Nibble 6: addresses fill the 16-byte fields.
    V6,
}

impl IpVersion {
    /// The nibble on the wire (4 or 6).
    pub fn nibble(self) -> u8 {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 6,
        }
    }

    /// Version from its nibble; `None` for anything but 4 and 6.
    pub fn from_nibble(nibble: u8) -> Option<IpVersion> {
        match nibble {
            4 => Some(IpVersion::V4),
            6 => Some(IpVersion::V6),
            _ => None,
        }
    }

    /// The family of an address.
    pub fn of(ip: IpAddr) -> IpVersion {
        match ip {
            IpAddr::V4(_) => IpVersion::V4,
            IpAddr::V6(_) => IpVersion::V6,
        }
    }
}

/// Why a datagram is not a peer message. The C daemon also drops (with a WARNING) a bad IP
/// nibble and every length below 64 but 48; a longer datagram it truncates to its first 64
/// bytes and reads, so it never rejects one for its length or its extension block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PeerError {
    /// The datagram is not 48, 64, 96 or 124 bytes long (longer ones included, unlike C).
    #[error(
        "peer message of {len} bytes (expected {PEER_SHORT_LEN}, {PEER_REQUEST_LEN}, {PEER_EXTENDED_LEN} or {PEER_AUTH_LEN})"
    )]
    BadLength {
        /// Length of the datagram.
        len: usize,
    },
    /// The IP-version nibble of byte 0 is neither 4 nor 6.
    #[error("peer message with invalid IP version nibble {nibble}")]
    BadIpVersion {
        /// Low nibble of byte 0.
        nibble: u8,
    },
    /// A 96-byte datagram whose last 32 bytes are not a version-1 extension block: the
    /// length is ours, the block is not (a later version, or a stranger).
    #[error(
        "{PEER_EXTENDED_LEN}-byte peer message without an extension block v{EXT_VERSION} \
         (magic {magic:02x?}, version {version})"
    )]
    BadExtension {
        /// Bytes 64..68 (expected [`EXT_MAGIC`]).
        magic: [u8; 4],
        /// Byte 68 (expected [`EXT_VERSION`]).
        version: u8,
    },
}

/// One peer message, decoded.
///
/// Addresses are plain [`IpAddr`]s; the wire carries no IPv6 flow info or scope id. A message
/// is *consistent* ([`PeerMessage::is_consistent`]) when every address is of the family named
/// by `ip_version`; decoding only yields consistent messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerMessage {
    /// Protocol version, bits 7-6 of byte 0: sent as 0, echoed in answers, never checked.
    pub version: u8,
    /// Message type.
    pub msg_type: PeerMsgType,
    /// Address family of every address in the message.
    pub ip_version: IpVersion,
    /// Echoed in answers, never interpreted (0 in a REQUEST we originate).
    pub pmtime: u8,
    /// REQUEST: the connecting side's mapped TCP port; otherwise 0.
    pub reserved_port: u16,
    /// Accepting (passive) side's TCP port.
    pub ap_port: u16,
    /// Connecting (active) side's TCP port.
    pub cp_port: u16,
    /// Chosen by the active side, echoed by the passive side.
    pub assoc_handle: u64,
    /// Connecting side's IP (unmapped).
    pub cp_ip: IpAddr,
    /// Accepting side's IP (unmapped in REQUEST/REJECT, mapped in ACCEPT/ACK).
    pub ap_ip: IpAddr,
    /// Connecting side's mapped IP: `Some` iff the message is (or was received as) 64 bytes,
    /// or 96 with the extension block.
    pub mapped_cp_ip: Option<IpAddr>,
}

impl PeerMessage {
    /// Parses one datagram. Only the length (48, 64 or 96), for 96 bytes the extension
    /// block's magic and version, and the IP nibble (4 or 6) are checked, in that order.
    /// The block's flags and cookie are not part of the message: read them with
    /// [`peer_extension`].
    pub fn decode(bytes: &[u8]) -> Result<PeerMessage, PeerError> {
        let len = bytes.len();
        match len {
            PEER_SHORT_LEN | PEER_REQUEST_LEN => {}
            PEER_EXTENDED_LEN => {
                extension::read_block(&bytes[PEER_REQUEST_LEN..])?;
            }
            // The sealed form (`auth`): the message is its first 64 bytes; the block's
            // magic and version are checked here, its MAC by whoever holds the key.
            PEER_AUTH_LEN if auth::auth_block(bytes).is_some() => {}
            PEER_AUTH_LEN => {
                let mut magic = [0u8; 4];
                magic.copy_from_slice(&bytes[PEER_REQUEST_LEN..PEER_REQUEST_LEN + 4]);
                return Err(PeerError::BadExtension {
                    magic,
                    version: bytes[PEER_REQUEST_LEN + 4],
                });
            }
            _ => return Err(PeerError::BadLength { len }),
        }
        let magic = bytes[0];
        let nibble = magic & 0x0f;
        let ip_version =
            IpVersion::from_nibble(nibble).ok_or(PeerError::BadIpVersion { nibble })?;
        let be16 = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let mut handle = [0u8; 8];
        handle.copy_from_slice(&bytes[8..16]);
        let mapped_cp_ip = (len >= PEER_REQUEST_LEN)
            .then(|| read_ip(ip_version, &bytes[MAPPED_CP_IP_OFFSET..][..ADDR_FIELD_LEN]));
        Ok(PeerMessage {
            version: magic >> 6,
            msg_type: PeerMsgType::from_code(magic >> 4),
            ip_version,
            pmtime: bytes[1],
            reserved_port: be16(2),
            ap_port: be16(4),
            cp_port: be16(6),
            assoc_handle: u64::from_be_bytes(handle),
            cp_ip: read_ip(ip_version, &bytes[CP_IP_OFFSET..][..ADDR_FIELD_LEN]),
            ap_ip: read_ip(ip_version, &bytes[AP_IP_OFFSET..][..ADDR_FIELD_LEN]),
            mapped_cp_ip,
        })
    }

    /// Serialises the message: 64 bytes when `mapped_cp_ip` is `Some`, else 48. Every byte
    /// not carrying a field value is zero.
    ///
    /// Addresses are written in the family of `ip_version`. For an inconsistent message
    /// (see [`PeerMessage::is_consistent`]) an IPv4 address in a V6 message is written as
    /// `::ffff:a.b.c.d`, and an IPv6 address in a V4 message as its IPv4-mapped form when it
    /// has one, else `0.0.0.0`; only the high 2 bits of `version` are used.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        b[0] =
            ((self.version & 0b11) << 6) | (self.msg_type.code() << 4) | self.ip_version.nibble();
        b[1] = self.pmtime;
        b[2..4].copy_from_slice(&self.reserved_port.to_be_bytes());
        b[4..6].copy_from_slice(&self.ap_port.to_be_bytes());
        b[6..8].copy_from_slice(&self.cp_port.to_be_bytes());
        b[8..16].copy_from_slice(&self.assoc_handle.to_be_bytes());
        write_ip(
            self.ip_version,
            self.cp_ip,
            &mut b[CP_IP_OFFSET..][..ADDR_FIELD_LEN],
        );
        write_ip(
            self.ip_version,
            self.ap_ip,
            &mut b[AP_IP_OFFSET..][..ADDR_FIELD_LEN],
        );
        if let Some(ip) = self.mapped_cp_ip {
            write_ip(
                self.ip_version,
                ip,
                &mut b[MAPPED_CP_IP_OFFSET..][..ADDR_FIELD_LEN],
            );
        }
        b
    }

    /// [`PeerMessage::encode`], then `echo` written into the unused bytes of an IPv4
    /// message (an IPv6 message has none: `echo` is ignored). An answer that carries the
    /// bytes of the message it answers is what rdma-core sends, and what lets a passive
    /// side recognise its own ACCEPT in the ACK.
    pub fn encode_with_echo(&self, echo: &Ipv4Echo) -> Vec<u8> {
        let mut b = self.encode();
        if self.ip_version == IpVersion::V4 {
            let (cp_pad, ap_pad) = echo.split_at(ADDR_FIELD_LEN - IPV4_LEN);
            b[CP_IP_OFFSET + IPV4_LEN..AP_IP_OFFSET].copy_from_slice(cp_pad);
            b[AP_IP_OFFSET + IPV4_LEN..MAPPED_CP_IP_OFFSET].copy_from_slice(ap_pad);
        }
        b
    }

    /// Length [`PeerMessage::encode`] produces.
    pub fn encoded_len(&self) -> usize {
        if self.mapped_cp_ip.is_some() {
            PEER_REQUEST_LEN
        } else {
            PEER_SHORT_LEN
        }
    }

    /// True when every address is of the family `ip_version` names (and `version` fits in
    /// its 2 bits), i.e. when `decode(encode(self)) == self`.
    pub fn is_consistent(&self) -> bool {
        let fam = |ip: IpAddr| IpVersion::of(ip) == self.ip_version;
        self.version <= 0b11
            && fam(self.cp_ip)
            && fam(self.ap_ip)
            && self.mapped_cp_ip.is_none_or(fam)
    }

    /// Connecting side's address (`cp_ip`, `cp_port`).
    pub fn cp(&self) -> SocketAddr {
        SocketAddr::new(self.cp_ip, self.cp_port)
    }

    /// Accepting side's address (`ap_ip`, `ap_port`).
    pub fn ap(&self) -> SocketAddr {
        SocketAddr::new(self.ap_ip, self.ap_port)
    }

    /// Connecting side's mapped address (`mapped_cp_ip`, `reserved_port`); `None` for a
    /// 48-byte message. Meaningful only in a REQUEST.
    pub fn mapped_cp(&self) -> Option<SocketAddr> {
        self.mapped_cp_ip
            .map(|ip| SocketAddr::new(ip, self.reserved_port))
    }

    /// The REQUEST the active side sends for a QUERY: `local` is the connecting side's
    /// unmapped address (cp), `mapped_local` its mapped address (reserved port + mapped IP),
    /// `remote` the address the application targets (ap). Version and pmtime are 0. The
    /// family is `local`'s.
    pub fn request(
        handle: u64,
        local: SocketAddr,
        mapped_local: SocketAddr,
        remote: SocketAddr,
    ) -> PeerMessage {
        PeerMessage {
            version: 0,
            msg_type: PeerMsgType::Request,
            ip_version: IpVersion::of(local.ip()),
            pmtime: 0,
            reserved_port: mapped_local.port(),
            ap_port: remote.port(),
            cp_port: local.port(),
            assoc_handle: handle,
            cp_ip: local.ip(),
            ap_ip: remote.ip(),
            mapped_cp_ip: Some(mapped_local.ip()),
        }
    }

    /// The passive side's ACCEPT of `req`: echoes version, pmtime, family, handle and cp;
    /// ap becomes `mapped_ap`. The caller picks `mapped_ap` as the C daemon does: the
    /// mapping's mapped address, or for a wildcard listener the requested IP with the mapped
    /// port. 48 bytes, reserved port 0.
    pub fn accept_for(req: &PeerMessage, mapped_ap: SocketAddr) -> PeerMessage {
        PeerMessage {
            msg_type: PeerMsgType::Accept,
            ap_ip: mapped_ap.ip(),
            ap_port: mapped_ap.port(),
            ..req.answer_base()
        }
    }

    /// The passive side's REJECT of `req` (no mapping for its ap): echoes everything but the
    /// type; 48 bytes, reserved port 0.
    pub fn reject_for(req: &PeerMessage) -> PeerMessage {
        PeerMessage {
            msg_type: PeerMsgType::Reject,
            ..req.answer_base()
        }
    }

    /// The active side's ACK of `accept`: echoes everything but the type (so ap is the
    /// passive side's mapped address); 48 bytes, reserved port 0.
    pub fn ack_for(accept: &PeerMessage) -> PeerMessage {
        PeerMessage {
            msg_type: PeerMsgType::Ack,
            ..accept.answer_base()
        }
    }

    /// Fields every answer echoes; reserved port and mapped address are dropped because the
    /// C daemon writes them only when forming a REQUEST.
    fn answer_base(&self) -> PeerMessage {
        PeerMessage {
            reserved_port: 0,
            mapped_cp_ip: None,
            ..*self
        }
    }
}

/// The unused bytes of a datagram's IPv4 address fields (see [`IPV4_ECHO_LEN`]), whatever
/// its IP nibble says; zeros where the datagram is shorter than 48 bytes. Meaningful only
/// for an IPv4 message that [`PeerMessage::decode`] accepted.
pub fn ipv4_echo(datagram: &[u8]) -> Ipv4Echo {
    let mut echo = [0u8; IPV4_ECHO_LEN];
    if datagram.len() >= PEER_SHORT_LEN {
        let (cp_pad, ap_pad) = echo.split_at_mut(ADDR_FIELD_LEN - IPV4_LEN);
        cp_pad.copy_from_slice(&datagram[CP_IP_OFFSET + IPV4_LEN..AP_IP_OFFSET]);
        ap_pad.copy_from_slice(&datagram[AP_IP_OFFSET + IPV4_LEN..MAPPED_CP_IP_OFFSET]);
    }
    echo
}

fn read_ip(version: IpVersion, field: &[u8]) -> IpAddr {
    match version {
        IpVersion::V4 => IpAddr::V4(Ipv4Addr::new(field[0], field[1], field[2], field[3])),
        IpVersion::V6 => {
            const V6_LEN: usize = std::mem::size_of::<Ipv6Addr>();
            let mut octets = [0u8; V6_LEN];
            octets.copy_from_slice(&field[..V6_LEN]);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
    }
}

fn write_ip(version: IpVersion, ip: IpAddr, field: &mut [u8]) {
    match version {
        IpVersion::V4 => {
            let v4 = match ip {
                IpAddr::V4(a) => a,
                IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
            };
            field[..4].copy_from_slice(&v4.octets());
        }
        IpVersion::V6 => {
            let v6 = match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            field[..16].copy_from_slice(&v6.octets());
        }
    }
}
