//! A token bucket per source (an IPv4 address or an IPv6 /64): what one host may take of a
//! rate, exactly, whatever the others do (REJECTs sent to it, ACKs of its that are checked,
//! REMOTE_INFOs its verified ACKs may release).
//!
//! Each source has its own bucket, so a source never shares a rate with another one (a
//! hashed table of slots would let a flooder silence a real host that lands in its slot).
//! The map is bounded: when it is full, the least recently seen half goes in one pass
//! (O(1) amortised per call, as in `peer_book`). A forgotten source comes back with a full
//! bucket, so forgetting only ever errs towards the source; the meters whose bound matters
//! for kernel memory (verified ACKs) only ever see sources that proved their address.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::exchange::SourceKey;
use crate::token_bucket::TokenBucket;

/// Most sources a meter remembers by default.
pub(crate) const MAX_SOURCES: usize = 16_384;

#[derive(Debug)]
pub(crate) struct SourceMeter {
    capacity: u32,
    period: Duration,
    max_sources: usize,
    buckets: HashMap<SourceKey, (TokenBucket, Instant)>,
}

impl SourceMeter {
    /// `capacity` tokens for each source, one more every `period`.
    pub(crate) fn new(capacity: u32, period: Duration, max_sources: usize) -> Self {
        SourceMeter {
            capacity,
            period,
            max_sources: max_sources.max(2),
            buckets: HashMap::new(),
        }
    }

    /// `per_sec` tokens per second for each source, the burst as large.
    pub(crate) fn per_second(per_sec: u32, max_sources: usize) -> Self {
        let period = Duration::from_secs(1)
            .checked_div(per_sec.max(1))
            .unwrap_or(Duration::from_secs(1));
        SourceMeter::new(per_sec, period, max_sources)
    }

    /// Takes one of `source`'s tokens if it has one.
    pub(crate) fn take(&mut self, now: Instant, source: SourceKey) -> bool {
        self.bucket(now, source).take(now)
    }

    /// Tokens `source` has now.
    pub(crate) fn available(&mut self, now: Instant, source: SourceKey) -> u32 {
        self.bucket(now, source).available(now)
    }

    /// Sources remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }

    fn bucket(&mut self, now: Instant, source: SourceKey) -> &mut TokenBucket {
        if !self.buckets.contains_key(&source) && self.buckets.len() >= self.max_sources {
            self.forget_half();
        }
        let (capacity, period) = (self.capacity, self.period);
        let entry = self
            .buckets
            .entry(source)
            .or_insert_with(|| (TokenBucket::new(capacity, period, now), now));
        entry.1 = now;
        &mut entry.0
    }

    /// Forgets the least recently seen half (by a cut instant, so the result does not
    /// depend on the map's order).
    fn forget_half(&mut self) {
        let mut seen: Vec<Instant> = self.buckets.values().map(|(_, t)| *t).collect();
        let mid = seen.len() / 2;
        let (_, cut, _) = seen.select_nth_unstable(mid);
        let cut = *cut;
        self.buckets.retain(|_, (_, t)| *t > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::IpAddr;

    fn source(s: &str) -> SourceKey {
        SourceKey::of(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn one_source_spends_only_its_own_tokens() {
        let t0 = Instant::now();
        let mut m = SourceMeter::per_second(5, MAX_SOURCES);
        let loud = source("10.0.0.66");
        assert_eq!((0..100).filter(|_| m.take(t0, loud)).count(), 5);
        // Every other host still has all of its own.
        for i in 1..=500 {
            let s = source(&format!("10.1.{}.{}", i / 250, 1 + i % 250));
            assert_eq!((0..10).filter(|_| m.take(t0, s)).count(), 5, "host {i}");
        }
        // A second later the loud one has its rate again, no more.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..100).filter(|_| m.take(t1, loud)).count(), 5);
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source() {
        let t0 = Instant::now();
        let mut m = SourceMeter::per_second(2, MAX_SOURCES);
        assert!(m.take(t0, source("fd00::1")));
        assert!(m.take(t0, source("fd00::2")));
        assert!(!m.take(t0, source("fd00::3")));
        assert!(m.take(t0, source("fd00:0:0:1::3")));
    }

    #[test]
    fn the_map_stays_bounded_and_keeps_the_recent_sources() {
        let t0 = Instant::now();
        let mut m = SourceMeter::new(1, Duration::from_secs(3_600), 64);
        let real = source("10.9.9.9");
        assert!(m.take(t0, real));
        for i in 0..10_000u32 {
            let now = t0 + Duration::from_millis(u64::from(i));
            let spoofed = source(&format!("fd00:{:x}::1", i));
            m.take(now, spoofed);
            if i % 8 == 0 {
                m.available(now, real);
            }
            assert!(m.len() <= 64);
        }
        // The real host, seen recently throughout, kept its spent bucket.
        assert!(!m.take(t0 + Duration::from_millis(10_000), real));
    }
}
