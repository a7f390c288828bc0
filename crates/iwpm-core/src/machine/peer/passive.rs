//! Passive side of the peer exchange: a peer daemon asks (REQUEST) about one of our
//! listeners, and we answer with an ACCEPT that carries an echo cookie, or a REJECT; the
//! listener's owner in our kernel gets the REMOTE_INFO at once on a budget token, or on the
//! peer's verified ACK followed by a delivery notice. Its own file because nearly all that a
//! stranger on the network can make us do happens here, so every step is metered.
//!
//! # Defences (what a host on the network can make us do, and the bound)
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
//!   verified ACK (no state before it); an IPv6 cookie has no room, so the held table
//!   keeps the port (`crate::held`: one compact table for every source, the oldest giving
//!   way, room for 16 s of a 1 000/s flood). The active side ACKs *before* answering its kernel and, when
//!   our ACCEPT says the REMOTE_INFO waits for the ACK, holds that answer until our delivery
//!   notice ([`super::active`]), so the REMOTE_INFO is in our kernel before the connection.
//! * **Separate budgets**: the passive entries that exist evict the oldest *confirmed* one
//!   when full (it only absorbs duplicates), then the oldest unconfirmed one, whose token
//!   comes back; local connects have their own cap and are never refused because of remote
//!   traffic.
//! * **REJECTs** are capped in all (`max_rejects_per_sec`), never per source: a REJECT is
//!   smaller than the REQUEST it answers, and a per-source share is what a spoofer spends
//!   with its victim's address.
//! * **Authenticated peers** (sealed under a fleet key, `crate::admission`) skip the
//!   budget, the allowance and the meters: their REMOTE_INFO goes with the ACCEPT.
//! * **Answers in their question's size class**: an answer larger on the wire than the
//!   datagram it answers is withheld (`Core::answer`).
//! * **Listeners only**: a REQUEST is answered only from a listener mapping (ADD or
//!   restart recovery), never from a connecting one, and never for a wildcard address.
//!
//! # Differences from the C daemon, on purpose
//!
//! * **A late duplicate REQUEST causes no second REMOTE_INFO**: an exchange that sent or
//!   holds one is kept until its lifetime ends, and a REMOTE_INFO sent on a verified ACK
//!   leaves a confirmed entry that absorbs the ACKs of later duplicates. (A duplicate of a
//!   REQUEST that needs no REMOTE_INFO just gets its ACCEPT again.)
//! * **A 48-byte REQUEST** (pre-2014 peers): we use the connecting IP with the reserved
//!   port (or the cp port if 0); C reads uninitialised memory there.

use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::netlink::DaemonMsg;
use iwpm_proto::peer::{IpVersion, Ipv4Echo, PeerMessage, PeerMsgType, PEER_AUTH_LEN};
use iwpm_proto::sockaddr::Endpoint;

use super::Inbound;
use crate::action::PeerSocket;
use crate::admission::Trust;
use crate::cookie::{self, Binding, RemoteInfoPlan, Room, COOKIE_LIFETIME};
use crate::exchange::{Exchange, ExchangeId, ExchangeKey, ExchangeKind, PassiveAnswer, RemoteInfo};
use crate::held::Held;
use crate::machine::Core;
use crate::mapping_id::MappingId;
use crate::ratelimit::LogKind;
use crate::source_meter::SourceKey;
use crate::table::MappingRole;

/// How often a duplicate ACK gets the delivery notice again.
const NOTICE_RESENDS: u32 = 1;

impl Core {
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
    pub(super) fn on_request(&mut self, now: Instant, rx: Inbound<'_>) {
        let Inbound { via, from, msg, .. } = rx;
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
            self.reject(now, rx);
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
                self.duplicate_request(now, rx, xid);
                return;
            }
            // The C daemon's handle is a heap address, reused once its record is freed; a
            // REQUEST this long after our ACK is a new connection from the same endpoint.
            self.exchanges.remove(xid);
            self.stats.peer_reused_handles += 1;
        }
        let room = cookie_room(msg, rx.datagram);
        let answer = Answer {
            via,
            binding: Binding::of_request(from, msg, answer_ap),
            accept: PeerMessage::accept_for(msg, answer_ap),
            room,
        };
        if mapped_cp == msg.cp() {
            self.stats.remote_info_not_needed += 1;
            self.stateless_accept(now, rx, answer, (RemoteInfoPlan::NotNeeded, 0));
            return;
        }
        let source = SourceKey::of(from.ip());
        let Some((owner, remote_info)) = self.remote_info_for(id, msg.cp(), mapped_cp) else {
            return;
        };
        let remote_info = if rx.trust == Trust::Authenticated && self.room_for_passive(source) {
            // A fleet member asked (sealed, fresh, never seen before): its REMOTE_INFO goes
            // at once, on no token; the exchange entry absorbs its retransmissions.
            self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
            RemoteInfo::SentAuthenticated
        } else if rx.trust == Trust::Unauthenticated && self.remote_info_at_once(now, source) {
            // REMOTE_INFO goes to the kernel before the ACCEPT leaves: the peer connects as
            // soon as it has the ACCEPT, and a connection that reaches iw_cm before its
            // remote-info entry is reported with the peer's mapped address and leaks the
            // entry. (C gets this order by accident, through its sender thread.)
            self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
            RemoteInfo::SentOnToken
        } else {
            self.remote_info_waits(now, from);
            if room == Room::Block {
                // The cookie carries the mapped `cp` port: nothing kept before the ACK.
                self.stateless_accept(now, rx, answer, (RemoteInfoPlan::OnAck, mapped_cp.port()));
                return;
            }
            // Ten bits: the port waits in the held table (`crate::held`), named by the
            // exchange's fingerprint; the ACCEPT keeps no other state.
            let fingerprint = self.admission.cookies.fingerprint(&answer.binding);
            let pushed = self.held.hold(
                now,
                fingerprint,
                Held {
                    mapped_cp_port: mapped_cp.port(),
                    expires: now + self.config.exchange_lifetime,
                },
            );
            self.stats.remote_info_held_dropped += u64::from(pushed.evicted);
            self.stateless_accept(now, rx, answer, (RemoteInfoPlan::OnAck, 0));
            return;
        };
        let plan = match remote_info {
            RemoteInfo::SentOnToken | RemoteInfo::SentAuthenticated => RemoteInfoPlan::SentAtOnce,
            _ => RemoteInfoPlan::OnAck,
        };
        let via = answer.via;
        let accept = self.cookied_accept(now, answer, (plan, mapped_cp.port()));
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
        self.answer(now, rx, PeerMsgType::Accept, accept);
    }

    /// The listener mapping a REQUEST asks for, with the `ap` to answer: `None` for a
    /// wildcard `ap`, an unknown address, a connecting (QUERY) mapping or a family mismatch.
    fn listener_for(&self, msg: &PeerMessage) -> Option<(MappingId, SocketAddr)> {
        self.listener_answer(msg.ap())
    }

    /// Makes room for one more passive exchange of `source` and says whether there is:
    /// while the table is full, the source's own oldest confirmed exchange goes (it only
    /// absorbs late duplicates), else the oldest unconfirmed one of any source. Another
    /// source's confirmed exchange never gives way: it needed a verified ACK, so a host
    /// cannot push out other hosts' records with its own. An evicted exchange gives no
    /// budget token back: the REMOTE_INFO it sent is still in the kernel.
    fn room_for_passive(&mut self, source: SourceKey) -> bool {
        while self.exchanges.passive_len() >= self.config.max_peer_exchanges.max(1) {
            let Some(victim) = self
                .exchanges
                .oldest_confirmed_from(source)
                .or_else(|| self.exchanges.oldest_unconfirmed())
            else {
                return false;
            };
            self.evict(victim);
        }
        true
    }

    fn evict(&mut self, victim: ExchangeId) {
        if self.exchanges.remove(victim).is_some() {
            self.stats.exchanges_evicted += 1;
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
            && self.admission.remote_info_tokens.available(now) > 0
            && self.room_for_passive(source)
            && self.admission.remote_info_tokens.take(now)
    }

    fn remote_info_waits(&mut self, now: Instant, from: SocketAddr) {
        let (budget, per_source) = (
            self.admission.remote_info_tokens.capacity(),
            self.remote_info_share(),
        );
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

    /// Sends the ACCEPT with its cookie and keeps nothing: a retransmitted REQUEST gets the
    /// same ACCEPT again (one datagram out per datagram in, 48 bytes for 64).
    fn stateless_accept(
        &mut self,
        now: Instant,
        rx: Inbound<'_>,
        answer: Answer,
        plan: (RemoteInfoPlan, u16),
    ) {
        let accept = self.cookied_accept(now, answer, plan);
        self.stats.accepts_stateless += 1;
        self.answer(now, rx, PeerMsgType::Accept, accept);
    }

    /// The ACCEPT's bytes, its cookie (for `plan`) where `answer.room` says.
    fn cookied_accept(
        &mut self,
        now: Instant,
        answer: Answer,
        plan: (RemoteInfoPlan, u16),
    ) -> Vec<u8> {
        let Answer {
            binding,
            mut accept,
            room,
            ..
        } = answer;
        let echo = self
            .admission
            .cookies
            .mark(now, &mut accept, &binding, plan, room);
        encode_accept(&accept, &echo, room)
    }

    /// A REQUEST for no listener: REJECT, within the global REJECT rate (no per-source
    /// share: `crate::admission::Admission::may_reject`).
    fn reject(&mut self, now: Instant, rx: Inbound<'_>) {
        if !self.admission.may_reject(now, rx.trust) {
            self.stats.rejects_suppressed += 1;
            return;
        }
        self.stats.rejects_sent += 1;
        let reject = PeerMessage::reject_for(rx.msg).encode();
        self.answer(now, rx, PeerMsgType::Reject, reject);
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
    fn duplicate_request(&mut self, now: Instant, rx: Inbound<'_>, xid: ExchangeId) {
        self.stats.peer_duplicates += 1;
        let half = self.config.retransmit_interval / 2;
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let ExchangeKind::Passive(p) = &mut ex.kind else {
            return;
        };
        if p.confirmed || p.resends_left == 0 || now < p.next_resend {
            return;
        }
        // In the duplicate's own size class: a smaller duplicate (not what a real peer
        // retransmits) gets nothing, and spends none of the real peer's resends.
        if answer_len(p.accept.len(), rx.trust) > rx.received_len {
            self.stats.peer_answers_withheld += 1;
            return;
        }
        p.resends_left -= 1;
        p.next_resend = now + half;
        let accept = p.accept.clone();
        self.stats.retransmissions += 1;
        self.answer(now, rx, PeerMsgType::Accept, accept);
    }

    /// An ACK counts only if it echoes the cookie of an ACCEPT we sent to its source: then
    /// the peer is real (it received our ACCEPT there). Within its source's allowance, its
    /// exchange's REMOTE_INFO token comes back or the REMOTE_INFO held for it goes out;
    /// with no exchange, a cookie that planned the REMOTE_INFO for this ACK carries the
    /// mapped `cp` port, and the exchange is remembered as released so that no later ACK
    /// (a duplicate, or a replay) releases it again.
    pub(super) fn on_ack(&mut self, now: Instant, rx: Inbound<'_>) {
        let Inbound { from, msg, .. } = rx;
        let key = ExchangeKey::Passive {
            handle: msg.assoc_handle,
            from,
            ap: msg.ap().into(),
            cp: msg.cp().into(),
        };
        let block = cookie::block_of(msg, rx.datagram);
        // (No meter on ten-bit checks: a failed one ends the held entry it names, so each
        // guess costs the guesser a REQUEST, and a per-source meter is what a spoofer
        // empties with its victim's address.)
        let binding = Binding::of_ack(from, msg);
        let Some(verified) = self
            .admission
            .cookies
            .verify(now, msg, block.as_ref(), &binding)
        else {
            self.unverified_ack(now, rx, key, block.is_none());
            return;
        };
        let Some(xid) = self.exchanges.find(&key) else {
            if verified.plan == Some(RemoteInfoPlan::OnAck) {
                self.remote_info_on_verified_ack(now, rx, key, &binding, verified.mapped_cp_port);
            } else if verified.plan.is_none() {
                // A ten-bit ACK: its mapped port, if any, is held.
                let fingerprint = self.admission.cookies.fingerprint(&binding);
                if let Some(held) = self.held.take(now, fingerprint) {
                    self.remote_info_on_verified_ack(now, rx, key, &binding, held.mapped_cp_port);
                }
            }
            return;
        };
        let expected = match self.exchanges.get(xid).map(|ex| &ex.kind) {
            Some(ExchangeKind::Passive(p)) if !p.confirmed => plan_of(&p.remote_info),
            Some(ExchangeKind::Passive(_)) => verified.plan,
            _ => return,
        };
        // An exchange answers one ACCEPT: an ACK whose cookie planned otherwise answers
        // an earlier association with the same key (replayed), and confirms nothing.
        if verified.plan.is_some_and(|plan| Some(plan) != expected) {
            self.stats.peer_acks_replayed += 1;
            return;
        }
        if !self.exchanges.confirm(xid) {
            self.stats.peer_duplicates += 1;
            // The ACK again: our notice may be lost (our active side re-ACKs while it
            // waits). Once more at most: rdma-core ACKs every ACCEPT, the notice included.
            if verified.plan == Some(RemoteInfoPlan::OnAck) && self.take_notice_resend(xid) {
                self.send_delivery_notice(now, rx, block.as_ref());
            }
            return;
        }
        let Some(ExchangeKind::Passive(p)) = self.exchanges.get_mut(xid).map(|ex| &mut ex.kind)
        else {
            return;
        };
        p.confirmed_at = Some(now);
        let settled = std::mem::replace(&mut p.remote_info, RemoteInfo::Settled);
        if settled == RemoteInfo::Settled {
            return;
        }
        if settled == RemoteInfo::SentOnToken && self.within_allowance(now, rx) {
            self.admission.remote_info_tokens.refund();
        }
    }

    /// An ACK whose cookie did not verify: counted, and it ends the unconfirmed exchange it
    /// names (its held REMOTE_INFO dropped, its token not returned), so each guess at a
    /// ten-bit cookie costs the guesser a REQUEST: the cookie can be guessed, not swept.
    fn unverified_ack(&mut self, now: Instant, rx: Inbound<'_>, key: ExchangeKey, ten_bits: bool) {
        let from = rx.from;
        if ten_bits {
            // The guess ends the held entry it names: one guess per REQUEST.
            let fingerprint = self
                .admission
                .cookies
                .fingerprint(&Binding::of_ack(from, rx.msg));
            if self.held.take(now, fingerprint).is_some() {
                self.stats.remote_info_held_dropped += 1;
            }
        }
        self.count_warn(
            now,
            |s| &mut s.peer_acks_unverified,
            LogKind::UnverifiedAck,
            format_args!(
                "ACK from {from} dropped: it does not echo the cookie of an ACCEPT we sent \
                 there (blind, tampered, stale, or from a peer that zeroes the bytes)"
            ),
        );
        // A 128-bit cookie cannot be guessed, so a failed check says only that someone
        // forged an ACK (perhaps having seen the exchange): the exchange lives on for the
        // real peer's ACK. A ten-bit one could be swept, so its exchange ends: each guess
        // then costs the guesser a REQUEST.
        if !ten_bits {
            return;
        }
        let Some(xid) = self.exchanges.find(&key) else {
            return;
        };
        if self.exchanges.get(xid).is_some_and(|ex| ex.is_waiting()) {
            self.evict(xid);
        }
    }

    /// May `source`'s verified ACK release a REMOTE_INFO (or return a token) now? Takes one
    /// of its allowance; says so, rate-limited, when there is none.
    fn within_allowance(&mut self, now: Instant, rx: Inbound<'_>) -> bool {
        if self.admission.take_allowance(now, rx.from.ip(), rx.trust) {
            return true;
        }
        let from = rx.from;
        let (burst, rate) = (
            self.config.remote_info_source_burst,
            self.config.remote_info_source_rate,
        );
        self.count_warn(
            now,
            |s| &mut s.remote_info_source_capped,
            LogKind::SourceCapped,
            format_args!(
                "verified ACK from {from}: its source had {burst} REMOTE_INFOs released \
                 (then {rate} per second); no more until its allowance refills"
            ),
        );
        false
    }

    /// The REMOTE_INFO a stateless ACCEPT deferred to its (verified) ACK, once per
    /// exchange, and the confirmed entry that absorbs the ACK's duplicates.
    fn remote_info_on_verified_ack(
        &mut self,
        now: Instant,
        rx: Inbound<'_>,
        key: ExchangeKey,
        binding: &Binding,
        mapped_cp_port: u16,
    ) {
        let Inbound { from, msg: ack, .. } = rx;
        let source = SourceKey::of(from.ip());
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
        let fingerprint = self.admission.cookies.fingerprint(binding);
        if self.admission.released.contains(now, fingerprint) {
            self.count_warn(
                now,
                |s| &mut s.peer_acks_replayed,
                LogKind::Replayed,
                format_args!(
                    "ACK from {from}: its exchange already released its REMOTE_INFO \
                     (a duplicate or a replay)"
                ),
            );
            return;
        }
        let mapped_cp = SocketAddr::new(ack.cp_ip, mapped_cp_port);
        let Some((owner, remote_info)) = self.remote_info_for(id, ack.cp(), mapped_cp) else {
            return;
        };
        if !self.within_allowance(now, rx) {
            return;
        }
        if !self
            .admission
            .released
            .record(now, fingerprint, now + COOKIE_LIFETIME)
        {
            self.stats.remote_info_source_capped += 1;
            return;
        }
        self.stats.remote_info_on_ack += 1;
        self.send_kernel(owner, DaemonMsg::RemoteInfo(remote_info));
        self.send_delivery_notice(now, rx, cookie::block_of(ack, rx.datagram).as_ref());
        if !self.room_for_passive(source) {
            return;
        }
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
                source,
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
    /// kernel connect. Built from the ACK, which echoes every byte of our ACCEPT; only a
    /// cookie block has room for the mark.
    fn send_delivery_notice(&mut self, now: Instant, rx: Inbound<'_>, block: Option<&Ipv4Echo>) {
        let Some(block) = block else {
            return;
        };
        let notice = PeerMessage {
            msg_type: PeerMsgType::Accept,
            ..*rx.msg
        };
        let bytes = encode_accept(&notice, &cookie::delivery_notice(block), Room::Block);
        self.stats.remote_info_notices_sent += 1;
        self.answer(now, rx, PeerMsgType::Accept, bytes);
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
}

/// What an ACCEPT in the making needs: where it leaves, what its cookie binds, and where
/// the cookie goes.
struct Answer {
    via: PeerSocket,
    binding: Binding,
    accept: PeerMessage,
    room: Room,
}

/// The plan an exchange's ACCEPT was marked with, as its REMOTE_INFO state says.
fn plan_of(remote_info: &RemoteInfo) -> Option<RemoteInfoPlan> {
    match remote_info {
        RemoteInfo::SentOnToken | RemoteInfo::SentAuthenticated => Some(RemoteInfoPlan::SentAtOnce),
        RemoteInfo::Settled => None,
    }
}

/// Where the ACCEPT for `req` (received as `datagram`) carries its cookie: in a 24-byte
/// block for IPv4 (the unused address bytes) and for an IPv6 peer that announced it echoes
/// one (the extension block); else, IPv6 from rdma-core, in ten bits.
fn cookie_room(req: &PeerMessage, datagram: &[u8]) -> Room {
    match req.ip_version {
        IpVersion::V4 => Room::Block,
        IpVersion::V6 if cookie::announces_block(datagram) => Room::Block,
        IpVersion::V6 => Room::TenBits,
    }
}

/// How long an answer of `len` bytes is on the wire: sealed when its question was.
fn answer_len(len: usize, trust: Trust) -> usize {
    match trust {
        Trust::Authenticated => PEER_AUTH_LEN,
        Trust::Unauthenticated => len,
    }
}

/// An ACCEPT's bytes with its cookie where `room` says.
fn encode_accept(accept: &PeerMessage, block: &Ipv4Echo, room: Room) -> Vec<u8> {
    match room {
        Room::Block => cookie::encode_with_block(accept, block),
        Room::TenBits => accept.encode(),
    }
}
