//! A scripted daemon for tests of the emulator: it speaks the netlink protocol over the
//! emulator's Unix socket like `iwpmd`, maps ports by a fixed rule, and replaces the UDP
//! peer exchange with an in-memory directory of fake daemons. Knobs make it misbehave.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use iwpm_proto::consts::{
    err, IWPM_FLAGS_NO_PORT_MAP, IWPM_ULIB_NAME, NLM_F_REQUEST, RDMA_NL_IWCM,
};
use iwpm_proto::netlink::{
    decode_kernel_datagram, encode_daemon_msg, AddMappingReply, DaemonMsg, Envelope, Hello,
    KernelFrame, KernelMsg, MapInfoNumReply, MapInfoRequest, NlString, QueryMappingReply,
    RegPidReply,
};
use iwpm_proto::sockaddr::SockAddrStorage;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// How the fake daemon behaves.
#[derive(Clone, Debug)]
pub(crate) struct Behaviour {
    /// Mapped port = local port + offset (ignored under NO_PORT_MAP, as in rdma-core).
    pub port_offset: u16,
    /// Every port-mapped mapping gets this port (to make mappings collide).
    pub fixed_mapped_port: Option<u16>,
    /// Answer REG_PID.
    pub answer_reg_pid: bool,
    /// Answer ADD and QUERY.
    pub answer_mappings: bool,
    /// Header flags of every message sent.
    pub flags: u16,
    /// Version in REG_PID replies.
    pub reg_pid_version: u16,
    /// Added to the mapped remote port of QUERY replies (a wrong mapping).
    pub remote_port_skew: u16,
    /// Replaces the mapped remote IP of QUERY replies.
    pub remote_ip_override: Option<IpAddr>,
    /// Send REMOTE_INFO when a peer asks.
    pub send_remote_info: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            port_offset: 0,
            fixed_mapped_port: None,
            answer_reg_pid: true,
            answer_mappings: true,
            flags: NLM_F_REQUEST,
            reg_pid_version: 4,
            remote_port_skew: 0,
            remote_ip_override: None,
            send_remote_info: true,
        }
    }
}

/// A peer-protocol REQUEST, in memory.
struct PeerQuery {
    cp: SocketAddr,
    mapped_cp: SocketAddr,
    ap: SocketAddr,
    reply: Sender<Option<SocketAddr>>,
}

/// Which fake daemon serves which IP (the stand-in for UDP 3935).
#[derive(Clone, Default)]
pub(crate) struct Directory(Arc<Mutex<HashMap<IpAddr, Sender<PeerQuery>>>>);

/// What the fake daemon saw.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    pub frames: Vec<KernelFrame>,
    pub reg_pids: usize,
    pub adds: usize,
    pub queries: usize,
    pub removes: Vec<SocketAddr>,
    pub mapinfo_records: Vec<(SocketAddr, SocketAddr, Option<u32>)>,
    pub mapinfo_nums: Vec<u32>,
    pub dones: Vec<i32>,
    pub errors: Vec<i32>,
    pub hello_version: Option<u16>,
}

pub(crate) struct FakeDaemon {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub seen: Arc<Mutex<Seen>>,
}

impl FakeDaemon {
    /// Starts a daemon for the kernel socket at `kernel`, serving `ips` in `dir`.
    pub(crate) fn start(
        kernel: &Path,
        ips: &[IpAddr],
        dir: &Directory,
        behaviour: Behaviour,
    ) -> Self {
        let pid = 10_000 + COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("iwpm-fake-{}-{}", std::process::id(), pid);
        let socket =
            UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        socket.connect(kernel).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let (qtx, qrx) = mpsc::channel();
        for ip in ips {
            dir.0.lock().unwrap().insert(*ip, qtx.clone());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut d = Daemon {
            socket,
            pid,
            seq: 0,
            behaviour,
            mappings: Vec::new(),
            dir: dir.clone(),
            own_ips: ips.to_vec(),
            queries: qrx,
            seen: seen.clone(),
            accepted: 0,
        };
        let s = stop.clone();
        let thread = std::thread::spawn(move || d.run(&s));
        FakeDaemon {
            stop,
            thread: Some(thread),
            seen,
        }
    }

    pub(crate) fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// Stops the daemon (closing its socket, as a crash would).
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.halt();
    }
}

struct Daemon {
    socket: UnixDatagram,
    pid: u32,
    seq: u32,
    behaviour: Behaviour,
    /// (local, mapped, no_port_map)
    mappings: Vec<(SocketAddr, SocketAddr)>,
    dir: Directory,
    own_ips: Vec<IpAddr>,
    queries: Receiver<PeerQuery>,
    seen: Arc<Mutex<Seen>>,
    accepted: u32,
}

fn sa(s: &SockAddrStorage) -> SocketAddr {
    s.to_socket_addr().expect("inet address")
}

fn st(a: SocketAddr) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(a)
}

impl Daemon {
    fn run(&mut self, stop: &AtomicBool) {
        self.send(DaemonMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        }));
        self.send(DaemonMsg::MapInfo(MapInfoRequest {
            ulib_name: NlString::new(IWPM_ULIB_NAME),
            ulib_version: 4,
            unknown: vec![],
        }));
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Acquire) {
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let data = buf[..n].to_vec();
                    for f in decode_kernel_datagram(&data, 4) {
                        let f = f.expect("kernel sends valid messages");
                        self.on_frame(f);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("fake daemon recv: {e}"),
            }
            while let Ok(q) = self.queries.try_recv() {
                let answer = self.answer_peer(&q);
                let _ = q.reply.send(answer);
            }
        }
    }

    fn send(&mut self, msg: DaemonMsg) {
        let env = Envelope {
            client: RDMA_NL_IWCM,
            flags: self.behaviour.flags,
            seq: self.seq,
            pid: self.pid,
        };
        self.seq += 1;
        let mut buf = Vec::new();
        encode_daemon_msg(&env, &msg, &mut buf);
        self.socket.send(&buf).expect("send to the emulator");
    }

    fn map(&self, local: SocketAddr, flags: Option<u32>) -> SocketAddr {
        if flags.unwrap_or(0) & IWPM_FLAGS_NO_PORT_MAP != 0 {
            return local;
        }
        let port = self
            .behaviour
            .fixed_mapped_port
            .unwrap_or(local.port().wrapping_add(self.behaviour.port_offset));
        SocketAddr::new(local.ip(), port)
    }

    fn on_frame(&mut self, f: KernelFrame) {
        self.seen.lock().unwrap().frames.push(f.clone());
        match f {
            KernelFrame::Msg(env, KernelMsg::RegPid(m)) => {
                self.seen.lock().unwrap().reg_pids += 1;
                if self.behaviour.answer_reg_pid {
                    let ibdev = NlString::new(&m.ibdev_name.to_string_lossy());
                    self.send(DaemonMsg::RegPid(RegPidReply {
                        seq: env.seq,
                        ibdev_name: ibdev,
                        ulib_name: NlString::new(IWPM_ULIB_NAME),
                        ulib_version: self.behaviour.reg_pid_version,
                        err: 0,
                        unknown: vec![],
                    }));
                }
            }
            KernelFrame::Msg(env, KernelMsg::AddMapping(m)) => {
                self.seen.lock().unwrap().adds += 1;
                let local = sa(&m.addr);
                let mapped = self.map(local, m.flags);
                self.mappings.push((local, mapped));
                if self.behaviour.answer_mappings {
                    self.send(DaemonMsg::AddMapping(AddMappingReply {
                        seq: env.seq,
                        addr: m.addr,
                        mapped_addr: st(mapped),
                        err: 0,
                        unknown: vec![],
                    }));
                }
            }
            KernelFrame::Msg(env, KernelMsg::QueryMapping(m)) => {
                self.seen.lock().unwrap().queries += 1;
                let local = sa(&m.local_addr);
                let remote = sa(&m.remote_addr);
                let mapped = self.map(local, m.flags);
                self.mappings.push((local, mapped));
                if !self.behaviour.answer_mappings {
                    return;
                }
                let q = PeerQuery {
                    cp: local,
                    mapped_cp: mapped,
                    ap: remote,
                    reply: mpsc::channel().0,
                };
                let answer = if self.own_ips.contains(&remote.ip()) {
                    self.answer_peer(&q)
                } else {
                    let peer = self.dir.0.lock().unwrap().get(&remote.ip()).cloned();
                    peer.and_then(|p| {
                        let (tx, rx) = mpsc::channel();
                        p.send(PeerQuery { reply: tx, ..q }).ok()?;
                        rx.recv_timeout(Duration::from_secs(2)).ok().flatten()
                    })
                };
                let (mapped_rem, err) = match answer {
                    Some(mut ma) => {
                        ma.set_port(ma.port().wrapping_add(self.behaviour.remote_port_skew));
                        if let Some(ip) = self.behaviour.remote_ip_override {
                            ma.set_ip(ip);
                        }
                        (ma, 0)
                    }
                    None => (remote, err::IWPM_REMOTE_QUERY_REJECT),
                };
                self.send(DaemonMsg::QueryMapping(QueryMappingReply {
                    seq: env.seq,
                    local_addr: m.local_addr,
                    remote_addr: m.remote_addr,
                    mapped_local_addr: st(mapped),
                    mapped_remote_addr: st(mapped_rem),
                    err,
                    unknown: vec![],
                }));
            }
            KernelFrame::Msg(_, KernelMsg::RemoveMapping(m)) => {
                let local = sa(&m.addr);
                self.seen.lock().unwrap().removes.push(local);
                if let Some(i) = self.mappings.iter().position(|(l, _)| *l == local) {
                    self.mappings.remove(i);
                }
            }
            KernelFrame::Msg(_, KernelMsg::MapInfo(r)) => {
                let (l, m) = (sa(&r.local_addr), sa(&r.mapped_addr));
                self.seen
                    .lock()
                    .unwrap()
                    .mapinfo_records
                    .push((l, m, r.flags));
                self.mappings.push((l, m));
                self.accepted += 1;
            }
            KernelFrame::Msg(env, KernelMsg::MapInfoNum(n)) => {
                self.seen.lock().unwrap().mapinfo_nums.push(n.send_num);
                let ack = self.accepted;
                self.send(DaemonMsg::MapInfoNum(MapInfoNumReply {
                    seq: env.seq,
                    send_num: n.send_num,
                    ack_num: ack,
                    unknown: vec![],
                }));
            }
            KernelFrame::Msg(_, KernelMsg::Hello(h)) => {
                self.seen.lock().unwrap().hello_version = Some(h.abi_version);
            }
            KernelFrame::Done {
                result: Some(r), ..
            } => self.seen.lock().unwrap().dones.push(r),
            KernelFrame::Error { error, .. } => self.seen.lock().unwrap().errors.push(error),
            _ => {}
        }
    }

    /// The passive side of the peer exchange: find the mapping, tell our kernel via
    /// REMOTE_INFO, answer with the mapped address.
    fn answer_peer(&mut self, q: &PeerQuery) -> Option<SocketAddr> {
        let (local, mapped) = *self.mappings.iter().find(|(l, _)| {
            l.port() == q.ap.port() && (l.ip() == q.ap.ip() || l.ip().is_unspecified())
        })?;
        if self.behaviour.send_remote_info {
            self.send(DaemonMsg::RemoteInfo(QueryMappingReply {
                seq: 0,
                local_addr: st(local),
                remote_addr: st(q.cp),
                mapped_local_addr: st(mapped),
                mapped_remote_addr: st(q.mapped_cp),
                err: 0,
                unknown: vec![],
            }));
        }
        let ip = if mapped.ip().is_unspecified() {
            q.ap.ip()
        } else {
            mapped.ip()
        };
        Some(SocketAddr::new(ip, mapped.port()))
    }
}
