//! How a real `iwpmd` is pointed at an emulated kernel, in one place for every test and
//! tool that starts one (the emulator's own tests, the daemon's tests, the lab).

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

/// The command line of an `iwpmd` (`binary`) served by the emulated kernel at
/// `kernel_socket`: no configuration file, logs on stderr (piped), peer sockets on
/// `bind_v4:peer_port` only (no IPv6), and none of the environment that would change its
/// logging or make it talk to systemd. No process-mode flag: add `--foreground` (or
/// nothing, to test daemonizing).
pub fn iwpmd_command(
    binary: &Path,
    kernel_socket: &Path,
    bind_v4: Ipv4Addr,
    peer_port: u16,
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args(iwpmd_args(kernel_socket, bind_v4, peer_port))
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// The arguments of [`iwpmd_command`], for callers that start the daemon another way (a
/// launcher that passes it descriptors first, say).
pub fn iwpmd_args(kernel_socket: &Path, bind_v4: Ipv4Addr, peer_port: u16) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--kernel".into()];
    args.push(format!("unix:{}", kernel_socket.display()).into());
    for a in ["--log-stderr", "--no-ipv6", "-v"] {
        args.push(a.into());
    }
    args.extend(["--config".into(), "none".into()]);
    args.extend(["--peer-bind-v4".into(), bind_v4.to_string().into()]);
    args.extend(["--peer-port".into(), peer_port.to_string().into()]);
    args
}
