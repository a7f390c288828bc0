//! The hostile host of HARDENING.md's step-9 attacks. It runs no daemon: it writes peer
//! datagrams by hand, spoofs source addresses when it likes, and reads the ACCEPTs sent to
//! its own address (which is how it learns a listener's stable mapped address).
//!
//! Its REQUESTs always claim a port-mapped connecting side (mapped port ≠ port) with a
//! mapped port below [`crate::ports::MAPPED_PORTS`], so every REMOTE_INFO they cause is
//! told apart from legitimate ones by the invariants.

use std::net::SocketAddr;
use std::time::Duration;

use iwpm_proto::consts::IWPM_PEER_PORT;
use iwpm_proto::peer::{PeerMessage, PeerMsgType};

use crate::plan::What;
use crate::rng::mix;
use crate::world::{Event, World, HOSTILE_IP};

/// The hostile host's sending port.
const HOSTILE_PORT: u16 = 45_000;

impl World {
    /// The `k`-th send of attack item `item`; schedules the next one.
    pub(crate) fn attack(&mut self, item: usize, k: u32) {
        let it = self.scenario.items[item].clone();
        let (rate, lasts) = match it.what {
            What::Squat { rate, lasts, .. } | What::BlindPairs { rate, lasts, .. } => (rate, lasts),
            _ => return,
        };
        let handle = mix(self.scenario.seed ^ ((item as u64) << 32) ^ u64::from(k));
        let cp_port = 20_000 + (k % 10_000) as u16;
        let mapped_port = 30_000 + (k % 10_000) as u16;
        match it.what {
            What::Squat {
                victim,
                target,
                port,
                ..
            } => {
                let (Some(v), Some(t)) = (self.hosts.get(victim), self.hosts.get(target)) else {
                    return;
                };
                let (vip, tip) = (v.ip, t.ip);
                let req = PeerMessage::request(
                    handle,
                    SocketAddr::from((vip, cp_port)),
                    SocketAddr::from((vip, mapped_port)),
                    SocketAddr::from((tip, port)),
                );
                self.stats.hostile += 1;
                self.send_udp(
                    SocketAddr::from((vip, HOSTILE_PORT)),
                    SocketAddr::from((tip, IWPM_PEER_PORT)),
                    req.encode(),
                );
            }
            What::BlindPairs { target, port, .. } => {
                let Some(t) = self.hosts.get(target) else {
                    return;
                };
                let ap = SocketAddr::from((t.ip, port));
                let req = PeerMessage::request(
                    handle,
                    SocketAddr::from((HOSTILE_IP, cp_port)),
                    SocketAddr::from((HOSTILE_IP, mapped_port)),
                    ap,
                );
                let me = SocketAddr::from((HOSTILE_IP, HOSTILE_PORT));
                let to = SocketAddr::from((t.ip, IWPM_PEER_PORT));
                self.stats.hostile += 1;
                self.send_udp(me, to, req.encode());
                // Blind: the ACK is written from our own REQUEST and the listener's mapped
                // address, never from the ACCEPT's bytes (its unused bytes are zero).
                if let Some(mapped_ap) = self.hostile_learned.get(&ap).copied() {
                    let ack = PeerMessage::ack_for(&PeerMessage::accept_for(&req, mapped_ap));
                    debug_assert_eq!(ack.msg_type, PeerMsgType::Ack);
                    self.stats.hostile += 1;
                    self.send_udp(me, to, ack.encode());
                }
            }
            _ => return,
        }
        let next = Duration::from_secs(u64::from(k) + 1) / rate.max(1);
        if next < lasts {
            self.push(
                self.scenario.items[item].at + next,
                Event::Attack { item, k: k + 1 },
            );
        }
    }

    /// A datagram for the hostile host: an ACCEPT tells it a listener's mapped address.
    pub(crate) fn hostile_receive(&mut self, _from: SocketAddr, bytes: &[u8]) {
        let Ok(msg) = PeerMessage::decode(bytes) else {
            return;
        };
        if msg.msg_type != PeerMsgType::Accept {
            return;
        }
        // The ACCEPT answers a REQUEST for (ap unmapped); its ap is the mapped address. The
        // unmapped one it asked for is the REQUEST's: the hostile host asked only for
        // listeners it targets, so the IP and the planned port identify it.
        let asked = self.scenario.items.iter().find_map(|i| match i.what {
            What::BlindPairs { target, port, .. }
                if self
                    .hosts
                    .get(target)
                    .is_some_and(|t| std::net::IpAddr::V4(t.ip) == msg.ap_ip) =>
            {
                Some(SocketAddr::new(msg.ap_ip, port))
            }
            _ => None,
        });
        if let Some(ap) = asked {
            self.hostile_learned.entry(ap).or_insert(msg.ap());
        }
    }
}
