//! Skips that show. libtest counts a test that returns early as passed and shows what it
//! printed only with `--nocapture`, so: a test that cannot run without root is compiled as
//! `#[ignore = "needs root"]` where the build runs as another user (`cfg(not_root)`, from
//! the build script), and every run-time skip is said with `say_skipped`, which prints
//! past the capture. Checked over the sources of the crates whose build script sets
//! `not_root` (this one and the lab's tests) and the test binaries of the workspace.

use std::path::{Path, PathBuf};

use iwpm_testkit::workspace::workspace_root;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each `#[test]` function: its attributes (from `#[test]` on) and its first lines.
fn tests_in(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut tests = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "#[test]" {
            continue;
        }
        let Some(f) = (i..lines.len()).find(|&j| lines[j].trim_start().starts_with("fn ")) else {
            continue;
        };
        let attrs = lines[i..f].join("\n");
        let head = lines[f..lines.len().min(f + 4)].join("\n");
        tests.push((attrs, head));
    }
    tests
}

#[test]
fn a_test_that_needs_root_is_ignored_without_it() {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates/iwpmd/src"), &mut files);
    rust_files(&root.join("crates/iwpmd/tests"), &mut files);
    rust_files(&root.join("crates/iwpm-lab/tests"), &mut files);
    let mut unmarked = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (attrs, head) in tests_in(&text) {
            let needs_root = head.contains("if skip_unless_root(")
                || head.contains("if !is_root()")
                || head.contains("if !rustix::process::geteuid().is_root()")
                || head.contains("if rustix::process::geteuid().as_raw() != 0");
            if needs_root && !attrs.contains("cfg_attr(not_root, ignore") {
                unmarked.push(format!(
                    "{}: {}",
                    file.display(),
                    head.lines().next().unwrap()
                ));
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "needs root, not ignored without it:\n{}",
        unmarked.join("\n")
    );
}

#[test]
fn skips_are_said_past_the_capture() {
    let root = workspace_root();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let tests = krate.path().join("tests");
        if tests.is_dir() {
            rust_files(&tests, &mut files);
        }
    }
    rust_files(&root.join("crates/iwpmd/src"), &mut files);
    let mut captured = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let l = line.to_ascii_lowercase();
            if (l.contains("println!(\"skipped") || l.contains("eprintln!(\"skipped"))
                && !l.contains("skips_are_said")
            {
                captured.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        captured.is_empty(),
        "a skip printed with println!/eprintln! shows only with --nocapture; use say_skipped:\n{}",
        captured.join("\n")
    );
}
