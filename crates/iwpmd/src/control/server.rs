//! The control socket's IO: a non-blocking Unix stream listener on the daemon's event loop,
//! its connections, and the framing. What a request *means* is answered in
//! `control.rs`; this module only moves bytes and enforces the limits that keep a
//! slow or hostile client from costing the loop anything:
//!
//! * the caller is checked with `SO_PEERCRED` at accept: root or the daemon's own uid,
//!   anyone else gets a `permission_denied` answer and the connection is closed (the socket
//!   file is mode 0600 too, so this is the second fence);
//! * at most [`MAX_CLIENTS`] connections; one more is told `busy` and closed;
//! * a request is at most [`codec::MAX_REQUEST_LEN`] bytes, read only as far as the frame
//!   needs, one request per connection at a time (pipelined ones wait in the socket);
//! * every connection has a deadline: [`IDLE_TIMEOUT`] to send a request, [`WRITE_TIMEOUT`]
//!   to take its answer; past it, it is closed;
//! * every read and write is non-blocking, so a client that stops reading only delays its
//!   own answer (held in memory until its deadline).

use std::collections::HashMap;
use std::fs::{DirBuilder, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use iwpm_control::codec::{self, CodecError, FrameDecoder};
use iwpm_control::{ErrorKind, Request, Response};
use mio::event::Event;
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Registry, Token};

use iwpm_core::RateLimit;

/// Tokens from here on belong to the control socket (the listener, then connections).
pub(crate) const TOKEN_BASE: usize = 1 << 20;
const LISTENER: Token = Token(TOKEN_BASE);
/// Most control connections at once.
pub(crate) const MAX_CLIENTS: usize = 16;
/// How long a connection may stay without sending a whole request.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to read its answer.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request may wait for its answer inside the daemon (probes).
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Names one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConnId(usize);

/// Why the control socket could not be opened. Each names the path: the daemon runs
/// without a control socket then, and the operator must be able to tell why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlSocketError {
    /// A socket of ours at the path answers: another daemon uses it.
    #[error("{0} is in use: another running iwpmd listens there (left alone)")]
    InUse(PathBuf),
    /// The path exists and is not a socket (a file, a directory, a symbolic link).
    #[error("{path} exists and is {kind}, not a socket (left alone; remove it or choose another --control-socket)")]
    NotASocket {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// A socket at the path belongs to someone else: it was not made by a daemon of ours,
    /// so it is neither replaced (it may be another user's) nor trusted.
    #[error("{path} is a socket owned by uid {owner}, not by this daemon's uid {ours} (left alone; remove it or choose another --control-socket)")]
    NotOurs {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        ours: u32,
    },
    /// Creating the directory, binding or setting permissions failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The step.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// What a path holds, for [`ControlSocketError::NotASocket`].
fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Clears the way for binding at `path`: nothing there, or a stale socket of ours (owned by
/// `ours`, nobody accepting: `ECONNREFUSED`), which is removed. Anything else is refused
/// with the reason; nothing that is not ours is ever removed or connected to.
fn clear_path(path: &Path, ours: u32) -> Result<(), ControlSocketError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("cannot inspect", path)(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(ControlSocketError::NotASocket {
            path: path.to_owned(),
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.uid() != ours {
        return Err(ControlSocketError::NotOurs {
            path: path.to_owned(),
            owner: meta.uid(),
            ours,
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(ControlSocketError::InUse(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing a stale control socket (nobody listens on it)");
            std::fs::remove_file(path).map_err(io_err("cannot remove stale", path))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("cannot probe the existing socket", path)(e)),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Waiting for (the rest of) a request.
    Reading,
    /// The request is with the shell (a probe in flight).
    Answering,
    /// The answer is being written.
    Writing,
}

#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    decoder: FrameDecoder,
    out: Vec<u8>,
    written: usize,
    state: State,
    deadline: Instant,
    close_when_written: bool,
}

/// The listener and its connections.
#[derive(Debug)]
pub(crate) struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    conns: HashMap<usize, Conn>,
    next_id: usize,
    own_uid: u32,
    warn: RateLimit,
    /// When the server (and so the daemon's loop) started.
    pub(crate) started: Instant,
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> ControlSocketError + 'a {
    move |source| ControlSocketError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

impl ControlServer {
    /// Binds the socket at `path` (mode 0600; its directory is created 0755 if missing). A
    /// stale socket of ours (nobody answers on it) is replaced; a live one, a socket of
    /// another user or anything that is not a socket is left alone and refused.
    pub(crate) fn bind(path: &Path, registry: &Registry) -> Result<Self, ControlSocketError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(dir)
                    .map_err(io_err("cannot create", dir))?;
            }
        }
        let own_uid = rustix::process::geteuid().as_raw();
        clear_path(path, own_uid)?;
        let mut listener = UnixListener::bind(path).map_err(io_err("cannot bind", path))?;
        std::fs::set_permissions(path, Permissions::from_mode(0o600))
            .map_err(io_err("cannot chmod", path))?;
        registry
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_err("cannot poll", path))?;
        Ok(ControlServer {
            listener,
            path: path.to_owned(),
            conns: HashMap::new(),
            next_id: 0,
            own_uid,
            warn: RateLimit::new(Duration::from_secs(10), 5),
            started: Instant::now(),
        })
    }

    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Connections open now.
    pub(crate) fn clients(&self) -> usize {
        self.conns.len()
    }

    /// True if `token` is the control socket's.
    pub(crate) fn owns(token: Token) -> bool {
        token.0 >= TOKEN_BASE
    }

    /// Handles readiness of one of our tokens; returns the requests that are now complete.
    pub(crate) fn handle_event(
        &mut self,
        registry: &Registry,
        event: &Event,
    ) -> Vec<(ConnId, Request)> {
        let now = Instant::now();
        let mut requests = Vec::new();
        if event.token() == LISTENER {
            self.accept_all(registry, now);
            return requests;
        }
        let id = event.token().0 - TOKEN_BASE - 1;
        if event.is_writable() || event.is_write_closed() {
            self.flush(registry, id, now);
        }
        if let Some(req) = self.read(registry, id, now) {
            requests.push((ConnId(id), req));
        }
        requests
    }

    fn accept_all(&mut self, registry: &Registry, now: Instant) {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if let Some(suppressed) = self.warn.allow(now) {
                        tracing::warn!(error = %e, suppressed, "control socket accept failed");
                    }
                    return;
                }
            };
            let refusal = match rustix::net::sockopt::socket_peercred(&stream) {
                Ok(cred) if cred.uid.is_root() || cred.uid.as_raw() == self.own_uid => None,
                Ok(cred) => Some((
                    ErrorKind::PermissionDenied,
                    format!(
                        "uid {} may not use the control socket (only root or uid {})",
                        cred.uid.as_raw(),
                        self.own_uid
                    ),
                    Some(cred.pid.as_raw_nonzero().get()),
                )),
                Err(e) => Some((
                    ErrorKind::PermissionDenied,
                    format!("cannot identify the caller: {e}"),
                    None,
                )),
            };
            let refusal = refusal.or_else(|| {
                (self.conns.len() >= MAX_CLIENTS).then(|| {
                    (
                        ErrorKind::Busy,
                        format!("{MAX_CLIENTS} control clients already connected"),
                        None,
                    )
                })
            });
            if let Some((kind, message, pid)) = refusal {
                if let Some(suppressed) = self.warn.allow(now) {
                    // `pid` is recorded only when known (an `Option` field).
                    tracing::warn!(pid, suppressed, "control connection refused: {message}");
                }
                // A fresh socket's send buffer is empty: this small write does not block.
                let _ = stream.write_all(&codec::encode_frame(&Response::error(kind, message)));
                let _ = stream.shutdown(std::net::Shutdown::Both);
                continue;
            }
            let id = self.free_id();
            let token = Token(TOKEN_BASE + 1 + id);
            if let Err(e) =
                registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            {
                tracing::warn!(error = %e, "cannot poll a control connection");
                continue;
            }
            self.conns.insert(
                id,
                Conn {
                    stream,
                    decoder: FrameDecoder::new(codec::MAX_REQUEST_LEN),
                    out: Vec::new(),
                    written: 0,
                    state: State::Reading,
                    deadline: now + IDLE_TIMEOUT,
                    close_when_written: false,
                },
            );
        }
    }

    fn free_id(&mut self) -> usize {
        loop {
            let id = self.next_id;
            self.next_id = (self.next_id + 1) % (1 << 20);
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Reads what the connection's current request still needs; a whole request moves it
    /// to `Answering`.
    fn read(&mut self, registry: &Registry, id: usize, now: Instant) -> Option<Request> {
        let conn = self.conns.get_mut(&id)?;
        let mut buf = [0u8; 4096];
        loop {
            if conn.state != State::Reading {
                return None;
            }
            match conn.decoder.next_body() {
                Ok(Some(body)) => match codec::decode_request(&body) {
                    Ok(req) => {
                        conn.state = State::Answering;
                        conn.deadline = now + ANSWER_TIMEOUT;
                        return Some(req);
                    }
                    Err(e) => {
                        self.refuse(registry, id, &e, now);
                        return None;
                    }
                },
                Ok(None) => {}
                Err(e) => {
                    self.refuse(registry, id, &e, now);
                    return None;
                }
            }
            let want = conn.decoder.wanted().min(buf.len());
            match conn.stream.read(&mut buf[..want]) {
                Ok(0) => {
                    self.close(registry, id);
                    return None;
                }
                Ok(n) => conn.decoder.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(registry, id);
                    return None;
                }
            }
        }
    }

    /// Answers a bad frame with its typed error and closes after the write.
    fn refuse(&mut self, registry: &Registry, id: usize, e: &CodecError, now: Instant) {
        let kind = match e {
            CodecError::TooLarge { .. } => ErrorKind::TooLarge,
            CodecError::Version { .. } => ErrorKind::UnsupportedVersion,
            CodecError::Empty | CodecError::Json(_) => ErrorKind::BadRequest,
        };
        if let Some(suppressed) = self.warn.allow(now) {
            tracing::warn!(suppressed, "bad control request: {e}");
        }
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.close_when_written = true;
        }
        self.respond_at(
            registry,
            ConnId(id),
            &Response::error(kind, e.to_string()),
            now,
        );
    }

    /// Queues the answer to the connection's request and starts writing it.
    pub(crate) fn respond(&mut self, registry: &Registry, conn: ConnId, response: &Response) {
        self.respond_at(registry, conn, response, Instant::now());
    }

    fn respond_at(&mut self, registry: &Registry, conn: ConnId, response: &Response, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn.0) else {
            return; // the client left meanwhile
        };
        c.out = codec::encode_frame(response);
        c.written = 0;
        c.state = State::Writing;
        c.deadline = now + WRITE_TIMEOUT;
        self.flush(registry, conn.0, now);
    }

    fn flush(&mut self, registry: &Registry, id: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.state != State::Writing {
            return;
        }
        while conn.written < conn.out.len() {
            match conn.stream.write(&conn.out[conn.written..]) {
                Ok(0) => {
                    self.close(registry, id);
                    return;
                }
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(registry, id);
                    return;
                }
            }
        }
        if conn.close_when_written {
            self.close(registry, id);
            return;
        }
        conn.out = Vec::new();
        conn.state = State::Reading;
        conn.deadline = now + IDLE_TIMEOUT;
    }

    /// After an answer went out the connection may already hold its next request.
    /// Whether any client is connected (else a loop turn has nothing to look at here).
    pub(crate) fn has_connections(&self) -> bool {
        !self.conns.is_empty()
    }

    pub(crate) fn next_requests(&mut self, registry: &Registry) -> Vec<(ConnId, Request)> {
        let now = Instant::now();
        let ready: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.state == State::Reading && c.decoder.buffered() > 0)
            .map(|(id, _)| *id)
            .collect();
        ready
            .into_iter()
            .filter_map(|id| self.read(registry, id, now).map(|r| (ConnId(id), r)))
            .collect()
    }

    /// Closes connections past their deadline.
    pub(crate) fn expire(&mut self, registry: &Registry, now: Instant) {
        let late: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| now >= c.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            tracing::debug!(conn = id, "control connection timed out");
            self.close(registry, id);
        }
    }

    /// The earliest connection deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.conns.values().map(|c| c.deadline).min()
    }

    fn close(&mut self, registry: &Registry, id: usize) {
        if let Some(mut conn) = self.conns.remove(&id) {
            let _ = registry.deregister(&mut conn.stream);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("iwpmd-ctl-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn bind_creates_the_directory_and_a_private_socket_and_removes_it_on_drop() {
        let dir = scratch("bind");
        let path = dir.join("sub/control.sock");
        let poll = mio::Poll::new().unwrap();
        let server = ControlServer::bind(&path, poll.registry()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
            0o755
        );
        // A live socket is not taken over.
        let poll2 = mio::Poll::new().unwrap();
        assert!(matches!(
            ControlServer::bind(&path, poll2.registry()),
            Err(ControlSocketError::InUse(_))
        ));
        drop(server);
        assert!(!path.exists(), "socket file left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_regular_file_is_not() {
        let dir = scratch("stale");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("control.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let poll = mio::Poll::new().unwrap();
        let server = ControlServer::bind(&path, poll.registry()).unwrap();
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(server);
        std::fs::write(&path, b"not a socket").unwrap();
        let err = ControlServer::bind(&path, poll.registry()).unwrap_err();
        assert!(
            matches!(
                err,
                ControlSocketError::NotASocket {
                    kind: "a regular file",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Step 9 item 6 (planted `PATH.control`): a socket of another user is refused, named,
    /// and left in place, whether or not something listens on it; the old code removed a
    /// silent one and bound over it, and took a listening one for "another iwpmd".
    #[test]
    #[cfg_attr(not_root, ignore = "needs root (a socket owned by another uid)")]
    fn a_socket_of_another_user_is_refused_and_left_alone() {
        if !rustix::process::geteuid().is_root() {
            iwpm_testkit::host::say_skipped(
                "a_socket_of_another_user_is_refused_and_left_alone",
                "needs root to plant a socket owned by another uid",
            );
            return;
        }
        const NOBODY: u32 = 65534;
        let dir = scratch("planted");
        std::fs::create_dir_all(&dir).unwrap();
        let poll = mio::Poll::new().unwrap();
        for live in [false, true] {
            let path = dir.join(format!("control-{live}.sock"));
            let planted = std::os::unix::net::UnixListener::bind(&path).unwrap();
            std::os::unix::fs::chown(&path, Some(NOBODY), None).unwrap();
            let planted = live.then_some(planted);
            let err = ControlServer::bind(&path, poll.registry()).unwrap_err();
            assert!(
                matches!(err, ControlSocketError::NotOurs { owner: NOBODY, .. }),
                "live={live}: {err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains("uid 65534"), "{text}");
            assert_eq!(std::fs::metadata(&path).unwrap().uid(), NOBODY, "removed");
            if let Some(l) = planted {
                l.set_nonblocking(true).unwrap();
                assert!(l.accept().is_err(), "we connected to a socket not ours");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Step 9 item 6 (planted `PATH.control`): a symbolic link (even to a stale socket of
    /// ours) and a directory are refused, named, and left alone; a live socket of ours is
    /// reported as a running daemon.
    #[test]
    fn links_directories_and_live_sockets_are_refused_with_the_reason() {
        let dir = scratch("kinds");
        std::fs::create_dir_all(&dir).unwrap();
        let poll = mio::Poll::new().unwrap();
        let target = dir.join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&target).unwrap());
        let link = dir.join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = ControlServer::bind(&link, poll.registry()).unwrap_err();
        assert!(
            matches!(
                err,
                ControlSocketError::NotASocket {
                    kind: "a symbolic link",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(target.exists(), "the link's target was removed");
        let sub = dir.join("sub.sock");
        std::fs::create_dir(&sub).unwrap();
        let err = ControlServer::bind(&sub, poll.registry()).unwrap_err();
        assert!(
            matches!(
                err,
                ControlSocketError::NotASocket {
                    kind: "a directory",
                    ..
                }
            ),
            "{err:?}"
        );
        let live = dir.join("live.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let err = ControlServer::bind(&live, poll.registry()).unwrap_err();
        assert!(matches!(err, ControlSocketError::InUse(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("another running iwpmd listens there"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
