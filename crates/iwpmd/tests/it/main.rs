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
mod qemu_host;
mod real_kernel_rig;
mod rig_tools;
mod skips;
mod soak;
mod socket_activation;
mod startup;
mod system_suite;
mod user_switch;
