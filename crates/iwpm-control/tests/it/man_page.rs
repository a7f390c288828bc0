//! `packaging/iwpmctl.8` documents every command and option `iwpmctl --help` knows, no
//! other, and renders without a groff warning.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn page() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/iwpmctl.8");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// First word of each `.TP` tag under section `name`, roff escapes removed.
fn tags(page: &str, name: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = page
        .lines()
        .skip_while(|l| *l != format!(".SH {name}"))
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect();
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| {
            let plain = w[1]
                .replace("\\fB", "")
                .replace("\\fR", "")
                .replace("\\fI", "")
                .replace("\\-", "-");
            let plain = plain.strip_prefix(".B ").unwrap_or(&plain).to_owned();
            plain
                .split([' ', ','])
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmctl"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn help_section(help: &str, title: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .map(|w| w.trim_end_matches(',').to_owned())
        .collect()
}

#[test]
fn commands_and_options_match_help() {
    let help = help();
    let page = page();
    let mut commands = help_section(&help, "Commands:");
    commands.remove("help");
    assert_eq!(tags(&page, "COMMANDS"), commands);
    let mut options: BTreeSet<String> = help
        .lines()
        .skip_while(|l| *l != "Options:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let l = l.trim_start();
            // `-h, --help` is tagged by its short form, as in the page.
            l.split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(',')
                .to_owned()
        })
        .collect();
    options.retain(|o| o.starts_with('-'));
    assert_eq!(tags(&page, "OPTIONS"), options);
    // Subcommand options are described with their command.
    let probe = Command::new(env!("CARGO_BIN_EXE_iwpmctl"))
        .args(["probe", "--help"])
        .output()
        .unwrap();
    let probe = String::from_utf8(probe.stdout).unwrap();
    assert!(probe.contains("--wait-ms"));
    assert!(page.contains("\\fB\\-\\-wait\\-ms\\fR"));
    assert!(page.contains("[\\fB\\-\\-check\\fR]"));
    let th = format!("\"iwpmd {}\"", env!("CARGO_PKG_VERSION"));
    assert!(page
        .lines()
        .any(|l| l.starts_with(".TH ") && l.contains(&th)));
}
