//! The simulator's integration tests, one test binary: the CI seed set and the random
//! sweep (`seeds`), one seed per finding (`findings`), and each invariant failing when the
//! faults may not explain trouble (`invariants`), and the sweep's summary accounting for
//! every gap (`summary`).

mod findings;
mod invariants;
mod keys;
mod seeds;
mod summary;
