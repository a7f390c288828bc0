//! Load and fault injection on top of [`crate::fake_kernel`]: a pipelined kernel side
//! (many requests in flight, replies collected by a thread), a daemon whose stderr reader
//! can be paused (a stalled log sink) and counts dump lines instead of keeping them, and
//! process figures from /proc. Every wait is bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::process::Command;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use iwpm_proto::kernel_side::requests::{add_mapping, remove_mapping};
use iwpm_proto::netlink::{decode_daemon_datagram, DaemonFrame, DaemonMsg, KernelMsg};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::daemon::Daemon;
use crate::fake_kernel::{kernel_request, FakeKernel};

/// The seq and outcome of an ADD reply: `Ok(mapped)` or `Err(HANDLE_ERR code)`.
pub type AddOutcome = Result<SocketAddr, u16>;

/// The kernel side with requests pipelined: sends from the test thread, replies decoded
/// on a thread and matched by seq.
#[derive(Debug)]
pub struct KernelPipe {
    sock: UnixDatagram,
    daemon: UnixAddr,
    seq: u32,
    replies: mpsc::Receiver<(u32, DaemonMsg)>,
    /// Replies taken off the channel while waiting for another seq.
    parked: HashMap<u32, DaemonMsg>,
    _path: FakeKernel,
}

impl KernelPipe {
    /// Takes over a kernel that has done the handshake and registration.
    pub fn new(kernel: FakeKernel) -> KernelPipe {
        let daemon = kernel.daemon.clone().expect("daemon address not known yet");
        let sock = kernel.sock.try_clone().unwrap();
        let rx_sock = kernel.sock.try_clone().unwrap();
        rx_sock.set_read_timeout(None).unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = rx_sock.recv(&mut buf) {
                for frame in decode_daemon_datagram(&buf[..n]) {
                    if let Ok(DaemonFrame::Msg(_, msg)) = frame {
                        let seq = match &msg {
                            DaemonMsg::AddMapping(r) => r.seq,
                            DaemonMsg::HandleErr(e) => e.seq,
                            DaemonMsg::RegPid(r) => r.seq,
                            DaemonMsg::QueryMapping(r) => r.seq,
                            _ => 0,
                        };
                        if tx.send((seq, msg)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        KernelPipe {
            sock,
            daemon,
            seq: kernel.seq,
            replies,
            parked: HashMap::new(),
            _path: kernel,
        }
    }

    fn send(&mut self, msg: &KernelMsg) -> u32 {
        self.seq += 1;
        let bytes = kernel_request(self.seq, msg);
        self.sock.send_to_addr(&bytes, &self.daemon).unwrap();
        self.seq
    }

    /// ADD_MAPPING for `addr` with `flags` (0 port-mapped, 1 no port map); returns its seq.
    pub fn send_add(&mut self, addr: SocketAddr, flags: u32) -> u32 {
        self.send(&add_mapping(
            0,
            SockAddrStorage::from_socket_addr(addr),
            Some(flags),
        ))
    }

    /// REMOVE_MAPPING for `addr` (no reply).
    pub fn send_remove(&mut self, addr: SocketAddr) {
        self.send(&remove_mapping(0, SockAddrStorage::from_socket_addr(addr)));
    }

    /// The reply to `seq`, within `timeout`; replies to other seqs are kept for later.
    pub fn reply(&mut self, seq: u32, timeout: Duration) -> Option<DaemonMsg> {
        if let Some(m) = self.parked.remove(&seq) {
            return Some(m);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let (s, m) = self.replies.recv_timeout(left).ok()?;
            if s == seq {
                return Some(m);
            }
            self.parked.insert(s, m);
        }
    }

    /// The outcome of the ADD sent as `seq`.
    pub fn add_outcome(&mut self, seq: u32, timeout: Duration) -> Option<AddOutcome> {
        match self.reply(seq, timeout)? {
            DaemonMsg::AddMapping(r) if r.err == 0 => {
                Some(Ok(r.mapped_addr.to_socket_addr().expect("mapped address")))
            }
            DaemonMsg::AddMapping(r) => Some(Err(r.err)),
            DaemonMsg::HandleErr(e) => Some(Err(e.code)),
            other => panic!("unexpected reply to ADD {seq}: {other:?}"),
        }
    }

    /// Sends one ADD and waits for its outcome.
    pub fn add(&mut self, addr: SocketAddr, flags: u32, timeout: Duration) -> Option<AddOutcome> {
        let seq = self.send_add(addr, flags);
        self.add_outcome(seq, timeout)
    }

    /// Sends ADDs for `addrs`, at most `window` unanswered at a time (the Unix link of the
    /// daemon queues only a few datagrams); returns the outcomes in order.
    pub fn add_many(
        &mut self,
        addrs: &[SocketAddr],
        flags: u32,
        window: usize,
        timeout: Duration,
    ) -> Vec<AddOutcome> {
        let mut seqs = std::collections::VecDeque::new();
        let mut out = Vec::with_capacity(addrs.len());
        for a in addrs {
            if seqs.len() >= window {
                let s = seqs.pop_front().unwrap();
                out.push(self.add_outcome(s, timeout).expect("ADD not answered"));
            }
            seqs.push_back(self.send_add(*a, flags));
        }
        for s in seqs {
            out.push(self.add_outcome(s, timeout).expect("ADD not answered"));
        }
        out
    }
}

/// What the stderr reader of a [`Watched`] daemon has seen.
#[derive(Debug, Default)]
pub struct LogState {
    /// Lines other than the per-mapping dump lines.
    pub lines: Vec<(Instant, String)>,
    /// `Mapping #` lines per dump (index = dump number).
    pub mappings_per_dump: Vec<usize>,
    /// Dump headers seen (`print_iwpm_mapped_ports:`).
    pub headers: Vec<Instant>,
    /// Dump ends seen (`io counters:`).
    pub ends: Vec<Instant>,
    /// The reader stops after the next dump header until [`Watched::resume`].
    pub pause_at_header: bool,
    /// The reader is stopped.
    pub paused: bool,
}

/// A daemon whose stderr is read by a thread that can be paused. The process handle is
/// the [`Daemon`] it derefs to (its own `stderr` stays empty: the lines go to
/// [`Watched::log`]).
#[derive(Debug)]
pub struct Watched {
    daemon: Daemon,
    pub log: Arc<(Mutex<LogState>, Condvar)>,
}

impl Watched {
    /// Spawns `cmd` (stderr must be piped).
    pub fn spawn(mut cmd: Command) -> Watched {
        let child = cmd.spawn().expect("spawn iwpmd");
        let log: Arc<(Mutex<LogState>, Condvar)> = Arc::default();
        let shared = log.clone();
        let daemon = Daemon::adopt_with(child, 0, "iwpmd-log-watched".into(), move |line| {
            let (state, cv) = &*shared;
            let now = Instant::now();
            let mut s = state.lock().unwrap();
            let dump_detail = [
                "Mapping #",
                "Local address ",
                "Mapped address ",
                "refcount ",
            ]
            .iter()
            .any(|p| line.contains(p));
            if line.contains("Mapping #") {
                if let Some(n) = s.mappings_per_dump.last_mut() {
                    *n += 1;
                }
            }
            if line.contains("print_iwpm_mapped_ports:") {
                s.headers.push(now);
                s.mappings_per_dump.push(0);
                if s.pause_at_header {
                    s.pause_at_header = false;
                    s.paused = true;
                }
            }
            if line.contains("io counters:") {
                s.ends.push(now);
            }
            if !dump_detail {
                s.lines.push((now, line));
            }
            cv.notify_all();
            while s.paused {
                s = cv.wait(s).unwrap();
            }
        })
        .expect("start the stderr reader");
        Watched { daemon, log }
    }

    /// Runs `f` on the log state.
    pub fn with<T>(&self, f: impl FnOnce(&mut LogState) -> T) -> T {
        f(&mut self.log.0.lock().unwrap())
    }

    /// Waits until `cond` holds for the log state.
    pub fn wait(&self, timeout: Duration, cond: impl Fn(&LogState) -> bool) -> bool {
        let (state, cv) = &*self.log;
        let deadline = Instant::now() + timeout;
        let mut s = state.lock().unwrap();
        loop {
            if cond(&s) {
                return true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            s = cv.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Restarts a paused reader.
    pub fn resume(&self) {
        let (state, cv) = &*self.log;
        state.lock().unwrap().paused = false;
        cv.notify_all();
    }

    /// Lines (without the per-mapping dump lines) containing `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.with(|s| s.lines.iter().filter(|(_, l)| l.contains(needle)).count())
    }

    /// Every kept line, for failure messages (the last `n`).
    pub fn tail(&self, n: usize) -> String {
        self.with(|s| {
            let from = s.lines.len().saturating_sub(n);
            s.lines[from..]
                .iter()
                .map(|(_, l)| l.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    /// Waits until a line containing `needle` has been seen.
    pub fn wait_line(&self, needle: &str, timeout: Duration) -> bool {
        self.wait(timeout, |s| s.lines.iter().any(|(_, l)| l.contains(needle)))
    }

    /// Open descriptors of the daemon.
    pub fn open_fds(&self) -> usize {
        open_fds(self.pid())
    }
}

impl std::ops::Deref for Watched {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.daemon
    }
}

impl std::ops::DerefMut for Watched {
    fn deref_mut(&mut self) -> &mut Daemon {
        &mut self.daemon
    }
}

impl Drop for Watched {
    /// Lets a paused reader go; the [`Daemon`] then kills and reaps the process.
    fn drop(&mut self) {
        self.resume();
    }
}

/// Open descriptors of process `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `Max open files` (soft, hard) of process `pid`, from /proc.
pub fn nofile_limits(pid: u32) -> Option<(String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    Some((words.next()?.to_owned(), words.next()?.to_owned()))
}
