//! Replies to the kernel gathered into one datagram while a burst of requests is read.
//!
//! When several kernel requests wait at once (many `rdma_listen` or connects in flight),
//! each answer used to be its own `sendmsg`. The kernel's RDMA netlink input walks every
//! message of a datagram in order and goes on after one that fails (`rdma_nl_rcv_skb`),
//! and so does the emulator, so the answers of one burst can leave in one system call; on
//! the emulated link that is also one wake-up of its thread instead of one per answer.
//!
//! The first answer of a wake-up still leaves at once: a lone request (the rig's
//! one-at-a-time listen storm) is answered with no added latency and no extra read. The
//! shell sends what was gathered when the link is empty, before anything goes to a peer
//! (a REMOTE_INFO must reach the kernel before the ACCEPT that lets the peer connect), and
//! at the end of every batch, so nothing waits for a later event.

/// Largest datagram gathered: about 50 mapping replies. Far below the kernel's and the
/// emulator's socket buffers, so one datagram never fails for its size alone.
pub(super) const COALESCE_MAX: usize = 16 * 1024;

/// Netlink messages are laid end to end on 4-byte boundaries (`NLMSG_ALIGN`).
const NLMSG_ALIGNTO: usize = 4;

/// Messages gathered for one datagram to the kernel.
#[derive(Debug, Default)]
pub(super) struct Coalesced {
    buf: Vec<u8>,
    messages: u64,
    /// Messages go into the buffer (instead of out at once) only while this is set.
    gathering: bool,
}

impl Coalesced {
    /// Starts or stops gathering. Stopping does not empty the buffer: take it first.
    pub(super) fn set_gathering(&mut self, on: bool) {
        self.gathering = on;
    }

    /// Whether a message sent now should be gathered.
    pub(super) fn is_gathering(&self) -> bool {
        self.gathering
    }

    /// Whether `len` more bytes fit behind what is gathered.
    pub(super) fn fits(&self, len: usize) -> bool {
        self.buf.len().next_multiple_of(NLMSG_ALIGNTO) + len <= COALESCE_MAX
    }

    /// Appends one whole netlink message, padded to the next 4-byte boundary first.
    pub(super) fn push(&mut self, message: &[u8]) {
        let aligned = self.buf.len().next_multiple_of(NLMSG_ALIGNTO);
        self.buf.resize(aligned, 0);
        self.buf.extend_from_slice(message);
        self.messages += 1;
    }

    /// Messages gathered and not yet taken.
    #[cfg(test)]
    pub(super) fn messages(&self) -> u64 {
        self.messages
    }

    /// Whether nothing is gathered.
    pub(super) fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// The gathered datagram and its message count, or `None` when empty. Hand the
    /// datagram back with [`Coalesced::recycle`] to keep its memory for the next burst.
    pub(super) fn take(&mut self) -> Option<(Vec<u8>, u64)> {
        if self.messages == 0 {
            return None;
        }
        let messages = std::mem::take(&mut self.messages);
        Some((std::mem::take(&mut self.buf), messages))
    }

    /// Keeps the memory of a datagram returned by [`Coalesced::take`].
    pub(super) fn recycle(&mut self, mut datagram: Vec<u8>) {
        if self.buf.is_empty() {
            datagram.clear();
            self.buf = datagram;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_laid_on_four_byte_boundaries() {
        let mut c = Coalesced::default();
        assert!(c.take().is_none());
        c.push(&[1, 2, 3, 4, 5, 6]);
        c.push(&[7; 4]);
        assert_eq!(c.messages(), 2);
        let (bytes, n) = c.take().expect("two messages");
        assert_eq!(n, 2);
        assert_eq!(bytes, [1, 2, 3, 4, 5, 6, 0, 0, 7, 7, 7, 7]);
        assert!(c.is_empty());
        assert!(c.take().is_none());
        c.recycle(bytes);
        c.push(&[9; 4]);
        assert_eq!(c.take().expect("one message"), (vec![9; 4], 1));
    }

    #[test]
    fn the_size_limit_counts_the_padding() {
        let mut c = Coalesced::default();
        c.push(&vec![0; COALESCE_MAX - 5]);
        assert!(c.fits(4));
        assert!(!c.fits(5));
    }
}
