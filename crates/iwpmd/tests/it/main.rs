//! The daemon's integration tests, one test binary: the real `iwpmd` as a process (over a
//! kernel link the test plays), its command line, packaging and documents, and the
//! real-kernel rig and system test wrappers. A module per subject; a test that must not
//! share its process runs alone in one of its own (`iwpm_testkit::alone`).

mod cli;
mod compat_report;
mod doc_commands;
mod dump_load;
mod emulator_path;
mod exhaustion;
mod fleet_keys;
mod kernel;
mod modes;
mod packaging;
mod peers;
mod process;
mod real_kernel_rig;
mod skips;
mod soak;
mod socket_activation;
mod startup;
mod system_suite;
mod user_switch;

/// Held by the real-kernel rig and the system test while their VMs run: both fill the 2
/// cores of a CI machine, and the rig's judged times fail when a Debian VM boots beside it.
static QEMU_HOST: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The host's QEMU turn (a test that panicked while holding it leaves it usable).
fn qemu_host() -> std::sync::MutexGuard<'static, ()> {
    QEMU_HOST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
