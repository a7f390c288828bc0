//! `--user` without systemd's `User=` (Step 9 item 6): the daemon hands its runtime
//! directory to the user before switching, so the state file and the control socket work
//! afterwards; where they cannot (a directory the user may not write), it says so at
//! start-up, as an error naming the path. Root only (the switch needs it).

use std::net::Ipv4Addr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use iwpm_testkit::prelude::*;

const NOBODY: u32 = 65534;

fn start_as_nobody(kernel: &FakeKernel, state: &Path, control: &Path) -> Daemon {
    let peer_port = free_udp_port();
    let mut cmd = daemon_command!(&kernel.path, Ipv4Addr::LOCALHOST, peer_port);
    cmd.args(["--user", "nobody", "--state-file"])
        .arg(state)
        .arg("--control-socket")
        .arg(control);
    let d = Daemon::spawn(cmd, peer_port);
    d.wait_loop();
    d
}

/// Step 9 item 6 (`--user` runtime directory): a missing runtime directory is created and
/// given to the user: the control socket is there, the user's, and the state file is
/// written at exit. The old code created neither as the user (the directory's parent is
/// root's), logging only a warning for the socket and nothing for the state file.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn a_missing_runtime_directory_is_made_for_the_user() {
    if skip_unless_root(
        "a_missing_runtime_directory_is_made_for_the_user",
        "--user needs root",
    ) {
        return;
    }
    let base = scratch_dir("user-run");
    let kernel = FakeKernel::bind(&base);
    let run = base.join("run");
    let (state, control) = (run.join("state"), run.join("control.sock"));
    let mut d = start_as_nobody(&kernel, &state, &control);
    let log = d.stderr.text();
    assert!(!log.contains("control socket disabled"), "{log}");
    assert!(!log.contains("state file cannot be written"), "{log}");
    let meta = std::fs::symlink_metadata(&control).expect("no control socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.uid(), NOBODY);
    assert_eq!(std::fs::metadata(&run).unwrap().uid(), NOBODY);
    d.signal(rustix::process::Signal::TERM);
    assert!(d.wait_exit(WAIT).is_some_and(|s| s.success()));
    assert!(
        eventually(Duration::from_secs(1), || state.exists()),
        "no state file:\n{}",
        d.stderr.text()
    );
}

/// Step 9 item 6 (`--user`, failures not silent): in an existing directory of root's that
/// the user may not write (an operator's choice, left alone), both the state file and the
/// control socket are reported at start-up as errors naming their paths.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn unwritable_runtime_files_are_reported_as_errors_naming_the_path() {
    if skip_unless_root(
        "unwritable_runtime_files_are_reported_as_errors_naming_the_path",
        "--user needs root",
    ) {
        return;
    }
    let base = scratch_dir("user-ro");
    let kernel = FakeKernel::bind(&base);
    let ro = base.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let (state, control) = (ro.join("state"), ro.join("control.sock"));
    let d = start_as_nobody(&kernel, &state, &control);
    let log = d.stderr.text();
    let error_about = |needle: &str, path: &Path| {
        log.lines().any(|l| {
            l.contains("ERROR") && l.contains(needle) && l.contains(&path.display().to_string())
        })
    };
    assert!(error_about("control socket disabled", &control), "{log}");
    assert!(error_about("state file cannot be written", &state), "{log}");
    assert_eq!(
        std::fs::metadata(&ro).unwrap().uid(),
        0,
        "chowned an operator's dir"
    );
}
