//! The event loop: one thread, the core's deadline as the wait's timeout. It sleeps in one
//! level-triggered epoll set of two descriptors (`shell/waiter.rs`): the kernel link and
//! the `mio::Poll` (edge-triggered epoll) that holds every other source (peer sockets,
//! signals, helper wake-ups, control clients). Every datagram goes to the core, and after
//! each input the core's actions are executed at once. Kernel input gets the port
//! reservations lent for the call (binding is synchronous, as in C).
//!
//! Why the kernel link is outside mio: mio is edge-triggered, so a socket must be read
//! until it would block before the loop may sleep. A REMOVE_MAPPING needs no answer and
//! usually arrives alone, so that cost a third system call per message (the wait, the
//! read, the `EAGAIN` read). Level-triggered, the loop reads what it needs and sleeps at
//! once; the wait wakes it again if anything is left. It stops reading after a request it
//! does not answer and after the acknowledgement of the last message it sent, the two
//! points where the link is usually empty: a lone listen costs four system calls (wait,
//! read, answer, read the DONE), one more than a responder that blocks in `recv`.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwpm_core::{
    Action, Core, PeerSocket, PortReservations, RateLimit, ReservationId, ReserveError,
};
use iwpm_proto::consts::{NLMSG_DONE, NLMSG_ERROR};
use iwpm_proto::netlink::NlHeader;
use mio::{Events, Interest, Poll, Token, Waker};
use signal_hook::consts::signal::{SIGHUP, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;

use crate::cli::RunMode;
use crate::control_server::ControlServer;
use crate::dump_writer::{self, DumpText, DumpWriter, DumpWriterError};
use crate::io_counters::IoCounters;
use crate::kernel_link::{KernelLink, Received, NETLINK_DONE_TRUESIZE, NETLINK_RCVBUF_MIN};
use crate::peer_sockets::{PeerSockets, ALL as ALL_PEER, PEER_RECV_BUFFER};
use crate::process::{self, Limit};
use crate::reservations::{Reservations, ReserveFailure};
use crate::restart::Restart;
use crate::send_failure::SendFailure;

use self::coalesce::Coalesced;
use self::waiter::Waiter;

mod coalesce;
mod control;
mod waiter;

// Token 0 is unused: the kernel link is waited on outside mio (see the module docs).
const SIGNALS: Token = Token(1);
/// Woken by the helper threads: a dump or a state file write is done.
const HELPER_DONE: Token = Token(2);
const PEER_BASE: usize = 3;

/// Datagrams read from one source before the others get a turn.
const DRAIN_BUDGET: usize = 64;

// The netlink receive buffer floor covers three rounds of replies (see its docs): every
// datagram read in one round may be answered, and each answer comes back as an NLMSG_DONE.
const _: () = assert!(
    2 * NETLINK_RCVBUF_MIN >= 3 * DRAIN_BUDGET * (1 + ALL_PEER.len()) * NETLINK_DONE_TRUESIZE
);

/// How long an exit waits for a dump still being written.
const DUMP_FINISH_TIMEOUT: Duration = Duration::from_secs(2);

/// Burst of rate-limited warnings per window.
const WARN_BURST: u32 = 5;
/// Most datagrams held for the kernel link while its socket is full (a Unix-datagram
/// receiver queues only `net.unix.max_dgram_qlen` datagrams); past this, new ones are
/// dropped and counted, so a stalled kernel side cannot grow our memory without bound.
const KERNEL_QUEUE_MAX: usize = 65_536;
/// A datagram held behind a full kernel link.
///
/// Peer datagrams wait behind kernel ones so that they leave in the core's order: on Linux
/// a netlink send to the kernel is processed inside `sendmsg`, so a REMOTE_INFO the core
/// emits before its ACCEPT is in the kernel before the ACCEPT leaves, and the peer's
/// connection cannot overtake it. Only a Unix-datagram kernel link (the emulator) can be
/// full; without this, an ACCEPT would overtake a REMOTE_INFO queued there.
#[derive(Debug)]
enum Held {
    /// A datagram to the kernel and the netlink messages in it.
    Kernel { datagram: Vec<u8>, messages: u64 },
    Peer {
        via: PeerSocket,
        to: SocketAddr,
        datagram: Vec<u8>,
    },
}

/// Window of rate-limited warnings.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// How the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM: exit status 0.
    Terminated,
    /// SIGHUP: exit status 1 (rdma-core exits with the signal number's truth value; it does
    /// not reload).
    HungUp,
}

impl Exit {
    /// Process exit status, as rdma-core.
    pub fn status(self) -> u8 {
        match self {
            Exit::Terminated => 0,
            Exit::HungUp => 1,
        }
    }
}

/// Why the loop could not be set up or started (fatal: the process exits with it).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
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
pub struct Shell {
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
    /// Datagrams waiting for the kernel link to become writable, oldest first, with the
    /// peer datagrams the core sent after them (see [`Held`]).
    kernel_out: VecDeque<Held>,
    /// Answers of a burst of kernel requests, gathered into one datagram (`coalesce.rs`).
    coalesced: Coalesced,
    /// Messages sent to the kernel whose `NLMSG_DONE` (or `NLMSG_ERROR`) has not been read:
    /// the kernel answers each message it takes with exactly one of them.
    acks_due: u64,
    /// The loop's wait: the kernel link and mio's epoll, level-triggered (`shell/waiter.rs`).
    waiter: Waiter,
    /// The control socket, when one is open (`shell/control.rs`).
    control: Option<control::Control>,
    /// Restart survival: service manager, FD store, state file (`restart.rs`).
    restart: Restart,
}

/// Whether a kernel datagram starts with an acknowledgement (`NLMSG_DONE` or
/// `NLMSG_ERROR`), the kernel's answer to something we sent.
fn is_ack(datagram: &[u8]) -> bool {
    NlHeader::parse(datagram).is_some_and(|h| h.ty == NLMSG_DONE || h.ty == NLMSG_ERROR)
}

/// The kernel link's readiness after a wait.
struct KernelReady {
    readable: bool,
    writable: bool,
}

impl Shell {
    /// Registers every socket and the signal pipe.
    pub fn new(
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
            kernel_out: VecDeque::new(),
            coalesced: Coalesced::default(),
            acks_due: 0,
            waiter,
            control: None,
            restart,
        })
    }

    /// The loop's registry (to register the control socket).
    pub fn registry(&self) -> &mio::Registry {
        self.poll.registry()
    }

    /// Starts the kernel handshake. A failure to send the first messages is fatal, as in
    /// rdma-core (which exits when its HELLO cannot be sent).
    pub fn start(&mut self) -> Result<(), SetupError> {
        let now = Instant::now();
        self.restore(now);
        self.core.start(now);
        let errors_before = self.counters.kernel_tx_errors;
        self.flush(now);
        if self.counters.kernel_tx_errors != errors_before {
            return Err(SetupError::HelloNotSent);
        }
        Ok(())
    }

    /// Runs until a terminating signal.
    ///
    /// Sources are served round-robin, at most [`DRAIN_BUDGET`] datagrams each per round, so
    /// a flood on one socket (UDP 3935 is open to anyone) cannot starve the kernel link or
    /// the signal pipe; a source that still has data is revisited after a zero-timeout poll.
    pub fn run(&mut self) -> io::Result<Exit> {
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
                self.flush_kernel_queue();
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
                let mut ports = ShellPorts {
                    held: &mut self.reservations,
                    counters: &mut self.counters,
                    warn: &mut self.warn_resource,
                    now,
                };
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

    /// SIGUSR1: starts a dump, or, while one is being written, notes that another one is
    /// wanted (any number of signals meanwhile make one more dump).
    fn request_dump(&mut self) {
        if self.dump_writer.busy() {
            if self.dump_pending {
                self.counters.dumps_coalesced += 1;
            }
            self.dump_pending = true;
            tracing::info!("a dump is being written; one more follows when it is done");
            return;
        }
        self.start_dump();
    }

    /// The writer finished a dump: start the one asked for meanwhile, if any.
    fn dump_written(&mut self) {
        if self.dump_pending && !self.dump_writer.busy() {
            self.dump_pending = false;
            self.start_dump();
        }
    }

    /// Takes the dump's text now (one consistent moment of the table) and hands the logging
    /// (one WARNING per table line, like rdma-core's syslog calls) to the writer thread.
    fn start_dump(&mut self) {
        self.counters.dumps += 1;
        let started = Instant::now();
        let text = DumpText {
            table: self.core.dump_lines(),
            io: self.io_counters_line(),
            core: dump_writer::pairs_line("core counters", self.core.stats().iter()),
        };
        tracing::debug!(
            lines = text.table.len(),
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "dump text taken; writing it in the background"
        );
        self.dump_writer.submit(text);
    }

    fn io_counters_line(&self) -> String {
        let held = u64::try_from(self.reservations.len()).unwrap_or(u64::MAX);
        let extra = self.restart.counters();
        let pairs = self
            .counters
            .iter()
            .chain([("ports_held", held)])
            .chain(extra);
        dump_writer::pairs_line("io counters", pairs)
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

    /// Reads up to [`DRAIN_BUDGET`] kernel datagrams. The link is waited on
    /// level-triggered, so whatever is left is found by the next wait. Answers after the
    /// first are gathered into one datagram (see `coalesce.rs`), sent before this returns.
    fn drain_kernel(&mut self) {
        let mut handled = None;
        self.drain_kernel_batch(&mut handled);
        self.coalesced.set_gathering(false);
        self.flush_coalesced();
        if let Some(now) = handled {
            self.after_batch(now);
        }
    }

    /// The datagrams of [`Shell::drain_kernel`]; `handled` is set to the time of the last
    /// one handled.
    ///
    /// Reading stops early after a kernel request that we did not answer (REMOVE_MAPPING):
    /// it came alone, and one more read would only find the link empty. After an answer
    /// the kernel's NLMSG_DONE for it, and often its next request, are already queued
    /// (the kernel handles our send inside `sendmsg`), so reading goes on. When the link
    /// is empty with answers gathered, they are sent and reading goes on for the same
    /// reason. Reading stops too once the DONE of the last message we sent is read: a
    /// lone request's exchange is over, and the level-triggered wait finds whatever else
    /// comes, without a read that would find the link empty. (Should the count be wrong,
    /// e.g. after an overrun, that only costs a read or a wait more, never a message.)
    fn drain_kernel_batch(&mut self, handled: &mut Option<Instant>) {
        for _ in 0..DRAIN_BUDGET {
            let now = Instant::now();
            let sent_before = self.kernel_sends_attempted();
            // A request (not the kernel's acknowledgement); unanswered if nothing was sent.
            let mut unanswered_request = false;
            // The acknowledgement of the last message we sent.
            let mut last_ack = false;
            match self.kernel.recv() {
                Ok(Received::Empty) if self.coalesced.is_empty() => return,
                Ok(Received::Empty) => {
                    self.flush_coalesced();
                    continue;
                }
                Ok(Received::Kernel { data, full_len }) => {
                    let ack = is_ack(data);
                    unanswered_request = !ack;
                    if ack {
                        self.acks_due = self.acks_due.saturating_sub(1);
                        last_ack = self.acks_due == 0;
                    }
                    self.counters.kernel_rx += 1;
                    if full_len > data.len() {
                        self.counters.kernel_truncated += 1;
                        if let Some(suppressed) = self.warn_kernel.allow(now) {
                            tracing::warn!(
                                len = full_len,
                                kept = data.len(),
                                suppressed,
                                "kernel datagram truncated; messages past the cut are lost"
                            );
                        }
                    }
                    let mut ports = ShellPorts {
                        held: &mut self.reservations,
                        counters: &mut self.counters,
                        warn: &mut self.warn_resource,
                        now,
                    };
                    self.core.handle_kernel_datagram(now, data, &mut ports);
                }
                Ok(Received::Foreign { port_id, len }) => {
                    self.counters.kernel_foreign += 1;
                    if let Some(suppressed) = self.warn_kernel.allow(now) {
                        tracing::warn!(
                            sender = port_id,
                            len,
                            suppressed,
                            "dropped a netlink datagram not sent by the kernel"
                        );
                    }
                    continue;
                }
                Ok(Received::Overrun) => self.kernel_overrun(now),
                Err(e) => {
                    if let Some(suppressed) = self.warn_kernel.allow(now) {
                        tracing::warn!(error = %e, suppressed, "kernel link receive failed");
                    }
                    return;
                }
            }
            self.send_actions(now);
            *handled = Some(now);
            let sent_nothing = self.kernel_sends_attempted() == sent_before;
            if last_ack && sent_nothing && self.coalesced.is_empty() {
                return;
            }
            if unanswered_request {
                if sent_nothing {
                    return;
                }
                // Answers to any further request of this wake-up are gathered: requests
                // are arriving in a burst.
                self.coalesced.set_gathering(true);
            }
        }
    }

    /// Reads up to [`DRAIN_BUDGET`] datagrams from one peer socket; true if it may hold
    /// more.
    fn drain_peer(&mut self, which: PeerSocket) -> bool {
        let mut handled = None;
        let more = self.drain_peer_batch(which, &mut handled);
        if let Some(now) = handled {
            self.after_batch(now);
        }
        more
    }

    /// The datagrams of [`Shell::drain_peer`]; `handled` as for the kernel.
    fn drain_peer_batch(&mut self, which: PeerSocket, handled: &mut Option<Instant>) -> bool {
        for _ in 0..DRAIN_BUDGET {
            let now = Instant::now();
            let Some(sock) = self.peers.get(which) else {
                return false;
            };
            let (len, from) = match sock.recv_from(&mut self.peer_buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // An ICMP error for an earlier send; the next read continues normally.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if let Some(suppressed) = self.warn_peer.allow(now) {
                        tracing::warn!(socket = ?which, error = %e, suppressed, "UDP receive failed");
                    }
                    return false;
                }
            };
            self.counters.peer_rx += 1;
            self.core
                .handle_peer_datagram(now, which, from, &self.peer_buf[..len]);
            self.send_actions(now);
            *handled = Some(now);
        }
        true
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
                    self.send_kernel(&bytes);
                    self.core.recycle(bytes);
                }
                Action::ToPeer { via, to, datagram } => {
                    // What the kernel must know before the peer acts on this goes first.
                    self.flush_coalesced();
                    self.send_peer(now, via, to, &datagram);
                }
                Action::Ready => self.on_ready(),
            }
        }
    }

    /// Restores the previous daemon's ports and mappings (FD store, state file) before
    /// the kernel is greeted, so the replay finds them held.
    fn restore(&mut self, now: Instant) {
        let saved = self.restart.take_over(&mut self.reservations);
        if self.reservations.unclaimed() > 0 {
            self.core.watch_recovery_end();
        }
        if saved.is_empty() {
            return;
        }
        let mut ports = ShellPorts {
            held: &mut self.reservations,
            counters: &mut self.counters,
            warn: &mut self.warn_resource,
            now,
        };
        let report = self.core.handle_restore(now, &saved, &mut ports);
        tracing::info!(
            restored = report.restored,
            failed = report.failed,
            skipped = report.skipped,
            took_ms = now.elapsed().as_secs_f64() * 1e3,
            "mappings restored from the state file"
        );
    }

    /// After a batch of input: let the restart machinery see the changes (inherited ports
    /// left unclaimed, FD store, state file, status); once per batch, not per datagram.
    fn after_batch(&mut self, now: Instant) {
        self.restart
            .release_unclaimed(now, &self.core, &mut self.reservations);
        self.restart
            .after_input(now, &self.core, &mut self.reservations);
    }

    /// `ENOBUFS` on the kernel link: the kernel dropped messages for us. What matters is the
    /// REG_PID multicast: losing it makes the kernel mark the daemon unavailable (every
    /// connection then runs unmapped), so the core announces us to the kernel again.
    fn kernel_overrun(&mut self, now: Instant) {
        self.counters.kernel_overruns += 1;
        if let Some(suppressed) = self.warn_kernel.allow(now) {
            let rcvbuf = self
                .kernel
                .receive_buffer()
                .and_then(|r| r.granted)
                .map_or_else(|| "the default".to_owned(), |b| format!("{b} bytes"));
            tracing::warn!(
                suppressed,
                overruns = self.counters.kernel_overruns,
                "netlink receive queue overrun (ENOBUFS) with a receive buffer of {rcvbuf}; \
                 raise nl_sock_rbuf_size if this repeats"
            );
        }
        self.core.handle_kernel_overrun(now);
        self.flush(now);
    }

    /// Sends one message to the kernel, in order: gathered while a burst is read, else
    /// at once (see [`Shell::send_kernel_datagram`]).
    fn send_kernel(&mut self, bytes: &[u8]) {
        if !self.coalesced.is_gathering() {
            self.send_kernel_datagram(bytes, 1);
            return;
        }
        if !self.coalesced.fits(bytes.len()) {
            self.flush_coalesced();
        }
        self.coalesced.push(bytes);
    }

    /// Sends the gathered answers, if any, as one datagram.
    fn flush_coalesced(&mut self) {
        if let Some((datagram, messages)) = self.coalesced.take() {
            self.send_kernel_datagram(&datagram, messages);
            self.coalesced.recycle(datagram);
        }
    }

    /// Sends to the kernel attempted so far, gathered answers included.
    fn kernel_sends_attempted(&self) -> u64 {
        self.counters.kernel_sends_attempted() + self.coalesced.messages()
    }

    /// Sends one datagram of `messages` netlink messages to the kernel, in order: behind
    /// any queued ones, and queued itself when the link is full (`EAGAIN`), never silently
    /// dropped while there is room. The counters count messages.
    fn send_kernel_datagram(&mut self, bytes: &[u8], messages: u64) {
        if self.kernel_out.is_empty() {
            match self.kernel.send(bytes) {
                Ok(()) => {
                    self.counters.kernel_tx += messages;
                    self.acks_due += messages;
                    return;
                }
                Err(e) if e.is_would_block() => {}
                Err(e) => {
                    self.kernel_send_failed(bytes.len(), messages, &e);
                    return;
                }
            }
        }
        if self.kernel_out.len() >= KERNEL_QUEUE_MAX {
            let e = SendFailure::QueueFull(KERNEL_QUEUE_MAX);
            self.kernel_send_failed(bytes.len(), messages, &e);
            return;
        }
        self.counters.kernel_tx_queued += messages;
        self.kernel_out.push_back(Held::Kernel {
            datagram: bytes.to_vec(),
            messages,
        });
        self.want_kernel_writable(true);
    }

    /// Sends held datagrams, in order, until the kernel link is full again or nothing is
    /// held.
    fn flush_kernel_queue(&mut self) {
        while let Some(held) = self.kernel_out.pop_front() {
            match held {
                Held::Kernel { datagram, messages } => match self.kernel.send(&datagram) {
                    Ok(()) => {
                        self.counters.kernel_tx += messages;
                        self.acks_due += messages;
                    }
                    Err(e) if e.is_would_block() => {
                        self.kernel_out
                            .push_front(Held::Kernel { datagram, messages });
                        return;
                    }
                    Err(e) => self.kernel_send_failed(datagram.len(), messages, &e),
                },
                Held::Peer { via, to, datagram } => {
                    self.send_peer_now(Instant::now(), via, to, &datagram);
                }
            }
        }
        self.want_kernel_writable(false);
    }

    /// Whether the next wait also watches the kernel link for room to send.
    fn want_kernel_writable(&mut self, want: bool) {
        if let Err(e) = self.waiter.watch_kernel_writable(&self.kernel, want) {
            // Not expected (the link stays registered); without it, held datagrams would
            // wait for the next wake-up, so say so.
            if let Some(suppressed) = self.warn_kernel.allow(Instant::now()) {
                tracing::warn!(error = %e, suppressed, "cannot watch the kernel link for room to send");
            }
        }
    }

    fn kernel_send_failed(&mut self, len: usize, messages: u64, e: &SendFailure) {
        self.counters.kernel_tx_errors += messages;
        if let Some(suppressed) = self.warn_kernel.allow(Instant::now()) {
            tracing::warn!(
                link = self.kernel.kind_name(),
                len,
                messages,
                error = %e,
                suppressed,
                "cannot send to the kernel"
            );
        }
    }

    /// Sends a peer datagram, or holds it behind kernel datagrams still waiting (see
    /// [`Held`]).
    fn send_peer(&mut self, now: Instant, via: PeerSocket, to: SocketAddr, datagram: &[u8]) {
        if self.kernel_out.is_empty() {
            self.send_peer_now(now, via, to, datagram);
        } else if self.kernel_out.len() >= KERNEL_QUEUE_MAX {
            // Dropping is safe: the core retransmits REQUEST/ACCEPT on its timer.
            self.counters.peer_tx_dropped += 1;
        } else {
            self.kernel_out.push_back(Held::Peer {
                via,
                to,
                datagram: datagram.to_vec(),
            });
        }
    }

    fn send_peer_now(&mut self, now: Instant, via: PeerSocket, to: SocketAddr, datagram: &[u8]) {
        let result = match self.peers.get(via) {
            Some(sock) => match sock.send_to(datagram, to) {
                Ok(n) if n == datagram.len() => Ok(()),
                Ok(sent) => Err(SendFailure::Short {
                    sent,
                    len: datagram.len(),
                }),
                Err(e) => Err(SendFailure::Os(e)),
            },
            None => Err(SendFailure::NoSocket),
        };
        match result {
            Ok(()) => self.counters.peer_tx += 1,
            Err(e) => {
                // Dropping is safe: the core retransmits REQUEST/ACCEPT on its timer.
                self.counters.peer_tx_dropped += 1;
                if let Some(suppressed) = self.warn_peer.allow(now) {
                    tracing::warn!(socket = ?via, %to, error = %e, suppressed, "UDP send failed");
                }
            }
        }
    }

    fn on_ready(&mut self) {
        if self.ready_seen {
            return;
        }
        self.ready_seen = true;
        tracing::info!(abi = self.core.abi(), "kernel handshake done; ready");
        if self.mode == RunMode::Systemd {
            self.restart.on_ready(Instant::now(), &self.core);
        }
    }
}

/// The daemon's reservations as the core sees them during one kernel datagram; a refusal
/// for lack of a resource is explained in the log with the shell's own counters.
struct ShellPorts<'a> {
    held: &'a mut Reservations,
    counters: &'a mut IoCounters,
    warn: &'a mut RateLimit,
    now: Instant,
}

impl PortReservations for ShellPorts<'_> {
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
        self.held.reserve(bind).map_err(|f| {
            self.reserve_failed(bind, &f);
            f.error
        })
    }

    fn release(&mut self, id: ReservationId) {
        if !self.held.release(id) {
            tracing::debug!(id = id.0, "release of an unknown reservation");
        }
    }
}

impl ShellPorts<'_> {
    /// Logs, rate-limited and in plain words, a reservation refused for lack of a resource
    /// (descriptors, ephemeral ports); other failures are the core's to report.
    fn reserve_failed(&mut self, bind: SocketAddr, f: &ReserveFailure) {
        let now = self.now;
        let held = iwpm_control::render::count(self.held.len() as u64, "port", "ports");
        if f.process_out_of_fds() || f.system_out_of_fds() {
            self.counters.reserve_no_fd += 1;
            if let Some(suppressed) = self.warn.allow(now) {
                let (soft, hard) = process::fd_limit_now();
                // Listing /proc/self/fd itself needs a descriptor; at EMFILE it fails.
                let open = std::fs::read_dir("/proc/self/fd")
                    .map(|d| format!("{} open, ", d.count()))
                    .unwrap_or_default();
                if f.process_out_of_fds() {
                    tracing::warn!(
                        suppressed,
                        "out of file descriptors: the daemon has reached its RLIMIT_NOFILE \
                         limit of {} (hard {}; {open}{held} held for mappings), \
                         so a new mapping cannot hold its port; the kernel gets \
                         CREATE_MAPPING_ERR for it. Mappings work again as others are \
                         removed; raise LimitNOFILE or `ulimit -n` for more.",
                        Limit(soft),
                        Limit(hard)
                    );
                } else {
                    tracing::warn!(
                        suppressed,
                        "out of file descriptors: the system-wide file table is full \
                         (ENFILE, limit fs.file-max; the daemon has {open}{held} \
                         held), so a new mapping cannot hold its port; the kernel gets \
                         CREATE_MAPPING_ERR for it"
                    );
                }
            }
        } else if f.out_of_ephemeral_ports(bind) {
            self.counters.reserve_no_port += 1;
            if let Some(suppressed) = self.warn.allow(now) {
                let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                    .map(|r| r.split_whitespace().collect::<Vec<_>>().join("-"))
                    .unwrap_or_else(|_| "?".into());
                tracing::warn!(
                    suppressed,
                    "out of ports: no free port left for {} in net.ipv4.ip_local_port_range \
                     ({range}; {held} held for mappings); the kernel gets \
                     CREATE_MAPPING_ERR for the new mapping",
                    bind.ip()
                );
            }
        } else {
            tracing::debug!(%bind, error = %f, "port reservation failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::os::unix::net::UnixDatagram;

    use iwpm_core::CoreConfig;
    use iwpm_proto::consts::{NLM_F_REQUEST, RDMA_NL_IWCM};
    use iwpm_proto::netlink::{
        decode_daemon_datagram, encode_kernel_msg, DaemonFrame, DaemonMsg, Envelope, Hello,
        KernelMsg, ManageMappingRequest, NlString, RegPidRequest,
    };
    use iwpm_proto::sockaddr::SockAddrStorage;

    use crate::peer_sockets::PeerBind;

    fn next_msg(emu: &UnixDatagram) -> DaemonMsg {
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let n = emu.recv(&mut buf).expect("nothing from the shell");
        match decode_daemon_datagram(&buf[..n]).into_iter().next() {
            Some(Ok(DaemonFrame::Msg(_, m))) => m,
            other => panic!("{other:?}"),
        }
    }

    /// The Unix kernel link cannot produce `ENOBUFS` (a full Unix datagram queue makes the
    /// sender wait), so the overrun path is driven directly: it is counted, and the core
    /// announces the daemon to the kernel again with HELLO.
    /// A shell on a Unix kernel link whose other end, `emu`, the test plays; started (its
    /// HELLO is waiting in `emu`).
    fn shell_on_unix_link(tag: &str) -> (Shell, UnixDatagram, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("iwpmd-shell-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let emu = UnixDatagram::bind(&path).unwrap();
        emu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let kernel = KernelLink::open_unix(&path).unwrap();
        let peers = PeerSockets::open(PeerBind {
            port: 0,
            v4: Ipv4Addr::LOCALHOST,
            v6: None,
        })
        .unwrap();
        let now = Instant::now();
        let config = CoreConfig {
            netlink_pid: kernel.port_id(),
            ..CoreConfig::default()
        };
        let restart = Restart::new(Default::default(), Default::default(), now);
        let mut shell = Shell::new(
            Core::new(config, now),
            kernel,
            peers,
            RunMode::Foreground,
            restart,
        )
        .unwrap();
        shell.start().unwrap();
        (shell, emu, path)
    }

    fn kernel_datagram(msg: &KernelMsg) -> Vec<u8> {
        let mut out = Vec::new();
        encode_kernel_msg(
            &Envelope {
                client: RDMA_NL_IWCM,
                flags: NLM_F_REQUEST,
                seq: 1,
                pid: 0,
            },
            msg,
            &mut out,
        );
        out
    }

    /// A REMOVE_MAPPING is never answered, so reading stops after it instead of trying
    /// the (usually empty) link once more; the level-triggered wait finds what is left.
    #[test]
    fn reading_stops_after_an_unanswered_request_and_the_wait_finds_the_rest() {
        let (mut shell, emu, path) = shell_on_unix_link("lt");
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let (_, daemon) = emu.recv_from(&mut buf).unwrap();
        let remove = kernel_datagram(&KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 1,
            addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 7000))),
            flags: None,
            unknown: vec![],
        }));
        emu.send_to_addr(&remove, &daemon).unwrap();
        emu.send_to_addr(&remove, &daemon).unwrap();
        let mut events = Events::with_capacity(8);
        let ready = shell
            .wait(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(ready.readable);
        shell.drain_kernel();
        assert_eq!(
            shell.counters.kernel_rx, 1,
            "read past an unanswered REMOVE"
        );
        let ready = shell.wait(&mut events, Some(Duration::ZERO)).unwrap();
        assert!(ready.readable, "the second REMOVE is still waiting");
        shell.drain_kernel();
        assert_eq!(shell.counters.kernel_rx, 2);
        let ready = shell.wait(&mut events, Some(Duration::ZERO)).unwrap();
        assert!(!ready.readable);
        let _ = std::fs::remove_file(&path);
    }

    /// The netlink messages in the next datagram the shell sent, as their replies' kinds.
    fn next_datagram(emu: &UnixDatagram) -> Vec<DaemonMsg> {
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let n = emu.recv(&mut buf).expect("nothing from the shell");
        decode_daemon_datagram(&buf[..n])
            .into_iter()
            .map(|frame| match frame {
                Ok(DaemonFrame::Msg(_, m)) => m,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// An ADD_MAPPING with header seq `port`, so that each one is a new request.
    fn add_mapping(port: u16) -> Vec<u8> {
        let mut out = kernel_datagram(&KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
            flags: Some(iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP),
            unknown: vec![],
        }));
        out[8..12].copy_from_slice(&u32::from(port).to_ne_bytes());
        out
    }

    /// Registers the iWARP CM client (REG_PID), which ADD_MAPPING needs, and reads the
    /// answer.
    fn register(shell: &mut Shell, emu: &UnixDatagram, daemon: &std::os::unix::net::SocketAddr) {
        let reg = kernel_datagram(&KernelMsg::RegPid(RegPidRequest {
            echo_seq: 0,
            if_name: NlString::padded("eth0", 16),
            ibdev_name: NlString::padded("siw0", 32),
            ulib_name: NlString::padded(iwpm_proto::consts::IWPM_ULIB_NAME, 32),
            unknown: vec![],
        }));
        emu.send_to_addr(&reg, daemon).unwrap();
        let mut events = Events::with_capacity(8);
        shell
            .wait(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        shell.drain_kernel();
        assert!(matches!(next_msg(emu), DaemonMsg::RegPid(_)));
    }

    /// A lone request is answered in a datagram of its own at once; the answers to the
    /// requests read after it in the same wake-up leave together in one datagram.
    #[test]
    fn answers_to_a_burst_of_requests_leave_in_one_datagram() {
        let (mut shell, emu, path) = shell_on_unix_link("burst");
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let (_, daemon) = emu.recv_from(&mut buf).unwrap();
        register(&mut shell, &emu, &daemon);
        let mut events = Events::with_capacity(8);
        let tx_before = shell.counters.kernel_tx;

        emu.send_to_addr(&add_mapping(7000), &daemon).unwrap();
        shell
            .wait(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        shell.drain_kernel();
        let lone = next_datagram(&emu);
        assert!(matches!(lone[..], [DaemonMsg::AddMapping(_)]), "{lone:?}");

        for port in 7001..7005 {
            emu.send_to_addr(&add_mapping(port), &daemon).unwrap();
        }
        shell
            .wait(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        shell.drain_kernel();
        assert_eq!(shell.counters.kernel_rx, 6);
        assert_eq!(
            shell.counters.kernel_tx,
            tx_before + 5,
            "counted per message"
        );
        let first = next_datagram(&emu);
        assert!(matches!(first[..], [DaemonMsg::AddMapping(_)]), "{first:?}");
        let rest = next_datagram(&emu);
        let ports: Vec<u16> = rest
            .iter()
            .map(|m| match m {
                DaemonMsg::AddMapping(r) => r.addr.port(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ports, [7002, 7003, 7004], "in order, in one datagram");
        emu.set_nonblocking(true).unwrap();
        assert!(emu.recv(&mut buf).is_err(), "nothing else was sent");
        let _ = std::fs::remove_file(&path);
    }

    /// Waits up to `timeout` for the kernel link; whether it is readable.
    fn link_readable(shell: &mut Shell, timeout: Duration) -> bool {
        let mut events = Events::with_capacity(8);
        shell.wait(&mut events, Some(timeout)).unwrap().readable
    }

    /// The kernel's NLMSG_DONE for a message we sent with header seq `seq`.
    fn done(seq: u32) -> Vec<u8> {
        let mut d = Vec::with_capacity(20);
        d.extend_from_slice(&20u32.to_ne_bytes());
        d.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        d.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        d.extend_from_slice(&seq.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&0i32.to_ne_bytes());
        d
    }

    /// Once the DONE of the last message sent is read, reading stops: the next read would
    /// usually find the link empty, and the level-triggered wait finds what is left.
    #[test]
    fn reading_stops_once_every_message_sent_is_acknowledged() {
        let (mut shell, emu, path) = shell_on_unix_link("acks");
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let (_, daemon) = emu.recv_from(&mut buf).unwrap();
        assert_eq!(shell.acks_due, 1, "HELLO sent");
        let remove = kernel_datagram(&KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 1,
            addr: SockAddrStorage::from(SocketAddr::from((Ipv4Addr::LOCALHOST, 7000))),
            flags: None,
            unknown: vec![],
        }));
        emu.send_to_addr(&done(0), &daemon).unwrap();
        emu.send_to_addr(&remove, &daemon).unwrap();
        assert!(link_readable(&mut shell, Duration::from_secs(5)));
        shell.drain_kernel();
        assert_eq!(shell.counters.kernel_rx, 1, "read past the last DONE due");
        assert_eq!(shell.acks_due, 0);
        assert!(link_readable(&mut shell, Duration::ZERO));
        shell.drain_kernel();
        assert_eq!(shell.counters.kernel_rx, 2, "REMOVE read next turn");
        // An acknowledgement nobody waits for (a replay's closing DONE) stops reading too,
        // and the count stays at zero.
        emu.send_to_addr(&done(0), &daemon).unwrap();
        emu.send_to_addr(&remove, &daemon).unwrap();
        assert!(link_readable(&mut shell, Duration::from_secs(5)));
        shell.drain_kernel();
        assert_eq!((shell.counters.kernel_rx, shell.acks_due), (3, 0));
        let _ = std::fs::remove_file(&path);
    }

    /// How often the loop's wait (100 ms timeout) returns in 300 ms, reading what it finds.
    fn wakes_in_300_ms(shell: &mut Shell) -> u32 {
        let mut events = Events::with_capacity(8);
        let started = Instant::now();
        let mut wakes = 0;
        while started.elapsed() < Duration::from_millis(300) && wakes < 1000 {
            let ready = shell
                .wait(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if ready.readable {
                shell.drain_kernel();
            }
            wakes += 1;
        }
        wakes
    }

    /// With the other end of the link gone, waiting still sleeps (no busy loop).
    #[test]
    fn a_wait_on_a_link_whose_other_end_is_gone_still_sleeps() {
        let (mut shell, emu, path) = shell_on_unix_link("gone");
        drop(emu);
        let _ = std::fs::remove_file(&path);
        let wakes = wakes_in_300_ms(&mut shell);
        assert!(wakes <= 10, "{wakes} wake-ups in 300 ms");
    }

    /// A link that hangs up (only a Unix socket can; here it is shut down on our side) is
    /// reported once and no longer waited on, instead of waking every wait at once.
    #[test]
    fn a_hung_up_link_is_no_longer_watched() {
        let (mut shell, _emu, path) = shell_on_unix_link("hup");
        rustix::net::shutdown(&shell.kernel, rustix::net::Shutdown::Both).unwrap();
        let wakes = wakes_in_300_ms(&mut shell);
        assert!(
            !shell.waiter.watches_kernel(),
            "the hung-up link is still watched"
        );
        assert!(wakes <= 10, "{wakes} wake-ups in 300 ms");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn kernel_overrun_is_counted_and_announces_the_daemon_again() {
        let (mut shell, emu, path) = shell_on_unix_link("ovr");
        let mut buf = vec![0u8; crate::kernel_link::RECV_BUFFER];
        let (n, daemon) = emu.recv_from(&mut buf).unwrap();
        assert!(matches!(
            decode_daemon_datagram(&buf[..n]).into_iter().next(),
            Some(Ok(DaemonFrame::Msg(_, DaemonMsg::Hello(_))))
        ));
        let hello = kernel_datagram(&KernelMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        }));
        emu.send_to_addr(&hello, &daemon).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !shell.ready_seen && Instant::now() < deadline {
            shell.drain_kernel();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(shell.ready_seen, "handshake did not finish");
        assert!(matches!(next_msg(&emu), DaemonMsg::MapInfo(_)));

        shell.kernel_overrun(Instant::now());
        assert_eq!(shell.counters.kernel_overruns, 1);
        assert!(
            matches!(
                next_msg(&emu),
                DaemonMsg::Hello(Hello { abi_version: 4, .. })
            ),
            "no HELLO after the overrun"
        );
        assert!(shell.io_counters_line().contains("kernel_overruns=1"));
        let _ = std::fs::remove_file(&path);
    }
}
