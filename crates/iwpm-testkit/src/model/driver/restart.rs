//! [`Op::Restore`]: the daemon restarts. The old core's table goes through the state file
//! (encoded and read back, as the shell writes and reads it); its process ends, closing
//! every reservation; a new core (another handle key), in a new host with a new model
//! shell, is started with the file's mappings ([`Host::start_after_restart`]); the model
//! kernel answers its HELLO and, for
//! each MAPINFO request, replays one record per reference it was told of, one record a
//! datagram, then (unless the op says otherwise) MAPINFO_NUM. Nothing else is called:
//! the restored mappings must be settled by the core's own `handle_*` calls, and every
//! check of the driver holds across the restart.
//!
//! The kernel's ledger survives the restart: a record the new core refuses (HANDLE_ERR)
//! tells the kernel it holds that reference no more. When the op leaves the replay to the
//! next ops (`how % 3 == 2`), nothing tells the kernel which of its references the new
//! core kept, so the ledger starts empty.
//!
//! The ledger counts every request, those sent while the new core recovers included: a
//! reference an ADD or QUERY takes, or a REMOVE drops, before the restored mappings are
//! settled must survive the settling.
//!
//! Not modelled: ports handed over through the systemd FD store (`iwpmd` only), and
//! a kernel that replays more than it was told of (a success answer the driver could not
//! attribute).

use iwpm_core::state_file::{SavedMapping, StateFile};
#[cfg(doc)]
use iwpm_core::Host;
use iwpm_core::Previous;
use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, IWPM_UABI_VERSION};
use iwpm_proto::kernel_side::requests::{encode_mapinfo_record, mapinfo_num, mapping_flags};
use iwpm_proto::netlink::MapInfoRecord;
use iwpm_proto::sockaddr::Endpoint;

use super::{model_host, Ctx, Driver, Op};
use crate::model::pools::fail;

/// One replayed record: its client, local endpoint and message.
type Replayed = (u8, Endpoint, MapInfoRecord);

impl Driver {
    pub(super) fn restart(&mut self, how: u8) {
        let saved = self.state_file_round_trip();
        let abi = self.core().abi();
        let replay = self.kernel_replay(abi);
        self.restarts += 1;
        let mut config = self.config.clone();
        config.handle_key[0] ^= self.restarts as u8;
        config.handle_key[1] ^= (self.restarts >> 8) as u8;
        // The process ends: its sockets, and so its reservations, close (the old host and
        // its model shell go). An answer set for the next reservation stays set (it may
        // hit the restore).
        let mut host = model_host(config, self.now);
        let old = self.host.ports_mut();
        host.ports_mut().fail_next = std::mem::take(&mut old.fail_next);
        host.ports_mut().force_port = std::mem::take(&mut old.force_port);
        self.host = host;
        self.hand_in_keys();
        // The new process's requests, exchanges and Ready are its own.
        self.requests.clear();
        self.origins.clear();
        self.acked.clear();
        self.ready = 0;
        self.mapinfo_asked.clear();
        self.announced = (0, Vec::new());
        self.recovery_ended = false;

        let previous = Previous {
            mappings: &saved,
            inherited_ports: false,
        };
        let report = self.host.start_after_restart(self.now, previous);
        if report.restored + report.failed + report.skipped != saved.len() {
            fail(format!(
                "restore of {} saved mappings reported {report:?}",
                saved.len()
            ));
        }
        self.pump(Ctx::Input);
        if how % 3 == 2 {
            self.kref.clear();
            self.debt.clear();
            return;
        }
        if abi == IWPM_UABI_VERSION {
            self.kernel_other(&Op::Hello { abi: 4 });
        } else {
            // A kernel without HELLO: the error for it puts the new core in ABI 3 too.
            self.kernel_other(&Op::NlError {
                seq: 0,
                error: 22,
                request: 1,
            });
        }
        let asked = std::mem::take(&mut self.mapinfo_asked);
        for &client in &asked {
            self.replay_to(client, &replay, how % 3 == 0);
        }
        // Mappings of a client the new core did not ask to replay are kept on the state
        // file's word, until a MAPINFO_NUM of that client (which only a kernel that ignores
        // the protocol sends) ends their replay with no record: nothing the kernel was told
        // vouches for them any more.
        for (owner, ep, _) in &replay {
            if !asked.contains(owner) {
                self.kref.remove(ep);
            }
        }
    }

    /// The old core's table, through the bytes of a state file. A file that does not read
    /// back is ignored, as `iwpmd` ignores a corrupt one: nothing is restored, and the
    /// replay alone rebuilds the table.
    fn state_file_round_trip(&self) -> Vec<SavedMapping> {
        let file = StateFile {
            host: "model".into(),
            boot_id: "model-boot".into(),
            mappings: self.core().saved_mappings(),
        };
        // Compared as written: the file keeps no IPv6 flow label, which no mapping needs.
        let bytes = file.encode();
        match StateFile::decode(&bytes) {
            Ok(back) if back.encode() == bytes => back.mappings,
            Ok(back) => fail(format!(
                "the state file read back as {back:?}, not {file:?}"
            )),
            Err(_) => Vec::new(),
        }
    }

    /// What the kernel replays: one record per reference it was told of, with the mapping
    /// it was told (the old core's, which the checks kept equal to it), oldest first.
    fn kernel_replay(&self, abi: u16) -> Vec<Replayed> {
        let mut records = Vec::new();
        let mappings: Vec<_> = self.core().mappings().collect();
        for m in mappings.iter().rev() {
            let refs = self.kref.get(&m.local_endpoint).copied().unwrap_or(0);
            let flags = if m.no_port_map {
                IWPM_FLAGS_NO_PORT_MAP
            } else {
                0
            };
            let rec = MapInfoRecord {
                local_addr: m.local,
                mapped_addr: m.mapped,
                flags: mapping_flags(abi, flags),
                unknown: vec![],
            };
            for _ in 0..refs {
                records.push((m.owner_client, m.local_endpoint, rec.clone()));
            }
        }
        records
    }

    /// Replays `client`'s records (one a datagram), then MAPINFO_NUM if `complete`, and
    /// checks its ACK_NUM: every record the core did not refuse.
    fn replay_to(&mut self, client: u8, replay: &[Replayed], complete: bool) {
        let mut sent = 0u32;
        let mut refused = 0u32;
        for (_, ep, rec) in replay.iter().filter(|(c, _, _)| *c == client) {
            let mut b = Vec::new();
            encode_mapinfo_record(client, rec.clone(), &mut b);
            let errors = self.handle_errs;
            self.kernel_datagram(&b, false);
            sent += 1;
            if self.handle_errs != errors {
                refused += 1;
                if let Some(k) = self.kref.get_mut(ep) {
                    *k = k.saturating_sub(1);
                }
            }
        }
        if !complete {
            return;
        }
        self.last_ack_num = None;
        self.kernel_msg(client, 0, &mapinfo_num(sent), None);
        match self.last_ack_num {
            Some(ack) if ack == sent - refused => {}
            other => fail(format!(
                "MAPINFO_NUM of client {client} after {sent} records, {refused} refused: \
                 ACK_NUM {other:?}"
            )),
        }
    }
}
