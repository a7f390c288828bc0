//! Every command the README, `CONTRIBUTING.md`, the `docs/` pages a user follows
//! (monitoring, performance, testing, restarts, architecture) and the manual pages'
//! EXAMPLES show works as written, checked cheaply (nothing here builds, boots or installs anything):
//!
//! * `cargo` lines: each `-p` names a workspace package, each `--bin`, `--example`,
//!   `--test` a target of it (read from the manifests and the directories cargo discovers
//!   targets in: the test runs no cargo), and the options after `--` of a
//!   `cargo run --bin X` are options `X --help` lists;
//! * our binaries (`iwpmd`, `iwpmctl`, `target/*/iwpmd`, ...): each subcommand and option
//!   is one `--help` lists (the subcommand's own `--help` for `iwpmctl SUB`), and a line
//!   that only asks for the version or help is run;
//! * paths into the repository exist, and scripts there are executable;
//! * the configuration example of `iwpmd.conf(5)` parses without a single diagnostic.
//!
//! Everything else (`apt`, `systemctl`, coreutils...) acts on a host the test must not
//! touch and is listed in [`SYSTEM_TOOLS`]; a program that is neither fails the test, so
//! a new kind of command needs a decision here.
//!
//! The README's packaging lines are the exception: they are run, as written, on the release
//! binaries where those are built ([`the_readme_packaging_lines_build_both_packages`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use iwpm_testkit::host::{on_path, skip};
use iwpm_testkit::workspace::workspace_root as root;

/// Programs of the host, not of this project: not run, not checked.
const SYSTEM_TOOLS: &[&str] = &[
    "apt",
    "apt-get",
    "systemctl",
    "udevadm",
    "grep",
    "mv",
    "mkdir",
    "for",
    "do",
    "done",
    "jq",
    "echo",
    "cat",
    "cp",
    "dpkg-divert",
    // (the README's fleet key file: a directory and a file of root's, mode given)
    "install",
];

/// Options a document shows before the code has them, by program, with why. Empty once
/// they have landed.
const PENDING_OPTIONS: &[(&str, &str, &str)] = &[];

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The workspace's packages and their targets (kind, name).
struct Workspace(BTreeMap<String, BTreeSet<(String, String)>>);

/// Target kinds as cargo names them, with the directory cargo discovers them in.
const TARGET_DIRS: [(&str, &str); 3] = [
    ("example", "examples"),
    ("test", "tests"),
    ("bench", "benches"),
];

impl Workspace {
    /// The members of the root manifest, each with the targets cargo would build: those its
    /// manifest declares (`[[bin]]`, `[[example]]`, `[[test]]`, `[[bench]]`) and those cargo
    /// discovers (`src/main.rs`, `src/bin/`, `examples/`, `tests/`, `benches/`: a `.rs`
    /// file, or a directory with a `main.rs`).
    fn load() -> Self {
        let manifest = read("Cargo.toml");
        let members = manifest
            .split_once("members = [")
            .and_then(|(_, rest)| rest.split_once(']'))
            .expect("members = [...] in the root Cargo.toml")
            .0
            .split(',')
            .map(|m| m.trim().trim_matches('"'))
            .filter(|m| !m.is_empty());
        let mut packages = BTreeMap::new();
        for member in members {
            let dir = root().join(member);
            let mut name = None;
            let mut targets = BTreeSet::new();
            let mut section = String::new();
            for line in read(&format!("{member}/Cargo.toml")).lines() {
                let line = line.trim();
                if line.starts_with('[') {
                    section = line.trim_matches(|c| c == '[' || c == ']').to_owned();
                    continue;
                }
                let Some(value) = line
                    .strip_prefix("name")
                    .and_then(|v| v.trim_start().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_owned())
                else {
                    continue;
                };
                match section.as_str() {
                    "package" => name = Some(value),
                    "bin" | "example" | "test" | "bench" => {
                        targets.insert((section.clone(), value));
                    }
                    _ => {}
                }
            }
            let name = name.unwrap_or_else(|| panic!("{member}: no package name"));
            if dir.join("src/main.rs").is_file() {
                targets.insert(("bin".to_owned(), name.clone()));
            }
            let discovered = std::iter::once(("bin", dir.join("src/bin")))
                .chain(TARGET_DIRS.iter().map(|&(kind, sub)| (kind, dir.join(sub))));
            for (kind, sub) in discovered {
                for entry in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
                    let path = entry.path();
                    let stem = match path.extension() {
                        Some(ext) if ext == "rs" => path.file_stem(),
                        _ if path.join("main.rs").is_file() => path.file_name(),
                        _ => None,
                    };
                    if let Some(stem) = stem.and_then(|s| s.to_str()) {
                        targets.insert((kind.to_owned(), stem.to_owned()));
                    }
                }
            }
            packages.insert(name, targets);
        }
        Workspace(packages)
    }

    fn has_target(&self, package: Option<&str>, kind: &str, name: &str) -> bool {
        self.0
            .iter()
            .filter(|(p, _)| package.is_none_or(|want| want == p.as_str()))
            .any(|(_, t)| t.contains(&(kind.to_owned(), name.to_owned())))
    }
}

/// Shell lines of the fenced `sh` blocks of a Markdown file, continuation lines joined.
fn markdown_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in text.lines() {
        let fence = line.trim_start();
        if let Some(lang) = fence.strip_prefix("```") {
            in_sh = !in_sh && (lang == "sh" || lang == "bash");
            continue;
        }
        if in_sh {
            out.push(line.to_owned());
        }
    }
    join_continuations(out)
}

/// Inline code spans outside fences that are whole commands of ours (`cargo run ...`,
/// `tests/rig/compare.sh --quick`, `IWPM_RIG=0 cargo test --workspace`, ...), as tables
/// and prose give them.
fn inline_commands(text: &str) -> Vec<String> {
    const STARTS: &[&str] = &[
        "cargo run ",
        "cargo test ",
        "cargo build ",
        "cargo bench ",
        "tests/rig/",
        "scripts/",
        "iwpmctl ",
        "iwpmd ",
    ];
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            let command = span
                .split_whitespace()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect::<Vec<_>>()
                .join(" ");
            let ours = STARTS
                .iter()
                .any(|s| command.starts_with(s) || command == s.trim());
            // A bare name or a document's path is a mention, not a command.
            let mention = !span.trim().contains(' ') && !span.starts_with("scripts/")
                || span.ends_with(".md");
            if i % 2 == 1 && ours && !mention && !span.contains('<') && !span.contains("...") {
                out.push(span.to_owned());
            }
        }
    }
    out
}

/// Lines of the `.EX`/`.EE` blocks of a manual page's EXAMPLES section, roff undone.
fn man_examples(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_section = false;
    let mut in_ex = false;
    for line in page.lines() {
        if line.starts_with(".SH ") {
            in_section = line.starts_with(".SH EXAMPLE");
            continue;
        }
        match line {
            ".EX" => in_ex = in_section,
            ".EE" => in_ex = false,
            _ if in_ex => out.push(line.replace("\\-", "-").replace("\\e", "\\")),
            _ => {}
        }
    }
    out
}

fn join_continuations(lines: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in lines {
        let line = strip_comment(&line);
        let (body, more) = match line.trim_end().strip_suffix('\\') {
            Some(b) => (b.to_owned(), true),
            None => (line.trim_end().to_owned(), line.trim_end().ends_with("&&")),
        };
        pending.push_str(&body);
        pending.push(' ');
        if !more {
            let cmd = pending.trim().to_owned();
            if !cmd.is_empty() {
                out.push(cmd);
            }
            pending.clear();
        }
    }
    out
}

/// The line without a `#` comment (a `#` that starts a word outside quotes).
fn strip_comment(line: &str) -> String {
    let mut quote = None;
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev_space => return line[..i].to_owned(),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line.to_owned()
}

/// Simple commands of a line: split at `&&`, `||`, `|`, `;`, redirections and `$(`
/// dropped, leading `VAR=value` and `sudo` removed; words split on blanks, quotes kept
/// together.
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, ';') => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                words.push(";".into());
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut commands = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        match w.as_str() {
            "&&" | "||" | "|" | ";" => commands.push(std::mem::take(&mut current)),
            ">" | ">>" | "<" | "2>" => skip_next = true,
            _ if w.starts_with('>') || w.starts_with("2>") => {}
            _ => current.push(w),
        }
    }
    commands.push(current);
    commands
        .into_iter()
        .map(|c| {
            c.into_iter()
                .skip_while(|w| {
                    w == "sudo" || (w.contains('=') && !w.starts_with('-') && !w.contains('/'))
                })
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// `--help` of one of our binaries (`sub`: of its subcommand), from the target directory
/// this test binary's daemon is in; `None` when that binary is not built there.
fn help(binary: &str, sub: Option<&str>) -> Option<String> {
    let dir = Path::new(env!("CARGO_BIN_EXE_iwpmd")).parent().unwrap();
    let exe = dir.join(binary);
    if !exe.is_file() {
        return None;
    }
    let out = Command::new(exe).args(sub).arg("--help").output().ok()?;
    assert!(out.status.success(), "{binary} {sub:?} --help failed");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn must_have_binaries() -> bool {
    std::env::var_os("CI").is_some() || std::env::var("IWPM_RIG_REQUIRED").as_deref() == Ok("1")
}

/// Options of `args` (`--name`, `--name=value`, `-x`) that `help` does not list.
fn unknown_options(program: &str, args: &[String], help: &str) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with('-') && *a != "-" && !a.starts_with("-$"))
        .map(|a| a.split('=').next().unwrap().to_owned())
        .filter(|o| {
            let listed = help
                .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
                .any(|w| {
                    w == o || w.starts_with(&format!("{o}=")) || w.starts_with(&format!("{o}<"))
                });
            let pending = PENDING_OPTIONS
                .iter()
                .any(|(p, opt, _)| *p == program && opt == o);
            !listed && !pending
        })
        .collect()
}

/// Checks one simple command; returns what is wrong with it.
fn check(ws: &Workspace, cmd: &[String], notes: &mut Vec<String>) -> Vec<String> {
    let mut errors = Vec::new();
    let program = cmd[0].as_str();
    let args = &cmd[1..];
    let base = program.rsplit('/').next().unwrap();
    // Paths into the repository.
    for w in cmd {
        let w = w.trim_matches(|c| c == '\'' || c == '"');
        let repo_path = [
            "crates/",
            "tests/",
            "scripts/",
            "docs/",
            "packaging/",
            ".ci/",
        ]
        .iter()
        .any(|p| w.starts_with(p));
        if repo_path && !w.contains('*') && !root().join(w).exists() {
            errors.push(format!("no such path {w}"));
        }
    }
    if program == "cargo" || program.starts_with("cargo") {
        let sub = args
            .iter()
            .find(|a| !a.starts_with('-') && !a.starts_with('+'));
        let before_dashdash: Vec<&String> = args.iter().take_while(|a| *a != "--").collect();
        let mut package = None;
        let mut bin = None;
        for pair in before_dashdash.windows(2) {
            let (flag, value) = (pair[0].as_str(), pair[1].as_str());
            let kind = match flag {
                // (cargo generate-rpm's -p is the package's directory)
                "-p" if sub.map(String::as_str) == Some("generate-rpm") => {
                    if !root().join(value).join("Cargo.toml").is_file() {
                        errors.push(format!("no package directory {value}"));
                    }
                    continue;
                }
                "-p" | "--package" => {
                    package = Some(value);
                    if !ws.0.contains_key(value) {
                        errors.push(format!("no workspace package {value}"));
                    }
                    continue;
                }
                "--bin" => {
                    bin = Some(value);
                    "bin"
                }
                "--example" => "example",
                "--test" => "test",
                "--bench" => "bench",
                _ => continue,
            };
            if !ws.has_target(package, kind, value) {
                errors.push(format!("no {kind} target {value} (package {package:?})"));
            }
        }
        if sub.map(String::as_str) == Some("run") {
            let after: Vec<String> = args
                .iter()
                .skip_while(|a| *a != "--")
                .skip(1)
                .cloned()
                .collect();
            if let Some(bin) = bin {
                match help(bin, None) {
                    Some(h) => errors.extend(
                        unknown_options(bin, &after, &h)
                            .into_iter()
                            .map(|o| format!("{bin} has no option {o}")),
                    ),
                    None => notes.push(format!("{bin} not built here: its options unchecked")),
                }
            }
        }
        return errors;
    }
    if ["iwpmd", "iwpmctl", "iwpm-lab", "iwpm-bench"].contains(&base) {
        let sub = (base == "iwpmctl")
            .then(|| {
                let mut it = args.iter();
                while let Some(a) = it.next() {
                    match a.as_str() {
                        "--socket" | "--timeout" => {
                            it.next();
                        }
                        a if a.starts_with('-') => {}
                        a => return Some(a.to_owned()),
                    }
                }
                None
            })
            .flatten();
        let Some(top) = help(base, None) else {
            notes.push(format!("{base} not built here: {cmd:?} unchecked"));
            return errors;
        };
        let h = match &sub {
            Some(s) => {
                let listed = top.lines().any(|l| l.split_whitespace().next() == Some(s));
                if !listed {
                    errors.push(format!("{base} has no command {s}"));
                    return errors;
                }
                format!("{top}\n{}", help(base, Some(s)).unwrap_or_default())
            }
            None => top,
        };
        errors.extend(
            unknown_options(base, args, &h)
                .into_iter()
                .map(|o| format!("{base} has no option {o}")),
        );
        // What only prints the version or help is run, as written.
        let only_asks = !args.is_empty() && args.iter().all(|a| a == "--version" || a == "--help");
        if errors.is_empty() && only_asks {
            let exe = Path::new(env!("CARGO_BIN_EXE_iwpmd")).with_file_name(base);
            let ok = Command::new(exe)
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success());
            if !ok {
                errors.push("does not run".into());
            }
        }
        return errors;
    }
    if program.starts_with("target/debug/examples/") {
        if !ws.has_target(None, "example", base) {
            errors.push(format!("no example {base}"));
        }
        return errors;
    }
    let in_repo = ["tests/", "scripts/", ".ci/"]
        .iter()
        .any(|p| program.starts_with(p));
    if in_repo {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(root().join(program)).map(|m| m.permissions().mode());
        if !mode.is_ok_and(|m| m & 0o111 != 0) {
            errors.push("not an executable script of the repository".into());
        }
        return errors;
    }
    if SYSTEM_TOOLS.contains(&program) {
        return errors;
    }
    errors.push(format!(
        "{program}: neither ours nor a listed system tool (SYSTEM_TOOLS)"
    ));
    errors
}

#[test]
fn every_documented_command_works_as_written() {
    let ws = Workspace::load();
    let mut sources: Vec<(String, Vec<String>)> = Vec::new();
    for doc in [
        "README.md",
        "CONTRIBUTING.md",
        "docs/monitoring.md",
        "docs/performance.md",
        "docs/testing.md",
        "docs/restarts.md",
        "docs/architecture.md",
        "tests/rig/README.md",
    ] {
        let text = read(doc);
        let mut lines = markdown_commands(&text);
        if doc != "tests/rig/README.md" {
            lines.extend(inline_commands(&text));
        }
        sources.push((doc.into(), lines));
    }
    for page in ["packaging/iwpmd.8", "packaging/iwpmctl.8"] {
        sources.push((page.into(), join_continuations(man_examples(&read(page)))));
    }
    let mut failures = Vec::new();
    let mut notes = Vec::new();
    let mut checked = 0;
    for (doc, lines) in &sources {
        for line in lines {
            for cmd in simple_commands(line) {
                checked += 1;
                eprintln!("{doc}: {}", cmd.join(" "));
                for e in check(&ws, &cmd, &mut notes) {
                    failures.push(format!("{doc}: `{line}`: {e}"));
                }
            }
        }
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    assert!(
        notes.is_empty() || !must_have_binaries(),
        "in CI every binary is built: {notes:?}"
    );
    assert!(
        checked > 25,
        "only {checked} commands found: the extraction broke"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The extraction itself: continuation lines, comments, pipes, redirections, sudo.
#[test]
fn commands_are_split_as_a_shell_would() {
    let lines = join_continuations(vec![
        "sudo iwpmctl metrics > /tmp/x.prom.tmp &&".into(),
        "  mv /tmp/x.prom.tmp /tmp/x.prom   # atomically".into(),
        "IWPM_RIG=0 cargo test --workspace \\".into(),
        "  -p iwpmd".into(),
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let cmds = simple_commands(&lines[0]);
    assert_eq!(
        cmds,
        vec![
            vec!["iwpmctl".to_owned(), "metrics".into()],
            vec!["mv".into(), "/tmp/x.prom.tmp".into(), "/tmp/x.prom".into()],
        ]
    );
    assert_eq!(
        simple_commands(&lines[1]),
        vec![vec!["cargo", "test", "--workspace", "-p", "iwpmd"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()]
    );
    // A wrong package, option or command is caught.
    let ws = Workspace::load();
    let mut notes = Vec::new();
    for bad in [
        "cargo build --release -p iwpmd -p iwpmctl",
        "cargo generate-rpm -p crates/iwpmctl",
        "cargo run --release --bin iwpm-lab -- --no-such-option",
        "iwpmd --no-such-option",
        "iwpmctl no-such-command",
        "tests/rig/no-such-script.sh",
    ] {
        let errors: Vec<String> = simple_commands(bad)
            .iter()
            .flat_map(|c| check(&ws, c, &mut notes))
            .collect();
        let skipped = notes.iter().any(|n| n.contains("not built"));
        assert!(!errors.is_empty() || skipped, "{bad}: not caught");
        notes.clear();
    }
}

/// The targets as cargo would build them, read without cargo: declared and discovered
/// binaries, an example, the test binaries, a bench.
#[test]
fn the_workspace_targets_are_read_from_the_manifests() {
    let ws = Workspace::load();
    for (package, kind, name) in [
        ("iwpmd", "bin", "iwpmd"),
        ("iwpm-control", "bin", "iwpmctl"),
        ("iwpm-sim", "bin", "iwpm-sim"),
        ("iwpm-kernel-emu", "example", "kernel"),
        ("iwpmd", "test", "it"),
        ("iwpm-testkit", "test", "it"),
        ("iwpm-core", "bench", "state_file"),
        ("iwpm-bench", "bench", "table"),
    ] {
        assert!(
            ws.has_target(Some(package), kind, name),
            "{package} has no {kind} target {name}: {:?}",
            ws.0.get(package)
        );
    }
    assert!(
        !ws.has_target(None, "test", "vectors"),
        "a directory without main.rs"
    );
}

/// The configuration example of `iwpmd.conf(5)` is a file the daemon reads without a
/// single diagnostic.
#[test]
fn the_configuration_example_parses_cleanly() {
    let page = read("packaging/iwpmd.conf.5");
    let example: String = page
        .lines()
        .skip_while(|l| *l != ".SH EXAMPLE")
        .skip_while(|l| *l != ".EX")
        .skip(1)
        .take_while(|l| *l != ".EE")
        .map(|l| format!("{}\n", l.replace("\\-", "-")))
        .collect();
    assert!(example.contains("nl_sock_rbuf_size="), "{example}");
    let (_, diagnostics) = iwpm_proto::config::parse_config(&example);
    assert!(diagnostics.is_empty(), "{diagnostics:?}\n{example}");
}

/// The first paragraph of the README's block under "Install as the system iwpmd": the
/// lines that build the packages, continuation lines joined, comments dropped.
fn readme_packaging_lines() -> Vec<String> {
    let readme = read("README.md");
    let section = readme
        .split_once("## Install as the system iwpmd")
        .expect("the README's install section")
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a sh block in the install section")
        .0;
    let paragraph = block.split("\n\n").next().unwrap_or_default();
    join_continuations(paragraph.lines().map(str::to_owned).collect())
}

/// The short summary of both packages: Cargo.toml's `description` (cargo deb's synopsis)
/// and generate-rpm's `summary`.
fn package_summaries() -> Vec<String> {
    read("crates/iwpmd/Cargo.toml")
        .lines()
        .filter_map(|l| {
            l.strip_prefix("description = \"")
                .or_else(|| l.strip_prefix("summary = \""))
        })
        .map(|v| v.trim_end_matches('"').to_owned())
        .collect()
}

/// The README's packaging lines run as written, from the workspace root, on a fresh clone
/// once the release binaries are built (the lines' own `cargo build --release`, minutes of
/// LTO, is the one line not run here: its binaries are packaged as they are). Each line
/// succeeds without a warning (cargo deb once warned that the completions "will not be
/// built" although it packed them), and both packages come out with the completions in
/// them. Skipped, visibly, where the release binaries, cargo-deb, cargo-generate-rpm or
/// strip are missing; CI has them all.
#[test]
fn the_readme_packaging_lines_build_both_packages() {
    const TEST: &str = "doc_commands::the_readme_packaging_lines_build_both_packages";
    let lines = readme_packaging_lines();
    let build = "cargo build --release -p iwpmd -p iwpm-control";
    assert_eq!(lines.first().map(String::as_str), Some(build), "{lines:?}");
    let deb_line = lines.iter().find(|l| l.starts_with("cargo deb "));
    let rpm_line = lines.iter().find(|l| l.starts_with("cargo generate-rpm "));
    assert!(
        deb_line.is_some() && rpm_line.is_some(),
        "the README builds both packages: {lines:?}"
    );
    for summary in package_summaries() {
        assert!(
            summary.len() < 80 && !summary.ends_with('.'),
            "a package summary is one short line (lintian, rpmlint): {summary:?}"
        );
    }

    // The target directory this test binary was built in, and its release binaries.
    let target = Path::new(env!("CARGO_BIN_EXE_iwpmd"))
        .parent()
        .and_then(Path::parent)
        .expect("the target directory");
    let release = target.join("release");
    let missing: Vec<&str> = ["iwpmd", "iwpmctl"]
        .into_iter()
        .filter(|b| !release.join(b).is_file())
        .collect();
    if !missing.is_empty() {
        skip(
            TEST,
            &format!(
                "no release build of {missing:?} in {}: `{build}` first",
                release.display()
            ),
        );
        return;
    }
    let cargo_has = |sub: &str| {
        Command::new("cargo")
            .args([sub, "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for (ok, what) in [
        (
            cargo_has("deb"),
            "cargo-deb (cargo install cargo-deb --locked --version 3.6.0)",
        ),
        (
            cargo_has("generate-rpm"),
            "cargo-generate-rpm (cargo install cargo-generate-rpm --locked --version 0.21.1)",
        ),
        (on_path("strip"), "strip (apt-get install binutils)"),
    ] {
        if !ok {
            skip(TEST, &format!("{what} is not installed"));
            return;
        }
    }

    let started = std::time::SystemTime::now();
    let mut deb = None;
    for line in lines.iter().skip(1) {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", line])
            .current_dir(root())
            .env("CARGO_TARGET_DIR", target)
            .output()
            .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "`{line}` failed:\n{stdout}{stderr}");
        assert!(
            !stderr.to_ascii_lowercase().contains("warning"),
            "`{line}` warned:\n{stderr}"
        );
        if Some(line) == deb_line {
            deb = stdout.lines().last().map(str::to_owned);
        }
    }

    let deb = deb.expect("cargo deb names its package");
    let rpm = std::fs::read_dir(target.join("generate-rpm"))
        .expect("target/generate-rpm")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let made_now = p
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= started);
            made_now && p.extension().is_some_and(|e| e == "rpm")
        })
        .expect("cargo generate-rpm made a package");
    let completions = [
        "/bash-completion/completions/iwpmd",
        "/_iwpmd",
        "/iwpmd.fish",
    ];
    for (lister, args, package) in [
        ("dpkg-deb", ["-c", deb.as_str()], Path::new(&deb)),
        ("rpm", ["-qlp", rpm.to_str().unwrap()], rpm.as_path()),
    ] {
        if !on_path(lister) {
            skip(
                TEST,
                &format!(
                    "{lister} is not installed: {} not listed",
                    package.display()
                ),
            );
            continue;
        }
        let out = Command::new(lister).args(args).output().expect(lister);
        let listing = String::from_utf8_lossy(&out.stdout);
        for c in completions {
            assert!(
                listing.lines().any(|l| l.trim_end().ends_with(c)),
                "{} lacks {c}:\n{listing}",
                package.display()
            );
        }
    }
}

/// Each binary of the workspace answers `--version` with its name and the workspace's
/// version, as `iwpmd --version` in the README does (`iwpm-bench` and `iwpm-sim` once
/// refused it). Binaries not built next to this test's `iwpmd` (after a `cargo test -p
/// iwpmd`) are skipped, visibly.
#[test]
fn every_binary_answers_version() {
    const TEST: &str = "doc_commands::every_binary_answers_version";
    let ws = Workspace::load();
    let bins: BTreeSet<&str> =
        ws.0.values()
            .flatten()
            .filter(|(kind, _)| kind == "bin")
            .map(|(_, name)| name.as_str())
            .collect();
    assert!(bins.len() >= 5, "{bins:?}");
    let dir = Path::new(env!("CARGO_BIN_EXE_iwpmd")).parent().unwrap();
    let want = env!("CARGO_PKG_VERSION");
    let mut unbuilt = Vec::new();
    for bin in bins {
        let exe = dir.join(bin);
        if !exe.is_file() {
            unbuilt.push(bin);
            continue;
        }
        let out = Command::new(&exe).arg("--version").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with(&format!("{bin} {want}")),
            "{bin} --version: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if !unbuilt.is_empty() {
        skip(
            TEST,
            &format!(
                "{unbuilt:?} not built in {}: `cargo build --workspace --bins` first",
                dir.display()
            ),
        );
    }
}
