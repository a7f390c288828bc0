//! Restart recovery: MAPINFO records replayed by the kernel.
//!
//! # Where we differ from the C daemon, on purpose
//!
//! * **Records are taken only during our own replay request** (from our MAPINFO request to
//!   the client's MAPINFO_NUM, at most `reply_deadline`): see `handshake.rs`.
//! * **Reference counts are restored.** The kernel replays one record per kernel reference
//!   (each listening or connecting cm_id), so a record identical to an existing mapping
//!   (same local and mapped address) adds a reference instead of only being counted. In C
//!   the mapping keeps count 1, the first REMOVE frees the port while other users remain,
//!   and later REMOVEs are ignored.
//! * **A conflicting or unrecoverable record does not drop the rest of its datagram** (see
//!   `kernel.rs`).
//! * **The re-reserved port must be the recorded one**: a shell that grants another port
//!   gets it released and the record fails with CREATE_MAPPING_ERR, as a failed bind does.
//! * **The kernel's record wins over a restored connector it contradicts.** A connect
//!   whose QUERY failed (a peer's REJECT, or a daemon that died before answering) leaves
//!   the kernel with the identity mapping (local -> local) while the state file saved our
//!   connector (local -> a reserved port): the record replaces that mapping, as long as no
//!   record has confirmed it, instead of being refused as a duplicate (which left the
//!   kernel's ACK_NUM short). Found by `iwpm-sim` (finding F1 in `docs/simulator.md`).

use std::time::Instant;

use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_proto::netlink::MapInfoRecord;

use super::{code, Core};
use crate::action::PortReservations;
use crate::ratelimit::LogKind;
use crate::request::{Addr, Request};
use crate::table::MappingRole;

impl Core {
    pub(super) fn on_mapinfo(
        &mut self,
        now: Instant,
        req: Request,
        rec: MapInfoRecord,
        ports: &mut dyn PortReservations,
    ) {
        let client = req.client;
        if !self.mapinfo_expected(now, client) {
            self.count_warn(
                now,
                |s| &mut s.kernel_unsolicited,
                LogKind::Unsolicited,
                format_args!(
                    "MAPINFO record from client {client} outside our replay request dropped"
                ),
            );
            return;
        }
        self.replay_built(client);
        let flags = self.abi.flags(rec.flags);
        let (Some(local), Some(mapped)) =
            (Addr::parse(rec.local_addr), Addr::parse(rec.mapped_addr))
        else {
            self.record_failed(now, req, "non-IP address");
            return;
        };
        if local.ep.ip.is_ipv4() != mapped.ep.ip.is_ipv4() {
            self.record_failed(now, req, "local and mapped families differ");
            return;
        }
        let mut existing = self.table.colliding_local(&local.ep);
        if let Some(id) = existing {
            let contradicted = self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep() == local.ep && m.mapped_ep() != mapped.ep);
            if contradicted && self.unconfirmed_restored_connector(id) {
                let was = self.table.get(id).map(|m| m.mapped_ep());
                self.drop_restored(id, ports);
                self.stats.mapinfo_replaced += 1;
                let (l, m) = (local.ep, mapped.ep);
                tracing::info!(
                    "MAPINFO record {l} -> {m} replaces the restored connector mapping to {was:?}"
                );
                existing = None;
            }
        }
        if let Some(id) = existing {
            let same = self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep() == local.ep && m.mapped_ep() == mapped.ep);
            if same {
                self.count_replayed(client);
                if !self.confirm_restored(id) {
                    self.add_ref(id);
                }
                self.stats.mapinfo_duplicates += 1;
                self.accept_record(client);
            } else {
                self.stats.mapinfo_conflicts += 1;
                let (l, m) = (local.ep, mapped.ep);
                self.warn(
                    now,
                    LogKind::MappingFailed,
                    format_args!("MAPINFO record {l} -> {m} conflicts with a mapping"),
                );
                self.send_handle_err(client, req.seq, code::DUPLICATE);
            }
            return;
        }
        self.count_replayed(client);
        if self.mappings_full(now) {
            self.send_handle_err(client, req.seq, code::CREATE);
            return;
        }
        let reservation = if flags & IWPM_FLAGS_NO_PORT_MAP != 0 {
            None
        } else {
            match self.reserve(now, ports, &local, Some(mapped.ep.port)) {
                Some((id, _)) => Some(id),
                None => {
                    self.send_handle_err(client, req.seq, code::CREATE);
                    return;
                }
            }
        };
        self.new_mapping(
            now,
            client,
            local,
            mapped,
            reservation,
            MappingRole::Recovered,
        );
        self.accept_record(client);
    }

    /// Counts a record towards the ACK_NUM of the next MAPINFO_NUM.
    pub(super) fn accept_record(&mut self, client: u8) {
        self.clients.count_mapinfo(client);
        self.stats.mapinfo_accepted += 1;
    }

    fn record_failed(&mut self, now: Instant, req: Request, why: &str) {
        self.warn(
            now,
            LogKind::MappingFailed,
            format_args!("MAPINFO record not recovered: {why}"),
        );
        self.send_handle_err(req.client, req.seq, code::CREATE);
    }
}
