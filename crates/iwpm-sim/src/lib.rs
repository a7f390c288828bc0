//! A deterministic fleet simulator for the port mapper.
//!
//! N hosts, each an emulated kernel ([`iwpm_kernel_emu::kernel::KernelIwpm`]), a daemon
//! ([`iwpm_core::Host`], as the real daemon runs its core) with its port reservations and
//! state file, and a connection
//! manager, share one virtual clock and a simulated network in one process, without
//! sockets or threads. A seed draws the run ([`plan::Scenario::generate`]): an MPI-style
//! all-to-all job, churn, listeners coming and going, network faults (loss, duplication,
//! reordering, delay spikes, partitions), daemon crashes with restart from the state file
//! and the kernel's replay, clock jumps, and a hostile host running the HARDENING.md
//! step-9 attacks (squatting a host's source, blind ACKs); fleet keys (keyed, unkeyed and
//! mixed fleets, rotations, wrong keys, skewed clocks) with an on-path attacker and
//! spoofers aimed at a victim.
//!
//! After every step the invariants of [`check`] are checked across hosts; a failing seed
//! is shrunk to the fewest schedule items that still fail the same way ([`shrink`]).
//! Same seed, same run: nothing reads the wall clock or iterates a randomly seeded hash
//! map in a way that changes the order of events.
//!
//! ```
//! use iwpm_sim::{plan::Profile, run_seed};
//! let outcome = run_seed(7, Profile::Sweep);
//! assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
//! assert!(outcome.stats.established > 0);
//! ```
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
mod cm;
pub mod host;
mod hostile;
mod ledger;
mod onpath;
mod peer;
pub mod plan;
pub mod rng;
pub mod scale;
pub mod shrink;
pub mod world;

pub use check::{Violation, ViolationKind};
pub use world::{Gaps, RunStats, World};

use plan::{Profile, Scenario};

/// What one run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The first broken invariant, if any (the run stops there).
    pub violations: Vec<Violation>,
    /// Known, still open findings this run hit (not failures; see `docs/simulator.md`).
    pub known: Vec<Violation>,
    /// Counts.
    pub stats: RunStats,
}

/// Runs one scenario.
pub fn run(scenario: &Scenario) -> Outcome {
    let (mut violations, known, stats) = World::new(scenario.clone()).run();
    // Item 5's spoofers: the victim's service against the same seed without them.
    if violations.is_empty() && scenario.has_victim_spoofs() {
        let mut quiet = World::new(scenario.without_victim_spoofs());
        // (the same victim, counted the same way)
        quiet.victim = scenario.items.iter().find_map(|i| match i.what {
            plan::What::VictimSpoof { victim, .. } => victim,
            _ => None,
        });
        let (_, _, quiet) = quiet.run();
        if std::env::var_os("IWPM_SIM_DEBUG").is_some() {
            eprintln!(
                "victim service: REJECTs {} / {} quiet, established {} / {}, peer found {} / {}",
                stats.victim_rejects,
                quiet.victim_rejects,
                stats.victim_established,
                quiet.victim_established,
                stats.rdma_peer_found,
                quiet.rdma_peer_found
            );
        }
        if let Some(detail) = check::service_drop(&stats, &quiet) {
            violations.push(Violation {
                kind: ViolationKind::Service,
                at: stats.virtual_time,
                host: None,
                detail,
            });
        }
    }
    Outcome {
        violations,
        known,
        stats,
    }
}

/// Generates and runs the scenario of `seed`.
pub fn run_seed(seed: u64, profile: Profile) -> Outcome {
    run(&Scenario::generate(seed, profile))
}
