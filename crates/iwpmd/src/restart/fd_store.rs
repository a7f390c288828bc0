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

use crate::ports::reservations::{PortChange, Reservations};
use crate::restart::systemd::{self, borrow, Notifier};
use iwpm_core::RateLimit;

/// Most bytes of `LISTEN_FDNAMES` the next start may be given: the kernel refuses an
/// `execve` whose single environment string exceeds `MAX_ARG_STRLEN` (32 pages, 128 KiB),
/// so the service manager could not start us again with more. Kept below it with room for
/// the variable's name.
pub(super) const NAME_BUDGET: usize = 128 * 1024 - 1024;

/// `FDNAME` of a reserved TCP socket, as short as it can be because every name goes into
/// one environment variable at the next start (see [`NAME_BUDGET`]): the port alone for
/// the IPv4 wildcard (`40001`), `6_` and the port for the IPv6 wildcard, else
/// `tcp-<ip>-<port>` with `_` for the `:` names may not contain. Unique per bound address
/// and stable across restarts; at start the socket's address is read back with
/// `getsockname`, the name only identifies it for removal.
pub(super) fn tcp_fd_name(addr: SocketAddr) -> String {
    let port = addr.port();
    let name = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => port.to_string(),
        ip if ip.is_unspecified() => format!("6_{port}"),
        ip => format!("tcp-{}-{port}", ip.to_string().replace(':', "_")),
    };
    debug_assert!(systemd::valid_fd_name(&name), "{name}");
    name
}

/// The FD-store side of the reservations.
#[derive(Debug)]
pub(super) struct FdStore {
    /// Most descriptors the manager keeps for us (`FDSTORE`, `FileDescriptorStoreMax=`).
    max: usize,
    /// Descriptors we believe the manager holds.
    stored: usize,
    /// Bytes their names take in `LISTEN_FDNAMES` (name and separator).
    name_bytes: usize,
    /// Messages sent and failed (for the dump).
    pub(crate) sent: u64,
    /// Messages that could not be sent.
    pub(crate) failed: u64,
    warn: RateLimit,
}

impl FdStore {
    /// A store the manager keeps up to `max` descriptors in, holding already the ones
    /// named `inherited` (passed back to us at start).
    pub(super) fn new(max: usize, inherited: &[String], warn: RateLimit) -> Self {
        FdStore {
            max,
            stored: inherited.len(),
            name_bytes: inherited.iter().map(|n| n.len() + 1).sum(),
            sent: 0,
            failed: 0,
            warn,
        }
    }

    /// Sends the journaled changes of `held` to the manager.
    pub(super) fn sync(&mut self, now: Instant, notifier: &Notifier, held: &mut Reservations) {
        for change in held.take_changes() {
            let result = match change {
                PortChange::Bound(id) => {
                    let Some((sock, addr)) = held.bound(id) else {
                        continue;
                    };
                    let name = tcp_fd_name(addr);
                    if self.stored >= self.max || self.name_bytes + name.len() + 1 > NAME_BUDGET {
                        self.failed += 1;
                        if let Some(suppressed) = self.warn.allow(now) {
                            tracing::warn!(
                                max = self.max,
                                stored = self.stored,
                                suppressed,
                                "FD store full (FileDescriptorStoreMax, or the 128 KiB of \
                                 LISTEN_FDNAMES): port {addr} is not kept across a restart \
                                 (the state file binds it again at once)"
                            );
                        }
                        continue;
                    }
                    self.stored += 1;
                    self.name_bytes += name.len() + 1;
                    notifier.store_fd(&name, borrow(sock))
                }
                PortChange::Closed(addr) => {
                    let name = tcp_fd_name(addr);
                    self.stored = self.stored.saturating_sub(1);
                    self.name_bytes = self.name_bytes.saturating_sub(name.len() + 1);
                    notifier.remove_fd(&name)
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
        let other = tcp_fd_name("[fe80::1]:7".parse().unwrap());
        assert_eq!(v4, "40001");
        assert_eq!(v6, "6_40001");
        assert_eq!(other, "tcp-fe80__1-7");
        for n in [v4, v6, other] {
            assert!(crate::restart::systemd::valid_fd_name(&n), "{n}");
        }
        // Every IPv4 wildcard port fits the budget up to about 21 000 ports.
        const { assert!(NAME_BUDGET / 6 > 21_000) };
    }
}
