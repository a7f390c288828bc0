//! `iwpm-lab --ipv6` as an unprivileged user: the lab moves into a user and network
//! namespace of its own, where files of users outside it (root's `/`, `/tmp`) show as the
//! overflow uid, and the daemon, root in there, must still accept its emulator socket.
//! Run as root, the test drops to `nobody` with util-linux `setpriv`; skipped (with the
//! reason) where that or unprivileged user namespaces are not available.

use std::process::{Command, Output, Stdio};

use crate::common::iwpmd;

const NOBODY: &str = "65534";

/// `setpriv` to nobody, with no supplementary groups and no capabilities.
fn as_nobody(program: &std::path::Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .arg(program);
    cmd
}

/// Why the test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: cannot switch to another user".into());
    }
    let ok = |mut c: Command| {
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut probe = Command::new("setpriv");
    probe.arg("--version");
    if !ok(probe) {
        return Some("setpriv (util-linux) is missing".into());
    }
    let lab = env!("CARGO_BIN_EXE_iwpm-lab");
    let mut version = as_nobody(lab.as_ref());
    version.arg("--version");
    if !ok(version) {
        return Some(format!(
            "{lab} is not executable by nobody (a private directory?)"
        ));
    }
    let mut userns = as_nobody("unshare".as_ref());
    userns.args(["--user", "--net", "true"]);
    if !ok(userns) {
        return Some("unprivileged user namespaces are disabled here".into());
    }
    None
}

fn run(args: &[&str]) -> Output {
    as_nobody(env!("CARGO_BIN_EXE_iwpm-lab").as_ref())
        .args(args)
        .env("IWPMD_BIN", iwpmd())
        .env("TMPDIR", "/tmp")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("running iwpm-lab as nobody")
}

#[test]
#[cfg_attr(not_root, ignore = "needs root (to run the lab as nobody)")]
fn ipv6_lab_runs_unprivileged() {
    if let Some(why) = unavailable() {
        iwpm_testkit::host::say_skipped("ipv6_lab_runs_unprivileged", &why);
        return;
    }
    let out = run(&["--ipv6", "--connections", "50", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["settings"]["family"], "IPv6");
    assert_eq!(r["connections"]["established"], 50);
}
