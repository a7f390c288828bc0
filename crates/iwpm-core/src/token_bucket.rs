//! A token bucket on the core's virtual clock: `capacity` tokens, one more every `period`.
//! It meters what a remote host can make us do (REJECTs sent, REMOTE_INFO entries the
//! kernel may have to keep) without any timer of its own: refills are computed lazily.

use std::time::{Duration, Instant};

/// Tokens available now, refilled lazily from the last refill instant.
#[derive(Clone, Debug)]
pub(crate) struct TokenBucket {
    capacity: u32,
    tokens: u32,
    period: Duration,
    last_refill: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub(crate) fn new(capacity: u32, period: Duration, now: Instant) -> Self {
        TokenBucket {
            capacity,
            tokens: capacity,
            period,
            last_refill: now,
        }
    }

    /// A full bucket holding `per_sec` tokens, refilled at `per_sec` per second.
    pub(crate) fn per_second(per_sec: u32, now: Instant) -> Self {
        let period = Duration::from_secs(1)
            .checked_div(per_sec.max(1))
            .unwrap_or(Duration::from_secs(1));
        TokenBucket::new(per_sec, period, now)
    }

    fn refill(&mut self, now: Instant) {
        if self.tokens >= self.capacity || self.period.is_zero() {
            self.tokens = self.capacity;
            self.last_refill = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.last_refill);
        let earned = elapsed.as_nanos() / self.period.as_nanos();
        if earned == 0 {
            return;
        }
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        let missing = self.capacity - self.tokens;
        if earned >= missing {
            self.tokens = self.capacity;
            self.last_refill = now;
            return;
        }
        self.tokens += earned;
        // Keep the remainder so refills do not drift with the call pattern.
        self.last_refill = self
            .period
            .checked_mul(earned)
            .and_then(|d| self.last_refill.checked_add(d))
            .unwrap_or(now);
    }

    /// Takes one token if there is one.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// Gives a token back (capped at the capacity).
    pub(crate) fn refund(&mut self) {
        self.tokens = (self.tokens + 1).min(self.capacity);
    }

    /// Tokens available at `now`.
    pub(crate) fn available(&mut self, now: Instant) -> u32 {
        self.refill(now);
        self.tokens
    }

    /// Most tokens the bucket holds.
    /// Tokens left as of the last refill (no clock read): changes only when one is taken
    /// or refunded, or on a refill.
    pub(crate) fn tokens_before_refill(&self) -> u32 {
        self.tokens
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_refills_and_refunds() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut b = TokenBucket::new(3, s * 10, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0 + s * 9), "nothing before a period");
        assert!(b.take(t0 + s * 10), "one per period");
        assert!(!b.take(t0 + s * 19));
        b.refund();
        assert!(b.take(t0 + s * 19), "refunded");
        assert_eq!(b.available(t0 + s * 1000), 3, "capped");
        b.refund();
        assert_eq!(b.available(t0 + s * 1000), 3, "refund capped");
    }

    #[test]
    fn per_second_and_zero_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::per_second(100, t0);
        let taken = (0..1000).filter(|_| b.take(t0)).count();
        assert_eq!(taken, 100);
        assert_eq!(b.available(t0 + Duration::from_millis(500)), 50);
        let mut z = TokenBucket::new(0, Duration::from_secs(1), t0);
        assert!(!z.take(t0 + Duration::from_secs(100)));
    }
}
