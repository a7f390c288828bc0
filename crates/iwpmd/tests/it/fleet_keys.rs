//! Fleet keys as operators meet them on the real daemon: a key file that is not protected,
//! missing, empty or malformed stops the start with a message naming the file, the line and
//! the fix (before the kernel link is even tried); SIGHUP reads the file again and
//! `iwpmctl keys` shows the new set; a file refused on SIGHUP leaves the keys in use and
//! says why; the systemd credential is read instead of the file; and without a key file
//! SIGHUP still ends the daemon with status 1, as rdma-core's does. No message or log line
//! shows a key.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use iwpm_control::client::Client;
use iwpm_control::{render, KeysReport, Reply};
use iwpm_testkit::prelude::*;
use rustix::process::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_iwpmd");

/// Recognisable key material: no message may show any of it.
const KEY_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const KEY_B: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `iwpmd.conf` naming `keys` as `peer_key_file`.
fn config_for(dir: &Path, keys: &Path) -> PathBuf {
    let conf = dir.join("iwpmd.conf");
    std::fs::write(&conf, format!("peer_key_file={}\n", keys.display())).unwrap();
    conf
}

/// The test daemon's command line ([`iwpmd_args`]) with `config` instead of `none`, in the
/// foreground, its control socket at `control`.
fn command(kernel: &Path, port: u16, config: &Path, control: &Path) -> Command {
    let mut args: Vec<OsString> = iwpmd_args(kernel, Ipv4Addr::LOCALHOST, port);
    let at = args.iter().position(|a| a == "--config").unwrap();
    args[at + 1] = config.as_os_str().to_owned();
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("--foreground")
        .arg("--control-socket")
        .arg(control)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .env_remove("CREDENTIALS_DIRECTORY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs a daemon that must fail at start-up; its exit status and stderr. The kernel link
/// does not exist, so a daemon that got past the key file would fail there instead.
fn refused(dir: &Path, config: &Path) -> (Option<i32>, String) {
    refused_with(dir, config, None)
}

/// [`refused`], with `$CREDENTIALS_DIRECTORY` set to `credentials`.
fn refused_with(dir: &Path, config: &Path, credentials: Option<&Path>) -> (Option<i32>, String) {
    let mut cmd = command(
        &dir.join("no-kernel"),
        free_udp_port(),
        config,
        &dir.join("control.sock"),
    );
    if let Some(c) = credentials {
        cmd.env("CREDENTIALS_DIRECTORY", c);
    }
    let mut child = cmd.spawn().unwrap();
    let status = wait_child(&mut child, WAIT);
    if status.is_none() {
        let _ = child.kill();
        panic!("iwpmd did not exit");
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains("cannot connect to the kernel emulator"),
        "the key file must be refused before the kernel link: {err}"
    );
    assert!(!err.contains("a1a1a1") && !err.contains("b2b2b2"), "{err}");
    (out.status.code(), err)
}

/// A running daemon over a fake kernel with the key file `keys`.
struct Keyed {
    daemon: Daemon,
    control: PathBuf,
    _kernel: FakeKernel,
}

impl Keyed {
    fn start(dir: &Path, keys: &Path, credentials: Option<&Path>) -> Keyed {
        Keyed::start_as(dir, keys, credentials, None)
    }

    /// [`Keyed::start`], switching to `user` after start-up (`--user`); the control socket
    /// then goes into a directory made for that user.
    fn start_as(dir: &Path, keys: &Path, credentials: Option<&Path>, user: Option<&str>) -> Keyed {
        let kernel = FakeKernel::bind(dir);
        let control = match user {
            Some(_) => dir.join("run").join("control.sock"),
            None => dir.join("control.sock"),
        };
        let port = free_udp_port();
        let mut cmd = command(&kernel.path, port, &config_for(dir, keys), &control);
        if let Some(c) = credentials {
            cmd.env("CREDENTIALS_DIRECTORY", c);
        }
        if let Some(u) = user {
            cmd.args(["--user", u]);
        }
        let daemon = Daemon::spawn(cmd, port);
        daemon.wait_loop();
        Keyed {
            daemon,
            control,
            _kernel: kernel,
        }
    }

    fn keys(&self) -> KeysReport {
        match Client::connect(&self.control)
            .unwrap()
            .call(iwpm_control::Command::Keys, WAIT)
            .unwrap()
        {
            Reply::Keys(k) => k,
            other => panic!("{other:?}"),
        }
    }

    /// `iwpmctl keys` as printed.
    fn keys_text(&self) -> String {
        render::render(&Reply::Keys(self.keys()))
    }

    /// Sends SIGHUP and waits for the log line that says how the reload went.
    fn hang_up(&mut self, expect: &str) {
        let from = self.daemon.stderr.len();
        self.daemon.signal(Signal::HUP);
        assert!(
            self.daemon.stderr.find_from(from, expect, WAIT).is_some(),
            "no {expect:?} after SIGHUP:\n{}",
            self.daemon.stderr.text()
        );
        assert!(self.daemon.is_running(), "SIGHUP ended a keyed daemon");
    }

    fn stop(mut self) -> String {
        self.daemon.signal(Signal::TERM);
        assert_eq!(self.daemon.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
        let log = self.daemon.stderr.text();
        assert!(
            !log.contains("a1a1a1") && !log.contains("b2b2b2"),
            "key material in the log:\n{log}"
        );
        log
    }
}

/// `(id, signing, accept_only)` of each key of a report.
fn roles(k: &KeysReport) -> Vec<(u32, bool, bool)> {
    k.keys
        .iter()
        .map(|u| (u.id, u.signing, u.accept_only))
        .collect()
}

#[test]
fn a_key_file_open_to_others_is_refused_naming_the_fix() {
    let dir = scratch_dir("keys-mode");
    let keys = dir.join("peer-keys");
    write_mode(&keys, &format!("1 {KEY_A}\n"), 0o644);
    let (code, err) = refused(&dir, &config_for(&dir, &keys));
    assert_eq!(code, Some(1), "{err}");
    let path = keys.display();
    assert!(
        err.contains(&format!(
            "the fleet key file {path} (peer_key_file) must be owned by"
        )),
        "{err}"
    );
    assert!(
        err.contains("mode 0644 lets group or others read it"),
        "{err}"
    );
    assert!(err.contains(&format!("chmod 600 {path}")), "{err}");

    // Owned by another user: refused too (root only: chown).
    if is_root() {
        write_mode(&keys, &format!("1 {KEY_A}\n"), 0o600);
        std::os::unix::fs::chown(&keys, Some(65534), Some(65534)).unwrap();
        let (code, err) = refused(&dir, &config_for(&dir, &keys));
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
        assert!(
            err.contains(&format!("chown root:root {path} && chmod 600 {path}")),
            "{err}"
        );
    } else {
        skip(
            "a_key_file_open_to_others_is_refused_naming_the_fix (owner)",
            "chown needs root",
        );
    }
}

#[test]
fn missing_empty_malformed_and_short_key_files_stop_the_start() {
    let dir = scratch_dir("keys-bad");
    let keys = dir.join("peer-keys");
    let conf = config_for(&dir, &keys);
    let path = keys.display().to_string();
    let (code, err) = refused(&dir, &conf);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cannot read the fleet key file {path} (peer_key_file): there is no such file"
        )),
        "{err}"
    );
    for (text, expect) in [
        (
            "# no keys yet\n\n".to_owned(),
            format!("{path}: no key in the file"),
        ),
        (
            format!("# fleet\n1 {}zz\n", &KEY_A[..62]),
            format!("{path}: line 2: key 1: character 63 of the key is not a hex digit"),
        ),
        (
            "3 a1a1a1a1a1a1a1a1\n".to_owned(),
            format!("{path}: line 1: key 3 is 8 bytes (16 hex digits); a key has 16 to 64 bytes"),
        ),
        (
            format!("1 {KEY_A} accept-only\n"),
            format!("{path}: every key is marked `accept-only`"),
        ),
        (
            format!("1 {KEY_A}\n1 {KEY_B}\n"),
            format!("{path}: line 2: key id 1 is already given on line 1"),
        ),
    ] {
        write_mode(&keys, &text, 0o600);
        let (code, err) = refused(&dir, &conf);
        assert_eq!(code, Some(1), "{text:?}: {err}");
        assert!(err.contains(&expect), "{text:?}: {err}");
    }
    // Signed datagrams required and no key file: refused, naming both keys.
    let conf = dir.join("auth-only.conf");
    std::fs::write(&conf, "peer_auth_required=10.0.0.0/8\n").unwrap();
    let (code, err) = refused(&dir, &conf);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("peer_auth_required is set but peer_key_file is not"),
        "{err}"
    );
}

#[test]
fn sighup_reloads_the_key_file_and_iwpmctl_keys_shows_it() {
    let dir = scratch_dir("keys-reload");
    let keys = dir.join("peer-keys");
    write_mode(&keys, &format!("# fleet\n1 {KEY_A}\n"), 0o600);
    let mut d = Keyed::start(&dir, &keys, None);
    assert!(
        d.daemon
            .stderr
            .wait_for("fleet keys: 1 key (1), signing with key 1, from", WAIT),
        "{}",
        d.daemon.stderr.text()
    );
    let before = d.keys();
    assert_eq!(before.source.as_deref(), Some(keys.to_str().unwrap()));
    assert_eq!(roles(&before), [(1, true, false)]);

    // Rotation, step 1: key 2 accepted, key 1 still signs.
    write_mode(&keys, &format!("1 {KEY_A}\n2 {KEY_B} accept-only\n"), 0o600);
    d.hang_up("fleet keys reloaded: 2 keys (1, 2 accept-only), signing with key 1");
    assert_eq!(roles(&d.keys()), [(1, true, false), (2, false, true)]);

    // Step 2: key 2 signs, key 1 still accepted.
    write_mode(&keys, &format!("1 {KEY_A}\n2 {KEY_B}\n"), 0o600);
    d.hang_up("fleet keys reloaded: 2 keys (1, 2), signing with key 2");
    let text = d.keys_text();
    assert!(
        text.starts_with(&format!("Fleet keys from {}, loaded ", keys.display())),
        "{text}"
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["ID", "USE", "SIGNED", "VERIFIED"],
            vec!["1", "accepted", "0", "0"],
            vec!["2", "signing", "0", "0"],
        ],
        "{text}"
    );
    assert!(!text.contains("a1a1") && !text.contains("b2b2"), "{text}");
    d.stop();
}

#[test]
fn a_key_file_refused_on_sighup_keeps_the_keys_in_use() {
    let dir = scratch_dir("keys-keep");
    let keys = dir.join("peer-keys");
    write_mode(&keys, &format!("1 {KEY_A}\n"), 0o600);
    let mut d = Keyed::start(&dir, &keys, None);

    // Malformed: logged with the line, the keys stay, `iwpmctl keys` says why.
    write_mode(&keys, &format!("1 {KEY_A}\n2 {}\n", &KEY_B[..20]), 0o600);
    d.hang_up("fleet keys not reloaded, the keys in use stay");
    let log = d.daemon.stderr.text();
    assert!(
        log.contains(&format!("{}: line 2: key 2 is 10 bytes", keys.display())),
        "{log}"
    );
    let k = d.keys();
    assert_eq!(roles(&k), [(1, true, false)]);
    let error = k.reload_error.clone().expect("the refusal is reported");
    assert!(error.contains("line 2"), "{error}");
    let text = d.keys_text();
    assert!(
        text.contains("The last reload (SIGHUP) was refused; the keys above stay in use:"),
        "{text}"
    );

    // Open to others: refused the same way, with the fix.
    write_mode(&keys, &format!("1 {KEY_A}\n2 {KEY_B}\n"), 0o640);
    d.hang_up("fleet keys not reloaded, the keys in use stay");
    let k = d.keys();
    assert_eq!(roles(&k), [(1, true, false)]);
    assert!(
        k.reload_error.unwrap().contains("chmod 600"),
        "the refusal names the fix"
    );

    // Fixed: the next SIGHUP takes it and clears the refusal.
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    d.hang_up("fleet keys reloaded: 2 keys (1, 2), signing with key 2");
    let k = d.keys();
    assert_eq!(roles(&k), [(1, false, false), (2, true, false)]);
    assert_eq!(k.reload_error, None);
    d.stop();
}

/// A daemon that switched to another user (`--user`) cannot read its root-only key file
/// again: SIGHUP is refused with a message to restart, the keys stay, the daemon runs on.
/// (The packaged unit runs the daemon as root, where the reload works.)
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn after_a_switch_to_another_user_sighup_says_to_restart() {
    if skip_unless_root(
        "after_a_switch_to_another_user_sighup_says_to_restart",
        "--user needs root",
    ) {
        return;
    }
    let dir = scratch_dir("keys-user");
    let keys = dir.join("peer-keys");
    write_mode(&keys, &format!("1 {KEY_A}\n"), 0o600);
    let mut d = Keyed::start_as(&dir, &keys, None, Some("nobody"));
    assert_eq!(roles(&d.keys()), [(1, true, false)]);
    write_mode(&keys, &format!("1 {KEY_A}\n2 {KEY_B}\n"), 0o600);
    d.hang_up("fleet keys not reloaded, the keys in use stay");
    let k = d.keys();
    assert_eq!(roles(&k), [(1, true, false)]);
    let error = k.reload_error.unwrap();
    assert!(error.contains("permission denied"), "{error}");
    assert!(
        error.contains(
            "cannot read it any more: restart the daemon to load new keys \
             (`systemctl restart iwpmd` keeps every mapping)"
        ),
        "{error}"
    );
    d.stop();
}

/// The systemd credential is read at start-up instead of the file (which would be refused
/// here), and the unit's placeholder for a missing file counts as no credential.
#[test]
fn the_systemd_credential_is_read_instead_of_the_file() {
    let dir = scratch_dir("keys-cred");
    let creds = dir.join("credentials");
    std::fs::create_dir(&creds).unwrap();
    let keys = dir.join("peer-keys");
    write_mode(&keys, &format!("1 {KEY_A}\n"), 0o644);
    let credential = creds.join("iwpmd-peer-keys");
    write_mode(&credential, &format!("5 {KEY_B}\n"), 0o400);
    let d = Keyed::start(&dir, &keys, Some(&creds));
    let k = d.keys();
    assert_eq!(roles(&k), [(5, true, false)]);
    assert_eq!(
        k.source,
        Some(format!(
            "systemd credential iwpmd-peer-keys ({})",
            credential.display()
        ))
    );
    d.stop();

    // The packaged unit's SetCredential= placeholder: the file is read (and checked).
    let unit = std::fs::read_to_string(
        iwpm_testkit::workspace::workspace_root().join("packaging/iwpmd.service"),
    )
    .unwrap();
    let placeholder = unit
        .lines()
        .find_map(|l| l.strip_prefix("SetCredential=iwpmd-peer-keys:"))
        .expect("the unit's fallback credential");
    write_mode(&credential, placeholder, 0o400);
    let (code, err) = refused_with(&dir, &config_for(&dir, &keys), Some(&creds));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("mode 0644 lets group or others read it"),
        "{err}"
    );
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = Keyed::start(&dir, &keys, Some(&creds));
    assert_eq!(roles(&d.keys()), [(1, true, false)]);
    d.stop();
}

/// Without `peer_key_file`, `iwpmctl keys` says there are none and SIGHUP still ends the
/// daemon with status 1 (rdma-core's behaviour, which scripts rely on), even with a
/// configuration file.
#[test]
fn without_a_key_file_there_are_no_keys_and_sighup_exits_1() {
    let dir = scratch_dir("keys-none");
    let kernel = FakeKernel::bind(&dir);
    let control = dir.join("control.sock");
    let conf = dir.join("iwpmd.conf");
    std::fs::write(&conf, "nl_sock_rbuf_size=4096\n").unwrap();
    let port = free_udp_port();
    let mut d = Daemon::spawn(command(&kernel.path, port, &conf, &control), port);
    d.wait_loop();
    let reply = Client::connect(&control)
        .unwrap()
        .call(iwpm_control::Command::Keys, WAIT)
        .unwrap();
    let Reply::Keys(k) = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(k.source, None);
    assert!(k.keys.is_empty());
    assert!(
        render::render(&reply).starts_with("No fleet keys: iwpmd.conf sets no peer_key_file"),
        "{}",
        render::render(&reply)
    );
    d.signal(Signal::HUP);
    let status = d
        .wait_exit(WAIT)
        .expect("SIGHUP must end a daemon without keys");
    assert_eq!(status.code(), Some(1));
    assert!(d
        .stderr
        .wait_for("Received SIGHUP signal", Duration::from_secs(1)));
}
