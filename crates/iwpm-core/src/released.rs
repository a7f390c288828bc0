//! Exchanges whose verified ACK already released their REMOTE_INFO, remembered for as long
//! as their cookie can verify.
//!
//! A stateless ACCEPT's cookie carries everything its ACK needs, so nothing else stops the
//! same ACK from verifying again: a peer that re-ACKs, or anyone who captured the REQUEST
//! and the ACK and replays both from the victim's address, would release one more REMOTE_INFO
//! (one more kernel entry no connection consumes) per replay for the cookie's whole life.
//! A 64-bit fingerprint of the exchange's binding (`cookie::CookieJar::fingerprint`) is
//! kept here until every cookie for that binding has expired, so each exchange releases
//! at most one REMOTE_INFO however often its ACK comes.
//!
//! Only a verified ACK within its source's allowance adds an entry, so a source adds at
//! most `remote_info_source_burst` plus its rate for [`crate::cookie::COOKIE_LIFETIME`]; the
//! set is also capped in total, and when full the oldest entry is forgotten (the first
//! recorded): a full set never refuses a REMOTE_INFO, and what a forgotten
//! exchange's ACK could release again is still bounded by its source's allowance.
//!
//! No call stalls, however the set churns: the fingerprints sit in a table of their own
//! made once for twice the cap (open addressing, linear probing, so it is at most half
//! full), which never grows, and whose deletions shift the entries after them back instead
//! of leaving tombstones, so it never rehashes either. (A std `HashSet` grown to the cap
//! moved every fingerprint in one call: 1.0-2.7 ms at 57 344 on a 2-core VM; and one
//! churning at a fixed size fills with tombstones until it rehashes or grows anyway.) The
//! queue is made for the cap too. Memory: 16 bytes per fingerprint of the cap in the table
//! (1 MiB at the default 65 536) and 24 in the queue, as the std set and queue took at the
//! cap; pages are touched only as fingerprints come (the table is allocated zeroed).

use std::collections::VecDeque;
use std::time::Instant;

#[derive(Debug)]
pub(crate) struct Released {
    max: usize,
    set: FingerprintSet,
    /// (forget at, fingerprint), in insertion order, which is expiry order.
    order: VecDeque<(Instant, u64)>,
}

impl Released {
    pub(crate) fn new(max: usize) -> Self {
        Released {
            max,
            set: FingerprintSet::new(max),
            order: VecDeque::with_capacity(max),
        }
    }

    /// Has this exchange released its REMOTE_INFO (and may its cookie still verify)?
    pub(crate) fn contains(&mut self, now: Instant, fingerprint: u64) -> bool {
        self.expire(now);
        self.set.contains(fingerprint)
    }

    /// Records a release until `until`. A full set forgets its oldest entry first (the
    /// first recorded) rather than refusing: a full set must not refuse every other
    /// host's REMOTE_INFO (32 real hosts completing 2 048 exchanges each did that for 32 s),
    /// and a forgotten exchange whose ACK comes again still spends its source's allowance.
    /// Always true.
    pub(crate) fn record(&mut self, now: Instant, fingerprint: u64, until: Instant) -> bool {
        self.expire(now);
        while self.set.len() >= self.max {
            let Some((_, oldest)) = self.order.pop_front() else {
                break;
            };
            self.set.remove(oldest);
        }
        if self.set.insert(fingerprint) {
            self.order.push_back((until.max(now), fingerprint));
        }
        true
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(at, fp)) = self.order.front() {
            if at > now {
                break;
            }
            self.order.pop_front();
            self.set.remove(fp);
        }
    }
}

/// A set of 64-bit fingerprints of a fixed size: open addressing with linear probing in a
/// power-of-two table at least twice the most it holds, deletion by backward shift (Knuth's
/// algorithm R: no tombstones). 0 marks an empty slot, so a fingerprint 0 is kept as 1: the
/// two clash as any two 64-bit fingerprints may, and a clash fails closed (an exchange taken
/// for released releases nothing).
#[derive(Debug)]
struct FingerprintSet {
    slots: Vec<u64>,
    /// log2 of the table size.
    bits: u32,
    len: usize,
}

impl FingerprintSet {
    /// A set for at most `max` fingerprints.
    fn new(max: usize) -> Self {
        let size = max.max(1).saturating_mul(2).next_power_of_two().max(2);
        FingerprintSet {
            slots: vec![0; size],
            bits: size.trailing_zeros(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Where `v`'s probe starts: Fibonacci hashing (a keyed fingerprint is uniform already;
    /// this keeps a set of any other numbers spread as well).
    fn home(&self, v: u64) -> usize {
        (v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    /// `Ok(slot)` holding `v`, or `Err(empty slot)` where it would go.
    fn find(&self, v: u64) -> Result<usize, usize> {
        let mut i = self.home(v);
        loop {
            match self.slots[i] {
                0 => return Err(i),
                x if x == v => return Ok(i),
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    fn contains(&self, fingerprint: u64) -> bool {
        self.find(fingerprint.max(1)).is_ok()
    }

    /// Adds a fingerprint; false if it was there, or if the table is half full (the caller
    /// caps what it holds below that).
    fn insert(&mut self, fingerprint: u64) -> bool {
        let v = fingerprint.max(1);
        match self.find(v) {
            Ok(_) => false,
            Err(_) if self.len >= self.slots.len() / 2 => false,
            Err(slot) => {
                self.slots[slot] = v;
                self.len += 1;
                true
            }
        }
    }

    fn remove(&mut self, fingerprint: u64) {
        let Ok(mut hole) = self.find(fingerprint.max(1)) else {
            return;
        };
        self.len -= 1;
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let x = self.slots[j];
            if x == 0 {
                break;
            }
            // `x` may fill the hole if its probe started at or before the hole (going round
            // the table): it is as far or farther from its home than the hole is from `j`.
            let home = self.home(x);
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots[hole] = x;
                hole = j;
            }
        }
        self.slots[hole] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn remembered_until_the_cookie_expires_and_bounded() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut r = Released::new(2);
        assert!(!r.contains(t0, 7));
        assert!(r.record(t0, 7, t0 + s * 32));
        assert!(r.contains(t0 + s * 31, 7));
        assert!(r.record(t0, 8, t0 + s * 40));
        // Full: the oldest (7) is forgotten for the newest.
        assert!(r.record(t0, 9, t0 + s * 40));
        assert!(!r.contains(t0, 7) && r.contains(t0, 8) && r.contains(t0, 9));
        assert_eq!(r.len(), 2);
        assert!(!r.contains(t0 + s * 40, 9), "expired");
        assert_eq!(r.len(), 0);
    }

    /// Filled to its cap and churned through many lifetimes, the set never grows (a growth
    /// moves every entry in one call) and the queue never reallocates.
    #[test]
    fn full_and_churning_it_never_grows() {
        let t0 = Instant::now();
        let mut r = Released::new(4_096);
        let table = (r.set.slots.as_ptr(), r.set.slots.len());
        let queue = r.order.capacity();
        assert_eq!(table.1, 8_192);
        for i in 0..40_000u64 {
            let now = t0 + Duration::from_millis(i);
            // Each remembered for 4 s: 4000 at once, just under the cap.
            let fp = i.wrapping_mul(0x2545_f491_4f6c_dd1d);
            assert!(r.record(now, fp, now + Duration::from_secs(4)));
            assert!(r.contains(now, fp));
            assert!(r.len() <= 4_096);
        }
        assert_eq!((r.set.slots.as_ptr(), r.set.slots.len()), table);
        assert_eq!(r.order.capacity(), queue);
    }

    /// The fixed table answers as a std set does through inserts and removals in any order
    /// (clusters that wrap round the end of the table included), 0 included.
    #[test]
    fn the_fingerprint_table_is_a_set() {
        let mut ours = FingerprintSet::new(32);
        let mut model = std::collections::HashSet::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        for step in 0..200_000u32 {
            // xorshift; few distinct values (so that they collide), 0 among them
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 48).wrapping_mul(0x0100_0000_0000_0001) >> (x % 3);
            if x & 1 == 0 && model.len() < 32 {
                assert_eq!(ours.insert(v), model.insert(v.max(1)), "step {step}");
            } else {
                ours.remove(v);
                model.remove(&v.max(1));
            }
            assert_eq!(ours.len(), model.len());
            let probe = (x >> 8) % 48;
            let probe = probe.wrapping_mul(0x0100_0000_0000_0001) >> (x % 3);
            assert_eq!(
                ours.contains(probe),
                model.contains(&probe.max(1)),
                "step {step}"
            );
        }
        for v in &model {
            assert!(ours.contains(*v));
        }
    }
}
