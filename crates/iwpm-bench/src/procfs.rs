//! What `/proc` tells about a process: resident memory and CPU time on the clock of the
//! scheduler (`schedstat`, nanoseconds), which stays meaningful when the machine is shared
//! and wall time is not.

use std::fs;

/// `VmRSS` of `pid`, bytes.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `VmHWM` of this process (its peak resident memory since it started, or since
/// [`reset_own_peak_rss`]), bytes.
pub(crate) fn own_peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// Resets this process's `VmHWM` to its current RSS (`/proc/self/clear_refs`, value 5);
/// false where that is not allowed, and the peak then counts from the process's start.
pub(crate) fn reset_own_peak_rss() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_kib(field: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of every thread of `pid`, ns: the event loop and its helper threads (the
/// state file and dump writers), so work moved off the loop still counts.
pub(crate) fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        let text = fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += parse_schedstat(&text).unwrap_or(0);
    }
    Some(total)
}

/// CPU time of the calling thread, ns (`CLOCK_THREAD_CPUTIME_ID`: exact, where the
/// thread's own `schedstat` lags until its next context switch).
pub(crate) fn own_thread_cpu_ns() -> Option<u64> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(u64::try_from(t.tv_sec).ok()? * 1_000_000_000 + u64::try_from(t.tv_nsec).ok()?)
}

fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The process's hard `RLIMIT_NOFILE` (from `/proc/self/limits`): the daemons the bench
/// starts inherit it and raise their soft limit to it.
pub(crate) fn fd_limit() -> Option<u64> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(4)?.parse().ok()
}

/// Descriptors the full run wants: 50k port-mapped mappings, each holding a socket, and a
/// margin for the daemon's own.
pub(crate) const FD_WANTED: u64 = 51_024;

/// Raises this process's hard (and soft) `RLIMIT_NOFILE` to `wanted` where permitted (it
/// needs `CAP_SYS_RESOURCE`), so the daemons the bench starts inherit it. Best effort:
/// without the capability the limit stays, and the scale is capped to it.
pub(crate) fn raise_fd_limit(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    if getrlimit(Resource::Nofile)
        .maximum
        .is_some_and(|h| h < wanted)
    {
        let to = Some(wanted);
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: to,
                maximum: to,
            },
        );
    }
}

/// 1-minute load average.
pub(crate) fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
        assert!(cpu_ns(std::process::id()).is_some());
        assert!(own_thread_cpu_ns().is_some());
        assert!(own_peak_rss_bytes().unwrap() > 0);
        assert!(fd_limit().unwrap() > 0);
        assert_eq!(parse_schedstat("123 4 5\n"), Some(123));
    }
}
