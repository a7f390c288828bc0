//! Read-only snapshots for the control socket: the daemon's state as plain values, with
//! ages computed from the `now` the caller passes (the core never reads the clock). Nothing
//! here changes state; the SIGUSR1 dump (`dump.rs`) stays the C-compatible text form.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_proto::sockaddr::Endpoint;
use iwpm_report::PeerTally;

use super::Core;
use crate::exchange::{ActiveState, ExchangeKind};
use crate::machine::handshake::Handshake;
use crate::peer_book::RecentExchange;
use crate::table::MappingRole;

/// One mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingSnapshot {
    /// The kernel's local address.
    pub local: Endpoint,
    /// The mapped address peers see.
    pub mapped: Endpoint,
    /// Kernel client index that owns it.
    pub owner_client: u8,
    /// Kernel references.
    pub refcount: u32,
    /// Local IP is a wildcard.
    pub wildcard: bool,
    /// `IWPM_FLAGS_NO_PORT_MAP` (mapped = local, no port held).
    pub no_port_map: bool,
    /// Listener, connector or recovered.
    pub role: MappingRole,
    /// Time since creation.
    pub age: Duration,
}

/// Which side of the peer protocol an exchange is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeSide {
    /// We connect: REQUEST sent, waiting for ACCEPT/REJECT.
    Requesting,
    /// We connect: ACCEPT received and ACKed (kept to re-ACK duplicates).
    Acked,
    /// A peer connects: ACCEPT sent, no ACK yet.
    Accepting,
    /// A peer connects: ACK received.
    Confirmed,
}

/// One exchange in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeSnapshot {
    /// The other daemon's address.
    pub peer: SocketAddr,
    /// Where it stands.
    pub side: ExchangeSide,
    /// The local mapping it belongs to.
    pub local: Option<Endpoint>,
    /// REQUEST retransmissions so far (active side) or ACCEPT resends (passive side).
    pub retransmissions: u32,
    /// Time since it started.
    pub age: Duration,
    /// Time until it is dropped.
    pub expires_in: Duration,
}

/// Per-peer tallies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSnapshot {
    /// The peer host.
    pub ip: IpAddr,
    /// Its counters.
    pub tally: PeerTally,
    /// Time since it was last seen (a message to or from it).
    pub last_seen: Duration,
}

/// A registered kernel client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSnapshot {
    /// Netlink client index.
    pub index: u8,
    /// Device name from REG_PID.
    pub ibdev: String,
    /// Interface name from REG_PID.
    pub interface: String,
}

impl Core {
    /// Every mapping, newest first.
    pub fn snapshot_mappings(&self, now: Instant) -> Vec<MappingSnapshot> {
        self.table
            .iter()
            .map(|(_, m)| MappingSnapshot {
                local: m.local_ep(),
                mapped: m.mapped_ep(),
                owner_client: m.owner,
                refcount: m.refcount,
                wildcard: m.local_ep().is_wildcard(),
                no_port_map: m.no_port_map,
                role: m.role,
                age: now.saturating_duration_since(m.created_at),
            })
            .collect()
    }

    /// Every exchange in flight (unordered).
    pub fn snapshot_exchanges(&self, now: Instant) -> Vec<ExchangeSnapshot> {
        let lifetime = self.config.exchange_lifetime;
        let max = self.config.max_retransmits;
        self.exchanges
            .iter()
            .map(|ex| {
                let (side, retransmissions) = match &ex.kind {
                    ExchangeKind::Active(q) => match &q.state {
                        ActiveState::Requesting {
                            retransmits_left, ..
                        } => (
                            ExchangeSide::Requesting,
                            max.saturating_sub(*retransmits_left),
                        ),
                        ActiveState::Acked { .. } | ActiveState::AwaitingNotice { .. } => {
                            (ExchangeSide::Acked, 0)
                        }
                    },
                    ExchangeKind::Passive(p) => (
                        if p.confirmed {
                            ExchangeSide::Confirmed
                        } else {
                            ExchangeSide::Accepting
                        },
                        max.saturating_sub(p.resends_left),
                    ),
                };
                let started = ex.expires().checked_sub(lifetime).unwrap_or(now);
                ExchangeSnapshot {
                    peer: ex.to,
                    side,
                    local: self.table.get(ex.mapping).map(|m| m.local_ep()),
                    retransmissions,
                    age: now.saturating_duration_since(started),
                    expires_in: ex.expires().saturating_duration_since(now),
                }
            })
            .collect()
    }

    /// Per-peer tallies (unordered; at most `peer_book::MAX_PEERS`).
    pub fn snapshot_peers(&self, now: Instant) -> Vec<PeerSnapshot> {
        self.peer_book
            .peers()
            .map(|(ip, tally, seen)| PeerSnapshot {
                ip,
                tally,
                last_seen: now.saturating_duration_since(seen),
            })
            .collect()
    }

    /// Recently finished local exchanges, oldest first.
    pub fn recent_exchanges(&self) -> Vec<RecentExchange> {
        self.peer_book.recent().copied().collect()
    }

    /// Registered kernel clients, by index.
    pub fn snapshot_clients(&self) -> Vec<ClientSnapshot> {
        (0..=u8::MAX)
            .filter_map(|i| {
                self.clients.info(i).map(|c| ClientSnapshot {
                    index: i,
                    ibdev: c.ibdev_name.to_string_lossy(),
                    interface: c.if_name.to_string_lossy(),
                })
            })
            .collect()
    }

    /// The kernel handshake's state in one word: `idle`, `awaiting-hello`, `resyncing` or
    /// `done`.
    pub fn handshake_state(&self) -> &'static str {
        match self.handshake {
            Handshake::Idle => "idle",
            Handshake::Awaiting { .. } => "awaiting-hello",
            Handshake::Resyncing { .. } => "resyncing",
            Handshake::Done => "done",
        }
    }
}
