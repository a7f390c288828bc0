//! The names of the daemon's IO-level counters (the `io counters:` line of the SIGUSR1
//! dump and the `io_counters` of `status`), declared once here with the shared
//! [`iwpm_report::counters!`] so that the daemon that prints them and the tools that read them
//! back (the lab's dump parser, `iwpmctl status` and `metrics`) agree by type: the daemon
//! maps every variant to a value with an exhaustive match, so a counter added here and not
//! counted there does not compile.
//!
//! A new counter of the shell: one line of the list below, its field in iwpmd's
//! `IoCounters` and its arm in `IoCounters::get` and `HeldElsewhere::get` (all in
//! `crates/iwpmd/src/io_counters.rs`; any one missing does not compile). A new restart
//! counter: its line here (`when Restart`), its field in `RestartCounts` and its arms there,
//! and its value in `Restart::counts` (`crates/iwpmd/src/restart.rs`, a struct literal:
//! missing, it does not compile). The lab, `iwpmctl status` and `iwpmctl metrics` read
//! every name from here; the docs name no IO counter one by one.

iwpm_report::counters! {
    /// One counter of the daemon's `io counters:` line.
    pub enum IoCounter;
    /// Datagrams received from the kernel.
    KernelRx => kernel_rx: Total;
    /// Datagrams sent to the kernel.
    KernelTx => kernel_tx: Total;
    /// Sends to the kernel that failed.
    KernelTxErrors => kernel_tx_errors: Total;
    /// Sends queued because the kernel link was full.
    KernelTxQueued => kernel_tx_queued: Total;
    /// Kernel datagrams longer than the receive buffer.
    KernelTruncated => kernel_truncated: Total;
    /// Netlink datagrams from a port other than the kernel's.
    KernelForeign => kernel_foreign: Total;
    /// Receive-queue overruns (`ENOBUFS`).
    KernelOverruns => kernel_overruns: Total;
    /// Peer datagrams received.
    PeerRx => peer_rx: Total;
    /// Peer datagrams sent.
    PeerTx => peer_tx: Total;
    /// Peer datagrams not sent.
    PeerTxDropped => peer_tx_dropped: Total;
    /// Reservations refused for lack of file descriptors.
    ReserveNoFd => reserve_no_fd: Total;
    /// Reservations refused for lack of ports.
    ReserveNoPort => reserve_no_port: Total;
    /// SIGUSR1 dumps written.
    Dumps => dumps: Total;
    /// SIGUSR1 signals folded into a pending dump.
    DumpsCoalesced => dumps_coalesced: Total;
    /// TCP ports the daemon holds now.
    // In the metrics as `iwpmd_ports_held`.
    PortsHeld => ports_held: Gauge, in [Status, Dump];
    // The restart machinery's (only while it is on): `status` and the dump, not the metrics.
    /// Messages that handed ports to the systemd FD store.
    FdStoreSent => fd_store_sent: Total, in [Status, Dump], when Restart;
    /// Messages to the FD store that failed.
    FdStoreFailed => fd_store_failed: Total, in [Status, Dump], when Restart;
    /// Restart state files written.
    StateWrites => state_writes: Total, in [Status, Dump], when Restart;
    /// Restart state file writes that failed.
    StateWriteErrors => state_write_errors: Total, in [Status, Dump], when Restart;
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use iwpm_report::{Presence, Surface};

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
            assert!(
                !c.help().is_empty() && !c.help().contains(['"', '\\']),
                "{c}"
            );
        }
        assert_eq!(IoCounter::from_name("ports"), None);
    }

    #[test]
    fn kinds_presence_and_surfaces() {
        let gauges: Vec<_> = IoCounter::ALL.iter().filter(|c| c.is_gauge()).collect();
        assert_eq!(gauges, [&IoCounter::PortsHeld]);
        // What the daemon prints on every line comes first, the restart counters last.
        let first_optional = IoCounter::ALL
            .iter()
            .position(|c| c.presence() == Presence::Restart)
            .unwrap();
        assert!(IoCounter::ALL[first_optional..]
            .iter()
            .all(|c| c.presence() == Presence::Restart));
        // Everything shows in `status` and the dump; the metrics leave out `ports_held`
        // (`iwpmd_ports_held` has it) and the restart counters.
        assert!(IoCounter::all().all(|c| c.shows_in(Surface::Status) && c.shows_in(Surface::Dump)));
        let not_in_metrics: Vec<_> = IoCounter::all()
            .filter(|c| !c.shows_in(Surface::Metrics))
            .map(IoCounter::name)
            .collect();
        assert_eq!(
            not_in_metrics,
            [
                "ports_held",
                "fd_store_sent",
                "fd_store_failed",
                "state_writes",
                "state_write_errors"
            ]
        );
    }
}
