//! Replay memory: every sealed datagram we believed, by its MAC, for as long as its stamp is
//! inside the clock window. A sealed datagram seen before is a replay (a sender never stamps
//! two datagrams alike, `crate::admission::auth`), so an on-path host that captured our
//! traffic gets nothing by sending it again.
//!
//! Only datagrams whose MAC verified are remembered, so only fleet members fill this
//! memory, never a spoofer. It is still bounded ([`MAX_REMEMBERED`]): when full, the
//! oldest entry goes and the *floor* rises to its stamp, and from then on nothing stamped
//! at or below the floor is believed. A replay therefore never passes: it is either
//! remembered, or at or below the floor, or outside the window. The cost of a full memory
//! falls on late datagrams only (stamped before the floor, which trails the newest
//! traffic by at least [`MAX_REMEMBERED`] datagrams).

use std::collections::VecDeque;

// (MACs that verified: keyed output no peer chooses)
use crate::int_hash::IntSet;

/// Sealed datagrams remembered at most: 65 536 × about 40 bytes (a set entry and a queue
/// entry) ≈ 2.6 MB at the very most, reached only by 65 536 authenticated datagrams within
/// twice the clock window (550 per second for 120 s).
pub(crate) const MAX_REMEMBERED: usize = 65_536;

/// Why a sealed datagram with a good MAC is not believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stale {
    /// Its MAC was seen before.
    Replayed,
    /// Stamped at or below the floor of a memory that had to forget.
    BelowFloor,
}

/// The MACs of believed datagrams, oldest first.
#[derive(Debug)]
pub(crate) struct ReplayMemory {
    seen: IntSet<u64>,
    /// (MAC prefix, stamp) in arrival order.
    order: VecDeque<(u64, u64)>,
    floor_us: u64,
    cap: usize,
}

impl ReplayMemory {
    pub(crate) fn new(cap: usize) -> Self {
        ReplayMemory {
            seen: IntSet::default(),
            order: VecDeque::new(),
            floor_us: 0,
            cap: cap.max(1),
        }
    }

    /// Remembers a datagram (its MAC's first 8 bytes, its stamp) unless it is stale.
    /// `expired_before_us`: entries stamped before this are outside the window now, and
    /// are forgotten (the window check refuses their replays).
    pub(crate) fn remember(
        &mut self,
        mac_prefix: u64,
        stamp_us: u64,
        expired_before_us: u64,
    ) -> Result<(), Stale> {
        while let Some(&(mac, stamp)) = self.order.front() {
            if stamp >= expired_before_us {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&mac);
        }
        if stamp_us <= self.floor_us {
            return Err(Stale::BelowFloor);
        }
        if self.seen.contains(&mac_prefix) {
            return Err(Stale::Replayed);
        }
        if self.order.len() >= self.cap {
            if let Some((mac, stamp)) = self.order.pop_front() {
                self.seen.remove(&mac);
                self.floor_us = self.floor_us.max(stamp);
            }
        }
        self.seen.insert(mac_prefix);
        self.order.push_back((mac_prefix, stamp_us));
        Ok(())
    }

    /// Refuses, from now on, everything stamped at or before `floor_us` (the floor only
    /// rises).
    pub(crate) fn raise_floor(&mut self, floor_us: u64) {
        self.floor_us = self.floor_us.max(floor_us);
    }

    /// Entries held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_is_believed_once() {
        let mut m = ReplayMemory::new(8);
        assert_eq!(m.remember(1, 100, 0), Ok(()));
        assert_eq!(m.remember(1, 100, 0), Err(Stale::Replayed));
        assert_eq!(m.remember(2, 100, 0), Ok(()));
    }

    #[test]
    fn a_full_memory_raises_its_floor_so_no_forgotten_datagram_passes() {
        let mut m = ReplayMemory::new(4);
        for i in 1..=4 {
            m.remember(i, i * 10, 0).unwrap();
        }
        // The fifth pushes out the first (stamp 10): the floor is 10.
        m.remember(5, 50, 0).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m.remember(1, 10, 0), Err(Stale::BelowFloor));
        assert_eq!(m.remember(9, 10, 0), Err(Stale::BelowFloor));
        assert_eq!(m.remember(2, 20, 0), Err(Stale::Replayed));
        assert_eq!(m.remember(6, 11, 0), Ok(()));
    }

    #[test]
    fn entries_outside_the_window_are_forgotten() {
        let mut m = ReplayMemory::new(8);
        m.remember(1, 100, 0).unwrap();
        m.remember(2, 200, 0).unwrap();
        m.remember(3, 300, 150).unwrap();
        assert_eq!(m.len(), 2);
        // (the window check refuses stamp 100 before this memory is asked)
        assert_eq!(m.remember(1, 100, 150), Ok(()));
    }
}
