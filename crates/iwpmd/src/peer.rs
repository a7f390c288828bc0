//! The peer component: the UDP sockets of the peer protocol (`peer/sockets.rs`), the
//! buffer datagrams are read into, and sending one datagram to a peer. Reading the sockets
//! is the loop's (`shell/drain.rs`); when a datagram may leave is the outbox's
//! (`outbox.rs`: after what the kernel must know first).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_core::{PeerSocket, RateLimit};

use crate::io_counters::IoCounters;
use crate::send_failure::SendFailure;

use self::sockets::{PeerSockets, PEER_RECV_BUFFER};

pub(crate) mod sockets;

/// The peer component as the loop holds it: the sockets, the buffer datagrams are read
/// into, and the rate limit of its warnings (a flood on UDP 3935, open to anyone, must not
/// flood the log).
#[derive(Debug)]
pub(crate) struct Peers {
    /// The sockets.
    pub(crate) sockets: PeerSockets,
    /// One datagram read, [`PEER_RECV_BUFFER`] bytes.
    pub(crate) buf: Vec<u8>,
    /// Warnings about failed receives and sends.
    pub(crate) warn: RateLimit,
}

impl Peers {
    /// The component around open `sockets`.
    pub(crate) fn new(sockets: PeerSockets) -> Self {
        Peers {
            sockets,
            buf: vec![0; PEER_RECV_BUFFER],
            warn: RateLimit::new(WARN_WINDOW, WARN_BURST),
        }
    }
}

/// Burst of rate-limited warnings per window.
const WARN_BURST: u32 = 5;
/// Window of rate-limited warnings.
const WARN_WINDOW: Duration = Duration::from_secs(10);

impl Peers {
    /// Sends `datagram` to `to` from socket `via` now. A failure is counted and logged
    /// (rate-limited) and the datagram dropped: the core retransmits REQUEST and ACCEPT on
    /// its timer.
    pub(crate) fn send_now(
        &mut self,
        counters: &mut IoCounters,
        now: Instant,
        via: PeerSocket,
        to: SocketAddr,
        datagram: &[u8],
    ) {
        let result = match self.sockets.get(via) {
            Some(sock) => match sock.send_to(datagram, to) {
                Ok(n) if n == datagram.len() => Ok(()),
                Ok(sent) => Err(SendFailure::Short {
                    sent,
                    len: datagram.len(),
                }),
                Err(e) => Err(SendFailure::Os(e)),
            },
            None => Err(SendFailure::NoSocket),
        };
        match result {
            Ok(()) => counters.peer_tx += 1,
            Err(e) => {
                counters.peer_tx_dropped += 1;
                if let Some(suppressed) = self.warn.allow(now) {
                    tracing::warn!(socket = ?via, %to, error = %e, suppressed, "UDP send failed");
                }
            }
        }
    }
}
