//! SIGUSR1: the mapping table and the counters dumped to the log, as rdma-core does. The
//! text is taken in the loop (one consistent moment of the table) and logged by the
//! writer thread (`dump/writer.rs`), so a large table does not stall the loop; signals that
//! arrive while a dump is being written make one more dump.

use std::sync::Arc;
use std::time::{Duration, Instant};

use iwpm_report::Surface;
use mio::Waker;

use crate::io_counters::HeldElsewhere;
use crate::shell::Shell;

use self::writer::{DumpText, DumpWriter, DumpWriterError};

pub(crate) mod writer;

pub(crate) use self::writer::pairs_line;

/// The dump component: its writer thread, and whether another dump was asked for while
/// one is being written.
#[derive(Debug)]
pub(crate) struct Dump {
    writer: DumpWriter,
    /// A SIGUSR1 arrived while a dump was being written: dump again when it is done.
    pending: bool,
}

impl Dump {
    /// Starts the writer thread; `waker` wakes the loop when a dump is written.
    pub(crate) fn start(waker: Arc<Waker>) -> Result<Self, DumpWriterError> {
        Ok(Dump {
            writer: DumpWriter::start(waker)?,
            pending: false,
        })
    }

    /// At exit: waits up to `timeout` for the dump in progress (see [`DumpWriter::finish`]).
    pub(crate) fn finish(&mut self, timeout: Duration) {
        self.writer.finish(timeout);
    }
}

impl Shell {
    /// SIGUSR1: starts a dump, or, while one is being written, notes that another one is
    /// wanted (any number of signals meanwhile make one more dump).
    pub(crate) fn request_dump(&mut self) {
        if self.dump.writer.busy() {
            if self.dump.pending {
                self.counters.dumps_coalesced += 1;
            }
            self.dump.pending = true;
            tracing::info!("a dump is being written; one more follows when it is done");
            return;
        }
        self.start_dump();
    }

    /// The writer finished a dump: start the one asked for meanwhile, if any.
    pub(crate) fn dump_written(&mut self) {
        if self.dump.pending && !self.dump.writer.busy() {
            self.dump.pending = false;
            self.start_dump();
        }
    }

    /// Takes the dump's text now (one consistent moment of the table) and hands the logging
    /// (one WARNING per table line, like rdma-core's syslog calls) to the writer thread.
    fn start_dump(&mut self) {
        self.counters.dumps += 1;
        let started = Instant::now();
        let text = DumpText {
            table: self.host.core().dump_lines(),
            io: self.io_counters_line(),
            core: pairs_line(
                "core counters",
                self.host.core().stats().iter_on(Surface::Dump),
            ),
        };
        tracing::debug!(
            lines = text.table.len(),
            took_ms = crate::logging::log_ms(started.elapsed()),
            "dump text taken; writing it in the background"
        );
        self.dump.writer.submit(text);
    }

    /// The `io counters` line of a dump (SIGUSR1's and the control socket's).
    pub(crate) fn io_counters_line(&self) -> String {
        let elsewhere = self.held_elsewhere();
        pairs_line("io counters", self.counters.with(&elsewhere, Surface::Dump))
    }

    /// The IO counters the shell's [`crate::io_counters::IoCounters`] does not hold.
    pub(crate) fn held_elsewhere(&self) -> HeldElsewhere {
        let ports = self.host.ports();
        HeldElsewhere {
            reserve_no_fd: ports.no_fd,
            reserve_no_port: ports.no_port,
            ports_held: u64::try_from(ports.held().len()).unwrap_or(u64::MAX),
            restart: self.restart.counts(),
        }
    }
}
