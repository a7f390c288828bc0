//! Least privilege. Everything that needs root happens at start-up: joining the RDMA netlink
//! multicast group (CAP_NET_ADMIN on Linux 6.1), forcing the netlink receive buffer
//! (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), raising the descriptor hard limit
//! (CAP_SYS_RESOURCE), checking the emulator socket's owners. Afterwards the daemon sends
//! to the kernel (no capability), binds ephemeral TCP ports (none) and talks UDP on sockets
//! it already holds (none). So once those sockets are open it keeps only
//! [`KEPT`] — in the effective, permitted and bounding sets, with the ambient and
//! inheritable sets empty and `no_new_privs` set — and, with `--user`, switches to that
//! user first (keeping the capability across `setuid` with `PR_SET_KEEPCAPS`). The
//! per-operation table, as measured on the rig, is in `docs/privileges.md`. Before a
//! `--user` switch the runtime directory is handed to that user
//! ([`prepare_runtime_files`]), since the state file and control socket are made after it.
//!
//! Capabilities are per thread: the drop must run while the process has one thread, before
//! the dump writer starts. [`drop_privileges`] checks that and refuses otherwise. The same
//! holds for the user and group IDs: Linux keeps them per thread too (glibc's `setuid`
//! signals every thread to make the change process-wide), so with one thread the direct
//! system calls that rustix makes are the whole switch. The account comes from the C
//! library's user database (`getpwnam_r`, through `uzers`), so NSS sources such as LDAP or
//! systemd's user records count as they would for any other daemon.

use std::io;

use rustix::process::{Gid, Uid};
use rustix::thread::{
    capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
    remove_capability_from_bounding_set, set_capabilities, set_keep_capabilities, set_no_new_privs,
    set_thread_gid, set_thread_groups, set_thread_uid, CapabilitySet, CapabilitySets,
};

/// What the running daemon keeps. CAP_NET_ADMIN is what the kernel link was opened with
/// (group join and forced receive buffer on 6.1); it stays so that the netlink socket keeps
/// the standing of the process that opened it, whatever a future kernel checks per message.
pub(crate) const KEPT: CapabilitySet = CapabilitySet::NET_ADMIN;

/// Why privileges could not be dropped (start-up fails: running with more privilege than
/// asked for is not a state to continue in).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrivilegeError {
    /// More than one thread: a capability change would miss the others.
    #[error("cannot drop privileges with {0} threads running (capabilities are per thread)")]
    Threads(usize),
    /// `--user` names no user the C library's user database knows (or it could not be
    /// read: `getpwnam_r` tells the two apart only by errno, which `uzers` does not keep).
    #[error("unknown user {0:?} (--user): no such account in the user database")]
    UnknownUser(String),
    /// A system call of the drop failed.
    #[error("cannot drop privileges ({what}): {os}")]
    Sys {
        /// Which step.
        what: &'static str,
        /// The OS error.
        os: io::Error,
    },
}

/// What [`drop_privileges`] did, for the start-up log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dropped {
    /// Permitted capabilities before.
    pub(crate) before: CapabilitySet,
    /// Capabilities kept (effective = permitted).
    pub(crate) kept: CapabilitySet,
    /// The user switched to, if any: (name, uid, gid).
    pub(crate) user: Option<(String, u32, u32)>,
}

fn sys(what: &'static str) -> impl Fn(rustix::io::Errno) -> PrivilegeError {
    move |e| PrivilegeError::Sys { what, os: e.into() }
}

/// Threads of this process, from `/proc/self/status` (`None` without /proc).
fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Drops to [`KEPT`] (as `user` when given). Returns `Ok(None)` when there was nothing to
/// drop: no permitted capability and no user asked for (an unprivileged daemon, as in tests
/// with the kernel emulator).
pub(crate) fn drop_privileges(user: Option<&str>) -> Result<Option<Dropped>, PrivilegeError> {
    let before = capabilities(None).map_err(sys("capget"))?;
    if before.permitted.is_empty() && user.is_none() {
        return Ok(None);
    }
    if let Some(n) = thread_count().filter(|n| *n > 1) {
        return Err(PrivilegeError::Threads(n));
    }
    let keep = before.permitted & KEPT;
    if before.effective.contains(CapabilitySet::SETPCAP) {
        for cap in CapabilitySet::all().iter().filter(|c| !keep.contains(*c)) {
            // Capabilities this kernel does not know answer EINVAL: nothing to drop.
            if capability_is_in_bounding_set(cap).unwrap_or(false) {
                remove_capability_from_bounding_set(cap).map_err(sys("PR_CAPBSET_DROP"))?;
            }
        }
    }
    // Kernels before 4.3 have no ambient set (EINVAL): then it is empty anyway.
    match clear_ambient_capability_set() {
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(sys("PR_CAP_AMBIENT_CLEAR_ALL")(e)),
    }
    let switched = match user {
        Some(name) => Some(switch_user(name)?),
        None => None,
    };
    set_capabilities(
        None,
        CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(sys("capset"))?;
    set_no_new_privs(true).map_err(sys("PR_SET_NO_NEW_PRIVS"))?;
    Ok(Some(Dropped {
        before: before.permitted,
        kept: keep,
        user: switched,
    }))
}

/// The `--user` account: its numeric user and primary group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Account {
    uid: u32,
    gid: u32,
}

/// Looks the `--user` account up in the user database.
fn lookup_user(name: &str) -> Result<Account, PrivilegeError> {
    let user = uzers::get_user_by_name(name)
        .ok_or_else(|| PrivilegeError::UnknownUser(name.to_owned()))?;
    Ok(Account {
        uid: user.uid(),
        gid: user.primary_group_id(),
    })
}

/// Hands the daemon's runtime files to `--user` before the switch, so that the state file
/// and the control socket still work afterwards (with systemd's `User=` the manager does
/// this through `RuntimeDirectory=`; without it, `/run/iwpmd` would stay root's and every
/// write there would fail as the user).
///
/// `files` are the state file and the control socket. Their directory is created (0755)
/// when missing, and given to the user when it was missing or is `runtime_dir` (the
/// daemon's own `/run/iwpmd`); what the daemon left there before (a state file, a stale
/// socket, ours as root) is given along. Any other existing directory is an operator's
/// choice and is not touched; a warning says when the user will not be able to write
/// there. Symbolic links are never followed. Nothing here is fatal: the daemon runs
/// without those files rather than not at all, and says so.
pub(crate) fn prepare_runtime_files(
    user: &str,
    files: &[&std::path::Path],
    runtime_dir: &std::path::Path,
) {
    let euid = rustix::process::geteuid();
    let Ok(account) = lookup_user(user) else {
        return; // drop_privileges reports it
    };
    if !euid.is_root() || account.uid == euid.as_raw() {
        return;
    }
    let (uid, gid) = (account.uid, account.gid);
    let mut done: Vec<std::path::PathBuf> = Vec::new();
    for file in files {
        let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) else {
            continue;
        };
        if let Err(e) = give_runtime_file(file, dir, runtime_dir, (uid, gid), &mut done) {
            tracing::error!(
                path = %file.display(),
                user,
                "cannot prepare {} for user {user}: {e}; it may not work after the switch",
                dir.display()
            );
        }
    }
}

/// One file of [`prepare_runtime_files`]; `done` lists the directories already given.
fn give_runtime_file(
    file: &std::path::Path,
    dir: &std::path::Path,
    runtime_dir: &std::path::Path,
    (uid, gid): (u32, u32),
    done: &mut Vec<std::path::PathBuf>,
) -> io::Result<()> {
    use std::os::unix::fs::{lchown, DirBuilderExt, MetadataExt};
    let ours = rustix::process::geteuid().as_raw();
    let give = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)?;
            true
        }
        Err(e) => return Err(e),
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
            return Err(io::Error::other(
                "not a directory (symbolic links are not followed)",
            ))
        }
        Ok(m) => {
            let mine = m.uid() == ours && dir == runtime_dir;
            if !mine && m.uid() != uid && m.mode() & 0o002 == 0 {
                tracing::warn!(
                    path = %file.display(),
                    "{} belongs to uid {}: as uid {uid} the daemon may not be able to create {} there",
                    dir.display(),
                    m.uid(),
                    file.display()
                );
            }
            mine || done.iter().any(|d| d == dir)
        }
    };
    if !give {
        return Ok(());
    }
    if !done.iter().any(|d| d == dir) {
        lchown(dir, Some(uid), Some(gid))?;
        done.push(dir.to_owned());
        tracing::info!(path = %dir.display(), uid, "runtime directory handed to the --user account");
    }
    // Left by an earlier run as root: the state to restore, a stale control socket.
    if let Ok(m) = std::fs::symlink_metadata(file) {
        if m.uid() == ours && !m.file_type().is_symlink() && !m.is_dir() {
            lchown(file, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// Becomes `name` (its primary group only), keeping the permitted capabilities. Only called
/// by [`drop_privileges`] once it has seen a single thread, so the per-thread system calls
/// change the whole process.
fn switch_user(name: &str) -> Result<(String, u32, u32), PrivilegeError> {
    let account = lookup_user(name)?;
    let gid = Gid::from_raw(account.gid);
    set_keep_capabilities(true).map_err(sys("PR_SET_KEEPCAPS"))?;
    set_thread_groups(&[gid]).map_err(sys("setgroups"))?;
    set_thread_gid(gid).map_err(sys("setgid"))?;
    set_thread_uid(Uid::from_raw(account.uid)).map_err(sys("setuid"))?;
    set_keep_capabilities(false).map_err(sys("PR_SET_KEEPCAPS"))?;
    Ok((name.to_owned(), account.uid, account.gid))
}

/// Capability names for the log (`CAP_NET_ADMIN`, …), or `none`.
pub(crate) fn describe(set: CapabilitySet) -> String {
    if set.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = set.iter_names().map(|(n, _)| format!("CAP_{n}")).collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step 9 item 6 (`--user` without `User=`): a missing runtime directory is created
    /// and given to the user, the daemon's own one is given with what an earlier root run
    /// left in it, and an operator's directory (and a link) are left alone. The old code
    /// did none of it, so the state file and the control socket failed as the user.
    #[test]
    #[cfg_attr(not_root, ignore = "needs root (chown)")]
    fn runtime_files_are_handed_to_the_user() {
        use std::os::unix::fs::MetadataExt;
        if !rustix::process::geteuid().is_root() {
            iwpm_testkit::host::say_skipped(
                "runtime_files_are_handed_to_the_user",
                "needs root (chown)",
            );
            return;
        }
        let nobody = lookup_user("nobody").unwrap();
        let (uid, gid) = (nobody.uid, nobody.gid);
        let base = std::env::temp_dir().join(format!("iwpmd-priv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let owner = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().uid();

        // Missing: created, given.
        let fresh = base.join("fresh/run");
        let state = fresh.join("state");
        let control = fresh.join("control.sock");
        prepare_runtime_files("nobody", &[&state, &control], &base.join("elsewhere"));
        assert_eq!(owner(&fresh), uid);
        assert_eq!(std::fs::metadata(&fresh).unwrap().gid(), gid);

        // The daemon's own, existing, with a root-owned state file and stale socket.
        let own = base.join("own");
        std::fs::create_dir(&own).unwrap();
        std::fs::write(own.join("state"), b"x").unwrap();
        drop(std::os::unix::net::UnixListener::bind(own.join("control.sock")).unwrap());
        prepare_runtime_files(
            "nobody",
            &[&own.join("state"), &own.join("control.sock")],
            &own,
        );
        assert_eq!(owner(&own), uid);
        assert_eq!(owner(&own.join("state")), uid);
        assert_eq!(owner(&own.join("control.sock")), uid);

        // An operator's existing directory, and a link where the runtime dir should be.
        let theirs = base.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        prepare_runtime_files("nobody", &[&theirs.join("state")], &own);
        assert_eq!(owner(&theirs), 0);
        let link = base.join("link");
        std::os::unix::fs::symlink(&theirs, &link).unwrap();
        prepare_runtime_files("nobody", &[&link.join("state")], &link);
        assert_eq!(owner(&theirs), 0, "followed the link");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// The account comes from the user database, and a name it lacks is named back.
    #[test]
    fn looks_accounts_up_by_name() {
        assert_eq!(lookup_user("root").unwrap(), Account { uid: 0, gid: 0 });
        let missing = lookup_user("no-such-iwpmd-user").unwrap_err();
        assert!(
            matches!(&missing, PrivilegeError::UnknownUser(n) if n == "no-such-iwpmd-user"),
            "{missing:?}"
        );
        assert!(missing.to_string().contains("\"no-such-iwpmd-user\""));
    }

    #[test]
    fn describes_capability_sets() {
        assert_eq!(describe(CapabilitySet::empty()), "none");
        assert_eq!(describe(KEPT), "CAP_NET_ADMIN");
        assert_eq!(
            describe(CapabilitySet::NET_ADMIN | CapabilitySet::SYS_RESOURCE),
            "CAP_NET_ADMIN,CAP_SYS_RESOURCE"
        );
    }

    #[test]
    fn refuses_while_threads_run() {
        if capabilities(None).unwrap().permitted.is_empty() {
            return; // unprivileged: nothing to drop, nothing to refuse
        }
        // A second thread for certain (libtest may run this on the main thread alone);
        // without it the test process itself would lose its capabilities.
        let (stop, parked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || parked.recv());
        let result = drop_privileges(None);
        drop(stop);
        let _ = other.join();
        assert!(
            matches!(result, Err(PrivilegeError::Threads(n)) if n > 1),
            "{result:?}"
        );
    }
}
