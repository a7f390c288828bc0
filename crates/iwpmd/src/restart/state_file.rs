//! The restart state file on disk (format and checks: `iwpm_core::state_file`): loaded once
//! at start, rewritten atomically (temporary file, `fsync`, `rename`, `fsync` of the
//! directory) by a helper thread when the host asks (`Action::SaveState`: when and how
//! often is `iwpm_core::SavePolicy`'s, shared with the simulator), and at exit.
//!
//! Default `/run/iwpmd/state`: mappings never survive a reboot (the kernel's tables are
//! gone), and `/run` is a tmpfs emptied at boot and mounted before this early-boot service
//! starts, while `/var/lib` may not be. The file also records the boot id, so a copy
//! carried over anyway is refused as foreign.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::Waker;

use iwpm_core::state_file::{SavedMapping, StateFile};
use iwpm_core::Core;

/// Default location (see the module docs).
pub(crate) const DEFAULT_STATE_FILE: &str = "/run/iwpmd/state";
/// At exit, the longest wait for a write in flight.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// This host's identity as the file records it.
fn origin() -> (String, String) {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "-".into());
    (host, boot)
}

/// The state file of one daemon.
///
/// The loop only takes the snapshot (a copy of the table, fast); encoding and writing run
/// on a helper thread, so a large table never stalls the kernel link (at 10 000 mappings a
/// write took 35 ms on the rig's emulated CPU, one listen's worth of stall every 200 ms).
/// One write is in flight at a time (the host asks for the next one only once this one
/// is reported back); changes made meanwhile are written by the next one.
#[derive(Debug)]
pub(crate) struct StateStore {
    path: PathBuf,
    host: String,
    boot_id: String,
    /// The helper thread; `None` if it could not be started (writes are then done inline).
    writer: Option<Writer>,
    /// A write handed to the thread and not yet reported back.
    in_flight: bool,
    /// Writes done and failed.
    pub(crate) writes: u64,
    /// Writes that failed.
    pub(crate) write_errors: u64,
    /// The last snapshot's memory, back from the writer, for the next snapshot.
    spare: Vec<SavedMapping>,
}

/// One write for the helper thread.
struct Job {
    generation: u64,
    file: StateFile,
}

/// A write that ended (done or failed): what the host's policy is told
/// (`iwpm_core::Host::state_saved`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Saved {
    /// The table generation the write held.
    pub(crate) generation: u64,
    /// How long the write took (encoding, writing, `fsync`s).
    pub(crate) took: Duration,
}

/// What the helper thread reports after a write.
struct Outcome {
    generation: u64,
    mappings: usize,
    took: Duration,
    result: io::Result<()>,
    /// The job's snapshot memory, emptied, for reuse.
    spare: Vec<SavedMapping>,
}

/// The helper thread, its channels and the waker of the event loop.
struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    outcomes: mpsc::Receiver<Outcome>,
    waker: Arc<OnceLock<Arc<Waker>>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

/// While a write is in flight and no waker is set, the loop looks again this often.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(10);

impl Writer {
    fn start(path: PathBuf) -> io::Result<Writer> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, outcomes) = mpsc::channel::<Outcome>();
        let waker: Arc<OnceLock<Arc<Waker>>> = Arc::default();
        let wake = waker.clone();
        let thread = std::thread::Builder::new()
            .name("iwpmd-state".into())
            .spawn(move || {
                for job in job_rx {
                    let outcome = write_job(&path, job);
                    if done_tx.send(outcome).is_err() {
                        return;
                    }
                    if let Some(w) = wake.get() {
                        if let Err(e) = w.wake() {
                            tracing::error!(error = %e, "state file writer cannot wake the event loop");
                        }
                    }
                }
            })?;
        Ok(Writer {
            jobs: Some(jobs),
            outcomes,
            waker,
            thread: Some(thread),
        })
    }
}

fn write_job(path: &Path, job: Job) -> Outcome {
    let started = Instant::now();
    let result = write_atomically(path, &job.file.encode());
    let took = started.elapsed();
    let mut spare = job.file.mappings;
    let mappings = spare.len();
    spare.clear();
    Outcome {
        generation: job.generation,
        mappings,
        took,
        result,
        spare,
    }
}

impl StateStore {
    /// A store at `path`, with its writer thread (inline writes if it cannot start).
    pub(crate) fn new(path: PathBuf) -> Self {
        let (host, boot_id) = origin();
        let writer = match Writer::start(path.clone()) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the state file writer thread; writing on the event loop");
                None
            }
        };
        check_writable(&path);
        StateStore {
            path,
            host,
            boot_id,
            writer,
            in_flight: false,
            writes: 0,
            write_errors: 0,
            spare: Vec::new(),
        }
    }

    /// The event loop's waker: the writer wakes it when a write is done.
    pub(crate) fn set_waker(&self, waker: Arc<Waker>) {
        if let Some(w) = &self.writer {
            let _ = w.waker.set(waker);
        }
    }

    /// The path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the saved mappings. A missing file is normal (first start); a corrupt or
    /// foreign one is reported and ignored, never fatal.
    pub(crate) fn load(&self) -> Vec<SavedMapping> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read the state file; ignored");
                return Vec::new();
            }
        };
        let file = StateFile::decode(&bytes)
            .and_then(|f| f.check_origin(&self.host, &self.boot_id).map(|()| f));
        match file {
            Ok(f) => f.mappings,
            Err(e) if e.is_foreign() => {
                tracing::warn!(path = %self.path.display(), "state file ignored: {e}");
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "state file is corrupt, ignored: {e}");
                Vec::new()
            }
        }
    }

    /// When [`StateStore::collect`] should look again: a write is in flight and no waker
    /// will say when it is done.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let wakes = self
            .writer
            .as_ref()
            .is_some_and(|w| w.waker.get().is_some());
        (self.in_flight && !wakes).then(|| Instant::now() + IN_FLIGHT_POLL)
    }

    /// Writes the table of `core` as `generation` (`Action::SaveState`): handed to the
    /// helper thread, or written here if there is none, which ends it at once.
    pub(crate) fn save(&mut self, generation: u64, core: &Core) -> Option<Saved> {
        let job = self.job(generation, core);
        let job = match self.writer.as_ref().and_then(|w| w.jobs.as_ref()) {
            Some(tx) => match tx.send(job) {
                Ok(()) => {
                    self.in_flight = true;
                    return None;
                }
                Err(mpsc::SendError(job)) => {
                    tracing::error!(
                        "the state file writer thread is gone; writing on the event loop"
                    );
                    self.writer = None;
                    job
                }
            },
            None => job,
        };
        let outcome = write_job(&self.path, job);
        Some(self.record(outcome))
    }

    /// Takes the outcome of the write in flight, if it ended (waiting for it when `wait`,
    /// at exit).
    pub(crate) fn collect(&mut self, wait: bool) -> Option<Saved> {
        if !self.in_flight {
            return None;
        }
        let Some(w) = &self.writer else {
            self.in_flight = false;
            return None;
        };
        let got = if wait {
            w.outcomes.recv_timeout(EXIT_WAIT).ok()
        } else {
            w.outcomes.try_recv().ok()
        };
        if let Some(outcome) = got {
            self.in_flight = false;
            return Some(self.record(outcome));
        }
        if wait {
            tracing::warn!("the state file write in progress did not finish in time");
        }
        None
    }

    /// At exit, after [`StateStore::collect`]: writes the table as `generation` here and
    /// now (no thread, no delay).
    pub(crate) fn write_now(&mut self, generation: u64, core: &Core) -> Saved {
        let job = self.job(generation, core);
        let outcome = write_job(&self.path, job);
        self.record(outcome)
    }

    fn job(&mut self, generation: u64, core: &Core) -> Job {
        let mut mappings = std::mem::take(&mut self.spare);
        core.saved_mappings_into(&mut mappings);
        Job {
            generation,
            file: StateFile {
                host: self.host.clone(),
                boot_id: self.boot_id.clone(),
                mappings,
            },
        }
    }

    fn record(&mut self, outcome: Outcome) -> Saved {
        self.spare = outcome.spare;
        match outcome.result {
            Ok(()) => {
                self.writes += 1;
                tracing::debug!(
                    mappings = outcome.mappings,
                    took_ms = crate::logging::log_ms(outcome.took),
                    "state file written"
                );
            }
            Err(e) => {
                self.write_errors += 1;
                // Once, then every 1000th: a read-only /run must not flood the log.
                if self.write_errors % 1000 == 1 {
                    tracing::error!(
                        path = %self.path.display(),
                        error = %e,
                        failures = self.write_errors,
                        "cannot write the state file: a restart recovers only what the \
                         kernel replays"
                    );
                }
            }
        }
        Saved {
            generation: outcome.generation,
            took: outcome.took,
        }
    }
}

impl Drop for StateStore {
    fn drop(&mut self) {
        if let Some(w) = &mut self.writer {
            w.jobs = None;
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Says at start-up, as an error naming the path, when the state file cannot be written
/// by this process (after `--user`, say): otherwise that shows only at the first change.
/// The directory (or the nearest existing one above it, which `create_dir_all` would write
/// in) must be writable and searchable for us.
fn check_writable(path: &Path) {
    use rustix::fs::Access;
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    let Some(existing) = dir.ancestors().find(|d| d.exists()) else {
        return;
    };
    if let Err(e) = rustix::fs::access(existing, Access::WRITE_OK | Access::EXEC_OK) {
        tracing::error!(
            path = %path.display(),
            "the state file cannot be written: {} is not writable for uid {} ({}); a \
             restart will recover only what the kernel replays",
            existing.display(),
            rustix::process::geteuid().as_raw(),
            io::Error::from(e)
        );
    }
}

/// Temporary file beside `path`, `fsync`, `rename` over `path`, `fsync` of the directory:
/// a reader sees the old or the new file, whole, even after a crash.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    // A fresh file, never an existing one: whatever is at the temporary path (a leftover
    // of a crash, or a symbolic link planted to aim a root write elsewhere) is unlinked,
    // which removes a link itself and not its target, and the create is exclusive and
    // follows no link, so a link planted again in between fails the write instead.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwpm_core::Host;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("iwpmd-state-{}", std::process::id()));
        let path = dir.join("sub").join("state");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!dir.join("sub").join("state.tmp").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Step 9 item 6 (state.tmp): a symbolic link planted at the temporary path is
    /// replaced, not followed; the old code (`O_CREAT|O_TRUNC` without `O_NOFOLLOW`) wrote
    /// the state through it into the victim.
    #[test]
    fn a_symlink_at_the_temporary_path_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("iwpmd-state-link-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.join("state");
        std::os::unix::fs::symlink(&victim, dir.join("state.tmp")).unwrap();
        write_atomically(&path, b"state").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), b"state");
        assert!(!fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(fs::symlink_metadata(dir.join("state.tmp")).is_err());
        // A stale regular temporary (a crash mid-write) is replaced too.
        fs::write(dir.join("state.tmp"), b"half").unwrap();
        write_atomically(&path, b"again").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"again");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_and_foreign_files_are_ignored() {
        let dir = std::env::temp_dir().join(format!("iwpmd-state-bad-{}", std::process::id()));
        let path = dir.join("state");
        let store = StateStore::new(path.clone());
        assert!(store.load().is_empty(), "missing file");
        write_atomically(&path, b"\x00\xffgarbage").unwrap();
        assert!(store.load().is_empty());
        let foreign = StateFile {
            host: "elsewhere".into(),
            boot_id: store.boot_id.clone(),
            mappings: vec![SavedMapping {
                owner: 2,
                refcount: 1,
                no_port_map: false,
                connector: false,
                local: "0.0.0.0:1".parse().unwrap(),
                mapped: "0.0.0.0:2".parse().unwrap(),
            }],
        };
        write_atomically(&path, &foreign.encode()).unwrap();
        assert!(store.load().is_empty());
        let ours = StateFile {
            host: store.host.clone(),
            ..foreign
        };
        write_atomically(&path, &ours.encode()).unwrap();
        assert_eq!(store.load().len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }

    /// An idle core, in the host that is the only way to make one.
    fn host() -> Host<crate::ports::Ports> {
        let config = iwpm_core::CoreConfig {
            netlink_pid: 4242,
            ..iwpm_core::CoreConfig::default()
        };
        Host::new(config, crate::ports::Ports::new(), None, Instant::now())
    }

    /// Collects until the write handed to the thread is reported back (no waker: polled).
    fn settle(store: &mut StateStore) -> Saved {
        for _ in 0..500 {
            if let Some(saved) = store.collect(false) {
                return saved;
            }
            assert!(store.in_flight, "nothing in flight to settle");
            std::thread::sleep(IN_FLIGHT_POLL);
        }
        panic!("the state file writer never reported back");
    }

    #[test]
    fn the_writer_thread_writes_and_reports_back() {
        let dir = std::env::temp_dir().join(format!("iwpmd-state-thread-{}", std::process::id()));
        let path = dir.join("state");
        let host = host();
        let core = host.core();
        let mut store = StateStore::new(path.clone());
        assert_eq!(store.deadline(), None, "nothing in flight");
        assert_eq!(store.save(1, core), None, "the write went to the thread");
        assert!(store.in_flight, "the write went to the thread");
        assert!(
            store.deadline().is_some(),
            "no waker: the loop polls for the outcome"
        );
        let saved = settle(&mut store);
        assert_eq!(saved.generation, 1);
        assert_eq!((store.writes, store.write_errors), (1, 0));
        assert!(StateFile::decode(&fs::read(&path).unwrap()).is_ok());
        // nothing in flight since: neither a look nor the exit's wait finds a write
        assert_eq!(store.deadline(), None);
        assert_eq!(store.collect(true), None);
        assert_eq!(store.writes, 1);
        // the exit's own write is done at once
        assert_eq!(store.write_now(2, core).generation, 2);
        assert_eq!((store.writes, store.write_errors), (2, 0));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failing_write_is_counted_and_the_writer_goes_on() {
        // no directory can be made under /proc, not even by root
        let host = host();
        let core = host.core();
        let mut store = StateStore::new(PathBuf::from("/proc/iwpmd-no-such-dir/state"));
        assert_eq!(store.save(1, core), None);
        assert_eq!(
            settle(&mut store).generation,
            1,
            "a failure is reported too"
        );
        assert_eq!((store.writes, store.write_errors), (0, 1));
        // the thread is still there: the next change is handed to it again
        assert_eq!(store.save(2, core), None);
        assert!(store.in_flight);
        settle(&mut store);
        assert_eq!((store.writes, store.write_errors), (0, 2));
    }
}
