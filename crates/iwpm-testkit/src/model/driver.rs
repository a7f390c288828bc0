//! [`Driver`]: one core, in the [`Host`] that lends it the model shell's ports
//! ([`FakePorts`]) and keeps the daemon's state-file policy, against a model kernel,
//! playing [`Op`]s and checking after each (module docs of `model`). The kernel's side is
//! in `kernel.rs`, the peers' in `peer.rs`, the daemon restart in `restart.rs`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_core::state_file::SavedMapping;
use iwpm_core::{
    Action, Core, CoreConfig, Host, KernelReceipt, PeerSocket, ReserveError, SavePolicy,
};
use iwpm_proto::consts::{NLMSG_DONE, NLMSG_ERROR};
use iwpm_proto::netlink::{frames, NlHeader};
use iwpm_proto::peer::PeerMessage;
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use super::ops::{Op, Setup};
use super::pools::{fail, GRANT_BASE, GRANT_PORTS};
use super::FakePorts;

mod kernel;
mod ledger;
mod peer;
mod restart;

/// What the model kernel knows of one request it sent (keyed by client and header seq).
#[derive(Debug)]
struct Request {
    /// Frames with a reply-wanting op (REG_PID, ADD, QUERY) sent with this key.
    count: u32,
    /// A frame of another op used this key too (its HANDLE_ERR would be indistinguishable).
    other: bool,
    op: u16,
    sent_at: Instant,
    /// The request's address (ADD: the address, QUERY: the local address), when the driver
    /// built the message itself.
    local: Option<SockAddrStorage>,
    answers: u32,
}

/// Bounded list of recent items.
#[derive(Debug)]
struct Recent<T>(VecDeque<T>);

impl<T: Clone> Recent<T> {
    const CAP: usize = 48;
    fn new() -> Self {
        Recent(VecDeque::new())
    }
    fn push(&mut self, t: T) {
        if self.0.len() == Self::CAP {
            self.0.pop_front();
        }
        self.0.push_back(t);
    }
    fn pick(&self, i: u8) -> Option<T> {
        if self.0.is_empty() {
            None
        } else {
            self.0.get(usize::from(i) % self.0.len()).cloned()
        }
    }
}

/// Where output is drained from: input handling or a timer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Input,
    Timer,
}

/// One core in its host, the model shell's ports and the model kernel. See the module
/// docs for what is checked.
#[derive(Debug)]
pub struct Driver {
    /// The core, the ports lent to it and the state-file policy: what the daemon runs.
    host: Host<FakePorts>,
    config: CoreConfig,
    now: Instant,
    /// Next fresh kernel header seq, and the last one used.
    next_seq: u32,
    last_seq: u32,
    requests: HashMap<(u8, u32), Request>,
    /// The kernel's view of references, per local endpoint: `kref - debt` = success answers
    /// (each confirms one distinct reference the core took) minus REMOVE messages sent (an
    /// upper bound of the REMOVEs that took a reference, counted when sent, whether they are
    /// processed at once, later in the same opaque datagram, or not at all); one of the two
    /// is 0.
    /// The core's count is never below `kref`.
    kref: HashMap<Endpoint, u32>,
    debt: HashMap<Endpoint, u32>,
    /// A REMOVE may be processed later within the call being drained (after an answer in
    /// the same opaque datagram): the core's state after the call no longer tells what it
    /// was when an answer was produced.
    removes_in_call: bool,
    ready: u32,
    /// Peer datagrams seen, for answers and echoes.
    sent_requests: Recent<(PeerMessage, SocketAddr)>,
    /// ACCEPTs as sent (echo cookies included) and where they went.
    sent_accepts: Recent<(Vec<u8>, SocketAddr)>,
    sent_all: Recent<(PeerSocket, SocketAddr, Vec<u8>)>,
    /// REQUEST/ACCEPT datagrams by (destination, bytes): first sent, retransmissions.
    origins: HashMap<(SocketAddr, Vec<u8>), (Instant, u32)>,
    /// Active exchanges (handle, cp) whose ACCEPT was acknowledged.
    acked: HashSet<(u64, SocketAddr)>,
    /// REMOTE_INFOs the core sent so far.
    remote_infos: u64,
    /// What peer datagrams may make the core tell its kernel.
    ledger: ledger::Ledger,
    /// Ops played.
    steps: u64,
    /// Daemon restarts so far ([`Op::Restore`]).
    restarts: u32,
    /// Clients the core sent a MAPINFO request to, until a restart's kernel answers them.
    mapinfo_asked: Vec<u8>,
    /// HANDLE_ERRs the core sent so far.
    handle_errs: u64,
    /// ACK_NUM of the last MAPINFO_NUM reply.
    last_ack_num: Option<u32>,
    /// Messages the core sent its kernel so far (what a [`KernelReceipt`] counts).
    kernel_out: u64,
    /// The last [`Action::TableChanged`]'s generation, and the table as it announced it
    /// (as the state file saves it): a table that moved without one is a violation.
    announced: (u64, Vec<SavedMapping>),
    /// [`Action::RecoveryEnded`] came from this daemon.
    recovery_ended: bool,
    /// State-file writes the host asked for ([`Action::SaveState`]), every daemon's.
    saves: u64,
    /// The core holds the model's fleet key.
    keyed: bool,
    /// When the run started (its wall clock is [`super::MODEL_WALL`] then).
    started: Instant,
    /// The last stamp the model sealed a datagram with (microseconds).
    last_stamp: u64,
    /// The MACs of every sealed datagram delivered to the core: one delivered again is a
    /// replay, which must make it tell its kernel nothing.
    sealed_seen: HashSet<[u8; 16]>,
    /// The sealed datagrams delivered, with their socket and source: what a replay sends.
    sealed_sent: Recent<(PeerSocket, SocketAddr, Vec<u8>)>,
}

impl Driver {
    /// A started core (booted unless the setup says otherwise), all output drained.
    pub fn new(setup: Setup) -> Self {
        let config = setup.config();
        let now = Instant::now();
        let mut d = Driver {
            host: model_host(config.clone(), now),
            config,
            now,
            next_seq: 1,
            last_seq: 0,
            requests: HashMap::new(),
            kref: HashMap::new(),
            debt: HashMap::new(),
            removes_in_call: false,
            ready: 0,
            sent_requests: Recent::new(),
            sent_accepts: Recent::new(),
            sent_all: Recent::new(),
            origins: HashMap::new(),
            acked: HashSet::new(),
            remote_infos: 0,
            ledger: ledger::Ledger::new(now),
            steps: 0,
            restarts: 0,
            mapinfo_asked: Vec::new(),
            handle_errs: 0,
            last_ack_num: None,
            kernel_out: 0,
            announced: (0, Vec::new()),
            recovery_ended: false,
            saves: 0,
            keyed: setup.keyed(),
            started: now,
            last_stamp: 0,
            sealed_seen: HashSet::new(),
            sealed_sent: Recent::new(),
        };
        d.hand_in_keys();
        d.host.start(d.now);
        d.pump(Ctx::Input);
        if setup.boot() {
            d.step(&Op::Hello { abi: 4 });
            d.step(&Op::RegPid {
                client: 0,
                lib: 0,
                seq: 0,
            });
        }
        d
    }

    /// The core under test.
    pub fn core(&self) -> &Core {
        self.host.core()
    }

    /// The model shell's port reservations.
    fn shell(&self) -> &FakePorts {
        self.host.ports()
    }

    /// State-file writes the host asked for so far ([`Action::SaveState`]).
    pub fn saves(&self) -> u64 {
        self.saves
    }

    /// Ops played so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Plays one op and checks everything.
    pub fn step(&mut self, op: &Op) {
        self.steps += 1;
        match op {
            Op::RegPid { .. }
            | Op::Add { .. }
            | Op::Query { .. }
            | Op::Remove { .. }
            | Op::MapInfo { .. }
            | Op::MapInfoNum { .. } => self.kernel_request(op),
            Op::Hello { .. }
            | Op::Done { .. }
            | Op::NlError { .. }
            | Op::KernelRaw { .. }
            | Op::KernelMutate { .. } => self.kernel_other(op),
            Op::Request { .. }
            | Op::Accept { .. }
            | Op::Reject { .. }
            | Op::Ack { .. }
            | Op::Echo { .. }
            | Op::PeerRaw { .. }
            | Op::PeerForged { .. } => self.peer_op(op),
            Op::Advance { ms } => self.advance(Duration::from_millis(u64::from(*ms))),
            Op::AdvanceLong { secs } => self.advance(Duration::from_secs(u64::from(*secs))),
            Op::Jump { ms } => {
                self.now += Duration::from_millis(u64::from(*ms) * 16);
                self.timeout();
            }
            Op::Tick => self.timeout(),
            Op::Overrun => {
                self.host.handle_kernel_overrun(self.now);
                self.pump(Ctx::Input);
            }
            Op::Answer { kind, port } => self
                .host
                .ports_mut()
                .answer_next(reservation_answer(*kind, *port)),
            Op::AnswerUnknown { .. } => {}
            Op::Restore { how } => self.restart(*how),
        }
        self.after_step();
    }

    /// Runs what is due now, as the daemon's loop does when it wakes up (the host calls
    /// the core only when one of its timers is due).
    fn timeout(&mut self) {
        self.host.handle_timeout(self.now);
        self.pump(Ctx::Timer);
        if let Some(t) = self.host.poll_timeout() {
            if t <= self.now {
                fail("a timer is still due right after handle_timeout");
            }
        }
    }

    /// Moves the clock forward by `d`, running each timer at its due time.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        let mut guard = 0u32;
        while let Some(t) = self.host.poll_timeout() {
            if t > end {
                break;
            }
            guard += 1;
            if guard > 1_000_000 {
                fail("timers never settle");
            }
            self.now = self.now.max(t);
            self.timeout();
        }
        self.now = end;
    }

    /// Drains every action, checking each.
    fn pump(&mut self, ctx: Ctx) {
        self.drain(ctx);
        // The call is over: every REMOVE sent so far has been processed.
        self.removes_in_call = false;
    }

    fn drain(&mut self, ctx: Ctx) {
        let mut table_changes = 0;
        while let Some(a) = self.host.poll_action() {
            match a {
                Action::ToKernel(bytes) => {
                    self.kernel_out += 1;
                    self.on_to_kernel(&bytes);
                }
                Action::ToPeer { via, to, datagram } => self.on_to_peer(ctx, via, to, datagram),
                Action::SaveState { generation } => {
                    // The file is written from the table as it is now: its generation
                    // must be the newest announced, or the file and its label disagree.
                    if generation != self.announced.0 {
                        fail(format!(
                            "SaveState for generation {generation}, the table is at {}",
                            self.announced.0
                        ));
                    }
                    self.saves += 1;
                    self.host.state_saved(self.now, generation, Duration::ZERO);
                }
                Action::Ready => {
                    self.ready += 1;
                    if self.ready > 1 {
                        fail("Ready emitted twice");
                    }
                }
                Action::ProbeDone(r) => fail(format!("a probe result without a probe: {r:?}")),
                Action::Settled(_) => {}
                Action::RecoveryEnded => {
                    if std::mem::replace(&mut self.recovery_ended, true) {
                        fail("RecoveryEnded emitted twice");
                    }
                    if self.core().recovering() {
                        fail("RecoveryEnded while the core is still recovering");
                    }
                }
                Action::TableChanged {
                    generation,
                    mappings,
                } => {
                    table_changes += 1;
                    if table_changes > 1 {
                        fail("TableChanged twice in one call");
                    }
                    if generation <= self.announced.0 {
                        fail("TableChanged without a new generation");
                    }
                    if mappings != self.core().mappings().count() {
                        fail("TableChanged does not count the table");
                    }
                    self.announced = (generation, self.core().saved_mappings());
                }
            }
        }
        if table_changes == 0 && self.core().saved_mappings() != self.announced.1 {
            fail("the table changed without TableChanged: a state file would miss it");
        }
        if !self.recovery_ended && !self.core().recovering() {
            fail("the recovery is over without RecoveryEnded");
        }
    }

    /// Hands the core one kernel datagram and drains it; its receipt must say what the
    /// datagram opened with and how many messages the core answered with.
    fn feed_kernel(&mut self, datagram: &[u8]) {
        let sent_before = self.kernel_out;
        let receipt = self.host.handle_kernel_datagram(self.now, datagram);
        self.pump(Ctx::Input);
        // (A first frame with broken framing is no message at all.)
        let framed = frames(datagram).next().is_some_and(|f| f.is_ok());
        let expected = KernelReceipt {
            acknowledgement: framed
                && NlHeader::parse(datagram)
                    .is_some_and(|h| h.ty == NLMSG_DONE || h.ty == NLMSG_ERROR),
            answers: u32::try_from(self.kernel_out - sent_before).unwrap_or(u32::MAX),
        };
        if receipt != expected {
            fail(format!("kernel receipt {receipt:?}, expected {expected:?}"));
        }
    }

    fn after_step(&mut self) {
        if let Err(e) = self.core().check_invariants() {
            fail(e);
        }
        let s = self.core().stats();
        let listed = self.core().mappings().count();
        if s.mappings as usize != listed {
            fail(format!(
                "gauge says {} mappings, {listed} listed",
                s.mappings
            ));
        }
        if listed > self.config.max_mappings {
            fail(format!("{listed} mappings > max_mappings"));
        }
        let passive = s.peer_exchanges_active;
        let local = s.exchanges_active.saturating_sub(passive);
        if passive > s.exchanges_active {
            fail("more peer exchanges than exchanges");
        }
        if local as usize > self.config.max_exchanges {
            fail(format!("{local} local exchanges > max_exchanges"));
        }
        if passive as usize > self.config.max_peer_exchanges.max(1) {
            fail(format!("{passive} peer exchanges > max_peer_exchanges"));
        }
        if s.peer_exchanges_unconfirmed > passive {
            fail("more unconfirmed peer exchanges than peer exchanges");
        }
        if s.reservations_requested != self.shell().reserves() {
            fail("reservations_requested differs from the reservations the shell saw");
        }
        if s.reservations_released != self.shell().releases as u64 {
            fail("reservations_released differs from the releases the shell saw");
        }
        let mut locals = HashSet::new();
        let mut live = BTreeSet::new();
        for m in self.core().mappings() {
            if !locals.insert(m.local_endpoint) {
                fail(format!("two mappings for {}", m.local_endpoint));
            }
            if let Some(r) = m.reservation {
                if !live.insert(r) {
                    fail(format!("two mappings hold {r:?}"));
                }
            }
            if m.refcount == 0 {
                fail("mapping with refcount 0");
            }
        }
        let held: BTreeSet<_> = self.shell().held.keys().copied().collect();
        if held != live {
            fail(format!(
                "shell holds {held:?} but live mappings hold {live:?}"
            ));
        }
        for (ep, k) in &self.kref {
            if *k == 0 {
                continue;
            }
            let rc = self
                .core()
                .mappings()
                .find(|m| m.local_endpoint == *ep)
                .map_or(0, |m| m.refcount);
            if rc < *k {
                fail(format!(
                    "{ep}: the kernel was told of {k} references, the core has {rc}"
                ));
            }
        }
    }

    /// Ends the run: runs time forward, REMOVEs every mapping from its owner, runs time
    /// forward again, and checks that nothing is left.
    pub fn finish(mut self) {
        let settle = self.config.exchange_lifetime * 2
            + self.config.reply_deadline * 2
            + self.config.handshake_timeout;
        self.advance(settle);
        self.after_step();
        if self.core().stats().exchanges_active != 0 {
            fail("exchanges left after every lifetime passed");
        }
        let budget: u64 = self
            .core()
            .mappings()
            .map(|m| u64::from(m.refcount))
            .sum::<u64>()
            + 8;
        let mut removes = 0u64;
        loop {
            let first = self
                .core()
                .mappings()
                .next()
                .map(|m| (m.local, m.owner_client));
            let Some((local, owner)) = first else { break };
            removes += 1;
            if removes > budget {
                fail("REMOVE by the owner does not free the table");
            }
            let reserves = self.shell().reserves();
            self.remove(owner, local);
            self.after_step();
            if self.shell().reserves() != reserves {
                fail("a REMOVE asked for a reservation");
            }
        }
        self.advance(settle);
        self.after_step();
        if self.core().mappings().next().is_some() {
            fail("mappings left after every REMOVE");
        }
        if !self.shell().held.is_empty() {
            fail(format!(
                "reservations never released: {:?}",
                self.shell().held
            ));
        }
        if self.core().stats().exchanges_active != 0 {
            fail("exchanges left after the table emptied");
        }
        let sh = self.shell();
        if sh.granted != sh.releases as u64 {
            fail(format!(
                "{} ports granted, {} released",
                sh.granted, sh.releases
            ));
        }
        if sh.reserves() != sh.granted + sh.refused {
            fail("not every reservation was answered exactly once");
        }
    }
}

/// `core` in the daemon's host: the model shell's pool of ports lent to it, and the
/// daemon's state-file policy (each write is answered at once, so the policy's timers and
/// the checks on [`Action::SaveState`] run with every op).
impl Driver {
    /// The model daemon's wall clock now.
    pub(super) fn wall(&self) -> Duration {
        super::MODEL_WALL + self.now.saturating_duration_since(self.started)
    }

    /// What the shell does at a daemon's start: the wall clock, then the keys (if keyed).
    pub(super) fn hand_in_keys(&mut self) {
        let wall = self.wall();
        self.host.handle_wall_clock(self.now, wall);
        if self.keyed {
            let keys = iwpm_proto::fleet_key::FleetKeys::new(vec![super::fleet_key()]).ok();
            self.host.set_fleet_keys(self.now, keys);
        }
    }

    /// A stamp for the next datagram the model seals: its wall clock, never repeated.
    pub(super) fn next_stamp(&mut self) -> u64 {
        // (1 µs on: the core believes nothing stamped at or before its start, and the
        // model's clock may not have moved since)
        let wall = u64::try_from(self.wall().as_micros()).unwrap_or(u64::MAX);
        self.last_stamp = (wall + 1).max(self.last_stamp + 1);
        self.last_stamp
    }
}

fn model_host(config: CoreConfig, now: Instant) -> Host<FakePorts> {
    let ports = FakePorts::pool(GRANT_BASE, GRANT_PORTS);
    Host::new(config, ports, Some(SavePolicy::default()), now)
}

/// The reservation answer of [`Op::Answer`]: `kind % 6` 0-2 the ordinary grant, 3 a
/// failure (`port % 3` picks which), 4 `Ok(0)`, 5 `Ok(port)`.
fn reservation_answer(kind: u8, port: u16) -> Option<Result<u16, ReserveError>> {
    match kind % 6 {
        0..=2 => None,
        3 => Some(Err(match port % 3 {
            0 => ReserveError::AddrInUse,
            1 => ReserveError::NoDescriptors,
            _ => ReserveError::Other(i32::from(port)),
        })),
        4 => Some(Ok(0)),
        _ => Some(Ok(port)),
    }
}
