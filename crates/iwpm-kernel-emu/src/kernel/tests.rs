//! State-machine tests: a scripted daemon talks to the emulated kernel through a
//! [`RecordingLink`], one message at a time.

use std::time::{Duration, Instant};

use iwpm_proto::consts::{
    err, IWPM_FLAGS_NO_PORT_MAP, IWPM_ULIB_NAME, NLMSG_DONE, NLM_F_MULTI, NLM_F_REQUEST,
    RDMA_NL_IWCM,
};
use iwpm_proto::netlink::{
    decode_kernel_datagram, encode_daemon_msg, AddMappingReply, DaemonMsg, Envelope, HandleErr,
    Hello, KernelFrame, KernelMsg, MapInfoNumReply, MapInfoRequest, NlHeader, NlString,
    QueryMappingReply, RegPidReply,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use super::*;

/// A link that records every datagram and can be told to fail; for tests of the state
/// machine without sockets (this file's alone: never in the crate's API).
#[derive(Debug)]
struct RecordingLink<A> {
    /// Every datagram sent, in order, with its destination and mode.
    sent: Vec<(A, Vec<u8>, SendMode)>,
    /// Destinations that refuse (as if no socket were bound there).
    refuse: Vec<A>,
    /// When set, every send fails with this error.
    fail_all: Option<SendError>,
    /// Fail the next N sends with `WouldBlock` (a full receive queue).
    full_for: usize,
}

impl<A> Default for RecordingLink<A> {
    fn default() -> Self {
        RecordingLink {
            sent: Vec::new(),
            refuse: Vec::new(),
            fail_all: None,
            full_for: 0,
        }
    }
}

impl<A> RecordingLink<A> {
    /// Takes the datagrams recorded so far.
    fn take(&mut self) -> Vec<(A, Vec<u8>, SendMode)> {
        std::mem::take(&mut self.sent)
    }
}

impl<A: Clone + PartialEq> Link<A> for RecordingLink<A> {
    fn send(&mut self, to: &A, datagram: &[u8], mode: SendMode) -> Result<(), SendError> {
        if let Some(e) = self.fail_all {
            return Err(e);
        }
        if self.refuse.contains(to) {
            return Err(SendError::ConnRefused);
        }
        if self.full_for > 0 {
            self.full_for -= 1;
            return Err(SendError::WouldBlock);
        }
        self.sent.push((to.clone(), datagram.to_vec(), mode));
        Ok(())
    }
}

const DAEMON: u32 = 7;
const PID: u32 = 4242;

/// A storage from `"ip:port"` (test input, so a bad literal panics).
pub(super) fn sa(s: &str) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(s.parse().unwrap())
}

/// Asserts that the kernel recorded exactly one violation and that it matches `$pat`.
macro_rules! assert_violation {
    ($h:expr, $pat:pat) => {
        let v = $h.only_violation();
        assert!(matches!(v, $pat), "{v:?}");
    };
}

struct Harness {
    k: KernelIwpm<u32>,
    link: RecordingLink<u32>,
    now: Instant,
    dseq: u32,
}

/// What the kernel sent in reaction to one input: (destination, frames) per datagram.
type Sent = Vec<(u32, Vec<KernelFrame>, SendMode)>;

impl Harness {
    /// The one protocol violation the kernel recorded; panics unless there is exactly one.
    fn only_violation(&self) -> &Violation {
        match self.k.violations() {
            [v] => v,
            all => panic!("expected exactly one violation, got {all:?}"),
        }
    }

    fn new() -> Self {
        Self::with_config(KernelConfig::default())
    }

    fn with_config(config: KernelConfig) -> Self {
        Harness {
            k: KernelIwpm::new(config),
            link: RecordingLink::default(),
            now: Instant::now(),
            dseq: 0,
        }
    }

    fn sent(&mut self) -> Sent {
        let abi = self.k.abi_version();
        self.link
            .take()
            .into_iter()
            .map(|(to, bytes, mode)| {
                let frames = decode_kernel_datagram(&bytes, abi)
                    .into_iter()
                    .map(|f| f.expect("kernel output decodes"))
                    .collect();
                (to, frames, mode)
            })
            .collect()
    }

    fn send_with(&mut self, flags: u16, pid: u32, msg: &DaemonMsg) -> Sent {
        let buf = daemon_datagram(flags, pid, self.dseq, msg);
        self.dseq += 1;
        self.k
            .handle_datagram(self.now, &DAEMON, &buf, &mut self.link);
        self.sent()
    }

    /// A request of netlink type `ty` built by hand from `attrs` (type, value; each padded
    /// to 4 bytes), for what `DaemonMsg` cannot encode.
    fn send_raw(&mut self, ty: u16, seq: u32, attrs: &[(u16, Vec<u8>)]) -> Sent {
        let mut payload = Vec::new();
        for (attr, v) in attrs {
            payload.extend_from_slice(&((v.len() + 4) as u16).to_ne_bytes());
            payload.extend_from_slice(&attr.to_ne_bytes());
            payload.extend_from_slice(v);
            payload.resize(payload.len().div_ceil(4) * 4, 0);
        }
        let header = NlHeader {
            len: (16 + payload.len()) as u32,
            ty,
            flags: NLM_F_REQUEST,
            seq,
            pid: PID,
        };
        let mut buf = header.to_bytes().to_vec();
        buf.extend_from_slice(&payload);
        self.k
            .handle_datagram(self.now, &DAEMON, &buf, &mut self.link);
        self.sent()
    }

    fn send(&mut self, msg: &DaemonMsg) -> Sent {
        self.send_with(NLM_F_REQUEST, PID, msg)
    }

    /// HELLO(4) then an empty MAPINFO request, as a starting daemon does.
    fn start_daemon(&mut self) {
        let out = self.send(&hello(4));
        assert_eq!(out.len(), 2, "HELLO reply then DONE: {out:?}");
        let out = self.send(&mapinfo_req());
        assert_eq!(out.len(), 1);
        assert_eq!(self.k.registration(), Registration::Incompl);
    }

    fn listen(&mut self, local: &str, flags: u32) -> MapToken {
        self.k
            .start_map(
                self.now,
                MapRequest {
                    local: sa(local),
                    remote: None,
                    flags,
                },
                &mut self.link,
            )
            .unwrap()
    }

    fn connect(&mut self, local: &str, remote: &str, flags: u32) -> MapToken {
        self.k
            .start_map(
                self.now,
                MapRequest {
                    local: sa(local),
                    remote: Some(sa(remote)),
                    flags,
                },
                &mut self.link,
            )
            .unwrap()
    }

    /// Answers the one REG_PID just multicast; returns what followed.
    /// A running daemon, one connect from `local` to `remote`, REG_PID answered: the
    /// connect's token and the seq of its pending QUERY_MAPPING.
    fn first_query(&mut self, local: &str, remote: &str) -> (MapToken, u32) {
        self.start_daemon();
        let token = self.connect(local, remote, 0);
        let out = self.answer_reg_pid(4);
        let seq = single_request(&out, |m| matches!(m, KernelMsg::QueryMapping(_)));
        (token, seq)
    }

    /// The outcome of the next mapping the kernel settled.
    fn settled(&mut self) -> MapOutcome {
        self.k.poll_map_done().expect("a mapping settled").1.outcome
    }

    /// The outcome of a listen on `local` that the kernel settles at once (no daemon to ask).
    fn listen_settled(&mut self, local: &str) -> MapOutcome {
        self.listen(local, 0);
        self.settled()
    }

    /// A running daemon and one listen on 127.0.0.1:4000: the seq of the REG_PID it asks.
    fn first_reg_pid(&mut self) -> u32 {
        self.start_daemon();
        self.listen("127.0.0.1:4000", 0);
        let out = self.sent();
        single_request(&out, |m| matches!(m, KernelMsg::RegPid(_)))
    }

    /// A running daemon, one listen on `local`, REG_PID answered: the seq of its pending
    /// ADD_MAPPING.
    fn first_add(&mut self, local: &str, flags: u32) -> u32 {
        self.start_daemon();
        self.listen(local, flags);
        let out = self.answer_reg_pid(4);
        single_request(&out, |m| matches!(m, KernelMsg::AddMapping(_)))
    }

    fn answer_reg_pid(&mut self, version: u16) -> Sent {
        let out = self.sent();
        let seq = single_request(&out, |m| matches!(m, KernelMsg::RegPid(_)));
        self.send(&reg_pid_reply(seq, "siw0", version))
    }

    /// Drives a listen through REG_PID (if due) and ADD with a mapping to `mapped`.
    fn mapped_listen(&mut self, local: &str, mapped: &str) -> MapResult {
        let token = self.listen(local, 0);
        let mut out = self.sent();
        if self.k.registration() != Registration::Valid {
            let seq = single_request(&out, |m| matches!(m, KernelMsg::RegPid(_)));
            out = self.send(&reg_pid_reply(seq, "siw0", 4));
        }
        let seq = single_request(&out, |m| matches!(m, KernelMsg::AddMapping(_)));
        self.send(&add_reply(seq, local, mapped));
        let (t, r) = self.k.poll_map_done().expect("map finished");
        assert_eq!(t, token);
        r
    }
}

/// `msg` as the daemon sends it: from `pid`, with `flags` and sequence number `seq`.
fn daemon_datagram(flags: u16, pid: u32, seq: u32, msg: &DaemonMsg) -> Vec<u8> {
    let env = Envelope {
        client: RDMA_NL_IWCM,
        flags,
        seq,
        pid,
    };
    let mut buf = Vec::new();
    encode_daemon_msg(&env, msg, &mut buf);
    buf
}

fn hello(v: u16) -> DaemonMsg {
    DaemonMsg::Hello(Hello {
        abi_version: v,
        unknown: vec![],
    })
}

fn mapinfo_req() -> DaemonMsg {
    DaemonMsg::MapInfo(MapInfoRequest {
        ulib_name: NlString::new(IWPM_ULIB_NAME),
        ulib_version: 4,
        unknown: vec![],
    })
}

fn reg_pid_reply(seq: u32, dev: &str, version: u16) -> DaemonMsg {
    DaemonMsg::RegPid(RegPidReply {
        seq,
        ibdev_name: NlString::new(dev),
        ulib_name: NlString::new(IWPM_ULIB_NAME),
        ulib_version: version,
        err: 0,
        unknown: vec![],
    })
}

fn add_reply(seq: u32, local: &str, mapped: &str) -> DaemonMsg {
    DaemonMsg::AddMapping(AddMappingReply {
        seq,
        addr: sa(local),
        mapped_addr: sa(mapped),
        err: 0,
        unknown: vec![],
    })
}

/// The QUERY_MAPPING reply addresses for a connect from 127.0.0.1:5000 to 127.0.0.2:4000:
/// local, remote, mapped local (port 41000), mapped remote (the peer did not map).
const ACTIVE_MAPPED: [&str; 4] = [
    "127.0.0.1:5000",
    "127.0.0.2:4000",
    "127.0.0.1:41000",
    "127.0.0.2:4000",
];

fn query_reply(seq: u32, addrs: [&str; 4], err: u16) -> DaemonMsg {
    DaemonMsg::QueryMapping(QueryMappingReply {
        seq,
        local_addr: sa(addrs[0]),
        remote_addr: sa(addrs[1]),
        mapped_local_addr: sa(addrs[2]),
        mapped_remote_addr: sa(addrs[3]),
        err,
        unknown: vec![],
    })
}

/// The header seq of the only kernel request matching `pred` in `out`.
fn single_request(
    out: &[(u32, Vec<KernelFrame>, SendMode)],
    pred: impl Fn(&KernelMsg) -> bool,
) -> u32 {
    let found: Vec<u32> = out
        .iter()
        .flat_map(|(_, frames, _)| frames)
        .filter_map(|f| match f {
            KernelFrame::Msg(env, m) if pred(m) => Some(env.seq),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "expected one matching request in {out:?}");
    found[0]
}

fn done_result(out: &[(u32, Vec<KernelFrame>, SendMode)]) -> Vec<i32> {
    out.iter()
        .flat_map(|(_, frames, _)| frames)
        .filter_map(|f| match f {
            KernelFrame::Done {
                result: Some(r), ..
            } => Some(*r),
            _ => None,
        })
        .collect()
}

#[test]
fn hello_negotiates_and_replies_before_done() {
    let mut h = Harness::new();
    let out = h.send(&hello(4));
    assert_eq!(out.len(), 2);
    let (to, frames, mode) = &out[0];
    assert_eq!((*to, *mode), (DAEMON, SendMode::NonBlocking));
    match &frames[..] {
        [KernelFrame::Msg(env, KernelMsg::Hello(m))] => {
            assert_eq!(m.abi_version, 4);
            assert_eq!((env.seq, env.pid, env.flags), (1, 0, NLM_F_REQUEST));
        }
        other => panic!("unexpected {other:?}"),
    }
    match &out[1].1[..] {
        [KernelFrame::Done { header, result }] => {
            assert_eq!(*result, Some(0));
            assert_eq!(
                (header.seq, header.pid, header.flags),
                (0, PID, NLM_F_MULTI)
            );
            assert_eq!(header.len, 20);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(h.k.pid(), PID as i32);
    assert_eq!(h.k.registration(), Registration::Incompl);
    assert_eq!(h.k.abi_version(), 4);
    assert_eq!(h.k.echo_seq(), 0);
    assert!(h.k.violations().is_empty());
}

#[test]
fn hello_above_four_is_clamped_and_below_is_stored() {
    let mut h = Harness::new();
    h.send(&hello(9));
    assert_eq!(h.k.abi_version(), 4);
    h.send(&hello(2));
    assert_eq!(h.k.abi_version(), 2);
    assert_eq!(
        *h.only_violation(),
        Violation::DownLevelVersion { op: 8, version: 2 }
    );
}

#[test]
fn no_daemon_marks_unavailable_then_stays_silent() {
    let mut h = Harness::new();
    let t = h.listen("127.0.0.1:4000", 0);
    assert!(h.sent().is_empty(), "nobody to multicast to");
    let (t2, r) = h.k.poll_map_done().unwrap();
    assert_eq!(t, t2);
    assert!(!r.mapped);
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::RegPidSendFailed { errno: -3 })
    );
    assert_eq!(h.k.pid(), IWPM_PID_UNAVAILABLE);
    assert_eq!(
        h.listen_settled("127.0.0.1:4001"),
        MapOutcome::Unmapped(UnmappedReason::NoDaemon {
            pid: IWPM_PID_UNAVAILABLE
        })
    );
    assert!(h.k.mapinfo().is_empty());
    assert_eq!(h.k.stats().reg_pid_sent, 1);
    // A HELLO revives it.
    h.start_daemon();
    h.listen("127.0.0.1:4002", 0);
    let out = h.sent();
    single_request(&out, |m| matches!(m, KernelMsg::RegPid(_)));
}

#[test]
fn passive_flow_register_add_remove() {
    let mut h = Harness::new();
    h.start_daemon();
    let token = h.listen("127.0.0.1:4000", 0);
    let out = h.sent();
    assert_eq!(out.len(), 1);
    let (to, frames, _) = &out[0];
    assert_eq!(*to, DAEMON);
    let KernelFrame::Msg(env, KernelMsg::RegPid(req)) = &frames[0] else {
        panic!("expected REG_PID, got {frames:?}")
    };
    // HELLO reply used seq 1; echo = the MAPINFO request's header seq (1).
    assert_eq!(env.seq, 2);
    assert_eq!(req.echo_seq, 1);
    assert_eq!(req.ibdev_name.raw().len(), 32);
    assert_eq!(req.if_name.raw().len(), 16);
    assert_eq!(req.ibdev_name.as_bytes(), b"siw0");

    let out = h.send(&reg_pid_reply(2, "siw0", 4));
    // DONE for the reply first, then the woken caller's ADD.
    assert_eq!(done_result(&out[..1]), [0]);
    let KernelFrame::Msg(env, KernelMsg::AddMapping(add)) = &out[1].1[0] else {
        panic!("expected ADD, got {out:?}")
    };
    assert_eq!(out[1].2, SendMode::Wait);
    assert_eq!(env.seq, 3);
    assert_eq!(add.echo_seq, 2, "echo = REG_PID reply header seq");
    assert_eq!(add.flags, Some(0));
    assert_eq!(h.k.registration(), Registration::Valid);

    let out = h.send(&add_reply(3, "127.0.0.1:4000", "127.0.0.1:40000"));
    assert_eq!(done_result(&out), [0]);
    let (t, r) = h.k.poll_map_done().unwrap();
    assert_eq!(t, token);
    assert!(r.mapped);
    assert_eq!(r.outcome, MapOutcome::Mapped);
    assert_eq!(r.m_local, sa("127.0.0.1:40000"));
    assert_eq!(h.k.mapinfo().len(), 1);

    h.k.remove_mapping(&r.request.local, &r.m_local, &mut h.link);
    let out = h.sent();
    let KernelFrame::Msg(env, KernelMsg::RemoveMapping(rm)) = &out[0].1[0] else {
        panic!("expected REMOVE, got {out:?}")
    };
    assert_eq!(env.seq, 4);
    assert_eq!(rm.addr, sa("127.0.0.1:4000"));
    assert_eq!(rm.flags, None);
    assert!(h.k.mapinfo().is_empty());
    assert!(h.k.violations().is_empty(), "{:?}", h.k.violations());
}

#[test]
fn wire_sizes_match_the_kernel() {
    let mut h = Harness::new();
    let raw = |h: &mut Harness| -> Vec<usize> { h.link.take().iter().map(|s| s.1.len()).collect() };
    let buf = daemon_datagram(NLM_F_REQUEST, PID, 0, &hello(4));
    h.k.handle_datagram(h.now, &DAEMON, &buf, &mut h.link);
    assert_eq!(raw(&mut h), [24, 20], "HELLO reply, DONE");
    h.listen("127.0.0.1:4000", 1);
    assert_eq!(raw(&mut h), [116], "REG_PID");
    let buf = daemon_datagram(NLM_F_REQUEST, PID, 0, &reg_pid_reply(2, "siw0", 4));
    h.k.handle_datagram(h.now, &DAEMON, &buf, &mut h.link);
    assert_eq!(raw(&mut h), [20, 164], "DONE, ADD v4");
    h.connect("127.0.0.1:5000", "127.0.0.2:4000", 1);
    assert_eq!(raw(&mut h), [296], "QUERY v4");
    h.k.remove_mapping(&sa("127.0.0.1:5000"), &sa("127.0.0.1:5000"), &mut h.link);
    assert_eq!(raw(&mut h), [156], "REMOVE");
}

#[test]
fn active_reject_is_unmapped_with_identity_mapinfo() {
    let mut h = Harness::new();
    let (token, seq) = h.first_query("127.0.0.1:5000", "127.0.0.2:4000");
    let out = h.send(&query_reply(
        seq,
        ACTIVE_MAPPED,
        err::IWPM_REMOTE_QUERY_REJECT,
    ));
    assert_eq!(done_result(&out), [0]);
    let (t, r) = h.k.poll_map_done().unwrap();
    assert_eq!(t, token);
    assert!(r.mapped);
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::ErrorCode {
            kind: RequestKind::QueryMapping,
            code: 16
        })
    );
    assert_eq!(r.m_local, sa("127.0.0.1:5000"));
    assert_eq!(r.m_remote, Some(sa("127.0.0.2:4000")));
    assert_eq!(h.k.mapinfo().entries()[0].mapped, sa("127.0.0.1:5000"));
    assert!(h.k.violations().is_empty());
}

#[test]
fn active_success_and_wildcard_remote_ip() {
    let mut h = Harness::new();
    let (_, seq) = h.first_query("127.0.0.1:5000", "127.0.0.2:4000");
    h.send(&query_reply(
        seq,
        [
            "127.0.0.1:5000",
            "127.0.0.2:4000",
            "127.0.0.1:41000",
            "0.0.0.0:42000",
        ],
        0,
    ));
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(r.outcome, MapOutcome::Mapped);
    assert_eq!(r.m_local, sa("127.0.0.1:41000"));
    assert_eq!(r.m_remote, Some(sa("127.0.0.2:42000")));
    assert!(h.k.violations().is_empty());
}

#[test]
fn timeout_then_late_reply_is_flagged_not_processed() {
    let mut h = Harness::new();
    let (_, seq) = h.first_query("127.0.0.1:5000", "127.0.0.2:4000");
    assert_eq!(h.k.poll_timeout(), Some(h.now + Duration::from_secs(10)));
    h.k.handle_timeout(h.now + Duration::from_secs(9), &mut h.link);
    assert!(h.k.poll_map_done().is_none());
    h.now += Duration::from_secs(10);
    h.k.handle_timeout(h.now, &mut h.link);
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::Timeout {
            kind: RequestKind::QueryMapping,
            seq
        })
    );
    assert!(r.mapped, "a timed-out mapping still gets REMOVE on destroy");
    assert_eq!(h.k.poll_timeout(), None);
    let out = h.send(&query_reply(seq, ACTIVE_MAPPED, 0));
    assert_eq!(
        done_result(&out),
        [0],
        "the kernel finds the leaked request"
    );
    assert!(h.k.poll_map_done().is_none());
    assert_eq!(h.k.violations(), [Violation::LateReply { op: 2, seq }]);
}

#[test]
fn duplicate_unknown_and_wrong_op_replies() {
    let mut h = Harness::new();
    h.start_daemon();
    let r = h.mapped_listen("127.0.0.1:4000", "127.0.0.1:40000");
    assert!(r.outcome.is_mapped());
    let add_seq = h.k.last_seq();
    // Second reply for the same seq.
    let out = h.send(&add_reply(add_seq, "127.0.0.1:4000", "127.0.0.1:40000"));
    assert_eq!(done_result(&out), [0]);
    // A seq never used.
    let out = h.send(&add_reply(999, "127.0.0.1:4000", "127.0.0.1:40000"));
    assert_eq!(done_result(&out), [-22]);
    // A QUERY reply naming a pending ADD.
    h.listen("127.0.0.1:4001", 0);
    let out = h.sent();
    let seq = single_request(&out, |m| matches!(m, KernelMsg::AddMapping(_)));
    h.send(&query_reply(seq, ["127.0.0.1:4001"; 4], 0));
    assert!(h.k.poll_map_done().is_none(), "still waiting");
    assert_eq!(
        h.k.violations(),
        [
            Violation::DuplicateReply {
                op: 1,
                seq: add_seq
            },
            Violation::UnknownSeq { op: 1, seq: 999 },
            Violation::WrongReplyOp {
                op: 2,
                seq,
                expected: RequestKind::AddMapping
            },
        ]
    );
}

#[test]
fn address_not_echoed_completes_with_15() {
    let mut h = Harness::new();
    let seq = h.first_add("127.0.0.1:4000", 0);
    let out = h.send(&add_reply(seq, "127.0.0.1:4001", "127.0.0.1:40000"));
    assert_eq!(done_result(&out), [0]);
    assert_eq!(
        h.settled(),
        MapOutcome::Unmapped(UnmappedReason::ErrorCode {
            kind: RequestKind::AddMapping,
            code: err::IWPM_USER_LIB_INFO_ERR
        })
    );
    assert_eq!(
        *h.only_violation(),
        Violation::AddressNotEchoed { op: 1, seq }
    );
}

#[test]
fn reply_without_request_flag_is_dropped_silently() {
    let mut h = Harness::new();
    let seq = h.first_reg_pid();
    let out = h.send_with(0, PID, &reg_pid_reply(seq, "siw0", 4));
    assert!(out.is_empty(), "no DONE, no ACK");
    assert_eq!(h.k.registration(), Registration::Incompl);
    assert_violation!(h, Violation::MissingRequestFlag { ty: 0x0800, .. });
}

#[test]
fn remove_mapping_from_daemon_gets_nlmsg_error() {
    let mut h = Harness::new();
    // Build op 3 by hand: SEQ + ADDR.
    let out = h.send_raw(
        0x0803,
        5,
        &[
            (1, 0u32.to_ne_bytes().to_vec()),
            (2, sa("127.0.0.1:1").0.to_vec()),
        ],
    );
    match &out[0].1[..] {
        [KernelFrame::Error {
            header: eh,
            error,
            request,
        }] => {
            assert_eq!(*error, -22);
            assert_eq!(eh.seq, 5);
            assert_eq!(request.unwrap().ty, 0x0803);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(h.k.violations(), [Violation::Undispatchable { ty: 0x0803 }]);
}

#[test]
fn remote_info_returns_einval_and_is_consumed_by_lookup() {
    let mut h = Harness::new();
    let msg = DaemonMsg::RemoteInfo(QueryMappingReply {
        seq: 0,
        local_addr: sa("127.0.0.1:4000"),
        remote_addr: sa("127.0.0.2:5000"),
        mapped_local_addr: sa("127.0.0.1:40000"),
        mapped_remote_addr: sa("127.0.0.2:41000"),
        err: 0,
        unknown: vec![],
    });
    let out = h.send(&msg);
    assert_eq!(done_result(&out), [-22]);
    assert_eq!(h.k.remote_info().len(), 1);
    assert_eq!(
        h.k.take_remote_info(&sa("127.0.0.1:40000"), &sa("127.0.0.2:41000")),
        Some(sa("127.0.0.2:5000"))
    );
    assert_eq!(h.k.stats().remote_info_hits, 1);
}

#[test]
fn handle_err_completes_and_code_zero_is_flagged() {
    let mut h = Harness::new();
    let seq = h.first_add("127.0.0.1:4000", 0);
    let out = h.send(&DaemonMsg::HandleErr(HandleErr {
        seq,
        code: err::IWPM_DUPLICATE_MAPPING_ERR,
        unknown: vec![],
    }));
    assert_eq!(done_result(&out), [0]);
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::ErrorCode {
            kind: RequestKind::AddMapping,
            code: 12
        })
    );
    // Unmatched HANDLE_ERR: 0, counted, not a violation.
    h.send(&DaemonMsg::HandleErr(HandleErr {
        seq: 0,
        code: 12,
        unknown: vec![],
    }));
    assert_eq!(h.k.stats().handle_err_unmatched, 1);
    assert!(h.k.violations().is_empty());

    h.listen("127.0.0.1:4001", 0);
    let out = h.sent();
    let seq = single_request(&out, |m| matches!(m, KernelMsg::AddMapping(_)));
    h.send(&DaemonMsg::HandleErr(HandleErr {
        seq,
        code: 0,
        unknown: vec![],
    }));
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::HandleErrZero {
            kind: RequestKind::AddMapping
        })
    );
    assert_eq!(r.m_local, sa("127.0.0.1:4001"));
    assert_eq!(h.k.violations(), [Violation::HandleErrZero { seq }]);
}

#[test]
fn abi3_with_no_port_map_is_quiet_einval() {
    let mut h = Harness::new();
    h.start_daemon();
    h.listen("127.0.0.1:4000", IWPM_FLAGS_NO_PORT_MAP);
    let out = h.answer_reg_pid(3);
    assert_eq!(done_result(&out), [0]);
    assert_eq!(out.len(), 1, "no ADD sent");
    assert_eq!(h.k.abi_version(), 3);
    let seq_before = h.k.last_seq();
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::Abi3NoPortMap)
    );
    assert!(r.mapped);
    // The quiet failure still consumed a seq number.
    assert_eq!(seq_before, 3);
    assert_eq!(
        *h.only_violation(),
        Violation::DownLevelVersion { op: 0, version: 3 }
    );
    // Without flags ABI 3 sends ADD without the FLAGS attribute.
    h.listen("127.0.0.1:4001", 0);
    let out = h.sent();
    match &out[0].1[0] {
        KernelFrame::Msg(_, KernelMsg::AddMapping(m)) => assert_eq!(m.flags, None),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn reg_pid_with_wrong_device_is_15_and_stays_unregistered() {
    let mut h = Harness::new();
    let seq = h.first_reg_pid();
    let out = h.send(&reg_pid_reply(seq, "siw1", 4));
    assert_eq!(done_result(&out), [0]);
    assert_eq!(out.len(), 1, "no ADD");
    let (_, r) = h.k.poll_map_done().unwrap();
    assert!(!r.mapped);
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::ErrorCode {
            kind: RequestKind::RegPid,
            code: 15
        })
    );
    assert_eq!(h.k.registration(), Registration::Incompl);
    assert_violation!(h, Violation::RegPidInfoMismatch { .. });
}

#[test]
fn add_send_failure_resets_pid_query_failure_does_not() {
    let mut h = Harness::new();
    h.start_daemon();
    h.mapped_listen("127.0.0.1:4000", "127.0.0.1:40000");
    h.link.refuse.push(DAEMON);
    h.connect("127.0.0.1:5000", "127.0.0.2:4000", 0);
    let (_, r) = h.k.poll_map_done().unwrap();
    assert_eq!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::SendFailed {
            kind: RequestKind::QueryMapping,
            errno: -111
        })
    );
    assert_eq!(h.k.pid(), PID as i32);
    h.listen("127.0.0.1:4001", 0);
    let (_, r) = h.k.poll_map_done().unwrap();
    assert!(matches!(
        r.outcome,
        MapOutcome::Unmapped(UnmappedReason::SendFailed {
            kind: RequestKind::AddMapping,
            ..
        })
    ));
    assert_eq!(h.k.pid(), IWPM_PID_UNDEFINED);
    // Both failed mappings were recorded as identities.
    assert_eq!(h.k.mapinfo().len(), 3);
    assert_eq!(
        h.listen_settled("127.0.0.1:4002"),
        MapOutcome::Unmapped(UnmappedReason::NoDaemon {
            pid: IWPM_PID_UNDEFINED
        })
    );
}

#[test]
fn hello_with_pid_zero_is_flagged_and_not_answered() {
    let mut h = Harness::new();
    let out = h.send_with(NLM_F_REQUEST, 0, &hello(4));
    assert_eq!(done_result(&out), [-111]);
    assert_eq!(out.len(), 1);
    assert!(!h.k.daemon_known());
    assert_eq!(h.k.violations(), [Violation::ZeroPid { op: 8 }]);
}

#[test]
fn bad_attributes_give_done_einval_and_leave_request_pending() {
    let mut h = Harness::new();
    let seq = h.first_reg_pid();
    // A REG_PID reply without the ERR attribute (attribute 5).
    let out = h.send_raw(
        0x0800,
        77,
        &[
            (1, seq.to_ne_bytes().to_vec()),
            (2, b"siw0\0".to_vec()),
            (3, b"iWarpPortMapperUser\0".to_vec()),
            (4, 4u16.to_ne_bytes().to_vec()),
        ],
    );
    assert_eq!(done_result(&out), [-22]);
    assert_eq!(h.k.pending_requests(), 1);
    assert_violation!(h, Violation::BadAttributes { op: 0, .. });
}

#[test]
fn mapinfo_num_ack_mismatch_and_unsolicited() {
    let mut h = Harness::new();
    h.start_daemon();
    h.send(&DaemonMsg::MapInfoNum(MapInfoNumReply {
        seq: 0,
        send_num: 2,
        ack_num: 1,
        unknown: vec![],
    }));
    assert_eq!(
        h.k.violations(),
        [
            Violation::UnsolicitedMapInfoNum { send_num: 2 },
            Violation::MapInfoAckMismatch { sent: 2, acked: 1 }
        ]
    );
}

#[test]
fn pid_mismatch_on_reply_is_flagged() {
    let mut h = Harness::new();
    let seq = h.first_add("127.0.0.1:4000", 0);
    h.send_with(
        NLM_F_REQUEST,
        PID + 1,
        &add_reply(seq, "127.0.0.1:4000", "127.0.0.1:40000"),
    );
    assert_eq!(
        h.k.violations(),
        [Violation::PidMismatch {
            op: 1,
            pid: PID + 1,
            expected: PID as i32
        }]
    );
}

#[test]
fn no_port_map_must_be_identity() {
    let mut h = Harness::new();
    let seq = h.first_add("127.0.0.1:4000", IWPM_FLAGS_NO_PORT_MAP);
    h.send(&add_reply(seq, "127.0.0.1:4000", "127.0.0.1:40000"));
    let (_, r) = h.k.poll_map_done().unwrap();
    assert!(r.outcome.is_mapped(), "the kernel itself accepts it");
    assert_violation!(h, Violation::NoPortMapNotIdentity { op: 1, .. });
}

/// Fills the mapinfo table with `n` mapped listens, then restarts the daemon.
fn replay(n: usize) -> (Harness, Sent) {
    let mut h = Harness::new();
    h.start_daemon();
    for i in 0..n {
        let port = 10000 + i;
        h.mapped_listen(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{}", port + 20000),
        );
    }
    assert_eq!(h.k.mapinfo().len(), n);
    h.send(&hello(4));
    let out = h.send(&mapinfo_req());
    (h, out)
}

#[test]
fn mapinfo_replay_batches_of_twelve() {
    let (h, out) = replay(30);
    // Records 12 + 12 + 6 (each batch ends with a payload-less DONE), MAPINFO_NUM, DONE.
    assert_eq!(out.len(), 5);
    let records: Vec<usize> = out[..3]
        .iter()
        .map(|(_, f, _)| {
            f.iter()
                .filter(|x| matches!(x, KernelFrame::Msg(_, KernelMsg::MapInfo(_))))
                .count()
        })
        .collect();
    assert_eq!(records, [12, 12, 6]);
    for (_, frames, mode) in &out[..3] {
        assert_eq!(*mode, SendMode::NonBlocking);
        match frames.last() {
            Some(KernelFrame::Done { header, result }) => {
                assert_eq!(*result, None);
                assert_eq!((header.len, header.seq, header.flags), (16, 0, NLM_F_MULTI));
                assert_eq!(header.ty, NLMSG_DONE);
            }
            other => panic!("batch must end with DONE, got {other:?}"),
        }
        for f in &frames[..frames.len() - 1] {
            let KernelFrame::Msg(env, KernelMsg::MapInfo(r)) = f else {
                panic!("record expected")
            };
            assert_eq!((env.seq, env.flags, env.pid), (0, NLM_F_MULTI, 0));
            assert_eq!(r.flags, Some(0));
        }
    }
    match &out[3].1[..] {
        [KernelFrame::Msg(env, KernelMsg::MapInfoNum(n))] => {
            assert_eq!((n.seq, n.send_num), (0, 30));
            assert_eq!(env.flags, NLM_F_REQUEST);
            assert!(env.seq > 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(done_result(&out[4..]), [0]);
    assert_eq!(h.k.stats().mapinfo_records_sent, 30);
    assert_eq!(h.k.registration(), Registration::Incompl);
}

#[test]
fn mapinfo_replay_limit_227_ok_228_aborts() {
    let (h, out) = replay(227);
    assert_eq!(out.len(), 19 + 2, "19 batches, MAPINFO_NUM, DONE");
    assert_eq!(done_result(&out[20..]), [0]);
    assert_eq!(h.k.stats().replays_aborted, 0);

    let (h, out) = replay(228);
    assert_eq!(
        out.len(),
        19 + 1,
        "19 batches then the DONE, no MAPINFO_NUM"
    );
    assert!(out.iter().all(|(_, f, _)| !f
        .iter()
        .any(|x| matches!(x, KernelFrame::Msg(_, KernelMsg::MapInfoNum(_))))));
    assert_eq!(done_result(&out[19..]), [-12]);
    assert_eq!(h.k.stats().replays_aborted, 1);
}

#[test]
fn mapinfo_replay_aborts_on_full_queue() {
    let mut h = Harness::new();
    h.start_daemon();
    for i in 0..20 {
        let port = 10000 + i;
        h.mapped_listen(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{}", port + 20000),
        );
    }
    h.send(&hello(4));
    // First with room for everything.
    let buf = daemon_datagram(NLM_F_REQUEST, PID, 900, &mapinfo_req());
    h.link.full_for = 0;
    h.k.handle_datagram(h.now, &DAEMON, &buf, &mut h.link);
    let out = h.sent();
    assert_eq!(out.len(), 4, "two batches, MAPINFO_NUM, DONE");
    // Again, with the first batch failing.
    h.link.full_for = 1;
    h.k.handle_datagram(h.now, &DAEMON, &buf, &mut h.link);
    let out = h.sent();
    assert_eq!(done_result(&out), [-11]);
    assert_eq!(out.len(), 1);
}

mod props {
    use proptest::prelude::*;

    use super::*;

    fn arb_msg() -> impl Strategy<Value = Vec<u8>> {
        // Valid headers with random types, flags and payloads, or plain garbage.
        prop_oneof![
            (
                0u16..0x0c10,
                any::<u16>(),
                proptest::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(ty, flags, payload)| {
                    let h = NlHeader {
                        len: (16 + payload.len()) as u32,
                        ty,
                        flags,
                        seq: 1,
                        pid: PID,
                    };
                    let mut b = h.to_bytes().to_vec();
                    b.extend_from_slice(&payload);
                    b
                }),
            proptest::collection::vec(any::<u8>(), 0..64),
        ]
    }

    proptest! {
        /// Nothing a daemon sends makes the kernel panic, and everything it answers is
        /// well-formed netlink: at most one DONE or ERROR per message, back to the sender.
        #[test]
        fn any_input_is_survived(datagrams in proptest::collection::vec(arb_msg(), 1..8)) {
            let mut h = Harness::new();
            h.start_daemon();
            h.listen("127.0.0.1:4000", 0);
            for d in &datagrams {
                h.k.handle_datagram(h.now, &DAEMON, d, &mut h.link);
                for (to, bytes, _) in h.link.take() {
                    prop_assert_eq!(to, DAEMON);
                    for f in iwpm_proto::netlink::frames(&bytes) {
                        prop_assert!(f.is_ok());
                    }
                }
            }
            h.now += Duration::from_secs(11);
            h.k.handle_timeout(h.now, &mut h.link);
            prop_assert!(h.k.poll_map_done().is_some());
            prop_assert_eq!(h.k.pending_requests(), 0);
        }
    }
}
