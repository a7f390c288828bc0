//! A real `iwpmd` child process: spawned in its host's namespace with its kernel link on a
//! Unix socket, its stderr collected line by line, and its state read through SIGUSR1
//! dumps. The process handle is [`iwpm_process::Daemon`]: what is the lab's here is the
//! command line, the start-up check and the dump. Killed on drop, so no test leaves a
//! daemon behind.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use iwpm_process::{Daemon as Process, StopError, EVENT_LOOP_LINE};
use rustix::process::Signal;

pub use iwpm_process::Log;

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
        errno: rustix::io::Errno,
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
/// import without a dependency cycle; `tests/it/hold.rs` talks to the daemon through it).
pub fn control_socket_beside(kernel: &Path) -> PathBuf {
    let mut s = kernel.as_os_str().to_owned();
    s.push(".control");
    PathBuf::from(s)
}

/// The running `iwpmd` of one lab host: its process ([`iwpm_process::Daemon`]), the
/// configuration it was started with (to start it again) and its dumps.
#[derive(Debug)]
pub struct LabDaemon {
    config: DaemonConfig,
    process: Process,
}

/// The text of a log line after its target (`... WARN iwpmd::dump: TEXT`).
pub(crate) fn message_of(line: &str) -> &str {
    match line.find(": ") {
        Some(i) if line[..i].contains("iwpmd") => &line[i + 2..],
        _ => line,
    }
}

impl LabDaemon {
    /// Spawns the daemon and waits until its event loop runs (from then on signals are
    /// handled; before, SIGUSR1 would kill it).
    pub fn spawn(config: DaemonConfig) -> Result<LabDaemon, DaemonError> {
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
        let child = config
            .place
            .run(|| cmd.spawn())?
            .map_err(|source| DaemonError::Spawn {
                binary: config.binary.clone(),
                source,
            })?;
        let process = Process::adopt(child, config.peer_port, &config.host, config.echo).map_err(
            |source| DaemonError::Spawn {
                binary: config.binary.clone(),
                source,
            },
        )?;
        let mut daemon = LabDaemon { config, process };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if daemon
                .log()
                .find_from(0, EVENT_LOOP_LINE, Duration::from_millis(50))
                .is_some()
            {
                return Ok(daemon);
            }
            daemon.check_running()?;
            if Instant::now() >= deadline {
                return Err(DaemonError::NotReady {
                    host: daemon.config.host.clone(),
                    timeout: START_TIMEOUT,
                    log: daemon.log_text(),
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
        self.process.pid()
    }

    /// Its stderr.
    pub fn log(&self) -> &Log {
        &self.process.stderr
    }

    /// Its stderr so far, for messages: the lines joined, no newline at the end.
    fn log_text(&self) -> String {
        self.log().lines_from(0).join("\n")
    }

    /// An error if the process has exited.
    pub fn check_running(&mut self) -> Result<(), DaemonError> {
        match self.try_exit() {
            None => Ok(()),
            Some(status) => Err(DaemonError::Exited {
                host: self.config.host.clone(),
                status,
                log: self.log_text(),
            }),
        }
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        self.process.try_exit()
    }

    fn stop_error(&self, e: StopError) -> DaemonError {
        match e {
            StopError::Signal(errno) => DaemonError::Signal {
                host: self.config.host.clone(),
                errno,
            },
            StopError::Wait(source) => DaemonError::Spawn {
                binary: self.config.binary.clone(),
                source,
            },
        }
    }

    /// Asks for a SIGUSR1 dump and parses it.
    pub fn dump(&mut self) -> Result<Dump, DaemonError> {
        self.check_running()?;
        let mark = self.log().len();
        let host = self.config.host.clone();
        self.process
            .try_signal(Signal::USR1)
            .map_err(|errno| DaemonError::Signal {
                host: host.clone(),
                errno,
            })?;
        let start = self
            .log()
            .find_from(mark, "print_iwpm_mapped_ports:", DUMP_TIMEOUT)
            .ok_or_else(|| DaemonError::DumpTimeout { host: host.clone() })?;
        let end = self
            .log()
            .find_from(start, "core counters:", DUMP_TIMEOUT)
            .ok_or_else(|| DaemonError::DumpTimeout { host: host.clone() })?;
        let lines = self.log().lines_from(start);
        let texts: Vec<&str> = lines[..=end - start]
            .iter()
            .map(|l| message_of(l))
            .collect();
        dump::parse(texts).map_err(|source| DaemonError::Dump { host, source })
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) -> Result<ExitStatus, DaemonError> {
        self.process.kill9().map_err(|e| self.stop_error(e))
    }

    /// SIGTERM, then waits up to `timeout` (SIGKILL after that). Returns the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus, DaemonError> {
        self.process
            .terminate(timeout)
            .map_err(|e| self.stop_error(e))
    }

    /// A new daemon with the same configuration (after [`LabDaemon::kill9`]).
    pub fn respawn(&self) -> Result<LabDaemon, DaemonError> {
        LabDaemon::spawn(self.config.clone())
    }
}

/// Set (to anything) to stop dropped daemons with SIGTERM instead of SIGKILL, so a daemon
/// run under a profiler (`IWPMD_BIN` a wrapper that `exec`s `valgrind --tool=callgrind`)
/// writes its profile.
pub const GRACEFUL_DROP_ENV: &str = "IWPM_LAB_GRACEFUL_DROP";

impl Drop for LabDaemon {
    /// With [`GRACEFUL_DROP_ENV`] set, SIGTERM first; the process handle then kills and
    /// reaps whatever still runs.
    fn drop(&mut self) {
        if std::env::var_os(GRACEFUL_DROP_ENV).is_some() {
            let _ = self.terminate(Duration::from_secs(60));
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
