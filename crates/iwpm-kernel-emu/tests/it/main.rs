//! The emulator's integration tests, one test binary: the fabric driven by scripted
//! daemons (`fabric`, over `fake_daemon`), and the real `iwpmd` against it (`real_daemon`,
//! `zero_gap`).

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod fabric;
mod fake_daemon;
mod real_daemon;
mod zero_gap;

/// Held by every test that runs a real `iwpmd`: shared while its daemons may bind ports
/// (port 0: any free one) or it starts a process; alone for the windows of the `zero_gap`
/// restarts in which their mapped ports are free (between one daemon's exit and the next
/// one's rebinding them: another daemon's port-0 bind could take one, the very hazard the
/// FD store removes) or their stored sockets inheritable (a process spawned then would
/// keep copies). Not held while a test only waits, so the restarts' ~9.5 s replay windows
/// pass side by side.
static REAL_DAEMONS: RwLock<()> = RwLock::new(());

/// For a test, or a phase of one, whose real daemons bind ports or spawn beside other
/// tests' ([`REAL_DAEMONS`]).
fn real_daemons_shared() -> RwLockReadGuard<'static, ()> {
    REAL_DAEMONS.read().unwrap_or_else(PoisonError::into_inner)
}

/// For a window in which no other real daemon may bind or spawn ([`REAL_DAEMONS`]).
fn real_daemons_alone() -> RwLockWriteGuard<'static, ()> {
    REAL_DAEMONS.write().unwrap_or_else(PoisonError::into_inner)
}
