//! Things going wrong around two real `iwpmd` processes: a mapping removed while its peer
//! exchange is in flight, lossy, duplicated and late peer datagrams, a daemon killed with
//! live mappings, and malformed or unexpected messages from the kernel.

use std::net::SocketAddr;
use std::time::Duration;

use iwpm_core::{Counter, KernelOp};
use iwpm_kernel_emu::kernel::RequestKind;
use iwpm_kernel_emu::{CmError, MapOutcome, UnmappedReason};
use iwpm_lab::dump::IoCounter;
use iwpm_lab::relay::RelayConfig;
use iwpm_lab::workload::{connect_all, ConnRecord, WorkloadConfig};
use iwpm_lab::{run, LabConfig, RunOptions};
use iwpm_proto::consts::op::{RDMA_NL_IWPM_ADD_MAPPING, RDMA_NL_IWPM_QUERY_MAPPING};
use iwpm_proto::consts::{err, NLM_F_REQUEST, RDMA_NL_IWCM};
use iwpm_proto::netlink::{
    encode_kernel_msg, DaemonFrame, DaemonMsg, Envelope, HandleErr, KernelMsg,
    ManageMappingRequest, MapInfoNumRequest, NlHeader,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::common::*;

const REQUEST: usize = 0;
const ACCEPT: usize = 1;
const ACK: usize = 2;

/// B's ACCEPT is never acknowledged (ACKs are dropped), so B's exchange stays unconfirmed;
/// removing B's listener mapping must end that exchange at once, and nothing is sent for it
/// afterwards (B never retransmits an ACCEPT on its own).
#[test]
fn remove_while_passive_exchange_in_flight() {
    let mut lab = lab(LabConfig::default());
    let addr = lab.b_addr(4010);
    let (listener, acceptor) = listen(&lab, addr);
    let relay = lab.b.relay.as_ref().unwrap();
    let mut block = [false; 4];
    block[ACK] = true;
    relay.set_config(RelayConfig {
        block,
        ..RelayConfig::default()
    });
    let conn = connect(&lab, addr);
    assert_eq!(conn.info.mapping, MapOutcome::Mapped);
    let d = dump_until(&mut lab, "B", |d| d.exchanges_accepting == Some(1));
    assert_eq!(d.exchanges_accepting, Some(1), "{d:?}");

    conn.id.destroy().unwrap();
    assert!(acceptor.wait(WAIT, |acc| acc.iter().all(|a| a.disconnected)));
    for a in acceptor.accepted() {
        a.id.destroy().unwrap();
    }
    listener.id.destroy().unwrap();
    let d = dump_until(&mut lab, "B", |d| d.mappings.is_empty());
    assert!(d.mappings.is_empty());
    assert_eq!(
        d.exchanges_accepting,
        Some(0),
        "exchange outlived its mapping"
    );
    let relay = lab.b.relay.as_ref().unwrap();
    let accepts = relay.stats().seen[ACCEPT];
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        relay.stats().seen[ACCEPT],
        accepts,
        "ACCEPT retransmitted after its mapping was removed"
    );
    assert_no_violations(&lab);
}

/// A's kernel gives up on the QUERY after 1 s (B never sees the REQUEST), connects
/// unmapped (refused) and removes the mapping while A's daemon is still retransmitting:
/// the retransmissions stop and nothing reaches the kernel late.
#[test]
fn remove_while_active_exchange_in_flight() {
    let mut lab = lab(LabConfig {
        request_timeout: Duration::from_secs(1),
        ..LabConfig::default()
    });
    let addr = lab.b_addr(4011);
    let (_listener, _acceptor) = listen(&lab, addr);
    let relay = lab.b.relay.as_ref().unwrap();
    let mut block = [false; 4];
    block[REQUEST] = true;
    relay.set_config(RelayConfig {
        block,
        ..RelayConfig::default()
    });
    let e = lab.a.host.connect(None, addr).unwrap_err();
    assert!(
        matches!(
            &e,
            CmError::Rejected {
                mapping: Some(MapOutcome::Unmapped(UnmappedReason::Timeout {
                    kind: RequestKind::QueryMapping,
                    ..
                })),
                ..
            }
        ),
        "{e:?}"
    );
    // EmulatedHost::connect destroyed the failed id: REMOVE_MAPPING went to A's daemon.
    let d = dump_until(&mut lab, "A", |d| {
        d.mappings.is_empty() && d.exchanges_connecting == Some(0)
    });
    assert!(d.mappings.is_empty(), "{d:?}");
    assert_eq!(
        d.exchanges_connecting,
        Some(0),
        "exchange outlived its mapping"
    );
    let relay = lab.b.relay.as_ref().unwrap();
    let requests = relay.stats().seen[REQUEST];
    assert!(requests >= 1);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        relay.stats().seen[REQUEST],
        requests,
        "REQUEST retransmitted after its mapping was removed"
    );
    assert_eq!(lab.a.host.stats().kernel.query_replies, 0);
    assert_no_violations(&lab);
}

#[test]
fn peer_loss_30_percent_still_completes() {
    let mut lab = relay_lab(RelayConfig {
        loss: 0.3,
        seed: 7,
        ..RelayConfig::default()
    });
    let report = run_at_once(&mut lab, 60);
    assert!(report.ok, "{}", report.render());
    assert_eq!(report.connections.consistent, 60);
    assert!(report.peer.relay_dropped > 0, "{:?}", report.peer);
    assert!(report.peer.retransmissions > 0, "{:?}", report.peer);
    assert_eq!(report.peer.exchanges, 60);
    assert_eq!(report.mappings.peak_a, 60);
}

/// Every peer datagram is delivered twice at once and a third time 0.6 s later (after
/// the exchange completed, within one retransmission interval of the ACK): the daemons
/// absorb them all, answer the kernel exactly once per QUERY and send no second
/// REMOTE_INFO. (A REQUEST a full interval after the ACK is a new association: see
/// `late_request_after_the_ack_is_a_new_association`.)
#[test]
fn duplicate_and_late_peer_datagrams() {
    let mut lab = relay_lab(RelayConfig {
        duplicate: 1.0,
        replay_after: Some(Duration::from_millis(600)),
        ..RelayConfig::default()
    });
    let addr = lab.b_addr(4012);
    let (listener, acceptor) = listen(&lab, addr);
    let records = connect_at_once(&lab, addr, 10);
    assert!(records.iter().all(|r| r.established().is_some()));
    std::thread::sleep(Duration::from_millis(1500));
    let relay_b = lab.b.relay.as_ref().unwrap().stats();
    assert!(
        relay_b.duplicated > 0 && relay_b.replayed > 0,
        "{relay_b:?}"
    );
    let dump_a = lab.a.dump().unwrap();
    let dump_b = lab.b.dump().unwrap();
    for r in &records {
        let conn = iwpm_kernel_emu::Connection {
            id: r.id.clone(),
            info: r.established().unwrap().clone(),
        };
        assert_consistent(&lab, &conn, &listener, &acceptor, &dump_a, &dump_b);
    }
    assert!(
        dump_a.core(Counter::PeerDuplicates) + dump_b.core(Counter::PeerDuplicates) > 0,
        "no duplicate absorbed: {dump_a:?} {dump_b:?}"
    );
    let ka = lab.a.host.stats().kernel;
    assert_eq!(ka.query_replies, 10, "one QUERY reply per connection");
    let kb = lab.b.host.stats().kernel;
    assert_eq!(
        kb.remote_info_received, 10,
        "one REMOTE_INFO per connection"
    );
    let missed = acceptor
        .accepted()
        .iter()
        .filter(|a| a.info.remote_info != Some(iwpm_kernel_emu::RemoteInfoLookup::Found))
        .count();
    assert_eq!(
        lab.b.host.kernel_view().remote_info.len(),
        missed,
        "a late REQUEST made a second REMOTE_INFO"
    );
    assert_eq!(acceptor.accepted().len(), 10);
    assert_no_violations(&lab);
}

/// Every peer datagram is delivered again 1.5 s later. B's daemon takes the replayed
/// REQUEST, a full retransmission interval after its ACK, as a new association from the
/// same endpoint (the C daemon reuses its handles) and answers it with a second
/// REMOTE_INFO; B's kernel keeps that one unconsumed.
#[test]
fn late_request_after_the_ack_is_a_new_association() {
    let mut lab = relay_lab(RelayConfig {
        replay_after: Some(Duration::from_millis(1500)),
        ..RelayConfig::default()
    });
    let addr = lab.b_addr(4020);
    let (_listener, acceptor) = listen(&lab, addr);
    let records = connect_at_once(&lab, addr, 10);
    assert!(records.iter().all(|r| r.established().is_some()));
    std::thread::sleep(Duration::from_millis(2500));
    let dump_b = lab.b.dump().unwrap();
    assert_eq!(dump_b.core(Counter::PeerReusedHandles), 10, "{dump_b:?}");
    assert_eq!(lab.a.host.stats().kernel.query_replies, 10);
    assert_eq!(lab.b.host.stats().kernel.remote_info_received, 20);
    assert_eq!(acceptor.accepted().len(), 10);
    assert_no_violations(&lab);
}

/// A's daemon is killed with SIGKILL while 30 connections are up and restarted: the
/// kernel's MAPINFO replay brings every mapping back with the same mapped port, the ports
/// are reserved again, and new connections work.
#[test]
fn daemon_kill_and_restart_with_live_mappings() {
    let mut lab = lab(LabConfig::default());
    let addr = lab.b_addr(4013);
    let (listener, acceptor) = listen(&lab, addr);
    let conns: Vec<_> = (0..30).map(|_| connect(&lab, addr)).collect();
    let before = lab.a.dump().unwrap();
    assert_eq!(before.mappings.len(), 30);
    let old_pid = lab.a.daemon.as_ref().unwrap().pid();

    let outcome = lab.a.restart_daemon(Duration::from_millis(300)).unwrap();
    assert_eq!(outcome.old_pid, old_pid);
    assert_ne!(outcome.new_pid, old_pid);
    assert_eq!(outcome.kernel_mappings, 30);
    assert_eq!(outcome.replayed, 30);
    assert_eq!(outcome.recovered, 30, "{outcome:?}");
    assert!(
        outcome.lost.is_empty() && outcome.changed.is_empty(),
        "{outcome:?}"
    );

    let after = lab.a.dump().unwrap();
    assert_eq!(after.io(IoCounter::PortsHeld), 30);
    for c in &conns {
        let m = after.find(c.info.local).expect("mapping recovered");
        assert_eq!(m.mapped, c.info.mapped_local, "same mapped port");
        assert!(tcp_port_held(
            &lab.a.place,
            c.info.local.ip(),
            c.info.mapped_local.port()
        ));
    }
    // The new daemon registers on the next connect and serves it.
    let conn = connect(&lab, addr);
    let dump_a = lab.a.dump().unwrap();
    let dump_b = lab.b.dump().unwrap();
    assert_consistent(&lab, &conn, &listener, &acceptor, &dump_a, &dump_b);
    assert_eq!(dump_a.mappings.len(), 31);

    // Removing the recovered mappings works like removing the original ones.
    for c in conns.iter().chain(std::iter::once(&conn)) {
        c.id.destroy().unwrap();
    }
    let d = dump_until(&mut lab, "A", |d| d.mappings.is_empty());
    assert!(d.mappings.is_empty(), "{d:?}");
    assert_eq!(d.io(IoCounter::PortsHeld), 0);
    assert_no_violations(&lab);
}

/// Every peer datagram faces 30 % loss, 30 % duplication and 30 % reordering at once;
/// every connection is still established and consistent, with no protocol violation. The
/// assertions rest on the active side's REQUEST retransmissions only (the passive side
/// answers each REQUEST it gets and never retransmits on its own).
#[test]
fn loss_duplication_and_reordering_30_percent_each() {
    const N: usize = 60;
    let mut lab = relay_lab(RelayConfig {
        loss: 0.3,
        duplicate: 0.3,
        reorder: 0.3,
        seed: 11,
        ..RelayConfig::default()
    });
    let report = run_at_once(&mut lab, N);
    println!("{}", report.render());
    assert!(report.ok, "{}", report.render());
    assert_eq!(report.connections.established, N);
    assert_eq!(report.connections.consistent, N);
    assert!(report.violations.is_empty() && report.mismatches.is_empty());
    let p = &report.peer;
    assert!(p.relay_dropped > 0, "{p:?}");
    assert!(p.relay_extra_copies > 0, "{p:?}");
    assert!(p.relay_reordered > 0 && p.relay_overtaken > 0, "{p:?}");
    assert!(p.retransmissions > 0, "{p:?}");
    assert_eq!(p.exchanges, N as u64);
}

/// B's daemon is killed with SIGKILL while connections are in flight and restarted: its
/// table comes back from the kernel's MAPINFO replay (mappings lost: 0, same mapped
/// ports), and every connection, including those in flight at the kill, is established.
#[test]
fn restart_of_the_passive_daemon_mid_run() {
    let mut lab = lab(LabConfig::default());
    let opts = RunOptions {
        workload: WorkloadConfig {
            connections: 200,
            concurrency: 32,
            ..WorkloadConfig::default()
        },
        restart_daemon: true,
        ..RunOptions::default()
    };
    let report = run(&mut lab, &opts, Duration::ZERO, |_| {}).unwrap();
    println!("{}", report.render());
    assert!(report.ok, "{}", report.render());
    let r = report.restart.as_ref().expect("restart happened");
    assert!(
        r.in_flight_at_kill.is_some_and(|n| n > 0),
        "no connection in flight at the kill: {r:?}"
    );
    assert!(r.mappings_lost.is_empty(), "{:?}", r.mappings_lost);
    assert_eq!(r.daemon_mappings_before, 1, "B holds its listener mapping");
    assert_eq!(r.daemon_mappings_after, r.daemon_mappings_before);
    assert_eq!((r.kernel_mappings, r.recovered), (1, 1));
    assert!(report.render().contains("mappings lost: 0"));
    assert_eq!(report.connections.consistent, 200);
    // Issue 43, friction 12: the figures add up. Every REMOTE_INFO is either found by its
    // connection or left over (a REQUEST the killed daemon answered, answered again by the
    // restarted one, which cannot know it as a duplicate); the retransmissions are the
    // REQUESTs the relays saw resent (per exchange, some more than once) plus ACCEPTs.
    let p = &report.peer;
    assert_eq!(
        p.remote_infos_used + p.stale_remote_info as u64,
        p.remote_infos,
        "{p:?}"
    );
    assert_eq!(p.remote_infos_used, 200, "{p:?}");
    if report.settings.relays {
        assert!(p.request_resends <= p.retransmissions, "{p:?}");
        assert!(p.exchanges_resent <= p.request_resends, "{p:?}");
        let text = report.render();
        assert!(
            text.contains(&format!(
                "REQUESTs resent for {} exchanges",
                p.exchanges_resent
            )),
            "{text}"
        );
    }
}

/// A netlink message with a raw attribute list (type, payload).
/// A lab whose peer datagrams pass through a relay with these faults.
fn relay_lab(relay: RelayConfig) -> iwpm_lab::Lab {
    lab(LabConfig {
        relay: Some(relay),
        ..LabConfig::default()
    })
}

/// `n` connections from A to `addr`, all started at once.
fn connect_at_once(lab: &iwpm_lab::Lab, addr: SocketAddr, n: usize) -> Vec<ConnRecord> {
    let workload = WorkloadConfig {
        connections: n,
        concurrency: n,
        ..WorkloadConfig::default()
    };
    connect_all(&lab.a.host, addr, &workload, |_| {})
}

/// The lab's whole run (listener, `n` connections at once, cross-checks) and its report.
fn run_at_once(lab: &mut iwpm_lab::Lab, n: usize) -> iwpm_lab::Report {
    let opts = RunOptions {
        workload: WorkloadConfig {
            connections: n,
            concurrency: n,
            ..WorkloadConfig::default()
        },
        ..RunOptions::default()
    };
    run(lab, &opts, Duration::ZERO, |_| {}).unwrap()
}

fn raw_msg(op: u16, seq: u32, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (ty, payload) in attrs {
        let len = 4 + payload.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&ty.to_ne_bytes());
        body.extend_from_slice(payload);
        body.resize(body.len().next_multiple_of(4), 0);
    }
    let header = NlHeader {
        len: (NlHeader::LEN + body.len()) as u32,
        ty: (u16::from(RDMA_NL_IWCM) << 10) | op,
        flags: NLM_F_REQUEST,
        seq,
        pid: 0,
    };
    let mut out = header.to_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn sockaddr(a: SocketAddr) -> Vec<u8> {
    SockAddrStorage::from_socket_addr(a).as_bytes().to_vec()
}

/// The kernel link carries garbage and surprises: the daemon answers what it must
/// (HANDLE_ERR 10 for invalid requests, a MAPINFO_NUM ack), logs the rest, and keeps
/// serving the real kernel.
#[test]
fn malformed_and_unexpected_kernel_messages() {
    let mut lab = lab(LabConfig::default());
    let addr = lab.b_addr(4014);
    // Registers B's client, so mapping requests are not dropped as unregistered.
    let (listener, acceptor) = listen(&lab, addr);
    let mark = lab.b.daemon.as_ref().unwrap().log().len();
    let tap = lab.b.tap.as_ref().unwrap();
    let (s1, s2, s3, s4) = (0x7d00_0001, 0x7d00_0002, 0x7d00_0003, 0x7d00_0004);
    // ADD_MAPPING without its address.
    tap.inject(
        &raw_msg(
            RDMA_NL_IWPM_ADD_MAPPING,
            s1,
            &[(1, 0u32.to_ne_bytes().to_vec())],
        ),
        &[s1],
    )
    .unwrap();
    // QUERY_MAPPING without the remote address.
    tap.inject(
        &raw_msg(
            RDMA_NL_IWPM_QUERY_MAPPING,
            s2,
            &[
                (1, 0u32.to_ne_bytes().to_vec()),
                (2, sockaddr(lab.b_addr(4015))),
                (4, 0u32.to_ne_bytes().to_vec()),
            ],
        ),
        &[s2],
    )
    .unwrap();
    // An op the protocol does not have.
    tap.inject(&raw_msg(12, s3, &[]), &[s3]).unwrap();
    // Not even a netlink header.
    tap.inject(&[1, 2, 3, 4, 5, 6, 7], &[]).unwrap();
    // REMOVE_MAPPING for something never mapped.
    let mut remove = Vec::new();
    encode_kernel_msg(
        &Envelope {
            client: RDMA_NL_IWCM,
            flags: NLM_F_REQUEST,
            seq: 0x7d00_0005,
            pid: 0,
        },
        &KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from_socket_addr(lab.b_addr(9)),
            flags: None,
            unknown: vec![],
        }),
        &mut remove,
    );
    tap.inject(&remove, &[]).unwrap();
    // A MAPINFO_NUM with no replay behind it.
    let mut num = Vec::new();
    encode_kernel_msg(
        &Envelope {
            client: RDMA_NL_IWCM,
            flags: NLM_F_REQUEST,
            seq: s4,
            pid: 0,
        },
        &KernelMsg::MapInfoNum(MapInfoNumRequest {
            seq: 0,
            send_num: 5,
            unknown: vec![],
        }),
        &mut num,
    );
    tap.inject(&num, &[s4]).unwrap();

    let answers = tap.wait_injected_answers(3, WAIT);
    let handle_err = |seq: u32| {
        answers.iter().any(|f| {
            matches!(f, DaemonFrame::Msg(_, DaemonMsg::HandleErr(HandleErr { seq: s, code, .. }))
                if *s == seq && *code == err::IWPM_INVALID_NLMSG_ERR)
        })
    };
    assert!(
        handle_err(s1),
        "no HANDLE_ERR 10 for the bad ADD: {answers:?}"
    );
    assert!(
        handle_err(s2),
        "no HANDLE_ERR 10 for the bad QUERY: {answers:?}"
    );
    assert!(
        answers.iter().any(|f| matches!(
            f,
            DaemonFrame::Msg(_, DaemonMsg::MapInfoNum(r)) if r.seq == s4 && r.send_num == 5
        )),
        "MAPINFO_NUM not acknowledged: {answers:?}"
    );
    assert!(
        !answers
            .iter()
            .any(|f| matches!(f, DaemonFrame::Msg(e, _) if e.seq == s3)),
        "answered an unknown op"
    );
    let d = lab.b.dump().unwrap();
    assert!(d.core(Counter::NetlinkMalformed) >= 2, "{d:?}");
    assert!(d.core(Counter::NetlinkUnknownOp) >= 1, "{d:?}");
    assert!(d.core(Counter::NetlinkBadFraming) >= 1, "{d:?}");
    assert!(d.core(Counter::RemoveUnknown) >= 1, "{d:?}");
    assert_eq!(d.core(Counter::NetlinkIn(KernelOp::MapInfoNum)), 1);
    let log = lab.b.daemon.as_ref().unwrap().log();
    for needle in [
        "invalid netlink message",
        "invalid opcode",
        "dropped from here",
    ] {
        assert!(
            log.count_from(mark, needle) >= 1,
            "no log line with {needle:?}:\n{}",
            log.lines_from(mark).join("\n")
        );
    }
    // Still serving: a connection through the listener works end to end.
    lab.b.daemon.as_mut().unwrap().check_running().unwrap();
    let conn = connect(&lab, addr);
    let dump_a = lab.a.dump().unwrap();
    let dump_b = lab.b.dump().unwrap();
    assert_consistent(&lab, &conn, &listener, &acceptor, &dump_a, &dump_b);
    assert_eq!(dump_b.mappings.len(), 1, "the bad messages created nothing");
    assert_no_violations(&lab);
}
