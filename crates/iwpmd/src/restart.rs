//! Everything that outlives one daemon process, gathered behind one small interface so the
//! event loop only calls it at a few points: the service manager (status lines, watchdog,
//! `STOPPING=1`), the FD store of reserved ports, and the state file. Each has its module
//! here: `restart/systemd.rs`, `restart/fd_store.rs`, `restart/state_file.rs`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::io_counters::RestartCounts;
use iwpm_core::state_file::SavedMapping;
use iwpm_core::{Core, Host, SavePolicy};
use iwpm_report::count as counted;

use crate::ports::reservations::Reservations;
use crate::ports::Ports;
use iwpm_core::RateLimit;

use self::fd_store::FdStore;
use self::state_file::{Saved, StateStore};
use self::systemd::{Inherited, Notifier};

mod fd_store;
pub(crate) mod state_file;
pub(crate) mod systemd;

/// `STATUS=` is refreshed at most this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// How restart survival is set up.
#[derive(Debug, Default)]
pub(crate) struct RestartConfig {
    /// Talk to the service manager (`-s`).
    pub(crate) notify: bool,
    /// Use the FD store even if the manager did not announce one in `FDSTORE`.
    pub(crate) force_fd_store: bool,
    /// Where the state file lives (`None`: no state file).
    pub(crate) state_file: Option<std::path::PathBuf>,
}

/// The restart machinery of one daemon.
#[derive(Debug)]
pub(crate) struct Restart {
    notifier: Option<Notifier>,
    fd_store: Option<FdStore>,
    state: Option<StateStore>,
    watchdog: Option<(Duration, Instant)>,
    last_status: Option<(Instant, usize)>,
    /// A changed count waits for the status interval to pass.
    status_due: Option<Instant>,
    inherited: Option<Inherited>,
    ready: bool,
    /// Mappings in the core's table, as its last `TableChanged` said.
    mappings: usize,
    /// The core said its restart recovery is over (`RecoveryEnded`).
    recovered: bool,
}

impl Restart {
    /// Sets up from the environment; `inherited` are the descriptors taken at start.
    pub(crate) fn new(cfg: RestartConfig, inherited: Inherited, now: Instant) -> Self {
        let notifier = if cfg.notify {
            match Notifier::from_env() {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "NOTIFY_SOCKET unusable; no systemd notifications");
                    None
                }
            }
        } else {
            None
        };
        let announced: Option<usize> = std::env::var("FDSTORE").ok().and_then(|v| v.parse().ok());
        let fd_store = match (&notifier, announced) {
            (Some(_), Some(max)) if max > 0 => Some(max),
            (Some(_), _) if cfg.force_fd_store => Some(usize::MAX),
            _ => None,
        }
        .map(|max| {
            let warn = RateLimit::new(Duration::from_secs(10), 5);
            let names: Vec<String> = inherited.tcp.iter().map(|(n, _)| n.clone()).collect();
            FdStore::new(max, &names, warn)
        });
        let watchdog = notifier
            .as_ref()
            .and(systemd::watchdog_interval())
            .map(|every| (every, now));
        if !inherited.unusable.is_empty() {
            tracing::warn!(names = ?inherited.unusable, "passed descriptors we cannot use were left open");
        }
        Restart {
            notifier,
            fd_store,
            state: cfg.state_file.map(StateStore::new),
            watchdog,
            last_status: None,
            status_due: None,
            inherited: Some(inherited),
            ready: false,
            mappings: 0,
            recovered: false,
        }
    }

    /// The event loop's waker, for the state file writer thread.
    pub(crate) fn set_waker(&self, waker: std::sync::Arc<mio::Waker>) {
        if let Some(s) = &self.state {
            s.set_waker(waker);
        }
    }

    /// The host's state-file policy: the default when a state file is kept, else none (no
    /// `Action::SaveState` then).
    pub(crate) fn save_policy(&self) -> Option<SavePolicy> {
        self.state.as_ref().map(|_| SavePolicy::default())
    }

    /// True when reserved ports go to the FD store.
    pub(crate) fn fd_store_enabled(&self) -> bool {
        self.fd_store.is_some()
    }

    /// Hands the inherited TCP sockets to `held` (they wait there for their mappings) and
    /// returns the saved mappings to restore. Also says "restoring" to the manager.
    pub(crate) fn take_over(&mut self, held: &mut Reservations) -> Vec<SavedMapping> {
        if self.fd_store.is_some() {
            held.journal();
        }
        let inherited = self.inherited.take().unwrap_or_default();
        let n_tcp = inherited.tcp.len();
        let mut adopted = 0usize;
        for (name, sock) in inherited.tcp {
            if held.adopt(sock).is_some() {
                adopted += 1;
            } else {
                tracing::warn!(name, "passed descriptor is not a bound TCP socket; closed");
            }
        }
        // UDP peer sockets are bound again at start; the stored copies are not used.
        let saved = self.state.as_ref().map(|s| s.load()).unwrap_or_default();
        if n_tcp > 0 || !saved.is_empty() {
            tracing::info!(
                inherited_ports = adopted,
                saved_mappings = saved.len(),
                state_file = self
                    .state
                    .as_ref()
                    .map(|s| s.path().display().to_string())
                    .as_deref(),
                "restart: taking over the previous daemon's ports and mappings"
            );
        }
        self.status(&format!(
            "restoring {}, {} inherited; waiting for kernel",
            counted(saved.len() as u64, "mapping", "mappings"),
            counted(adopted as u64, "port", "ports")
        ));
        saved
    }

    /// The core's table changed (`Action::TableChanged`): what the status line follows.
    pub(crate) fn table_changed(&mut self, mappings: usize) {
        self.mappings = mappings;
    }

    /// The host asks for the state file (`Action::SaveState`): handed to the writer thread,
    /// or written at once if there is none (then what it reports is returned).
    pub(crate) fn save_state(&mut self, generation: u64, core: &Core) -> Option<Saved> {
        self.state.as_mut()?.save(generation, core)
    }

    /// The core's restart recovery is over (`Action::RecoveryEnded`): inherited ports no
    /// mapping claimed may go.
    pub(crate) fn recovery_ended(&mut self) {
        self.recovered = true;
    }

    /// After every input: FD store messages, status line.
    pub(crate) fn after_input(&mut self, now: Instant, held: &mut Reservations) {
        if let (Some(store), Some(n)) = (&mut self.fd_store, &self.notifier) {
            store.sync(now, n, held);
        }
        self.refresh_status(now);
    }

    /// `STATUS=serving N mappings` when N changed, at most every [`STATUS_INTERVAL`]; a
    /// change that comes too soon is sent by [`Restart::tick`].
    fn refresh_status(&mut self, now: Instant) {
        if !self.ready || self.notifier.is_none() {
            return;
        }
        let count = self.mappings;
        match self.last_status {
            Some((_, n)) if n == count => self.status_due = None,
            Some((at, _)) if now.saturating_duration_since(at) < STATUS_INTERVAL => {
                self.status_due = Some(at + STATUS_INTERVAL);
            }
            _ => {
                self.status_due = None;
                self.last_status = Some((now, count));
                self.status(&format!(
                    "serving {}",
                    counted(count as u64, "mapping", "mappings")
                ));
            }
        }
    }

    /// Inherited ports no mapping claimed once the recovery is over are closed (and taken
    /// out of the FD store).
    pub(crate) fn release_unclaimed(&mut self, now: Instant, held: &mut Reservations) {
        if held.unclaimed() == 0 || !self.recovered {
            return;
        }
        let freed: Vec<SocketAddr> = held.release_unclaimed();
        tracing::warn!(
            count = freed.len(),
            ports = ?freed.iter().take(16).map(SocketAddr::port).collect::<Vec<_>>(),
            "inherited ports no restored or replayed mapping claimed were released"
        );
        self.after_input(now, held);
    }

    /// Whether the kernel handshake was done ([`Restart::on_ready`]).
    pub(crate) fn ready(&self) -> bool {
        self.ready
    }

    /// The kernel handshake is done: `READY=1` (with a service manager).
    pub(crate) fn on_ready(&mut self, now: Instant) {
        self.ready = true;
        let count = self.mappings;
        self.last_status = Some((now, count));
        self.send(&format!(
            "READY=1\nSTATUS=serving {}",
            counted(count as u64, "mapping", "mappings")
        ));
    }

    /// Earliest timer of the restart machinery (watchdog, status line, and a look at a
    /// state file write in flight when the writer cannot wake the loop).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let wd = self.watchdog.map(|(every, last)| last + every);
        [
            wd,
            self.state.as_ref().and_then(StateStore::deadline),
            self.status_due,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs due timers (watchdog ping, status line) and collects a finished state file
    /// write, returned for the host's policy (`Host::state_saved`).
    pub(crate) fn tick(&mut self, now: Instant) -> Option<Saved> {
        if let Some((every, last)) = self.watchdog {
            if now >= last + every {
                self.watchdog = Some((every, now));
                self.send("WATCHDOG=1");
            }
        }
        let saved = self.state.as_mut().and_then(|s| s.collect(false));
        if self.status_due.is_some_and(|d| d <= now) {
            self.refresh_status(now);
        }
        saved
    }

    /// Exit: `STOPPING=1`, then the final state file: the write in flight is waited for,
    /// and the table written at once if the host says the file lacks its last change. The
    /// FD store keeps the ports.
    pub(crate) fn on_exit(&mut self, host: &mut Host<Ports>) {
        self.send("STOPPING=1\nSTATUS=stopping; ports kept for the next start");
        if let Some(s) = &mut self.state {
            if let Some(saved) = s.collect(true) {
                host.state_saved(Instant::now(), saved.generation, saved.took);
            }
            if let Some(generation) = host.unsaved_generation() {
                let saved = s.write_now(generation, host.core());
                host.state_saved(Instant::now(), saved.generation, saved.took);
            }
        }
        if let Some(f) = &self.fd_store {
            tracing::info!(sent = f.sent, failed = f.failed, "FD store messages");
        }
    }

    /// The restart machinery's counters for the dump's `io counters` line.
    pub(crate) fn counts(&self) -> RestartCounts {
        let fd = self.fd_store.as_ref();
        let state = self.state.as_ref();
        RestartCounts {
            fd_store_sent: fd.map(|f| f.sent),
            fd_store_failed: fd.map(|f| f.failed),
            state_writes: state.map(|s| s.writes),
            state_write_errors: state.map(|s| s.write_errors),
        }
    }

    fn status(&self, text: &str) {
        self.send(&format!("STATUS={text}"));
    }

    fn send(&self, msg: &str) {
        if let Some(n) = &self.notifier {
            if let Err(e) = n.send(msg) {
                tracing::debug!(error = %e, msg, "sd_notify failed");
            }
        }
    }
}
