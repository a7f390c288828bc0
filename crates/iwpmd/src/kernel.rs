//! The kernel component: the link to the kernel's iwpm client (`link.rs`: netlink, or a
//! Unix socket to an emulator) and the send path in front of it (`tx.rs`: order, holding
//! while the link is full, the acknowledgements due; `coalesce.rs`: a burst's answers in
//! one datagram). Reading the link is the loop's (`shell/drain.rs`), which asks the send
//! path when reading may stop.

use std::time::Duration;

use iwpm_core::RateLimit;

mod coalesce;
pub(crate) mod link;
pub(crate) mod tx;

use self::link::KernelLink;
use self::tx::KernelTx;

/// Burst of rate-limited warnings about the link per window.
const WARN_BURST: u32 = 5;
/// Window of rate-limited warnings about the link.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// The link and its send path, as the loop holds them.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// The socket.
    pub(crate) link: KernelLink,
    /// What goes to the kernel, and the peer datagrams held behind it.
    pub(crate) tx: KernelTx,
    /// Warnings about the link (truncation, foreign senders, failed sends, overruns), so a
    /// misbehaving link cannot flood the log.
    pub(crate) warn: RateLimit,
}

impl Kernel {
    /// The component around an open `link`.
    pub(crate) fn new(link: KernelLink) -> Self {
        Kernel {
            link,
            tx: KernelTx::default(),
            warn: RateLimit::new(WARN_WINDOW, WARN_BURST),
        }
    }
}
