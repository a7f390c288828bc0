//! The names of the daemon's IO-level counters (the `io counters:` line of the SIGUSR1
//! dump and the `io_counters` of `status`), defined once here so that the daemon that
//! prints them and the tools that read them back (the lab's dump parser, `iwpmctl
//! metrics`) agree by type: the daemon maps every variant to a value with an exhaustive
//! match, so a counter added here and not counted there does not compile.
//!
//! A new counter of the shell: one line of the list below, its field in iwpmd's
//! `IoCounters` and its arm in `IoCounters::get` and `HeldElsewhere::get` (all in
//! `crates/iwpmd/src/io_counters.rs`; any one missing does not compile). A new restart
//! counter: its line here (`Restart`), its field in `RestartCounts` and its arms there, and
//! its value in `Restart::counts` (`crates/iwpmd/src/restart.rs`, a struct literal: missing,
//! it does not compile). The lab and `iwpmctl metrics` read
//! every name from here; the docs name no IO counter one by one.

use std::fmt;

/// Whether a counter only grows or reflects the current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoKind {
    /// Only grows (a `_total` sample in the metrics).
    Total,
    /// The current level (a gauge in the metrics).
    Gauge,
}

/// When the daemon prints a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoPresence {
    /// On every `io counters:` line.
    Always,
    /// Only when the daemon keeps ports across restarts (the systemd FD store, the state
    /// file), so a parser must not miss it when it is absent.
    Restart,
}

/// Defines [`IoCounter`], its table and its names from one list, in print order.
macro_rules! io_counters {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:ident: $kind:ident, $presence:ident;)*) => {
        /// One counter of the daemon's `io counters:` line.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum IoCounter {
            $($(#[doc = $doc])* $variant,)*
        }

        impl IoCounter {
            /// Every IO counter, in the daemon's print order.
            pub const ALL: &'static [IoCounter] = &[$(IoCounter::$variant),*];

            /// The name the daemon prints.
            pub fn name(self) -> &'static str {
                match self {
                    $(IoCounter::$variant => stringify!($name),)*
                }
            }

            /// Whether it only grows or is a level.
            pub fn kind(self) -> IoKind {
                match self {
                    $(IoCounter::$variant => IoKind::$kind,)*
                }
            }

            /// When the daemon prints it.
            pub fn presence(self) -> IoPresence {
                match self {
                    $(IoCounter::$variant => IoPresence::$presence,)*
                }
            }
        }
    };
}

io_counters! {
    /// Datagrams received from the kernel.
    KernelRx => kernel_rx: Total, Always;
    /// Datagrams sent to the kernel.
    KernelTx => kernel_tx: Total, Always;
    /// Sends to the kernel that failed.
    KernelTxErrors => kernel_tx_errors: Total, Always;
    /// Sends queued because the kernel link was full.
    KernelTxQueued => kernel_tx_queued: Total, Always;
    /// Kernel datagrams longer than the receive buffer.
    KernelTruncated => kernel_truncated: Total, Always;
    /// Netlink datagrams from a port other than the kernel's.
    KernelForeign => kernel_foreign: Total, Always;
    /// Receive-queue overruns (`ENOBUFS`).
    KernelOverruns => kernel_overruns: Total, Always;
    /// Peer datagrams received.
    PeerRx => peer_rx: Total, Always;
    /// Peer datagrams sent.
    PeerTx => peer_tx: Total, Always;
    /// Peer datagrams not sent.
    PeerTxDropped => peer_tx_dropped: Total, Always;
    /// Reservations refused for lack of file descriptors.
    ReserveNoFd => reserve_no_fd: Total, Always;
    /// Reservations refused for lack of ports.
    ReserveNoPort => reserve_no_port: Total, Always;
    /// SIGUSR1 dumps written.
    Dumps => dumps: Total, Always;
    /// SIGUSR1 signals folded into a pending dump.
    DumpsCoalesced => dumps_coalesced: Total, Always;
    /// TCP ports the daemon holds now.
    PortsHeld => ports_held: Gauge, Always;
    /// Messages that handed ports to the systemd FD store.
    FdStoreSent => fd_store_sent: Total, Restart;
    /// Messages to the FD store that failed.
    FdStoreFailed => fd_store_failed: Total, Restart;
    /// Restart state files written.
    StateWrites => state_writes: Total, Restart;
    /// Restart state file writes that failed.
    StateWriteErrors => state_write_errors: Total, Restart;
}

impl IoCounter {
    /// The counter with this name.
    pub fn from_name(name: &str) -> Option<IoCounter> {
        IoCounter::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// Position in [`IoCounter::ALL`] (the variants are declared in that order).
    pub fn index(self) -> usize {
        self as usize
    }

    /// A gauge (the current level), not a counter that only grows.
    pub fn is_gauge(self) -> bool {
        self.kind() == IoKind::Gauge
    }
}

impl fmt::Display for IoCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_name_parses_back_to_its_counter() {
        let mut seen = HashSet::new();
        for (i, &c) in IoCounter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{c}");
            assert!(seen.insert(c.name()), "duplicate name {c}");
            assert_eq!(IoCounter::from_name(c.name()), Some(c));
            assert!(c
                .name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(IoCounter::from_name("ports"), None);
    }

    #[test]
    fn kinds_and_presence() {
        let gauges: Vec<_> = IoCounter::ALL.iter().filter(|c| c.is_gauge()).collect();
        assert_eq!(gauges, [&IoCounter::PortsHeld]);
        // What the daemon prints on every line comes first, the restart counters last.
        let first_optional = IoCounter::ALL
            .iter()
            .position(|c| c.presence() == IoPresence::Restart)
            .unwrap();
        assert!(IoCounter::ALL[first_optional..]
            .iter()
            .all(|c| c.presence() == IoPresence::Restart));
    }
}
