//! The packaging files against what they promise: the RNIC udev rule matches the node type
//! the rig reads from a real siw device, the always-on target needs the service, the
//! unit's capability set is what the daemon keeps, every file the Debian and RPM metadata
//! name exists, the maintainer scripts divert the same list, and the completion scripts
//! know the options. (`scripts/check-packaging` builds and installs the package itself.)

use std::path::Path;
use std::process::Command;

use iwpm_testkit::workspace::workspace_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A unit file without its comment lines (they may name settings the unit does not use).
fn unit_settings(path: &str) -> String {
    read(path)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Rule lines (not comments) of a udev rules file.
fn rule_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn rnic_rule_wants_the_service_for_every_iwarp_node_type() {
    let rules = read("packaging/iwpmd-rnic.rules");
    let lines = rule_lines(&rules);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let keys: Vec<&str> = lines[0].split(", ").collect();
    for want in [
        "ACTION!=\"remove\"",
        "SUBSYSTEM==\"infiniband\"",
        "ATTR{node_type}==\"4: RNIC\"",
        "TAG+=\"systemd\"",
        "ENV{SYSTEMD_WANTS}+=\"iwpmd.service\"",
    ] {
        assert!(keys.contains(&want), "rule lacks {want}: {keys:?}");
    }
    // No driver match: that is the point of this rule.
    assert!(!lines[0].contains("DRIVER"), "{}", lines[0]);
    // The rig's privdrop suite reads siw0's node_type and compares it with this same text.
    let suite = read("tests/rig/guest/suite-privdrop.sh");
    assert!(
        suite.contains("RNIC_NODE_TYPE=\"4: RNIC\""),
        "the rig suite must check the text the rule matches"
    );
}

#[test]
fn always_target_needs_the_service_and_is_installable() {
    let target = read("packaging/iwpmd-always.target");
    assert!(target.contains("\nWants=iwpmd.service\n"), "{target}");
    assert!(target.contains("\n[Install]\nWantedBy="), "{target}");
    let unit = unit_settings("packaging/iwpmd.service");
    // The unit stays on demand; the target is what keeps it needed.
    assert!(unit.contains("\nStopWhenUnneeded=yes\n"));
    assert!(!unit.contains("[Install]"));
}

#[test]
fn unit_bounds_capabilities_to_what_the_daemon_keeps() {
    let unit = unit_settings("packaging/iwpmd.service");
    assert!(
        unit.contains("\nCapabilityBoundingSet=CAP_NET_ADMIN\n"),
        "{unit}"
    );
    assert!(unit.contains("\nNoNewPrivileges=yes\n"));
    assert!(unit.contains("\nRestrictAddressFamilies=AF_NETLINK AF_INET AF_INET6 AF_UNIX\n"));
    assert!(unit.contains("\nProtectSystem=strict\n"));
    assert!(unit.contains("\nLimitNOFILE=102400\n"));
    // The kernel's iwpm client talks only to the initial network namespace.
    assert!(
        !unit.contains("PrivateNetwork="),
        "the daemon must stay in init_net"
    );
    assert!(
        !unit.contains("PrivateUsers="),
        "CAP_NET_ADMIN must be the host's"
    );
}

/// The unit passes the fleet key file as the credential the daemon reads, and pairs it
/// with systemd's documented fallback for a missing file (a `SetCredential=` of the same
/// id: without it `LoadCredential=` of a missing file fails the start, and most hosts have
/// no key file). An empty `SetCredential=` value is ignored by systemd ("Invalid syntax",
/// checked with systemd 252's `systemd-analyze verify`), so the fallback is a comment,
/// which the daemon reads as "no credential".
#[test]
fn unit_passes_the_key_file_as_a_credential_that_may_be_missing() {
    let unit = unit_settings("packaging/iwpmd.service");
    assert!(
        unit.contains("\nLoadCredential=iwpmd-peer-keys:/etc/iwpmd/peer-keys\n"),
        "{unit}"
    );
    let placeholder = unit
        .lines()
        .find_map(|l| l.strip_prefix("SetCredential=iwpmd-peer-keys:"))
        .expect("a SetCredential= fallback for the key file");
    assert!(
        !placeholder.trim().is_empty(),
        "systemd ignores an empty value"
    );
    assert!(!placeholder.contains('%') && !placeholder.contains('\\'));
    assert_eq!(
        iwpm_proto::keyfile::parse_key_file(placeholder).unwrap_err(),
        iwpm_proto::keyfile::KeyFileError::Empty,
        "the daemon must read the fallback as no key at all"
    );
}

/// Source paths of the assets listed in a `[package.metadata.*]` table of Cargo.toml.
fn asset_sources(manifest: &str, table: &str) -> Vec<String> {
    let start = manifest
        .find(&format!("\n[{table}]\n"))
        .unwrap_or_else(|| panic!("no [{table}]"));
    let body = &manifest[start + table.len() + 4..];
    let body = &body[..body.find("\n[").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(rest) = l.strip_prefix("[\"") {
                rest.split('"').next().map(str::to_owned)
            } else if let Some(rest) = l.strip_prefix("{ source = \"") {
                rest.split('"').next().map(str::to_owned)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn every_packaged_file_exists() {
    let manifest = read("crates/iwpmd/Cargo.toml");
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for table in ["package.metadata.deb", "package.metadata.generate-rpm"] {
        let sources = asset_sources(&manifest, table);
        assert!(sources.len() >= 10, "{table}: {sources:?}");
        for src in sources {
            // Build outputs (binaries, completions, compressed pages) are made when packaging.
            if src.contains("target/") {
                continue;
            }
            assert!(crate_dir.join(&src).is_file(), "{table}: {src} missing");
        }
    }
    for license in ["LICENSE-MIT", "LICENSE-APACHE", "CHANGELOG.md"] {
        assert!(
            workspace_root().join(license).is_file(),
            "{license} missing"
        );
    }
    let workspace = read("Cargo.toml");
    assert!(workspace.contains("license = \"MIT OR Apache-2.0\""));
    assert!(!workspace.contains("example.invalid"));
}

/// `path divert` pairs of a maintainer script's here-document.
fn divert_list(script: &str) -> Vec<(String, String)> {
    let text = read(&format!("packaging/debian/{script}"));
    let start = text.find("<<LIST\n").expect("LIST here-document") + 7;
    let end = start + text[start..].find("\nLIST").unwrap();
    text[start..end]
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_owned(), b.to_owned())
        })
        .collect()
}

#[test]
fn maintainer_scripts_divert_and_restore_the_same_rdma_core_files() {
    let add = divert_list("preinst");
    let remove = divert_list("postrm");
    assert_eq!(add, remove);
    let paths: Vec<&str> = add.iter().map(|(p, _)| p.as_str()).collect();
    // rdma-core's iwpmd files outside /etc (its /etc files are conffiles that serve this
    // daemon unchanged, so they are not diverted): the unit and the rule under /lib
    // (Debian 12) and /usr/lib (Debian 13), the same files on merged /usr.
    assert_eq!(
        paths,
        [
            "/usr/sbin/iwpmd",
            "/lib/systemd/system/iwpmd.service",
            "/usr/lib/systemd/system/iwpmd.service",
            "/lib/udev/rules.d/90-iwpmd.rules",
            "/usr/lib/udev/rules.d/90-iwpmd.rules",
            "/usr/share/man/man8/iwpmd.8.gz",
            "/usr/share/man/man5/iwpmd.conf.5.gz",
        ]
    );
    for (path, divert) in &add {
        // Diverted copies must not be picked up: no *.rules, *.service or plain page names.
        assert!(divert.contains("rdma-core"), "{divert}");
        assert!(
            !divert.ends_with(".rules") && !divert.ends_with(".service"),
            "{path} -> {divert}"
        );
    }
    for script in ["preinst", "postinst", "prerm", "postrm"] {
        let path = workspace_root().join("packaging/debian").join(script);
        let out = Command::new("sh").arg("-n").arg(&path).output().unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
    }
}

#[test]
fn completion_scripts_know_the_options() {
    for (shell, needle) in [
        ("bash", "--allow-netns"),
        ("zsh", "--user"),
        ("fish", "allow-netns"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_iwpmd"))
            .args(["--completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(needle), "{shell} completion lacks {needle}");
        assert!(text.contains("--peer-port") || text.contains("peer-port"));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_iwpmd"))
        .args(["--completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "unknown shell is a usage error");
}

/// A release names its version in four places besides the manifest: each manual page's
/// `.TH` footer, the top entry of the Debian changelog (`<version>-<revision>`) and a
/// section of CHANGELOG.md. A bump that forgets one fails here (and in check-packaging).
#[test]
fn every_place_that_names_the_version_names_this_one() {
    let version = env!("CARGO_PKG_VERSION");
    for page in [
        "packaging/iwpmd.8",
        "packaging/iwpmctl.8",
        "packaging/iwpmd.conf.5",
    ] {
        let th = read(page)
            .lines()
            .find(|l| l.starts_with(".TH "))
            .unwrap_or_else(|| panic!("{page}: no .TH line"))
            .to_owned();
        assert!(th.contains(&format!("\"iwpmd {version}\"")), "{page}: {th}");
    }
    let debian = read("packaging/debian/changelog");
    let top = debian.lines().next().unwrap_or_default();
    assert!(
        top.starts_with(&format!("iwpmd-rs ({version}-")),
        "packaging/debian/changelog's top entry is not {version}: {top}"
    );
    let changelog = read("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## [{version}] - ")),
        "CHANGELOG.md has no section for {version}"
    );
}
