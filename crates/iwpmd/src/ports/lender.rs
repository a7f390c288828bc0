//! The daemon's port reservations as the core borrows them ([`PortReservations`], lent
//! by `iwpm_core::Host` for each call), and the log of a reservation refused because the
//! host ran out of a resource: the core only sees an error code, the lender knows the
//! limits and counts to explain it in plain words.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_core::{PortReservations, RateLimit, ReservationId, ReserveError};

use crate::ports::reservations::{Reservations, ReserveFailure};
use crate::process::{self, Limit};

/// Burst of refusal warnings per window.
const WARN_BURST: u32 = 5;
/// Window of refusal warnings.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// The daemon's reservations, owned by the host and lent to the core; a refusal for lack of
/// a resource is counted and explained in the log.
#[derive(Debug)]
pub(crate) struct Ports {
    held: Reservations,
    warn: RateLimit,
    /// Reservations refused for lack of file descriptors (`EMFILE`/`ENFILE`).
    pub(crate) no_fd: u64,
    /// Reservations refused because the ephemeral port range is exhausted.
    pub(crate) no_port: u64,
}

impl Ports {
    /// No reservations yet (the port picker is made now, see [`Reservations::new`]).
    pub(crate) fn new() -> Self {
        Ports {
            held: Reservations::new(),
            warn: RateLimit::new(WARN_WINDOW, WARN_BURST),
            no_fd: 0,
            no_port: 0,
        }
    }

    /// The reservations.
    pub(crate) fn held(&self) -> &Reservations {
        &self.held
    }

    /// The reservations, for what the restart machinery does with them outside the core's
    /// calls (inherited ports, the FD store).
    pub(crate) fn held_mut(&mut self) -> &mut Reservations {
        &mut self.held
    }
}

impl PortReservations for Ports {
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

impl Ports {
    /// Logs, rate-limited and in plain words, a reservation refused for lack of a resource
    /// (descriptors, ephemeral ports); other failures are the core's to report. (The
    /// clock is read here, on this rare path, rather than lent with every call.)
    fn reserve_failed(&mut self, bind: SocketAddr, f: &ReserveFailure) {
        let now = Instant::now();
        let held = iwpm_report::count(self.held.len() as u64, "port", "ports");
        if f.process_out_of_fds() || f.system_out_of_fds() {
            self.no_fd += 1;
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
            self.no_port += 1;
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
