//! A token bucket per source (IPv4 address, IPv6 /64), in a fixed number of slots: what one
//! host may take of a rate that every host shares (REJECTs today).
//!
//! A slot is chosen by a keyed hash of the source, so memory is fixed whatever the number
//! of sources, and an attacker who does not know the key cannot aim its sources at the slot
//! of the host it wants to silence. Two sources that share a slot share its rate, which
//! errs towards the limit, never past the global one it sits under.

use std::hash::{Hash, Hasher};
use std::time::Instant;

use siphasher::sip::SipHasher13;

use crate::exchange::SourceKey;
use crate::token_bucket::TokenBucket;

/// Slots per table: a few kilobytes; collisions only matter between hosts that are both
/// sending at the per-source rate.
const SLOTS: usize = 256;

#[derive(Debug)]
pub(crate) struct SourceBuckets {
    key: [u8; 16],
    slots: Vec<TokenBucket>,
}

impl SourceBuckets {
    /// `per_sec` tokens per second (burst as large) for each source.
    pub(crate) fn per_second(per_sec: u32, key: [u8; 16], now: Instant) -> Self {
        SourceBuckets {
            key,
            slots: vec![TokenBucket::per_second(per_sec, now); SLOTS],
        }
    }

    /// Takes one of `source`'s tokens if it has one.
    pub(crate) fn take(&mut self, now: Instant, source: SourceKey) -> bool {
        let mut h = SipHasher13::new_with_key(&self.key);
        source.hash(&mut h);
        let slot = (h.finish() % SLOTS as u64) as usize;
        self.slots.get_mut(slot).is_some_and(|b| b.take(now))
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
        let mut b = SourceBuckets::per_second(5, [1; 16], t0);
        let loud = source("10.0.0.66");
        assert_eq!((0..100).filter(|_| b.take(t0, loud)).count(), 5);
        // Other hosts (not sharing the loud one's slot) still have theirs.
        let others = (1..=50)
            .map(|i| source(&format!("10.0.1.{i}")))
            .filter(|s| b.take(t0, *s))
            .count();
        assert!(others >= 45, "{others} of 50 other hosts got a token");
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source() {
        let t0 = Instant::now();
        let mut b = SourceBuckets::per_second(2, [1; 16], t0);
        assert!(b.take(t0, source("fd00::1")));
        assert!(b.take(t0, source("fd00::2")));
        assert!(!b.take(t0, source("fd00::3")));
    }
}
