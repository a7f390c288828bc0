//! The fleet on one virtual clock: an ordered event queue (datagrams, emulated TCP/MPA
//! messages, wake-ups, scheduled items), the simulated network with the scenario's faults,
//! and the run loop that checks the invariants after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_core::{Action, PeerSocket};

use crate::check::{Violation, ViolationKind};
use crate::cm::WireMsg;
use crate::host::{host_of_ip, SimHost, CLIENT_PORT};
use crate::ledger::Ledger;
use crate::plan::{Scenario, What};
use crate::rng::Rng;

/// The hostile host's address (it runs no daemon and no kernel).
pub const HOSTILE_IP: Ipv4Addr = Ipv4Addr::new(10, 255, 255, 1);
/// The hostile host's IPv6 address (a /64 of its own).
pub const HOSTILE_IP6: Ipv6Addr = Ipv6Addr::new(0xfd66, 0, 0, 0, 0, 0, 0, 1);
/// The rdma-core-like peer's addresses (a real host: it runs no core, `crate::peer`).
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 254, 254, 1);
/// See [`PEER_IP`].
pub const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd55, 0, 0, 0, 0, 0, 0, 1);
/// One-way UDP latency between hosts, before jitter.
pub(crate) const LATENCY: Duration = Duration::from_micros(100);
/// Largest jitter added to [`LATENCY`] (a TCP/MPA set-up takes three one-way trips, so it
/// is always slower than one datagram unless a fault delays that datagram).
pub(crate) const JITTER_US: u64 = 50;
/// Quiet time after the last item before the fleet is torn down and checked.
const SETTLE: Duration = Duration::from_secs(15);

/// Something that happens at a point of fleet time.
#[derive(Debug)]
pub(crate) enum Event {
    /// Scheduled item `i` of the scenario starts.
    Item(usize),
    /// A UDP datagram arrives at `to`.
    Udp {
        from: SocketAddr,
        to: SocketAddr,
        bytes: Vec<u8>,
        /// What an attacker made of it, if anything.
        tag: Tag,
    },
    /// An emulated TCP/MPA message arrives at host `to`.
    Wire { to: usize, msg: WireMsg },
    /// Host `h` runs its due timers.
    Wake(usize),
    /// Host `h`'s daemon starts again after a crash.
    Restart(usize),
    /// The hostile host's `k`-th send of attack item `item`.
    Attack { item: usize, k: u32 },
    /// The rdma-core-like peer's `k`-th connect of item `item` starts (its REQUEST).
    PeerRequest { item: usize, k: u32 },
    /// The rdma-core-like peer's connection (handle) reaches the passive host's iw_cm.
    PeerConnect { handle: u64 },
    /// Finding I's probe REQUEST of item `item` must have had its REJECT by now.
    ProbeDeadline { item: usize },
    /// End of the run: every id is destroyed.
    Teardown,
}

impl Event {
    /// What [`RunStats::digest`] takes from an event besides its time.
    fn digest(&self) -> u64 {
        let bytes = |b: &[u8]| {
            b.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, x| {
                (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3)
            })
        };
        match self {
            Event::Item(i) => 1 ^ ((*i as u64) << 8),
            Event::Udp { bytes: b, .. } => 2 ^ bytes(b),
            Event::Wire { to, .. } => 3 ^ ((*to as u64) << 8),
            Event::Wake(h) => 4 ^ ((*h as u64) << 8),
            Event::Restart(h) => 5 ^ ((*h as u64) << 8),
            Event::Attack { item, k } => 6 ^ ((*item as u64) << 8) ^ (u64::from(*k) << 32),
            Event::Teardown => 7,
            Event::PeerRequest { item, k } => 8 ^ ((*item as u64) << 8) ^ (u64::from(*k) << 32),
            Event::PeerConnect { handle } => 9 ^ (*handle << 8),
            Event::ProbeDeadline { item } => 10 ^ ((*item as u64) << 8),
        }
    }
}

/// Where a datagram came from, as the fleet-key oracles judge it (`crate::check`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Tag {
    /// Sent by its source (a daemon, the peer actor, or a hostile host older than fleet
    /// keys: those are judged as before).
    #[default]
    Normal,
    /// A sealed datagram the on-path attacker cut to its first 64 bytes.
    Stripped,
    /// A captured sealed datagram sent again later.
    Replayed,
    /// A captured sealed datagram with a byte flipped, or sent from another source.
    Forged,
    /// Item 5's spoofers (plain datagrams with a victim's address).
    Spoofed,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Events processed.
    pub steps: u64,
    /// Legitimate connects planned / established.
    pub connects: u64,
    /// Established.
    pub established: u64,
    /// UDP datagrams sent by daemons, netlink datagrams both ways, wire messages.
    pub udp: u64,
    /// Netlink datagrams (both directions).
    pub netlink: u64,
    /// Emulated TCP/MPA messages.
    pub wire: u64,
    /// Datagrams the hostile host sent.
    pub hostile: u64,
    /// Virtual time simulated.
    pub virtual_time: Duration,
    /// Daemon restarts after a crash.
    pub restarts: u64,
    /// MAPINFO replays the kernel cut short (its datagram limit, or a failed send).
    pub replays_truncated: u64,
    /// Incoming connections whose REMOTE_INFO was found / missed by the passive kernel.
    pub remote_info_found: u64,
    /// See `remote_info_found`.
    pub remote_info_missed: u64,
    /// Where the connects not established went, and why look-ups missed.
    pub gaps: Gaps,
    /// Connects of the rdma-core-like peer that reached the passive host's iw_cm, and how
    /// many of them found their REMOTE_INFO there.
    pub rdma_peer_connects: u64,
    /// See `rdma_peer_connects`.
    pub rdma_peer_found: u64,
    /// REJECTs delivered to the victim of item 5's spoofers (a fleet host) in answer to its
    /// own REQUESTs.
    pub victim_rejects: u64,
    /// Connects of that victim established.
    pub victim_established: u64,
    /// Datagrams the on-path attacker stripped, replayed or forged.
    pub on_path: u64,
    /// Sealed datagrams keyed daemons believed, and refused (wrong key or unknown id,
    /// clock, replayed, missing where required), over the whole run.
    pub auth_verified: u64,
    /// See `auth_verified`.
    pub auth_refused: u64,
    /// REMOTE_INFOs keyed daemons sent at once for authenticated REQUESTs (outside the
    /// ledger: a fleet member's REQUEST needs no budget).
    pub remote_info_authenticated: u64,
    /// REMOTE_INFOs daemons sent their kernels for peer REQUESTs (the ledger's left side).
    pub remote_info_for_peers: u64,
    /// ACKs that echoed an ACCEPT really sent to their source (distinct exchanges).
    pub verified_acks: u64,
    /// A digest of every event's time and kind, and every datagram's bytes: equal digests
    /// mean the same run.
    pub digest: u64,
}

impl std::ops::AddAssign<&RunStats> for RunStats {
    fn add_assign(&mut self, o: &RunStats) {
        self.steps += o.steps;
        self.connects += o.connects;
        self.established += o.established;
        self.udp += o.udp;
        self.netlink += o.netlink;
        self.wire += o.wire;
        self.hostile += o.hostile;
        self.virtual_time += o.virtual_time;
        self.restarts += o.restarts;
        self.replays_truncated += o.replays_truncated;
        self.remote_info_found += o.remote_info_found;
        self.remote_info_missed += o.remote_info_missed;
        self.gaps += &o.gaps;
        self.rdma_peer_connects += o.rdma_peer_connects;
        self.rdma_peer_found += o.rdma_peer_found;
        self.victim_rejects += o.victim_rejects;
        self.victim_established += o.victim_established;
        self.on_path += o.on_path;
        self.auth_verified += o.auth_verified;
        self.auth_refused += o.auth_refused;
        self.remote_info_authenticated += o.remote_info_authenticated;
        self.remote_info_for_peers += o.remote_info_for_peers;
        self.verified_acks += o.verified_acks;
        self.digest = crate::rng::mix(self.digest ^ o.digest);
    }
}

/// Why connects ended unestablished and why passive look-ups missed, so that a summary
/// can say the gaps are expected instead of leaving them to look like failures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gaps {
    /// Connects the plan closed before they were set up, while a fault touched either
    /// host (`World::explained`).
    pub closed_under_fault: u64,
    /// The same with no fault about.
    pub closed_early: u64,
    /// Connects refused or without a route while a fault touched either host.
    pub failed_under_fault: u64,
    /// Connects between a host with a wrong key or a skewed clock and a keyed host, failed
    /// or closed before set-up: expected (`FleetAuth::fails_between`).
    pub key_failures: u64,
    /// Connects refused whose listener the plan did not hold open (not judged).
    pub refused_unplanned: u64,
    /// Connects refused with no fault to explain it: each one a `ConnectFailed`.
    pub failed_unexplained: u64,
    /// Look-ups that missed because the connecting device is siw-like (no port mapping):
    /// its wire address is its own, so there is nothing to look up.
    pub miss_siw: u64,
    /// The same for a port-mapped connect whose mapping failed and fell back to its
    /// unmapped address (judged as `Unmapped` or `KernelTimeout`).
    pub miss_fallback: u64,
    /// Look-ups that missed while a fault touched either host.
    pub miss_under_fault: u64,
    /// Look-ups that missed for a connect already closed, or to a listener the plan did
    /// not hold open (not judged).
    pub miss_unjudged: u64,
    /// Any other miss: a `WrongPeer` once the connection is established.
    pub miss_unexplained: u64,
}

impl Gaps {
    /// Connects that ended without being established.
    pub fn not_established(&self) -> u64 {
        self.closed_under_fault
            + self.closed_early
            + self.failed_under_fault
            + self.key_failures
            + self.refused_unplanned
            + self.failed_unexplained
    }

    /// Look-ups that found no REMOTE_INFO.
    pub fn misses(&self) -> u64 {
        self.miss_siw
            + self.miss_fallback
            + self.miss_under_fault
            + self.miss_unjudged
            + self.miss_unexplained
    }
}

impl std::ops::AddAssign<&Gaps> for Gaps {
    fn add_assign(&mut self, o: &Gaps) {
        self.closed_under_fault += o.closed_under_fault;
        self.closed_early += o.closed_early;
        self.failed_under_fault += o.failed_under_fault;
        self.key_failures += o.key_failures;
        self.refused_unplanned += o.refused_unplanned;
        self.failed_unexplained += o.failed_unexplained;
        self.miss_siw += o.miss_siw;
        self.miss_fallback += o.miss_fallback;
        self.miss_under_fault += o.miss_under_fault;
        self.miss_unjudged += o.miss_unjudged;
        self.miss_unexplained += o.miss_unexplained;
    }
}

/// Per legitimate connect: what the plan meant and what happened.
#[derive(Clone, Debug)]
pub(crate) struct ConnPlan {
    pub from: usize,
    pub to: usize,
    pub port: u16,
    pub started: Duration,
    pub done: Option<Duration>,
    /// The active side's mapped address on the wire, once known.
    pub wire_src: Option<SocketAddr>,
}

/// The whole simulation.
#[derive(Debug)]
pub struct World {
    pub(crate) scenario: Scenario,
    pub(crate) base: Instant,
    pub(crate) now: Duration,
    queue: BTreeMap<(Duration, u64), Event>,
    seq: u64,
    pub(crate) hosts: Vec<SimHost>,
    /// Faults as (start, end, what).
    pub(crate) faults: Vec<(Duration, Duration, What)>,
    net_rng: Rng,
    pub(crate) tuples: BTreeSet<(SocketAddr, SocketAddr)>,
    pub(crate) conns: BTreeMap<u32, ConnPlan>,
    /// Listener lifetimes from the plan: (host, port) → (born, dies).
    pub(crate) listen_plan: BTreeMap<(usize, u16), (Duration, Duration)>,
    /// The hostile host's view: a target listener's mapped address, from its ACCEPTs.
    pub(crate) hostile_learned: BTreeMap<SocketAddr, SocketAddr>,
    /// Per host: what the REMOTE_INFO ledger counts (`crate::ledger`).
    pub(crate) ledgers: Vec<Ledger>,
    /// The hostile host's and the rdma-core-like peer's own state (`crate::hostile`,
    /// `crate::peer`).
    pub(crate) actors: crate::hostile::Actors,
    /// The fleet-key attacker's and oracles' state (`crate::onpath`, `crate::check`).
    pub(crate) keyed: crate::onpath::KeyedState,
    /// The victim of item 5's spoofers, if a fleet host.
    pub(crate) victim: Option<usize>,
    /// Hosts changed by the current step (checked after it).
    pub(crate) touched: BTreeSet<usize>,
    /// Invariant violations, in order (the run stops at the first one).
    pub violations: Vec<Violation>,
    /// Violations of known, still open findings (reported, not failing; see
    /// `docs/simulator.md`).
    pub known: Vec<Violation>,
    /// Counts.
    pub stats: RunStats,
    /// Check the invariants after every step (off only in the scale table).
    pub check_every_step: bool,
    /// Let the fault schedule explain a legitimate connect's trouble (off in the tests
    /// that show each invariant can fail).
    pub explain_faults: bool,
    /// A run longer than this is a livelock (the scale table's largest run takes far fewer).
    pub max_steps: u64,
    pub(crate) torn_down: bool,
}

impl World {
    /// The fleet of `scenario`, daemons started, items queued.
    pub fn new(scenario: Scenario) -> World {
        let hosts = (0..scenario.hosts)
            .map(|i| {
                let port_mapped = scenario.port_mapped.get(i).copied().unwrap_or(true);
                SimHost::new(i, port_mapped, scenario.seed)
            })
            .collect();
        let mut w = World {
            base: Instant::now(),
            now: Duration::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            hosts,
            faults: Vec::new(),
            net_rng: Rng::new(scenario.seed, 2),
            tuples: BTreeSet::new(),
            conns: BTreeMap::new(),
            listen_plan: BTreeMap::new(),
            hostile_learned: BTreeMap::new(),
            ledgers: (0..scenario.hosts).map(|_| Ledger::default()).collect(),
            actors: crate::hostile::Actors::default(),
            keyed: crate::onpath::KeyedState::default(),
            victim: None,
            touched: BTreeSet::new(),
            violations: Vec::new(),
            known: Vec::new(),
            stats: RunStats::default(),
            check_every_step: true,
            explain_faults: true,
            max_steps: 200_000_000,
            torn_down: false,
            scenario,
        };
        for (i, host) in w.hosts.iter_mut().enumerate() {
            host.key_role = w.scenario.auth.role(i);
            host.auth_required = w.scenario.auth.required;
        }
        let mut born: BTreeMap<(usize, u16), Duration> = BTreeMap::new();
        let items = std::mem::take(&mut w.scenario.items);
        for (i, it) in items.iter().enumerate() {
            if let Some(h) = it.what.hosts().into_iter().find(|h| *h >= w.hosts.len()) {
                let detail = format!("item {i} names host {h}, the fleet has {}", w.hosts.len());
                w.violate(ViolationKind::Sim, None, detail);
                w.scenario.items = items;
                return w;
            }
            w.push(it.at, Event::Item(i));
            if it.what.is_fault() {
                w.faults
                    .push((it.at, it.at + it.what.window(), it.what.clone()));
            }
            match it.what {
                What::OnPath { .. } => w.keyed.on_path_items.push(i),
                What::VictimSpoof { victim, .. } => w.victim = victim,
                What::Listen { host, port } => {
                    born.entry((host, port)).or_insert(it.at);
                }
                What::Unlisten { host, port } => {
                    if let Some(b) = born.remove(&(host, port)) {
                        w.listen_plan.insert((host, port), (b, it.at));
                    }
                }
                _ => {}
            }
        }
        w.scenario.items = items;
        for (k, b) in born {
            w.listen_plan.insert(k, (b, Duration::MAX));
        }
        let end = w.scenario.end() + SETTLE;
        w.push(end, Event::Teardown);
        for h in 0..w.hosts.len() {
            if let Err(e) = w.hosts[h].start_daemon(w.base, Duration::ZERO) {
                w.violate(ViolationKind::StateFile, Some(h), e.to_string());
            }
            w.pump(h);
        }
        w
    }

    pub(crate) fn push(&mut self, at: Duration, e: Event) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), e);
    }

    /// Runs to the end (or the first violation); returns the violations.
    pub fn run(mut self) -> (Vec<Violation>, Vec<Violation>, RunStats) {
        while self.violations.is_empty() {
            let Some(((at, _), e)) = self.queue.pop_first() else {
                break;
            };
            self.now = at;
            self.stats.steps += 1;
            self.stats.digest =
                crate::rng::mix(self.stats.digest ^ (at.as_nanos() as u64) ^ (e.digest() << 1));
            if self.stats.steps > self.max_steps {
                let detail = format!("the run did not end within {} steps", self.max_steps);
                self.violate(ViolationKind::Sim, None, detail);
                break;
            }
            self.event(e);
            if self.check_every_step {
                let touched = std::mem::take(&mut self.touched);
                for h in touched {
                    self.check_host(h);
                }
            } else {
                self.touched.clear();
            }
        }
        if self.violations.is_empty() {
            self.check_quiescent();
        }
        self.stats.virtual_time = self.now;
        for h in &self.hosts {
            self.stats.udp += h.counters.udp_out;
            self.stats.netlink += h.counters.nl_to_kernel + h.counters.nl_to_daemon;
            self.stats.wire += h.counters.wire_out;
            self.stats.restarts += u64::from(h.incarnation.saturating_sub(1));
            self.stats.replays_truncated += h.kernel.stats().replays_aborted;
            self.stats.remote_info_found += h.kernel.stats().remote_info_hits;
            self.stats.remote_info_missed += h.kernel.stats().remote_info_misses;
        }
        if std::env::var_os("IWPM_SIM_DEBUG").is_some() {
            for (i, h) in self.hosts.iter().enumerate() {
                if let Some(d) = h.daemon.as_ref() {
                    let st = d.core().stats();
                    eprintln!("host {i}: ledger sent {} verified {} blind6 {:?}; core on_ack {} deferred {} unverified {} evicted {} held_dropped {}", self.ledgers[i].sent, self.ledgers[i].verified.len(), self.ledgers[i].blind_len(), st.remote_info_on_ack, st.remote_info_deferred, st.peer_acks_unverified, st.exchanges_evicted, st.remote_info_held_dropped);
                }
            }
        }
        for l in &self.ledgers {
            self.stats.remote_info_for_peers += l.sent;
            self.stats.verified_acks += l.verified.len() as u64;
        }
        (self.violations, self.known, self.stats)
    }

    /// The next event and its time, taken off the queue (tests step a run by hand).
    #[cfg(test)]
    pub(crate) fn queue_pop(&mut self) -> Option<((Duration, u64), Event)> {
        self.queue.pop_first()
    }

    /// Runs one event (tests step a run by hand).
    #[cfg(test)]
    pub(crate) fn step(&mut self, e: Event) {
        self.event(e);
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Item(i) => self.item(i),
            Event::Udp {
                from,
                to,
                bytes,
                tag,
            } => self.deliver_udp(from, to, &bytes, tag),
            Event::Wire { to, msg } => self.on_wire(to, msg),
            Event::Wake(h) => self.wake(h),
            Event::Restart(h) => {
                if self.hosts[h].daemon.is_none() {
                    if let Err(e) = self.hosts[h].start_daemon(self.base, self.now) {
                        self.violate(ViolationKind::StateFile, Some(h), e.to_string());
                    }
                    self.pump(h);
                }
            }
            Event::Attack { item, k } => self.attack(item, k),
            Event::PeerRequest { item, k } => self.peer_request(item, k),
            Event::PeerConnect { handle } => self.peer_connect(handle),
            Event::ProbeDeadline { item } => self.probe_deadline(item),
            Event::Teardown => self.teardown(),
        }
    }

    fn item(&mut self, i: usize) {
        let what = self.scenario.items[i].what.clone();
        match what {
            What::Listen { host, port } => self.listen(host, port),
            What::Unlisten { host, port } => self.unlisten(host, port),
            What::Connect { id, from, to, port } => self.connect(id, from, to, port),
            What::Close { id } => self.close(id),
            What::Crash { host, down } => {
                if self.hosts[host].daemon.is_some() {
                    self.hosts[host].crash();
                    self.push(self.now + down, Event::Restart(host));
                }
            }
            What::ClockJump { host, by } => {
                self.hosts[host].offset += by;
                self.wake(host);
            }
            What::Squat { .. }
            | What::BlindPairs { .. }
            | What::SpoofV6 { .. }
            | What::CookieSweep { .. }
            | What::RealPairs { .. }
            | What::Replay { .. }
            | What::RejectFlood { .. }
            | What::Drain { .. } => self.attack(i, 0),
            What::RdmaPeer { .. } => self.peer_request(i, 0),
            What::KeyStep { host, step } => {
                self.hosts[host].rotation = step;
                self.hosts[host].load_keys(self.base, self.now);
                self.pump(host);
            }
            What::VictimSpoof { .. } => self.attack(i, 0),
            What::OnPath { mode, .. } => {
                if mode == crate::plan::OnPathMode::Replay {
                    self.attack(i, 0);
                }
            }
            // Network faults act when datagrams are sent (`self.faults`).
            What::Loss { .. }
            | What::Duplicate { .. }
            | What::Reorder { .. }
            | What::DelaySpike { .. }
            | What::Partition { .. } => {}
        }
    }

    fn wake(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        if host.wake.is_some_and(|w| w <= self.now) {
            host.wake = None;
        }
        host.hand_wall_clock(self.base, self.now);
        let t = host.local(self.base, self.now);
        if let Some(d) = host.daemon.as_mut() {
            // The host runs only what is due: the core's timers, a state-file write.
            d.handle_timeout(t);
        }
        if host.kernel.poll_timeout().is_some_and(|due| due <= t) {
            host.with_kernel(|k, link| k.handle_timeout(t, link));
        }
        self.pump(h);
    }

    /// Runs host `h` until it has nothing left to do now: the daemon's actions, the
    /// kernel's answers, finished mappings; then its next wake-up.
    pub(crate) fn pump(&mut self, h: usize) {
        self.touched.insert(h);
        self.hosts[h].hand_wall_clock(self.base, self.now);
        loop {
            let mut progressed = false;
            while let Some(action) = self.hosts[h].daemon.as_mut().and_then(|d| d.poll_action()) {
                progressed = true;
                self.daemon_action(h, action);
            }
            if self.hosts[h].feed_daemon(self.base, self.now) {
                progressed = true;
            }
            while let Some((token, result)) = self.hosts[h].kernel.poll_map_done() {
                progressed = true;
                self.map_done(h, token, result);
            }
            if !progressed {
                break;
            }
        }
        let host = &mut self.hosts[h];
        if host.kernel.stats().replays_aborted > 0 {
            host.replay_truncated = true;
        }
        if let Some(at) = host.deadline(self.base) {
            if host.wake.is_none_or(|w| at < w || w < self.now) {
                host.wake = Some(at);
                self.push(at, Event::Wake(h));
            }
        }
    }

    fn daemon_action(&mut self, h: usize, action: Action) {
        match action {
            Action::ToKernel(bytes) => {
                self.ledger_to_kernel(h, &bytes);
                let host = &mut self.hosts[h];
                host.counters.nl_to_kernel += 1;
                let t = host.local(self.base, self.now);
                let me = host.incarnation;
                host.with_kernel(|k, link| k.handle_datagram(t, &me, &bytes, link));
                if let Some(d) = host.daemon.as_mut() {
                    d.recycle(bytes);
                }
            }
            Action::ToPeer { via, to, datagram } => {
                let from = self.hosts[h].peer_source(via);
                self.hosts[h].counters.udp_out += 1;
                self.daemon_sends(h, from, to, &datagram);
                if self.victim == Some(h) {
                    if let Some(m) = crate::onpath::inner_message(&datagram) {
                        if m.msg_type == iwpm_proto::peer::PeerMsgType::Request {
                            self.keyed.victim_handles.insert(m.assoc_handle);
                        }
                    }
                }
                self.check_answer_size(h, via, to, &datagram);
                self.send_udp(from, to, datagram);
            }
            Action::SaveState { generation } => {
                self.hosts[h].save_state(self.base, self.now, generation);
            }
            Action::TableChanged { generation, .. } => {
                self.hosts[h].table_generation = generation;
            }
            Action::Ready | Action::ProbeDone(_) | Action::Settled(_) | Action::RecoveryEnded => {}
        }
    }

    pub(crate) fn host_index(&self, ip: IpAddr) -> Option<usize> {
        host_of_ip(ip, self.hosts.len())
    }

    fn split_of(&self, a: Option<usize>, b: Option<usize>) -> Option<Duration> {
        let (Some(a), Some(b)) = (a, b) else {
            return None;
        };
        self.faults
            .iter()
            .filter(|(s, e, _)| *s <= self.now && self.now < *e)
            .find_map(|(_, e, w)| match w {
                What::Partition { split, .. } if (a < *split) != (b < *split) => Some(*e),
                _ => None,
            })
    }

    fn jitter(&mut self) -> Duration {
        LATENCY + Duration::from_micros(self.net_rng.below(JITTER_US + 1))
    }

    /// A datagram leaves `from` for `to`: the active faults decide whether, how often and
    /// when it arrives.
    pub(crate) fn send_udp(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        self.send_udp_tagged(from, to, bytes, Tag::Normal);
    }

    /// [`World::send_udp`] for a datagram an attacker made (`tag`).
    pub(crate) fn send_udp_tagged(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        bytes: Vec<u8>,
        tag: Tag,
    ) {
        if tag == Tag::Normal && !self.keyed.on_path_items.is_empty() {
            self.on_path_send(from, to, &bytes);
        }
        let (a, b) = (self.host_index(from.ip()), self.host_index(to.ip()));
        if self.split_of(a, b).is_some() {
            return;
        }
        let mut copies = 1;
        let mut extra = Duration::ZERO;
        let now = self.now;
        for i in 0..self.faults.len() {
            let (s, e, w) = &self.faults[i];
            let touches = a.is_some_and(|a| w.touches(a)) || b.is_some_and(|b| w.touches(b));
            if !(*s <= now && now < *e && touches) {
                continue;
            }
            let w = w.clone();
            // Each window draws once per datagram, whatever it decides.
            let hit = |r: &mut Rng, per_mille: u16| r.chance(u64::from(per_mille));
            match w {
                What::Loss { per_mille, .. } if hit(&mut self.net_rng, per_mille) => return,
                What::Duplicate { per_mille, .. } if hit(&mut self.net_rng, per_mille) => {
                    copies = 2;
                }
                What::Reorder {
                    per_mille,
                    extra: e,
                    ..
                } if hit(&mut self.net_rng, per_mille) => {
                    extra += Duration::from_micros(self.net_rng.below(e.as_micros() as u64 + 1));
                }
                What::DelaySpike { extra: e, .. } => extra += e,
                _ => {}
            }
        }
        for c in 0..copies {
            let at = self.now + self.jitter() + extra + Duration::from_micros(c * 7);
            let bytes = bytes.clone();
            self.push(
                at,
                Event::Udp {
                    from,
                    to,
                    bytes,
                    tag,
                },
            );
        }
    }

    /// An emulated TCP/MPA message: never lost, three one-way trips, held while a
    /// partition separates the hosts, slowed by delay spikes.
    pub(crate) fn send_wire(&mut self, from: usize, to: usize, msg: WireMsg) {
        self.hosts[from].counters.wire_out += 1;
        let mut at = self.now + self.jitter() + self.jitter() + self.jitter();
        if let Some(end) = self.split_of(Some(from), Some(to)) {
            at += end - self.now;
        }
        let now = self.now;
        for (s, e, w) in &self.faults {
            if let What::DelaySpike { extra, .. } = w {
                if *s <= now && now < *e && (w.touches(from) || w.touches(to)) {
                    at += *extra;
                }
            }
        }
        self.push(at, Event::Wire { to, msg });
    }

    fn deliver_udp(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8], tag: Tag) {
        // The on-path attacker sees it first (and may forward it stripped).
        let stripped = if tag == Tag::Normal && !self.keyed.on_path_items.is_empty() {
            self.on_path(from, to, bytes)
        } else {
            None
        };
        let (bytes, tag) = match &stripped {
            Some(b) => (&b[..], Tag::Stripped),
            None => (bytes, tag),
        };
        if matches!(tag, Tag::Replayed | Tag::Forged) {
            if let Some(m) = crate::onpath::inner_message(bytes) {
                self.keyed.tainted_cps.insert(m.cp());
            }
        }
        let receiver = [
            IpAddr::V4(HOSTILE_IP),
            IpAddr::V6(HOSTILE_IP6),
            IpAddr::V4(PEER_IP),
            IpAddr::V6(PEER_IP6),
        ]
        .contains(&to.ip())
            || self.host_index(to.ip()).is_some();
        if receiver {
            self.ledger_delivered(from, to, bytes);
        }
        if to.ip() == IpAddr::V4(HOSTILE_IP) || to.ip() == IpAddr::V6(HOSTILE_IP6) {
            self.hostile_receive(from, to, bytes);
            return;
        }
        if to.ip() == IpAddr::V4(PEER_IP) || to.ip() == IpAddr::V6(PEER_IP6) {
            self.peer_receive(from, to, bytes);
            return;
        }
        let Some(h) = self.host_index(to.ip()) else {
            return;
        };
        let via = match (to.port(), to.is_ipv6()) {
            (iwpm_proto::consts::IWPM_PEER_PORT, false) => PeerSocket::V4Listener,
            (iwpm_proto::consts::IWPM_PEER_PORT, true) => PeerSocket::V6Listener,
            (CLIENT_PORT, false) => PeerSocket::V4Client,
            (CLIENT_PORT, true) => PeerSocket::V6Client,
            _ => return,
        };
        if self.hosts[h].daemon.is_some() && to.port() == iwpm_proto::consts::IWPM_PEER_PORT {
            self.ledger_ack_in(h, from, bytes);
        }
        self.count_victim_reject(h, bytes);
        let pre = self.auth_before(h, from, to, bytes);
        let host = &mut self.hosts[h];
        host.hand_wall_clock(self.base, self.now);
        let t = host.local(self.base, self.now);
        let Some(d) = host.daemon.as_mut() else {
            return;
        };
        host.counters.udp_in += 1;
        d.handle_peer_datagram(t, via, from, bytes);
        self.pump(h);
        if let Some(pre) = pre {
            self.auth_after(h, from, bytes, tag, pre);
        }
    }

    /// Ends the run: every remaining connection and listener is destroyed, then the
    /// fleet gets time to settle before the quiescence checks.
    fn teardown(&mut self) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
        for h in 0..self.hosts.len() {
            let ports: Vec<u16> = self.hosts[h].cm.listeners.keys().copied().collect();
            for p in ports {
                self.unlisten(h, p);
            }
        }
        // The queue now runs dry: REMOVEs, exchange lifetimes (10 s), the last state-file
        // write; then `run` checks quiescence.
    }
}
