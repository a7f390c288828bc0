//! The loop's one wait: a level-triggered epoll set of two descriptors, the kernel link and
//! mio's own (edge-triggered) epoll, which holds every other source.
//!
//! Why not `poll(2)` on the same two: `poll` registers a wait-queue entry on each
//! descriptor and tears both down again on every call, and it runs each descriptor's
//! readiness check on entry. With epoll both are registered once; a wait that sleeps adds
//! one entry (its own), and a wait that finds the link ready checks only the link. On the
//! rig's listen storm, one wait per kernel request, that is the cheapest way to sleep on
//! more than one source.
//!
//! Why level-triggered for the kernel link: the loop stops reading the link as soon as an
//! exchange is over (see the shell's docs), usually with nothing left, and relies on the
//! next wait to report anything that is. Edge-triggered, it would have to read until
//! `EAGAIN` first, one more system call per message.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::Timespec;

/// Event data of the kernel link.
const KERNEL: u64 = 1;
/// Event data of mio's epoll.
const OTHERS: u64 = 2;

/// Longest single wait. A longer timeout is waited in pieces (the loop recomputes its
/// deadlines after each): it keeps the wait on `epoll_pwait`, whose millisecond timeout
/// is an `int`, on kernels older than 5.11.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// What a wait found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// Something in mio's set is ready; its events are still to be collected.
    pub(crate) others: bool,
    /// The kernel link has data, or an error to report (an overrun's `ENOBUFS`).
    pub(crate) kernel_readable: bool,
    /// The kernel link has room to send (watched only when asked for).
    pub(crate) kernel_writable: bool,
    /// The kernel link hung up (only a Unix-socket stand-in can).
    pub(crate) kernel_hung_up: bool,
}

/// The epoll set (see the module docs).
#[derive(Debug)]
pub(crate) struct Waiter {
    epoll: OwnedFd,
    /// Whether the kernel link is in the set (it leaves it when it hangs up).
    kernel_watched: bool,
    /// Whether the kernel link is watched for room to send too.
    kernel_writable: bool,
}

impl Waiter {
    /// A set watching `others` and `kernel` for input.
    pub(crate) fn new(others: impl AsFd, kernel: impl AsFd) -> io::Result<Self> {
        let epoll = epoll::create(CreateFlags::CLOEXEC)?;
        epoll::add(&epoll, others, EventData::new_u64(OTHERS), EventFlags::IN)?;
        epoll::add(&epoll, kernel, EventData::new_u64(KERNEL), EventFlags::IN)?;
        Ok(Waiter {
            epoll,
            kernel_watched: true,
            kernel_writable: false,
        })
    }

    /// Watches the kernel link for room to send as well (`want`), or no longer.
    pub(crate) fn watch_kernel_writable(
        &mut self,
        kernel: impl AsFd,
        want: bool,
    ) -> io::Result<()> {
        if want == self.kernel_writable || !self.kernel_watched {
            return Ok(());
        }
        let flags = if want {
            EventFlags::IN | EventFlags::OUT
        } else {
            EventFlags::IN
        };
        epoll::modify(&self.epoll, kernel, EventData::new_u64(KERNEL), flags)?;
        self.kernel_writable = want;
        Ok(())
    }

    /// Whether the kernel link is still in the set (it leaves it once it hangs up).
    pub(crate) fn watches_kernel(&self) -> bool {
        self.kernel_watched
    }

    /// Stops watching the kernel link: after a hang-up it would be reported at once, for
    /// ever.
    pub(crate) fn forget_kernel(&mut self, kernel: impl AsFd) -> io::Result<()> {
        if self.kernel_watched {
            self.kernel_watched = false;
            epoll::delete(&self.epoll, kernel)?;
        }
        Ok(())
    }

    /// Sleeps until something is ready or `timeout` (`None`: no limit) passes.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Ready> {
        let timeout = timeout.unwrap_or(LONGEST_WAIT).min(LONGEST_WAIT);
        let timeout = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 2];
        let (events, _) = epoll::wait(&self.epoll, &mut events, Some(&timeout))?;
        let mut ready = Ready::default();
        for event in events.iter() {
            let flags = event.flags;
            match event.data.u64() {
                OTHERS => ready.others = true,
                KERNEL => {
                    ready.kernel_readable = flags.intersects(EventFlags::IN | EventFlags::ERR);
                    ready.kernel_writable = flags.contains(EventFlags::OUT);
                    ready.kernel_hung_up = flags.contains(EventFlags::HUP);
                }
                _ => {}
            }
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;
    use std::time::Instant;

    fn pair() -> (UnixDatagram, UnixDatagram) {
        let (a, b) = UnixDatagram::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// A waiter on a kernel link and an "others" socket, with the far end of each.
    struct Setup {
        waiter: Waiter,
        kernel: UnixDatagram,
        emu: UnixDatagram,
        other: UnixDatagram,
        _others: UnixDatagram,
    }

    fn setup() -> Setup {
        let (kernel, emu) = pair();
        let (others, other) = pair();
        Setup {
            waiter: Waiter::new(&others, &kernel).unwrap(),
            kernel,
            emu,
            other,
            _others: others,
        }
    }

    /// Data left unread is reported again by the next wait (level-triggered).
    #[test]
    fn unread_kernel_data_is_reported_by_every_wait() {
        let mut s = setup();
        s.emu.send(b"x").unwrap();
        for _ in 0..3 {
            let ready = s.waiter.wait(Some(Duration::from_secs(5))).unwrap();
            assert!(ready.kernel_readable && !ready.others && !ready.kernel_writable);
        }
        let mut buf = [0u8; 4];
        s.kernel.recv(&mut buf).unwrap();
        let ready = s.waiter.wait(Some(Duration::ZERO)).unwrap();
        assert_eq!(ready, Ready::default());
    }

    #[test]
    fn the_other_set_and_writability_are_reported() {
        let mut s = setup();
        s.other.send(b"x").unwrap();
        let ready = s.waiter.wait(Some(Duration::ZERO)).unwrap();
        assert!(ready.others && !ready.kernel_readable);
        s.waiter.watch_kernel_writable(&s.kernel, true).unwrap();
        assert!(s.waiter.wait(Some(Duration::ZERO)).unwrap().kernel_writable);
        s.waiter.watch_kernel_writable(&s.kernel, false).unwrap();
        assert!(!s.waiter.wait(Some(Duration::ZERO)).unwrap().kernel_writable);
    }

    /// A timeout shorter than a millisecond still sleeps (it is rounded up, not down to a
    /// busy loop), and a hung-up link, once forgotten, no longer wakes the wait.
    #[test]
    fn short_timeouts_sleep_and_a_forgotten_link_is_quiet() {
        let mut s = setup();
        let started = Instant::now();
        let mut wakes = 0;
        while started.elapsed() < Duration::from_millis(50) {
            s.waiter.wait(Some(Duration::from_micros(100))).unwrap();
            wakes += 1;
        }
        assert!(wakes < 1000, "{wakes} wake-ups in 50 ms");
        drop(s.emu);
        s.kernel.shutdown(std::net::Shutdown::Both).unwrap();
        assert!(s.waiter.wait(Some(Duration::ZERO)).unwrap().kernel_hung_up);
        s.waiter.forget_kernel(&s.kernel).unwrap();
        let started = Instant::now();
        assert_eq!(
            s.waiter.wait(Some(Duration::from_millis(30))).unwrap(),
            Ready::default()
        );
        assert!(started.elapsed() >= Duration::from_millis(25));
    }
}
