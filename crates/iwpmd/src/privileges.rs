//! Least privilege. Everything that needs root happens at start-up: joining the RDMA netlink
//! multicast group (CAP_NET_ADMIN on Linux 6.1), forcing the netlink receive buffer
//! (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), raising the descriptor hard limit
//! (CAP_SYS_RESOURCE), checking the emulator socket's owners. Afterwards the daemon sends
//! to the kernel (no capability), binds ephemeral TCP ports (none) and talks UDP on sockets
//! it already holds (none). So once those sockets are open it keeps only
//! [`KEPT`] — in the effective, permitted and bounding sets, with the ambient and
//! inheritable sets empty and `no_new_privs` set — and, with `--user`, switches to that
//! user first (keeping the capability across `setuid` with `PR_SET_KEEPCAPS`). The
//! per-operation table, as measured on the rig, is in `docs/privileges.md`.
//!
//! Capabilities are per thread: the drop must run while the process has one thread, before
//! the dump writer starts. [`drop_privileges`] checks that and refuses otherwise.

use std::io;

use nix::unistd::{setgid, setgroups, setuid, User};
use rustix::thread::{
    capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
    remove_capability_from_bounding_set, set_capabilities, set_keep_capabilities, set_no_new_privs,
    CapabilitySet, CapabilitySets,
};

/// What the running daemon keeps. CAP_NET_ADMIN is what the kernel link was opened with
/// (group join and forced receive buffer on 6.1); it stays so that the netlink socket keeps
/// the standing of the process that opened it, whatever a future kernel checks per message.
pub const KEPT: CapabilitySet = CapabilitySet::NET_ADMIN;

/// Why privileges could not be dropped (start-up fails: running with more privilege than
/// asked for is not a state to continue in).
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// More than one thread: a capability change would miss the others.
    #[error("cannot drop privileges with {0} threads running (capabilities are per thread)")]
    Threads(usize),
    /// `--user` names no user.
    #[error("unknown user {0:?} (--user)")]
    UnknownUser(String),
    /// The user database could not be read.
    #[error("cannot look up user {name:?}: {os}")]
    Lookup {
        /// The name given.
        name: String,
        /// The OS error.
        os: io::Error,
    },
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
pub struct Dropped {
    /// Permitted capabilities before.
    pub before: CapabilitySet,
    /// Capabilities kept (effective = permitted).
    pub kept: CapabilitySet,
    /// The user switched to, if any: (name, uid, gid).
    pub user: Option<(String, u32, u32)>,
}

fn sys(what: &'static str) -> impl Fn(rustix::io::Errno) -> PrivilegeError {
    move |e| PrivilegeError::Sys { what, os: e.into() }
}

fn nix_sys(what: &'static str) -> impl Fn(nix::errno::Errno) -> PrivilegeError {
    move |e| PrivilegeError::Sys {
        what,
        os: io::Error::from_raw_os_error(e as i32),
    }
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
pub fn drop_privileges(user: Option<&str>) -> Result<Option<Dropped>, PrivilegeError> {
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

/// Becomes `name` (its primary group only), keeping the permitted capabilities.
fn switch_user(name: &str) -> Result<(String, u32, u32), PrivilegeError> {
    let user = User::from_name(name)
        .map_err(|e| PrivilegeError::Lookup {
            name: name.to_owned(),
            os: io::Error::from_raw_os_error(e as i32),
        })?
        .ok_or_else(|| PrivilegeError::UnknownUser(name.to_owned()))?;
    set_keep_capabilities(true).map_err(sys("PR_SET_KEEPCAPS"))?;
    setgroups(&[user.gid]).map_err(nix_sys("setgroups"))?;
    setgid(user.gid).map_err(nix_sys("setgid"))?;
    setuid(user.uid).map_err(nix_sys("setuid"))?;
    set_keep_capabilities(false).map_err(sys("PR_SET_KEEPCAPS"))?;
    Ok((user.name, user.uid.as_raw(), user.gid.as_raw()))
}

/// Capability names for the log (`CAP_NET_ADMIN`, …), or `none`.
pub fn describe(set: CapabilitySet) -> String {
    if set.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = set.iter_names().map(|(n, _)| format!("CAP_{n}")).collect();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

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
