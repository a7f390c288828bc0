//! Records which source the binary was built from, so the start-up log line and bug
//! reports can name it: `IWPMD_BUILD` from the environment when set (packagers), else
//! `git describe --always --dirty` of the checkout, else `unknown` (a source tarball).
//!
//! Also decides whether the real-kernel rig test can run here (`tests/it/real_kernel_rig.rs`):
//! when it cannot, the test is compiled as `#[ignore]`, so `cargo test` reports it as
//! `ignored` with the reason instead of a silent `ok`. It cannot run without QEMU and root,
//! nor, unless `IWPM_RIG_SETUP=1` allows it to install `linux-source` and build one, without
//! a rig kernel already there (`tests/rig/build-kernel.sh --check`). `IWPM_RIG_REQUIRED=1`
//! (CI) never ignores it: there a missing facility fails the test.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Why the QEMU rig cannot run on this machine (the test repeats the check at run time).
fn rig_unavailable() -> Option<String> {
    if std::env::var("IWPM_RIG").as_deref() == Ok("0") {
        return Some("IWPM_RIG=0".into());
    }
    let paths = std::env::var_os("PATH").unwrap_or_default();
    for tool in ["qemu-system-x86_64", "cpio", "gcc", "apt-get"] {
        if !std::env::split_paths(&paths).any(|d| d.join(tool).is_file()) {
            return Some(format!("{tool} not found"));
        }
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    if std::env::var("IWPM_RIG_SETUP").as_deref() == Ok("1") {
        return None;
    }
    kernels_not_ready()
}

/// The kernels `IWPM_RIG_KERNEL` asks for (default all) that are not built or prebuilt
/// yet, with `build-kernel.sh`'s reason; the images that are ready are watched, so the
/// decision is made again when one changes.
fn kernels_not_ready() -> Option<String> {
    let rig = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/rig");
    for f in ["build-kernel.sh", "common.sh"] {
        println!("cargo:rerun-if-changed={}", rig.join(f).display());
    }
    let which = std::env::var("IWPM_RIG_KERNEL").unwrap_or_else(|_| "all".into());
    let kernels: Vec<&str> = match which.as_str() {
        "all" => vec!["6.1", "6.12"],
        one => vec![one],
    };
    let mut missing = Vec::new();
    for k in kernels {
        let out = Command::new("bash")
            .arg(rig.join("build-kernel.sh"))
            .arg("--check")
            .env("RIG_KVER", k)
            .output()
            .ok()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().last() {
            Some(image) if out.status.success() => println!("cargo:rerun-if-changed={image}"),
            _ => missing.push(k),
        }
    }
    (!missing.is_empty()).then(|| {
        format!(
            "no rig kernel for Linux {} yet; IWPM_RIG_SETUP=1 lets the test install \
             linux-source and build it (tens of minutes)",
            missing.join(" and ")
        )
    })
}

fn main() {
    println!("cargo:rerun-if-env-changed=IWPMD_BUILD");
    println!("cargo:rerun-if-env-changed=IWPM_RIG");
    println!("cargo:rerun-if-env-changed=IWPM_RIG_REQUIRED");
    for var in [
        "IWPM_RIG_SETUP",
        "IWPM_RIG_KERNEL",
        "RIG_CACHE",
        "RIG_KERNEL",
        "RIG_KERNEL_6_12",
        "RIG_PATCHES",
        "RIG_NO_SHARED",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rustc-check-cfg=cfg(rig_unavailable)");
    if std::env::var("IWPM_RIG_REQUIRED").as_deref() != Ok("1") {
        if let Some(why) = rig_unavailable() {
            println!("cargo:rustc-cfg=rig_unavailable");
            // Said where tests are built (`cargo test` uses the debug profile), not in
            // the release builds that run the lab or install the daemon, which run none.
            if std::env::var("PROFILE").as_deref() == Ok("debug") {
                println!("cargo:warning=the real-kernel rig test is ignored here: {why}");
            }
        }
    }
    let build = match std::env::var("IWPMD_BUILD") {
        Ok(v) if !v.trim().is_empty() => v.trim().to_owned(),
        _ => {
            // Rebuild when HEAD moves (a commit or a checkout), in a worktree too.
            for path in [
                git(&["rev-parse", "--git-path", "HEAD"]),
                git(&["symbolic-ref", "-q", "HEAD"])
                    .and_then(|r| git(&["rev-parse", "--git-path", &r])),
                git(&["rev-parse", "--git-path", "index"]),
            ]
            .into_iter()
            .flatten()
            {
                println!("cargo:rerun-if-changed={path}");
            }
            git(&["describe", "--always", "--dirty", "--abbrev=12"])
                .unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=IWPMD_BUILD={build}");
}
