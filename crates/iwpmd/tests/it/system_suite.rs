//! The system test (`tests/system/run.sh`) as part of `cargo test`: the Debian package,
//! built by `scripts/check-packaging`, installed on a real Debian 12 (systemd 252) and
//! Debian 13 (systemd 257) booted under QEMU (TCG) with systemd as PID 1, udev and
//! rdma-core; checks udev start, the unit's sandbox, rping, the FD store across restarts
//! and kill -9 with live port-mapped mappings, the watchdog, the always-on target, the
//! hand-over to rdma-core's daemon on removal and a clean purge (see tests/system/run.sh).
//! `IWPM_SYSTEM_RELEASE=bookworm` (or `trixie`) runs one release only.
//!
//! Ignored (by the build script, naming the cause) or skipped where it cannot run: no QEMU,
//! gcc, apt-get or mke2fs, not root, or `IWPM_RIG=0`. Unlike the real-kernel rig it needs
//! no rig kernel (it boots Debian's own). With `IWPM_RIG_REQUIRED=1` (CI) a missing facility
//! fails it.

use std::path::PathBuf;
use std::process::Command;

use iwpm_testkit::host::{is_root, on_path, say_skipped};
use iwpm_testkit::workspace::workspace_root;

/// Why the system test cannot run here, if it cannot.
fn missing_facility() -> Option<String> {
    if std::env::var("IWPM_RIG").as_deref() == Ok("0") {
        return Some("IWPM_RIG=0 set".into());
    }
    for tool in ["qemu-system-x86_64", "qemu-img", "gcc", "apt-get", "mke2fs"] {
        if !on_path(tool) {
            return Some(format!(
                "{tool} not found (apt-get install qemu-system-x86 qemu-utils gcc e2fsprogs)"
            ));
        }
    }
    if !is_root() {
        return Some("not root (mmdebstrap and the image cache in /var/cache need it)".into());
    }
    None
}

#[test]
// One reason per cause (build.rs names the one that applies, with detail, in its warning).
#[cfg_attr(
    system_test_unavailable = "off",
    ignore = "system test off here: IWPM_RIG=0 is set"
)]
#[cfg_attr(
    system_test_unavailable = "tools",
    ignore = "system test unavailable here: QEMU, qemu-img, gcc, apt-get or mke2fs is not \
              installed (the build warning says which)"
)]
#[cfg_attr(
    system_test_unavailable = "root",
    ignore = "system test unavailable here: not root (mmdebstrap and the image cache in \
              /var/cache need it)"
)]
fn debian_12_and_13_with_systemd() {
    let required = std::env::var("IWPM_RIG_REQUIRED").as_deref() == Ok("1");
    if let Some(reason) = missing_facility() {
        assert!(
            !required,
            "IWPM_RIG_REQUIRED=1 but the system test cannot run: {reason}"
        );
        say_skipped("system test", &reason);
        return;
    }
    let _whole_host = crate::qemu_host::side_job();
    if _whole_host.is_none() {
        println!("system test: beside the real-kernel rig, in the room its storage lane left");
    }
    let root = workspace_root();
    let release = std::env::var("IWPM_SYSTEM_RELEASE").unwrap_or_else(|_| "all".into());
    let output = Command::new("bash")
        .arg(root.join("tests/system/run.sh"))
        .args(["--release", &release])
        .current_dir(&root)
        .output()
        .expect("run tests/system/run.sh");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let summary = std::fs::read_to_string(target.join("system/summary.txt")).unwrap_or_default();
    println!("{summary}");
    assert!(
        output.status.success(),
        "system test failed ({}); see target/system/summary.txt and target/system/<release>/\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        summary.contains(" passed, 0 failed"),
        "system test summary shows no passing run"
    );
}
