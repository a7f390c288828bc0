//! Counters of everything the core saw and did, for tests, logs and the control socket.
//!
//! [`Counter`] names each scalar and each array slot of [`Stats`] with a stable snake_case
//! name, so the daemon prints `name=value` pairs and tools read them back by type: a
//! renamed field then breaks the build or the parse instead of reading as 0.

use std::fmt;
use std::str::FromStr;

use iwpm_proto::consts::err;
use iwpm_proto::consts::op::{self, RDMA_NL_IWPM_NUM_OPS};
use iwpm_proto::peer::PeerMsgType;

/// Number of iwpm ops (array size of the per-op counters).
pub(crate) const NUM_OPS: usize = RDMA_NL_IWPM_NUM_OPS as usize;

/// Peer message kinds, in wire order (REQUEST, ACCEPT, ACK, REJECT).
pub(crate) const NUM_PEER_TYPES: usize = 4;

/// All counters. Gauges (`mappings`, `exchanges_active`; [`CounterKind::Gauge`] in the list
/// below) reflect the current state; the rest only grow (wrapping).
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
    /// MAPINFO records that replaced a restored connector mapping they contradicted (the
    /// kernel kept the identity mapping of a connect whose QUERY failed).
    pub mapinfo_replaced: u64,
    /// Peer datagrams from sources outside `peer_allow` (dropped).
    pub peer_not_allowed: u64,
    /// REQUESTs naming a connecting IP other than their mapped one, or ACCEPTs naming an IP
    /// other than the one asked about (dropped: identity forgery).
    pub peer_forged: u64,
    /// ACCEPT/REJECTs from another IP than the one the REQUEST went to (dropped).
    pub peer_wrong_source: u64,
    /// Unconfirmed exchanges a newer REQUEST from the same source pushed out at the
    /// `peer_source_quota` (only port-mapped IPv6 peers hold exchanges before their ACK).
    pub peer_quota_dropped: u64,
    /// ACKs whose echo cookie did not verify (blind, tampered or stale; dropped).
    pub peer_acks_unverified: u64,
    /// ACCEPTs sent without an exchange entry (the cookie carries what the ACK needs).
    pub accepts_stateless: u64,
    /// REQUESTs from a peer that is not port mapped (mapped `cp` = `cp`): no REMOTE_INFO,
    /// the kernel reports the right peer without one.
    pub remote_info_not_needed: u64,
    /// Passive: delivery notices sent (the ACCEPT again, marked, once a REMOTE_INFO that
    /// waited for the verified ACK is in the kernel; `crate::cookie`).
    pub remote_info_notices_sent: u64,
    /// Active: QUERY answers held after our ACK because the ACCEPT said the peer's
    /// REMOTE_INFO waits for it (released by the peer's delivery notice, or by the wait).
    pub query_replies_held: u64,
    /// Active: held QUERY answers released because no delivery notice came in time (the
    /// connection may then overtake the peer's REMOTE_INFO).
    pub remote_info_notices_missed: u64,
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
    /// Verified ACKs past their source's allowance (`remote_info_source_burst` and
    /// `remote_info_source_rate`): no REMOTE_INFO released, no budget token returned.
    pub remote_info_source_capped: u64,
    /// Verified ACKs of an exchange whose REMOTE_INFO an earlier ACK already released
    /// (a re-ACK or a replay; nothing released again).
    pub peer_acks_replayed: u64,
    /// Ten-bit (IPv6, no extension block) ACKs dropped unchecked: their source failed
    /// too many checks in the last second.
    pub peer_acks_over_rate: u64,
    /// REMOTE_INFOs held for an IPv6 ACK and dropped: the ACK failed, or newer ones took
    /// the room (`peer_source_quota`, or all held entries at once).
    pub remote_info_held_dropped: u64,
    /// QUERYs for a listener on our own IP answered from our table (no UDP to ourselves).
    pub local_answers: u64,
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

/// An iwpm netlink op, naming a slot of [`Stats::netlink_in`] / [`Stats::netlink_out`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelOp {
    /// `RDMA_NL_IWPM_REG_PID` (0).
    RegPid,
    /// `RDMA_NL_IWPM_ADD_MAPPING` (1).
    AddMapping,
    /// `RDMA_NL_IWPM_QUERY_MAPPING` (2).
    QueryMapping,
    /// `RDMA_NL_IWPM_REMOVE_MAPPING` (3).
    RemoveMapping,
    /// `RDMA_NL_IWPM_REMOTE_INFO` (4).
    RemoteInfo,
    /// `RDMA_NL_IWPM_HANDLE_ERR` (5).
    HandleErr,
    /// `RDMA_NL_IWPM_MAPINFO` (6).
    MapInfo,
    /// `RDMA_NL_IWPM_MAPINFO_NUM` (7).
    MapInfoNum,
    /// `RDMA_NL_IWPM_HELLO` (8).
    Hello,
}

impl KernelOp {
    /// Every op, in code order (the array index of the per-op counters).
    pub const ALL: [KernelOp; NUM_OPS] = [
        KernelOp::RegPid,
        KernelOp::AddMapping,
        KernelOp::QueryMapping,
        KernelOp::RemoveMapping,
        KernelOp::RemoteInfo,
        KernelOp::HandleErr,
        KernelOp::MapInfo,
        KernelOp::MapInfoNum,
        KernelOp::Hello,
    ];

    /// The op's code on the wire.
    pub fn code(self) -> u16 {
        match self {
            KernelOp::RegPid => op::RDMA_NL_IWPM_REG_PID,
            KernelOp::AddMapping => op::RDMA_NL_IWPM_ADD_MAPPING,
            KernelOp::QueryMapping => op::RDMA_NL_IWPM_QUERY_MAPPING,
            KernelOp::RemoveMapping => op::RDMA_NL_IWPM_REMOVE_MAPPING,
            KernelOp::RemoteInfo => op::RDMA_NL_IWPM_REMOTE_INFO,
            KernelOp::HandleErr => op::RDMA_NL_IWPM_HANDLE_ERR,
            KernelOp::MapInfo => op::RDMA_NL_IWPM_MAPINFO,
            KernelOp::MapInfoNum => op::RDMA_NL_IWPM_MAPINFO_NUM,
            KernelOp::Hello => op::RDMA_NL_IWPM_HELLO,
        }
    }

    fn index(self) -> usize {
        usize::from(self.code())
    }
}

/// A HANDLE_ERR code, naming a slot of [`Stats::handle_err_sent`] (codes below 10 do not
/// exist and are never sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrCode {
    /// `IWPM_INVALID_NLMSG_ERR` (10).
    InvalidNlmsg,
    /// `IWPM_CREATE_MAPPING_ERR` (11).
    CreateMapping,
    /// `IWPM_DUPLICATE_MAPPING_ERR` (12).
    DuplicateMapping,
    /// `IWPM_UNKNOWN_MAPPING_ERR` (13).
    UnknownMapping,
    /// `IWPM_CLIENT_DEV_INFO_ERR` (14).
    ClientDevInfo,
    /// `IWPM_USER_LIB_INFO_ERR` (15).
    UserLibInfo,
    /// `IWPM_REMOTE_QUERY_REJECT` (16).
    RemoteQueryReject,
    /// `IWPM_VERSION_MISMATCH_ERR` (17).
    VersionMismatch,
}

/// Number of HANDLE_ERR codes.
const NUM_ERR_CODES: usize = 8;

impl ErrCode {
    /// Every code, in ascending order.
    pub const ALL: [ErrCode; NUM_ERR_CODES] = [
        ErrCode::InvalidNlmsg,
        ErrCode::CreateMapping,
        ErrCode::DuplicateMapping,
        ErrCode::UnknownMapping,
        ErrCode::ClientDevInfo,
        ErrCode::UserLibInfo,
        ErrCode::RemoteQueryReject,
        ErrCode::VersionMismatch,
    ];

    /// The code on the wire (and the index into [`Stats::handle_err_sent`]).
    pub fn code(self) -> u16 {
        match self {
            ErrCode::InvalidNlmsg => err::IWPM_INVALID_NLMSG_ERR,
            ErrCode::CreateMapping => err::IWPM_CREATE_MAPPING_ERR,
            ErrCode::DuplicateMapping => err::IWPM_DUPLICATE_MAPPING_ERR,
            ErrCode::UnknownMapping => err::IWPM_UNKNOWN_MAPPING_ERR,
            ErrCode::ClientDevInfo => err::IWPM_CLIENT_DEV_INFO_ERR,
            ErrCode::UserLibInfo => err::IWPM_USER_LIB_INFO_ERR,
            ErrCode::RemoteQueryReject => err::IWPM_REMOTE_QUERY_REJECT,
            ErrCode::VersionMismatch => err::IWPM_VERSION_MISMATCH_ERR,
        }
    }

    /// Position in [`ErrCode::ALL`] (and in the name table).
    fn ordinal(self) -> usize {
        usize::from(self.code() - err::IWPM_INVALID_NLMSG_ERR)
    }
}

/// Peer message types in wire order (the index of [`Stats::peer_in`] / [`Stats::peer_out`]).
const PEER_TYPES: [PeerMsgType; NUM_PEER_TYPES] = [
    PeerMsgType::Request,
    PeerMsgType::Accept,
    PeerMsgType::Ack,
    PeerMsgType::Reject,
];

// Names of the array slots, spelled out so that each one can be found with grep.
const NETLINK_IN_NAMES: [&str; NUM_OPS] = [
    "netlink_in_reg_pid",
    "netlink_in_add_mapping",
    "netlink_in_query_mapping",
    "netlink_in_remove_mapping",
    "netlink_in_remote_info",
    "netlink_in_handle_err",
    "netlink_in_mapinfo",
    "netlink_in_mapinfo_num",
    "netlink_in_hello",
];
const NETLINK_OUT_NAMES: [&str; NUM_OPS] = [
    "netlink_out_reg_pid",
    "netlink_out_add_mapping",
    "netlink_out_query_mapping",
    "netlink_out_remove_mapping",
    "netlink_out_remote_info",
    "netlink_out_handle_err",
    "netlink_out_mapinfo",
    "netlink_out_mapinfo_num",
    "netlink_out_hello",
];
const HANDLE_ERR_NAMES: [&str; NUM_ERR_CODES] = [
    "handle_err_sent_invalid_nlmsg",
    "handle_err_sent_create_mapping",
    "handle_err_sent_duplicate_mapping",
    "handle_err_sent_unknown_mapping",
    "handle_err_sent_client_dev_info",
    "handle_err_sent_user_lib_info",
    "handle_err_sent_remote_query_reject",
    "handle_err_sent_version_mismatch",
];
const PEER_IN_NAMES: [&str; NUM_PEER_TYPES] = [
    "peer_in_request",
    "peer_in_accept",
    "peer_in_ack",
    "peer_in_reject",
];
const PEER_OUT_NAMES: [&str; NUM_PEER_TYPES] = [
    "peer_out_request",
    "peer_out_accept",
    "peer_out_ack",
    "peer_out_reject",
];

/// Whether a counter only grows or reflects the current state; the metrics render the
/// first as `_total` counters, the second as gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// Only grows (wrapping).
    Total,
    /// The current level (`mappings`, `exchanges_active`, ...).
    Gauge,
}

/// Defines [`Counter`] and the accessors from the scalar fields, in field order: those
/// before `peer_in` and those after `peer_out`, each with its [`CounterKind`] (a level is
/// marked `Gauge` here, where the field is listed, and nowhere else). The accessors
/// destructure [`Stats`] without `..`, so a field added to it and not listed here does not
/// compile (rustc then reports that the pattern "requires `..`" or "does not mention" the
/// field: list it below, with its kind).
macro_rules! counters {
    (
        $($early:ident => $early_field:ident: $early_kind:ident,)*
        ;
        $($late:ident => $late_field:ident: $late_kind:ident,)*
    ) => {
        /// One counter of [`Stats`]: a scalar field, or one slot of an array field.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Counter {
            /// [`Stats::netlink_in`] of one op.
            NetlinkIn(KernelOp),
            /// [`Stats::netlink_out`] of one op.
            NetlinkOut(KernelOp),
            /// [`Stats::handle_err_sent`] of one code.
            HandleErrSent(ErrCode),
            /// [`Stats::peer_in`] of one message type.
            PeerIn(PeerMsgType),
            /// [`Stats::peer_out`] of one message type.
            PeerOut(PeerMsgType),
            $(
                #[doc = concat!("[`Stats::", stringify!($early_field), "`].")]
                $early,
            )*
            $(
                #[doc = concat!("[`Stats::", stringify!($late_field), "`].")]
                $late,
            )*
        }

        impl Counter {
            const EARLY: &'static [Counter] = &[$(Counter::$early),*];
            const LATE: &'static [Counter] = &[$(Counter::$late),*];

            /// The stable snake_case name (the field's name; array slots add the op, code
            /// or message type, e.g. `netlink_in_query_mapping`, `peer_out_ack`).
            pub fn name(self) -> &'static str {
                match self {
                    Counter::NetlinkIn(op) => NETLINK_IN_NAMES[op.index()],
                    Counter::NetlinkOut(op) => NETLINK_OUT_NAMES[op.index()],
                    Counter::HandleErrSent(code) => HANDLE_ERR_NAMES[code.ordinal()],
                    Counter::PeerIn(t) => PEER_IN_NAMES[usize::from(t.code())],
                    Counter::PeerOut(t) => PEER_OUT_NAMES[usize::from(t.code())],
                    $(Counter::$early => stringify!($early_field),)*
                    $(Counter::$late => stringify!($late_field),)*
                }
            }

            /// Whether it only grows or is a level (every array slot only grows).
            pub fn kind(self) -> CounterKind {
                match self {
                    Counter::NetlinkIn(_)
                    | Counter::NetlinkOut(_)
                    | Counter::HandleErrSent(_)
                    | Counter::PeerIn(_)
                    | Counter::PeerOut(_) => CounterKind::Total,
                    $(Counter::$early => CounterKind::$early_kind,)*
                    $(Counter::$late => CounterKind::$late_kind,)*
                }
            }
        }

        impl Stats {
            /// The value of one counter.
            pub fn get(&self, counter: Counter) -> u64 {
                let Stats {
                    netlink_in,
                    netlink_out,
                    handle_err_sent,
                    peer_in,
                    peer_out,
                    $($early_field,)*
                    $($late_field,)*
                } = self;
                match counter {
                    Counter::NetlinkIn(op) => netlink_in[op.index()],
                    Counter::NetlinkOut(op) => netlink_out[op.index()],
                    Counter::HandleErrSent(code) => handle_err_sent[usize::from(code.code())],
                    Counter::PeerIn(t) => peer_in[usize::from(t.code())],
                    Counter::PeerOut(t) => peer_out[usize::from(t.code())],
                    $(Counter::$early => *$early_field,)*
                    $(Counter::$late => *$late_field,)*
                }
            }

            /// Sets one counter (for tools that rebuild a `Stats` from its printed pairs).
            /// (`get` destructures every field, so a field without a counter fails to
            /// compile; here the match over `Counter` is enough.)
            pub fn set(&mut self, counter: Counter, value: u64) {
                let slot = match counter {
                    Counter::NetlinkIn(op) => &mut self.netlink_in[op.index()],
                    Counter::NetlinkOut(op) => &mut self.netlink_out[op.index()],
                    Counter::HandleErrSent(code) => {
                        &mut self.handle_err_sent[usize::from(code.code())]
                    }
                    Counter::PeerIn(t) => &mut self.peer_in[usize::from(t.code())],
                    Counter::PeerOut(t) => &mut self.peer_out[usize::from(t.code())],
                    $(Counter::$early => &mut self.$early_field,)*
                    $(Counter::$late => &mut self.$late_field,)*
                };
                *slot = value;
            }
        }
    };
}

counters! {
    NetlinkDoneIn => netlink_done_in: Total,
    NetlinkDoneNonzero => netlink_done_nonzero: Total,
    NetlinkErrorIn => netlink_error_in: Total,
    NetlinkControlOther => netlink_control_other: Total,
    NetlinkMalformed => netlink_malformed: Total,
    NetlinkBadFraming => netlink_bad_framing: Total,
    NetlinkUnknownOp => netlink_unknown_op: Total,
    NetlinkUnregistered => netlink_unregistered: Total,
    NetlinkDuplicateSeq => netlink_duplicate_seq: Total,
    RepliesDroppedLate => replies_dropped_late: Total,
    RemoveUnknown => remove_unknown: Total,
    RemoveWrongOwner => remove_wrong_owner: Total,
    ;
    PeerMalformed => peer_malformed: Total,
    PeerUnmatched => peer_unmatched: Total,
    PeerDuplicates => peer_duplicates: Total,
    Retransmissions => retransmissions: Total,
    RejectsSent => rejects_sent: Total,
    RejectsReceived => rejects_received: Total,
    ExchangesActive => exchanges_active: Gauge,
    ExchangesExpired => exchanges_expired: Total,
    ExchangesRefused => exchanges_refused: Total,
    Mappings => mappings: Gauge,
    MappingsCreated => mappings_created: Total,
    MappingsFreed => mappings_freed: Total,
    MappingsRefused => mappings_refused: Total,
    ReservationsRequested => reservations_requested: Total,
    ReservationsFailed => reservations_failed: Total,
    ReservationsReleased => reservations_released: Total,
    MapinfoAccepted => mapinfo_accepted: Total,
    MapinfoDuplicates => mapinfo_duplicates: Total,
    MapinfoConflicts => mapinfo_conflicts: Total,
    MapinfoReplaced => mapinfo_replaced: Total,
    PeerNotAllowed => peer_not_allowed: Total,
    PeerForged => peer_forged: Total,
    PeerWrongSource => peer_wrong_source: Total,
    PeerQuotaDropped => peer_quota_dropped: Total,
    PeerAcksUnverified => peer_acks_unverified: Total,
    AcceptsStateless => accepts_stateless: Total,
    RemoteInfoNotNeeded => remote_info_not_needed: Total,
    RemoteInfoNoticesSent => remote_info_notices_sent: Total,
    QueryRepliesHeld => query_replies_held: Total,
    RemoteInfoNoticesMissed => remote_info_notices_missed: Total,
    PeerReusedHandles => peer_reused_handles: Total,
    ExchangesEvicted => exchanges_evicted: Total,
    RejectsSuppressed => rejects_suppressed: Total,
    RemoteInfoDeferred => remote_info_deferred: Total,
    RemoteInfoOnAck => remote_info_on_ack: Total,
    RemoteInfoSourceCapped => remote_info_source_capped: Total,
    PeerAcksReplayed => peer_acks_replayed: Total,
    PeerAcksOverRate => peer_acks_over_rate: Total,
    RemoteInfoHeldDropped => remote_info_held_dropped: Total,
    LocalAnswers => local_answers: Total,
    PeerExchangesActive => peer_exchanges_active: Gauge,
    PeerExchangesUnconfirmed => peer_exchanges_unconfirmed: Gauge,
    KernelUnsolicited => kernel_unsolicited: Total,
    KernelOverruns => kernel_overruns: Total,
    LogsSuppressed => logs_suppressed: Total,
}

impl Counter {
    /// Every counter, in the field order of [`Stats`] (array slots in index order).
    pub fn all() -> impl Iterator<Item = Counter> {
        let ops_in = KernelOp::ALL.into_iter().map(Counter::NetlinkIn);
        let ops_out = KernelOp::ALL.into_iter().map(Counter::NetlinkOut);
        let errs = ErrCode::ALL.into_iter().map(Counter::HandleErrSent);
        let peer_in = PEER_TYPES.into_iter().map(Counter::PeerIn);
        let peer_out = PEER_TYPES.into_iter().map(Counter::PeerOut);
        ops_in
            .chain(ops_out)
            .chain(errs)
            .chain(Counter::EARLY.iter().copied())
            .chain(peer_in)
            .chain(peer_out)
            .chain(Counter::LATE.iter().copied())
    }
}

impl Counter {
    /// A gauge (the current level), not a counter that only grows.
    pub fn is_gauge(self) -> bool {
        self.kind() == CounterKind::Gauge
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A counter name that [`Counter`] does not know (renamed, removed, or a typo).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown counter name {0:?}")]
pub struct UnknownCounter(pub String);

impl FromStr for Counter {
    type Err = UnknownCounter;

    fn from_str(name: &str) -> Result<Counter, UnknownCounter> {
        Counter::all()
            .find(|c| c.name() == name)
            .ok_or_else(|| UnknownCounter(name.to_string()))
    }
}

impl Stats {
    /// Every counter as `(name, value)`, in [`Counter::all`] order: the stable export the
    /// daemon prints, instead of `Debug` text whose shape follows the struct.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::all().map(move |c| (c.name(), self.get(c)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_slot_has_one_distinct_counter() {
        // Each counter set to a distinct value must land in its own slot: a name table or
        // accessor pointing two counters at one field would lose a value here.
        let mut s = Stats::default();
        for (i, c) in Counter::all().enumerate() {
            s.set(c, i as u64 + 1);
        }
        for (i, c) in Counter::all().enumerate() {
            assert_eq!(s.get(c), i as u64 + 1, "{c}");
        }
        let scalars = Counter::EARLY.len() + Counter::LATE.len();
        let slots = 2 * NUM_OPS + NUM_ERR_CODES + 2 * NUM_PEER_TYPES + scalars;
        assert_eq!(Counter::all().count(), slots);
        // Nothing of the struct is left unset but the non-existent HANDLE_ERR codes 0..=9.
        let mut expected = s.clone();
        expected.handle_err_sent[..10].fill(0);
        assert_eq!(s, expected);
        assert!(!Stats::default().iter().any(|(_, v)| v != 0));
    }

    #[test]
    fn names_are_unique_snake_case_and_parse_back() {
        let mut seen = HashSet::new();
        for c in Counter::all() {
            let name = c.name();
            assert!(seen.insert(name), "duplicate name {name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert_eq!(name.parse::<Counter>(), Ok(c));
        }
        assert_eq!(
            "netlink_in".parse::<Counter>(),
            Err(UnknownCounter("netlink_in".into()))
        );
    }

    #[test]
    fn array_slots_follow_the_wire_codes() {
        for (i, op) in KernelOp::ALL.into_iter().enumerate() {
            assert_eq!(op.index(), i);
        }
        for (i, code) in ErrCode::ALL.into_iter().enumerate() {
            assert_eq!(code.ordinal(), i);
        }
        for (i, t) in PEER_TYPES.into_iter().enumerate() {
            assert_eq!(usize::from(t.code()), i);
        }
        let mut s = Stats::default();
        Stats::bump_op(&mut s.netlink_in, op::RDMA_NL_IWPM_QUERY_MAPPING);
        s.handle_err_sent[usize::from(err::IWPM_REMOTE_QUERY_REJECT)] = 3;
        s.peer_out[usize::from(PeerMsgType::Ack.code())] = 4;
        assert_eq!(s.get(Counter::NetlinkIn(KernelOp::QueryMapping)), 1);
        assert_eq!(s.get(Counter::HandleErrSent(ErrCode::RemoteQueryReject)), 3);
        assert_eq!(s.get(Counter::PeerOut(PeerMsgType::Ack)), 4);
        let pairs: Vec<_> = s.iter().filter(|(_, v)| *v != 0).collect();
        assert_eq!(
            pairs,
            [
                ("netlink_in_query_mapping", 1),
                ("handle_err_sent_remote_query_reject", 3),
                ("peer_out_ack", 4)
            ]
        );
    }

    #[test]
    fn the_levels_are_the_gauges() {
        let gauges: Vec<&str> = Counter::all()
            .filter(|c| c.is_gauge())
            .map(Counter::name)
            .collect();
        assert_eq!(
            gauges,
            [
                "exchanges_active",
                "mappings",
                "peer_exchanges_active",
                "peer_exchanges_unconfirmed"
            ]
        );
        assert_eq!(Counter::Retransmissions.kind(), CounterKind::Total);
        assert!(!Counter::NetlinkIn(KernelOp::Hello).is_gauge());
    }
}
