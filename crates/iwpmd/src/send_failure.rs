//! Why one outgoing datagram (to the kernel or to a peer) was not sent.
//!
//! A typed reason instead of manufactured `io::Error`s: the loop tells "try again when
//! writable" from "drop, count and log" by matching, and every log line names the cause.

use std::io;

/// Why one outgoing datagram was dropped. Never fatal: counted and logged, rate-limited.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendFailure {
    /// The socket refused it.
    #[error(transparent)]
    Os(io::Error),
    /// The link stayed full and this many datagrams already wait for it.
    #[error("the queue of {0} datagrams waiting for the kernel link is full")]
    QueueFull(usize),
    /// The socket took only part of the datagram.
    #[error("short send: {sent} of {len} bytes")]
    Short { sent: usize, len: usize },
    /// There is no peer socket of the destination's address family (e.g. IPv6 disabled).
    #[error("no UDP socket of this address family")]
    NoSocket,
}

impl SendFailure {
    /// The socket is full right now; the datagram may be queued and sent when writable.
    pub(crate) fn is_would_block(&self) -> bool {
        matches!(self, SendFailure::Os(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl From<io::Error> for SendFailure {
    fn from(e: io::Error) -> Self {
        SendFailure::Os(e)
    }
}

impl From<rustix::io::Errno> for SendFailure {
    fn from(e: rustix::io::Errno) -> Self {
        SendFailure::Os(e.into())
    }
}
