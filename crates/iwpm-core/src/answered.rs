//! Kernel requests answered recently, for the reply-once rule (see `machine/kernel.rs`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::int_hash::IntSet;

/// Most (client, seq) pairs remembered for the reply-once rule.
const MAX_TRACKED_SEQS: usize = 65_536;

/// One remembered request: 12 bytes, as a burst of listens keeps tens of thousands.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// Milliseconds since `AnsweredSeqs::epoch`, wrapping (ages are only compared within
    /// the window, and a pause longer than the window forgets everything).
    at_ms: u32,
    seq: u32,
    client: u8,
}

fn key(client: u8, seq: u32) -> u64 {
    (u64::from(client) << 32) | u64::from(seq)
}

/// Kernel requests already answered recently, for the reply-once rule.
#[derive(Debug)]
pub(crate) struct AnsweredSeqs {
    window: Duration,
    /// Origin of the compact timestamps, and the last request seen.
    epoch: Option<(Instant, Instant)>,
    set: IntSet<u64>,
    order: VecDeque<Seen>,
}

impl AnsweredSeqs {
    pub(crate) fn new(window: Duration) -> Self {
        AnsweredSeqs {
            window,
            epoch: None,
            set: IntSet::default(),
            order: VecDeque::new(),
        }
    }

    /// True the first time (client, seq) is seen within the window.
    pub(crate) fn first_time(&mut self, now: Instant, client: u8, seq: u32) -> bool {
        let (epoch, last) = *self.epoch.get_or_insert((now, now));
        if now.saturating_duration_since(last) >= self.window {
            self.set.clear();
            self.order.clear();
        }
        // a `now` older than the last one counts as the last one (entries never look
        // stale, or wrap, because time was fed out of order)
        let now = now.max(last);
        let at_ms = now.saturating_duration_since(epoch).as_millis() as u32;
        let window_ms = u32::try_from(self.window.as_millis()).unwrap_or(u32::MAX);
        self.epoch = Some((epoch, now));
        while let Some(&old) = self.order.front() {
            let stale = at_ms.wrapping_sub(old.at_ms) >= window_ms;
            if !stale && self.order.len() < MAX_TRACKED_SEQS {
                break;
            }
            self.order.pop_front();
            self.set.remove(&key(old.client, old.seq));
        }
        if !self.set.insert(key(client, seq)) {
            return false;
        }
        self.order.push_back(Seen { at_ms, seq, client });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_seqs_forget_after_the_window() {
        let t0 = Instant::now();
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        assert!(a.first_time(t0, 2, 7));
        assert!(!a.first_time(t0 + Duration::from_secs(19), 2, 7));
        assert!(a.first_time(t0, 3, 7), "per client");
        assert!(
            a.first_time(t0 + Duration::from_secs(20), 2, 7),
            "window passed"
        );
    }

    #[test]
    fn answered_seqs_are_bounded() {
        let t0 = Instant::now();
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        for s in 0..(MAX_TRACKED_SEQS as u32 + 10) {
            assert!(a.first_time(t0, 2, s));
        }
        assert!(a.order.len() <= MAX_TRACKED_SEQS);
        assert_eq!(a.set.len(), a.order.len());
    }

    #[test]
    fn a_pause_longer_than_the_window_forgets_everything() {
        let t0 = Instant::now();
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        assert!(a.first_time(t0, 2, 7));
        // 50 days later the compact clock has wrapped; the pause alone clears the memory
        let later = t0 + Duration::from_secs(50 * 86_400);
        assert!(a.first_time(later, 2, 7));
        assert!(!a.first_time(later + Duration::from_secs(1), 2, 7));
    }

    #[test]
    fn time_fed_out_of_order_keeps_what_was_answered() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        assert!(a.first_time(t0, 2, 7));
        assert!(a.first_time(t0 - Duration::from_secs(5), 2, 8));
        assert!(!a.first_time(t0 + Duration::from_secs(1), 2, 7));
        assert!(!a.first_time(t0 + Duration::from_secs(1), 2, 8));
    }
}
