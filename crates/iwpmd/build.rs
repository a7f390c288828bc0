//! Records which source the binary was built from, so the start-up log line and bug
//! reports can name it: `IWPMD_BUILD` from the environment when set (packagers), else
//! `git describe --always --dirty` of the checkout, else `unknown` (a source tarball).

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

fn main() {
    println!("cargo:rerun-if-env-changed=IWPMD_BUILD");
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
