//! A blocking client: one Unix stream connection, one request at a time, every wait
//! bounded. Connection failures are classified so `iwpmctl` can say what to do: the daemon
//! is not running (`ENOENT`, `ECONNREFUSED` at the packaged daemon's socket), nothing
//! listens at another socket (one a user named: how the packaged daemon is started is no
//! answer there), or the caller may not use the socket (`EACCES`, or the daemon's own
//! refusal after checking the caller's credentials).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::codec::{self, CodecError, FrameDecoder, MAX_RESPONSE_LEN};
use crate::proto::{Command, ErrorKind, ErrorReply, Outcome, Reply, Request};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at the packaged daemon's socket ([`crate::DEFAULT_SOCKET`]).
    ///
    /// The hint follows the packaging (`packaging/README.md`): udev starts the service for
    /// each iWARP device and a bare `systemctl start` does not last (`StopWhenUnneeded=yes`).
    #[error("iwpmd is not running (nothing answers at {path}); udev starts it for an iWARP device, `systemctl enable --now iwpmd-always.target` keeps it running without one; or name a daemon's socket with --socket")]
    NotRunning {
        /// The socket path.
        path: PathBuf,
        /// `ENOENT` or `ECONNREFUSED`.
        source: io::Error,
    },
    /// Nothing listens at a socket other than the packaged daemon's (`--socket PATH`).
    #[error("nothing listens at {path}: {}", not_listening(.source))]
    NothingListens {
        /// The socket path.
        path: PathBuf,
        /// `ENOENT` or `ECONNREFUSED`.
        source: io::Error,
    },
    /// The socket's permissions keep the caller out.
    #[error("permission denied on {path}: the control socket is for root (or the daemon's user) only; run iwpmctl with sudo")]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
    },
    /// The daemon answered with an error.
    #[error("{}", refusal(.0))]
    Daemon(ErrorReply),
    /// The connection failed otherwise.
    #[error("control socket {path}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The daemon's answer did not decode.
    #[error("bad answer from iwpmd: {0}")]
    Codec(#[from] CodecError),
    /// The daemon closed the connection without answering.
    #[error("iwpmd closed the connection without answering")]
    Closed,
    /// No answer in time.
    #[error("no answer from iwpmd within {0:?}")]
    Timeout(Duration),
}

/// Why nothing listens, in words: no file, or a socket file no process holds.
fn not_listening(source: &io::Error) -> &'static str {
    match source.kind() {
        io::ErrorKind::NotFound => "there is no such socket",
        _ => "the socket file is there but no daemon holds it (connection refused)",
    }
}

fn refusal(e: &ErrorReply) -> String {
    match e.kind {
        ErrorKind::PermissionDenied => format!(
            "iwpmd refused the request: {} (run iwpmctl as root or as the daemon's user)",
            e.message
        ),
        _ => format!("iwpmd: {e}"),
    }
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    path: PathBuf,
}

impl Client {
    /// Connects to the control socket at `path`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| {
            let path = path.to_owned();
            match source.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                    if path == Path::new(crate::DEFAULT_SOCKET) =>
                {
                    ClientError::NotRunning { path, source }
                }
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                    ClientError::NothingListens { path, source }
                }
                io::ErrorKind::PermissionDenied => ClientError::PermissionDenied { path },
                _ => ClientError::Io { path, source },
            }
        })?;
        Ok(Client {
            stream,
            path: path.to_owned(),
        })
    }

    /// Sends `command` and waits up to `timeout` for the answer.
    pub fn call(&mut self, command: Command, timeout: Duration) -> Result<Reply, ClientError> {
        let io_err = |path: &Path, source: io::Error| match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout(timeout),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => ClientError::Closed,
            _ => ClientError::Io {
                path: path.to_owned(),
                source,
            },
        };
        let timeout = timeout.max(Duration::from_millis(1));
        self.stream
            .set_write_timeout(Some(timeout))
            .and_then(|()| self.stream.set_read_timeout(Some(timeout)))
            .map_err(|e| io_err(&self.path, e))?;
        let frame = codec::encode_frame(&Request::new(command));
        if let Err(e) = self.stream.write_all(&frame) {
            // The daemon may have refused us and closed before reading: its answer may
            // still be waiting.
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                return Err(io_err(&self.path, e));
            }
        }
        let mut decoder = FrameDecoder::new(MAX_RESPONSE_LEN);
        let mut buf = vec![0u8; 64 * 1024];
        let body = loop {
            if let Some(body) = decoder.next_body()? {
                break body;
            }
            let want = decoder.wanted().min(buf.len());
            let n = match self.stream.read(&mut buf[..want]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(&self.path, e)),
            };
            decoder.push(&buf[..n]);
        };
        match codec::decode_response(&body)?.result {
            Outcome::Ok(reply) => Ok(reply),
            Outcome::Error(e) => Err(ClientError::Daemon(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket the user named gets no advice about starting the packaged daemon (udev,
    /// systemd): only that nothing listens there, and why.
    #[test]
    fn a_named_socket_with_nothing_behind_it_is_said_so() {
        let dir = std::env::temp_dir().join(format!("iwpmctl-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("nope.sock");
        let e = Client::connect(&missing).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ClientError::NothingListens { .. }), "{text}");
        assert_eq!(
            text,
            format!(
                "nothing listens at {}: there is no such socket",
                missing.display()
            )
        );
        // A socket file that nobody holds: refused.
        let stale = dir.join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let text = Client::connect(&stale).unwrap_err().to_string();
        assert!(text.contains("no daemon holds it"), "{text}");
        assert!(
            !text.contains("udev") && !text.contains("systemctl"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
