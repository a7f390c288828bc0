//! The kernel component: the link to the kernel's iwpm client (`link.rs`: netlink, or a
//! Unix socket to an emulator) and the rate limit of its warnings. What goes to the kernel
//! leaves through the outbox (`outbox.rs`: order, holding while the link is full, a burst's
//! answers in one datagram, the acknowledgements due); reading the link is the loop's
//! (`shell/drain.rs`), which asks the outbox when reading may stop.

use std::time::Duration;

use iwpm_core::RateLimit;

pub(crate) mod link;

use self::link::KernelLink;

/// Burst of rate-limited warnings about the link per window.
const WARN_BURST: u32 = 5;
/// Window of rate-limited warnings about the link.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// The link, as the loop holds it.
#[derive(Debug)]
pub(crate) struct Kernel {
    /// The socket.
    pub(crate) link: KernelLink,
    /// Warnings about the link (truncation, foreign senders, failed sends, overruns), so a
    /// misbehaving link cannot flood the log.
    pub(crate) warn: RateLimit,
}

impl Kernel {
    /// The component around an open `link`.
    pub(crate) fn new(link: KernelLink) -> Self {
        Kernel {
            link,
            warn: RateLimit::new(WARN_WINDOW, WARN_BURST),
        }
    }
}
