//! The REMOTE_INFO ledger: what each daemon sent its kernel for peer REQUESTs against what
//! the core may send (`docs/simulator.md`, "The ledger").
//!
//! The kernel frees a REMOTE_INFO entry only when a connection consumes it, so every one a
//! stranger can cause is kernel memory for ever. The bound, per host:
//!
//! ```text
//! sent ≤ remote_info_budget × daemon starts + elapsed / remote_info_refill + 1
//!        + Σ per source min(verified ACKs, source_burst + source_rate × elapsed)
//!        + (IPv6 exchanges blind-ACKed) / 128 + 4        (only if there were any)
//! ```
//!
//! A *verified* ACK echoes every byte of an ACCEPT the daemon sent to the ACK's source and
//! that source received (the simulator delivers every datagram, so it knows exactly which
//! ACKs were built from a received ACCEPT; an ACCEPT sent to a spoofed address reaches
//! nobody, and an ACK matching it was a guess). Each exchange (source, handle, cp, ap) counts once however often its ACK comes (a
//! replayed ACK adds nothing). A token taken for a REMOTE_INFO sent at once comes back only
//! on a verified ACK, and a REMOTE_INFO that waited for an ACK goes out only on one, so one
//! verified ACK releases at most one REMOTE_INFO.
//!
//! A blind IPv6 ACK can still verify by chance: the IPv6 cookie is the 8 bits of `pmtime`
//! and the 2 version bits, and the current and the previous epoch's keys are accepted, so
//! one guess verifies with probability 2/1024. The allowance counts exchanges, not ACKs:
//! once a failed ACK ends its exchange (or the failures per exchange are capped), a sweep
//! of 1024 guesses at one exchange is worth one guess. 1/128 per exchange allows four
//! times the expected 1/512 (room for a cap of a few failed ACKs per exchange), and the
//! constant 4 covers the variance: with λ = n/512 expected lucky guesses the allowance is
//! 4λ + 4, which a Poisson count exceeds with probability below 10⁻⁵ for every λ.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use iwpm_proto::netlink::{decode_daemon_datagram, DaemonMsg, Frame};
use iwpm_proto::peer::{IpVersion, PeerMessage, PeerMsgType};

use crate::check::ViolationKind;
use crate::world::World;

/// The exchange an ACCEPT or ACK belongs to: (its peer's address, handle, cp, ap).
pub(crate) type Binding = (SocketAddr, u64, SocketAddr, SocketAddr);

/// One host's ledger.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// REMOTE_INFOs the daemon sent its kernel for peer REQUESTs (not its local answers).
    pub sent: u64,
    /// Every ACCEPT datagram sent, by exchange.
    accepts: BTreeMap<Binding, BTreeSet<Vec<u8>>>,
    /// Exchanges whose ACK echoed one of their ACCEPTs.
    pub verified: BTreeSet<Binding>,
    /// Verified exchanges per source (IPv4 address, IPv6 /64).
    per_source: BTreeMap<IpAddr, u64>,
    /// IPv6 exchanges that got an ACK echoing no ACCEPT sent there.
    blind_v6: BTreeSet<Binding>,
}

impl Ledger {
    /// IPv6 exchanges blind-ACKed so far.
    pub(crate) fn blind_len(&self) -> usize {
        self.blind_v6.len()
    }
}

/// The source an address counts for: the IPv4 address, or the IPv6 /64.
pub(crate) fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    }
}

fn binding(peer: SocketAddr, m: &PeerMessage) -> Binding {
    (peer, m.assoc_handle, m.cp(), m.ap())
}

/// The datagram with its type bits set to `t` (an ACK echoes its ACCEPT but for these).
pub(crate) fn retyped(bytes: &[u8], t: PeerMsgType) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if let Some(first) = b.first_mut() {
        *first = (*first & 0xcf) | (t.code() << 4);
    }
    b
}

impl World {
    /// A daemon → kernel datagram: counts the REMOTE_INFOs for peer REQUESTs.
    pub(crate) fn ledger_to_kernel(&mut self, h: usize, bytes: &[u8]) {
        for frame in decode_daemon_datagram(bytes).into_iter().flatten() {
            if let Frame::Msg(_, DaemonMsg::RemoteInfo(m)) = frame {
                let local = m
                    .remote_addr
                    .to_socket_addr()
                    .is_some_and(|a| self.hosts[h].owns(a.ip()));
                if !local {
                    self.ledgers[h].sent += 1;
                }
            }
        }
    }

    /// A peer datagram host `h`'s daemon sends: ACCEPTs are checked for their family; the
    /// hostile host sniffs what it replays.
    pub(crate) fn daemon_sends(
        &mut self,
        h: usize,
        from: SocketAddr,
        to: SocketAddr,
        bytes: &[u8],
    ) {
        let Ok(m) = PeerMessage::decode(bytes) else {
            return;
        };
        self.sniff(h, from, to, &m, bytes);
        if m.msg_type != PeerMsgType::Accept {
            return;
        }
        // A listener answers REQUESTs of its own family only. The ACCEPT names the listener
        // by its mapped port, which a v4 and a v6 listener may share (each family has its
        // own port space in the model), so it is wrong only if no listener of the
        // REQUEST's family has that mapped port and one of the other family has.
        let v6 = m.ip_version == IpVersion::V6;
        let mut other_family = None;
        for (port, l) in &self.hosts[h].cm.listeners {
            let crate::cm::ListenState::Listening { map, .. } = &l.state else {
                continue;
            };
            let Some(mapped) = map.m_local.to_socket_addr() else {
                continue;
            };
            if mapped.port() != m.ap_port {
                continue;
            }
            if self.scenario.kind_of(*port).v6 == v6 {
                other_family = None;
                break;
            }
            other_family.get_or_insert(*port);
        }
        if let Some(port) = other_family {
            let kind = self.scenario.kind_of(port);
            let detail = format!(
                "host {h} answered an {:?} REQUEST from {to} for its {kind} listener on port {port} with an ACCEPT",
                m.ip_version
            );
            self.violate(ViolationKind::Family, Some(h), detail);
        }
    }

    /// A datagram delivered to `to`, a receiving address (a fleet host, the hostile host's
    /// own, the rdma-core-like peer's): an ACCEPT from a daemon is one its ACK may echo.
    /// ACCEPTs sent to spoofed addresses reach nobody, so an ACK echoing one of those was
    /// guessed, however right the guess.
    pub(crate) fn ledger_delivered(&mut self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let Some(h) = self.host_index(from.ip()) else {
            return;
        };
        let Ok(m) = PeerMessage::decode(bytes) else {
            return;
        };
        if m.msg_type == PeerMsgType::Accept {
            self.ledgers[h]
                .accepts
                .entry(binding(to, &m))
                .or_default()
                .insert(bytes.to_vec());
        }
    }

    /// A peer datagram reaching host `h`'s listener socket: an ACK is verified (it echoes
    /// an ACCEPT sent to its source) or, for IPv6, blind.
    pub(crate) fn ledger_ack_in(&mut self, h: usize, from: SocketAddr, bytes: &[u8]) {
        let Ok(m) = PeerMessage::decode(bytes) else {
            return;
        };
        if m.msg_type != PeerMsgType::Ack {
            return;
        }
        let b = binding(from, &m);
        let l = &mut self.ledgers[h];
        let echoed = l
            .accepts
            .get(&b)
            .is_some_and(|sent| sent.contains(&retyped(bytes, PeerMsgType::Accept)));
        if echoed {
            if l.verified.insert(b) {
                *l.per_source.entry(source_of(from.ip())).or_default() += 1;
            }
        } else if m.ip_version == IpVersion::V6 {
            l.blind_v6.insert(b);
        }
    }

    /// What host `h`'s kernel may have been sent for peer REQUESTs by now (the module's
    /// bound).
    pub(crate) fn ledger_allowance(&self, h: usize) -> u64 {
        self.ledger_terms(h).0
    }

    /// The bound and its terms (budget × starts, refills, verified, blind, per-source cap).
    fn ledger_terms(&self, h: usize) -> (u64, [u64; 5]) {
        let host = &self.hosts[h];
        let default = iwpm_core::CoreConfig::default();
        let c = host.daemon.as_ref().map_or(&default, |d| d.core().config());
        let elapsed = self.now + host.offset;
        let refills = (elapsed.as_nanos() / c.remote_info_refill.as_nanos().max(1)) as u64;
        let budget = u64::from(c.remote_info_budget) * u64::from(host.incarnation);
        let l = &self.ledgers[h];
        // A source's allowance: the burst per daemon start (a new daemon's meter is full),
        // then the rate for the time elapsed.
        let cap = u64::from(c.remote_info_source_burst) * u64::from(host.incarnation)
            + u64::from(c.remote_info_source_rate) * elapsed.as_secs().saturating_add(1);
        let verified: u64 = l.per_source.values().map(|n| (*n).min(cap)).sum();
        let blind = l.blind_v6.len() as u64;
        let blind_allowance = if blind == 0 { 0 } else { blind / 128 + 4 };
        let total = budget + refills + 1 + verified + blind_allowance;
        (total, [budget, refills, verified, blind_allowance, cap])
    }

    /// The ledger's check of host `h`.
    pub(crate) fn check_ledger(&mut self, h: usize) {
        let sent = self.ledgers[h].sent;
        let (allowance, [budget, refills, verified, blind, cap]) = self.ledger_terms(h);
        if sent > allowance {
            let l = &self.ledgers[h];
            let (exchanges, blind_n) = (l.verified.len(), l.blind_v6.len());
            let detail = format!(
                "the daemon sent {sent} REMOTE_INFOs for peer REQUESTs, more than the ledger allows ({allowance} = budget×starts {budget} + refills {refills} + 1 + verified ACKs {verified} (of {exchanges} exchanges; at most {cap} per source) + blind IPv6 {blind} (of {blind_n} exchanges))"
            );
            self.violate(ViolationKind::Ledger, Some(h), detail);
        }
    }
}
