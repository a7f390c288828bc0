//! The kernel's iwpm client (`drivers/infiniband/core/iwpm_*.c` plus `iw_cm_map`), as a
//! state machine with no IO and no clock of its own.
//!
//! Inputs: [`KernelIwpm::handle_datagram`] (bytes from a daemon socket),
//! [`KernelIwpm::handle_timeout`] (time passes), [`KernelIwpm::start_map`] (a listen or
//! connect calls `iw_cm_map`), [`KernelIwpm::remove_mapping`] (a mapped id is destroyed).
//! Outputs: datagrams through the injected [`Link`], finished mappings through
//! [`KernelIwpm::poll_map_done`], and [`KernelIwpm::violations`] / [`KernelIwpm::stats`].
//!
//! The socket addresses of daemons are a type parameter `A`: the Unix driver uses socket
//! addresses, tests use anything comparable. Where the real kernel unicasts to a netlink
//! port id, the emulator unicasts to the address the daemon sent from when it announced
//! that id (HELLO, MAPINFO request or REG_PID reply); the REG_PID "multicast" goes to the
//! address that most recently sent anything.

mod dispatch;
mod handlers;
mod link;
mod map_op;
mod mapping;
mod replay;
mod stats;
mod tables;
mod violation;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use iwpm_proto::consts::IWPM_UABI_VERSION_MIN;
use iwpm_proto::sockaddr::SockAddrStorage;

pub use link::{Link, SendError, SendMode};
pub use mapping::{MapError, MapOutcome, MapRequest, MapResult, MapToken, UnmappedReason};
pub use stats::KernelStats;
pub use tables::{MapInfoEntry, MapInfoTable, RemoteInfoEntry, RemoteInfoTable};
pub use violation::{RequestKind, Violation};

/// `iwpm_user_pid` before any daemon announced itself.
pub const IWPM_PID_UNDEFINED: i32 = -1;
/// `iwpm_user_pid` after a REG_PID multicast reached nobody.
pub const IWPM_PID_UNAVAILABLE: i32 = -2;
/// `NLMSG_GOODSIZE` on x86-64 with 4 KiB pages: one page minus the aligned
/// `skb_shared_info` (320 bytes) **(inferred)**.
pub const NLMSG_GOODSIZE_X86_64: usize = 3776;
/// `IWPM_MAPINFO_SKB_COUNT`: the replay gives up when it would need this many datagrams.
pub const IWPM_MAPINFO_SKB_COUNT: usize = 20;
/// `IWPM_NL_TIMEOUT` (the kernel side's, shared with the test kit's stand-ins).
pub use iwpm_proto::kernel_side::IWPM_NL_TIMEOUT;

/// Registration of client 2 (`iwpm_check_registration` / `iwpm_set_registration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Registration {
    /// `IWPM_REG_UNDEF`: at iw_cm load; REG_PID is multicast on the next map.
    Undef,
    /// `IWPM_REG_VALID`: a REG_PID reply was accepted; ADD/QUERY are allowed.
    Valid,
    /// `IWPM_REG_INCOMPL`: a HELLO or MAPINFO request arrived since; REG_PID is due again.
    Incompl,
}

/// Fixed properties of the emulated kernel and its iWARP device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelConfig {
    /// `dev_name()` of the ib_device, sent in REG_PID (e.g. `siw0`).
    pub ibdev_name: String,
    /// `ib_device.iw_ifname`, sent in REG_PID (e.g. `lo`).
    pub if_name: String,
    /// How long a REG_PID/ADD/QUERY waits for its reply (`IWPM_NL_TIMEOUT`, 10 s).
    pub request_timeout: Duration,
    /// Datagram budget of a MAPINFO replay batch (`NLMSG_GOODSIZE`).
    pub nlmsg_goodsize: usize,
    /// Datagram limit of a MAPINFO replay (`IWPM_MAPINFO_SKB_COUNT`).
    pub mapinfo_skb_count: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            ibdev_name: "siw0".into(),
            if_name: "lo".into(),
            request_timeout: IWPM_NL_TIMEOUT,
            nlmsg_goodsize: NLMSG_GOODSIZE_X86_64,
            mapinfo_skb_count: IWPM_MAPINFO_SKB_COUNT,
        }
    }
}

/// State of one kernel request (`iwpm_nlmsg_request`). The kernel never frees completed
/// requests, so a late reply still finds them; the emulator keeps them to detect that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestState {
    Pending,
    Completed,
    TimedOut,
}

#[derive(Clone, Copy, Debug)]
struct PendingRequest {
    kind: RequestKind,
    token: MapToken,
    deadline: Instant,
    state: RequestState,
}

/// How a request ended, handed to the waiting `iw_cm_map`. Short-lived (stored until the
/// caller resumes), so the size of the success variant does not matter.
#[expect(clippy::large_enum_variant, reason = "short-lived: see above")]
#[derive(Clone, Copy, Debug)]
enum Completion {
    /// `err_code` 0; for ADD/QUERY with the mapped addresses.
    Success {
        mapped_local: Option<SockAddrStorage>,
        mapped_remote: Option<SockAddrStorage>,
    },
    /// A non-zero IWPM code.
    Code(u16),
    /// HANDLE_ERR code 0 (the hazard, not reproduced).
    HandleErrZero,
    /// No reply in time.
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Registering { seq: u32 },
    Mapping { seq: u32, kind: RequestKind },
}

#[derive(Clone, Debug)]
struct MapOp {
    request: MapRequest,
    phase: Phase,
    completion: Option<Completion>,
}

/// The emulated kernel iwpm client. See the module docs.
#[derive(Debug)]
pub struct KernelIwpm<A> {
    config: KernelConfig,
    pid: i32,
    registration: Registration,
    ulib_version: u16,
    echo_seq: u32,
    seq: u32,
    pid_addrs: Vec<(u32, A)>,
    group_member: Option<A>,
    requests: BTreeMap<u32, PendingRequest>,
    /// (deadline, seq) of the requests still pending: `requests` keeps answered ones too
    /// (to recognise duplicate replies), so scanning it on every wake-up grew with every
    /// request ever sent.
    deadlines: std::collections::BTreeSet<(Instant, u32)>,
    ops: BTreeMap<MapToken, MapOp>,
    next_token: u64,
    completed: VecDeque<(MapToken, MapResult)>,
    mapinfo: MapInfoTable,
    remote_info: RemoteInfoTable,
    mapinfo_num_outstanding: VecDeque<u32>,
    violations: Vec<Violation>,
    stats: KernelStats,
}

impl<A: Clone + PartialEq + std::fmt::Debug> KernelIwpm<A> {
    /// A freshly loaded iw_cm: no daemon, registration UNDEF, ABI 3, empty tables.
    pub fn new(config: KernelConfig) -> Self {
        KernelIwpm {
            config,
            pid: IWPM_PID_UNDEFINED,
            registration: Registration::Undef,
            ulib_version: IWPM_UABI_VERSION_MIN,
            echo_seq: 0,
            seq: 0,
            pid_addrs: Vec::new(),
            group_member: None,
            requests: BTreeMap::new(),
            deadlines: std::collections::BTreeSet::new(),
            ops: BTreeMap::new(),
            next_token: 1,
            completed: VecDeque::new(),
            mapinfo: MapInfoTable::default(),
            remote_info: RemoteInfoTable::default(),
            mapinfo_num_outstanding: VecDeque::new(),
            violations: Vec::new(),
            stats: KernelStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    /// Processes one datagram a daemon socket sent to the kernel (`rdma_nl_rcv`): every
    /// message in it is dispatched, answered with `NLMSG_DONE`/`NLMSG_ERROR`, and may
    /// complete pending requests, whose callers then continue (possibly sending more).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: &A,
        datagram: &[u8],
        link: &mut dyn Link<A>,
    ) {
        self.receive(now, from, datagram, link);
    }

    /// Expires requests whose deadline has passed; their callers continue unmapped.
    pub fn handle_timeout(&mut self, now: Instant, link: &mut dyn Link<A>) {
        let expired: Vec<(u32, MapToken)> = self
            .deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .filter_map(|(_, seq)| {
                let r = self.requests.get(seq)?;
                (r.state == RequestState::Pending).then_some((*seq, r.token))
            })
            .collect();
        for (seq, token) in expired {
            tracing::info!(seq, "Timeout for netlink request");
            self.stats.timeouts += 1;
            self.finish_request(seq, token, Completion::TimedOut);
            self.resume(now, token, link);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// Starts `iw_cm_map` for a listen (`remote` `None`) or an active connect. The result
    /// arrives through [`poll_map_done`](Self::poll_map_done), possibly at once (no daemon,
    /// send failure) or after a reply or timeout.
    pub fn start_map(
        &mut self,
        now: Instant,
        request: MapRequest,
        link: &mut dyn Link<A>,
    ) -> Result<MapToken, MapError> {
        self.begin_map(now, request, link)
    }

    /// A finished `iw_cm_map`, oldest first.
    pub fn poll_map_done(&mut self) -> Option<(MapToken, MapResult)> {
        self.completed.pop_front()
    }

    /// `destroy_cm_id` for an id with `mapped` set: drops its mapinfo entry and sends
    /// REMOVE_MAPPING with the unmapped local address (if a daemon is known and the
    /// registration is not UNDEF). Ids whose map result has `mapped == false` must not call
    /// this.
    pub fn remove_mapping(
        &mut self,
        local: &SockAddrStorage,
        m_local: &SockAddrStorage,
        link: &mut dyn Link<A>,
    ) {
        self.mapinfo.remove(local, m_local);
        self.send_remove(local, link);
    }

    /// `iwpm_get_remote_info` as `cm_conn_req_handler` calls it: looks up and consumes the
    /// entry for (listener's mapped local address, the event's remote address).
    pub fn take_remote_info(
        &mut self,
        listener_m_local: &SockAddrStorage,
        event_remote: &SockAddrStorage,
    ) -> Option<SockAddrStorage> {
        let found = self.remote_info.take(listener_m_local, event_remote);
        if found.is_some() {
            self.stats.remote_info_hits += 1;
        } else {
            self.stats.remote_info_misses += 1;
        }
        found
    }

    /// `iwpm_user_pid`.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// `iwpm_valid_pid()`: a daemon is known.
    pub fn daemon_known(&self) -> bool {
        self.pid > 0
    }

    /// Registration of client 2.
    pub fn registration(&self) -> Registration {
        self.registration
    }

    /// `iwpm_ulib_version`: the ABI in force.
    pub fn abi_version(&self) -> u16 {
        self.ulib_version
    }

    /// `echo_nlmsg_seq`.
    pub fn echo_seq(&self) -> u32 {
        self.echo_seq
    }

    /// The last header seq the kernel used.
    pub fn last_seq(&self) -> u32 {
        self.seq
    }

    /// Requests still waiting for a reply.
    pub fn pending_requests(&self) -> usize {
        self.deadlines.len()
    }

    /// `iw_cm_map` calls not finished yet.
    pub fn maps_in_progress(&self) -> usize {
        self.ops.len()
    }

    /// The mapinfo table.
    pub fn mapinfo(&self) -> &MapInfoTable {
        &self.mapinfo
    }

    /// The remote-info table.
    pub fn remote_info(&self) -> &RemoteInfoTable {
        &self.remote_info
    }

    /// Every protocol deviation seen so far.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The counters.
    pub fn stats(&self) -> &KernelStats {
        &self.stats
    }

    /// The address REG_PID would be "multicast" to.
    pub fn group_member(&self) -> Option<&A> {
        self.group_member.as_ref()
    }

    /// Records a deviation found outside the state machine (e.g. by the socket driver).
    pub fn record_violation(&mut self, v: Violation) {
        tracing::warn!(violation = ?v, "daemon protocol violation");
        self.violations.push(v);
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn learn_pid(&mut self, pid: u32, from: &A) {
        self.pid_addrs.retain(|(p, _)| *p != pid);
        self.pid_addrs.push((pid, from.clone()));
    }

    /// Unicast to a stored pid: the address it was announced from.
    fn unicast(
        &mut self,
        pid: i32,
        datagram: &[u8],
        mode: SendMode,
        link: &mut dyn Link<A>,
    ) -> Result<(), SendError> {
        let addr = u32::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .and_then(|p| self.pid_addrs.iter().find(|(q, _)| *q == p))
            .map(|(_, a)| a.clone())
            .ok_or(SendError::ConnRefused)?;
        link.send(&addr, datagram, mode)
    }

    fn finish_request(&mut self, seq: u32, token: MapToken, completion: Completion) {
        if let Some(r) = self.requests.get_mut(&seq) {
            self.deadlines.remove(&(r.deadline, seq));
            r.state = match completion {
                Completion::TimedOut => RequestState::TimedOut,
                _ => RequestState::Completed,
            };
        }
        if let Some(op) = self.ops.get_mut(&token) {
            op.completion = Some(completion);
        }
    }
}

#[cfg(test)]
mod tests;
