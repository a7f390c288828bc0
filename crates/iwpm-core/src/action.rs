//! What the core asks its IO shell to do: output actions, and the port reservations it
//! makes through [`PortReservations`] while handling kernel input.

use std::net::SocketAddr;

/// One of the four UDP sockets of the peer protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerSocket {
    /// UDP `0.0.0.0:3935`.
    V4Listener,
    /// UDP `0.0.0.0:ephemeral`, sends REQUESTs and ACKs.
    V4Client,
    /// UDP `[::]:3935` (V6ONLY).
    V6Listener,
    /// UDP `[::]:ephemeral` (V6ONLY), sends REQUESTs and ACKs.
    V6Client,
}

impl PeerSocket {
    /// The client socket of an address family (where REQUESTs leave from).
    pub fn client_for(addr: &SocketAddr) -> Self {
        if addr.is_ipv4() {
            PeerSocket::V4Client
        } else {
            PeerSocket::V6Client
        }
    }
}

/// Names one TCP port reservation held by the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservationId(pub u64);

/// The shell's TCP port reservations, lent to the core for one kernel datagram.
///
/// Binding is synchronous (as in the C daemon), so a mapping is made in one step and input
/// never waits behind a reservation.
pub trait PortReservations {
    /// Binds a TCP socket (no listen) to `bind` and holds it until [`Self::release`].
    ///
    /// `bind` is the wildcard IP of the local family with port 0 (any), or the recorded
    /// port on restart recovery. Returns the new reservation's id and the bound port.
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError>;

    /// Closes the socket of a reservation this shell granted; called exactly once for each.
    fn release(&mut self, id: ReservationId);
}

/// Why the shell could not reserve a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReserveError {
    /// `EADDRINUSE` (port exhaustion, or the recorded port is taken).
    #[error("address in use")]
    AddrInUse,
    /// `EMFILE`/`ENFILE`.
    #[error("out of file descriptors")]
    NoDescriptors,
    /// Any other errno.
    #[error("reservation failed (errno {0})")]
    Other(i32),
}

/// Output of the core, drained with [`crate::Core::poll_action`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send one netlink datagram to the kernel (port id 0).
    ToKernel(Vec<u8>),
    /// Send one UDP datagram on `via` to `to`.
    ToPeer {
        /// Socket to send from.
        via: PeerSocket,
        /// Destination.
        to: SocketAddr,
        /// Encoded peer message.
        datagram: Vec<u8>,
    },
    /// Start-up handshake done (sd_notify `READY=1`).
    Ready,
}
