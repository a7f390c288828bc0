//! What iwpmd reports about itself, in the words the daemon and its tools share.
//!
//! Why a crate of its own: `iwpmctl` must name every counter the daemon prints (its kind,
//! its help text, where it shows) and read back the peer reports the control socket
//! carries, and it has no use for the state machine that produces them. Here, below both
//! `iwpm-core` and `iwpm-control`, the vocabulary is written once and each side depends on
//! it alone: the client builds without the core, and the core never learns where a counter
//! is published nor how a report is serialised (`serde` is this crate's optional feature,
//! which only the control socket turns on). It depends on `iwpm-proto` because the core's
//! array counters are indexed by the wire's own kernel ops, HANDLE_ERR codes and peer
//! message types, named once there.
//!
//! * [`counters!`]: the one way to declare a counter list (name, kind, help, the
//!   [`Surface`]s it shows on, its [`Presence`]), used for the core's [`Counter`] here and
//!   the shell's IO counters in `iwpm-control`.
//! * [`Counter`] and [`Stats`]: everything the core counts, and the counts.
//! * [`PeerTally`], [`PeerAuth`], [`AuthFailure`], [`KeyUse`]: the per-peer and per-key
//!   reports of `iwpmctl peers` and `keys`.
//! * [`count`]: a number and its noun, as the daemon's log and `iwpmctl` both write it.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod counter;
mod peer;
mod stats;
mod words;

pub use crate::counter::{CounterKind, CounterSlot, Presence, Surface};
pub use crate::peer::{AuthFailure, KeyUse, PeerAuth, PeerTally};
pub use crate::stats::{Counter, ErrCode, KernelOp, Stats, UnknownCounter};
pub use crate::words::count;
