//! The shell's IO-level counters (the core counts protocol events itself) and their
//! `name=value` export for the SIGUSR1 dump.

use iwpm_control::IoCounter;
use iwpm_report::Surface;

/// IO-level counters.
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Datagrams received from the kernel.
    pub(crate) kernel_rx: u64,
    /// Datagrams sent to the kernel.
    pub(crate) kernel_tx: u64,
    /// Sends to the kernel that failed.
    pub(crate) kernel_tx_errors: u64,
    /// Sends that found the kernel link full and were queued until it drained.
    pub(crate) kernel_tx_queued: u64,
    /// Kernel datagrams longer than the receive buffer.
    pub(crate) kernel_truncated: u64,
    /// Netlink datagrams from a port other than the kernel's (dropped).
    pub(crate) kernel_foreign: u64,
    /// Receive-queue overruns reported by the kernel (`ENOBUFS`).
    pub(crate) kernel_overruns: u64,
    /// Peer datagrams received.
    pub(crate) peer_rx: u64,
    /// Peer datagrams sent.
    pub(crate) peer_tx: u64,
    /// Peer datagrams not sent (socket full, family unavailable, send error).
    pub(crate) peer_tx_dropped: u64,
    /// SIGUSR1 dumps written (or being written).
    pub(crate) dumps: u64,
    /// SIGUSR1 signals folded into a dump already pending.
    pub(crate) dumps_coalesced: u64,
}

impl IoCounters {
    /// The shell's value of `counter`, `None` for the counters held elsewhere. The pattern
    /// has no `..` and the match no `_`, so a field added here, or a counter added to
    /// [`IoCounter`] (iwpm-control's list, which the tools read back), does not compile
    /// until it is mapped.
    pub(crate) fn get(&self, counter: IoCounter) -> Option<u64> {
        let IoCounters {
            kernel_rx,
            kernel_tx,
            kernel_tx_errors,
            kernel_tx_queued,
            kernel_truncated,
            kernel_foreign,
            kernel_overruns,
            peer_rx,
            peer_tx,
            peer_tx_dropped,
            dumps,
            dumps_coalesced,
        } = self;
        let value = match counter {
            IoCounter::KernelRx => kernel_rx,
            IoCounter::KernelTx => kernel_tx,
            IoCounter::KernelTxErrors => kernel_tx_errors,
            IoCounter::KernelTxQueued => kernel_tx_queued,
            IoCounter::KernelTruncated => kernel_truncated,
            IoCounter::KernelForeign => kernel_foreign,
            IoCounter::KernelOverruns => kernel_overruns,
            IoCounter::PeerRx => peer_rx,
            IoCounter::PeerTx => peer_tx,
            IoCounter::PeerTxDropped => peer_tx_dropped,
            IoCounter::Dumps => dumps,
            IoCounter::DumpsCoalesced => dumps_coalesced,
            // The port lender's and the restart machinery's: `HeldElsewhere`.
            IoCounter::ReserveNoFd
            | IoCounter::ReserveNoPort
            | IoCounter::PortsHeld
            | IoCounter::FdStoreSent
            | IoCounter::FdStoreFailed
            | IoCounter::StateWrites
            | IoCounter::StateWriteErrors => return None,
        };
        Some(*value)
    }

    /// The shell's own counters as `(name, value)`, in [`IoCounter::ALL`] order (the
    /// tests' view; the dump and `status` read [`IoCounters::with`]).
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        IoCounter::ALL
            .iter()
            .filter_map(|&c| Some((c.name(), self.get(c)?)))
    }

    /// Every counter published on `surface`, the shell's and those held elsewhere, in
    /// [`IoCounter::ALL`] order (one absent from both is not printed).
    pub(crate) fn with<'a>(
        &'a self,
        elsewhere: &'a HeldElsewhere,
        surface: Surface,
    ) -> impl Iterator<Item = (&'static str, u64)> + 'a {
        IoCounter::all()
            .filter(move |c| c.shows_in(surface))
            .filter_map(move |c| {
                let value = self.get(c).or_else(|| elsewhere.get(c))?;
                Some((c.name(), value))
            })
    }
}

/// The [`IoCounter`]s held outside [`IoCounters`]: the port lender's (its level and its
/// refusals, `crate::ports::Ports`) and the restart machinery's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeldElsewhere {
    /// Port reservations refused for lack of file descriptors (`EMFILE`/`ENFILE`).
    pub(crate) reserve_no_fd: u64,
    /// Port reservations refused because the ephemeral port range is exhausted.
    pub(crate) reserve_no_port: u64,
    /// Ports reserved now.
    pub(crate) ports_held: u64,
    /// The restart machinery's counters.
    pub(crate) restart: RestartCounts,
}

/// The restart machinery's counters ([`iwpm_report::Presence::Restart`]), each `None`
/// while its part (the FD store, the state file) is off. `Restart::counts` fills it with a
/// struct literal, so a field added here and not counted there does not compile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RestartCounts {
    /// File descriptors handed to the service manager's FD store.
    pub(crate) fd_store_sent: Option<u64>,
    /// FD-store messages that failed.
    pub(crate) fd_store_failed: Option<u64>,
    /// State files written.
    pub(crate) state_writes: Option<u64>,
    /// State-file writes that failed.
    pub(crate) state_write_errors: Option<u64>,
}

impl HeldElsewhere {
    /// The value of `counter`, `None` for [`IoCounters`]' own. Exhaustive like
    /// [`IoCounters::get`], so a new [`IoCounter`] is mapped in both before it compiles.
    pub(crate) fn get(&self, counter: IoCounter) -> Option<u64> {
        let HeldElsewhere {
            reserve_no_fd,
            reserve_no_port,
            ports_held,
            restart:
                RestartCounts {
                    fd_store_sent,
                    fd_store_failed,
                    state_writes,
                    state_write_errors,
                },
        } = *self;
        match counter {
            IoCounter::ReserveNoFd => Some(reserve_no_fd),
            IoCounter::ReserveNoPort => Some(reserve_no_port),
            IoCounter::PortsHeld => Some(ports_held),
            IoCounter::FdStoreSent => fd_store_sent,
            IoCounter::FdStoreFailed => fd_store_failed,
            IoCounter::StateWrites => state_writes,
            IoCounter::StateWriteErrors => state_write_errors,
            IoCounter::KernelRx
            | IoCounter::KernelTx
            | IoCounter::KernelTxErrors
            | IoCounter::KernelTxQueued
            | IoCounter::KernelTruncated
            | IoCounter::KernelForeign
            | IoCounter::KernelOverruns
            | IoCounter::PeerRx
            | IoCounter::PeerTx
            | IoCounter::PeerTxDropped
            | IoCounter::Dumps
            | IoCounter::DumpsCoalesced => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_fields() {
        let c = IoCounters {
            kernel_overruns: 3,
            dumps_coalesced: 1,
            ..IoCounters::default()
        };
        let pairs: Vec<_> = c.iter().collect();
        assert_eq!(pairs.len(), 12);
        assert_eq!(pairs[0], ("kernel_rx", 0));
        assert!(pairs.contains(&("kernel_overruns", 3)));
        assert_eq!(pairs[11], ("dumps_coalesced", 1));
    }

    #[test]
    fn every_counter_reads_back_from_its_name() {
        // Distinct values, so that two names mapped to one field show.
        let c = IoCounters {
            kernel_rx: 1,
            kernel_tx: 2,
            kernel_tx_errors: 3,
            kernel_tx_queued: 4,
            kernel_truncated: 5,
            kernel_foreign: 6,
            kernel_overruns: 7,
            peer_rx: 8,
            peer_tx: 9,
            peer_tx_dropped: 10,
            dumps: 11,
            dumps_coalesced: 12,
        };
        let mut values = Vec::new();
        for (name, value) in c.iter() {
            let counter = IoCounter::from_name(name).unwrap();
            assert_eq!(c.get(counter), Some(value), "{name}");
            values.push(value);
        }
        assert_eq!(
            values,
            (1..=12).collect::<Vec<u64>>(),
            "field order, one each"
        );
        assert_eq!(
            c.get(IoCounter::PortsHeld),
            None,
            "the shell adds ports_held"
        );
    }

    #[test]
    fn the_line_has_every_counter_in_list_order() {
        let c = IoCounters {
            kernel_rx: 1,
            ..IoCounters::default()
        };
        let elsewhere = HeldElsewhere {
            reserve_no_fd: 7,
            reserve_no_port: 8,
            ports_held: 2,
            restart: RestartCounts {
                fd_store_sent: Some(3),
                fd_store_failed: Some(4),
                state_writes: Some(5),
                state_write_errors: Some(6),
            },
        };
        let pairs: Vec<_> = c.with(&elsewhere, Surface::Dump).collect();
        // `status` carries the same counters, the restart machinery's included.
        let status: Vec<_> = c.with(&elsewhere, Surface::Status).collect();
        assert_eq!(status, pairs);
        let names: Vec<_> = pairs.iter().map(|&(name, _)| name).collect();
        let all: Vec<_> = IoCounter::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, all);
        assert_eq!(
            pairs[14..],
            [
                ("ports_held", 2),
                ("fd_store_sent", 3),
                ("fd_store_failed", 4),
                ("state_writes", 5),
                ("state_write_errors", 6)
            ]
        );
        for counter in IoCounter::all() {
            let mine = c.get(counter).is_some();
            let theirs = elsewhere.get(counter).is_some();
            assert!(mine != theirs, "{counter:?}: held in exactly one place");
        }
        let off = HeldElsewhere::default();
        let names: Vec<_> = c.with(&off, Surface::Dump).map(|(name, _)| name).collect();
        assert_eq!(names.len(), 15, "without the restart machinery: {names:?}");
        assert_eq!(names.last(), Some(&"ports_held"));
    }
}
