//! The bench's integration tests, one test binary: `iwpm-bench --quick` end to end
//! (`quick`) and its IPv6 churn as an unprivileged user (`unprivileged`), each against
//! the daemon this run built.

mod quick;
mod unprivileged;
