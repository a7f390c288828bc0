//! Shrinking a failing schedule: drop items (chunks first, then one by one) while the run
//! still breaks the same invariant, until no single item can go. The result is named by
//! the seed and the kept indices, which `iwpm-sim --seed S --keep …` replays.

use crate::check::ViolationKind;
use crate::plan::Scenario;

/// A shrunk reproduction.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// Indices into the generated scenario's items.
    pub keep: Vec<usize>,
    /// The scenario with only those items.
    pub scenario: Scenario,
    /// Runs spent shrinking.
    pub runs: usize,
}

fn fails_with(s: &Scenario, kind: ViolationKind) -> bool {
    crate::run(s)
        .violations
        .first()
        .is_some_and(|v| v.kind == kind)
}

/// Shrinks `scenario`, which fails with `kind`, at most `max_runs` re-runs.
pub fn shrink(scenario: &Scenario, kind: ViolationKind, max_runs: usize) -> Shrunk {
    let mut keep: Vec<usize> = (0..scenario.items.len()).collect();
    let mut runs = 0;
    let mut chunk = keep.len().div_ceil(2).max(1);
    loop {
        let mut removed_any = false;
        let mut start = 0;
        while start < keep.len() && runs < max_runs {
            let end = (start + chunk).min(keep.len());
            let candidate: Vec<usize> = keep[..start].iter().chain(&keep[end..]).copied().collect();
            runs += 1;
            if fails_with(&scenario.keep(&candidate), kind) {
                keep = candidate;
                removed_any = true;
            } else {
                start = end;
            }
        }
        if runs >= max_runs || (chunk == 1 && !removed_any) {
            break;
        }
        if !removed_any {
            chunk = (chunk / 2).max(1);
        }
    }
    Shrunk {
        scenario: scenario.keep(&keep),
        keep,
        runs,
    }
}
