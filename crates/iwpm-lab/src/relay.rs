//! A UDP relay in front of one daemon's peer port: the "network" between the daemons,
//! which the lab controls. It drops, duplicates, reorders and replays datagrams on
//! request, and it timestamps every peer message, which is how the lab splits connection
//! latency into the peer exchange and the rest.
//!
//! # Faults
//!
//! Each datagram is dropped with probability `loss`; a delivered one is sent a second time
//! with probability `duplicate`; each copy is held back with probability `reorder` for a
//! random 1 ms..`reorder_window` and sent then, so that datagrams sent after it overtake
//! it (the relay counts how many held copies really were overtaken).
//!
//! The draws are a function of the seed and of the datagram's place in its exchange: the
//! k-th REQUEST, ACCEPT, ACK or REJECT of the n-th exchange the relay saw start (a keyed
//! hash, not one generator drawn in arrival order). So a seed gives the n-th exchange the
//! same faults whatever the threads interleave; which connection is the n-th, and what the
//! daemons' timing makes of the faults (retransmissions, the REMOTE_INFO budget), still
//! vary from run to run. A datagram outside any exchange the relay knows draws from one
//! seeded sequence.
//!
//! Loss has one bound: an exchange is never lost *entirely* to chance. The active daemon
//! sends at most ten REQUESTs (one a second) before the kernel's 10 s timeout; at 30 %
//! loss all ten attempts fail for about one connection in 850, which would make any test
//! of "every connection is established" a lottery. So from an exchange's
//! `spare_after_requests`-th REQUEST on, its datagrams are not dropped for loss (counted
//! as `spared`; `block` still applies). What the lab then checks is that the daemons
//! recover from every loss pattern the protocol can survive.
//!
//! # Why a relay, and how it is wired
//!
//! A daemon sends its REQUEST to `remote-ip:peer-port`, where `remote-ip` is the address
//! the application connects to. So the relay owns that address (the host's *public*
//! address, `front`) and the daemon's peer sockets bind a second address of the same host
//! (`backend`, its *backstage* address) on the same port. For each client that sends to
//! the front, the relay opens one inner socket on the front IP and forwards the client's
//! datagrams from it to the backend; what the daemon answers to that inner socket goes
//! back to the client from the front address. Each datagram crosses exactly one relay
//! (the one in front of its passive daemon), so a loss rate applies once per datagram in
//! either direction. The daemons see ordinary peers: the passive one sees the relay's
//! inner socket as the sender (it only ever answers to the source), and the active one
//! matches ACCEPTs by handle, not by source.

use std::collections::{BinaryHeap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use iwpm_proto::peer::{PeerMessage, PeerMsgType};
use mio::{Events, Interest, Poll, Token, Waker};
use serde::Serialize;

use crate::netns::{NetPlace, NetnsError};

const FRONT: Token = Token(0);
const WAKE: Token = Token(1);
const FIRST_INNER: usize = 2;
/// Receive buffer: larger than any peer datagram (64 bytes), so an oversized one arrives
/// whole and is relayed as it came instead of truncated.
const DATAGRAM_BUFFER: usize = 2048;

/// What the relay does to datagrams. Can be changed while it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayConfig {
    /// Share of datagrams dropped, 0.0..=1.0, drawn per datagram and direction.
    pub loss: f64,
    /// Share of delivered datagrams delivered twice.
    pub duplicate: f64,
    /// Share of delivered copies held back (and so overtaken by later datagrams).
    pub reorder: f64,
    /// Longest hold of a reordered copy (each draws 1 ms up to this).
    pub reorder_window: Duration,
    /// From this REQUEST of an exchange on (counting retransmissions), its datagrams are
    /// not dropped for `loss` (see the module docs); `None` lets chance defeat exchanges.
    pub spare_after_requests: Option<u32>,
    /// Deliver one more copy of every delivered datagram this much later.
    pub replay_after: Option<Duration>,
    /// Drop every datagram of these types (REQUEST, ACCEPT, ACK, REJECT by wire code).
    pub block: [bool; 4],
    /// Seed of the drop/duplicate draws (runs are repeatable for a given schedule).
    pub seed: u64,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_window: Duration::from_millis(20),
            spare_after_requests: Some(8),
            replay_after: None,
            block: [false; 4],
            seed: 0x1d_5eed,
        }
    }
}

/// Counters by message type (index = wire code: REQUEST, ACCEPT, ACK, REJECT).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RelayStats {
    /// Datagrams that arrived at the relay.
    pub seen: [u64; 4],
    /// Datagrams dropped (loss or block).
    pub dropped: [u64; 4],
    /// Of `dropped`, those dropped by `block` (the lab holding traffic, not loss).
    pub blocked: u64,
    /// Datagrams forwarded (copies included).
    pub delivered: [u64; 4],
    /// Extra copies sent by `duplicate`.
    pub duplicated: u64,
    /// Extra copies sent by `replay_after`.
    pub replayed: u64,
    /// Copies held back by `reorder`.
    pub reordered: u64,
    /// Held-back copies that a later datagram overtook.
    pub overtaken: u64,
    /// Datagrams the loss draw picked but `spare_after_requests` let through.
    pub spared: u64,
    /// Datagrams that are not peer messages (forwarded untouched).
    pub malformed: u64,
    /// Sends that failed (daemon gone, buffer full).
    pub send_errors: u64,
}

impl RelayStats {
    /// Sum over types.
    pub fn total(counts: &[u64; 4]) -> u64 {
        counts.iter().sum()
    }
}

/// When the relay saw the messages of one exchange (keyed by the connecting address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExchangeTimes {
    /// Association handle of the latest REQUEST.
    pub handle: u64,
    /// First REQUEST arrival (≈ when the active daemon sent it).
    pub first_request: Instant,
    /// REQUESTs seen (retransmissions included).
    pub requests: u32,
    /// First ACCEPT or REJECT the relay delivered (≈ when the active daemon got it).
    pub first_answer_delivered: Option<Instant>,
    /// ACCEPTs seen.
    pub accepts: u32,
    /// REJECTs seen.
    pub rejects: u32,
    /// ACKs seen.
    pub acks: u32,
    /// Of `acks`, those dropped for `loss` (not for `block`).
    pub acks_lost: u32,
    /// The exchange's place among those the relay saw start (0, 1, …): with the seed it
    /// keys the fault draws of its datagrams.
    pub ordinal: u64,
}

impl ExchangeTimes {
    /// A's daemon sent ACKs for this exchange and the relay dropped every one for loss.
    pub fn every_ack_lost(&self) -> bool {
        self.acks > 0 && self.acks_lost == self.acks
    }
}

impl ExchangeTimes {
    /// An exchange whose first REQUEST (handle `handle`) arrived at `now`.
    fn new(handle: u64, now: Instant, ordinal: u64) -> Self {
        ExchangeTimes {
            handle,
            first_request: now,
            requests: 0,
            first_answer_delivered: None,
            accepts: 0,
            rejects: 0,
            acks: 0,
            acks_lost: 0,
            ordinal,
        }
    }
}

#[derive(Debug)]
struct Shared {
    config: Mutex<RelayConfig>,
    stats: Mutex<RelayStats>,
    times: Mutex<HashMap<SocketAddr, ExchangeTimes>>,
    stop: AtomicBool,
    barrier: Mutex<Option<BarrierSlot>>,
}

/// [`KernelBarrier`] with a `Debug` impl.
#[derive(Clone)]
struct BarrierSlot(KernelBarrier);

impl std::fmt::Debug for BarrierSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KernelBarrier")
    }
}

/// Called before the relay forwards what its daemon sent: returns once everything the
/// daemon sent to its kernel before has been handed to the kernel (see
/// [`Relay::set_kernel_barrier`]).
pub type KernelBarrier = Arc<dyn Fn() + Send + Sync>;

/// Why a relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Binding the front address failed.
    #[error("relay cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Setting up polling or the thread failed.
    #[error("relay set-up: {0}")]
    Setup(std::io::Error),
    /// Entering the namespace failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
}

/// A running relay; stopped on drop.
#[derive(Debug)]
pub struct Relay {
    front: SocketAddr,
    backend: SocketAddr,
    shared: Arc<Shared>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Binds `front` in `place` and forwards to `backend`.
    pub fn start(
        place: &NetPlace,
        front: SocketAddr,
        backend: SocketAddr,
        config: RelayConfig,
    ) -> Result<Relay, RelayError> {
        let shared = Arc::new(Shared {
            config: Mutex::new(config),
            stats: Mutex::new(RelayStats::default()),
            times: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            barrier: Mutex::new(None),
        });
        let sh = shared.clone();
        // The thread (and the inner sockets it creates) live in the host's namespace.
        let (waker, thread) = place.run(move || -> Result<_, RelayError> {
            let socket = UdpSocket::bind(front).map_err(|source| RelayError::Bind {
                addr: front,
                source,
            })?;
            socket.set_nonblocking(true).map_err(RelayError::Setup)?;
            enlarge_receive_buffer(&socket);
            let poll = Poll::new().map_err(RelayError::Setup)?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(RelayError::Setup)?);
            let mut front_sock = mio::net::UdpSocket::from_std(socket);
            poll.registry()
                .register(&mut front_sock, FRONT, Interest::READABLE)
                .map_err(RelayError::Setup)?;
            let worker = Worker {
                poll,
                front: front_sock,
                front_ip: front.ip(),
                backend,
                inner: Vec::new(),
                by_client: HashMap::new(),
                timers: BinaryHeap::new(),
                timer_seq: 0,
                rng: 0,
                exchanges_started: 0,
                sent: 0,
                shared: sh,
            };
            let thread = std::thread::Builder::new()
                .name(format!("iwpm-relay-{front}"))
                .spawn(move || worker.run())
                .map_err(RelayError::Setup)?;
            Ok((waker, thread))
        })??;
        Ok(Relay {
            front,
            backend,
            shared,
            waker,
            thread: Some(thread),
        })
    }

    /// The address clients send to.
    pub fn front(&self) -> SocketAddr {
        self.front
    }

    /// The daemon's address.
    pub fn backend(&self) -> SocketAddr {
        self.backend
    }

    /// Changes what the relay does from now on.
    pub fn set_config(&self, config: RelayConfig) {
        *self
            .shared
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = config;
    }

    /// Makes the daemon's kernel link synchronous as seen from the network: before the
    /// relay forwards datagrams the daemon sent, it calls `barrier`, which returns once
    /// every datagram the daemon sent to its kernel earlier has reached the kernel. On
    /// Linux a netlink send to the kernel is processed inside `sendmsg`, so a REMOTE_INFO
    /// the daemon sends before its ACCEPT is in the kernel before the ACCEPT leaves; a
    /// tap between daemon and emulator would otherwise let the ACCEPT (and the connection
    /// it causes) overtake it.
    pub fn set_kernel_barrier(&self, barrier: KernelBarrier) {
        *self
            .shared
            .barrier
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(BarrierSlot(barrier));
    }

    /// The current configuration.
    pub fn config(&self) -> RelayConfig {
        self.shared
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> RelayStats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The timestamps of the exchange for connecting address `cp`.
    pub fn exchange(&self, cp: SocketAddr) -> Option<ExchangeTimes> {
        self.shared
            .times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&cp)
            .copied()
    }

    /// Every exchange seen.
    pub fn exchanges(&self) -> HashMap<SocketAddr, ExchangeTimes> {
        self.shared
            .times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The relay is "the network": it must not drop what the lab did not ask it to, so its
/// sockets take bursts of thousands of datagrams (a refusal is only logged).
fn enlarge_receive_buffer(socket: &UdpSocket) {
    const RCVBUF: usize = 8 * 1024 * 1024;
    use rustix::net::sockopt;
    if sockopt::set_socket_recv_buffer_size_force(socket, RCVBUF).is_err() {
        if let Err(e) = sockopt::set_socket_recv_buffer_size(socket, RCVBUF) {
            tracing::debug!(error = %e, "relay cannot enlarge a receive buffer");
        }
    }
}

/// Where a datagram leaves the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Via {
    /// From the front socket (to a client).
    Front,
    /// From inner socket `k` (to the backend).
    Inner(usize),
}

/// Why a datagram waits in the timer heap.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Hold {
    /// A `replay_after` copy.
    Replay,
    /// A `reorder` copy, held when `sent` datagrams had been sent.
    Reorder { sent: u64 },
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: std::cmp::Reverse<(Instant, u64)>,
    via: Via,
    to: SocketAddr,
    bytes: Vec<u8>,
    code: Option<u8>,
    hold: Hold,
}

struct Worker {
    poll: Poll,
    front: mio::net::UdpSocket,
    front_ip: std::net::IpAddr,
    backend: SocketAddr,
    /// Inner sockets and the client each one stands for.
    inner: Vec<(mio::net::UdpSocket, SocketAddr)>,
    by_client: HashMap<SocketAddr, usize>,
    timers: BinaryHeap<Timer>,
    timer_seq: u64,
    rng: u64,
    /// Exchanges seen to start so far (the next one's ordinal).
    exchanges_started: u64,
    /// Datagrams sent so far (to tell whether a held copy was overtaken).
    sent: u64,
    shared: Arc<Shared>,
}

/// splitmix64's finaliser: a well-mixed 64-bit value from any 64-bit input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Draw number `salt` for the datagram at `place`: a function of its arguments only.
fn keyed_draw(seed: u64, place: u64, salt: u64) -> f64 {
    unit(mix(seed ^ mix(place ^ mix(salt.wrapping_add(0x5EED)))))
}

/// A uniform draw in [0, 1) from 64 mixed bits.
fn unit(z: u64) -> f64 {
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl Worker {
    fn run(mut self) {
        self.rng = self.config().seed;
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; DATAGRAM_BUFFER];
        let mut from_daemon: Vec<(Vec<u8>, SocketAddr)> = Vec::new();
        while !self.shared.stop.load(Ordering::Acquire) {
            let timeout = self
                .timers
                .peek()
                .map(|t| t.at.0 .0.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_millis(200))
                .min(Duration::from_millis(200));
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "relay poll failed");
                    return;
                }
            }
            let ready: Vec<Token> = events.iter().map(|e| e.token()).collect();
            for token in ready {
                match token {
                    FRONT => self.drain_front(&mut buf),
                    WAKE => {}
                    Token(k) => self.drain_inner(k - FIRST_INNER, &mut buf, &mut from_daemon),
                }
            }
            if !from_daemon.is_empty() {
                // One barrier for the whole batch: all of it was sent after the kernel
                // datagrams the barrier waits for.
                let barrier = self
                    .shared
                    .barrier
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                if let Some(BarrierSlot(barrier)) = barrier {
                    barrier();
                }
                for (bytes, client) in from_daemon.drain(..) {
                    self.handle(bytes, Via::Front, client);
                }
            }
            self.fire_timers();
        }
    }

    fn config(&self) -> RelayConfig {
        self.shared
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The next draw of the seeded sequence, uniform in [0, 1).
    fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        unit(mix(self.rng))
    }

    /// Draw number `salt` for the datagram at `place` in its exchange (see the module
    /// docs), or the next of the sequence for one outside any exchange.
    fn draw_for(&mut self, place: Option<u64>, salt: u64) -> f64 {
        match place {
            Some(p) => keyed_draw(self.config().seed, p, salt),
            None => self.draw(),
        }
    }

    fn drain_front(&mut self, buf: &mut [u8]) {
        loop {
            match self.front.recv_from(buf) {
                Ok((n, from)) => {
                    let Some(k) = self.inner_for(from) else {
                        continue;
                    };
                    let bytes = buf[..n].to_vec();
                    self.handle(bytes, Via::Inner(k), self.backend);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ICMP errors reported on the socket; nothing to do but go on.
                    tracing::debug!(error = %e, "relay front receive error");
                    return;
                }
            }
        }
    }

    /// Reads what the daemon sent to inner socket `k` into `out` (with the client it goes
    /// to); the caller forwards it after the kernel barrier.
    fn drain_inner(&mut self, k: usize, buf: &mut [u8], out: &mut Vec<(Vec<u8>, SocketAddr)>) {
        loop {
            let Some((sock, client)) = self.inner.get(k) else {
                return;
            };
            let client = *client;
            match sock.recv_from(buf) {
                Ok((n, _)) => out.push((buf[..n].to_vec(), client)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "relay inner receive error");
                    return;
                }
            }
        }
    }

    /// The inner socket standing for `client`, created on first use.
    fn inner_for(&mut self, client: SocketAddr) -> Option<usize> {
        if let Some(k) = self.by_client.get(&client) {
            return Some(*k);
        }
        let k = self.inner.len();
        let bound = UdpSocket::bind(SocketAddr::new(self.front_ip, 0))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .inspect(enlarge_receive_buffer)
            .map(mio::net::UdpSocket::from_std)
            .and_then(|mut s| {
                self.poll
                    .registry()
                    .register(&mut s, Token(FIRST_INNER + k), Interest::READABLE)
                    .map(|()| s)
            });
        match bound {
            Ok(s) => {
                self.inner.push((s, client));
                self.by_client.insert(client, k);
                Some(k)
            }
            Err(e) => {
                tracing::warn!(error = %e, "relay cannot open an inner socket");
                None
            }
        }
    }

    /// Records, then drops, delivers, duplicates or schedules one datagram.
    fn handle(&mut self, bytes: Vec<u8>, via: Via, to: SocketAddr) {
        let now = Instant::now();
        let cfg = self.config();
        let msg = PeerMessage::decode(&bytes).ok();
        let code = msg.map(|m| m.msg_type.code());
        {
            let mut st = self
                .shared
                .stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match code {
                Some(c) => st.seen[usize::from(c)] += 1,
                None => st.malformed += 1,
            }
        }
        let (requests, place) = msg.map_or((0, None), |m| self.note_arrival(now, &m));
        let blocked = code.is_some_and(|c| cfg.block[usize::from(c)]);
        let mut lost = cfg.loss > 0.0 && self.draw_for(place, 0) < cfg.loss;
        if lost && !blocked && cfg.spare_after_requests.is_some_and(|n| requests >= n) {
            self.stats().spared += 1;
            lost = false;
        }
        if lost && !blocked {
            if let Some(m) = msg.filter(|m| m.msg_type == PeerMsgType::Ack) {
                if let Some(e) = self.times().get_mut(&m.cp()) {
                    e.acks_lost += 1;
                }
            }
        }
        if blocked || lost {
            if let Some(c) = code {
                let mut st = self.stats();
                st.dropped[usize::from(c)] += 1;
                st.blocked += u64::from(blocked);
            }
            return;
        }
        let copies = if cfg.duplicate > 0.0 && self.draw_for(place, 1) < cfg.duplicate {
            self.stats().duplicated += 1;
            2
        } else {
            1
        };
        for copy in 0..copies {
            if cfg.reorder > 0.0 && self.draw_for(place, 2 + 2 * copy) < cfg.reorder {
                let window = cfg.reorder_window.as_secs_f64().max(0.001);
                let at = self.draw_for(place, 3 + 2 * copy);
                let delay = Duration::from_secs_f64(0.001 + at * (window - 0.001));
                self.stats().reordered += 1;
                self.schedule(
                    now + delay,
                    via,
                    to,
                    bytes.clone(),
                    code,
                    Hold::Reorder { sent: self.sent },
                );
            } else {
                self.send(via, to, &bytes, code);
                if let Some(m) = msg {
                    self.note_delivery(Instant::now(), &m);
                }
            }
        }
        if let Some(after) = cfg.replay_after {
            self.schedule(now + after, via, to, bytes, code, Hold::Replay);
        }
    }

    fn schedule(
        &mut self,
        at: Instant,
        via: Via,
        to: SocketAddr,
        bytes: Vec<u8>,
        code: Option<u8>,
        hold: Hold,
    ) {
        self.timer_seq += 1;
        self.timers.push(Timer {
            at: std::cmp::Reverse((at, self.timer_seq)),
            via,
            to,
            bytes,
            code,
            hold,
        });
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, RelayStats> {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn send(&mut self, via: Via, to: SocketAddr, bytes: &[u8], code: Option<u8>) {
        let sock = match via {
            Via::Front => Some(&self.front),
            Via::Inner(k) => self.inner.get(k).map(|(s, _)| s),
        };
        let ok = sock.is_some_and(|s| s.send_to(bytes, to).is_ok());
        self.sent += 1;
        let mut st = self.stats();
        if !ok {
            st.send_errors += 1;
        } else if let Some(c) = code {
            st.delivered[usize::from(c)] += 1;
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while self.timers.peek().is_some_and(|t| t.at.0 .0 <= now) {
            let Some(t) = self.timers.pop() else { break };
            match t.hold {
                Hold::Replay => self.stats().replayed += 1,
                Hold::Reorder { sent } => {
                    if self.sent > sent {
                        self.stats().overtaken += 1;
                    }
                }
            }
            self.send(t.via, t.to, &t.bytes, t.code);
            if let (Hold::Reorder { .. }, Ok(m)) = (&t.hold, PeerMessage::decode(&t.bytes)) {
                self.note_delivery(now, &m);
            }
        }
    }

    fn times(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, ExchangeTimes>> {
        self.shared
            .times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a message; returns the REQUESTs seen so far in its exchange (this one
    /// included), 0 when the exchange is unknown.
    /// Counts the message in its exchange; returns the exchange's REQUESTs so far and the
    /// message's place (exchange ordinal, type, how many of its type so far) when it
    /// belongs to an exchange the relay saw start.
    fn note_arrival(&mut self, now: Instant, m: &PeerMessage) -> (u32, Option<u64>) {
        let cp = m.cp();
        let shared = Arc::clone(&self.shared);
        let mut times = shared.times.lock().unwrap_or_else(PoisonError::into_inner);
        if m.msg_type == PeerMsgType::Request
            && times.get(&cp).is_none_or(|e| e.handle != m.assoc_handle)
        {
            // A new exchange (or the same local address in a new one: start over).
            let fresh = ExchangeTimes::new(m.assoc_handle, now, self.exchanges_started);
            self.exchanges_started += 1;
            times.insert(cp, fresh);
        }
        let Some(e) = times.get_mut(&cp) else {
            return (0, None);
        };
        let nth = match m.msg_type {
            PeerMsgType::Request => &mut e.requests,
            PeerMsgType::Accept => &mut e.accepts,
            PeerMsgType::Reject => &mut e.rejects,
            PeerMsgType::Ack => &mut e.acks,
        };
        *nth += 1;
        let place = (e.ordinal << 24) ^ (u64::from(m.msg_type.code()) << 20) ^ u64::from(*nth);
        let requests = if e.handle == m.assoc_handle {
            e.requests
        } else {
            0
        };
        (requests, Some(place))
    }

    fn note_delivery(&self, now: Instant, m: &PeerMessage) {
        if matches!(m.msg_type, PeerMsgType::Accept | PeerMsgType::Reject) {
            if let Some(e) = self.times().get_mut(&m.cp()) {
                if e.first_answer_delivered.is_none() && e.handle == m.assoc_handle {
                    e.first_answer_delivered = Some(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, friction 6: the same `--seed` gave different runs, as one generator was
    /// drawn in arrival order, which the threads decide. A datagram's draw now depends
    /// on the seed and its place in its exchange only: the same in any order, and with
    /// about the share `loss` asks for.
    #[test]
    fn draws_are_keyed_by_place_not_by_arrival_order() {
        let places: Vec<u64> = (0..2000u64)
            .map(|ordinal| (ordinal << 24) ^ (2 << 20) ^ (ordinal % 3 + 1))
            .collect();
        let forward: Vec<f64> = places.iter().map(|&p| keyed_draw(7, p, 0)).collect();
        let mut backward: Vec<f64> = places.iter().rev().map(|&p| keyed_draw(7, p, 0)).collect();
        backward.reverse();
        assert_eq!(forward, backward);
        let other_seed: Vec<f64> = places.iter().map(|&p| keyed_draw(8, p, 0)).collect();
        assert_ne!(forward, other_seed);
        let other_salt: Vec<f64> = places.iter().map(|&p| keyed_draw(7, p, 1)).collect();
        assert_ne!(forward, other_salt);
        let lost = forward.iter().filter(|&&d| d < 0.3).count();
        assert!((540..=660).contains(&lost), "{lost} of 2000 below 0.3");
        assert!(forward.iter().all(|d| (0.0..1.0).contains(d)));
    }
}
