//! The hostile host of HARDENING.md's step-9 attacks and of findings A-I. It runs no
//! daemon: it writes peer datagrams by hand, spoofs source addresses when it likes, and
//! reads the ACCEPTs sent to its own addresses (which is how it learns a listener's stable
//! mapped address, and how it ACKs like a real host in finding D).
//!
//! Its REQUESTs always claim a port-mapped connecting side (mapped port ≠ port) with a
//! mapped port below [`crate::host::MAPPED_PORTS`], or a source that is no fleet address,
//! so every REMOTE_INFO they cause is told apart from legitimate ones by the invariants.
//! The one exception is finding E's replay, which repeats a victim's own bytes: the ledger
//! (`crate::ledger`) counts a replayed ACK's exchange once, and the victim's connection
//! consumed the one REMOTE_INFO it was worth.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use iwpm_proto::consts::IWPM_PEER_PORT;
use iwpm_proto::peer::{ipv4_echo, IpVersion, PeerMessage, PeerMsgType};

use crate::host::CLIENT_PORT;
use crate::ledger::retyped;
use crate::plan::What;
use crate::rng::mix;
use crate::world::{Event, Tag, World, HOSTILE_IP, HOSTILE_IP6, PEER_IP};

/// The hostile host's sending port.
const HOSTILE_PORT: u16 = 45_000;
/// Finding A: spoofed REQUESTs per IPv6 /64 before the next /64.
pub(crate) const PER_SLASH64: u32 = 320;
/// Finding I: spoofed sources flooding REQUESTs for a closed port.
pub(crate) const REJECT_SOURCES: u32 = 100;
/// Finding B: datagrams per round (one REQUEST, then an ACK per pmtime × version).
const SWEEP_ROUND: u32 = 1 + 256 * 4;
/// Handles of finding D's REQUESTs carry this in their top 16 bits (its ACCEPTs are ACKed).
const REAL_PAIRS_TAG: u64 = 0xd00d;
/// Handles of finding I's probe REQUEST (see [`crate::peer`]).
pub(crate) const PROBE_TAG: u64 = 0x1b0b;
/// Handles of the REQUESTs that learn a listener's mapped address for finding B.
const LEARN_TAG: u64 = 0x1ea7;
/// Flags byte of an IPv4 cookie (its place in the echo) and the REMOTE_INFO-on-ACK plan.
const COOKIE_FLAGS_AT: usize = 19;
const PLAN_ON_ACK: u8 = 2;

/// What the hostile host and the rdma-core-like peer remember.
#[derive(Debug, Default)]
pub(crate) struct Actors {
    /// Finding E: per Replay item, REQUESTs of the victim seen on their way (by handle)…
    victim_requests: BTreeMap<(usize, u64), Vec<u8>>,
    /// …and the captured pair: (source, destination, REQUEST, ACK).
    pub(crate) captured: BTreeMap<usize, (SocketAddr, SocketAddr, Vec<u8>, Vec<u8>)>,
    /// Finding B: the ap a learning REQUEST asked for, by handle.
    learning: BTreeMap<u64, SocketAddr>,
    /// Finding I: per item, (the probe's handle, when sent, answered).
    pub(crate) probes: BTreeMap<usize, (u64, Duration, bool)>,
    /// The rdma-core-like peer's connects, by handle.
    pub(crate) peer: BTreeMap<u64, crate::peer::PeerConn>,
}

fn tagged(tag: u64, item: usize, k: u32) -> u64 {
    (tag << 48) | ((item as u64 & 0xffff) << 32) | u64::from(k)
}

/// A spoofed IPv6 source: `group` picks the /64 (under `prefix`), `host` the address in it.
fn spoofed6(prefix: u16, group: u32, host: u32) -> Ipv6Addr {
    Ipv6Addr::new(
        prefix,
        0,
        (group >> 16) as u16,
        group as u16,
        0,
        0,
        (host >> 16) as u16,
        host as u16 + 1,
    )
}

impl World {
    /// `target`'s address of `port`'s family (what a connect to that listener asks for).
    fn target_ap(&self, target: usize, port: u16, v6: bool) -> Option<SocketAddr> {
        let t = self.hosts.get(target)?;
        Some(SocketAddr::new(t.addr(v6), port))
    }

    fn hostile_send(&mut self, from: SocketAddr, to_ip: IpAddr, msg: &PeerMessage) {
        self.stats.hostile += 1;
        self.send_udp(from, SocketAddr::new(to_ip, IWPM_PEER_PORT), msg.encode());
    }

    /// The `k`-th send of attack item `item`; schedules the next one.
    pub(crate) fn attack(&mut self, item: usize, k: u32) {
        if self.keyed_attack(item, k) {
            return;
        }
        let it = self.scenario.items[item].clone();
        let (rate, lasts) = match it.what {
            What::Squat { rate, lasts, .. }
            | What::BlindPairs { rate, lasts, .. }
            | What::SpoofV6 { rate, lasts, .. }
            | What::CookieSweep { rate, lasts, .. }
            | What::RealPairs { rate, lasts, .. }
            | What::RejectFlood { rate, lasts, .. } => (rate, lasts),
            // 192 at once (over 100 ms), then 4 a second.
            What::Drain { lasts, .. } => (0, lasts),
            What::Replay { lasts, .. } => (1, lasts),
            _ => return,
        };
        if !self.attack_send(item, k, &it.what, rate, lasts) {
            return;
        }
        let next = match it.what {
            What::Drain { .. } if k < 191 => Duration::from_millis(u64::from(k + 1) / 2),
            What::Drain { .. } => {
                Duration::from_millis(95) + Duration::from_millis(250) * (k - 190)
            }
            _ => Duration::from_secs(u64::from(k) + 1) / rate.max(1),
        };
        if next < lasts {
            self.push(
                self.scenario.items[item].at + next,
                Event::Attack { item, k: k + 1 },
            );
        }
    }

    /// The sends of the `k`-th step of attack item `item` (`what`); false when it sends
    /// nothing (its target is gone, or the item is no attack), which ends the item.
    fn attack_send(
        &mut self,
        item: usize,
        k: u32,
        what: &What,
        rate: u32,
        lasts: Duration,
    ) -> bool {
        let handle = mix(self.scenario.seed ^ ((item as u64) << 32) ^ u64::from(k));
        let cp_port = 20_000 + (k % 10_000) as u16;
        let mapped_port = 30_000 + (k % 10_000) as u16;
        match what.clone() {
            What::Squat {
                victim,
                target,
                port,
                ..
            } => {
                let v6 = self.scenario.kind_of(port).v6;
                let (Some(v), Some(ap)) =
                    (self.hosts.get(victim), self.target_ap(target, port, v6))
                else {
                    return false;
                };
                let vip = v.addr(v6);
                let req = request_from(handle, vip, (cp_port, mapped_port), ap);
                self.hostile_send(SocketAddr::new(vip, HOSTILE_PORT), ap.ip(), &req);
            }
            What::BlindPairs { target, port, .. } => {
                let v6 = self.scenario.kind_of(port).v6;
                let Some(ap) = self.target_ap(target, port, v6) else {
                    return false;
                };
                let me_ip = hostile_ip(v6);
                let req = request_from(handle, me_ip, (cp_port, mapped_port), ap);
                let me = SocketAddr::new(me_ip, HOSTILE_PORT);
                self.hostile_send(me, ap.ip(), &req);
                // Blind: the ACK is written from our own REQUEST and the listener's mapped
                // address, never from the ACCEPT's bytes (its unused bytes are zero).
                if let Some(mapped_ap) = self.hostile_learned.get(&ap).copied() {
                    let ack = PeerMessage::ack_for(&PeerMessage::accept_for(&req, mapped_ap));
                    self.hostile_send(me, ap.ip(), &ack);
                }
            }
            What::SpoofV6 { target, port, .. } => {
                let Some(ap) = self.target_ap(target, port, true) else {
                    return false;
                };
                let src = IpAddr::V6(spoofed6(0xfd77, k / PER_SLASH64, k % PER_SLASH64));
                let req = request_from(handle, src, (cp_port, mapped_port), ap);
                self.hostile_send(SocketAddr::new(src, HOSTILE_PORT), ap.ip(), &req);
            }
            What::CookieSweep { target, port, .. } => {
                let Some(ap) = self.target_ap(target, port, true) else {
                    return false;
                };
                let (round, j) = (k / SWEEP_ROUND, k % SWEEP_ROUND);
                if k == 0 {
                    // Learn the listener's mapped address from our own address first
                    // (a REQUEST that needs no REMOTE_INFO: mapped cp = cp).
                    let h = tagged(LEARN_TAG, item, 0);
                    let me = SocketAddr::new(IpAddr::V6(HOSTILE_IP6), HOSTILE_PORT);
                    let req = PeerMessage::request(h, me, me, ap);
                    self.actors.learning.insert(h, ap);
                    self.hostile_send(me, ap.ip(), &req);
                }
                // Each round from a /64 of its own: the ACCEPT goes there, never to us.
                let src = IpAddr::V6(spoofed6(0xfd88, round, 0));
                let from = SocketAddr::new(src, HOSTILE_PORT);
                let cp = SocketAddr::new(src, 20_000 + (round % 10_000) as u16);
                let mapped_cp = SocketAddr::new(src, 30_000 + (round % 10_000) as u16);
                let h = mix(self.scenario.seed ^ ((item as u64) << 32) ^ u64::from(round));
                let req = PeerMessage::request(h, cp, mapped_cp, ap);
                if j == 0 {
                    self.hostile_send(from, ap.ip(), &req);
                } else if let Some(mapped_ap) = self.hostile_learned.get(&ap).copied() {
                    let guess = j - 1;
                    let ack = PeerMessage {
                        pmtime: (guess % 256) as u8,
                        version: (guess / 256) as u8,
                        ..PeerMessage::ack_for(&PeerMessage::accept_for(&req, mapped_ap))
                    };
                    self.hostile_send(from, ap.ip(), &ack);
                }
            }
            What::RealPairs {
                target, port, v6, ..
            } => {
                let Some(ap) = self.target_ap(target, port, v6) else {
                    return false;
                };
                let me_ip = hostile_ip(v6);
                let req = request_from(
                    tagged(REAL_PAIRS_TAG, item, k),
                    me_ip,
                    (cp_port, mapped_port),
                    ap,
                );
                // The ACK goes out when the ACCEPT comes (`hostile_receive`).
                self.hostile_send(SocketAddr::new(me_ip, HOSTILE_PORT), ap.ip(), &req);
            }
            What::Drain {
                target, port, v6, ..
            } => {
                let Some(ap) = self.target_ap(target, port, v6) else {
                    return false;
                };
                // 64 per source: each within its half-budget share and far below the
                // per-source quota, so nothing of the drain is ever evicted.
                let src = if v6 {
                    IpAddr::V6(spoofed6(0xfd99, k / 64, k % 64))
                } else {
                    IpAddr::V4(Ipv4Addr::new(10, 253, (k / 64 / 256) as u8, (k / 64) as u8))
                };
                let req = request_from(handle, src, (cp_port, mapped_port), ap);
                self.hostile_send(SocketAddr::new(src, HOSTILE_PORT), ap.ip(), &req);
            }
            What::Replay { .. } => {
                if let Some((from, to, req, ack)) = self.actors.captured.get(&item).cloned() {
                    self.stats.hostile += 2;
                    // (a sealed pair too, in a keyed fleet: judged as a replay)
                    self.send_udp_tagged(from, to, req, Tag::Replayed);
                    self.send_udp_tagged(from, to, ack, Tag::Replayed);
                }
            }
            What::RejectFlood { target, port, .. } => {
                let Some(ap) = self.target_ap(target, port, false) else {
                    return false;
                };
                let src = IpAddr::V4(Ipv4Addr::new(10, 252, 0, (k % REJECT_SOURCES) as u8 + 1));
                let req = request_from(handle, src, (cp_port, mapped_port), ap);
                self.hostile_send(SocketAddr::new(src, HOSTILE_PORT), ap.ip(), &req);
                if Duration::from_secs(u64::from(k)) / rate.max(1) >= lasts / 2
                    && !self.actors.probes.contains_key(&item)
                {
                    self.probe(item, ap);
                }
            }
            _ => return false,
        }
        true
    }

    /// Finding I: a real host (the rdma-core-like peer's address) asks once for the closed
    /// port; its REJECT is due within 1 s.
    fn probe(&mut self, item: usize, ap: SocketAddr) {
        let handle = tagged(PROBE_TAG, item, 0);
        let me = SocketAddr::new(IpAddr::V4(PEER_IP), CLIENT_PORT);
        let mapped = SocketAddr::new(IpAddr::V4(PEER_IP), crate::host::MAPPED_PORTS.start);
        let req = PeerMessage::request(handle, me, mapped, ap);
        self.actors.probes.insert(item, (handle, self.now, false));
        self.send_udp(me, SocketAddr::new(ap.ip(), IWPM_PEER_PORT), req.encode());
        self.push(
            self.now + Duration::from_secs(1),
            Event::ProbeDeadline { item },
        );
    }

    /// The probe of item `item` must have had its REJECT.
    pub(crate) fn probe_deadline(&mut self, item: usize) {
        let Some(&(_, sent, answered)) = self.actors.probes.get(&item) else {
            return;
        };
        let What::RejectFlood { target, port, .. } = self.scenario.items[item].what else {
            return;
        };
        if !answered && !self.explained(target, None, sent) {
            let detail = format!(
                "a real host's REQUEST for host {target}'s closed port {port} (sent at {:.3}s) got no REJECT within 1 s while {REJECT_SOURCES} spoofed sources flood",
                sent.as_secs_f64()
            );
            self.violate(
                crate::check::ViolationKind::RejectLate,
                Some(target),
                detail,
            );
        }
    }

    /// Finding E: the hostile host sees what a victim's daemon sends (it is on the path) and
    /// keeps the victim's first REQUEST+ACK pair whose ACK carries a REMOTE_INFO-on-ACK
    /// IPv4 cookie, for each Replay item naming that victim and target.
    pub(crate) fn sniff(
        &mut self,
        h: usize,
        from: SocketAddr,
        to: SocketAddr,
        m: &PeerMessage,
        bytes: &[u8],
    ) {
        if m.ip_version != IpVersion::V4 || from.port() != CLIENT_PORT {
            return;
        }
        let items: Vec<usize> = self
            .scenario
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, it)| match it.what {
                What::Replay { victim, target, .. }
                    if victim == h
                        && self.hosts.get(target).is_some_and(|t| t.owns(to.ip()))
                        && it.at <= self.now
                        && !self.actors.captured.contains_key(&i) =>
                {
                    Some(i)
                }
                _ => None,
            })
            .collect();
        for i in items {
            match m.msg_type {
                PeerMsgType::Request => {
                    self.actors
                        .victim_requests
                        .insert((i, m.assoc_handle), bytes.to_vec());
                }
                PeerMsgType::Ack if ipv4_echo(bytes)[COOKIE_FLAGS_AT] == PLAN_ON_ACK => {
                    if let Some(req) = self.actors.victim_requests.get(&(i, m.assoc_handle)) {
                        let pair = (from, to, req.clone(), bytes.to_vec());
                        self.actors.captured.insert(i, pair);
                    }
                }
                _ => {}
            }
        }
    }

    /// A datagram for the hostile host: an ACCEPT tells it a listener's mapped address, and
    /// finding D's ACCEPTs are ACKed with their own bytes.
    pub(crate) fn hostile_receive(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let Ok(msg) = PeerMessage::decode(bytes) else {
            return;
        };
        if msg.msg_type != PeerMsgType::Accept {
            return;
        }
        if msg.assoc_handle >> 48 == REAL_PAIRS_TAG {
            self.stats.hostile += 1;
            self.send_udp(to, from, retyped(bytes, PeerMsgType::Ack));
            return;
        }
        if let Some(ap) = self.actors.learning.get(&msg.assoc_handle).copied() {
            self.hostile_learned.entry(ap).or_insert(msg.ap());
            return;
        }
        // The ACCEPT answers a REQUEST for (ap unmapped); its ap is the mapped address. The
        // unmapped one it asked for is the REQUEST's: the hostile host asked only for
        // listeners it targets, so the IP and the planned port identify it.
        let asked = self.scenario.items.iter().find_map(|i| match i.what {
            What::BlindPairs { target, port, .. }
                if self.hosts.get(target).is_some_and(|t| t.owns(msg.ap_ip)) =>
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

/// A REQUEST for the listener `ap` whose connecting and mapped connecting addresses are on
/// `ip`, at `ports` (cp port, mapped cp port).
fn request_from(handle: u64, ip: IpAddr, ports: (u16, u16), ap: SocketAddr) -> PeerMessage {
    PeerMessage::request(
        handle,
        SocketAddr::new(ip, ports.0),
        SocketAddr::new(ip, ports.1),
        ap,
    )
}

/// The hostile host's own address in one family.
fn hostile_ip(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(HOSTILE_IP6)
    } else {
        IpAddr::V4(HOSTILE_IP)
    }
}
