//! Start-up as an operator meets it: the version and build in the log, the refusal outside
//! the initial network namespace, a hint with every common start-up failure (the OS error
//! printed once), and the privilege drop once the sockets are open — checked in
//! `/proc/PID/status` of the real binary, which must still serve mappings afterwards.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Output};
use std::time::Duration;

use iwpm_proto::netlink::DaemonMsg;
use iwpm_testkit::prelude::*;

const BIN: &str = env!("CARGO_BIN_EXE_iwpmd");

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `iwpmd --kernel netlink` in a fresh network namespace, compared against this test
/// process's namespace (standing in for pid 1's, which containers may hide).
fn run_in_new_netns(extra: &[&str]) -> Option<Output> {
    let init = format!("/proc/{}/ns/net", std::process::id());
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        // unshare applies to this thread only; the daemon inherits it.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
        let mut cmd = Command::new(BIN);
        cmd.args(["--kernel", "netlink", "--foreground", "--log-stderr"])
            .args(["--no-ipv6", "--peer-bind-v4", "127.0.0.1"])
            .args(["--config", "none"])
            .args(&extra)
            .env("IWPMD_TEST_INIT_NETNS", &init)
            .env_remove("RUST_LOG");
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        // With --allow-netns on a host with RDMA the daemon would run: stop it.
        if wait_child(&mut child, Duration::from_secs(5)).is_none() {
            let _ = child.kill();
        }
        child.wait_with_output().ok()
    })
    .join()
    .unwrap()
}

#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn refuses_a_foreign_network_namespace_unless_allowed() {
    if !is_root() {
        say_skipped(
            "refuses_a_foreign_network_namespace_unless_allowed",
            "needs root",
        );
        return;
    }
    let out = run_in_new_netns(&[]).expect("unshare(CLONE_NEWNET) as root");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not in the initial network namespace"),
        "{err}"
    );
    assert!(err.contains("--allow-netns"), "{err}");
    assert!(
        !err.contains("Starting iWarp Port Mapper"),
        "refused late: {err}"
    );

    let out = run_in_new_netns(&["--allow-netns"]).unwrap();
    let err = stderr_of(&out);
    assert!(err.contains("(--allow-netns)"), "no warning: {err}");
    assert!(err.contains("Starting iWarp Port Mapper"), "{err}");
}

/// As under the packaged unit: root with CAP_NET_ADMIN alone (`setpriv`), which may not
/// read the `ns/net` link of a process holding more capabilities (here this test process,
/// standing for pid 1). The guard must still see the foreign namespace and refuse.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn refuses_a_foreign_network_namespace_with_cap_net_admin_only() {
    if !is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        say_skipped(
            "refuses_a_foreign_network_namespace_with_cap_net_admin_only",
            "needs root and setpriv",
        );
        return;
    }
    let init = format!("/proc/{}/ns/net", std::process::id());
    let out = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        Command::new("setpriv")
            .args(["--bounding-set=-all,+net_admin", "--inh-caps=-all", "--"])
            .arg(BIN)
            .args(["--kernel", "netlink", "--foreground", "--log-stderr"])
            .args(["--no-ipv6", "--peer-bind-v4", "127.0.0.1"])
            .args(["--config", "/nonexistent/iwpmd.conf"])
            .env("IWPMD_TEST_INIT_NETNS", &init)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    })
    .join()
    .unwrap();
    let err = stderr_of(&out);
    assert!(
        !err.contains("cannot tell the network namespace"),
        "the guard gave up: {err}"
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not in the initial network namespace"),
        "{err}"
    );
}

#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn the_emulator_link_is_never_refused_for_its_namespace() {
    if !is_root() {
        say_skipped(
            "the_emulator_link_is_never_refused_for_its_namespace",
            "needs root",
        );
        return;
    }
    let dir = scratch_dir("netns-emu");
    let init = format!("/proc/{}/ns/net", std::process::id());
    let path = dir.join("kernel.sock");
    let out = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        // No emulator at the path: start-up gets past the namespace and fails on connect.
        daemon_command!(&path, Ipv4Addr::LOCALHOST, 3935)
            .env("IWPMD_TEST_INIT_NETNS", init)
            .output()
            .unwrap()
    })
    .join()
    .unwrap();
    let err = stderr_of(&out);
    assert!(!err.contains("network namespace"), "{err}");
    assert!(err.contains("Is the kernel emulator running"), "{err}");
}

#[test]
fn logs_version_and_build_at_start() {
    let dir = scratch_dir("version");
    let kernel = FakeKernel::bind(&dir);
    let d = Daemon::start(iwpmd_bin!(), &kernel, Ipv4Addr::LOCALHOST, free_udp_port());
    let want = format!("iwpmd {} (build ", env!("CARGO_PKG_VERSION"));
    assert!(d.stderr.wait_for(&want, WAIT), "{}", d.stderr.text());
}

#[test]
fn busy_peer_port_names_the_other_daemon_once() {
    let dir = scratch_dir("busy");
    let kernel = FakeKernel::bind(&dir);
    let taken = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, port)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("by another port mapper"), "{err}");
    assert!(err.contains("systemctl stop iwpmd"), "{err}");
    assert_eq!(err.matches("Couldn't start").count(), 1, "{err}");
}

#[test]
fn missing_netlink_rdma_suggests_loading_iw_cm() {
    if host_has_netlink_rdma() {
        say_skipped(
            "missing_netlink_rdma_suggests_loading_iw_cm",
            "this host has NETLINK_RDMA",
        );
        return;
    }
    let out = Command::new(BIN)
        .args(["--kernel", "netlink", "--foreground", "--log-stderr"])
        .args(["--no-ipv6", "--peer-bind-v4", "127.0.0.1"])
        .args(["--config", "none"])
        .arg("--peer-port")
        .arg(free_udp_port().to_string())
        .env("IWPMD_TEST_INIT_NETNS", "/proc/self/ns/net")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains(
            "cannot create the NETLINK_RDMA socket: Protocol not supported (os error 93). \
             Is the iw_cm module loaded?"
        ),
        "{err}"
    );
    assert!(err.contains("`modprobe iw_cm`"), "{err}");
    assert_eq!(err.matches("os error 93").count(), 1, "{err}");
}

/// `CapEff`, `CapPrm`, `CapBnd`, `CapAmb`, `NoNewPrivs` and `Uid` lines of a process.
fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} missing"))
        .trim()
        .to_owned()
}

const NET_ADMIN_ONLY: &str = "0000000000001000";

fn serves_a_mapping_after_the_drop(extra: &[&str]) -> (Daemon, FakeKernel) {
    let mut kernel = FakeKernel::bind_owning(scratch_dir("privdrop"));
    let port = free_udp_port();
    let mut cmd = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, port);
    cmd.args(extra);
    let d = Daemon::spawn(cmd, port);
    kernel.handshake();
    assert!(
        d.stderr.wait_for("privileges dropped", WAIT),
        "{}",
        d.stderr.text()
    );
    let pid = d.pid();
    for field in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(status_field(pid, field), NET_ADMIN_ONLY, "{field}");
    }
    assert_eq!(status_field(pid, "CapAmb"), "0000000000000000");
    assert_eq!(status_field(pid, "CapInh"), "0000000000000000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    // The dropped daemon still registers a client and reserves a port for it.
    kernel.register();
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, 4242));
    let (_, reply) = kernel.add_mapping(local);
    let DaemonMsg::AddMapping(add) = reply else {
        panic!("unexpected reply {reply:?}")
    };
    assert_eq!(add.err, 0, "ADD_MAPPING failed after the drop");
    let mapped = add.mapped_addr.to_socket_addr().expect("mapped address");
    assert_ne!(mapped.port(), 0);
    assert!(
        !tcp_port_free(mapped),
        "mapped port {mapped} is not held after the drop"
    );
    (d, kernel)
}

#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn keeps_only_cap_net_admin_and_still_maps() {
    if !is_root() {
        say_skipped("keeps_only_cap_net_admin_and_still_maps", "needs root");
        return;
    }
    let (d, _k) = serves_a_mapping_after_the_drop(&[]);
    assert!(
        d.stderr.text().contains("kept=CAP_NET_ADMIN"),
        "{}",
        d.stderr.text()
    );
    assert!(status_field(d.pid(), "Uid").starts_with("0\t"));
}

#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn user_option_switches_user_and_keeps_cap_net_admin() {
    if !is_root() {
        say_skipped(
            "user_option_switches_user_and_keeps_cap_net_admin",
            "needs root",
        );
        return;
    }
    let (d, _k) = serves_a_mapping_after_the_drop(&["--user", "nobody"]);
    let uid = status_field(d.pid(), "Uid");
    assert!(uid.starts_with("65534\t65534\t65534\t65534"), "{uid}");
    assert_eq!(status_field(d.pid(), "Groups"), "65534");
    assert!(
        d.stderr.text().contains("user=nobody"),
        "{}",
        d.stderr.text()
    );
}

#[test]
fn unknown_user_fails_start_up() {
    let dir = scratch_dir("nouser");
    let kernel = FakeKernel::bind(&dir);
    let out = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),)
        .args(["--user", "no-such-user-iwpmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("unknown user \"no-such-user-iwpmd\""), "{err}");
}
