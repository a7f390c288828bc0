//! The outbox: everything the core sends, to the kernel and to peers, leaves here in the
//! core's order. Kernel messages are gathered into one datagram while a burst of requests
//! is read (`outbox/coalesce.rs`) and held while the link is full; peer datagrams the core
//! sent after them wait behind them (see [`Held`]). It also counts the acknowledgements the
//! kernel still owes for what it sent, which with the core's receipt for each datagram read
//! tells the drain when reading the link may stop (see [`Outbox::read_ends`]).
//!
//! The state lives in [`Outbox`]; the sockets, counters and rate limits it sends through
//! are the components' (the kernel link, the peer component, the loop's wait), lent for
//! one call as [`Outlets`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use iwpm_core::{KernelReceipt, PeerSocket, RateLimit};

use crate::io_counters::IoCounters;
use crate::kernel::link::KernelLink;
use crate::peer::Peers;
use crate::send_failure::SendFailure;
use crate::shell::waiter::Waiter;

use self::coalesce::Coalesced;

mod coalesce;

/// Most datagrams held for the kernel link while its socket is full (a Unix-datagram
/// receiver queues only `net.unix.max_dgram_qlen` datagrams); past this, new ones are
/// dropped and counted, so a stalled kernel side cannot grow our memory without bound.
const KERNEL_QUEUE_MAX: usize = 65_536;

/// A datagram held behind a full kernel link.
///
/// Peer datagrams wait behind kernel ones so that they leave in the core's order: on Linux
/// a netlink send to the kernel is processed inside `sendmsg`, so a REMOTE_INFO the core
/// emits before its ACCEPT is in the kernel before the ACCEPT leaves, and the peer's
/// connection cannot overtake it. Only a Unix-datagram kernel link (the emulator) can be
/// full; without this, an ACCEPT would overtake a REMOTE_INFO queued there.
#[derive(Debug)]
enum Held {
    /// A datagram to the kernel and the netlink messages in it.
    Kernel { datagram: Vec<u8>, messages: u64 },
    Peer {
        via: PeerSocket,
        to: SocketAddr,
        datagram: Vec<u8>,
    },
}

/// What the send path sends through, and where it counts and logs: the loop's, lent for
/// one call.
pub(crate) struct Outlets<'a> {
    pub(crate) kernel: &'a KernelLink,
    /// Warnings about the kernel link.
    pub(crate) warn_kernel: &'a mut RateLimit,
    /// The peer sockets and their warnings.
    pub(crate) peers: &'a mut Peers,
    /// Watches the kernel link for room to send while datagrams are held.
    pub(crate) waiter: &'a mut Waiter,
    pub(crate) counters: &'a mut IoCounters,
}

/// The outbox (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Datagrams waiting for the kernel link to become writable, oldest first, with the
    /// peer datagrams the core sent after them (see [`Held`]).
    held: VecDeque<Held>,
    /// Answers of a burst of kernel requests, gathered into one datagram (`coalesce.rs`).
    coalesced: Coalesced,
    /// Messages sent to the kernel whose `NLMSG_DONE` (or `NLMSG_ERROR`) has not been read:
    /// the kernel answers each message it takes with exactly one of them.
    acks_due: u64,
    /// The first send to the kernel that failed since [`Outbox::take_failure`] last took
    /// it (each failure is also counted and logged where it happens). Start-up takes it to
    /// tell whether its HELLO went out; the loop never needs it, so later ones are not kept.
    first_failure: Option<SendFailure>,
}

/// One kernel datagram as the send path sees it, from the core's receipt for it until its
/// answers have been sent ([`Outbox::received`]).
#[derive(Debug)]
pub(crate) struct ReadTurn {
    /// What the core made of the datagram.
    receipt: KernelReceipt,
    /// It acknowledged the last message we sent.
    last_ack: bool,
}

impl Outbox {
    /// Messages sent to the kernel and not yet acknowledged.
    #[cfg(test)]
    pub(crate) fn acks_due(&self) -> u64 {
        self.acks_due
    }

    /// Whether answers are gathered and not sent yet.
    pub(crate) fn has_gathered(&self) -> bool {
        !self.coalesced.is_empty()
    }

    /// The core handled a datagram read from the link (its answers are not sent yet): an
    /// acknowledgement is counted off the ones due.
    pub(crate) fn received(&mut self, receipt: KernelReceipt) -> ReadTurn {
        let mut last_ack = false;
        if receipt.acknowledgement {
            self.acks_due = self.acks_due.saturating_sub(1);
            last_ack = self.acks_due == 0;
        }
        ReadTurn { receipt, last_ack }
    }

    /// Whether reading the link stops after `turn`, whose actions have been sent.
    ///
    /// Reading stops early after a kernel request that we did not answer (REMOVE_MAPPING):
    /// it came alone, and one more read would only find the link empty. After an answer
    /// the kernel's NLMSG_DONE for it, and often its next request, are already queued
    /// (the kernel handles our send inside `sendmsg`), so reading goes on, and answers to
    /// any further request of this wake-up are gathered: requests are arriving in a burst.
    /// Reading stops too once the DONE of the last message we sent is read: a lone
    /// request's exchange is over, and the level-triggered wait finds whatever else comes,
    /// without a read that would find the link empty. (Should the count be wrong, e.g.
    /// after an overrun, that only costs a read or a wait more, never a message.)
    pub(crate) fn read_ends(&mut self, turn: ReadTurn) -> bool {
        let ReadTurn { receipt, last_ack } = turn;
        let exchange_over = last_ack && receipt.answers == 0 && self.coalesced.is_empty();
        if exchange_over || receipt.unanswered_request() {
            return true;
        }
        if !receipt.acknowledgement {
            self.coalesced.set_gathering(true);
        }
        false
    }

    /// The batch of reads is over: gathering stops and what was gathered is sent.
    pub(crate) fn end_burst(&mut self, out: &mut Outlets<'_>) {
        self.coalesced.set_gathering(false);
        self.flush_coalesced(out);
    }

    /// Sends one message to the kernel, in order: gathered while a burst is read, else
    /// at once (see [`Outbox::send_datagram`]).
    pub(crate) fn send_kernel(&mut self, out: &mut Outlets<'_>, bytes: &[u8]) {
        if !self.coalesced.is_gathering() {
            self.send_datagram(out, bytes, 1);
            return;
        }
        if !self.coalesced.fits(bytes.len()) {
            self.flush_coalesced(out);
        }
        self.coalesced.push(bytes);
    }

    /// Sends the gathered answers, if any, as one datagram.
    pub(crate) fn flush_coalesced(&mut self, out: &mut Outlets<'_>) {
        if let Some((datagram, messages)) = self.coalesced.take() {
            self.send_datagram(out, &datagram, messages);
            self.coalesced.recycle(datagram);
        }
    }

    /// Sends one datagram of `messages` netlink messages to the kernel, in order: behind
    /// any held ones, and held itself when the link is full (`EAGAIN`), never silently
    /// dropped while there is room. The counters count messages.
    fn send_datagram(&mut self, out: &mut Outlets<'_>, bytes: &[u8], messages: u64) {
        if self.held.is_empty() {
            match out.kernel.send(bytes) {
                Ok(()) => {
                    out.counters.kernel_tx += messages;
                    self.acks_due += messages;
                    return;
                }
                Err(e) if e.is_would_block() => {}
                Err(e) => {
                    self.failed(out, bytes.len(), messages, e);
                    return;
                }
            }
        }
        if self.held.len() >= KERNEL_QUEUE_MAX {
            let e = SendFailure::QueueFull(KERNEL_QUEUE_MAX);
            self.failed(out, bytes.len(), messages, e);
            return;
        }
        out.counters.kernel_tx_queued += messages;
        self.held.push_back(Held::Kernel {
            datagram: bytes.to_vec(),
            messages,
        });
        out.watch_kernel_writable(true);
    }

    /// A kernel send of `messages` messages failed: counted and logged, and kept if it is
    /// the first since [`Outbox::take_failure`].
    fn failed(&mut self, out: &mut Outlets<'_>, len: usize, messages: u64, e: SendFailure) {
        out.kernel_send_failed(len, messages, &e);
        self.first_failure.get_or_insert(e);
    }

    /// The first kernel send that failed since the last call, if any.
    pub(crate) fn take_failure(&mut self) -> Option<SendFailure> {
        self.first_failure.take()
    }

    /// Sends held datagrams, in order, until the kernel link is full again or nothing is
    /// held.
    pub(crate) fn flush_held(&mut self, out: &mut Outlets<'_>) {
        while let Some(held) = self.held.pop_front() {
            match held {
                Held::Kernel { datagram, messages } => match out.kernel.send(&datagram) {
                    Ok(()) => {
                        out.counters.kernel_tx += messages;
                        self.acks_due += messages;
                    }
                    Err(e) if e.is_would_block() => {
                        self.held.push_front(Held::Kernel { datagram, messages });
                        return;
                    }
                    Err(e) => self.failed(out, datagram.len(), messages, e),
                },
                Held::Peer { via, to, datagram } => {
                    out.send_peer_now(Instant::now(), via, to, &datagram);
                }
            }
        }
        out.watch_kernel_writable(false);
    }

    /// Sends a peer datagram after what the kernel must know before the peer acts on it:
    /// the gathered answers go first, and it is held behind kernel datagrams still waiting
    /// (see [`Held`]).
    pub(crate) fn send_peer(
        &mut self,
        out: &mut Outlets<'_>,
        now: Instant,
        via: PeerSocket,
        to: SocketAddr,
        datagram: &[u8],
    ) {
        self.flush_coalesced(out);
        if self.held.is_empty() {
            out.send_peer_now(now, via, to, datagram);
        } else if self.held.len() >= KERNEL_QUEUE_MAX {
            // Dropping is safe: the core retransmits REQUEST/ACCEPT on its timer.
            out.counters.peer_tx_dropped += 1;
        } else {
            self.held.push_back(Held::Peer {
                via,
                to,
                datagram: datagram.to_vec(),
            });
        }
    }
}

impl Outlets<'_> {
    /// Whether the next wait also watches the kernel link for room to send.
    fn watch_kernel_writable(&mut self, want: bool) {
        if let Err(e) = self.waiter.watch_kernel_writable(self.kernel, want) {
            // Not expected (the link stays registered); without it, held datagrams would
            // wait for the next wake-up, so say so.
            if let Some(suppressed) = self.warn_kernel.allow(Instant::now()) {
                tracing::warn!(error = %e, suppressed, "cannot watch the kernel link for room to send");
            }
        }
    }

    fn kernel_send_failed(&mut self, len: usize, messages: u64, e: &SendFailure) {
        self.counters.kernel_tx_errors += messages;
        if let Some(suppressed) = self.warn_kernel.allow(Instant::now()) {
            tracing::warn!(
                link = self.kernel.kind_name(),
                len,
                messages,
                error = %e,
                suppressed,
                "cannot send to the kernel"
            );
        }
    }

    fn send_peer_now(&mut self, now: Instant, via: PeerSocket, to: SocketAddr, datagram: &[u8]) {
        self.peers.send_now(self.counters, now, via, to, datagram);
    }
}
