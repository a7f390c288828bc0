//! The real-kernel conformance rig (`tests/rig/run-all.sh`) as part of `cargo test`.
//!
//! Boots Linux 6.1 (Debian 12) and then Linux 6.12 (Debian 13) with Soft-iWARP under QEMU
//! (TCG) and runs every rig suite on each against the release build of this daemon (built
//! beforehand: a test never runs cargo; see `current_release_daemon`), with
//! rdma-core's C `iwpmd` as the reference: passing needs daemon-side evidence (netlink/UDP
//! traces, SIGUSR1 dumps, clean dmesg, no 10 s stalls). `IWPM_RIG_KERNEL=6.1` (or `6.12`)
//! runs one kernel only; the default is `all`.
//!
//! It installs nothing and builds no kernel unless asked: it boots the kernels that are
//! already there (an explicit `RIG_KERNEL`, a prebuilt image, or one a previous run built
//! into the rig's cache; `tests/rig/build-kernel.sh --check`). `IWPM_RIG_SETUP=1` lets it
//! install `linux-source-6.1`/`6.12` and the build tools with apt-get and build the
//! missing kernels (tens of minutes, a few GB in `/var/cache`).
//!
//! Where the facility is absent (no `qemu-system-x86_64`, not root for the package cache,
//! no kernel and no `IWPM_RIG_SETUP=1`) or `IWPM_RIG=0` is set, the build script compiles
//! this test as `#[ignore]`, so `cargo test` lists it as `ignored` (with the reason, and a
//! build warning) rather than as a passing test; run anyway with `--include-ignored`, and
//! it still skips with the reason printed if the facility is missing. `.ci/run` sets
//! `IWPM_RIG_REQUIRED=1`, which never ignores it and turns any skip into a failure, and
//! `IWPM_RIG_SETUP=1`, so CI always runs it, building the kernels on a fresh machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use iwpm_testkit::host::{is_root, on_path, say_skipped};
use iwpm_testkit::workspace::workspace_root;

/// The release daemon this checkout built, if it is current. The rig tests the build that
/// ships (fat LTO, `panic = "abort"`: the figures it judges against C depend on them), and
/// `cargo test` makes only the debug one; the test never runs cargo itself, so the release
/// build comes first (`.ci/run` does it: `cargo build --release -p iwpmd`). Current means
/// that no file cargo listed as its input (the dep-info file `release/iwpmd.d`) changed
/// after it was linked.
fn current_release_daemon(target: &Path) -> Result<PathBuf, String> {
    let build_first = "run `cargo build --release -p iwpmd` first: the rig tests the release build";
    let daemon = target.join("release/iwpmd");
    let built = std::fs::metadata(&daemon)
        .and_then(|m| m.modified())
        .map_err(|_| format!("{} is missing; {build_first}", daemon.display()))?;
    let dep_info = target.join("release/iwpmd.d");
    let listed = std::fs::read_to_string(&dep_info)
        .map_err(|_| format!("{} is missing; {build_first}", dep_info.display()))?;
    let inputs = listed.split_once(": ").map_or("", |(_, files)| files);
    // (paths with spaces are escaped as `\ `; the workspace's have none)
    for input in inputs.split_whitespace() {
        let changed = std::fs::metadata(input).and_then(|m| m.modified());
        if !changed.is_ok_and(|at| at <= built) {
            return Err(format!(
                "{} is older than its source {input}; {build_first}",
                daemon.display()
            ));
        }
    }
    Ok(daemon)
}

/// Why the rig cannot run here, if it cannot.
fn missing_facility() -> Option<String> {
    if std::env::var("IWPM_RIG").as_deref() == Ok("0") {
        return Some("IWPM_RIG=0 set".into());
    }
    for tool in ["qemu-system-x86_64", "cpio", "gcc", "apt-get"] {
        if !on_path(tool) {
            return Some(format!(
                "{tool} not found (apt-get install qemu-system-x86 cpio gcc)"
            ));
        }
    }
    if !is_root() {
        return Some("not root (the rig caches kernel and Debian packages in /var/cache)".into());
    }
    if setup_allowed() {
        return None;
    }
    let missing: Vec<String> = kernels()
        .into_iter()
        .filter_map(|k| {
            let out = Command::new("bash")
                .arg(workspace_root().join("tests/rig/build-kernel.sh"))
                .arg("--check")
                .env("RIG_KVER", k)
                .output()
                .ok()?;
            (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_owned())
        })
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{}; IWPM_RIG_SETUP=1 lets this test install linux-source and build the kernel",
            missing.join("; ")
        )
    })
}

/// `IWPM_RIG_SETUP=1`: the rig may install packages and build kernels.
fn setup_allowed() -> bool {
    std::env::var("IWPM_RIG_SETUP").as_deref() == Ok("1")
}

/// The kernel series `IWPM_RIG_KERNEL` names (`all`, the default: 6.1 and 6.12).
fn kernels() -> Vec<&'static str> {
    match std::env::var("IWPM_RIG_KERNEL").as_deref() {
        Ok("6.1") => vec!["6.1"],
        Ok("6.12") => vec!["6.12"],
        _ => vec!["6.1", "6.12"],
    }
}

#[test]
// One reason per cause (build.rs names the one that applies, with detail, in its warning).
#[cfg_attr(
    rig_unavailable = "off",
    ignore = "real-kernel rig off here: IWPM_RIG=0 is set"
)]
#[cfg_attr(
    rig_unavailable = "tools",
    ignore = "real-kernel rig unavailable here: QEMU, cpio, gcc or apt-get is not installed \
              (the build warning says which)"
)]
#[cfg_attr(
    rig_unavailable = "root",
    ignore = "real-kernel rig unavailable here: not root (the rig caches kernels and Debian \
              packages in /var/cache)"
)]
#[cfg_attr(
    rig_unavailable = "kernel",
    ignore = "real-kernel rig unavailable here: no rig kernel built yet; IWPM_RIG_SETUP=1 lets \
              the test install linux-source and build it (tens of minutes)"
)]
fn real_kernel_rig_all_suites() {
    let required = std::env::var("IWPM_RIG_REQUIRED").as_deref() == Ok("1");
    if let Some(reason) = missing_facility() {
        assert!(
            !required,
            "IWPM_RIG_REQUIRED=1 but the rig cannot run: {reason}"
        );
        say_skipped("real-kernel rig", &reason);
        return;
    }
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let daemon = match current_release_daemon(&target) {
        Ok(daemon) => daemon,
        Err(reason) => {
            assert!(!required, "IWPM_RIG_REQUIRED=1 but {reason}");
            say_skipped("real-kernel rig", &reason);
            return;
        }
    };
    let _host = crate::qemu_host::whole();
    let side_slot = crate::qemu_host::SideSlotOffer::new(&target.join("rig/side-slot.free"));
    let output = Command::new("bash")
        .env("RIG_SIDE_SLOT", side_slot.path())
        // Without IWPM_RIG_SETUP=1 build-kernel.sh installs and builds nothing.
        .env("RIG_BUILD", if setup_allowed() { "1" } else { "0" })
        .arg(root.join("tests/rig/run-all.sh"))
        .arg("--kernel")
        .arg(std::env::var("IWPM_RIG_KERNEL").unwrap_or_else(|_| "all".into()))
        .arg("--daemon")
        .arg(&daemon)
        .current_dir(&root)
        .output()
        .expect("run tests/rig/run-all.sh");
    let summary = std::fs::read_to_string(target.join("rig/summary.txt")).unwrap_or_default();
    println!("{summary}");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "real-kernel rig failed ({}); see target/rig/summary.txt and target/rig/<kernel>/console-*.log\n\
         failed checks:\n{}\n{}",
        output.status,
        failed_checks(&target.join("rig")),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        summary.contains(" passed, 0 failed"),
        "rig summary shows no passing run"
    );
}

/// The rig's failed checks, `kernel/run: FAIL name: detail`, at most 40 lines of at most
/// 300 characters. They go first in the failure message: a CI record keeps only part of a
/// long output, and the counts alone do not say which check failed.
fn failed_checks(rig: &Path) -> String {
    const MAX_LINES: usize = 40;
    const MAX_CHARS: usize = 300;
    let mut lines = Vec::new();
    let sorted_entries = |dir: &Path| {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        paths.sort();
        paths
    };
    for kernel in sorted_entries(rig) {
        for run in sorted_entries(&kernel.join("share/out")) {
            let checks = std::fs::read_to_string(run.join("checks.txt")).unwrap_or_default();
            for line in checks.lines().filter(|l| l.starts_with("FAIL")) {
                let name = |p: &Path| {
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned()
                };
                let mut entry = format!("{}/{}: {line}", name(&kernel), name(&run));
                if let Some((cut, _)) = entry.char_indices().nth(MAX_CHARS) {
                    entry.truncate(cut);
                }
                lines.push(entry);
            }
        }
    }
    let more = lines.len().saturating_sub(MAX_LINES);
    lines.truncate(MAX_LINES);
    if more > 0 {
        lines.push(format!("(and {more} more)"));
    }
    if lines.is_empty() {
        "(none in target/rig/<kernel>/share/out/*/checks.txt)".into()
    } else {
        lines.join("\n")
    }
}

/// Without `IWPM_RIG_SETUP=1` the test command installs nothing and builds no kernel:
/// `build-kernel.sh` with `RIG_BUILD=0` (what the rig test passes) and `--check` find no
/// kernel in an empty cache, say so naming the cost, exit 3, and never call apt-get (a
/// stand-in on PATH records any call).
#[test]
fn without_the_opt_in_no_package_is_installed_and_no_kernel_built() {
    let scratch = std::env::temp_dir().join(format!("iwpm-rig-optin-{}", std::process::id()));
    let bin = scratch.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = scratch.join("apt-get.calls");
    let shim = bin.join("apt-get");
    std::fs::write(
        &shim,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", calls.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (arg, build) in [(None, "0"), (Some("--check"), "1")] {
        let mut cmd = Command::new("bash");
        cmd.arg(workspace_root().join("tests/rig/build-kernel.sh"))
            .args(arg)
            .env("PATH", &path)
            .env("RIG_BUILD", build)
            .env("RIG_CACHE", scratch.join("cache"))
            .env("RIG_NO_SHARED", "1")
            .env_remove("RIG_KERNEL")
            .env_remove("RIG_KERNEL_6_12");
        let out = cmd.output().expect("run build-kernel.sh");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{arg:?}: {err}");
        assert!(
            err.contains("no Linux 6.1 rig kernel ready") && err.contains("tens of minutes"),
            "{arg:?}: {err}"
        );
        assert!(
            !calls.exists(),
            "{arg:?}: apt-get was called: {}",
            std::fs::read_to_string(&calls).unwrap_or_default()
        );
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// The rig takes the release build only when it is current: a missing binary, a missing
/// dep-info file and a source changed after the link each give the reason and the command,
/// and a build newer than every listed source is taken.
#[test]
fn only_a_current_release_build_is_taken() {
    let target = iwpm_testkit::fs::scratch_dir("rig-release");
    let release = target.join("release");
    std::fs::create_dir_all(&release).unwrap();
    let source = target.join("main.rs");
    std::fs::write(&source, "fn main() {}").unwrap();
    let dep_info = format!(
        "{}: {}\n",
        release.join("iwpmd").display(),
        source.display()
    );
    let set_time = |path: &Path, secs: u64| {
        let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    };

    let err = current_release_daemon(&target).unwrap_err();
    assert!(err.contains("release/iwpmd is missing"), "{err}");
    std::fs::write(release.join("iwpmd"), "").unwrap();
    let err = current_release_daemon(&target).unwrap_err();
    assert!(err.contains("release/iwpmd.d is missing"), "{err}");
    assert!(err.contains("cargo build --release -p iwpmd"), "{err}");
    std::fs::write(release.join("iwpmd.d"), dep_info).unwrap();

    set_time(&release.join("iwpmd"), 1_000);
    set_time(&source, 2_000);
    let err = current_release_daemon(&target).unwrap_err();
    assert!(err.contains("is older than its source"), "{err}");
    set_time(&source, 500);
    assert_eq!(
        current_release_daemon(&target).unwrap(),
        release.join("iwpmd")
    );
}

/// The failure message names each failed check with its kernel and run, in order, and
/// bounds what it keeps; passing checks and runs without a checks file add nothing.
#[test]
fn failed_checks_are_named_with_kernel_and_run() {
    let rig = iwpm_testkit::fs::scratch_dir("rig-failed-checks");
    let run = |kernel: &str, run: &str, checks: &str| {
        let dir = rig.join(kernel).join("share/out").join(run);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("checks.txt"), checks).unwrap();
    };
    assert_eq!(
        failed_checks(&rig),
        "(none in target/rig/<kernel>/share/out/*/checks.txt)"
    );
    run(
        "6.12",
        "pm-ours-c-A",
        "PASS start: daemon up\nFAIL live: no data\n",
    );
    run(
        "6.1",
        "twovm-c-c-B",
        "FAIL cross: handles differ\n    detail\n",
    );
    run("6.1", "single-ours", "PASS start: daemon up\n");
    std::fs::create_dir_all(rig.join("6.1/share/out/empty")).unwrap();
    assert_eq!(
        failed_checks(&rig),
        "6.1/twovm-c-c-B: FAIL cross: handles differ\n6.12/pm-ours-c-A: FAIL live: no data"
    );
    run("6.12", "flood", &"FAIL x: y\n".repeat(100));
    let long = "z".repeat(1000);
    run("6.1", "a-long", &format!("FAIL long: {long}\n"));
    let out = failed_checks(&rig);
    assert_eq!(out.lines().count(), 41, "{out}");
    assert!(out.ends_with("(and 63 more)"), "{out}");
    let first = format!("6.1/a-long: FAIL long: {}\n", &long[..277]);
    assert!(out.starts_with(&first), "{out}");
    assert!(out.lines().all(|l| l.chars().count() <= 300), "{out}");
}
