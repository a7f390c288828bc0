//! Records which source the binary was built from, so the start-up log line and bug
//! reports can name it: `IWPMD_BUILD` from the environment when set (packagers), else
//! `git describe --always --dirty` of the checkout, else `unknown` (a source tarball).
//!
//! Also decides whether the real-kernel rig test can run here (`tests/real_kernel_rig.rs`):
//! when it cannot, the test is compiled as `#[ignore]`, so `cargo test` reports it as
//! `ignored` with the reason instead of a silent `ok`. `IWPM_RIG_REQUIRED=1` (CI) never
//! ignores it: there a missing facility fails the test.

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
    (String::from_utf8_lossy(&uid.stdout).trim() != "0").then(|| "not root".into())
}

fn main() {
    println!("cargo:rerun-if-env-changed=IWPMD_BUILD");
    println!("cargo:rerun-if-env-changed=IWPM_RIG");
    println!("cargo:rerun-if-env-changed=IWPM_RIG_REQUIRED");
    println!("cargo:rustc-check-cfg=cfg(rig_unavailable)");
    if std::env::var("IWPM_RIG_REQUIRED").as_deref() != Ok("1") {
        if let Some(why) = rig_unavailable() {
            println!("cargo:rustc-cfg=rig_unavailable");
            println!("cargo:warning=the real-kernel rig test is ignored here: {why}");
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
