//! Process-level chores: detaching from the terminal and the descriptor limit (systemd
//! notifications are in `systemd.rs`).

use std::fmt;
use std::io;

use rustix::io::Errno;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors needed besides one per mapping: stdio, the kernel link, four UDP sockets,
/// the poller, the signal pipe, the instance lock and the log socket are about a dozen;
/// the rest is headroom for sockets that live briefly (a reservation being bound) and for
/// whatever a library opens.
pub const FD_MARGIN: u64 = 1024;

/// Where the kernel caps any `RLIMIT_NOFILE` (`fs.nr_open`).
const NR_OPEN: &str = "/proc/sys/fs/nr_open";
/// The kernel's default `fs.nr_open` when the file cannot be read.
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// Detaches like rdma-core's `daemon(0, 0)`: fork (the parent exits 0), `setsid`,
/// `chdir("/")`, stdin/stdout/stderr to `/dev/null`. Must run while the process has a
/// single thread.
pub fn daemonize() -> io::Result<()> {
    nix::unistd::daemon(false, false).map_err(io::Error::from)
}

/// What [`raise_fd_limit`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// Soft limit before (`None` = unlimited).
    pub soft_before: Option<u64>,
    /// Hard limit before.
    pub hard_before: Option<u64>,
    /// Soft limit now.
    pub soft: Option<u64>,
    /// Hard limit now.
    pub hard: Option<u64>,
    /// Descriptors `max_mappings` mappings may need (one each plus [`FD_MARGIN`]).
    pub wanted: u64,
    /// Why the hard limit could not be raised to `wanted`, when that was tried and failed.
    pub hard_raise_error: Option<Errno>,
}

impl FdLimit {
    /// True when the soft limit covers `wanted`.
    pub fn sufficient(&self) -> bool {
        self.soft.is_none_or(|s| s >= self.wanted)
    }
}

/// `RLIMIT_NOFILE` value for logs (`unlimited` for `None`).
#[derive(Clone, Copy, Debug)]
pub struct Limit(pub Option<u64>);

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("unlimited"),
        }
    }
}

/// Raises `RLIMIT_NOFILE` for `max_mappings` mappings (every port-mapped mapping holds one
/// TCP socket; rdma-core's unit asks for 102400 descriptors). As root (more precisely,
/// with `CAP_SYS_RESOURCE`) a hard limit below what the mappings need is raised to that,
/// capped by `fs.nr_open`; then the soft limit is raised to the hard one. Failures leave
/// the limits as they are and are reported in the result, never fatal.
pub fn raise_fd_limit(max_mappings: usize) -> FdLimit {
    let before = getrlimit(Resource::Nofile);
    let wanted = u64::try_from(max_mappings)
        .unwrap_or(u64::MAX)
        .saturating_add(FD_MARGIN);
    let mut hard_raise_error = None;
    if before.maximum.is_some_and(|h| h < wanted) && rustix::process::geteuid().is_root() {
        let target = wanted.min(nr_open());
        if before.maximum.is_some_and(|h| h < target) {
            let new = Rlimit {
                current: Some(target),
                maximum: Some(target),
            };
            if let Err(e) = setrlimit(Resource::Nofile, new) {
                hard_raise_error = Some(e);
            }
        }
    }
    let mut now = getrlimit(Resource::Nofile);
    if now.current != now.maximum {
        let new = Rlimit {
            current: now.maximum,
            maximum: now.maximum,
        };
        if setrlimit(Resource::Nofile, new).is_ok() {
            now = getrlimit(Resource::Nofile);
        }
    }
    FdLimit {
        soft_before: before.current,
        hard_before: before.maximum,
        soft: now.current,
        hard: now.maximum,
        wanted,
        hard_raise_error,
    }
}

/// The current `RLIMIT_NOFILE` (soft, hard).
pub fn fd_limit_now() -> (Option<u64>, Option<u64>) {
    let l = getrlimit(Resource::Nofile);
    (l.current, l.maximum)
}

fn nr_open() -> u64 {
    std::fs::read_to_string(NR_OPEN)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(NR_OPEN_DEFAULT)
}

/// Logs the outcome of [`raise_fd_limit`]: one info line, plus a warning when the soft
/// limit cannot cover `max_mappings`.
pub fn log_fd_limit(limit: &FdLimit, max_mappings: usize) {
    tracing::info!(
        "descriptor limit RLIMIT_NOFILE: soft {} hard {} (was soft {} hard {}); \
         max_mappings {max_mappings} needs up to {}",
        Limit(limit.soft),
        Limit(limit.hard),
        Limit(limit.soft_before),
        Limit(limit.hard_before),
        limit.wanted
    );
    if let Some(e) = limit.hard_raise_error {
        tracing::warn!(
            "cannot raise the hard RLIMIT_NOFILE to {} ({e}); running with {}",
            limit.wanted,
            Limit(limit.hard)
        );
    }
    if !limit.sufficient() {
        tracing::warn!(
            "RLIMIT_NOFILE soft limit {} is below the {} descriptors max_mappings \
             {max_mappings} may need: port-mapped mappings beyond it fail with \
             CREATE_MAPPING_ERR (raise LimitNOFILE or `ulimit -n`)",
            Limit(limit.soft),
            limit.wanted
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_limit_reaches_the_hard_limit() {
        // Tests share the process, so only properties that hold whatever ran before.
        let got = raise_fd_limit(10);
        assert_eq!(got.soft, got.hard);
        assert_eq!(got.wanted, 10 + FD_MARGIN);
        assert_eq!(fd_limit_now(), (got.soft, got.hard));
    }

    #[test]
    fn limit_display() {
        assert_eq!(Limit(Some(64)).to_string(), "64");
        assert_eq!(Limit(None).to_string(), "unlimited");
    }
}
