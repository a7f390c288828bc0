//! Counters of everything the core saw and did, for tests, logs and the control socket.

use iwpm_proto::consts::op::RDMA_NL_IWPM_NUM_OPS;

/// Number of iwpm ops (array size of the per-op counters).
pub const NUM_OPS: usize = RDMA_NL_IWPM_NUM_OPS as usize;

/// Peer message kinds, in wire order (REQUEST, ACCEPT, ACK, REJECT).
pub const NUM_PEER_TYPES: usize = 4;

/// All counters. Gauges (`mappings`, `exchanges_active`) reflect the current state; the rest
/// only grow (wrapping).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Kernel messages received, by op (decoded or not).
    pub netlink_in: [u64; NUM_OPS],
    /// Messages sent to the kernel, by op.
    pub netlink_out: [u64; NUM_OPS],
    /// HANDLE_ERR sent, by code (index = code; codes are 10..=17).
    pub handle_err_sent: [u64; 18],
    /// `NLMSG_DONE` received (the kernel's answer to each of our messages; expected).
    pub netlink_done_in: u64,
    /// `NLMSG_DONE` received with a non-zero result (-22 after REMOTE_INFO is normal).
    pub netlink_done_nonzero: u64,
    /// `NLMSG_ERROR` received.
    pub netlink_error_in: u64,
    /// Other control messages (NOOP, OVERRUN) received and ignored.
    pub netlink_control_other: u64,
    /// Kernel messages that failed validation (answered with HANDLE_ERR 10).
    pub netlink_malformed: u64,
    /// Datagrams whose framing was broken (the rest of the datagram is dropped).
    pub netlink_bad_framing: u64,
    /// Kernel messages with an op the daemon does not accept (dropped).
    pub netlink_unknown_op: u64,
    /// ADD/QUERY from a client that has not registered (dropped, as C).
    pub netlink_unregistered: u64,
    /// Kernel requests ignored because their seq was already answered.
    pub netlink_duplicate_seq: u64,
    /// Replies dropped because they could not be produced before the kernel gave up.
    pub replies_dropped_late: u64,
    /// REMOVE for an address with no mapping (normal).
    pub remove_unknown: u64,
    /// REMOVE from a client other than the owner (ignored).
    pub remove_wrong_owner: u64,
    /// Peer messages received, by type (REQUEST, ACCEPT, ACK, REJECT).
    pub peer_in: [u64; NUM_PEER_TYPES],
    /// Peer messages sent, by type, retransmissions included.
    pub peer_out: [u64; NUM_PEER_TYPES],
    /// Peer datagrams that failed to decode (dropped).
    pub peer_malformed: u64,
    /// Peer messages that matched no exchange or mapping (late or stray; dropped).
    pub peer_unmatched: u64,
    /// Duplicate peer messages absorbed (retransmitted REQUESTs, repeated ACCEPTs).
    pub peer_duplicates: u64,
    /// REQUEST/ACCEPT retransmissions.
    pub retransmissions: u64,
    /// REJECTs sent (REQUEST for an address with no mapping).
    pub rejects_sent: u64,
    /// REJECTs received (QUERY answered with error 16).
    pub rejects_received: u64,
    /// Exchanges alive now (gauge).
    pub exchanges_active: u64,
    /// Exchanges that ended by timeout.
    pub exchanges_expired: u64,
    /// Exchanges refused because `max_exchanges` was reached.
    pub exchanges_refused: u64,
    /// Mappings alive now (gauge).
    pub mappings: u64,
    /// Mappings created (ADD, QUERY, MAPINFO).
    pub mappings_created: u64,
    /// Mappings freed (last reference gone).
    pub mappings_freed: u64,
    /// Creations refused because `max_mappings` was reached.
    pub mappings_refused: u64,
    /// Reservations asked of the shell.
    pub reservations_requested: u64,
    /// Reservations the shell could not make.
    pub reservations_failed: u64,
    /// Release actions emitted.
    pub reservations_released: u64,
    /// MAPINFO records accepted (new or identical duplicate).
    pub mapinfo_accepted: u64,
    /// MAPINFO records identical to an existing mapping (refcount restored).
    pub mapinfo_duplicates: u64,
    /// MAPINFO records conflicting with an existing mapping (HANDLE_ERR 12).
    pub mapinfo_conflicts: u64,
    /// Peer datagrams from sources outside `peer_allow` (dropped).
    pub peer_not_allowed: u64,
    /// REQUESTs naming a connecting IP other than their mapped one, or ACCEPTs naming an IP
    /// other than the one asked about (dropped: identity forgery).
    pub peer_forged: u64,
    /// ACCEPT/REJECTs from another IP than the one the REQUEST went to (dropped).
    pub peer_wrong_source: u64,
    /// REQUESTs dropped because their source had `peer_source_quota` unconfirmed exchanges.
    pub peer_quota_dropped: u64,
    /// REQUESTs taken as a new association although their key matched a confirmed
    /// exchange (the peer reused its handle for the same endpoint after our ACK).
    pub peer_reused_handles: u64,
    /// Passive exchanges evicted to make room (`max_peer_exchanges`).
    pub exchanges_evicted: u64,
    /// REJECTs not sent because of `max_rejects_per_sec`.
    pub rejects_suppressed: u64,
    /// REMOTE_INFOs held back until the peer's ACK (budget spent).
    pub remote_info_deferred: u64,
    /// REMOTE_INFOs sent on an ACK after being held back.
    pub remote_info_on_ack: u64,
    /// Passive exchanges alive now (gauge; part of `exchanges_active`).
    pub peer_exchanges_active: u64,
    /// Passive exchanges not yet confirmed by an ACK (gauge).
    pub peer_exchanges_unconfirmed: u64,
    /// MAPINFO records or HELLOs from the kernel that answer no request of ours (dropped).
    pub kernel_unsolicited: u64,
    /// Times the kernel link reported lost input (`ENOBUFS`).
    pub kernel_overruns: u64,
    /// Log lines suppressed by the rate limiter.
    pub logs_suppressed: u64,
}

impl Stats {
    /// Kernel messages received with this op.
    pub fn netlink_in_op(&self, op: u16) -> u64 {
        self.netlink_in.get(usize::from(op)).copied().unwrap_or(0)
    }

    /// Messages sent to the kernel with this op.
    pub fn netlink_out_op(&self, op: u16) -> u64 {
        self.netlink_out.get(usize::from(op)).copied().unwrap_or(0)
    }

    /// HANDLE_ERR sent with this code.
    pub fn handle_err(&self, code: u16) -> u64 {
        self.handle_err_sent
            .get(usize::from(code))
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn bump_op(arr: &mut [u64; NUM_OPS], op: u16) {
        if let Some(c) = arr.get_mut(usize::from(op)) {
            *c = c.wrapping_add(1);
        }
    }
}
