//! The sans-IO heart of the iWARP port mapper daemon.
//!
//! [`Core`] holds the mapping table, the kernel-client registry, the ABI negotiation and the
//! peer-protocol exchanges. It never reads the clock and never touches a socket. A caller
//! runs it in a [`Host`], the only way in: [`Host::new`] makes the core from its
//! [`CoreConfig`], the caller feeds it input with `handle_*(now, ..)` and drains its output
//! with [`Host::poll_action`] / [`Host::poll_timeout`]. The same host therefore runs under
//! the real kernel, the kernel emulator, the fuzzer and virtual-clock simulations; the core's
//! own inputs are private to this crate, so no caller can skip what the host adds (the
//! state file's [`Action::SaveState`]).
//!
//! That is the caller's one obligation: after every input call ([`Host::start`] or
//! [`Host::start_after_restart`], the `handle_*` calls, [`Host::start_probe`]), drain
//! [`Host::poll_action`] until `None`, then wake up at [`Host::poll_timeout`]. Whatever
//! the caller must react to is an [`Action`]: besides the datagrams to send, the end of
//! the handshake, a finished probe, settled restored mappings, the end of the restart
//! recovery, changes of the mapping table (what a state file follows) and the state-file
//! writes that fall due. The one input whose result the caller needs at once, a kernel
//! datagram, returns a [`KernelReceipt`] (what the datagram was and whether it was
//! answered: when a read loop may stop). [`Host::core`] gives the core for what it reports.
//!
//! Port reservations are synchronous: the host lends the caller's [`PortReservations`] to
//! the inputs that create or free mappings ([`Host::handle_kernel_datagram`],
//! [`Host::start_after_restart`], [`Host::handle_timeout`]), and a mapping reserves its TCP
//! port when it is created and releases it when its last reference goes, within that
//! call. Restart recovery (the state file, then the kernel's MAPINFO replay) is settled
//! inside those calls too: nothing is left to call afterwards.
//!
//! Deliberate differences from the C daemon are listed in the module docs of
//! `machine::kernel`, `machine::recovery`, `machine::peer` and `exchange`; in short: refcounts
//! survive restart recovery, no fd or reservation leaks, association handles are unique
//! pseudo-random values rather than heap addresses, remote-triggerable logs are rate
//! limited, HANDLE_ERR code 0 is never sent, each kernel request is answered at most once
//! and never after the kernel gave up, and memory is bounded by `max_mappings` /
//! `max_exchanges`.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod action;
mod admission;
mod answered;
mod clients;
mod config;
mod cookie;
mod exchange;
#[cfg(any(test, feature = "testing"))]
mod fake_ports;
mod held;
mod host;
mod int_hash;
mod machine;
mod outcome;
mod peer_allow;
mod peer_book;
mod port_index;
mod ratelimit;
mod released;
pub use ratelimit::RateLimit;
mod mapping_id;
mod request;
mod source_meter;
pub mod state_file;
mod table;
mod token_bucket;
mod usage;

pub use crate::action::{
    Action, KernelReceipt, PeerSocket, PortReservations, ReservationId, ReserveError,
};
pub use crate::config::CoreConfig;
#[cfg(any(test, feature = "testing"))]
pub use crate::fake_ports::FakePorts;
pub use crate::host::{Host, SavePolicy};
#[cfg(any(test, feature = "testing"))]
pub use crate::machine::InvariantError;
pub use crate::machine::{
    ClientSnapshot, Core, ExchangeSide, ExchangeSnapshot, MappingSnapshot, PeerSnapshot, Previous,
    ProbeError, ProbeRequest, RestoreReport, MAX_PROBES, PROBE_MAX_WAIT,
};
pub use crate::mapping_id::MappingId;
pub use crate::outcome::{ProbeId, ProbeOutcome, ProbeResult, SettleReport};
pub use crate::peer_allow::PeerAllow;
pub use crate::peer_book::{ExchangeOutcome, RecentExchange};
pub use crate::table::{MappingRole, MappingView};
// What the core counts and its peer reports are written in the words it shares with its
// tools (`iwpm-report`); they are named here too, as the types of what `Core` returns.
pub use iwpm_report::{
    AuthFailure, Counter, ErrCode, KernelOp, KeyUse, PeerAuth, PeerTally, Stats, UnknownCounter,
};
