//! The emulator's integration tests, one test binary: the fabric driven by scripted
//! daemons (`fabric`, over `fake_daemon`), and the real `iwpmd` against it (`real_daemon`,
//! `zero_gap`).

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod fabric;
mod fake_daemon;
mod real_daemon;
mod zero_gap;

/// Held by every test that runs a real `iwpmd`: shared by those that may run side by side,
/// alone by the `zero_gap` restarts. While such a daemon is down another daemon's port-0
/// binds could take one of its freed ports (the very hazard the FD store removes), and a
/// process spawned while the test passes descriptors to the next daemon would inherit
/// them, so neither may happen in the middle of one.
static REAL_DAEMONS: RwLock<()> = RwLock::new(());

/// For a test whose real daemons may run beside other tests' ([`REAL_DAEMONS`]).
fn real_daemons_shared() -> RwLockReadGuard<'static, ()> {
    REAL_DAEMONS.read().unwrap_or_else(PoisonError::into_inner)
}

/// For a test during which no other real daemon may run ([`REAL_DAEMONS`]).
fn real_daemons_alone() -> RwLockWriteGuard<'static, ()> {
    REAL_DAEMONS.write().unwrap_or_else(PoisonError::into_inner)
}
