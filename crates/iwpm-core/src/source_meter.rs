//! A token bucket per source (an IPv4 address or an IPv6 /64): what one host may take of a
//! rate, exactly, whatever the others do (REJECTs sent to it, ACKs of its that are checked,
//! REMOTE_INFOs its verified ACKs may release).
//!
//! Each source has its own bucket, so a source never shares a rate with another one (a
//! hashed table of slots would let a flooder silence a real host that lands in its slot).
//! The map is bounded, and kept in two generations of at most half the bound each: the
//! sources seen since the last turn, and those seen in the turn before (a source of the
//! older generation seen again moves to the newer one). When the newer generation is full,
//! the older one is forgotten in one step and the newer one takes its place: what goes is
//! every source not seen for a whole generation, the least recently seen ones. A forgotten
//! source comes back with a full bucket, so forgetting only ever errs towards the source;
//! the meters whose bound matters for kernel memory (verified ACKs) only ever see sources
//! that proved their address.
//!
//! No call stalls, however many spoofed sources come (`iwpm-bench spoof`): both
//! generations are sized for their half of the bound when the meter is made, so neither
//! ever grows (a growing table moves every entry at once: 1.4 ms at 14 336 sources on a
//! 2-core VM), the newer one is only inserted into (no tombstones, so no rehash in place),
//! and a turn is one `clear` (a memset of the table's control bytes, ~16 KiB at the default
//! bound) instead of a sort and a pass over the map. The cost: the tables are allocated
//! whole at start, but their pages are touched only as sources arrive (the control bytes,
//! about 100 KiB for a core's three meters, at once); full, they hold what one table of the
//! same bound did.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use std::net::IpAddr;

use crate::token_bucket::TokenBucket;

/// Where a source's unconfirmed exchanges are counted: an IPv4 address, or an IPv6 /64 (one
/// host can hold a whole /64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SourceKey(IpAddr);

impl SourceKey {
    /// One address exactly (an IPv4-mapped IPv6 address as its IPv4 address).
    pub(crate) fn exact(ip: IpAddr) -> Self {
        SourceKey(ip.to_canonical())
    }

    /// True for an IPv6 source (a /64 or an address).
    pub(crate) fn is_ipv6(&self) -> bool {
        self.0.is_ipv6()
    }

    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => SourceKey(IpAddr::V4(v4)),
                None => SourceKey(IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into())),
            },
            v4 => SourceKey(v4),
        }
    }
}

/// Most sources a meter remembers by default.
pub(crate) const MAX_SOURCES: usize = 16_384;

#[derive(Debug)]
pub(crate) struct SourceMeter {
    capacity: u32,
    period: Duration,
    /// Most sources of one generation: half the bound.
    per_generation: usize,
    /// Sources seen since the last turn.
    newer: HashMap<SourceKey, TokenBucket>,
    /// Sources seen in the generation before and not since.
    older: HashMap<SourceKey, TokenBucket>,
}

impl SourceMeter {
    /// `capacity` tokens for each source, one more every `period`; at most `max_sources`
    /// remembered (at least 2).
    pub(crate) fn new(capacity: u32, period: Duration, max_sources: usize) -> Self {
        let per_generation = (max_sources / 2).max(1);
        SourceMeter {
            capacity,
            period,
            per_generation,
            newer: HashMap::with_capacity(per_generation),
            older: HashMap::with_capacity(per_generation),
        }
    }

    /// `per_sec` tokens per second for each source, the burst as large.
    #[cfg(test)]
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
        self.newer.len() + self.older.len()
    }

    fn bucket(&mut self, now: Instant, source: SourceKey) -> &mut TokenBucket {
        // (Looked up twice when present: the borrow checker does not let the first
        // look-up's reference escape the branch.)
        if !self.newer.contains_key(&source) {
            let bucket = self
                .older
                .remove(&source)
                .unwrap_or_else(|| TokenBucket::new(self.capacity, self.period, now));
            if self.newer.len() >= self.per_generation {
                self.turn();
            }
            self.newer.insert(source, bucket);
        }
        self.newer
            .entry(source)
            .or_insert_with(|| TokenBucket::new(self.capacity, self.period, now))
    }

    /// The newer generation becomes the older one; the older one is forgotten. Both keep
    /// their allocations.
    fn turn(&mut self) {
        std::mem::swap(&mut self.newer, &mut self.older);
        self.newer.clear();
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

    /// A flood of new sources never grows a table (a growing table moves every entry in
    /// one call) and keeps the bound; a source not seen for a whole generation is the one
    /// forgotten, a source seen in the last one is kept.
    #[test]
    fn a_flood_never_grows_the_tables() {
        let t0 = Instant::now();
        let mut m = SourceMeter::new(1, Duration::from_secs(3_600), 1_024);
        let capacities = (m.newer.capacity(), m.older.capacity());
        assert!(capacities.0 >= 512 && capacities.1 >= 512, "{capacities:?}");
        let spoofed = |i: u32| SourceKey::of(std::net::IpAddr::V4(i.into()));
        let (old, recent) = (source("10.9.9.1"), source("10.9.9.2"));
        assert!(m.take(t0, old));
        assert!(m.take(t0, recent));
        for i in 0..100_000u32 {
            m.take(t0, spoofed(0x0b00_0000 + i));
            assert!(m.len() <= 1_024);
            if i % 256 == 0 {
                // Seen once per quarter generation: never forgotten.
                assert_eq!(m.available(t0, recent), 0, "at {i}");
            }
        }
        // (The older generation's capacity shrinks by the tombstones its moves leave: it
        // never takes an insert, so they never make it rehash.)
        assert!(m.newer.capacity() <= capacities.0 && m.older.capacity() <= capacities.1);
        assert_eq!(m.available(t0, old), 1, "forgotten: a full bucket again");
    }
}
