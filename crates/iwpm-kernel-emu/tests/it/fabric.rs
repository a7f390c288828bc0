//! Hosts, ids and the fabric driven by scripted daemons over the real Unix sockets.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use iwpm_kernel_emu::kernel::{Registration, RequestKind};
use iwpm_kernel_emu::{
    AcceptMode, AddrError, CmError, CmEventKind, EmulatedHost, EventChannel, Fabric, HostConfig,
    IdState, MapOutcome, PortMapMode, RejectReason, RemoteInfoLookup, Side, UnmappedReason,
    UnreachableReason,
};
use iwpm_testkit::fs::sock_path;

use crate::fake_daemon::{Behaviour, Directory, FakeDaemon};

const T: Duration = Duration::from_secs(5);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn host(fabric: &Fabric, name: &str, ip_: &str, mode: PortMapMode) -> EmulatedHost {
    fabric
        .add_host(
            HostConfig::new(name, ip(ip_), sock_path(name))
                .with_mode(mode)
                .with_request_timeout(Duration::from_millis(300)),
        )
        .unwrap()
}

fn with_daemon(h: &EmulatedHost, dir: &Directory, b: Behaviour) -> FakeDaemon {
    let d = FakeDaemon::start(h.kernel_socket_path(), h.ips(), dir, b);
    assert!(h.wait_for_daemon(T), "daemon announced itself");
    d
}

#[test]
fn siw_listen_connect_one_host() {
    let fabric = Fabric::new();
    let a = host(&fabric, "a", "127.0.0.1", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let d = with_daemon(&a, &dir, Behaviour::default());

    let l = a
        .listen(addr("127.0.0.1:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(l.info.mapping, MapOutcome::Mapped);
    assert_eq!(l.info.mapped_local, addr("127.0.0.1:4000"));
    assert_eq!(a.kernel_view().registration, Registration::Valid);

    let c = a.connect(None, addr("127.0.0.1:4000")).unwrap();
    assert_eq!(c.info.side, Side::Active);
    assert_eq!(c.info.mapping, MapOutcome::Mapped);
    assert_eq!(c.info.local.ip(), ip("127.0.0.1"));
    // siw: from the unmapped local address to the mapped remote one.
    assert_eq!(c.info.wire_local, c.info.local);
    assert_eq!(c.info.wire_remote, addr("127.0.0.1:4000"));

    let req = l.id.get_event(T).unwrap();
    let CmEventKind::ConnectRequest(info) = &req.kind else {
        panic!("expected a connect request, got {req:?}")
    };
    assert_eq!(info.side, Side::Passive);
    assert_eq!(info.remote_info, Some(RemoteInfoLookup::Found));
    assert_eq!(info.remote, c.info.local);
    assert_eq!(info.local, addr("127.0.0.1:4000"));
    assert_eq!(req.listen_id.as_ref(), Some(&l.id));
    let child = req.id.clone();
    assert!(child
        .host()
        .wait_for(T, |_| child.state() == Some(IdState::Established)));

    // Auto-accepted: the child's own queue says so.
    assert!(matches!(
        child.get_event(T).unwrap().kind,
        CmEventKind::Established(_)
    ));
    c.id.disconnect().unwrap();
    assert_eq!(child.get_event(T).unwrap().kind, CmEventKind::Disconnected);
    assert_eq!(c.id.get_event(T).unwrap().kind, CmEventKind::Disconnected);
    c.id.destroy().unwrap();
    child.destroy().unwrap();
    l.id.destroy().unwrap();
    assert!(a.wait_for(T, |v| v.mapinfo.is_empty()));
    // REMOVE for the active id and the listener; none for the child.
    let ok = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        d.seen().removes.len() == 2
    });
    assert!(ok, "{:?}", d.seen().removes);
    let seen = d.seen();
    assert!(seen.removes.contains(&addr("127.0.0.1:4000")));
    assert!(seen.removes.contains(&c.info.local));
    assert_eq!((seen.reg_pids, seen.adds, seen.queries), (1, 1, 1));
    assert!(
        seen.dones.contains(&-22),
        "REMOTE_INFO is answered with -EINVAL"
    );
    assert!(a.violations().is_empty(), "{:?}", a.violations());
    assert_eq!(fabric.live_connections(), 0);
}

#[test]
fn port_mapped_two_hosts_use_mapped_ports_on_the_wire() {
    let fabric = Fabric::new();
    let a = host(&fabric, "pa", "127.0.0.11", PortMapMode::PortMapped);
    let b = host(&fabric, "pb", "127.0.0.12", PortMapMode::PortMapped);
    let dir = Directory::default();
    let b1 = Behaviour {
        port_offset: 1000,
        ..Behaviour::default()
    };
    let _da = with_daemon(&a, &dir, b1.clone());
    let _db = with_daemon(&b, &dir, b1);

    let l = a
        .listen(addr("127.0.0.11:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(l.info.mapped_local, addr("127.0.0.11:5000"));
    assert_eq!(l.info.wire_local, addr("127.0.0.11:5000"));

    let c = b
        .connect(Some(addr("127.0.0.12:0")), addr("127.0.0.11:4000"))
        .unwrap();
    let local = c.info.local;
    assert_eq!(c.info.mapped_local.port(), local.port() + 1000);
    assert_eq!(c.info.mapped_remote, addr("127.0.0.11:5000"));
    assert_eq!(c.info.wire_local, c.info.mapped_local);
    assert_eq!(c.info.wire_remote, addr("127.0.0.11:5000"));
    assert_eq!(c.info.remote, addr("127.0.0.11:4000"));

    let req = l.id.get_event(T).unwrap();
    let CmEventKind::ConnectRequest(info) = req.kind else {
        panic!("expected a connect request")
    };
    // The passive side translated the peer's mapped address back to the real one.
    assert_eq!(info.remote_info, Some(RemoteInfoLookup::Found));
    assert_eq!(info.remote, local);
    assert_eq!(info.mapped_remote, c.info.mapped_local);
    assert_eq!(info.local, addr("127.0.0.11:4000"));
    assert!(fabric.violations().is_empty(), "{:?}", fabric.violations());
}

#[test]
fn async_ids_report_every_event() {
    let fabric = Fabric::new();
    let a = host(&fabric, "ea", "127.0.0.21", PortMapMode::NoPortMap);
    let b = host(&fabric, "eb", "127.0.0.22", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _da = with_daemon(&a, &dir, Behaviour::default());
    let _db = with_daemon(&b, &dir, Behaviour::default());

    let server_ch = EventChannel::new();
    let listener = a.create_id(Some(&server_ch));
    listener.bind_addr(addr("127.0.0.21:7000")).unwrap();
    listener.listen().unwrap();

    let client_ch = EventChannel::new();
    let id = b.create_id(Some(&client_ch));
    id.resolve_addr(None, addr("127.0.0.21:7000")).unwrap();
    assert_eq!(
        client_ch.get_event(T).unwrap().kind,
        CmEventKind::AddrResolved
    );
    id.resolve_route().unwrap();
    assert_eq!(
        client_ch.get_event(T).unwrap().kind,
        CmEventKind::RouteResolved
    );
    assert_eq!(id.connect().unwrap(), None);

    let ev = server_ch.get_event(T).unwrap();
    assert_eq!(ev.listen_id.as_ref(), Some(&listener));
    assert!(matches!(ev.kind, CmEventKind::ConnectRequest(_)));
    let child = ev.id;
    let info = child.accept().unwrap();
    assert_eq!(info.side, Side::Passive);
    assert!(matches!(
        server_ch.get_event(T).unwrap().kind,
        CmEventKind::Established(_)
    ));
    let ev = client_ch.get_event(T).unwrap();
    assert_eq!(ev.id, id);
    let CmEventKind::Established(ci) = ev.kind else {
        panic!("expected established")
    };
    assert_eq!(ci.remote, addr("127.0.0.21:7000"));

    child.disconnect().unwrap();
    assert_eq!(
        server_ch.get_event(T).unwrap().kind,
        CmEventKind::Disconnected
    );
    assert_eq!(
        client_ch.get_event(T).unwrap().kind,
        CmEventKind::Disconnected
    );

    // Address errors arrive as events too.
    let bad = b.create_id(Some(&client_ch));
    bad.resolve_addr(None, addr("127.0.0.99:1")).unwrap();
    assert_eq!(
        client_ch.get_event(T).unwrap().kind,
        CmEventKind::AddrError(AddrError::UnknownDestination(ip("127.0.0.99")))
    );
    assert!(fabric.violations().is_empty(), "{:?}", fabric.violations());
}

#[test]
fn reject_is_seen_by_the_active_side() {
    let fabric = Fabric::new();
    let a = host(&fabric, "ra", "127.0.0.31", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _d = with_daemon(&a, &dir, Behaviour::default());
    let l = a
        .listen(addr("127.0.0.31:7000"), AcceptMode::Manual, None)
        .unwrap();
    let a2 = a.clone();
    let client = std::thread::spawn(move || a2.connect(None, addr("127.0.0.31:7000")));
    let child = l.id.get_request(T).unwrap();
    assert_eq!(child.state(), Some(IdState::ConnectRequest));
    child.reject().unwrap();
    let err = client.join().unwrap().unwrap_err();
    assert_eq!(
        err,
        CmError::Rejected {
            reason: RejectReason::ByPeer,
            mapping: Some(MapOutcome::Mapped)
        }
    );
    // The failed id was destroyed by EmulatedHost::connect: its REMOVE went out, mapinfo holds
    // only the listener.
    assert!(a.wait_for(T, |v| v.mapinfo.len() == 1));
}

#[test]
fn no_daemon_falls_back_unmapped_and_still_connects() {
    let fabric = Fabric::new();
    let a = host(&fabric, "na", "127.0.0.41", PortMapMode::PortMapped);
    let l = a
        .listen(addr("127.0.0.41:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(
        l.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::RegPidSendFailed { errno: -3 })
    );
    let c = a.connect(None, addr("127.0.0.41:4000")).unwrap();
    assert_eq!(
        c.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::NoDaemon { pid: -2 })
    );
    assert_eq!(c.info.wire_remote, addr("127.0.0.41:4000"));
    assert_eq!(a.stats().kernel.reg_pid_sent, 1);
    assert!(a.kernel_view().mapinfo.is_empty(), "never mapped");
}

#[test]
fn silent_daemon_times_out_then_unmapped() {
    let fabric = Fabric::new();
    let a = host(&fabric, "sa", "127.0.0.51", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _d = with_daemon(
        &a,
        &dir,
        Behaviour {
            answer_mappings: false,
            ..Behaviour::default()
        },
    );
    let started = std::time::Instant::now();
    let l = a
        .listen(addr("127.0.0.51:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(
        l.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::Timeout {
            kind: RequestKind::AddMapping,
            ..
        })
    ));
    assert_eq!(a.stats().kernel.timeouts, 1);
    // Identity entry recorded even though it failed.
    assert_eq!(a.kernel_view().mapinfo.len(), 1);
    let c = a.connect(None, addr("127.0.0.51:4000")).unwrap();
    assert!(matches!(
        c.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::Timeout {
            kind: RequestKind::QueryMapping,
            ..
        })
    ));
    assert!(a.violations().is_empty());
}

#[test]
fn unregistered_daemon_stalls_each_call_on_reg_pid() {
    let fabric = Fabric::new();
    let a = host(&fabric, "ua", "127.0.0.52", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _d = with_daemon(
        &a,
        &dir,
        Behaviour {
            answer_reg_pid: false,
            ..Behaviour::default()
        },
    );
    let l = a
        .listen(addr("127.0.0.52:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert!(matches!(
        l.info.mapping,
        MapOutcome::Unmapped(UnmappedReason::Timeout {
            kind: RequestKind::RegPid,
            ..
        })
    ));
    assert!(a.kernel_view().mapinfo.is_empty(), "not mapped: no entry");
    assert_eq!(a.kernel_view().registration, Registration::Incompl);
}

#[test]
fn port_mapped_peer_without_daemon_is_rejected_visibly() {
    let fabric = Fabric::new();
    let a = host(&fabric, "xa", "127.0.0.61", PortMapMode::PortMapped);
    let b = host(&fabric, "xb", "127.0.0.62", PortMapMode::PortMapped);
    let dir = Directory::default();
    let _da = with_daemon(
        &a,
        &dir,
        Behaviour {
            port_offset: 500,
            ..Behaviour::default()
        },
    );
    let l = a
        .listen(addr("127.0.0.61:4000"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(l.info.wire_local, addr("127.0.0.61:4500"));
    // B has no daemon: it connects unmapped to port 4000, where A's RNIC has no listener.
    let err = b.connect(None, addr("127.0.0.61:4000")).unwrap_err();
    assert_eq!(
        err,
        CmError::Rejected {
            reason: RejectReason::NoListener {
                wire_dst: addr("127.0.0.61:4000")
            },
            mapping: Some(MapOutcome::Unmapped(UnmappedReason::RegPidSendFailed {
                errno: -3
            }))
        }
    );
    assert_eq!(a.stats().cm.refused_no_listener, 1);
}

#[test]
fn wrong_mapped_remote_fails_the_connection() {
    let fabric = Fabric::new();
    let a = host(&fabric, "wa", "127.0.0.71", PortMapMode::PortMapped);
    let b = host(&fabric, "wb", "127.0.0.72", PortMapMode::PortMapped);
    let dir = Directory::default();
    let good = Behaviour {
        port_offset: 100,
        ..Behaviour::default()
    };
    let _da = with_daemon(&a, &dir, good.clone());
    let _db = with_daemon(
        &b,
        &dir,
        Behaviour {
            remote_port_skew: 1,
            ..good.clone()
        },
    );
    a.listen(addr("127.0.0.71:4000"), AcceptMode::Auto, None)
        .unwrap();
    let err = b.connect(None, addr("127.0.0.71:4000")).unwrap_err();
    assert!(
        matches!(
            err,
            CmError::Rejected {
                reason: RejectReason::NoListener { wire_dst },
                mapping: Some(MapOutcome::Mapped)
            } if wire_dst == addr("127.0.0.71:4101")
        ),
        "{err:?}"
    );

    let c = host(&fabric, "wc", "127.0.0.73", PortMapMode::PortMapped);
    let _dc = with_daemon(
        &c,
        &dir,
        Behaviour {
            remote_ip_override: Some(ip("127.0.0.99")),
            ..good
        },
    );
    let err = c.connect(None, addr("127.0.0.71:4000")).unwrap_err();
    assert_eq!(
        err,
        CmError::Unreachable {
            reason: UnreachableReason::NoRoute {
                wire_dst: addr("127.0.0.99:4100")
            },
            mapping: Some(MapOutcome::Mapped)
        }
    );
}

#[test]
fn colliding_mappings_give_duplicate_tuple() {
    let fabric = Fabric::new();
    let a = host(&fabric, "da", "127.0.0.81", PortMapMode::PortMapped);
    let b = host(&fabric, "db", "127.0.0.82", PortMapMode::PortMapped);
    let dir = Directory::default();
    let _da = with_daemon(&a, &dir, Behaviour::default());
    let _db = with_daemon(
        &b,
        &dir,
        Behaviour {
            fixed_mapped_port: Some(40000),
            ..Behaviour::default()
        },
    );
    a.listen(addr("127.0.0.81:4000"), AcceptMode::Auto, None)
        .unwrap();
    let first = b.connect(None, addr("127.0.0.81:4000")).unwrap();
    assert_eq!(first.info.wire_local, addr("127.0.0.82:40000"));
    let err = b.connect(None, addr("127.0.0.81:4000")).unwrap_err();
    assert!(
        matches!(
            err,
            CmError::Rejected {
                reason: RejectReason::DuplicateTuple { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn missing_remote_info_reports_the_mapped_address() {
    let fabric = Fabric::new();
    let a = host(&fabric, "ma", "127.0.0.91", PortMapMode::PortMapped);
    let b = host(&fabric, "mb", "127.0.0.92", PortMapMode::PortMapped);
    let dir = Directory::default();
    let off = Behaviour {
        port_offset: 10,
        ..Behaviour::default()
    };
    let _da = with_daemon(
        &a,
        &dir,
        Behaviour {
            send_remote_info: false,
            ..off.clone()
        },
    );
    let _db = with_daemon(&b, &dir, off);
    let l = a
        .listen(addr("127.0.0.91:4000"), AcceptMode::Auto, None)
        .unwrap();
    let c = b.connect(None, addr("127.0.0.91:4000")).unwrap();
    let CmEventKind::ConnectRequest(info) = l.id.get_event(T).unwrap().kind else {
        panic!("expected a connect request")
    };
    assert_eq!(info.remote_info, Some(RemoteInfoLookup::Missed));
    assert_eq!(info.remote, c.info.mapped_local);
    assert_eq!(info.local, addr("127.0.0.91:4010"));
    assert_eq!(a.stats().kernel.remote_info_misses, 1);
}

#[test]
fn daemon_restart_gets_the_mappings_replayed() {
    let fabric = Fabric::new();
    let a = host(&fabric, "rsa", "127.0.0.101", PortMapMode::PortMapped);
    let dir = Directory::default();
    let off = Behaviour {
        port_offset: 7,
        ..Behaviour::default()
    };
    let d1 = with_daemon(&a, &dir, off.clone());
    let _l1 = a
        .listen(addr("127.0.0.101:4000"), AcceptMode::Auto, None)
        .unwrap();
    let _l2 = a
        .listen(addr("127.0.0.101:4001"), AcceptMode::Auto, None)
        .unwrap();
    let pid1 = a.kernel_view().pid;
    d1.stop();
    let d2 = FakeDaemon::start(a.kernel_socket_path(), a.ips(), &dir, off);
    assert!(a.wait_for(T, |v| v.pid > 0 && v.pid != pid1));
    let ok = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        !d2.seen().mapinfo_nums.is_empty()
    });
    assert!(ok);
    let seen = d2.seen();
    assert_eq!(seen.mapinfo_nums, [2]);
    let mut records: Vec<_> = seen.mapinfo_records.iter().map(|r| (r.0, r.1)).collect();
    records.sort();
    assert_eq!(
        records,
        [
            (addr("127.0.0.101:4000"), addr("127.0.0.101:4007")),
            (addr("127.0.0.101:4001"), addr("127.0.0.101:4008"))
        ]
    );
    assert_eq!(a.kernel_view().registration, Registration::Incompl);
    // The next listen registers again with the new daemon.
    a.listen(addr("127.0.0.101:4002"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(d2.seen().reg_pids, 1);
    assert!(a.violations().is_empty(), "{:?}", a.violations());
}

#[test]
fn replies_without_request_flag_are_violations() {
    let fabric = Fabric::new();
    let a = host(&fabric, "fa", "127.0.0.111", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _d = FakeDaemon::start(
        a.kernel_socket_path(),
        a.ips(),
        &dir,
        Behaviour {
            flags: 0,
            ..Behaviour::default()
        },
    );
    assert!(a.wait_for(T, |_| !a.violations().is_empty()));
    assert!(!a.kernel_view().pid.is_positive(), "HELLO was dropped");
    assert!(a
        .violations()
        .iter()
        .all(|v| matches!(v, iwpm_kernel_emu::Violation::MissingRequestFlag { .. })));
}

#[test]
fn host_config_errors() {
    let fabric = Fabric::new();
    let _a = host(&fabric, "ca", "127.0.0.121", PortMapMode::NoPortMap);
    let dup = fabric.add_host(HostConfig::new("cb", ip("127.0.0.121"), sock_path("cb")));
    assert!(matches!(
        dup,
        Err(iwpm_kernel_emu::HostError::DuplicateIp(_))
    ));
    let dup = fabric.add_host(HostConfig::new("ca", ip("127.0.0.122"), sock_path("ca")));
    assert!(matches!(
        dup,
        Err(iwpm_kernel_emu::HostError::DuplicateName(_))
    ));
    let a = fabric.host("ca").unwrap();
    let id = a.create_id(None);
    assert_eq!(
        id.bind_addr(addr("127.0.0.5:1")),
        Err(CmError::AddrNotLocal(addr("127.0.0.5:1")))
    );
    assert_eq!(
        id.connect(),
        Err(CmError::InvalidState {
            op: "connect",
            state: IdState::Idle
        })
    );
    id.destroy().unwrap();
    assert_eq!(id.destroy(), Err(CmError::Destroyed));
}

#[test]
fn ipv6_wildcard_listener() {
    let fabric = Fabric::new();
    let a = fabric
        .add_host(
            HostConfig {
                ips: vec![ip("127.0.0.131"), ip("::1")],
                ..HostConfig::new("v6", ip("127.0.0.131"), sock_path("v6"))
            }
            .with_request_timeout(Duration::from_millis(300)),
        )
        .unwrap();
    let dir = Directory::default();
    let _d = with_daemon(&a, &dir, Behaviour::default());
    let l = a.listen(addr("[::]:6000"), AcceptMode::Auto, None).unwrap();
    assert_eq!(l.info.mapping, MapOutcome::Mapped);
    assert_eq!(l.info.mapped_local, addr("[::]:6000"));
    let c = a.connect(None, addr("[::1]:6000")).unwrap();
    assert_eq!(c.info.local.ip(), ip("::1"));
    assert_eq!(c.info.wire_remote, addr("[::1]:6000"));
    let CmEventKind::ConnectRequest(p) = l.id.get_event(T).unwrap().kind else {
        panic!("expected a connect request")
    };
    // This daemon's REMOTE_INFO carries the wildcard mapped address, which is the key
    // the kernel looks up with, so it is found and the wildcard IP gets fixed.
    assert_eq!(p.remote_info, Some(RemoteInfoLookup::Found));
    assert_eq!(p.local, addr("[::1]:6000"));
    assert_eq!(p.remote, c.info.local);
    // An IPv4 connect finds no IPv6 listener.
    let err = a.connect(None, addr("127.0.0.131:6000")).unwrap_err();
    assert!(matches!(
        err,
        CmError::Rejected {
            reason: RejectReason::NoListener { .. },
            ..
        }
    ));
    assert!(a.violations().is_empty(), "{:?}", a.violations());
}

/// The listener index: a connection reaches the listener on its port (one bound to the
/// wildcard too), and a destroyed listener is gone from the index.
#[test]
fn connections_find_their_listener_by_port() {
    let fabric = Fabric::new();
    let a = host(&fabric, "lx", "127.0.0.43", PortMapMode::NoPortMap);
    let dir = Directory::default();
    let _d = with_daemon(&a, &dir, Behaviour::default());

    let wild = a
        .listen(addr("0.0.0.0:4300"), AcceptMode::Auto, None)
        .unwrap();
    let exact = a
        .listen(addr("127.0.0.43:4301"), AcceptMode::Auto, None)
        .unwrap();

    for (port, listener) in [(4301, &exact), (4300, &wild)] {
        let _c = a
            .connect(None, addr(&format!("127.0.0.43:{port}")))
            .unwrap();
        let req = listener.id.get_event(T).unwrap();
        assert!(
            matches!(req.kind, CmEventKind::ConnectRequest(_)),
            "{req:?}"
        );
        assert_eq!(req.listen_id.as_ref(), Some(&listener.id), "port {port}");
    }

    wild.id.destroy().unwrap();
    let refused = a.connect(None, addr("127.0.0.43:4300"));
    assert!(
        matches!(
            refused,
            Err(CmError::Rejected {
                reason: RejectReason::NoListener { .. },
                ..
            })
        ),
        "{refused:?}"
    );
    // The other listener still is one.
    let _c = a.connect(None, addr("127.0.0.43:4301")).unwrap();
    assert!(exact.id.get_event(T).is_ok());
}
