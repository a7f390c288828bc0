//! Small values built once per kernel message, so handlers pass one name instead of its
//! parts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use iwpm_proto::consts::IWPM_UABI_VERSION_MIN;
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

/// A kernel request that expects one answer (reply or HANDLE_ERR) for its header seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// Kernel client index (the answer goes back to it).
    pub client: u8,
    /// Header seq of the request, echoed in the answer.
    pub seq: u32,
}

/// An address as the kernel sent it, kept byte for byte for echoing, and its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    /// All 128 bytes as received.
    pub raw: SockAddrStorage,
    /// The parsed IP and port.
    pub ep: Endpoint,
}

impl Addr {
    /// `None` for a non-IP family.
    pub(crate) fn parse(raw: SockAddrStorage) -> Option<Self> {
        raw.endpoint().map(|ep| Addr { raw, ep })
    }

    /// The wildcard address of this family with `port`: what reservations bind to (as C).
    pub(crate) fn wildcard_with_port(&self, port: u16) -> SocketAddr {
        match self.ep.ip {
            IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
        }
    }
}

/// The iwpm ABI version in use: it decides which attributes messages carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Abi(pub u16);

impl Abi {
    /// ABI 3 messages carry no FLAGS attribute; later ones do.
    pub(crate) fn has_flags(self) -> bool {
        self.0 > IWPM_UABI_VERSION_MIN
    }

    /// The FLAGS a message carried, or 0 where this ABI has none.
    pub(crate) fn flags(self, flags: Option<u32>) -> u32 {
        if self.has_flags() {
            flags.unwrap_or(0)
        } else {
            0
        }
    }
}

/// A QUERY_MAPPING being answered: the request and its two addresses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Query {
    /// The kernel request to answer.
    pub req: Request,
    /// The local (connecting) address.
    pub local: Addr,
    /// The remote (listening) address the peer REQUEST goes to.
    pub remote: Addr,
}
