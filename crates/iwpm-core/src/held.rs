//! REMOTE_INFOs held for a ten-bit ACK: a port-mapped IPv6 peer that does not echo our
//! extension block (rdma-core) gets an ACCEPT whose cookie has no room for its mapped port,
//! so when its REMOTE_INFO cannot go at once the port waits here until the peer's ACK
//! verifies. The entry is named by the exchange's fingerprint (a keyed MAC of source,
//! handle, `cp` and `ap`, `crate::cookie`), so no one who does not know the peer's handle
//! can name, take or end it.
//!
//! Why its own compact table (32 bytes an entry and a queue slot, not an exchange entry of
//! a few hundred): so that [`MAX_HELD`] is large enough that spoofed REQUESTs at
//! 1 000 per second, from any sources, the victim's own address or /64 included, push out
//! no entry younger than `MAX_HELD / 1 000` = 16 s, longer than any exchange lives (10 s):
//! a burst of 1 000 connects from one rdma-core host is held in full, and a flood costs
//! at most `MAX_HELD` entries (about 0.8 MB). There is no per-source quota, because a
//! per-source limit is what a spoofer spends with its victim's address.

use std::collections::VecDeque;
use std::time::Instant;

// (fingerprints are keyed MACs: no peer chooses them)
use crate::int_hash::IntMap;

/// Held REMOTE_INFOs at most, from every source together.
pub(crate) const MAX_HELD: usize = 16_384;

/// What a held REMOTE_INFO needs beyond what its ACK carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    /// The peer's mapped `cp` port (the REQUEST's reserved port).
    pub(crate) mapped_cp_port: u16,
    pub(crate) expires: Instant,
}

/// The held REMOTE_INFOs, by fingerprint, oldest first.
#[derive(Debug)]
pub(crate) struct HeldRemoteInfos {
    entries: IntMap<u64, Held>,
    /// (fingerprint, expiry) per hold, oldest first; a stale slot (its entry taken, or
    /// held again later) is skipped when it reaches the front.
    order: VecDeque<(u64, Instant)>,
    cap: usize,
}

/// What [`HeldRemoteInfos::hold`] had to give up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// Older entries dropped before their ACK came, for room.
    pub(crate) evicted: u32,
}

impl HeldRemoteInfos {
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        // Made whole at once (pages touched only as entries come): a table growing under a
        // flood moves every entry in one call (0.5 ms at 14 336 in `iwpm-bench spoof`).
        // Twice the cap leaves room for the tombstones of first-in-first-out churn.
        let mut entries = IntMap::default();
        entries.reserve(cap * 2);
        HeldRemoteInfos {
            entries,
            order: VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// Holds the entry `fingerprint`. A retransmitted REQUEST finds it held and changes
    /// nothing (its life counts from the first REQUEST, like the exchange's).
    pub(crate) fn hold(&mut self, now: Instant, fingerprint: u64, held: Held) -> Pushed {
        let mut pushed = Pushed::default();
        if self
            .entries
            .get(&fingerprint)
            .is_some_and(|h| h.expires > now)
        {
            return pushed;
        }
        while let Some(&(fp, expires)) = self.order.front() {
            let live = self.entries.get(&fp).is_some_and(|h| h.expires == expires);
            if live && expires > now && self.order.len() < self.cap {
                break;
            }
            self.order.pop_front();
            if live {
                self.entries.remove(&fp);
                if expires > now {
                    pushed.evicted += 1;
                }
            }
        }
        self.entries.insert(fingerprint, held);
        self.order.push_back((fingerprint, held.expires));
        pushed
    }

    /// Takes the entry `fingerprint` if it is held and not expired.
    pub(crate) fn take(&mut self, now: Instant, fingerprint: u64) -> Option<Held> {
        let held = self.entries.remove(&fingerprint)?;
        (held.expires > now).then_some(held)
    }

    /// Entries held (some may have expired, not yet swept).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn held(port: u16, expires: Instant) -> Held {
        Held {
            mapped_cp_port: port,
            expires,
        }
    }

    #[test]
    fn held_once_taken_once() {
        let t = Instant::now();
        let mut h = HeldRemoteInfos::new(4);
        h.hold(t, 1, held(41000, t + Duration::from_secs(10)));
        assert_eq!(h.take(t, 1).map(|h| h.mapped_cp_port), Some(41000));
        assert_eq!(h.take(t, 1), None);
    }

    #[test]
    fn expired_entries_are_not_given_and_are_swept_first() {
        let t = Instant::now();
        let mut h = HeldRemoteInfos::new(2);
        h.hold(t, 1, held(1, t + Duration::from_secs(1)));
        assert_eq!(h.take(t + Duration::from_secs(1), 1), None);
        h.hold(t, 2, held(2, t + Duration::from_secs(1)));
        let later = t + Duration::from_secs(2);
        let pushed = h.hold(later, 3, held(3, later + Duration::from_secs(1)));
        assert_eq!(pushed.evicted, 0, "an expired entry is no loss");
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn a_full_table_gives_up_its_oldest_and_never_grows() {
        let t = Instant::now();
        let end = t + Duration::from_secs(10);
        let mut h = HeldRemoteInfos::new(3);
        let mut evicted = 0;
        for fp in 0..10u64 {
            evicted += h.hold(t, fp, held(fp as u16, end)).evicted;
            // retransmissions hold the same entry again
            evicted += h.hold(t, fp, held(fp as u16, end)).evicted;
            assert!(h.len() <= 3 && h.order.len() <= 3, "{fp}");
        }
        assert_eq!(h.take(t, 9).map(|h| h.mapped_cp_port), Some(9));
        assert_eq!(h.take(t, 0), None);
        assert_eq!(evicted, 7);
    }
}
