//! The iwpmd control socket: what `iwpmctl` and the daemon say to each other.
//!
//! Why a crate of its own: the daemon and the tool must agree on every type, and neither
//! `iwpm-proto` (byte-exact codecs of the kernel and peer protocols, no serde, `forbid
//! (unsafe)` and fuzzed as the wire's ground truth) nor `iwpm-core` (the sans-IO state
//! machine) is the place for an operator interface that will grow fields. Keeping it here
//! lets the daemon depend on a small library while `iwpmctl` ships as this crate's binary.
//!
//! * [`proto`]: the request and response types, with the protocol version and typed errors.
//! * [`codec`]: the sans-IO framing (a 4-byte big-endian length, then one JSON document),
//!   with size limits checked before any allocation; fuzzed by `fuzz/fuzz_targets/
//!   control_frame.rs`.
//! * [`metrics`]: the OpenMetrics text rendering of a status report, and a strict checker
//!   of that format (used by the tests and by `iwpmctl metrics --check`).
//! * [`render`]: the human tables `iwpmctl` prints.
//! * [`client`]: a blocking client with bounded waits and plain-words errors.
//! * [`io_counter`]: the daemon's IO counters (declared with the one counter macro of
//!   `iwpm-report`), for the daemon that prints them and the tools that read them back.
//!
//! It depends on `iwpm-report` for the counter vocabulary and the peer reports, and not on
//! `iwpm-core`: `iwpmctl` builds without the state machine.
//!
//! The protocol is documented in `docs/control.md`.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod codec;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod io_counter;
pub mod metrics;
pub mod proto;
pub mod render;

pub use io_counter::IoCounter;
pub use proto::*;
