//! [`FakePorts`]: the shell's TCP port reservations as a test sees them, lent to a core in
//! place of real sockets (feature `testing`, which the test kit and the simulator turn on;
//! never the daemon). Beside the trait it fakes, so that the simulator builds without the
//! test kit. One fake for the fuzz driver, the core's tests and the fleet simulator: it grants ports as an operating system would (the asked one if free, else a
//! free one for port 0), refuses or misbehaves on demand, and keeps the ledger the checks
//! compare with the core's mappings. What no shell could do (releasing a reservation it
//! does not hold, binding anything but a wildcard) is a bug of the core: a test panics at
//! once, the simulator ([`FakePorts::recording`]) records it in [`FakePorts::faults`] and
//! reports it with the seed that found it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;

use crate::{PortReservations, ReservationId, ReserveError};

/// How a port-0 reservation picks its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grants {
    /// The first free port from a cursor up (wrapping to 1024 after 65535); the cursor
    /// stays at the port granted. Ports in use count whatever their family.
    Cursor,
    /// The lowest free port of `base..base + len`, per family (a v4 and a v6
    /// reservation may share a port); refused once all are held.
    Pool { base: u16, len: u16 },
    /// The first free port of `start..end` from a cursor up, per family, wrapping to
    /// `start`; the cursor moves past the port granted, so a port just released is not
    /// granted again at once (as an ephemeral port range behaves).
    Cycle { start: u16, end: u16 },
}

/// Port reservations of one fake shell (see the module docs).
#[derive(Debug)]
pub struct FakePorts {
    /// Reservations held (granted, not yet released), with the address bound.
    pub held: BTreeMap<ReservationId, SocketAddr>,
    /// Where the next port-0 grant starts looking (cursor grants only).
    pub next_port: u16,
    /// Failures to return for the next reservations, oldest first.
    pub fail_next: VecDeque<ReserveError>,
    /// Ports to grant, whatever was asked and whether free or not, for the next
    /// reservations (a misbehaving shell).
    pub force_port: VecDeque<u16>,
    /// Every bind address asked for, in order.
    pub binds: Vec<SocketAddr>,
    /// Reservations released.
    pub releases: usize,
    /// Reservations answered Ok.
    pub granted: u64,
    /// Reservations answered Err.
    pub refused: u64,
    /// What the core did wrong with its reservations, in order (only when recording:
    /// otherwise the first one panics).
    pub faults: Vec<String>,
    /// Record faults instead of panicking ([`FakePorts::recording`]).
    recording: bool,
    grants: Grants,
    /// Last id issued (ids are never reused).
    last_id: u64,
    /// Held reservations per (family, port) — the family is `None` for cursor grants —
    /// so a grant is O(1) with 50k held.
    in_use: HashMap<(Option<bool>, u16), u32>,
}

impl Default for FakePorts {
    /// Cursor grants from port 40000, as the core's tests expect.
    fn default() -> Self {
        FakePorts::with_grants(Grants::Cursor)
    }
}

impl FakePorts {
    /// Port-0 reservations get the lowest free port of `base..base + len` (per family).
    pub fn pool(base: u16, len: u16) -> Self {
        FakePorts::with_grants(Grants::Pool { base, len })
    }

    /// The ports a simulated daemon process gets: port-0 reservations cycle through
    /// `range` (per family) from `range.start + start % range.len()`, so each process
    /// starts its grants elsewhere; faults of the core are recorded in
    /// [`FakePorts::faults`], not panicked on, so that the simulator can report them with
    /// the seed that found them.
    pub fn recording(range: Range<u16>, start: u16) -> Self {
        let span = range.end.saturating_sub(range.start).max(1);
        let mut ports = FakePorts::with_grants(Grants::Cycle {
            start: range.start,
            end: range.end,
        });
        ports.next_port = range.start + start % span;
        ports.recording = true;
        ports
    }

    fn with_grants(grants: Grants) -> Self {
        FakePorts {
            held: BTreeMap::new(),
            next_port: 40_000,
            fail_next: VecDeque::new(),
            force_port: VecDeque::new(),
            binds: Vec::new(),
            releases: 0,
            granted: 0,
            refused: 0,
            faults: Vec::new(),
            recording: false,
            grants,
            last_id: 0,
            in_use: HashMap::new(),
        }
    }

    /// Reservations asked for so far (answered or refused).
    pub fn reserves(&self) -> u64 {
        self.binds.len() as u64
    }

    /// The next reservation gets exactly `answer`, replacing any answer set before:
    /// `None` is the ordinary grant.
    pub fn answer_next(&mut self, answer: Option<Result<u16, ReserveError>>) {
        self.fail_next.clear();
        self.force_port.clear();
        match answer {
            Some(Ok(port)) => self.force_port.push_back(port),
            Some(Err(e)) => self.fail_next.push_back(e),
            None => {}
        }
    }

    fn key(&self, bind: SocketAddr, port: u16) -> (Option<bool>, u16) {
        match self.grants {
            Grants::Cursor => (None, port),
            Grants::Pool { .. } | Grants::Cycle { .. } => (Some(bind.is_ipv4()), port),
        }
    }

    /// The core did something no shell could: panic, or record it when recording.
    fn fault(&mut self, what: String) {
        assert!(self.recording, "fake ports: {what}");
        self.faults.push(what);
    }

    fn in_use(&self, bind: SocketAddr, port: u16) -> bool {
        self.in_use
            .get(&self.key(bind, port))
            .is_some_and(|n| *n > 0)
    }

    fn grant(&mut self, bind: SocketAddr) -> Result<u16, ReserveError> {
        if let Some(e) = self.fail_next.pop_front() {
            return Err(e);
        }
        if let Some(p) = self.force_port.pop_front() {
            return Ok(p);
        }
        if bind.port() != 0 {
            return if self.in_use(bind, bind.port()) {
                Err(ReserveError::AddrInUse)
            } else {
                Ok(bind.port())
            };
        }
        match self.grants {
            Grants::Cursor => {
                for _ in 0..=u16::MAX {
                    let p = self.next_port;
                    if !self.in_use(bind, p) {
                        return Ok(p);
                    }
                    self.next_port = if p == u16::MAX { 1024 } else { p + 1 };
                }
                Err(ReserveError::AddrInUse)
            }
            Grants::Pool { base, len } => (base..base.saturating_add(len))
                .find(|p| !self.in_use(bind, *p))
                .ok_or(ReserveError::AddrInUse),
            Grants::Cycle { start, end } => {
                for _ in start..end {
                    let p = self.next_port;
                    self.next_port = if p + 1 >= end { start } else { p + 1 };
                    if !self.in_use(bind, p) {
                        return Ok(p);
                    }
                }
                Err(ReserveError::AddrInUse)
            }
        }
    }
}

impl PortReservations for FakePorts {
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
        self.binds.push(bind);
        if !bind.ip().is_unspecified() {
            self.fault(format!("reservation binds {bind}, not a wildcard"));
        }
        match self.grant(bind) {
            Ok(port) => {
                self.last_id += 1;
                let id = ReservationId(self.last_id);
                let mut a = bind;
                a.set_port(port);
                self.held.insert(id, a);
                *self.in_use.entry(self.key(bind, port)).or_default() += 1;
                self.granted += 1;
                Ok((id, port))
            }
            Err(e) => {
                self.refused += 1;
                Err(e)
            }
        }
    }

    fn release(&mut self, id: ReservationId) {
        let Some(a) = self.held.remove(&id) else {
            self.fault(format!(
                "release of {id:?}, which the shell does not hold (twice, or never granted)"
            ));
            return;
        };
        let key = self.key(a, a.port());
        if let Some(n) = self.in_use.get_mut(&key) {
            *n -= 1;
        }
        self.releases += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(port: u16) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], port))
    }

    fn v6(port: u16) -> SocketAddr {
        SocketAddr::from(([0u16; 8], port))
    }

    #[test]
    fn cursor_grants_skip_ports_in_use_of_any_family() {
        let mut p = FakePorts::default();
        assert_eq!(p.reserve(v4(0)).unwrap().1, 40_000);
        assert_eq!(p.reserve(v6(0)).unwrap().1, 40_001);
        assert_eq!(p.reserve(v6(40_000)), Err(ReserveError::AddrInUse));
        assert_eq!((p.granted, p.refused, p.reserves()), (2, 1, 3));
    }

    #[test]
    fn pool_grants_are_per_family_and_run_out() {
        let mut p = FakePorts::pool(40_000, 2);
        assert_eq!(p.reserve(v4(0)).unwrap().1, 40_000);
        assert_eq!(p.reserve(v6(0)).unwrap().1, 40_000);
        let (id, port) = p.reserve(v4(0)).unwrap();
        assert_eq!(port, 40_001);
        assert_eq!(p.reserve(v4(0)), Err(ReserveError::AddrInUse));
        p.release(id);
        assert_eq!(p.reserve(v4(0)).unwrap().1, 40_001, "the lowest free again");
        assert_eq!(p.releases, 1);
    }

    #[test]
    fn a_set_answer_replaces_the_previous_one_and_is_used_once() {
        let mut p = FakePorts::pool(40_000, 8);
        p.answer_next(Some(Err(ReserveError::NoDescriptors)));
        p.answer_next(Some(Ok(0)));
        assert_eq!(p.reserve(v4(4000)).unwrap().1, 0, "Ok(0), not the failure");
        assert_eq!(p.reserve(v4(4000)).unwrap().1, 4000);
    }

    #[test]
    fn recording_grants_cycle_per_family_and_faults_are_recorded() {
        let mut p = FakePorts::recording(40_000..40_003, 4);
        let (id, port) = p.reserve(v4(0)).unwrap();
        assert_eq!(port, 40_001, "the start offset wraps into the range");
        assert_eq!(p.reserve(v6(0)).unwrap().1, 40_002, "the cursor moved on");
        assert_eq!(p.reserve(v6(40_001)).unwrap().1, 40_001, "per family");
        assert_eq!(p.reserve(v4(40_001)), Err(ReserveError::AddrInUse));
        p.release(id);
        assert_eq!(
            p.reserve(v4(0)).unwrap().1,
            40_000,
            "past the port released"
        );
        assert!(p.faults.is_empty());
        p.release(id);
        let _ = p.reserve(SocketAddr::from(([10, 0, 0, 1], 0)));
        assert_eq!(p.faults.len(), 2, "{:?}", p.faults);
    }

    #[test]
    #[should_panic(expected = "does not hold")]
    fn a_release_of_what_is_not_held_panics() {
        let mut p = FakePorts::default();
        let (id, _) = p.reserve(v4(0)).unwrap();
        p.release(id);
        p.release(id);
    }
}
