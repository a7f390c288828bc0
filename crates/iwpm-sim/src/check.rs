//! The invariants, checked across hosts after every step and at quiescence, and the rule
//! that decides when the fault schedule explains a legitimate connect's trouble.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use crate::host::MAPPED_PORTS;
use crate::world::World;

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
    /// second) and now.
    pub(crate) fn explained(&self, a: usize, b: Option<usize>, since: Duration) -> bool {
        let from = since.saturating_sub(FAULT_REACH_BACK);
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
        !replayed
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
