//! Log destination and level. rdma-core logs to syslog only (facility daemon, ident
//! `iwpmd`, with pid); we keep that as the default, use the journal's native protocol when
//! systemd connected stderr to the journal, and log to stderr on request (tests, debugging).
//!
//! The filter sits behind a reload layer so the control socket's `log-level` can replace it
//! at run time ([`set_filter`]) without a restart.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

/// The installed filter's reload handle (set once by [`init`]).
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Why a new filter was not applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FilterError {
    /// The directives do not parse.
    #[error("invalid log filter: {0}")]
    Parse(#[from] tracing_subscriber::filter::ParseError),
    /// No reloadable filter is installed.
    #[error("the log filter cannot be changed: {0}")]
    Reload(String),
}

/// The filter in force, as directives.
pub(crate) fn current_filter() -> Option<String> {
    FILTER.get()?.with_current(ToString::to_string).ok()
}

/// Replaces the filter with `directives` (`RUST_LOG` syntax); returns (previous, new).
pub(crate) fn set_filter(directives: &str) -> Result<(String, String), FilterError> {
    let new = EnvFilter::builder().parse(directives)?;
    let handle = FILTER
        .get()
        .ok_or_else(|| FilterError::Reload("logging is not initialised".into()))?;
    let previous = handle
        .with_current(ToString::to_string)
        .map_err(|e| FilterError::Reload(e.to_string()))?;
    let shown = new.to_string();
    handle
        .reload(new)
        .map_err(|e| FilterError::Reload(e.to_string()))?;
    tracing::callsite::rebuild_interest_cache();
    Ok((previous, shown))
}

fn reloadable(filter: EnvFilter) -> reload::Layer<EnvFilter, Registry> {
    let (layer, handle) = reload::Layer::new(filter);
    let _ = FILTER.set(handle);
    layer
}

/// Where log lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogTarget {
    /// Plain lines on stderr.
    Stderr,
    /// systemd-journald, native protocol.
    Journald,
    /// syslog(3), facility daemon, ident `iwpmd`, with pid.
    Syslog,
}

/// Level for `-v` count: 0 info, 1 debug, 2+ trace.
pub(crate) fn default_level(verbose: u8) -> LevelFilter {
    match verbose {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// Installs the global subscriber. `RUST_LOG` directives apply on top of the `-v` level.
pub(crate) fn init(want_stderr: bool, verbose: u8) -> LogTarget {
    let filter = || {
        EnvFilter::builder()
            .with_default_directive(default_level(verbose).into())
            .from_env_lossy()
    };
    let target = if want_stderr {
        LogTarget::Stderr
    } else if stderr_is_journal() {
        LogTarget::Journald
    } else {
        LogTarget::Syslog
    };
    let registry = tracing_subscriber::registry();
    match target {
        LogTarget::Stderr => {
            registry
                .with(stderr_layer().with_filter(reloadable(filter())))
                .init();
            LogTarget::Stderr
        }
        LogTarget::Journald => match tracing_journald::layer() {
            Ok(j) => {
                let j = j.with_syslog_identifier("iwpmd".to_owned());
                registry.with(j.with_filter(reloadable(filter()))).init();
                LogTarget::Journald
            }
            Err(_) => {
                registry
                    .with(stderr_layer().with_filter(reloadable(filter())))
                    .init();
                LogTarget::Stderr
            }
        },
        LogTarget::Syslog => {
            let options = syslog_tracing::Options::LOG_PID
                | syslog_tracing::Options::LOG_NDELAY
                | syslog_tracing::Options::LOG_CONS;
            match syslog_tracing::Syslog::new(c"iwpmd", options, syslog_tracing::Facility::Daemon) {
                Some(syslog) => {
                    let layer = tracing_subscriber::fmt::layer()
                        .with_writer(syslog)
                        .without_time()
                        .with_level(false)
                        .with_target(false)
                        .with_ansi(false);
                    registry
                        .with(layer.with_filter(reloadable(filter())))
                        .init();
                    LogTarget::Syslog
                }
                None => {
                    registry
                        .with(stderr_layer().with_filter(reloadable(filter())))
                        .init();
                    LogTarget::Stderr
                }
            }
        }
    }
}

/// The socket syslog(3) writes to.
const SYSLOG_SOCKET: &str = "/dev/log";

/// Why log lines sent to syslog would go nowhere, if they would: nothing listens on
/// `/dev/log` (no syslog daemon, no journald socket, a container). syslog(3) drops such
/// lines without a word, so the operator is told before the daemon loses its terminal.
pub(crate) fn syslog_unreachable() -> Option<String> {
    let socket = std::os::unix::net::UnixDatagram::unbound().ok()?;
    socket
        .connect(SYSLOG_SOCKET)
        .err()
        .map(|e| format!("nothing receives syslog at {SYSLOG_SOCKET} ({e})"))
}

fn stderr_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
}

/// True when `JOURNAL_STREAM` names the device and inode of our stderr (systemd's contract
/// for "stderr is connected to the journal").
fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    journal_stream_matches(&value, stat.st_dev, stat.st_ino)
}

fn journal_stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let mut parts = value.splitn(2, ':');
    let (Some(d), Some(i)) = (parts.next(), parts.next()) else {
        return false;
    };
    matches!((d.parse::<u64>(), i.parse::<u64>()), (Ok(d), Ok(i)) if d == dev && i == ino)
}

/// A duration as milliseconds for a log field, to the microsecond: `0.174`, not the
/// float noise of `0.17394700000000002`.
pub(crate) fn log_ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    /// Issue 43, friction 13: `elapsed_ms=0.17394700000000002` in a log line.
    #[test]
    fn log_milliseconds_are_rounded_to_the_microsecond() {
        use std::time::Duration;
        assert_eq!(
            super::log_ms(Duration::from_nanos(173_947)).to_string(),
            "0.174"
        );
        assert_eq!(
            super::log_ms(Duration::from_millis(1500)).to_string(),
            "1500"
        );
        assert_eq!(
            super::log_ms(Duration::from_nanos(1_234_567)).to_string(),
            "1.235"
        );
    }

    use super::*;

    #[test]
    fn journal_stream_parsing() {
        assert!(journal_stream_matches("8:1234", 8, 1234));
        assert!(!journal_stream_matches("8:1234", 8, 1235));
        assert!(!journal_stream_matches("8", 8, 1234));
        assert!(!journal_stream_matches("x:y", 8, 1234));
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(default_level(0), LevelFilter::INFO);
        assert_eq!(default_level(1), LevelFilter::DEBUG);
        assert_eq!(default_level(5), LevelFilter::TRACE);
    }
}
