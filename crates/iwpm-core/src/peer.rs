//! Peer side (UDP 3935): the active (connecting) and passive (accepting) state machines and
//! their retransmission timers.
//!
//! Active: QUERY → REQUEST, retransmitted every `retransmit_interval` up to
//! `max_retransmits` times, dropped after `exchange_lifetime`. ACCEPT → QUERY reply + ACK;
//! the exchange then lives on (refreshed by each duplicate ACCEPT) to re-ACK duplicates.
//! REJECT → QUERY reply with error 16. Passive: REQUEST → loose look-up → ACCEPT
//! (retransmitted until ACK) + REMOTE_INFO to the mapping's owner, or an immediate REJECT.
//! Answers go out on the socket the datagram came in on, to its source.
//!
//! # Where we differ from the C daemon, on purpose
//!
//! * **A late duplicate REQUEST stays a duplicate**: after the ACK the passive exchange is
//!   kept until its lifetime ends, so a REQUEST retransmission still in flight does not
//!   produce a second ACCEPT and a second REMOTE_INFO (which the kernel would keep forever).
//! * **Passive exchanges are keyed by source address too**, see `exchange.rs`.
//! * **Exchanges end with their mapping**: a REMOVE that frees a mapping stops its
//!   retransmissions at once (C keeps sending for up to 10 s).
//! * **No answer after the kernel gave up**: an ACCEPT/REJECT arriving after
//!   `reply_deadline` produces no QUERY reply (and no ACK); it is counted.
//! * **Bounded**: at most `max_exchanges` exchanges; a REQUEST beyond that is dropped
//!   without an answer (the peer retransmits), a QUERY gets CREATE_MAPPING_ERR.
//! * **A 48-byte REQUEST** (pre-2014 peers) has no mapped address; C reads uninitialised
//!   memory there. We use the connecting IP with the reserved port (or the cp port if 0).
//! * **Malformed datagrams** (length not 48/64, IP nibble not 4/6) are dropped with a
//!   rate-limited warning and counted.

use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::netlink::{DaemonMsg, QueryMappingReply};
use iwpm_proto::peer::{PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use crate::action::PeerSocket;
use crate::core::{code, Core};
use crate::exchange::{ActiveQuery, ActiveState, Exchange, ExchangeKey, ExchangeKind};
use crate::ratelimit::LogKind;
use crate::table::MappingId;

impl Core {
    pub(crate) fn process_peer_datagram(
        &mut self,
        now: Instant,
        via: PeerSocket,
        from: SocketAddr,
        datagram: &[u8],
    ) {
        let msg = match PeerMessage::decode(datagram) {
            Ok(m) => m,
            Err(e) => {
                self.stats.peer_malformed += 1;
                self.warn(
                    now,
                    LogKind::MalformedPeer,
                    format_args!("peer datagram from {from} dropped: {e}"),
                );
                return;
            }
        };
        if let Some(c) = self.stats.peer_in.get_mut(usize::from(msg.msg_type.code())) {
            *c += 1;
        }
        match msg.msg_type {
            PeerMsgType::Request => self.on_request(now, via, from, &msg),
            PeerMsgType::Accept => self.on_accept(now, via, from, &msg),
            PeerMsgType::Ack => self.on_ack(from, &msg),
            PeerMsgType::Reject => self.on_reject(now, from, &msg),
        }
    }

    /// Sends the REQUEST for a QUERY whose mapping `id` now holds a reference.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_query_exchange(
        &mut self,
        now: Instant,
        received: Instant,
        client: u8,
        seq: u32,
        id: MappingId,
        local: SockAddrStorage,
        remote: SockAddrStorage,
        remote_sa: SocketAddr,
    ) {
        let Some((local_ep, mapped_ep)) = self.table.get(id).map(|m| (m.local_ep, m.mapped_ep))
        else {
            return;
        };
        let handle = self.handles.next_handle();
        let req = PeerMessage::request(
            handle,
            SocketAddr::new(local_ep.ip, local_ep.port),
            SocketAddr::new(mapped_ep.ip, mapped_ep.port),
            remote_sa,
        );
        let datagram = req.encode();
        let mut to = remote_sa;
        to.set_port(self.config.peer_port);
        let via = PeerSocket::client_for(&to);
        let ex = Exchange::new(
            ExchangeKey::Active {
                handle,
                cp: local_ep,
            },
            id,
            via,
            to,
            datagram.clone(),
            self.config.max_retransmits,
            now + self.config.exchange_lifetime,
            ExchangeKind::Active(Box::new(ActiveQuery {
                client,
                kernel_seq: seq,
                reply_deadline: received + self.config.reply_deadline,
                local,
                remote,
                state: ActiveState::Requesting,
            })),
        );
        self.exchanges
            .insert(ex, now + self.config.retransmit_interval);
        self.send_peer(via, to, PeerMsgType::Request, datagram);
    }

    fn on_request(&mut self, now: Instant, via: PeerSocket, from: SocketAddr, msg: &PeerMessage) {
        let ap_ep = Endpoint::from(msg.ap());
        let found = self.table.loose_local(&ap_ep).and_then(|id| {
            let m = self.table.get(id)?;
            // A wildcard listener answers with the requested IP and its mapped port.
            let ip = if m.local_ep.is_wildcard() {
                msg.ap_ip
            } else {
                m.mapped_ep.ip
            };
            let answer = SocketAddr::new(ip, m.mapped_ep.port);
            (answer.is_ipv4() == msg.ap_ip.is_ipv4())
                .then_some((id, answer, m.owner, m.local, m.mapped))
        });
        let Some((id, answer_ap, owner, m_local, m_mapped)) = found else {
            self.stats.rejects_sent += 1;
            self.send_peer(
                via,
                from,
                PeerMsgType::Reject,
                PeerMessage::reject_for(msg).encode(),
            );
            return;
        };
        let key = ExchangeKey::Passive {
            handle: msg.assoc_handle,
            from,
            ap: answer_ap.into(),
            cp: msg.cp().into(),
        };
        if self.exchanges.find(&key).is_some() {
            self.stats.peer_duplicates += 1;
            return;
        }
        if self.exchanges.len() >= self.config.max_exchanges {
            self.stats.exchanges_refused += 1;
            let max = self.config.max_exchanges;
            self.warn(
                now,
                LogKind::CapReached,
                format_args!("REQUEST from {from} dropped: {max} exchanges in flight"),
            );
            return;
        }
        let accept = PeerMessage::accept_for(msg, answer_ap).encode();
        let ex = Exchange::new(
            key,
            id,
            via,
            from,
            accept.clone(),
            self.config.max_retransmits,
            now + self.config.exchange_lifetime,
            ExchangeKind::Passive { acked: false },
        );
        self.exchanges
            .insert(ex, now + self.config.retransmit_interval);
        let mapped_cp = msg.mapped_cp().unwrap_or_else(|| {
            let port = if msg.reserved_port != 0 {
                msg.reserved_port
            } else {
                msg.cp_port
            };
            SocketAddr::new(msg.cp_ip, port)
        });
        self.send_kernel(
            owner,
            DaemonMsg::RemoteInfo(QueryMappingReply {
                seq: 0,
                local_addr: m_local,
                remote_addr: SockAddrStorage::from(msg.cp()),
                mapped_local_addr: m_mapped,
                mapped_remote_addr: SockAddrStorage::from(mapped_cp),
                err: 0,
                unknown: Vec::new(),
            }),
        );
        // REMOTE_INFO goes to the kernel before the ACCEPT leaves: the peer connects as soon
        // as it has the ACCEPT, and a connection that reaches iw_cm before its remote-info
        // entry is reported with the peer's mapped address and leaks the entry
        // (kernel-iwpm.md §4.4). The C daemon gets this order by accident (its ACCEPT goes
        // through a sender thread); we make it explicit.
        self.send_peer(via, from, PeerMsgType::Accept, accept);
    }

    fn on_accept(&mut self, now: Instant, via: PeerSocket, from: SocketAddr, msg: &PeerMessage) {
        let key = ExchangeKey::Active {
            handle: msg.assoc_handle,
            cp: msg.cp().into(),
        };
        let Some(xid) = self.exchanges.find(&key) else {
            self.stats.peer_unmatched += 1;
            return;
        };
        let lifetime = self.config.exchange_lifetime;
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        let ExchangeKind::Active(q) = &mut ex.kind else {
            return;
        };
        if let ActiveState::Acked { ack } = &q.state {
            // Our ACK was lost: answer the retransmitted ACCEPT again.
            let ack = ack.clone();
            ex.expires = now + lifetime;
            self.exchanges.reschedule(xid, now + lifetime);
            self.stats.peer_duplicates += 1;
            self.send_peer(via, from, PeerMsgType::Ack, ack);
            return;
        }
        let (client, kernel_seq, reply_deadline, local, remote) =
            (q.client, q.kernel_seq, q.reply_deadline, q.local, q.remote);
        if now >= reply_deadline {
            self.exchanges.remove(xid);
            self.late_answer(now, "ACCEPT");
            return;
        }
        let Some(mapped_remote) = remote
            .to_socket_addr()
            .filter(|r| r.is_ipv4() == msg.ap_ip.is_ipv4())
            .map(|mut r| {
                r.set_ip(msg.ap_ip);
                r.set_port(msg.ap_port);
                SockAddrStorage::from(r)
            })
        else {
            self.stats.peer_malformed += 1;
            return;
        };
        let mapping = ex.mapping;
        let Some(mapped_local) = self.table.get(mapping).map(|m| m.mapped) else {
            return;
        };
        self.send_kernel(
            client,
            DaemonMsg::QueryMapping(QueryMappingReply {
                seq: kernel_seq,
                local_addr: local,
                remote_addr: remote,
                mapped_local_addr: mapped_local,
                mapped_remote_addr: mapped_remote,
                err: 0,
                unknown: Vec::new(),
            }),
        );
        let ack = PeerMessage::ack_for(msg).encode();
        if let Some(ex) = self.exchanges.get_mut(xid) {
            ex.retransmit = None;
            ex.expires = now + lifetime;
            if let ExchangeKind::Active(q) = &mut ex.kind {
                q.state = ActiveState::Acked { ack: ack.clone() };
            }
        }
        self.exchanges.reschedule(xid, now + lifetime);
        self.send_peer(via, from, PeerMsgType::Ack, ack);
    }

    fn on_reject(&mut self, now: Instant, from: SocketAddr, msg: &PeerMessage) {
        let key = ExchangeKey::Active {
            handle: msg.assoc_handle,
            cp: msg.cp().into(),
        };
        let Some(xid) = self.exchanges.find(&key) else {
            self.stats.peer_unmatched += 1;
            self.warn(
                now,
                LogKind::RejectUnknown,
                format_args!("received reject for unknown mapping from {from}"),
            );
            return;
        };
        let Some(ex) = self.exchanges.get(xid) else {
            return;
        };
        let (client, kernel_seq, reply_deadline, local, remote) = match &ex.kind {
            ExchangeKind::Active(q) if q.state == ActiveState::Requesting => {
                (q.client, q.kernel_seq, q.reply_deadline, q.local, q.remote)
            }
            _ => {
                // Already answered by an ACCEPT.
                self.stats.peer_unmatched += 1;
                return;
            }
        };
        let mapping = ex.mapping;
        self.exchanges.remove(xid);
        self.stats.rejects_received += 1;
        if now >= reply_deadline {
            self.late_answer(now, "REJECT");
            return;
        }
        let Some(mapped_local) = self.table.get(mapping).map(|m| m.mapped) else {
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

    fn on_ack(&mut self, from: SocketAddr, msg: &PeerMessage) {
        let key = ExchangeKey::Passive {
            handle: msg.assoc_handle,
            from,
            ap: msg.ap().into(),
            cp: msg.cp().into(),
        };
        let Some(xid) = self.exchanges.find(&key) else {
            self.stats.peer_unmatched += 1;
            return;
        };
        let Some(ex) = self.exchanges.get_mut(xid) else {
            return;
        };
        match &mut ex.kind {
            ExchangeKind::Passive { acked } if !*acked => {
                *acked = true;
                ex.retransmit = None;
                let expires = ex.expires;
                self.exchanges.reschedule(xid, expires);
            }
            _ => self.stats.peer_duplicates += 1,
        }
    }

    fn late_answer(&mut self, now: Instant, what: &str) {
        self.stats.replies_dropped_late += 1;
        self.warn(
            now,
            LogKind::LateReply,
            format_args!("{what} arrived after the kernel gave up on its QUERY; not answered"),
        );
    }

    /// Retransmissions and expiries due at `now`.
    pub(crate) fn run_exchange_timers(&mut self, now: Instant) {
        let interval = self.config.retransmit_interval;
        while let Some(due) = self.exchanges.pop_due(now) {
            let Some(ex) = self.exchanges.get_mut(due.id) else {
                continue;
            };
            if due.at >= ex.expires {
                if let Some(ex) = self.exchanges.remove(due.id) {
                    if ex.is_waiting() {
                        self.stats.exchanges_expired += 1;
                    }
                }
                continue;
            }
            let resend = match &ex.retransmit {
                Some(d) if ex.retransmits_left > 0 => {
                    ex.retransmits_left -= 1;
                    Some((ex.via, ex.to, d.clone(), ex.kind.clone()))
                }
                _ => None,
            };
            let more = ex.retransmit.is_some() && ex.retransmits_left > 0;
            let expires = ex.expires;
            // Skip ticks missed while the shell was late rather than bursting them.
            let next = match due.at + interval {
                _ if !more => expires,
                t if t <= now => now + interval,
                t => t,
            };
            self.exchanges.rearm(due.id, next);
            if let Some((via, to, d, kind)) = resend {
                self.stats.retransmissions += 1;
                let ty = match kind {
                    ExchangeKind::Active(_) => PeerMsgType::Request,
                    ExchangeKind::Passive { .. } => PeerMsgType::Accept,
                };
                self.send_peer(via, to, ty, d);
            }
        }
    }
}
