//! The sans-IO heart of the iWARP port mapper daemon.
//!
//! [`Core`] holds the mapping table, the kernel-client registry, the ABI negotiation and the
//! peer-protocol exchanges. It never reads the clock and never touches a socket: the shell
//! feeds it input with `handle_*(now, ..)` and drains its output with
//! [`Core::poll_action`] / [`Core::poll_timeout`]. The same core therefore runs under the
//! real kernel, the kernel emulator, the fuzzer and virtual-clock simulations.
#![forbid(unsafe_code)]

mod action;
mod config;
mod core;
mod stats;
mod table;

pub use crate::action::{Action, PeerSocket, ReservationId, ReserveError};
pub use crate::config::CoreConfig;
pub use crate::core::{Core, InvariantError};
pub use crate::stats::Stats;
pub use crate::table::{MappingId, MappingView};
