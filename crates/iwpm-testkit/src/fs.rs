//! Scratch places in the temp dir, unique per test process and call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn next() -> u32 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// A fresh scratch directory for one test, removed with everything in it when dropped
/// (after the daemon and the fake kernel, when declared before them).
pub fn scratch_dir(tag: &str) -> ScratchDir {
    let n = next();
    let dir = std::env::temp_dir().join(format!("iwpmd-it-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    ScratchDir(dir)
}

/// See [`scratch_dir`].
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh socket path under the temp dir (nothing is created there).
pub fn sock_path(tag: &str) -> PathBuf {
    let n = next();
    std::env::temp_dir().join(format!(
        "iwpm-emu-{}-{}-{}.sock",
        tag,
        std::process::id(),
        n
    ))
}
