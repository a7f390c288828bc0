//! What the daemon reports about its peers, carried as it is by the control socket's
//! `peers` and `keys` answers (feature `serde`): the core keeps these, `iwpmctl` shows them.

/// What one peer host did for us, counted since it was first seen (or re-added after
/// eviction). The control socket's `peers` answer carries it as it is (feature `serde`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PeerTally {
    /// REQUESTs we started towards it (first transmissions).
    pub requests: u64,
    /// REQUEST retransmissions towards it.
    pub retransmissions: u64,
    /// ACCEPTs it answered with.
    pub accepts: u64,
    /// REJECTs it answered with.
    pub rejects: u64,
    /// Our exchanges with it that ended without an answer.
    pub timeouts: u64,
    /// REQUESTs it sent us.
    pub requests_in: u64,
    /// How its datagrams authenticate (fleet keys): keyed, unkeyed or failing. (Absent
    /// in the answer of a daemon before fleet keys: unkeyed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub auth: PeerAuth,
}

/// One key's use since it was loaded, for `iwpmctl keys` (never its bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct KeyUse {
    /// The key's id.
    pub id: u32,
    /// True for the key we sign with.
    pub signing: bool,
    /// True when the key is only accepted (a rotation's first step).
    pub accept_only: bool,
    /// Datagrams we sealed with it.
    pub signed: u64,
    /// Datagrams that verified under it.
    pub verified: u64,
}

/// Why a peer datagram failed authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AuthFailure {
    /// Sealed with a key id we do not hold.
    UnknownKey,
    /// Its MAC does not verify (a wrong key under a known id, or changed bytes).
    BadMac,
    /// Its stamp is outside the clock window (a skewed clock, or an old capture).
    Clock,
    /// Seen before (a replay).
    Replayed,
    /// Not sealed, from a network whose datagrams must be (`peer_auth_required`).
    Missing,
    /// Sealed by a fleet member, but sent from another address than the one the message
    /// names as its sender (a copy sent by whoever saw it).
    WrongSource,
}

impl AuthFailure {
    /// A few words for logs and `iwpmctl peers`.
    pub fn describe(self) -> &'static str {
        match self {
            AuthFailure::UnknownKey => "unknown key id",
            AuthFailure::BadMac => "wrong key",
            AuthFailure::Clock => "clock",
            AuthFailure::Replayed => "replayed",
            AuthFailure::Missing => "not authenticated",
            AuthFailure::WrongSource => "from another address",
        }
    }
}

/// How a peer authenticated, as `iwpmctl peers` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PeerAuth {
    /// Nothing sealed seen from it (an rdma-core peer, or one of ours without a key).
    #[default]
    Unkeyed,
    /// Its last sealed datagram verified under this key.
    Keyed {
        /// The key id.
        key_id: u32,
    },
    /// Its last datagrams failed authentication: the latest reason, and how many in a row.
    Failing {
        /// The latest reason.
        reason: AuthFailure,
        /// Failures since it last authenticated (or was first seen).
        count: u64,
    },
}

impl PeerAuth {
    /// The state after one more datagram from this peer.
    pub fn after(self, outcome: Result<u32, AuthFailure>) -> PeerAuth {
        match (outcome, self) {
            (Ok(key_id), _) => PeerAuth::Keyed { key_id },
            (Err(reason), PeerAuth::Failing { count, .. }) => PeerAuth::Failing {
                reason,
                count: count.saturating_add(1),
            },
            (Err(reason), _) => PeerAuth::Failing { reason, count: 1 },
        }
    }
}
