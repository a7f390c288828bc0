//! The kernel end of a daemon's link, played by the test: a Unix datagram socket that
//! `iwpmd --kernel unix:PATH` talks to, with the kernel's header conventions and the
//! first exchanges (HELLO, MAPINFO, REG_PID) done the way the kernel does them: built by
//! [`iwpm_proto::kernel_side`], as every kernel stand-in's are. A test scripts anything
//! else byte by byte. Every wait is bounded.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iwpm_proto::consts::{IWPM_UABI_VERSION, IWPM_ULIB_NAME, RDMA_NL_IWCM};
use iwpm_proto::kernel_side::requests::{add_mapping, encode_request, hello_reply, reg_pid};
use iwpm_proto::netlink::{
    decode_daemon_datagram, DaemonFrame, DaemonMsg, Envelope, Hello, KernelMsg, NlString,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::daemon::{daemon_command, Daemon, WAIT};
use crate::fs::ScratchDir;

/// The emulated kernel end: a Unix datagram socket at `path`.
#[derive(Debug)]
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
        self.send_raw(&encode_request(self.seq, msg));
        self.seq
    }

    /// Receives HELLO, answers HELLO(4), receives the MAPINFO request. Returns the HELLO
    /// envelope.
    pub fn handshake(&mut self) -> Envelope {
        let (env, msg) = self.recv_msg(WAIT).expect("no HELLO from the daemon");
        assert!(
            matches!(
                msg,
                DaemonMsg::Hello(Hello {
                    abi_version: IWPM_UABI_VERSION,
                    ..
                })
            ),
            "first message must be HELLO(4): {msg:?}"
        );
        self.send(&hello_reply(IWPM_UABI_VERSION));
        let (_, msg) = self.recv_msg(WAIT).expect("no MAPINFO request after HELLO");
        match msg {
            DaemonMsg::MapInfo(m) => {
                assert_eq!(m.ulib_name, NlString::new(IWPM_ULIB_NAME));
                assert_eq!(m.ulib_version, IWPM_UABI_VERSION);
            }
            other => panic!("expected MAPINFO request, got {other:?}"),
        }
        env
    }

    /// Registers client 2 the way the kernel does (REG_PID multicast); returns the reply.
    pub fn register(&mut self) -> DaemonMsg {
        let seq = self.send(&reg_pid(0, "lo", "siw_lo", IWPM_ULIB_NAME));
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
        let seq = self.send(&add_mapping(
            0,
            SockAddrStorage::from_socket_addr(addr),
            Some(0),
        ));
        let (_, msg) = self.recv_msg(WAIT).expect("no ADD_MAPPING reply");
        (seq, msg)
    }
}

impl Drop for FakeKernel {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One kernel -> daemon message with the kernel's header conventions and sequence number
/// `seq`, for a test that sends it raw (with other bytes, or twice).
pub use iwpm_proto::kernel_side::requests::encode_request as kernel_request;

/// [`Daemon::start`](StartOnFakeKernel::start): a daemon linked to a [`FakeKernel`] (a
/// trait because the handle is [`iwpm_process`]'s; in the prelude, so a test still writes
/// `Daemon::start(..)`).
pub trait StartOnFakeKernel {
    /// Spawns the foreground daemon `binary` linked to `kernel`, peer sockets on
    /// `bind_v4:peer_port`.
    fn start(binary: &Path, kernel: &FakeKernel, bind_v4: Ipv4Addr, peer_port: u16) -> Daemon;
}

impl StartOnFakeKernel for Daemon {
    fn start(binary: &Path, kernel: &FakeKernel, bind_v4: Ipv4Addr, peer_port: u16) -> Daemon {
        Daemon::spawn(
            daemon_command(binary, &kernel.path, bind_v4, peer_port),
            peer_port,
        )
    }
}
