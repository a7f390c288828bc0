//! Reading the kernel link and the peer sockets, a batch at a time. Each datagram goes to
//! the core and its actions are executed at once; the restart machinery sees the changes
//! once per batch. A budget per source keeps a flood on one socket (UDP 3935 is open to
//! anyone) from starving the others. When reading the kernel link may stop is the send
//! outbox's to say (`outbox.rs`), from the core's receipt for the datagram and what the
//! kernel still owes us.

use std::io;
use std::time::Instant;

use iwpm_core::PeerSocket;

use crate::kernel::link::{Received, NETLINK_DONE_TRUESIZE, NETLINK_RCVBUF_MIN};
use crate::peer::sockets::ALL as ALL_PEER;

use super::Shell;

/// Datagrams read from one source before the others get a turn.
pub(super) const DRAIN_BUDGET: usize = 64;

// The netlink receive buffer floor covers three rounds of replies (see its docs): every
// datagram read in one round may be answered, and each answer comes back as an NLMSG_DONE.
const _: () = assert!(
    2 * NETLINK_RCVBUF_MIN >= 3 * DRAIN_BUDGET * (1 + ALL_PEER.len()) * NETLINK_DONE_TRUESIZE
);

impl Shell {
    /// Reads up to [`DRAIN_BUDGET`] kernel datagrams. The link is waited on
    /// level-triggered, so whatever is left is found by the next wait. Answers after the
    /// first are gathered into one datagram (see `outbox/coalesce.rs`), sent before this
    /// returns.
    pub(super) fn drain_kernel(&mut self) {
        let mut handled = None;
        self.drain_kernel_batch(&mut handled);
        let (outbox, mut out) = self.outbox();
        outbox.end_burst(&mut out);
        if let Some(now) = handled {
            self.after_batch(now);
        }
    }

    /// The datagrams of [`Shell::drain_kernel`]; `handled` is set to the time of the last
    /// one handled.
    ///
    /// Reading stops early when the send path says the exchange is over
    /// ([`crate::outbox::Outbox::read_ends`]). When the link is empty with answers
    /// gathered, they are sent and reading goes on: the kernel's DONE for them, and often
    /// its next request, are then already queued.
    fn drain_kernel_batch(&mut self, handled: &mut Option<Instant>) {
        for _ in 0..DRAIN_BUDGET {
            let now = Instant::now();
            let turn = match self.kernel.link.recv() {
                Ok(Received::Empty) if !self.outbox.has_gathered() => return,
                Ok(Received::Empty) => {
                    let (outbox, mut out) = self.outbox();
                    outbox.flush_coalesced(&mut out);
                    continue;
                }
                Ok(Received::Kernel { data, full_len }) => {
                    self.counters.kernel_rx += 1;
                    if full_len > data.len() {
                        self.counters.kernel_truncated += 1;
                        if let Some(suppressed) = self.kernel.warn.allow(now) {
                            tracing::warn!(
                                len = full_len,
                                kept = data.len(),
                                suppressed,
                                "kernel datagram truncated; messages past the cut are lost"
                            );
                        }
                    }
                    let receipt = self.host.handle_kernel_datagram(now, data);
                    Some(self.outbox.received(receipt))
                }
                Ok(Received::Foreign { port_id, len }) => {
                    self.counters.kernel_foreign += 1;
                    if let Some(suppressed) = self.kernel.warn.allow(now) {
                        tracing::warn!(
                            sender = port_id,
                            len,
                            suppressed,
                            "dropped a netlink datagram not sent by the kernel"
                        );
                    }
                    continue;
                }
                Ok(Received::Overrun) => {
                    self.kernel_overrun(now);
                    None
                }
                Err(e) => {
                    if let Some(suppressed) = self.kernel.warn.allow(now) {
                        tracing::warn!(error = %e, suppressed, "kernel link receive failed");
                    }
                    return;
                }
            };
            self.send_actions(now);
            *handled = Some(now);
            if turn.is_some_and(|turn| self.outbox.read_ends(turn)) {
                return;
            }
        }
    }

    /// Reads up to [`DRAIN_BUDGET`] datagrams from one peer socket; true if it may hold
    /// more.
    pub(super) fn drain_peer(&mut self, which: PeerSocket) -> bool {
        let mut handled = None;
        let more = self.drain_peer_batch(which, &mut handled);
        if let Some(now) = handled {
            self.after_batch(now);
        }
        more
    }

    /// The datagrams of [`Shell::drain_peer`]; `handled` as for the kernel.
    fn drain_peer_batch(&mut self, which: PeerSocket, handled: &mut Option<Instant>) -> bool {
        for _ in 0..DRAIN_BUDGET {
            let now = Instant::now();
            let Some(sock) = self.peers.sockets.get(which) else {
                return false;
            };
            let (len, from) = match sock.recv_from(&mut self.peers.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                // An ICMP error for an earlier send; the next read continues normally.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if let Some(suppressed) = self.peers.warn.allow(now) {
                        tracing::warn!(socket = ?which, error = %e, suppressed, "UDP receive failed");
                    }
                    return false;
                }
            };
            self.counters.peer_rx += 1;
            self.host
                .handle_peer_datagram(now, which, from, &self.peers.buf[..len]);
            self.send_actions(now);
            *handled = Some(now);
        }
        true
    }

    /// `ENOBUFS` on the kernel link: the kernel dropped messages for us. What matters is the
    /// REG_PID multicast: losing it makes the kernel mark the daemon unavailable (every
    /// connection then runs unmapped), so the core announces us to the kernel again.
    pub(super) fn kernel_overrun(&mut self, now: Instant) {
        self.counters.kernel_overruns += 1;
        if let Some(suppressed) = self.kernel.warn.allow(now) {
            let rcvbuf = self
                .kernel
                .link
                .receive_buffer()
                .and_then(|r| r.granted)
                .map_or_else(|| "the default".to_owned(), |b| format!("{b} bytes"));
            tracing::warn!(
                suppressed,
                overruns = self.counters.kernel_overruns,
                "netlink receive queue overrun (ENOBUFS) with a receive buffer of {rcvbuf}; \
                 raise nl_sock_rbuf_size if this repeats"
            );
        }
        self.host.handle_kernel_overrun(now);
        self.flush(now);
    }
}
