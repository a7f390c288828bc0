//! The kernel's side of the iwpm netlink conversation: how the kernel's iwpm client
//! (`iwpm_msg.c`, `iw_cm_map`) builds what it sends a daemon ([`requests`]), and which of
//! the daemon's answers it takes for which request ([`replies`]).
//!
//! One implementation for every stand-in of the kernel: the emulator
//! (`iwpm_kernel_emu::kernel::KernelIwpm`) and the test kit's fake kernel end, core
//! harness and model driver. The decoding rules themselves are the codec's
//! ([`decode_daemon_msg`](crate::netlink::decode_daemon_msg)); this module holds the
//! conventions around them.
//!
//! Why in this crate: it is the only crate below both the emulator and the test kit (the
//! test kit cannot depend on the emulator, whose tests depend on the test kit), and like
//! the codec it is stateless, with no IO and no clock. It is not test code (the emulator
//! behind the lab and the simulator runs on it); the daemon simply never calls it.

pub mod replies;
pub mod requests;

pub use replies::{dispatched, Answer, RequestKind, IWPM_NL_TIMEOUT};
