//! The iwpm lab: the real `iwpmd` exercised end to end without RDMA hardware.
//!
//! Two emulated hosts ([`iwpm_kernel_emu`]) each get a real `iwpmd` child process whose
//! kernel link is the emulator's Unix socket. Host B listens, host A opens many
//! connections; the daemons reserve real TCP ports and talk the real peer protocol over
//! UDP. The lab watches both kernel links ([`tap`]), sits in the UDP path between the
//! daemons ([`relay`], which can also lose, duplicate and replay datagrams), reads the
//! daemons' tables through their SIGUSR1 dumps ([`dump`]), and cross-checks all of it
//! ([`mod@run`]). The binary `iwpm-lab` prints the [`report`]; the integration tests use the
//! same pieces.
//!
//! Layout: [`lab`] builds the topology (namespaces, hosts, taps, relays, daemons),
//! [`workload`] drives the connections, [`mod@run`] is the whole scenario with its checks
//! (what they find is a [`mismatch::Mismatch`]).
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod daemon;
pub mod dump;
pub mod histogram;
pub mod hold;
pub mod json;
pub mod lab;
pub mod locate;
pub mod mismatch;
pub mod netns;
pub mod progress;
pub mod relay;
pub mod report;
pub mod run;
pub mod svg;
pub mod tap;
pub mod workload;

pub use lab::{Family, Lab, LabConfig, LabError, Side, Topology};
pub use relay::RelayConfig;
pub use report::Report;
pub use run::{run, Phase, RunEvent, RunOptions};
pub use workload::WorkloadConfig;
