//! Ports for tests: free ones to hand a daemon, and whether one is taken.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

/// A UDP port that was free on 127.0.0.1 and 127.0.0.2 a moment ago (a pair of loopback
/// daemons can share it).
pub fn free_udp_port() -> u16 {
    free_udp_port_on(&[Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)])
}

/// A UDP port free on every address in `ips` (at least one) a moment ago.
pub fn free_udp_port_on(ips: &[Ipv4Addr]) -> u16 {
    for _ in 0..100 {
        let s = UdpSocket::bind((ips[0], 0)).unwrap();
        let port = s.local_addr().unwrap().port();
        if ips[1..]
            .iter()
            .all(|ip| UdpSocket::bind((*ip, port)).is_ok())
        {
            return port;
        }
    }
    panic!("no common free UDP port on {ips:?}");
}

/// True if a TCP socket can bind `addr` right now.
pub fn tcp_port_free(addr: SocketAddr) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}
