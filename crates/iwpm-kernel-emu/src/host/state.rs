//! The host's id table and what happens when mappings finish or fabric messages arrive
//! (the driver-side half of the rdma_cm/iw_cm emulation).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};

use iwpm_proto::sockaddr::SockAddrStorage;

use super::{listen_info, AcceptMode, CmId, HostShared};
use crate::cm::{
    CmError, CmEvent, CmEventKind, ConnInfo, IdState, ListenInfo, PortMapMode, RejectReason,
    RemoteInfoLookup, Side, UnreachableReason,
};
use crate::driver::DaemonAddr;
use crate::kernel::{KernelIwpm, MapResult, MapToken};
use crate::ports::PortSpace;

use super::CmStats;

/// An id on some host.
#[derive(Clone, Debug)]
pub(crate) struct PeerRef {
    pub(crate) host: Weak<HostShared>,
    pub(crate) id: u64,
}

/// What travels between hosts: the emulated TCP/MPA connection set-up and teardown.
#[derive(Clone, Debug)]
pub(crate) enum FabricMsg {
    /// A device connects from `wire_src` to `wire_dst`.
    ConnReq {
        from: PeerRef,
        wire_src: SocketAddr,
        wire_dst: SocketAddr,
    },
    /// The passive side accepted.
    Accepted { to: u64, peer: PeerRef },
    /// The connection was refused.
    Refused { to: u64, reason: RejectReason },
    /// The peer disconnected.
    Disconnect { to: u64 },
}

/// What a blocking listen/connect/accept waits for.
#[derive(Debug)]
pub(crate) enum Outcome {
    Listen(ListenInfo),
    Conn(ConnInfo),
}

pub(crate) type Waiter = Sender<Result<Outcome, CmError>>;

/// One rdma_cm id.
#[derive(Debug)]
pub(crate) struct IdRecord {
    pub(crate) events: Sender<CmEvent>,
    /// The private event queue of a synchronous id.
    pub(crate) private: Option<Arc<Mutex<Receiver<CmEvent>>>>,
    pub(crate) state: IdState,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) map: Option<MapResult>,
    pub(crate) waiter: Option<Waiter>,
    pub(crate) peer: Option<PeerRef>,
    /// The connection's wire 4-tuple, oriented from the active side.
    pub(crate) tuple: Option<(SocketAddr, SocketAddr)>,
    pub(crate) listener: Option<u64>,
    pub(crate) accept: AcceptMode,
    pub(crate) conn: Option<ConnInfo>,
    pub(crate) listen: Option<ListenInfo>,
}

impl IdRecord {
    pub(crate) fn new(events: Option<Sender<CmEvent>>) -> Self {
        let (events, private) = match events {
            Some(tx) => (tx, None),
            None => {
                let (tx, rx) = mpsc::channel();
                (tx, Some(Arc::new(Mutex::new(rx))))
            }
        };
        IdRecord {
            events,
            private,
            state: IdState::Idle,
            local: None,
            remote: None,
            map: None,
            waiter: None,
            peer: None,
            tuple: None,
            listener: None,
            accept: AcceptMode::Manual,
            conn: None,
            listen: None,
        }
    }

    /// `op` is allowed only in state `want` (`-EINVAL` in rdma_cm otherwise).
    pub(crate) fn expect_state(&self, op: &'static str, want: IdState) -> Result<(), CmError> {
        if self.state == want {
            Ok(())
        } else {
            Err(CmError::InvalidState {
                op,
                state: self.state,
            })
        }
    }

    /// `op` moves the id from state `from` to `to`; from any other state it fails as
    /// [`IdRecord::expect_state`] does, and nothing changes.
    pub(crate) fn transition(
        &mut self,
        op: &'static str,
        from: IdState,
        to: IdState,
    ) -> Result<(), CmError> {
        self.expect_state(op, from)?;
        self.state = to;
        Ok(())
    }

    pub(crate) fn is_sync(&self) -> bool {
        self.private.is_some()
    }
}

/// Everything behind the host lock.
#[derive(Debug)]
pub(crate) struct HostInner {
    pub(crate) kernel: KernelIwpm<DaemonAddr>,
    pub(crate) ids: HashMap<u64, IdRecord>,
    /// The ids in state `Listening` by their wire port, then creation order: a
    /// connection request looks its listener up here instead of scanning every id (a host
    /// accepting 50 000 connections holds 50 000 child ids).
    pub(crate) listening: BTreeSet<(u16, u64)>,
    pub(crate) next_id: u64,
    pub(crate) ports: PortSpace,
    pub(crate) map_waiters: HashMap<MapToken, u64>,
    pub(crate) cm_stats: CmStats,
}

impl HostInner {
    pub(crate) fn new(kernel: KernelIwpm<DaemonAddr>, ports: RangeInclusive<u16>) -> Self {
        HostInner {
            kernel,
            ids: HashMap::new(),
            listening: BTreeSet::new(),
            next_id: 1,
            ports: PortSpace::new(ports),
            map_waiters: HashMap::new(),
            cm_stats: CmStats::default(),
        }
    }
}

/// The listener a connection to `wire_dst` reaches: on its port and family, bound to its
/// address or the wildcard (the host's port space lets only one of them hold a port).
fn find_listener(inner: &HostInner, wire_dst: SocketAddr) -> Option<u64> {
    let port = wire_dst.port();
    inner
        .listening
        .range((port, 0)..=(port, u64::MAX))
        .map(|&(_, n)| n)
        .find(|n| {
            inner
                .ids
                .get(n)
                .filter(|r| r.state == IdState::Listening)
                .and_then(|r| r.listen.as_ref())
                .is_some_and(|li| {
                    let w = li.wire_local;
                    w.port() == port
                        && w.is_ipv4() == wire_dst.is_ipv4()
                        && (w.ip() == wire_dst.ip() || w.ip().is_unspecified())
                })
        })
}

pub(crate) fn storage(a: SocketAddr) -> SockAddrStorage {
    SockAddrStorage::from_socket_addr(a)
}

fn socket_addr(s: &SockAddrStorage, fallback: SocketAddr) -> SocketAddr {
    s.to_socket_addr().unwrap_or(fallback)
}

impl HostShared {
    #[expect(
        clippy::expect_used,
        reason = "`me` is the Weak to this very value, so it upgrades while `&self` lives"
    )]
    pub(crate) fn handle(&self, num: u64) -> CmId {
        CmId {
            host: self
                .me
                .upgrade()
                .expect("a host method runs on a live host"),
            num,
        }
    }

    pub(crate) fn create_id(&self, events: Option<Sender<CmEvent>>) -> CmId {
        let mut inner = self.lock();
        let num = inner.next_id;
        inner.next_id += 1;
        inner.ids.insert(num, IdRecord::new(events));
        inner.cm_stats.ids_created += 1;
        drop(inner);
        self.handle(num)
    }

    /// Sends an event for `num` to its channel (the private one for synchronous ids).
    pub(crate) fn emit(&self, inner: &HostInner, num: u64, kind: CmEventKind) {
        self.emit_as(inner, num, num, None, kind);
    }

    /// Sends an event to `target`'s channel about id `about`.
    fn emit_as(
        &self,
        inner: &HostInner,
        target: u64,
        about: u64,
        listen_id: Option<u64>,
        kind: CmEventKind,
    ) {
        let Some(rec) = inner.ids.get(&target) else {
            return;
        };
        let event = CmEvent {
            id: self.handle(about),
            listen_id: listen_id.map(|l| self.handle(l)),
            kind,
        };
        // A dropped channel only means nobody listens any more.
        let _ = rec.events.send(event);
    }

    /// Feeds every finished `iw_cm_map` to the id that started it.
    pub(crate) fn drain_maps(&self, inner: &mut HostInner) {
        while let Some((token, result)) = inner.kernel.poll_map_done() {
            let Some(num) = inner.map_waiters.remove(&token) else {
                continue;
            };
            if !inner.ids.contains_key(&num) {
                // Destroyed while mapping: do now what destroy would have done.
                if result.mapped {
                    let mut link = self.link();
                    inner
                        .kernel
                        .remove_mapping(&result.request.local, &result.m_local, &mut link);
                }
                continue;
            }
            if result.request.is_active() {
                self.on_active_mapped(inner, num, result);
            } else {
                self.on_listen_mapped(inner, num, result);
            }
        }
    }

    fn on_listen_mapped(&self, inner: &mut HostInner, num: u64, result: MapResult) {
        let Some(rec) = inner.ids.get_mut(&num) else {
            return;
        };
        let local = rec.local.unwrap_or_else(|| {
            socket_addr(&result.request.local, SocketAddr::from(([0, 0, 0, 0], 0)))
        });
        let info = listen_info(self.config.port_map_mode, local, &result);
        rec.map = Some(result);
        rec.state = IdState::Listening;
        rec.listen = Some(info.clone());
        inner.listening.insert((info.wire_local.port(), num));
        inner.cm_stats.listens += 1;
        if let Some(w) = rec.waiter.take() {
            let _ = w.send(Ok(Outcome::Listen(info)));
        }
    }

    /// The active side's mapping is done: the device connects on the wire.
    fn on_active_mapped(&self, inner: &mut HostInner, num: u64, result: MapResult) {
        let Some(rec) = inner.ids.get_mut(&num) else {
            return;
        };
        let (Some(local), Some(remote)) = (rec.local, rec.remote) else {
            return;
        };
        let m_local = socket_addr(&result.m_local, local);
        let m_remote = result
            .m_remote
            .as_ref()
            .map_or(remote, |r| socket_addr(r, remote));
        // Hardware sends the mapped addresses; siw binds its TCP socket to the unmapped
        // local address and connects to the mapped remote one.
        let wire_src = match self.config.port_map_mode {
            PortMapMode::PortMapped => m_local,
            PortMapMode::NoPortMap => local,
        };
        let wire_dst = m_remote;
        rec.map = Some(result);
        rec.state = IdState::Connecting;
        rec.tuple = Some((wire_src, wire_dst));
        if !self.owns_ip(wire_src.ip()) {
            self.fail_connect(
                inner,
                num,
                CmEventKind::Unreachable(UnreachableReason::SourceNotLocal { wire_src }),
            );
            return;
        }
        let target = self.fabric.upgrade().and_then(|f| f.owner(wire_dst.ip()));
        match target {
            Some(host) if !host.is_stopped() => host.post(FabricMsg::ConnReq {
                from: PeerRef {
                    host: self.me.clone(),
                    id: num,
                },
                wire_src,
                wire_dst,
            }),
            Some(_) => self.fail_connect(
                inner,
                num,
                CmEventKind::Unreachable(UnreachableReason::HostDown),
            ),
            None => self.fail_connect(
                inner,
                num,
                CmEventKind::Unreachable(UnreachableReason::NoRoute { wire_dst }),
            ),
        }
    }

    /// Ends a connect attempt with a Rejected or Unreachable outcome.
    pub(crate) fn fail_connect(&self, inner: &mut HostInner, num: u64, kind: CmEventKind) {
        let Some(rec) = inner.ids.get_mut(&num) else {
            return;
        };
        if rec.state != IdState::Connecting {
            return;
        }
        rec.state = IdState::Failed;
        rec.tuple = None;
        let mapping = rec.map.as_ref().map(|m| m.outcome.clone());
        match &kind {
            CmEventKind::Rejected(_) => inner.cm_stats.rejected += 1,
            _ => inner.cm_stats.unreachable += 1,
        }
        let Some(rec) = inner.ids.get_mut(&num) else {
            return;
        };
        if let Some(w) = rec.waiter.take() {
            let err = match kind {
                CmEventKind::Rejected(reason) => CmError::Rejected { reason, mapping },
                CmEventKind::Unreachable(reason) => CmError::Unreachable { reason, mapping },
                _ => CmError::Destroyed,
            };
            let _ = w.send(Err(err));
        } else {
            self.emit(inner, num, kind);
        }
    }

    pub(crate) fn on_fabric(&self, inner: &mut HostInner, msg: FabricMsg) {
        match msg {
            FabricMsg::ConnReq {
                from,
                wire_src,
                wire_dst,
            } => self.on_conn_req(inner, from, wire_src, wire_dst),
            FabricMsg::Accepted { to, peer } => self.on_accepted(inner, to, peer),
            FabricMsg::Refused { to, reason } => {
                self.fail_connect(inner, to, CmEventKind::Rejected(reason))
            }
            FabricMsg::Disconnect { to } => self.on_disconnect(inner, to),
        }
    }

    /// `cm_conn_req_handler`: find the listener the device listens with, create the child,
    /// translate the peer's address through the remote-info table.
    fn on_conn_req(
        &self,
        inner: &mut HostInner,
        from: PeerRef,
        wire_src: SocketAddr,
        wire_dst: SocketAddr,
    ) {
        let refuse = |reason| {
            if let Some(h) = from.host.upgrade() {
                h.post(FabricMsg::Refused {
                    to: from.id,
                    reason,
                });
            }
        };
        let listener = find_listener(inner, wire_dst);
        let Some(lnum) = listener else {
            inner.cm_stats.refused_no_listener += 1;
            refuse(RejectReason::NoListener { wire_dst });
            return;
        };
        if let Some(fabric) = self.fabric.upgrade() {
            if !fabric.claim_tuple(wire_src, wire_dst) {
                refuse(RejectReason::DuplicateTuple { wire_src, wire_dst });
                return;
            }
        }
        let Some(lrec) = inner.ids.get(&lnum) else {
            return;
        };
        let Some(lmap) = lrec.map.clone() else {
            return;
        };
        let llocal = lrec.local.unwrap_or(wire_dst);
        let child_events = if lrec.is_sync() {
            None
        } else {
            Some(lrec.events.clone())
        };
        let accept = lrec.accept;
        let found = inner
            .kernel
            .take_remote_info(&lmap.m_local, &storage(wire_src));
        let (local, remote, lookup) = match found {
            Some(real) => {
                // The listener's local address, its IP taken from the connection when the
                // listener's mapped address is a wildcard (iw_cm_check_wildcard).
                let local = if lmap.m_local.endpoint().is_some_and(|e| e.is_wildcard()) {
                    SocketAddr::new(wire_dst.ip(), llocal.port())
                } else {
                    llocal
                };
                (local, socket_addr(&real, wire_src), RemoteInfoLookup::Found)
            }
            None => (wire_dst, wire_src, RemoteInfoLookup::Missed),
        };
        let info = ConnInfo {
            side: Side::Passive,
            local,
            remote,
            mapped_local: wire_dst,
            mapped_remote: wire_src,
            wire_local: wire_dst,
            wire_remote: wire_src,
            mapping: lmap.outcome.clone(),
            remote_info: Some(lookup),
        };
        let num = inner.next_id;
        inner.next_id += 1;
        inner.cm_stats.ids_created += 1;
        let mut rec = IdRecord::new(child_events);
        rec.state = IdState::ConnectRequest;
        rec.local = Some(local);
        rec.remote = Some(remote);
        rec.peer = Some(from);
        rec.tuple = Some((wire_src, wire_dst));
        rec.listener = Some(lnum);
        rec.conn = Some(info.clone());
        inner.ids.insert(num, rec);
        self.emit_as(
            inner,
            lnum,
            num,
            Some(lnum),
            CmEventKind::ConnectRequest(info),
        );
        if accept == AcceptMode::Auto {
            if let Ok(info) = self.accept_child(inner, num) {
                self.emit(inner, num, CmEventKind::Established(info));
            }
        }
    }

    /// `rdma_accept` on a child: established here, and the active side is told.
    pub(crate) fn accept_child(
        &self,
        inner: &mut HostInner,
        num: u64,
    ) -> Result<ConnInfo, CmError> {
        let Some(rec) = inner.ids.get_mut(&num) else {
            return Err(CmError::Destroyed);
        };
        rec.expect_state("accept", IdState::ConnectRequest)?;
        let Some(info) = rec.conn.clone() else {
            return Err(CmError::Destroyed);
        };
        rec.state = IdState::Established;
        inner.cm_stats.established_passive += 1;
        if let Some(peer) = inner.ids.get(&num).and_then(|r| r.peer.clone()) {
            if let Some(h) = peer.host.upgrade() {
                h.post(FabricMsg::Accepted {
                    to: peer.id,
                    peer: PeerRef {
                        host: self.me.clone(),
                        id: num,
                    },
                });
            }
        }
        Ok(info)
    }

    fn on_accepted(&self, inner: &mut HostInner, to: u64, peer: PeerRef) {
        let connecting = inner
            .ids
            .get(&to)
            .is_some_and(|r| r.state == IdState::Connecting);
        if !connecting {
            // Destroyed or failed meanwhile: tear the other end down.
            if let Some(h) = peer.host.upgrade() {
                h.post(FabricMsg::Disconnect { to: peer.id });
            }
            return;
        }
        let Some(rec) = inner.ids.get_mut(&to) else {
            return;
        };
        let (Some(local), Some(remote), Some(map), Some((wire_src, wire_dst))) =
            (rec.local, rec.remote, rec.map.as_ref(), rec.tuple)
        else {
            return;
        };
        let info = ConnInfo {
            side: Side::Active,
            local,
            remote,
            mapped_local: socket_addr(&map.m_local, local),
            mapped_remote: map
                .m_remote
                .as_ref()
                .map_or(remote, |r| socket_addr(r, remote)),
            wire_local: wire_src,
            wire_remote: wire_dst,
            mapping: map.outcome.clone(),
            remote_info: None,
        };
        rec.state = IdState::Established;
        rec.peer = Some(peer);
        rec.conn = Some(info.clone());
        inner.cm_stats.established_active += 1;
        let Some(rec) = inner.ids.get_mut(&to) else {
            return;
        };
        if let Some(w) = rec.waiter.take() {
            let _ = w.send(Ok(Outcome::Conn(info)));
        } else {
            self.emit(inner, to, CmEventKind::Established(info));
        }
    }

    fn on_disconnect(&self, inner: &mut HostInner, to: u64) {
        let Some(rec) = inner.ids.get_mut(&to) else {
            return;
        };
        match rec.state {
            IdState::Established | IdState::ConnectRequest => {
                rec.state = IdState::Disconnected;
                if let (Some(t), Some(f)) = (rec.tuple.take(), self.fabric.upgrade()) {
                    f.release_tuple(t);
                }
                inner.cm_stats.disconnected += 1;
                self.emit(inner, to, CmEventKind::Disconnected);
            }
            _ => {}
        }
    }
}
