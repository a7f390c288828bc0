//! The bench's IPv6 churn as an unprivileged user: it runs in a child process inside a user
//! and network namespace of its own (see `iwpm-lab/tests/it/unprivileged.rs` for why that is a
//! test of its own). Run as root, the test drops to `nobody` with util-linux `setpriv`;
//! skipped (with the reason) where that or unprivileged user namespaces are unavailable.

use std::process::{Command, Stdio};

use iwpm_testkit::host::is_root;
use iwpm_testkit::workspace::built_binary;

fn as_nobody(program: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        "65534",
        "--regid",
        "65534",
        "--clear-groups",
        "--",
    ])
    .arg(program);
    cmd
}

fn ok(mut c: Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn ipv6_churn_runs_unprivileged() {
    let bench = env!("CARGO_BIN_EXE_iwpm-bench");
    let why = if !is_root() {
        Some("not root: cannot switch to another user".to_owned())
    } else if !ok({
        let mut c = as_nobody(bench);
        c.arg("--help");
        c
    }) {
        Some(format!(
            "setpriv missing or {bench} not executable by nobody"
        ))
    } else if !ok({
        let mut c = as_nobody("unshare");
        c.args(["--user", "--net", "true"]);
        c
    }) {
        Some("unprivileged user namespaces are disabled here".to_owned())
    } else {
        None
    };
    if let Some(why) = why {
        iwpm_testkit::host::say_skipped("ipv6_churn_runs_unprivileged", &why);
        return;
    }
    let daemon = built_binary("iwpmd", "iwpmd");
    let out = as_nobody(bench)
        .args(["--quick", "--churn-only", "--json"])
        .env("IWPMD_BIN", daemon)
        .env("TMPDIR", "/tmp")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .expect("running iwpm-bench as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let notes = r["notes"].to_string();
    assert!(!notes.contains("IPv6 churn skipped"), "{notes}");
    let v6 = r["churn"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["family"] == "ipv6")
        .count();
    assert_eq!(v6, 4, "two levels, one and eight callers: {r}");
}
