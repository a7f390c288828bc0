//! Where the lab's sockets and processes live: the current network namespace, a private
//! namespace made for one run, or one of two namespaces joined by a veth pair.
//!
//! A socket belongs to the namespace of the thread that created it, and a child process to
//! the namespace of the thread that spawned it. So everything a host owns (its emulated
//! kernel socket, relay sockets, daemon process) is created through [`NetPlace::run`],
//! which does the work on a short-lived thread that has joined the namespace; the
//! resulting sockets can then be used from any thread.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

// `unshare` is nix's: rustix 1.1 offers it only as the `unsafe` `unshare_unsafe` (its safe
// `unshare` is deprecated), and the workspace allows no `unsafe` here. Everything else
// (setns, ids) is rustix's.
use nix::sched::{unshare, CloneFlags};
use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// Why a namespace could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// Named namespaces and veth pairs need root.
    #[error("network namespaces need root (running as uid {0})")]
    NotRoot(u32),
    /// The `ip` tool (iproute2) is not installed.
    #[error("the `ip` command (iproute2) is not available: {0}")]
    IpMissing(std::io::Error),
    /// An `ip` command failed.
    #[error("`ip {args}` failed ({status}): {stderr}")]
    IpFailed {
        /// The arguments.
        args: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        stderr: String,
    },
    /// A namespace system call failed.
    #[error("{what}: {errno}")]
    Sys {
        /// Which call.
        what: &'static str,
        /// The error.
        errno: rustix::io::Errno,
    },
    /// Opening a namespace file or writing an id map failed.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The helper thread died.
    #[error("namespace helper thread panicked")]
    ThreadPanicked,
}

/// True when running as root (the netns variants need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// True when `ip` can be run.
pub fn have_ip() -> bool {
    Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A namespace the lab holds open; a named one is deleted when the last handle goes.
#[derive(Debug)]
struct Namespace {
    fd: OwnedFd,
    name: Option<String>,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Some(name) = &self.name {
            if let Err(e) = ip_here(&["netns", "del", name]) {
                tracing::warn!(netns = %name, error = %e, "cannot delete network namespace");
            }
        }
    }
}

/// A network namespace to create sockets and spawn processes in. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct NetPlace(Option<Arc<Namespace>>);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Prefix of the lab's named namespaces (`iwpmlab-<pid>-<n>-a`).
const NS_PREFIX: &str = "iwpmlab-";

impl NetPlace {
    /// The namespace the process runs in.
    pub fn current() -> Self {
        NetPlace(None)
    }

    /// True for [`NetPlace::current`].
    pub fn is_current(&self) -> bool {
        self.0.is_none()
    }

    /// The namespace's name, for named ones.
    pub fn name(&self) -> Option<&str> {
        self.0.as_ref().and_then(|n| n.name.as_deref())
    }

    /// Runs `f` with the calling thread in this namespace (on a helper thread unless it is
    /// the current one).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        let Some(ns) = &self.0 else {
            return Ok(f());
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                move_into_link_name_space(ns.fd.as_fd(), Some(LinkNameSpaceType::Network))
                    .map_err(|errno| NetnsError::Sys {
                        what: "setns(CLONE_NEWNET)",
                        errno,
                    })?;
                Ok(f())
            })
            .join()
            .map_err(|_| NetnsError::ThreadPanicked)?
        })
    }

    /// Runs `ip ARGS` inside this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        self.run(|| ip_here(args))?
    }

    /// A fresh, anonymous namespace with `lo` up, held open by a file descriptor (root
    /// only: unsharing the network namespace of one thread needs CAP_SYS_ADMIN).
    pub fn private() -> Result<NetPlace, NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot(rustix::process::geteuid().as_raw()));
        }
        let fd = std::thread::spawn(|| -> Result<OwnedFd, NetnsError> {
            unshare_this_thread(CloneFlags::CLONE_NEWNET, "unshare(CLONE_NEWNET)")?;
            open_ns_file(Path::new("/proc/thread-self/ns/net"))
        })
        .join()
        .map_err(|_| NetnsError::ThreadPanicked)??;
        let place = NetPlace(Some(Arc::new(Namespace { fd, name: None })));
        place.ip(&["link", "set", "lo", "up"])?;
        Ok(place)
    }

    /// Two fresh named namespaces (`iwpmlab-<pid>-<n>-a`/`-b`) joined by a veth pair whose
    /// ends are both called `veth0`, both up, with `lo` up. Deleted (with the pair) when
    /// the last handle of each goes. Stale namespaces of dead lab processes are removed
    /// first.
    pub fn veth_pair() -> Result<(NetPlace, NetPlace), NetnsError> {
        if !is_root() {
            return Err(NetnsError::NotRoot(rustix::process::geteuid().as_raw()));
        }
        if !have_ip() {
            return Err(NetnsError::IpMissing(std::io::Error::from(
                std::io::ErrorKind::NotFound,
            )));
        }
        sweep_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = format!("{NS_PREFIX}{}-{n}", std::process::id());
        let a = NetPlace::named(&format!("{base}-a"))?;
        let b = NetPlace::named(&format!("{base}-b"))?;
        let (na, nb) = (
            a.name().unwrap_or_default().to_string(),
            b.name().unwrap_or_default().to_string(),
        );
        ip_here(&[
            "link", "add", "veth0", "netns", &na, "type", "veth", "peer", "name", "veth0", "netns",
            &nb,
        ])?;
        for p in [&a, &b] {
            p.ip(&["link", "set", "lo", "up"])?;
            p.ip(&["link", "set", "veth0", "up"])?;
        }
        Ok((a, b))
    }

    fn named(name: &str) -> Result<NetPlace, NetnsError> {
        ip_here(&["netns", "add", name])?;
        let fd = match open_ns_file(&Path::new("/run/netns").join(name)) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = ip_here(&["netns", "del", name]);
                return Err(e);
            }
        };
        Ok(NetPlace(Some(Arc::new(Namespace {
            fd,
            name: Some(name.to_string()),
        }))))
    }
}

/// `unshare(flags)` for the calling thread, its error as rustix's like every other call
/// here.
fn unshare_this_thread(flags: CloneFlags, what: &'static str) -> Result<(), NetnsError> {
    unshare(flags).map_err(|errno| NetnsError::Sys {
        what,
        errno: rustix::io::Errno::from_raw_os_error(errno as i32),
    })
}

/// Moves the whole (still single-threaded) process into a private network namespace with
/// `lo` up: directly as root, else inside a new user namespace where we map our uid to 0.
/// Used by the binary for `--ipv6`, which needs addresses that only a private namespace
/// lets an unprivileged user add.
pub fn enter_private_namespace() -> Result<(), NetnsError> {
    if is_root() {
        unshare_this_thread(CloneFlags::CLONE_NEWNET, "unshare(CLONE_NEWNET)")?;
    } else {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        unshare_this_thread(
            CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET,
            "unshare(CLONE_NEWUSER|CLONE_NEWNET)",
        )?;
        write_file("/proc/self/setgroups", "deny")?;
        write_file("/proc/self/uid_map", &format!("0 {uid} 1"))?;
        write_file("/proc/self/gid_map", &format!("0 {gid} 1"))?;
    }
    ip_here(&["link", "set", "lo", "up"])
}

fn write_file(path: &str, text: &str) -> Result<(), NetnsError> {
    std::fs::write(path, text).map_err(|source| NetnsError::File {
        path: path.into(),
        source,
    })
}

fn open_ns_file(path: &Path) -> Result<OwnedFd, NetnsError> {
    File::open(path)
        .map(OwnedFd::from)
        .map_err(|source| NetnsError::File {
            path: path.to_path_buf(),
            source,
        })
}

/// Runs `ip ARGS` in the calling thread's namespace.
fn ip_here(args: &[&str]) -> Result<(), NetnsError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(NetnsError::IpMissing)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetnsError::IpFailed {
            args: args.join(" "),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Deletes `iwpmlab-<pid>-*` namespaces whose process is gone (a lab killed before it
/// could clean up).
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(netns = %name, "removing a stale lab namespace");
            let _ = ip_here(&["netns", "del", &name]);
        }
    }
}
