//! A tap on one host's kernel link: a Unix-datagram man in the middle between the daemon
//! and the emulated kernel. It forwards every datagram unchanged, timestamps the
//! ADD/QUERY round trips (the daemon-side share of a connection's latency), counts ops in
//! both directions, and can inject bytes towards the daemon as if the kernel sent them
//! (malformed or unexpected messages), keeping the daemon's answers to those away from the
//! emulator.
//!
//! The daemon connects to the tap's socket; for each daemon the tap opens one inner
//! socket, bound to a file next to it, that talks to the emulator. When a daemon dies,
//! [`Tap::daemon_gone`] closes its inner socket, so the emulated kernel's next send to
//! that daemon fails as a netlink unicast to a dead port would, and binds a fresh socket
//! for the next daemon.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use iwpm_proto::netlink::{
    decode_daemon_datagram, decode_kernel_datagram, DaemonFrame, DaemonMsg, KernelFrame, KernelMsg,
};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::netns::{NetPlace, NetnsError};

const DAEMON_SIDE: Token = Token(0);
const WAKE: Token = Token(1);
const FIRST_INNER: usize = 2;
/// Receive buffer: the largest datagram a Unix socket carries here (a whole batch of
/// netlink messages from the daemon or the emulated kernel).
const DATAGRAM_BUFFER: usize = 64 * 1024;

/// One ADD or QUERY round trip as the tap saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundTrip {
    /// The kernel request's header seq.
    pub seq: u32,
    /// When the request passed the tap.
    pub sent: Instant,
    /// When the reply (or HANDLE_ERR) passed the tap.
    pub answered: Option<Instant>,
    /// The reply's MAPPING_ERR, or the HANDLE_ERR code.
    pub err: Option<u16>,
}

/// What the tap has seen.
#[derive(Clone, Debug, Default)]
pub struct TapRecords {
    /// Kernel → daemon messages by op.
    pub to_daemon: [u64; 9],
    /// Daemon → kernel messages by op.
    pub from_daemon: [u64; 9],
    /// HANDLE_ERRs the daemon sent to the kernel: (ERR_SEQ, code).
    pub handle_errs: Vec<(u32, u16)>,
    /// QUERY round trips by the connection's local address (latest per address).
    pub queries: HashMap<SocketAddr, RoundTrip>,
    /// ADD round trips by the listener's local address.
    pub adds: HashMap<SocketAddr, RoundTrip>,
    /// Answers to injected messages (kept from the emulator).
    pub injected_answers: Vec<DaemonFrame>,
    /// Kernel datagrams that could not be delivered to a daemon.
    pub undeliverable: u64,
    /// Daemon datagrams the emulator's socket did not take in time.
    pub kernel_send_failures: u64,
}

#[derive(Debug)]
enum Cmd {
    /// The daemon died: close its inner socket and offer a fresh socket at the path.
    DaemonGone(mpsc::Sender<()>),
    /// Forward everything the daemon has sent so far to the emulator, then answer.
    Sync(mpsc::Sender<()>),
}

/// Longest a [`Tap::kernel_barrier`] waits for the tap (a stuck tap must not stall the
/// relay for ever; the lab then just loses the ordering guarantee for that datagram).
const BARRIER_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    records: Mutex<TapRecords>,
    /// Seqs of injected messages: daemon answers naming them are swallowed.
    injected: Mutex<HashSet<u32>>,
    /// A handle on the daemon-facing socket once a daemon is connected, for injection.
    injector: Mutex<Option<UnixDatagram>>,
    cmds: Mutex<VecDeque<Cmd>>,
    /// The current QUERY/ADD seq → local address, to match HANDLE_ERRs.
    seqs: Mutex<HashMap<u32, (u16, SocketAddr)>>,
}

/// Why the tap could not start or inject.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// Socket set-up failed.
    #[error("tap socket {path}: {source}")]
    Socket {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Polling or thread set-up failed.
    #[error("tap set-up: {0}")]
    Setup(std::io::Error),
    /// Entering the namespace failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// No daemon has spoken yet, so there is nobody to inject to.
    #[error("no daemon connected to the tap yet")]
    NoDaemon,
    /// Sending injected bytes failed.
    #[error("inject: {0}")]
    Inject(std::io::Error),
}

/// A running tap; stopped on drop.
#[derive(Debug)]
pub struct Tap {
    path: PathBuf,
    shared: Arc<Shared>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

/// Binds a non-blocking datagram socket at `path`, replacing a stale file.
fn bind_at(path: &Path) -> Result<UnixDatagram, TapError> {
    let err = |source| TapError::Socket {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let socket = UnixDatagram::bind(path).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    Ok(socket)
}

impl Tap {
    /// Binds the daemon-facing socket at `path` (created in `place`, the daemon's
    /// namespace, since the daemon's own address is abstract) and relays to `kernel`.
    /// Inner sockets are files `path.N`.
    pub fn start(place: &NetPlace, path: &Path, kernel: &Path) -> Result<Tap, TapError> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            records: Mutex::new(TapRecords::default()),
            injected: Mutex::new(HashSet::new()),
            injector: Mutex::new(None),
            cmds: Mutex::new(VecDeque::new()),
            seqs: Mutex::new(HashMap::new()),
        });
        let sh = shared.clone();
        let (path, kernel) = (path.to_path_buf(), kernel.to_path_buf());
        let p2 = path.clone();
        let (waker, thread) = place.run(move || -> Result<_, TapError> {
            let socket = bind_at(&p2)?;
            let poll = Poll::new().map_err(TapError::Setup)?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE).map_err(TapError::Setup)?);
            poll.registry()
                .register(
                    &mut SourceFd(&socket.as_raw_fd()),
                    DAEMON_SIDE,
                    Interest::READABLE,
                )
                .map_err(TapError::Setup)?;
            let worker = Worker {
                poll,
                daemon_side: socket,
                connected: false,
                base: p2.clone(),
                kernel,
                inner: None,
                next_inner: 0,
                to_kernel: VecDeque::new(),
                to_daemon: VecDeque::new(),
                shared: sh,
            };
            let thread = std::thread::Builder::new()
                .name("iwpm-tap".into())
                .spawn(move || worker.run())
                .map_err(TapError::Setup)?;
            Ok((waker, thread))
        })??;
        Ok(Tap {
            path,
            shared,
            waker,
            thread: Some(thread),
        })
    }

    /// The path to give the daemon (`--kernel unix:PATH`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A copy of the records.
    pub fn records(&self) -> TapRecords {
        self.lock_records().clone()
    }

    fn lock_records(&self) -> MutexGuard<'_, TapRecords> {
        self.shared
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The daemon behind this tap died: closes its link (so the kernel's sends to it fail,
    /// as a unicast to a dead netlink port does) and offers a fresh socket at the path for
    /// the next daemon. Returns once done.
    pub fn daemon_gone(&self) {
        *self
            .shared
            .injector
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        let (tx, rx) = mpsc::channel();
        self.shared
            .cmds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Cmd::DaemonGone(tx));
        let _ = self.waker.wake();
        let _ = rx.recv_timeout(Duration::from_secs(5));
    }

    /// A barrier for [`crate::relay::Relay::set_kernel_barrier`]: once it returns, every
    /// datagram the daemon had sent to the tap before the call is in the emulator's
    /// socket, where the emulator's driver takes it before any fabric event caused later
    /// (`iwpm_kernel_emu::EmulatedHost`'s ordering). So the tap adds no asynchrony that the real
    /// kernel link, processed inside the daemon's `sendmsg`, does not have.
    pub fn kernel_barrier(&self) -> crate::relay::KernelBarrier {
        let shared = self.shared.clone();
        let waker = self.waker.clone();
        Arc::new(move || {
            let (tx, rx) = mpsc::channel();
            shared
                .cmds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back(Cmd::Sync(tx));
            if waker.wake().is_ok() {
                let _ = rx.recv_timeout(BARRIER_WAIT);
            }
        })
    }

    /// Sends `bytes` to the daemon as if from the kernel. Answers whose seq is in `seqs`
    /// are kept from the emulator and recorded in [`TapRecords::injected_answers`].
    pub fn inject(&self, bytes: &[u8], seqs: &[u32]) -> Result<(), TapError> {
        self.shared
            .injected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(seqs.iter().copied());
        let injector = self
            .shared
            .injector
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let sock = injector.as_ref().ok_or(TapError::NoDaemon)?;
        sock.send(bytes).map(|_| ()).map_err(TapError::Inject)
    }

    /// Waits until the daemon has answered `count` injected messages.
    pub fn wait_injected_answers(&self, count: usize, timeout: Duration) -> Vec<DaemonFrame> {
        let deadline = Instant::now() + timeout;
        loop {
            let answers = self.lock_records().injected_answers.clone();
            if answers.len() >= count || Instant::now() >= deadline {
                return answers;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The daemon's counterpart towards the emulator, connected to the emulator's socket.
struct Inner {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Both sockets of a link are connected to their peer: Linux then skips the receive-queue
/// length limit of Unix datagram sockets (`net.unix.max_dgram_qlen`, 10 by default), which
/// netlink does not have either. And the tap never blocks: what a full socket does not take
/// waits in a queue and is retried. Blocking here could deadlock with the emulator, which
/// sends to the daemon (to us) while holding its host lock, and whose driver needs that
/// lock to read what we send it.
struct Worker {
    poll: Poll,
    daemon_side: UnixDatagram,
    /// The daemon-facing socket is connected to the current daemon.
    connected: bool,
    base: PathBuf,
    kernel: PathBuf,
    inner: Option<Inner>,
    next_inner: usize,
    /// Daemon datagrams waiting for room at the emulator.
    to_kernel: VecDeque<Vec<u8>>,
    /// Kernel datagrams waiting for room at the daemon.
    to_daemon: VecDeque<Vec<u8>>,
    shared: Arc<Shared>,
}

/// A full queue: `EAGAIN`, or `ENOBUFS` which Unix sockets may return for the same.
fn is_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(105)
}

impl Worker {
    fn run(mut self) {
        let mut events = Events::with_capacity(64);
        let mut buf = vec![0u8; DATAGRAM_BUFFER];
        while !self.shared.stop.load(Ordering::Acquire) {
            let backlog = !self.to_kernel.is_empty() || !self.to_daemon.is_empty();
            let timeout = if backlog {
                Duration::from_micros(500)
            } else {
                Duration::from_millis(200)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "tap poll failed");
                    return;
                }
            }
            self.run_cmds(&mut buf);
            let ready: Vec<Token> = events.iter().map(|e| e.token()).collect();
            for token in ready {
                match token {
                    DAEMON_SIDE => self.drain_daemon(&mut buf),
                    WAKE => {}
                    _ => self.drain_inner(&mut buf),
                }
            }
            self.flush();
        }
    }

    fn run_cmds(&mut self, buf: &mut [u8]) {
        let cmds: Vec<Cmd> = self
            .shared
            .cmds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for cmd in cmds {
            match cmd {
                Cmd::DaemonGone(ack) => {
                    self.close_inner();
                    if let Err(e) = self.rebind() {
                        tracing::warn!(error = %e, "tap cannot rebind its daemon socket");
                    }
                    let _ = ack.send(());
                }
                Cmd::Sync(ack) => {
                    self.sync_to_kernel(buf);
                    let _ = ack.send(());
                }
            }
        }
    }

    /// Reads every datagram the daemon has sent and hands all of them to the emulator,
    /// waiting for room if its socket is full (reading the kernel side meanwhile, so an
    /// emulator blocked on sending to us cannot deadlock with us).
    fn sync_to_kernel(&mut self, buf: &mut [u8]) {
        let deadline = Instant::now() + BARRIER_WAIT;
        self.drain_daemon(buf);
        loop {
            self.flush();
            if self.to_kernel.is_empty() || Instant::now() >= deadline {
                return;
            }
            self.drain_inner(buf);
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn close_inner(&mut self) {
        self.to_kernel.clear();
        self.to_daemon.clear();
        if let Some(inner) = self.inner.take() {
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&inner.socket.as_raw_fd()));
        }
    }

    /// A fresh, unconnected daemon-facing socket at the same path.
    fn rebind(&mut self) -> Result<(), TapError> {
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&self.daemon_side.as_raw_fd()));
        let socket = bind_at(&self.base)?;
        self.poll
            .registry()
            .register(
                &mut SourceFd(&socket.as_raw_fd()),
                DAEMON_SIDE,
                Interest::READABLE,
            )
            .map_err(TapError::Setup)?;
        self.daemon_side = socket;
        self.connected = false;
        Ok(())
    }

    fn records(&self) -> MutexGuard<'_, TapRecords> {
        self.shared
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn drain_daemon(&mut self, buf: &mut [u8]) {
        loop {
            match self.daemon_side.recv_from(buf) {
                Ok((n, from)) => {
                    if !self.connected {
                        self.adopt(&from);
                    }
                    let bytes = buf[..n].to_vec();
                    if self.note_from_daemon(&bytes) {
                        continue;
                    }
                    self.to_kernel.push_back(bytes);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "tap: daemon side receive error");
                    return;
                }
            }
        }
    }

    /// First datagram of a daemon: connect to it and open its inner socket.
    fn adopt(&mut self, from: &UnixAddr) {
        if let Err(e) = self.daemon_side.connect_addr(from) {
            tracing::warn!(error = %e, "tap cannot connect to the daemon");
            return;
        }
        self.connected = true;
        if let Ok(clone) = self.daemon_side.try_clone() {
            *self
                .shared
                .injector
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(clone);
        }
        self.close_inner();
        let k = self.next_inner;
        self.next_inner += 1;
        let mut name = self.base.as_os_str().to_owned();
        name.push(format!(".{k}"));
        let path = PathBuf::from(name);
        let _ = std::fs::remove_file(&path);
        let opened = UnixDatagram::bind(&path).and_then(|s| {
            s.connect(&self.kernel)?;
            s.set_nonblocking(true)?;
            self.poll.registry().register(
                &mut SourceFd(&s.as_raw_fd()),
                Token(FIRST_INNER + k),
                Interest::READABLE,
            )?;
            Ok(s)
        });
        match opened {
            Ok(socket) => self.inner = Some(Inner { socket, path }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                tracing::warn!(error = %e, "tap cannot open its kernel-side socket");
            }
        }
    }

    /// Sends what the sockets take now; the rest waits for the next round.
    fn flush(&mut self) {
        while let Some(bytes) = self.to_kernel.front() {
            let Some(inner) = &self.inner else {
                self.records().kernel_send_failures += self.to_kernel.len() as u64;
                self.to_kernel.clear();
                break;
            };
            match inner.socket.send(bytes) {
                Ok(_) => {}
                Err(e) if is_full(&e) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "tap: kernel side send failed");
                    self.records().kernel_send_failures += 1;
                }
            }
            self.to_kernel.pop_front();
        }
        while let Some(bytes) = self.to_daemon.front() {
            match self.daemon_side.send(bytes) {
                Ok(_) => {
                    self.to_daemon.pop_front();
                }
                Err(e) if is_full(&e) => break,
                Err(_) => {
                    // Like a unicast to a dead netlink port: this and later sends fail.
                    self.records().undeliverable += self.to_daemon.len() as u64;
                    self.close_inner();
                    break;
                }
            }
        }
    }

    fn drain_inner(&mut self, buf: &mut [u8]) {
        loop {
            let Some(inner) = &self.inner else {
                return;
            };
            match inner.socket.recv(buf) {
                Ok(n) => {
                    let bytes = buf[..n].to_vec();
                    self.note_to_daemon(&bytes);
                    if self.connected {
                        self.to_daemon.push_back(bytes);
                    } else {
                        self.records().undeliverable += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "tap: kernel side receive error");
                    return;
                }
            }
        }
    }

    /// Records a kernel datagram on its way to the daemon.
    fn note_to_daemon(&self, bytes: &[u8]) {
        let now = Instant::now();
        let mut rec = self.records();
        let mut seqs = self
            .shared
            .seqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for frame in decode_kernel_datagram(bytes, 4).into_iter().flatten() {
            let KernelFrame::Msg(env, msg) = frame else {
                continue;
            };
            if let Some(c) = rec.to_daemon.get_mut(usize::from(msg.op())) {
                *c += 1;
            }
            let trip = RoundTrip {
                seq: env.seq,
                sent: now,
                answered: None,
                err: None,
            };
            match msg {
                KernelMsg::QueryMapping(q) => {
                    if let Some(local) = q.local_addr.to_socket_addr() {
                        rec.queries.insert(local, trip);
                        seqs.insert(env.seq, (msg_op_query(), local));
                    }
                }
                KernelMsg::AddMapping(a) => {
                    if let Some(local) = a.addr.to_socket_addr() {
                        rec.adds.insert(local, trip);
                        seqs.insert(env.seq, (msg_op_add(), local));
                    }
                }
                _ => {}
            }
        }
    }

    /// Records a daemon datagram; true if it answers only injected messages (swallowed).
    fn note_from_daemon(&self, bytes: &[u8]) -> bool {
        let now = Instant::now();
        let frames: Vec<DaemonFrame> = decode_daemon_datagram(bytes)
            .into_iter()
            .flatten()
            .collect();
        let injected = self
            .shared
            .injected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let answers_injected = |f: &DaemonFrame| match f {
            DaemonFrame::Msg(_, m) => reply_seq(m).is_some_and(|s| injected.contains(&s)),
            _ => false,
        };
        let mut rec = self.records();
        if !frames.is_empty() && frames.iter().all(answers_injected) {
            rec.injected_answers.extend(frames);
            return true;
        }
        drop(injected);
        let mut seqs = self
            .shared
            .seqs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for frame in frames {
            let DaemonFrame::Msg(_, msg) = frame else {
                continue;
            };
            if let Some(c) = rec.from_daemon.get_mut(usize::from(msg.op())) {
                *c += 1;
            }
            let answer = match &msg {
                DaemonMsg::QueryMapping(r) => Some((r.seq, r.err)),
                DaemonMsg::AddMapping(r) => Some((r.seq, r.err)),
                DaemonMsg::HandleErr(h) => {
                    rec.handle_errs.push((h.seq, h.code));
                    Some((h.seq, h.code))
                }
                _ => None,
            };
            let Some((seq, err)) = answer else {
                continue;
            };
            let Some((op, local)) = seqs.remove(&seq) else {
                continue;
            };
            let table = if op == msg_op_query() {
                &mut rec.queries
            } else {
                &mut rec.adds
            };
            if let Some(t) = table.get_mut(&local).filter(|t| t.seq == seq) {
                t.answered = Some(now);
                t.err = Some(err);
            }
        }
        false
    }
}

fn msg_op_query() -> u16 {
    iwpm_proto::consts::op::RDMA_NL_IWPM_QUERY_MAPPING
}

fn msg_op_add() -> u16 {
    iwpm_proto::consts::op::RDMA_NL_IWPM_ADD_MAPPING
}

/// The kernel seq a daemon message answers, if it is an answer.
fn reply_seq(m: &DaemonMsg) -> Option<u32> {
    match m {
        DaemonMsg::RegPid(r) => Some(r.seq),
        DaemonMsg::AddMapping(r) => Some(r.seq),
        DaemonMsg::QueryMapping(r) => Some(r.seq),
        DaemonMsg::HandleErr(h) => Some(h.seq),
        DaemonMsg::MapInfoNum(r) => Some(r.seq),
        _ => None,
    }
}
