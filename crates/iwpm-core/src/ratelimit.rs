//! Per-kind log rate limiting. The C daemon logs one WARNING per bad datagram, which any
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
    Quota,
    WrongSource,
    RemoteInfoBudget,
    Unsolicited,
    Overrun,
}

/// Remembers, per kind, when a line was last emitted and how many were held back since.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    last: HashMap<LogKind, (Instant, u64)>,
}

impl LogLimiter {
    pub fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            last: HashMap::new(),
        }
    }

    /// `Some(suppressed_since_last)` when a line of `kind` may be emitted now.
    pub fn allow(&mut self, now: Instant, kind: LogKind) -> Option<u64> {
        match self.last.get_mut(&kind) {
            Some((at, held)) if now.saturating_duration_since(*at) < self.interval => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                let n = *held;
                *at = now;
                *held = 0;
                Some(n)
            }
            None => {
                self.last.insert(kind, (now, 0));
                Some(0)
            }
        }
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
}
