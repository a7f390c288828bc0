//! Listen and connect through two real `iwpmd` processes: IPv4 and IPv6, a wildcard
//! listener, a connect with no listener (the reject path), a mapping shared by two
//! listeners (reference counts), and a daemon that is absent at first use.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use iwpm_core::Counter;
use iwpm_kernel_emu::kernel::{RequestKind, IWPM_PID_UNAVAILABLE};
use iwpm_kernel_emu::{CmError, MapOutcome, RejectReason, RemoteInfoLookup, UnmappedReason};
use iwpm_lab::dump::IoCounter;
use iwpm_lab::netns;
use iwpm_lab::{Family, Lab, LabConfig, Topology};
use iwpm_proto::consts::err;
use iwpm_proto::netlink::{
    encode_kernel_msg, AddMappingReply, DaemonFrame, DaemonMsg, Envelope, HandleErr, KernelMsg,
    ManageMappingRequest,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::common::*;

/// B listens, A opens five connections; both daemons hold real ports for exactly what both
/// kernels use, the passive ends agree, and teardown releases everything.
fn listen_connect_roundtrip(mut lab: Lab) {
    let listen_addr = lab.b_addr(4000);
    let (listener, acceptor) = listen(&lab, listen_addr);
    assert_eq!(listener.info.mapping, MapOutcome::Mapped);
    let lport = listener.info.mapped_local.port();
    assert!(
        tcp_port_held(&lab.b.place, listen_addr.ip(), lport),
        "B's mapped listener port {lport} is not reserved"
    );
    let conns: Vec<_> = (0..5).map(|_| connect(&lab, listen_addr)).collect();
    let dump_a = lab.a.dump().unwrap();
    let dump_b = lab.b.dump().unwrap();
    assert_eq!(dump_a.mappings.len(), 5, "{dump_a:?}");
    assert_eq!(dump_b.mappings.len(), 1, "{dump_b:?}");
    assert_eq!(dump_a.io(IoCounter::PortsHeld), 5);
    assert_eq!(dump_b.io(IoCounter::PortsHeld), 1);
    for c in &conns {
        let pi = assert_consistent(&lab, c, &listener, &acceptor, &dump_a, &dump_b);
        // Port-mapped: the wire carries the mapped ports on both ends.
        assert_eq!(pi.wire_remote, c.info.mapped_local);
        assert_eq!(pi.wire_local, listener.info.mapped_local);
        assert!(tcp_port_held(
            &lab.a.place,
            c.info.local.ip(),
            c.info.mapped_local.port()
        ));
    }
    let ka = lab.a.host.stats().kernel;
    assert_eq!((ka.maps_mapped, ka.maps_unmapped), (5, 0));
    assert_eq!(lab.b.host.stats().kernel.remote_info_received, 5);

    for c in &conns {
        c.id.destroy().unwrap();
    }
    assert!(acceptor.wait(WAIT, |acc| acc.iter().all(|a| a.disconnected)));
    for a in acceptor.accepted() {
        a.id.destroy().unwrap();
    }
    listener.id.destroy().unwrap();
    let dump_a = dump_until(&mut lab, "A", |d| d.mappings.is_empty());
    let dump_b = dump_until(&mut lab, "B", |d| d.mappings.is_empty());
    assert!(dump_a.mappings.is_empty() && dump_b.mappings.is_empty());
    assert_eq!(
        dump_a.io(IoCounter::PortsHeld) + dump_b.io(IoCounter::PortsHeld),
        0
    );
    assert!(!tcp_port_held(&lab.b.place, listen_addr.ip(), lport));
    for c in &conns {
        assert!(!tcp_port_held(
            &lab.a.place,
            c.info.local.ip(),
            c.info.mapped_local.port()
        ));
    }
    assert_no_violations(&lab);
    for side in lab.sides_mut() {
        let status = side.stop_daemon().unwrap().unwrap();
        assert!(status.success(), "iwpmd {} exited {status}", side.name);
    }
}

#[test]
fn listen_connect_ipv4_direct() {
    // No relay, no tap: each daemon's peer sockets are on its host's own address.
    let lab = lab(LabConfig {
        relay: None,
        taps: false,
        ..LabConfig::default()
    });
    let log = lab.b.daemon.as_ref().unwrap().log().text();
    assert!(
        log.contains(&format!("V4Listener=127.0.0.2:{}", lab.peer_port)),
        "B's daemon is not on its host address:\n{log}"
    );
    listen_connect_roundtrip(lab);
}

#[test]
fn listen_connect_ipv4_through_relays_and_taps() {
    let lab = lab(LabConfig::default());
    listen_connect_roundtrip(lab);
}

#[test]
fn listen_connect_ipv6() {
    if netns::is_root() && netns::have_ip() {
        let lab = lab(LabConfig {
            family: Family::V6,
            topology: Topology::Private,
            ..LabConfig::default()
        });
        assert!(lab.a.addrs.public.is_ipv6() && lab.b.addrs.public.is_ipv6());
        listen_connect_roundtrip(lab);
        return;
    }
    // Not root: the binary moves itself into a user + network namespace.
    let out = lab_command()
        .args(["--ipv6", "--connections", "20", "--json"])
        .output()
        .expect("run iwpm-lab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("namespace") {
        iwpm_testkit::host::say_skipped(
            "the IPv6 half without root",
            &format!("no network namespace available without root: {stderr}"),
        );
        return;
    }
    assert!(out.status.success(), "iwpm-lab --ipv6 failed: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["connections"]["consistent"], 20);
    assert_eq!(report["settings"]["family"], "IPv6");
}

#[test]
fn wildcard_listener() {
    let mut lab = lab(LabConfig::default());
    let wild = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 4001);
    let (listener, acceptor) = listen(&lab, wild);
    assert_eq!(listener.info.mapping, MapOutcome::Mapped);
    let m = listener.info.mapped_local;
    assert!(m.ip().is_unspecified(), "wildcard maps to a wildcard: {m}");
    assert_ne!(m.port(), 0);
    let dump_b = lab.b.dump().unwrap();
    let entry = dump_b.find(wild).expect("wildcard mapping in B's daemon");
    assert_eq!(entry.mapped, m);
    assert_eq!(entry.wildcard, Some(true));

    let dst = lab.b_addr(4001);
    let conn = connect(&lab, dst);
    let ai = &conn.info;
    assert_eq!(ai.mapping, MapOutcome::Mapped);
    // The ACCEPT carries the IP the application asked for with the mapped port.
    assert_eq!(ai.mapped_remote, SocketAddr::new(dst.ip(), m.port()));
    let dump_a = lab.a.dump().unwrap();
    assert_eq!(dump_a.find(ai.local).unwrap().mapped, ai.mapped_local);
    assert!(acceptor.wait(WAIT, |acc| acc.iter().any(|a| a.established)));
    let pi = acceptor.accepted().remove(0).info;
    assert_eq!(pi.wire_remote, ai.wire_local);
    assert_eq!(pi.wire_local, ai.wire_remote);
    if pi.remote_info == Some(RemoteInfoLookup::Found) {
        assert_eq!(pi.remote, ai.local, "B learned the real peer address");
        assert_eq!(
            pi.local, dst,
            "the child's local IP comes from the connection"
        );
    } else {
        // Overtaken by the connection (see `assert_consistent`): it must still arrive.
        assert!(
            lab.b.host.wait_for(WAIT, |v| v
                .remote_info
                .iter()
                .any(|e| e.remote.to_socket_addr() == Some(ai.local))),
            "B's kernel never got a REMOTE_INFO"
        );
    }
    assert_no_violations(&lab);
}

#[test]
fn connect_without_listener_is_rejected() {
    let mut lab = lab(LabConfig::default());
    let dst = lab.b_addr(4002);
    let e = lab.a.host.connect(None, dst).unwrap_err();
    match &e {
        CmError::Rejected {
            reason: RejectReason::NoListener { .. },
            mapping:
                Some(MapOutcome::Unmapped(UnmappedReason::ErrorCode {
                    kind: RequestKind::QueryMapping,
                    code,
                })),
        } => assert_eq!(*code, err::IWPM_REMOTE_QUERY_REJECT),
        other => panic!("expected a peer reject (MAPPING_ERR 16), got {other:?}"),
    }
    let tap = lab.a.tap.as_ref().unwrap().records();
    let q = tap.queries.values().next().expect("QUERY seen at the tap");
    assert!(q.answered.is_some());
    assert_eq!(q.err, Some(err::IWPM_REMOTE_QUERY_REJECT));
    let ka = lab.a.host.stats().kernel;
    assert_eq!((ka.maps_mapped, ka.maps_unmapped), (0, 1));
    // The failed id was destroyed: its mapping goes away.
    let dump_a = dump_until(&mut lab, "A", |d| d.mappings.is_empty());
    assert!(dump_a.mappings.is_empty());
    assert!(dump_a.core(Counter::RejectsReceived) >= 1, "{dump_a:?}");
    let dump_b = lab.b.dump().unwrap();
    assert!(dump_b.core(Counter::RejectsSent) >= 1, "{dump_b:?}");
    assert_eq!(lab.b.host.stats().kernel.remote_info_received, 0);
    assert_no_violations(&lab);
}

fn kernel_msg(seq: u32, msg: &KernelMsg) -> Vec<u8> {
    let mut out = Vec::new();
    encode_kernel_msg(&Envelope::kernel_request(seq), msg, &mut out);
    out
}

fn manage(addr: SocketAddr, flags: Option<u32>) -> ManageMappingRequest {
    ManageMappingRequest {
        echo_seq: 0,
        addr: SockAddrStorage::from_socket_addr(addr),
        flags,
        unknown: vec![],
    }
}

/// A wildcard `rdma_listen` with two iWARP devices makes the kernel send the same
/// ADD_MAPPING twice (one per device); the daemon shares the mapping and counts
/// references. The emulator has one device per host, so the test plays the second device
/// through B's kernel-link tap.
#[test]
fn two_listeners_share_a_local_address() {
    let mut lab = lab(LabConfig::default());
    let wild = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 4003);
    let (listener, _acceptor) = listen(&lab, wild);
    let m = listener.info.mapped_local;
    let tap = lab.b.tap.as_ref().unwrap();
    let (s1, s2) = (0x7e00_0001, 0x7e00_0002);
    tap.inject(
        &kernel_msg(s1, &KernelMsg::AddMapping(manage(wild, Some(0)))),
        &[s1],
    )
    .unwrap();
    let answers = tap.wait_injected_answers(1, WAIT);
    match answers.first() {
        Some(DaemonFrame::Msg(
            _,
            DaemonMsg::AddMapping(AddMappingReply {
                seq,
                addr,
                mapped_addr,
                err: 0,
                ..
            }),
        )) => {
            assert_eq!(*seq, s1);
            assert_eq!(addr.to_socket_addr(), Some(wild));
            assert_eq!(mapped_addr.to_socket_addr(), Some(m), "shared mapping");
        }
        other => panic!("expected an ADD_MAPPING reply, got {other:?}"),
    }
    let d = lab.b.dump().unwrap();
    assert_eq!(d.mappings.len(), 1);
    assert_eq!(d.find(wild).unwrap().refcount, Some(2));
    assert_eq!(d.io(IoCounter::PortsHeld), 1);

    // A specific address on the same port collides with the wildcard mapping.
    let specific = lab.b_addr(4003);
    let tap = lab.b.tap.as_ref().unwrap();
    tap.inject(
        &kernel_msg(s2, &KernelMsg::AddMapping(manage(specific, Some(0)))),
        &[s2],
    )
    .unwrap();
    let answers = tap.wait_injected_answers(2, WAIT);
    assert!(
        matches!(
            answers.get(1),
            Some(DaemonFrame::Msg(_, DaemonMsg::HandleErr(HandleErr { seq, code, .. })))
                if *seq == s2 && *code == err::IWPM_DUPLICATE_MAPPING_ERR
        ),
        "expected HANDLE_ERR 12: {answers:?}"
    );

    // The first device's listener goes: one reference left, the port stays reserved.
    listener.id.destroy().unwrap();
    let d = dump_until(&mut lab, "B", |d| {
        d.find(wild).and_then(|m| m.refcount) == Some(1)
    });
    assert_eq!(d.find(wild).and_then(|m| m.refcount), Some(1), "{d:?}");
    assert!(tcp_port_held(&lab.b.place, wild.ip(), m.port()));

    // The second device's listener goes: mapping and port released.
    let tap = lab.b.tap.as_ref().unwrap();
    tap.inject(
        &kernel_msg(0x7e00_0003, &KernelMsg::RemoveMapping(manage(wild, None))),
        &[],
    )
    .unwrap();
    let d = dump_until(&mut lab, "B", |d| d.mappings.is_empty());
    assert!(d.mappings.is_empty(), "{d:?}");
    assert_eq!(d.io(IoCounter::PortsHeld), 0);
    assert!(!tcp_port_held(&lab.b.place, wild.ip(), m.port()));
    assert_no_violations(&lab);
}

/// The kernel marks the daemon unavailable when its REG_PID multicast reaches nobody and
/// falls back to unmapped addresses without asking again, until a daemon says HELLO.
#[test]
fn daemon_absent_at_first_use() {
    let mut lab = lab(LabConfig {
        start_daemons: false,
        ..LabConfig::default()
    });
    let first = lab
        .b
        .host
        .listen(lab.b_addr(4004), iwpm_kernel_emu::AcceptMode::Auto, None);
    let first = first.expect("listen without a daemon still works, unmapped");
    assert!(
        matches!(
            first.info.mapping,
            MapOutcome::Unmapped(UnmappedReason::RegPidSendFailed { .. })
        ),
        "{:?}",
        first.info.mapping
    );
    assert_eq!(lab.b.host.kernel_view().pid, IWPM_PID_UNAVAILABLE);
    let reg_pids = lab.b.host.stats().kernel.reg_pid_sent;
    let second = lab
        .b
        .host
        .listen(lab.b_addr(4005), iwpm_kernel_emu::AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(
        second.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::NoDaemon {
            pid: IWPM_PID_UNAVAILABLE
        })
    );
    assert_eq!(
        lab.b.host.stats().kernel.reg_pid_sent,
        reg_pids,
        "no REG_PID while unavailable"
    );

    lab.a.start_daemon().unwrap();
    lab.b.start_daemon().unwrap();
    let pid = lab.b.daemon.as_ref().unwrap().pid();
    assert_eq!(lab.b.host.kernel_view().pid, pid as i32);
    let (listener, acceptor) = listen(&lab, lab.b_addr(4006));
    assert_eq!(listener.info.mapping, MapOutcome::Mapped);
    let conn = connect(&lab, lab.b_addr(4006));
    let dump_a = lab.a.dump().unwrap();
    let dump_b = lab.b.dump().unwrap();
    assert_consistent(&lab, &conn, &listener, &acceptor, &dump_a, &dump_b);
    // The unmapped listeners are unknown to the daemon.
    assert!(dump_b.find(lab.b_addr(4004)).is_none());
    first.id.destroy().unwrap();
    second.id.destroy().unwrap();
    assert_no_violations(&lab);
    std::thread::sleep(Duration::from_millis(10));
}
