//! Process-level chores: detaching from the terminal (and telling the waiting command
//! whether the daemon started) and the descriptor limit (systemd notifications are in
//! `restart/systemd.rs`).

use std::fmt;
use std::io;

use rustix::io::Errno;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors needed besides one per mapping: stdio, the kernel link, four UDP sockets,
/// the poller, the signal pipe, the instance lock and the log socket are about a dozen;
/// the rest is headroom for sockets that live briefly (a reservation being bound) and for
/// whatever a library opens.
pub(crate) const FD_MARGIN: u64 = 1024;

/// Where the kernel caps any `RLIMIT_NOFILE` (`fs.nr_open`).
const NR_OPEN: &str = "/proc/sys/fs/nr_open";
/// The kernel's default `fs.nr_open` when the file cannot be read.
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// The hidden option that marks the process [`detach`] starts (its stdout is the pipe to
/// the waiting parent).
pub(crate) const DETACHED_CHILD_FLAG: &str = "--detached-child";

/// The first line a detached child writes when it serves.
const READY_LINE: &str = "ready";

/// Detaches like rdma-core's `daemon(0, 0)`, except that the command waits until the
/// daemon is ready: it starts itself again (same executable and arguments, plus
/// [`DETACHED_CHILD_FLAG`]) with stdin and stderr on `/dev/null` and stdout on a pipe,
/// and waits for the child's first line on it: `ready`, or the message that stopped it.
/// So a daemon that cannot start (no `iw_cm`, no emulator at `--kernel unix:PATH`, a
/// broken configuration) fails on the terminal with status 1, where `daemon(3)` let the
/// parent exit 0 and the message went to a syslog that may not exist. The child makes
/// itself a session leader and moves to `/` at the point `daemon(3)` would have (see
/// [`Readiness::detach_here`]). Returns the parent's exit status.
pub(crate) fn detach() -> u8 {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("iwpmd: Failed to daemonize: cannot find our own executable: {e}");
            return 1;
        }
    };
    let spawned = Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .arg(DETACHED_CHILD_FLAG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "iwpmd: Failed to daemonize: cannot start {}: {e}",
                exe.display()
            );
            return 1;
        }
    };
    let mut first = String::new();
    let read = child
        .stdout
        .take()
        .map(|out| std::io::BufReader::new(out).read_line(&mut first));
    let first = first.trim_end();
    if first == READY_LINE {
        // The child runs on; it is no longer ours to wait for.
        return 0;
    }
    if !first.is_empty() {
        eprintln!("iwpmd: {first}");
        // It exits right after saying why; reap it so no zombie outlives us.
        let _ = child.wait();
        return 1;
    }
    let status = child
        .wait()
        .map_or_else(|e| e.to_string(), |s| s.to_string());
    match read {
        Some(Err(e)) => {
            eprintln!("iwpmd: Failed to daemonize: reading the daemon's readiness: {e}")
        }
        _ => eprintln!("iwpmd: the daemon ended ({status}) before it was ready"),
    }
    1
}

/// The detached child's end of [`detach`]: its stdout, which reaches the waiting parent.
#[derive(Debug)]
pub(crate) struct Readiness {
    told: bool,
}

impl Readiness {
    /// For a process started by [`detach`].
    pub(crate) fn new() -> Self {
        Readiness { told: false }
    }

    /// What `daemon(3)` did in the child: a new session (no controlling terminal), `/` as
    /// the working directory. Paths given relative on the command line and used before
    /// this point (the configuration file) resolve as before.
    pub(crate) fn detach_here(&self) -> io::Result<()> {
        rustix::process::setsid()?;
        std::env::set_current_dir("/")
    }

    /// The daemon serves: the parent exits 0. Stdout goes to `/dev/null` from now on.
    pub(crate) fn ready(&mut self) {
        self.tell(READY_LINE);
    }

    /// The daemon cannot start: the parent prints `message` and exits 1.
    pub(crate) fn failed(&mut self, message: &str) {
        // One line: the parent reads only the first.
        self.tell(&message.replace('\n', " "));
    }

    fn tell(&mut self, line: &str) {
        use std::io::Write as _;
        if std::mem::replace(&mut self.told, true) {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        // The parent has what it waited for and may be gone: nothing more goes to it.
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
    }
}

/// What [`raise_fd_limit`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FdLimit {
    /// Soft limit before (`None` = unlimited).
    pub(crate) soft_before: Option<u64>,
    /// Hard limit before.
    pub(crate) hard_before: Option<u64>,
    /// Soft limit now.
    pub(crate) soft: Option<u64>,
    /// Hard limit now.
    pub(crate) hard: Option<u64>,
    /// Descriptors `max_mappings` mappings may need (one each plus [`FD_MARGIN`]).
    pub(crate) wanted: u64,
    /// Why the hard limit could not be raised to `wanted`, when that was tried and failed.
    pub(crate) hard_raise_error: Option<Errno>,
}

impl FdLimit {
    /// True when the soft limit covers `wanted`.
    pub(crate) fn sufficient(&self) -> bool {
        self.soft.is_none_or(|s| s >= self.wanted)
    }
}

/// `RLIMIT_NOFILE` value for logs (`unlimited` for `None`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit(pub Option<u64>);

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
pub(crate) fn raise_fd_limit(max_mappings: usize) -> FdLimit {
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
pub(crate) fn fd_limit_now() -> (Option<u64>, Option<u64>) {
    let l = getrlimit(Resource::Nofile);
    (l.current, l.maximum)
}

fn nr_open() -> u64 {
    std::fs::read_to_string(NR_OPEN)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(NR_OPEN_DEFAULT)
}

/// Logs the outcome of [`raise_fd_limit`] in one line ([`fd_limit_line`]).
pub(crate) fn log_fd_limit(limit: &FdLimit, max_mappings: usize, service: bool) {
    let (warn, line) = fd_limit_line(limit, max_mappings, service);
    if warn {
        tracing::warn!("{line}");
    } else {
        tracing::info!("{line}");
    }
}

/// The line that reports [`raise_fd_limit`], and whether it is a warning. The limits are
/// given once, with what they were only when they changed. A soft limit below what
/// `max_mappings` may need is a warning for a `service` (detached, or under systemd:
/// someone set its limits, `LimitNOFILE=` or the init script's); a daemon started by hand
/// in the foreground gets the same line at info level, which is shown without `-v` too: a
/// daemon started to try something out needs no warning about its 20 000th mapping.
pub(crate) fn fd_limit_line(limit: &FdLimit, max_mappings: usize, service: bool) -> (bool, String) {
    let mut figures = format!(
        "descriptor limit RLIMIT_NOFILE: soft {} hard {}",
        Limit(limit.soft),
        Limit(limit.hard),
    );
    if (limit.soft, limit.hard) == (limit.soft_before, limit.hard_before) {
        figures.push_str(" (as inherited)");
    } else {
        figures.push_str(&format!(
            " (raised from soft {} hard {})",
            Limit(limit.soft_before),
            Limit(limit.hard_before),
        ));
    }
    let wanted = limit.wanted;
    if limit.sufficient() {
        return (
            false,
            format!("{figures}; max_mappings {max_mappings} needs up to {wanted}"),
        );
    }
    let not_raised = limit
        .hard_raise_error
        .map(|e| format!(" (cannot raise the hard RLIMIT_NOFILE to {wanted}: {e})"))
        .unwrap_or_default();
    (
        service,
        format!(
            "{figures} is below the {wanted} descriptors max_mappings {max_mappings} may \
             need{not_raised}: port-mapped mappings beyond it fail with CREATE_MAPPING_ERR; \
             raise LimitNOFILE or `ulimit -n`"
        ),
    )
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

    fn limit(before: (u64, u64), now: (u64, u64), raise_error: Option<Errno>) -> FdLimit {
        FdLimit {
            soft_before: Some(before.0),
            hard_before: Some(before.1),
            soft: Some(now.0),
            hard: Some(now.1),
            wanted: 100_000 + FD_MARGIN,
            hard_raise_error: raise_error,
        }
    }

    /// Issue 43, friction 10: a start by hand with a hard limit of 20 000 warned "soft 20000
    /// hard 20000 (was soft 20000 hard 20000)".
    #[test]
    fn a_start_by_hand_reports_its_limit_once_and_without_a_warning() {
        let by_hand = |l: &FdLimit| fd_limit_line(l, 100_000, false);
        let as_service = |l: &FdLimit| fd_limit_line(l, 100_000, true);
        let inherited = limit((20_000, 20_000), (20_000, 20_000), None);
        let (warn, line) = by_hand(&inherited);
        assert!(!warn, "{line}");
        assert!(
            line.starts_with(
                "descriptor limit RLIMIT_NOFILE: soft 20000 hard 20000 (as inherited) is below \
                 the 101024 descriptors max_mappings 100000 may need:"
            ),
            "{line}"
        );
        assert_eq!(line.matches("20000").count(), 2, "{line}");
        // As root without CAP_SYS_RESOURCE (a container): the same, saying why.
        let not_raised = limit((20_000, 20_000), (20_000, 20_000), Some(Errno::PERM));
        let (warn, line) = by_hand(&not_raised);
        assert!(!warn, "{line}");
        assert!(
            line.contains("cannot raise the hard RLIMIT_NOFILE to 101024"),
            "{line}"
        );
        // A service's limits are someone's setting: a warning.
        assert!(as_service(&inherited).0);
        assert!(as_service(&not_raised).0);
        // The soft limit raised to the hard one: both figures, once each.
        let (_, line) = by_hand(&limit((1024, 20_000), (20_000, 20_000), None));
        assert!(
            line.contains("soft 20000 hard 20000 (raised from soft 1024 hard 20000)"),
            "{line}"
        );
        // Enough: info, with what the mappings need.
        let (warn, line) = as_service(&limit((1024, 200_000), (200_000, 200_000), None));
        assert!(
            !warn && line.ends_with("max_mappings 100000 needs up to 101024"),
            "{line}"
        );
    }

    #[test]
    fn limit_display() {
        assert_eq!(Limit(Some(64)).to_string(), "64");
        assert_eq!(Limit(None).to_string(), "unlimited");
    }
}
