//! The sans-IO heart of the iWARP port mapper daemon.
//!
//! [`Core`] holds the mapping table, the kernel-client registry, the ABI negotiation and the
//! peer-protocol exchanges. It never reads the clock and never touches a socket: the shell
//! feeds it input with `handle_*(now, ..)` and drains its output with
//! [`Core::poll_action`] / [`Core::poll_timeout`]. The same core therefore runs under the
//! real kernel, the kernel emulator, the fuzzer and virtual-clock simulations.
//!
//! Port reservations are actions too: the core emits [`Action::Reserve`] and the shell must
//! answer with [`Core::handle_reserved`] before feeding more input (input that arrives
//! anyway is buffered and replayed in order). [`Action::Release`] follows when the last
//! reference to a mapping goes.
//!
//! Deliberate differences from the C daemon are listed in the module docs of `kernel`,
//! `recovery`, `peer` and `exchange`; in short: refcounts survive restart recovery, no fd or
//! reservation leaks, association handles are unique pseudo-random values rather than heap
//! addresses, remote-triggerable logs are rate limited, HANDLE_ERR code 0 is never sent, each
//! kernel request is answered at most once and never after the kernel gave up, and memory is
//! bounded by `max_mappings` / `max_exchanges`.
#![forbid(unsafe_code)]

mod action;
mod clients;
mod config;
mod core;
mod dump;
mod exchange;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod handshake;
mod kernel;
mod peer;
mod peer_allow;
mod ratelimit;
mod recovery;
mod reserve;
mod stats;
mod table;
mod token_bucket;
mod usage;

pub use crate::action::{Action, PeerSocket, ReservationId, ReserveError};
pub use crate::config::CoreConfig;
pub use crate::core::{Core, InvariantError};
pub use crate::peer_allow::PeerAllow;
pub use crate::stats::{Counter, ErrCode, KernelOp, Stats, UnknownCounter};
pub use crate::table::{MappingId, MappingRole, MappingView};
