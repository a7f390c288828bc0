//! Per-peer tallies and a short history of finished local exchanges, for the control
//! socket's `peers` command. Both are bounded: a host on the network can make us create
//! entries, so the tally map evicts its least recently seen peer when full, and the history
//! is a fixed-size ring. Nothing here changes what the daemon does; it only remembers.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use iwpm_report::PeerTally;

/// Most peers tallied at once.
pub(crate) const MAX_PEERS: usize = 1024;
/// Most finished exchanges remembered.
pub(crate) const RECENT_LEN: usize = 64;

/// How a local (connecting) exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeOutcome {
    /// The peer sent ACCEPT.
    Accepted,
    /// The peer sent REJECT.
    Rejected,
    /// No answer within the exchange's lifetime.
    TimedOut,
}

/// One finished local exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecentExchange {
    /// The peer daemon asked.
    pub peer: IpAddr,
    /// How it ended.
    pub outcome: ExchangeOutcome,
    /// REQUEST retransmissions it needed.
    pub retransmissions: u32,
    /// From the first REQUEST to the end.
    pub took: Duration,
    /// When it ended.
    pub ended_at: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct PeerBook {
    peers: HashMap<IpAddr, (PeerTally, Instant)>,
    recent: VecDeque<RecentExchange>,
}

impl PeerBook {
    /// The tally of `ip`, created if new. When the map is full, the least recently seen
    /// half goes in one pass: a flood of new (spoofed) sources then costs O(1) amortised
    /// per datagram, not a scan of the map each.
    pub(crate) fn tally(&mut self, ip: IpAddr, now: Instant) -> &mut PeerTally {
        if !self.peers.contains_key(&ip) && self.peers.len() >= MAX_PEERS {
            let mut seen: Vec<Instant> = self.peers.values().map(|(_, t)| *t).collect();
            let mid = seen.len() / 2;
            let (_, cut, _) = seen.select_nth_unstable(mid);
            let cut = *cut;
            self.peers.retain(|_, (_, t)| *t > cut);
        }
        let entry = self.peers.entry(ip).or_insert((PeerTally::default(), now));
        entry.1 = now;
        &mut entry.0
    }

    pub(crate) fn finished(&mut self, ex: RecentExchange) {
        if self.recent.len() >= RECENT_LEN {
            self.recent.pop_front();
        }
        self.recent.push_back(ex);
    }

    /// Every tallied peer with when it was last seen.
    pub(crate) fn peers(&self) -> impl Iterator<Item = (IpAddr, PeerTally, Instant)> + '_ {
        self.peers.iter().map(|(ip, (t, seen))| (*ip, *t, *seen))
    }

    /// Finished exchanges, oldest first.
    pub(crate) fn recent(&self) -> impl Iterator<Item = &RecentExchange> {
        self.recent.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn bounded() {
        let t0 = Instant::now();
        let mut book = PeerBook::default();
        for i in 0..(MAX_PEERS as u32 + 10) {
            let ip = IpAddr::V4(Ipv4Addr::from(i));
            book.tally(ip, t0 + Duration::from_millis(u64::from(i)))
                .requests += 1;
        }
        // Full at MAX_PEERS: the older half (and the median) went, then ten more came.
        assert_eq!(book.peers().count(), MAX_PEERS / 2 - 1 + 10);
        let oldest_kept = IpAddr::V4(Ipv4Addr::from(MAX_PEERS as u32 / 2 + 1));
        assert!(book.peers().all(|(ip, _, _)| ip >= oldest_kept));
        for _ in 0..(RECENT_LEN + 5) {
            book.finished(RecentExchange {
                peer: IpAddr::V4(Ipv4Addr::LOCALHOST),
                outcome: ExchangeOutcome::TimedOut,
                retransmissions: 9,
                took: Duration::from_secs(10),
                ended_at: t0,
            });
        }
        assert_eq!(book.recent().count(), RECENT_LEN);
    }
}
