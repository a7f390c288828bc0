//! Mapping creation: a new mapping either holds a TCP port reserved through the shell's
//! [`PortReservations`] (released when its last reference goes) or, for NO_PORT_MAP, maps
//! the local address to itself.
//!
//! Every granted port is either owned by a mapping or released at once: when the shell
//! returned port 0, or when a recovery got another port than the recorded one. A refused
//! reservation holds nothing, so nothing is released (C leaks the socket there).

use std::time::Instant;

use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;

use super::Core;
use crate::action::{PortReservations, ReservationId};
use crate::mapping_id::MappingId;
use crate::ratelimit::LogKind;
use crate::request::Addr;
use crate::table::{Mapping, MappingRole};

impl Core {
    /// Reserves a port for `local` (any port, or exactly `recorded` on restart recovery).
    /// `None` when the shell refused, or granted port 0 or another port than `recorded`
    /// (released again); the failure is counted and logged.
    pub(super) fn reserve(
        &mut self,
        now: Instant,
        ports: &mut dyn PortReservations,
        local: &Addr,
        recorded: Option<u16>,
    ) -> Option<(ReservationId, u16)> {
        self.stats.reservations_requested += 1;
        let result = ports.reserve(local.wildcard_with_port(recorded.unwrap_or(0)));
        match result {
            Ok((id, port)) if port == 0 || recorded.is_some_and(|p| p != port) => {
                self.release(ports, id);
                self.count_warn(
                    now,
                    |s| &mut s.reservations_failed,
                    LogKind::MappingFailed,
                    format_args!("reservation got port {port}, wanted {recorded:?}; released"),
                );
                None
            }
            Ok(granted) => Some(granted),
            Err(e) => {
                self.count_warn(
                    now,
                    |s| &mut s.reservations_failed,
                    LogKind::MappingFailed,
                    format_args!("unable to reserve a TCP port: {e}"),
                );
                None
            }
        }
    }

    /// Closes a reservation the shell granted.
    pub(super) fn release(&mut self, ports: &mut dyn PortReservations, id: ReservationId) {
        self.stats.reservations_released += 1;
        ports.release(id);
    }

    /// Maps a new local address for ADD or QUERY: to a freshly reserved port with the IP
    /// unchanged, or to itself for NO_PORT_MAP. `None` (answered with CREATE_MAPPING_ERR by
    /// the caller) if the table is full or no port could be reserved.
    pub(super) fn map_local(
        &mut self,
        now: Instant,
        owner: u8,
        local: Addr,
        flags: u32,
        role: MappingRole,
        ports: &mut dyn PortReservations,
    ) -> Option<MappingId> {
        if self.mappings_full(now) {
            return None;
        }
        let (reservation, port) = if flags & IWPM_FLAGS_NO_PORT_MAP != 0 {
            (None, local.ep.port)
        } else {
            let (mut reservation, mut port) = self.reserve(now, ports, &local, None)?;
            // A mapped port equal to the local one makes the mapping look unmapped to the
            // peer (its REQUEST then asks for no REMOTE_INFO) and to anyone reading a dump;
            // one more draw almost never repeats it (the first is released after it).
            if port == local.ep.port {
                if let Some((other, other_port)) = self.reserve(now, ports, &local, None) {
                    self.release(ports, reservation);
                    (reservation, port) = (other, other_port);
                }
            }
            (Some(reservation), port)
        };
        Some(self.insert_mapping(Mapping::new_local(
            &local.raw,
            port,
            owner,
            role,
            reservation,
            now,
        )))
    }

    /// Inserts a mapping with one reference.
    pub(super) fn new_mapping(
        &mut self,
        now: Instant,
        owner: u8,
        local: Addr,
        mapped: Addr,
        reservation: Option<ReservationId>,
        role: MappingRole,
    ) -> MappingId {
        self.insert_mapping(Mapping::new(
            &local.raw,
            &mapped.raw,
            owner,
            role,
            reservation,
            now,
        ))
    }

    pub(super) fn add_ref(&mut self, id: MappingId) {
        if let Some(m) = self.table.get_mut(id) {
            m.refcount = m.refcount.saturating_add(1);
            self.generation += 1;
        }
    }
}
