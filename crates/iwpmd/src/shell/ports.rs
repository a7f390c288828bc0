//! The daemon's port reservations as lent to the core for one call, and the log of a
//! reservation refused because the host ran out of a resource: the core only sees an
//! error code, the shell knows the limits and counts to explain it in plain words.

use std::net::SocketAddr;
use std::time::Instant;

use iwpm_core::{PortReservations, RateLimit, ReservationId, ReserveError};

use crate::io_counters::IoCounters;
use crate::ports::reservations::{Reservations, ReserveFailure};
use crate::process::{self, Limit};

/// The daemon's reservations as the core sees them during one call; a refusal for lack of
/// a resource is explained in the log with the shell's own counters.
pub(super) struct LentPorts<'a> {
    held: &'a mut Reservations,
    counters: &'a mut IoCounters,
    warn: &'a mut RateLimit,
    now: Instant,
}

impl<'a> LentPorts<'a> {
    /// Lends `held` for a call made at `now`; refusals are counted in `counters` and logged
    /// within `warn`'s limit.
    pub(super) fn new(
        held: &'a mut Reservations,
        counters: &'a mut IoCounters,
        warn: &'a mut RateLimit,
        now: Instant,
    ) -> Self {
        LentPorts {
            held,
            counters,
            warn,
            now,
        }
    }
}

impl PortReservations for LentPorts<'_> {
    fn reserve(&mut self, bind: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
        self.held.reserve(bind).map_err(|f| {
            self.reserve_failed(bind, &f);
            f.error
        })
    }

    fn release(&mut self, id: ReservationId) {
        if !self.held.release(id) {
            tracing::debug!(id = id.0, "release of an unknown reservation");
        }
    }
}

impl LentPorts<'_> {
    /// Logs, rate-limited and in plain words, a reservation refused for lack of a resource
    /// (descriptors, ephemeral ports); other failures are the core's to report.
    fn reserve_failed(&mut self, bind: SocketAddr, f: &ReserveFailure) {
        let now = self.now;
        let held = iwpm_control::render::count(self.held.len() as u64, "port", "ports");
        if f.process_out_of_fds() || f.system_out_of_fds() {
            self.counters.reserve_no_fd += 1;
            if let Some(suppressed) = self.warn.allow(now) {
                let (soft, hard) = process::fd_limit_now();
                // Listing /proc/self/fd itself needs a descriptor; at EMFILE it fails.
                let open = std::fs::read_dir("/proc/self/fd")
                    .map(|d| format!("{} open, ", d.count()))
                    .unwrap_or_default();
                if f.process_out_of_fds() {
                    tracing::warn!(
                        suppressed,
                        "out of file descriptors: the daemon has reached its RLIMIT_NOFILE \
                         limit of {} (hard {}; {open}{held} held for mappings), \
                         so a new mapping cannot hold its port; the kernel gets \
                         CREATE_MAPPING_ERR for it. Mappings work again as others are \
                         removed; raise LimitNOFILE or `ulimit -n` for more.",
                        Limit(soft),
                        Limit(hard)
                    );
                } else {
                    tracing::warn!(
                        suppressed,
                        "out of file descriptors: the system-wide file table is full \
                         (ENFILE, limit fs.file-max; the daemon has {open}{held} \
                         held), so a new mapping cannot hold its port; the kernel gets \
                         CREATE_MAPPING_ERR for it"
                    );
                }
            }
        } else if f.out_of_ephemeral_ports(bind) {
            self.counters.reserve_no_port += 1;
            if let Some(suppressed) = self.warn.allow(now) {
                let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                    .map(|r| r.split_whitespace().collect::<Vec<_>>().join("-"))
                    .unwrap_or_else(|_| "?".into());
                tracing::warn!(
                    suppressed,
                    "out of ports: no free port left for {} in net.ipv4.ip_local_port_range \
                     ({range}; {held} held for mappings); the kernel gets \
                     CREATE_MAPPING_ERR for the new mapping",
                    bind.ip()
                );
            }
        } else {
            tracing::debug!(%bind, error = %f, "port reservation failed");
        }
    }
}
