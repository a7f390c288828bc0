//! Peer side (UDP 3935): what the two halves of the peer exchange share. A datagram is
//! admitted (`peer_allow`, decoding) and dispatched here, and here are the listener look-up
//! and the REMOTE_INFO that both halves build, and the exchange timers. The halves are
//! separate state machines with separate threats, so each has its own file:
//! [`active`] (our kernel connects: we ask the peer daemon) and [`passive`] (a peer daemon
//! asks us about one of our listeners).
//!
//! Active: QUERY → REQUEST, retransmitted every `retransmit_interval` up to
//! `max_retransmits` times, dropped after `exchange_lifetime`. ACCEPT → ACK + QUERY reply;
//! the exchange then lives on to re-ACK a few duplicate ACCEPTs. REJECT → QUERY reply with
//! error 16. Passive: REQUEST → loose look-up of a listener → ACCEPT + REMOTE_INFO to the
//! mapping's owner, or a REJECT. Answers go out on the socket the datagram came in on.
//!
//! # Defences (what a host on the network can make us do, and the bound)
//!
//! Anyone can send UDP to port 3935 with any source address, so every answer is metered.
//! Each half lists its own defences ([`passive`]: forgery, echo cookies, the REMOTE_INFO
//! budget, exchange budgets, REJECTs, listeners only; [`active`]: answers at most 1:1 and
//! only from the host asked, the ACK before the answer). Common to both:
//!
//! * `peer_allow` drops every datagram from a source outside the configured networks.
//!
//! # Other differences from the C daemon, on purpose
//!
//! (Each half lists its own as well.)
//!
//! * **Exchanges end with their mapping**: a REMOVE that frees a mapping stops its
//!   retransmissions at once (C keeps sending for up to 10 s).
//! * **Malformed datagrams** are dropped with a rate-limited warning and counted.

mod active;
mod passive;

use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::netlink::QueryMappingReply;
use iwpm_proto::peer::{PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};
use iwpm_report::Stats;

use super::Core;
use crate::action::PeerSocket;
use crate::admission::{AuthFailure, Refusal, Trust};
use crate::mapping_id::MappingId;
use crate::peer_book::ExchangeOutcome;
use crate::ratelimit::LogKind;
use crate::table::MappingRole;

/// Most timers handled per [`Core::handle_timeout`] call; the rest are due at once on the
/// next call, so one loop turn never stalls on a burst of expiries.
const MAX_TIMERS_PER_CALL: usize = 1024;

/// A decoded peer datagram, its bytes (an ACCEPT's and an ACK's echo) and where it came
/// from: what each side's handler reads.
#[derive(Clone, Copy)]
struct Inbound<'a> {
    /// The socket it came in on, which the answer leaves by.
    via: PeerSocket,
    from: SocketAddr,
    msg: &'a PeerMessage,
    /// The datagram as its sender wrote it (unsealed).
    datagram: &'a [u8],
    /// Whether it was sealed under one of our fleet keys.
    trust: Trust,
    /// Its length on the wire (sealed or not): no answer to it is longer.
    received_len: usize,
}

impl Core {
    pub(super) fn process_peer_datagram(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        received: &[u8],
    ) {
        let opened = match self.admission.admit(now, from, received) {
            Ok(opened) => opened,
            Err(refusal) => {
                self.refused(now, from, refusal);
                return;
            }
        };
        if let Some(key_id) = opened.key_id {
            self.stats.peer_auth_verified += 1;
            self.note_auth(now, from, Ok(key_id));
        } else if opened.inner.is_some() {
            // Sealed, and we hold no key: served as the plain datagram inside.
            self.stats.peer_auth_unkeyed += 1;
        }
        let datagram = opened.inner.as_deref().unwrap_or(received);
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
        let rx = Inbound {
            via,
            from,
            msg: &msg,
            datagram,
            trust: opened.trust,
            received_len: received.len(),
        };
        match msg.msg_type {
            PeerMsgType::Request => {
                self.peer_book.tally(from.ip(), now).requests_in += 1;
                self.on_request(now, rx);
            }
            PeerMsgType::Accept => self.on_accept(now, rx),
            PeerMsgType::Ack => self.on_ack(now, rx),
            PeerMsgType::Reject => self.on_reject(now, rx),
        }
    }

    /// A datagram the admission refused: counted, logged (rate-limited) and noted against
    /// its source for `iwpmctl peers`.
    fn refused(&mut self, now: Instant, from: SocketAddr, refusal: Refusal) {
        let Refusal::Auth(r) = refusal else {
            self.count_warn(
                now,
                |s| &mut s.peer_not_allowed,
                LogKind::NotAllowed,
                format_args!("peer datagram from {from} dropped: source not in peer_allow"),
            );
            return;
        };
        self.note_auth(now, from, Err(r.failure));
        let (counter, detail): (fn(&mut Stats) -> &mut u64, String) = match r.failure {
            AuthFailure::UnknownKey => (
                |s| &mut s.peer_auth_wrong_key,
                format!("it names key id {}, which we do not hold", r.key_id),
            ),
            AuthFailure::BadMac => (
                |s| &mut s.peer_auth_wrong_key,
                format!("its MAC does not verify under our key {} (a different key under that id, or changed bytes)", r.key_id),
            ),
            AuthFailure::Clock => (
                |s| &mut s.peer_auth_clock,
                format!(
                    "its stamp is {} ms from our clock (window ±{} s): check both hosts' time",
                    r.skew_ms,
                    self.config.peer_auth_window.as_secs()
                ),
            ),
            AuthFailure::Replayed => (
                |s| &mut s.peer_auth_replayed,
                "it was seen before (a replay)".to_owned(),
            ),
            AuthFailure::WrongSource => (
                |s| &mut s.peer_auth_wrong_source,
                "it is sealed by a fleet member but comes from another address than the one \
                 it names as its sender (a copy)"
                    .to_owned(),
            ),
            AuthFailure::Missing => (
                |s| &mut s.peer_auth_missing,
                "it is not authenticated, and its network is in peer_auth_required (a peer \
                 without the fleet key, or a stripped datagram)"
                    .to_owned(),
            ),
        };
        self.count_warn(
            now,
            counter,
            LogKind::Unauthenticated,
            format_args!("peer datagram from {from} dropped: {detail}"),
        );
    }

    /// Records how a datagram from `from` authenticated, for `iwpmctl peers`.
    fn note_auth(&mut self, now: Instant, from: SocketAddr, outcome: Result<u32, AuthFailure>) {
        let tally = self.peer_book.tally(from.ip(), now);
        tally.auth = tally.auth.after(outcome);
    }

    /// Sends an answer to `rx`: sealed when `rx` was authenticated, and only if it is no
    /// larger on the wire than `rx` was, so that no one, whatever source it writes, gets
    /// more bytes out of us than it sent (a real peer's retransmission has its original's
    /// size, so its answer always fits).
    fn answer(&mut self, now: Instant, rx: Inbound<'_>, ty: PeerMsgType, datagram: Vec<u8>) {
        self.send_peer_to(
            now,
            rx.via,
            rx.from,
            ty,
            datagram,
            rx.trust,
            Some(rx.received_len),
        );
    }

    /// Sends `datagram` to `to`, sealed when `trust` says the peer is keyed (and we have
    /// keys); with `limit`, only if it is at most that long on the wire.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_peer_to(
        &mut self,
        now: Instant,
        via: PeerSocket,
        to: SocketAddr,
        ty: PeerMsgType,
        datagram: Vec<u8>,
        trust: Trust,
        limit: Option<usize>,
    ) {
        let wire = match trust {
            Trust::Authenticated => self.admission.auth.seal(now, &datagram).unwrap_or(datagram),
            Trust::Unauthenticated => datagram,
        };
        if limit.is_some_and(|limit| wire.len() > limit) {
            self.stats.peer_answers_withheld += 1;
            return;
        }
        self.send_peer(via, to, ty, wire);
    }

    /// The listener mapping for the accepting address `ap` and the mapped address to
    /// answer with; see [`Core::listener_for`].
    fn listener_answer(&self, ap: SocketAddr) -> Option<(MappingId, SocketAddr)> {
        // (`::ffff:0.0.0.0` is the IPv4 wildcard too)
        if ap.ip().to_canonical().is_unspecified() {
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

    /// REQUEST retransmissions, delivery-notice waits and expiries due at `now`, at most
    /// [`MAX_TIMERS_PER_CALL`]. A passive exchange's only timer is its expiry.
    pub(super) fn run_exchange_timers(&mut self, now: Instant) {
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
            self.exchange_timer(now, due);
        }
    }
}
