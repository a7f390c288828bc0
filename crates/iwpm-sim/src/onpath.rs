//! The attackers that came with fleet keys (issue 41 item 8):
//!
//! * the on-path attacker ([`crate::plan::What::OnPath`]): it sees every datagram between
//!   two named hosts (the network hands it each one as it is delivered) and strips the
//!   authentication block of the sealed ones (the receiver gets the first 64 bytes instead
//!   of the sealed 124), replays a captured sealed REQUEST + ACK pair once a second (within
//!   the 60 s window and beyond it), or forges: a copy with one byte flipped, or the same
//!   bytes from another source, 1 ms after the original;
//! * item 5's spoofers ([`crate::plan::What::VictimSpoof`]): plain datagrams with a named
//!   victim's address (or addresses of its /64), up to 1 000 a second: REQUESTs for a
//!   closed port (the victim's REJECTs), REQUEST + blind-ACK pairs (the ten-bit checks),
//!   never-ACKed REQUESTs while the victim's own exchanges wait for their ACK.
//!
//! Every datagram they make carries its [`Tag`], which the oracles of `crate::check`
//! judge it by.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use iwpm_proto::consts::IWPM_PEER_PORT;
use iwpm_proto::peer::auth::{auth_block, unseal};
use iwpm_proto::peer::{PeerMessage, PeerMsgType, PEER_AUTH_LEN, PEER_REQUEST_LEN};

use crate::host::CLIENT_PORT;
use crate::plan::{OnPathMode, SpoofMode, What};
use crate::rng::mix;
use crate::world::{Event, Tag, World, HOSTILE_IP, HOSTILE_IP6, PEER_IP, PEER_IP6};

/// A captured sealed datagram: (source, destination, bytes).
type Captured = (SocketAddr, SocketAddr, Vec<u8>);

/// What the fleet-key attackers and oracles remember.
#[derive(Debug, Default)]
pub(crate) struct KeyedState {
    /// Indices of the scenario's on-path items.
    pub(crate) on_path_items: Vec<usize>,
    /// Per replaying item: sealed REQUESTs seen, by handle, until one's ACK is seen.
    requests: BTreeMap<(usize, u64), Captured>,
    /// Per replaying item: the captured REQUEST and ACK.
    pub(crate) pairs: BTreeMap<usize, (Captured, Captured)>,
    /// Forgeries made so far (picks the byte to flip).
    forged: u64,
    /// Per (host, address): bytes delivered to the host's listener socket from the address,
    /// and bytes of ACCEPTs and REJECTs the host sent there (`crate::check`).
    pub(crate) bytes_in: BTreeMap<(usize, SocketAddr), u64>,
    /// See `bytes_in`.
    pub(crate) bytes_answered: BTreeMap<(usize, SocketAddr), u64>,
    /// Connecting addresses named by datagrams the on-path attacker replayed or forged: a
    /// daemon that cannot tell them from the original (no key, or a plain copy) may give
    /// them a REMOTE_INFO of their own, which is the attacker's (counted by the ledger), not
    /// a legitimate one left over (`World::legit_entry`).
    pub(crate) tainted_cps: std::collections::BTreeSet<SocketAddr>,
    /// MACs of the sealed datagrams delivered to each host: a replay whose original never
    /// reached that host (another attacker dropped or stripped it) is its first delivery,
    /// which the daemon may believe as it would the original.
    pub(crate) delivered: std::collections::BTreeSet<(usize, [u8; 16])>,
    /// Handles of the REQUESTs the victim of item 5's spoofers sent (its REJECTs are the
    /// ones answering these, not the spoofers' REQUESTs with its address).
    pub(crate) victim_handles: std::collections::BTreeSet<u64>,
}

/// The peer message inside a datagram, sealed or not.
pub(crate) fn inner_message(bytes: &[u8]) -> Option<PeerMessage> {
    match unseal(bytes) {
        Some(inner) => PeerMessage::decode(&inner).ok(),
        None => PeerMessage::decode(bytes).ok(),
    }
}

impl World {
    /// The on-path attacker sees a datagram on its way from `from` to `to`: the stripped
    /// form to deliver instead, if it strips it.
    pub(crate) fn on_path(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        bytes: &[u8],
    ) -> Option<Vec<u8>> {
        let (Some(x), Some(y)) = (self.host_index(from.ip()), self.host_index(to.ip())) else {
            return None;
        };
        // (only sealed datagrams interest it)
        auth_block(bytes)?;
        let mut out = None;
        for n in 0..self.keyed.on_path_items.len() {
            let i = self.keyed.on_path_items[n];
            let it = &self.scenario.items[i];
            let What::OnPath { a, b, mode, lasts } = it.what else {
                continue;
            };
            if !((x, y) == (a, b) || (x, y) == (b, a))
                || self.now < it.at
                || self.now >= it.at + lasts
            {
                continue;
            }
            match mode {
                OnPathMode::Strip => {
                    self.stats.on_path += 1;
                    out = Some(bytes[..PEER_REQUEST_LEN].to_vec());
                }
                OnPathMode::Replay => self.capture(i, from, to, bytes),
                // (it acted as the datagram left: `on_path_send`)
                OnPathMode::Race => {}
                OnPathMode::Flip | OnPathMode::Resend => {
                    self.keyed.forged += 1;
                    let r = mix(self.scenario.seed ^ (self.keyed.forged << 20) ^ i as u64);
                    let (src, copy) = if mode == OnPathMode::Flip {
                        let mut copy = bytes.to_vec();
                        let at = (r % PEER_AUTH_LEN as u64) as usize;
                        copy[at] ^= 1 << ((r >> 32) % 8);
                        (from, copy)
                    } else {
                        let ip = if from.is_ipv6() {
                            IpAddr::V6(HOSTILE_IP6)
                        } else {
                            IpAddr::V4(HOSTILE_IP)
                        };
                        (SocketAddr::new(ip, from.port()), bytes.to_vec())
                    };
                    self.stats.on_path += 1;
                    self.push(
                        self.now + Duration::from_millis(1),
                        Event::Udp {
                            from: src,
                            to,
                            bytes: copy,
                            tag: Tag::Forged,
                        },
                    );
                }
            }
        }
        out
    }

    /// The on-path attacker sees a datagram leave `from` for `to`: a racing `Resend`
    /// sends every other sealed datagram's bytes from its own address at once, on a path
    /// as fast as the original's, so the copy arrives first about half the time.
    pub(crate) fn on_path_send(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let (Some(x), Some(y)) = (self.host_index(from.ip()), self.host_index(to.ip())) else {
            return;
        };
        if auth_block(bytes).is_none() {
            return;
        }
        for n in 0..self.keyed.on_path_items.len() {
            let i = self.keyed.on_path_items[n];
            let it = &self.scenario.items[i];
            let What::OnPath {
                a,
                b,
                mode: OnPathMode::Race,
                lasts,
            } = it.what
            else {
                continue;
            };
            if !((x, y) == (a, b) || (x, y) == (b, a))
                || self.now < it.at
                || self.now >= it.at + lasts
            {
                continue;
            }
            let ip = if from.is_ipv6() {
                IpAddr::V6(HOSTILE_IP6)
            } else {
                IpAddr::V4(HOSTILE_IP)
            };
            self.stats.on_path += 1;
            let src = SocketAddr::new(ip, from.port());
            let at = self.now + crate::world::LATENCY;
            let copy = Event::Udp {
                from: src,
                to,
                bytes: bytes.to_vec(),
                tag: Tag::Forged,
            };
            // (the original takes LATENCY plus 0-50 µs of jitter: the copy arrives first)
            self.push(at, copy);
        }
    }

    /// Keeps the first sealed REQUEST + ACK pair of one exchange the replaying item `i`
    /// sees.
    fn capture(&mut self, i: usize, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        if self.keyed.pairs.contains_key(&i) {
            return;
        }
        let Some(m) = inner_message(bytes) else {
            return;
        };
        match m.msg_type {
            PeerMsgType::Request => {
                self.keyed.requests.entry((i, m.assoc_handle)).or_insert((
                    from,
                    to,
                    bytes.to_vec(),
                ));
            }
            PeerMsgType::Ack => {
                if let Some(req) = self.keyed.requests.get(&(i, m.assoc_handle)).cloned() {
                    self.keyed
                        .pairs
                        .insert(i, (req, (from, to, bytes.to_vec())));
                    self.keyed.requests.retain(|(j, _), _| *j != i);
                }
            }
            _ => {}
        }
    }

    /// The `k`-th send of a fleet-key attack item (false: not one of those).
    pub(crate) fn keyed_attack(&mut self, item: usize, k: u32) -> bool {
        let it = self.scenario.items[item].clone();
        let (rate, lasts) = match it.what {
            What::OnPath {
                mode: OnPathMode::Replay,
                lasts,
                ..
            } => {
                if let Some((req, ack)) = self.keyed.pairs.get(&item).cloned() {
                    for (from, to, bytes) in [req, ack] {
                        self.stats.on_path += 1;
                        self.send_udp_tagged(from, to, bytes, Tag::Replayed);
                    }
                }
                (1, lasts)
            }
            What::VictimSpoof {
                victim,
                target,
                port,
                mode,
                rate,
                lasts,
            } => {
                self.victim_spoof(item, k, victim, target, port, mode);
                (rate, lasts)
            }
            _ => return false,
        };
        let next = Duration::from_secs(u64::from(k) + 1) / rate.max(1);
        if next < lasts {
            self.push(it.at + next, Event::Attack { item, k: k + 1 });
        }
        true
    }

    /// One datagram of item 5's spoofers.
    fn victim_spoof(
        &mut self,
        item: usize,
        k: u32,
        victim: Option<usize>,
        target: usize,
        port: u16,
        mode: SpoofMode,
    ) {
        let v6 = mode != SpoofMode::Reject && self.scenario.kind_of(port).v6;
        let vip = match victim {
            Some(v) => match self.hosts.get(v) {
                Some(h) => h.addr(v6),
                None => return,
            },
            None if v6 => IpAddr::V6(PEER_IP6),
            None => IpAddr::V4(PEER_IP),
        };
        let Some(t) = self.hosts.get(target) else {
            return;
        };
        let ap = SocketAddr::new(t.addr(v6), port);
        // Pairs of datagrams (a blind ACK follows its REQUEST) share a source: the victim's
        // own address every fourth pair; otherwise (IPv6) another address of its /64.
        let pair = k / 2;
        let src = match vip {
            IpAddr::V6(a) if pair % 4 != 0 => {
                let s = a.segments();
                IpAddr::V6(Ipv6Addr::new(
                    s[0],
                    s[1],
                    s[2],
                    s[3],
                    0x5bad,
                    0,
                    (pair >> 16) as u16,
                    pair as u16,
                ))
            }
            ip => ip,
        };
        let from = SocketAddr::new(src, CLIENT_PORT);
        let to = SocketAddr::new(ap.ip(), IWPM_PEER_PORT);
        // (ports below the reservation range: their REMOTE_INFOs are told apart)
        let handle = mix(self.scenario.seed ^ ((item as u64) << 32) ^ u64::from(pair));
        let cp = SocketAddr::new(src, 20_000 + (pair % 10_000) as u16);
        let mapped = SocketAddr::new(src, 30_000 + (pair % 10_000) as u16);
        let req = PeerMessage::request(handle, cp, mapped, ap);
        let msg = match mode {
            SpoofMode::Reject | SpoofMode::Between => {
                PeerMessage::request(mix(handle ^ u64::from(k)), cp, mapped, ap)
            }
            // A REQUEST, then an ACK for it with a guessed cookie (never the ACCEPT's).
            SpoofMode::BlindAck if k % 2 == 0 => req,
            SpoofMode::BlindAck => {
                let mapped_ap = self.hostile_learned.get(&ap).copied().unwrap_or(ap);
                PeerMessage {
                    pmtime: handle as u8,
                    version: ((handle >> 8) & 3) as u8,
                    ..PeerMessage::ack_for(&PeerMessage::accept_for(&req, mapped_ap))
                }
            }
        };
        self.stats.hostile += 1;
        self.send_udp_tagged(from, to, msg.encode(), Tag::Spoofed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::check::ViolationKind;
    use crate::plan::{FleetAuth, Item, KeyRole, OnPathMode, Scenario, What};
    use crate::world::World;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Host 1 listens on 7000, host 0 connects once at 1 s; both keyed.
    fn scenario(extra: Vec<Item>) -> Scenario {
        let mut items = vec![
            Item {
                at: ms(100),
                what: What::Listen {
                    host: 1,
                    port: 7000,
                },
            },
            Item {
                at: ms(1_000),
                what: What::Connect {
                    id: 1,
                    from: 0,
                    to: 1,
                    port: 7000,
                },
            },
            Item {
                at: ms(3_000),
                what: What::Close { id: 1 },
            },
        ];
        items.extend(extra);
        items.sort_by_key(|i| i.at);
        Scenario {
            seed: 8,
            hosts: 2,
            ranks: 1,
            port_mapped: vec![true, true],
            items,
            families: Default::default(),
            auth: FleetAuth {
                roles: vec![KeyRole::Keyed; 2],
                required: false,
            },
        }
    }

    /// The oracle that a stripped datagram never gets through: daemons that do not
    /// require sealed datagrams, judged as if they did, serve the stripped REQUEST, and
    /// the oracle says so.
    #[test]
    fn a_stripped_request_served_where_required_is_a_violation() {
        let strip = Item {
            at: ms(500),
            what: What::OnPath {
                a: 0,
                b: 1,
                mode: OnPathMode::Strip,
                lasts: ms(5_000),
            },
        };
        let mut w = World::new(scenario(vec![strip]));
        for h in &mut w.hosts {
            h.auth_required = true;
        }
        let (v, _, _) = w.run();
        let first = v.first().map(|v| v.kind);
        assert!(
            matches!(
                first,
                Some(ViolationKind::AuthBypass | ViolationKind::AuthCount)
            ),
            "{v:?}"
        );
    }

    /// A rotation rolled out host by host while host 0 connects every 500 ms: every
    /// connect is established, and at the end both daemons hold key 2 alone, having
    /// verified datagrams under it.
    #[test]
    fn a_rotation_fails_no_connect() {
        let mut extra = Vec::new();
        for (step, at) in [(1u8, 1_200u64), (2, 4_000), (3, 7_000)] {
            for host in 0..2 {
                let what = What::KeyStep { host, step };
                extra.push(Item {
                    at: ms(at + 700 * host as u64),
                    what,
                });
            }
        }
        for id in 2..20u32 {
            let at = ms(500 * u64::from(id));
            let what = What::Connect {
                id,
                from: 0,
                to: 1,
                port: 7000,
            };
            extra.push(Item { at, what });
            extra.push(Item {
                at: at + ms(300),
                what: What::Close { id },
            });
        }
        let mut s = scenario(extra);
        s.auth.required = true;
        let (v, _, stats) = World::new(s.clone()).run();
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(stats.established, 19);
        // (the same run again, stopped before the teardown, to read the key reports)
        let mut w2 = World::new(s);
        while let Some(((at, _), e)) = w2.queue_pop() {
            if at > ms(11_000) {
                break;
            }
            w2.now = at;
            w2.step(e);
        }
        for h in &w2.hosts {
            let report = h.daemon.as_ref().map(|d| d.core().fleet_key_report());
            let report = report.unwrap_or_default();
            assert_eq!(report.len(), 1, "{report:?}");
            assert_eq!((report[0].id, report[0].signing), (2, true));
            assert!(report[0].verified > 0 && report[0].signed > 0, "{report:?}");
        }
    }

    /// The oracle knows which failures a wrong key explains: a host with a wrong key the
    /// plan does not know about is a fleet member refused, and its connect times out.
    #[test]
    fn a_wrong_key_the_plan_does_not_know_is_a_violation() {
        let mut w = World::new(scenario(vec![]));
        w.hosts[0].key_role = KeyRole::WrongKey;
        w.hosts[0].load_keys(w.base, w.now);
        let (v, _, _) = w.run();
        assert_eq!(
            v.first().map(|v| v.kind),
            Some(ViolationKind::AuthCount),
            "{v:?}"
        );
    }
}
