//! The small address pools the ops index into (modulo their size, so that operations
//! collide often), and the driver's failure report.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use iwpm_core::PeerSocket;
use iwpm_proto::consts::{RDMA_NL_IWCM, RDMA_NL_RSVD};
use iwpm_proto::sockaddr::SockAddrStorage;

pub(super) const LOCAL_IPS: [IpAddr; 6] = [
    IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
];
const LOCAL_PORTS: [u16; 3] = [4000, 4001, 40_000];
const LOCAL_POOL: u8 = 20;
/// First port the model shell grants for port-0 reservations.
pub(super) const GRANT_BASE: u16 = 40_000;
/// Ports the model shell grants for port-0 reservations (per family).
pub(super) const GRANT_PORTS: u16 = 8;

/// Local address number `i`: 18 IP endpoints, a non-IP family, and an IPv4 endpoint with
/// non-zero padding bytes (same endpoint as `10.0.0.1:4000`, other bytes).
pub(super) fn local_addr(i: u8) -> SockAddrStorage {
    match i % LOCAL_POOL {
        18 => {
            let mut s = SockAddrStorage::default();
            s.0[0..2].copy_from_slice(&1u16.to_ne_bytes());
            s.0[2] = 0x0f;
            s
        }
        19 => {
            let mut s = SockAddrStorage::from_socket_addr(SocketAddr::new(LOCAL_IPS[1], 4000));
            s.0[8] = 0xaa;
            s.0[127] = 0x55;
            s
        }
        n => SockAddrStorage::from_socket_addr(SocketAddr::new(
            LOCAL_IPS[usize::from(n / 3)],
            LOCAL_PORTS[usize::from(n % 3)],
        )),
    }
}

pub(super) fn remote_addr(i: u8) -> SockAddrStorage {
    let sa = |s: &str| SockAddrStorage::from_socket_addr(s.parse().unwrap_or(PEER_V4));
    match i % 6 {
        0 => sa("10.0.0.9:4000"),
        1 => sa("10.0.0.1:4001"),
        2 => sa("[2001:db8::9]:4000"),
        3 => sa("0.0.0.0:4000"),
        4 => sa("[2001:db8::1]:4000"),
        _ => SockAddrStorage::default(),
    }
}

const PEER_V4: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 3935);

pub(super) fn peer_source(i: u8) -> SocketAddr {
    let ips = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0009)),
    ];
    let port = [3935, 33_333][usize::from((i >> 2) & 1)];
    SocketAddr::new(ips[usize::from(i % 4)], port)
}

pub(super) fn peer_ip(i: u8, v6: bool) -> IpAddr {
    if v6 {
        [
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
        ][usize::from(i % 4)]
    } else {
        [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ][usize::from(i % 4)]
    }
}

pub(super) fn client_of(c: u8) -> u8 {
    [RDMA_NL_IWCM, RDMA_NL_IWCM, RDMA_NL_RSVD, 9][usize::from(c % 4)]
}

pub(super) fn listener_for(a: &SocketAddr) -> PeerSocket {
    if a.is_ipv4() {
        PeerSocket::V4Listener
    } else {
        PeerSocket::V6Listener
    }
}

pub(super) fn socket_is_v4(s: PeerSocket) -> bool {
    matches!(s, PeerSocket::V4Listener | PeerSocket::V4Client)
}

/// Reports a violation: the fuzz target's crash, the stable tests' failure.
pub(super) fn fail(what: impl std::fmt::Display) -> ! {
    panic!("core_sequence: {what}")
}
