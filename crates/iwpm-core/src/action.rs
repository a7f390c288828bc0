//! What the core asks its IO shell to do, and the shell's answers.

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
    /// Bind a TCP socket (no listen) to `bind` and keep it until [`Action::Release`];
    /// answer with [`crate::Core::handle_reserved`] before feeding any other input.
    Reserve {
        /// Name of the reservation.
        id: ReservationId,
        /// Wildcard IP of the local family; port 0 (any) or the recorded port on recovery.
        bind: SocketAddr,
    },
    /// Close the socket of a reservation.
    Release {
        /// The reservation to drop.
        id: ReservationId,
    },
    /// Start-up handshake done (sd_notify `READY=1`).
    Ready,
}
