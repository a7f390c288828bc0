//! Property test: random sequences of kernel messages, peer datagrams, reservation outcomes
//! (granted, refused, port 0) and clock jumps never panic, keep the core's indexes consistent,
//! keep the shell's held reservations equal to the live mappings' reservations, answer each
//! kernel request at most once and in time, and leave nothing held once every mapping is
//! removed.

use iwpm_testkit::core_host as common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use iwpm_core::{CoreConfig, PeerSocket, ReserveError};
use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::{Envelope, Hello, KernelMsg};
use iwpm_proto::peer::{ipv4_echo, PeerMessage, PeerMsgType};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const IPS: [&str; 5] = ["0.0.0.0", "10.0.0.1", "10.0.0.2", "::", "2001:db8::1"];
const PORTS: [u16; 3] = [4000, 4001, 5000];
const REMOTES: [&str; 2] = ["10.0.0.9", "2001:db8::9"];
const SOURCES: [&str; 2] = ["10.0.0.9:33333", "[2001:db8::9]:33333"];

fn local(ip: usize, port: usize) -> String {
    SocketAddr::new(
        IPS[ip % IPS.len()].parse().unwrap(),
        PORTS[port % PORTS.len()],
    )
    .to_string()
}

#[derive(Clone, Debug)]
enum Ev {
    RegPid,
    Add {
        ip: usize,
        port: usize,
        npm: bool,
    },
    Query {
        ip: usize,
        port: usize,
        npm: bool,
    },
    Remove {
        ip: usize,
        port: usize,
    },
    MapInfo(Vec<(usize, usize, u16, bool)>),
    MapInfoNum(u32),
    Hello(u16),
    Done(i32),
    Request {
        ip: usize,
        port: usize,
        handle: u64,
        src: usize,
    },
    Accept {
        pick: usize,
        port: u16,
    },
    Reject {
        pick: usize,
    },
    Ack {
        pick: usize,
        src: usize,
    },
    ReplayPeer {
        pick: usize,
    },
    KernelGarbage(Vec<u8>),
    PeerGarbage(Vec<u8>),
    CorruptKernel {
        ip: usize,
        port: usize,
        at: usize,
        byte: u8,
    },
    FailNextReservation(u8),
    /// The shell grants port 0 (a misbehaving shell).
    GrantPortZero,
    Advance(u64),
}

fn ev() -> impl Strategy<Value = Ev> {
    let idx = || 0usize..8;
    prop_oneof![
        1 => Just(Ev::RegPid),
        6 => (idx(), idx(), any::<bool>()).prop_map(|(ip, port, npm)| Ev::Add { ip, port, npm }),
        6 => (idx(), idx(), any::<bool>()).prop_map(|(ip, port, npm)| Ev::Query { ip, port, npm }),
        5 => (idx(), idx()).prop_map(|(ip, port)| Ev::Remove { ip, port }),
        2 => prop::collection::vec((idx(), idx(), 40_000u16..40_004, any::<bool>()), 0..4)
            .prop_map(Ev::MapInfo),
        1 => (0u32..6).prop_map(Ev::MapInfoNum),
        1 => (0u16..7).prop_map(Ev::Hello),
        1 => prop_oneof![Just(0), Just(-22)].prop_map(Ev::Done),
        5 => (idx(), idx(), 0u64..4, 0usize..2)
            .prop_map(|(ip, port, handle, src)| Ev::Request { ip, port, handle, src }),
        5 => (any::<usize>(), 40_000u16..40_010).prop_map(|(pick, port)| Ev::Accept { pick, port }),
        2 => any::<usize>().prop_map(|pick| Ev::Reject { pick }),
        3 => (any::<usize>(), 0usize..2).prop_map(|(pick, src)| Ev::Ack { pick, src }),
        2 => any::<usize>().prop_map(|pick| Ev::ReplayPeer { pick }),
        1 => prop::collection::vec(any::<u8>(), 0..80).prop_map(Ev::KernelGarbage),
        1 => prop::collection::vec(any::<u8>(), 0..70).prop_map(Ev::PeerGarbage),
        1 => (idx(), idx(), 0usize..170, any::<u8>())
            .prop_map(|(ip, port, at, byte)| Ev::CorruptKernel { ip, port, at, byte }),
        2 => (0u8..3).prop_map(Ev::FailNextReservation),
        1 => Just(Ev::GrantPortZero),
        4 => (0u64..4_000).prop_map(Ev::Advance),
    ]
}

/// Peer traffic seen so far, so ACCEPT/REJECT/ACK can target real exchanges.
#[derive(Default)]
struct Seen {
    requests: Vec<PeerMessage>,
    /// Our ACCEPTs as sent (their echo cookies included) and where they went.
    accepts: Vec<(Vec<u8>, SocketAddr)>,
    all: Vec<(PeerSocket, SocketAddr, Vec<u8>)>,
}

fn observe(h: &mut CoreHarness, seen: &mut Seen) {
    while let Some(s) = h.peer_out.pop_front() {
        match s.msg.msg_type {
            PeerMsgType::Request => seen.requests.push(s.msg),
            PeerMsgType::Accept => seen.accepts.push((s.raw.clone(), s.to)),
            _ => {}
        }
        seen.all.push((s.via, s.to, s.raw));
    }
    h.kernel_in.clear();
}

/// The shell's held reservations are exactly the live mappings' reservations.
fn check_reservations(h: &CoreHarness) {
    let held: BTreeSet<_> = h.ports().held.keys().copied().collect();
    let live: BTreeSet<_> = h.core().mappings().filter_map(|m| m.reservation).collect();
    assert_eq!(held, live);
    assert_eq!(
        h.core().stats().mappings as usize,
        h.core().mappings().count()
    );
}

fn step(h: &mut CoreHarness, seen: &mut Seen, e: Ev) {
    match e {
        Ev::RegPid => {
            h.reg_pid();
        }
        Ev::Add { ip, port, npm } => {
            h.add(
                &local(ip, port),
                Some(if npm { IWPM_FLAGS_NO_PORT_MAP } else { 0 }),
            );
        }
        Ev::Query { ip, port, npm } => {
            let l = local(ip, port);
            let remote = REMOTES[usize::from(l.starts_with('['))];
            let r = SocketAddr::new(remote.parse().unwrap(), 4000).to_string();
            h.query(&l, &r, Some(if npm { IWPM_FLAGS_NO_PORT_MAP } else { 0 }));
        }
        Ev::Remove { ip, port } => {
            h.remove(&local(ip, port));
        }
        Ev::MapInfo(recs) => {
            let recs: Vec<(String, String, Option<u32>)> = recs
                .into_iter()
                .map(|(ip, port, mport, npm)| {
                    let l = local(ip, port);
                    let mut m: SocketAddr = l.parse().unwrap();
                    if !npm {
                        m.set_port(mport);
                    }
                    (l, m.to_string(), Some(u32::from(npm)))
                })
                .collect();
            let refs: Vec<(&str, &str, Option<u32>)> = recs
                .iter()
                .map(|(l, m, f)| (l.as_str(), m.as_str(), *f))
                .collect();
            h.mapinfo_records(&refs);
        }
        Ev::MapInfoNum(n) => {
            h.mapinfo_num(n);
        }
        Ev::Hello(v) => {
            h.kernel_msg(KernelMsg::Hello(Hello {
                abi_version: v,
                unknown: vec![],
            }));
        }
        Ev::Done(r) => h.kernel_done(h.kernel_seq, Some(r)),
        Ev::Request {
            ip,
            port,
            handle,
            src,
        } => {
            let from = SOURCES[src];
            let ap: SocketAddr = local(ip, port).parse().unwrap();
            let cp: SocketAddr = from.parse().unwrap();
            if ap.is_ipv4() == cp.is_ipv4() {
                let mut mcp = cp;
                mcp.set_port(41_000);
                let req = PeerMessage::request(handle, cp, mcp, ap);
                let via = if cp.is_ipv4() {
                    PeerSocket::V4Listener
                } else {
                    PeerSocket::V6Listener
                };
                h.peer(via, from, &req);
            }
        }
        Ev::Accept { pick, port } => {
            if !seen.requests.is_empty() {
                let req = seen.requests[pick % seen.requests.len()];
                let acc = PeerMessage::accept_for(&req, SocketAddr::new(req.ap_ip, port));
                let from = SocketAddr::new(req.ap_ip, 3935).to_string();
                h.peer(PeerSocket::V4Client, &from, &acc);
            }
        }
        Ev::Reject { pick } => {
            if !seen.requests.is_empty() {
                let req = seen.requests[pick % seen.requests.len()];
                let from = SocketAddr::new(req.ap_ip, 3935).to_string();
                h.peer(PeerSocket::V4Client, &from, &PeerMessage::reject_for(&req));
            }
        }
        Ev::Ack { pick, src } => {
            if !seen.accepts.is_empty() {
                let (acc, to) = seen.accepts[pick % seen.accepts.len()].clone();
                let from = if src == 0 {
                    to.to_string()
                } else {
                    SOURCES[1].to_owned()
                };
                // As the active side answers: the ACCEPT's bytes echoed (src 0: a real peer,
                // whose cookie verifies; src 1: a third host replaying it, whose does not).
                let msg = PeerMessage::decode(&acc).expect("our ACCEPT decodes");
                let ack = PeerMessage::ack_for(&msg).encode_with_echo(&ipv4_echo(&acc));
                h.peer_raw(PeerSocket::V4Listener, &from, &ack);
            }
        }
        Ev::ReplayPeer { pick } => {
            if !seen.all.is_empty() {
                // A datagram we sent, delivered back to us (self-talk / reflection).
                let (via, to, raw) = seen.all[pick % seen.all.len()].clone();
                h.host.handle_peer_datagram(h.now, via, to, &raw);
                h.pump();
            }
        }
        Ev::KernelGarbage(mut b) => {
            if b.len() >= 12 {
                let seq = h.next_kseq();
                b[8..12].copy_from_slice(&seq.to_ne_bytes());
                let op = u16::from_ne_bytes([b[4], b[5]]) & 0x3ff;
                h.sent_at.insert(seq, (h.now, op));
            }
            h.kernel_raw(&b);
        }
        Ev::PeerGarbage(b) => {
            h.host
                .handle_peer_datagram(h.now, PeerSocket::V4Listener, addr(SOURCES[0]), &b);
            h.pump();
        }
        Ev::CorruptKernel { ip, port, at, byte } => {
            let env = Envelope {
                client: RDMA_NL_IWCM,
                flags: NLM_F_REQUEST,
                seq: h.next_kseq(),
                pid: 0,
            };
            h.sent_at.insert(env.seq, (h.now, 1));
            let mut b = Vec::new();
            iwpm_proto::netlink::encode_kernel_msg(
                &env,
                &KernelMsg::AddMapping(iwpm_proto::netlink::ManageMappingRequest {
                    echo_seq: 0,
                    addr: sa(&local(ip, port)),
                    flags: Some(0),
                    unknown: vec![],
                }),
                &mut b,
            );
            // Keep the header's seq intact so answers stay attributable.
            if !(8..12).contains(&at) && at < b.len() {
                b[at] = byte;
            }
            let op = u16::from_ne_bytes([b[4], b[5]]) & 0x3ff;
            h.sent_at.insert(env.seq, (h.now, op));
            h.kernel_raw(&b);
        }
        Ev::FailNextReservation(k) => h.ports_mut().fail_next.push_back(match k {
            0 => ReserveError::AddrInUse,
            1 => ReserveError::NoDescriptors,
            _ => ReserveError::Other(13),
        }),
        Ev::GrantPortZero => h.ports_mut().force_port.push_back(0),
        Ev::Advance(ms) => h.advance(Duration::from_millis(ms)),
    }
    observe(h, seen);
    h.core().check_invariants().unwrap();
    check_reservations(h);
}

fn run(events: Vec<Ev>) {
    let mut h = CoreHarness::new(
        CoreConfig {
            max_mappings: 6,
            max_exchanges: 4,
            ..config()
        },
        Instant::now(),
    );
    h.boot();
    h.kernel_in.clear();
    let mut seen = Seen::default();
    for e in events {
        step(&mut h, &mut seen, e);
    }
    // Drain: let every exchange end, then remove every reference.
    h.advance(Duration::from_secs(30));
    observe(&mut h, &mut seen);
    assert_eq!(h.core().stats().exchanges_active, 0);
    assert_eq!(h.host.poll_timeout(), None);
    loop {
        let Some((l, rc, owner)) = h
            .core()
            .mappings()
            .next()
            .map(|m| (m.local_endpoint, m.refcount, m.owner_client))
        else {
            break;
        };
        assert_eq!(owner, RDMA_NL_IWCM);
        let l = SocketAddr::from(l).to_string();
        for _ in 0..rc {
            h.remove(&l);
        }
        assert!(h.refcount(&l).is_none(), "{l} freed after {rc} REMOVEs");
    }
    assert!(
        h.ports().held.is_empty(),
        "every reservation released: {:?}",
        h.ports().held
    );
    let s = h.core().stats();
    assert_eq!(
        s.reservations_requested,
        h.ports().granted + h.ports().refused,
        "every reservation counted"
    );
    assert_eq!(
        h.ports().releases as u64,
        h.ports().granted,
        "every granted port released"
    );
    assert_eq!(s.reservations_released, h.ports().granted);
    check_reservations(&h);
}

proptest! {
    // Past failures are replayed from `invariants.proptest-regressions` beside this file
    // (by default proptest would look in `tests/proptest-regressions/`, as this module
    // sits next to the test binary's `main.rs`).
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions"
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_events_keep_invariants(events in prop::collection::vec(ev(), 1..120)) {
        run(events);
    }
}
