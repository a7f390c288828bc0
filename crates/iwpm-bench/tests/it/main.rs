//! The bench's integration tests, one test binary: `iwpm-bench --quick` end to end
//! (`quick`) and its IPv6 churn as an unprivileged user (`unprivileged`), each against
//! the daemon this run built; and a small `iwpm-bench spoof` flood (`spoof`: the core in
//! the bench's own process, no daemon).

mod quick;
mod spoof;
mod unprivileged;
