//! The shell's IO-level counters (the core counts protocol events itself) and their
//! `name=value` export for the SIGUSR1 dump.

/// IO-level counters.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Datagrams received from the kernel.
    pub kernel_rx: u64,
    /// Datagrams sent to the kernel.
    pub kernel_tx: u64,
    /// Sends to the kernel that failed.
    pub kernel_tx_errors: u64,
    /// Sends that found the kernel link full and were queued until it drained.
    pub kernel_tx_queued: u64,
    /// Kernel datagrams longer than the receive buffer.
    pub kernel_truncated: u64,
    /// Netlink datagrams from a port other than the kernel's (dropped).
    pub kernel_foreign: u64,
    /// Receive-queue overruns reported by the kernel (`ENOBUFS`).
    pub kernel_overruns: u64,
    /// Peer datagrams received.
    pub peer_rx: u64,
    /// Peer datagrams sent.
    pub peer_tx: u64,
    /// Peer datagrams not sent (socket full, family unavailable, send error).
    pub peer_tx_dropped: u64,
    /// Port reservations refused for lack of file descriptors (`EMFILE`/`ENFILE`).
    pub reserve_no_fd: u64,
    /// Port reservations refused because the ephemeral port range is exhausted.
    pub reserve_no_port: u64,
    /// SIGUSR1 dumps written (or being written).
    pub dumps: u64,
    /// SIGUSR1 signals folded into a dump already pending.
    pub dumps_coalesced: u64,
}

impl IoCounters {
    /// Sends to the kernel attempted so far, whatever became of them.
    pub fn kernel_sends_attempted(&self) -> u64 {
        self.kernel_tx + self.kernel_tx_errors + self.kernel_tx_queued
    }
}

/// `(name, value)` of each listed field. The pattern has no `..`, so a field added to
/// [`IoCounters`] and not listed here does not compile (and never goes missing from dumps).
macro_rules! named_fields {
    ($counters:expr; $($field:ident),* $(,)?) => {{
        let IoCounters { $($field),* } = $counters;
        [$((stringify!($field), *$field)),*]
    }};
}

impl IoCounters {
    /// Every counter as `(name, value)`; the names are the field names, which tools (the
    /// lab, the tests) read back.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        named_fields!(self;
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
            reserve_no_fd,
            reserve_no_port,
            dumps,
            dumps_coalesced,
        )
        .into_iter()
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
        assert_eq!(pairs.len(), 14);
        assert_eq!(pairs[0], ("kernel_rx", 0));
        assert!(pairs.contains(&("kernel_overruns", 3)));
        assert_eq!(pairs[13], ("dumps_coalesced", 1));
    }
}
