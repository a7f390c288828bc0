//! The kernel's outgoing side, injected so the state machine does no IO itself.
//!
//! The real kernel sends synchronously and reacts to the result at once (a failed REG_PID
//! multicast marks the daemon unavailable, a failed ADD resets the pid), so sending is a
//! call that returns its outcome rather than a queued transmit.

/// How the kernel sends a message (`rdma_nl_unicast` vs `rdma_nl_unicast_wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendMode {
    /// `MSG_DONTWAIT`: fail at once if the daemon's receive queue is full (HELLO reply,
    /// MAPINFO replay, MAPINFO_NUM, the REG_PID multicast, dump completions).
    NonBlocking,
    /// Block up to the socket send timeout (10 s) while the queue is full (ADD, QUERY,
    /// REMOVE).
    Wait,
}

/// Why a send failed, as the errno the kernel would see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SendError {
    /// Nobody is bound at the destination (`ECONNREFUSED`); also a pid the emulator never
    /// learned an address for.
    #[error("connection refused (no socket for that port id)")]
    ConnRefused,
    /// The destination's receive queue is full (`EAGAIN`), after waiting in
    /// [`SendMode::Wait`].
    #[error("receive queue full")]
    WouldBlock,
    /// A multicast that reached no member (`ESRCH`).
    #[error("no multicast group member")]
    NoListener,
    /// Any other OS error, as a positive errno.
    #[error("send failed (errno {0})")]
    Os(i32),
}

impl SendError {
    /// The negative errno the kernel functions return for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            SendError::ConnRefused => -111,
            SendError::WouldBlock => -11,
            SendError::NoListener => -3,
            SendError::Os(e) => -e.abs(),
        }
    }
}

/// Delivers kernel datagrams to daemon socket addresses of type `A`.
pub trait Link<A> {
    /// Sends one datagram to `to`.
    fn send(&mut self, to: &A, datagram: &[u8], mode: SendMode) -> Result<(), SendError>;
}
