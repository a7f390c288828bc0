//! What wakes the loop, in one place: the wait itself (`waiter.rs`: the kernel link and
//! mio's epoll, level-triggered), the `mio::Poll` behind it (peer sockets, control
//! clients, the helper threads' waker) and the signal pipe. The tokens of mio's sources
//! are assigned here.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Registry, Token, Waker};
use signal_hook::consts::signal::{SIGHUP, SIGTERM, SIGUSR1};
use signal_hook_mio::v1_0::Signals;

use crate::kernel::link::KernelLink;
use crate::peer::sockets::{PeerSockets, ALL as ALL_PEER};

use super::waiter::Waiter;

// Token 0 is unused: the kernel link is waited on outside mio (see the shell's docs).
pub(super) const SIGNALS: Token = Token(1);
/// Woken by the helper threads: a dump or a state file write is done.
pub(super) const HELPER_DONE: Token = Token(2);
/// The peer sockets' tokens start here, in `ALL_PEER` order.
pub(super) const PEER_BASE: usize = 3;

/// The kernel link's readiness after a wait.
pub(super) struct KernelReady {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
}

/// The loop's sources of wake-ups (see the module docs).
pub(crate) struct Wakeups {
    poll: Poll,
    signals: Signals,
    /// The loop's wait: the kernel link and mio's epoll, level-triggered.
    waiter: Waiter,
}

impl Wakeups {
    /// Registers the peer sockets and the signals, and watches `kernel`; the waker is the
    /// helper threads' (a dump or a state file write is done).
    pub(super) fn new(
        kernel: &KernelLink,
        peers: &mut PeerSockets,
    ) -> io::Result<(Self, Arc<Waker>)> {
        let poll = Poll::new()?;
        let registry = poll.registry();
        for (i, which) in ALL_PEER.into_iter().enumerate() {
            if let Some(sock) = peers.get_mut(which) {
                registry.register(sock, Token(PEER_BASE + i), Interest::READABLE)?;
            }
        }
        let mut signals = Signals::new([SIGTERM, SIGHUP, SIGUSR1])?;
        registry.register(&mut signals, SIGNALS, Interest::READABLE)?;
        let helper_waker = Arc::new(Waker::new(registry, HELPER_DONE)?);
        let waiter = Waiter::new(poll.registry(), kernel)?;
        let wakeups = Wakeups {
            poll,
            signals,
            waiter,
        };
        Ok((wakeups, helper_waker))
    }

    /// mio's registry (the control socket registers its connections here).
    pub(crate) fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// The wait, lent to the kernel send path (it watches the link for room to send).
    pub(crate) fn waiter_mut(&mut self) -> &mut Waiter {
        &mut self.waiter
    }

    /// Whether the kernel link is still waited on (it is not once it hung up).
    #[cfg(test)]
    pub(super) fn watches_kernel(&self) -> bool {
        self.waiter.watches_kernel()
    }

    /// The signals received since the last call.
    pub(super) fn pending_signals(&mut self) -> Vec<i32> {
        self.signals.pending().collect()
    }

    /// Sleeps until the kernel link or a mio source is ready, or `timeout` passes. mio's
    /// events, if any, are left in `events` (harvested without waiting); the kernel link's
    /// readiness is returned.
    pub(super) fn wait(
        &mut self,
        kernel: &KernelLink,
        events: &mut Events,
        timeout: Option<Duration>,
    ) -> io::Result<KernelReady> {
        let ready = self.waiter.wait(timeout)?;
        if ready.others {
            self.poll.poll(events, Some(Duration::ZERO))?;
        } else {
            events.clear();
        }
        // What is still queued is read below; then the link is left alone.
        if ready.kernel_hung_up && self.waiter.watches_kernel() {
            tracing::error!(link = kernel.kind_name(), "the kernel link hung up");
            if let Err(e) = self.waiter.forget_kernel(kernel) {
                tracing::error!(error = %e, "cannot stop watching the hung-up kernel link");
            }
        }
        Ok(KernelReady {
            readable: ready.kernel_readable,
            writable: ready.kernel_writable,
        })
    }
}
