//! The [`Core`] struct: state, output queue and the helpers every handler shares. The
//! handlers live in child modules, so the state stays private to them: `kernel` (netlink),
//! `handshake` (HELLO, MAPINFO request), `recovery` (MAPINFO records), `reserve` (mapping
//! creation), `peer` (UDP 3935), `probe` (reachability probes), `restore` (the state
//! file) and `dump` (SIGUSR1).
//!
//! # One obligation
//!
//! A caller feeds input (`start*`, `handle_*`, [`Core::start_probe`]), then drains
//! [`Core::poll_action`] until `None` and waits until [`Core::poll_timeout`]. Everything it
//! must react to is an [`Action`], in one queue, in the order it happened: sends, Ready,
//! finished probes, settled restores, the end of the recovery, table changes. Every input
//! call ends in `end_input`, which announces what the whole call did.
//!
//! # Reservations are synchronous
//!
//! The shell lends its [`PortReservations`] to the inputs that create or free mappings:
//! [`Core::handle_kernel_datagram`] (kernel requests and the MAPINFO replay),
//! [`Core::start_after_restart`] (the previous daemon's state file) and
//! [`Core::handle_timeout`] (a replay window that closes frees the restored mappings the
//! kernel did not list). A handler that needs a TCP port binds it on the spot, as the C
//! daemon's synchronous `bind()` does, so every mapping is made in one step and processing
//! is strictly sequential and deterministic. Restored mappings are settled (`restore.rs`)
//! at the end of the call that ends their replay: nothing is left for the shell to call
//! afterwards.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_proto::fleet_key::FleetKeys;

use iwpm_proto::consts::{err, NLM_F_REQUEST};
use iwpm_proto::netlink::{encode_daemon_msg, DaemonMsg, Envelope, HandleErr};
use iwpm_proto::peer::PeerMsgType;
use iwpm_report::Stats;

use crate::action::{Action, KernelReceipt, PeerSocket, PortReservations};
use crate::admission::{Admission, KeyUse};
use crate::answered::AnsweredSeqs;
use crate::clients::Clients;
use crate::config::CoreConfig;
use crate::exchange::{Exchanges, HandleGen};
use crate::held::{HeldRemoteInfos, MAX_HELD};
use crate::mapping_id::MappingId;
use crate::peer_book::PeerBook;
use crate::ratelimit::{LogKind, LogLimiter};
use crate::request::Abi;
use crate::table::{Mapping, MappingTable, MappingView};
use crate::usage::{Resource, Usage, UsageChange};
use handshake::Handshake;

mod dump;
mod handshake;
mod kernel;
mod peer;
mod probe;
mod recovery;
mod reserve;
mod restore;
mod snapshot;

pub use probe::{ProbeError, ProbeRequest, MAX_PROBES, PROBE_MAX_WAIT};
pub use restore::{Previous, RestoreReport};
pub use snapshot::{ClientSnapshot, ExchangeSide, ExchangeSnapshot, MappingSnapshot, PeerSnapshot};

/// A broken internal invariant (reported by [`Core::check_invariants`], for tests; feature
/// `testing`).
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("core invariant violated: {0}")]
pub struct InvariantError(pub &'static str);

/// The port mapper state machine.
#[derive(Debug)]
pub struct Core {
    config: CoreConfig,
    abi: Abi,
    handshake: Handshake,
    table: MappingTable,
    exchanges: Exchanges,
    clients: Clients,
    handles: HandleGen,
    answered: AnsweredSeqs,
    actions: VecDeque<Action>,
    stats: Stats,
    log: LogLimiter,
    last_now: Instant,
    /// Whether peer datagrams are believed: keys, cookies, budgets, meters
    /// ([`crate::admission`]).
    admission: Admission,
    /// REMOTE_INFOs held for ten-bit ACKs ([`crate::held`]).
    held: HeldRemoteInfos,
    /// Clients whose MAPINFO replay we asked for, until when records are accepted.
    mapinfo_windows: Vec<(u8, Instant)>,
    /// When the last resynchronisation HELLO went out (after lost kernel input).
    last_resync: Option<Instant>,
    usage: Usage,
    /// Per-peer tallies and finished exchanges, for the control socket.
    peer_book: PeerBook,
    /// Reachability probes in flight.
    probes: probe::Probes,
    /// Restart restore from the state file, until the replay settles it.
    restore: restore::RestoreState,
    /// Bumped on every table change (see [`Action::TableChanged`]).
    generation: u64,
    /// The generation the last [`Action::TableChanged`] announced.
    announced_generation: u64,
    /// Messages queued for the kernel so far: what a kernel datagram's answers are counted
    /// from ([`KernelReceipt::answers`]).
    kernel_queued: u64,
    /// Sent datagrams handed back by [`Core::recycle`], reused for the next ones: no
    /// allocation per reply.
    spare_buffers: Vec<Vec<u8>>,
    /// The levels [`Core::sync_gauges`] last looked at.
    gauge_levels: GaugeLevels,
}

/// What the gauges and the usage warnings are computed from; unchanged levels (and no
/// resource at its limit) need no recomputation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct GaugeLevels {
    mappings: usize,
    exchanges: usize,
    passive: usize,
    unconfirmed: usize,
    /// Tokens left before refill: only taking one can raise the budget's use.
    remote_info_tokens: u32,
}

/// Spare output buffers kept at most (a burst of replies needs no more to be reused).
const MAX_SPARE_BUFFERS: usize = 16;
/// Capacity of a new output buffer: the largest reply (QUERY_MAPPING's, 560 bytes).
const OUT_BUFFER_CAPACITY: usize = 600;

impl Core {
    /// Creates an idle core; [`Host::new`](crate::Host::new) makes one, and its `start`
    /// (or `start_after_restart`) begins the kernel handshake.
    pub(crate) fn new(config: CoreConfig, now: Instant) -> Self {
        if config.netlink_pid == 0 {
            tracing::warn!("netlink_pid is 0: the kernel would unicast to itself");
        }
        let admission = Admission::new(&config, now);
        Core {
            abi: Abi(config.max_abi),
            handles: HandleGen::new(config.handle_key),
            log: LogLimiter::new(config.log_interval),
            answered: AnsweredSeqs::new(config.reply_deadline * 2),
            config,
            handshake: Handshake::Idle,
            table: MappingTable::default(),
            exchanges: Exchanges::default(),
            clients: Clients::default(),
            actions: VecDeque::new(),
            stats: Stats::default(),
            last_now: now,
            admission,
            held: HeldRemoteInfos::new(MAX_HELD),
            mapinfo_windows: Vec::new(),
            last_resync: None,
            usage: Usage::default(),
            peer_book: PeerBook::default(),
            probes: probe::Probes::default(),
            restore: restore::RestoreState::default(),
            generation: 0,
            announced_generation: 0,
            kernel_queued: 0,
            spare_buffers: Vec::new(),
            gauge_levels: GaugeLevels::default(),
        }
    }

    /// Queues HELLO(max_abi) to the kernel. Later calls do nothing.
    pub(crate) fn start(&mut self, now: Instant) {
        self.last_now = now;
        self.start_handshake(now);
        self.end_input();
    }

    /// One datagram from the kernel (the shell checked it came from port id 0). Mappings it
    /// creates or frees reserve and release their TCP ports through `ports` at once. The
    /// receipt says what the datagram was and whether the core answered it.
    pub(crate) fn handle_kernel_datagram(
        &mut self,
        now: Instant,
        datagram: &[u8],
        ports: &mut dyn PortReservations,
    ) -> KernelReceipt {
        self.last_now = now;
        let queued = self.kernel_queued;
        let acknowledgement = self.process_kernel_datagram(now, datagram, ports);
        self.settle_recovery(ports);
        self.sync_gauges(now);
        self.end_input();
        KernelReceipt {
            acknowledgement,
            answers: u32::try_from(self.kernel_queued - queued).unwrap_or(u32::MAX),
        }
    }

    /// The kernel link lost input (`ENOBUFS` on the netlink socket): a kernel message was
    /// dropped, possibly a REG_PID multicast, after which the kernel believes no port mapper
    /// is running. Re-sends HELLO (at most once a second), which makes the kernel record us
    /// again without replaying mappings we already hold.
    pub(crate) fn handle_kernel_overrun(&mut self, now: Instant) {
        self.last_now = now;
        self.count_warn(
            now,
            |s| &mut s.kernel_overruns,
            LogKind::Overrun,
            format_args!("kernel messages were lost (netlink receive queue overrun)"),
        );
        self.resync(now);
        self.sync_gauges(now);
        self.end_input();
    }

    /// One UDP datagram received on `via` from `from`.
    pub(crate) fn handle_peer_datagram(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        datagram: &[u8],
    ) {
        self.last_now = now;
        self.process_peer_datagram(now, via, from, datagram);
        self.sync_gauges(now);
        self.end_input();
    }

    /// Runs every timer due at or before `now`. A replay window that closes settles the
    /// restored mappings it was for; those freed release their ports through `ports`.
    pub(crate) fn handle_timeout(&mut self, now: Instant, ports: &mut dyn PortReservations) {
        self.last_now = now;
        self.handshake_timeout(now);
        self.run_exchange_timers(now);
        self.run_probe_timers(now);
        self.settle_recovery(ports);
        self.sync_gauges(now);
        self.end_input();
    }

    /// The fleet keys to seal and verify peer datagrams with (`None`: no keys, every peer
    /// is served unauthenticated). A reload keeps the use counts of the ids still listed;
    /// the replay memory is kept, so a reload opens no window for replays. (The caller
    /// logs the change: it knows where the keys came from.)
    pub(crate) fn set_fleet_keys(&mut self, now: Instant, keys: Option<FleetKeys>) {
        self.last_now = now;
        self.admission.auth.set_keys(keys);
    }

    /// The wall clock, read by the caller at `now` (time since the Unix epoch): what the
    /// stamps of sealed datagrams are made and checked with. The shell hands it in once per
    /// loop turn; between two hand-ins the core advances it by `now`.
    pub(crate) fn handle_wall_clock(&mut self, now: Instant, since_epoch: Duration) {
        self.admission.auth.set_wall_clock(now, since_epoch);
    }

    /// Every fleet key with its use counts (never its bytes); empty without keys.
    pub fn fleet_key_report(&self) -> Vec<KeyUse> {
        self.admission.auth.report()
    }

    /// Hands a sent datagram's buffer back for reuse (optional: dropping it is fine).
    pub(crate) fn recycle(&mut self, mut buffer: Vec<u8>) {
        if self.spare_buffers.len() < MAX_SPARE_BUFFERS && buffer.capacity() >= OUT_BUFFER_CAPACITY
        {
            buffer.clear();
            self.spare_buffers.push(buffer);
        }
    }

    /// An empty buffer for one outgoing datagram: a recycled one if there is one.
    fn output_buffer(&mut self) -> Vec<u8> {
        self.spare_buffers
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(OUT_BUFFER_CAPACITY))
    }

    /// Next output, if any. Call it until `None` after every input call (`start*`,
    /// `handle_*`, `start_probe`): output is queued, never sent by the core, and this is
    /// the only queue.
    #[must_use = "call poll_action again until None after each input: queued output is lost otherwise"]
    pub(crate) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Core::handle_timeout`] should be called next; `None` if no timer runs. Call
    /// it again after every `handle_*` call, which may move the deadline.
    #[must_use = "call poll_timeout again after each input and wake up at the deadline it gives"]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let hs = match self.handshake {
            Handshake::Awaiting { deadline, .. } | Handshake::Resyncing { deadline, .. } => {
                Some(deadline)
            }
            _ => None,
        };
        // Replay windows matter on their own only while restored mappings wait for them.
        let windows = if self.restore_waiting() {
            self.mapinfo_windows.iter().map(|(_, until)| *until).min()
        } else {
            None
        };
        [
            hs,
            self.exchanges.next_timer(),
            self.probes.next_timer(),
            windows,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// All mappings, newest first.
    pub fn mappings(&self) -> impl Iterator<Item = MappingView> + '_ {
        self.table.iter().map(|(id, m)| MappingTable::view(id, m))
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The iwpm ABI version in use (the negotiated one once the handshake is done).
    pub fn abi(&self) -> u16 {
        self.abi.0
    }

    /// True once the HELLO handshake has finished (answered, refused or timed out).
    pub fn is_ready(&self) -> bool {
        matches!(self.handshake, Handshake::Done)
    }

    /// The configuration in use.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Checks the internal indexes against each other (for tests, fuzzing and the
    /// simulator: feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        self.table.check().map_err(InvariantError)?;
        self.exchanges
            .check(|id| self.table.get(id).is_some())
            .map_err(InvariantError)?;
        if self.held.len() > MAX_HELD {
            return Err(InvariantError("more held REMOTE_INFOs than MAX_HELD"));
        }
        if self.table.len() > self.config.max_mappings {
            return Err(InvariantError("more mappings than max_mappings"));
        }
        if self.exchanges.active_len() > self.config.max_exchanges {
            return Err(InvariantError("more local exchanges than max_exchanges"));
        }
        if self.exchanges.passive_len() > self.config.max_peer_exchanges.max(1) {
            return Err(InvariantError(
                "more peer exchanges than max_peer_exchanges",
            ));
        }
        Ok(())
    }

    fn sync_gauges(&mut self, now: Instant) {
        let levels = GaugeLevels {
            mappings: self.table.len(),
            exchanges: self.exchanges.len(),
            passive: self.exchanges.passive_len(),
            unconfirmed: self.exchanges.unconfirmed_len(),
            remote_info_tokens: self.admission.remote_info_tokens.tokens_before_refill(),
        };
        // Levels that did not move cannot cross a threshold upwards, and a downward
        // crossing only matters for a resource already at its limit.
        if levels == self.gauge_levels && !self.usage.any_high() {
            return;
        }
        // The common case of every ADD and REMOVE: only the mapping count moved, and it
        // stays under the warning level, so no usage warning can change.
        let only_mappings_moved = GaugeLevels {
            mappings: self.gauge_levels.mappings,
            ..levels
        } == self.gauge_levels;
        if only_mappings_moved
            && !self.usage.any_high()
            && !Usage::is_high(levels.mappings as u64, self.config.max_mappings as u64)
        {
            self.gauge_levels = levels;
            self.stats.mappings = levels.mappings as u64;
            return;
        }
        self.gauge_levels = levels;
        self.stats.mappings = self.table.len() as u64;
        self.stats.exchanges_active = self.exchanges.len() as u64;
        self.stats.peer_exchanges_active = self.exchanges.passive_len() as u64;
        self.stats.peer_exchanges_unconfirmed = self.exchanges.unconfirmed_len() as u64;
        let ri_free = u64::from(self.admission.remote_info_tokens.available(now));
        let (mappings, active, passive) = (
            self.table.len() as u64,
            self.exchanges.active_len() as u64,
            self.exchanges.passive_len() as u64,
        );
        let c = &self.config;
        let ri_cap = u64::from(c.remote_info_budget);
        let levels = |r: Resource| match r {
            Resource::Mappings => (mappings, c.max_mappings as u64),
            Resource::LocalExchanges => (active, c.max_exchanges as u64),
            Resource::PeerExchanges => (passive, c.max_peer_exchanges as u64),
            Resource::RemoteInfoBudget => (ri_cap.saturating_sub(ri_free), ri_cap),
        };
        for change in self.usage.update(levels) {
            match change {
                UsageChange::High { key, used, max } => tracing::warn!(
                    "{used} of {max} in use ({key}): at the limit, new work is refused, \
                     evicted or delayed; raise {key} in iwpmd.conf if this is legitimate load"
                ),
                UsageChange::Normal { key } => tracing::info!("{key} use back under 70 %"),
            }
        }
    }

    // ----- shared helpers -----

    fn push(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    /// The end of every input call: announces what the whole call did, after its other
    /// actions. A table change is announced once per call, however many mappings moved.
    fn end_input(&mut self) {
        if self.generation != self.announced_generation {
            self.announced_generation = self.generation;
            self.push(Action::TableChanged {
                generation: self.generation,
                mappings: self.table.len(),
            });
        }
        self.announce_recovery_end();
    }

    /// Encodes `msg` for `client` with the next per-client header seq and queues it.
    fn send_kernel(&mut self, client: u8, msg: DaemonMsg) {
        let env = Envelope {
            client,
            flags: NLM_F_REQUEST,
            seq: self.clients.next_seq(client),
            pid: self.config.netlink_pid,
        };
        let mut out = self.output_buffer();
        encode_daemon_msg(&env, &msg, &mut out);
        Stats::bump_op(&mut self.stats.netlink_out, msg.op());
        self.kernel_queued += 1;
        if let DaemonMsg::HandleErr(e) = &msg {
            if let Some(c) = self.stats.handle_err_sent.get_mut(usize::from(e.code)) {
                *c += 1;
            }
        }
        self.push(Action::ToKernel(out));
    }

    /// HANDLE_ERR for the kernel request with header seq `seq`. Code 0 would make the kernel
    /// complete the request as a success with uninitialised addresses, so it is never sent.
    fn send_handle_err(&mut self, client: u8, seq: u32, code: u16) {
        if code == 0 {
            debug_assert!(false, "HANDLE_ERR code 0");
            return;
        }
        self.send_kernel(
            client,
            DaemonMsg::HandleErr(HandleErr {
                seq,
                code,
                unknown: Vec::new(),
            }),
        );
    }

    fn send_peer(&mut self, via: PeerSocket, to: SocketAddr, ty: PeerMsgType, datagram: Vec<u8>) {
        if let Some(c) = self.stats.peer_out.get_mut(usize::from(ty.code())) {
            *c += 1;
        }
        self.push(Action::ToPeer { via, to, datagram });
    }

    /// True (and a CREATE_MAPPING_ERR-worthy log) when no new mapping may be created.
    fn mappings_full(&mut self, now: Instant) -> bool {
        if self.table.len() < self.config.max_mappings {
            return false;
        }
        self.stats.mappings_refused += 1;
        let max = self.config.max_mappings;
        self.warn(
            now,
            LogKind::CapReached,
            format_args!("mapping table full ({max} mappings)"),
        );
        true
    }

    fn insert_mapping(&mut self, m: Mapping) -> MappingId {
        self.stats.mappings_created += 1;
        self.generation += 1;
        self.table.insert(m)
    }

    /// Drops one kernel reference; at zero frees the mapping, releases its port and cancels
    /// its exchanges.
    fn unref_mapping(&mut self, id: MappingId, ports: &mut dyn PortReservations) {
        let Some(m) = self.table.get_mut(id) else {
            return;
        };
        m.refcount = m.refcount.saturating_sub(1);
        self.generation += 1;
        if m.refcount > 0 {
            return;
        }
        if let Some(m) = self.table.remove(id) {
            self.stats.mappings_freed += 1;
            if let Some(r) = m.reservation() {
                self.release(ports, r);
            }
            self.exchanges.remove_for_mapping(id);
        }
    }

    /// Rate-limited WARNING.
    /// Counts a dropped or refused input in its counter, then warns (rate-limited).
    fn count_warn(
        &mut self,
        now: Instant,
        counter: fn(&mut Stats) -> &mut u64,
        kind: LogKind,
        args: fmt::Arguments<'_>,
    ) {
        *counter(&mut self.stats) += 1;
        self.warn(now, kind, args);
    }

    fn warn(&mut self, now: Instant, kind: LogKind, args: fmt::Arguments<'_>) {
        match self.log.allow(now, kind) {
            Some(suppressed) => tracing::warn!(suppressed, "{args}"),
            None => self.stats.logs_suppressed += 1,
        }
    }
}

/// Codes used here, re-exported under short names.
mod code {
    use super::err;
    pub(super) const INVALID: u16 = err::IWPM_INVALID_NLMSG_ERR;
    pub(super) const CREATE: u16 = err::IWPM_CREATE_MAPPING_ERR;
    pub(super) const DUPLICATE: u16 = err::IWPM_DUPLICATE_MAPPING_ERR;
    pub(super) const LIB_INFO: u16 = err::IWPM_USER_LIB_INFO_ERR;
    pub(super) const REJECT: u16 = err::IWPM_REMOTE_QUERY_REJECT;
    pub(super) const VERSION: u16 = err::IWPM_VERSION_MISMATCH_ERR;
}
