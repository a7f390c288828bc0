//! SIGUSR1: the mapping table and the counters dumped to the log, as rdma-core does. The
//! text is taken in the loop (one consistent moment of the table) and logged by the
//! writer thread (`dump/writer.rs`), so a large table does not stall the loop; signals that
//! arrive while a dump is being written make one more dump.

use std::sync::Arc;
use std::time::Duration;

use mio::Waker;

use crate::io_counters::IoCounters;

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

impl Dump {
    /// SIGUSR1: true when a dump should start now; while one is being written, notes that
    /// another one is wanted instead (any number of signals meanwhile make one more dump).
    pub(crate) fn asked(&mut self, counters: &mut IoCounters) -> bool {
        if !self.writer.busy() {
            return true;
        }
        if self.pending {
            counters.dumps_coalesced += 1;
        }
        self.pending = true;
        tracing::info!("a dump is being written; one more follows when it is done");
        false
    }

    /// The writer finished a dump: true when one was asked for meanwhile (start it now).
    pub(crate) fn written(&mut self) -> bool {
        if self.pending && !self.writer.busy() {
            self.pending = false;
            return true;
        }
        false
    }

    /// Hands a dump's text, taken at one moment of the table, to the writer thread, which
    /// logs it (one WARNING per table line, like rdma-core's syslog calls).
    pub(crate) fn submit(&mut self, text: DumpText, counters: &mut IoCounters, taken_in: Duration) {
        counters.dumps += 1;
        tracing::debug!(
            lines = text.table.len(),
            took_ms = crate::logging::log_ms(taken_in),
            "dump text taken; writing it in the background"
        );
        self.writer.submit(text);
    }
}
