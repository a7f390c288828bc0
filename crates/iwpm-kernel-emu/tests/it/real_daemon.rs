//! The real `iwpmd` binary against the emulated kernel: listen and connect through its
//! mappings (with real UDP peer traffic and real port reservations), with zero protocol
//! violations.
//!
//! The daemon is `$IWPMD_BIN`, else the newer of `target/debug/iwpmd` and
//! `target/release/iwpmd` (`cargo build -p iwpmd`; `cargo test --workspace` builds it).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use iwpm_kernel_emu::kernel::Registration;
use iwpm_kernel_emu::{
    AcceptMode, CmEventKind, EmulatedHost, Fabric, FabricConfig, HostConfig, MapOutcome,
    PortMapMode, RemoteInfoLookup, Side,
};
use iwpm_testkit::daemon::{self as testkit, find_iwpmd, iwpmd_command};
use iwpm_testkit::fs::sock_path;
use iwpm_testkit::net::free_udp_port_on;
use rustix::process::Signal;

const T: Duration = Duration::from_secs(10);

/// A spawned daemon; terminated (SIGTERM, then kill) on drop. Its stderr is kept and
/// printed if the test fails.
struct Daemon(testkit::Daemon);

impl Daemon {
    fn start(host: &EmulatedHost, bind: Ipv4Addr, peer_port: u16) -> Daemon {
        let mut cmd = iwpmd_command(&find_iwpmd(), host.kernel_socket_path(), bind, peer_port);
        cmd.arg("--foreground");
        let d = Daemon(testkit::Daemon::spawn(cmd, peer_port));
        assert!(
            host.wait_for_daemon(T),
            "iwpmd never said HELLO:\n{}",
            d.log()
        );
        d
    }

    fn log(&self) -> String {
        self.0.stderr.text()
    }

    /// SIGTERM and wait for exit 0.
    fn terminate(mut self) {
        self.0.signal(Signal::TERM);
        let code = self.0.child.wait().unwrap();
        assert!(code.success(), "iwpmd exit {code:?}:\n{}", self.log());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.0.is_running() {
            let _ = self.0.try_signal(Signal::TERM);
            std::thread::sleep(Duration::from_millis(100));
            // The handle kills and reaps what is still running.
        }
        if std::thread::panicking() {
            eprintln!("--- iwpmd stderr ---\n{}", self.log());
        }
    }
}

/// A fabric whose connection set-up takes 2 ms, standing in for the TCP handshake and MPA
/// exchange of a real device. Without it the passive daemon's REMOTE_INFO can lose the
/// race against the connection when the daemon sends its UDP ACCEPT first (the kernel
/// would then report the peer's mapped address, as this emulator does).
fn fabric() -> Fabric {
    Fabric::with_config(FabricConfig {
        wire_delay: Duration::from_millis(2),
    })
}

fn host(fabric: &Fabric, name: &str, ip: Ipv4Addr, mode: PortMapMode) -> EmulatedHost {
    fabric
        .add_host(HostConfig::new(name, IpAddr::V4(ip), sock_path(name)).with_mode(mode))
        .unwrap()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn assert_clean(fabric: &Fabric) {
    assert!(
        fabric.violations().is_empty(),
        "violations: {:?}",
        fabric.violations()
    );
}

/// One siw-like host: every mapping is an identity. The connect goes to the host's own IP,
/// so the daemon answers it from its own table (no UDP to itself) and, the connecting side
/// not being port mapped, sends no REMOTE_INFO: the kernel finds no entry and reports the
/// connection's own remote address, which is the real one.
#[test]
fn siw_host_listen_connect() {
    let _shared = crate::real_daemons_shared();
    let ip = Ipv4Addr::new(127, 0, 0, 1);
    let fabric = fabric();
    let a = host(&fabric, "siw", ip, PortMapMode::NoPortMap);
    let daemon = Daemon::start(&a, ip, free_udp_port_on(&[ip]));
    assert!(a.wait_for(T, |v| v.abi_version == 4));

    let l = a
        .listen(addr("127.0.0.1:18515"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(l.info.mapping, MapOutcome::Mapped, "{}", daemon.log());
    assert_eq!(l.info.mapped_local, addr("127.0.0.1:18515"));
    assert_eq!(a.kernel_view().registration, Registration::Valid);

    let c = a.connect(None, addr("127.0.0.1:18515")).unwrap();
    assert_eq!(c.info.mapping, MapOutcome::Mapped, "{}", daemon.log());
    assert_eq!(c.info.mapped_local, c.info.local);
    assert_eq!(c.info.mapped_remote, addr("127.0.0.1:18515"));

    let CmEventKind::ConnectRequest(p) = l.id.get_event(T).unwrap().kind else {
        panic!("expected a connect request")
    };
    assert_eq!(p.side, Side::Passive);
    assert_eq!(
        p.remote_info,
        Some(RemoteInfoLookup::Missed),
        "no identity REMOTE_INFO"
    );
    assert_eq!(p.remote, c.info.local);

    c.id.destroy().unwrap();
    l.id.destroy().unwrap();
    assert!(a.wait_for(T, |v| v.mapinfo.is_empty() && v.remote_info.is_empty()));
    let s = a.stats().kernel;
    assert_eq!((s.reg_pid_sent, s.add_sent, s.query_sent), (1, 1, 1));
    assert_eq!(
        (s.add_replies, s.query_replies, s.remote_info_received),
        (1, 1, 0)
    );
    assert_eq!(s.remove_sent, 2);
    assert_eq!(s.timeouts, 0);
    assert_clean(&fabric);
    daemon.terminate();
}

/// One hardware-like host: the daemon reserves real TCP ports, which the connection uses
/// on the wire, and the passive side maps the peer back to its real address.
#[test]
fn port_mapped_host_uses_reserved_ports() {
    let _shared = crate::real_daemons_shared();
    let ip = Ipv4Addr::new(127, 0, 0, 1);
    let fabric = fabric();
    let a = host(&fabric, "rnic", ip, PortMapMode::PortMapped);
    let daemon = Daemon::start(&a, ip, free_udp_port_on(&[ip]));

    let l = a
        .listen(addr("127.0.0.1:18516"), AcceptMode::Auto, None)
        .unwrap();
    assert_eq!(l.info.mapping, MapOutcome::Mapped, "{}", daemon.log());
    let mapped = l.info.mapped_local;
    assert_eq!(mapped.ip(), l.info.local.ip());
    assert_eq!(l.info.wire_local, mapped);
    assert!(
        TcpListener::bind(mapped).is_err(),
        "the daemon holds the mapped port {mapped}"
    );

    let c = a.connect(None, addr("127.0.0.1:18516")).unwrap();
    assert_eq!(c.info.mapping, MapOutcome::Mapped, "{}", daemon.log());
    assert_eq!(c.info.wire_remote, mapped);
    assert_eq!(c.info.wire_local, c.info.mapped_local);
    assert!(TcpListener::bind(c.info.mapped_local).is_err());

    let CmEventKind::ConnectRequest(p) = l.id.get_event(T).unwrap().kind else {
        panic!("expected a connect request")
    };
    assert_eq!(p.remote_info, Some(RemoteInfoLookup::Found));
    assert_eq!(
        p.remote, c.info.local,
        "translated back to the real address"
    );
    assert_eq!(p.wire_remote, c.info.mapped_local);

    let active_mapped = c.info.mapped_local;
    c.id.destroy().unwrap();
    l.id.destroy().unwrap();
    // REMOVE_MAPPING released both reservations.
    let released = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        TcpListener::bind(mapped).is_ok() && TcpListener::bind(active_mapped).is_ok()
    });
    assert!(released, "ports not released:\n{}", daemon.log());
    assert_clean(&fabric);
    daemon.terminate();
}

/// Two hosts, two daemons talking UDP on loopback.
#[test]
fn two_hosts_two_daemons() {
    let _shared = crate::real_daemons_shared();
    let (ia, ib) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let port = free_udp_port_on(&[ia, ib]);
    let fabric = fabric();
    let a = host(&fabric, "two-a", ia, PortMapMode::PortMapped);
    let b = host(&fabric, "two-b", ib, PortMapMode::PortMapped);
    let _da = Daemon::start(&a, ia, port);
    let _db = Daemon::start(&b, ib, port);

    let l = a
        .listen(addr("127.0.0.1:18517"), AcceptMode::Auto, None)
        .unwrap();
    let mut conns = Vec::new();
    for _ in 0..5 {
        let c = b.connect(None, addr("127.0.0.1:18517")).unwrap();
        assert_eq!(c.info.mapping, MapOutcome::Mapped);
        assert_eq!(c.info.wire_remote, l.info.mapped_local);
        assert_eq!(c.info.local.ip(), IpAddr::V4(ib));
        let CmEventKind::ConnectRequest(p) = l.id.get_event(T).unwrap().kind else {
            panic!("expected a connect request")
        };
        assert_eq!(p.remote, c.info.local);
        conns.push(c);
    }
    assert_eq!(fabric.live_connections(), 5);
    for c in conns {
        c.id.destroy().unwrap();
    }
    assert!(b.wait_for(T, |v| v.mapinfo.is_empty()));
    assert_eq!(b.stats().kernel.remove_sent, 5);
    assert_eq!(a.stats().kernel.remote_info_received, 5);
    assert_eq!(a.stats().kernel.remote_info_hits, 5);
    assert_clean(&fabric);
}

/// A restarted daemon gets the live mappings replayed and takes over.
#[test]
fn restart_replays_mappings() {
    let shared = crate::real_daemons_shared();
    let ip = Ipv4Addr::new(127, 0, 0, 1);
    let fabric = fabric();
    let a = host(&fabric, "restart", ip, PortMapMode::PortMapped);
    let port = free_udp_port_on(&[ip]);
    let first = Daemon::start(&a, ip, port);
    let l1 = a
        .listen(addr("127.0.0.1:18518"), AcceptMode::Auto, None)
        .unwrap();
    let l2 = a
        .listen(addr("127.0.0.1:18519"), AcceptMode::Auto, None)
        .unwrap();
    assert!(l1.info.mapping.is_mapped() && l2.info.mapping.is_mapped());
    let old_pid = a.kernel_view().pid;
    drop(shared);
    // The mapped ports are free until the replay has them bound again.
    let alone = crate::real_daemons_alone();
    first.terminate();

    let second = Daemon::start(&a, ip, port);
    assert!(a.wait_for(T, |v| v.pid != old_pid));
    // The replay went out and was acknowledged in full.
    let acked = a.wait_for(T, |_| a.stats().kernel.mapinfo_num_acks == 1);
    assert!(acked, "{}", second.log());
    drop(alone);
    let _shared = crate::real_daemons_shared();
    let s = a.stats().kernel;
    assert_eq!(
        (s.replays, s.mapinfo_records_sent, s.mapinfo_num_sent),
        (1, 2, 1)
    );
    // The new daemon holds the replayed ports again.
    let held = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        TcpListener::bind(l1.info.mapped_local).is_err()
    });
    assert!(held, "{}", second.log());
    // And serves new requests after registering.
    let c = a.connect(None, addr("127.0.0.1:18518")).unwrap();
    assert_eq!(c.info.mapping, MapOutcome::Mapped, "{}", second.log());
    assert_eq!(c.info.wire_remote, l1.info.mapped_local);
    assert_clean(&fabric);
    second.terminate();
}
