//! The event loop: one thread, one `mio::Poll`, the core's deadline as the poll timeout.
//! Every readable socket is drained until it would block, every datagram goes to the core,
//! and after each input the core's actions are executed at once (a `Reserve` is answered
//! with `handle_reserved` before anything else is fed in).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use iwpm_core::{Action, Core, PeerSocket};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::signal::{SIGHUP, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;

use crate::kernel_link::{KernelLink, Received};
use crate::peer_sockets::{PeerSockets, ALL as ALL_PEER, PEER_RECV_BUFFER};
use crate::process;
use crate::rate_limit::RateLimit;
use crate::reservations::Reservations;

const KERNEL: Token = Token(0);
const SIGNALS: Token = Token(1);
const PEER_BASE: usize = 2;

/// Datagrams read from one source before the others get a turn.
const DRAIN_BUDGET: usize = 64;

/// Burst of rate-limited warnings per window.
const WARN_BURST: u32 = 5;
/// Most datagrams held for the kernel link while its socket is full (a Unix-datagram
/// receiver queues only `net.unix.max_dgram_qlen` datagrams); past this, new ones are
/// dropped and counted, so a stalled kernel side cannot grow our memory without bound.
const KERNEL_QUEUE_MAX: usize = 65_536;
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

/// IO-level counters (the core counts protocol events itself).
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Datagrams received from the kernel.
    pub kernel_rx: u64,
    /// Datagrams sent to the kernel.
    pub kernel_tx: u64,
    /// Sends to the kernel that failed.
    pub kernel_tx_errors: u64,
    /// Sends that found the kernel link full and were queued until it drained.
    pub kernel_tx_queued: u64,
    /// Kernel datagrams longer than the receive buffer.
    pub kernel_truncated: u64,
    /// Netlink datagrams from a port other than the kernel's (dropped).
    pub kernel_foreign: u64,
    /// Receive-queue overruns reported by the kernel (`ENOBUFS`).
    pub kernel_overruns: u64,
    /// Peer datagrams received.
    pub peer_rx: u64,
    /// Peer datagrams sent.
    pub peer_tx: u64,
    /// Peer datagrams not sent (socket full, family unavailable, send error).
    pub peer_tx_dropped: u64,
}

/// Everything the loop owns.
pub struct Shell {
    poll: Poll,
    signals: Signals,
    core: Core,
    kernel: KernelLink,
    peers: PeerSockets,
    reservations: Reservations,
    notify_systemd: bool,
    ready_seen: bool,
    counters: IoCounters,
    warn_kernel: RateLimit,
    warn_peer: RateLimit,
    peer_buf: Vec<u8>,
    /// Datagrams for the kernel waiting for the link to become writable, oldest first.
    kernel_out: VecDeque<Vec<u8>>,
    /// Whether the kernel link is registered for WRITABLE too.
    kernel_wants_write: bool,
}

impl Shell {
    /// Registers every socket and the signal pipe.
    pub fn new(
        core: Core,
        kernel: KernelLink,
        mut peers: PeerSockets,
        notify_systemd: bool,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let registry = poll.registry();
        let raw = kernel.as_raw_fd();
        registry.register(&mut SourceFd(&raw), KERNEL, Interest::READABLE)?;
        for (i, which) in ALL_PEER.into_iter().enumerate() {
            if let Some(sock) = peers.get_mut(which) {
                registry.register(sock, Token(PEER_BASE + i), Interest::READABLE)?;
            }
        }
        let mut signals = Signals::new([SIGTERM, SIGHUP, SIGUSR1])?;
        registry.register(&mut signals, SIGNALS, Interest::READABLE)?;
        Ok(Shell {
            poll,
            signals,
            core,
            kernel,
            peers,
            reservations: Reservations::new(),
            notify_systemd,
            ready_seen: false,
            counters: IoCounters::default(),
            warn_kernel: RateLimit::new(WARN_WINDOW, WARN_BURST),
            warn_peer: RateLimit::new(WARN_WINDOW, WARN_BURST),
            peer_buf: vec![0; PEER_RECV_BUFFER],
            kernel_out: VecDeque::new(),
            kernel_wants_write: false,
        })
    }

    /// Starts the kernel handshake. A failure to send the first messages is fatal, as in
    /// rdma-core (which exits when its HELLO cannot be sent).
    pub fn start(&mut self) -> io::Result<()> {
        let now = Instant::now();
        self.core.start(now);
        let errors_before = self.counters.kernel_tx_errors;
        self.flush(now);
        if self.counters.kernel_tx_errors != errors_before {
            return Err(io::Error::other("cannot send HELLO to the kernel"));
        }
        Ok(())
    }

    /// Runs until a terminating signal.
    ///
    /// Sources are served round-robin, at most [`DRAIN_BUDGET`] datagrams each per round, so
    /// a flood on one socket (UDP 3935 is open to anyone) cannot starve the kernel link or
    /// the signal pipe; a source that still has data is revisited after a zero-timeout poll.
    pub fn run(&mut self) -> io::Result<Exit> {
        let mut events = Events::with_capacity(64);
        // Index 0: kernel link; 1..=4: peer sockets in `ALL_PEER` order.
        let mut backlog = [false; 1 + ALL_PEER.len()];
        tracing::info!("entering the event loop");
        loop {
            let timeout = if backlog.contains(&true) {
                Some(Duration::ZERO)
            } else {
                self.core
                    .poll_timeout()
                    .map(|deadline| deadline.saturating_duration_since(Instant::now()))
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    SIGNALS => {
                        if let Some(exit) = self.drain_signals() {
                            return Ok(exit);
                        }
                    }
                    KERNEL => {
                        if event.is_writable() {
                            self.flush_kernel_queue();
                        }
                        if event.is_readable() {
                            backlog[0] = true;
                        }
                    }
                    Token(t) => {
                        if let Some(slot) = t
                            .checked_sub(PEER_BASE)
                            .filter(|i| *i < ALL_PEER.len())
                            .and_then(|i| backlog.get_mut(1 + i))
                        {
                            *slot = true;
                        }
                    }
                }
            }
            if backlog[0] {
                backlog[0] = self.drain_kernel();
            }
            for (i, which) in ALL_PEER.into_iter().enumerate() {
                if backlog[1 + i] {
                    backlog[1 + i] = self.drain_peer(which);
                }
            }
            let now = Instant::now();
            if self.core.poll_timeout().is_some_and(|d| d <= now) {
                self.core.handle_timeout(now);
                self.flush(now);
            }
        }
    }

    /// Logs the SIGUSR1 dump: one WARNING per line, like rdma-core's syslog calls.
    pub fn dump(&self) {
        for line in self.core.dump_lines() {
            tracing::warn!(target: "iwpmd::dump", "{line}");
        }
        let c = &self.counters;
        let mut io_line = String::new();
        let _ = write!(
            io_line,
            "io counters: kernel_rx={} kernel_tx={} kernel_tx_errors={} kernel_tx_queued={} \
             kernel_truncated={} \
             kernel_foreign={} kernel_overruns={} peer_rx={} peer_tx={} peer_tx_dropped={} \
             ports_held={}",
            c.kernel_rx,
            c.kernel_tx,
            c.kernel_tx_errors,
            c.kernel_tx_queued,
            c.kernel_truncated,
            c.kernel_foreign,
            c.kernel_overruns,
            c.peer_rx,
            c.peer_tx,
            c.peer_tx_dropped,
            self.reservations.len()
        );
        tracing::info!(target: "iwpmd::dump", "{io_line}");
        tracing::debug!(target: "iwpmd::dump", "core counters: {:?}", self.core.stats());
    }

    fn drain_signals(&mut self) -> Option<Exit> {
        let pending: Vec<i32> = self.signals.pending().collect();
        let mut exit = None;
        for sig in pending {
            match sig {
                SIGUSR1 => {
                    tracing::warn!("Received SIGUSR1 signal");
                    self.dump();
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

    /// Reads up to [`DRAIN_BUDGET`] kernel datagrams; true if the link may hold more.
    fn drain_kernel(&mut self) -> bool {
        for _ in 0..DRAIN_BUDGET {
            let now = Instant::now();
            match self.kernel.recv() {
                Ok(Received::Empty) => return false,
                Ok(Received::Kernel { data, full_len }) => {
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
                    self.core.handle_kernel_datagram(now, data);
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
                Ok(Received::Overrun) => {
                    self.counters.kernel_overruns += 1;
                    if let Some(suppressed) = self.warn_kernel.allow(now) {
                        tracing::warn!(
                            suppressed,
                            "netlink receive queue overrun: kernel messages were lost \
                             (raise nl_sock_rbuf_size)"
                        );
                    }
                    continue;
                }
                Err(e) => {
                    if let Some(suppressed) = self.warn_kernel.allow(now) {
                        tracing::warn!(error = %e, suppressed, "kernel link receive failed");
                    }
                    return false;
                }
            }
            self.flush(now);
        }
        true
    }

    /// Reads up to [`DRAIN_BUDGET`] datagrams from one peer socket; true if it may hold
    /// more.
    fn drain_peer(&mut self, which: PeerSocket) -> bool {
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
            self.flush(now);
        }
        true
    }

    /// Executes every queued action.
    fn flush(&mut self, now: Instant) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::ToKernel(bytes) => self.send_kernel(&bytes),
                Action::ToPeer { via, to, datagram } => self.send_peer(now, via, to, &datagram),
                Action::Reserve { id, bind } => {
                    let result = self.reservations.reserve(id, bind);
                    if let Err(e) = &result {
                        tracing::debug!(id = id.0, %bind, error = %e, "port reservation failed");
                    }
                    self.core.handle_reserved(now, id, result);
                }
                Action::Release { id } => {
                    if !self.reservations.release(id) {
                        tracing::debug!(id = id.0, "release of an unknown reservation");
                    }
                }
                Action::Ready => self.on_ready(),
            }
        }
    }

    /// Sends one datagram to the kernel, in order: behind any queued ones, and queued itself
    /// when the link is full (`EAGAIN`), never silently dropped while there is room.
    fn send_kernel(&mut self, bytes: &[u8]) {
        if self.kernel_out.is_empty() {
            match self.kernel.send(bytes) {
                Ok(()) => {
                    self.counters.kernel_tx += 1;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    self.kernel_send_failed(bytes.len(), &e);
                    return;
                }
            }
        }
        if self.kernel_out.len() >= KERNEL_QUEUE_MAX {
            let e = io::Error::other("kernel link queue full");
            self.kernel_send_failed(bytes.len(), &e);
            return;
        }
        self.counters.kernel_tx_queued += 1;
        self.kernel_out.push_back(bytes.to_vec());
        self.want_kernel_writable(true);
    }

    /// Sends queued kernel datagrams until the link is full again or the queue is empty.
    fn flush_kernel_queue(&mut self) {
        while let Some(bytes) = self.kernel_out.front() {
            match self.kernel.send(bytes) {
                Ok(()) => self.counters.kernel_tx += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    let len = bytes.len();
                    self.kernel_send_failed(len, &e);
                }
            }
            self.kernel_out.pop_front();
        }
        self.want_kernel_writable(false);
    }

    fn want_kernel_writable(&mut self, want: bool) {
        if want == self.kernel_wants_write {
            return;
        }
        let interest = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        let raw = self.kernel.as_raw_fd();
        match self
            .poll
            .registry()
            .reregister(&mut SourceFd(&raw), KERNEL, interest)
        {
            Ok(()) => self.kernel_wants_write = want,
            Err(e) => tracing::error!(error = %e, "cannot change kernel link poll interest"),
        }
    }

    fn kernel_send_failed(&mut self, len: usize, e: &io::Error) {
        self.counters.kernel_tx_errors += 1;
        if let Some(suppressed) = self.warn_kernel.allow(Instant::now()) {
            tracing::warn!(
                link = self.kernel.kind_name(),
                len,
                error = %e,
                suppressed,
                "cannot send to the kernel"
            );
        }
    }

    fn send_peer(&mut self, now: Instant, via: PeerSocket, to: SocketAddr, datagram: &[u8]) {
        let result = match self.peers.get(via) {
            Some(sock) => sock.send_to(datagram, to).and_then(|n| {
                if n == datagram.len() {
                    Ok(())
                } else {
                    Err(io::Error::new(io::ErrorKind::WriteZero, "short UDP send"))
                }
            }),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "address family not available",
            )),
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
        if self.notify_systemd {
            if let Err(e) = process::notify_ready() {
                tracing::warn!(error = %e, "sd_notify READY=1 failed");
            }
        }
    }
}
