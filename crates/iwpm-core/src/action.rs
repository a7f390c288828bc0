//! What the core asks its IO shell to do: output actions, and the port reservations it
//! makes through [`PortReservations`] while handling kernel input.

use std::net::SocketAddr;

use crate::outcome::{ProbeResult, SettleReport};

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

/// Output of the core, drained with [`crate::Host::poll_action`]: everything a caller must
/// send or react to, in the order the core produced it. There is no other output queue.
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
    /// A probe ([`crate::Host::start_probe`]) finished: answer whoever asked.
    ProbeDone(ProbeResult),
    /// Restored mappings were settled against the kernel's replay (already logged by the
    /// core; for callers that report or check it).
    Settled(SettleReport),
    /// Restart recovery is over, once per core: the handshake is done, every replay window
    /// closed and every restored mapping settled. Ports the shell inherited and no mapping
    /// claimed may be closed now. (The core wakes up for a window's end only when someone
    /// waits for it, [`crate::Previous::inherited_ports`] or restored mappings; otherwise the
    /// event may come with a later input.)
    RecoveryEnded,
    /// The mapping table changed (a mapping created or freed, or a reference count moved);
    /// at most once per input call, after that call's other actions. What a state file
    /// follows.
    TableChanged {
        /// Grows with every change: a snapshot taken now is current until it moves again.
        generation: u64,
        /// Mappings in the table now.
        mappings: usize,
    },
    /// Write the state file now, from [`crate::Core::saved_mappings`], then report with
    /// [`crate::Host::state_saved`]. Produced by [`crate::Host`]'s state-file policy
    /// (gathered changes, spaced writes), never by the core itself.
    SaveState {
        /// The table generation the file will hold.
        generation: u64,
    },
}

/// What [`crate::Host::handle_kernel_datagram`] made of one kernel datagram: what a shell
/// reading the kernel link needs to decide whether to read on, without parsing the datagram
/// again or counting its own sends.
#[must_use = "the read loop decides with it whether to read the kernel link again"]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelReceipt {
    /// The datagram opened with an acknowledgement (`NLMSG_DONE` or `NLMSG_ERROR`), the
    /// kernel's answer to a message sent to it, rather than with a request.
    pub acknowledgement: bool,
    /// Messages the core queued for the kernel while handling it (its answers, and any
    /// MAPINFO request a HELLO answer starts): each is acknowledged once sent.
    pub answers: u32,
}

impl KernelReceipt {
    /// A request the core did not answer (REMOVE_MAPPING, replayed records, a QUERY whose
    /// answer waits for the peer): nothing of ours is due back for it.
    pub fn unanswered_request(&self) -> bool {
        !self.acknowledgement && self.answers == 0
    }
}
