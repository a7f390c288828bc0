//! The start-up handshake's state (the behaviour is in `core/handshake.rs`).

use std::time::Instant;

/// Start-up handshake state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// `start` not called yet.
    Idle,
    /// HELLO sent with header seq `seq`.
    Awaiting { seq: u32, deadline: Instant },
    /// Handshake done earlier; HELLO re-sent after lost kernel input.
    Resyncing { seq: u32, deadline: Instant },
    /// Negotiated (or given up on); [`crate::Action::Ready`] emitted.
    Done,
}
