//! One moment of the daemon, read-only: what the control socket's answers and the SIGUSR1
//! dump are made of. The shell lends it (`Shell::snapshot`) between two inputs, so each
//! answer and each dump is consistent with itself, and neither the control component nor
//! the dump needs the shell.

use std::time::Instant;

use iwpm_core::Core;
use iwpm_report::Surface;

use crate::dump::pairs_line;
use crate::dump::writer::DumpText;
use crate::fleet_keys::FleetKeyState;
use crate::io_counters::{HeldElsewhere, IoCounters};

/// The core, the shell's counters and the fleet key state, borrowed at one moment.
pub(crate) struct Snapshot<'a> {
    /// The state machine (its read-only snapshot methods).
    pub(crate) core: &'a Core,
    /// The shell's own IO counters.
    pub(crate) counters: &'a IoCounters,
    /// The IO counters the port lender and the restart machinery keep.
    pub(crate) elsewhere: HeldElsewhere,
    /// Where the fleet keys came from, when a key file is configured.
    pub(crate) fleet: Option<&'a FleetKeyState>,
}

impl Snapshot<'_> {
    /// The `io counters` line of a dump (SIGUSR1's and the control socket's).
    pub(crate) fn io_counters_line(&self) -> String {
        pairs_line(
            "io counters",
            self.counters.with(&self.elsewhere, Surface::Dump),
        )
    }

    /// The `core counters` line of a dump.
    pub(crate) fn core_counters_line(&self) -> String {
        pairs_line("core counters", self.core.stats().iter_on(Surface::Dump))
    }

    /// SIGUSR1's dump, for the writer thread: the table as rdma-core logs it, then the
    /// counters.
    pub(crate) fn dump(&self) -> DumpText {
        DumpText {
            table: self.core.dump_lines(),
            io: self.io_counters_line(),
            core: self.core_counters_line(),
        }
    }

    /// The control socket's `dump`: the same lines with each mapping's age at `now`,
    /// newline-separated.
    pub(crate) fn dump_text(&self, now: Instant) -> String {
        let mut lines = self.core.dump_lines_at(now);
        lines.push(self.io_counters_line());
        lines.push(self.core_counters_line());
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}
