//! What this host can do for a test, and what a test does when it cannot: skip with the
//! reason printed, except on CI, where a skip would hide a missing facility.
//!
//! A skip is said where a user sees it without flags ([`say_skipped`]), but libtest still
//! counts the test as passed: a test that the host decides about (root, QEMU, an installed
//! tool) is better compiled as `#[ignore = "reason"]` by its crate's build script, with the
//! run-time skip kept for a host that changed since the build.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// True on CI (`CI` set): tests that would skip for lack of a facility fail instead.
pub fn on_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Skips (prints why and returns true) or, on CI, fails.
pub fn skip(test: &str, reason: &str) -> bool {
    assert!(!on_ci(), "{test}: cannot run on CI: {reason}");
    say_skipped(test, reason);
    true
}

/// Prints `SKIPPED test: reason` on the process's standard error past libtest's capture
/// (which holds what `eprintln!` prints in a passing test and shows it only with
/// `--nocapture`; it hooks the print macros, not the stream itself).
pub fn say_skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {reason}");
}

/// True (and the test is skipped, with the reason printed) unless running as root.
pub fn skip_unless_root(test: &str, reason: &str) -> bool {
    !is_root() && skip(test, reason)
}

/// Whether this test runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The first file named `tool` in a `$PATH` directory, without running it (for tools
/// without a `--version`, and to tell "not installed" from "failed").
pub fn which(tool: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// Whether `tool` is on `$PATH` ([`which`]).
pub fn on_path(tool: &str) -> bool {
    which(tool).is_some()
}

/// Whether `tool` runs (`tool --version` succeeds).
pub fn have_tool(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this host can open a NETLINK_RDMA socket (ib_core loaded): the tests of the
/// "no RDMA here" start-up failure only run where it cannot.
pub fn host_has_netlink_rdma() -> bool {
    use rustix::net::{netlink, AddressFamily, SocketFlags, SocketType};
    let flags = SocketFlags::CLOEXEC;
    rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        flags,
        Some(netlink::RDMA),
    )
    .is_ok()
}
