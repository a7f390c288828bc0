//! A host's emulated TCP port space for unmapped addresses (what rdma_cm's bind does).
//!
//! These ports exist only inside the emulator. Mapped ports of port-mapped devices are
//! different: the real daemon reserves them with real sockets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;

use crate::cm::CmError;

/// Bound addresses (by port, so a bind checks only its own port: the lab holds 50k) and
/// the ephemeral port cursor.
#[derive(Debug)]
pub(crate) struct PortSpace {
    by_port: HashMap<u16, Vec<(SocketAddr, u64)>>,
    by_owner: HashMap<u64, Vec<SocketAddr>>,
    range: RangeInclusive<u16>,
    next: u16,
}

impl PortSpace {
    pub(crate) fn new(range: RangeInclusive<u16>) -> Self {
        let next = *range.start();
        PortSpace {
            by_port: HashMap::new(),
            by_owner: HashMap::new(),
            range,
            next,
        }
    }

    fn in_use(&self, addr: &SocketAddr) -> bool {
        self.by_port
            .get(&addr.port())
            .is_some_and(|v| v.iter().any(|(b, _)| conflicts(b, addr)))
    }

    fn add(&mut self, addr: SocketAddr, owner: u64) {
        self.by_port
            .entry(addr.port())
            .or_default()
            .push((addr, owner));
        self.by_owner.entry(owner).or_default().push(addr);
    }

    /// Binds `addr` for `owner`; port 0 picks a free ephemeral port.
    pub(crate) fn bind(&mut self, addr: SocketAddr, owner: u64) -> Result<SocketAddr, CmError> {
        if addr.port() != 0 {
            if self.in_use(&addr) {
                return Err(CmError::AddrInUse(addr));
            }
            self.add(addr, owner);
            return Ok(addr);
        }
        let span = usize::from(self.range.end() - self.range.start()) + 1;
        for _ in 0..span {
            let port = self.next;
            self.next = if port >= *self.range.end() {
                *self.range.start()
            } else {
                port + 1
            };
            let candidate = SocketAddr::new(addr.ip(), port);
            if !self.in_use(&candidate) {
                self.add(candidate, owner);
                return Ok(candidate);
            }
        }
        Err(CmError::NoPorts)
    }

    /// Releases everything `owner` bound.
    pub(crate) fn release(&mut self, owner: u64) {
        for addr in self.by_owner.remove(&owner).unwrap_or_default() {
            if let Some(v) = self.by_port.get_mut(&addr.port()) {
                v.retain(|(_, o)| *o != owner);
                if v.is_empty() {
                    self.by_port.remove(&addr.port());
                }
            }
        }
    }
}

/// Same port and family, and the same IP or either one a wildcard.
fn conflicts(a: &SocketAddr, b: &SocketAddr) -> bool {
    a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn wildcard_conflicts_and_ephemeral_skips_used() {
        let mut p = PortSpace::new(20000..=20002);
        p.bind(a("0.0.0.0:20000"), 1).unwrap();
        assert_eq!(
            p.bind(a("127.0.0.1:20000"), 2),
            Err(CmError::AddrInUse(a("127.0.0.1:20000")))
        );
        assert!(p.bind(a("[::1]:20000"), 2).is_ok(), "other family");
        assert_eq!(p.bind(a("127.0.0.1:0"), 3).unwrap().port(), 20001);
        assert_eq!(p.bind(a("127.0.0.1:0"), 3).unwrap().port(), 20002);
        assert_eq!(p.bind(a("127.0.0.1:0"), 4), Err(CmError::NoPorts));
        p.release(3);
        assert_eq!(p.bind(a("127.0.0.1:0"), 4).unwrap().port(), 20001);
    }
}
