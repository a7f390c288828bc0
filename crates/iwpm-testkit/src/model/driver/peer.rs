//! The model peers: answers to the REQUESTs and ACCEPTs the core sent, echoes, forged and
//! raw datagrams, and the checks on every datagram the core sends.

use std::net::SocketAddr;

use iwpm_core::PeerSocket;
use iwpm_proto::peer::{auth, ipv4_echo, IpVersion, PeerMessage, PeerMsgType};

use super::{Ctx, Driver, Op};
use crate::model::fleet_key;
use crate::model::pools::{
    fail, listener_for, local_addr, peer_ip, peer_source, socket_is_v4, GRANT_BASE, LOCAL_IPS,
};

impl Driver {
    /// Plays a peer datagram: well-formed answers to what the core sent, echoes, garbage.
    pub(super) fn peer_op(&mut self, op: &Op) {
        match op {
            Op::Request {
                ap,
                src,
                handle,
                shape,
            } => {
                let ap = local_addr(*ap)
                    .to_socket_addr()
                    .unwrap_or(SocketAddr::new(LOCAL_IPS[1], 4000));
                let mut from = peer_source(*src);
                if from.is_ipv4() != ap.is_ipv4() {
                    from = peer_source(if ap.is_ipv4() { 0 } else { 2 });
                }
                let cp = SocketAddr::new(from.ip(), 5000 + u16::from(shape >> 4));
                let mut mcp = cp;
                mcp.set_port(if shape & 2 != 0 { 0 } else { 41_000 });
                let mut req = PeerMessage::request(u64::from(handle % 8), cp, mcp, ap);
                if shape & 1 != 0 {
                    req.mapped_cp_ip = None;
                }
                let via = if shape & 4 != 0 {
                    PeerSocket::client_for(&from)
                } else {
                    listener_for(&from)
                };
                let mut bytes = req.encode();
                if shape & 8 != 0 {
                    // A fleet member's REQUEST (a core without the key serves it plain).
                    let stamp = self.next_stamp();
                    bytes = auth::seal(&bytes, &fleet_key(), stamp).unwrap_or(bytes);
                }
                self.peer(via, from, &bytes);
            }
            Op::Accept { pick, port, from } => {
                let Some((req, to)) = self.sent_requests.pick(*pick) else {
                    return self.after_step();
                };
                let ap_port = if port % 4 == 0 {
                    req.ap_port
                } else {
                    GRANT_BASE + u16::from(port % 8)
                };
                let acc = PeerMessage::accept_for(&req, SocketAddr::new(req.ap_ip, ap_port));
                let from = self.answer_source(to, *from);
                self.peer(PeerSocket::client_for(&from), from, &acc.encode());
            }
            Op::Reject { pick, from } => {
                let Some((req, to)) = self.sent_requests.pick(*pick) else {
                    return self.after_step();
                };
                let from = self.answer_source(to, *from);
                let rej = PeerMessage::reject_for(&req);
                self.peer(PeerSocket::client_for(&from), from, &rej.encode());
            }
            Op::Ack { pick, from } => {
                let Some((acc, to)) = self.sent_accepts.pick(*pick) else {
                    return self.after_step();
                };
                let Ok(msg) = PeerMessage::decode(&acc) else {
                    return self.after_step();
                };
                let ack = PeerMessage::ack_for(&msg);
                let form = *from >> 6;
                let ack = if form == 2 {
                    ack.encode()
                } else {
                    let mut echo = ipv4_echo(&acc);
                    if form == 3 {
                        let at = usize::from((*from >> 2) & 15) % echo.len();
                        if let Some(b) = echo.get_mut(at) {
                            *b ^= 0x5a;
                        }
                    }
                    ack.encode_with_echo(&echo)
                };
                let from = self.answer_source(to, *from);
                let before = self.remote_infos;
                self.peer(listener_for(&from), from, &ack);
                // An IPv4 ACK that does not echo our cookie from the address the ACCEPT went
                // to (blind, tampered, or replayed by a third host) releases nothing.
                if msg.ip_version == IpVersion::V4
                    && (form >= 2 || from != to)
                    && self.remote_infos != before
                {
                    fail("an unverifiable ACK made the core send a REMOTE_INFO");
                }
            }
            Op::Echo { pick, at, xor } if self.keyed && *at >= 128 && *xor == 0 => {
                let Some((via, from, bytes)) = self.sealed_sent.pick(*pick) else {
                    return self.after_step();
                };
                self.peer(via, from, &bytes);
            }
            Op::Echo { pick, at, xor } => {
                let Some((via, to, mut bytes)) = self.sent_all.pick(*pick) else {
                    return self.after_step();
                };
                if *xor != 0 {
                    let pos = usize::from(*at) % bytes.len().max(1);
                    if let Some(b) = bytes.get_mut(pos) {
                        *b ^= xor;
                    }
                }
                self.peer(via, to, &bytes);
            }
            Op::PeerRaw { src, data } => {
                let from = peer_source(*src);
                self.peer(listener_for(&from), from, data);
            }
            Op::PeerForged {
                ty,
                ips,
                handle,
                ap_port,
                cp_port,
                extra,
            } => {
                let v6 = ips & 0x80 != 0;
                let msg = PeerMessage {
                    version: ty >> 6,
                    msg_type: PeerMsgType::from_code((ty >> 4) & 3),
                    ip_version: if v6 { IpVersion::V6 } else { IpVersion::V4 },
                    pmtime: *extra,
                    reserved_port: if extra & 1 != 0 { 0 } else { 41_000 },
                    ap_port: *ap_port,
                    cp_port: *cp_port,
                    assoc_handle: *handle,
                    cp_ip: peer_ip(*ips, v6),
                    ap_ip: peer_ip(ips >> 2, v6),
                    mapped_cp_ip: (extra & 2 != 0).then(|| peer_ip(ips >> 4, v6)),
                };
                let from = peer_source(if v6 { 2 } else { 0 } | (ty & 4));
                let via = if ty & 8 != 0 {
                    PeerSocket::client_for(&from)
                } else {
                    listener_for(&from)
                };
                self.peer(via, from, &msg.encode());
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    pub(super) fn answer_source(&self, to: SocketAddr, sel: u8) -> SocketAddr {
        if sel % 4 != 0 {
            return to;
        }
        let other = peer_source(sel >> 2);
        if other.is_ipv4() == to.is_ipv4() {
            other
        } else {
            to
        }
    }

    pub(super) fn peer(&mut self, via: PeerSocket, from: SocketAddr, bytes: &[u8]) {
        self.ledger.received(from, bytes);
        // A sealed datagram under the key: the first delivery of its MAC may release one
        // REMOTE_INFO (a fleet member's REQUEST); any later one is a replay.
        let sealed = auth::auth_block(bytes)
            .filter(|_| self.keyed && auth::verify(bytes, &fleet_key()))
            .map(|b| b.mac);
        let replay = sealed.is_some_and(|mac| !self.sealed_seen.insert(mac));
        if sealed.is_some() && !replay {
            self.ledger.sealed_fresh(bytes);
            self.sealed_sent.push((via, from, bytes.to_vec()));
        }
        let before = self.remote_infos;
        self.host.handle_peer_datagram(self.now, via, from, bytes);
        self.pump(Ctx::Input);
        let n = self.remote_infos - before;
        if replay && n != 0 {
            fail("a replayed sealed datagram made the core send a REMOTE_INFO");
        }
        self.ledger
            .remote_infos(n, self.now, &self.config, self.restarts + 1);
    }

    pub(super) fn on_to_peer(
        &mut self,
        ctx: Ctx,
        via: PeerSocket,
        to: SocketAddr,
        datagram: Vec<u8>,
    ) {
        let msg = match PeerMessage::decode(&datagram) {
            Ok(m) => m,
            Err(e) => fail(format!("the core sent an undecodable peer datagram: {e}")),
        };
        if socket_is_v4(via) != to.is_ipv4() {
            fail(format!("datagram to {to} sent on {via:?}"));
        }
        // (a sealed datagram is sealed afresh each time it is sent: what repeats is the
        // datagram inside)
        let inner = auth::unseal(&datagram).unwrap_or_else(|| datagram.clone());
        let key = (to, inner);
        match (msg.msg_type, ctx) {
            (PeerMsgType::Request | PeerMsgType::Accept, Ctx::Timer) => {
                let Some((first, resent)) = self.origins.get_mut(&key) else {
                    fail(format!("timer sent a {:?} never sent before", msg.msg_type));
                };
                *resent += 1;
                let age = self.now.saturating_duration_since(*first);
                if age >= self.config.exchange_lifetime {
                    fail(format!(
                        "{:?} retransmitted {age:?} after it was first sent (lifetime {:?})",
                        msg.msg_type, self.config.exchange_lifetime
                    ));
                }
                if *resent > self.config.max_retransmits {
                    fail(format!("{:?} retransmitted {resent} times", msg.msg_type));
                }
                if msg.msg_type == PeerMsgType::Request
                    && self.acked.contains(&(msg.assoc_handle, msg.cp()))
                {
                    fail("REQUEST retransmitted after its ACCEPT was acknowledged");
                }
            }
            (PeerMsgType::Request | PeerMsgType::Accept, Ctx::Input) => {
                self.origins.insert(key, (self.now, 0));
            }
            (PeerMsgType::Ack, _) => {
                self.acked.insert((msg.assoc_handle, msg.cp()));
            }
            _ => {}
        }
        self.ledger.sent(to, &msg, &datagram);
        match msg.msg_type {
            PeerMsgType::Request => self.sent_requests.push((msg, to)),
            PeerMsgType::Accept => self.sent_accepts.push((datagram.clone(), to)),
            _ => {}
        }
        self.sent_all.push((via, to, datagram));
    }
}
