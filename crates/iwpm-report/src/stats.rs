//! Counters of everything the core saw and did, for tests, logs and the control socket.
//!
//! [`Counter`] names each scalar and each array slot of [`Stats`] with a stable snake_case
//! name, so the daemon prints `name=value` pairs and tools read them back by type: a
//! renamed field then breaks the build or the parse instead of reading as 0.

use std::str::FromStr;

use iwpm_proto::consts::err;
use iwpm_proto::consts::op::{self, RDMA_NL_IWPM_NUM_OPS};
use iwpm_proto::peer::PeerMsgType;

use crate::counter::{CounterSlot, Surface};

/// Number of iwpm ops (array size of the per-op counters).
const NUM_OPS: usize = RDMA_NL_IWPM_NUM_OPS as usize;

/// Peer message kinds, in wire order (REQUEST, ACCEPT, ACK, REJECT).
const NUM_PEER_TYPES: usize = 4;

crate::counters! {
    /// One counter of [`Stats`]: a scalar field, or one slot of an array field.
    pub enum Counter;
    /// All counters, one field per [`Counter`] (an array per array counter). Gauges
    /// ([`crate::CounterKind::Gauge`]: `mappings`, `exchanges_active`, ...) reflect the current
    /// state; the rest only grow (wrapping).
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Stats;
    /// Kernel messages received, by op (decoded or not).
    NetlinkIn(KernelOp, NETLINK_IN_NAMES) => netlink_in: Total;
    /// Messages sent to the kernel, by op.
    NetlinkOut(KernelOp, NETLINK_OUT_NAMES) => netlink_out: Total;
    /// HANDLE_ERR sent to the kernel with the error code the name ends in (codes 10..=17).
    HandleErrSent(ErrCode, HANDLE_ERR_NAMES) => handle_err_sent: Total;
    /// `NLMSG_DONE` received (the kernel's answer to each of our messages; expected).
    NetlinkDoneIn => netlink_done_in: Total;
    /// `NLMSG_DONE` received with a non-zero result (-22 after REMOTE_INFO is normal).
    NetlinkDoneNonzero => netlink_done_nonzero: Total;
    /// `NLMSG_ERROR` received.
    NetlinkErrorIn => netlink_error_in: Total;
    /// Other control messages (NOOP, OVERRUN) received and ignored.
    NetlinkControlOther => netlink_control_other: Total;
    /// Kernel messages that failed validation (answered with HANDLE_ERR 10).
    NetlinkMalformed => netlink_malformed: Total;
    /// Datagrams whose framing was broken (the rest of the datagram is dropped).
    NetlinkBadFraming => netlink_bad_framing: Total;
    /// Kernel messages with an op the daemon does not accept (dropped).
    NetlinkUnknownOp => netlink_unknown_op: Total;
    /// ADD/QUERY from a client that has not registered (dropped, as C).
    NetlinkUnregistered => netlink_unregistered: Total;
    /// Kernel requests ignored because their seq was already answered.
    NetlinkDuplicateSeq => netlink_duplicate_seq: Total;
    /// Replies dropped because they could not be produced before the kernel gave up.
    RepliesDroppedLate => replies_dropped_late: Total;
    /// REMOVE for an address with no mapping (normal).
    RemoveUnknown => remove_unknown: Total;
    /// REMOVE from a client other than the owner (ignored).
    RemoveWrongOwner => remove_wrong_owner: Total;
    /// Peer messages received, by type (REQUEST, ACCEPT, ACK, REJECT).
    PeerIn(PeerMsgType, PEER_IN_NAMES) => peer_in: Total;
    /// Peer messages sent, by type, retransmissions included.
    PeerOut(PeerMsgType, PEER_OUT_NAMES) => peer_out: Total;
    /// Peer datagrams that failed to decode (dropped).
    PeerMalformed => peer_malformed: Total;
    /// Peer messages that matched no exchange or mapping (late or stray; dropped).
    PeerUnmatched => peer_unmatched: Total;
    /// Duplicate peer messages absorbed (retransmitted REQUESTs, repeated ACCEPTs).
    PeerDuplicates => peer_duplicates: Total;
    /// REQUEST/ACCEPT retransmissions.
    Retransmissions => retransmissions: Total;
    /// REJECTs sent (REQUEST for an address with no mapping).
    RejectsSent => rejects_sent: Total;
    /// REJECTs received (QUERY answered with error 16).
    RejectsReceived => rejects_received: Total;
    /// Exchanges alive now (gauge).
    // In the metrics as `iwpmd_exchanges`.
    ExchangesActive => exchanges_active: Gauge, in [Status, Dump];
    /// Exchanges that ended by timeout.
    ExchangesExpired => exchanges_expired: Total;
    /// Exchanges refused because `max_exchanges` was reached.
    ExchangesRefused => exchanges_refused: Total;
    /// Mappings alive now (gauge).
    // In the metrics as `iwpmd_mappings`.
    Mappings => mappings: Gauge, in [Status, Dump];
    /// Mappings created (ADD, QUERY, MAPINFO).
    MappingsCreated => mappings_created: Total;
    /// Mappings freed (last reference gone).
    MappingsFreed => mappings_freed: Total;
    /// Creations refused because `max_mappings` was reached.
    MappingsRefused => mappings_refused: Total;
    /// Reservations asked of the shell.
    ReservationsRequested => reservations_requested: Total;
    /// Reservations the shell could not make.
    ReservationsFailed => reservations_failed: Total;
    /// Release actions emitted.
    ReservationsReleased => reservations_released: Total;
    /// MAPINFO records accepted (new or identical duplicate).
    MapinfoAccepted => mapinfo_accepted: Total;
    /// MAPINFO records identical to an existing mapping (refcount restored).
    MapinfoDuplicates => mapinfo_duplicates: Total;
    /// MAPINFO records conflicting with an existing mapping (HANDLE_ERR 12).
    MapinfoConflicts => mapinfo_conflicts: Total;
    /// MAPINFO records that replaced a restored connector mapping they contradicted (the
    /// kernel kept the identity mapping of a connect whose QUERY failed).
    MapinfoReplaced => mapinfo_replaced: Total;
    /// Peer datagrams from sources outside `peer_allow` (dropped).
    PeerNotAllowed => peer_not_allowed: Total;
    /// REQUESTs naming a connecting IP other than their mapped one, or ACCEPTs naming an IP
    /// other than the one asked about (dropped: identity forgery).
    PeerForged => peer_forged: Total;
    /// ACCEPT/REJECTs from another IP than the one the REQUEST went to (dropped).
    PeerWrongSource => peer_wrong_source: Total;
    /// ACKs whose echo cookie did not verify (blind, tampered or stale; dropped).
    PeerAcksUnverified => peer_acks_unverified: Total;
    /// ACCEPTs sent without an exchange entry (the cookie carries what the ACK needs).
    AcceptsStateless => accepts_stateless: Total;
    /// REQUESTs from a peer that is not port mapped (mapped `cp` = `cp`): no REMOTE_INFO,
    /// the kernel reports the right peer without one.
    RemoteInfoNotNeeded => remote_info_not_needed: Total;
    /// Passive: delivery notices sent (the ACCEPT again, marked, once a REMOTE_INFO that
    /// waited for the verified ACK is in the kernel; `crate::cookie`).
    RemoteInfoNoticesSent => remote_info_notices_sent: Total;
    /// Active: QUERY answers held after our ACK because the ACCEPT said the peer's
    /// REMOTE_INFO waits for it (released by the peer's delivery notice, or by the wait).
    QueryRepliesHeld => query_replies_held: Total;
    /// Active: held QUERY answers released because no delivery notice came in time (the
    /// connection may then overtake the peer's REMOTE_INFO).
    RemoteInfoNoticesMissed => remote_info_notices_missed: Total;
    /// REQUESTs taken as a new association although their key matched a confirmed
    /// exchange (the peer reused its handle for the same endpoint after our ACK).
    PeerReusedHandles => peer_reused_handles: Total;
    /// Passive exchanges evicted to make room (`max_peer_exchanges`).
    ExchangesEvicted => exchanges_evicted: Total;
    /// REJECTs not sent because of `max_rejects_per_sec`.
    RejectsSuppressed => rejects_suppressed: Total;
    /// REMOTE_INFOs held back until the peer's ACK (budget spent).
    RemoteInfoDeferred => remote_info_deferred: Total;
    /// REMOTE_INFOs sent on an ACK after being held back.
    RemoteInfoOnAck => remote_info_on_ack: Total;
    /// Verified ACKs past their source's allowance (`remote_info_source_burst` and
    /// `remote_info_source_rate`): no REMOTE_INFO released, no budget token returned.
    RemoteInfoSourceCapped => remote_info_source_capped: Total;
    /// Verified ACKs of an exchange whose REMOTE_INFO an earlier ACK already released
    /// (a re-ACK or a replay; nothing released again).
    PeerAcksReplayed => peer_acks_replayed: Total;
    /// REMOTE_INFOs held for a ten-bit (IPv6) ACK and dropped: the ACK failed, or newer
    /// ones took the room (`crate::held`: 16 384 held at once, from every source).
    RemoteInfoHeldDropped => remote_info_held_dropped: Total;
    /// QUERYs for a listener on our own IP answered from our table (no UDP to ourselves).
    LocalAnswers => local_answers: Total;
    /// Sealed peer datagrams that verified under one of our fleet keys (fresh, not seen
    /// before): authenticated, and exempt from the spoofing defences.
    PeerAuthVerified => peer_auth_verified: Total;
    /// Sealed peer datagrams dropped: sealed under a key id we do not hold, or their MAC
    /// does not verify (a host with another key, or a forgery).
    PeerAuthWrongKey => peer_auth_wrong_key: Total;
    /// Sealed peer datagrams dropped: their stamp is outside `peer_auth_window` (a skewed
    /// clock, or a capture sent again later).
    PeerAuthClock => peer_auth_clock: Total;
    /// Sealed peer datagrams dropped: seen before (a replay).
    PeerAuthReplayed => peer_auth_replayed: Total;
    /// Sealed peer datagrams dropped: they verify, but come from another address than the
    /// one they name as their sender (a copy raced ahead of the real one).
    PeerAuthWrongSource => peer_auth_wrong_source: Total;
    /// Plain (or stripped) peer datagrams dropped: their source is in
    /// `peer_auth_required`.
    PeerAuthMissing => peer_auth_missing: Total;
    /// Sealed peer datagrams received while we hold no fleet key: served unauthenticated.
    PeerAuthUnkeyed => peer_auth_unkeyed: Total;
    /// Answers not sent because they would have been larger than the datagram they
    /// answer (a duplicate in a smaller form than the original: bytes out never exceed
    /// bytes in).
    PeerAnswersWithheld => peer_answers_withheld: Total;
    /// Passive exchanges alive now (gauge; part of `exchanges_active`).
    PeerExchangesActive => peer_exchanges_active: Gauge;
    /// Passive exchanges not yet confirmed by an ACK (gauge).
    PeerExchangesUnconfirmed => peer_exchanges_unconfirmed: Gauge;
    /// MAPINFO records or HELLOs from the kernel that answer no request of ours (dropped).
    KernelUnsolicited => kernel_unsolicited: Total;
    /// Times the kernel link reported lost input (`ENOBUFS`).
    // In the metrics as `iwpmd_io_kernel_overruns_total`.
    KernelOverruns => kernel_overruns: Total, in [Status, Dump];
    /// Log lines suppressed by the rate limiter.
    LogsSuppressed => logs_suppressed: Total;
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

    /// One more in the slot of kernel op `op` of `arr` ([`Stats::netlink_in`] or
    /// [`Stats::netlink_out`]); an op past the table counts nowhere.
    pub fn bump_op(arr: &mut [u64; NUM_OPS], op: u16) {
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

impl CounterSlot for KernelOp {
    const ALL: &'static [KernelOp] = &KernelOp::ALL;
    const LEN: usize = NUM_OPS;

    fn slot(self) -> usize {
        self.index()
    }

    fn ordinal(self) -> usize {
        self.index()
    }
}

impl CounterSlot for ErrCode {
    const ALL: &'static [ErrCode] = &ErrCode::ALL;
    /// Indexed by code: the codes below 10 keep their (unused) slots.
    const LEN: usize = err::IWPM_VERSION_MISMATCH_ERR as usize + 1;

    fn slot(self) -> usize {
        usize::from(self.code())
    }

    fn ordinal(self) -> usize {
        ErrCode::ordinal(self)
    }
}

impl CounterSlot for PeerMsgType {
    const ALL: &'static [PeerMsgType] = &PEER_TYPES;
    const LEN: usize = NUM_PEER_TYPES;

    fn slot(self) -> usize {
        usize::from(self.code())
    }

    fn ordinal(self) -> usize {
        usize::from(self.code())
    }
}

/// A counter name that [`Counter`] does not know (renamed, removed, or a typo).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown counter name {0:?}")]
pub struct UnknownCounter(pub String);

impl FromStr for Counter {
    type Err = UnknownCounter;

    fn from_str(name: &str) -> Result<Counter, UnknownCounter> {
        Counter::from_name(name).ok_or_else(|| UnknownCounter(name.to_string()))
    }
}

impl Stats {
    /// Every counter as `(name, value)`, in [`Counter::all`] order: the stable export the
    /// daemon prints, instead of `Debug` text whose shape follows the struct.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::all().map(move |c| (c.name(), self.get(c)))
    }

    /// The counters published on `surface` as `(name, value)`, in [`Counter::all`] order.
    pub fn iter_on(&self, surface: Surface) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::all()
            .filter(move |c| c.shows_in(surface))
            .map(move |c| (c.name(), self.get(c)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::CounterKind;

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
        let slots = 2 * NUM_OPS + NUM_ERR_CODES + 2 * NUM_PEER_TYPES;
        let scalars = Counter::all()
            .filter(|c| {
                !c.name().starts_with("netlink_in_") && !c.name().starts_with("netlink_out_")
            })
            .filter(|c| {
                !c.name().starts_with("handle_err_sent_") && !c.name().starts_with("peer_in_")
            })
            .filter(|c| !c.name().starts_with("peer_out_"))
            .count();
        assert_eq!(scalars, 63, "one per scalar field");
        assert_eq!(Counter::all().count(), slots + scalars);
        for (i, c) in Counter::all().enumerate() {
            assert_eq!(c.index(), i, "{c}");
        }
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

    #[test]
    fn every_counter_has_help_and_one_name_in_the_metrics() {
        for c in Counter::all() {
            let help = c.help();
            // One line that needs no escaping in a metrics `# HELP`.
            assert!(help.ends_with('.') || help.ends_with(')'), "{c}: {help:?}");
            assert!(!help.contains(['"', '\\', '\n']), "{c}: {help:?}");
            assert!(
                c.shows_in(Surface::Status) && c.shows_in(Surface::Dump),
                "{c}"
            );
            assert_eq!(c.presence(), crate::Presence::Always, "{c}");
        }
        // The figures the metrics carry under another name (`iwpmd_mappings`,
        // `iwpmd_exchanges`, `iwpmd_io_kernel_overruns_total`).
        let elsewhere: Vec<&str> = Counter::all()
            .filter(|c| !c.shows_in(Surface::Metrics))
            .map(Counter::name)
            .collect();
        assert_eq!(
            elsewhere,
            ["exchanges_active", "mappings", "kernel_overruns"]
        );
        assert_eq!(
            Counter::NetlinkIn(KernelOp::Hello).help(),
            "Kernel messages received, by op (decoded or not)."
        );
        let on_status: Vec<_> = Stats::default().iter_on(Surface::Status).collect();
        assert_eq!(on_status, Stats::default().iter().collect::<Vec<_>>());
    }
}
