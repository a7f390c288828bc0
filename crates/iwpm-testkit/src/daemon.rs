//! A real `iwpmd` under test: the process handle and its command line are
//! [`iwpm_process`]'s (re-exported here, so a test says `iwpm_testkit::daemon::Daemon`);
//! what is the tests' alone is where the binary is ([`find_iwpmd`],
//! [`iwpmd_bin!`](crate::iwpmd_bin)) and the macros that spawn the `iwpmd` package's own.

use std::path::{Path, PathBuf};

pub use iwpm_process::*;

/// The `iwpmd` binary of the crate whose integration test or bench expands this:
/// `CARGO_BIN_EXE_iwpmd`, known to cargo only while building the `iwpmd` package's own
/// tests (a macro, so that `env!` is read there and not here).
#[macro_export]
macro_rules! iwpmd_bin {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_iwpmd"))
    };
}

/// The `iwpmd` binary for tests outside the `iwpmd` package: `$IWPMD_BIN`, else the newer
/// of `target/debug/iwpmd` and `target/release/iwpmd` in the workspace (`cargo build -p
/// iwpmd`; `cargo test --workspace` builds it). Panics with what to do when there is none.
pub fn find_iwpmd() -> PathBuf {
    if let Some(p) = std::env::var_os("IWPMD_BIN") {
        return PathBuf::from(p);
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let newest = ["debug", "release"]
        .iter()
        .map(|p| target.join(p).join("iwpmd"))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max();
    match newest {
        Some((_, p)) => p,
        None => panic!(
            "no iwpmd binary under {}: run `cargo build -p iwpmd` or set IWPMD_BIN",
            target.display()
        ),
    }
}

/// [`daemon_command`] of the `iwpmd` package's own binary ([`iwpmd_bin!`](crate::iwpmd_bin)),
/// for the package's tests: `daemon_command!(kernel_socket, bind_v4, peer_port)`.
#[macro_export]
macro_rules! daemon_command {
    ($($arg:expr),+ $(,)?) => {
        $crate::daemon::daemon_command($crate::iwpmd_bin!(), $($arg),+)
    };
}

/// [`iwpmd_command`] (no process-mode flag) of the `iwpmd` package's own binary, for the
/// package's tests: `iwpmd_command!(kernel_socket, bind_v4, peer_port)`.
#[macro_export]
macro_rules! iwpmd_command {
    ($($arg:expr),+ $(,)?) => {
        $crate::daemon::iwpmd_command($crate::iwpmd_bin!(), $($arg),+)
    };
}
