//! Peer-protocol exchanges in flight, their keys and their timers.
//!
//! * *Active* exchanges (we connect) are keyed by (association handle, our unmapped local
//!   endpoint = the `cp` every answer echoes).
//! * *Passive* exchanges (a peer connects to us) are keyed by (handle, the datagram's source
//!   address, the `ap` we answered with). The C daemon keys them by (handle, mapped address)
//!   only, so two hosts that happen to pick the same handle collide there; adding the source
//!   keeps them apart while retransmissions from one peer still match.
//!
//! Every exchange has exactly one entry in a `BTreeSet<(Instant, ExchangeId)>`: its next
//! retransmission, or its expiry when nothing is left to resend. `handle_timeout` pops due
//! entries only, so there is no per-tick walk over all exchanges. Every exchange belongs to a
//! live mapping; freeing the mapping cancels its exchanges.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use crate::action::PeerSocket;
use crate::table::MappingId;

/// Names one exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ExchangeId(u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ExchangeKey {
    Active {
        handle: u64,
        cp: Endpoint,
    },
    /// The handle alone is not unique: the C daemon's handle is a heap address, reused as
    /// soon as its record is freed (right after the ACK), while we keep a completed passive
    /// exchange for its whole lifetime to absorb late duplicates. The connecting endpoint
    /// tells a reused handle (a new association) from a retransmission.
    Passive {
        handle: u64,
        from: SocketAddr,
        ap: Endpoint,
        cp: Endpoint,
    },
}

/// Where the active side stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ActiveState {
    /// REQUEST sent, retransmitting, waiting for ACCEPT or REJECT.
    Requesting,
    /// ACCEPT answered (kernel reply and ACK sent); kept to re-ACK duplicate ACCEPTs.
    Acked { ack: Vec<u8> },
}

/// The active side's bookkeeping (boxed: it is large and passive exchanges are the ones a
/// remote flood creates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ActiveQuery {
    /// Kernel client and header seq of the QUERY to answer.
    pub client: u8,
    pub kernel_seq: u32,
    /// After this the kernel has given up; no reply any more.
    pub reply_deadline: Instant,
    /// The QUERY's LOCAL and REMOTE addresses, echoed byte-for-byte in the reply.
    pub local: SockAddrStorage,
    pub remote: SockAddrStorage,
    pub state: ActiveState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExchangeKind {
    Active(Box<ActiveQuery>),
    Passive {
        /// ACK received: ACCEPT retransmission stopped; kept until expiry so late duplicate
        /// REQUESTs do not cause a second REMOTE_INFO.
        acked: bool,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Exchange {
    pub key: ExchangeKey,
    pub mapping: MappingId,
    pub via: PeerSocket,
    pub to: SocketAddr,
    /// Datagram to resend on each tick (REQUEST or ACCEPT); `None` once answered.
    pub retransmit: Option<Vec<u8>>,
    pub retransmits_left: u32,
    pub expires: Instant,
    pub kind: ExchangeKind,
    timer: Instant,
}

impl Exchange {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: ExchangeKey,
        mapping: MappingId,
        via: PeerSocket,
        to: SocketAddr,
        retransmit: Vec<u8>,
        retransmits_left: u32,
        expires: Instant,
        kind: ExchangeKind,
    ) -> Self {
        Exchange {
            key,
            mapping,
            via,
            to,
            retransmit: Some(retransmit),
            retransmits_left,
            expires,
            kind,
            timer: expires,
        }
    }

    /// True while waiting for the other side (REQUEST or ACCEPT still retransmitting).
    pub fn is_waiting(&self) -> bool {
        match &self.kind {
            ExchangeKind::Active(q) => q.state == ActiveState::Requesting,
            ExchangeKind::Passive { acked } => !acked,
        }
    }
}

/// A due timer, as popped by [`Exchanges::pop_due`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    pub id: ExchangeId,
    pub at: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Exchanges {
    entries: HashMap<ExchangeId, Exchange>,
    keys: HashMap<ExchangeKey, ExchangeId>,
    by_mapping: HashMap<MappingId, HashSet<ExchangeId>>,
    timers: BTreeSet<(Instant, ExchangeId)>,
    next_id: u64,
}

impl Exchanges {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn find(&self, key: &ExchangeKey) -> Option<ExchangeId> {
        self.keys.get(key).copied()
    }

    pub fn get(&self, id: ExchangeId) -> Option<&Exchange> {
        self.entries.get(&id)
    }

    pub fn get_mut(&mut self, id: ExchangeId) -> Option<&mut Exchange> {
        self.entries.get_mut(&id)
    }

    /// Inserts `ex` with its first timer at `first_timer`. The key must be free.
    pub fn insert(&mut self, mut ex: Exchange, first_timer: Instant) -> ExchangeId {
        self.next_id += 1;
        let id = ExchangeId(self.next_id);
        ex.timer = first_timer.min(ex.expires);
        self.keys.insert(ex.key, id);
        self.by_mapping.entry(ex.mapping).or_default().insert(id);
        self.timers.insert((ex.timer, id));
        self.entries.insert(id, ex);
        id
    }

    /// Moves the exchange's single timer to `at` (capped at its expiry).
    pub fn reschedule(&mut self, id: ExchangeId, at: Instant) {
        if let Some(ex) = self.entries.get_mut(&id) {
            self.timers.remove(&(ex.timer, id));
            ex.timer = at.min(ex.expires);
            self.timers.insert((ex.timer, id));
        }
    }

    pub fn remove(&mut self, id: ExchangeId) -> Option<Exchange> {
        let ex = self.entries.remove(&id)?;
        self.keys.remove(&ex.key);
        self.timers.remove(&(ex.timer, id));
        if let Some(set) = self.by_mapping.get_mut(&ex.mapping) {
            set.remove(&id);
            if set.is_empty() {
                self.by_mapping.remove(&ex.mapping);
            }
        }
        Some(ex)
    }

    /// Removes every exchange of a mapping being freed; returns how many.
    pub fn remove_for_mapping(&mut self, mapping: MappingId) -> usize {
        let ids: Vec<ExchangeId> = self
            .by_mapping
            .get(&mapping)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        ids.iter().filter(|id| self.remove(**id).is_some()).count()
    }

    /// Next timer, if any.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Pops the earliest timer due at or before `now` (its exchange stays, timer-less until
    /// rescheduled or removed).
    pub fn pop_due(&mut self, now: Instant) -> Option<Due> {
        let &(at, id) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.timers.remove(&(at, id));
        Some(Due { id, at })
    }

    /// Re-arms an exchange whose timer was popped.
    pub fn rearm(&mut self, id: ExchangeId, at: Instant) {
        if let Some(ex) = self.entries.get_mut(&id) {
            ex.timer = at.min(ex.expires);
            self.timers.insert((ex.timer, id));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Exchange> {
        self.entries.values()
    }

    /// Checks keys, mapping index and timers against the entries.
    pub fn check(&self, mapping_exists: impl Fn(MappingId) -> bool) -> Result<(), &'static str> {
        if self.keys.len() != self.entries.len() {
            return Err("exchange key index size differs");
        }
        if self.timers.len() != self.entries.len() {
            return Err("exchange without exactly one timer");
        }
        let indexed: usize = self.by_mapping.values().map(HashSet::len).sum();
        if indexed != self.entries.len() {
            return Err("exchange mapping index size differs");
        }
        for (id, ex) in &self.entries {
            if self.keys.get(&ex.key) != Some(id) {
                return Err("exchange key index points elsewhere");
            }
            if !self.timers.contains(&(ex.timer, *id)) {
                return Err("exchange timer missing");
            }
            if ex.timer > ex.expires {
                return Err("exchange timer after its expiry");
            }
            if !mapping_exists(ex.mapping) {
                return Err("exchange of a freed mapping");
            }
        }
        Ok(())
    }
}

/// Association handles: unique for 2^64 draws and unpredictable without the seed (the C
/// daemon uses a heap address, which leaks memory layout).
#[derive(Debug)]
pub(crate) struct HandleGen {
    seed: u64,
    counter: u64,
}

impl HandleGen {
    pub fn new(seed: u64) -> Self {
        HandleGen { seed, counter: 0 }
    }

    /// Each step is a bijection of the counter (odd multiply, xor, splitmix64 finaliser), so
    /// distinct counters give distinct handles. 0 is skipped.
    pub fn next_handle(&mut self) -> u64 {
        loop {
            self.counter = self.counter.wrapping_add(1);
            let mut z = self.counter.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            if z != 0 {
                return z;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn handles_are_unique_and_seed_dependent() {
        let mut a = HandleGen::new(1);
        let mut b = HandleGen::new(2);
        let xs: HashSet<u64> = (0..10_000).map(|_| a.next_handle()).collect();
        assert_eq!(xs.len(), 10_000);
        assert_ne!(HandleGen::new(1).next_handle(), b.next_handle());
    }

    #[test]
    fn timers_pop_in_order_and_removal_cleans_up() {
        let t0 = Instant::now();
        let mut x = Exchanges::default();
        let ep: Endpoint = "10.0.0.1:5000".parse::<SocketAddr>().unwrap().into();
        let mk = |handle, expires| {
            Exchange::new(
                ExchangeKey::Active { handle, cp: ep },
                MappingId(1),
                PeerSocket::V4Client,
                "10.0.0.2:3935".parse().unwrap(),
                vec![1, 2, 3],
                9,
                expires,
                ExchangeKind::Passive { acked: false },
            )
        };
        let a = x.insert(
            mk(1, t0 + Duration::from_secs(10)),
            t0 + Duration::from_secs(2),
        );
        let b = x.insert(
            mk(2, t0 + Duration::from_secs(10)),
            t0 + Duration::from_secs(1),
        );
        assert_eq!(x.next_timer(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(x.pop_due(t0), None);
        let due = x.pop_due(t0 + Duration::from_secs(5)).unwrap();
        assert_eq!(due.id, b);
        x.rearm(b, t0 + Duration::from_secs(60));
        assert_eq!(
            x.get(b).unwrap().timer,
            t0 + Duration::from_secs(10),
            "capped"
        );
        x.check(|_| true).unwrap();
        assert_eq!(x.remove_for_mapping(MappingId(1)), 2);
        assert!(x.get(a).is_none());
        assert_eq!(x.len(), 0);
        x.check(|_| true).unwrap();
    }
}
