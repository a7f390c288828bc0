//! One emulated host: an iWARP device, its kernel iwpm client, its rdma_cm ids, and the
//! thread that serves the kernel-link socket.
//!
//! Threads: the host's driver thread is the only reader of the socket. Each round it first
//! takes the fabric messages already due, then drains the socket, and then processes: every
//! daemon datagram, then the kernel's timeouts, then the fabric messages it took. So
//! anything the daemon sent before a causally later fabric event (a REMOTE_INFO before the
//! connection it announces) is seen first, as in the kernel where the daemon's `sendmsg`
//! runs the handler synchronously. User threads call into the host under its lock and may
//! send on the socket; they never read it.

mod id;
mod state;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use crate::cm::{CmError, EventChannel, ListenInfo, PortMapMode};
use crate::driver::{self, DaemonAddr, UnixLink};
use crate::fabric::FabricShared;
use crate::kernel::{
    KernelConfig, KernelIwpm, KernelStats, MapInfoEntry, Registration, RemoteInfoEntry, Violation,
    IWPM_NL_TIMEOUT,
};

pub use id::{AcceptMode, CmId, Connection, IdInfo, Listener};
pub(crate) use state::{FabricMsg, HostInner};

const SOCKET: Token = Token(0);
const WAKE: Token = Token(1);
/// Upper bound on how long the driver sleeps without checking its timers.
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// How to build a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// A label for logs and reports.
    pub name: String,
    /// The host's IP addresses (loopback addresses such as 127.0.0.2 when the daemon must
    /// reserve real ports on them).
    pub ips: Vec<IpAddr>,
    /// Where the emulator binds the kernel-link socket (`iwpmd --kernel unix:PATH`).
    pub kernel_socket_path: PathBuf,
    /// Hardware-like port mapping or siw-like `NO_PORT_MAP`.
    pub port_map_mode: PortMapMode,
    /// The kernel's per-request wait (10 s in Linux).
    pub request_timeout: Duration,
    /// ib device name sent in REG_PID.
    pub ibdev_name: String,
    /// Network interface name sent in REG_PID.
    pub if_name: String,
    /// Ephemeral range for emulated (unmapped) ports.
    pub ephemeral_ports: RangeInclusive<u16>,
    /// How long a synchronous connect waits for the peer's answer after mapping.
    pub connect_timeout: Duration,
}

impl HostConfig {
    /// A siw-like host with one address and Linux's timeouts.
    pub fn new(name: &str, ip: IpAddr, kernel_socket_path: impl Into<PathBuf>) -> Self {
        HostConfig {
            name: name.to_string(),
            ips: vec![ip],
            kernel_socket_path: kernel_socket_path.into(),
            port_map_mode: PortMapMode::NoPortMap,
            request_timeout: IWPM_NL_TIMEOUT,
            ibdev_name: "siw0".into(),
            if_name: "lo".into(),
            ephemeral_ports: 20000..=29999,
            connect_timeout: Duration::from_secs(30),
        }
    }

    /// Sets the port-mapping mode.
    pub fn with_mode(mut self, mode: PortMapMode) -> Self {
        self.port_map_mode = mode;
        self
    }

    /// Sets the kernel request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// Why a host could not be created.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Binding the kernel-link socket failed.
    #[error("cannot bind the kernel socket at {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Setting up polling or the driver thread failed.
    #[error("cannot start the host driver: {0}")]
    Driver(std::io::Error),
    /// The config lists no IP address.
    #[error("host {0} has no IP address")]
    NoAddress(String),
    /// Another host already owns this IP.
    #[error("IP {0} already belongs to another host")]
    DuplicateIp(IpAddr),
    /// Another host already has this name.
    #[error("host name {0} already used")]
    DuplicateName(String),
}

/// Counters of the rdma_cm layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// Ids created (children included).
    pub ids_created: u64,
    /// Ids destroyed.
    pub ids_destroyed: u64,
    /// Listens that completed.
    pub listens: u64,
    /// Connects started (mapping begun).
    pub connects: u64,
    /// Active ids that reached Established.
    pub established_active: u64,
    /// Passive children that reached Established.
    pub established_passive: u64,
    /// Connect attempts rejected.
    pub rejected: u64,
    /// Connect attempts unreachable.
    pub unreachable: u64,
    /// Incoming connection requests refused for lack of a listener.
    pub refused_no_listener: u64,
    /// Disconnected events delivered.
    pub disconnected: u64,
}

/// Both layers' counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// The kernel iwpm client.
    pub kernel: KernelStats,
    /// The rdma_cm layer.
    pub cm: CmStats,
}

/// A snapshot of the emulated kernel's port-mapper state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelView {
    /// `iwpm_user_pid`.
    pub pid: i32,
    /// Registration of client 2.
    pub registration: Registration,
    /// ABI in force.
    pub abi_version: u16,
    /// `echo_nlmsg_seq`.
    pub echo_seq: u32,
    /// Last header seq used by the kernel.
    pub last_seq: u32,
    /// The mapinfo table.
    pub mapinfo: Vec<MapInfoEntry>,
    /// The remote-info table (unconsumed entries).
    pub remote_info: Vec<RemoteInfoEntry>,
    /// Requests waiting for a reply.
    pub pending_requests: usize,
    /// `iw_cm_map` calls not finished.
    pub maps_in_progress: usize,
    /// Where REG_PID goes.
    pub group_member: Option<DaemonAddr>,
}

/// A handle to an emulated host. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EmulatedHost {
    pub(crate) shared: Arc<HostShared>,
}

impl EmulatedHost {
    /// The host's name.
    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// The host's IP addresses.
    pub fn ips(&self) -> &[IpAddr] {
        &self.shared.config.ips
    }

    /// The kernel-link socket path to give the daemon.
    pub fn kernel_socket_path(&self) -> &Path {
        &self.shared.config.kernel_socket_path
    }

    /// The host's configuration.
    pub fn config(&self) -> &HostConfig {
        &self.shared.config
    }

    /// `rdma_create_id`: with a channel the id is asynchronous, without one synchronous.
    pub fn create_id(&self, channel: Option<&EventChannel>) -> CmId {
        self.shared.create_id(channel.map(EventChannel::sender))
    }

    /// Creates, binds and listens on `addr` (blocking for the port mapping, as
    /// `rdma_listen` does). Without a channel the listener is synchronous: take requests
    /// with [`CmId::get_request`].
    pub fn listen(
        &self,
        addr: SocketAddr,
        accept: AcceptMode,
        channel: Option<&EventChannel>,
    ) -> Result<Listener, CmError> {
        let id = self.create_id(channel);
        let result = id.bind_addr(addr).and_then(|_| match accept {
            AcceptMode::Manual => id.listen(),
            AcceptMode::Auto => id.listen_auto_accept(),
        });
        match result {
            Ok(info) => Ok(Listener { id, info }),
            Err(e) => {
                let _ = id.destroy();
                Err(e)
            }
        }
    }

    /// Resolves, maps and connects a synchronous id to `remote` from `local` (or a source
    /// address of the host), waiting until the peer accepts. On failure the id is
    /// destroyed (sending REMOVE_MAPPING if it was mapped).
    pub fn connect(
        &self,
        local: Option<SocketAddr>,
        remote: SocketAddr,
    ) -> Result<Connection, CmError> {
        let id = self.create_id(None);
        let result = id
            .resolve_addr(local, remote)
            .and_then(|_| id.resolve_route())
            .and_then(|_| id.connect());
        match result {
            Ok(Some(info)) => Ok(Connection { id, info }),
            Ok(None) => Err(CmError::NotSynchronous("connect")),
            Err(e) => {
                let _ = id.destroy();
                Err(e)
            }
        }
    }

    /// Both layers' counters.
    pub fn stats(&self) -> HostStats {
        let inner = self.shared.lock();
        HostStats {
            kernel: inner.kernel.stats().clone(),
            cm: inner.cm_stats.clone(),
        }
    }

    /// Every protocol deviation the kernel side saw.
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.lock().kernel.violations().to_vec()
    }

    /// A snapshot of the kernel's port-mapper state.
    pub fn kernel_view(&self) -> KernelView {
        let inner = self.shared.lock();
        let k = &inner.kernel;
        KernelView {
            pid: k.pid(),
            registration: k.registration(),
            abi_version: k.abi_version(),
            echo_seq: k.echo_seq(),
            last_seq: k.last_seq(),
            mapinfo: k.mapinfo().entries().to_vec(),
            remote_info: k.remote_info().entries().to_vec(),
            pending_requests: k.pending_requests(),
            maps_in_progress: k.maps_in_progress(),
            group_member: k.group_member().cloned(),
        }
    }

    /// Waits until `cond` holds for the kernel view, polling every 5 ms.
    pub fn wait_for(&self, timeout: Duration, cond: impl Fn(&KernelView) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if cond(&self.kernel_view()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until a daemon has announced itself (HELLO or MAPINFO seen).
    pub fn wait_for_daemon(&self, timeout: Duration) -> bool {
        self.wait_for(timeout, |v| v.pid > 0)
    }

    /// Stops the driver thread and removes the socket file. Ids stay readable but no
    /// longer progress; peers see [`crate::UnreachableReason::HostDown`] for new connects.
    pub fn stop(&self) {
        self.shared.stop();
    }
}

/// Everything a host shares between its handles, ids and driver thread.
pub(crate) struct HostShared {
    pub(crate) me: Weak<HostShared>,
    pub(crate) config: HostConfig,
    pub(crate) fabric: Weak<FabricShared>,
    inner: Mutex<HostInner>,
    socket: std::os::unix::net::UnixDatagram,
    waker: Waker,
    inbox: Mutex<VecDeque<(Instant, u64, FabricMsg)>>,
    inbox_seq: std::sync::atomic::AtomicU64,
    wire_delay: Duration,
    stopped: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for HostShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostShared")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl HostShared {
    /// Binds the socket and starts the driver thread.
    pub(crate) fn start(
        config: HostConfig,
        fabric: Weak<FabricShared>,
        wire_delay: Duration,
    ) -> Result<Arc<HostShared>, HostError> {
        let socket =
            driver::bind(&config.kernel_socket_path).map_err(|source| HostError::Bind {
                path: config.kernel_socket_path.clone(),
                source,
            })?;
        let poll = Poll::new().map_err(HostError::Driver)?;
        let waker = Waker::new(poll.registry(), WAKE).map_err(HostError::Driver)?;
        let mut registered =
            mio::net::UnixDatagram::from_std(socket.try_clone().map_err(HostError::Driver)?);
        poll.registry()
            .register(&mut registered, SOCKET, Interest::READABLE)
            .map_err(HostError::Driver)?;
        let kernel = KernelIwpm::new(KernelConfig {
            ibdev_name: config.ibdev_name.clone(),
            if_name: config.if_name.clone(),
            request_timeout: config.request_timeout,
            ..KernelConfig::default()
        });
        let inner = HostInner::new(kernel, config.ephemeral_ports.clone());
        let shared = Arc::new_cyclic(|me| HostShared {
            me: me.clone(),
            config,
            fabric,
            inner: Mutex::new(inner),
            socket,
            waker,
            inbox: Mutex::new(VecDeque::new()),
            inbox_seq: std::sync::atomic::AtomicU64::new(0),
            wire_delay,
            stopped: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let runner = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("iwpm-emu-{}", shared.config.name))
            .spawn(move || runner.run(poll, registered))
            .map_err(HostError::Driver)?;
        *shared.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
        Ok(shared)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HostInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn link(&self) -> UnixLink<'_> {
        UnixLink {
            socket: &self.socket,
            wait: self.config.request_timeout,
        }
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    pub(crate) fn owns_ip(&self, ip: IpAddr) -> bool {
        self.config.ips.contains(&ip)
    }

    /// Queues a fabric message for this host's driver thread.
    pub(crate) fn post(&self, msg: FabricMsg) {
        let due = Instant::now() + self.wire_delay;
        let seq = self.inbox_seq.fetch_add(1, Ordering::Relaxed);
        {
            let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            let pos = inbox.partition_point(|(d, s, _)| (*d, *s) <= (due, seq));
            inbox.insert(pos, (due, seq, msg));
        }
        if let Err(e) = self.waker.wake() {
            tracing::warn!(error = %e, "cannot wake the host driver");
        }
    }

    pub(crate) fn stop(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.waker.wake();
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        let _ = std::fs::remove_file(&self.config.kernel_socket_path);
    }

    fn run(self: Arc<Self>, mut poll: Poll, _registered: mio::net::UnixDatagram) {
        let mut events = Events::with_capacity(16);
        let mut buf = vec![0u8; 64 * 1024];
        while !self.is_stopped() {
            let timeout = self.next_wakeup(Instant::now());
            if let Err(e) = poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "host driver poll failed");
                    break;
                }
            }
            if self.is_stopped() {
                break;
            }
            self.pump(Instant::now(), &mut buf);
        }
    }

    fn next_wakeup(&self, now: Instant) -> Duration {
        let kernel = self.lock().kernel.poll_timeout();
        let inbox = self
            .inbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .front()
            .map(|(d, _, _)| *d);
        [kernel, inbox]
            .into_iter()
            .flatten()
            .min()
            .map_or(MAX_SLEEP, |t| t.saturating_duration_since(now))
            .min(MAX_SLEEP)
    }

    /// One round of the driver: due fabric messages are taken first, then the socket is
    /// drained; daemon datagrams are processed before timeouts and fabric messages (see the
    /// module docs).
    fn pump(&self, now: Instant, buf: &mut [u8]) {
        let due: Vec<FabricMsg> = {
            let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
            let n = inbox.partition_point(|(d, _, _)| *d <= now);
            inbox.drain(..n).map(|(_, _, m)| m).collect()
        };
        let datagrams = driver::drain(&self.socket, buf);
        let mut inner = self.lock();
        let mut link = self.link();
        for (from, bytes) in datagrams {
            if from == DaemonAddr::Unnamed {
                inner.kernel.record_violation(Violation::UnnamedSender);
            }
            inner.kernel.handle_datagram(now, &from, &bytes, &mut link);
            self.drain_maps(&mut inner);
        }
        inner.kernel.handle_timeout(now, &mut link);
        self.drain_maps(&mut inner);
        for msg in due {
            self.on_fabric(&mut inner, msg);
        }
    }
}

/// Listening details of a freshly created listener.
pub(crate) fn listen_info(
    mode: PortMapMode,
    local: SocketAddr,
    map: &crate::kernel::MapResult,
) -> ListenInfo {
    let mapped_local = map.m_local.to_socket_addr().unwrap_or(local);
    ListenInfo {
        local,
        mapped_local,
        wire_local: match mode {
            PortMapMode::PortMapped => mapped_local,
            PortMapMode::NoPortMap => local,
        },
        mapping: map.outcome.clone(),
    }
}
