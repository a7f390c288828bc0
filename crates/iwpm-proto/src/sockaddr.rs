//! `struct sockaddr_storage` exactly as Linux lays it out inside iwpm address attributes.
//!
//! The kernel and the C daemon copy whole 128-byte blocks, so [`SockAddrStorage`] keeps all
//! 128 bytes (byte-exact echo and round trips) and offers typed views. Layout: `ss_family`
//! host-endian u16 at 0; `sin_port`/`sin6_port` big-endian at 2; IPv4 address at 4; IPv6
//! flowinfo at 4 (big-endian), address at 8, scope id at 24 (host-endian).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::consts::{AF_INET, AF_INET6, SOCKADDR_STORAGE_SIZE};

/// The raw 128 bytes of a `sockaddr_storage`, as carried in an address attribute.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockAddrStorage(pub [u8; SOCKADDR_STORAGE_SIZE]);

impl Default for SockAddrStorage {
    fn default() -> Self {
        SockAddrStorage([0; SOCKADDR_STORAGE_SIZE])
    }
}

/// The leading bytes of a `sockaddr_storage` that an IPv4 or IPv6 address uses (family,
/// port, flowinfo, address, scope id); the rest is padding.
pub const SOCKADDR_HEAD: usize = 28;

/// Typed view of the first [`SOCKADDR_HEAD`] bytes of a `sockaddr_storage` for IPv4/IPv6,
/// `None` for any other family: what [`SockAddrStorage::to_socket_addr`] reads, for callers
/// that keep only these bytes.
pub fn socket_addr_from_head(head: &[u8; SOCKADDR_HEAD]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes([head[2], head[3]]);
    match u16::from_ne_bytes([head[0], head[1]]) {
        AF_INET => {
            let ip: [u8; 4] = head[4..8].try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
        }
        AF_INET6 => {
            let flow = u32::from_be_bytes(head[4..8].try_into().ok()?);
            let ip: [u8; 16] = head[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(head[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flow,
                scope,
            )))
        }
        _ => None,
    }
}

impl SockAddrStorage {
    /// Builds the canonical (zero-filled) encoding of a socket address.
    pub fn from_socket_addr(addr: SocketAddr) -> Self {
        let mut b = [0u8; SOCKADDR_STORAGE_SIZE];
        match addr {
            SocketAddr::V4(a) => {
                b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
                b[2..4].copy_from_slice(&a.port().to_be_bytes());
                b[4..8].copy_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
                b[2..4].copy_from_slice(&a.port().to_be_bytes());
                b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
                b[8..24].copy_from_slice(&a.ip().octets());
                b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            }
        }
        SockAddrStorage(b)
    }

    /// Takes the first 128 bytes of an attribute payload; `None` if it is shorter.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let block: [u8; SOCKADDR_STORAGE_SIZE] =
            bytes.get(..SOCKADDR_STORAGE_SIZE)?.try_into().ok()?;
        Some(SockAddrStorage(block))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; SOCKADDR_STORAGE_SIZE] {
        &self.0
    }

    /// `ss_family` (host byte order).
    pub fn family(&self) -> u16 {
        u16::from_ne_bytes([self.0[0], self.0[1]])
    }

    /// The port (meaningful for IPv4 and IPv6 only).
    pub fn port(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }

    /// Typed view for IPv4/IPv6; `None` for any other family.
    pub fn to_socket_addr(&self) -> Option<SocketAddr> {
        socket_addr_from_head(self.0[..SOCKADDR_HEAD].try_into().ok()?)
    }

    /// The endpoint (IP and port) for IPv4/IPv6: the key the kernel compares on
    /// (`iwpm_compare_sockaddr` ignores flowinfo, scope id and padding).
    pub fn endpoint(&self) -> Option<Endpoint> {
        self.to_socket_addr().map(|a| Endpoint {
            ip: a.ip(),
            port: a.port(),
        })
    }

    /// Same family, IP and port (the kernel's `iwpm_compare_sockaddr`); false for other
    /// families.
    pub fn same_endpoint(&self, other: &SockAddrStorage) -> bool {
        match (self.endpoint(), other.endpoint()) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// A copy with the port replaced (all other bytes kept), as the C daemon builds mapped
    /// addresses.
    pub fn with_port(&self, port: u16) -> Self {
        let mut b = self.0;
        b[2..4].copy_from_slice(&port.to_be_bytes());
        SockAddrStorage(b)
    }
}

impl From<SocketAddr> for SockAddrStorage {
    fn from(addr: SocketAddr) -> Self {
        SockAddrStorage::from_socket_addr(addr)
    }
}

impl fmt::Debug for SockAddrStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_socket_addr() {
            Some(a) if self.is_canonical() => write!(f, "SockAddrStorage({a})"),
            Some(a) => write!(f, "SockAddrStorage({a}, non-canonical padding)"),
            None => write!(f, "SockAddrStorage(family {})", self.family()),
        }
    }
}

impl SockAddrStorage {
    /// True when the bytes equal the zero-filled encoding of their typed view.
    pub fn is_canonical(&self) -> bool {
        self.to_socket_addr()
            .is_some_and(|a| SockAddrStorage::from_socket_addr(a) == *self)
    }
}

/// An IP address and port: the identity of a mapping (what the kernel compares).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// IP address (the family is part of it).
    pub ip: IpAddr,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// True for 0.0.0.0 and `::` (a wildcard listener).
    pub fn is_wildcard(&self) -> bool {
        self.ip.is_unspecified()
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Self {
        Endpoint {
            ip: a.ip(),
            port: a.port(),
        }
    }
}

impl From<Endpoint> for SocketAddr {
    fn from(ep: Endpoint) -> Self {
        SocketAddr::new(ep.ip, ep.port)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        SocketAddr::from(*self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_layout() {
        let s = SockAddrStorage::from_socket_addr("192.0.2.10:20000".parse().unwrap());
        assert_eq!(&s.0[..8], &[2, 0, 0x4e, 0x20, 192, 0, 2, 10]);
        assert!(s.0[8..].iter().all(|&b| b == 0));
        assert_eq!(s.endpoint().unwrap().to_string(), "192.0.2.10:20000");
    }

    #[test]
    fn ipv6_layout() {
        let a: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
        let s = SockAddrStorage::from_socket_addr(a);
        assert_eq!(&s.0[..4], &[10, 0, 0x0f, 0xa0]);
        assert_eq!(s.0[8], 0x20);
        assert_eq!(s.to_socket_addr(), Some(a));
        assert!(s.is_canonical());
    }

    #[test]
    fn other_family_has_no_view() {
        let mut b = [0u8; 128];
        b[0] = 1;
        let s = SockAddrStorage(b);
        assert_eq!(s.to_socket_addr(), None);
        assert!(!s.same_endpoint(&s));
    }

    #[test]
    fn endpoint_and_socket_addr_convert_both_ways() {
        for text in ["192.0.2.10:20000", "[2001:db8::1]:4000", "0.0.0.0:0"] {
            let a: SocketAddr = text.parse().unwrap();
            let ep = Endpoint::from(a);
            assert_eq!((ep.ip, ep.port), (a.ip(), a.port()));
            assert_eq!(SocketAddr::from(ep), a);
        }
    }
}
