//! Tunables of the core. Defaults follow the C daemon's timing (1 s × 9 retransmissions,
//! 10 s lifetime) and the kernel's 10 s request timeout.

use std::time::Duration;

use iwpm_proto::consts::{IWPM_PEER_PORT, IWPM_UABI_VERSION};

/// Configuration of a [`crate::Core`].
///
/// Construct with `CoreConfig { netlink_pid, ..Default::default() }`: the shell must fill in
/// `netlink_pid` (a 0 there makes the kernel unicast to itself) and should fill
/// `handle_seed` with a random value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Our bound netlink port id, written into every `nlmsg_pid`.
    pub netlink_pid: u32,
    /// Highest iwpm ABI version offered in HELLO (4).
    pub max_abi: u16,
    /// UDP port of the peer daemons (3935).
    pub peer_port: u16,
    /// Period of REQUEST/ACCEPT retransmissions (1 s).
    pub retransmit_interval: Duration,
    /// Retransmissions after the first send (9).
    pub max_retransmits: u32,
    /// How long a peer exchange lives (10 s).
    pub exchange_lifetime: Duration,
    /// Most distinct mappings held at once; beyond it creations fail with CREATE_MAPPING_ERR.
    pub max_mappings: usize,
    /// Most peer exchanges held at once; beyond it new ones are refused. An exchange lives
    /// for `exchange_lifetime` (10 s) even after it completes, so this bounds the sustained
    /// connection rate to `max_exchanges / 10 s` (131 072 → 13 107 connections per second)
    /// while capping memory at a few hundred bytes per exchange (~40 MiB worst case).
    pub max_exchanges: usize,
    /// Minimum time between two log lines of the same kind (the rest are counted).
    pub log_interval: Duration,
    /// A reply the core could not produce within this time after the kernel's request is
    /// dropped: the kernel gave up at 10 s and a late reply would hit freed state.
    pub reply_deadline: Duration,
    /// If the kernel answers neither HELLO reply nor error within this time, report
    /// [`crate::Action::Ready`] anyway.
    pub handshake_timeout: Duration,
    /// Seed of the association-handle generator (handles are unique for any seed).
    pub handle_seed: u64,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            netlink_pid: 0,
            max_abi: IWPM_UABI_VERSION,
            peer_port: IWPM_PEER_PORT,
            retransmit_interval: Duration::from_secs(1),
            max_retransmits: 9,
            exchange_lifetime: Duration::from_secs(10),
            max_mappings: 100_000,
            max_exchanges: 131_072,
            log_interval: Duration::from_secs(5),
            reply_deadline: Duration::from_millis(9_500),
            handshake_timeout: Duration::from_secs(5),
            handle_seed: 0x6977_706d_6421_5eed,
        }
    }
}
