//! The restart state file on disk (format and checks: `iwpm_core::state_file`): loaded once
//! at start, rewritten atomically (temporary file, `fsync`, `rename`, `fsync` of the
//! directory) a short while after the table changes and at exit.
//!
//! Default `/run/iwpmd/state`: mappings never survive a reboot (the kernel's tables are
//! gone), and `/run` is a tmpfs emptied at boot and mounted before this early-boot service
//! starts, while `/var/lib` may not be. The file also records the boot id, so a copy
//! carried over anyway is refused as foreign.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iwpm_core::state_file::{SavedMapping, StateFile};
use iwpm_core::Core;

/// Default location (see the module docs).
pub const DEFAULT_STATE_FILE: &str = "/run/iwpmd/state";
/// Changes are gathered this long before a write.
const WRITE_DELAY: Duration = Duration::from_millis(200);
/// A write may take at most this share of the time (writes are spaced by this many times
/// the duration of the last one): at 50 000 mappings the file is a few MiB.
const WRITE_SPACING_FACTOR: u32 = 5;

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
#[derive(Debug)]
pub struct StateStore {
    path: PathBuf,
    host: String,
    boot_id: String,
    /// Table generation last written.
    written: Option<u64>,
    /// When a pending change is due to be written.
    due: Option<Instant>,
    /// Earliest next write (spacing after a slow write).
    not_before: Option<Instant>,
    /// Writes done and failed.
    pub writes: u64,
    /// Writes that failed.
    pub write_errors: u64,
}

impl StateStore {
    /// A store at `path`.
    pub fn new(path: PathBuf) -> Self {
        let (host, boot_id) = origin();
        StateStore {
            path,
            host,
            boot_id,
            written: None,
            due: None,
            not_before: None,
            writes: 0,
            write_errors: 0,
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the saved mappings. A missing file is normal (first start); a corrupt or
    /// foreign one is reported and ignored, never fatal.
    pub fn load(&self) -> Vec<SavedMapping> {
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

    /// Notes the table's generation; schedules a write when it moved.
    pub fn note(&mut self, now: Instant, generation: u64) {
        if self.written != Some(generation) && self.due.is_none() {
            let at = now + WRITE_DELAY;
            self.due = Some(self.not_before.map_or(at, |nb| nb.max(at)));
        }
    }

    /// When [`StateStore::tick`] has work.
    pub fn deadline(&self) -> Option<Instant> {
        self.due
    }

    /// Writes the table if a write is due.
    pub fn tick(&mut self, now: Instant, core: &Core) {
        if self.due.is_some_and(|d| d <= now) {
            self.write_now(core);
        }
    }

    /// Writes the table at once (at exit), if it changed since the last write.
    pub fn flush(&mut self, core: &Core) {
        if self.written != Some(core.table_generation()) {
            self.write_now(core);
        }
    }

    fn write_now(&mut self, core: &Core) {
        let started = Instant::now();
        self.due = None;
        let generation = core.table_generation();
        let file = StateFile {
            host: self.host.clone(),
            boot_id: self.boot_id.clone(),
            mappings: core.saved_mappings(),
        };
        match write_atomically(&self.path, &file.encode()) {
            Ok(()) => {
                self.writes += 1;
                self.written = Some(generation);
                tracing::debug!(
                    mappings = file.mappings.len(),
                    took_ms = started.elapsed().as_secs_f64() * 1e3,
                    "state file written"
                );
            }
            Err(e) => {
                self.write_errors += 1;
                // Once, then every 1000th: a read-only /run must not flood the log.
                if self.write_errors % 1000 == 1 {
                    tracing::warn!(
                        path = %self.path.display(),
                        error = %e,
                        failures = self.write_errors,
                        "cannot write the state file: a restart recovers only what the \
                         kernel replays"
                    );
                }
                self.written = Some(generation);
            }
        }
        let took = started.elapsed();
        self.not_before = Some(Instant::now() + took * WRITE_SPACING_FACTOR);
    }
}

/// Temporary file beside `path`, `fsync`, `rename` over `path`, `fsync` of the directory:
/// a reader sees the old or the new file, whole, even after a crash.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
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
}
