//! The four UDP sockets of the peer protocol (rdma-core layout): a listener on the
//! well-known port and an ephemeral "client" socket per address family, IPv6 ones
//! `IPV6_V6ONLY`. A family the host lacks (`EAFNOSUPPORT`) is skipped; at least one
//! family must work. [`super::Peers`] is what the loop holds of them.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use iwpm_core::PeerSocket;
use mio::net::UdpSocket;
use socket2::{Domain, Protocol, Socket, Type};

/// Largest peer datagram we read. Valid ones are 48 or 64 bytes; the rest is read only so
/// that the core can see (and reject or truncate) oversize datagrams by their real length.
pub(crate) const PEER_RECV_BUFFER: usize = 2048;

/// Where to bind the peer sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerBind {
    /// Well-known port (3935).
    pub(crate) port: u16,
    /// IPv4 bind address (default `0.0.0.0`).
    pub(crate) v4: Ipv4Addr,
    /// IPv6 bind address (default `::`); `None` disables IPv6.
    pub(crate) v6: Option<Ipv6Addr>,
}

/// Why the peer sockets could not be opened.
///
/// OS errors sit in fields named `os`, not `source`: the message already shows them, and
/// an error source would print them a second time in the start-up error chain.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerSocketError {
    /// The listener port is taken, most likely by a running iwpmd.
    #[error("UDP {addr} is already in use, most likely by another port mapper")]
    PortInUse {
        /// The listener address.
        addr: SocketAddr,
    },
    /// Any other socket/bind failure.
    #[error("cannot open the UDP socket on {addr}: {os}")]
    Open {
        /// The address being bound.
        addr: SocketAddr,
        /// The OS error.
        os: io::Error,
    },
    /// Neither IPv4 nor IPv6 could be used.
    #[error("neither IPv4 nor IPv6 UDP sockets are available")]
    NoFamily,
}

/// The open peer sockets; a family's pair is `None` when that family is unavailable.
#[derive(Debug)]
pub(crate) struct PeerSockets {
    v4: Option<Pair>,
    v6: Option<Pair>,
}

#[derive(Debug)]
struct Pair {
    listener: UdpSocket,
    client: UdpSocket,
}

impl PeerSockets {
    /// Opens the sockets in rdma-core's order: v4 listener, v6 listener, then the client
    /// socket of each family whose listener exists.
    pub(crate) fn open(bind: PeerBind) -> Result<Self, PeerSocketError> {
        let v4_listen = open_udp(SocketAddr::new(IpAddr::V4(bind.v4), bind.port))?;
        let v6_listen = match bind.v6 {
            Some(v6) => open_udp(SocketAddr::new(IpAddr::V6(v6), bind.port))?,
            None => None,
        };
        let v4 = match v4_listen {
            Some(listener) => open_udp(SocketAddr::new(IpAddr::V4(bind.v4), 0))?
                .map(|client| Pair { listener, client }),
            None => None,
        };
        let v6 = match (v6_listen, bind.v6) {
            (Some(listener), Some(v6)) => open_udp(SocketAddr::new(IpAddr::V6(v6), 0))?
                .map(|client| Pair { listener, client }),
            _ => None,
        };
        if v4.is_none() && v6.is_none() {
            return Err(PeerSocketError::NoFamily);
        }
        Ok(PeerSockets { v4, v6 })
    }

    /// The socket for `which`, if its family is open.
    pub(crate) fn get(&self, which: PeerSocket) -> Option<&UdpSocket> {
        match which {
            PeerSocket::V4Listener => self.v4.as_ref().map(|p| &p.listener),
            PeerSocket::V4Client => self.v4.as_ref().map(|p| &p.client),
            PeerSocket::V6Listener => self.v6.as_ref().map(|p| &p.listener),
            PeerSocket::V6Client => self.v6.as_ref().map(|p| &p.client),
        }
    }

    /// Mutable access, for registration with the poller.
    pub(crate) fn get_mut(&mut self, which: PeerSocket) -> Option<&mut UdpSocket> {
        match which {
            PeerSocket::V4Listener => self.v4.as_mut().map(|p| &mut p.listener),
            PeerSocket::V4Client => self.v4.as_mut().map(|p| &mut p.client),
            PeerSocket::V6Listener => self.v6.as_mut().map(|p| &mut p.listener),
            PeerSocket::V6Client => self.v6.as_mut().map(|p| &mut p.client),
        }
    }

    /// Local addresses of the open sockets, for the start-up log.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        for which in ALL {
            if let Some(addr) = self.get(which).and_then(|s| s.local_addr().ok()) {
                parts.push(format!("{which:?}={addr}"));
            }
        }
        parts.join(" ")
    }
}

/// Every socket kind, in rdma-core's read order.
pub(crate) const ALL: [PeerSocket; 4] = [
    PeerSocket::V4Listener,
    PeerSocket::V4Client,
    PeerSocket::V6Listener,
    PeerSocket::V6Client,
];

/// Opens one non-blocking UDP socket bound to `addr`; `Ok(None)` if the family is not
/// supported by this host.
fn open_udp(addr: SocketAddr) -> Result<Option<UdpSocket>, PeerSocketError> {
    let err = |source: io::Error| {
        if source.kind() == io::ErrorKind::AddrInUse && addr.port() != 0 {
            PeerSocketError::PortInUse { addr }
        } else {
            PeerSocketError::Open { addr, os: source }
        }
    };
    let socket = match Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)) {
        Ok(s) => s,
        Err(e) if is_afnosupport(&e) => {
            tracing::warn!(%addr, "address family not supported; skipping");
            return Ok(None);
        }
        Err(e) => return Err(err(e)),
    };
    if addr.is_ipv6() {
        socket.set_only_v6(true).map_err(err)?;
    }
    socket.set_nonblocking(true).map_err(err)?;
    enlarge_receive_buffer(&socket, addr);
    match socket.bind(&addr.into()) {
        Ok(()) => {}
        Err(e) if is_afnosupport(&e) => {
            tracing::warn!(%addr, "address family not supported; skipping");
            return Ok(None);
        }
        Err(e) => return Err(err(e)),
    }
    Ok(Some(UdpSocket::from_std(socket.into())))
}

/// Receive buffer asked for on each peer socket. A host that opens N connections to us at
/// once sends N REQUESTs in a burst; the default buffer (`net.core.rmem_default`, 208 KiB)
/// holds only about 200 small datagrams on loopback, and each one dropped costs its
/// connection a 1 s retransmission. 4 MiB holds several thousand.
const PEER_RCVBUF: usize = 4 * 1024 * 1024;

/// Asks for [`PEER_RCVBUF`] (`SO_RCVBUFFORCE`, else `SO_RCVBUF`, which
/// `net.core.rmem_max` caps); a refusal only costs burst tolerance, so it is logged.
fn enlarge_receive_buffer(socket: &Socket, addr: SocketAddr) {
    use rustix::net::sockopt;
    if sockopt::set_socket_recv_buffer_size_force(socket, PEER_RCVBUF).is_ok() {
        return;
    }
    if let Err(e) = sockopt::set_socket_recv_buffer_size(socket, PEER_RCVBUF) {
        tracing::debug!(%addr, error = %e, "cannot enlarge the peer socket's receive buffer");
    }
}

fn is_afnosupport(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::AFNOSUPPORT.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Opens on a port that was free a moment ago, again on another one if a concurrent
    /// test's ephemeral socket took it in between.
    fn open_on_free_port(v6: Option<Ipv6Addr>) -> (PeerBind, Result<PeerSockets, PeerSocketError>) {
        for _ in 0..20 {
            let bind = PeerBind {
                port: free_port(),
                v4: Ipv4Addr::LOCALHOST,
                v6,
            };
            match PeerSockets::open(bind) {
                Err(PeerSocketError::PortInUse { .. }) => continue,
                r => return (bind, r),
            }
        }
        panic!("no free UDP port in 20 tries");
    }

    #[test]
    fn opens_loopback_pair_and_detects_second_instance() {
        let (bind, socks) = open_on_free_port(None);
        let (port, socks) = (bind.port, socks.unwrap());
        let listener = socks
            .get(PeerSocket::V4Listener)
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(listener, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        let client = socks
            .get(PeerSocket::V4Client)
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(client.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_ne!(client.port(), port);
        assert!(socks.get(PeerSocket::V6Listener).is_none());

        let err = PeerSockets::open(bind).unwrap_err();
        assert!(matches!(err, PeerSocketError::PortInUse { .. }), "{err}");
        assert!(err.to_string().contains("by another port mapper"));
    }

    #[test]
    fn ipv6_listener_is_v6only_when_available() {
        match open_on_free_port(Some(Ipv6Addr::LOCALHOST)).1 {
            Ok(socks) => {
                if let Some(s) = socks.get(PeerSocket::V6Listener) {
                    let sock = socket2::SockRef::from(s);
                    assert!(sock.only_v6().unwrap());
                }
            }
            // Hosts with IPv6 disabled on lo cannot bind ::1; nothing to check there.
            Err(PeerSocketError::Open { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
}
