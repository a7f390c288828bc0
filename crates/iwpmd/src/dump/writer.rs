//! Writes SIGUSR1 dumps on a helper thread, so that a table of 100 000 mappings (400 000
//! syslog lines, seconds on a slow log sink) never stalls the event loop.
//!
//! The loop takes a snapshot of the text (a fast, in-memory step, so the dump is one
//! consistent moment of the table) and hands it over; the writer logs it line by line and
//! wakes the loop when it is done. One dump is written at a time: a SIGUSR1 arriving while
//! one is being written is coalesced into a single further dump, taken once the current
//! one is finished.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::Waker;

/// Log target of every dump line (the lab enables `iwpmd::dump=debug`).
pub(crate) const TARGET: &str = "iwpmd::dump";

/// One dump's text.
#[derive(Debug, Default)]
pub(crate) struct DumpText {
    /// The mapping table and core state, rdma-core's lines first (logged as warnings, as
    /// rdma-core does).
    pub(crate) table: Vec<String>,
    /// The IO counters line (info), `name=value` pairs.
    pub(crate) io: String,
    /// The core counters line (debug), `name=value` pairs from `iwpm_core::Stats::iter`.
    pub(crate) core: String,
}

/// Why the writer is not available.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DumpWriterError {
    /// The thread could not be started.
    #[error("cannot start the dump writer thread: {0}")]
    Spawn(std::io::Error),
}

/// The helper thread and its hand-over channel.
#[derive(Debug)]
pub(crate) struct DumpWriter {
    tx: Option<mpsc::Sender<DumpText>>,
    busy: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DumpWriter {
    /// Starts the thread; `waker` is woken after each dump is written.
    pub(crate) fn start(waker: Arc<Waker>) -> Result<Self, DumpWriterError> {
        let (tx, rx) = mpsc::channel::<DumpText>();
        let busy = Arc::new(AtomicBool::new(false));
        let flag = busy.clone();
        let thread = std::thread::Builder::new()
            .name("iwpmd-dump".into())
            .spawn(move || {
                for text in rx {
                    write(&text);
                    drop(text);
                    flag.store(false, Ordering::Release);
                    if let Err(e) = waker.wake() {
                        tracing::error!(error = %e, "dump writer cannot wake the event loop");
                    }
                }
            })
            .map_err(DumpWriterError::Spawn)?;
        Ok(DumpWriter {
            tx: Some(tx),
            busy,
            thread: Some(thread),
        })
    }

    /// True while a dump is being written.
    pub(crate) fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Hands `text` to the thread. The caller checks [`DumpWriter::busy`] first; a dump
    /// submitted while busy is queued behind the current one.
    pub(crate) fn submit(&self, text: DumpText) {
        self.busy.store(true, Ordering::Release);
        let sent = self.tx.as_ref().map(|tx| tx.send(text));
        if !matches!(sent, Some(Ok(()))) {
            // The thread is gone (it only ends when the channel closes, or by a panic in
            // the log subscriber): nothing will be written.
            self.busy.store(false, Ordering::Release);
            tracing::error!("the dump writer thread is gone; dump dropped");
        }
    }

    /// Waits up to `timeout` for the dump in progress to be written (at exit, so that a
    /// SIGTERM right after a SIGUSR1 still leaves the whole dump in the log).
    pub(crate) fn finish(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.busy() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.busy() {
            tracing::warn!("exiting with a SIGUSR1 dump still being written; its end is lost");
            return;
        }
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `label: a=1 b=2 ...`: counters as `name=value` pairs, which tools parse by name (unlike
/// `Debug` text, whose shape follows the struct).
pub(crate) fn pairs_line<'a>(
    label: &str,
    pairs: impl IntoIterator<Item = (&'a str, u64)>,
) -> String {
    let mut line = format!("{label}:");
    for (name, value) in pairs {
        line.push(' ');
        line.push_str(name);
        line.push('=');
        line.push_str(&value.to_string());
    }
    line
}

fn write(text: &DumpText) {
    for line in &text.table {
        tracing::warn!(target: TARGET, "{line}");
    }
    tracing::info!(target: TARGET, "{}", text.io);
    tracing::debug!(target: TARGET, "{}", text.core);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_line_prints_name_value_pairs() {
        assert_eq!(
            pairs_line("io counters", [("a", 1), ("b", 22)]),
            "io counters: a=1 b=22"
        );
        assert_eq!(pairs_line("empty", []), "empty:");
        let stats = iwpm_core::Stats {
            retransmissions: 7,
            ..iwpm_core::Stats::default()
        };
        let line = pairs_line("core counters", stats.iter());
        assert!(
            line.starts_with("core counters: netlink_in_reg_pid=0 "),
            "{line}"
        );
        assert!(line.contains(" retransmissions=7 "), "{line}");
    }
}
