//! Counters of the emulated kernel side: what a test asserts on besides violations.

/// Message and outcome counters. All start at 0 and only grow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Datagrams received from daemon sockets.
    pub datagrams_in: u64,
    /// REG_PID requests sent (multicast attempts, failed ones included).
    pub reg_pid_sent: u64,
    /// ADD_MAPPING requests sent.
    pub add_sent: u64,
    /// QUERY_MAPPING requests sent.
    pub query_sent: u64,
    /// REMOVE_MAPPING notifications sent.
    pub remove_sent: u64,
    /// HELLO replies sent.
    pub hello_replies_sent: u64,
    /// MAPINFO records sent during replays.
    pub mapinfo_records_sent: u64,
    /// MAPINFO datagrams (batches) sent during replays.
    pub mapinfo_batches_sent: u64,
    /// MAPINFO_NUM messages sent.
    pub mapinfo_num_sent: u64,
    /// Dump-completion `NLMSG_DONE`s sent (one per dispatched daemon message).
    pub dones_sent: u64,
    /// `NLMSG_ERROR`s sent (undispatchable messages and requested ACKs).
    pub errors_sent: u64,
    /// REG_PID replies received.
    pub reg_pid_replies: u64,
    /// ADD_MAPPING replies received.
    pub add_replies: u64,
    /// QUERY_MAPPING replies received.
    pub query_replies: u64,
    /// REMOTE_INFO messages received.
    pub remote_info_received: u64,
    /// HANDLE_ERR messages received.
    pub handle_err_received: u64,
    /// HANDLE_ERR messages whose seq matched no request (normal for MAPINFO conflicts).
    pub handle_err_unmatched: u64,
    /// MAPINFO requests received.
    pub mapinfo_requests: u64,
    /// MAPINFO_NUM acks received.
    pub mapinfo_num_acks: u64,
    /// HELLO messages received.
    pub hellos: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// REG_PID multicasts that reached nobody.
    pub multicast_failures: u64,
    /// ADD/QUERY/REMOVE unicasts that failed.
    pub unicast_failures: u64,
    /// `iw_cm_map` calls started.
    pub maps_started: u64,
    /// `iw_cm_map` calls that ended with the daemon's mapping.
    pub maps_mapped: u64,
    /// `iw_cm_map` calls that ended unmapped.
    pub maps_unmapped: u64,
    /// MAPINFO replays started.
    pub replays: u64,
    /// MAPINFO replays aborted (send failure or the datagram limit).
    pub replays_aborted: u64,
    /// Incoming connections whose remote address was found in the remote-info table.
    pub remote_info_hits: u64,
    /// Incoming connections with no remote-info entry (remote reported as mapped).
    pub remote_info_misses: u64,
}
