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
//! set is also capped in total, and when full nothing more is released (failing closed:
//! the kernel then reports the peer's mapped address for that connection).

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

#[derive(Debug)]
pub(crate) struct Released {
    max: usize,
    set: HashSet<u64>,
    /// (forget at, fingerprint), in insertion order, which is expiry order.
    order: VecDeque<(Instant, u64)>,
}

impl Released {
    pub(crate) fn new(max: usize) -> Self {
        Released {
            max,
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// Has this exchange released its REMOTE_INFO (and may its cookie still verify)?
    pub(crate) fn contains(&mut self, now: Instant, fingerprint: u64) -> bool {
        self.expire(now);
        self.set.contains(&fingerprint)
    }

    /// Records a release until `until`; false (nothing recorded) when the set is full.
    pub(crate) fn record(&mut self, now: Instant, fingerprint: u64, until: Instant) -> bool {
        self.expire(now);
        if self.set.len() >= self.max {
            return false;
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
            self.set.remove(&fp);
        }
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
        assert!(!r.record(t0, 9, t0 + s * 40), "full");
        assert!(!r.contains(t0 + s * 32, 7));
        assert!(r.record(t0 + s * 32, 9, t0 + s * 64), "room again");
        assert_eq!(r.len(), 2);
    }
}
