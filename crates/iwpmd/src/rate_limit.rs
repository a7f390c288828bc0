//! Log rate limiting for remote- or kernel-triggerable warnings, so a flood of bad datagrams
//! cannot flood syslog (the C daemon logs every one).

use std::time::{Duration, Instant};

/// Allows `burst` events per `window`; counts the ones it suppresses.
#[derive(Debug)]
pub struct RateLimit {
    window: Duration,
    burst: u32,
    window_start: Option<Instant>,
    emitted: u32,
    suppressed: u64,
}

impl RateLimit {
    /// A limiter allowing `burst` log lines per `window`.
    pub fn new(window: Duration, burst: u32) -> Self {
        RateLimit {
            window,
            burst,
            window_start: None,
            emitted: 0,
            suppressed: 0,
        }
    }

    /// `Some(n)` if the caller may log now, `n` being how many events were suppressed since
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

#[cfg(test)]
mod tests {
    use super::*;

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
