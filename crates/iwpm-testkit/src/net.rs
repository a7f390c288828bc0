//! Ports for tests: free ones to hand a daemon, and whether one is taken.
//!
//! A port handed out here comes from below the kernel's ephemeral range
//! (`ip_local_port_range`), so no socket bound to port 0 and no auto-bound sender, in
//! this process or any other, can take it between the check and the daemon's bind. Each
//! call starts its scan at a different place (process id, clock and a counter), so that
//! test binaries running at the same time rarely try the same port.
//!
//! One holder remains that no choice of port avoids: a child forked by another thread of
//! the same test binary holds our probe sockets until its exec. A test that binds the
//! port the instant it gets it, while neighbours spawn, can find it taken for that
//! moment; daemons bind theirs only after starting up, well past it.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports below this are left alone: well-known services and the iwpm port (3935) live there.
const LOWEST: u16 = 10_000;

/// A UDP port that was free on 127.0.0.1 and 127.0.0.2 a moment ago (a pair of loopback
/// daemons can share it).
pub fn free_udp_port() -> u16 {
    free_udp_port_on(&[Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)])
}

/// A UDP port free on every address in `ips` (at least one) a moment ago, from outside
/// the ephemeral range when there is room below it.
pub fn free_udp_port_on(ips: &[Ipv4Addr]) -> u16 {
    let (span_start, span_len) = match ephemeral_low() {
        Some(low) if low > LOWEST + 100 => (LOWEST, low - LOWEST),
        _ => return free_ephemeral_udp_port_on(ips),
    };
    let start = scan_start() % u32::from(span_len);
    for step in 0..u32::from(span_len) {
        let offset = (start + step) % u32::from(span_len);
        let port = span_start + offset as u16;
        // (held together, so the check is of all the addresses at once)
        let held: Result<Vec<UdpSocket>, _> =
            ips.iter().map(|ip| UdpSocket::bind((*ip, port))).collect();
        if held.is_ok() {
            return port;
        }
    }
    panic!("no common free UDP port on {ips:?} below the ephemeral range");
}

/// The fallback where the ephemeral range starts too low to leave room below it.
fn free_ephemeral_udp_port_on(ips: &[Ipv4Addr]) -> u16 {
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

/// The first port of the kernel's ephemeral range, if it can be read.
pub fn ephemeral_low() -> Option<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Where a scan starts: different per process, per call and over time.
fn scan_start() -> u32 {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let calls = CALLS.fetch_add(1, Ordering::Relaxed);
    // (a multiplicative hash spreads neighbouring inputs over the span)
    (std::process::id() ^ nanos ^ calls.wrapping_mul(7919)).wrapping_mul(2_654_435_761) >> 8
}

/// True if a TCP socket can bind `addr` right now.
pub fn tcp_port_free(addr: SocketAddr) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}
