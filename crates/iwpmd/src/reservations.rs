//! TCP port reservations: a socket bound (never listening, no `SO_REUSEADDR`) holds each
//! mapped port for as long as the core keeps the mapping, exactly like rdma-core.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;

use iwpm_core::int_hash::IntMap;
use iwpm_core::{ReservationId, ReserveError};

use crate::port_picker::{bind_ephemeral, OwnPorts, PortPicker};
use rustix::io::Errno;
use socket2::{Domain, Protocol, Socket, Type};

/// A reservation that failed: what the core is told, and the OS error behind it (the shell
/// explains resource exhaustion in its own log line).
#[derive(Debug, thiserror::Error)]
#[error("{error} ({errno})")]
pub struct ReserveFailure {
    /// The core's classification.
    pub error: ReserveError,
    /// The OS error.
    pub errno: Errno,
}

impl ReserveFailure {
    /// `EMFILE`: this process is at its `RLIMIT_NOFILE`.
    pub fn process_out_of_fds(&self) -> bool {
        self.errno == Errno::MFILE
    }

    /// `ENFILE`: the system-wide file table (`fs.file-max`) is full.
    pub fn system_out_of_fds(&self) -> bool {
        self.errno == Errno::NFILE
    }

    /// `EADDRINUSE` on a port-0 bind: no free port in `net.ipv4.ip_local_port_range`.
    pub fn out_of_ephemeral_ports(&self, bind: SocketAddr) -> bool {
        self.errno == Errno::ADDRINUSE && bind.port() == 0
    }
}

/// A change of the held ports, journaled for the systemd FD store (see `fd_store.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortChange {
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

/// Sockets held for live mappings, by reservation id.
#[derive(Debug, Default)]
pub struct Reservations {
    held: IntMap<u64, Held>,
    /// The ports of `held` and `adopted`, so a random pick never tries one of them.
    ports: OwnPorts,
    /// Ids are never reused, so a stale release cannot close a newer mapping's port.
    next_id: u64,
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
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds a TCP socket to `bind` (port 0 = kernel-chosen) and keeps it under a new id.
    /// Returns the id and the bound port. On failure nothing is kept (the socket is closed).
    pub fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveFailure> {
        // (the emptiness test skips hashing the address on every reservation)
        if let Some(socket) = (!self.adopted.is_empty())
            .then(|| self.adopted.remove(&bind))
            .flatten()
        {
            self.next_id += 1;
            let id = ReservationId(self.next_id);
            let held = Held {
                socket,
                port: bind.port(),
                ip: BoundIp::of(bind),
            };
            self.held.insert(id.0, held);
            return Ok((id, bind.port()));
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
        self.next_id += 1;
        let id = ReservationId(self.next_id);
        let held = Held {
            socket,
            port,
            ip: BoundIp::of(bind),
        };
        self.held.insert(id.0, held);
        self.ports.insert(port);
        if let Some(c) = &mut self.changes {
            c.push(PortChange::Bound(id));
        }
        Ok((id, port))
    }

    /// Closes the socket held under `id`, releasing its port. Unknown ids are ignored.
    pub fn release(&mut self, id: ReservationId) -> bool {
        let Some(held) = self.held.remove(&id.0) else {
            return false;
        };
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
    pub fn adopt(&mut self, socket: Socket) -> Option<SocketAddr> {
        let addr = bound_addr(&socket).filter(|a| a.port() != 0)?;
        self.ports.insert(addr.port());
        self.adopted.insert(addr, socket);
        Some(addr)
    }

    /// Closes the inherited sockets no mapping claimed; returns their addresses.
    pub fn release_unclaimed(&mut self) -> Vec<SocketAddr> {
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
    pub fn unclaimed(&self) -> usize {
        self.adopted.len()
    }

    /// Starts journaling changes (for the FD store).
    pub fn journal(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// The changes journaled since the last call.
    pub fn take_changes(&mut self) -> Vec<PortChange> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The socket held under `id` and the address it is bound to.
    pub fn bound(&self, id: ReservationId) -> Option<(&Socket, SocketAddr)> {
        let held = self.held.get(&id.0)?;
        Some((&held.socket, held.addr()?))
    }

    /// Number of ports currently held.
    pub fn len(&self) -> usize {
        self.held.len()
    }
}

/// The address a socket is bound to.
pub fn bound_addr(socket: &Socket) -> Option<SocketAddr> {
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
