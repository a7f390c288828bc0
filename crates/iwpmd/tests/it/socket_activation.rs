//! Socket activation (`LISTEN_FDS`), Step 9 item 6: the daemon adopts passed descriptors
//! only when `LISTEN_PID` is present and is its own pid, and always from fd 3 on
//! (`LISTEN_FDS_FIRST_FD` is not systemd's and is ignored). A TCP socket is passed through
//! `bash -c 'exec N<&M ...; exec iwpmd'` (the shell does the `dup2`, `exec` keeps the pid
//! so `$$` is the daemon's), and the log says whether it was taken over.
//!
//! One test function, alone in a process of its own ([`in_own_process`]): the descriptor
//! is made inheritable for the spawn, and no other test may start a process meanwhile.

use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use iwpm_testkit::alone::in_own_process;
use iwpm_testkit::prelude::*;
use rustix::io::{fcntl_dupfd_cloexec, fcntl_setfd, FdFlags};

/// Starts the daemon with `socket` at fd `at` and the shell lines `env` (before `exec`);
/// returns its stderr once the event loop runs.
fn run_with(socket: &TcpListener, at: u32, env: &str) -> String {
    let dir = scratch_dir("sdact");
    let kernel = FakeKernel::bind(&dir);
    let high = fcntl_dupfd_cloexec(socket, 64).unwrap();
    fcntl_setfd(&high, FdFlags::empty()).unwrap();
    let fd = high.as_raw_fd();
    let script = format!("exec {at}<&{fd} {fd}<&-\n{env}\nexec \"$@\" < /dev/null\n");
    let peer_port = free_udp_port();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .arg("iwpmd")
        .arg(env!("CARGO_BIN_EXE_iwpmd"))
        .args(iwpmd_args(&kernel.path, Ipv4Addr::LOCALHOST, peer_port))
        .arg("--foreground")
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES")
        .env_remove("LISTEN_FDS_FIRST_FD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(cmd, peer_port);
    // The parent's inheritable copy goes at once: only this spawn may get it.
    drop(high);
    d.wait_loop();
    d.stderr.text()
}

/// Step 9 item 6 (socket activation): without `LISTEN_PID`, or with a
/// `LISTEN_FDS_FIRST_FD` pointing past fd 3, the passed socket is not adopted and the log
/// says why; with `LISTEN_PID=$$` it is. The old code adopted the socket in both of the
/// first two cases.
#[test]
fn listen_fds_are_adopted_only_for_our_pid_and_from_fd_3() {
    if in_own_process("socket_activation::listen_fds_are_adopted_only_for_our_pid_and_from_fd_3") {
        return;
    }
    let socket = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();

    // No LISTEN_PID: ignored, left alone.
    let log = run_with(
        &socket,
        3,
        "export LISTEN_FDS=1 LISTEN_FDNAMES=tcp-x; unset LISTEN_PID",
    );
    assert!(
        log.contains("passed descriptors (LISTEN_FDS) ignored")
            && log.contains("LISTEN_PID is not set"),
        "no reason logged:\n{log}"
    );
    assert!(!log.contains("inherited_ports=1"), "adopted anyway:\n{log}");

    // Another pid: ignored too.
    let log = run_with(&socket, 3, "export LISTEN_FDS=1 LISTEN_PID=1");
    assert!(log.contains("is not our pid"), "no reason logged:\n{log}");
    assert!(!log.contains("inherited_ports=1"), "adopted anyway:\n{log}");

    // LISTEN_FDS_FIRST_FD=5 with the socket at fd 5: fd 3 is what counts (not a socket).
    let log = run_with(
        &socket,
        5,
        "export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=tcp-x LISTEN_FDS_FIRST_FD=5",
    );
    assert!(
        log.contains("LISTEN_FDS_FIRST_FD ignored"),
        "no warning:\n{log}"
    );
    assert!(!log.contains("inherited_ports=1"), "adopted fd 5:\n{log}");

    // Ours, at fd 3: adopted.
    let log = run_with(
        &socket,
        3,
        "export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=tcp-x",
    );
    assert!(log.contains("inherited_ports=1"), "not adopted:\n{log}");
    assert!(!log.contains("ignored"), "{log}");
}
