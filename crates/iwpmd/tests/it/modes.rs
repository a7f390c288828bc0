//! Process modes: `--systemd` (sd_notify READY=1 after the kernel handshake) and the default
//! detaching mode (the command waits for the detached child: 0 once it serves, 1 with its
//! message when it cannot start).

use std::net::Ipv4Addr;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use iwpm_testkit::prelude::*;
use rustix::process::{Pid, Signal};

#[test]
fn systemd_mode_notifies_ready_after_the_handshake() {
    let dir = scratch_dir("notify");
    let mut kernel = FakeKernel::bind(&dir);
    let notify_path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(WAIT)).unwrap();

    let mut cmd = iwpmd_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    cmd.arg("--systemd").env("NOTIFY_SOCKET", &notify_path);
    let mut d = Daemon::spawn(cmd, 0);

    kernel.handshake();
    // STATUS= lines may come first; READY=1 must follow the handshake.
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !seen
        .iter()
        .any(|t: &String| t.lines().any(|l| l == "READY=1"))
    {
        let n = notify.recv(&mut buf).expect("no READY=1 from sd_notify");
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(seen[0].starts_with("STATUS="), "{seen:?}");

    d.signal(Signal::TERM);
    assert_eq!(d.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
}

/// Kills a detached daemon if the test fails half-way.
struct Detached(Option<Pid>);

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
}

fn proc_field(pid: u32, index_after_comm: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(index_after_comm).map(str::to_owned)
}

#[test]
fn default_mode_daemonizes() {
    let dir = scratch_dir("daemon");
    let mut kernel = FakeKernel::bind(&dir);
    let cmd = iwpmd_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    let mut parent = Daemon::spawn(cmd, 0);
    let parent_pid = parent.pid();
    let status = parent.wait_exit(WAIT).expect("parent did not exit");
    assert_eq!(status.code(), Some(0), "the foreground parent exits 0");

    let env = kernel.handshake();
    let child = env.pid;
    let mut guard = Detached(Pid::from_raw(child as i32));
    assert_ne!(child, parent_pid, "the daemon runs in a forked child");
    // (--log-stderr, as the test kit starts it: the terminal hears that the log goes nowhere)
    assert!(
        eventually(WAIT, || parent
            .stderr
            .text()
            .contains("logs to its stderr, which is /dev/null")),
        "{}",
        parent.stderr.text()
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{child}/cwd")).unwrap(),
        std::path::Path::new("/")
    );
    // Field 4 after the command name is the session id: setsid() made the child a leader.
    assert_eq!(
        proc_field(child, 3).as_deref(),
        Some(child.to_string().as_str())
    );

    rustix::process::kill_process(Pid::from_raw(child as i32).unwrap(), Signal::TERM).unwrap();
    let gone = eventually(WAIT, || {
        matches!(proc_field(child, 0).as_deref(), None | Some("Z"))
    });
    assert!(gone, "detached daemon did not exit on SIGTERM");
    guard.0 = None;
    std::thread::sleep(Duration::from_millis(10));
}

/// A detached daemon logs to syslog only. Where nothing receives syslog (no `/dev/log`, as
/// in many containers), the command says on the terminal, before it detaches, that the log
/// and the SIGUSR1 dumps would be lost; the daemon still starts.
#[test]
fn detaching_without_syslog_says_the_log_would_be_lost() {
    let dir = scratch_dir("nosyslog");
    let mut kernel = FakeKernel::bind(&dir);
    let mut cmd = iwpmd_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    // (the test kit's daemons log to stderr; this one logs as an installed one does)
    let args: Vec<_> = cmd
        .get_args()
        .filter(|a| *a != "--log-stderr")
        .map(ToOwned::to_owned)
        .collect();
    let mut plain = std::process::Command::new(cmd.get_program());
    plain
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for key in ["RUST_LOG", "NOTIFY_SOCKET", "JOURNAL_STREAM"] {
        plain.env_remove(key);
    }
    cmd = plain;
    let syslog_here = UnixDatagram::unbound().unwrap().connect("/dev/log").is_ok();
    let cmd = if syslog_here {
        if !iwpm_testkit::host::is_root() {
            iwpm_testkit::host::say_skipped(
                "detaching_without_syslog_says_the_log_would_be_lost",
                "a syslog daemon listens here, and hiding /dev/log needs root",
            );
            return;
        }
        // A private mount namespace in which /dev/log is a plain file.
        let plain = dir.join("not-a-socket");
        std::fs::write(&plain, "").unwrap();
        let mut hidden = std::process::Command::new("unshare");
        hidden
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$0\" /dev/log && exec \"$@\"")
            .arg(&plain)
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        hidden
    } else {
        cmd
    };
    let mut parent = Daemon::spawn(cmd, 0);
    let status = parent.wait_exit(WAIT).expect("parent did not exit");
    assert_eq!(status.code(), Some(0), "{}", parent.stderr.text());
    let env = kernel.handshake();
    let mut guard = Detached(Pid::from_raw(env.pid as i32));
    let warned = eventually(WAIT, || {
        let said = parent.stderr.text();
        said.contains("nothing receives syslog at /dev/log")
            && said.contains("will be lost")
            && said.contains("--foreground --log-stderr")
    });
    let said = parent.stderr.text();
    assert!(warned, "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    rustix::process::kill_process(Pid::from_raw(env.pid as i32).unwrap(), Signal::TERM).unwrap();
    let gone = eventually(WAIT, || {
        matches!(proc_field(env.pid, 0).as_deref(), None | Some("Z"))
    });
    assert!(gone, "detached daemon did not exit on SIGTERM");
    guard.0 = None;
}

/// The default mode's command returns only once the daemon serves: the HELLO is already
/// waiting at the kernel when the parent has exited 0. (A fork that lets the parent go at
/// once usually passes this too, the child being quick; the failure test below is the one
/// that tells the two apart.)
#[test]
fn default_mode_exits_0_only_once_the_daemon_is_ready() {
    let dir = scratch_dir("ready");
    let mut kernel = FakeKernel::bind(&dir);
    let cmd = iwpmd_command!(&kernel.path, Ipv4Addr::LOCALHOST, free_udp_port(),);
    let mut parent = Daemon::spawn(cmd, 0);
    // Woken the moment it exits (no polling interval for the daemon to catch up in).
    let status = parent.child.wait().expect("wait for the parent");
    assert_eq!(status.code(), Some(0), "{}", parent.stderr.text());
    let (env, _) = kernel
        .recv_msg(Duration::from_millis(1))
        .expect("the parent exited before the daemon had greeted the kernel");
    let _guard = Detached(Pid::from_raw(env.pid as i32));
    assert!(proc_field(env.pid, 0).is_some(), "the daemon runs on");
}

/// A daemon that cannot start fails where the operator is: the command exits 1 and prints
/// the daemon's own message (with `daemon(3)` the parent exited 0 at the fork and the
/// message went to a syslog that may not exist). No daemon is left behind.
#[test]
fn default_mode_reports_a_failed_start_with_status_1() {
    let dir = scratch_dir("fails");
    let absent = dir.join("absent.sock");
    let port = free_udp_port();
    let mut cases = vec![(
        iwpmd_command!(&absent, Ipv4Addr::LOCALHOST, port),
        "cannot connect to the kernel emulator",
    )];
    // Without --log-stderr (syslog, as an operator runs it) the message comes all the same.
    let mut syslog = iwpmd_command!(&absent, Ipv4Addr::LOCALHOST, port);
    let args: Vec<_> = syslog
        .get_args()
        .filter(|a| *a != "--log-stderr")
        .map(ToOwned::to_owned)
        .collect();
    syslog = std::process::Command::new(syslog.get_program());
    syslog.args(args);
    cases.push((syslog, "cannot connect to the kernel emulator"));
    if !host_has_netlink_rdma() {
        let mut netlink = std::process::Command::new(env!("CARGO_BIN_EXE_iwpmd"));
        netlink
            .args(["--kernel", "netlink", "--config", "none", "--no-ipv6"])
            .args([
                "--peer-bind-v4",
                "127.0.0.1",
                "--peer-port",
                &port.to_string(),
            ])
            .env("IWPMD_TEST_INIT_NETNS", "/proc/self/ns/net");
        cases.push((netlink, "Is the iw_cm module loaded?"));
    }
    for (mut cmd, expect) in cases {
        let out = cmd.env_remove("RUST_LOG").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(
            err.contains("Couldn't start iWarp Port Mapper"),
            "{cmd:?}: {err}"
        );
        assert!(err.contains(expect), "{cmd:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(out.stdout.is_empty(), "{cmd:?}");
    }
}
