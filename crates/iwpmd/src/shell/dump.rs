//! SIGUSR1: the mapping table and the counters dumped to the log, as rdma-core does. The
//! text is taken in the loop (one consistent moment of the table) and logged by the
//! writer thread (`dump_writer.rs`), so a large table does not stall the loop; signals that
//! arrive while a dump is being written make one more dump.

use std::time::Instant;

use iwpm_core::Surface;

use crate::io_counters::HeldElsewhere;

use crate::dump_writer::{self, DumpText};

use super::Shell;

impl Shell {
    /// SIGUSR1: starts a dump, or, while one is being written, notes that another one is
    /// wanted (any number of signals meanwhile make one more dump).
    pub(super) fn request_dump(&mut self) {
        if self.dump_writer.busy() {
            if self.dump_pending {
                self.counters.dumps_coalesced += 1;
            }
            self.dump_pending = true;
            tracing::info!("a dump is being written; one more follows when it is done");
            return;
        }
        self.start_dump();
    }

    /// The writer finished a dump: start the one asked for meanwhile, if any.
    pub(super) fn dump_written(&mut self) {
        if self.dump_pending && !self.dump_writer.busy() {
            self.dump_pending = false;
            self.start_dump();
        }
    }

    /// Takes the dump's text now (one consistent moment of the table) and hands the logging
    /// (one WARNING per table line, like rdma-core's syslog calls) to the writer thread.
    fn start_dump(&mut self) {
        self.counters.dumps += 1;
        let started = Instant::now();
        let text = DumpText {
            table: self.core.dump_lines(),
            io: self.io_counters_line(),
            core: dump_writer::pairs_line(
                "core counters",
                self.core.stats().iter_on(Surface::Dump),
            ),
        };
        tracing::debug!(
            lines = text.table.len(),
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "dump text taken; writing it in the background"
        );
        self.dump_writer.submit(text);
    }

    /// The `io counters` line of a dump (SIGUSR1's and the control socket's).
    pub(super) fn io_counters_line(&self) -> String {
        let elsewhere = self.held_elsewhere();
        dump_writer::pairs_line("io counters", self.counters.with(&elsewhere, Surface::Dump))
    }

    /// The IO counters the shell's [`crate::io_counters::IoCounters`] does not hold.
    pub(super) fn held_elsewhere(&self) -> HeldElsewhere {
        HeldElsewhere {
            ports_held: u64::try_from(self.reservations.len()).unwrap_or(u64::MAX),
            restart: self.restart.counts(),
        }
    }
}
