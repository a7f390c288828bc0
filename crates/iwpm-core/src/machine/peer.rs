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

use super::Core;
use crate::action::PeerSocket;
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
    datagram: &'a [u8],
}

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
        let rx = Inbound {
            via,
            from,
            msg: &msg,
            datagram,
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
