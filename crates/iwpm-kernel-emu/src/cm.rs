//! RDMA-CM-shaped types: events, the event channel, connection details and errors.
//!
//! As in librdmacm, an id created with an [`EventChannel`] is asynchronous (operations
//! return at once, outcomes arrive as [`CmEvent`]s) and an id created without one is
//! synchronous (operations block until their outcome and return it).

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use crate::host::CmId;
use crate::kernel::MapOutcome;

/// Where an id's events are delivered (`rdma_event_channel`). Several ids may share one.
#[derive(Debug)]
pub struct EventChannel {
    tx: Sender<CmEvent>,
    rx: Receiver<CmEvent>,
}

impl Default for EventChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        EventChannel { tx, rx }
    }

    /// `rdma_get_cm_event` with a timeout.
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent, CmError> {
        self.rx.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => CmError::Timeout,
            RecvTimeoutError::Disconnected => CmError::HostStopped,
        })
    }

    /// An event if one is queued.
    pub fn try_get_event(&self) -> Option<CmEvent> {
        self.rx.try_recv().ok()
    }

    /// The receiving end, for `select`-style use.
    pub fn receiver(&self) -> &Receiver<CmEvent> {
        &self.rx
    }

    pub(crate) fn sender(&self) -> Sender<CmEvent> {
        self.tx.clone()
    }
}

/// One event (`struct rdma_cm_event`).
#[derive(Clone, Debug)]
pub struct CmEvent {
    /// The id the event is about; for [`CmEventKind::ConnectRequest`] the new child id.
    pub id: CmId,
    /// For [`CmEventKind::ConnectRequest`]: the listening id.
    pub listen_id: Option<CmId>,
    /// What happened.
    pub kind: CmEventKind,
}

/// The RDMA CM event types this emulator produces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError(AddrError),
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`, on the listener's channel.
    ConnectRequest(ConnInfo),
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established(ConnInfo),
    /// `RDMA_CM_EVENT_REJECTED`: refused by the peer's stack or application.
    Rejected(RejectReason),
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable(UnreachableReason),
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
}

/// Port mapping behaviour of a host's emulated iWARP device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortMapMode {
    /// A hardware RNIC (cxgb4, irdma...): FLAGS 0, the mapped addresses are used on the
    /// wire and the listener listens on its mapped port.
    PortMapped,
    /// siw: FLAGS `IWPM_FLAGS_NO_PORT_MAP`; the device listens on and connects from the
    /// unmapped local address, and connects to the mapped remote address.
    NoPortMap,
}

/// Which end of a connection an id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Called connect.
    Active,
    /// A child of a listener.
    Passive,
}

/// Whether the passive side found the connecting peer in its remote-info table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteInfoLookup {
    /// Found (and consumed): the remote address is the peer's real one.
    Found,
    /// Not found: the remote address reported is the peer's mapped (wire) address.
    Missed,
}

/// Addresses of a connection at every layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// Which end this is.
    pub side: Side,
    /// The local address rdma_cm reports (unmapped).
    pub local: SocketAddr,
    /// The remote address rdma_cm reports: the peer's real address on the active side;
    /// on the passive side the real address if remote-info was found, else the mapped one.
    pub remote: SocketAddr,
    /// `iw_cm_id.m_local_addr`.
    pub mapped_local: SocketAddr,
    /// `iw_cm_id.m_remote_addr`.
    pub mapped_remote: SocketAddr,
    /// Local end of the emulated TCP connection.
    pub wire_local: SocketAddr,
    /// Remote end of the emulated TCP connection.
    pub wire_remote: SocketAddr,
    /// The port-mapper outcome: this id's on the active side, the listener's on the
    /// passive side.
    pub mapping: MapOutcome,
    /// Passive side only.
    pub remote_info: Option<RemoteInfoLookup>,
}

/// Addresses of a listener once `listen` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenInfo {
    /// The address listened on (unmapped; may be a wildcard).
    pub local: SocketAddr,
    /// `m_local_addr`.
    pub mapped_local: SocketAddr,
    /// Where the device accepts connections: the mapped address for a port-mapped
    /// device, the unmapped one for siw.
    pub wire_local: SocketAddr,
    /// The port-mapper outcome.
    pub mapping: MapOutcome,
}

/// Why address resolution failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AddrError {
    /// The destination is a wildcard address.
    #[error("destination {0} is unspecified")]
    UnspecifiedDestination(SocketAddr),
    /// The host has no address of the destination's family.
    #[error("no local address of the destination's family")]
    NoSourceAddress,
    /// The requested source address is not one of the host's.
    #[error("source address {0} is not on this host")]
    SourceNotLocal(std::net::IpAddr),
    /// Source and destination families differ.
    #[error("source and destination address families differ")]
    FamilyMismatch,
    /// No emulated host owns the destination IP (an ARP failure).
    #[error("no host owns {0}")]
    UnknownDestination(std::net::IpAddr),
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// No listener at the address the connection arrived at (TCP reset, ECONNREFUSED).
    NoListener {
        /// The destination the device connected to.
        wire_dst: SocketAddr,
    },
    /// Another live connection already uses the same wire 4-tuple (two mappings collided).
    DuplicateTuple {
        /// Source on the wire.
        wire_src: SocketAddr,
        /// Destination on the wire.
        wire_dst: SocketAddr,
    },
    /// The passive application rejected (or destroyed the request).
    ByPeer,
}

/// Why the peer could not be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnreachableReason {
    /// No host owns the destination IP the device connected to (wrong mapped IP).
    NoRoute {
        /// The destination the device connected to.
        wire_dst: SocketAddr,
    },
    /// A port-mapped device was told to send from an IP that is not the host's.
    SourceNotLocal {
        /// The source it would use.
        wire_src: SocketAddr,
    },
    /// The peer host stopped.
    HostDown,
}

/// What an id operation can fail with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// The operation does not apply in the id's current state.
    #[error("{op} is not allowed in state {state:?}")]
    InvalidState {
        /// The operation.
        op: &'static str,
        /// The id's state.
        state: IdState,
    },
    /// Address resolution failed.
    #[error("address error: {0}")]
    Addr(#[from] AddrError),
    /// The address (or port) is in use on this host.
    #[error("address {0} in use")]
    AddrInUse(SocketAddr),
    /// The address is not one of this host's.
    #[error("address {0} is not on this host")]
    AddrNotLocal(SocketAddr),
    /// No free ephemeral port.
    #[error("no free port")]
    NoPorts,
    /// `iw_cm_map` refused (device or interface name too long).
    #[error("iw_cm_map failed: device name too long")]
    MapFailed,
    /// The connection was rejected.
    #[error("rejected: {reason:?} (mapping {mapping:?})")]
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The active side's port-mapper outcome, when mapping had finished.
        mapping: Option<MapOutcome>,
    },
    /// The peer was unreachable.
    #[error("unreachable: {reason:?} (mapping {mapping:?})")]
    Unreachable {
        /// Why.
        reason: UnreachableReason,
        /// The active side's port-mapper outcome, when mapping had finished.
        mapping: Option<MapOutcome>,
    },
    /// A blocking call waited longer than allowed.
    #[error("timed out")]
    Timeout,
    /// The id was destroyed.
    #[error("id destroyed")]
    Destroyed,
    /// The host's driver thread stopped.
    #[error("host stopped")]
    HostStopped,
    /// A blocking-only call on an asynchronous id (use its event channel instead).
    #[error("{0} needs a synchronous id")]
    NotSynchronous(&'static str),
}

/// Lifecycle state of an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdState {
    /// Created.
    Idle,
    /// Bound to a local address.
    Bound,
    /// Address resolved (and bound).
    AddrResolved,
    /// Route resolved.
    RouteResolved,
    /// `iw_cm_map` in progress (listen or connect).
    Mapping,
    /// Listening.
    Listening,
    /// Connect sent, waiting for the peer.
    Connecting,
    /// Passive child waiting for accept/reject.
    ConnectRequest,
    /// Connected.
    Established,
    /// Disconnected.
    Disconnected,
    /// Connect failed (rejected or unreachable).
    Failed,
}
