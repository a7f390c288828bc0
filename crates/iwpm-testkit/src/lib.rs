//! Test support for the iwpmd-rs workspace, in one place instead of a copy per crate.
//!
//! Nothing here ships: the crate is `publish = false` and only tests, benches, the fuzz
//! targets and `iwpm-bench` depend on it (the lab and the simulator build without it).
//!
//! A real daemon under test: [`daemon`] (the process handle, its log and its command line
//! are `iwpm-process`'s; here, where the binary is), [`fake_kernel`] (the test plays the
//! kernel end of its link), [`load`] (many requests in flight, a stallable log reader,
//! /proc figures). Around them: [`net`] (free ports), [`fs`] (scratch directories and
//! socket paths), [`host`] (what this host can do, and skipping when it cannot),
//! [`workspace`] (the repository, and the binaries the running build made), [`alone`] (a
//! test in a process of its own). For the codec's own tests: [`netlink_bytes`] (messages
//! built and taken apart by hand) and [`netlink_strategies`] (proptest strategies of every
//! message). [`model`]: the core's model driver (an op grammar the fuzzer and the property
//! tests share), lending the core its fake port reservations (`iwpm_core::FakePorts`,
//! feature `testing`). [`prelude`] brings the daemon-side helpers in with one `use`.

pub mod alone;
pub mod core_host;
pub mod daemon;
pub mod fake_kernel;
pub mod fs;
pub mod host;
pub mod load;
pub mod model;
pub mod net;
pub mod netlink_bytes;
pub mod netlink_strategies;
pub mod report_text;
pub mod workspace;

/// Everything a process-level test of the daemon uses, for `use iwpm_testkit::prelude::*`.
pub mod prelude {
    pub use crate::daemon::{
        daemon_command, eventually, find_iwpmd, iwpmd_args, iwpmd_command, wait_child, Daemon, Log,
        StopError, EVENT_LOOP_LINE, WAIT,
    };
    pub use crate::fake_kernel::{kernel_request, FakeKernel, StartOnFakeKernel};
    pub use crate::fs::{scratch_dir, sock_path, ScratchDir};
    pub use crate::host::{
        have_tool, host_has_netlink_rdma, is_root, on_ci, on_path, say_skipped, skip,
        skip_unless_root,
    };
    pub use crate::load::{nofile_limits, open_fds, AddOutcome, KernelPipe, LogState, Watched};
    pub use crate::net::{free_udp_port, free_udp_port_on, tcp_port_free};
    pub use crate::{daemon_command, iwpmd_bin, iwpmd_command};
}
