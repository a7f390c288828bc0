//! A real `iwpmd` child process: spawned in its host's namespace with its kernel link on a
//! Unix socket, its stderr collected line by line, and its state read through SIGUSR1
//! dumps. Killed on drop, so no test leaves a daemon behind.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::dump::{self, Dump, DumpError};
use crate::netns::{NetPlace, NetnsError};

/// How long a daemon may take to reach its event loop.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a dump may take to appear on stderr.
pub const DUMP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a daemon process failed at.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The process could not be started.
    #[error("cannot spawn {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Entering the host's namespace failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// It did not reach its event loop in time.
    #[error("iwpmd ({host}) did not start within {timeout:?}; its log:\n{log}")]
    NotReady {
        /// The host.
        host: String,
        /// The bound.
        timeout: Duration,
        /// Its stderr so far.
        log: String,
    },
    /// It exited when it should be running.
    #[error("iwpmd ({host}) exited with {status}; its log:\n{log}")]
    Exited {
        /// The host.
        host: String,
        /// The status.
        status: ExitStatus,
        /// Its stderr.
        log: String,
    },
    /// Sending a signal failed.
    #[error("cannot signal iwpmd ({host}): {errno}")]
    Signal {
        /// The host.
        host: String,
        /// The error.
        errno: nix::errno::Errno,
    },
    /// The SIGUSR1 dump did not appear in time.
    #[error("iwpmd ({host}) printed no dump within {0:?}", DUMP_TIMEOUT)]
    DumpTimeout {
        /// The host.
        host: String,
    },
    /// The dump did not parse.
    #[error("iwpmd ({host}) dump: {source}")]
    Dump {
        /// The host.
        host: String,
        /// The error.
        source: DumpError,
    },
}

/// How to run one daemon.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// A label (the host name) for messages.
    pub host: String,
    /// The `iwpmd` binary.
    pub binary: PathBuf,
    /// The Unix socket given as `--kernel unix:PATH`.
    pub kernel: PathBuf,
    /// `--peer-port`.
    pub peer_port: u16,
    /// Address the peer sockets of the lab's family bind to.
    pub bind: IpAddr,
    /// For IPv6 runs: where the (unused) IPv4 peer sockets bind, distinct per daemon so
    /// that two daemons in one namespace do not collide on the peer port.
    pub idle_v4_bind: Ipv4Addr,
    /// The namespace to run in.
    pub place: NetPlace,
    /// Copy every stderr line to our stderr, prefixed with the host name.
    pub echo: bool,
    /// Extra `RUST_LOG` directives (appended to the lab's).
    pub log_directives: Option<String>,
    /// `--config` file (`None`: `--config none`, the defaults).
    pub config_file: Option<PathBuf>,
    /// Where its control socket is (for `iwpmctl --socket PATH`): the daemon's default
    /// with `--kernel unix:PATH`, `PATH.control` (see [`control_socket_beside`]).
    pub control_socket: PathBuf,
}

/// The control socket `iwpmd --kernel unix:KERNEL` opens when given none: `KERNEL.control`,
/// beside the emulator's socket (`iwpm_control::socket_beside`, which the lab cannot
/// import without a dependency cycle; `tests/hold.rs` talks to the daemon through it).
pub fn control_socket_beside(kernel: &Path) -> PathBuf {
    let mut s = kernel.as_os_str().to_owned();
    s.push(".control");
    PathBuf::from(s)
}

/// The daemon's stderr, line by line, shared with its reader thread.
#[derive(Clone, Debug, Default)]
pub struct Log(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Log {
    fn push(&self, line: String) {
        let (lines, cv) = &*self.0;
        lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
        cv.notify_all();
    }

    /// Number of lines so far.
    pub fn len(&self) -> usize {
        self.0
             .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True before the first line.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lines from index `from` on.
    pub fn lines_from(&self, from: usize) -> Vec<String> {
        let lines = self.0 .0.lock().unwrap_or_else(PoisonError::into_inner);
        lines
            .get(from..)
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }

    /// Everything, joined.
    pub fn text(&self) -> String {
        self.lines_from(0).join("\n")
    }

    /// Waits until a line at index `from` or later contains `needle`; returns its index.
    pub fn wait_for(&self, from: usize, needle: &str, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        let (lines, cv) = &*self.0;
        let mut guard = lines.lock().unwrap_or_else(PoisonError::into_inner);
        // Lines before `next` were searched already (a dump of 50 000 mappings is 200 000
        // lines, arriving while we wait).
        let mut next = from;
        loop {
            if let Some(i) = guard
                .get(next..)
                .and_then(|new| new.iter().position(|l| l.contains(needle)))
            {
                return Some(next + i);
            }
            next = next.max(guard.len());
            let left = deadline.checked_duration_since(Instant::now())?;
            guard = cv
                .wait_timeout(guard, left.min(Duration::from_millis(100)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Lines from index `from` on that contain `needle`.
    pub fn count_from(&self, from: usize, needle: &str) -> usize {
        self.lines_from(from)
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

/// A running `iwpmd`.
#[derive(Debug)]
pub struct Daemon {
    config: DaemonConfig,
    child: Child,
    log: Log,
    exit: Option<ExitStatus>,
}

/// The text of a log line after its target (`... WARN iwpmd::dump: TEXT`).
pub(crate) fn message_of(line: &str) -> &str {
    match line.find(": ") {
        Some(i) if line[..i].contains("iwpmd") => &line[i + 2..],
        _ => line,
    }
}

impl Daemon {
    /// Spawns the daemon and waits until its event loop runs (from then on signals are
    /// handled; before, SIGUSR1 would kill it).
    pub fn spawn(config: DaemonConfig) -> Result<Daemon, DaemonError> {
        let mut cmd = Command::new(&config.binary);
        cmd.arg("--foreground")
            .arg("--log-stderr")
            .arg("--kernel")
            .arg(format!("unix:{}", config.kernel.display()))
            .arg("--config")
            .arg(config.config_file.as_deref().unwrap_or(Path::new("none")))
            .arg("--peer-port")
            .arg(config.peer_port.to_string());
        match config.bind {
            IpAddr::V4(v4) => {
                cmd.arg("--peer-bind-v4")
                    .arg(v4.to_string())
                    .arg("--no-ipv6");
            }
            IpAddr::V6(v6) => {
                cmd.arg("--peer-bind-v6")
                    .arg(v6.to_string())
                    .arg("--peer-bind-v4")
                    .arg(config.idle_v4_bind.to_string());
            }
        }
        let mut filter = "info,iwpmd::dump=debug".to_string();
        if let Some(extra) = &config.log_directives {
            filter.push(',');
            filter.push_str(extra);
        }
        cmd.env("RUST_LOG", filter)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = config
            .place
            .run(|| cmd.spawn())?
            .map_err(|source| DaemonError::Spawn {
                binary: config.binary.clone(),
                source,
            })?;
        let log = Log::default();
        if let Some(pipe) = child.stderr.take() {
            let sink = log.clone();
            let echo = config.echo.then(|| config.host.clone());
            std::thread::Builder::new()
                .name(format!("iwpmd-log-{}", config.host))
                .spawn(move || {
                    for line in BufReader::new(pipe).lines() {
                        let Ok(line) = line else { break };
                        if let Some(host) = &echo {
                            eprintln!("[iwpmd {host}] {line}");
                        }
                        sink.push(line);
                    }
                })
                .map_err(|source| DaemonError::Spawn {
                    binary: config.binary.clone(),
                    source,
                })?;
        }
        let mut daemon = Daemon {
            config,
            child,
            log,
            exit: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if daemon
                .log
                .wait_for(0, "entering the event loop", Duration::from_millis(50))
                .is_some()
            {
                return Ok(daemon);
            }
            daemon.check_running()?;
            if Instant::now() >= deadline {
                return Err(DaemonError::NotReady {
                    host: daemon.config.host.clone(),
                    timeout: START_TIMEOUT,
                    log: daemon.log.text(),
                });
            }
        }
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &DaemonConfig {
        &self.config
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// An error if the process has exited.
    pub fn check_running(&mut self) -> Result<(), DaemonError> {
        match self.try_exit() {
            None => Ok(()),
            Some(status) => Err(DaemonError::Exited {
                host: self.config.host.clone(),
                status,
                log: self.log.text(),
            }),
        }
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    fn signal(&self, sig: Signal) -> Result<(), DaemonError> {
        let pid = i32::try_from(self.pid()).unwrap_or(i32::MAX);
        kill(Pid::from_raw(pid), sig).map_err(|errno| DaemonError::Signal {
            host: self.config.host.clone(),
            errno,
        })
    }

    /// Asks for a SIGUSR1 dump and parses it.
    pub fn dump(&mut self) -> Result<Dump, DaemonError> {
        self.check_running()?;
        let mark = self.log.len();
        self.signal(Signal::SIGUSR1)?;
        let host = self.config.host.clone();
        let start = self
            .log
            .wait_for(mark, "print_iwpm_mapped_ports:", DUMP_TIMEOUT)
            .ok_or_else(|| DaemonError::DumpTimeout { host: host.clone() })?;
        let end = self
            .log
            .wait_for(start, "core counters:", DUMP_TIMEOUT)
            .ok_or_else(|| DaemonError::DumpTimeout { host: host.clone() })?;
        let lines = self.log.lines_from(start);
        let texts: Vec<&str> = lines[..=end - start]
            .iter()
            .map(|l| message_of(l))
            .collect();
        dump::parse(texts).map_err(|source| DaemonError::Dump { host, source })
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) -> Result<ExitStatus, DaemonError> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        self.signal(Signal::SIGKILL)?;
        let status = self.child.wait().map_err(|source| DaemonError::Spawn {
            binary: self.config.binary.clone(),
            source,
        })?;
        self.exit = Some(status);
        Ok(status)
    }

    /// SIGTERM, then waits up to `timeout` (SIGKILL after that). Returns the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus, DaemonError> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        self.signal(Signal::SIGTERM)?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit() {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill9()
    }

    /// A new daemon with the same configuration (after [`Daemon::kill9`]).
    pub fn respawn(&self) -> Result<Daemon, DaemonError> {
        Daemon::spawn(self.config.clone())
    }
}

/// Set (to anything) to stop dropped daemons with SIGTERM instead of SIGKILL, so a daemon
/// run under a profiler (`IWPMD_BIN` a wrapper that `exec`s `valgrind --tool=callgrind`)
/// writes its profile.
pub const GRACEFUL_DROP_ENV: &str = "IWPM_LAB_GRACEFUL_DROP";

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::env::var_os(GRACEFUL_DROP_ENV).is_some() {
            let _ = self.terminate(Duration::from_secs(60));
            return;
        }
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::message_of;

    #[test]
    fn message_after_target() {
        assert_eq!(
            message_of("2026-01-01T00:00:00Z  WARN iwpmd::dump: Mapping #0"),
            "Mapping #0"
        );
        assert_eq!(
            message_of("2026-01-01T00:00:00Z  INFO iwpmd::dump: io counters: kernel_rx=1"),
            "io counters: kernel_rx=1"
        );
    }
}
