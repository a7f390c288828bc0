//! The event loop: one thread, the host's deadline as the wait's timeout. It sleeps in one
//! level-triggered epoll set of two descriptors (`shell/waiter.rs`): the kernel link and
//! the `mio::Poll` (edge-triggered epoll) that holds every other source (peer sockets,
//! signals, helper wake-ups, control clients). Every datagram goes to the core through
//! the host, and after each input the actions are executed at once: that, and waking up at
//! the host's deadline, is all the host asks of the loop. Kernel input gets the port
//! reservations lent by the host for the call (binding is synchronous, as in C).
//!
//! Why the kernel link is outside mio: mio is edge-triggered, so a socket must be read
//! until it would block before the loop may sleep. A REMOVE_MAPPING needs no answer and
//! usually arrives alone, so that cost a third system call per message (the wait, the
//! read, the `EAGAIN` read). Level-triggered, the loop reads what it needs and sleeps at
//! once; the wait wakes it again if anything is left. It stops reading after a request it
//! does not answer and after the acknowledgement of the last message it sent, the two
//! points where the link is usually empty: a lone listen costs four system calls (wait,
//! read, answer, read the DONE), one more than a responder that blocks in `recv`.
//!
//! This file keeps the loop and start-up; it drives `iwpm_core::Host`, which holds the
//! core, the port lender, the state file's write policy and their timers. The loop holds
//! one value per component, each in its own module: the kernel link (`kernel/`), the peer
//! sockets (`peer/`), the outbox that sends to both in the core's order (`outbox.rs`), the
//! port lender (`ports/`), the SIGUSR1 dump (`dump/`), the control socket (`control/`),
//! restart survival (`restart/`). Here in `shell/`: `wakeups.rs` holds what wakes the loop
//! (the wait of `waiter.rs`, mio's poll, the signals), `drain.rs` reads the sockets in
//! batches, `serve.rs` answers the operator's requests from snapshots.

use std::io;
use std::time::{Duration, Instant};

use iwpm_core::{Action, CoreConfig, Host, Previous};
use mio::{Events, Token};
use signal_hook::consts::signal::{SIGHUP, SIGTERM, SIGUSR1};

use crate::control::server::ControlServer;
use crate::control::Control;
use crate::dump::writer::DumpWriterError;
use crate::dump::Dump;
use crate::fleet_keys::FleetKeyState;
use crate::io_counters::IoCounters;
use crate::kernel::link::KernelLink;
use crate::kernel::Kernel;
use crate::outbox::{Outbox, Outlets};
use crate::peer::sockets::{PeerSockets, ALL as ALL_PEER};
use crate::peer::Peers;
use crate::ports::Ports;
use crate::restart::Restart;
use crate::send_failure::SendFailure;

use self::wakeups::{KernelReady, Wakeups, HELPER_DONE, PEER_BASE, SIGNALS};

mod drain;
mod serve;
#[cfg(test)]
mod tests;
pub(crate) mod waiter;
mod wakeups;

/// How long an exit waits for a dump still being written.
const DUMP_FINISH_TIMEOUT: Duration = Duration::from_secs(2);

/// How the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// SIGTERM: exit status 0.
    Terminated,
    /// SIGHUP without a fleet key file: exit status 1 (rdma-core exits with the signal
    /// number's truth value; it does not reload). With one, SIGHUP reloads the keys.
    HungUp,
}

impl Exit {
    /// Process exit status, as rdma-core.
    pub(crate) fn status(self) -> u8 {
        match self {
            Exit::Terminated => 0,
            Exit::HungUp => 1,
        }
    }
}

/// Why the loop could not be set up or started (fatal: the process exits with it).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// Creating the poller, a waker or the signal pipe, or registering a socket, failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The helper thread that writes SIGUSR1 dumps could not start.
    #[error(transparent)]
    DumpWriter(#[from] DumpWriterError),
    /// The first messages of the handshake could not be sent (rdma-core exits too).
    #[error("cannot send HELLO to the kernel: {0}")]
    HelloNotSent(#[source] SendFailure),
}

/// Everything the loop owns: one value per component (module docs). The glue between the
/// components (`impl Shell` in `shell/drain.rs` for the sockets, `shell/serve.rs` for the
/// operator's requests) reaches them through these fields; the components themselves never
/// see the shell.
pub(crate) struct Shell {
    /// The core, the port lender, the state file's write policy, their timers.
    pub(crate) host: Host<Ports>,
    /// The kernel link.
    pub(crate) kernel: Kernel,
    /// What the core sends, to the kernel and to peers, in its order.
    pub(crate) outbox: Outbox,
    /// The peer sockets.
    pub(crate) peers: Peers,
    /// What wakes the loop: the wait, mio's poll, the signals.
    pub(crate) wakeups: Wakeups,
    /// SIGUSR1 dumps.
    pub(crate) dump: Dump,
    /// The control socket, when one is open.
    pub(crate) control: Option<Control>,
    /// Restart survival: service manager, FD store, state file.
    pub(crate) restart: Restart,
    /// The IO counters (the port lender and the restart machinery count their own).
    pub(crate) counters: IoCounters,
    /// The fleet key file, when `peer_key_file` is set (`fleet_keys.rs`): SIGHUP reads it
    /// again instead of ending the daemon.
    pub(crate) fleet: Option<FleetKeyState>,
}

impl Shell {
    /// Registers every socket and the signal pipe. The state file's write policy is on
    /// only when a state file is kept.
    pub(crate) fn new(
        config: CoreConfig,
        kernel: KernelLink,
        mut peers: PeerSockets,
        restart: Restart,
    ) -> Result<Self, SetupError> {
        let (wakeups, helper_waker) = Wakeups::new(&kernel, &mut peers)?;
        let dump = Dump::start(helper_waker.clone())?;
        restart.set_waker(helper_waker);
        let host = Host::new(config, Ports::new(), restart.save_policy(), Instant::now());
        Ok(Shell {
            host,
            kernel: Kernel::new(kernel),
            outbox: Outbox::default(),
            peers: Peers::new(peers),
            wakeups,
            dump,
            control: None,
            restart,
            counters: IoCounters::default(),
            fleet: None,
        })
    }

    /// The loop's registry (to register the control socket).
    pub(crate) fn registry(&self) -> &mio::Registry {
        self.wakeups.registry()
    }

    /// Starts the kernel handshake, with the previous daemon's ports and mappings (FD
    /// store, state file) taken over first, so the kernel's replay finds them held. A
    /// failure to send the first messages is fatal, as in rdma-core (which exits when its
    /// HELLO cannot be sent).
    pub(crate) fn start(&mut self) -> Result<(), SetupError> {
        let now = Instant::now();
        self.hand_in_wall_clock(now);
        let held = self.host.ports_mut().held_mut();
        let saved = self.restart.take_over(held);
        let previous = Previous {
            mappings: &saved,
            inherited_ports: held.unclaimed() > 0,
        };
        let report = self.host.start_after_restart(now, previous);
        if !saved.is_empty() {
            tracing::info!(
                restored = report.restored,
                failed = report.failed,
                skipped = report.skipped,
                took_ms = crate::logging::log_ms(now.elapsed()),
                "mappings restored from the state file"
            );
        }
        self.outbox.take_failure();
        self.flush(now);
        match self.outbox.take_failure() {
            Some(e) => Err(SetupError::HelloNotSent(e)),
            None => Ok(()),
        }
    }

    /// Runs until a terminating signal.
    ///
    /// Sources are served round-robin, at most [`drain::DRAIN_BUDGET`] datagrams each per
    /// round, so a flood on one socket (UDP 3935 is open to anyone) cannot starve the kernel
    /// link or the signal pipe; a source that still has data is revisited after a
    /// zero-timeout poll.
    pub(crate) fn run(&mut self) -> io::Result<Exit> {
        let exit = self.run_loop();
        self.restart.on_exit(&mut self.host);
        self.dump.finish(DUMP_FINISH_TIMEOUT);
        exit
    }

    fn run_loop(&mut self) -> io::Result<Exit> {
        let mut events = Events::with_capacity(64);
        // Peer sockets (in `ALL_PEER` order) that may still hold datagrams: mio is
        // edge-triggered, so they are revisited until they would block.
        let mut backlog = [false; ALL_PEER.len()];
        tracing::info!("entering the event loop");
        loop {
            let timeout = if backlog.contains(&true) {
                Some(Duration::ZERO)
            } else {
                [
                    self.host.poll_timeout(),
                    self.control_deadline(),
                    self.restart.deadline(),
                ]
                .into_iter()
                .flatten()
                .min()
                .map(|deadline| deadline.saturating_duration_since(Instant::now()))
            };
            let kernel = match self.wait(&mut events, timeout) {
                Ok(kernel) => kernel,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // Before any input of this turn: the stamps of sealed datagrams are made and
            // checked against it.
            self.hand_in_wall_clock(Instant::now());
            if kernel.writable {
                let (outbox, mut out) = self.outbox();
                outbox.flush_held(&mut out);
            }
            if kernel.readable {
                self.drain_kernel();
            }
            for event in events.iter() {
                match event.token() {
                    SIGNALS => {
                        if let Some(exit) = self.drain_signals() {
                            return Ok(exit);
                        }
                    }
                    HELPER_DONE => {
                        self.dump_written();
                        // collects a finished state file write
                        self.restart_tick(Instant::now());
                    }
                    t if ControlServer::owns(t) => self.control_event(event),
                    Token(t) => {
                        if let Some(slot) = t
                            .checked_sub(PEER_BASE)
                            .filter(|i| *i < ALL_PEER.len())
                            .and_then(|i| backlog.get_mut(i))
                        {
                            *slot = true;
                        }
                    }
                }
            }
            for (i, which) in ALL_PEER.into_iter().enumerate() {
                if backlog[i] {
                    backlog[i] = self.drain_peer(which);
                }
            }
            let now = Instant::now();
            if self.host.poll_timeout().is_some_and(|d| d <= now) {
                self.host.handle_timeout(now);
                self.flush(now);
            }
            self.control_turn(now);
            if self.restart.deadline().is_some_and(|d| d <= now) {
                self.restart_tick(now);
            }
        }
    }

    /// The wall clock, for the core (which never reads a clock): once per loop turn. A clock
    /// set before 1970 hands in zero (every sealed datagram is then outside the window,
    /// and the core's own counters say so).
    fn hand_in_wall_clock(&mut self, now: Instant) {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.host.handle_wall_clock(now, since_epoch);
    }

    /// Sleeps until the kernel link or a mio source is ready, or `timeout` passes (see
    /// [`Wakeups::wait`]).
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<KernelReady> {
        self.wakeups.wait(&self.kernel.link, events, timeout)
    }

    fn drain_signals(&mut self) -> Option<Exit> {
        let pending = self.wakeups.pending_signals();
        let mut exit = None;
        for sig in pending {
            match sig {
                SIGUSR1 => {
                    tracing::warn!("Received SIGUSR1 signal");
                    self.request_dump();
                }
                SIGTERM => {
                    tracing::warn!("Received SIGTERM signal");
                    exit = Some(Exit::Terminated);
                }
                SIGHUP => {
                    tracing::warn!("Received SIGHUP signal");
                    // With a fleet key file it is read again; without one, the daemon
                    // exits as rdma-core's does (scripts expect it).
                    if !self.reload_fleet_keys(Instant::now()) {
                        exit = exit.or(Some(Exit::HungUp));
                    }
                }
                _ => {}
            }
        }
        exit
    }

    /// Runs the restart machinery's timers; a state file write it collected is reported to
    /// the host's policy, at the time it was collected.
    fn restart_tick(&mut self, now: Instant) {
        if let Some(saved) = self.restart.tick(now) {
            self.host
                .state_saved(Instant::now(), saved.generation, saved.took);
        }
    }

    /// Executes every queued action, then lets the restart machinery see the changes.
    pub(crate) fn flush(&mut self, now: Instant) {
        self.send_actions(now);
        self.after_batch(now);
    }

    /// Executes every queued action.
    fn send_actions(&mut self, now: Instant) {
        while let Some(action) = self.host.poll_action() {
            match action {
                Action::ToKernel(bytes) => {
                    let (outbox, mut out) = self.outbox();
                    outbox.send_kernel(&mut out, &bytes);
                    self.host.recycle(bytes);
                }
                Action::ToPeer { via, to, datagram } => {
                    let (outbox, mut out) = self.outbox();
                    outbox.send_peer(&mut out, now, via, to, &datagram);
                }
                Action::Ready => self.on_ready(),
                Action::ProbeDone(result) => self.probe_done(&result),
                // (the core logs it; nothing to do)
                Action::Settled(_) => {}
                Action::SaveState { generation } => {
                    // (written here only when the writer thread is missing)
                    if let Some(saved) = self.restart.save_state(generation, self.host.core()) {
                        self.host
                            .state_saved(Instant::now(), saved.generation, saved.took);
                    }
                }
                Action::RecoveryEnded => self.restart.recovery_ended(),
                Action::TableChanged { mappings, .. } => self.restart.table_changed(mappings),
            }
        }
    }

    /// After a batch of input: let the restart machinery act on what the core announced
    /// (inherited ports left unclaimed, FD store, status); once per batch, not per
    /// datagram.
    pub(crate) fn after_batch(&mut self, now: Instant) {
        let held = self.host.ports_mut().held_mut();
        self.restart.release_unclaimed(now, held);
        self.restart.after_input(now, held);
    }

    /// The outbox and what it sends through, borrowed apart from the rest.
    pub(crate) fn outbox(&mut self) -> (&mut Outbox, Outlets<'_>) {
        let Kernel { link, warn } = &mut self.kernel;
        let out = Outlets {
            kernel: link,
            warn_kernel: warn,
            peers: &mut self.peers,
            waiter: self.wakeups.waiter_mut(),
            counters: &mut self.counters,
        };
        (&mut self.outbox, out)
    }

    /// The kernel handshake is done (`Action::Ready`, again after each resynchronisation):
    /// said once, and to the service manager (`READY=1`).
    fn on_ready(&mut self) {
        if self.restart.ready() {
            return;
        }
        tracing::info!(abi = self.host.core().abi(), "kernel handshake done; ready");
        self.restart.on_ready(Instant::now());
    }
}
