//! Decides whether the node_exporter test (`tests/it/node_exporter.rs`) can run here: where
//! Debian's `prometheus-node-exporter` is not installed it is compiled as `#[ignore]`, so
//! `cargo test` lists it as `ignored` with the reason instead of a passing test that ran
//! nothing (libtest cannot ignore at run time). On CI (`CI` or `IWPM_RIG_REQUIRED=1`) it is
//! never ignored: there a missing exporter fails it. Nothing here changes what is built
//! into `iwpmctl`.

use std::path::PathBuf;

/// The names the exporter goes by (Debian's package, upstream's tarball).
const EXPORTERS: [&str; 2] = ["prometheus-node-exporter", "node_exporter"];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(node_exporter_missing)");
    for var in ["PATH", "CI", "IWPM_RIG_REQUIRED"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let required = std::env::var_os("CI").is_some()
        || std::env::var("IWPM_RIG_REQUIRED").as_deref() == Ok("1");
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let found = dirs
        .iter()
        .flat_map(|d| EXPORTERS.iter().map(move |name| d.join(name)))
        .find(|p| p.is_file());
    match found {
        // Decide again if it is removed.
        Some(exporter) => println!("cargo:rerun-if-changed={}", exporter.display()),
        None => {
            // Decide again when it is installed (a directory's listing changes then).
            for dir in dirs.iter().filter(|d| d.is_dir()) {
                println!("cargo:rerun-if-changed={}", dir.display());
            }
            if !required {
                println!("cargo:rustc-cfg=node_exporter_missing");
            }
        }
    }
}
