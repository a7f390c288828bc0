//! Process behaviour of the real binary: CLI, signals and exit statuses, single instance,
//! robustness against garbage. The test plays the kernel on a Unix datagram socket.

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use iwpm_testkit::prelude::*;
use rustix::process::Signal;

#[test]
fn help_and_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmd"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--systemd",
        "--foreground",
        "--config",
        "--kernel",
        "--peer-port",
        "--log-stderr",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iwpmd "));
}

#[test]
fn missing_kernel_emulator_fails_with_status_1() {
    let dir = scratch_dir("nokernel");
    let port = free_udp_port();
    let mut cmd = daemon_command!(&dir.join("absent.sock"), Ipv4Addr::LOCALHOST, port,);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Couldn't start iWarp Port Mapper"), "{err}");
    assert!(err.contains("kernel emulator"), "{err}");
}

#[test]
fn sigterm_exits_0_and_sighup_exits_1() {
    for (sig, code, text) in [
        (Signal::TERM, 0, "Received SIGTERM signal"),
        (Signal::HUP, 1, "Received SIGHUP signal"),
    ] {
        let dir = scratch_dir("sig");
        let kernel = FakeKernel::bind(&dir);
        let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
        d.wait_loop();
        d.signal(sig);
        let status = d.wait_exit(WAIT).expect("daemon did not exit");
        assert_eq!(status.code(), Some(code), "{sig:?}");
        assert!(d.stderr.wait_for(text, WAIT), "{}", d.stderr.text());
    }
}

#[test]
fn sigusr1_dumps_the_table_to_the_log() {
    let dir = scratch_dir("usr1");
    let kernel = FakeKernel::bind(&dir);
    let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    d.wait_loop();
    d.signal(Signal::USR1);
    assert!(
        d.stderr.wait_for("print_iwpm_mapped_ports:", WAIT),
        "{}",
        d.stderr.text()
    );
    assert!(d.stderr.wait_for("io counters:", WAIT));
    assert!(d.is_running(), "SIGUSR1 must not stop the daemon");
    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
}

#[test]
fn second_instance_on_the_same_kernel_link_fails_clearly() {
    let dir = scratch_dir("lock");
    let kernel = FakeKernel::bind(&dir);
    let first_port = free_udp_port();
    let mut first = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, first_port);
    first.wait_loop();

    // Another peer port, same kernel: the instance lock stops it.
    let out = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another iwpmd is already running"), "{err}");

    // Another kernel, same UDP port: the port check stops it.
    let other_dir = scratch_dir("lock2");
    let other_kernel = FakeKernel::bind(&other_dir);
    let out = daemon_command!(&other_kernel.path, Ipv4Addr::LOCALHOST, first_port,)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("by another port mapper"), "{err}");

    assert!(first.is_running());
    first.signal(Signal::TERM);
    assert_eq!(first.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
}

#[test]
fn garbage_from_kernel_and_peers_does_not_kill_it() {
    let dir = scratch_dir("garbage");
    let mut kernel = FakeKernel::bind(&dir);
    let port = free_udp_port();
    let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, port);
    if kernel.recv(WAIT).is_none() {
        panic!(
            "daemon sent nothing (running: {}):\n{}",
            d.is_running(),
            d.stderr.text()
        );
    }

    let mut rng = 0x1234_5678_9abc_def0_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    for i in 0..300usize {
        let len = (next() % 700) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 3 == 0 && bytes.len() >= 16 {
            // Plausible netlink headers reach deeper into the decoder.
            let total = bytes.len() as u32;
            bytes[0..4].copy_from_slice(&total.to_ne_bytes());
            bytes[4..6].copy_from_slice(&(0x800u16 + (i as u16 % 12)).to_ne_bytes());
        }
        kernel.send_raw(&bytes);
        let udp_len = [0usize, 1, 47, 48, 49, 63, 64, 65, 200][i % 9];
        let dgram: Vec<u8> = (0..udp_len).map(|_| next() as u8).collect();
        udp.send_to(&dgram, (Ipv4Addr::LOCALHOST, port)).unwrap();
    }
    kernel.send_raw(&[]);
    kernel.send_raw(&vec![0xff; 70_000]);

    std::thread::sleep(Duration::from_millis(300));
    assert!(
        d.is_running(),
        "daemon died on garbage:\n{}",
        d.stderr.text()
    );
    d.signal(Signal::USR1);
    assert!(
        d.stderr.wait_for("io counters:", WAIT),
        "{}",
        d.stderr.text()
    );
    assert!(
        d.stderr.text().contains("kernel_truncated=1"),
        "{}",
        d.stderr.text()
    );
    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
    assert!(!d.stderr.text().contains("panicked"), "{}", d.stderr.text());
}

#[test]
fn netlink_link_unavailable_fails_clearly() {
    // Only meaningful on hosts without NETLINK_RDMA (no ib_core), such as CI machines.
    if host_has_netlink_rdma() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmd"))
        .args([
            "--kernel",
            "netlink",
            "--foreground",
            "--log-stderr",
            "--no-ipv6",
        ])
        .args(["--config", "none", "--peer-bind-v4", "127.0.0.1"])
        .arg("--peer-port")
        .arg(free_udp_port().to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NETLINK_RDMA"), "{err}");
}

#[test]
fn kernel_and_signals_are_served_during_a_udp_flood() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let dir = scratch_dir("flood");
    let mut kernel = FakeKernel::bind(&dir);
    let port = free_udp_port();
    let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, port);
    kernel.handshake();

    let stop = Arc::new(AtomicBool::new(false));
    let flooder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let junk = [0x07u8; 48]; // bad IP nibble: dropped by the daemon
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if udp.send_to(&junk, (Ipv4Addr::LOCALHOST, port)).is_ok() {
                    sent += 1;
                }
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    kernel.register();
    let (_, reply) = kernel.add_mapping((Ipv4Addr::LOCALHOST, 5100).into());
    assert!(matches!(reply, iwpm_proto::netlink::DaemonMsg::AddMapping(ref r) if r.err == 0));
    d.signal(Signal::TERM);
    let status = d.wait_exit(WAIT);
    stop.store(true, Ordering::Relaxed);
    let sent = flooder.join().unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM not served under flood"
    );
    assert!(sent > 100, "the flood did not happen ({sent} datagrams)");
}

#[test]
fn log_levels_follow_rust_log_and_verbosity() {
    // RUST_LOG=warn hides info lines.
    let dir = scratch_dir("loglevel");
    let mut kernel = FakeKernel::bind(&dir);
    let mut cmd = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    cmd.env("RUST_LOG", "warn");
    let mut d = Daemon::spawn(cmd, 0);
    kernel.recv(WAIT).expect("no HELLO");
    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
    let text = d.stderr.text();
    assert!(text.contains("Received SIGTERM signal"), "{text}");
    assert!(
        !text.contains("sockets open"),
        "info line despite RUST_LOG=warn:\n{text}"
    );

    // -v (as the harness passes) shows debug lines.
    let dir = scratch_dir("loglevel-v");
    let mut kernel = FakeKernel::bind(&dir);
    let mut d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    kernel.recv(WAIT).expect("no HELLO");
    assert!(d.stderr.wait_for("DEBUG", WAIT), "{}", d.stderr.text());
    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
}
