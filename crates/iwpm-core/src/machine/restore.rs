//! Restoring the previous daemon's table at start-up (from the state file, see
//! [`crate::state_file`]) and reconciling it with the kernel's MAPINFO replay.
//!
//! The state file is written by us and may be stale (the kernel may have removed mappings
//! while no daemon ran); the replay is the kernel's truth but stops at ~227 records per
//! client (`docs/protocol.md` §5.4). So:
//!
//! * [`Core::start_after_restart`] inserts every saved mapping at once, with its saved
//!   reference count, reserving exactly the saved port (a shell holding that port already,
//!   from the systemd FD store, hands over that socket instead of binding again), before
//!   it greets the kernel.
//! * A replayed record identical to a restored mapping *confirms* one of its saved
//!   references instead of adding one; records beyond the saved count add references.
//! * When the client's replay is **complete** (its MAPINFO_NUM arrived) the kernel's count
//!   is the truth: a restored mapping gets exactly its confirmed count, and one nobody
//!   confirmed is freed (its port released, logged).
//! * When the replay ended **without MAPINFO_NUM** (the replay limit, or a full queue) after
//!   at least one record, the unconfirmed rest cannot be told apart from the records the
//!   kernel could not send: restored listeners keep max(saved, confirmed) references.
//!   Restored *connectors* (QUERY_MAPPING endpoints) keep only what the replay confirmed:
//!   a connection that ended while no daemon was registered sent no REMOVE to anyone, so
//!   an unlisted connector is taken as gone rather than held forever (the C daemon, which
//!   knows only the replay, does the same); listeners are long-lived and worth the risk.
//! * When the window closed with **no record at all** from the client, the kernel holds no
//!   mapping for it (an empty table is answered with a bare DONE): its restored mappings
//!   are freed.
//! * Restored mappings of a client we never asked to replay keep their saved counts.
//!
//! Kernel requests that arrive while a mapping waits to be settled change its count on
//! top of what settling decides, as far as the kernel's replay cannot already reflect
//! them. The kernel builds its replay inside our MAPINFO request's `sendmsg`, so every
//! record precedes, in our socket, whatever the kernel sends after that moment:
//!
//! * an ADD or QUERY that shares a restored mapping always counts: the kernel records its
//!   reference only once our answer wakes the waiting caller, and we answer only after
//!   sending the MAPINFO request, so the replay never holds it;
//! * a REMOVE read after the client's first record (or once its window is closed) counts
//!   against the replay: the kernel dropped that reference from its table just before
//!   sending the REMOVE, after the replay was built;
//! * a REMOVE read before any record was dropped from the kernel's table before the
//!   replay was built: a replayed count already lacks it, so it counts only against the
//!   state file's count (a truncated replay of a listener, or a client not asked).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_proto::sockaddr::SockAddrStorage;

use super::handshake::Handshake;
use super::Core;
use crate::action::{Action, PortReservations};
use crate::int_hash::IntMap;
use crate::mapping_id::MappingId;
use crate::outcome::SettleReport;
use crate::request::Addr;
use crate::state_file::SavedMapping;
use crate::table::MappingRole;

/// References a restored mapping had in the state file and how many the replay confirmed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RestoredRefs {
    saved: u32,
    confirmed: u32,
    /// A connector: kept only as far as the replay confirms it.
    connector: bool,
    /// References ADD or QUERY requests took while the mapping waited (module docs).
    added: u32,
    /// References REMOVEs dropped before the replay was built (the replay lacks them).
    removed_before: u32,
    /// References REMOVEs dropped after the replay was built (the replay holds them).
    removed_after: u32,
}

impl RestoredRefs {
    /// `base`, the count the replay or the state file vouches for, with the requests that
    /// came later on top (module docs).
    fn with_requests(&self, base: u32) -> u32 {
        base.saturating_add(self.added)
            .saturating_sub(self.removed_after)
    }
}

/// Restore bookkeeping, alive from [`Core::start_after_restart`] to the end of the recovery.
#[derive(Debug, Default)]
pub(crate) struct RestoreState {
    /// Restored mappings not settled yet.
    pending: IntMap<MappingId, RestoredRefs>,
    /// Replay records accepted per client since the restore.
    records: HashMap<u8, u32>,
    /// Clients whose replay the kernel has built: a record or the end of the replay seen.
    built: Vec<u8>,
    /// Clients whose replay finished: true = complete (MAPINFO_NUM).
    ended: Vec<(u8, bool)>,
    /// The shell waits for the end of the recovery ([`Previous::inherited_ports`]).
    watched: bool,
    /// [`Action::RecoveryEnded`] was emitted.
    ended_announced: bool,
}

/// What the previous daemon process left behind, for
/// [`Host::start_after_restart`](crate::Host::start_after_restart).
#[derive(Clone, Copy, Debug, Default)]
pub struct Previous<'a> {
    /// Its mappings, as its state file saved them.
    pub mappings: &'a [SavedMapping],
    /// The shell holds TCP ports it inherited (the systemd FD store) and closes those no
    /// mapping claimed on [`Action::RecoveryEnded`]: the core then also wakes up at the end
    /// of each replay window ([`Host::poll_timeout`](crate::Host::poll_timeout)), so that
    /// the event comes on time.
    pub inherited_ports: bool,
}

/// What [`Host::start_after_restart`](crate::Host::start_after_restart) did with the saved
/// mappings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Mappings inserted (their ports held again).
    pub restored: usize,
    /// Saved mappings whose port could not be reserved again, or that did not fit.
    pub failed: usize,
    /// Saved mappings skipped: malformed, or duplicating one already restored.
    pub skipped: usize,
}

fn addr(sa: SocketAddr) -> Option<Addr> {
    Addr::parse(SockAddrStorage::from_socket_addr(sa))
}

impl Core {
    /// Starts a daemon that follows another: restores the previous process's mappings
    /// (read back from its state file), then does what [`Core::start`] does. Each mapping
    /// gets its saved reference count and, unless NO_PORT_MAP, exactly its saved port
    /// through `ports`; they are in place before the kernel is greeted, so its replay finds
    /// them. The replay then confirms or corrects them, and the `handle_*` call that ends
    /// it settles them (module docs). On a core already started, nothing is restored.
    pub(crate) fn start_after_restart(
        &mut self,
        now: Instant,
        previous: Previous<'_>,
        ports: &mut dyn PortReservations,
    ) -> RestoreReport {
        self.last_now = now;
        if self.handshake != Handshake::Idle {
            tracing::warn!("a started core restores nothing");
            return RestoreReport {
                skipped: previous.mappings.len(),
                ..RestoreReport::default()
            };
        }
        self.restore.watched = previous.inherited_ports;
        let report = self.restore_saved(now, previous.mappings, ports);
        self.settle_recovery(ports);
        self.sync_gauges(now);
        self.start_handshake(now);
        self.end_input();
        report
    }

    /// Inserts the saved mappings (see [`Core::start_after_restart`]).
    fn restore_saved(
        &mut self,
        now: Instant,
        saved: &[SavedMapping],
        ports: &mut dyn PortReservations,
    ) -> RestoreReport {
        let mut report = RestoreReport::default();
        for s in saved {
            let (Some(local), Some(mapped)) = (addr(s.local), addr(s.mapped)) else {
                report.skipped += 1;
                continue;
            };
            if self.table.colliding_local(&local.ep).is_some() || s.refcount == 0 {
                report.skipped += 1;
                continue;
            }
            if self.mappings_full(now) {
                report.failed += 1;
                continue;
            }
            let reservation = if s.no_port_map {
                None
            } else {
                match self.reserve(now, ports, &local, Some(mapped.ep.port)) {
                    Some((id, _)) => Some(id),
                    None => {
                        report.failed += 1;
                        continue;
                    }
                }
            };
            let id = self.new_mapping(
                now,
                s.owner,
                local,
                mapped,
                reservation,
                if s.connector {
                    MappingRole::Connector
                } else {
                    MappingRole::Recovered
                },
            );
            if let Some(m) = self.table.get_mut(id) {
                m.refcount = s.refcount;
            }
            self.restore.pending.insert(
                id,
                RestoredRefs {
                    saved: s.refcount,
                    connector: s.connector,
                    ..RestoredRefs::default()
                },
            );
            report.restored += 1;
        }
        report
    }

    /// The mappings as the state file saves them, oldest first.
    pub fn saved_mappings(&self) -> Vec<SavedMapping> {
        let mut v = Vec::new();
        self.saved_mappings_into(&mut v);
        v
    }

    /// [`Core::saved_mappings`] into `out` (cleared first), reusing its memory: a large
    /// table's snapshot then costs no fresh allocation (and no page faults) each time.
    pub fn saved_mappings_into(&self, out: &mut Vec<SavedMapping>) {
        out.clear();
        out.extend(self.table.iter().filter_map(|(_, m)| {
            Some(SavedMapping {
                owner: m.owner,
                refcount: m.refcount,
                no_port_map: m.no_port_map,
                connector: m.role == MappingRole::Connector,
                local: m.local_socket_addr()?,
                mapped: m.mapped_socket_addr()?,
            })
        }));
        out.reverse();
    }

    /// True while a restart recovery may still claim ports: the handshake is not done, a
    /// replay window is open, or restored mappings wait for the end of their replay. For
    /// looking only (tests, status): the end comes as [`Action::RecoveryEnded`].
    pub fn recovering(&self) -> bool {
        !self.is_ready() || !self.mapinfo_windows.is_empty() || !self.restore.pending.is_empty()
    }

    /// [`Action::RecoveryEnded`] once [`Core::recovering`] first turns false (checked at the
    /// end of every input call).
    pub(super) fn announce_recovery_end(&mut self) {
        if !self.restore.ended_announced && !self.recovering() {
            self.restore.ended_announced = true;
            self.push(Action::RecoveryEnded);
        }
    }

    /// Settles restored mappings whose replay has ended (module docs); run at the end of
    /// every `handle_*` that may end a replay (cheap when nothing is due). Ports of freed
    /// mappings are released through `ports`.
    pub(super) fn settle_recovery(&mut self, ports: &mut dyn PortReservations) {
        let mut report = SettleReport::default();
        if self.restore.pending.is_empty() {
            self.restore.ended.clear();
            return;
        }
        let ended = std::mem::take(&mut self.restore.ended);
        let all_over = self.is_ready() && self.mapinfo_windows.is_empty();
        let ids: Vec<MappingId> = self.restore.pending.keys().copied().collect();
        for id in ids {
            let Some(owner) = self.table.get(id).map(|m| m.owner) else {
                self.restore.pending.remove(&id);
                continue;
            };
            let end = ended.iter().find(|(c, _)| *c == owner).map(|(_, c)| *c);
            if end.is_none() && !all_over {
                continue;
            }
            let Some(refs) = self.restore.pending.remove(&id) else {
                continue;
            };
            let any_records = self.restore.records.get(&owner).is_some_and(|n| *n > 0);
            if refs.confirmed > 0 {
                report.replayed += 1;
            }
            let count = refs.with_requests(match end {
                Some(true) => refs.confirmed,
                Some(false) if !any_records => 0,
                // A connection ended while no daemon was registered sends no REMOVE: a
                // connector the replay did not list is taken as gone (as C, which knows
                // only the replay). Listeners keep the state file's word.
                _ if refs.connector => refs.confirmed,
                _ => refs
                    .saved
                    .saturating_sub(refs.removed_before)
                    .max(refs.confirmed),
            });
            if count == 0 {
                if let Some(m) = self.table.get_mut(id) {
                    m.refcount = 1;
                }
                self.unref_mapping(id, ports);
                report.freed += 1;
            } else {
                if let Some(m) = self.table.get_mut(id) {
                    m.refcount = count;
                }
                self.generation += 1;
                if end == Some(true) {
                    report.confirmed += 1;
                } else {
                    report.kept += 1;
                }
            }
        }
        if report != SettleReport::default() {
            tracing::info!(
                confirmed = report.confirmed,
                kept = report.kept,
                freed = report.freed,
                replayed = report.replayed,
                "restored mappings settled against the kernel's replay"
            );
            self.push(Action::Settled(report));
        }
    }

    /// A replayed record identical to mapping `id`: true if it confirmed a restored
    /// reference (no reference is added then).
    pub(super) fn confirm_restored(&mut self, id: MappingId) -> bool {
        match self.restore.pending.get_mut(&id) {
            Some(refs) => {
                refs.confirmed += 1;
                refs.confirmed <= refs.saved
            }
            None => false,
        }
    }

    /// Is `id` a connector restored from the state file that no replayed record has
    /// confirmed yet? Such a mapping gives way to a conflicting record (the kernel's word).
    pub(super) fn unconfirmed_restored_connector(&self, id: MappingId) -> bool {
        self.restore
            .pending
            .get(&id)
            .is_some_and(|r| r.connector && r.confirmed == 0)
    }

    /// Drops restored mapping `id` (all its references; its port is released through
    /// `ports`) without waiting for the end of the replay.
    pub(super) fn drop_restored(&mut self, id: MappingId, ports: &mut dyn PortReservations) {
        self.restore.pending.remove(&id);
        if let Some(m) = self.table.get_mut(id) {
            m.refcount = 1;
        }
        self.unref_mapping(id, ports);
    }

    /// Someone waits for a replay to end: restored mappings, or the shell
    /// ([`Previous::inherited_ports`]).
    pub(super) fn restore_waiting(&self) -> bool {
        !self.restore.pending.is_empty() || (self.restore.watched && self.recovering())
    }

    /// An ADD or QUERY took a reference of mapping `id`: one more, also for settling if
    /// `id` is a restored mapping not settled yet (module docs).
    pub(super) fn add_requested_ref(&mut self, id: MappingId) {
        self.add_ref(id);
        if let Some(refs) = self.restore.pending.get_mut(&id) {
            refs.added = refs.added.saturating_add(1);
        }
    }

    /// A REMOVE drops one reference of mapping `id`, owned by `client`; settling a
    /// restored one later keeps it dropped (module docs).
    pub(super) fn remove_requested_ref(
        &mut self,
        id: MappingId,
        client: u8,
        ports: &mut dyn PortReservations,
    ) {
        let built = self.restore.built.contains(&client);
        if let Some(refs) = self.restore.pending.get_mut(&id) {
            let n = if built {
                &mut refs.removed_after
            } else {
                &mut refs.removed_before
            };
            *n = n.saturating_add(1);
        }
        self.unref_mapping(id, ports);
        if self.table.get(id).is_none() {
            self.restore.pending.remove(&id);
        }
    }

    /// The kernel has built `client`'s replay: one of its records, or the end of it, is
    /// here. Later REMOVEs count against the replay (module docs).
    pub(super) fn replay_built(&mut self, client: u8) {
        if !self.restore.pending.is_empty() && !self.restore.built.contains(&client) {
            self.restore.built.push(client);
        }
    }

    /// Counts a replayed record of `client` for the end-of-replay decision.
    pub(super) fn count_replayed(&mut self, client: u8) {
        if !self.restore.pending.is_empty() {
            *self.restore.records.entry(client).or_default() += 1;
        }
    }

    /// The replay of `client` ended (`complete` = its MAPINFO_NUM arrived).
    pub(super) fn replay_ended(&mut self, client: u8, complete: bool) {
        self.replay_built(client);
        if !self.restore.pending.is_empty() {
            self.restore.ended.push((client, complete));
        }
    }
}
