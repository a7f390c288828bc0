//! [`CmId`]: the rdma_cm id handle and the user-side operations on it.

use std::net::SocketAddr;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwpm_proto::consts::IWPM_FLAGS_NO_PORT_MAP;

use super::state::{storage, FabricMsg, HostInner, Outcome};
use super::{EmulatedHost, HostShared};
use crate::cm::{
    AddrError, CmError, CmEvent, CmEventKind, ConnInfo, IdState, ListenInfo, PortMapMode,
    RejectReason,
};
use crate::kernel::{MapOutcome, MapRequest};

/// Extra time a blocking call allows beyond the kernel's own timeouts.
const SLACK: Duration = Duration::from_secs(5);

/// How a listener treats connection requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceptMode {
    /// The application accepts or rejects each request.
    Manual,
    /// Every request is accepted on arrival (the child still gets its events).
    Auto,
}

/// An established connection from [`EmulatedHost::connect`].
#[derive(Clone, Debug)]
pub struct Connection {
    /// The active id (destroy it to tear down and send REMOVE_MAPPING).
    pub id: CmId,
    /// Its addresses.
    pub info: ConnInfo,
}

/// A listener from [`EmulatedHost::listen`].
#[derive(Clone, Debug)]
pub struct Listener {
    /// The listening id.
    pub id: CmId,
    /// Its addresses.
    pub info: ListenInfo,
}

/// What an id looks like right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdInfo {
    /// Lifecycle state.
    pub state: IdState,
    /// Bound local address (unmapped).
    pub local: Option<SocketAddr>,
    /// Destination or peer address as rdma_cm reports it.
    pub remote: Option<SocketAddr>,
    /// The port-mapper outcome, once `iw_cm_map` finished (listeners and active ids).
    pub mapping: Option<MapOutcome>,
    /// Whether destroying the id sends REMOVE_MAPPING (`cm_id->mapped`).
    pub mapped: bool,
    /// Listener details.
    pub listen: Option<ListenInfo>,
    /// Connection details.
    pub conn: Option<ConnInfo>,
}

/// An rdma_cm id on an emulated host. Cheap to clone; destroy explicitly.
#[derive(Clone)]
pub struct CmId {
    pub(crate) host: Arc<HostShared>,
    pub(crate) num: u64,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({}#{})", self.host.config.name, self.num)
    }
}

impl PartialEq for CmId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.host, &other.host) && self.num == other.num
    }
}

impl Eq for CmId {}

impl CmId {
    /// The id's number on its host.
    pub fn num(&self) -> u64 {
        self.num
    }

    /// The host the id lives on.
    pub fn host(&self) -> EmulatedHost {
        EmulatedHost {
            shared: self.host.clone(),
        }
    }

    /// Current state, `None` once destroyed.
    pub fn state(&self) -> Option<IdState> {
        self.host.lock().ids.get(&self.num).map(|r| r.state)
    }

    /// Addresses and outcomes, `None` once destroyed.
    pub fn info(&self) -> Option<IdInfo> {
        let inner = self.host.lock();
        let r = inner.ids.get(&self.num)?;
        Some(IdInfo {
            state: r.state,
            local: r.local,
            remote: r.remote,
            mapping: r.map.as_ref().map(|m| m.outcome.clone()),
            mapped: r.map.as_ref().is_some_and(|m| m.mapped),
            listen: r.listen.clone(),
            conn: r.conn.clone(),
        })
    }

    /// `rdma_bind_addr`: `addr` must be one of the host's IPs or a wildcard; port 0 picks
    /// an ephemeral port. Returns the bound address.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        let mut inner = self.host.lock();
        let state = inner.ids.get(&self.num).ok_or(CmError::Destroyed)?.state;
        if state != IdState::Idle {
            return Err(CmError::InvalidState { op: "bind", state });
        }
        if !addr.ip().is_unspecified() && !self.host.owns_ip(addr.ip()) {
            return Err(CmError::AddrNotLocal(addr));
        }
        let bound = inner.ports.bind(addr, self.num)?;
        if let Some(rec) = inner.ids.get_mut(&self.num) {
            rec.local = Some(bound);
            rec.state = IdState::Bound;
        }
        Ok(bound)
    }

    /// `rdma_resolve_addr`: picks the source address (`src`, the bound one, or the host's
    /// address of the destination's family) and checks that some host owns `dst`. A
    /// synchronous id returns the outcome; an asynchronous one gets `AddrResolved` or
    /// `AddrError`.
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), CmError> {
        let mut inner = self.host.lock();
        let rec = inner.ids.get(&self.num).ok_or(CmError::Destroyed)?;
        if !matches!(rec.state, IdState::Idle | IdState::Bound) {
            return Err(CmError::InvalidState {
                op: "resolve_addr",
                state: rec.state,
            });
        }
        let sync = rec.is_sync();
        let bound = rec.local;
        let chosen = self.pick_source(bound, src, dst);
        let ip = match chosen {
            Ok(ip) => ip,
            Err(e) => {
                if sync {
                    return Err(CmError::Addr(e));
                }
                self.host.emit(&inner, self.num, CmEventKind::AddrError(e));
                return Ok(());
            }
        };
        let local = match bound {
            Some(b) if !b.ip().is_unspecified() => b,
            Some(b) => SocketAddr::new(ip, b.port()),
            None => {
                let port = src.map_or(0, |s| s.port());
                inner.ports.bind(SocketAddr::new(ip, port), self.num)?
            }
        };
        if let Some(rec) = inner.ids.get_mut(&self.num) {
            rec.local = Some(local);
            rec.remote = Some(dst);
            rec.state = IdState::AddrResolved;
        }
        if !sync {
            self.host.emit(&inner, self.num, CmEventKind::AddrResolved);
        }
        Ok(())
    }

    fn pick_source(
        &self,
        bound: Option<SocketAddr>,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<std::net::IpAddr, AddrError> {
        if dst.ip().is_unspecified() {
            return Err(AddrError::UnspecifiedDestination(dst));
        }
        let explicit = bound
            .map(|b| b.ip())
            .filter(|ip| !ip.is_unspecified())
            .or(src.map(|s| s.ip()).filter(|ip| !ip.is_unspecified()));
        let ip = match explicit {
            Some(ip) => ip,
            None if self.host.owns_ip(dst.ip()) => dst.ip(),
            None => self
                .host
                .config
                .ips
                .iter()
                .copied()
                .find(|ip| ip.is_ipv4() == dst.is_ipv4())
                .ok_or(AddrError::NoSourceAddress)?,
        };
        if ip.is_ipv4() != dst.is_ipv4() {
            return Err(AddrError::FamilyMismatch);
        }
        if !self.host.owns_ip(ip) {
            return Err(AddrError::SourceNotLocal(ip));
        }
        let routed = self
            .host
            .fabric
            .upgrade()
            .and_then(|f| f.route(dst.ip()))
            .is_some();
        if !routed {
            return Err(AddrError::UnknownDestination(dst.ip()));
        }
        Ok(ip)
    }

    /// `rdma_resolve_route` (nothing to resolve in the emulated fabric).
    pub fn resolve_route(&self) -> Result<(), CmError> {
        let mut inner = self.host.lock();
        let rec = inner.ids.get_mut(&self.num).ok_or(CmError::Destroyed)?;
        rec.transition(
            "resolve_route",
            IdState::AddrResolved,
            IdState::RouteResolved,
        )?;
        if !rec.is_sync() {
            self.host.emit(&inner, self.num, CmEventKind::RouteResolved);
        }
        Ok(())
    }

    /// `rdma_listen` with application accepts. Blocks while `iw_cm_map` runs (up to two
    /// kernel request timeouts), as the kernel does in any mode.
    pub fn listen(&self) -> Result<ListenInfo, CmError> {
        self.start_listen(AcceptMode::Manual)
    }

    /// `rdma_listen`, accepting every request on arrival.
    pub fn listen_auto_accept(&self) -> Result<ListenInfo, CmError> {
        self.start_listen(AcceptMode::Auto)
    }

    fn flags(&self) -> u32 {
        match self.host.config.port_map_mode {
            PortMapMode::PortMapped => 0,
            PortMapMode::NoPortMap => IWPM_FLAGS_NO_PORT_MAP,
        }
    }

    /// `iw_cm_map` for this id: the kernel starts the mapping, and its outcome comes back
    /// to this id.
    fn start_map(&self, inner: &mut HostInner, request: MapRequest) -> Result<(), CmError> {
        let mut link = self.host.link();
        let token = inner
            .kernel
            .start_map(Instant::now(), request, &mut link)
            .map_err(|_| CmError::MapFailed)?;
        inner.map_waiters.insert(token, self.num);
        Ok(())
    }

    fn start_listen(&self, accept: AcceptMode) -> Result<ListenInfo, CmError> {
        let (tx, rx) = mpsc::channel();
        {
            let mut inner = self.host.lock();
            let rec = inner.ids.get_mut(&self.num).ok_or(CmError::Destroyed)?;
            let local = match (rec.state, rec.local) {
                (IdState::Bound | IdState::AddrResolved, Some(l)) => l,
                (state, _) => {
                    return Err(CmError::InvalidState {
                        op: "listen",
                        state,
                    })
                }
            };
            rec.accept = accept;
            let request = MapRequest {
                local: storage(local),
                remote: None,
                flags: self.flags(),
            };
            self.start_map(&mut inner, request)?;
            if let Some(rec) = inner.ids.get_mut(&self.num) {
                rec.state = IdState::Mapping;
                rec.waiter = Some(tx);
            }
            self.host.drain_maps(&mut inner);
        }
        match self.wait(&rx, 2 * self.host.config.request_timeout + SLACK)? {
            Outcome::Listen(info) => Ok(info),
            Outcome::Conn(_) => Err(CmError::Destroyed),
        }
    }

    fn wait(
        &self,
        rx: &mpsc::Receiver<Result<Outcome, CmError>>,
        timeout: Duration,
    ) -> Result<Outcome, CmError> {
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(CmError::Timeout),
            Err(RecvTimeoutError::Disconnected) => Err(CmError::Destroyed),
        }
    }

    /// `rdma_connect`: runs `iw_cm_map` (QUERY_MAPPING), then the device connects on the
    /// wire. A synchronous id blocks until established and returns the connection; an
    /// asynchronous one returns `None` and reports `Established`, `Rejected` or
    /// `Unreachable` on its channel.
    pub fn connect(&self) -> Result<Option<ConnInfo>, CmError> {
        let (tx, rx) = mpsc::channel();
        let sync;
        {
            let mut inner = self.host.lock();
            let rec = inner.ids.get_mut(&self.num).ok_or(CmError::Destroyed)?;
            let (local, remote) = match (rec.state, rec.local, rec.remote) {
                (IdState::RouteResolved, Some(l), Some(r)) => (l, r),
                (state, _, _) => {
                    return Err(CmError::InvalidState {
                        op: "connect",
                        state,
                    })
                }
            };
            sync = rec.is_sync();
            let request = MapRequest {
                local: storage(local),
                remote: Some(storage(remote)),
                flags: self.flags(),
            };
            self.start_map(&mut inner, request)?;
            inner.cm_stats.connects += 1;
            if let Some(rec) = inner.ids.get_mut(&self.num) {
                rec.state = IdState::Mapping;
                if sync {
                    rec.waiter = Some(tx);
                }
            }
            self.host.drain_maps(&mut inner);
        }
        if !sync {
            return Ok(None);
        }
        let budget = 2 * self.host.config.request_timeout + self.host.config.connect_timeout;
        match self.wait(&rx, budget)? {
            Outcome::Conn(info) => Ok(Some(info)),
            Outcome::Listen(_) => Err(CmError::Destroyed),
        }
    }

    /// `rdma_accept` on a child from a connect request. An asynchronous child also gets
    /// `Established` on its channel.
    pub fn accept(&self) -> Result<ConnInfo, CmError> {
        let mut inner = self.host.lock();
        let info = self.host.accept_child(&mut inner, self.num)?;
        let sync = inner.ids.get(&self.num).is_some_and(|r| r.is_sync());
        if !sync {
            self.host
                .emit(&inner, self.num, CmEventKind::Established(info.clone()));
        }
        Ok(info)
    }

    /// `rdma_reject` on a child: the active side sees `Rejected(ByPeer)`.
    pub fn reject(&self) -> Result<(), CmError> {
        let mut inner = self.host.lock();
        let rec = inner.ids.get_mut(&self.num).ok_or(CmError::Destroyed)?;
        rec.transition("reject", IdState::ConnectRequest, IdState::Disconnected)?;
        let peer = rec.peer.clone();
        let tuple = rec.tuple.take();
        self.release(tuple);
        if let Some(p) = peer {
            if let Some(h) = p.host.upgrade() {
                h.post(FabricMsg::Refused {
                    to: p.id,
                    reason: RejectReason::ByPeer,
                });
            }
        }
        Ok(())
    }

    /// `rdma_disconnect`: both ends get `Disconnected` (this one on its own channel, the
    /// private queue for a synchronous id). Sends nothing to the daemon: REMOVE_MAPPING
    /// comes with destroy.
    pub fn disconnect(&self) -> Result<(), CmError> {
        let mut inner = self.host.lock();
        let rec = inner.ids.get_mut(&self.num).ok_or(CmError::Destroyed)?;
        match rec.state {
            IdState::Established => {}
            IdState::ConnectRequest => {
                drop(inner);
                return self.reject();
            }
            state => {
                return Err(CmError::InvalidState {
                    op: "disconnect",
                    state,
                })
            }
        }
        rec.state = IdState::Disconnected;
        let peer = rec.peer.clone();
        let tuple = rec.tuple.take();
        self.release(tuple);
        inner.cm_stats.disconnected += 1;
        self.host.emit(&inner, self.num, CmEventKind::Disconnected);
        if let Some(p) = peer {
            if let Some(h) = p.host.upgrade() {
                h.post(FabricMsg::Disconnect { to: p.id });
            }
        }
        Ok(())
    }

    /// `rdma_destroy_id`: disconnects if needed, and for a mapped listener or active id
    /// drops its mapinfo entry and sends REMOVE_MAPPING (passive children never do).
    pub fn destroy(&self) -> Result<(), CmError> {
        let mut inner = self.host.lock();
        let rec = inner.ids.remove(&self.num).ok_or(CmError::Destroyed)?;
        if let Some(li) = rec.listen.as_ref() {
            inner.listening.remove(&(li.wire_local.port(), self.num));
        }
        self.release(rec.tuple);
        if let Some(peer) = rec.peer.as_ref() {
            let msg = match rec.state {
                IdState::Established => Some(FabricMsg::Disconnect { to: peer.id }),
                IdState::ConnectRequest => Some(FabricMsg::Refused {
                    to: peer.id,
                    reason: RejectReason::ByPeer,
                }),
                _ => None,
            };
            if let (Some(msg), Some(h)) = (msg, peer.host.upgrade()) {
                h.post(msg);
            }
        }
        if let Some(map) = rec.map.as_ref().filter(|m| m.mapped) {
            let mut link = self.host.link();
            inner
                .kernel
                .remove_mapping(&map.request.local, &map.m_local, &mut link);
        }
        inner.ports.release(self.num);
        inner.cm_stats.ids_destroyed += 1;
        Ok(())
    }

    fn release(&self, tuple: Option<(SocketAddr, SocketAddr)>) {
        if let (Some(t), Some(f)) = (tuple, self.host.fabric.upgrade()) {
            f.release_tuple(t);
        }
    }

    /// `rdma_get_request` on a synchronous listener: the next child id.
    pub fn get_request(&self, timeout: Duration) -> Result<CmId, CmError> {
        let deadline = Instant::now() + timeout;
        loop {
            let event = self.get_event(deadline.saturating_duration_since(Instant::now()))?;
            if let CmEventKind::ConnectRequest(_) = event.kind {
                return Ok(event.id);
            }
        }
    }

    /// The next event of a synchronous id (`Disconnected`, or connect requests of a
    /// listener).
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent, CmError> {
        let queue = {
            let inner = self.host.lock();
            let rec = inner.ids.get(&self.num).ok_or(CmError::Destroyed)?;
            rec.private
                .clone()
                .ok_or(CmError::NotSynchronous("get_event"))?
        };
        let rx = queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => CmError::Timeout,
            RecvTimeoutError::Disconnected => CmError::Destroyed,
        })
    }
}
