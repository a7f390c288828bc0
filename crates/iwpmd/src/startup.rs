//! Start-up checks and messages for operators: which build is running, whether the process
//! sits where the kernel can reach it (the kernel's iwpm client talks only in the initial
//! network namespace), and, when start-up fails, the likely cause and fix next to the OS
//! error. The hints live here, keyed on the typed errors of the other modules, so those
//! modules keep plain messages and each failure is explained in one place.

use std::borrow::Cow;
use std::io;
use std::path::Path;

use rustix::io::Errno;

use crate::instance_lock::LockError;
use crate::kernel::link::KernelLinkError;
use crate::peer::sockets::PeerSocketError;

/// The crate version and the build it came from (`git describe` at build time, or
/// `IWPMD_BUILD` set by a packager, or `unknown`).
pub(crate) fn version_line() -> String {
    format!(
        "iwpmd {} (build {})",
        env!("CARGO_PKG_VERSION"),
        env!("IWPMD_BUILD")
    )
}

/// Network namespace of this process compared with the initial one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Netns {
    /// Same namespace as pid 1.
    Initial,
    /// Another namespace: the kernel's iwpm client will never talk to us.
    Other {
        /// `net:[inode]` of this process.
        ours: String,
        /// `net:[inode]` of pid 1.
        init: String,
    },
    /// The links could not be read (no /proc, or pid 1's link is not readable to us).
    Unknown(String),
}

/// Test hook: the namespace link standing for pid 1's. Tests run where pid 1's link may be
/// unreadable (containers); they point this at their own process's link instead.
pub(crate) const INIT_NETNS_ENV: &str = "IWPMD_TEST_INIT_NETNS";

/// Reads `/proc/self/ns/net` and `/proc/1/ns/net` (or [`INIT_NETNS_ENV`]).
pub(crate) fn netns() -> Netns {
    let init = std::env::var_os(INIT_NETNS_ENV).map_or_else(
        || Path::new("/proc/1/ns/net").to_path_buf(),
        std::path::PathBuf::from,
    );
    compare_netns(Path::new("/proc/self/ns/net"), &init)
}

/// Compares two `ns/net` links; when the second is unreadable for lack of ptrace access
/// (the packaged unit leaves the daemon only CAP_NET_ADMIN, and pid 1 holds capabilities
/// we lack), compares the processes' `net/dev` entries instead (see [`proc_net_of`]).
fn compare_netns(ours: &Path, init: &Path) -> Netns {
    let read = |p: &Path| -> Result<String, io::Error> {
        std::fs::read_link(p).map(|t| t.to_string_lossy().into_owned())
    };
    let unreadable = |p: &Path, e: io::Error| format!("cannot read {}: {e}", p.display());
    match (read(ours), read(init)) {
        (Ok(a), Ok(b)) if a == b => Netns::Initial,
        (Ok(ours), Ok(init)) => Netns::Other { ours, init },
        (Ok(ours_ns), Err(e)) if is_permission(&e) => {
            match (proc_net_of(ours), proc_net_of(init)) {
                (Some(a), Some(b)) => compare_proc_net(ours_ns, &a, &b).unwrap_or_else(|why| {
                    Netns::Unknown(format!("{}; {why}", unreadable(init, e)))
                }),
                _ => Netns::Unknown(unreadable(init, e)),
            }
        }
        (Err(e), _) => Netns::Unknown(unreadable(ours, e)),
        (_, Err(e)) => Netns::Unknown(unreadable(init, e)),
    }
}

/// `/proc/PID/net/dev` for the link `/proc/PID/ns/net`. Every network namespace has its own
/// procfs entry for `net/dev`, so two processes share a namespace exactly when their
/// `net/dev` is the same inode; and unlike `ns/net`, `/proc/PID/net` needs no ptrace access.
fn proc_net_of(ns_link: &Path) -> Option<std::path::PathBuf> {
    let pid_dir = ns_link.parent()?.parent()?;
    Some(pid_dir.join("net/dev"))
}

fn compare_proc_net(ours_ns: String, ours: &Path, init: &Path) -> Result<Netns, String> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| format!("cannot stat {}: {e}", p.display()))
    };
    let (a, b) = (id(ours)?, id(init)?);
    Ok(if a == b {
        Netns::Initial
    } else {
        Netns::Other {
            ours: ours_ns,
            init: format!("another one ({} is not {})", init.display(), ours.display()),
        }
    })
}

/// Started outside the initial network namespace with the real kernel link.
#[derive(Debug, thiserror::Error)]
#[error(
    "not in the initial network namespace (this process is in {ours}, pid 1 in {init}): the \
     kernel's iWARP port mapper client talks only to processes in the initial namespace, so \
     no connection would ever be mapped. Start iwpmd in the host's network namespace, or \
     pass --allow-netns to start anyway"
)]
pub(crate) struct ForeignNetns {
    /// `net:[inode]` of this process.
    pub(crate) ours: String,
    /// `net:[inode]` of pid 1.
    pub(crate) init: String,
}

/// Applies the namespace policy for the real kernel link: refuse a foreign namespace
/// unless `allow`, then only warn. An unreadable namespace is logged and accepted (a
/// hardened /proc may hide pid 1's links; refusing there would break working hosts).
pub(crate) fn check_netns(allow: bool) -> Result<(), ForeignNetns> {
    match netns() {
        Netns::Initial => Ok(()),
        Netns::Unknown(why) => {
            tracing::info!("cannot tell the network namespace ({why}); assuming the initial one");
            Ok(())
        }
        Netns::Other { ours, init } if allow => {
            tracing::warn!(
                %ours, %init,
                "not in the initial network namespace (--allow-netns): the kernel will not \
                 talk to this daemon unless its netlink traffic reaches init_net"
            );
            Ok(())
        }
        Netns::Other { ours, init } => Err(ForeignNetns { ours, init }),
    }
}

/// The likely cause and fix of a start-up failure, for the errors that have one.
pub(crate) fn hint(e: &anyhow::Error) -> Option<Cow<'static, str>> {
    e.chain().find_map(|cause| {
        if let Some(k) = cause.downcast_ref::<KernelLinkError>() {
            kernel_link_hint(k).map(Cow::Borrowed)
        } else if let Some(p) = cause.downcast_ref::<PeerSocketError>() {
            peer_hint(p)
        } else if let Some(l) = cause.downcast_ref::<LockError>() {
            lock_hint(l)
        } else {
            None
        }
    })
}

fn errno(e: &io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw_os_error)
}

fn is_permission(e: &io::Error) -> bool {
    matches!(errno(e), Some(Errno::PERM | Errno::ACCESS))
}

const NEEDS_NET_ADMIN: &str = "Run iwpmd as root, or with CAP_NET_ADMIN (the packaged unit \
                               grants it through CapabilityBoundingSet/AmbientCapabilities).";

fn kernel_link_hint(e: &KernelLinkError) -> Option<&'static str> {
    match e {
        KernelLinkError::Socket {
            kind: "NETLINK_RDMA",
            os,
        } => match errno(os) {
            Some(Errno::PROTONOSUPPORT) => Some(
                "Is the iw_cm module loaded? The kernel offers NETLINK_RDMA only with the RDMA \
                 core (ib_core) loaded: try `modprobe iw_cm`.",
            ),
            _ if is_permission(os) => Some(NEEDS_NET_ADMIN),
            _ => None,
        },
        KernelLinkError::NetlinkBind { os, .. } if is_permission(os) => Some(
            "Joining the RDMA netlink multicast group needs CAP_NET_ADMIN on this kernel. \
             Run iwpmd as root, or with CAP_NET_ADMIN.",
        ),
        KernelLinkError::ReceiveBuffer { os, .. } if is_permission(os) => Some(
            "Lower nl_sock_rbuf_size in the configuration file to at most \
             net.core.rmem_max, or run with CAP_NET_ADMIN (SO_RCVBUFFORCE).",
        ),
        KernelLinkError::UnixConnect { .. } => {
            Some("Is the kernel emulator running and bound to that path?")
        }
        _ => None,
    }
}

fn peer_hint(e: &PeerSocketError) -> Option<Cow<'static, str>> {
    match e {
        PeerSocketError::PortInUse { addr } => Some(Cow::Owned(format!(
            "It may be this daemon or rdma-core's iwpmd: stop it first (`systemctl stop \
             iwpmd` for the packaged one), or find it with `ss -ulpn 'sport = :{port}'`.",
            port = addr.port()
        ))),
        PeerSocketError::Open { os, .. } if is_permission(os) => Some(Cow::Borrowed(
            "Ports below 1024 need CAP_NET_BIND_SERVICE; the standard peer port 3935 needs \
             none. Check peer_port and the security policy (seccomp, SELinux, AppArmor).",
        )),
        PeerSocketError::Open { os, .. } if errno(os) == Some(Errno::ADDRNOTAVAIL) => {
            Some(Cow::Borrowed(
                "The peer bind address is not configured on this host: check peer_bind_v4/\
             peer_bind_v6 or --peer-bind-v4/--peer-bind-v6.",
            ))
        }
        _ => None,
    }
}

fn lock_hint(e: &LockError) -> Option<Cow<'static, str>> {
    match e {
        LockError::Held { link, .. } if link == "netlink" => Some(Cow::Borrowed(
            "Stop the running iwpmd first (`systemctl stop iwpmd` for the packaged one); only \
             one port mapper may serve a kernel.",
        )),
        LockError::Held { link, .. } => Some(Cow::Owned(format!(
            "Stop the iwpmd that serves {link} first (`ss -xlp | grep iwpmd` finds it); only \
             one port mapper may serve a kernel emulator."
        ))),
        _ => None,
    }
}

/// The one-line message printed when start-up fails: the error chain, then the hint.
pub(crate) fn failure_message(e: &anyhow::Error) -> String {
    match hint(e) {
        Some(h) => format!("Couldn't start iWarp Port Mapper: {e:#}. {h}"),
        None => format!("Couldn't start iWarp Port Mapper: {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    fn os(errno: Errno) -> io::Error {
        io::Error::from_raw_os_error(errno.raw_os_error())
    }

    fn message(e: impl Into<anyhow::Error>) -> String {
        failure_message(&e.into())
    }

    #[test]
    fn missing_netlink_rdma_names_iw_cm_and_prints_the_os_error_once() {
        let m = message(KernelLinkError::Socket {
            kind: "NETLINK_RDMA",
            os: os(Errno::PROTONOSUPPORT),
        });
        assert_eq!(m.matches("os error 93").count(), 1, "{m}");
        assert!(m.contains("cannot create the NETLINK_RDMA socket: Protocol not supported (os error 93). Is the iw_cm module loaded?"), "{m}");
        assert!(m.contains("modprobe iw_cm"), "{m}");
    }

    #[test]
    fn permission_errors_name_cap_net_admin() {
        for e in [
            KernelLinkError::Socket {
                kind: "NETLINK_RDMA",
                os: os(Errno::ACCESS),
            },
            KernelLinkError::NetlinkBind {
                groups: 2,
                os: os(Errno::PERM),
            },
            KernelLinkError::ReceiveBuffer {
                size: 1,
                os: os(Errno::PERM),
            },
        ] {
            let m = message(e);
            assert!(m.contains("CAP_NET_ADMIN"), "{m}");
            assert_eq!(m.matches("os error").count(), 1, "{m}");
        }
    }

    #[test]
    fn busy_peer_port_and_held_lock_point_at_the_running_daemon() {
        let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 3935));
        let m = message(PeerSocketError::PortInUse { addr });
        assert!(m.contains("by another port mapper. It may be"), "{m}");
        assert!(m.contains("systemctl stop iwpmd"), "{m}");
        assert!(m.contains("'sport = :3935'"), "{m}");
        // The hint names the port that was in use, not the standard one.
        let moved = SocketAddr::from((Ipv4Addr::LOCALHOST, 13935));
        let m = message(PeerSocketError::PortInUse { addr: moved });
        assert!(
            m.contains("'sport = :13935'") && !m.contains(":3935'"),
            "{m}"
        );
        let m = message(LockError::Held {
            link: "netlink".into(),
            name: "iwpmd/netlink".into(),
        });
        assert!(m.contains("systemctl stop iwpmd"), "{m}");
        // An emulator link is no systemd service's.
        let m = message(LockError::Held {
            link: "unix:/tmp/lab/kernel.sock".into(),
            name: "iwpmd/unix".into(),
        });
        assert!(m.contains("serves unix:/tmp/lab/kernel.sock"), "{m}");
        assert!(!m.contains("systemctl"), "{m}");
        let m = message(PeerSocketError::Open {
            addr,
            os: os(Errno::ADDRNOTAVAIL),
        });
        assert!(m.contains("peer_bind_v4"), "{m}");
        assert_eq!(m.matches("os error").count(), 1, "{m}");
    }

    #[test]
    fn errors_without_a_known_cause_carry_no_hint() {
        let m = message(KernelLinkError::PortId(os(Errno::NOBUFS)));
        assert!(m.ends_with("(os error 105)"), "{m}");
        let m = message(anyhow::anyhow!("something else"));
        assert_eq!(m, "Couldn't start iWarp Port Mapper: something else");
    }

    #[test]
    fn hint_is_found_under_context() {
        use anyhow::Context as _;
        let e: anyhow::Error = Err::<(), _>(PeerSocketError::PortInUse {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 1)),
        })
        .context("peer sockets")
        .unwrap_err();
        assert!(hint(&e).is_some());
    }

    #[test]
    fn namespaces_compare_by_link_text() {
        let dir = std::env::temp_dir().join(format!("iwpmd-netns-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let link = |name: &str, target: &str| {
            let p = dir.join(name);
            std::os::unix::fs::symlink(target, &p).unwrap();
            p
        };
        let a = link("a", "net:[4026531840]");
        let b = link("b", "net:[4026531840]");
        let c = link("c", "net:[4026532000]");
        assert_eq!(compare_netns(&a, &b), Netns::Initial);
        assert_eq!(
            compare_netns(&c, &a),
            Netns::Other {
                ours: "net:[4026532000]".into(),
                init: "net:[4026531840]".into()
            }
        );
        assert!(matches!(
            compare_netns(&a, &dir.join("missing")),
            Netns::Unknown(_)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_ptrace_access_the_proc_net_entries_tell_namespaces_apart() {
        let ours = Path::new("/proc/self/net/dev");
        assert_eq!(
            compare_proc_net(
                "net:[1]".into(),
                ours,
                Path::new("/proc/thread-self/net/dev")
            ),
            Ok(Netns::Initial)
        );
        assert!(
            compare_proc_net("net:[1]".into(), ours, Path::new("/nonexistent/net/dev")).is_err()
        );
        assert_eq!(
            proc_net_of(Path::new("/proc/1/ns/net")).as_deref(),
            Some(Path::new("/proc/1/net/dev"))
        );
        // A thread in a namespace of its own (needs CAP_SYS_ADMIN) sees another entry.
        let other = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            Some(compare_proc_net(
                "net:[2]".into(),
                Path::new("/proc/thread-self/net/dev"),
                Path::new("/proc/self/net/dev"),
            ))
        })
        .join()
        .unwrap();
        match other {
            Some(r) => assert!(matches!(r, Ok(Netns::Other { .. })), "{r:?}"),
            None => iwpm_testkit::host::say_skipped(
                "the foreign half of this test",
                "unshare(CLONE_NEWNET) not permitted",
            ),
        }
    }

    #[test]
    fn version_line_names_version_and_build() {
        let v = version_line();
        assert!(v.starts_with(&format!("iwpmd {} (build ", env!("CARGO_PKG_VERSION"))));
        assert!(!env!("IWPMD_BUILD").is_empty());
    }
}
