//! [`Host`]: the sans-IO half of every loop that runs a [`Core`], and the only way into
//! one. It makes the core from its configuration and holds it, the port reservations lent
//! to it, the state-file policy and the timers of both, so the daemon's shell, the test
//! kit, the model driver and the simulator drive one type: a new duty of the core is
//! taught here once, not to four callers, and no caller can drive the core past it (the
//! core's inputs are private to this crate; a caller that skipped the host would lose
//! [`Action::SaveState`]).
//!
//! The caller's contract: after every input (`start*`,
//! `handle_*`, [`Host::start_probe`]) drain [`Host::poll_action`] until `None`, and call
//! [`Host::handle_timeout`] at [`Host::poll_timeout`]. The host adds one action of its
//! own, [`Action::SaveState`]: the table changed and the gathering delay passed, so the
//! caller writes the state file (from [`Core::saved_mappings`]) and reports with
//! [`Host::state_saved`] how long that took.
//!
//! Why the policy lives here and not in the shell: the simulator and the model must save
//! exactly when the daemon does, or a crash there tests a different daemon. Writing the
//! file (a thread, `rename`, `fsync`) stays with the caller.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_proto::fleet_key::FleetKeys;

use crate::machine::{Core, Previous, ProbeError, ProbeRequest, RestoreReport};
use crate::outcome::ProbeId;
use crate::{Action, CoreConfig, KernelReceipt, PeerSocket, PortReservations};

/// When the state file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavePolicy {
    /// Changes are gathered this long before a write: a burst of connects costs one write.
    pub delay: Duration,
    /// Writes are spaced by this many times the duration of the last one, so writing
    /// takes at most about 1/`spacing` of the time. Each write is the whole table; the
    /// cost of the spacing is staleness after a crash (a restart writes at exit).
    ///
    /// Why 100 (the default): a write of 10 000 mappings took about 35 ms on the rig's
    /// emulated CPU (before the lines were formatted by hand, ~2.7× less since for IPv4),
    /// and at 10× a listen storm spent more user CPU on the state file than on the kernel's
    /// requests. At 100× a crash may lose the last ~100 write durations of changes (~1.2 s
    /// at 50 000 IPv4 mappings), which the kernel's replay then has to bring.
    pub spacing: u32,
}

impl Default for SavePolicy {
    /// 200 ms, and at most ~1 % of the time writing.
    fn default() -> Self {
        SavePolicy {
            delay: Duration::from_millis(200),
            spacing: 100,
        }
    }
}

/// Where the state file's writes stand.
#[derive(Debug)]
struct Saver {
    policy: SavePolicy,
    /// The table generation the core last announced.
    generation: u64,
    /// The generation the last finished write held.
    written: Option<u64>,
    /// When the next write is due.
    due: Option<Instant>,
    /// No write starts before this (the spacing after the last one).
    not_before: Option<Instant>,
    /// A [`Action::SaveState`] went out and [`Host::state_saved`] has not come back.
    in_flight: bool,
}

impl Saver {
    fn new(policy: SavePolicy) -> Self {
        Saver {
            policy,
            generation: 0,
            written: None,
            due: None,
            not_before: None,
            in_flight: false,
        }
    }

    /// Schedules a write when the table moved since the last one and none is scheduled or
    /// running (a running one schedules the next when it ends, after the spacing).
    fn schedule(&mut self, now: Instant) {
        if self.written != Some(self.generation) && self.due.is_none() && !self.in_flight {
            let at = now + self.policy.delay;
            self.due = Some(self.not_before.map_or(at, |nb| nb.max(at)));
        }
    }

    fn deadline(&self) -> Option<Instant> {
        if self.in_flight {
            None
        } else {
            self.due
        }
    }

    /// Starts the write due at `now`, if one is; true if it did.
    fn start_due(&mut self, now: Instant) -> bool {
        if self.in_flight || self.due.is_none_or(|d| d > now) {
            return false;
        }
        self.due = None;
        self.in_flight = true;
        true
    }
}

/// One core with its port reservations, state-file policy and timers (module docs).
#[derive(Debug)]
pub struct Host<P> {
    core: Core,
    ports: P,
    saver: Option<Saver>,
    /// The time of the last input, for scheduling a write when its `TableChanged` is
    /// drained.
    last_now: Instant,
    /// A write fell due: the next [`Host::poll_action`] hands it out after the core's
    /// queue, with the generation announced last (the table the caller will write then
    /// may have moved within the call that made the write due).
    save_due: bool,
}

impl<P: PortReservations> Host<P> {
    /// A host around a new, idle core of `config`, lending it `ports`; `save` is the
    /// state-file policy, or `None` when no state file is kept (no [`Action::SaveState`]
    /// then). [`Host::start`] (or [`Host::start_after_restart`]) begins the kernel
    /// handshake.
    pub fn new(config: CoreConfig, ports: P, save: Option<SavePolicy>, now: Instant) -> Self {
        Host {
            core: Core::new(config, now),
            ports,
            saver: save.map(Saver::new),
            last_now: now,
            save_due: false,
        }
    }

    /// Queues HELLO(max_abi) to the kernel; later calls do nothing. With a state file, the
    /// first write is scheduled at once, changes or not: the file then describes this process (a previous one's file, or one this
    /// process could not restore, would otherwise stay until the table first moves).
    pub fn start(&mut self, now: Instant) {
        self.last_now = now;
        self.core.start(now);
        self.schedule_first_save(now);
    }

    /// Starts a daemon that follows another: restores the previous process's mappings
    /// (read back from its state file), then does what [`Host::start`] does. Each mapping
    /// gets its saved reference count and, unless NO_PORT_MAP, exactly its saved port
    /// through the host's lender; they are in place before the kernel is greeted, so its
    /// replay finds them. The replay then confirms or corrects them, and the `handle_*`
    /// call that ends it settles them. On a core already started, nothing is restored. The
    /// first write is scheduled as by [`Host::start`].
    pub fn start_after_restart(&mut self, now: Instant, previous: Previous<'_>) -> RestoreReport {
        self.last_now = now;
        let report = self
            .core
            .start_after_restart(now, previous, &mut self.ports);
        self.schedule_first_save(now);
        report
    }

    fn schedule_first_save(&mut self, now: Instant) {
        if let Some(saver) = &mut self.saver {
            saver.schedule(now);
        }
    }

    /// One datagram from the kernel (the caller checked it came from port id 0). Mappings
    /// it creates or frees reserve and release their TCP ports through the host's lender
    /// at once. The receipt says what the datagram was and whether the core answered it.
    pub fn handle_kernel_datagram(&mut self, now: Instant, datagram: &[u8]) -> KernelReceipt {
        self.last_now = now;
        self.core
            .handle_kernel_datagram(now, datagram, &mut self.ports)
    }

    /// The kernel link lost input (`ENOBUFS` on the netlink socket): a kernel message was
    /// dropped, possibly a REG_PID multicast, after which the kernel believes no port
    /// mapper is running. Re-sends HELLO (at most once a second), which makes the kernel
    /// record us again without replaying mappings we already hold.
    pub fn handle_kernel_overrun(&mut self, now: Instant) {
        self.last_now = now;
        self.core.handle_kernel_overrun(now);
    }

    /// One UDP datagram received on `via` from `from`.
    pub fn handle_peer_datagram(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        datagram: &[u8],
    ) {
        self.last_now = now;
        self.core.handle_peer_datagram(now, via, from, datagram);
    }

    /// The fleet keys to seal and verify peer datagrams with (`None`: no keys, every peer
    /// is served unauthenticated). A reload keeps the use counts of the ids still listed;
    /// the replay memory is kept, so a reload opens no window for replays. (The caller
    /// logs the change: it knows where the keys came from.)
    pub fn set_fleet_keys(&mut self, now: Instant, keys: Option<FleetKeys>) {
        self.last_now = now;
        self.core.set_fleet_keys(now, keys);
    }

    /// The wall clock, read by the caller at `now` (time since the Unix epoch): what the
    /// stamps of sealed datagrams are made and checked with. Call it once per loop turn,
    /// before the turn's input; between two hand-ins the core advances it by `now`.
    pub fn handle_wall_clock(&mut self, now: Instant, since_epoch: Duration) {
        self.core.handle_wall_clock(now, since_epoch);
    }

    /// Starts a probe of the peer daemon at `probe.target` from `probe.source`. The
    /// result comes as [`Action::ProbeDone`] at the latest `probe.wait` (capped at
    /// [`PROBE_MAX_WAIT`](crate::PROBE_MAX_WAIT)) from now.
    pub fn start_probe(
        &mut self,
        now: Instant,
        probe: ProbeRequest,
    ) -> Result<ProbeId, ProbeError> {
        self.last_now = now;
        self.core.start_probe(now, probe)
    }

    /// Runs what is due at `now`: the core's timers (a replay window that closes settles
    /// the restored mappings it was for; those freed release their ports), and a
    /// state-file write (queued as [`Action::SaveState`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = now;
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            self.core.handle_timeout(now, &mut self.ports);
        }
        if let Some(saver) = &mut self.saver {
            if saver.start_due(now) {
                self.save_due = true;
            }
        }
    }

    /// Next output, if any: the core's actions in order, then a due
    /// [`Action::SaveState`]. Call it until `None` after every input (`start*`,
    /// `handle_*`, `start_probe`): output is queued, never sent, and this is the only
    /// queue. A `TableChanged` passing through schedules the write it calls for.
    #[must_use = "call poll_action again until None after each input: queued output is lost otherwise"]
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(action) = self.core.poll_action() {
            if let (Action::TableChanged { generation, .. }, Some(saver)) =
                (&action, &mut self.saver)
            {
                saver.generation = *generation;
                saver.schedule(self.last_now);
            }
            return Some(action);
        }
        if !std::mem::take(&mut self.save_due) {
            return None;
        }
        self.saver.as_ref().map(|saver| Action::SaveState {
            generation: saver.generation,
        })
    }

    /// When [`Host::handle_timeout`] should be called next: the core's deadline or a due
    /// write, whichever comes first; `None` if no timer runs. Call it again after every
    /// input, which may move the deadline.
    #[must_use = "call poll_timeout again after each input and wake up at the deadline it gives"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let save = self.saver.as_ref().and_then(Saver::deadline);
        [self.core.poll_timeout(), save].into_iter().flatten().min()
    }

    /// The write of an [`Action::SaveState`] for `generation` ended at `now` after `took`
    /// (successful or not: a failing disk must not make the host retry in a loop). The next
    /// write waits for the spacing, and is scheduled at once if the table moved meanwhile.
    pub fn state_saved(&mut self, now: Instant, generation: u64, took: Duration) {
        let Some(saver) = &mut self.saver else {
            return;
        };
        saver.in_flight = false;
        saver.written = Some(generation);
        saver.not_before = Some(now + took * saver.policy.spacing);
        saver.schedule(now);
    }

    /// The table generation the state file lacks, if the table changed since the last
    /// finished write: what a caller writes at exit without waiting for the delay.
    pub fn unsaved_generation(&self) -> Option<u64> {
        self.saver
            .as_ref()
            .filter(|s| s.written != Some(s.generation))
            .map(|s| s.generation)
    }

    /// Hands a sent datagram's buffer back to the core for reuse (optional: dropping it
    /// is fine).
    pub fn recycle(&mut self, buffer: Vec<u8>) {
        self.core.recycle(buffer);
    }

    /// The core, for what it reports (snapshots, stats, saved mappings, invariants): its
    /// inputs are the host's alone.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The port reservations lent to the core.
    pub fn ports(&self) -> &P {
        &self.ports
    }

    /// The port reservations, for what the caller does with them outside the core's calls
    /// (ports inherited from a previous daemon, the FD store, failures a test injects).
    pub fn ports_mut(&mut self) -> &mut P {
        &mut self.ports
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CoreConfig, ReservationId, ReserveError};

    /// A lender that never holds anything: the policy tests make no mappings.
    #[derive(Debug, Default)]
    struct NoPorts;

    impl PortReservations for NoPorts {
        fn reserve(&mut self, _bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
            Err(ReserveError::AddrInUse)
        }
        fn release(&mut self, _id: ReservationId) {}
    }

    fn host(now: Instant) -> Host<NoPorts> {
        Host::new(
            CoreConfig::default(),
            NoPorts,
            Some(SavePolicy::default()),
            now,
        )
    }

    fn drain(h: &mut Host<NoPorts>) -> Vec<Action> {
        std::iter::from_fn(|| h.poll_action()).collect()
    }

    /// The saver as a `TableChanged` of `generation` at `now` leaves it.
    fn announce(h: &mut Host<NoPorts>, now: Instant, generation: u64) {
        h.last_now = now;
        let saver = h.saver.as_mut().unwrap();
        saver.generation = generation;
        saver.schedule(now);
    }

    #[test]
    fn a_change_is_saved_after_the_delay_and_once() {
        let t0 = Instant::now();
        let mut h = host(t0);
        announce(&mut h, t0, 1);
        announce(&mut h, t0 + Duration::from_millis(50), 2);
        assert_eq!(h.poll_timeout(), Some(t0 + Duration::from_millis(200)));
        h.handle_timeout(t0 + Duration::from_millis(199));
        assert!(!drain(&mut h).contains(&Action::SaveState { generation: 2 }));
        let due = t0 + Duration::from_millis(200);
        h.handle_timeout(due);
        assert!(drain(&mut h).contains(&Action::SaveState { generation: 2 }));
        // In flight: no second write, no deadline of the saver's.
        h.handle_timeout(due + Duration::from_secs(1));
        assert!(!drain(&mut h)
            .iter()
            .any(|a| matches!(a, Action::SaveState { .. })));
        assert_eq!(h.unsaved_generation(), Some(2));
        h.state_saved(due, 2, Duration::ZERO);
        assert_eq!(h.unsaved_generation(), None);
        assert_eq!(h.saver.as_ref().unwrap().deadline(), None);
    }

    #[test]
    fn a_save_names_the_generation_announced_last() {
        let t0 = Instant::now();
        let mut h = host(t0);
        announce(&mut h, t0, 1);
        let due = t0 + Duration::from_millis(200);
        h.handle_timeout(due);
        // The call that made the write due also changed the table: its TableChanged is
        // drained before the SaveState, and the caller writes the table as it is then.
        announce(&mut h, due, 2);
        assert_eq!(drain(&mut h), vec![Action::SaveState { generation: 2 }]);
        h.state_saved(due, 2, Duration::ZERO);
        assert_eq!(
            h.unsaved_generation(),
            None,
            "no second write for generation 2"
        );
        assert_eq!(h.poll_timeout(), h.core.poll_timeout());
    }

    #[test]
    fn writes_are_spaced_by_the_last_ones_duration() {
        let t0 = Instant::now();
        let mut h = host(t0);
        announce(&mut h, t0, 1);
        let due = t0 + Duration::from_millis(200);
        h.handle_timeout(due);
        let _ = drain(&mut h);
        // A change while the write runs is scheduled when it ends, after the spacing.
        announce(&mut h, due + Duration::from_millis(1), 2);
        let took = Duration::from_millis(10);
        h.state_saved(due + took, 1, took);
        assert_eq!(h.unsaved_generation(), Some(2));
        assert_eq!(
            h.saver.as_ref().unwrap().deadline(),
            Some(due + took + took * 100)
        );
    }

    #[test]
    fn without_a_state_file_nothing_is_saved() {
        let t0 = Instant::now();
        let mut h = Host::new(CoreConfig::default(), NoPorts, None, t0);
        h.start(t0);
        h.handle_timeout(t0 + Duration::from_secs(3600));
        assert!(!drain(&mut h)
            .iter()
            .any(|a| matches!(a, Action::SaveState { .. })));
        h.state_saved(t0, 1, Duration::ZERO);
        assert_eq!(h.unsaved_generation(), None);
    }
}
