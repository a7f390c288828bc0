//! Records which source the binary was built from, so the start-up log line and bug
//! reports can name it: `IWPMD_BUILD` from the environment when set (packagers), else
//! `git describe --always --dirty` of the checkout, else `unknown` (a source tarball).
//!
//! Also decides which tests cannot run here, so that `cargo test` reports each as `ignored`
//! with the reason that applies instead of a silent `ok` (libtest cannot ignore at run
//! time; the tests repeat the check and skip visibly if the host changed since):
//! - the real-kernel rig (`tests/it/real_kernel_rig.rs`), `cfg(rig_unavailable = CAUSE)`:
//!   it needs QEMU and root and, unless `IWPM_RIG_SETUP=1` allows it to install
//!   `linux-source` and build one, a rig kernel already there
//!   (`tests/rig/build-kernel.sh --check`);
//! - the system test (`tests/it/system_suite.rs`), `cfg(system_test_unavailable = CAUSE)`:
//!   QEMU, mmdebstrap's tools and root, but no rig kernel (it boots Debian's own);
//! - the tests that need root, `cfg(not_root)`.
//!
//! `IWPM_RIG_REQUIRED=1` (CI) ignores neither QEMU test: there a missing facility fails it.

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

/// Why a QEMU test cannot run here: the `CAUSE` of its cfg (one of [`CAUSES`], each with
/// its own `ignore` reason in the test) and the detail for the build warning.
type Unavailable = (&'static str, String);

/// The causes a QEMU test's cfg may name.
const CAUSES: &str = r#""off", "tools", "root", "kernel""#;

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// What both QEMU tests need: not `IWPM_RIG=0`, the tools, root.
fn qemu_unavailable(tools: &[&str], install: &str) -> Option<Unavailable> {
    if std::env::var("IWPM_RIG").as_deref() == Ok("0") {
        return Some(("off", "IWPM_RIG=0 is set".into()));
    }
    let paths = std::env::var_os("PATH").unwrap_or_default();
    for tool in tools {
        if !std::env::split_paths(&paths).any(|d| d.join(tool).is_file()) {
            return Some(("tools", format!("{tool} not found ({install})")));
        }
    }
    if !is_root() {
        return Some(("root", "not root".into()));
    }
    None
}

/// Why the QEMU rig cannot run on this machine (the test repeats the check at run time).
fn rig_unavailable() -> Option<Unavailable> {
    if let Some(why) = qemu_unavailable(
        &["qemu-system-x86_64", "cpio", "gcc", "apt-get"],
        "apt-get install qemu-system-x86 cpio gcc",
    ) {
        return Some(why);
    }
    if std::env::var("IWPM_RIG_SETUP").as_deref() == Ok("1") {
        return None;
    }
    kernels_not_ready().map(|why| ("kernel", why))
}

/// Why the system test cannot run here (it needs no rig kernel: it boots Debian's).
fn system_test_unavailable() -> Option<Unavailable> {
    qemu_unavailable(
        &["qemu-system-x86_64", "qemu-img", "gcc", "apt-get", "mke2fs"],
        "apt-get install qemu-system-x86 qemu-utils gcc e2fsprogs",
    )
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
    println!("cargo:rustc-check-cfg=cfg(rig_unavailable, values({CAUSES}))");
    println!("cargo:rustc-check-cfg=cfg(system_test_unavailable, values({CAUSES}))");
    println!("cargo:rustc-check-cfg=cfg(not_root)");
    // `sudo cargo test` after a build as a user: decide again.
    println!("cargo:rerun-if-env-changed=USER");
    println!("cargo:rerun-if-env-changed=SUDO_UID");
    if !is_root() {
        println!("cargo:rustc-cfg=not_root");
    }
    if std::env::var("IWPM_RIG_REQUIRED").as_deref() != Ok("1") {
        // Said where tests are built (`cargo test` uses the debug profile), not in the
        // release builds that run the lab or install the daemon, which run none.
        let tests = std::env::var("PROFILE").as_deref() == Ok("debug");
        for (cfg, test, why) in [
            ("rig_unavailable", "real-kernel rig", rig_unavailable()),
            (
                "system_test_unavailable",
                "system",
                system_test_unavailable(),
            ),
        ] {
            if let Some((cause, detail)) = why {
                println!("cargo:rustc-cfg={cfg}=\"{cause}\"");
                if tests {
                    println!("cargo:warning=the {test} test is ignored here: {detail}");
                }
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
