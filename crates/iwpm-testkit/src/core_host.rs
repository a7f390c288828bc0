//! Test harness: one [`iwpm_core::Host`] (the core with the fake port reservations,
//! [`Ports`], lent to it), a scripted kernel side (builds its messages and judges what the
//! core sends with [`iwpm_proto::kernel_side`], as every kernel stand-in does) and a
//! virtual clock. iwpm-core's
//! integration tests and its table bench drive the core through it, and so through the
//! same `Host` the daemon's shell drives: a duty `Host` adds to the core is tested here
//! too. The harness keeps no state file (no save policy).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_core::{
    Action, Core, CoreConfig, Host, KernelReceipt, PeerSocket, Previous, ProbeResult,
    RestoreReport, SettleReport,
};
use iwpm_proto::consts::{IWPM_UABI_VERSION, IWPM_ULIB_NAME, RDMA_NL_IWCM};
use iwpm_proto::kernel_side::requests::{
    add_mapping, encode_handler_done, encode_mapinfo_end, encode_mapinfo_record, hello_reply,
    mapinfo_num, query_mapping, reg_pid, remove_mapping,
};
use iwpm_proto::kernel_side::{dispatched, Answer, RequestKind, IWPM_NL_TIMEOUT};
use iwpm_proto::netlink::{
    decode_daemon_datagram, encode_error, encode_kernel_msg, DaemonFrame, DaemonMsg, Envelope,
    Hello, KernelMsg, MapInfoRecord, NetlinkError, NlHeader,
};
use iwpm_proto::peer::PeerMessage;
use iwpm_proto::sockaddr::SockAddrStorage;

/// Our netlink port id in tests.
pub const PID: u32 = 4242;

pub fn sa(s: &str) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(s.parse().unwrap())
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn config() -> CoreConfig {
    CoreConfig {
        netlink_pid: PID,
        ..CoreConfig::default()
    }
}

/// A peer datagram the core sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub via: PeerSocket,
    pub to: SocketAddr,
    pub msg: PeerMessage,
    pub raw: Vec<u8>,
}

/// The fake shell's port reservations (shared with the fuzz driver): grants the next free
/// port (or the asked one if free), fails on demand, and checks that every release names a
/// held reservation.
pub use crate::model::FakePorts as Ports;

/// One core under test, in the [`Host`] that lends it the fake ports: its clock and the
/// kernel side's queue.
#[derive(Debug)]
pub struct CoreHarness {
    /// The core and its port reservations. Inputs go through it (`h.host.handle_*`), as
    /// the daemon's do; what the core reports is read through [`CoreHarness::core`].
    pub host: Host<Ports>,
    pub now: Instant,
    pub kernel_seq: u32,
    pub kernel_in: VecDeque<(Envelope, DaemonMsg)>,
    pub peer_out: VecDeque<Sent>,
    pub ready: usize,
    /// Ops sent to the legacy client 3.
    pub legacy_out: Vec<u16>,
    /// When each kernel message (by header seq) was sent and its op, to check that requests
    /// the kernel waits for (REG_PID, ADD, QUERY) are never answered 10 s or more later.
    pub sent_at: HashMap<u32, (Instant, u16)>,
    /// Kernel seqs already answered (reply or HANDLE_ERR), to check the reply-once rule.
    pub answered: HashSet<u32>,
    /// Order in which actions left the core: 'K' kernel datagram, 'P' peer datagram.
    pub order: String,
    /// What the last kernel datagram handed in was, as the core said.
    pub receipt: KernelReceipt,
    /// Finished probes ([`Action::ProbeDone`]), oldest first.
    pub probes_done: VecDeque<ProbeResult>,
    /// What settling restored mappings did since a test last took it ([`Action::Settled`]).
    pub settled: SettleReport,
    /// [`Action::RecoveryEnded`] seen (at most once).
    pub recovery_ended: u32,
    /// The last [`Action::TableChanged`]: generation and mapping count.
    pub table: (u64, usize),
    /// The core's invariants are checked after every this many pumps (1: each one). A
    /// flood of tens of thousands of datagrams sets it higher: each check walks the table.
    pub invariant_stride: u64,
    pumps: u64,
}

impl CoreHarness {
    pub fn new(config: CoreConfig, now: Instant) -> Self {
        CoreHarness {
            host: Host::new(config, Ports::default(), None, now),
            now,
            kernel_seq: 0,
            kernel_in: VecDeque::new(),
            peer_out: VecDeque::new(),
            ready: 0,
            legacy_out: Vec::new(),
            sent_at: HashMap::new(),
            answered: HashSet::new(),
            order: String::new(),
            receipt: KernelReceipt::default(),
            probes_done: VecDeque::new(),
            settled: SettleReport::default(),
            recovery_ended: 0,
            table: (0, 0),
            invariant_stride: 1,
            pumps: 0,
        }
    }

    /// A started host whose kernel answered HELLO(4), registered client 2, and with all
    /// output drained.
    pub fn booted() -> Self {
        Self::booted_with(config())
    }

    pub fn booted_with(config: CoreConfig) -> Self {
        let mut h = CoreHarness::new(config, Instant::now());
        h.boot();
        h
    }

    /// The core under test, for what it reports (stats, mappings, snapshots, invariants).
    pub fn core(&self) -> &Core {
        self.host.core()
    }

    /// The fake port reservations lent to the core.
    pub fn ports(&self) -> &Ports {
        self.host.ports()
    }

    /// The fake port reservations, to set how the next reservations are answered.
    pub fn ports_mut(&mut self) -> &mut Ports {
        self.host.ports_mut()
    }

    /// Starts the core (its HELLO goes out) and drains what it sent.
    pub fn start(&mut self) {
        self.host.start(self.now);
        self.pump();
    }

    /// Runs what is due now ([`Host::handle_timeout`]) and drains what it sent.
    pub fn timeout(&mut self) {
        self.host.handle_timeout(self.now);
        self.pump();
    }

    pub fn boot(&mut self) {
        self.start();
        let (env, msg) = self.expect_kernel();
        assert_eq!(env.seq, 0, "HELLO is the first message for client 2");
        assert!(matches!(
            msg,
            DaemonMsg::Hello(Hello {
                abi_version: IWPM_UABI_VERSION,
                ..
            })
        ));
        self.kernel_msg(hello_reply(IWPM_UABI_VERSION));
        self.kernel_done(env.seq, Some(0));
        let (_, msg) = self.expect_kernel();
        assert!(matches!(msg, DaemonMsg::MapInfo(_)), "{msg:?}");
        assert_eq!(self.ready, 1);
        self.reg_pid();
        let (_, msg) = self.expect_kernel();
        assert!(matches!(msg, DaemonMsg::RegPid(_)));
    }

    /// Starts the core as a restarted daemon with `previous`'s mappings; what it sent is
    /// drained.
    pub fn start_after_restart(&mut self, previous: Previous<'_>) -> RestoreReport {
        let report = self.host.start_after_restart(self.now, previous);
        self.pump();
        report
    }

    /// Drains every action, checking the table announcements: each moves the generation
    /// forward, and the last one counts the table as it is.
    pub fn pump(&mut self) {
        while let Some(a) = self.host.poll_action() {
            match a {
                Action::ToKernel(bytes) => {
                    self.order.push('K');
                    for f in decode_daemon_datagram(&bytes) {
                        match f {
                            Ok(DaemonFrame::Msg(env, msg)) => {
                                assert_eq!(env.pid, PID, "nlmsg_pid must be our port id");
                                assert!(
                                    dispatched(env.client, env.flags),
                                    "the kernel skips a message without NLM_F_REQUEST"
                                );
                                if let DaemonMsg::HandleErr(e) = &msg {
                                    assert_ne!(e.code, 0, "HANDLE_ERR code 0");
                                }
                                self.check_answer(&msg);
                                self.kernel_in.push_back((env, msg));
                            }
                            // A current kernel refuses the legacy client 3 (ABI-3 mode
                            // MAPINFO); C sends it too.
                            Err(NetlinkError::UnknownOp { client: 3, op }) => {
                                self.legacy_out.push(op)
                            }
                            other => panic!("kernel would not accept {other:?}"),
                        }
                    }
                }
                Action::ToPeer { via, to, datagram } => {
                    self.order.push('P');
                    let msg = PeerMessage::decode(&datagram).expect("valid peer datagram");
                    self.peer_out.push_back(Sent {
                        via,
                        to,
                        msg,
                        raw: datagram,
                    });
                }
                Action::Ready => self.ready += 1,
                Action::SaveState { .. } => {
                    panic!("the harness keeps no state file: nothing to save")
                }
                Action::ProbeDone(result) => self.probes_done.push_back(result),
                Action::Settled(report) => self.settled += report,
                Action::RecoveryEnded => {
                    self.recovery_ended += 1;
                    assert_eq!(self.recovery_ended, 1, "RecoveryEnded twice");
                }
                Action::TableChanged {
                    generation,
                    mappings,
                } => {
                    assert!(generation > self.table.0, "generation did not move");
                    self.table = (generation, mappings);
                }
            }
        }
        self.pumps += 1;
        if self.pumps % self.invariant_stride.max(1) == 0 {
            self.core().check_invariants().unwrap();
            assert_eq!(
                self.table.1,
                self.core().mappings().count(),
                "the last TableChanged does not count the table"
            );
        }
    }

    /// Each kernel request (and MAPINFO_NUM) is answered at most once, and a request the
    /// kernel waits for never [`IWPM_NL_TIMEOUT`] or more after it was sent (the kernel has
    /// given up by then). Seq 0 (MAPINFO records) is exempt.
    fn check_answer(&mut self, msg: &DaemonMsg) {
        let seq = match (Answer::of(msg), msg) {
            (Some(answer), _) => answer.seq(),
            (None, DaemonMsg::MapInfoNum(r)) => r.seq,
            _ => return,
        };
        if seq == 0 {
            return;
        }
        assert!(
            self.answered.insert(seq),
            "kernel seq {seq} answered twice: {msg:?}"
        );
        let waited = |(_, op): &&(Instant, u16)| RequestKind::of_op(*op).is_some();
        if let Some((at, _)) = self.sent_at.get(&seq).filter(waited) {
            assert!(
                self.now.duration_since(*at) < IWPM_NL_TIMEOUT,
                "late answer for seq {seq}: {msg:?}"
            );
        }
    }

    pub fn next_kseq(&mut self) -> u32 {
        self.kernel_seq += 1;
        self.kernel_seq
    }

    /// The kernel's header on its next request.
    pub fn env(&mut self) -> Envelope {
        Envelope::kernel_request(self.next_kseq())
    }

    /// Starts the core and answers its HELLO with ABI 4 (the MAPINFO window opens); what
    /// the core sent the kernel so far is dropped.
    pub fn start_answered(&mut self) {
        self.start();
        self.kernel_msg(hello_reply(IWPM_UABI_VERSION));
        self.kernel_in.clear();
    }

    /// Sends one kernel message in its own datagram; returns its header seq.
    pub fn kernel_msg(&mut self, msg: KernelMsg) -> u32 {
        let env = self.env();
        self.kernel_msg_with(env, &msg);
        env.seq
    }

    pub fn kernel_msg_with(&mut self, env: Envelope, msg: &KernelMsg) {
        self.sent_at.entry(env.seq).or_insert((self.now, msg.op()));
        let mut b = Vec::new();
        encode_kernel_msg(&env, msg, &mut b);
        self.kernel_raw(&b);
    }

    pub fn kernel_raw(&mut self, bytes: &[u8]) {
        self.receipt = self.host.handle_kernel_datagram(self.now, bytes);
        self.pump();
    }

    pub fn kernel_done(&mut self, seq: u32, result: Option<i32>) {
        let mut b = Vec::new();
        encode_handler_done(seq, PID, result, &mut b);
        self.kernel_raw(&b);
    }

    pub fn kernel_error(&mut self, seq: u32, error: i32, request: Option<&NlHeader>) {
        let mut b = Vec::new();
        encode_error(seq, PID, error, request, &mut b);
        self.kernel_raw(&b);
    }

    pub fn reg_pid(&mut self) -> u32 {
        self.kernel_msg(reg_pid(0, "eth0", "siw0", IWPM_ULIB_NAME))
    }

    pub fn add(&mut self, local: &str, flags: Option<u32>) -> u32 {
        self.kernel_msg(add_mapping(0, sa(local), flags))
    }

    pub fn query(&mut self, local: &str, remote: &str, flags: Option<u32>) -> u32 {
        self.kernel_msg(query_mapping(0, sa(local), sa(remote), flags))
    }

    pub fn remove(&mut self, local: &str) -> u32 {
        self.kernel_msg(remove_mapping(0, sa(local)))
    }

    pub fn mapinfo_records(&mut self, records: &[(&str, &str, Option<u32>)]) {
        let mut b = Vec::new();
        for (l, m, f) in records {
            let rec = MapInfoRecord {
                local_addr: sa(l),
                mapped_addr: sa(m),
                flags: *f,
                unknown: vec![],
            };
            encode_mapinfo_record(RDMA_NL_IWCM, rec, &mut b);
        }
        encode_mapinfo_end(&mut b);
        self.kernel_raw(&b);
    }

    pub fn mapinfo_num(&mut self, send_num: u32) -> u32 {
        self.kernel_msg(mapinfo_num(send_num))
    }

    pub fn expect_kernel(&mut self) -> (Envelope, DaemonMsg) {
        self.kernel_in.pop_front().expect("a message to the kernel")
    }

    pub fn no_kernel(&self) {
        assert!(
            self.kernel_in.is_empty(),
            "unexpected: {:?}",
            self.kernel_in
        );
    }

    /// Expects an ADD reply for `seq`; returns the mapped address.
    pub fn expect_add_reply(&mut self, seq: u32) -> SockAddrStorage {
        match self.expect_kernel() {
            (_, DaemonMsg::AddMapping(r)) => {
                assert_eq!(r.seq, seq);
                assert_eq!(r.err, 0);
                r.mapped_addr
            }
            other => panic!("expected ADD reply, got {other:?}"),
        }
    }

    pub fn expect_handle_err(&mut self, seq: u32, code: u16) {
        match self.expect_kernel() {
            (env, DaemonMsg::HandleErr(e)) => {
                assert_eq!(env.client, RDMA_NL_IWCM);
                assert_eq!((e.seq, e.code), (seq, code));
            }
            other => panic!("expected HANDLE_ERR {code}, got {other:?}"),
        }
    }

    pub fn expect_peer(&mut self) -> Sent {
        self.peer_out.pop_front().expect("a peer datagram")
    }

    pub fn no_peer(&self) {
        assert!(self.peer_out.is_empty(), "unexpected: {:?}", self.peer_out);
    }

    /// Moves the clock forward by `d`, running every timer on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.host.poll_timeout() {
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            self.timeout();
        }
        self.now = end;
    }

    pub fn peer(&mut self, via: PeerSocket, from: &str, msg: &PeerMessage) {
        self.host
            .handle_peer_datagram(self.now, via, addr(from), &msg.encode());
        self.pump();
    }

    /// A datagram as it came off the wire (its unused bytes included).
    pub fn peer_raw(&mut self, via: PeerSocket, from: &str, datagram: &[u8]) {
        self.host
            .handle_peer_datagram(self.now, via, addr(from), datagram);
        self.pump();
    }

    /// Answers the ACCEPT `accept` as rdma-core (and our active side) does: the ACK is the
    /// ACCEPT's bytes with the type changed, so its echo cookie comes back.
    pub fn ack(&mut self, via: PeerSocket, from: &str, accept: &Sent) {
        let ack = ack_of(accept);
        self.peer_raw(via, from, &ack);
    }

    /// How many REMOTE_INFOs the kernel side received since the last look; clears what
    /// it received.
    pub fn take_remote_infos(&mut self) -> usize {
        let n = self
            .kernel_in
            .iter()
            .filter(|(_, m)| matches!(m, DaemonMsg::RemoteInfo(_)))
            .count();
        self.kernel_in.clear();
        n
    }

    pub fn refcount(&self, local: &str) -> Option<u32> {
        let ep = addr(local).into();
        self.core()
            .mappings()
            .find(|m| m.local_endpoint == ep)
            .map(|m| m.refcount)
    }
}

/// The ACK an active side builds from `accept`: every byte echoed, the type changed.
pub fn ack_of(accept: &Sent) -> Vec<u8> {
    let msg = PeerMessage::decode(&accept.raw).expect("an ACCEPT we sent decodes");
    let ack = PeerMessage::ack_for(&msg);
    match iwpm_proto::peer::peer_extension(&accept.raw) {
        Some(ext) => ack.encode_with_extension(&ext),
        None => ack.encode_with_echo(&iwpm_proto::peer::ipv4_echo(&accept.raw)),
    }
}
