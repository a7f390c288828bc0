//! Process-level chores: detaching from the terminal, the descriptor limit, and systemd
//! readiness.

use std::io;

/// Detaches like rdma-core's `daemon(0, 0)`: fork (the parent exits 0), `setsid`,
/// `chdir("/")`, stdin/stdout/stderr to `/dev/null`. Must run while the process has a
/// single thread.
pub fn daemonize() -> io::Result<()> {
    nix::unistd::daemon(false, false).map_err(io::Error::from)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit: every mapping holds one TCP socket,
/// and rdma-core's unit asks for 102400 descriptors. Returns the new soft limit.
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            return getrlimit(Resource::Nofile).current;
        }
    }
    limit.current
}

/// Tells systemd the service is up (no-op without `NOTIFY_SOCKET`).
pub fn notify_ready() -> io::Result<()> {
    sd_notify::notify(&[sd_notify::NotifyState::Ready])
}
