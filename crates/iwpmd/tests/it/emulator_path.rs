//! `--kernel unix:PATH` as root: whoever controls PATH plays the kernel for a root
//! process, so the daemon refuses a socket, or a directory above it, that belongs to
//! another user or that group or others may write (sticky directories such as /tmp
//! excepted), and names the path in its error.

use std::fs::Permissions;
use std::net::Ipv4Addr;
use std::os::unix::fs::{chown, symlink, PermissionsExt};
use std::path::Path;

use iwpm_testkit::prelude::*;

const NOBODY: u32 = 65534;

/// Runs the daemon against `path`: `Ok(())` if it reached its event loop, else its
/// exit status and stderr.
fn start(path: &Path) -> Result<(), (Option<i32>, String)> {
    let cmd = daemon_command!(path, Ipv4Addr::LOCALHOST, free_udp_port());
    let mut d = Daemon::spawn(cmd, 0);
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        if d.stderr.text().contains("entering the event loop") {
            return Ok(());
        }
        if let Ok(Some(status)) = d.child.try_wait() {
            // Let the reader catch the last lines.
            std::thread::sleep(std::time::Duration::from_millis(100));
            return Err((status.code(), d.stderr.text()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("daemon neither started nor exited:\n{}", d.stderr.text());
}

fn refused(path: &Path, reason: &str) {
    match start(path) {
        Ok(()) => panic!("the daemon accepted {} ({reason})", path.display()),
        Err((code, err)) => {
            assert_eq!(code, Some(1), "{err}");
            assert!(
                err.contains("refusing the kernel emulator socket"),
                "no clear error:\n{err}"
            );
            assert!(
                err.contains(&path.display().to_string()),
                "error does not name {}:\n{err}",
                path.display()
            );
            assert!(err.contains(reason), "error lacks {reason:?}:\n{err}");
            let line = err
                .lines()
                .find(|l| l.contains("refusing"))
                .unwrap_or_default();
            println!("refused as expected: {line}");
        }
    }
}

fn accepted(path: &Path) {
    if let Err((code, err)) = start(path) {
        panic!(
            "the daemon refused {} (exit {code:?}):\n{err}",
            path.display()
        );
    }
}

#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn root_refuses_emulator_sockets_others_control() {
    if skip_unless_root(
        "root_refuses_emulator_sockets_others_control",
        "the check applies to root only and needs chown",
    ) {
        return;
    }
    let base = scratch_dir("emupath");
    let make = |name: &str| {
        let dir = base.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let kernel = FakeKernel::bind(&dir);
        std::fs::set_permissions(&kernel.path, Permissions::from_mode(0o755)).unwrap();
        kernel
    };

    // Root-owned, 0755 all the way down from a sticky /tmp: accepted.
    let ok = make("ok");
    accepted(&ok.path);

    // A world-writable directory without the sticky bit: anyone could swap the socket.
    let k = make("world-dir");
    std::fs::set_permissions(k.path.parent().unwrap(), Permissions::from_mode(0o777)).unwrap();
    refused(&k.path, "without the sticky bit");

    // The same directory with the sticky bit (like /tmp): accepted.
    std::fs::set_permissions(k.path.parent().unwrap(), Permissions::from_mode(0o1777)).unwrap();
    accepted(&k.path);

    // A group-writable directory.
    let k = make("group-dir");
    std::fs::set_permissions(k.path.parent().unwrap(), Permissions::from_mode(0o775)).unwrap();
    refused(&k.path, "writable by its group");

    // A directory owned by another user.
    let k = make("nobody-dir");
    chown(k.path.parent().unwrap(), Some(NOBODY), None).unwrap();
    refused(&k.path, "owned by uid 65534");

    // The socket owned by another user.
    let k = make("nobody-sock");
    chown(&k.path, Some(NOBODY), None).unwrap();
    refused(&k.path, "socket");

    // A world-writable socket.
    let k = make("world-sock");
    std::fs::set_permissions(&k.path, Permissions::from_mode(0o777)).unwrap();
    refused(&k.path, "writable by everyone");

    // A safe-looking symbolic link to a socket in an unsafe directory: the target counts.
    let k = make("link-target");
    std::fs::set_permissions(k.path.parent().unwrap(), Permissions::from_mode(0o777)).unwrap();
    let link = ok.path.parent().unwrap().join("link.sock");
    symlink(&k.path, &link).unwrap();
    refused(&link, "resolved from");
}

/// Step 9 item 6 (`--kernel unix:PATH` not there yet): the daemon judges a missing socket
/// by the directory it would appear in. In a world-writable directory (sticky or not)
/// anyone could create it first: refused before any connect. In a root-owned 0755 one it
/// passes the check and fails to connect, as before. The old code skipped every check
/// for a missing path.
#[test]
#[cfg_attr(not_root, ignore = "needs root")]
fn root_says_a_missing_emulator_socket_is_not_there() {
    if skip_unless_root(
        "root_says_a_missing_emulator_socket_is_not_there",
        "the check applies to root only",
    ) {
        return;
    }
    // Whatever the directory: a mistyped path is said to be missing, not lectured about
    // who could create it (nothing is connected, so nobody who creates it later plays the
    // kernel).
    let base = scratch_dir("emupath-missing");
    for (name, mode) in [("world", 0o777), ("sticky", 0o1777), ("safe", 0o755)] {
        let dir = base.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(mode)).unwrap();
        match start(&dir.join("kernel.sock")) {
            Ok(()) => panic!("started without an emulator"),
            Err((code, err)) => {
                assert_eq!(code, Some(1), "{err}");
                assert!(!err.contains("refusing"), "{name}: {err}");
                assert!(
                    err.contains("cannot connect to the kernel emulator")
                        && err.contains("No such file or directory")
                        && err.contains("Is the kernel emulator running"),
                    "{name}: {err}"
                );
            }
        }
    }
}
