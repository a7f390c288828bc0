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

use std::time::Instant;

use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;
use iwpm_proto::netlink::MapInfoRecord;

use crate::core::{code, wildcard_of, Core, Purpose};
use crate::ratelimit::LogKind;
use crate::table::MappingRole;

impl Core {
    pub(crate) fn on_mapinfo(&mut self, now: Instant, client: u8, seq: u32, rec: MapInfoRecord) {
        if !self.mapinfo_expected(now, client) {
            self.stats.kernel_unsolicited += 1;
            self.warn(
                now,
                LogKind::Unsolicited,
                format_args!(
                    "MAPINFO record from client {client} outside our replay request dropped"
                ),
            );
            return;
        }
        let flags = if self.abi > iwpm_proto::consts::IWPM_UABI_VERSION_MIN {
            rec.flags.unwrap_or(0)
        } else {
            0
        };
        let (local, mapped) = (rec.local_addr, rec.mapped_addr);
        let (Some(local_ep), Some(mapped_ep)) = (local.endpoint(), mapped.endpoint()) else {
            self.record_failed(now, client, seq, "non-IP address");
            return;
        };
        if local_ep.ip.is_ipv4() != mapped_ep.ip.is_ipv4() {
            self.record_failed(now, client, seq, "local and mapped families differ");
            return;
        }
        if let Some(id) = self.table.loose_local(&local_ep) {
            let same = self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep == local_ep && m.mapped_ep == mapped_ep);
            if same {
                self.add_ref(id);
                self.stats.mapinfo_duplicates += 1;
                self.accept_record(client);
            } else {
                self.stats.mapinfo_conflicts += 1;
                self.warn(
                    now,
                    LogKind::MappingFailed,
                    format_args!(
                        "MAPINFO record {local_ep} -> {mapped_ep} conflicts with a mapping"
                    ),
                );
                self.send_handle_err(client, seq, code::DUPLICATE);
            }
            return;
        }
        if self.mappings_full(now) {
            self.send_handle_err(client, seq, code::CREATE);
            return;
        }
        if flags & IWPM_FLAGS_NO_PORT_MAP != 0 {
            self.new_mapping(
                now,
                client,
                (local, local_ep),
                (mapped, mapped_ep),
                None,
                MappingRole::Recovered,
            );
            self.accept_record(client);
            return;
        }
        self.reserve(
            wildcard_of(&local_ep, mapped_ep.port),
            Purpose::Recover {
                client,
                seq,
                local,
                local_ep,
                mapped,
                mapped_ep,
            },
        );
    }

    /// Counts a record towards the ACK_NUM of the next MAPINFO_NUM.
    pub(crate) fn accept_record(&mut self, client: u8) {
        self.clients.count_mapinfo(client);
        self.stats.mapinfo_accepted += 1;
    }

    fn record_failed(&mut self, now: Instant, client: u8, seq: u32, why: &str) {
        self.warn(
            now,
            LogKind::MappingFailed,
            format_args!("MAPINFO record not recovered: {why}"),
        );
        self.send_handle_err(client, seq, code::CREATE);
    }
}
