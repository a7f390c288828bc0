//! The core's integration tests, one test binary: a module per subject, each driving the
//! sans-IO core on a virtual clock (`iwpm_testkit::core_host`).

mod core_sequence;
mod fleet_auth;
mod hardening;
mod invariants;
mod kernel_ops;
mod peer;
mod probe;
mod recovery;
mod restore;
mod simulation;
mod snapshots;
