//! The host's QEMU turns. The real-kernel rig and the system test both fill the 2 cores of
//! a CI machine, and the rig's judged times fail when a Debian VM boots beside it at full
//! load: so the rig holds the whole host while it runs. With `RIG_STORAGE_LANE=1` (CI) the
//! rig runs its storage boots in a lane of their own beside the rest; once both kernels'
//! storage boots are done (at once when the lane has none, as with `RIG_WITHOUT=storage`)
//! that lane's room is free, and the rig says so by touching its side-slot file. The
//! system test's two one-CPU VMs then run there, where the two storage VMs were, instead
//! of waiting for the rig's end.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Held by the rig, and by the system test when it runs alone.
static WHOLE_HOST: Mutex<()> = Mutex::new(());

/// While the rig holds the host: the file its run touches once its storage lane is done.
static SIDE_SLOT: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The whole host (a test that panicked while holding it leaves it usable).
pub(crate) fn whole() -> MutexGuard<'static, ()> {
    WHOLE_HOST.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The rig's offer of its side slot, withdrawn when dropped (at the rig's end).
pub(crate) struct SideSlotOffer(PathBuf);

impl SideSlotOffer {
    /// Offers `file` (removed first, so a file left by an earlier run is no offer); the
    /// caller passes it to the rig as `RIG_SIDE_SLOT` and holds `whole()` meanwhile.
    pub(crate) fn new(file: &Path) -> Self {
        let _ = std::fs::remove_file(file);
        *SIDE_SLOT.lock().unwrap_or_else(PoisonError::into_inner) = Some(file.to_path_buf());
        Self(file.to_path_buf())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SideSlotOffer {
    fn drop(&mut self) {
        *SIDE_SLOT.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// A turn for a job the size of the rig's storage lane: the whole host when it is free
/// (`Some`, held until dropped), or the rig's side slot once the rig has freed it (`None`:
/// beside the rig), whichever comes first.
pub(crate) fn side_job() -> Option<MutexGuard<'static, ()>> {
    loop {
        match WHOLE_HOST.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        let offered = SIDE_SLOT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if offered.is_some_and(|file| file.exists()) {
            return None;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
