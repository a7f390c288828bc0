//! Progress of long work on a terminal: one status line on stderr, redrawn at least once a
//! second (phase, elapsed time, and a bar while connections are opened), so a run of many
//! seconds (`--loss 30`, a full bench) shows it is alive and where it is. Hidden when
//! stderr is not a terminal or the caller asks for quiet (`--json`): logs and pipes get
//! only the report.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The status line of one program (`iwpm-lab`, `iwpm-bench`).
#[derive(Debug)]
pub struct Status {
    bar: ProgressBar,
    name: &'static str,
}

impl Status {
    /// A status line for `name`, drawn on stderr when `wanted` and stderr is a terminal.
    pub fn new(name: &'static str, wanted: bool) -> Status {
        let shown = wanted && std::io::stderr().is_terminal();
        let target = if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        let status = Status { bar, name };
        status.spinner();
        if shown {
            status.bar.enable_steady_tick(Duration::from_secs(1));
        }
        status
    }

    /// True when the line is drawn.
    pub fn is_shown(&self) -> bool {
        !self.bar.is_hidden()
    }

    fn spinner(&self) {
        self.bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {} [{{elapsed}}] {{msg}}",
                self.name
            ))
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
    }

    /// A new phase without a count: "checking both hosts at the peak".
    pub fn phase(&self, what: impl Into<String>) {
        self.bar.unset_length();
        self.bar.set_message(what.into());
        self.spinner();
    }

    /// A new phase of `total` steps shown as a bar ("connecting", 1000).
    pub fn counted(&self, what: &str, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message("");
        self.bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} {} [{{elapsed}}] {what} {{bar:30}} {{pos}}/{{len}} {{msg}}",
                self.name
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
    }

    /// Steps done in the counted phase, and a note after the bar.
    pub fn advance(&self, done: u64, note: impl Into<String>) {
        self.bar.set_position(done);
        self.bar.set_message(note.into());
    }

    /// Prints `line` above the status line (or plainly when it is hidden).
    pub fn println(&self, line: &str) {
        if self.is_shown() {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    /// Removes the line (before the report is printed).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
