//! Completion of port reservations: the shell's answer to [`crate::Action::Reserve`] turns a
//! pending ADD, QUERY or MAPINFO record into a mapping, or into CREATE_MAPPING_ERR.
//!
//! Every granted port is either owned by a mapping (released when its last reference goes)
//! or released at once: when the answer came too late for the kernel, when the shell
//! returned port 0, or when a recovery got another port than the recorded one. A refused
//! reservation holds nothing, so nothing is released (C leaks the socket there).

use std::time::Instant;

use iwpm_proto::sockaddr::{Endpoint, SockAddrStorage};

use crate::action::{ReservationId, ReserveError};
use crate::core::{code, Core, Pending, Purpose};
use crate::ratelimit::LogKind;
use crate::table::{Mapping, MappingId, MappingRole};

/// How a reservation answer turned out.
enum Taken {
    Port(u16),
    /// Failed (already counted and logged).
    Failed,
    /// Too late to answer the kernel (already counted; port released).
    Late,
}

impl Core {
    /// Dispatches the shell's answer to the pending reservation.
    pub(crate) fn complete_reservation(
        &mut self,
        now: Instant,
        p: Pending,
        result: Result<u16, ReserveError>,
    ) {
        match p.purpose {
            Purpose::Add {
                client,
                seq,
                received,
                local,
                local_ep,
            } => match self.take_port(now, p.id, result, None, Some(received)) {
                Taken::Port(port) => {
                    let granted = (local, local_ep, port, p.id);
                    let id = self.map_to_granted_port(now, client, granted, MappingRole::Listener);
                    self.reply_add(client, seq, local, id);
                }
                Taken::Failed => self.send_handle_err(client, seq, code::CREATE),
                Taken::Late => {}
            },
            Purpose::Query {
                client,
                seq,
                received,
                local,
                local_ep,
                remote,
                remote_sa,
            } => match self.take_port(now, p.id, result, None, Some(received)) {
                Taken::Port(port) => {
                    let granted = (local, local_ep, port, p.id);
                    let id = self.map_to_granted_port(now, client, granted, MappingRole::Connector);
                    self.start_query_exchange(
                        now, received, client, seq, id, local, remote, remote_sa,
                    );
                }
                Taken::Failed => self.send_handle_err(client, seq, code::CREATE),
                Taken::Late => {}
            },
            Purpose::Recover {
                client,
                seq,
                local,
                local_ep,
                mapped,
                mapped_ep,
            } => match self.take_port(now, p.id, result, Some(mapped_ep.port), None) {
                Taken::Port(_) => {
                    self.new_mapping(
                        now,
                        client,
                        (local, local_ep),
                        (mapped, mapped_ep),
                        Some(p.id),
                        MappingRole::Recovered,
                    );
                    self.accept_record(client);
                }
                Taken::Failed | Taken::Late => self.send_handle_err(client, seq, code::CREATE),
            },
        }
    }

    fn take_port(
        &mut self,
        now: Instant,
        id: ReservationId,
        result: Result<u16, ReserveError>,
        expected: Option<u16>,
        received: Option<Instant>,
    ) -> Taken {
        let late = received
            .is_some_and(|r| now.saturating_duration_since(r) >= self.config.reply_deadline);
        match result {
            Ok(port) if late => {
                self.release(id);
                self.stats.replies_dropped_late += 1;
                self.warn(
                    now,
                    LogKind::LateReply,
                    format_args!("port {port} reserved too late for the kernel; released"),
                );
                Taken::Late
            }
            Err(_) if late => {
                self.stats.reservations_failed += 1;
                self.stats.replies_dropped_late += 1;
                Taken::Late
            }
            Ok(port) if port == 0 || expected.is_some_and(|p| p != port) => {
                self.release(id);
                self.stats.reservations_failed += 1;
                self.warn(
                    now,
                    LogKind::MappingFailed,
                    format_args!("reservation got port {port}, wanted {expected:?}; released"),
                );
                Taken::Failed
            }
            Ok(port) => Taken::Port(port),
            Err(e) => {
                self.stats.reservations_failed += 1;
                self.warn(
                    now,
                    LogKind::MappingFailed,
                    format_args!("unable to reserve a TCP port: {e}"),
                );
                Taken::Failed
            }
        }
    }

    /// Inserts a mapping with one reference; `local` and `mapped` are each the address as
    /// the kernel sent it and its endpoint.
    pub(crate) fn new_mapping(
        &mut self,
        now: Instant,
        owner: u8,
        (local, local_ep): (SockAddrStorage, Endpoint),
        (mapped, mapped_ep): (SockAddrStorage, Endpoint),
        reservation: Option<ReservationId>,
        role: MappingRole,
    ) -> MappingId {
        self.insert_mapping(Mapping {
            local,
            local_ep,
            mapped,
            mapped_ep,
            owner,
            refcount: 1,
            no_port_map: reservation.is_none(),
            role,
            reservation,
            created_at: now,
        })
    }

    pub(crate) fn add_ref(&mut self, id: MappingId) {
        if let Some(m) = self.table.get_mut(id) {
            m.refcount = m.refcount.saturating_add(1);
        }
    }
}

impl Core {
    /// Creates the mapping for a granted reservation: the local address with only the port
    /// replaced (IP addresses are never changed).
    fn map_to_granted_port(
        &mut self,
        now: Instant,
        client: u8,
        (local, local_ep, port, reservation): (SockAddrStorage, Endpoint, u16, ReservationId),
        role: MappingRole,
    ) -> MappingId {
        let mapped_ep = Endpoint {
            ip: local_ep.ip,
            port,
        };
        let mapped = local.with_port(port);
        self.new_mapping(
            now,
            client,
            (local, local_ep),
            (mapped, mapped_ep),
            Some(reservation),
            role,
        )
    }
}
