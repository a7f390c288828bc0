//! An rdma-core-like peer: a real host (it receives UDP at its own address) whose daemon
//! behaves as rdma-core's does on the *active* side (docs/protocol.md §6.10), written by
//! hand like the hostile host because every simulated host runs a real core.
//!
//! For each connect it sends a 64-byte port-mapped REQUEST (mapped `cp` port ≠ `cp` port,
//! in the reservation range, so its REMOTE_INFO counts as legitimate). On the first ACCEPT
//! it answers its kernel, which starts the TCP/MPA set-up at once (three one-way trips to
//! the passive host's iw_cm), and only then ACKs; it ACKs every ACCEPT (duplicates and
//! delivery notices too) with the ACCEPT's bytes, type changed, and accepts any ACCEPT.
//! It does not retransmit its REQUEST (a lost one just means no connection, not judged).
//!
//! When the connection reaches the passive host, the kernel looks its REMOTE_INFO up (and
//! consumes it) as `cm_conn_req_handler` does: found, the peer is reported by its real
//! address; missed, by its mapped one (`WrongPeer`, unless a fault explains it).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use iwpm_proto::consts::IWPM_PEER_PORT;
use iwpm_proto::peer::{PeerMessage, PeerMsgType};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::check::ViolationKind;
use crate::cm::ListenState;
use crate::host::CLIENT_PORT;
use crate::host::MAPPED_PORTS;
use crate::ledger::retyped;
use crate::plan::What;
use crate::world::{Event, World, PEER_IP, PEER_IP6};

/// Handles of the peer's REQUESTs carry this in their top 16 bits.
const PEER_TAG: u64 = 0x9ee8;

/// One connect of the peer.
#[derive(Clone, Debug)]
pub(crate) struct PeerConn {
    target: usize,
    port: u16,
    cp: SocketAddr,
    mapped_cp: SocketAddr,
    started: Duration,
    /// The first ACCEPT came (the kernel was answered and connects).
    accepted: bool,
}

impl World {
    /// The `k`-th connect of RdmaPeer item `item`: its REQUEST; the next one is scheduled
    /// (the item's connects are spread over a second).
    pub(crate) fn peer_request(&mut self, item: usize, k: u32) {
        let What::RdmaPeer {
            target,
            port,
            v6,
            n,
        } = self.scenario.items[item].what
        else {
            return;
        };
        let Some(t) = self.hosts.get(target) else {
            return;
        };
        let ip = if v6 {
            IpAddr::V6(PEER_IP6)
        } else {
            IpAddr::V4(PEER_IP)
        };
        let ap = SocketAddr::new(t.addr(v6), port);
        let handle = (PEER_TAG << 48) | ((item as u64 & 0xffff) << 32) | u64::from(k);
        // Unique per (item, k): the mapped port names the connection in the kernel.
        let slot = (item as u32 * 64 + k) % 10_000;
        let cp = SocketAddr::new(ip, 21_000 + slot as u16);
        let mapped_cp = SocketAddr::new(ip, MAPPED_PORTS.start + 10_000 + slot as u16);
        let req = PeerMessage::request(handle, cp, mapped_cp, ap);
        self.actors.peer.insert(
            handle,
            PeerConn {
                target,
                port,
                cp,
                mapped_cp,
                started: self.now,
                accepted: false,
            },
        );
        self.send_udp(
            SocketAddr::new(ip, CLIENT_PORT),
            SocketAddr::new(ap.ip(), IWPM_PEER_PORT),
            req.encode(),
        );
        if k + 1 < n {
            let at = self.scenario.items[item].at + Duration::from_secs(1) * (k + 1) / n;
            self.push(at, Event::PeerRequest { item, k: k + 1 });
        }
    }

    /// A datagram for the peer's address: ACCEPTs of its connects, the REJECT of finding
    /// I's probe.
    pub(crate) fn peer_receive(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let Ok(msg) = PeerMessage::decode(bytes) else {
            return;
        };
        if msg.msg_type == PeerMsgType::Reject {
            for p in self.actors.probes.values_mut() {
                if p.0 == msg.assoc_handle && self.now <= p.1 + Duration::from_secs(1) {
                    p.2 = true;
                }
            }
            return;
        }
        if msg.msg_type != PeerMsgType::Accept {
            return;
        }
        let Some(conn) = self.actors.peer.get_mut(&msg.assoc_handle) else {
            return;
        };
        if !conn.accepted {
            // rdma-core answers its kernel first: the connection is on its way before the
            // ACK leaves (three one-way trips, as `send_wire`).
            conn.accepted = true;
            let at = self.now
                + crate::world::LATENCY * 3
                + Duration::from_micros(3 * crate::world::JITTER_US / 2);
            self.push(
                at,
                Event::PeerConnect {
                    handle: msg.assoc_handle,
                },
            );
        }
        self.send_udp(to, from, retyped(bytes, PeerMsgType::Ack));
    }

    /// The peer's connection reaches its target's iw_cm: the REMOTE_INFO look-up.
    pub(crate) fn peer_connect(&mut self, handle: u64) {
        let Some(c) = self.actors.peer.remove(&handle) else {
            return;
        };
        let listener = self.hosts[c.target]
            .cm
            .listeners
            .get(&c.port)
            .and_then(|l| match &l.state {
                ListenState::Listening { map, .. } => Some(map.m_local),
                ListenState::Mapping => None,
            });
        let Some(m_local) = listener else {
            return;
        };
        self.stats.rdma_peer_connects += 1;
        self.touched.insert(c.target);
        let found = self.hosts[c.target]
            .kernel
            .take_remote_info(&m_local, &SockAddrStorage::from_socket_addr(c.mapped_cp));
        let reported = found.and_then(|r| r.to_socket_addr());
        if reported == Some(c.cp) {
            self.stats.rdma_peer_found += 1;
            return;
        }
        let explained = self.explained(c.target, None, c.started);
        if found.is_none() {
            let n = &mut self.stats.gaps;
            if explained {
                n.miss_under_fault += 1;
            } else {
                n.miss_unexplained += 1;
            }
        }
        if !explained {
            let shown = reported.unwrap_or(c.mapped_cp);
            let detail = format!(
                "the rdma-core-like peer's connection {} → port {} found {} REMOTE_INFO: the passive side reports peer {shown}, the true peer is {}",
                c.mapped_cp,
                c.port,
                if found.is_some() { "a wrong" } else { "no" },
                c.cp
            );
            self.violate(ViolationKind::WrongPeer, Some(c.target), detail);
        }
    }
}
