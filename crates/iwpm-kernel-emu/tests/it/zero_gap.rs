//! Restarting the real `iwpmd` under load with more mappings than the kernel can replay
//! (~227 per client), against the emulated kernel:
//!
//! * `fd_store_restart_keeps_every_port_bound`: this test process plays systemd — a Unix
//!   datagram notify socket that records the messages and keeps the descriptors passed
//!   with `FDSTORE=1` (dropping them on `FDSTOREREMOVE=1`), and starts the next daemon with
//!   them as fds 3.. (`LISTEN_FDS`, `LISTEN_FDNAMES`, `LISTEN_PID`). While the daemon is
//!   down a probe tries to bind every mapped port: it must never succeed. Afterwards: no
//!   mapping lost, reference counts equal the kernel's, the inherited sockets are the ones
//!   held (no re-bind), and a connection to a listener beyond the replay limit is mapped.
//! * `state_file_restart_restores_all_mappings`: no service manager; the state file alone
//!   restores every mapping (with its count) and the port gap is measured and printed.
//!
//! Descriptors reach the next daemon through `bash -c 'exec 3<&N ...; exec iwpmd'`: the
//! shell does the `dup2`s, so the test needs no `pre_exec` (unsafe).
//!
//! The windows in which a restart's mapped ports are free or its descriptors inheritable
//! are kept from every other real daemon of this test binary ([`crate::REAL_DAEMONS`]);
//! the two long waits for the replay window run side by side.
//!
//! Figures: `cargo test -p iwpm-kernel-emu --test it -- zero_gap:: --nocapture`
//! (`IWPM_ZEROGAP_MAPPINGS=N` changes the number of mappings, default 320;
//! `IWPM_ZEROGAP_NO_PORT_MAP=1` makes the host siw-like, for tables larger than the
//! descriptor limit allows: no ports are then reserved, the FD-store test does not apply).

use std::collections::{BTreeMap, HashMap};
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{
    AcceptMode, EmulatedHost, Fabric, FabricConfig, HostConfig, Listener, MapOutcome, PortMapMode,
};
use iwpm_testkit::daemon::{self as testkit, find_iwpmd, iwpmd_args};
use iwpm_testkit::fs::sock_path;
use iwpm_testkit::net::free_udp_port_on;
use rustix::io::{fcntl_dupfd_cloexec, fcntl_setfd, FdFlags};
use rustix::net::{
    recvmsg, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketType,
};

const T: Duration = Duration::from_secs(20);

fn port_mapped() -> bool {
    std::env::var_os("IWPM_ZEROGAP_NO_PORT_MAP").is_none()
}

fn mappings_wanted() -> usize {
    std::env::var("IWPM_ZEROGAP_MAPPINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(320)
}

/// What the fake service manager saw.
#[derive(Default)]
struct Manager {
    /// Stored descriptors by name, in store order.
    store: BTreeMap<u64, (String, OwnedFd)>,
    next: u64,
    messages: Vec<String>,
}

impl Manager {
    fn names(&self) -> Vec<String> {
        self.store.values().map(|(n, _)| n.clone()).collect()
    }
}

/// The fake systemd: a notify socket served by a thread.
struct FakeSystemd {
    path: PathBuf,
    state: Arc<Mutex<Manager>>,
    stop: Arc<AtomicBool>,
}

impl FakeSystemd {
    fn start(dir: &Path) -> FakeSystemd {
        let path = dir.join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let state = Arc::new(Mutex::new(Manager::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while !sp.load(Ordering::Relaxed) {
                let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(16))];
                let mut control = RecvAncillaryBuffer::new(&mut space);
                let mut iov = [IoSliceMut::new(&mut buf)];
                let Ok(r) = recvmsg(&sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) else {
                    continue;
                };
                let fds: Vec<OwnedFd> = control
                    .drain()
                    .flat_map(|m| match m {
                        RecvAncillaryMessage::ScmRights(f) => f.collect(),
                        _ => Vec::new(),
                    })
                    .collect();
                let text = String::from_utf8_lossy(&buf[..r.bytes]).into_owned();
                let mut m = st.lock().unwrap();
                m.apply(&text, fds);
                m.messages.push(text);
            }
        });
        FakeSystemd { path, state, stop }
    }

    /// Copies of every stored descriptor with its name, as the next start receives them.
    fn kept_fds(&self) -> Vec<(String, OwnedFd)> {
        let m = self.state.lock().unwrap();
        m.store
            .values()
            .map(|(name, fd)| (name.clone(), fd.try_clone().unwrap()))
            .collect()
    }

    fn stored(&self) -> usize {
        self.state.lock().unwrap().store.len()
    }

    fn saw(&self, line: &str) -> bool {
        let m = self.state.lock().unwrap();
        m.messages.iter().any(|t| t.lines().any(|l| l == line))
    }

    fn saw_prefix(&self, prefix: &str) -> Vec<String> {
        let m = self.state.lock().unwrap();
        m.messages
            .iter()
            .flat_map(|t| t.lines())
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    fn clear_messages(&self) {
        self.state.lock().unwrap().messages.clear();
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Manager {
    /// systemd's rules: FDSTORE=1 keeps the passed descriptors under FDNAME (default
    /// "stored"); FDSTOREREMOVE=1 closes every descriptor with that name.
    fn apply(&mut self, text: &str, fds: Vec<OwnedFd>) {
        let has = |l: &str| text.lines().any(|x| x == l);
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("FDNAME="))
            .unwrap_or("stored")
            .to_owned();
        if has("FDSTORE=1") {
            // Unless FDPOLL=0, systemd drops descriptors that poll POLLHUP or POLLERR, as a
            // bound, unconnected TCP socket does.
            let watched = !has("FDPOLL=0");
            for fd in fds {
                if watched && hangs_up(&fd) {
                    continue;
                }
                self.next += 1;
                self.store.insert(self.next, (name.clone(), fd));
            }
        } else if has("FDSTOREREMOVE=1") {
            self.store.retain(|_, (n, _)| *n != name);
        }
    }
}

fn hangs_up(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero))
        .is_ok_and(|n| n > 0 && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR))
}

/// A daemon started through bash (so stored descriptors can be laid out at 3..).
struct Daemon(testkit::Daemon);

impl Daemon {
    fn spawn(
        dir: &Path,
        host: &EmulatedHost,
        peer_port: u16,
        state_file: Option<&Path>,
        notify: Option<&Path>,
        pass: &[(String, OwnedFd)],
    ) -> Daemon {
        // Move the descriptors above the target range, then clear CLOEXEC on the copies
        // only for the spawn; bash puts them at 3.. and closes the copies.
        let base = 3 + pass.len() + 64;
        let high: Vec<OwnedFd> = pass
            .iter()
            .map(|(_, fd)| fcntl_dupfd_cloexec(fd, base as i32).unwrap())
            .collect();
        let mut script = String::new();
        for (i, fd) in high.iter().enumerate() {
            fcntl_setfd(fd, FdFlags::empty()).unwrap();
            script.push_str(&format!(
                "exec {}<&{} {}<&-\n",
                3 + i,
                fd.as_raw_fd(),
                fd.as_raw_fd()
            ));
        }
        let names: Vec<&str> = pass.iter().map(|(n, _)| n.as_str()).collect();
        if !pass.is_empty() {
            script.push_str(&format!(
                "export LISTEN_PID=$$ LISTEN_FDS={} LISTEN_FDNAMES='{}'\n",
                pass.len(),
                names.join(":")
            ));
        }
        script.push_str("exec \"$@\" < /dev/null\n");
        // On standard input, not `bash -c` (one argument may not exceed 128 KiB) nor a
        // script file (bash keeps that open on fd 255, inside the range for > 252 fds).
        std::fs::write(dir.join("launch.sh"), &script).unwrap();
        let mut cmd = Command::new("bash");
        cmd.args(["-s", "--"])
            .arg(find_iwpmd())
            .args(iwpmd_args(
                host.kernel_socket_path(),
                Ipv4Addr::LOCALHOST,
                peer_port,
            ))
            .args(match state_file {
                Some(p) => vec!["--state-file".into(), p.as_os_str().to_owned()],
                None => vec![std::ffi::OsString::from("--no-state-file")],
            })
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match notify {
            Some(p) => {
                cmd.arg("--systemd")
                    .env("NOTIFY_SOCKET", p)
                    .env("FDSTORE", "100000")
                    .env("WATCHDOG_USEC", "400000");
            }
            None => {
                cmd.arg("--foreground").env_remove("NOTIFY_SOCKET");
            }
        }
        let mut child = cmd.spawn().expect("spawn bash/iwpmd");
        drop(high);
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(script.as_bytes()).unwrap();
        }
        Daemon(testkit::Daemon::adopt(child, peer_port, "test", false).unwrap())
    }

    fn log(&self) -> String {
        self.0.stderr.lines_from(0).join("\n")
    }

    /// When a log line containing `needle` appeared.
    fn wait_line(&self, needle: &str, timeout: Duration) -> Option<Instant> {
        self.0.stderr.arrival_of(needle, timeout)
    }

    /// SIGTERM, wait for exit 0; returns when the process was gone.
    fn terminate(&mut self) -> Instant {
        self.0.signal(rustix::process::Signal::TERM);
        let status = self.0.child.wait().unwrap();
        let gone = Instant::now();
        assert!(status.success(), "iwpmd exit {status:?}:\n{}", self.log());
        gone
    }
}

impl Drop for Daemon {
    /// The handle kills and reaps what is still running.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- iwpmd stderr ---\n{}", self.log());
        }
    }
}

/// True if a plain TCP socket (no SO_REUSEADDR) can bind `0.0.0.0:port` — the port is
/// free. The socket is closed at once.
fn port_free(port: u16) -> bool {
    let s = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    rustix::net::bind(
        &s,
        &SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
    )
    .is_ok()
}

/// Binds every port over and over until stopped; counts the binds that succeeded.
struct Probe {
    stop: Arc<AtomicBool>,
    free_seen: Arc<AtomicU64>,
    rounds: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    fn start(ports: Vec<u16>) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let free_seen = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicU64::new(0));
        let (s, f, r) = (stop.clone(), free_seen.clone(), rounds.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                for p in &ports {
                    if port_free(*p) {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                }
                r.fetch_add(1, Ordering::Relaxed);
            }
        });
        Probe {
            stop,
            free_seen,
            rounds,
            thread: Some(thread),
        }
    }

    /// (binds that succeeded, probe rounds over all ports).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (
            self.free_seen.load(Ordering::Relaxed),
            self.rounds.load(Ordering::Relaxed),
        )
    }
}

/// Lets the test process hold a descriptor per mapping (and the copies made to pass them).
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    l.current = l.maximum;
    let _ = setrlimit(Resource::Nofile, l);
}

/// The mappings of a state file: (local, mapped) -> refcount.
fn state_file_table(path: &Path) -> HashMap<(String, String), u32> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w.first() == Some(&"m"))
                .then(|| ((w[4].to_owned(), w[5].to_owned()), w[2].parse().unwrap()))
        })
        .collect()
}

/// The kernel's view as the daemon should hold it: one reference per mapinfo record.
fn kernel_table(host: &EmulatedHost) -> HashMap<(String, String), u32> {
    let mut t = HashMap::new();
    for e in host.kernel_view().mapinfo {
        let local = e.local.to_socket_addr().unwrap().to_string();
        let mapped = e.mapped.to_socket_addr().unwrap().to_string();
        *t.entry((local, mapped)).or_insert(0) += 1;
    }
    t
}

struct Setup {
    _fabric: Fabric,
    host: EmulatedHost,
    dir: PathBuf,
    peer_port: u16,
    state_file: PathBuf,
}

/// What the daemons of a test leave behind: the scratch directory, and the control socket
/// beside the kernel socket (a daemon killed with SIGKILL cannot remove it).
impl Drop for Setup {
    fn drop(&mut self) {
        let mut control = self.host.kernel_socket_path().as_os_str().to_owned();
        control.push(".control");
        let _ = std::fs::remove_file(control);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup(name: &str) -> Setup {
    raise_nofile();
    let fabric = Fabric::with_config(FabricConfig {
        wire_delay: Duration::from_millis(1),
    });
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let host = fabric
        .add_host(
            HostConfig::new(name, ip, sock_path(name)).with_mode(if port_mapped() {
                PortMapMode::PortMapped
            } else {
                PortMapMode::NoPortMap
            }),
        )
        .unwrap();
    let dir = std::env::temp_dir().join(format!("iwpm-zerogap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state_file = dir.join("state");
    Setup {
        _fabric: fabric,
        host,
        peer_port: free_udp_port_on(&[Ipv4Addr::LOCALHOST]),
        state_file,
        dir,
    }
}

/// `n` listeners on distinct local ports (plus 10 made and destroyed, so ports are freed
/// under load too); returns them with the time it took.
fn listen_many(s: &Setup, d: &Daemon, n: usize) -> Vec<Listener> {
    assert!(s.host.wait_for_daemon(T), "{}", d.log());
    assert!(s.host.wait_for(T, |v| v.abi_version == 4), "{}", d.log());
    let started = Instant::now();
    let mut out = Vec::with_capacity(n);
    let mut port = 10000u16;
    let mut made = 0usize;
    while out.len() < n {
        port += 1;
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let Ok(l) = s.host.listen(addr, AcceptMode::Auto, None) else {
            continue;
        };
        assert_eq!(l.info.mapping, MapOutcome::Mapped, "{}", d.log());
        made += 1;
        if made % 32 == 5 && made < 330 {
            l.id.destroy().unwrap();
            continue;
        }
        out.push(l);
    }
    eprintln!("{n} listeners mapped in {:?}", started.elapsed());
    out
}

fn mapped_ports(ls: &[Listener]) -> Vec<u16> {
    ls.iter().map(|l| l.info.mapped_local.port()).collect()
}

/// Waits until the daemon wrote a state file matching the kernel's table.
fn wait_state_matches_kernel(s: &Setup, d: &Daemon) -> HashMap<(String, String), u32> {
    let deadline = Instant::now() + T;
    loop {
        let k = kernel_table(&s.host);
        if s.state_file.exists() && state_file_table(&s.state_file) == k {
            return k;
        }
        assert!(
            Instant::now() < deadline,
            "state file never matched the kernel:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fd_store_restart_keeps_every_port_bound() {
    let shared = crate::real_daemons_shared();
    if !port_mapped() {
        eprintln!("IWPM_ZEROGAP_NO_PORT_MAP: no ports are reserved, nothing to store; skipped");
        return;
    }
    let n = mappings_wanted();
    let s = setup("zgfd");
    let sd = FakeSystemd::start(&s.dir);
    let mut first = Daemon::spawn(
        &s.dir,
        &s.host,
        s.peer_port,
        Some(&s.state_file),
        Some(&sd.path),
        &[],
    );
    let listeners = listen_many(&s, &first, n);
    let ports = mapped_ports(&listeners);
    // Every held port is in the store, the freed ones were taken out.
    let stored_all = stored_becomes(&sd, n, Duration::from_secs(10));
    assert!(
        stored_all,
        "store holds {} of {n}:\n{}",
        sd.stored(),
        first.log()
    );
    let before = wait_state_matches_kernel(&s, &first);
    assert_eq!(before.len(), n);
    assert!(sd.saw("READY=1"));
    let status = format!("STATUS=serving {n} mappings");
    assert!(
        (0..400).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            sd.saw(&status)
        }),
        "no {status:?}: {:?}",
        sd.saw_prefix("STATUS=")
    );
    assert!(
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            sd.saw("WATCHDOG=1")
        }),
        "no watchdog ping at half of WATCHDOG_USEC"
    );

    let probe = Probe::start(ports.clone());
    let t_stop = Instant::now();
    let gone = first.terminate();
    assert!(
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            sd.saw("STOPPING=1")
        }),
        "no STOPPING=1"
    );
    sd.clear_messages();
    let pass = sd.kept_fds();
    assert_eq!(
        pass.len(),
        n,
        "names {:?}",
        sd.state.lock().unwrap().names()
    );
    let t_spawn = Instant::now();
    drop(shared);
    // The stored sockets are inheritable while the next daemon is spawned.
    let alone = crate::real_daemons_alone();
    let second = Daemon::spawn(
        &s.dir,
        &s.host,
        s.peer_port,
        Some(&s.state_file),
        Some(&sd.path),
        &pass,
    );
    drop(alone);
    drop(pass);
    let shared = crate::real_daemons_shared();
    let restored = second
        .wait_line("mappings restored from the state file", T)
        .unwrap_or_else(|| panic!("no restore:\n{}", second.log()));
    let ready = (0..2000).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        sd.saw("READY=1")
    });
    assert!(ready, "{}", second.log());
    drop(shared);
    // The replay of more than ~227 mappings is cut short (no MAPINFO_NUM): the restored
    // mappings are settled when the replay window closes. Only waiting (no lock): the
    // other restart may wait for its own window meanwhile.
    let settled = second
        .wait_line("restored mappings settled", T)
        .unwrap_or_else(|| panic!("never settled:\n{}", second.log()));
    let (free_seen, rounds) = probe.finish();
    let _shared = crate::real_daemons_shared();
    let k = s.host.stats().kernel;
    eprintln!(
        "fd store restart, {n} mappings: SIGTERM->exit {:?}, spawn->restored {:?}, \
         spawn->settled {:?}; probe: {rounds} rounds over {n} ports, {free_seen} binds \
         succeeded; kernel replayed {} records, {} replays aborted",
        gone - t_stop,
        restored - t_spawn,
        settled - t_spawn,
        k.mapinfo_records_sent,
        k.replays_aborted
    );
    assert!(rounds > 0);
    assert_eq!(free_seen, 0, "a mapped port was free during the restart");
    assert!(
        second.log().contains("inherited_ports=") && !second.log().contains("were released"),
        "{}",
        second.log()
    );
    // Nothing lost, counts as the kernel's, and the ports held.
    let mut second = second;
    for p in &ports {
        assert!(!port_free(*p), "port {p} free after the restart");
    }
    let last = listeners.last().unwrap();
    let c = s
        .host
        .connect(None, last.info.local)
        .expect("connect to the last listener");
    assert_eq!(c.info.mapping, MapOutcome::Mapped, "{}", second.log());
    assert_eq!(c.info.wire_remote, last.info.mapped_local);
    c.id.destroy().unwrap();
    // The connection's own mapping came and went: the store is back to the listeners.
    let back = stored_becomes(&sd, n, Duration::from_secs(2));
    assert!(
        back,
        "store holds {} after the restart, want {n}",
        sd.stored()
    );
    second.terminate();
    let after = state_file_table(&s.state_file);
    assert_eq!(
        after, before,
        "mappings or counts changed across the restart"
    );
    assert_eq!(after, kernel_table(&s.host));
    if n > 227 {
        assert!(s.host.kernel_view().mapinfo.len() > 227);
    }
    drop(listeners);
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[test]
fn state_file_restart_restores_all_mappings() {
    let shared = crate::real_daemons_shared();
    let n = mappings_wanted();
    let s = setup("zgsf");
    let mut first = Daemon::spawn(&s.dir, &s.host, s.peer_port, Some(&s.state_file), None, &[]);
    let listeners = listen_many(&s, &first, n);
    let ports = mapped_ports(&listeners);
    let before = wait_state_matches_kernel(&s, &first);
    drop(shared);
    // The mapped ports are free from the first daemon's exit until the second has bound
    // them again.
    let alone = crate::real_daemons_alone();
    let gone = first.terminate();
    let second = Daemon::spawn(&s.dir, &s.host, s.peer_port, Some(&s.state_file), None, &[]);
    let restored = second
        .wait_line("mappings restored from the state file", T)
        .unwrap_or_else(|| panic!("no restore:\n{}", second.log()));
    drop(alone);
    let line = second.log();
    let took = line
        .lines()
        .find(|l| l.contains("mappings restored from the state file"))
        .unwrap_or_default()
        .to_owned();
    assert!(took.contains(&format!("restored={n}")), "{took}");
    // Only waiting (no lock), as the other restart may be meanwhile.
    second
        .wait_line("restored mappings settled", T)
        .unwrap_or_else(|| panic!("never settled:\n{}", second.log()));
    let _shared = crate::real_daemons_shared();
    eprintln!(
        "state file restart, {n} mappings: ports unbound from daemon exit to restore done: \
         {:?} (upper bound, includes process start); {took}",
        restored - gone
    );
    if port_mapped() {
        for p in &ports {
            assert!(!port_free(*p), "port {p} free after the restart");
        }
    }
    let mut second = second;
    second.terminate();
    let after = state_file_table(&s.state_file);
    assert_eq!(after, before);
    assert_eq!(after, kernel_table(&s.host));
    drop(listeners);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Without a state file the FD store alone keeps the ports: the kernel's replay claims the
/// stored sockets (no new bind), and a socket whose mapping the kernel dropped while the
/// daemon was down is closed once the replay is over, and taken out of the store.
#[test]
fn fd_store_alone_hands_stored_sockets_to_the_replay() {
    let _alone = crate::real_daemons_alone();
    if !port_mapped() {
        return;
    }
    let n = 40;
    let s = setup("zgrp");
    let sd = FakeSystemd::start(&s.dir);
    let mut first = Daemon::spawn(&s.dir, &s.host, s.peer_port, None, Some(&sd.path), &[]);
    let mut listeners = listen_many(&s, &first, n);
    let stored_all = stored_becomes(&sd, n, Duration::from_secs(10));
    assert!(stored_all, "store holds {} of {n}", sd.stored());
    first.terminate();
    // While no daemon runs, one listener goes away: the kernel forgets its mapping.
    let gone = listeners.pop().unwrap();
    let gone_port = gone.info.mapped_local.port();
    gone.id.destroy().unwrap();
    assert!(!port_free(gone_port), "the store still holds it");
    let pass = sd.kept_fds();
    let second = Daemon::spawn(&s.dir, &s.host, s.peer_port, None, Some(&sd.path), &pass);
    drop(pass);
    assert!(
        second.wait_line("were released", T).is_some(),
        "the unclaimed socket was not released:\n{}",
        second.log()
    );
    let log = second.log();
    assert!(log.contains(&format!("inherited_ports={n}")), "{log}");
    assert!(
        !log.contains("port reservation failed"),
        "a replayed port was bound again:\n{log}"
    );
    let k = s.host.stats().kernel;
    assert_eq!(k.mapinfo_records_sent as usize, n - 1);
    for l in &listeners {
        assert!(!port_free(l.info.mapped_local.port()));
    }
    let released = (0..400).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        sd.stored() == n - 1
    });
    assert!(released, "store holds {}, want {}", sd.stored(), n - 1);
    assert!(
        port_free(gone_port),
        "the dropped mapping's port is free again"
    );
    drop(second);
    drop(listeners);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Whether the fake manager's store holds `n` descriptors within `wait` (polled every 5 ms).
fn stored_becomes(sd: &FakeSystemd, n: usize, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if sd.stored() == n {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
