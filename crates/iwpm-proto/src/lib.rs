//! Byte-exact codecs of the iWARP port mapper protocols. No IO, no clock, no `unsafe`.
//!
//! * [`netlink`]: the kernel link (`NETLINK_RDMA`, client `RDMA_NL_IWCM`), iwpm ABI 3 and 4,
//!   every op in the direction(s) it travels, with the validation rules of the kernel and of
//!   rdma-core's `iwpmd`.
//! * [`kernel_side`]: the kernel's conventions around that codec (how it builds its
//!   requests, which answers it takes), shared by every stand-in of the kernel.
//! * [`peer`]: the daemon-to-daemon UDP protocol on port 3935 (64-byte REQUEST, 48-byte
//!   ACCEPT/ACK/REJECT, and the 96-byte form with the iwpmd-rs extension block).
//! * [`config`]: `/etc/iwpmd.conf`, accepting and rejecting what the C parser does.
//! * [`sockaddr`]: `struct sockaddr_storage` as Linux lays it out.
//!
//! Guarantees (tested): no input makes a parser panic; every parse error is a matchable enum
//! variant; `parse(emit(x)) == x` for every message type; `emit(parse(b)) == b` for canonical
//! captures from the real kernel and the C daemon.
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cidr;
pub mod config;
pub mod consts;
pub mod fleet_key;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod kernel_side;
pub mod keyfile;
pub mod netlink;
pub mod peer;
pub mod sockaddr;
