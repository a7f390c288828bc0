//! Harness for process-level tests: spawns the real `iwpmd` with its kernel link on a Unix
//! datagram socket that the test owns (the test plays the kernel), collects its stderr, and
//! kills it on drop. Every wait is bounded.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iwpm_proto::consts::{IWPM_ULIB_NAME, RDMA_NL_IWCM};
use iwpm_proto::netlink::{
    decode_daemon_datagram, encode_kernel_msg, DaemonFrame, DaemonMsg, Envelope, Hello, KernelMsg,
    ManageMappingRequest, NlString, RegPidRequest,
};
use iwpm_proto::sockaddr::SockAddrStorage;

/// Default bound on any wait.
pub const WAIT: Duration = Duration::from_secs(10);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh scratch directory for one test, removed with everything in it when dropped
/// (after the daemon and the fake kernel, when declared before them).
pub fn scratch_dir(tag: &str) -> ScratchDir {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("iwpmd-it-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    ScratchDir(dir)
}

/// See [`scratch_dir`].
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A UDP port that was free on 127.0.0.1 a moment ago (and on 127.0.0.2 if asked).
pub fn free_udp_port() -> u16 {
    loop {
        let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = s.local_addr().unwrap().port();
        if UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2), port)).is_ok() {
            return port;
        }
    }
}

/// The emulated kernel end: a Unix datagram socket at `path`.
pub struct FakeKernel {
    pub path: PathBuf,
    pub sock: UnixDatagram,
    pub daemon: Option<UnixAddr>,
    pub seq: u32,
    pending: VecDeque<(Envelope, DaemonMsg)>,
    /// The scratch directory, when the fake kernel owns it (see [`FakeKernel::bind_owning`]).
    _dir: Option<ScratchDir>,
}

impl FakeKernel {
    pub fn bind(dir: &Path) -> FakeKernel {
        let path = dir.join("kernel.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        FakeKernel {
            path,
            sock,
            daemon: None,
            seq: 0,
            pending: VecDeque::new(),
            _dir: None,
        }
    }

    /// [`FakeKernel::bind`] in `dir`, which is removed when the fake kernel is dropped (for
    /// helpers that return the fake kernel and not the directory).
    pub fn bind_owning(dir: ScratchDir) -> FakeKernel {
        let mut kernel = FakeKernel::bind(&dir);
        kernel._dir = Some(dir);
        kernel
    }

    /// Next datagram from the daemon, within `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 65536];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let left = left.max(Duration::from_millis(1));
            self.sock.set_read_timeout(Some(left)).unwrap();
            match self.sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    self.daemon = Some(from);
                    buf.truncate(n);
                    return Some(buf);
                }
                // A signal is not the end of the wait.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(e) => panic!("fake kernel socket: {e}"),
            }
        }
    }

    /// Next iwpm message from the daemon, decoded with the kernel's rules. The daemon
    /// sends no control messages, so anything else fails the test.
    pub fn recv_msg(&mut self, timeout: Duration) -> Option<(Envelope, DaemonMsg)> {
        let deadline = Instant::now() + timeout;
        while self.pending.is_empty() {
            let left = deadline.checked_duration_since(Instant::now())?;
            let dgram = self.recv(left.max(Duration::from_millis(1)))?;
            for frame in decode_daemon_datagram(&dgram) {
                match frame {
                    Ok(DaemonFrame::Msg(env, msg)) => self.pending.push_back((env, msg)),
                    other => panic!("daemon sent something that is not an iwpm message: {other:?}"),
                }
            }
        }
        self.pending.pop_front()
    }

    /// Sends raw bytes to the daemon.
    pub fn send_raw(&self, bytes: &[u8]) {
        let to = self.daemon.as_ref().expect("daemon address not known yet");
        self.sock.send_to_addr(bytes, to).unwrap();
    }

    /// Sends one kernel message with the kernel's header conventions; returns its seq.
    pub fn send(&mut self, msg: &KernelMsg) -> u32 {
        self.seq += 1;
        self.send_raw(&kernel_request(self.seq, msg));
        self.seq
    }

    /// Receives HELLO, answers HELLO(4), receives the MAPINFO request. Returns the HELLO
    /// envelope.
    pub fn handshake(&mut self) -> Envelope {
        let (env, msg) = self.recv_msg(WAIT).expect("no HELLO from the daemon");
        assert!(
            matches!(msg, DaemonMsg::Hello(Hello { abi_version: 4, .. })),
            "first message must be HELLO(4): {msg:?}"
        );
        self.send(&KernelMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        }));
        let (_, msg) = self.recv_msg(WAIT).expect("no MAPINFO request after HELLO");
        match msg {
            DaemonMsg::MapInfo(m) => {
                assert_eq!(
                    m.ulib_name,
                    nl_string(IWPM_ULIB_NAME, IWPM_ULIB_NAME.len() + 1)
                );
                assert_eq!(m.ulib_version, 4);
            }
            other => panic!("expected MAPINFO request, got {other:?}"),
        }
        env
    }

    /// Registers client 2 the way the kernel does (REG_PID multicast); returns the reply.
    pub fn register(&mut self) -> DaemonMsg {
        let seq = self.send(&KernelMsg::RegPid(RegPidRequest {
            echo_seq: 0,
            if_name: nl_string("lo", 16),
            ibdev_name: nl_string("siw_lo", 32),
            ulib_name: nl_string(IWPM_ULIB_NAME, 32),
            unknown: vec![],
        }));
        let (env, msg) = self.recv_msg(WAIT).expect("no REG_PID reply");
        assert_eq!(env.client, RDMA_NL_IWCM);
        match &msg {
            DaemonMsg::RegPid(r) => assert_eq!(r.seq, seq),
            other => panic!("expected REG_PID reply, got {other:?}"),
        }
        msg
    }

    /// ADD_MAPPING for `addr` (ABI 4, flags 0); returns (seq, reply).
    pub fn add_mapping(&mut self, addr: SocketAddr) -> (u32, DaemonMsg) {
        let seq = self.send(&KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from_socket_addr(addr),
            flags: Some(0),
            unknown: vec![],
        }));
        let (_, msg) = self.recv_msg(WAIT).expect("no ADD_MAPPING reply");
        (seq, msg)
    }
}

impl Drop for FakeKernel {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A NUL-padded string attribute of `size` bytes, as the kernel sends them.
pub fn nl_string(s: &str, size: usize) -> NlString {
    let mut v = s.as_bytes().to_vec();
    v.resize(size.max(s.len() + 1), 0);
    NlString(v)
}

/// Shared, growing copy of the daemon's stderr.
#[derive(Clone, Default)]
pub struct Stderr(Arc<Mutex<String>>);

impl Stderr {
    pub fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.text().contains(needle)
    }
}

/// A running daemon.
pub struct Daemon {
    pub child: Child,
    pub stderr: Stderr,
    pub peer_port: u16,
}

/// Command line for a test daemon: foreground, stderr logs, loopback-only peers.
pub fn daemon_command(kernel: &Path, bind_v4: Ipv4Addr, peer_port: u16) -> Command {
    let mut cmd = daemon_command_no_mode(kernel, bind_v4, peer_port);
    cmd.arg("--foreground");
    cmd
}

/// Whether this host can open a NETLINK_RDMA socket (ib_core loaded): the tests of the
/// "no RDMA here" start-up failure only run where it cannot.
pub fn host_has_netlink_rdma() -> bool {
    use rustix::net::{netlink, AddressFamily, SocketFlags, SocketType};
    let flags = SocketFlags::CLOEXEC;
    rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        flags,
        Some(netlink::RDMA),
    )
    .is_ok()
}

/// One kernel -> daemon message with the kernel's header conventions (client IWCM,
/// `NLM_F_REQUEST`, port id 0) and sequence number `seq`.
pub fn kernel_request(seq: u32, msg: &KernelMsg) -> Vec<u8> {
    let mut out = Vec::new();
    encode_kernel_msg(&Envelope::kernel_request(seq), msg, &mut out);
    out
}

/// Like [`daemon_command`] without a process-mode flag (daemonizes unless one is added).
pub fn daemon_command_no_mode(kernel: &Path, bind_v4: Ipv4Addr, peer_port: u16) -> Command {
    let binary = Path::new(env!("CARGO_BIN_EXE_iwpmd"));
    iwpm_kernel_emu::iwpmd_command(binary, kernel, bind_v4, peer_port)
}

impl Daemon {
    /// Spawns `cmd` and starts collecting its stderr.
    pub fn spawn(mut cmd: Command, peer_port: u16) -> Daemon {
        let mut child = cmd.spawn().expect("spawn iwpmd");
        let stderr = Stderr::default();
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.0.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Daemon {
            child,
            stderr,
            peer_port,
        }
    }

    /// Spawns a loopback daemon linked to `kernel`.
    pub fn start(kernel: &FakeKernel, bind_v4: Ipv4Addr, peer_port: u16) -> Daemon {
        Daemon::spawn(daemon_command(&kernel.path, bind_v4, peer_port), peer_port)
    }

    /// Waits until the event loop runs (signals are handled from then on).
    pub fn wait_loop(&self) {
        assert!(
            self.stderr.wait_for("entering the event loop", WAIT),
            "daemon did not reach its event loop:\n{}",
            self.stderr.text()
        );
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    /// Waits for the exit status, bounded.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_child(&mut self.child, timeout)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `child` for an exit status until `timeout`.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True if a TCP socket can bind `addr` right now.
pub fn tcp_port_free(addr: SocketAddr) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}

/// Waits until `cond` holds, bounded.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}
