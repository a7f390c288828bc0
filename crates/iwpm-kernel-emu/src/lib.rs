//! A user-space stand-in for the Linux kernel side of the iWARP port mapper, so that the
//! real `iwpmd` can be run and tested on machines without RDMA hardware.
//!
//! # What is emulated and what is real
//!
//! | Part | Here | Real system |
//! |---|---|---|
//! | The kernel's iwpm client (`iwpm_msg.c`, `iwpm_util.c`, `iw_cm_map`) | [`kernel::KernelIwpm`]: registration states, REG_PID/ADD/QUERY/REMOVE, every daemon message handler, `NLMSG_DONE`/`NLMSG_ERROR` answers, the 10 s request timeout, the mapinfo and remote-info tables, the MAPINFO replay with its batching and 20-datagram limit | same bytes, same rules |
//! | `NETLINK_RDMA` | a Unix datagram socket per host carrying the same netlink bytes; unicast goes to the address a pid was announced from, the REG_PID "multicast" to the address that last sent anything | netlink port ids and group 2 |
//! | rdma_cm / iw_cm | [`CmId`]: bind, resolve, listen, connect, accept, reject, disconnect, destroy, RDMA CM events, synchronous or with an [`EventChannel`] | librdmacm + `cma.c` + `iwcm.c` |
//! | iWARP devices | [`PortMapMode::PortMapped`] (hardware: mapped addresses on the wire) or [`PortMapMode::NoPortMap`] (siw: `IWPM_FLAGS_NO_PORT_MAP`, unmapped local, mapped remote) | cxgb4/irdma/siw |
//! | The network between hosts | [`Fabric`]: delivers a connection to the host owning the destination IP, finds the listener by the address its device listens on, translates through remote-info as `cm_conn_req_handler` does | TCP + MPA |
//! | **The daemons** | **real `iwpmd` processes** | |
//! | **Peer traffic (UDP 3935)** | **real, between the daemons, over loopback** | |
//! | **Mapped-port reservations** | **real TCP sockets the daemons bind** | |
//!
//! Emulated ports of unmapped addresses exist only here ([`HostConfig::ephemeral_ports`]).
//!
//! # Deviations from the kernel, on purpose
//!
//! * Hazards are flagged, not reproduced ([`Violation`]): a late or duplicate reply is
//!   ignored (the kernel would process it against freed memory), HANDLE_ERR with code 0
//!   completes unmapped (the kernel would use uninitialised addresses), a HELLO with pid 0
//!   gets no reply (the kernel would send to itself).
//! * The codec is stricter than the kernel's liberal parser: a repeated attribute or
//!   trailing bytes that are not an attribute make the message invalid (DONE -22).
//! * Netlink messages for other RDMA clients (LS, NLDEV) are answered with `NLMSG_ERROR`
//!   -EINVAL; they are not emulated.
//! * The dump-completion `NLMSG_DONE` carries the message's `nlmsg_pid` where the kernel
//!   puts the sender's real port id (the emulator has none).
//! * Table iteration is in insertion order, not hash order, so MAPINFO records replay in
//!   the order the mappings were made **(inferred)**: the daemon must not care.
//! * `NLMSG_GOODSIZE` is 3776 bytes (x86-64, 4 KiB pages) **(inferred)**: 12 records per
//!   datagram, at most 227 replayable mappings.
//! * Removing a mapinfo entry matches local and mapped address, where the kernel matches
//!   the mapped address within the (local, mapped) hash bucket **(inferred)**.
//! * A wildcard listener's remote-info lookup uses the wildcard mapped address, so
//!   rdma-core-style REMOTE_INFO (specific IP) misses and the child reports the mapped
//!   remote address **(inferred)**, exactly as reasoned for the kernel.
//! * Connection set-up takes no time unless [`FabricConfig::wire_delay`] says so. A
//!   daemon's REMOTE_INFO is processed before a connection only if it was sent before
//!   the exchange that led to it; a daemon that sends its UDP ACCEPT first races the
//!   connection, and a lost race shows as [`RemoteInfoLookup::Missed`] (the kernel would
//!   report the peer's mapped address too). A wire delay of a few ms models TCP + MPA.
//! * Blocking sends (ADD/QUERY/REMOVE) retry a full daemon queue for up to the request
//!   timeout while holding the host lock.
//!
//! # Shape
//!
//! [`Fabric::add_host`] gives an [`EmulatedHost`] (a machine's kernel side as rdma_cm sees
//! it; not `iwpm_core::Host`, the daemon's core loop); a host's [`CmId`]s do what rdma_cm
//! ids do. [`EmulatedHost::listen`] and [`EmulatedHost::connect`] wrap the usual sequences.
//! [`EmulatedHost::violations`], [`EmulatedHost::stats`] and [`EmulatedHost::kernel_view`]
//! are what tests assert on.
//!
//! ```
//! use iwpm_kernel_emu::{AcceptMode, Fabric, HostConfig, MapOutcome, UnmappedReason};
//!
//! let fabric = Fabric::new();
//! let path = std::env::temp_dir().join(format!("iwpm-emu-doc-{}.sock", std::process::id()));
//! let host = fabric
//!     .add_host(HostConfig::new("a", "127.0.0.1".parse().unwrap(), &path))
//!     .unwrap();
//! // Start `iwpmd --kernel unix:<path>` here and wait with `host.wait_for_daemon(..)`.
//! // Without a daemon, as with the real kernel, everything proceeds unmapped.
//! let listener = host
//!     .listen("127.0.0.1:4000".parse().unwrap(), AcceptMode::Auto, None)
//!     .unwrap();
//! let conn = host.connect(None, "127.0.0.1:4000".parse().unwrap()).unwrap();
//! assert_eq!(
//!     conn.info.mapping,
//!     MapOutcome::Unmapped(UnmappedReason::NoDaemon { pid: -2 })
//! );
//! conn.id.destroy().unwrap();
//! listener.id.destroy().unwrap();
//! assert!(host.violations().is_empty());
//! ```
// No unwrap/expect outside tests (clippy.toml allows them there): input must never panic
// the daemon or a tool.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

pub mod cm;
mod driver;
mod fabric;
mod host;
pub mod kernel;
mod ports;

pub use cm::{
    AddrError, CmError, CmEvent, CmEventKind, ConnInfo, EventChannel, IdState, ListenInfo,
    PortMapMode, RejectReason, RemoteInfoLookup, Side, UnreachableReason,
};
pub use driver::DaemonAddr;
pub use fabric::{Fabric, FabricConfig};
pub use host::{
    AcceptMode, CmId, CmStats, Connection, EmulatedHost, HostConfig, HostError, HostStats, IdInfo,
    KernelView, Listener,
};
pub use kernel::{KernelStats, MapOutcome, Registration, RequestKind, UnmappedReason, Violation};
