//! Deterministic simulation: cores wired together over a virtual UDP network with delay and
//! loss, on a virtual clock, doing the full REQUEST / ACCEPT / ACK exchange.

use iwpm_testkit::core_host as common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use iwpm_core::{CoreConfig, PeerSocket};
use iwpm_proto::consts::err::IWPM_REMOTE_QUERY_REJECT;
use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_proto::netlink::{DaemonMsg, QueryMappingReply};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};

const CLIENT_PORT: u16 = 50_001;

struct Packet {
    from: SocketAddr,
    to: SocketAddr,
    datagram: Vec<u8>,
}

struct Sim {
    start: Instant,
    now: Instant,
    hosts: Vec<(IpAddr, CoreHarness)>,
    in_flight: BTreeMap<(Instant, u64), Packet>,
    counter: u64,
    delay: Duration,
    /// Decides per packet (with its type and a per-type sequence number) whether to drop.
    drop: Box<dyn FnMut(PeerMsgType, u32) -> bool>,
    sent_by_type: [u32; 4],
    log: Vec<String>,
}

impl Sim {
    fn new(ips: &[&str]) -> Self {
        Sim::with_local_answers(ips, true)
    }

    fn with_local_answers(ips: &[&str], local_answers: bool) -> Self {
        let now = Instant::now();
        let hosts = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| {
                let mut h = CoreHarness::new(
                    CoreConfig {
                        handle_key: [i as u8 + 1; 32],
                        local_answers,
                        ..config()
                    },
                    now,
                );
                h.boot();
                (ip.parse().unwrap(), h)
            })
            .collect();
        Sim {
            start: now,
            now,
            hosts,
            in_flight: BTreeMap::new(),
            counter: 0,
            delay: Duration::from_millis(5),
            drop: Box::new(|_, _| false),
            sent_by_type: [0; 4],
            log: vec![],
        }
    }

    fn host(&mut self, i: usize) -> &mut CoreHarness {
        let now = self.now;
        let h = &mut self.hosts[i].1;
        h.now = now;
        h
    }

    fn socket_addr(ip: IpAddr, via: PeerSocket) -> SocketAddr {
        match via {
            PeerSocket::V4Listener | PeerSocket::V6Listener => SocketAddr::new(ip, 3935),
            PeerSocket::V4Client | PeerSocket::V6Client => SocketAddr::new(ip, CLIENT_PORT),
        }
    }

    /// Moves every host's peer output onto the wire.
    fn collect(&mut self) {
        for i in 0..self.hosts.len() {
            let ip = self.hosts[i].0;
            while let Some(s) = self.hosts[i].1.peer_out.pop_front() {
                let ty = s.msg.msg_type;
                let n = &mut self.sent_by_type[usize::from(ty.code())];
                *n += 1;
                let dropped = (self.drop)(ty, *n);
                self.log.push(format!(
                    "{:?} {} {ty} {} -> {}{}",
                    self.now - self.start,
                    i,
                    Self::socket_addr(ip, s.via),
                    s.to,
                    if dropped { " (lost)" } else { "" }
                ));
                if dropped {
                    continue;
                }
                self.counter += 1;
                self.in_flight.insert(
                    (self.now + self.delay, self.counter),
                    Packet {
                        from: Self::socket_addr(ip, s.via),
                        to: s.to,
                        datagram: s.raw,
                    },
                );
            }
        }
    }

    fn deliver(&mut self, p: Packet) {
        let Some(i) = self.hosts.iter().position(|(ip, _)| *ip == p.to.ip()) else {
            return;
        };
        let via = match (p.to.port(), p.to.is_ipv4()) {
            (3935, true) => PeerSocket::V4Listener,
            (3935, false) => PeerSocket::V6Listener,
            (CLIENT_PORT, true) => PeerSocket::V4Client,
            (CLIENT_PORT, false) => PeerSocket::V6Client,
            _ => return,
        };
        let now = self.now;
        let h = self.host(i);
        h.host.handle_peer_datagram(now, via, p.from, &p.datagram);
        h.pump();
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.collect();
        loop {
            let packet_at = self.in_flight.keys().next().map(|k| k.0);
            let timer_at = self
                .hosts
                .iter()
                .filter_map(|(_, h)| h.host.poll_timeout())
                .min();
            let next = match (packet_at, timer_at) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            if packet_at == Some(next) {
                let key = *self.in_flight.keys().next().unwrap();
                let p = self.in_flight.remove(&key).unwrap();
                self.deliver(p);
            } else {
                for i in 0..self.hosts.len() {
                    let now = self.now;
                    let h = self.host(i);
                    if h.host.poll_timeout().is_some_and(|t| t <= now) {
                        h.host.handle_timeout(now);
                        h.pump();
                    }
                }
            }
            self.collect();
        }
        self.now = end;
        for i in 0..self.hosts.len() {
            self.host(i);
        }
    }
}

fn take_kernel(h: &mut CoreHarness) -> Vec<DaemonMsg> {
    h.kernel_in.drain(..).map(|(_, m)| m).collect()
}

fn query_replies(msgs: &[DaemonMsg]) -> Vec<&QueryMappingReply> {
    replies(msgs, false)
}

fn remote_infos(msgs: &[DaemonMsg]) -> Vec<&QueryMappingReply> {
    replies(msgs, true)
}

/// The QUERY_MAPPING replies, or the REMOTE_INFO messages (same layout), among `msgs`.
fn replies(msgs: &[DaemonMsg], remote_info: bool) -> Vec<&QueryMappingReply> {
    msgs.iter()
        .filter_map(|m| match (m, remote_info) {
            (DaemonMsg::QueryMapping(r), false) | (DaemonMsg::RemoteInfo(r), true) => Some(r),
            _ => None,
        })
        .collect()
}

/// B listens on 10.0.0.2:4000; A connects from 10.0.0.1:5000. Returns (A's QUERY seq,
/// B's mapped listener address).
fn connect(sim: &mut Sim) -> (u32, iwpm_proto::sockaddr::SockAddrStorage) {
    let b = sim.host(1);
    let s = b.add("10.0.0.2:4000", Some(0));
    let b_mapped = b.expect_add_reply(s);
    let a = sim.host(0);
    a.ports_mut().next_port = 41_000;
    let seq = a.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    (seq, b_mapped)
}

#[test]
fn two_daemons_complete_the_exchange() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    let (seq, b_mapped) = connect(&mut sim);
    sim.run_for(Duration::from_millis(100));

    let a_msgs = take_kernel(sim.host(0));
    let replies = query_replies(&a_msgs);
    assert_eq!(replies.len(), 1);
    let r = replies[0];
    assert_eq!((r.seq, r.err), (seq, 0));
    assert_eq!(r.mapped_local_addr, sa("10.0.0.1:41000"));
    assert_eq!(r.mapped_remote_addr, b_mapped);

    let b_msgs = take_kernel(sim.host(1));
    let infos = remote_infos(&b_msgs);
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].local_addr, sa("10.0.0.2:4000"));
    assert_eq!(infos[0].remote_addr, sa("10.0.0.1:5000"));
    assert_eq!(infos[0].mapped_local_addr, b_mapped);
    assert_eq!(infos[0].mapped_remote_addr, sa("10.0.0.1:41000"));

    assert_eq!(
        sim.sent_by_type,
        [1, 1, 1, 0],
        "REQUEST, ACCEPT, ACK once each"
    );
    // Nothing more happens; every exchange ends.
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.sent_by_type, [1, 1, 1, 0]);
    for i in 0..2 {
        let h = sim.host(i);
        assert_eq!(h.core().stats().retransmissions, 0);
        assert_eq!(h.core().stats().exchanges_active, 0);
        assert_eq!(h.core().stats().exchanges_expired, 0);
        h.no_kernel();
    }
}

#[test]
fn lossy_network_still_completes_exactly_once() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    // Lose the first two REQUESTs, the first ACCEPT and the first two ACKs.
    sim.drop = Box::new(|ty, n| match ty {
        PeerMsgType::Request => n <= 2,
        PeerMsgType::Accept => n == 1,
        PeerMsgType::Ack => n <= 2,
        PeerMsgType::Reject => false,
    });
    let (seq, b_mapped) = connect(&mut sim);
    sim.run_for(Duration::from_secs(30));
    let a_msgs = take_kernel(sim.host(0));
    let replies = query_replies(&a_msgs);
    assert_eq!(replies.len(), 1, "{a_msgs:?}");
    assert_eq!(
        (replies[0].seq, replies[0].mapped_remote_addr),
        (seq, b_mapped)
    );
    let b_msgs = take_kernel(sim.host(1));
    assert_eq!(remote_infos(&b_msgs).len(), 1, "{b_msgs:?}");
    // REQUEST #3 got through at 2 s but its ACCEPT was lost, so A sent #4 at 3 s, which B
    // answered with the same ACCEPT (B never retransmits on its own); A answered its kernel
    // once and sent one ACK, which was lost: B's exchange ends unconfirmed, harmlessly (its
    // REMOTE_INFO went out on a budget token when the REQUEST came).
    assert_eq!(sim.sent_by_type[0], 4, "{:#?}", sim.log);
    assert_eq!(
        sim.sent_by_type[1], 2,
        "one ACCEPT per REQUEST that got through"
    );
    assert_eq!(sim.sent_by_type[2], 1);
    for i in 0..2 {
        assert_eq!(sim.host(i).core().stats().exchanges_active, 0);
    }
    assert!(sim.host(1).core().stats().peer_duplicates >= 1);
}

#[test]
fn unreachable_peer_means_no_answer_and_no_leak() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    sim.drop = Box::new(|_, _| true);
    connect(&mut sim);
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.sent_by_type[0], 10);
    let a = sim.host(0);
    a.no_kernel();
    assert_eq!(a.core().stats().exchanges_expired, 1);
    assert_eq!(a.core().stats().exchanges_active, 0);
    assert_eq!(
        a.refcount("10.0.0.1:5000"),
        Some(1),
        "the kernel will REMOVE it"
    );
    a.remove("10.0.0.1:5000");
    assert!(a.ports().held.is_empty());
}

#[test]
fn peer_without_listener_rejects() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    let a = sim.host(0);
    let seq = a.query("10.0.0.1:5000", "10.0.0.2:4000", Some(0));
    sim.run_for(Duration::from_secs(1));
    let a_msgs = take_kernel(sim.host(0));
    let r = query_replies(&a_msgs);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].seq, r[0].err), (seq, IWPM_REMOTE_QUERY_REJECT));
    sim.host(1).no_kernel();
    assert_eq!(sim.sent_by_type, [1, 0, 0, 1]);
}

#[test]
fn one_daemon_answers_a_connect_to_its_own_ip_from_its_table() {
    // Single-VM topology: the listener is behind our own kernel; no UDP to ourselves, the
    // same two kernel messages as the exchange below, REMOTE_INFO first.
    let mut sim = Sim::new(&["10.0.0.1"]);
    let h = sim.host(0);
    let s = h.add("10.0.0.1:4000", Some(0));
    let listen_mapped = h.expect_add_reply(s);
    let s = h.add("0.0.0.0:4001", Some(0));
    let wildcard_mapped = h.expect_add_reply(s);
    let exact = h.query("10.0.0.1:5000", "10.0.0.1:4000", Some(0));
    let msgs = take_kernel(sim.host(0));
    assert!(matches!(
        msgs.as_slice(),
        [DaemonMsg::RemoteInfo(_), DaemonMsg::QueryMapping(_)]
    ));
    let (infos, replies) = (remote_infos(&msgs), query_replies(&msgs));
    assert_eq!((replies[0].seq, replies[0].err), (exact, 0));
    assert_eq!(replies[0].mapped_remote_addr, listen_mapped);
    assert_eq!(infos[0].mapped_remote_addr, replies[0].mapped_local_addr);
    assert_eq!(infos[0].mapped_local_addr, listen_mapped);
    let want_remote: SocketAddr = "10.0.0.1:5000".parse().unwrap();
    assert_eq!(infos[0].remote_addr.to_socket_addr(), Some(want_remote));

    // A wildcard listener answers with the asked IP and its mapped port.
    let wild = sim.host(0).query("10.0.0.1:5001", "10.0.0.1:4001", Some(0));
    let msgs = take_kernel(sim.host(0));
    let replies = query_replies(&msgs);
    assert_eq!((replies.len(), remote_infos(&msgs).len()), (1, 1));
    assert_eq!((replies[0].seq, replies[0].err), (wild, 0));
    let mut want = wildcard_mapped.to_socket_addr().unwrap();
    want.set_ip("10.0.0.1".parse().unwrap());
    assert_eq!(replies[0].mapped_remote_addr.to_socket_addr(), Some(want));
    assert_eq!(sim.host(0).core().stats().local_answers, 2);

    // A connecting side that is not port mapped (siw): the REMOTE_INFO would map its address
    // to itself, which is what the kernel assumes without one; only the reply goes out.
    let siw = sim.host(0).query(
        "10.0.0.1:5003",
        "10.0.0.1:4000",
        Some(IWPM_FLAGS_NO_PORT_MAP),
    );
    let msgs = take_kernel(sim.host(0));
    let replies = query_replies(&msgs);
    assert_eq!(
        (replies.len(), remote_infos(&msgs).len()),
        (1, 0),
        "{msgs:?}"
    );
    assert_eq!((replies[0].seq, replies[0].err), (siw, 0));
    assert_eq!(replies[0].mapped_local_addr, replies[0].local_addr);
    assert_eq!(replies[0].mapped_remote_addr, listen_mapped);
    assert_eq!(sim.host(0).core().stats().local_answers, 3);

    // No listener there: asked over UDP, so the answer is the REJECT C would get.
    let none = sim.host(0).query("10.0.0.1:5002", "10.0.0.1:4999", Some(0));
    sim.run_for(Duration::from_secs(1));
    let msgs = take_kernel(sim.host(0));
    let replies = query_replies(&msgs);
    assert_eq!(
        (replies[0].seq, replies[0].err),
        (none, IWPM_REMOTE_QUERY_REJECT)
    );
    assert_eq!(sim.sent_by_type, [1, 0, 0, 1]);
    assert_eq!(sim.host(0).core().stats().local_answers, 3);
}

#[test]
fn one_daemon_talking_to_itself() {
    // Single-VM topology as C runs it (--no-local-answers): connect to our own address;
    // the REQUEST lands on our listener.
    let mut sim = Sim::with_local_answers(&["10.0.0.1"], false);
    let h = sim.host(0);
    let s = h.add("10.0.0.1:4000", Some(0));
    let listen_mapped = h.expect_add_reply(s);
    let seq = h.query("10.0.0.1:5000", "10.0.0.1:4000", Some(0));
    sim.run_for(Duration::from_secs(1));
    let msgs = take_kernel(sim.host(0));
    let infos = remote_infos(&msgs);
    let replies = query_replies(&msgs);
    assert_eq!((infos.len(), replies.len()), (1, 1));
    assert_eq!(replies[0].seq, seq);
    assert_eq!(replies[0].mapped_remote_addr, listen_mapped);
    assert_eq!(infos[0].mapped_remote_addr, replies[0].mapped_local_addr);
    assert_eq!(sim.sent_by_type, [1, 1, 1, 0]);
}

#[test]
fn many_connections_in_both_directions() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    let ips = ["10.0.0.1", "10.0.0.2"];
    for (me, ip) in ips.iter().enumerate() {
        let h = sim.host(me);
        let s = h.add(&format!("{ip}:4000"), Some(0));
        h.expect_add_reply(s);
    }
    let mut seqs = [vec![], vec![]];
    for n in 0..50u16 {
        for (me, want) in seqs.iter_mut().enumerate() {
            let (ip, peer) = (ips[me], ips[1 - me]);
            let local = format!("{ip}:{}", 6000 + n);
            want.push(sim.host(me).query(&local, &format!("{peer}:4000"), Some(0)));
        }
    }
    sim.run_for(Duration::from_secs(15));
    for (me, want) in seqs.iter().enumerate() {
        let msgs = take_kernel(sim.host(me));
        let mut got: Vec<u32> = query_replies(&msgs).iter().map(|r| r.seq).collect();
        got.sort_unstable();
        assert_eq!(&got, want);
        assert!(query_replies(&msgs).iter().all(|r| r.err == 0));
        assert_eq!(remote_infos(&msgs).len(), 50);
        let h = sim.host(me);
        assert_eq!(h.core().stats().exchanges_active, 0);
        assert_eq!(h.core().mappings().count(), 51);
        h.core().check_invariants().unwrap();
    }
}

#[test]
fn simulation_is_deterministic() {
    fn run() -> (Vec<String>, Vec<Vec<u8>>) {
        let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
        sim.drop = Box::new(|ty, n| ty == PeerMsgType::Request && n % 2 == 1);
        connect(&mut sim);
        sim.run_for(Duration::from_secs(20));
        let raw: Vec<Vec<u8>> = (0..2)
            .flat_map(|i| {
                take_kernel(sim.host(i))
                    .into_iter()
                    .map(|m| format!("{m:?}").into_bytes())
            })
            .collect();
        (sim.log, raw)
    }
    assert_eq!(run(), run());
}

#[test]
fn handles_are_echoed_end_to_end() {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    connect(&mut sim);
    sim.collect();
    let handles: Vec<u64> = sim
        .in_flight
        .values()
        .map(|p| PeerMessage::decode(&p.datagram).unwrap().assoc_handle)
        .collect();
    assert_eq!(handles.len(), 1);
    sim.run_for(Duration::from_millis(7));
    let echoed: Vec<u64> = sim
        .in_flight
        .values()
        .map(|p| PeerMessage::decode(&p.datagram).unwrap().assoc_handle)
        .collect();
    assert_eq!(echoed, handles);
}

/// Runs the simulation in 1 ms steps until `until`, returning when each host's kernel
/// first got a QUERY reply and a REMOTE_INFO (ms since the start), and every message.
fn kernel_timeline(
    sim: &mut Sim,
    until: Duration,
) -> Vec<(Option<u64>, Option<u64>, Vec<DaemonMsg>)> {
    let mut seen = vec![(None, None, Vec::new()); sim.hosts.len()];
    let step = Duration::from_millis(1);
    while sim.now - sim.start < until {
        sim.run_for(step);
        let ms = (sim.now - sim.start).as_millis() as u64;
        for (i, s) in seen.iter_mut().enumerate() {
            let msgs = take_kernel(sim.host(i));
            if s.0.is_none() && !query_replies(&msgs).is_empty() {
                s.0 = Some(ms);
            }
            if s.1.is_none() && !remote_infos(&msgs).is_empty() {
                s.1 = Some(ms);
            }
            s.2.extend(msgs);
        }
    }
    seen
}

fn spent_budget_pair() -> Sim {
    let mut sim = Sim::new(&["10.0.0.1", "10.0.0.2"]);
    // B has no REMOTE_INFO budget: its REMOTE_INFO waits for A's verified ACK.
    let now = sim.now;
    sim.hosts[1].1 = CoreHarness::new(
        CoreConfig {
            handle_key: [2; 32],
            remote_info_budget: 0,
            ..config()
        },
        now,
    );
    sim.host(1).boot();
    sim
}

/// A REMOTE_INFO that waits for the ACK must still reach the passive kernel before the
/// active kernel can connect: our active side holds its QUERY answer until the passive
/// side's delivery notice says the REMOTE_INFO is in.
#[test]
fn a_remote_info_held_for_the_ack_is_in_the_kernel_before_the_active_side_connects() {
    let mut sim = spent_budget_pair();
    let (seq, b_mapped) = connect(&mut sim);
    let t = kernel_timeline(&mut sim, Duration::from_millis(200));
    let (a_reply, b_ri) = (
        t[0].0.expect("A answered"),
        t[1].1.expect("B's REMOTE_INFO"),
    );
    assert!(
        b_ri < a_reply,
        "REMOTE_INFO at {b_ri} ms, QUERY reply at {a_reply} ms"
    );
    let r = query_replies(&t[0].2);
    assert_eq!(
        (r.len(), r[0].seq, r[0].mapped_remote_addr),
        (1, seq, b_mapped)
    );
    assert_eq!(remote_infos(&t[1].2).len(), 1);
    assert_eq!(
        sim.sent_by_type,
        [1, 2, 1, 0],
        "REQUEST, ACCEPT + notice, ACK"
    );
    let (a, b) = (
        sim.host(0).core().stats().clone(),
        sim.host(1).core().stats().clone(),
    );
    assert_eq!((a.query_replies_held, a.remote_info_notices_missed), (1, 0));
    assert_eq!(b.remote_info_notices_sent, 1);
}

/// The notice lost: our side re-ACKs while it waits, the passive side sends the notice
/// again for that duplicate ACK, and the answer still follows the REMOTE_INFO.
#[test]
fn a_lost_delivery_notice_is_sent_again_for_the_repeated_ack() {
    let mut sim = spent_budget_pair();
    sim.drop = Box::new(|ty, n| ty == PeerMsgType::Accept && n == 2);
    connect(&mut sim);
    let t = kernel_timeline(&mut sim, Duration::from_millis(200));
    let (a_reply, b_ri) = (
        t[0].0.expect("A answered"),
        t[1].1.expect("B's REMOTE_INFO"),
    );
    assert!(b_ri < a_reply);
    assert_eq!(
        remote_infos(&t[1].2).len(),
        1,
        "one REMOTE_INFO, the repeated ACK absorbed"
    );
    assert_eq!(sim.host(0).core().stats().remote_info_notices_missed, 0);
    assert_eq!(sim.host(1).core().stats().remote_info_notices_sent, 2);
}

/// Every ACK lost: the held answer goes out after the last wait (60 ms), never later, so
/// a lost ACK costs no more than before (the kernel connects; the REMOTE_INFO never came).
#[test]
fn with_every_ack_lost_the_held_answer_goes_out_after_the_waits() {
    let mut sim = spent_budget_pair();
    sim.drop = Box::new(|ty, _| ty == PeerMsgType::Ack);
    connect(&mut sim);
    let t = kernel_timeline(&mut sim, Duration::from_millis(200));
    let a_reply = t[0].0.expect("A answered anyway");
    assert!((60..=80).contains(&a_reply), "answered at {a_reply} ms");
    assert!(t[1].1.is_none());
    assert_eq!(sim.sent_by_type[2], 3, "the ACK and two repeats");
    assert_eq!(sim.host(0).core().stats().remote_info_notices_missed, 1);
}

/// The kernel stops waiting while our answer is held for the notice (here a 40 ms
/// `reply_deadline`, every ACK lost): no late QUERY reply goes out after it.
#[test]
fn a_held_answer_past_the_kernels_deadline_is_not_sent() {
    let mut sim = spent_budget_pair();
    let now = sim.now;
    sim.hosts[0].1 = CoreHarness::new(
        CoreConfig {
            handle_key: [1; 32],
            reply_deadline: Duration::from_millis(40),
            ..config()
        },
        now,
    );
    sim.host(0).boot();
    sim.drop = Box::new(|ty, _| ty == PeerMsgType::Ack);
    connect(&mut sim);
    let t = kernel_timeline(&mut sim, Duration::from_millis(200));
    assert!(t[0].0.is_none(), "no answer after the kernel's deadline");
    assert_eq!(sim.host(0).core().stats().query_replies_held, 1);
    assert_eq!(sim.host(0).core().stats().remote_info_notices_missed, 1);
}
