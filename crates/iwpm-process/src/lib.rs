//! One handle on a real `iwpmd` child process: its stderr read line by line on a thread
//! (kept in a [`Log`], or handed to a reader of the caller's), bounded waits for a log
//! line or an exit, signals, and a kill on drop so that no caller leaves a daemon behind.
//! Also the command line that points such a daemon at an emulated kernel
//! ([`iwpmd_command`]).
//!
//! Its own crate because two kinds of callers share it: the lab (`iwpm-lab`, a tool) runs
//! real daemons with it, and the tests do through the test kit, which adds where the
//! binary is and the test-only macros. The lab so builds without the test kit.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::Signal;

/// Default bound on a wait of a test.
pub const WAIT: Duration = Duration::from_secs(10);

/// The log line after which the daemon handles signals (before it, SIGUSR1 kills it).
pub const EVENT_LOOP_LINE: &str = "entering the event loop";

/// The command line of an `iwpmd` (`binary`) served by the emulated kernel at
/// `kernel_socket`: no configuration file, logs on stderr (piped), peer sockets on
/// `bind_v4:peer_port` only (no IPv6), and none of the environment that would change its
/// logging or make it talk to systemd. No process-mode flag: add `--foreground` (or
/// nothing, to test daemonizing); [`daemon_command`] adds it.
pub fn iwpmd_command(
    binary: &Path,
    kernel_socket: &Path,
    bind_v4: Ipv4Addr,
    peer_port: u16,
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args(iwpmd_args(kernel_socket, bind_v4, peer_port))
        .env_remove("RUST_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// [`iwpmd_command`] in the foreground: the process stays the test's child.
pub fn daemon_command(
    binary: &Path,
    kernel_socket: &Path,
    bind_v4: Ipv4Addr,
    peer_port: u16,
) -> Command {
    let mut cmd = iwpmd_command(binary, kernel_socket, bind_v4, peer_port);
    cmd.arg("--foreground");
    cmd
}

/// The arguments of [`iwpmd_command`], for callers that start the daemon another way (a
/// launcher that passes it descriptors first, say).
pub fn iwpmd_args(kernel_socket: &Path, bind_v4: Ipv4Addr, peer_port: u16) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--kernel".into()];
    args.push(format!("unix:{}", kernel_socket.display()).into());
    for a in ["--log-stderr", "--no-ipv6", "-v"] {
        args.push(a.into());
    }
    args.extend(["--config".into(), "none".into()]);
    args.extend(["--peer-bind-v4".into(), bind_v4.to_string().into()]);
    args.extend(["--peer-port".into(), peer_port.to_string().into()]);
    args
}

/// A daemon's stderr, line by line, shared with its reader thread.
#[derive(Clone, Debug, Default)]
pub struct Log(Arc<(Mutex<Lines>, Condvar)>);

/// The lines, and when each arrived (same index).
#[derive(Debug, Default)]
struct Lines {
    text: Vec<String>,
    arrived: Vec<Instant>,
}

impl std::ops::Deref for Lines {
    type Target = Vec<String>;
    fn deref(&self) -> &Vec<String> {
        &self.text
    }
}

impl Log {
    /// Appends a line and wakes the waiters.
    pub fn push(&self, line: String) {
        let (lines, cv) = &*self.0;
        let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.text.push(line);
        lines.arrived.push(Instant::now());
        cv.notify_all();
    }

    /// Waits until some line contains `needle`; returns when that line arrived.
    pub fn arrival_of(&self, needle: &str, timeout: Duration) -> Option<Instant> {
        let i = self.find_from(0, needle, timeout)?;
        let lines = self.0 .0.lock().unwrap_or_else(PoisonError::into_inner);
        lines.arrived.get(i).copied()
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

    /// Everything so far as it was written: each line ends in a newline.
    pub fn text(&self) -> String {
        let lines = self.0 .0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::new();
        for line in lines.iter() {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// Waits until a line at index `from` or later contains `needle`; returns its index.
    pub fn find_from(&self, from: usize, needle: &str, timeout: Duration) -> Option<usize> {
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

    /// Waits until some line contains `needle`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        self.find_from(0, needle, timeout).is_some()
    }

    /// Lines from index `from` on that contain `needle`.
    pub fn count_from(&self, from: usize, needle: &str) -> usize {
        self.lines_from(from)
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }
}

/// What a stop of the daemon failed at.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    /// Sending the signal failed.
    #[error("cannot signal the daemon: {0}")]
    Signal(Errno),
    /// Reaping it failed.
    #[error("cannot wait for the daemon: {0}")]
    Wait(std::io::Error),
}

/// A running daemon (any child whose stderr is piped). Killed and reaped on drop.
#[derive(Debug)]
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Its stderr lines (empty when [`Daemon::adopt_with`] gave them to another reader).
    pub stderr: Log,
    /// The peer port it was given.
    pub peer_port: u16,
}

impl Daemon {
    /// Spawns `cmd` (stderr piped) and starts collecting its stderr; panics if it cannot.
    pub fn spawn(mut cmd: Command, peer_port: u16) -> Daemon {
        let child = cmd.spawn().expect("spawn iwpmd");
        Daemon::adopt(child, peer_port, "test", false).expect("start the stderr reader")
    }

    /// Takes over a spawned `child` and collects its stderr into [`Daemon::stderr`] on a
    /// thread named after `name`; with `echo` each line is also copied to our stderr after
    /// `[iwpmd NAME] `.
    pub fn adopt(child: Child, peer_port: u16, name: &str, echo: bool) -> std::io::Result<Daemon> {
        let log = Log::default();
        let sink = log.clone();
        let echo = echo.then(|| name.to_owned());
        let thread = format!("iwpmd-log-{name}");
        let mut daemon = Daemon::adopt_with(child, peer_port, thread, move |line| {
            if let Some(host) = &echo {
                eprintln!("[iwpmd {host}] {line}");
            }
            sink.push(line);
        })?;
        daemon.stderr = log;
        Ok(daemon)
    }

    /// Takes over a spawned `child` and hands each stderr line to `reader`, on a thread
    /// named `thread` (for readers that count, filter or stall the lines).
    pub fn adopt_with(
        mut child: Child,
        peer_port: u16,
        thread: String,
        reader: impl FnMut(String) + Send + 'static,
    ) -> std::io::Result<Daemon> {
        if let Some(pipe) = child.stderr.take() {
            if let Err(e) = std::thread::Builder::new()
                .name(thread)
                .spawn(move || read_lines(pipe, reader))
            {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        Ok(Daemon {
            child,
            stderr: Log::default(),
            peer_port,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig`.
    pub fn try_signal(&self, sig: Signal) -> Result<(), Errno> {
        let pid = i32::try_from(self.pid()).unwrap_or(i32::MAX);
        let pid = rustix::process::Pid::from_raw(pid).ok_or(Errno::SRCH)?;
        rustix::process::kill_process(pid, sig)
    }

    /// Sends `sig`; panics if it cannot.
    pub fn signal(&self, sig: Signal) {
        self.try_signal(sig).expect("signal the daemon");
    }

    /// Its exit status, if it has exited (reaped then).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// True while it has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until the event loop runs (signals are handled from then on); panics with
    /// the log if it does not within [`WAIT`].
    pub fn wait_loop(&self) {
        assert!(
            self.stderr.wait_for(EVENT_LOOP_LINE, WAIT),
            "daemon did not reach its event loop:\n{}",
            self.stderr.text()
        );
    }

    /// Waits for the exit status, bounded.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_child(&mut self.child, timeout)
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) -> Result<ExitStatus, StopError> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        self.try_signal(Signal::KILL).map_err(StopError::Signal)?;
        self.child.wait().map_err(StopError::Wait)
    }

    /// SIGTERM, then waits up to `timeout` (SIGKILL after that). Returns the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus, StopError> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        self.try_signal(Signal::TERM).map_err(StopError::Signal)?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit() {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill9()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_lines(pipe: ChildStderr, mut reader: impl FnMut(String)) {
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        reader(line);
    }
}

/// Polls `child` for an exit status until `timeout`.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `cond` holds, bounded.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}
