//! The command line as operators and packagers meet it: exit statuses of bad options, the
//! ignored `-f`, the man pages kept in step with `--help`, and the SysV init script driving
//! the real binary.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use iwpm_proto::config::ConfigKey;
use iwpm_testkit::prelude::*;
use iwpm_testkit::workspace::workspace_root;

const BIN: &str = env!("CARGO_BIN_EXE_iwpmd");

fn packaging(file: &str) -> PathBuf {
    workspace_root().join("packaging").join(file)
}

fn read_packaging(file: &str) -> String {
    let path = packaging(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs the binary with `args`, no configuration file, stdin closed; bounded by the
/// daemon's own failure (every case here must end by itself).
fn run(args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iwpmd");
    let status = wait_child(&mut child, WAIT);
    if status.is_none() {
        let _ = child.kill();
        panic!("iwpmd {args:?} did not exit within {WAIT:?}");
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---- options ------------------------------------------------------------------------

#[test]
fn unknown_options_exit_2_with_a_message_and_do_not_start() {
    for (args, named) in [
        (&["--bogus"][..], "'--bogus'"),
        (&["-x"][..], "'-x'"),
        (
            &["--systemd", "--no-such-option", "-f"][..],
            "'--no-such-option'",
        ),
        (&["stray-operand"][..], "'stray-operand'"),
    ] {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("unexpected argument") && err.contains(named),
            "{args:?}: stderr should name the bad argument: {err}"
        );
        assert!(err.contains("Usage: iwpmd"), "{args:?}: {err}");
        assert!(
            !err.contains("Starting iWarp Port Mapper"),
            "{args:?} must stop before starting: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
}

#[test]
fn bad_option_values_exit_2() {
    for args in [
        &["--kernel", "tcp:1"][..],
        &["--peer-port", "70000"][..],
        &["--peer-bind-v4", "::1"][..],
        &["--config"][..],
    ] {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stderr).starts_with("error:"), "{args:?}");
    }
}

/// Port 0 would bind a random peer port no peer would ever reach.
#[test]
fn peer_port_zero_is_refused() {
    let out = run(&["--peer-port", "0"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error:") && err.contains("'0'"), "{err}");
}

/// A `--config` file that is not there, and a `peer_allow` entry that is not a network,
/// stop the start-up with status 1 and a message naming the file and the entry, before
/// any socket is opened (a broken allow-list left out would let every peer in).
#[test]
fn a_named_config_file_must_exist_and_a_bad_peer_allow_entry_refuses_it() {
    let dir = scratch_dir("config-refused");
    let kernel = format!("unix:{}", dir.join("nonexistent").display());
    let missing = dir.join("no-such-iwpmd.conf");
    let bad = dir.join("iwpmd.conf");
    std::fs::write(
        &bad,
        "nl_sock_rbuf_size=419430400\npeer_allow = 192.0.2.0/24, 198.51.100.0/33\n",
    )
    .unwrap();
    for (config, expect) in [
        (
            &missing,
            format!(
                "cannot read the configuration file {} given with --config",
                missing.display()
            ),
        ),
        (
            &bad,
            "line 2: peer_allow entry \"198.51.100.0/33\" is not an IP network".to_owned(),
        ),
    ] {
        let out = run(&[
            "--foreground",
            "--log-stderr",
            "--kernel",
            &kernel,
            "--config",
            config.to_str().unwrap(),
            "--no-ipv6",
        ]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{config:?}: {err}");
        assert!(err.contains(&expect), "{config:?}: {err}");
        assert!(
            !err.contains("cannot connect to the kernel emulator"),
            "{config:?}: refused only at the kernel link: {err}"
        );
    }
}

/// `-f` gets the daemon past option parsing (status 1 from the missing kernel link, not 2)
/// with a warning that it was ignored; without `-f` the same failure carries no warning.
#[test]
fn dash_f_is_accepted_and_ignored() {
    let dir = scratch_dir("dash-f");
    let kernel = format!("unix:{}", dir.join("nonexistent").display());
    let port = free_udp_port().to_string();
    let common = [
        "--foreground",
        "--log-stderr",
        "--kernel",
        &kernel,
        "--config",
        "none",
        "--peer-bind-v4",
        "127.0.0.1",
        "--peer-port",
        &port,
        "--no-ipv6",
    ];
    let with_f: Vec<&str> = std::iter::once("-f").chain(common).collect();
    for args in [&with_f[..], &common[..]] {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("cannot connect to the kernel emulator"),
            "{args:?} should fail at the kernel link: {err}"
        );
        assert_eq!(
            err.contains("option -f is accepted for compatibility and ignored"),
            args[0] == "-f",
            "{args:?}: {err}"
        );
    }
}

#[test]
fn help_and_version_exit_0() {
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    // The version and the commit it was built from, as the start-up log line says.
    let said = text(&out.stdout);
    let said = said.trim();
    let build = said
        .strip_prefix(&format!("iwpmd {} (build ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(!build.is_empty() && !build.contains(' '), "{said}");
    for flag in ["-h", "--help"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(
            text(&out.stdout).contains("Usage: iwpmd [OPTIONS]"),
            "{flag}"
        );
    }
}

/// `iwpmd --completions bash | head`: the reader leaves before the script is written.
/// The daemon ends with status 0 and prints nothing (it panicked with a backtrace).
#[test]
fn completions_into_a_closed_pipe_end_quietly() {
    for shell in ["bash", "zsh", "fish"] {
        let mut child = Command::new(BIN)
            .args(["--completions", shell])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iwpmd");
        drop(child.stdout.take());
        assert!(wait_child(&mut child, WAIT).is_some(), "{shell}: no exit");
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            (out.status.code(), text(&out.stderr)),
            (Some(0), String::new()),
            "{shell}"
        );
    }
}

// ---- man pages ------------------------------------------------------------------------

/// Option signatures of `--help`: "-s, --systemd", "--config PATH" (clap's `<PATH>` and
/// `...` dropped).
fn help_signatures() -> BTreeSet<String> {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    let sigs: BTreeSet<String> = help
        .lines()
        .filter(|l| {
            let indent = l.len() - l.trim_start().len();
            indent > 0 && indent <= 6 && l.trim_start().starts_with('-')
        })
        .map(|l| {
            l.trim()
                .replace(['<', '>'], "")
                .trim_end_matches("...")
                .to_owned()
        })
        .collect();
    assert!(
        sigs.iter().filter(|s| s.contains("--")).count() >= 10,
        "too few options parsed from --help: {sigs:?}\n{help}"
    );
    sigs
}

/// Removes the roff escapes the pages use for fonts and hyphens.
fn deroff(line: &str) -> String {
    line.replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\fP", "")
        .replace("\\-", "-")
}

/// The tag lines (the line after each `.TP`) of a page's section.
fn section_tags(page: &str, section: &str) -> Vec<String> {
    let mut lines = page
        .lines()
        .skip_while(|l| *l != format!(".SH {section}"))
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "));
    let mut tags = Vec::new();
    while let Some(l) = lines.next() {
        if l == ".TP" {
            if let Some(tag) = lines.next() {
                tags.push(deroff(tag));
            }
        }
    }
    tags
}

#[test]
fn man_page_documents_every_option_of_help_and_no_other() {
    let page = read_packaging("iwpmd.8");
    let help = help_signatures();
    let tags: BTreeSet<String> = section_tags(&page, "OPTIONS").into_iter().collect();
    let missing: Vec<_> = help.difference(&tags).collect();
    assert!(
        missing.is_empty(),
        "iwpmd.8 OPTIONS lacks (or words differently) these --help options: {missing:?}; its tags: {tags:?}"
    );
    // -f is hidden from --help on purpose; the page still explains it.
    let extra: Vec<_> = tags.difference(&help).filter(|t| *t != "-f").collect();
    assert!(
        extra.is_empty(),
        "iwpmd.8 documents options --help does not know: {extra:?}"
    );
    assert!(tags.contains("-f"), "iwpmd.8 must explain the ignored -f");
    // Every long option also appears in the synopsis.
    let synopsis: String = page
        .lines()
        .skip_while(|l| *l != ".SH SYNOPSIS")
        .take_while(|l| *l != ".SH DESCRIPTION")
        .map(deroff)
        .collect::<Vec<_>>()
        .join(" ");
    for long in help
        .iter()
        .flat_map(|s| s.split([' ', ',']))
        .filter(|w| w.starts_with("--"))
    {
        assert!(synopsis.contains(long), "synopsis lacks {long}");
    }
}

#[test]
fn man_pages_cover_signals_exit_statuses_files_and_config_keys() {
    let page = read_packaging("iwpmd.8");
    let signals: Vec<String> = section_tags(&page, "SIGNALS");
    for s in ["SIGUSR1", "SIGTERM", "SIGHUP"] {
        assert!(signals.iter().any(|t| t.contains(s)), "SIGNALS lacks {s}");
    }
    let statuses = section_tags(&page, "EXIT STATUS");
    for s in ["0", "1", "2"] {
        assert!(
            statuses.iter().any(|t| t.trim() == format!(".B {s}")),
            "EXIT STATUS lacks {s}: {statuses:?}"
        );
    }
    let files = section_tags(&page, "FILES");
    for f in [
        "/etc/iwpmd.conf",
        "/lib/systemd/system/iwpmd.service",
        "/etc/init.d/iwpmd",
    ] {
        assert!(
            files.iter().any(|t| t.contains(f)),
            "FILES lacks {f}: {files:?}"
        );
    }

    let conf = read_packaging("iwpmd.conf.5");
    let keys = section_tags(&conf, "KEYS");
    for key in ConfigKey::ALL {
        assert!(
            keys.iter()
                .any(|t| t.starts_with(&format!(".BI {}= ", key.name()))),
            "iwpmd.conf.5 KEYS lacks {key}: {keys:?}"
        );
    }
    assert_eq!(keys.len(), ConfigKey::ALL.len(), "{keys:?}");

    // Both pages name the version they describe.
    let th = format!("\"iwpmd {}\"", env!("CARGO_PKG_VERSION"));
    for (name, text) in [("iwpmd.8", &page), ("iwpmd.conf.5", &conf)] {
        let header = text.lines().find(|l| l.starts_with(".TH ")).unwrap();
        assert!(header.contains(&th), "{name}: {header} should carry {th}");
    }
    // The unit points at both pages.
    let unit = read_packaging("iwpmd.service");
    assert!(unit.contains("Documentation=man:iwpmd(8) man:iwpmd.conf(5)"));
}

/// groff renders every manual page we ship (iwpmctl's too) without a single warning
/// (skipped where groff is absent, never in CI).
#[test]
fn man_pages_render_cleanly() {
    if Command::new("groff").arg("--version").output().is_err() {
        say_skipped("man_pages_render_cleanly", "groff is not installed");
        assert!(
            std::env::var_os("CI").is_none(),
            "groff must be installed in CI (.ci/run installs it)"
        );
        return;
    }
    for page in ["iwpmd.8", "iwpmd.conf.5", "iwpmctl.8"] {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(packaging(page))
            .output()
            .unwrap();
        assert!(out.status.success(), "{page}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr), "", "{page}: groff warnings");
    }
}

// ---- SysV init script -------------------------------------------------------------------

#[test]
fn init_script_is_valid_shell_with_an_lsb_header() {
    let script = packaging("iwpmd.init");
    for shell in ["sh", "bash"] {
        let out = Command::new(shell).arg("-n").arg(&script).output().unwrap();
        assert!(out.status.success(), "{shell} -n: {}", text(&out.stderr));
    }
    let body = read_packaging("iwpmd.init");
    assert!(body.starts_with("#!/bin/sh\n"));
    let header: Vec<&str> = body
        .lines()
        .skip_while(|l| *l != "### BEGIN INIT INFO")
        .take_while(|l| *l != "### END INIT INFO")
        .collect();
    for field in [
        "# Provides:",
        "# Required-Start:",
        "# Required-Stop:",
        "# Default-Start:",
        "# Default-Stop:",
        "# Short-Description:",
    ] {
        assert!(
            header.iter().any(|l| l.starts_with(field)),
            "LSB header lacks {field}"
        );
    }
    assert!(body.contains("NOFILE=102400") && body.contains("ulimit -n \"$NOFILE\""));
    let mode = std::fs::metadata(&script).unwrap();
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o111 != 0,
        "iwpmd.init should be executable"
    );
}

/// Processes whose executable is `exe`.
fn pids_of(exe: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
        .collect()
}

/// Kills whatever still runs from the test's private copy of the binary.
struct KillCopies(PathBuf);

impl Drop for KillCopies {
    fn drop(&mut self) {
        for pid in pids_of(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The init script in a scratch setting: a private copy of the binary (so that the
/// script, which finds the daemon by its executable, never touches other tests'
/// daemons), a defaults file pointing it at a test kernel socket and loopback peers.
struct InitRig {
    exe: PathBuf,
    defaults: PathBuf,
    kernel: FakeKernel,
    _guard: KillCopies,
    /// Last: fields drop in order, and the copies are killed before their directory goes.
    dir: ScratchDir,
}

impl InitRig {
    fn new(tag: &str, use_ssd: bool) -> InitRig {
        let dir = scratch_dir(tag);
        let exe = dir.join("iwpmd");
        std::fs::copy(BIN, &exe).unwrap();
        let exe = exe.canonicalize().unwrap();
        let kernel = FakeKernel::bind(&dir);
        let defaults = dir.join("default-iwpmd");
        let mut text = format!(
            "DAEMON={}\nDAEMON_ARGS=\"--kernel unix:{} --config none \
             --peer-bind-v4 127.0.0.1 --peer-port {} --no-ipv6 --log-stderr\"\n",
            exe.display(),
            kernel.path.display(),
            free_udp_port()
        );
        if !use_ssd {
            text.push_str("SSD=\n");
        }
        std::fs::write(&defaults, text).unwrap();
        InitRig {
            dir,
            _guard: KillCopies(exe.clone()),
            exe,
            defaults,
            kernel,
        }
    }

    /// `iwpmd.init ACTION`: exit status and stdout + stderr.
    fn action(&self, action: &str) -> (Option<i32>, String) {
        let mut child = Command::new("sh")
            .arg(packaging("iwpmd.init"))
            .arg(action)
            .env("IWPMD_DEFAULTS", &self.defaults)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // stop may wait 15 s for a stubborn daemon; ours leaves on SIGTERM at once.
        let status = wait_child(&mut child, Duration::from_secs(30));
        if status.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        (
            status.and_then(|s| s.code()),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    }

    /// start → HELLO on the kernel socket, status 0, start again is a no-op,
    /// restart → a new process, stop → gone, status 3, stop again is fine.
    fn full_cycle(mut self) {
        let (rc, out) = self.action("status");
        assert_eq!(rc, Some(3), "status before start: {out}");
        assert!(out.contains("iwpmd is not running"), "{out}");

        let (rc, out) = self.action("start");
        assert_eq!(rc, Some(0), "start: {out}");
        let first = pids_of(&self.exe);
        assert_eq!(
            first.len(),
            1,
            "one detached daemon after start: {first:?}: {out}"
        );
        self.kernel.handshake();

        let (rc, out) = self.action("status");
        assert_eq!(rc, Some(0), "status: {out}");
        assert!(
            out.contains(&format!("iwpmd is running (pid {})", first[0])),
            "{out}"
        );

        let (rc, out) = self.action("start");
        assert_eq!(rc, Some(0), "second start: {out}");
        assert!(out.contains("already running"), "{out}");
        assert_eq!(
            pids_of(&self.exe),
            first,
            "a second start must not spawn another"
        );

        let (rc, out) = self.action("restart");
        assert_eq!(rc, Some(0), "restart: {out}");
        let second = pids_of(&self.exe);
        assert_eq!(second.len(), 1, "{second:?}: {out}");
        assert_ne!(second, first, "restart must replace the process");
        self.kernel.handshake();

        let (rc, out) = self.action("force-reload");
        assert_eq!(rc, Some(0), "force-reload: {out}");
        let third = pids_of(&self.exe);
        assert_eq!(third.len(), 1, "{third:?}: {out}");
        assert_ne!(third, second, "force-reload restarts (nothing to reload)");
        self.kernel.handshake();

        let (rc, out) = self.action("stop");
        assert_eq!(rc, Some(0), "stop: {out}");
        assert!(
            eventually(WAIT, || pids_of(&self.exe).is_empty()),
            "daemon still running after stop"
        );
        let (rc, out) = self.action("status");
        assert_eq!(rc, Some(3), "status after stop: {out}");
        let (rc, out) = self.action("stop");
        assert_eq!(rc, Some(0), "stop when stopped: {out}");

        let (rc, out) = self.action("reload");
        assert_eq!(rc, Some(3), "reload is unimplemented: {out}");
        let (rc, out) = self.action("bogus");
        assert_eq!(rc, Some(2), "unknown action: {out}");
        assert!(out.contains("Usage:"), "{out}");
    }
}

#[test]
fn init_script_drives_the_daemon_with_start_stop_daemon() {
    let found = Command::new("sh")
        .args([
            "-c",
            "PATH=/sbin:/usr/sbin:/bin:/usr/bin command -v start-stop-daemon",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("start-stop-daemon is not installed; only the fallback path is tested");
        assert!(
            std::env::var_os("CI").is_none(),
            "start-stop-daemon (dpkg) must be installed in CI (.ci/run installs it)"
        );
        return;
    }
    InitRig::new("init-ssd", true).full_cycle();
}

#[test]
fn init_script_drives_the_daemon_without_start_stop_daemon() {
    InitRig::new("init-plain", false).full_cycle();
}

/// A daemon that cannot start (its peer port is taken) makes `start` fail with status 1
/// and the daemon's own reason.
#[test]
fn init_script_start_reports_a_failed_start() {
    let rig = InitRig::new("init-fail", false);
    let port = std::fs::read_to_string(&rig.defaults)
        .unwrap()
        .split("--peer-port ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap();
    let _taken = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let (rc, out) = rig.action("start");
    assert_eq!(rc, Some(1), "start: {out}");
    assert!(out.contains("by another port mapper"), "{out}");
    assert!(out.contains("failed to start"), "{out}");
    assert!(pids_of(&rig.exe).is_empty());
}
