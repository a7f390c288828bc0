//! Single-instance guard: an abstract Unix socket name per kernel link. The kernel frees the
//! name when the process dies (no stale lock files, nothing written to disk), and the name
//! is per network namespace, which is also the scope of the kernel's iwpm registration.
//!
//! rdma-core relies only on UDP 3935 being taken; this guard also catches a second daemon
//! started with another `--peer-port`, which would otherwise steal the kernel's registration.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::cli::KernelSpec;

/// Why the guard could not be taken.
///
/// OS errors sit in fields named `os`, not `source`: the message already shows them, and
/// an error source would print them a second time in the start-up error chain.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    /// Another process holds the name.
    #[error("another iwpmd is already running for kernel link {link} (lock @{name} is held)")]
    Held {
        /// The kernel link.
        link: String,
        /// The abstract socket name.
        name: String,
    },
    /// The socket could not be created or bound for another reason.
    #[error("cannot take the single-instance lock @{name}: {os}")]
    Io {
        /// The abstract socket name.
        name: String,
        /// The OS error.
        os: io::Error,
    },
}

/// Held for the life of the process.
#[derive(Debug)]
pub(crate) struct InstanceLock {
    _fd: OwnedFd,
}

/// The abstract name guarding `kernel`.
pub(crate) fn lock_name(kernel: &KernelSpec) -> String {
    match kernel {
        KernelSpec::Netlink => "iwpmd/netlink".to_owned(),
        KernelSpec::Unix(path) => {
            let abs = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let mut h = DefaultHasher::new();
            abs.hash(&mut h);
            format!("iwpmd/unix/{:016x}", h.finish())
        }
    }
}

impl InstanceLock {
    /// Takes the guard for `kernel`.
    pub(crate) fn acquire(kernel: &KernelSpec) -> Result<Self, LockError> {
        let name = lock_name(kernel);
        let io_err = |e: Errno| LockError::Io {
            name: name.clone(),
            os: e.into(),
        };
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io_err)?;
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(io_err)?;
        match rustix::net::bind(&fd, &addr) {
            Ok(()) => Ok(InstanceLock { _fd: fd }),
            Err(Errno::ADDRINUSE) => Err(LockError::Held {
                link: kernel.to_string(),
                name,
            }),
            Err(e) => Err(io_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn second_acquire_fails_until_first_is_dropped() {
        let spec = KernelSpec::Unix(PathBuf::from(format!(
            "/nonexistent/iwpmd-lock-test-{}",
            std::process::id()
        )));
        let first = InstanceLock::acquire(&spec).unwrap();
        let err = InstanceLock::acquire(&spec).unwrap_err();
        assert!(matches!(err, LockError::Held { .. }));
        assert!(err.to_string().contains("another iwpmd is already running"));
        drop(first);
        InstanceLock::acquire(&spec).unwrap();
    }

    #[test]
    fn names_differ_per_link() {
        let a = lock_name(&KernelSpec::Unix(PathBuf::from("/tmp/a")));
        let b = lock_name(&KernelSpec::Unix(PathBuf::from("/tmp/b")));
        assert_ne!(a, b);
        assert_eq!(lock_name(&KernelSpec::Netlink), "iwpmd/netlink");
    }
}
