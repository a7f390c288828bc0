//! What the core reports back through its actions ([`crate::Action::ProbeDone`],
//! [`crate::Action::Settled`]): plain results, below both the actions and the state machine
//! that makes them, so that the two do not import each other.

use std::net::SocketAddr;
use std::time::Duration;

/// Names one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProbeId(pub u64);

/// How a probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The peer answered REJECT (the expected answer): its port is reachable.
    Rejected,
    /// The peer answered ACCEPT (a port mapper claiming port 0): reachable, but odd.
    Accepted,
    /// Nothing came back before the deadline: blocked, or no daemon there.
    NoAnswer,
}

/// A finished probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// Which probe.
    pub id: ProbeId,
    /// The peer daemon's address (IP and peer port).
    pub target: SocketAddr,
    /// The answer.
    pub outcome: ProbeOutcome,
    /// From the first REQUEST to the answer (or to the deadline).
    pub elapsed: Duration,
    /// REQUESTs sent.
    pub requests: u32,
}

/// What the end of a recovery did with the restored mappings (the module docs of the core's
/// `machine/restore.rs`), as [`crate::Action::Settled`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Restored mappings the replay confirmed, now with the kernel's reference count.
    pub confirmed: usize,
    /// Restored mappings kept on the state file's word (replay truncated or not asked).
    pub kept: usize,
    /// Restored mappings freed: the kernel's complete (or empty) replay did not list them.
    pub freed: usize,
    /// Restored mappings the replay listed at least once (confirmed or kept).
    pub replayed: usize,
}

impl std::ops::AddAssign for SettleReport {
    fn add_assign(&mut self, other: SettleReport) {
        self.confirmed += other.confirmed;
        self.kept += other.kept;
        self.freed += other.freed;
        self.replayed += other.replayed;
    }
}
