//! The Unix-datagram stand-in for `NETLINK_RDMA`: the socket the daemon talks to, the
//! [`Link`] that sends on it, and the thread that reads it.
//!
//! The emulator binds a `SOCK_DGRAM` Unix socket at the host's path. The daemon sends the
//! same netlink bytes it would send to the kernel; the emulator replies to the datagram's
//! source address (the daemon autobinds, so that is normally an abstract name).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::kernel::{Link, SendError, SendMode};

/// A daemon socket address as seen in `recvfrom`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DaemonAddr {
    /// Bound to a filesystem path.
    Path(PathBuf),
    /// Bound to an abstract name (autobind gives a 5-hex-digit one).
    Abstract(Vec<u8>),
    /// Not bound: nothing can be sent back.
    Unnamed,
}

impl DaemonAddr {
    pub(crate) fn from_std(addr: &UnixAddr) -> Self {
        if let Some(p) = addr.as_pathname() {
            DaemonAddr::Path(p.to_path_buf())
        } else if let Some(name) = addr.as_abstract_name() {
            DaemonAddr::Abstract(name.to_vec())
        } else {
            DaemonAddr::Unnamed
        }
    }

    fn to_std(&self) -> Option<UnixAddr> {
        match self {
            DaemonAddr::Path(p) => UnixAddr::from_pathname(p).ok(),
            DaemonAddr::Abstract(n) => UnixAddr::from_abstract_name(n).ok(),
            DaemonAddr::Unnamed => None,
        }
    }
}

/// Binds the emulator's socket at `path` (replacing a stale socket file), non-blocking.
pub(crate) fn bind(path: &Path) -> io::Result<UnixDatagram> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let socket = UnixDatagram::bind(path)?;
    socket.set_nonblocking(true)?;
    // What the kernel may queue for a daemon is bounded by the daemon's netlink receive
    // buffer (iwpmd asks for 16 MiB); here it is bounded by our send buffer, 208 KiB by
    // default, about 250 small messages: a burst of connects would fail REG_PID with
    // ENOBUFS in the emulator where the kernel has room. A refusal keeps the default.
    if rustix::net::sockopt::set_socket_send_buffer_size_force(&socket, EMU_SNDBUF).is_err() {
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(&socket, EMU_SNDBUF);
    }
    Ok(socket)
}

/// Send buffer of the emulator's socket (see [`bind`]).
const EMU_SNDBUF: usize = 16 * 1024 * 1024;

/// Sends on the emulator's socket. [`SendMode::Wait`] retries a full queue for up to
/// `wait` (the kernel socket's 10 s send timeout).
#[derive(Debug)]
pub(crate) struct UnixLink<'a> {
    pub(crate) socket: &'a UnixDatagram,
    pub(crate) wait: Duration,
}

impl Link<DaemonAddr> for UnixLink<'_> {
    fn send(&mut self, to: &DaemonAddr, datagram: &[u8], mode: SendMode) -> Result<(), SendError> {
        let addr = to.to_std().ok_or(SendError::ConnRefused)?;
        let deadline = Instant::now() + self.wait;
        loop {
            match self.socket.send_to_addr(datagram, &addr) {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let err = classify(&e);
                    if err != SendError::WouldBlock
                        || mode == SendMode::NonBlocking
                        || Instant::now() >= deadline
                    {
                        return Err(err);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

fn classify(e: &io::Error) -> SendError {
    match e.kind() {
        io::ErrorKind::WouldBlock => SendError::WouldBlock,
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => SendError::ConnRefused,
        _ => match e.raw_os_error() {
            // ENOBUFS: treat like a full queue.
            Some(105) => SendError::WouldBlock,
            Some(n) => SendError::Os(n),
            None => SendError::Os(5),
        },
    }
}

/// Reads every queued datagram without blocking.
pub(crate) fn drain(socket: &UnixDatagram, buf: &mut [u8]) -> Vec<(DaemonAddr, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        match socket.recv_from(buf) {
            Ok((n, from)) => out.push((DaemonAddr::from_std(&from), buf[..n].to_vec())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "kernel emulator socket read failed");
                break;
            }
        }
    }
    out
}
