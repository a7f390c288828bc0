//! One daemon's TCP port reservations, as the operating system would grant them: the
//! [`PortReservations`] the simulator lends to a core.
//!
//! It also keeps the ledger the invariants need: a release of a reservation that is not
//! held (twice, or never granted) and a bind on anything but a wildcard are recorded as
//! faults of the core, and [`FakePorts::held`] is compared with the core's mappings after
//! every step.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use iwpm_core::{PortReservations, ReservationId, ReserveError};

/// Mapped ports come from this range (the invariants attribute REMOTE_INFO entries by it).
pub const MAPPED_PORTS: std::ops::Range<u16> = 40_000..60_000;

/// Reservations of one daemon process (they all close when it dies).
#[derive(Debug, Default)]
pub struct FakePorts {
    last_id: u64,
    held: BTreeMap<ReservationId, SocketAddr>,
    /// Ports in use per family (v4 = true), for exact-port binds.
    taken: BTreeSet<(bool, u16)>,
    /// Where the next port-0 grant starts looking.
    cursor: u16,
    /// What the core did wrong with its reservations, in order.
    pub faults: Vec<String>,
    /// Reservations granted.
    pub granted: u64,
    /// Reservations released.
    pub released: u64,
}

impl FakePorts {
    /// A process with no reservation yet; `start` spreads the first port-0 grants.
    pub fn new(start: u16) -> Self {
        FakePorts {
            cursor: MAPPED_PORTS.start + start % (MAPPED_PORTS.end - MAPPED_PORTS.start),
            ..FakePorts::default()
        }
    }

    /// Reservations held now, by id.
    pub fn held(&self) -> &BTreeMap<ReservationId, SocketAddr> {
        &self.held
    }

    fn free_port(&mut self, v4: bool) -> Option<u16> {
        let span = MAPPED_PORTS.end - MAPPED_PORTS.start;
        for _ in 0..span {
            let p = self.cursor;
            self.cursor = if p + 1 >= MAPPED_PORTS.end {
                MAPPED_PORTS.start
            } else {
                p + 1
            };
            if !self.taken.contains(&(v4, p)) {
                return Some(p);
            }
        }
        None
    }
}

impl PortReservations for FakePorts {
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
        if !bind.ip().is_unspecified() {
            self.faults
                .push(format!("reservation binds {bind}, not a wildcard"));
        }
        let v4 = bind.is_ipv4();
        let port = if bind.port() == 0 {
            self.free_port(v4).ok_or(ReserveError::AddrInUse)?
        } else if self.taken.contains(&(v4, bind.port())) {
            return Err(ReserveError::AddrInUse);
        } else {
            bind.port()
        };
        self.last_id += 1;
        let id = ReservationId(self.last_id);
        let mut at = bind;
        at.set_port(port);
        self.held.insert(id, at);
        self.taken.insert((v4, port));
        self.granted += 1;
        Ok((id, port))
    }

    fn release(&mut self, id: ReservationId) {
        match self.held.remove(&id) {
            Some(a) => {
                self.taken.remove(&(a.is_ipv4(), a.port()));
                self.released += 1;
            }
            None => self.faults.push(format!(
                "release of {id:?}, which is not held (twice, or never granted)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_release_is_a_fault() {
        let mut p = FakePorts::new(0);
        let (id, port) = p.reserve("0.0.0.0:0".parse().unwrap()).unwrap();
        assert!(MAPPED_PORTS.contains(&port));
        assert_eq!(
            p.reserve(SocketAddr::from(([0, 0, 0, 0], port))),
            Err(ReserveError::AddrInUse)
        );
        p.release(id);
        assert!(p.faults.is_empty());
        p.release(id);
        assert_eq!(p.faults.len(), 1);
    }
}
