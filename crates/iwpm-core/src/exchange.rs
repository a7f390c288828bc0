//! Peer-protocol exchanges in flight, their keys, their timers and their budgets.
//!
//! * *Active* exchanges (we connect) are keyed by (association handle, our unmapped local
//!   endpoint = the `cp` every answer echoes).
//! * *Passive* exchanges (a peer connects to us) are keyed by (handle, the datagram's source
//!   address, the `ap` we answered with, the `cp` it asked for). The C daemon keys them by
//!   (handle, mapped address) only, so two hosts that pick the same handle collide there.
//!
//! The two kinds have separate budgets, so remote traffic can never refuse a local connect:
//! active exchanges are capped (`max_exchanges`; a QUERY beyond it fails), passive ones are
//! never refused for lack of room but evict the oldest *confirmed* passive exchange (its
//! verified ACK came), then the oldest unconfirmed one. Unconfirmed passive exchanges are also
//! counted per source (an IPv4 address or an IPv6 /64) for the per-source quota. Most passive
//! exchanges never get an entry at all: see `machine::peer::passive` (echo cookies).
//!
//! Every exchange has exactly one entry in a `BTreeSet<(Instant, ExchangeId)>`: its next
//! retransmission, or its expiry when nothing is left to resend. [`Exchanges`] keeps that
//! rule itself (callers say what happened, not where the timer goes). Timers pop in order,
//! so there is no per-tick walk over all exchanges. Every exchange belongs to a live mapping;
//! freeing the mapping cancels its exchanges.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::netlink::QueryMappingReply;
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};
use rand::rngs::ChaCha20Rng;
use rand::{Rng, SeedableRng};

use crate::action::PeerSocket;
use crate::int_hash::IntMap;
use crate::mapping_id::MappingId;
use crate::source_meter::SourceKey;

/// Names one exchange; larger ids are newer.
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
    Requesting {
        request: Vec<u8>,
        retransmits_left: u32,
    },
    /// ACCEPT answered (ACK and kernel reply sent); kept to re-ACK a few duplicate ACCEPTs
    /// (the peer lost our ACK). The count bounds what a replayed ACCEPT can make us send.
    Acked { ack: Vec<u8>, re_acks_left: u32 },
    /// ACCEPT answered with an ACK, but the ACCEPT said the peer's REMOTE_INFO waits for
    /// that ACK: the kernel's answer is held until the peer's delivery notice
    /// ([`crate::cookie`]) or until `waits_left` short waits have passed (each re-sends the
    /// ACK), so that our connection does not overtake the REMOTE_INFO.
    AwaitingNotice {
        ack: Vec<u8>,
        reply: Box<QueryMappingReply>,
        client: u8,
        waits_left: u32,
        /// Whether the ACCEPT was sealed, and so each ACK again is.
        trust: crate::admission::Trust,
    },
}

/// The active side's bookkeeping.
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

/// The kernel's REMOTE_INFO for a passive exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RemoteInfo {
    /// Sent when the REQUEST came, on a budget token the ACK gives back.
    SentOnToken,
    /// Sent when the REQUEST came, which was authenticated (a fleet member's): no token
    /// taken, none to give back.
    SentAuthenticated,
    /// Settled: token returned, or sent on the ACK.
    Settled,
}

/// The passive side's bookkeeping. We never retransmit an ACCEPT on our own: the active
/// side retransmits its REQUEST every second, and each duplicate REQUEST gets the ACCEPT
/// again (at most `resends_left` more times, at most once per half interval). So what we send
/// never exceeds what we receive, and a spoofed REQUEST costs one datagram, not ten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PassiveAnswer {
    pub accept: Vec<u8>,
    pub resends_left: u32,
    /// A duplicate REQUEST before this gets no new ACCEPT.
    pub next_resend: Instant,
    pub source: SourceKey,
    pub confirmed: bool,
    /// When the ACK came; a REQUEST with the same key a full retransmission interval later
    /// is a new association (C reuses its handles), not a late duplicate.
    pub confirmed_at: Option<Instant>,
    pub remote_info: RemoteInfo,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExchangeKind {
    Active(Box<ActiveQuery>),
    Passive(Box<PassiveAnswer>),
}

#[derive(Clone, Debug)]
pub(crate) struct Exchange {
    pub key: ExchangeKey,
    pub mapping: MappingId,
    pub via: PeerSocket,
    pub to: SocketAddr,
    pub kind: ExchangeKind,
    expires: Instant,
    timer: Instant,
}

impl Exchange {
    pub(crate) fn new(
        key: ExchangeKey,
        mapping: MappingId,
        (via, to): (PeerSocket, SocketAddr),
        expires: Instant,
        kind: ExchangeKind,
    ) -> Self {
        Exchange {
            key,
            mapping,
            via,
            to,
            kind,
            expires,
            timer: expires,
        }
    }

    /// True while waiting for the other side (REQUEST retransmitting, or ACCEPT not ACKed).
    pub(crate) fn is_waiting(&self) -> bool {
        match &self.kind {
            ExchangeKind::Active(q) => matches!(q.state, ActiveState::Requesting { .. }),
            ExchangeKind::Passive(p) => !p.confirmed,
        }
    }

    pub(crate) fn expires(&self) -> Instant {
        self.expires
    }

    fn unconfirmed_source(&self) -> Option<SourceKey> {
        match &self.kind {
            ExchangeKind::Passive(p) if !p.confirmed => Some(p.source),
            _ => None,
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
    by_mapping: IntMap<MappingId, HashSet<ExchangeId>>,
    timers: BTreeSet<(Instant, ExchangeId)>,
    active: usize,
    /// Passive exchanges without an ACK yet, oldest first (eviction order).
    unconfirmed: BTreeSet<ExchangeId>,
    /// Passive exchanges with an ACK, oldest first.
    confirmed: BTreeSet<ExchangeId>,
    /// Unconfirmed passive exchanges per source.
    per_source: HashMap<SourceKey, u32>,
    /// The same, oldest first within each source (what the source quota evicts).
    by_source: BTreeSet<(SourceKey, ExchangeId)>,
    /// Confirmed passive exchanges, oldest first within each source (a source makes room
    /// among its own).
    confirmed_by_source: BTreeSet<(SourceKey, ExchangeId)>,
    next_id: u64,
}

impl Exchanges {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Local (active) exchanges.
    pub(crate) fn active_len(&self) -> usize {
        self.active
    }

    /// Remote (passive) exchanges.
    pub(crate) fn passive_len(&self) -> usize {
        self.unconfirmed.len() + self.confirmed.len()
    }

    /// Remote exchanges no ACK has confirmed yet.
    pub(crate) fn unconfirmed_len(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Unconfirmed remote exchanges from `source`.
    pub(crate) fn unconfirmed_from(&self, source: SourceKey) -> u32 {
        self.per_source.get(&source).copied().unwrap_or(0)
    }

    /// The oldest confirmed passive exchange from `source`.
    pub(crate) fn oldest_confirmed_from(&self, source: SourceKey) -> Option<ExchangeId> {
        first_of(&self.confirmed_by_source, source)
    }

    /// The oldest unconfirmed passive exchange of any source.
    pub(crate) fn oldest_unconfirmed(&self) -> Option<ExchangeId> {
        self.unconfirmed.first().copied()
    }

    /// Every exchange (unordered), for snapshots.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Exchange> {
        self.entries.values()
    }

    pub(crate) fn find(&self, key: &ExchangeKey) -> Option<ExchangeId> {
        self.keys.get(key).copied()
    }

    pub(crate) fn get(&self, id: ExchangeId) -> Option<&Exchange> {
        self.entries.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: ExchangeId) -> Option<&mut Exchange> {
        self.entries.get_mut(&id)
    }

    /// Inserts `ex`; its first timer is `first_timer` (capped at its expiry). The key must
    /// be free.
    pub(crate) fn insert(&mut self, mut ex: Exchange, first_timer: Instant) -> ExchangeId {
        self.next_id += 1;
        let id = ExchangeId(self.next_id);
        ex.timer = first_timer.min(ex.expires);
        self.keys.insert(ex.key, id);
        self.by_mapping.entry(ex.mapping).or_default().insert(id);
        self.timers.insert((ex.timer, id));
        match &ex.kind {
            ExchangeKind::Active(_) => self.active += 1,
            ExchangeKind::Passive(p) if p.confirmed => {
                self.confirmed.insert(id);
                self.confirmed_by_source.insert((p.source, id));
            }
            ExchangeKind::Passive(p) => {
                self.unconfirmed.insert(id);
                *self.per_source.entry(p.source).or_default() += 1;
                self.by_source.insert((p.source, id));
            }
        }
        self.entries.insert(id, ex);
        id
    }

    /// Marks a passive exchange confirmed (its ACK came). Returns false if it was already.
    pub(crate) fn confirm(&mut self, id: ExchangeId) -> bool {
        let Some(ex) = self.entries.get_mut(&id) else {
            return false;
        };
        let ExchangeKind::Passive(p) = &mut ex.kind else {
            return false;
        };
        if p.confirmed {
            return false;
        }
        p.confirmed = true;
        let source = p.source;
        self.unconfirmed.remove(&id);
        self.confirmed.insert(id);
        self.confirmed_by_source.insert((source, id));
        self.forget_source(source, id);
        true
    }

    /// The active exchange got its answer: no more retransmissions; it lives on until its
    /// expiry to re-ACK duplicates.
    pub(crate) fn answered(&mut self, id: ExchangeId, state: ActiveState) {
        let Some(ex) = self.entries.get_mut(&id) else {
            return;
        };
        if let ExchangeKind::Active(q) = &mut ex.kind {
            q.state = state;
        }
        let expires = ex.expires;
        self.move_timer(id, expires);
    }

    /// As [`Exchanges::answered`], with the exchange's timer at `at` instead of its end.
    pub(crate) fn answered_until(&mut self, id: ExchangeId, state: ActiveState, at: Instant) {
        self.answered(id, state);
        self.move_timer(id, at);
    }

    fn move_timer(&mut self, id: ExchangeId, at: Instant) {
        if let Some(ex) = self.entries.get_mut(&id) {
            self.timers.remove(&(ex.timer, id));
            ex.timer = at.min(ex.expires);
            self.timers.insert((ex.timer, id));
        }
    }

    fn forget_source(&mut self, source: SourceKey, id: ExchangeId) {
        self.by_source.remove(&(source, id));
        if let Some(n) = self.per_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    pub(crate) fn remove(&mut self, id: ExchangeId) -> Option<Exchange> {
        let ex = self.entries.remove(&id)?;
        self.keys.remove(&ex.key);
        self.timers.remove(&(ex.timer, id));
        if let Some(set) = self.by_mapping.get_mut(&ex.mapping) {
            set.remove(&id);
            if set.is_empty() {
                self.by_mapping.remove(&ex.mapping);
            }
        }
        match &ex.kind {
            ExchangeKind::Active(_) => self.active -= 1,
            ExchangeKind::Passive(p) => {
                if self.confirmed.remove(&id) {
                    self.confirmed_by_source.remove(&(p.source, id));
                }
                if self.unconfirmed.remove(&id) {
                    if let Some(source) = ex.unconfirmed_source() {
                        self.forget_source(source, id);
                    }
                }
            }
        }
        Some(ex)
    }

    /// Removes every exchange of a mapping being freed; returns how many.
    pub(crate) fn remove_for_mapping(&mut self, mapping: MappingId) -> usize {
        // Most mappings (every listener of a listen storm) never had an exchange.
        if self.by_mapping.is_empty() {
            return 0;
        }
        let ids: Vec<ExchangeId> = self
            .by_mapping
            .get(&mapping)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        ids.iter().filter(|id| self.remove(**id).is_some()).count()
    }

    /// Next timer, if any.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Pops the earliest timer due at or before `now` (its exchange stays, timer-less until
    /// [`Exchanges::rearm`] or [`Exchanges::remove`]).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Due> {
        let &(at, id) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.timers.remove(&(at, id));
        Some(Due { id, at })
    }

    /// Re-arms an exchange whose timer was popped (capped at its expiry).
    pub(crate) fn rearm(&mut self, id: ExchangeId, at: Instant) {
        if let Some(ex) = self.entries.get_mut(&id) {
            ex.timer = at.min(ex.expires);
            self.timers.insert((ex.timer, id));
        }
    }

    /// Checks keys, mapping index, timers and budgets against the entries.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn check(
        &self,
        mapping_exists: impl Fn(MappingId) -> bool,
    ) -> Result<(), &'static str> {
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
        if self.active + self.passive_len() != self.entries.len() {
            return Err("exchange kind counts differ");
        }
        let per_source: u32 = self.per_source.values().sum();
        if per_source as usize != self.unconfirmed.len() {
            return Err("per-source counts differ from unconfirmed exchanges");
        }
        if self.by_source.len() != self.unconfirmed.len() {
            return Err("per-source order differs from unconfirmed exchanges");
        }
        if self.confirmed_by_source.len() != self.confirmed.len() {
            return Err("per-source order differs from confirmed exchanges");
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
            if let ExchangeKind::Passive(p) = &ex.kind {
                let listed = if p.confirmed {
                    self.confirmed.contains(id)
                } else {
                    self.unconfirmed.contains(id)
                };
                if !listed {
                    return Err("passive exchange missing from its eviction list");
                }
            }
        }
        Ok(())
    }
}

/// The first (oldest) id of `source` in a per-source order.
fn first_of(set: &BTreeSet<(SourceKey, ExchangeId)>, source: SourceKey) -> Option<ExchangeId> {
    set.range((source, ExchangeId(0))..)
        .next()
        .filter(|(s, _)| *s == source)
        .map(|(_, id)| *id)
}

/// Association handles: a ChaCha20 stream keyed by the shell's 32 random bytes. Without the
/// key, earlier handles say nothing about later ones (the C daemon sends heap addresses,
/// which also leak its memory layout). 0 is skipped; a repeat within the exchange lifetime
/// is as likely as a 64-bit collision, and would still differ in its `cp`.
#[derive(Debug)]
pub(crate) struct HandleGen {
    rng: ChaCha20Rng,
}

impl HandleGen {
    pub(crate) fn new(key: [u8; 32]) -> Self {
        HandleGen {
            rng: ChaCha20Rng::from_seed(key),
        }
    }

    pub(crate) fn next_handle(&mut self) -> u64 {
        loop {
            let h = self.rng.next_u64();
            if h != 0 {
                return h;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn handles_are_distinct_and_key_dependent() {
        let mut a = HandleGen::new([1; 32]);
        let xs: HashSet<u64> = (0..10_000).map(|_| a.next_handle()).collect();
        assert_eq!(xs.len(), 10_000);
        assert_ne!(
            HandleGen::new([1; 32]).next_handle(),
            HandleGen::new([2; 32]).next_handle()
        );
        // Consecutive handles share no simple relation (the old generator was a bijection
        // of a counter: h(n+1) - h(n) was not constant, but xor-ing the finaliser out was).
        let mut g = HandleGen::new([7; 32]);
        let (h1, h2, h3) = (g.next_handle(), g.next_handle(), g.next_handle());
        assert_ne!(h2.wrapping_sub(h1), h3.wrapping_sub(h2));
    }

    fn passive(source: &str, confirmed: bool) -> ExchangeKind {
        ExchangeKind::Passive(Box::new(PassiveAnswer {
            accept: vec![1],
            resends_left: 9,
            next_resend: Instant::now(),
            source: SourceKey::of(source.parse().unwrap()),
            confirmed,
            confirmed_at: None,
            remote_info: RemoteInfo::Settled,
        }))
    }

    #[test]
    fn timers_pop_in_order_and_removal_cleans_up() {
        let t0 = Instant::now();
        let mut x = Exchanges::default();
        let ep: Endpoint = "10.0.0.1:5000".parse::<SocketAddr>().unwrap().into();
        let to = (PeerSocket::V4Client, "10.0.0.2:3935".parse().unwrap());
        let mk = |handle, expires| {
            Exchange::new(
                ExchangeKey::Active { handle, cp: ep },
                MappingId(1),
                to,
                expires,
                passive("10.0.0.2", false),
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
        assert_eq!(
            x.unconfirmed_from(SourceKey::of("10.0.0.2".parse().unwrap())),
            2
        );
        assert!(x.confirm(a));
        assert!(!x.confirm(a), "once");
        assert_eq!(
            x.unconfirmed_from(SourceKey::of("10.0.0.2".parse().unwrap())),
            1
        );
        assert_eq!(
            x.oldest_confirmed_from(SourceKey::of("10.0.0.2".parse().unwrap())),
            Some(a)
        );
        assert_eq!(x.oldest_unconfirmed(), Some(b));
        x.check(|_| true).unwrap();
        assert_eq!(x.remove_for_mapping(MappingId(1)), 2);
        assert!(x.get(a).is_none());
        assert_eq!(x.len(), 0);
        assert_eq!(
            x.unconfirmed_from(SourceKey::of("10.0.0.2".parse().unwrap())),
            0
        );
        x.check(|_| true).unwrap();
    }

    #[test]
    fn ipv6_sources_count_per_64() {
        let a = SourceKey::of("fd00:1:2:3::1".parse().unwrap());
        let b = SourceKey::of("fd00:1:2:3:ffff::9".parse().unwrap());
        let c = SourceKey::of("fd00:1:2:4::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            SourceKey::of("::ffff:10.0.0.1".parse().unwrap()),
            SourceKey::of("10.0.0.1".parse().unwrap())
        );
    }
}
