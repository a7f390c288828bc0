//! What a caller of `iw_cm_map` asks for and gets back.

use iwpm_proto::sockaddr::SockAddrStorage;

use crate::kernel::violation::RequestKind;

/// Identifies one `iw_cm_map` call in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MapToken(pub u64);

/// One `iw_cm_map` call: a listen (passive) or an active connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapRequest {
    /// `cm_id->local_addr` (may be a wildcard for a listen).
    pub local: SockAddrStorage,
    /// `cm_id->remote_addr` for an active connect; `None` for a listen.
    pub remote: Option<SockAddrStorage>,
    /// `IWPM_FLAGS_NO_PORT_MAP` for siw, 0 for hardware RNICs.
    pub flags: u32,
}

impl MapRequest {
    /// True for the active side (QUERY_MAPPING), false for a listen (ADD_MAPPING).
    pub fn is_active(&self) -> bool {
        self.remote.is_some()
    }
}

/// Why `iw_cm_map` refused outright (the listen/connect fails, nothing is sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// Device name >= 32 or interface name >= 16 characters (-EINVAL).
    #[error("device or interface name too long for the port mapper")]
    NameTooLong,
}

/// The outcome of `iw_cm_map`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapResult {
    /// The request.
    pub request: MapRequest,
    /// `cm_id->mapped`: the call got past registration, so destroying the id sends
    /// REMOVE_MAPPING and the mapinfo table holds an entry (identity if it failed).
    pub mapped: bool,
    /// `cm_id->m_local_addr`.
    pub m_local: SockAddrStorage,
    /// `cm_id->m_remote_addr` (active side only).
    pub m_remote: Option<SockAddrStorage>,
    /// Whether the daemon's mapping is in use, and if not why.
    pub outcome: MapOutcome,
}

/// Whether the mapped addresses came from the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOutcome {
    /// The daemon answered and the kernel accepted the answer.
    Mapped,
    /// The connection proceeds with the unmapped addresses.
    Unmapped(UnmappedReason),
}

impl MapOutcome {
    /// True for [`MapOutcome::Mapped`].
    pub fn is_mapped(&self) -> bool {
        matches!(self, MapOutcome::Mapped)
    }
}

/// Why the kernel fell back to unmapped addresses. Every path of `iw_cm_map` that does not
/// use a daemon answer has its own variant, so a test can tell "no daemon" from "daemon
/// too slow" from "daemon refused".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnmappedReason {
    /// No usable daemon pid (never announced, marked unavailable after a failed
    /// multicast, or reset after a failed unicast): nothing was sent.
    NoDaemon {
        /// `iwpm_user_pid` at the time (-1 undefined, -2 unavailable, or a bad value).
        pid: i32,
    },
    /// The REG_PID multicast reached nobody; the daemon is now marked unavailable.
    RegPidSendFailed {
        /// Negative errno.
        errno: i32,
    },
    /// No reply within the request timeout (the kernel's 10 s, no retransmission).
    Timeout {
        /// Which request.
        kind: RequestKind,
        /// Its header seq.
        seq: u32,
    },
    /// The request was completed with an IWPM error code: from HANDLE_ERR, from the
    /// kernel's own checks of the reply (15), or a peer reject in the QUERY reply (16).
    ErrorCode {
        /// Which request.
        kind: RequestKind,
        /// The code.
        code: u16,
    },
    /// HANDLE_ERR with code 0 (a hazard in the real kernel; see [`crate::Violation`]).
    HandleErrZero {
        /// Which request.
        kind: RequestKind,
    },
    /// Registration was not VALID when ADD/QUERY was due (-EINVAL, nothing sent).
    Unregistered,
    /// ABI 3 is negotiated and the device needs `NO_PORT_MAP`: the kernel returns -EINVAL
    /// quietly without sending anything.
    Abi3NoPortMap,
    /// The ADD/QUERY unicast failed.
    SendFailed {
        /// Which request.
        kind: RequestKind,
        /// Negative errno.
        errno: i32,
    },
}
