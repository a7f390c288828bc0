//! The invariants, checked across hosts after every step and at quiescence, and the rule
//! that decides when the fault schedule explains a legitimate connect's trouble.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use std::net::{IpAddr, SocketAddr};

use iwpm_core::PeerSocket;
use iwpm_proto::peer::auth::auth_block;
use iwpm_proto::peer::PeerMsgType;

use crate::host::MAPPED_PORTS;
use crate::onpath::inner_message;
use crate::plan::KeyRole;
use crate::world::{RunStats, Tag, World, HOSTILE_IP, HOSTILE_IP6};

/// Which invariant broke (a shrunk schedule must still break the same one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// An established connection's passive side names another peer than the true one, or
    /// the connection reached another listener than the one it was meant for.
    WrongPeer,
    /// A legitimate listen or connect waited for the kernel's 10 s request timeout.
    KernelTimeout,
    /// A legitimate listen or connect went unmapped for another reason.
    Unmapped,
    /// A legitimate connect was refused or found no route.
    ConnectFailed,
    /// A reservation released twice or never granted, bound on a specific address, held
    /// without a mapping, or a mapping without its reservation.
    Reservation,
    /// A mapping or exchange left at quiescence.
    Leak,
    /// REMOTE_INFO entries no legitimate connection accounts for beyond the budget, or
    /// legitimate ones never consumed.
    RemoteInfo,
    /// A daemon sent its kernel more REMOTE_INFOs for peer REQUESTs than the ledger allows
    /// (`crate::ledger`).
    Ledger,
    /// A listener answered a REQUEST of the other address family.
    Family,
    /// A real host's REQUEST for a closed port got no REJECT within 1 s.
    RejectLate,
    /// The emulated kernel saw a protocol violation (`iwpm_kernel_emu::Violation`).
    Protocol,
    /// `Core::check_invariants` failed.
    CoreInvariant,
    /// The daemon could not read its own state file.
    StateFile,
    /// A sealed datagram the on-path attacker stripped, replayed or forged, or a plain one
    /// from a network keyed daemons require sealed, was believed or released a REMOTE_INFO.
    AuthBypass,
    /// A keyed daemon did not count a sealed datagram as expected: a wrong key's or a
    /// skewed clock's in `peer_auth_wrong_key` / `peer_auth_clock`, a plain one from a
    /// required network in `peer_auth_missing`, a fleet member's as verified.
    AuthCount,
    /// A daemon sent an address more bytes in answers (ACCEPTs, REJECTs) than it received
    /// from that address.
    Amplify,
    /// The victim of item 5's spoofers got less than 90 % of its service without them.
    Service,
    /// The simulator itself got into a state it does not model.
    Sim,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which.
    pub kind: ViolationKind,
    /// Fleet time.
    pub at: Duration,
    /// The host it was seen on.
    pub host: Option<usize>,
    /// What exactly.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = self.host.map_or_else(|| "-".to_string(), |h| h.to_string());
        write!(
            f,
            "{:?} at t={:.3}s on host {host}: {}",
            self.kind,
            self.at.as_secs_f64(),
            self.detail
        )
    }
}

/// How long before a connect started a fault can still be behind its trouble.
const FAULT_REACH_BACK: Duration = Duration::from_secs(1);
/// Slack after a fault's window.
const FAULT_TAIL: Duration = Duration::from_secs(1);

impl World {
    pub(crate) fn violate(&mut self, kind: ViolationKind, host: Option<usize>, detail: String) {
        self.violations.push(Violation {
            kind,
            at: self.now,
            host,
            detail,
        });
    }

    /// True if a fault touching host `a` or `b` was active between `since` (minus a
    /// second) and now, or `a` and `b` cannot authenticate each other (a wrong key, a
    /// skewed clock).
    pub(crate) fn explained(&self, a: usize, b: Option<usize>, since: Duration) -> bool {
        let from = since.saturating_sub(FAULT_REACH_BACK);
        // A host with a wrong key or a skewed clock and a keyed host cannot connect: that is
        // expected (their daemons count it, `auth_after`), not a violation.
        if b.is_some_and(|b| self.scenario.auth.fails_between(a, b)) {
            return true;
        }
        self.explain_faults
            && self.faults.iter().any(|(s, e, w)| {
                *s <= self.now
                    && *e + FAULT_TAIL >= from
                    && (w.touches(a) || b.is_some_and(|b| w.touches(b)))
            })
    }

    /// REMOTE_INFOs host `h`'s kernel may hold that no legitimate connection accounts for:
    /// what the ledger allows the daemon to have sent for peer REQUESTs at all (each daemon
    /// start's budget, one token per refill interval of host time, one per verified ACK
    /// within the per-source cap, the blind IPv6 allowance; `crate::ledger`).
    fn remote_info_allowance(&self, h: usize) -> usize {
        if self.hosts[h].daemon.is_none() {
            return usize::MAX;
        }
        usize::try_from(self.ledger_allowance(h)).unwrap_or(usize::MAX)
    }

    /// An entry's connecting side is a legitimate peer's mapped address (a fleet IP of
    /// either family, or the rdma-core-like peer's, with a port in the reservation range);
    /// everything else came from the hostile host, whose REQUESTs claim mapped ports below
    /// that range.
    pub(crate) fn legit_entry(&self, e: &iwpm_kernel_emu::kernel::RemoteInfoEntry) -> bool {
        // A captured pair replayed (finding E) repeats a legitimate exchange: what it makes
        // the daemon send beyond the first is the attacker's (counted by the ledger), so no
        // entry of its connecting address is taken for a legitimate one left over.
        let replayed = self.actors.captured.values().any(|(_, _, req, _)| {
            iwpm_proto::peer::PeerMessage::decode(req)
                .is_ok_and(|r| e.remote.to_socket_addr() == Some(r.cp()))
        });
        let tainted = e
            .remote
            .to_socket_addr()
            .is_some_and(|r| self.keyed.tainted_cps.contains(&r));
        !replayed
            && !tainted
            && e.mapped_remote.to_socket_addr().is_some_and(|a| {
                let ip = a.ip();
                let legit_ip = self.host_index(ip).is_some()
                    || ip == std::net::IpAddr::V4(crate::world::PEER_IP)
                    || ip == std::net::IpAddr::V6(crate::world::PEER_IP6);
                legit_ip && MAPPED_PORTS.contains(&a.port())
            })
    }

    /// Per-step checks of host `h`.
    pub(crate) fn check_host(&mut self, h: usize) {
        let host = &self.hosts[h];
        let seen = host.kernel_violations_seen.get();
        if let Some(v) = host.kernel.violations().get(seen) {
            host.kernel_violations_seen.set(seen + 1);
            let detail = format!("{v:?}");
            self.violate(ViolationKind::Protocol, Some(h), detail);
            return;
        }
        let Some(d) = host.daemon.as_ref() else {
            return;
        };
        if let Some(f) = d.ports().faults.first() {
            let f = f.clone();
            self.violate(ViolationKind::Reservation, Some(h), f);
            return;
        }
        // The table and the ledger change together: re-check them when the table did.
        let generation = (host.incarnation, host.table_generation);
        if host.checked.get() != Some(generation) {
            host.checked.set(Some(generation));
            if let Err(e) = d.core().check_invariants() {
                self.violate(ViolationKind::CoreInvariant, Some(h), e.to_string());
                return;
            }
            let owned: BTreeSet<_> = d.core().mappings().filter_map(|m| m.reservation).collect();
            let held: BTreeSet<_> = d.ports().held.keys().copied().collect();
            if owned != held {
                let leaked: Vec<_> = held.difference(&owned).collect();
                let lost: Vec<_> = owned.difference(&held).collect();
                let detail = format!("reservations held without a mapping {leaked:?}, mappings whose reservation is not held {lost:?}");
                self.violate(ViolationKind::Reservation, Some(h), detail);
                return;
            }
        }
        // Stray entries are at most all entries: count them only past the allowance.
        let allowance = self.remote_info_allowance(h);
        let total = host.kernel.remote_info().len();
        if total > allowance {
            let stray = host
                .kernel
                .remote_info()
                .entries()
                .iter()
                .filter(|e| !self.legit_entry(e))
                .count();
            if stray > allowance {
                self.violate(ViolationKind::RemoteInfo, Some(h), format!("the kernel holds {stray} REMOTE_INFO entries no legitimate connection accounts for ({total} in all), more than the ledger allows ({allowance})"));
                return;
            }
        }
        self.check_ledger(h);
    }

    /// After the teardown and the settling time: nothing is left anywhere.
    pub(crate) fn check_quiescent(&mut self) {
        for h in 0..self.hosts.len() {
            self.check_host(h);
            if !self.violations.is_empty() {
                return;
            }
            let now = self.hosts[h].local(self.base, self.now);
            let host = &self.hosts[h];
            let Some(d) = host.daemon.as_ref() else {
                self.violate(ViolationKind::Sim, Some(h), "no daemon at the end".into());
                return;
            };
            let mappings = d.core().mappings().count();
            let held = d.ports().held.len();
            let exchanges = d.core().snapshot_exchanges(now).len();
            let kernel_entries = host.kernel.mapinfo().len();
            let pending = host.kernel.pending_requests();
            // A replay cut short by the kernel's datagram limit keeps restored listeners
            // on the state file's word (machine/restore.rs): one destroyed while no daemon ran
            // stays; the fault schedule explains it.
            if (mappings > 0 || held > 0) && !host.replay_truncated {
                self.violate(
                    ViolationKind::Leak,
                    Some(h),
                    format!("{mappings} mappings and {held} reservations left at quiescence"),
                );
                return;
            }
            if exchanges > 0 {
                self.violate(
                    ViolationKind::Leak,
                    Some(h),
                    format!("{exchanges} exchanges left at quiescence"),
                );
                return;
            }
            if kernel_entries > 0 || pending > 0 {
                self.violate(ViolationKind::Sim, Some(h), format!("kernel holds {kernel_entries} mapinfo entries and {pending} requests after every id was destroyed"));
                return;
            }
            let legit_left = host
                .kernel
                .remote_info()
                .entries()
                .iter()
                .filter(|e| self.legit_entry(e))
                .count();
            if legit_left > 0 {
                // A legitimate REMOTE_INFO whose connection never came: only a fault on a
                // connect to this host explains it.
                let explained = self
                    .conns
                    .values()
                    .any(|c| c.to == h && self.explained(c.from, Some(h), c.started));
                if !explained {
                    self.violate(ViolationKind::RemoteInfo, Some(h), format!("{legit_left} REMOTE_INFO entries of legitimate connects never consumed"));
                    return;
                }
            }
        }
    }
}

/// A keyed daemon's counts before it handles a datagram (`World::auth_after`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AuthPre {
    /// The datagram's MAC reaches this host for the first time.
    first: bool,
    sent: u64,
    verified: u64,
    wrong_key: u64,
    clock: u64,
    replayed: u64,
    missing: u64,
}

/// The fleet's networks, which `peer_auth_required` names (`crate::host`).
fn fleet_net(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[..2] == [10, 0],
        IpAddr::V6(v6) => v6.segments()[..2] == [0xfd00, 0],
    }
}

impl World {
    /// Before host `h`'s daemon handles a datagram: the bytes it got from `from` (for the
    /// answer-size check), and a keyed daemon's counts.
    pub(crate) fn auth_before(
        &mut self,
        h: usize,
        from: SocketAddr,
        to: SocketAddr,
        bytes: &[u8],
    ) -> Option<AuthPre> {
        let d = self.hosts[h].daemon.as_ref()?;
        if to.port() == iwpm_proto::consts::IWPM_PEER_PORT {
            *self.keyed.bytes_in.entry((h, from)).or_default() += bytes.len() as u64;
        }
        if self.hosts[h].key_role == KeyRole::Unkeyed {
            return None;
        }
        let first = auth_block(bytes).is_none_or(|b| self.keyed.delivered.insert((h, b.mac)));
        let st = d.core().stats();
        Some(AuthPre {
            first,
            sent: self.ledgers[h].sent,
            verified: st.peer_auth_verified,
            wrong_key: st.peer_auth_wrong_key,
            clock: st.peer_auth_clock,
            replayed: st.peer_auth_replayed,
            missing: st.peer_auth_missing,
        })
    }

    /// After keyed host `h`'s daemon handled a datagram from `from`: what it released and
    /// counted must fit what the datagram is (its `tag`, sealed or plain, its sender's key).
    pub(crate) fn auth_after(
        &mut self,
        h: usize,
        from: SocketAddr,
        bytes: &[u8],
        tag: Tag,
        pre: AuthPre,
    ) {
        let Some(d) = self.hosts[h].daemon.as_ref() else {
            return;
        };
        let st = d.core().stats();
        let released = self.ledgers[h].sent.saturating_sub(pre.sent);
        let verified = st.peer_auth_verified - pre.verified;
        let wrong_key = st.peer_auth_wrong_key - pre.wrong_key;
        let clock = st.peer_auth_clock - pre.clock;
        let replayed = st.peer_auth_replayed - pre.replayed;
        let missing = st.peer_auth_missing - pre.missing;
        self.stats.auth_verified += verified;
        self.stats.auth_refused += wrong_key + clock + replayed + missing;
        if verified > 0 {
            // A fleet member's REQUEST needs no budget: outside the ledger.
            self.ledgers[h].sent = pre.sent;
            self.stats.remote_info_authenticated += released;
        }
        let sealed = auth_block(bytes).is_some();
        let required = self.hosts[h].auth_required && fleet_net(from.ip());
        let what = || {
            let ty = inner_message(bytes).map(|m| m.msg_type);
            format!(
                "{tag:?} {} {ty:?} from {from}",
                if sealed { "sealed" } else { "plain" }
            )
        };
        let resourced = tag == Tag::Forged
            && [IpAddr::V4(HOSTILE_IP), IpAddr::V6(HOSTILE_IP6)].contains(&from.ip());
        if resourced && sealed && verified > 0 {
            // K1 (fixed): a sealed datagram is believed only from the address it names as
            // its sender, so a copy from the attacker's address, even one that arrives
            // before its original, is refused; its original is then believed.
            let detail = format!(
                "K1: a {} (its sender's bytes from the attacker's address, ahead of the original) was believed and released {released} REMOTE_INFOs",
                what()
            );
            self.violate(ViolationKind::AuthBypass, Some(h), detail);
            return;
        }
        if tag == Tag::Replayed && pre.first {
            // Its original never arrived here: this is the first delivery, and the daemon
            // may believe it as it would have believed the original.
            return;
        }
        if tag != Tag::Normal && sealed && (verified > 0 || released > 0) {
            let detail = format!(
                "a {} was believed ({verified} verified) and released {released} REMOTE_INFOs",
                what()
            );
            self.violate(ViolationKind::AuthBypass, Some(h), detail);
            return;
        }
        if !sealed && required {
            if released > 0 || missing != 1 {
                let detail = format!(
                    "a {} reached a daemon requiring it sealed: {released} REMOTE_INFOs, peer_auth_missing +{missing}",
                    what()
                );
                let kind = if released > 0 {
                    ViolationKind::AuthBypass
                } else {
                    ViolationKind::AuthCount
                };
                self.violate(kind, Some(h), detail);
            }
            return;
        }
        let Some(s) = self.host_index(from.ip()) else {
            return;
        };
        if tag != Tag::Normal || !sealed || s == h || !self.scenario.auth.keyed(s) {
            return;
        }
        let auth = &self.scenario.auth;
        if auth.fails_between(s, h) {
            let wrong = auth.role(s) == KeyRole::WrongKey || auth.role(h) == KeyRole::WrongKey;
            let (counted, name) = if wrong {
                (wrong_key, "peer_auth_wrong_key")
            } else {
                (clock, "peer_auth_clock")
            };
            if counted != 1 || verified > 0 {
                let detail = format!(
                    "a {} between host {s} ({:?}) and host {h} ({:?}): {name} +{counted}, verified +{verified}",
                    what(),
                    auth.role(s),
                    auth.role(h)
                );
                self.violate(ViolationKind::AuthCount, Some(h), detail);
            }
        } else if verified + replayed != 1 {
            let detail = format!(
                "a {} of a fleet member was not believed (wrong key +{wrong_key}, clock +{clock}, replayed +{replayed}; keys at rotation steps {} and {})",
                what(),
                self.hosts[s].rotation,
                self.hosts[h].rotation
            );
            self.violate(ViolationKind::AuthCount, Some(h), detail);
        }
    }

    /// An answer host `h`'s daemon sends from its listener socket (an ACCEPT or a REJECT):
    /// in all, no address gets more bytes of answers than it sent.
    pub(crate) fn check_answer_size(
        &mut self,
        h: usize,
        via: PeerSocket,
        to: SocketAddr,
        bytes: &[u8],
    ) {
        if !matches!(via, PeerSocket::V4Listener | PeerSocket::V6Listener) {
            return;
        }
        let answer = inner_message(bytes)
            .is_some_and(|m| matches!(m.msg_type, PeerMsgType::Accept | PeerMsgType::Reject));
        if !answer {
            return;
        }
        let out = self.keyed.bytes_answered.entry((h, to)).or_default();
        *out += bytes.len() as u64;
        let out = *out;
        let got = self.keyed.bytes_in.get(&(h, to)).copied().unwrap_or(0);
        if out > got {
            let detail = format!(
                "host {h} sent {to} {out} bytes of answers (the last {} bytes), having received {got} bytes from it",
                bytes.len()
            );
            self.violate(ViolationKind::Amplify, Some(h), detail);
        }
    }

    /// A datagram for host `h`: a REJECT answering a REQUEST of the victim of item 5's
    /// spoofers is counted.
    pub(crate) fn count_victim_reject(&mut self, h: usize, bytes: &[u8]) {
        if self.victim != Some(h) {
            return;
        }
        let ours = inner_message(bytes).is_some_and(|m| {
            m.msg_type == PeerMsgType::Reject && self.keyed.victim_handles.contains(&m.assoc_handle)
        });
        if ours {
            self.stats.victim_rejects += 1;
        }
    }
}

/// Item 5's oracle: the victim's service under the spoofers (`attacked`) against the same
/// seed without them (`quiet`): its REJECTs, its connects established, the rdma-core-like
/// peer's REMOTE_INFOs found, each at least 90 % of what it got without the attack.
pub fn service_drop(attacked: &RunStats, quiet: &RunStats) -> Option<String> {
    let pairs = [
        ("REJECTs", attacked.victim_rejects, quiet.victim_rejects),
        (
            "connects established",
            attacked.victim_established,
            quiet.victim_established,
        ),
        (
            "rdma-core-like peer REMOTE_INFOs found",
            attacked.rdma_peer_found,
            quiet.rdma_peer_found,
        ),
    ];
    pairs
        .iter()
        .find(|(_, a, q)| a * 10 < q * 9)
        .map(|(what, a, q)| {
            format!("the victim got {a} {what} under the spoofers, {q} without them")
        })
}
