//! The event loop: one thread, the core's deadline as the wait's timeout. It sleeps in one
//! level-triggered epoll set of two descriptors (`shell/waiter.rs`): the kernel link and
//! the `mio::Poll` (edge-triggered epoll) that holds every other source (peer sockets,
//! signals, helper wake-ups, control clients). Every datagram goes to the core, and after
//! each input the core's actions are executed at once: that, and waking up at its
//! deadline, is all the core asks of the loop. Kernel input gets the port reservations
//! lent for the call (binding is synchronous, as in C).
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
//! This file keeps the loop, its wait, the signals and start-up; the rest is in `shell/`:
//! `drain.rs` reads the sockets in batches, `kernel_tx.rs` sends to the kernel (and holds
//! peer datagrams behind it), `ports.rs` lends the reservations to the core, `dump.rs`
//! answers SIGUSR1, `control.rs` the control socket; `coalesce.rs` and `waiter.rs` are
//! the parts those build on.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwpm_core::{Action, Core, Previous, RateLimit};
use mio::{Events, Interest, Poll, Token, Waker};
use signal_hook::consts::signal::{SIGHUP, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;

use crate::cli::RunMode;
use crate::control_server::ControlServer;
use crate::dump_writer::{DumpWriter, DumpWriterError};
use crate::io_counters::IoCounters;
use crate::kernel_link::KernelLink;
use crate::peer_sockets::{PeerSockets, ALL as ALL_PEER, PEER_RECV_BUFFER};
use crate::ports::reservations::Reservations;
use crate::restart::Restart;

use self::kernel_tx::{KernelTx, Outlets};
use self::ports::LentPorts;
use self::waiter::Waiter;

mod coalesce;
mod control;
mod drain;
mod dump;
mod kernel_tx;
mod ports;
#[cfg(test)]
mod tests;
mod waiter;

// Token 0 is unused: the kernel link is waited on outside mio (see the module docs).
const SIGNALS: Token = Token(1);
/// Woken by the helper threads: a dump or a state file write is done.
const HELPER_DONE: Token = Token(2);
const PEER_BASE: usize = 3;

/// How long an exit waits for a dump still being written.
const DUMP_FINISH_TIMEOUT: Duration = Duration::from_secs(2);

/// Burst of rate-limited warnings per window.
const WARN_BURST: u32 = 5;
/// Window of rate-limited warnings.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// How the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// SIGTERM: exit status 0.
    Terminated,
    /// SIGHUP: exit status 1 (rdma-core exits with the signal number's truth value; it does
    /// not reload).
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
    #[error("cannot send HELLO to the kernel")]
    HelloNotSent,
}

/// Everything the loop owns.
pub(crate) struct Shell {
    poll: Poll,
    signals: Signals,
    core: Core,
    kernel: KernelLink,
    peers: PeerSockets,
    reservations: Reservations,
    mode: RunMode,
    ready_seen: bool,
    counters: IoCounters,
    warn_kernel: RateLimit,
    warn_peer: RateLimit,
    warn_resource: RateLimit,
    peer_buf: Vec<u8>,
    dump_writer: DumpWriter,
    /// A SIGUSR1 arrived while a dump was being written: dump again when it is done.
    dump_pending: bool,
    /// What goes to the kernel, and the peer datagrams held behind it (`shell/kernel_tx.rs`).
    kernel_tx: KernelTx,
    /// The loop's wait: the kernel link and mio's epoll, level-triggered (`shell/waiter.rs`).
    waiter: Waiter,
    /// The control socket, when one is open (`shell/control.rs`).
    control: Option<control::Control>,
    /// Restart survival: service manager, FD store, state file (`restart.rs`).
    restart: Restart,
}

/// The kernel link's readiness after a wait.
struct KernelReady {
    readable: bool,
    writable: bool,
}

impl Shell {
    /// Registers every socket and the signal pipe.
    pub(crate) fn new(
        core: Core,
        kernel: KernelLink,
        mut peers: PeerSockets,
        mode: RunMode,
        restart: Restart,
    ) -> Result<Self, SetupError> {
        let poll = Poll::new()?;
        let registry = poll.registry();
        for (i, which) in ALL_PEER.into_iter().enumerate() {
            if let Some(sock) = peers.get_mut(which) {
                registry.register(sock, Token(PEER_BASE + i), Interest::READABLE)?;
            }
        }
        let mut signals = Signals::new([SIGTERM, SIGHUP, SIGUSR1])?;
        registry.register(&mut signals, SIGNALS, Interest::READABLE)?;
        let helper_waker = Arc::new(Waker::new(registry, HELPER_DONE)?);
        let dump_writer = DumpWriter::start(helper_waker.clone())?;
        restart.set_waker(helper_waker);
        let waiter = Waiter::new(poll.registry(), &kernel)?;
        Ok(Shell {
            poll,
            signals,
            core,
            kernel,
            peers,
            reservations: Reservations::new(),
            mode,
            ready_seen: false,
            counters: IoCounters::default(),
            warn_kernel: RateLimit::new(WARN_WINDOW, WARN_BURST),
            warn_peer: RateLimit::new(WARN_WINDOW, WARN_BURST),
            warn_resource: RateLimit::new(WARN_WINDOW, WARN_BURST),
            peer_buf: vec![0; PEER_RECV_BUFFER],
            dump_writer,
            dump_pending: false,
            kernel_tx: KernelTx::default(),
            waiter,
            control: None,
            restart,
        })
    }

    /// The loop's registry (to register the control socket).
    pub(crate) fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// Starts the kernel handshake, with the previous daemon's ports and mappings (FD
    /// store, state file) taken over first, so the kernel's replay finds them held. A
    /// failure to send the first messages is fatal, as in rdma-core (which exits when its
    /// HELLO cannot be sent).
    pub(crate) fn start(&mut self) -> Result<(), SetupError> {
        let now = Instant::now();
        let saved = self.restart.take_over(&mut self.reservations);
        let previous = Previous {
            mappings: &saved,
            inherited_ports: self.reservations.unclaimed() > 0,
        };
        let mut ports = LentPorts::new(
            &mut self.reservations,
            &mut self.counters,
            &mut self.warn_resource,
            now,
        );
        let report = self.core.start_after_restart(now, previous, &mut ports);
        if !saved.is_empty() {
            tracing::info!(
                restored = report.restored,
                failed = report.failed,
                skipped = report.skipped,
                took_ms = now.elapsed().as_secs_f64() * 1e3,
                "mappings restored from the state file"
            );
        }
        let errors_before = self.counters.kernel_tx_errors;
        self.flush(now);
        if self.counters.kernel_tx_errors != errors_before {
            return Err(SetupError::HelloNotSent);
        }
        Ok(())
    }

    /// Runs until a terminating signal.
    ///
    /// Sources are served round-robin, at most [`drain::DRAIN_BUDGET`] datagrams each per
    /// round, so a flood on one socket (UDP 3935 is open to anyone) cannot starve the kernel
    /// link or the signal pipe; a source that still has data is revisited after a
    /// zero-timeout poll.
    pub(crate) fn run(&mut self) -> io::Result<Exit> {
        let exit = self.run_loop();
        self.restart.on_exit(&self.core);
        self.dump_writer.finish(DUMP_FINISH_TIMEOUT);
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
                    self.core.poll_timeout(),
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
            if kernel.writable {
                let (tx, mut out) = self.tx();
                tx.flush_held(&mut out);
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
                        // collects a finished state file write and starts a due one
                        self.restart.tick(Instant::now(), &self.core);
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
            if self.core.poll_timeout().is_some_and(|d| d <= now) {
                let mut ports = LentPorts::new(
                    &mut self.reservations,
                    &mut self.counters,
                    &mut self.warn_resource,
                    now,
                );
                self.core.handle_timeout(now, &mut ports);
                self.flush(now);
            }
            self.control_turn(now);
            if self.restart.deadline().is_some_and(|d| d <= now) {
                self.restart.tick(now, &self.core);
            }
        }
    }

    /// Sleeps until the kernel link or a mio source is ready, or `timeout` passes. mio's
    /// events, if any, are left in `events` (harvested without waiting); the kernel link's
    /// readiness is returned.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<KernelReady> {
        let ready = self.waiter.wait(timeout)?;
        if ready.others {
            self.poll.poll(events, Some(Duration::ZERO))?;
        } else {
            events.clear();
        }
        // What is still queued is read below; then the link is left alone.
        if ready.kernel_hung_up && self.waiter.watches_kernel() {
            tracing::error!(link = self.kernel.kind_name(), "the kernel link hung up");
            if let Err(e) = self.waiter.forget_kernel(&self.kernel) {
                tracing::error!(error = %e, "cannot stop watching the hung-up kernel link");
            }
        }
        Ok(KernelReady {
            readable: ready.kernel_readable,
            writable: ready.kernel_writable,
        })
    }

    fn drain_signals(&mut self) -> Option<Exit> {
        let pending: Vec<i32> = self.signals.pending().collect();
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
                    exit = exit.or(Some(Exit::HungUp));
                }
                _ => {}
            }
        }
        exit
    }

    /// Executes every queued action, then lets the restart machinery see the changes.
    fn flush(&mut self, now: Instant) {
        self.send_actions(now);
        self.after_batch(now);
    }

    /// Executes every queued action.
    fn send_actions(&mut self, now: Instant) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::ToKernel(bytes) => {
                    let (tx, mut out) = self.tx();
                    tx.send_kernel(&mut out, &bytes);
                    self.core.recycle(bytes);
                }
                Action::ToPeer { via, to, datagram } => {
                    let (tx, mut out) = self.tx();
                    tx.send_peer(&mut out, now, via, to, &datagram);
                }
                Action::Ready => self.on_ready(),
                Action::ProbeDone(result) => self.probe_done(&result),
                // (the core logs it; nothing to do)
                Action::Settled(_) => {}
                // (the bare core is driven here, without the host's state-file policy)
                Action::SaveState { .. } => {}
                Action::RecoveryEnded => self.restart.recovery_ended(),
                Action::TableChanged {
                    generation,
                    mappings,
                } => self.restart.table_changed(generation, mappings),
            }
        }
    }

    /// After a batch of input: let the restart machinery act on what the core announced
    /// (inherited ports left unclaimed, FD store, state file, status); once per batch, not
    /// per datagram.
    fn after_batch(&mut self, now: Instant) {
        self.restart.release_unclaimed(now, &mut self.reservations);
        self.restart.after_input(now, &mut self.reservations);
    }

    /// The kernel send path and what it sends through, borrowed apart from the rest.
    fn tx(&mut self) -> (&mut KernelTx, Outlets<'_>) {
        let out = Outlets {
            kernel: &self.kernel,
            peers: &self.peers,
            waiter: &mut self.waiter,
            counters: &mut self.counters,
            warn_kernel: &mut self.warn_kernel,
            warn_peer: &mut self.warn_peer,
        };
        (&mut self.kernel_tx, out)
    }

    fn on_ready(&mut self) {
        if self.ready_seen {
            return;
        }
        self.ready_seen = true;
        tracing::info!(abi = self.core.abi(), "kernel handshake done; ready");
        if self.mode == RunMode::Systemd {
            self.restart.on_ready(Instant::now());
        }
    }
}
