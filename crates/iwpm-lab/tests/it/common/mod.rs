//! Shared helpers of the system tests: a lab with real `iwpmd` processes, listeners and
//! connections, and checks that both sides agree; the `iwpm-lab` binary with the daemon
//! this run built. Every wait is bounded.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{
    AcceptMode, Connection, EventChannel, Listener, MapOutcome, RemoteInfoLookup,
};
use iwpm_lab::dump::Dump;
use iwpm_lab::netns::NetPlace;
use iwpm_lab::workload::Acceptor;
use iwpm_lab::{Lab, LabConfig};
use iwpm_testkit::workspace::built_binary;

/// Bound on every wait of a test step.
pub(crate) const WAIT: Duration = Duration::from_secs(15);

/// The `iwpmd` this run built (`cargo test --workspace` builds it beside the lab).
pub(crate) fn iwpmd() -> PathBuf {
    built_binary("iwpmd", "iwpmd")
}

/// The `iwpm-lab` binary, told which daemon to run (`IWPMD_BIN`): so it never looks for
/// one itself, which would build a missing or stale one with cargo.
pub(crate) fn lab_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_iwpm-lab"));
    cmd.env("IWPMD_BIN", iwpmd());
    cmd
}

/// Starts a lab, panicking with the reason if it cannot.
pub(crate) fn lab(config: LabConfig) -> Lab {
    match Lab::start(config) {
        Ok(lab) => lab,
        Err(e) => panic!("lab set-up failed: {e}"),
    }
}

/// B listens on `addr` (auto-accept); the acceptor collects the children.
pub(crate) fn listen(lab: &Lab, addr: SocketAddr) -> (Listener, Acceptor) {
    let channel = EventChannel::new();
    let listener = lab
        .b
        .host
        .listen(addr, AcceptMode::Auto, Some(&channel))
        .expect("listen on B");
    (listener, Acceptor::start(channel))
}

/// A connects synchronously to `dst`.
pub(crate) fn connect(lab: &Lab, dst: SocketAddr) -> Connection {
    lab.a.host.connect(None, dst).expect("connect from A")
}

/// True if a TCP socket cannot bind `0.0.0.0:port` / `[::]:port` in `place` right now
/// (the daemons reserve mapped ports on the wildcard address).
pub(crate) fn tcp_port_held(place: &NetPlace, ip: IpAddr, port: u16) -> bool {
    let wildcard: IpAddr = if ip.is_ipv4() {
        "0.0.0.0".parse().unwrap()
    } else {
        "::".parse().unwrap()
    };
    place
        .run(|| TcpListener::bind(SocketAddr::new(wildcard, port)).is_err())
        .unwrap()
}

/// Panics if either emulated kernel recorded a protocol violation.
pub(crate) fn assert_no_violations(lab: &Lab) {
    for side in [&lab.a, &lab.b] {
        let v = side.host.violations();
        assert!(v.is_empty(), "host {} violations: {v:?}", side.name);
    }
}

/// Dumps side `which` ("A"/"B") until `pred` holds; returns the last dump.
pub(crate) fn dump_until(lab: &mut Lab, which: &str, pred: impl Fn(&Dump) -> bool) -> Dump {
    let deadline = Instant::now() + WAIT;
    loop {
        let side = if which == "A" { &mut lab.a } else { &mut lab.b };
        let d = side.dump().expect("dump");
        if pred(&d) || Instant::now() >= deadline {
            return d;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The full agreement check for one established connection with a (non-wildcard) listener:
/// both daemons hold what both kernels use, the passive end is the same wire connection
/// and learned the real peer address (or its REMOTE_INFO demonstrably reached B's kernel,
/// only after the connection: the race `iwpm-lab --help` describes). Returns the passive
/// end's connection details.
pub(crate) fn assert_consistent(
    lab: &Lab,
    conn: &Connection,
    listener: &Listener,
    acceptor: &Acceptor,
    dump_a: &Dump,
    dump_b: &Dump,
) -> iwpm_kernel_emu::ConnInfo {
    let ai = &conn.info;
    assert_eq!(
        ai.mapping,
        MapOutcome::Mapped,
        "active end not mapped: {ai:?}"
    );
    let ma = dump_a
        .find(ai.local)
        .unwrap_or_else(|| panic!("A's daemon has no mapping for {}: {dump_a:?}", ai.local));
    assert_eq!(ma.mapped, ai.mapped_local, "A: daemon and kernel disagree");
    assert_eq!(
        ai.mapped_remote, listener.info.mapped_local,
        "A's mapped remote is not B's listener mapping"
    );
    let mb = dump_b
        .find(listener.info.local)
        .unwrap_or_else(|| panic!("B's daemon has no listener mapping: {dump_b:?}"));
    assert_eq!(
        mb.mapped, listener.info.mapped_local,
        "B: daemon and kernel disagree"
    );
    assert!(
        acceptor.wait(WAIT, |acc| acc
            .iter()
            .any(|a| a.established && a.info.wire_remote == ai.wire_local)),
        "no passive end for {ai:?}"
    );
    let pi = acceptor
        .accepted()
        .into_iter()
        .find(|a| a.info.wire_remote == ai.wire_local)
        .map(|a| a.info)
        .unwrap();
    assert_eq!(pi.wire_local, ai.wire_remote, "wire tuple differs");
    if pi.remote_info == Some(RemoteInfoLookup::Found) {
        assert_eq!(pi.remote, ai.local, "B sees the wrong peer address");
        assert_eq!(pi.local, listener.info.local);
    } else {
        let late = lab.b.host.wait_for(WAIT, |v| {
            v.remote_info.iter().any(|e| {
                e.mapped_remote.to_socket_addr() == Some(ai.wire_local)
                    && e.remote.to_socket_addr() == Some(ai.local)
            })
        });
        assert!(late, "B's kernel never got a REMOTE_INFO for {ai:?}");
        eprintln!(
            "note: REMOTE_INFO for {} reached B after the connection",
            ai.local
        );
    }
    pi
}
