//! One build for the lab and its daemon: building `iwpmd` next to the lab (what the lab does
//! when the daemon is missing, `src/locate.rs`) must reuse every dependency the lab's own
//! build compiled. Cargo reuses a compiled dependency only when its features resolve the
//! same, so for each binary that runs the daemon, every (package, features) of its
//! dependency tree must be in the tree of the same package built together with `iwpmd`.
//! A feature the daemon adds to a shared dependency (say rustix's `time`) breaks this,
//! and the lab's first run compiles that dependency, and all above it, a second time.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `package features` lines of the dependency tree of `packages` built together.
fn tree(packages: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["tree", "--offline", "-e", "normal,build"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let out = cmd
        .args(["--prefix", "none", "-f", "{p} {f}"])
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {packages:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn building_the_daemon_next_to_the_lab_or_the_bench_reuses_their_dependencies() {
    for package in ["iwpm-lab", "iwpm-bench"] {
        let alone = tree(&[package]);
        let with_daemon = tree(&[package, "iwpmd"]);
        let differ: Vec<&String> = alone.difference(&with_daemon).collect();
        assert!(
            differ.is_empty(),
            "{package}: these dependencies resolve other features when built with iwpmd, so \
             building the daemon next to {package} compiles them again; give {package} (or \
             iwpm-lab) the daemon's features of them: {differ:#?}"
        );
    }
}
