//! Decides which of the lab's tests cannot run here for want of root (network namespaces,
//! running a child as `nobody`): built as another user, they are compiled as
//! `#[ignore = "needs root …"]` (`cfg(not_root)`), so `cargo test` lists them as ignored
//! with the reason instead of passing tests that ran nothing (libtest cannot ignore at run
//! time; the tests still check, and skip visibly, if the host changed since the build).
//! Nothing here changes what is built into `iwpm-lab`.

use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(not_root)");
    // `sudo cargo test` after a build as a user: decide again.
    println!("cargo:rerun-if-env-changed=USER");
    println!("cargo:rerun-if-env-changed=SUDO_UID");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    if !root {
        println!("cargo:rustc-cfg=not_root");
    }
}
