//! State-machine fuzzing of [`Core`] (cargo feature `fuzzing`), shared by the cargo-fuzz
//! target `fuzz/fuzz_targets/core_sequence.rs` and the stable test
//! `tests/core_sequence.rs` (corpus replay + proptest sequences).
//!
//! [`core_sequence`] decodes arbitrary bytes into a [`Setup`] and a list of [`Op`]s (see
//! [`decode`]; [`encode`] is its inverse, used to build seeds) and plays them against one
//! core through its public API only, with a model of the shell (port reservations) and of
//! the kernel (requests sent, answers received, references it was told it holds). After
//! every step [`Driver`] checks, and panics with `core_sequence: …` on a violation:
//!
//! * [`Core::check_invariants`]; the gauges (`mappings` ≤ `max_mappings`, `exchanges_active`
//!   ≤ `max_exchanges`, `mappings` = the number of listed mappings); at most one mapping per
//!   exact local endpoint;
//! * reservations (made through the model shell's [`PortReservations`], within the kernel
//!   datagram's call): binds on the wildcard address, every release names a reservation
//!   the shell granted and still holds, and the reservations the shell holds are exactly
//!   those of the live mappings (a grant that makes no mapping is released within the same
//!   call); refusals, port 0 and unasked ports are injected ([`Op::Answer`]);
//! * the kernel's view: everything sent to the kernel decodes (by the kernel's rules), no
//!   `HANDLE_ERR` code 0, every `nlmsg_pid` is ours; each REG_PID/ADD/QUERY the kernel sent
//!   once is answered at most once, with the matching reply type, before `reply_deadline`;
//!   no answer for a request never sent; an ADD or QUERY answered with success leaves the
//!   mapping of that local address with at least as many references as the kernel was told
//!   it holds (successes minus its REMOVEs), with the mapped address it was told; a REMOVE
//!   from the owner takes exactly one reference;
//! * the peer side: every datagram sent decodes, leaves on a socket of its family; a
//!   timer-driven REQUEST/ACCEPT is a retransmission of one first sent less than
//!   `exchange_lifetime` ago, at most `max_retransmits` times, and no REQUEST is resent
//!   after its ACCEPT was acknowledged; after `handle_timeout(t)`, no timer is due at `t`;
//! * `Ready` at most once;
//! * at the end ([`Driver::finish`]): time run forward, every mapping REMOVEd by its owner: the table is empty, no exchange is left, every granted
//!   port was released exactly once and the counters agree.
//!
//! Memory stays bounded by the checked gauges and by the driver's own bounded lists; the
//! fuzzer's RSS limit catches the rest.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_proto::cidr::Cidr;
use iwpm_proto::consts::op::*;
use iwpm_proto::consts::{
    rdma_nl_get_type, IWPM_FLAGS_NO_PORT_MAP, IWPM_UABI_VERSION, IWPM_UABI_VERSION_MIN,
    IWPM_ULIB_NAME, NLM_F_MULTI, NLM_F_REQUEST, RDMA_NL_IWCM, RDMA_NL_RSVD,
};
use iwpm_proto::netlink::{
    decode_daemon_msg, decode_kernel_msg, encode_done, encode_error, encode_kernel_msg, frames,
    DaemonMsg, Envelope, Frame, Hello, KernelMsg, ManageMappingRequest, MapInfoNumRequest,
    MapInfoRecord, NlHeader, NlString, QueryMappingRequest, RegPidRequest,
};
use iwpm_proto::peer::{ipv4_echo, IpVersion, PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use crate::{
    Action, Core, CoreConfig, PeerAllow, PeerSocket, PortReservations, ReservationId, ReserveError,
};

/// Our netlink port id in the driven core.
pub const PID: u32 = 0x4657;

/// Most ops decoded from one input (longer inputs are cut).
pub const MAX_OPS: usize = 512;

/// Runs one fuzz input: decode, play every op with checks, then [`Driver::finish`].
pub fn core_sequence(data: &[u8]) {
    let (setup, ops) = decode(data);
    let mut d = Driver::new(setup);
    for op in &ops {
        d.step(op);
    }
    d.finish();
}

/// Configuration of one run, from the first three input bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// Bits 0-2: `max_mappings - 1`; bits 3-5: `max_exchanges - 1`; bits 6-7: retransmit
    /// count (0, 1, 3, 9).
    pub caps: u8,
    /// Bit 0: unused (reservations are answered within the call; recorded inputs set it to
    /// delay them); bit 1: skip the
    /// boot (HELLO 4 + REG_PID client 2); bit 2: 3 s exchange lifetime (shorter than the
    /// reply deadline) instead of 10 s; bit 3: `peer_allow` only `10.0.0.9/32` and
    /// `2001:db8::9/128` (one peer of each family; the other sources are dropped).
    pub mode: u8,
    /// Bits 0-2: `max_peer_exchanges - 1`; bits 3-4: `peer_source_quota` (1, 2, 4, 256);
    /// bits 5-6: `remote_info_budget` (0, 1, 2, 128); bit 7: `max_rejects_per_sec` 2
    /// instead of 100.
    pub limits: u8,
}

impl Setup {
    fn config(&self) -> CoreConfig {
        CoreConfig {
            netlink_pid: PID,
            max_mappings: usize::from(self.caps & 7) + 1,
            max_exchanges: usize::from((self.caps >> 3) & 7) + 1,
            max_retransmits: [0, 1, 3, 9][usize::from(self.caps >> 6)],
            exchange_lifetime: if self.mode & 4 != 0 {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(10)
            },
            max_peer_exchanges: usize::from(self.limits & 7) + 1,
            peer_source_quota: [1, 2, 4, 256][usize::from((self.limits >> 3) & 3)],
            remote_info_budget: [0, 1, 2, 128][usize::from((self.limits >> 5) & 3)],
            max_rejects_per_sec: if self.limits & 0x80 != 0 { 2 } else { 100 },
            handle_key: *b"iwpm-core fuzzing driver key 007",
            peer_allow: if self.mode & 8 != 0 {
                PeerAllow::only(
                    [peer_ip(0, false), peer_ip(0, true)]
                        .into_iter()
                        .filter_map(|ip| Cidr::new(ip, if ip.is_ipv4() { 32 } else { 128 }))
                        .collect(),
                )
            } else {
                PeerAllow::default()
            },
            ..CoreConfig::default()
        }
    }

    fn boot(&self) -> bool {
        self.mode & 2 == 0
    }
}

/// One step. Fields are raw fuzz bytes, interpreted when played (indices are taken modulo
/// the size of small address pools so that operations collide often).
// Each field is a raw fuzz byte that its variant's doc describes; one doc line per byte
// would only repeat the name.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// REG_PID; `lib % 4 == 3` sends another library name.
    RegPid { client: u8, lib: u8, seq: u8 },
    /// ADD_MAPPING of local address `local` (pool), flags by `flags`.
    Add {
        client: u8,
        local: u8,
        flags: u8,
        seq: u8,
    },
    /// QUERY_MAPPING of `local` towards `remote` (pools).
    Query {
        client: u8,
        local: u8,
        remote: u8,
        flags: u8,
        seq: u8,
    },
    /// REMOVE_MAPPING of `local`.
    Remove { client: u8, local: u8 },
    /// MAPINFO records (local, mapped, flags) in one datagram; `done & 1` appends DONE.
    MapInfo {
        client: u8,
        done: u8,
        records: Vec<[u8; 3]>,
    },
    /// MAPINFO_NUM.
    MapInfoNum { client: u8, send_num: u8 },
    /// The kernel's HELLO with ABI `abi % 7`.
    Hello { abi: u8 },
    /// `NLMSG_DONE` for a seq picked by `seq`, result picked by `result`.
    Done { seq: u8, result: u8 },
    /// `NLMSG_ERROR`, with or without an echoed request header.
    NlError { seq: u8, error: u8, request: u8 },
    /// Raw bytes on the kernel link.
    KernelRaw { data: Vec<u8> },
    /// A well-formed kernel message with one byte xor-ed.
    KernelMutate {
        base: u8,
        local: u8,
        at: u8,
        xor: u8,
    },
    /// A peer REQUEST for `ap` (local pool) from source `src` (peer pool).
    Request {
        ap: u8,
        src: u8,
        handle: u8,
        shape: u8,
    },
    /// ACCEPT of one of the REQUESTs the core sent.
    Accept { pick: u8, port: u8, from: u8 },
    /// REJECT of one of the REQUESTs the core sent.
    Reject { pick: u8, from: u8 },
    /// ACK of one of the ACCEPTs the core sent. `from >> 6`: 0-1 the ACCEPT's bytes echoed
    /// (what a real peer sends: its echo cookie verifies when it comes from the address the
    /// ACCEPT went to), 2 blind (written from the decoded ACCEPT: unused bytes zero, as an
    /// attacker who never saw it), 3 echoed with one echo byte flipped (`from >> 2 & 15`
    /// picks it; tampering).
    Ack { pick: u8, from: u8 },
    /// One of the datagrams the core sent, delivered back (optionally with a byte xor-ed).
    Echo { pick: u8, at: u8, xor: u8 },
    /// Raw bytes on a peer socket.
    PeerRaw { src: u8, data: Vec<u8> },
    /// A well-formed peer message with fuzz-chosen fields.
    PeerForged {
        ty: u8,
        ips: u8,
        handle: u64,
        ap_port: u16,
        cp_port: u16,
        extra: u8,
    },
    /// Runs the clock forward `ms` milliseconds, timer by timer.
    Advance { ms: u16 },
    /// Runs the clock forward `secs` seconds, timer by timer.
    AdvanceLong { secs: u16 },
    /// A late shell: one `handle_timeout` `ms × 16` ms ahead.
    Jump { ms: u16 },
    /// `handle_timeout(now)`.
    Tick,
    /// How the shell answers the next reservation: `kind % 6` 0-2 grant (the asked port,
    /// or a free one for port 0), 3 fail, 4 `Ok(0)`, 5 `Ok(port)`.
    Answer { kind: u8, port: u16 },
    /// Does nothing: it answered a reservation that was not pending, which the synchronous
    /// reservation API cannot express (kept so recorded inputs decode the same).
    AnswerUnknown { pick: u8, ok: u8, port: u16 },
    /// The kernel link lost input (`handle_kernel_overrun`).
    Overrun,
}

/// Number of op kinds (tag byte modulo this).
const NUM_TAGS: u8 = 25;

// ----- byte format -----

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = usize::from(self.u8()) % (max + 1);
        let start = self.pos.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.pos += n;
        self.data[start..end].to_vec()
    }
}

const MAX_RAW_KERNEL: usize = 160;
const MAX_RAW_PEER: usize = 72;
const MAX_RECORDS: usize = 4;

/// Decodes an input: three [`Setup`] bytes, then ops (a tag byte, then the op's fields;
/// missing bytes read as 0). At most [`MAX_OPS`] ops.
pub fn decode(data: &[u8]) -> (Setup, Vec<Op>) {
    let mut r = Reader { data, pos: 0 };
    let setup = Setup {
        caps: r.u8(),
        mode: r.u8(),
        limits: r.u8(),
    };
    let mut ops = Vec::new();
    while !r.done() && ops.len() < MAX_OPS {
        ops.push(decode_op(&mut r));
    }
    (setup, ops)
}

/// Decodes one op: a tag byte, then its fields.
fn decode_op(r: &mut Reader<'_>) -> Op {
    match r.u8() % NUM_TAGS {
        0 => Op::RegPid {
            client: r.u8(),
            lib: r.u8(),
            seq: r.u8(),
        },
        1 => Op::Add {
            client: r.u8(),
            local: r.u8(),
            flags: r.u8(),
            seq: r.u8(),
        },
        2 => Op::Query {
            client: r.u8(),
            local: r.u8(),
            remote: r.u8(),
            flags: r.u8(),
            seq: r.u8(),
        },
        3 => Op::Remove {
            client: r.u8(),
            local: r.u8(),
        },
        4 => {
            let client = r.u8();
            let done = r.u8();
            let n = usize::from(r.u8()) % (MAX_RECORDS + 1);
            let records = (0..n).map(|_| [r.u8(), r.u8(), r.u8()]).collect();
            Op::MapInfo {
                client,
                done,
                records,
            }
        }
        5 => Op::MapInfoNum {
            client: r.u8(),
            send_num: r.u8(),
        },
        6 => Op::Hello { abi: r.u8() },
        7 => Op::Done {
            seq: r.u8(),
            result: r.u8(),
        },
        8 => Op::NlError {
            seq: r.u8(),
            error: r.u8(),
            request: r.u8(),
        },
        9 => Op::KernelRaw {
            data: r.bytes(MAX_RAW_KERNEL),
        },
        10 => Op::KernelMutate {
            base: r.u8(),
            local: r.u8(),
            at: r.u8(),
            xor: r.u8(),
        },
        11 => Op::Request {
            ap: r.u8(),
            src: r.u8(),
            handle: r.u8(),
            shape: r.u8(),
        },
        12 => Op::Accept {
            pick: r.u8(),
            port: r.u8(),
            from: r.u8(),
        },
        13 => Op::Reject {
            pick: r.u8(),
            from: r.u8(),
        },
        14 => Op::Ack {
            pick: r.u8(),
            from: r.u8(),
        },
        15 => Op::Echo {
            pick: r.u8(),
            at: r.u8(),
            xor: r.u8(),
        },
        16 => Op::PeerRaw {
            src: r.u8(),
            data: r.bytes(MAX_RAW_PEER),
        },
        17 => Op::PeerForged {
            ty: r.u8(),
            ips: r.u8(),
            handle: r.u64(),
            ap_port: r.u16(),
            cp_port: r.u16(),
            extra: r.u8(),
        },
        18 => Op::Advance { ms: r.u16() },
        19 => Op::AdvanceLong { secs: r.u16() },
        20 => Op::Jump { ms: r.u16() },
        21 => Op::Tick,
        22 => Op::Answer {
            kind: r.u8(),
            port: r.u16(),
        },
        23 => Op::AnswerUnknown {
            pick: r.u8(),
            ok: r.u8(),
            port: r.u16(),
        },
        _ => Op::Overrun,
    }
}

/// The bytes [`decode`] turns into `setup` and `ops` (raw lists longer than the format
/// allows are cut).
pub fn encode(setup: Setup, ops: &[Op]) -> Vec<u8> {
    let mut w = vec![setup.caps, setup.mode, setup.limits];
    let bytes = |w: &mut Vec<u8>, b: &[u8], max: usize| {
        let n = b.len().min(max);
        w.push(n as u8);
        w.extend_from_slice(&b[..n]);
    };
    for op in ops {
        match op {
            Op::RegPid { client, lib, seq } => w.extend([0, *client, *lib, *seq]),
            Op::Add {
                client,
                local,
                flags,
                seq,
            } => w.extend([1, *client, *local, *flags, *seq]),
            Op::Query {
                client,
                local,
                remote,
                flags,
                seq,
            } => w.extend([2, *client, *local, *remote, *flags, *seq]),
            Op::Remove { client, local } => w.extend([3, *client, *local]),
            Op::MapInfo {
                client,
                done,
                records,
            } => {
                let n = records.len().min(MAX_RECORDS);
                w.extend([4, *client, *done, n as u8]);
                for r in &records[..n] {
                    w.extend(r);
                }
            }
            Op::MapInfoNum { client, send_num } => w.extend([5, *client, *send_num]),
            Op::Hello { abi } => w.extend([6, *abi]),
            Op::Done { seq, result } => w.extend([7, *seq, *result]),
            Op::NlError {
                seq,
                error,
                request,
            } => w.extend([8, *seq, *error, *request]),
            Op::KernelRaw { data } => {
                w.push(9);
                bytes(&mut w, data, MAX_RAW_KERNEL);
            }
            Op::KernelMutate {
                base,
                local,
                at,
                xor,
            } => w.extend([10, *base, *local, *at, *xor]),
            Op::Request {
                ap,
                src,
                handle,
                shape,
            } => w.extend([11, *ap, *src, *handle, *shape]),
            Op::Accept { pick, port, from } => w.extend([12, *pick, *port, *from]),
            Op::Reject { pick, from } => w.extend([13, *pick, *from]),
            Op::Ack { pick, from } => w.extend([14, *pick, *from]),
            Op::Echo { pick, at, xor } => w.extend([15, *pick, *at, *xor]),
            Op::PeerRaw { src, data } => {
                w.extend([16, *src]);
                bytes(&mut w, data, MAX_RAW_PEER);
            }
            Op::PeerForged {
                ty,
                ips,
                handle,
                ap_port,
                cp_port,
                extra,
            } => {
                w.extend([17, *ty, *ips]);
                w.extend(handle.to_le_bytes());
                w.extend(ap_port.to_le_bytes());
                w.extend(cp_port.to_le_bytes());
                w.push(*extra);
            }
            Op::Advance { ms } => {
                w.push(18);
                w.extend(ms.to_le_bytes());
            }
            Op::AdvanceLong { secs } => {
                w.push(19);
                w.extend(secs.to_le_bytes());
            }
            Op::Jump { ms } => {
                w.push(20);
                w.extend(ms.to_le_bytes());
            }
            Op::Tick => w.push(21),
            Op::Answer { kind, port } => {
                w.push(22);
                w.push(*kind);
                w.extend(port.to_le_bytes());
            }
            Op::AnswerUnknown { pick, ok, port } => {
                w.extend([23, *pick, *ok]);
                w.extend(port.to_le_bytes());
            }
            Op::Overrun => w.push(24),
        }
    }
    w
}

// ----- address pools -----

const LOCAL_IPS: [IpAddr; 6] = [
    IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
];
const LOCAL_PORTS: [u16; 3] = [4000, 4001, 40_000];
const LOCAL_POOL: u8 = 20;
/// First port the model shell grants for port-0 reservations.
const GRANT_BASE: u16 = 40_000;
const GRANT_PORTS: u16 = 8;

/// Local address number `i`: 18 IP endpoints, a non-IP family, and an IPv4 endpoint with
/// non-zero padding bytes (same endpoint as `10.0.0.1:4000`, other bytes).
fn local_addr(i: u8) -> SockAddrStorage {
    match i % LOCAL_POOL {
        18 => {
            let mut s = SockAddrStorage::default();
            s.0[0..2].copy_from_slice(&1u16.to_ne_bytes());
            s.0[2] = 0x0f;
            s
        }
        19 => {
            let mut s = SockAddrStorage::from_socket_addr(SocketAddr::new(LOCAL_IPS[1], 4000));
            s.0[8] = 0xaa;
            s.0[127] = 0x55;
            s
        }
        n => SockAddrStorage::from_socket_addr(SocketAddr::new(
            LOCAL_IPS[usize::from(n / 3)],
            LOCAL_PORTS[usize::from(n % 3)],
        )),
    }
}

fn remote_addr(i: u8) -> SockAddrStorage {
    let sa = |s: &str| SockAddrStorage::from_socket_addr(s.parse().unwrap_or(PEER_V4));
    match i % 6 {
        0 => sa("10.0.0.9:4000"),
        1 => sa("10.0.0.1:4001"),
        2 => sa("[2001:db8::9]:4000"),
        3 => sa("0.0.0.0:4000"),
        4 => sa("[2001:db8::1]:4000"),
        _ => SockAddrStorage::default(),
    }
}

const PEER_V4: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 3935);

fn peer_source(i: u8) -> SocketAddr {
    let ips = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0009)),
    ];
    let port = [3935, 33_333][usize::from((i >> 2) & 1)];
    SocketAddr::new(ips[usize::from(i % 4)], port)
}

fn peer_ip(i: u8, v6: bool) -> IpAddr {
    if v6 {
        [
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
        ][usize::from(i % 4)]
    } else {
        [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ][usize::from(i % 4)]
    }
}

fn client_of(c: u8) -> u8 {
    [RDMA_NL_IWCM, RDMA_NL_IWCM, RDMA_NL_RSVD, 9][usize::from(c % 4)]
}

fn listener_for(a: &SocketAddr) -> PeerSocket {
    if a.is_ipv4() {
        PeerSocket::V4Listener
    } else {
        PeerSocket::V6Listener
    }
}

fn socket_is_v4(s: PeerSocket) -> bool {
    matches!(s, PeerSocket::V4Listener | PeerSocket::V4Client)
}

fn fail(what: impl std::fmt::Display) -> ! {
    panic!("core_sequence: {what}")
}

// ----- the driver -----

/// What the model kernel knows of one request it sent (keyed by client and header seq).
#[derive(Debug)]
struct Request {
    /// Frames with a reply-wanting op (REG_PID, ADD, QUERY) sent with this key.
    count: u32,
    /// A frame of another op used this key too (its HANDLE_ERR would be indistinguishable).
    other: bool,
    op: u16,
    sent_at: Instant,
    /// The request's address (ADD: the address, QUERY: the local address), when the driver
    /// built the message itself.
    local: Option<SockAddrStorage>,
    answers: u32,
}

/// Bounded list of recent items.
#[derive(Debug)]
struct Recent<T>(VecDeque<T>);

impl<T: Clone> Recent<T> {
    const CAP: usize = 48;
    fn new() -> Self {
        Recent(VecDeque::new())
    }
    fn push(&mut self, t: T) {
        if self.0.len() == Self::CAP {
            self.0.pop_front();
        }
        self.0.push_back(t);
    }
    fn pick(&self, i: u8) -> Option<T> {
        if self.0.is_empty() {
            None
        } else {
            self.0.get(usize::from(i) % self.0.len()).cloned()
        }
    }
}

/// Where output is drained from: input handling or a timer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Input,
    Timer,
}

/// One core, its model shell and model kernel. See the module docs for what is checked.
#[derive(Debug)]
pub struct Driver {
    core: Core,
    config: CoreConfig,
    shell: ModelShell,
    now: Instant,
    /// Next fresh kernel header seq, and the last one used.
    next_seq: u32,
    last_seq: u32,
    requests: HashMap<(u8, u32), Request>,
    /// The kernel's view of references, per local endpoint: `kref - debt` = success answers
    /// (each confirms one distinct reference the core took) minus REMOVE messages sent (an
    /// upper bound of the REMOVEs that took a reference, counted when sent, whether they are
    /// processed at once, later in the same opaque datagram, or not at all); one of the two
    /// is 0.
    /// The core's count is never below `kref`.
    kref: HashMap<Endpoint, u32>,
    debt: HashMap<Endpoint, u32>,
    /// A REMOVE may be processed later within the call being drained (after an answer in
    /// the same opaque datagram): the core's state after the call no longer tells what it
    /// was when an answer was produced.
    removes_in_call: bool,
    ready: u32,
    /// Peer datagrams seen, for answers and echoes.
    sent_requests: Recent<(PeerMessage, SocketAddr)>,
    /// ACCEPTs as sent (echo cookies included) and where they went.
    sent_accepts: Recent<(Vec<u8>, SocketAddr)>,
    sent_all: Recent<(PeerSocket, SocketAddr, Vec<u8>)>,
    /// REQUEST/ACCEPT datagrams by (destination, bytes): first sent, retransmissions.
    origins: HashMap<(SocketAddr, Vec<u8>), (Instant, u32)>,
    /// Active exchanges (handle, cp) whose ACCEPT was acknowledged.
    acked: HashSet<(u64, SocketAddr)>,
    /// REMOTE_INFOs the core sent so far.
    remote_infos: u64,
    /// Ops played.
    steps: u64,
}

impl Driver {
    /// A started core (booted unless the setup says otherwise), all output drained.
    pub fn new(setup: Setup) -> Self {
        let config = setup.config();
        let now = Instant::now();
        let mut d = Driver {
            core: Core::new(config.clone(), now),
            config,
            shell: ModelShell::default(),
            now,
            next_seq: 1,
            last_seq: 0,
            requests: HashMap::new(),
            kref: HashMap::new(),
            debt: HashMap::new(),
            removes_in_call: false,
            ready: 0,
            sent_requests: Recent::new(),
            sent_accepts: Recent::new(),
            sent_all: Recent::new(),
            origins: HashMap::new(),
            acked: HashSet::new(),
            remote_infos: 0,
            steps: 0,
        };
        d.core.start(d.now);
        d.pump(Ctx::Input);
        if setup.boot() {
            d.step(&Op::Hello { abi: 4 });
            d.step(&Op::RegPid {
                client: 0,
                lib: 0,
                seq: 0,
            });
        }
        d
    }

    /// The core under test.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Ops played so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Plays one op and checks everything.
    pub fn step(&mut self, op: &Op) {
        self.steps += 1;
        match op {
            Op::RegPid { .. }
            | Op::Add { .. }
            | Op::Query { .. }
            | Op::Remove { .. }
            | Op::MapInfo { .. }
            | Op::MapInfoNum { .. } => self.kernel_request(op),
            Op::Hello { .. }
            | Op::Done { .. }
            | Op::NlError { .. }
            | Op::KernelRaw { .. }
            | Op::KernelMutate { .. } => self.kernel_other(op),
            Op::Request { .. }
            | Op::Accept { .. }
            | Op::Reject { .. }
            | Op::Ack { .. }
            | Op::Echo { .. }
            | Op::PeerRaw { .. }
            | Op::PeerForged { .. } => self.peer_op(op),
            Op::Advance { ms } => self.advance(Duration::from_millis(u64::from(*ms))),
            Op::AdvanceLong { secs } => self.advance(Duration::from_secs(u64::from(*secs))),
            Op::Jump { ms } => {
                self.now += Duration::from_millis(u64::from(*ms) * 16);
                self.timeout();
            }
            Op::Tick => self.timeout(),
            Op::Overrun => {
                self.core.handle_kernel_overrun(self.now);
                self.pump(Ctx::Input);
            }
            Op::Answer { kind, port } => self.shell.next_answer = Some((*kind, *port)),
            Op::AnswerUnknown { .. } => {}
        }
        self.after_step();
    }

    /// Plays a kernel request (REG_PID, ADD, QUERY, REMOVE, MAPINFO records and count).
    fn kernel_request(&mut self, op: &Op) {
        match op {
            Op::RegPid { client, lib, seq } => {
                let ulib = if lib % 4 == 3 {
                    "otherPortMapper"
                } else {
                    IWPM_ULIB_NAME
                };
                let msg = KernelMsg::RegPid(RegPidRequest {
                    echo_seq: 0,
                    if_name: NlString::padded("eth0", 16),
                    ibdev_name: NlString::padded("siw0", 32),
                    ulib_name: NlString::padded(ulib, 32),
                    unknown: vec![],
                });
                self.kernel_msg(client_of(*client), *seq, &msg, None);
            }
            Op::Add {
                client,
                local,
                flags,
                seq,
            } => {
                let addr = local_addr(*local);
                let msg = KernelMsg::AddMapping(ManageMappingRequest {
                    echo_seq: 0,
                    addr,
                    flags: self.flags(*flags),
                    unknown: vec![],
                });
                self.kernel_msg(client_of(*client), *seq, &msg, Some(addr));
            }
            Op::Query {
                client,
                local,
                remote,
                flags,
                seq,
            } => {
                let local_addr = local_addr(*local);
                let msg = KernelMsg::QueryMapping(QueryMappingRequest {
                    echo_seq: 0,
                    local_addr,
                    remote_addr: remote_addr(*remote),
                    flags: self.flags(*flags),
                    unknown: vec![],
                });
                self.kernel_msg(client_of(*client), *seq, &msg, Some(local_addr));
            }
            Op::Remove { client, local } => self.remove(client_of(*client), local_addr(*local)),
            Op::MapInfo {
                client,
                done,
                records,
            } => {
                let client = client_of(*client);
                let env = Envelope {
                    client,
                    flags: NLM_F_MULTI,
                    seq: 0,
                    pid: 0,
                };
                let mut b = Vec::new();
                for [l, m, f] in records {
                    let local = local_addr(*l);
                    // Mapped: the local address with a pool port, or another pool address.
                    let mapped = if m & 0x80 == 0 {
                        local.with_port(GRANT_BASE + u16::from(m % 6))
                    } else {
                        local_addr(*m)
                    };
                    let flags = match f % 4 {
                        0 | 1 => Some(0),
                        2 => Some(IWPM_FLAGS_NO_PORT_MAP),
                        _ => None,
                    };
                    let rec = KernelMsg::MapInfo(MapInfoRecord {
                        local_addr: local,
                        mapped_addr: mapped,
                        flags,
                        unknown: vec![],
                    });
                    encode_kernel_msg(&env, &rec, &mut b);
                }
                if done & 1 != 0 {
                    encode_done(0, 0, NLM_F_MULTI, None, &mut b);
                }
                self.kernel_datagram(&b, false);
            }
            Op::MapInfoNum { client, send_num } => {
                let msg = KernelMsg::MapInfoNum(MapInfoNumRequest {
                    seq: 0,
                    send_num: u32::from(*send_num),
                    unknown: vec![],
                });
                self.kernel_msg(client_of(*client), 0, &msg, None);
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    /// Plays the other kernel input: HELLO, control messages, raw and mutated datagrams.
    fn kernel_other(&mut self, op: &Op) {
        match op {
            Op::Hello { abi } => {
                let msg = KernelMsg::Hello(Hello {
                    abi_version: u16::from(abi % 7),
                    unknown: vec![],
                });
                self.kernel_msg(RDMA_NL_IWCM, 0, &msg, None);
            }
            Op::Done { seq, result } => {
                let seq = self.pick_seq(*seq);
                let result = match result % 4 {
                    0 => Some(0),
                    1 => Some(-22),
                    2 => None,
                    _ => Some(-i32::from(*result)),
                };
                let mut b = Vec::new();
                encode_done(seq, PID, NLM_F_MULTI, result, &mut b);
                self.kernel_datagram(&b, false);
            }
            Op::NlError {
                seq,
                error,
                request,
            } => {
                let seq = self.pick_seq(*seq);
                let req = match request % 3 {
                    0 => None,
                    1 => Some(NlHeader {
                        len: 20,
                        ty: rdma_nl_get_type(RDMA_NL_IWCM, RDMA_NL_IWPM_HELLO),
                        flags: NLM_F_REQUEST,
                        seq,
                        pid: PID,
                    }),
                    _ => Some(NlHeader {
                        len: 20,
                        ty: rdma_nl_get_type(RDMA_NL_RSVD, RDMA_NL_IWPM_MAPINFO),
                        flags: NLM_F_REQUEST,
                        seq,
                        pid: PID,
                    }),
                };
                let mut b = Vec::new();
                encode_error(seq, PID, -i32::from(*error), req.as_ref(), &mut b);
                self.kernel_datagram(&b, false);
            }
            Op::KernelRaw { data } => self.kernel_datagram(data, true),
            Op::KernelMutate {
                base,
                local,
                at,
                xor,
            } => {
                let addr = local_addr(*local);
                let msg = match base % 4 {
                    0 => KernelMsg::AddMapping(ManageMappingRequest {
                        echo_seq: 0,
                        addr,
                        flags: Some(0),
                        unknown: vec![],
                    }),
                    1 => KernelMsg::QueryMapping(QueryMappingRequest {
                        echo_seq: 0,
                        local_addr: addr,
                        remote_addr: remote_addr(*base >> 2),
                        flags: Some(0),
                        unknown: vec![],
                    }),
                    2 => KernelMsg::RemoveMapping(ManageMappingRequest {
                        echo_seq: 0,
                        addr,
                        flags: None,
                        unknown: vec![],
                    }),
                    _ => KernelMsg::MapInfo(MapInfoRecord {
                        local_addr: addr,
                        mapped_addr: addr.with_port(GRANT_BASE),
                        flags: Some(0),
                        unknown: vec![],
                    }),
                };
                let env = Envelope {
                    client: RDMA_NL_IWCM,
                    flags: NLM_F_REQUEST,
                    seq: self.fresh_seq(),
                    pid: 0,
                };
                let mut b = Vec::new();
                encode_kernel_msg(&env, &msg, &mut b);
                // Spread the mutation over the header (0..16) and the attributes.
                let pos = usize::from(*at) * b.len() / 256;
                if let Some(x) = b.get_mut(pos) {
                    *x ^= xor | 1;
                }
                self.kernel_datagram(&b, true);
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    /// Plays a peer datagram: well-formed answers to what the core sent, echoes, garbage.
    fn peer_op(&mut self, op: &Op) {
        match op {
            Op::Request {
                ap,
                src,
                handle,
                shape,
            } => {
                let ap = local_addr(*ap)
                    .to_socket_addr()
                    .unwrap_or(SocketAddr::new(LOCAL_IPS[1], 4000));
                let mut from = peer_source(*src);
                if from.is_ipv4() != ap.is_ipv4() {
                    from = peer_source(if ap.is_ipv4() { 0 } else { 2 });
                }
                let cp = SocketAddr::new(from.ip(), 5000 + u16::from(shape >> 4));
                let mut mcp = cp;
                mcp.set_port(if shape & 2 != 0 { 0 } else { 41_000 });
                let mut req = PeerMessage::request(u64::from(handle % 8), cp, mcp, ap);
                if shape & 1 != 0 {
                    req.mapped_cp_ip = None;
                }
                let via = if shape & 4 != 0 {
                    PeerSocket::client_for(&from)
                } else {
                    listener_for(&from)
                };
                self.peer(via, from, &req.encode());
            }
            Op::Accept { pick, port, from } => {
                let Some((req, to)) = self.sent_requests.pick(*pick) else {
                    return self.after_step();
                };
                let ap_port = if port % 4 == 0 {
                    req.ap_port
                } else {
                    GRANT_BASE + u16::from(port % 8)
                };
                let acc = PeerMessage::accept_for(&req, SocketAddr::new(req.ap_ip, ap_port));
                let from = self.answer_source(to, *from);
                self.peer(PeerSocket::client_for(&from), from, &acc.encode());
            }
            Op::Reject { pick, from } => {
                let Some((req, to)) = self.sent_requests.pick(*pick) else {
                    return self.after_step();
                };
                let from = self.answer_source(to, *from);
                let rej = PeerMessage::reject_for(&req);
                self.peer(PeerSocket::client_for(&from), from, &rej.encode());
            }
            Op::Ack { pick, from } => {
                let Some((acc, to)) = self.sent_accepts.pick(*pick) else {
                    return self.after_step();
                };
                let Ok(msg) = PeerMessage::decode(&acc) else {
                    return self.after_step();
                };
                let ack = PeerMessage::ack_for(&msg);
                let form = *from >> 6;
                let ack = if form == 2 {
                    ack.encode()
                } else {
                    let mut echo = ipv4_echo(&acc);
                    if form == 3 {
                        let at = usize::from((*from >> 2) & 15) % echo.len();
                        if let Some(b) = echo.get_mut(at) {
                            *b ^= 0x5a;
                        }
                    }
                    ack.encode_with_echo(&echo)
                };
                let from = self.answer_source(to, *from);
                let before = self.remote_infos;
                self.peer(listener_for(&from), from, &ack);
                // An IPv4 ACK that does not echo our cookie from the address the ACCEPT went
                // to (blind, tampered, or replayed by a third host) releases nothing.
                if msg.ip_version == IpVersion::V4
                    && (form >= 2 || from != to)
                    && self.remote_infos != before
                {
                    fail("an unverifiable ACK made the core send a REMOTE_INFO");
                }
            }
            Op::Echo { pick, at, xor } => {
                let Some((via, to, mut bytes)) = self.sent_all.pick(*pick) else {
                    return self.after_step();
                };
                if *xor != 0 {
                    let pos = usize::from(*at) % bytes.len().max(1);
                    if let Some(b) = bytes.get_mut(pos) {
                        *b ^= xor;
                    }
                }
                self.peer(via, to, &bytes);
            }
            Op::PeerRaw { src, data } => {
                let from = peer_source(*src);
                self.peer(listener_for(&from), from, data);
            }
            Op::PeerForged {
                ty,
                ips,
                handle,
                ap_port,
                cp_port,
                extra,
            } => {
                let v6 = ips & 0x80 != 0;
                let msg = PeerMessage {
                    version: ty >> 6,
                    msg_type: PeerMsgType::from_code((ty >> 4) & 3),
                    ip_version: if v6 { IpVersion::V6 } else { IpVersion::V4 },
                    pmtime: *extra,
                    reserved_port: if extra & 1 != 0 { 0 } else { 41_000 },
                    ap_port: *ap_port,
                    cp_port: *cp_port,
                    assoc_handle: *handle,
                    cp_ip: peer_ip(*ips, v6),
                    ap_ip: peer_ip(ips >> 2, v6),
                    mapped_cp_ip: (extra & 2 != 0).then(|| peer_ip(ips >> 4, v6)),
                };
                let from = peer_source(if v6 { 2 } else { 0 } | (ty & 4));
                let via = if ty & 8 != 0 {
                    PeerSocket::client_for(&from)
                } else {
                    listener_for(&from)
                };
                self.peer(via, from, &msg.encode());
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    fn flags(&self, f: u8) -> Option<u32> {
        match f % 6 {
            0..=2 => Some(0),
            3 => Some(IWPM_FLAGS_NO_PORT_MAP),
            4 => None,
            _ => Some(u32::from(f)),
        }
    }

    fn fresh_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq += 1;
        self.last_seq = s;
        s
    }

    /// Header seq by mode: mostly fresh, sometimes the last one again, sometimes 0.
    fn seq_for(&mut self, mode: u8) -> u32 {
        match mode % 8 {
            6 => self.last_seq,
            7 => 0,
            _ => self.fresh_seq(),
        }
    }

    /// A seq for DONE/ERROR: 0 (the HELLO's), the last one, or small.
    fn pick_seq(&self, sel: u8) -> u32 {
        match sel % 4 {
            0 | 1 => 0,
            2 => self.last_seq,
            _ => u32::from(sel >> 2),
        }
    }

    fn answer_source(&self, to: SocketAddr, sel: u8) -> SocketAddr {
        if sel % 4 != 0 {
            return to;
        }
        let other = peer_source(sel >> 2);
        if other.is_ipv4() == to.is_ipv4() {
            other
        } else {
            to
        }
    }

    fn kernel_msg(
        &mut self,
        client: u8,
        seq_mode: u8,
        msg: &KernelMsg,
        local: Option<SockAddrStorage>,
    ) {
        let notice = matches!(msg, KernelMsg::MapInfoNum(_) | KernelMsg::Hello(_));
        let env = Envelope {
            client,
            flags: if notice { NLM_F_MULTI } else { NLM_F_REQUEST },
            seq: if notice {
                self.fresh_seq()
            } else {
                self.seq_for(seq_mode)
            },
            pid: 0,
        };
        let mut b = Vec::new();
        encode_kernel_msg(&env, msg, &mut b);
        self.account_kernel(&b, false);
        if let Some(local) = local {
            if let Some(r) = self.requests.get_mut(&(client, env.seq)) {
                if r.count == 1 {
                    r.local = Some(local);
                }
            }
        }
        self.core
            .handle_kernel_datagram(self.now, &b, &mut self.shell);
        self.pump(Ctx::Input);
    }

    /// Sends a datagram the driver did not build message by message (`opaque`: it may
    /// hold anything, a REMOVE included).
    fn kernel_datagram(&mut self, b: &[u8], opaque: bool) {
        self.account_kernel(b, opaque);
        self.core
            .handle_kernel_datagram(self.now, b, &mut self.shell);
        self.pump(Ctx::Input);
    }

    /// Records every frame of a datagram about to be sent, as the kernel would.
    fn account_kernel(&mut self, b: &[u8], opaque: bool) {
        for f in frames(b) {
            let Ok(Frame::Msg(header, payload)) = f else {
                continue;
            };
            let key = (header.client(), header.seq);
            let op = header.op();
            let r = self.requests.entry(key).or_insert(Request {
                count: 0,
                other: false,
                op,
                sent_at: self.now,
                local: None,
                answers: 0,
            });
            if matches!(
                op,
                RDMA_NL_IWPM_REG_PID | RDMA_NL_IWPM_ADD_MAPPING | RDMA_NL_IWPM_QUERY_MAPPING
            ) {
                r.count += 1;
                if r.count == 1 {
                    r.op = op;
                    r.sent_at = self.now;
                }
                r.local = None;
            } else {
                r.other = true;
            }
            if op != RDMA_NL_IWPM_REMOVE_MAPPING {
                continue;
            }
            if opaque {
                self.removes_in_call = true;
            }
            // REMOVE decodes alike in both ABIs; one the core cannot decode has no effect.
            let ep = [IWPM_UABI_VERSION_MIN, IWPM_UABI_VERSION]
                .into_iter()
                .find_map(|abi| match decode_kernel_msg(&header, payload, abi) {
                    Ok((_, KernelMsg::RemoveMapping(m))) => m.addr.endpoint(),
                    _ => None,
                });
            if let Some(ep) = ep {
                match self.kref.get_mut(&ep) {
                    Some(k) if *k > 0 => *k -= 1,
                    _ => *self.debt.entry(ep).or_default() += 1,
                }
            }
        }
    }

    fn remove(&mut self, client: u8, addr: SockAddrStorage) {
        let ep = addr.endpoint();
        let before = ep.and_then(|ep| {
            self.core
                .mappings()
                .find(|m| m.local_endpoint == ep)
                .map(|m| (m.id, m.refcount, m.owner_client))
        });
        let msg = KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 0,
            addr,
            flags: None,
            unknown: vec![],
        });
        self.kernel_msg(client, 0, &msg, None);
        let Some(ep) = ep else { return };
        let after = self
            .core
            .mappings()
            .find(|m| m.local_endpoint == ep)
            .map(|m| (m.id, m.refcount));
        match before {
            Some((id, rc, owner)) if owner == client => {
                let expect = (rc > 1).then_some((id, rc - 1));
                if after != expect {
                    fail(format!(
                        "REMOVE of {ep} by its owner: refcount {rc} became {after:?}"
                    ));
                }
            }
            Some((id, rc, _)) => {
                if after != Some((id, rc)) {
                    fail(format!(
                        "REMOVE of {ep} by a non-owner changed it: {after:?}"
                    ));
                }
            }
            None => {
                if after.is_some() {
                    fail(format!("REMOVE of {ep} created a mapping"));
                }
            }
        }
    }

    fn peer(&mut self, via: PeerSocket, from: SocketAddr, bytes: &[u8]) {
        self.core.handle_peer_datagram(self.now, via, from, bytes);
        self.pump(Ctx::Input);
    }

    fn timeout(&mut self) {
        self.core.handle_timeout(self.now);
        self.pump(Ctx::Timer);
        if let Some(t) = self.core.poll_timeout() {
            if t <= self.now {
                fail("a timer is still due right after handle_timeout");
            }
        }
    }

    /// Moves the clock forward by `d`, running each timer at its due time.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        let mut guard = 0u32;
        while let Some(t) = self.core.poll_timeout() {
            if t > end {
                break;
            }
            guard += 1;
            if guard > 1_000_000 {
                fail("timers never settle");
            }
            self.now = self.now.max(t);
            self.timeout();
        }
        self.now = end;
    }

    /// Drains every action, checking each.
    fn pump(&mut self, ctx: Ctx) {
        self.drain(ctx);
        // The call is over: every REMOVE sent so far has been processed.
        self.removes_in_call = false;
    }

    fn drain(&mut self, ctx: Ctx) {
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::ToKernel(bytes) => self.on_to_kernel(&bytes),
                Action::ToPeer { via, to, datagram } => self.on_to_peer(ctx, via, to, datagram),
                Action::Ready => {
                    self.ready += 1;
                    if self.ready > 1 {
                        fail("Ready emitted twice");
                    }
                }
            }
        }
    }

    fn on_to_kernel(&mut self, bytes: &[u8]) {
        for f in frames(bytes) {
            let Ok(Frame::Msg(header, payload)) = f else {
                fail(format!("the core sent a non-message frame: {f:?}"));
            };
            if header.pid != PID {
                fail(format!("nlmsg_pid {} is not ours", header.pid));
            }
            if header.flags & NLM_F_REQUEST == 0 {
                fail("message to the kernel without NLM_F_REQUEST");
            }
            let client = header.client();
            // The kernel only dispatches client 2; decode legacy client 3 with its rules too.
            let as_iwcm = NlHeader {
                ty: rdma_nl_get_type(RDMA_NL_IWCM, header.op()),
                ..header
            };
            let msg = match decode_daemon_msg(&as_iwcm, payload) {
                Ok((_, msg)) => msg,
                Err(e) => fail(format!("the kernel would not accept a message: {e}")),
            };
            self.on_kernel_answer(client, msg);
        }
    }

    fn on_kernel_answer(&mut self, client: u8, msg: DaemonMsg) {
        if let DaemonMsg::RemoteInfo(r) = &msg {
            self.remote_infos += 1;
            if r.remote_addr.same_endpoint(&r.mapped_remote_addr) {
                fail(format!(
                    "REMOTE_INFO for a peer that is not port mapped (the kernel needs none, \
                     and keeps it for ever): {msg:?}"
                ));
            }
        }
        let (seq, ok_op) = match &msg {
            DaemonMsg::RegPid(r) => (r.seq, RDMA_NL_IWPM_REG_PID),
            DaemonMsg::AddMapping(r) => (r.seq, RDMA_NL_IWPM_ADD_MAPPING),
            DaemonMsg::QueryMapping(r) => (r.seq, RDMA_NL_IWPM_QUERY_MAPPING),
            DaemonMsg::HandleErr(e) => {
                if e.code == 0 {
                    fail("HANDLE_ERR with code 0");
                }
                (e.seq, u16::MAX)
            }
            _ => return,
        };
        let now = self.now;
        let deadline = self.config.reply_deadline;
        let Some(req) = self.requests.get_mut(&(client, seq)) else {
            fail(format!("answer for a request never sent: {msg:?}"));
        };
        if ok_op != u16::MAX && req.count == 0 {
            fail(format!("reply to a request of another op: {msg:?}"));
        }
        if req.count != 1 || req.other {
            return;
        }
        req.answers += 1;
        if req.answers > 1 {
            fail(format!("kernel request seq {seq} answered twice: {msg:?}"));
        }
        if ok_op != u16::MAX && ok_op != req.op {
            fail(format!("op {} answered with {msg:?}", req.op));
        }
        if now.saturating_duration_since(req.sent_at) >= deadline {
            fail(format!("answer after the reply deadline: {msg:?}"));
        }
        let local = req.local;
        let (addr, mapped) = match &msg {
            DaemonMsg::AddMapping(r) if r.err == 0 => (r.addr, r.mapped_addr),
            DaemonMsg::QueryMapping(r) if r.err == 0 => (r.local_addr, r.mapped_local_addr),
            _ => return,
        };
        if let Some(local) = local {
            if local != addr {
                fail(format!(
                    "reply does not echo the request's address: {msg:?}"
                ));
            }
        }
        let Some(ep) = addr.endpoint() else {
            fail(format!("success for a non-IP address: {msg:?}"));
        };
        if self.removes_in_call {
            return;
        }
        match self.core.mappings().find(|m| m.local_endpoint == ep) {
            Some(m) if m.mapped == mapped => {}
            other => fail(format!(
                "success answer for {ep} but the mapping is {:?}",
                other.map(|m| (m.mapped_endpoint, m.refcount))
            )),
        }
        match self.debt.get_mut(&ep) {
            Some(d) if *d > 0 => *d -= 1,
            _ => *self.kref.entry(ep).or_default() += 1,
        }
    }

    fn on_to_peer(&mut self, ctx: Ctx, via: PeerSocket, to: SocketAddr, datagram: Vec<u8>) {
        let msg = match PeerMessage::decode(&datagram) {
            Ok(m) => m,
            Err(e) => fail(format!("the core sent an undecodable peer datagram: {e}")),
        };
        if socket_is_v4(via) != to.is_ipv4() {
            fail(format!("datagram to {to} sent on {via:?}"));
        }
        let key = (to, datagram.clone());
        match (msg.msg_type, ctx) {
            (PeerMsgType::Request | PeerMsgType::Accept, Ctx::Timer) => {
                let Some((first, resent)) = self.origins.get_mut(&key) else {
                    fail(format!("timer sent a {:?} never sent before", msg.msg_type));
                };
                *resent += 1;
                let age = self.now.saturating_duration_since(*first);
                if age >= self.config.exchange_lifetime {
                    fail(format!(
                        "{:?} retransmitted {age:?} after it was first sent (lifetime {:?})",
                        msg.msg_type, self.config.exchange_lifetime
                    ));
                }
                if *resent > self.config.max_retransmits {
                    fail(format!("{:?} retransmitted {resent} times", msg.msg_type));
                }
                if msg.msg_type == PeerMsgType::Request
                    && self.acked.contains(&(msg.assoc_handle, msg.cp()))
                {
                    fail("REQUEST retransmitted after its ACCEPT was acknowledged");
                }
            }
            (PeerMsgType::Request | PeerMsgType::Accept, Ctx::Input) => {
                self.origins.insert(key, (self.now, 0));
            }
            (PeerMsgType::Ack, _) => {
                self.acked.insert((msg.assoc_handle, msg.cp()));
            }
            _ => {}
        }
        match msg.msg_type {
            PeerMsgType::Request => self.sent_requests.push((msg, to)),
            PeerMsgType::Accept => self.sent_accepts.push((datagram.clone(), to)),
            _ => {}
        }
        self.sent_all.push((via, to, datagram));
    }

    fn after_step(&mut self) {
        if let Err(e) = self.core.check_invariants() {
            fail(e);
        }
        let s = self.core.stats();
        let listed = self.core.mappings().count();
        if s.mappings as usize != listed {
            fail(format!(
                "gauge says {} mappings, {listed} listed",
                s.mappings
            ));
        }
        if listed > self.config.max_mappings {
            fail(format!("{listed} mappings > max_mappings"));
        }
        let passive = s.peer_exchanges_active;
        let local = s.exchanges_active.saturating_sub(passive);
        if passive > s.exchanges_active {
            fail("more peer exchanges than exchanges");
        }
        if local as usize > self.config.max_exchanges {
            fail(format!("{local} local exchanges > max_exchanges"));
        }
        if passive as usize > self.config.max_peer_exchanges.max(1) {
            fail(format!("{passive} peer exchanges > max_peer_exchanges"));
        }
        if s.peer_exchanges_unconfirmed > passive {
            fail("more unconfirmed peer exchanges than peer exchanges");
        }
        if s.reservations_requested != self.shell.reserves {
            fail("reservations_requested differs from the reservations the shell saw");
        }
        if s.reservations_released != self.shell.releases {
            fail("reservations_released differs from the releases the shell saw");
        }
        let mut locals = HashSet::new();
        let mut live = BTreeSet::new();
        for m in self.core.mappings() {
            if !locals.insert(m.local_endpoint) {
                fail(format!("two mappings for {}", m.local_endpoint));
            }
            if let Some(r) = m.reservation {
                if !live.insert(r) {
                    fail(format!("two mappings hold {r:?}"));
                }
            }
            if m.refcount == 0 {
                fail("mapping with refcount 0");
            }
        }
        let held: BTreeSet<_> = self.shell.held.keys().copied().collect();
        if held != live {
            fail(format!(
                "shell holds {held:?} but live mappings hold {live:?}"
            ));
        }
        for (ep, k) in &self.kref {
            if *k == 0 {
                continue;
            }
            let rc = self
                .core
                .mappings()
                .find(|m| m.local_endpoint == *ep)
                .map_or(0, |m| m.refcount);
            if rc < *k {
                fail(format!(
                    "{ep}: the kernel was told of {k} references, the core has {rc}"
                ));
            }
        }
    }

    /// Ends the run: runs time forward, REMOVEs every mapping from its owner, runs time
    /// forward again, and checks that nothing is left.
    pub fn finish(mut self) {
        let settle = self.config.exchange_lifetime * 2
            + self.config.reply_deadline * 2
            + self.config.handshake_timeout;
        self.advance(settle);
        self.after_step();
        if self.core.stats().exchanges_active != 0 {
            fail("exchanges left after every lifetime passed");
        }
        let budget: u64 = self
            .core
            .mappings()
            .map(|m| u64::from(m.refcount))
            .sum::<u64>()
            + 8;
        let mut removes = 0u64;
        loop {
            let first = self
                .core
                .mappings()
                .next()
                .map(|m| (m.local, m.owner_client));
            let Some((local, owner)) = first else { break };
            removes += 1;
            if removes > budget {
                fail("REMOVE by the owner does not free the table");
            }
            let reserves = self.shell.reserves;
            self.remove(owner, local);
            self.after_step();
            if self.shell.reserves != reserves {
                fail("a REMOVE asked for a reservation");
            }
        }
        self.advance(settle);
        self.after_step();
        if self.core.mappings().next().is_some() {
            fail("mappings left after every REMOVE");
        }
        if !self.shell.held.is_empty() {
            fail(format!(
                "reservations never released: {:?}",
                self.shell.held
            ));
        }
        if self.core.stats().exchanges_active != 0 {
            fail("exchanges left after the table emptied");
        }
        let sh = &self.shell;
        if sh.granted != sh.releases {
            fail(format!(
                "{} ports granted, {} released",
                sh.granted, sh.releases
            ));
        }
        if sh.reserves != sh.granted + sh.refused {
            fail("not every reservation was answered exactly once");
        }
    }
}

/// The model shell's port reservations: fresh ids, answers chosen by [`Op::Answer`] (grant
/// by default), and a check that every release names a reservation it holds.
#[derive(Debug, Default)]
struct ModelShell {
    /// Last id issued (ids are never reused).
    last_id: u64,
    /// Reservations granted and not released, with the port held.
    held: BTreeMap<ReservationId, SocketAddr>,
    granted: u64,
    refused: u64,
    releases: u64,
    reserves: u64,
    /// One-shot answer for the next reservation.
    next_answer: Option<(u8, u16)>,
}

impl ModelShell {
    /// The answer `kind` (see [`Op::Answer`]) to a reservation on `bind`.
    fn answer(&self, bind: SocketAddr, kind: u8, port: u16) -> Result<u16, ReserveError> {
        match kind % 6 {
            0..=2 => self.free_port(bind),
            3 => Err(match port % 3 {
                0 => ReserveError::AddrInUse,
                1 => ReserveError::NoDescriptors,
                _ => ReserveError::Other(i32::from(port)),
            }),
            4 => Ok(0),
            _ => Ok(port),
        }
    }

    /// The asked port if no held reservation of that family has it, or for port 0 the
    /// lowest free one of the grant range.
    fn free_port(&self, bind: SocketAddr) -> Result<u16, ReserveError> {
        let taken = |p: u16| {
            self.held
                .values()
                .any(|a| a.port() == p && a.is_ipv4() == bind.is_ipv4())
        };
        if bind.port() != 0 {
            return if taken(bind.port()) {
                Err(ReserveError::AddrInUse)
            } else {
                Ok(bind.port())
            };
        }
        (GRANT_BASE..GRANT_BASE + GRANT_PORTS)
            .find(|p| !taken(*p))
            .ok_or(ReserveError::AddrInUse)
    }
}

impl PortReservations for ModelShell {
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
        self.reserves += 1;
        if !bind.ip().is_unspecified() {
            fail(format!("reservation binds {bind}, not a wildcard"));
        }
        let (kind, port) = self.next_answer.take().unwrap_or((0, 0));
        match self.answer(bind, kind, port) {
            Ok(p) => {
                self.last_id += 1;
                let id = ReservationId(self.last_id);
                let mut a = bind;
                a.set_port(p);
                self.held.insert(id, a);
                self.granted += 1;
                Ok((id, p))
            }
            Err(e) => {
                self.refused += 1;
                Err(e)
            }
        }
    }

    fn release(&mut self, id: ReservationId) {
        if self.held.remove(&id).is_none() {
            fail(format!("release of {id:?}, which the shell does not hold"));
        }
        self.releases += 1;
    }
}

/// Oracle of the state-file parser (`fuzz/fuzz_targets/state_file.rs`, and the corpus
/// replay in `tests/restore.rs`): [`crate::state_file::StateFile::decode`] never panics,
/// and whatever it accepts encodes to bytes that decode to the same file.
pub fn state_file(data: &[u8]) {
    use crate::state_file::StateFile;
    if let Ok(file) = StateFile::decode(data) {
        let again = StateFile::decode(&file.encode());
        assert_eq!(
            again.as_ref(),
            Ok(&file),
            "state_file: round trip changed the file"
        );
    }
}
