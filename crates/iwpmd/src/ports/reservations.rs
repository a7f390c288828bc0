//! TCP port reservations: a socket bound (never listening, no `SO_REUSEADDR`) holds each
//! mapped port for as long as the core keeps the mapping, exactly like rdma-core.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;

use iwpm_core::{ReservationId, ReserveError};

use crate::ports::port_picker::{bind_ephemeral, OwnPorts, PortPicker};
use rustix::io::Errno;
use socket2::{Domain, Protocol, Socket, Type};

/// A reservation that failed: what the core is told, and the OS error behind it (the shell
/// explains resource exhaustion in its own log line).
#[derive(Debug, thiserror::Error)]
#[error("{error} ({errno})")]
pub(crate) struct ReserveFailure {
    /// The core's classification.
    pub(crate) error: ReserveError,
    /// The OS error.
    pub(crate) errno: Errno,
}

impl ReserveFailure {
    /// `EMFILE`: this process is at its `RLIMIT_NOFILE`.
    pub(crate) fn process_out_of_fds(&self) -> bool {
        self.errno == Errno::MFILE
    }

    /// `ENFILE`: the system-wide file table (`fs.file-max`) is full.
    pub(crate) fn system_out_of_fds(&self) -> bool {
        self.errno == Errno::NFILE
    }

    /// `EADDRINUSE` on a port-0 bind: no free port in `net.ipv4.ip_local_port_range`.
    pub(crate) fn out_of_ephemeral_ports(&self, bind: SocketAddr) -> bool {
        self.errno == Errno::ADDRINUSE && bind.port() == 0
    }
}

/// A change of the held ports, journaled for the systemd FD store (see `restart/fd_store.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortChange {
    /// A socket was newly bound under this id (not taken over from the FD store).
    Bound(ReservationId),
    /// The socket bound to this address was closed.
    Closed(SocketAddr),
}

/// One held socket and what it is bound to, kept so that neither the port pick, the FD
/// store nor a release has to ask the kernel (`getsockname`) again. 8 bytes besides the
/// key.
#[derive(Debug)]
struct Held {
    socket: Socket,
    port: u16,
    ip: BoundIp,
}

/// The address part of a [`Held`] socket's binding: the wildcard of its family (every
/// reservation the core asks for), or anything else, which is then read from the socket.
#[derive(Clone, Copy, Debug)]
enum BoundIp {
    AnyV4,
    AnyV6,
    Other,
}

impl BoundIp {
    fn of(bind: SocketAddr) -> BoundIp {
        match bind.ip() {
            ip if !ip.is_unspecified() => BoundIp::Other,
            ip if ip.is_ipv4() => BoundIp::AnyV4,
            _ => BoundIp::AnyV6,
        }
    }
}

impl Held {
    fn addr(&self) -> Option<SocketAddr> {
        match self.ip {
            BoundIp::AnyV4 => Some((std::net::Ipv4Addr::UNSPECIFIED, self.port).into()),
            BoundIp::AnyV6 => Some((std::net::Ipv6Addr::UNSPECIFIED, self.port).into()),
            BoundIp::Other => bound_addr(&self.socket),
        }
    }
}

/// A place in the [`Reservations`] slab. The generation counts the sockets the slot has
/// held, so an id names one of them only.
#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    held: Option<Held>,
}

/// Sockets held for live mappings, in a slab indexed by reservation id.
///
/// An id is the slot (low 32 bits) and the slot's generation when the socket was stored
/// (high 32 bits): a look-up is an index, and a stale id (its slot released and reused
/// since) finds nothing, so a late release cannot close a newer mapping's port. A slot
/// costs 12 bytes, against about 29 per entry for a hash map at its usual load; freed
/// slots are reused newest first.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    slots: Vec<Slot>,
    /// Slots whose socket was released, reused last in, first out.
    free: Vec<u32>,
    /// Sockets in `slots`.
    live: usize,
    /// The ports of `slots` and `adopted`, so a random pick never tries one of them.
    ports: OwnPorts,
    /// Chooses the port of a port-0 reservation (`bind(port 0)` slows down as ports are
    /// held; see `port_picker`).
    picker: Option<PortPicker>,
    /// Sockets a previous daemon left in the systemd FD store, by bound address, until a
    /// restored or replayed mapping claims them.
    adopted: HashMap<SocketAddr, Socket>,
    /// Changes since the last [`Reservations::take_changes`], when journaling.
    changes: Option<Vec<PortChange>>,
}

impl Reservations {
    /// An empty table, with its port picker made now (at start-up) rather than at the
    /// first port-0 reservation, on the path of a kernel request.
    pub(crate) fn new() -> Self {
        Reservations {
            picker: Some(PortPicker::from_system()),
            ..Self::default()
        }
    }

    /// Binds a TCP socket to `bind` (port 0 = kernel-chosen) and keeps it under a new id.
    /// Returns the id and the bound port. On failure nothing is kept (the socket is closed).
    pub(crate) fn reserve(
        &mut self,
        bind: SocketAddr,
    ) -> Result<(ReservationId, u16), ReserveFailure> {
        // (the emptiness test skips hashing the address on every reservation)
        if let Some(socket) = (!self.adopted.is_empty())
            .then(|| self.adopted.remove(&bind))
            .flatten()
        {
            let held = Held {
                socket,
                port: bind.port(),
                ip: BoundIp::of(bind),
            };
            let port = held.port;
            // (on failure the socket is closed: its port is no longer ours)
            let id = self.store(held).inspect_err(|_| {
                self.ports.remove(port);
            })?;
            return Ok((id, port));
        }
        let socket = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))
            .map_err(reserve_error)?;
        let chosen = if bind.port() == 0 {
            let picker = self.picker.get_or_insert_with(PortPicker::from_system);
            bind_ephemeral(picker, &socket, bind, &self.ports).map_err(reserve_error)?
        } else {
            socket.bind(&bind.into()).map_err(reserve_error)?;
            Some(bind.port())
        };
        let port = match chosen {
            Some(port) => port,
            // Port 0: only the kernel knows which one it took.
            None => socket
                .local_addr()
                .map_err(reserve_error)?
                .as_socket()
                .map(|a| a.port())
                .ok_or_else(|| reserve_error(Errno::AFNOSUPPORT.into()))?,
        };
        let held = Held {
            socket,
            port,
            ip: BoundIp::of(bind),
        };
        let id = self.store(held)?;
        self.ports.insert(port);
        if let Some(c) = &mut self.changes {
            c.push(PortChange::Bound(id));
        }
        Ok((id, port))
    }

    /// Closes the socket held under `id`, releasing its port. Unknown ids are ignored.
    pub(crate) fn release(&mut self, id: ReservationId) -> bool {
        let Some(held) = self
            .slots
            .get_mut(slot_of(id))
            .filter(|slot| slot.generation == generation_of(id))
            .and_then(|slot| slot.held.take())
        else {
            return false;
        };
        self.live -= 1;
        // (the look-up found it, so the slot number fits)
        self.free.push(slot_of(id) as u32);
        self.ports.remove(held.port);
        if let Some(c) = &mut self.changes {
            if let Some(addr) = held.addr() {
                c.push(PortChange::Closed(addr));
            }
        }
        true
    }

    /// Keeps a socket inherited from the FD store until [`Reservations::reserve`] asks for
    /// its address; returns that address (`None`: not a bound IP socket, dropped).
    pub(crate) fn adopt(&mut self, socket: Socket) -> Option<SocketAddr> {
        let addr = bound_addr(&socket).filter(|a| a.port() != 0)?;
        self.ports.insert(addr.port());
        self.adopted.insert(addr, socket);
        Some(addr)
    }

    /// Closes the inherited sockets no mapping claimed; returns their addresses.
    pub(crate) fn release_unclaimed(&mut self) -> Vec<SocketAddr> {
        let addrs: Vec<SocketAddr> = self.adopted.drain().map(|(a, _)| a).collect();
        for a in &addrs {
            self.ports.remove(a.port());
        }
        if let Some(c) = &mut self.changes {
            c.extend(addrs.iter().map(|a| PortChange::Closed(*a)));
        }
        addrs
    }

    /// Inherited sockets not claimed yet.
    pub(crate) fn unclaimed(&self) -> usize {
        self.adopted.len()
    }

    /// Starts journaling changes (for the FD store).
    pub(crate) fn journal(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// The changes journaled since the last call.
    pub(crate) fn take_changes(&mut self) -> Vec<PortChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The socket held under `id` and the address it is bound to.
    pub(crate) fn bound(&self, id: ReservationId) -> Option<(&Socket, SocketAddr)> {
        let held = self
            .slots
            .get(slot_of(id))
            .filter(|slot| slot.generation == generation_of(id))?
            .held
            .as_ref()?;
        Some((&held.socket, held.addr()?))
    }

    /// Number of ports currently held.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Keeps `held` in a free slot (or a new one) under a new generation; returns its id.
    /// Fails (closing the socket) only past 2^32 slots, which the descriptor limit
    /// prevents; it is reported as running out of descriptors.
    fn store(&mut self, held: Held) -> Result<ReservationId, ReserveFailure> {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.slots.len())
                    .map_err(|_| reserve_error(Errno::MFILE.into()))?;
                self.slots.push(Slot::default());
                slot
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.held = Some(held);
        self.live += 1;
        Ok(ReservationId(
            (u64::from(entry.generation) << 32) | u64::from(slot),
        ))
    }
}

fn slot_of(id: ReservationId) -> usize {
    (id.0 & 0xffff_ffff) as usize
}

fn generation_of(id: ReservationId) -> u32 {
    (id.0 >> 32) as u32
}

/// The address a socket is bound to.
pub(crate) fn bound_addr(socket: &Socket) -> Option<SocketAddr> {
    socket.local_addr().ok()?.as_socket()
}

fn reserve_error(e: io::Error) -> ReserveFailure {
    let errno = e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error);
    let error = match errno {
        Errno::ADDRINUSE => ReserveError::AddrInUse,
        Errno::MFILE | Errno::NFILE => ReserveError::NoDescriptors,
        other => ReserveError::Other(other.raw_os_error()),
    };
    ReserveFailure { error, errno }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step 10 (first fix): the port picker exists from the start, so its seeding never
    /// runs on the path of the first port-0 reservation (the old code made it lazily).
    #[test]
    fn the_picker_is_made_at_start_up() {
        assert!(Reservations::new().picker.is_some());
    }
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn tcp_bind_fails(addr: SocketAddr) -> bool {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None).unwrap();
        s.bind(&addr.into()).is_err()
    }

    #[test]
    fn reserve_holds_port_until_release() {
        let mut r = Reservations::new();
        let (id, port) = r.reserve((Ipv4Addr::UNSPECIFIED, 0).into()).unwrap();
        assert_ne!(port, 0);
        assert_eq!(r.len(), 1);
        let loopback: SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
        assert!(tcp_bind_fails(loopback), "port {port} should be held");
        // Nobody listens on a reserved port: connecting is refused.
        assert!(std::net::TcpStream::connect(loopback).is_err());

        // Re-reserving the same port for another id collides.
        let err = r.reserve((Ipv4Addr::UNSPECIFIED, port).into()).unwrap_err();
        assert!(matches!(err.error, ReserveError::AddrInUse), "{err:?}");
        assert!(!err.out_of_ephemeral_ports((Ipv4Addr::UNSPECIFIED, port).into()));
        assert_eq!(r.len(), 1, "a failed bind keeps nothing");

        assert!(r.release(id));
        assert!(!r.release(id));
        assert_eq!(r.len(), 0);
        assert!(
            !tcp_bind_fails(loopback),
            "port {port} should be free again"
        );
    }

    /// Ids index a slab: a released slot is reused, and the id it had before names
    /// nothing any more (a late release must not close the new socket).
    #[test]
    fn a_reused_slot_does_not_answer_to_its_old_id() {
        assert!(std::mem::size_of::<Slot>() <= 12, "a slot is 12 bytes");
        let mut r = Reservations::new();
        let any: SocketAddr = (Ipv4Addr::UNSPECIFIED, 0).into();
        let (old, _) = r.reserve(any).unwrap();
        let (other, _) = r.reserve(any).unwrap();
        assert!(r.release(old));
        let (new, new_port) = r.reserve(any).unwrap();
        assert_eq!(slot_of(new), slot_of(old), "the freed slot is reused");
        assert_ne!(new, old);
        assert!(r.bound(old).is_none());
        assert!(!r.release(old), "the stale id releases nothing");
        assert_eq!(r.len(), 2);
        assert_eq!(r.bound(new).map(|(_, a)| a.port()), Some(new_port));
        assert!(tcp_bind_fails((Ipv4Addr::LOCALHOST, new_port).into()));
        assert!(
            !r.release(ReservationId(u64::from(u32::MAX))),
            "no such slot"
        );
        assert!(r.release(new) && r.release(other));
        assert_eq!(r.len(), 0);
        assert!(!tcp_bind_fails((Ipv4Addr::LOCALHOST, new_port).into()));
    }

    #[test]
    fn failed_binds_do_not_leak_descriptors() {
        let mut r = Reservations::new();
        let (_, port) = r.reserve((Ipv4Addr::UNSPECIFIED, 0).into()).unwrap();
        let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = fds();
        for _ in 0..50 {
            let res = r.reserve((Ipv4Addr::UNSPECIFIED, port).into());
            assert!(res.is_err());
        }
        // Other test threads may open descriptors concurrently; 50 leaks would show anyway.
        assert!(fds() < before + 10);
    }

    #[test]
    fn ipv6_wildcard_reservation_when_available() {
        let mut r = Reservations::new();
        match r.reserve((Ipv6Addr::UNSPECIFIED, 0).into()) {
            Ok((_, port)) => assert_ne!(port, 0),
            Err(ReserveFailure {
                error: ReserveError::Other(_),
                ..
            }) => {} // no IPv6 on this host
            Err(e) => panic!("{e:?}"),
        }
    }

    /// nfsd's `0.0.0.0:P` and `[::]:P` listeners are both mapped (`docs/protocol.md` §4.5):
    /// their two wildcard reservations bind side by side in either order, each on a port
    /// of its own, and bind again at those recorded ports after a restart in either order.
    /// The IPv6 one stays dual-stack as in C (it holds its port for IPv4 too), which is
    /// why the two can never be given the same port: no `IPV6_V6ONLY` is needed for both
    /// binds to succeed.
    #[test]
    fn wildcards_of_both_families_bind_side_by_side_and_after_a_restart() {
        let v4: SocketAddr = (Ipv4Addr::UNSPECIFIED, 0).into();
        let v6: SocketAddr = (Ipv6Addr::UNSPECIFIED, 0).into();
        if Socket::new(Domain::IPV6, Type::STREAM, None).is_err() {
            return; // no IPv6 on this host
        }
        for order in [[v4, v6], [v6, v4]] {
            let mut r = Reservations::new();
            let mut held = Vec::new();
            for bind in order {
                let Ok((id, port)) = r.reserve(bind) else {
                    return; // IPv6 sockets but no IPv6 address family support
                };
                held.push((id, SocketAddr::new(bind.ip(), port)));
            }
            assert_ne!(held[0].1.port(), held[1].1.port());
            let v6_port = held.iter().find(|(_, a)| a.is_ipv6()).unwrap().1.port();
            let v6only = r
                .bound(held.iter().find(|(_, a)| a.is_ipv6()).unwrap().0)
                .and_then(|(s, _)| s.only_v6().ok());
            if v6only == Some(false) {
                assert!(
                    tcp_bind_fails((Ipv4Addr::UNSPECIFIED, v6_port).into()),
                    "a dual-stack IPv6 reservation holds its IPv4 port too"
                );
            }
            // A restart without the FD store binds the recorded ports again.
            for (id, _) in &held {
                assert!(r.release(*id));
            }
            for (_, recorded) in held.iter().rev() {
                let (_, port) = r.reserve(*recorded).unwrap();
                assert_eq!(port, recorded.port());
            }
            assert_eq!(r.len(), 2);
        }
    }

    /// The address kept with each reservation is what the kernel says the socket is bound
    /// to (the FD store names and the close journal use it instead of asking), and a
    /// reservation taken over from the FD store keeps its port out of the random picks.
    #[test]
    fn kept_addresses_match_the_sockets() {
        let mut r = Reservations::new();
        r.journal();
        // The wildcards are kept without asking; a specific address is asked for.
        let mut binds: Vec<SocketAddr> = vec![
            (Ipv4Addr::UNSPECIFIED, 0).into(),
            (Ipv4Addr::LOCALHOST, 0).into(),
        ];
        if Socket::new(Domain::IPV6, Type::STREAM, None).is_ok() {
            binds.push((Ipv6Addr::UNSPECIFIED, 0).into());
        }
        for bind in binds {
            let Ok((id, port)) = r.reserve(bind) else {
                continue; // IPv6 sockets but no IPv6 address family support
            };
            let (sock, addr) = r.bound(id).unwrap();
            assert_eq!(Some(addr), bound_addr(sock));
            assert_eq!(addr.port(), port);
            assert!(r.ports.contains(port));
            assert!(r.release(id));
            assert!(!r.ports.contains(port));
            assert_eq!(
                r.take_changes(),
                vec![PortChange::Bound(id), PortChange::Closed(addr)]
            );
        }

        // An explicit port is kept as asked for (here one just released).
        let (id, port) = r.reserve((Ipv4Addr::UNSPECIFIED, 0).into()).unwrap();
        assert!(r.release(id));
        r.take_changes();
        if let Ok((id, got)) = r.reserve((Ipv4Addr::UNSPECIFIED, port).into()) {
            assert_eq!(got, port);
            let (sock, addr) = r.bound(id).unwrap();
            assert_eq!(Some(addr), bound_addr(sock));
            assert!(r.release(id));
        }

        let other = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        other
            .bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)).into())
            .unwrap();
        let addr = r.adopt(other).unwrap();
        assert!(r.ports.contains(addr.port()));
        assert_eq!(r.release_unclaimed(), vec![addr]);
        assert!(!r.ports.contains(addr.port()));
    }
}
