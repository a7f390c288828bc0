//! Kernel requests answered recently, for the reply-once rule (see `core/kernel.rs`).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Most (client, seq) pairs remembered for the reply-once rule.
const MAX_TRACKED_SEQS: usize = 65_536;

/// Kernel requests already answered recently, for the reply-once rule.
#[derive(Debug)]
pub(crate) struct AnsweredSeqs {
    window: Duration,
    set: HashSet<(u8, u32)>,
    order: VecDeque<(Instant, u8, u32)>,
}

impl AnsweredSeqs {
    pub fn new(window: Duration) -> Self {
        AnsweredSeqs {
            window,
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// True the first time (client, seq) is seen within the window.
    pub fn first_time(&mut self, now: Instant, client: u8, seq: u32) -> bool {
        while let Some(&(at, c, s)) = self.order.front() {
            let stale = now.saturating_duration_since(at) >= self.window;
            if !stale && self.order.len() < MAX_TRACKED_SEQS {
                break;
            }
            self.order.pop_front();
            self.set.remove(&(c, s));
        }
        if !self.set.insert((client, seq)) {
            return false;
        }
        self.order.push_back((now, client, seq));
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
}
