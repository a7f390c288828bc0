//! Active side of the peer exchange: our kernel sent a QUERY for a connection to a remote
//! address, so we ask the peer daemon there (REQUEST, retransmitted) and answer the kernel
//! from its ACCEPT or REJECT, or at once from our own table when the remote is this host.
//! Its own file because it is one state machine (`ActiveState`: Requesting, then Acked or
//! AwaitingNotice for the held reply) that shares nothing with the passive side but the
//! exchange table; the passive side is where strangers' datagrams are metered.
//!
//! # Defences
//!
//! * **Answers at most 1:1**: a duplicate ACCEPT is re-ACKed at most `max_retransmits`
//!   times and never extends the exchange.
//! * **Answers only from the asked host**: an ACCEPT or REJECT counts only if it comes from
//!   the IP the REQUEST went to, and an ACCEPT's mapped IP must be the IP we asked for.
//! * **The ACK before the answer**: we ACK *before* answering our kernel, and for an IPv4
//!   ACCEPT that says its REMOTE_INFO waits for the ACK we hold that answer until the
//!   passive side's delivery notice (at most 60 ms; [`crate::cookie`]), so the REMOTE_INFO
//!   is in the passive kernel before the connection.
//!
//! # Differences from the C daemon, on purpose
//!
//! * **No answer after the kernel gave up** (`reply_deadline`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_proto::netlink::{DaemonMsg, QueryMappingReply};
use iwpm_proto::peer::{PeerMessage, PeerMsgType, IPV4_ECHO_LEN};
use iwpm_proto::sockaddr::SockAddrStorage;

use super::Inbound;
use crate::action::PeerSocket;
use crate::admission::Trust;
use crate::cookie;
use crate::exchange::{
    ActiveQuery, ActiveState, Due, Exchange, ExchangeId, ExchangeKey, ExchangeKind,
};
use crate::machine::{code, Core};
use crate::mapping_id::MappingId;
use crate::peer_book::{ExchangeOutcome, RecentExchange};
use crate::ratelimit::LogKind;
use crate::request::Query;

/// How long one wait for a delivery notice lasts, and how many waits (each but the first
/// re-sends the ACK) before the kernel gets its answer anyway. The notice normally comes one
/// round trip after our ACK.
const NOTICE_WAIT: Duration = Duration::from_millis(20);
const NOTICE_WAITS: u32 = 3;

impl Core {
    /// Finds the remote mapped address for a QUERY whose local mapping is `id`: from our
    /// own table when the remote is on this host (see [`Core::answer_locally`]), else by
    /// asking the peer daemon.
    pub(in crate::machine) fn resolve_query(&mut self, now: Instant, query: Query, id: MappingId) {
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
        let remote_sa = SocketAddr::from(remote.ep);
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
            if let Some((owner, remote_info)) =
                self.remote_info_for(listener, cp.into(), mapped_cp.into())
            {
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

    /// How our REQUESTs go: sealed whenever we hold fleet keys, to any peer. A keyed peer
    /// then answers sealed; rdma-core reads the first 64 bytes, the plain REQUEST; one of
    /// ours without keys serves the plain REQUEST inside.
    fn request_trust(&self) -> Trust {
        if self.admission.auth.is_keyed() {
            Trust::Authenticated
        } else {
            Trust::Unauthenticated
        }
    }

    /// Sends the REQUEST for a QUERY whose mapping `id` now holds a reference.
    fn start_query_exchange(&mut self, now: Instant, query: Query, id: MappingId) {
        let Query { req, local, remote } = query;
        let remote_sa = SocketAddr::from(remote.ep);
        let Some((local_ep, mapped_ep)) = self.table.get(id).map(|m| (m.local_ep(), m.mapped_ep()))
        else {
            return;
        };
        let handle = self.handles.next_handle();
        // An IPv6 REQUEST carries the extension block, announcing that we echo a cookie
        // block (`docs/protocol.md` §6.13): our passive peers then answer statelessly with
        // a full cookie; rdma-core reads the first 64 bytes only.
        let request = cookie::encode_with_block(
            &PeerMessage::request(handle, local_ep.into(), mapped_ep.into(), remote_sa),
            &[0; IPV4_ECHO_LEN],
        );
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
        let trust = self.request_trust();
        self.send_peer_to(now, via, to, PeerMsgType::Request, request, trust, None);
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

    /// An ACCEPT for one of our REQUESTs: ACK it, then answer the kernel, or hold the
    /// answer for the passive side's delivery notice; a duplicate is re-ACKed (bounded).
    pub(super) fn on_accept(&mut self, now: Instant, rx: Inbound<'_>) {
        let Inbound {
            from,
            msg,
            datagram,
            trust,
            ..
        } = rx;
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
        let block = cookie::block_of(msg, datagram);
        let notice = block.is_some_and(|b| cookie::is_delivery_notice(&b));
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
                self.answer(now, rx, PeerMsgType::Ack, ack);
                return;
            }
            ActiveState::AwaitingNotice { ack, .. } if !notice => {
                // A duplicate ACCEPT while we wait: our ACK was lost, send it again (the
                // waits bound how often).
                self.stats.peer_duplicates += 1;
                let ack = ack.clone();
                self.answer(now, rx, PeerMsgType::Ack, ack);
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
        let ack = match &block {
            Some(block) => cookie::encode_with_block(&PeerMessage::ack_for(msg), block),
            None => PeerMessage::ack_for(msg).encode(),
        };
        self.answer(now, rx, PeerMsgType::Ack, ack.clone());
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
        if block.is_some_and(|b| cookie::plans_remote_info_on_ack(&b)) {
            self.stats.query_replies_held += 1;
            let held = ActiveState::AwaitingNotice {
                ack,
                reply: Box::new(reply),
                client,
                waits_left: NOTICE_WAITS,
                trust,
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

    /// A REJECT for one of our REQUESTs: the kernel's QUERY is answered with error 16.
    pub(super) fn on_reject(&mut self, now: Instant, rx: Inbound<'_>) {
        let Inbound { from, msg, .. } = rx;
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

    /// Records how a local exchange ended, for the control socket's `peers` (passive
    /// exchanges are not recorded: they end by expiry whatever happened).
    pub(super) fn note_finished(
        &mut self,
        now: Instant,
        xid: ExchangeId,
        outcome: ExchangeOutcome,
    ) {
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

    /// An exchange's timer before its expiry: an active exchange's REQUEST retransmission
    /// or delivery-notice wait; anything else is rearmed for its expiry.
    pub(super) fn exchange_timer(&mut self, now: Instant, due: Due) {
        let interval = self.config.retransmit_interval;
        let Some(ex) = self.exchanges.get_mut(due.id) else {
            return;
        };
        let (via, to, expires) = (ex.via, ex.to, ex.expires());
        // No delivery notice yet: the ACK may be lost, send it again; after the last
        // wait the kernel gets its answer anyway.
        let waiting = match &mut ex.kind {
            ExchangeKind::Active(q) => match &mut q.state {
                ActiveState::AwaitingNotice {
                    ack,
                    waits_left,
                    trust,
                    ..
                } if *waits_left > 1 => {
                    *waits_left -= 1;
                    Some(Some((ack.clone(), *trust)))
                }
                ActiveState::AwaitingNotice { .. } => Some(None),
                _ => None,
            },
            ExchangeKind::Passive(_) => None,
        };
        match waiting {
            Some(Some((ack, trust))) => {
                self.exchanges.rearm(due.id, now + NOTICE_WAIT);
                self.send_peer_to(now, via, to, PeerMsgType::Ack, ack, trust, None);
                return;
            }
            Some(None) => {
                self.release_held_reply(now, due.id, true);
                return;
            }
            None => {}
        }
        let Some(ex) = self.exchanges.get_mut(due.id) else {
            return;
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
            let trust = self.request_trust();
            self.send_peer_to(now, via, to, PeerMsgType::Request, datagram, trust, None);
        }
    }
}
