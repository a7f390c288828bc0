//! Log rate limiting. The C daemon logs one WARNING per bad datagram, which any
//! host on the network can turn into a syslog flood; here each kind of line is emitted at
//! most once per interval and the suppressed ones are counted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Kinds of remote- or kernel-triggerable log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LogKind {
    BadFraming,
    MalformedNetlink,
    UnknownOp,
    Unregistered,
    NetlinkError,
    RemoveWrongOwner,
    MappingFailed,
    CapReached,
    MalformedPeer,
    RejectUnknown,
    LateReply,
    Protocol,
    NotAllowed,
    Forged,
    WrongSource,
    RemoteInfoBudget,
    UnverifiedAck,
    SourceCapped,
    Replayed,
    Unsolicited,
    Overrun,
    Unauthenticated,
}

/// Allows `burst` events per `window` and counts the ones it holds back. The one rate
/// limit of the project: the core keeps one per [`LogKind`] (burst 1), the daemon's IO
/// shell one per kind of socket error.
#[derive(Debug, Clone)]
pub struct RateLimit {
    window: Duration,
    burst: u32,
    window_start: Option<Instant>,
    emitted: u32,
    suppressed: u64,
}

impl RateLimit {
    /// A limiter allowing `burst` events per `window`.
    pub fn new(window: Duration, burst: u32) -> Self {
        RateLimit {
            window,
            burst,
            window_start: None,
            emitted: 0,
            suppressed: 0,
        }
    }

    /// `Some(n)` if the caller may log now, `n` being how many events were held back since
    /// the last allowed one; `None` if this event must stay silent.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        let new_window = match self.window_start {
            None => true,
            Some(start) => now.saturating_duration_since(start) >= self.window,
        };
        if new_window {
            self.window_start = Some(now);
            self.emitted = 0;
        }
        if self.emitted < self.burst {
            self.emitted += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// One line per kind per interval.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    kinds: HashMap<LogKind, RateLimit>,
}

impl LogLimiter {
    pub(crate) fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            kinds: HashMap::new(),
        }
    }

    /// `Some(suppressed_since_last)` when a line of `kind` may be emitted now.
    pub(crate) fn allow(&mut self, now: Instant, kind: LogKind) -> Option<u64> {
        let interval = self.interval;
        self.kinds
            .entry(kind)
            .or_insert_with(|| RateLimit::new(interval, 1))
            .allow(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(5));
        assert_eq!(l.allow(t0, LogKind::MalformedPeer), Some(0));
        assert_eq!(l.allow(t0, LogKind::MalformedPeer), None);
        assert_eq!(
            l.allow(t0 + Duration::from_secs(1), LogKind::MalformedPeer),
            None
        );
        assert_eq!(
            l.allow(t0, LogKind::UnknownOp),
            Some(0),
            "kinds are independent"
        );
        assert_eq!(
            l.allow(t0 + Duration::from_secs(5), LogKind::MalformedPeer),
            Some(2)
        );
    }

    #[test]
    fn burst_then_silence_then_report() {
        let t0 = Instant::now();
        let mut rl = RateLimit::new(Duration::from_secs(10), 2);
        assert_eq!(rl.allow(t0), Some(0));
        assert_eq!(rl.allow(t0), Some(0));
        assert_eq!(rl.allow(t0), None);
        assert_eq!(rl.allow(t0 + Duration::from_secs(9)), None);
        assert_eq!(rl.allow(t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(rl.allow(t0 + Duration::from_secs(10)), Some(0));
    }
}
