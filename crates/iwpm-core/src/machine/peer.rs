//! Peer side (UDP 3935): the active (connecting) and passive (accepting) state machines.
//!
//! Active: QUERY → REQUEST, retransmitted every `retransmit_interval` up to
//! `max_retransmits` times, dropped after `exchange_lifetime`. ACCEPT → ACK + QUERY reply;
//! the exchange then lives on to re-ACK a few duplicate ACCEPTs. REJECT → QUERY reply with
//! error 16. Passive: REQUEST → loose look-up of a listener → ACCEPT + REMOTE_INFO to the
//! mapping's owner, or a REJECT. Answers go out on the socket the datagram came in on.
//!
//! # Defences (what a host on the network can make us do, and the bound)
//!
//! Anyone can send UDP to port 3935 with any source address, so every answer is metered:
//!
//! * **No identity forgery.** A REQUEST whose connecting address (`cp`) and mapped connecting
//!   address differ in IP is dropped: a port mapper never changes IPs, and the kernel would
//!   otherwise report `cp` as the peer of the next connection from the mapped address (an
//!   attacker could name any trusted IP). The 48-byte form has no mapped address.
//! * **Echo cookies; no passive state before proof.** Our ACCEPT carries a keyed MAC of
//!   the exchange in the bytes rdma-core (and our active side) echo into the ACK
//!   ([`crate::cookie`]). An ACK counts only if its cookie verifies: a blind ACK, written
//!   from the attacker's own REQUEST, confirms nothing, refunds nothing and releases
//!   nothing. Most REQUESTs keep no state at all: the ACCEPT is derived from the REQUEST and
//!   the key, so a duplicate REQUEST just gets the same ACCEPT again (one datagram out per
//!   datagram in, 48 bytes for 64), and no quota or eviction can stand between a real peer
//!   and its answer (a burst of 1000 connects from one host is answered in full).
//! * **No REMOTE_INFO without need.** A peer that is not port mapped (mapped `cp` = `cp`:
//!   siw, every NO_PORT_MAP RNIC) gets none: the kernel reports the right peer without
//!   one, and every REMOTE_INFO no connection consumes stays in the kernel for ever.
//! * **Kernel memory.** A port-mapped peer's REMOTE_INFO goes out with the ACCEPT only on a
//!   budget token (`remote_info_budget`, one back per `remote_info_refill`), at most half
//!   the budget per source; a verified ACK returns the token. Without
//!   one, an IPv4 cookie carries the mapped `cp` port and the REMOTE_INFO goes out on the
//!   verified ACK (no state before it); an IPv6 cookie has no room, so an exchange entry
//!   holds it, at most `peer_source_quota` per source (the oldest gives way to a newer one
//!   from the same source). The active side ACKs *before* answering its kernel, and for
//!   an IPv4 ACCEPT that says its REMOTE_INFO waits for the ACK it holds that answer until
//!   the passive side's delivery notice (at most 60 ms; [`crate::cookie`]), so the
//!   REMOTE_INFO is in the passive kernel before the connection.
//! * **Separate budgets**: the passive entries that exist evict the oldest *confirmed* one
//!   when full (it only absorbs duplicates), then the oldest unconfirmed one, whose token
//!   comes back; local connects have their own cap and are never refused because of remote
//!   traffic.
//! * **REJECTs** are limited per source (`max_rejects_per_sec_per_source`) under the global
//!   `max_rejects_per_sec`: one flooding host cannot take every host's fast REJECT.
//! * **Active side answers at most 1:1**: a duplicate ACCEPT is re-ACKed at most
//!   `max_retransmits` times and never extends the exchange.
//! * **Answers only from the asked host**: an ACCEPT or REJECT counts only if it comes from
//!   the IP the REQUEST went to, and an ACCEPT's mapped IP must be the IP we asked for.
//! * **Listeners only**: a REQUEST is answered only from a listener mapping (ADD or
//!   restart recovery), never from a connecting one, and never for a wildcard address.
//! * `peer_allow` drops every datagram from a source outside the configured networks.
//!
//! # Other differences from the C daemon, on purpose
//!
//! * **A late duplicate REQUEST causes no second REMOTE_INFO**: an exchange that sent or
//!   holds one is kept until its lifetime ends, and a REMOTE_INFO sent on a verified ACK
//!   leaves a confirmed entry that absorbs the ACKs of later duplicates. (A duplicate of a
//!   REQUEST that needs no REMOTE_INFO just gets its ACCEPT again.)
//! * **Exchanges end with their mapping**: a REMOVE that frees a mapping stops its
//!   retransmissions at once (C keeps sending for up to 10 s).
//! * **No answer after the kernel gave up** (`reply_deadline`).
//! * **A 48-byte REQUEST** (pre-2014 peers): we use the connecting IP with the reserved
//!   port (or the cp port if 0); C reads uninitialised memory there.
//! * **Malformed datagrams** are dropped with a rate-limited warning and counted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_proto::netlink::{DaemonMsg, QueryMappingReply};
use iwpm_proto::peer::{ipv4_echo, IpVersion, PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use super::{code, Core};
use crate::action::PeerSocket;
use crate::cookie::{self, Binding, RemoteInfoPlan};
use crate::exchange::{
    ActiveQuery, ActiveState, Exchange, ExchangeId, ExchangeKey, ExchangeKind, PassiveAnswer,
    RemoteInfo, SourceKey,
};
use crate::mapping_id::MappingId;
use crate::peer_book::{ExchangeOutcome, RecentExchange};
use crate::ratelimit::LogKind;
use crate::request::Query;
use crate::table::MappingRole;

/// Most timers handled per [`Core::handle_timeout`] call; the rest are due at once on the
/// next call, so one loop turn never stalls on a burst of expiries.
const MAX_TIMERS_PER_CALL: usize = 1024;

/// Active side: how long one wait for a delivery notice lasts, and how many waits (each
/// but the first re-sends the ACK) before the kernel gets its answer anyway. The notice
/// normally comes one round trip after our ACK.
const NOTICE_WAIT: Duration = Duration::from_millis(20);
const NOTICE_WAITS: u32 = 3;
/// Passive side: how often a duplicate ACK gets the delivery notice again.
const NOTICE_RESENDS: u32 = 1;

impl Core {
    pub(super) fn process_peer_datagram(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        datagram: &[u8],
    ) {
        if !self.config.peer_allow.allows(from.ip()) {
            self.count_warn(
                now,
                |s| &mut s.peer_not_allowed,
                LogKind::NotAllowed,
                format_args!("peer datagram from {from} dropped: source not in peer_allow"),
            );
            return;
        }
        let msg = match PeerMessage::decode(datagram) {
            Ok(m) => m,
            Err(e) => {
                self.count_warn(
                    now,
                    |s| &mut s.peer_malformed,
                    LogKind::MalformedPeer,
                    format_args!("peer datagram from {from} dropped: {e}"),
                );
                return;
            }
        };
        if let Some(c) = self.stats.peer_in.get_mut(usize::from(msg.msg_type.code())) {
            *c += 1;
        }
        if self.probe_answered(now, from, &msg) {
            return;
        }
        match msg.msg_type {
            PeerMsgType::Request => {
                self.peer_book.tally(from.ip(), now).requests_in += 1;
                self.on_request(now, via, from, &msg);
            }
            PeerMsgType::Accept => self.on_accept(now, via, from, &msg, datagram),
            PeerMsgType::Ack => self.on_ack(now, via, from, &msg, datagram),
            PeerMsgType::Reject => self.on_reject(now, from, &msg),
        }
    }

    /// Sends the REQUEST for a QUERY whose mapping `id` now holds a reference.
    /// Finds the remote mapped address for a QUERY whose local mapping is `id`: from our
    /// own table when the remote is on this host (see [`Core::answer_locally`]), else by
    /// asking the peer daemon.
    pub(super) fn resolve_query(&mut self, now: Instant, query: Query, id: MappingId) {
        if !self.answer_locally(&query, id) {
            self.start_query_exchange(now, query, id);
        }
    }

    /// A connect to our own IP (the remote IP is the QUERY's local IP, so the listener is
    /// behind our kernel and we are its peer daemon): both halves of the exchange at once,
    /// in the order the UDP exchange with ourselves produces them: REMOTE_INFO to the
    /// listener's owner, then the QUERY reply. No budget token: the kernel asked, and
    /// connects at once, consuming the REMOTE_INFO. When the connecting side is not port
    /// mapped (siw's NO_PORT_MAP) the REMOTE_INFO would map its address to itself, and the
    /// kernel, finding no entry, reports the connection's own remote address, which is that
    /// same address: it is not sent (one kernel message, one allocation and its NLMSG_DONE
    /// less per connect, and no entry left behind by a connect that never arrives). False
    /// (nothing sent) when disabled, for another IP, or with no listener there: the UDP
    /// exchange then asks (and answers itself with a REJECT, as C does).
    fn answer_locally(&mut self, query: &Query, id: MappingId) -> bool {
        let Query { req, local, remote } = query;
        if !self.config.local_answers || remote.ep.ip != local.ep.ip {
            return false;
        }
        let remote_sa = SocketAddr::new(remote.ep.ip, remote.ep.port);
        let Some((listener, answer_ap)) = self.listener_answer(remote_sa) else {
            return false;
        };
        let Some((cp, mapped_cp, mapped_local)) = self
            .table
            .get(id)
            .map(|m| (m.local_ep(), m.mapped_ep(), m.mapped()))
        else {
            return false;
        };
        self.stats.local_answers += 1;
        // (`listener` was just found in the table, so the REMOTE_INFO can be made.)
        if mapped_cp != cp {
            if let Some((owner, remote_info)) = self.remote_info_for(
                listener,
                SocketAddr::new(cp.ip, cp.port),
                SocketAddr::new(mapped_cp.ip, mapped_cp.port),
            ) {
                self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
            }
        }
        let mut mapped_remote = remote_sa;
        mapped_remote.set_port(answer_ap.port());
        self.send_kernel(
            req.client,
            DaemonMsg::QueryMapping(QueryMappingReply {
                seq: req.seq,
                local_addr: local.raw,
                remote_addr: remote.raw,
                mapped_local_addr: mapped_local,
                mapped_remote_addr: SockAddrStorage::from(mapped_remote),
                err: 0,
                unknown: Vec::new(),
            }),
        );
        true
    }

    pub(super) fn start_query_exchange(&mut self, now: Instant, query: Query, id: MappingId) {
        let Query { req, local, remote } = query;
        let remote_sa = SocketAddr::new(remote.ep.ip, remote.ep.port);
        let Some((local_ep, mapped_ep)) = self.table.get(id).map(|m| (m.local_ep(), m.mapped_ep()))
        else {
            return;
        };
        let handle = self.handles.next_handle();
        let request = PeerMessage::request(
            handle,
            SocketAddr::new(local_ep.ip, local_ep.port),
            SocketAddr::new(mapped_ep.ip, mapped_ep.port),
            remote_sa,
        )
        .encode();
        let mut to = remote_sa;
        to.set_port(self.config.peer_port);
        let via = PeerSocket::client_for(&to);
        let ex = Exchange::new(
            ExchangeKey::Active {
                handle,
                cp: local_ep,
            },
            id,
            (via, to),
            now + self.config.exchange_lifetime,
            ExchangeKind::Active(Box::new(ActiveQuery {
                client: req.client,
                kernel_seq: req.seq,
                reply_deadline: now + self.config.reply_deadline,
                local: local.raw,
                remote: remote.raw,
                state: ActiveState::Requesting {
                    request: request.clone(),
                    retransmits_left: self.config.max_retransmits,
                },
            })),
        );
        self.exchanges
            .insert(ex, now + self.config.retransmit_interval);
        self.peer_book.tally(to.ip(), now).requests += 1;
        self.send_peer(via, to, PeerMsgType::Request, request);
    }

    /// The listener mapping a REQUEST asks for, with the `ap` to answer: `None` for a
    /// wildcard `ap`, an unknown address, a connecting (QUERY) mapping or a family mismatch.
    fn listener_for(&self, msg: &PeerMessage) -> Option<(MappingId, SocketAddr)> {
        self.listener_answer(msg.ap())
    }

    /// The listener mapping for the accepting address `ap` and the mapped address to
    /// answer with; see [`Core::listener_for`].
    fn listener_answer(&self, ap: SocketAddr) -> Option<(MappingId, SocketAddr)> {
        if ap.ip().is_unspecified() {
            return None;
        }
        let id = self.table.loose_local(&Endpoint::from(ap))?;
        let m = self.table.get(id)?;
        if m.role == MappingRole::Connector {
            return None;
        }
        // A wildcard listener answers with the requested IP and its mapped port.
        let ip = if m.local_ep().is_wildcard() {
            ap.ip()
        } else {
            m.mapped_ep().ip
        };
        let answer = SocketAddr::new(ip, m.mapped_ep().port);
        (answer.is_ipv4() == ap.is_ipv4()).then_some((id, answer))
    }

    /// Makes room for one more passive exchange: while the table is full, the oldest
    /// confirmed exchange goes, else the oldest unconfirmed one, which gives its REMOTE_INFO
    /// token back (or drops the REMOTE_INFO it held for the ACK, counted).
    fn make_room_for_passive(&mut self) {
        while self.exchanges.passive_len() >= self.config.max_peer_exchanges.max(1) {
            let Some(victim) = self.exchanges.eviction_candidate() else {
                break;
            };
            self.evict(victim);
        }
    }

    /// Makes room in `source`'s quota: its oldest unconfirmed exchange goes (its token
    /// back, or its held REMOTE_INFO dropped). A source flooding REQUESTs it never ACKs thus
    /// pushes out only its own oldest entries; a real peer's ACK comes within a round trip,
    /// long before a quota's worth of newer REQUESTs from the same source.
    fn evict_oldest_of(&mut self, now: Instant, from: SocketAddr, source: SourceKey) {
        let Some(victim) = self.exchanges.oldest_unconfirmed_from(source) else {
            return;
        };
        self.evict(victim);
        self.stats.peer_quota_dropped += 1;
        let quota = self.config.peer_source_quota;
        self.warn(
            now,
            LogKind::Quota,
            format_args!(
                "REQUEST from {from}: its source holds {quota} exchanges waiting for an ACK; \
                 the oldest one gives way"
            ),
        );
    }

    fn evict(&mut self, victim: ExchangeId) {
        let Some(ex) = self.exchanges.remove(victim) else {
            return;
        };
        self.stats.exchanges_evicted += 1;
        if let ExchangeKind::Passive(p) = ex.kind {
            match p.remote_info {
                RemoteInfo::SentOnToken => self.remote_info_tokens.refund(),
                RemoteInfo::AwaitingAck { .. } => self.stats.remote_info_deferred += 1,
                RemoteInfo::Settled => {}
            }
        }
    }

    /// A source's share of the REMOTE_INFO budget: half of it, rounded up.
    fn remote_info_share(&self) -> u32 {
        self.config.remote_info_budget.div_ceil(2)
    }

    /// A REMOTE_INFO may go to the kernel with the ACCEPT, before the source is proven
    /// real: a budget token is free, and the source holds fewer than its share.
    fn remote_info_at_once(&mut self, now: Instant, source: SourceKey) -> bool {
        self.exchanges.unconfirmed_from(source) < self.remote_info_share()
            && self.remote_info_tokens.take(now)
    }

    fn remote_info_waits(&mut self, now: Instant, from: SocketAddr) {
        let (budget, per_source) = (self.remote_info_tokens.capacity(), self.remote_info_share());
        self.count_warn(
            now,
            |s| &mut s.remote_info_deferred,
            LogKind::RemoteInfoBudget,
            format_args!(
                "REMOTE_INFO budget spent ({budget} unconfirmed, {per_source} per source; last \
                 {from}): REMOTE_INFO now waits for the peer's verified ACK"
            ),
        );
    }

    /// The REMOTE_INFO telling the kernel that the peer at `mapped_cp` is really `cp`, for
    /// a connection to the listener mapping `id`.
    fn remote_info_for(
        &self,
        id: MappingId,
        cp: SocketAddr,
        mapped_cp: SocketAddr,
    ) -> Option<(u8, QueryMappingReply)> {
        let m = self.table.get(id)?;
        Some((
            m.owner,
            QueryMappingReply {
                seq: 0,
                local_addr: m.local(),
                remote_addr: SockAddrStorage::from(cp),
                mapped_local_addr: m.mapped(),
                mapped_remote_addr: SockAddrStorage::from(mapped_cp),
                err: 0,
                unknown: Vec::new(),
            },
        ))
    }

    /// A REQUEST: the ACCEPT carries an echo cookie (`crate::cookie`), so in the common
    /// cases no state is kept before the peer's ACK proves it received our ACCEPT:
    ///
    /// * a peer that is not port mapped (mapped `cp` = `cp`: siw, every NO_PORT_MAP RNIC)
    ///   needs no REMOTE_INFO at all: the kernel, finding none, reports the connection's
    ///   own remote address, which is that same address. Stateless ACCEPT.
    /// * a port-mapped peer needs one, and it should reach the kernel before the
    ///   connection does (the C active side answers its kernel before it ACKs). It goes at
    ///   once while the REMOTE_INFO budget and the source's share of it last (an exchange
    ///   entry dedups retransmitted REQUESTs and a verified ACK returns the token);
    ///   otherwise, for IPv4, the cookie carries the mapped `cp` port and the REMOTE_INFO
    ///   goes out on the verified ACK (stateless); for IPv6, whose cookie has no room, an
    ///   exchange entry holds it, within the per-source quota.
    fn on_request(&mut self, now: Instant, via: PeerSocket, from: SocketAddr, msg: &PeerMessage) {
        let mapped_cp = msg.mapped_cp().unwrap_or_else(|| {
            let port = if msg.reserved_port != 0 {
                msg.reserved_port
            } else {
                msg.cp_port
            };
            SocketAddr::new(msg.cp_ip, port)
        });
        if mapped_cp.ip() != msg.cp_ip || msg.cp_ip.is_unspecified() {
            self.count_warn(
                now,
                |s| &mut s.peer_forged,
                LogKind::Forged,
                format_args!(
                    "REQUEST from {from} dropped: connecting address {} but mapped {mapped_cp} \
                     (a port mapper never changes IPs)",
                    msg.cp()
                ),
            );
            return;
        }
        let Some((id, answer_ap)) = self.listener_for(msg) else {
            self.reject(now, via, from, msg);
            return;
        };
        let key = ExchangeKey::Passive {
            handle: msg.assoc_handle,
            from,
            ap: answer_ap.into(),
            cp: msg.cp().into(),
        };
        if let Some(xid) = self.exchanges.find(&key) {
            if !self.reused_association(now, xid) {
                self.duplicate_request(now, xid);
                return;
            }
            // The C daemon's handle is a heap address, reused once its record is freed; a
            // REQUEST this long after our ACK is a new connection from the same endpoint.
            self.exchanges.remove(xid);
            self.stats.peer_reused_handles += 1;
        }
        let binding = Binding::of_request(from, msg, answer_ap);
        let mut accept = PeerMessage::accept_for(msg, answer_ap);
        if mapped_cp == msg.cp() {
            self.stats.remote_info_not_needed += 1;
            self.stateless_accept(
                now,
                via,
                &mut accept,
                &binding,
                RemoteInfoPlan::NotNeeded,
                0,
            );
            return;
        }
        let source = SourceKey::of(from.ip());
        let Some((owner, remote_info)) = self.remote_info_for(id, msg.cp(), mapped_cp) else {
            return;
        };
        let (plan, remote_info) = if self.remote_info_at_once(now, source) {
            // REMOTE_INFO goes to the kernel before the ACCEPT leaves: the peer connects as
            // soon as it has the ACCEPT, and a connection that reaches iw_cm before its
            // remote-info entry is reported with the peer's mapped address and leaks the
            // entry. (C gets this order by accident, through its sender thread.)
            self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
            (RemoteInfoPlan::SentAtOnce, RemoteInfo::SentOnToken)
        } else {
            self.remote_info_waits(now, from);
            if msg.ip_version == IpVersion::V4 {
                let port = mapped_cp.port();
                self.stateless_accept(now, via, &mut accept, &binding, RemoteInfoPlan::OnAck, port);
                return;
            }
            if self.exchanges.unconfirmed_from(source) >= self.config.peer_source_quota {
                self.evict_oldest_of(now, from, source);
            }
            let held = RemoteInfo::AwaitingAck {
                owner,
                msg: Box::new(remote_info),
            };
            (RemoteInfoPlan::OnAck, held)
        };
        self.make_room_for_passive();
        let echo = self
            .cookies
            .mark(now, &mut accept, &binding, plan, mapped_cp.port());
        let accept = accept.encode_with_echo(&echo);
        let ex = Exchange::new(
            key,
            id,
            (via, from),
            now + self.config.exchange_lifetime,
            ExchangeKind::Passive(Box::new(PassiveAnswer {
                accept: accept.clone(),
                resends_left: self.config.max_retransmits,
                next_resend: now + self.config.retransmit_interval / 2,
                source,
                confirmed: false,
                confirmed_at: None,
                remote_info,
            })),
        );
        // Passive exchanges have no retransmission timer: their only timer is the expiry.
        self.exchanges
            .insert(ex, now + self.config.exchange_lifetime);
        self.send_peer(via, from, PeerMsgType::Accept, accept);
    }

    /// Sends `accept` with its cookie and keeps nothing: a retransmitted REQUEST gets the
    /// same ACCEPT again (one datagram out per datagram in, 48 bytes for 64).
    fn stateless_accept(
        &mut self,
        now: Instant,
        via: PeerSocket,
        accept: &mut PeerMessage,
        binding: &Binding,
        plan: RemoteInfoPlan,
        mapped_cp_port: u16,
    ) {
        let echo = self
            .cookies
            .mark(now, accept, binding, plan, mapped_cp_port);
        self.stats.accepts_stateless += 1;
        let accept = accept.encode_with_echo(&echo);
        self.send_peer(via, binding.from, PeerMsgType::Accept, accept);
    }

    /// A REQUEST for no listener: REJECT, within the source's REJECT rate and the global
    /// one.
    fn reject(&mut self, now: Instant, via: PeerSocket, from: SocketAddr, msg: &PeerMessage) {
        let source = SourceKey::of(from.ip());
        if !self.reject_tokens_per_source.take(now, source) || !self.reject_tokens.take(now) {
            self.stats.rejects_suppressed += 1;
            return;
        }
        self.stats.rejects_sent += 1;
        self.send_peer(
            via,
            from,
            PeerMsgType::Reject,
            PeerMessage::reject_for(msg).encode(),
        );
    }

    /// True if the exchange was confirmed at least one retransmission interval ago.
    fn reused_association(&self, now: Instant, xid: ExchangeId) -> bool {
        let interval = self.config.retransmit_interval;
        self.exchanges.get(xid).is_some_and(|ex| match &ex.kind {
            ExchangeKind::Passive(p) => p.confirmed_at.is_some_and(|t| now >= t + interval),
            ExchangeKind::Active(_) => false,
        })
    }

    /// A retransmitted REQUEST: our ACCEPT (or its ACK) was lost. Answer again while the
    /// exchange is unconfirmed, within its resend allowance.
    fn duplicate_request(&mut self, now: Instant, xid: ExchangeId) {
        self.stats.peer_duplicates += 1;
        let half = self.config.retransmit_interval / 2;
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let (via, to) = (ex.via, ex.to);
        let ExchangeKind::Passive(p) = &mut ex.kind else {
            return;
        };
        if p.confirmed || p.resends_left == 0 || now < p.next_resend {
            return;
        }
        p.resends_left -= 1;
        p.next_resend = now + half;
        let accept = p.accept.clone();
        self.stats.retransmissions += 1;
        self.send_peer(via, to, PeerMsgType::Accept, accept);
    }

    /// The active exchange an ACCEPT or REJECT answers, if it came from the host asked.
    fn answered_exchange(
        &mut self,
        now: Instant,
        from: SocketAddr,
        msg: &PeerMessage,
    ) -> Option<ExchangeId> {
        let key = ExchangeKey::Active {
            handle: msg.assoc_handle,
            cp: msg.cp().into(),
        };
        let Some(xid) = self.exchanges.find(&key) else {
            self.stats.peer_unmatched += 1;
            if msg.msg_type == PeerMsgType::Reject {
                self.warn(
                    now,
                    LogKind::RejectUnknown,
                    format_args!("received reject for unknown mapping from {from}"),
                );
            }
            return None;
        };
        let asked = self.exchanges.get(xid).map(|ex| ex.to.ip());
        if asked != Some(from.ip()) {
            self.count_warn(
                now,
                |s| &mut s.peer_wrong_source,
                LogKind::WrongSource,
                format_args!(
                    "{:?} from {from} dropped: the REQUEST went to {asked:?}",
                    msg.msg_type
                ),
            );
            return None;
        }
        Some(xid)
    }

    fn on_accept(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        msg: &PeerMessage,
        datagram: &[u8],
    ) {
        let Some(xid) = self.answered_exchange(now, from, msg) else {
            return;
        };
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let mapping = ex.mapping;
        let ExchangeKind::Active(q) = &mut ex.kind else {
            return;
        };
        let echo = ipv4_echo(datagram);
        let notice = msg.ip_version == IpVersion::V4 && cookie::is_delivery_notice(&echo);
        match &mut q.state {
            // A notice after the wait ran out says nothing new.
            ActiveState::Acked { .. } if notice => {
                self.stats.peer_duplicates += 1;
                return;
            }
            ActiveState::Acked { ack, re_acks_left } => {
                // Our ACK was lost: answer the retransmitted ACCEPT again, a bounded number
                // of times and without extending the exchange.
                self.stats.peer_duplicates += 1;
                if *re_acks_left == 0 {
                    return;
                }
                *re_acks_left -= 1;
                let ack = ack.clone();
                self.send_peer(via, from, PeerMsgType::Ack, ack);
                return;
            }
            ActiveState::AwaitingNotice { ack, .. } if !notice => {
                // A duplicate ACCEPT while we wait: our ACK was lost, send it again (the
                // waits bound how often).
                self.stats.peer_duplicates += 1;
                let ack = ack.clone();
                self.send_peer(via, from, PeerMsgType::Ack, ack);
                return;
            }
            ActiveState::AwaitingNotice { .. } => {
                self.release_held_reply(now, xid, false);
                return;
            }
            ActiveState::Requesting { .. } => {}
        }
        let (client, kernel_seq, reply_deadline, local, remote) =
            (q.client, q.kernel_seq, q.reply_deadline, q.local, q.remote);
        self.note_finished(now, xid, ExchangeOutcome::Accepted);
        if now >= reply_deadline {
            self.exchanges.remove(xid);
            self.late_answer(now, "ACCEPT");
            return;
        }
        // The peer maps ports, never IPs: its answer must be for the IP we asked about.
        let Some(mapped_remote) =
            remote
                .to_socket_addr()
                .filter(|r| r.ip() == msg.ap_ip)
                .map(|mut r| {
                    r.set_port(msg.ap_port);
                    SockAddrStorage::from(r)
                })
        else {
            self.count_warn(
                now,
                |s| &mut s.peer_forged,
                LogKind::Forged,
                format_args!(
                    "ACCEPT from {from} names another IP ({}); dropped",
                    msg.ap_ip
                ),
            );
            return;
        };
        let Some(mapped_local) = self.table.get(mapping).map(|m| m.mapped()) else {
            return;
        };
        // The ACK leaves before the kernel hears the answer: the kernel connects as soon as
        // it has it, and a passive peer short of REMOTE_INFO budget sends REMOTE_INFO on
        // this ACK, which must beat our connection there. It echoes every byte of the
        // ACCEPT that carries no field, as rdma-core's does: the passive side's cookie.
        let ack = PeerMessage::ack_for(msg).encode_with_echo(&echo);
        self.send_peer(via, from, PeerMsgType::Ack, ack.clone());
        let reply = QueryMappingReply {
            seq: kernel_seq,
            local_addr: local,
            remote_addr: remote,
            mapped_local_addr: mapped_local,
            mapped_remote_addr: mapped_remote,
            err: 0,
            unknown: Vec::new(),
        };
        // The peer's REMOTE_INFO waits for this ACK: hold the answer (the kernel connects
        // as soon as it has it) until the peer says its kernel has the REMOTE_INFO.
        if msg.ip_version == IpVersion::V4 && cookie::plans_remote_info_on_ack(&echo) {
            self.stats.query_replies_held += 1;
            let held = ActiveState::AwaitingNotice {
                ack,
                reply: Box::new(reply),
                client,
                waits_left: NOTICE_WAITS,
            };
            self.exchanges.answered_until(xid, held, now + NOTICE_WAIT);
            return;
        }
        self.send_kernel(client, DaemonMsg::QueryMapping(reply));
        let re_acks_left = self.config.max_retransmits;
        self.exchanges
            .answered(xid, ActiveState::Acked { ack, re_acks_left });
    }

    /// Sends the QUERY answer held for a delivery notice (`missed`: the waits ran out
    /// instead) and leaves the exchange ACKed, to re-ACK duplicates until its end.
    fn release_held_reply(&mut self, now: Instant, xid: ExchangeId, missed: bool) {
        let re_acks_left = self.config.max_retransmits;
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let ExchangeKind::Active(q) = &mut ex.kind else {
            return;
        };
        let reply_deadline = q.reply_deadline;
        let placeholder = ActiveState::Acked {
            ack: Vec::new(),
            re_acks_left,
        };
        let ActiveState::AwaitingNotice {
            ack, reply, client, ..
        } = std::mem::replace(&mut q.state, placeholder)
        else {
            return;
        };
        self.exchanges
            .answered(xid, ActiveState::Acked { ack, re_acks_left });
        if missed {
            self.stats.remote_info_notices_missed += 1;
        }
        if now >= reply_deadline {
            self.late_answer(now, "ACCEPT");
            return;
        }
        self.send_kernel(client, DaemonMsg::QueryMapping(*reply));
    }

    fn on_reject(&mut self, now: Instant, from: SocketAddr, msg: &PeerMessage) {
        let Some(xid) = self.answered_exchange(now, from, msg) else {
            return;
        };
        let Some(ex) = self.exchanges.get(xid) else {
            return;
        };
        let (client, kernel_seq, reply_deadline, local, remote) = match &ex.kind {
            ExchangeKind::Active(q) if matches!(q.state, ActiveState::Requesting { .. }) => {
                (q.client, q.kernel_seq, q.reply_deadline, q.local, q.remote)
            }
            _ => {
                // Already answered by an ACCEPT.
                self.stats.peer_unmatched += 1;
                return;
            }
        };
        let mapping = ex.mapping;
        self.note_finished(now, xid, ExchangeOutcome::Rejected);
        self.exchanges.remove(xid);
        self.stats.rejects_received += 1;
        if now >= reply_deadline {
            self.late_answer(now, "REJECT");
            return;
        }
        let Some(mapped_local) = self.table.get(mapping).map(|m| m.mapped()) else {
            return;
        };
        self.send_kernel(
            client,
            DaemonMsg::QueryMapping(QueryMappingReply {
                seq: kernel_seq,
                local_addr: local,
                remote_addr: remote,
                mapped_local_addr: mapped_local,
                mapped_remote_addr: remote,
                err: code::REJECT,
                unknown: Vec::new(),
            }),
        );
    }

    /// An ACK counts only if it echoes the cookie of an ACCEPT we sent to its source: then
    /// the peer is real (it received our ACCEPT there). Its exchange's REMOTE_INFO token
    /// comes back, or the REMOTE_INFO held for it goes out; with no exchange, an IPv4
    /// cookie that planned the REMOTE_INFO for this ACK carries the mapped `cp` port, and
    /// a confirmed entry is kept so that a duplicate ACK sends no second one.
    fn on_ack(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        msg: &PeerMessage,
        datagram: &[u8],
    ) {
        let binding = Binding::of_ack(from, msg);
        let Some(verified) = self
            .cookies
            .verify(now, msg, &ipv4_echo(datagram), &binding)
        else {
            self.count_warn(
                now,
                |s| &mut s.peer_acks_unverified,
                LogKind::UnverifiedAck,
                format_args!(
                    "ACK from {from} dropped: it does not echo the cookie of an ACCEPT we sent \
                     there (blind, tampered, stale, or from a peer that zeroes the bytes)"
                ),
            );
            return;
        };
        let key = ExchangeKey::Passive {
            handle: msg.assoc_handle,
            from,
            ap: msg.ap().into(),
            cp: msg.cp().into(),
        };
        let Some(xid) = self.exchanges.find(&key) else {
            if verified.plan == Some(RemoteInfoPlan::OnAck) {
                self.remote_info_on_verified_ack(now, from, msg, key, verified.mapped_cp_port);
                self.send_delivery_notice(via, from, msg, datagram);
            }
            return;
        };
        if !self.exchanges.confirm(xid) {
            self.stats.peer_duplicates += 1;
            // The ACK again: our notice may be lost (our active side re-ACKs while it
            // waits). Once more at most: rdma-core ACKs every ACCEPT, the notice included.
            if verified.plan == Some(RemoteInfoPlan::OnAck) && self.take_notice_resend(xid) {
                self.send_delivery_notice(via, from, msg, datagram);
            }
            return;
        }
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let ExchangeKind::Passive(p) = &mut ex.kind else {
            return;
        };
        p.confirmed_at = Some(now);
        match std::mem::replace(&mut p.remote_info, RemoteInfo::Settled) {
            RemoteInfo::SentOnToken => self.remote_info_tokens.refund(),
            RemoteInfo::AwaitingAck { owner, msg } => {
                self.stats.remote_info_on_ack += 1;
                self.send_kernel(owner, DaemonMsg::RemoteInfo(*msg));
            }
            RemoteInfo::Settled => {}
        }
    }

    /// The REMOTE_INFO a stateless IPv4 ACCEPT deferred to its (verified) ACK, and the
    /// confirmed entry that absorbs the ACK's duplicates.
    fn remote_info_on_verified_ack(
        &mut self,
        now: Instant,
        from: SocketAddr,
        ack: &PeerMessage,
        key: ExchangeKey,
        mapped_cp_port: u16,
    ) {
        // The ACK's ap is the mapped address we answered with.
        let Some(id) = self.table.loose_mapped(&Endpoint::from(ack.ap())) else {
            self.stats.peer_unmatched += 1;
            return;
        };
        if self
            .table
            .get(id)
            .is_none_or(|m| m.role == MappingRole::Connector)
        {
            self.stats.peer_unmatched += 1;
            return;
        }
        let mapped_cp = SocketAddr::new(ack.cp_ip, mapped_cp_port);
        let Some((owner, remote_info)) = self.remote_info_for(id, ack.cp(), mapped_cp) else {
            return;
        };
        self.stats.remote_info_on_ack += 1;
        self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
        self.make_room_for_passive();
        let ex = Exchange::new(
            key,
            id,
            // Never sent on: a confirmed exchange only absorbs duplicates.
            (
                if from.is_ipv4() {
                    PeerSocket::V4Listener
                } else {
                    PeerSocket::V6Listener
                },
                from,
            ),
            now + self.config.exchange_lifetime,
            ExchangeKind::Passive(Box::new(PassiveAnswer {
                accept: Vec::new(),
                // (here: how often a duplicate ACK may get the delivery notice again)
                resends_left: NOTICE_RESENDS,
                next_resend: now,
                source: SourceKey::of(from.ip()),
                confirmed: true,
                confirmed_at: Some(now),
                remote_info: RemoteInfo::Settled,
            })),
        );
        self.exchanges
            .insert(ex, now + self.config.exchange_lifetime);
    }

    /// The ACCEPT once more, marked as the delivery notice: the REMOTE_INFO that waited for
    /// this (verified) ACK is in the kernel (`crate::cookie`), so the active side may let its
    /// kernel connect. Built from the ACK, which echoes every byte of our ACCEPT.
    fn send_delivery_notice(
        &mut self,
        via: PeerSocket,
        to: SocketAddr,
        ack: &PeerMessage,
        datagram: &[u8],
    ) {
        if ack.ip_version != IpVersion::V4 {
            return;
        }
        let notice = PeerMessage {
            msg_type: PeerMsgType::Accept,
            ..*ack
        };
        let bytes = notice.encode_with_echo(&cookie::delivery_notice(&ipv4_echo(datagram)));
        self.stats.remote_info_notices_sent += 1;
        self.send_peer(via, to, PeerMsgType::Accept, bytes);
    }

    /// May a duplicate ACK of this confirmed exchange get the notice again? (Once.)
    fn take_notice_resend(&mut self, xid: ExchangeId) -> bool {
        match self.exchanges.get_mut(xid).map(|ex| &mut ex.kind) {
            Some(ExchangeKind::Passive(p)) if p.resends_left > 0 => {
                p.resends_left -= 1;
                true
            }
            _ => false,
        }
    }

    /// Records how a local exchange ended, for the control socket's `peers` (passive
    /// exchanges are not recorded: they end by expiry whatever happened).
    fn note_finished(&mut self, now: Instant, xid: ExchangeId, outcome: ExchangeOutcome) {
        let max = self.config.max_retransmits;
        let lifetime = self.config.exchange_lifetime;
        let Some(ex) = self.exchanges.get(xid) else {
            return;
        };
        let ExchangeKind::Active(q) = &ex.kind else {
            return;
        };
        let retransmissions = match &q.state {
            ActiveState::Requesting {
                retransmits_left, ..
            } => max.saturating_sub(*retransmits_left),
            ActiveState::Acked { .. } | ActiveState::AwaitingNotice { .. } => return,
        };
        let started = ex.expires().checked_sub(lifetime).unwrap_or(now);
        let peer = ex.to.ip();
        let tally = self.peer_book.tally(peer, now);
        match outcome {
            ExchangeOutcome::Accepted => tally.accepts += 1,
            ExchangeOutcome::Rejected => tally.rejects += 1,
            ExchangeOutcome::TimedOut => tally.timeouts += 1,
        }
        self.peer_book.finished(RecentExchange {
            peer,
            outcome,
            retransmissions,
            took: now.saturating_duration_since(started),
            ended_at: now,
        });
    }

    fn late_answer(&mut self, now: Instant, what: &str) {
        self.count_warn(
            now,
            |s| &mut s.replies_dropped_late,
            LogKind::LateReply,
            format_args!("{what} arrived after the kernel gave up on its QUERY; not answered"),
        );
    }

    /// REQUEST retransmissions and expiries due at `now`, at most [`MAX_TIMERS_PER_CALL`].
    pub(super) fn run_exchange_timers(&mut self, now: Instant) {
        let interval = self.config.retransmit_interval;
        for _ in 0..MAX_TIMERS_PER_CALL {
            let Some(due) = self.exchanges.pop_due(now) else {
                return;
            };
            let Some(ex) = self.exchanges.get_mut(due.id) else {
                continue;
            };
            // A late call (the process was stopped) may find the exchange past its
            // lifetime: it ends without a last retransmission.
            if now >= ex.expires() {
                if ex.is_waiting() {
                    self.note_finished(now, due.id, ExchangeOutcome::TimedOut);
                }
                if let Some(ex) = self.exchanges.remove(due.id) {
                    if ex.is_waiting() {
                        self.stats.exchanges_expired += 1;
                    }
                }
                continue;
            }
            let (via, to, expires) = (ex.via, ex.to, ex.expires());
            // No delivery notice yet: the ACK may be lost, send it again; after the last
            // wait the kernel gets its answer anyway.
            let waiting = match &mut ex.kind {
                ExchangeKind::Active(q) => match &mut q.state {
                    ActiveState::AwaitingNotice {
                        ack, waits_left, ..
                    } if *waits_left > 1 => {
                        *waits_left -= 1;
                        Some(Some(ack.clone()))
                    }
                    ActiveState::AwaitingNotice { .. } => Some(None),
                    _ => None,
                },
                ExchangeKind::Passive(_) => None,
            };
            match waiting {
                Some(Some(ack)) => {
                    self.exchanges.rearm(due.id, now + NOTICE_WAIT);
                    self.send_peer(via, to, PeerMsgType::Ack, ack);
                    continue;
                }
                Some(None) => {
                    self.release_held_reply(now, due.id, true);
                    continue;
                }
                None => {}
            }
            let Some(ex) = self.exchanges.get_mut(due.id) else {
                continue;
            };
            let resend = match &mut ex.kind {
                ExchangeKind::Active(q) => match &mut q.state {
                    ActiveState::Requesting {
                        request,
                        retransmits_left,
                    } if *retransmits_left > 0 => {
                        *retransmits_left -= 1;
                        Some((request.clone(), *retransmits_left > 0))
                    }
                    _ => None,
                },
                ExchangeKind::Passive(_) => None,
            };
            // Skip ticks missed while the shell was late rather than bursting them.
            let next = match (&resend, due.at + interval) {
                (Some((_, true)), t) if t <= now => now + interval,
                (Some((_, true)), t) => t,
                _ => expires,
            };
            self.exchanges.rearm(due.id, next);
            if let Some((datagram, _)) = resend {
                self.peer_book.tally(to.ip(), now).retransmissions += 1;
                self.stats.retransmissions += 1;
                self.send_peer(via, to, PeerMsgType::Request, datagram);
            }
        }
    }
}
