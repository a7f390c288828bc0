//! Zero-gap restart through systemd's file descriptor store: every reserved TCP socket is
//! handed to the service manager (`FDSTORE=1`) under a name made of its bound address, and
//! taken out again (`FDSTOREREMOVE=1`) when its mapping is freed. After a restart the next
//! daemon gets them back in `LISTEN_FDS`, so a mapped port is never unbound in between, and
//! mappings beyond the kernel's replay limit keep their ports.
//!
//! One message per socket, on purpose: systemd removes stored descriptors only by name, so
//! freeing one port needs a name no other socket shares; batching several descriptors under
//! one name would force re-sending the whole batch for every free. The cost is one
//! `sendmsg` per mapping created or freed, the same order as the `bind`/`close` it follows;
//! the messages are sent after each input, never inside the core's call.

use std::net::SocketAddr;
use std::time::Instant;

use crate::rate_limit::RateLimit;
use crate::reservations::{PortChange, Reservations};
use crate::systemd::{borrow, Notifier};

/// `FDNAME` of a reserved TCP socket: `tcp-<ip>-<port>` (an IPv6 address with `_` for `:`,
/// which names may not contain). Unique per port and family, and stable across restarts.
pub fn tcp_fd_name(addr: SocketAddr) -> String {
    let name = format!(
        "tcp-{}-{}",
        addr.ip().to_string().replace(':', "_"),
        addr.port()
    );
    debug_assert!(crate::systemd::valid_fd_name(&name), "{name}");
    name
}

/// The FD-store side of the reservations.
#[derive(Debug)]
pub struct FdStore {
    /// Most descriptors the manager keeps for us (`FDSTORE`, `FileDescriptorStoreMax=`).
    max: usize,
    /// Descriptors we believe the manager holds.
    stored: usize,
    /// Messages sent and failed (for the dump).
    pub sent: u64,
    /// Messages that could not be sent.
    pub failed: u64,
    warn: RateLimit,
}

impl FdStore {
    /// A store the manager keeps up to `max` descriptors in, `inherited` of which it holds
    /// already (passed back to us at start).
    pub fn new(max: usize, inherited: usize, warn: RateLimit) -> Self {
        FdStore {
            max,
            stored: inherited,
            sent: 0,
            failed: 0,
            warn,
        }
    }

    /// Sends the journaled changes of `held` to the manager.
    pub fn sync(&mut self, now: Instant, notifier: &Notifier, held: &mut Reservations) {
        for change in held.take_changes() {
            let result = match change {
                PortChange::Bound(id) => {
                    let Some(sock) = held.socket(id) else {
                        continue;
                    };
                    let Some(addr) = crate::reservations::bound_addr(sock) else {
                        continue;
                    };
                    if self.stored >= self.max {
                        self.failed += 1;
                        if let Some(suppressed) = self.warn.allow(now) {
                            tracing::warn!(
                                max = self.max,
                                suppressed,
                                "FD store full (FileDescriptorStoreMax): port {addr} is not \
                                 kept across a restart"
                            );
                        }
                        continue;
                    }
                    self.stored += 1;
                    notifier.store_fd(&tcp_fd_name(addr), borrow(sock))
                }
                PortChange::Closed(addr) => {
                    self.stored = self.stored.saturating_sub(1);
                    notifier.remove_fd(&tcp_fd_name(addr))
                }
            };
            match result {
                Ok(()) => self.sent += 1,
                Err(e) => {
                    self.failed += 1;
                    if let Some(suppressed) = self.warn.allow(now) {
                        tracing::warn!(error = %e, suppressed, "FD store message failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_and_distinct() {
        let v4 = tcp_fd_name("0.0.0.0:40001".parse().unwrap());
        let v6 = tcp_fd_name("[::]:40001".parse().unwrap());
        assert_eq!(v4, "tcp-0.0.0.0-40001");
        assert_eq!(v6, "tcp-__-40001");
        assert!(crate::systemd::valid_fd_name(&v4) && crate::systemd::valid_fd_name(&v6));
    }
}
