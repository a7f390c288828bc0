//! The systemd service-manager protocol, spoken directly (one socket, kept open): `READY=1`,
//! `STATUS=`, `WATCHDOG=1`, `STOPPING=1`, and the file descriptor store (`FDSTORE=1` with
//! the descriptors as `SCM_RIGHTS`, `FDSTOREREMOVE=1`), plus taking stored descriptors back
//! at start (`LISTEN_FDS`/`LISTEN_FDNAMES`/`LISTEN_PID`).
//!
//! Why not the `sd-notify` crate for all of it: its FD-store support pulls in another crate
//! and opens a socket per message; a daemon holding 50 000 ports sends one message per
//! reservation change. Descriptors go out with rustix's safe `sendmsg_addr` and
//! `SendAncillaryBuffer`; inherited descriptors are adopted through `listenfd`, which
//! checks each one is a socket of the expected type before owning it.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::net::{
    sendmsg_addr, socket_with, AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketAddrUnix, SocketFlags, SocketType,
};

/// A connection to the service manager's notification socket (`NOTIFY_SOCKET`).
#[derive(Debug)]
pub(crate) struct Notifier {
    sock: OwnedFd,
    addr: SocketAddrUnix,
}

impl Notifier {
    /// The manager named by `NOTIFY_SOCKET` (a path or `@abstract`); `None` without one.
    pub(crate) fn from_env() -> io::Result<Option<Notifier>> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddrUnix::new_abstract_name(name)?,
            None if bytes.first() == Some(&b'/') => SocketAddrUnix::new(bytes)?,
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "NOTIFY_SOCKET is neither an absolute path nor an abstract name",
                ))
            }
        };
        let sock = socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        Ok(Some(Notifier { sock, addr }))
    }

    /// Sends `state` (newline-separated `KEY=value` lines).
    pub(crate) fn send(&self, state: &str) -> io::Result<()> {
        self.send_with_fds(state, &[])
    }

    /// Sends `state` with descriptors attached (`FDSTORE=1`).
    pub(crate) fn send_with_fds(&self, state: &str, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let iov = [IoSlice::new(state.as_bytes())];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::other("ancillary buffer too small"));
        }
        let n = sendmsg_addr(
            &self.sock,
            &self.addr,
            &iov,
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        if n != state.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short notify send",
            ));
        }
        Ok(())
    }

    /// Hands `fd` to the FD store under `name` (unique: removal is by name). `FDPOLL=0`:
    /// systemd otherwise drops a stored descriptor that polls `POLLHUP`, which a bound,
    /// unconnected TCP socket always does.
    pub(crate) fn store_fd(&self, name: &str, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.send_with_fds(&format!("FDSTORE=1\nFDNAME={name}\nFDPOLL=0"), &[fd])
    }

    /// Drops every stored descriptor named `name`.
    pub(crate) fn remove_fd(&self, name: &str) -> io::Result<()> {
        self.send(&format!("FDSTOREREMOVE=1\nFDNAME={name}"))
    }
}

/// Half the watchdog period (`WATCHDOG_USEC`, for us when `WATCHDOG_PID` is unset or ours),
/// the interval of our `WATCHDOG=1` pings; `None` when no watchdog is armed.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// A valid `FDNAME`: printable ASCII without `:`, at most 255 bytes (systemd's rule).
pub(crate) fn valid_fd_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 255 && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

/// Descriptors the service manager passed back at start (`LISTEN_FDS`), with their names.
#[derive(Debug, Default)]
pub(crate) struct Inherited {
    /// TCP sockets (reserved ports).
    pub(crate) tcp: Vec<(String, socket2::Socket)>,
    /// UDP sockets (the peer sockets).
    pub(crate) udp: Vec<(String, std::net::UdpSocket)>,
    /// Descriptors we could not use (left open; named for the log).
    pub(crate) unusable: Vec<String>,
}

/// Why descriptors announced in `LISTEN_FDS` were not adopted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ListenFdsIgnored {
    /// No `LISTEN_PID`: the variables may have leaked from a parent, not been meant for us.
    #[error("LISTEN_PID is not set")]
    NoPid,
    /// `LISTEN_PID` names another process (inherited through a fork or `exec`).
    #[error("LISTEN_PID={0:?} is not our pid {1}")]
    OtherPid(String, u32),
    /// `LISTEN_FDS` is not a number.
    #[error("LISTEN_FDS={0:?} is not a count")]
    BadCount(String),
}

/// How many descriptors (from fd 3, as `sd_listen_fds` counts) `LISTEN_FDS` hands to the
/// process `our_pid`: only when `LISTEN_PID` is present and equal to it, so that variables
/// left over from a parent never make us take over descriptors that are not ours.
pub(crate) fn listen_fds_for(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    our_pid: u32,
) -> Result<usize, ListenFdsIgnored> {
    let Some(count) = listen_fds else {
        return Ok(0);
    };
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| ListenFdsIgnored::BadCount(count.to_owned()))?;
    match listen_pid {
        None => Err(ListenFdsIgnored::NoPid),
        Some(p) if p.trim().parse::<u32>().ok() == Some(our_pid) => Ok(count),
        Some(p) => Err(ListenFdsIgnored::OtherPid(p.to_owned(), our_pid)),
    }
}

/// Variables of the socket-passing protocol; all are removed once read, so that nothing we
/// start later could take them for its own.
const LISTEN_VARS: [&str; 4] = [
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "LISTEN_FDS_FIRST_FD",
];

impl Inherited {
    /// Takes every descriptor in `LISTEN_FDS` meant for this process (`LISTEN_PID` present
    /// and ours; see [`listen_fds_for`]), from fd 3 on as `sd_listen_fds` does: a
    /// `LISTEN_FDS_FIRST_FD` (a `listenfd` extension, not systemd's) is ignored, so that no
    /// variable can point us at descriptors the manager did not pass. Names come from
    /// `LISTEN_FDNAMES`; `tcp*` names must be TCP sockets, `udp*` UDP sockets. Must run
    /// before any thread starts (it removes the variables from the environment).
    pub(crate) fn take_from_env() -> Inherited {
        let var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        let decision = listen_fds_for(
            var("LISTEN_PID").as_deref(),
            var("LISTEN_FDS").as_deref(),
            std::process::id(),
        );
        if let Some(first) = var("LISTEN_FDS_FIRST_FD") {
            tracing::warn!(
                LISTEN_FDS_FIRST_FD = %first,
                "LISTEN_FDS_FIRST_FD ignored: passed descriptors start at fd 3 (sd_listen_fds)"
            );
            std::env::remove_var("LISTEN_FDS_FIRST_FD");
        }
        let count = match decision {
            Ok(n) => n,
            Err(why) => {
                tracing::warn!(
                    "passed descriptors (LISTEN_FDS) ignored and left open: {why}; they are                      adopted only when LISTEN_PID is this process's pid"
                );
                0
            }
        };
        let mut out = Inherited::default();
        if count > 0 {
            let names: Vec<String> = var("LISTEN_FDNAMES")
                .map(|v| v.split(':').map(str::to_owned).collect())
                .unwrap_or_default();
            // LISTEN_PID is ours and LISTEN_FDS_FIRST_FD is gone: listenfd takes 3.. here.
            let mut fds = listenfd::ListenFd::from_env();
            for idx in 0..fds.len() {
                let name = names
                    .get(idx)
                    .cloned()
                    .unwrap_or_else(|| format!("unknown-{idx}"));
                let taken = if name.starts_with("udp") {
                    fds.take_udp_socket(idx)
                        .map(|s| s.map(|s| out.udp.push((name.clone(), s))))
                } else {
                    fds.take_tcp_listener(idx).map(|s| {
                        s.map(|s| {
                            let owned: OwnedFd = s.into();
                            out.tcp.push((name.clone(), socket2::Socket::from(owned)));
                        })
                    })
                };
                if !matches!(taken, Ok(Some(()))) {
                    out.unusable.push(name);
                }
            }
        }
        for k in LISTEN_VARS {
            std::env::remove_var(k);
        }
        out
    }
}

/// The borrowed descriptor of anything that has one.
pub(crate) fn borrow<T: AsFd>(t: &T) -> BorrowedFd<'_> {
    t.as_fd()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    /// Step 9 item 6 (socket activation): `LISTEN_FDS` counts only with `LISTEN_PID` present
    /// and ours (the old code also took them with no `LISTEN_PID` at all).
    #[test]
    fn listen_fds_need_our_listen_pid() {
        assert_eq!(listen_fds_for(None, None, 42), Ok(0));
        assert_eq!(listen_fds_for(Some("42"), Some("2"), 42), Ok(2));
        assert_eq!(
            listen_fds_for(None, Some("2"), 42),
            Err(ListenFdsIgnored::NoPid)
        );
        assert_eq!(
            listen_fds_for(Some("43"), Some("2"), 42),
            Err(ListenFdsIgnored::OtherPid("43".into(), 42))
        );
        assert_eq!(
            listen_fds_for(Some(""), Some("1"), 42),
            Err(ListenFdsIgnored::OtherPid(String::new(), 42))
        );
        assert!(matches!(
            listen_fds_for(Some("42"), Some("x"), 42),
            Err(ListenFdsIgnored::BadCount(_))
        ));
    }

    #[test]
    fn fd_names() {
        assert!(valid_fd_name("tcp-0.0.0.0-40000"));
        assert!(!valid_fd_name("tcp-[::]:40000"));
        assert!(!valid_fd_name(""));
        assert!(!valid_fd_name(&"x".repeat(256)));
    }

    #[test]
    fn store_sends_the_descriptor_and_remove_the_name() {
        let dir = std::env::temp_dir().join(format!("iwpmd-sd-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let manager = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            sock: socket_with(
                AddressFamily::UNIX,
                SocketType::DGRAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .unwrap(),
            addr: SocketAddrUnix::new(&path).unwrap(),
        };
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        n.store_fd("tcp-x", borrow(&tcp)).unwrap();
        n.remove_fd("tcp-x").unwrap();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let mut buf = [0u8; 256];
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let r = rustix::net::recvmsg(
            &manager,
            &mut iov,
            &mut control,
            rustix::net::RecvFlags::empty(),
        )
        .unwrap();
        let got: Vec<OwnedFd> = control
            .drain()
            .flat_map(|m| match m {
                rustix::net::RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!(&buf[..r.bytes], b"FDSTORE=1\nFDNAME=tcp-x\nFDPOLL=0");
        let n2 = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n2], b"FDSTOREREMOVE=1\nFDNAME=tcp-x");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
