//! Requests and responses. Every message carries [`PROTOCOL_VERSION`]; a daemon answers a
//! request of another version with [`ErrorKind::UnsupportedVersion`] (in its own version)
//! and closes. New optional fields may be added within a version (`#[serde(default)]`);
//! anything else bumps it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

pub use iwpm_report::{AuthFailure, KeyUse, PeerAuth, PeerTally};
use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Where the daemon listens when it talks to the real kernel.
pub const DEFAULT_SOCKET: &str = "/run/iwpmd/control.sock";

/// Where a daemon whose kernel link is the Unix socket `kernel` (an emulator) listens by
/// default: beside that socket, so that several emulated hosts never share one path.
pub fn socket_beside(kernel: &Path) -> PathBuf {
    let mut s = kernel.as_os_str().to_owned();
    s.push(".control");
    PathBuf::from(s)
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// What is asked.
    pub command: Command,
}

impl Request {
    /// A request of this crate's version.
    pub fn new(command: Command) -> Self {
        Request {
            version: PROTOCOL_VERSION,
            command,
        }
    }
}

/// The commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Command {
    /// Version, pid, ABI, handshake, uptime, clients, counters.
    Status,
    /// The mapping table.
    List,
    /// Exchanges in flight, recently finished ones, per-peer tallies.
    Peers,
    /// The fleet keys and their use counts (never the keys themselves).
    Keys,
    /// The status as OpenMetrics text.
    Metrics,
    /// The SIGUSR1 dump's text.
    Dump,
    /// Reads (`set: None`) or replaces the log filter (`tracing` `EnvFilter` directives).
    LogLevel {
        /// New directives, e.g. `debug` or `info,iwpm_core=trace`.
        #[serde(default)]
        set: Option<String>,
    },
    /// Asks the peer daemon at `host` about a port it cannot have and waits for the
    /// REJECT.
    Probe {
        /// The peer host.
        host: IpAddr,
        /// How long to wait, in milliseconds (default 1500, at most 10000).
        #[serde(default)]
        timeout_ms: Option<u32>,
    },
}

impl Command {
    /// The command's name on the wire (`cmd`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Status => "status",
            Command::List => "list",
            Command::Peers => "peers",
            Command::Keys => "keys",
            Command::Metrics => "metrics",
            Command::Dump => "dump",
            Command::LogLevel { .. } => "log-level",
            Command::Probe { .. } => "probe",
        }
    }
}

/// One response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// [`PROTOCOL_VERSION`] of the daemon.
    pub version: u32,
    /// The answer or the error.
    pub result: Outcome,
}

impl Response {
    /// A successful response.
    pub fn ok(reply: Reply) -> Self {
        Response {
            version: PROTOCOL_VERSION,
            result: Outcome::Ok(reply),
        }
    }

    /// An error response.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Self {
        Response {
            version: PROTOCOL_VERSION,
            result: Outcome::Error(ErrorReply {
                kind,
                message: message.into(),
            }),
        }
    }
}

/// Answer or error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The command's answer.
    Ok(Reply),
    /// Why there is none.
    Error(ErrorReply),
}

/// A typed error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ErrorReply {
    /// The class.
    pub kind: ErrorKind,
    /// Details in plain words.
    pub message: String,
}

/// Error classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The caller is neither root nor the daemon's user.
    PermissionDenied,
    /// The request's protocol version is not the daemon's.
    UnsupportedVersion,
    /// The request did not decode.
    BadRequest,
    /// The request frame is over the size limit.
    TooLarge,
    /// Too many control clients, or too many probes, at once.
    Busy,
    /// The command's argument was refused (e.g. a bad log filter).
    InvalidArgument,
    /// The daemon could not carry the command out.
    Failed,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::UnsupportedVersion => "unsupported protocol version",
            ErrorKind::BadRequest => "bad request",
            ErrorKind::TooLarge => "request too large",
            ErrorKind::Busy => "busy",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Failed => "failed",
        })
    }
}

/// Command answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reply {
    /// For [`Command::Status`].
    Status(StatusReport),
    /// For [`Command::List`].
    List(MappingList),
    /// For [`Command::Peers`].
    Peers(PeersReport),
    /// For [`Command::Keys`].
    Keys(KeysReport),
    /// For [`Command::Metrics`].
    Metrics(TextReply),
    /// For [`Command::Dump`].
    Dump(TextReply),
    /// For [`Command::LogLevel`].
    LogLevel(LogLevelReply),
    /// For [`Command::Probe`].
    Probe(ProbeReport),
}

/// The daemon's state in brief.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// `iwpmd` package version.
    pub version: String,
    /// Process id.
    pub pid: u32,
    /// iwpm netlink ABI in use.
    pub abi: u16,
    /// Kernel handshake: `idle`, `awaiting-hello`, `resyncing` or `done`.
    pub handshake: String,
    /// Seconds since start-up.
    pub uptime_secs: f64,
    /// The kernel link (`netlink` or `unix:PATH`).
    pub kernel_link: String,
    /// Registered kernel clients.
    pub clients: Vec<ClientEntry>,
    /// Mappings held.
    pub mappings: u64,
    /// TCP ports held for mappings.
    pub ports_held: u64,
    /// Peer exchanges in flight.
    pub exchanges: u64,
    /// Connected control clients (this one included).
    pub control_clients: u64,
    /// The core's counters, by name (`Counter` names of iwpm-core).
    pub core_counters: BTreeMap<String, u64>,
    /// The IO shell's counters, by name.
    pub io_counters: BTreeMap<String, u64>,
    /// Names of the gauges among the counters (the rest only grow).
    pub gauges: Vec<String>,
}

/// A registered kernel client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEntry {
    /// Netlink client index.
    pub index: u8,
    /// RDMA device name.
    pub ibdev: String,
    /// Network interface name.
    pub interface: String,
}

/// The mapping table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingList {
    /// Newest first.
    pub mappings: Vec<MappingEntry>,
}

/// One mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingEntry {
    /// The kernel's (unmapped) local address.
    pub local: SocketAddr,
    /// The mapped address peers see.
    pub mapped: SocketAddr,
    /// Netlink client index of the owner.
    pub owner_client: u8,
    /// The owner's RDMA device, when it registered one.
    pub owner_device: Option<String>,
    /// Kernel references.
    pub refcount: u32,
    /// `wildcard`, `no_port_map`.
    pub flags: Vec<String>,
    /// `listener`, `connector` or `recovered`.
    pub role: String,
    /// Milliseconds since creation.
    pub age_ms: u64,
}

/// Peer-protocol activity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeersReport {
    /// Exchanges in flight, oldest first.
    pub in_flight: Vec<ExchangeEntry>,
    /// Local exchanges that ended recently, oldest first.
    pub recent: Vec<RecentEntry>,
    /// Per-peer tallies, by address.
    pub peers: Vec<PeerEntry>,
}

/// One exchange in flight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeEntry {
    /// The other daemon.
    pub peer: SocketAddr,
    /// `requesting`, `acked`, `accepting` or `confirmed`.
    pub state: String,
    /// The local mapping's address.
    pub local: Option<SocketAddr>,
    /// Retransmissions so far.
    pub retransmissions: u32,
    /// Milliseconds since it began.
    pub age_ms: u64,
    /// Milliseconds until it is dropped.
    pub expires_in_ms: u64,
}

/// A finished local exchange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentEntry {
    /// The peer host.
    pub peer: IpAddr,
    /// `accepted`, `rejected` or `timed-out`.
    pub outcome: String,
    /// REQUEST retransmissions it needed.
    pub retransmissions: u32,
    /// Milliseconds from REQUEST to the end.
    pub took_ms: u64,
    /// Milliseconds since it ended.
    pub ended_ago_ms: u64,
}

/// What one peer host did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerEntry {
    /// The host.
    pub ip: IpAddr,
    /// What it did: the core's tally, its fields (`requests`, `retransmissions`,
    /// `accepts`, `rejects`, `timeouts`, `requests_in`) inline in this object.
    #[serde(flatten)]
    pub tally: PeerTally,
    /// Milliseconds since it was last seen.
    pub last_seen_ms: u64,
}

/// The fleet keys a daemon holds: ids, roles and use counts, never key bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysReport {
    /// Where the keys in use were read: the key file's path, or the systemd credential;
    /// `None` when the daemon has no `peer_key_file` (then `keys` is empty).
    pub source: Option<String>,
    /// Milliseconds since they were loaded (at start-up, or by the last good SIGHUP).
    pub loaded_ago_ms: Option<u64>,
    /// Why the last SIGHUP reload was refused, if it was (the keys above stayed in use);
    /// cleared by a reload that succeeds.
    #[serde(default)]
    pub reload_error: Option<String>,
    /// Every key, by id: `id`, `signing`, `accept_only`, `signed`, `verified`.
    pub keys: Vec<KeyUse>,
}

/// Text answers (`metrics`, `dump`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextReply {
    /// The text, lines separated by `\n`.
    pub text: String,
}

/// The log filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLevelReply {
    /// The filter now in force.
    pub filter: String,
    /// The filter before, when it was changed.
    pub previous: Option<String>,
}

/// A probe's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The peer daemon's address.
    pub target: SocketAddr,
    /// The address the REQUEST named as ours.
    pub local: IpAddr,
    /// True when the peer answered.
    pub reachable: bool,
    /// `rejected` (the expected answer), `accepted` or `no-answer`.
    pub answer: String,
    /// Microseconds to the answer, or waited in vain.
    pub elapsed_us: u64,
    /// REQUESTs sent.
    pub requests: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_entry_is_one_flat_object_in_the_documented_order() {
        let entry = PeerEntry {
            ip: "10.0.0.2".parse().unwrap(),
            tally: PeerTally {
                requests: 1,
                retransmissions: 2,
                accepts: 3,
                rejects: 4,
                timeouts: 5,
                requests_in: 6,
                auth: PeerAuth::Keyed { key_id: 3 },
            },
            last_seen_ms: 7,
        };
        let json = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            json,
            r#"{"ip":"10.0.0.2","requests":1,"retransmissions":2,"accepts":3,"rejects":4,"timeouts":5,"requests_in":6,"auth":{"Keyed":{"key_id":3}},"last_seen_ms":7}"#
        );
        assert_eq!(serde_json::from_str::<PeerEntry>(&json).unwrap(), entry);
    }

    #[test]
    fn a_keys_report_carries_ids_and_counts_only() {
        let report = KeysReport {
            source: Some("/etc/iwpmd/peer-keys".into()),
            loaded_ago_ms: Some(1500),
            reload_error: None,
            keys: vec![KeyUse {
                id: 2,
                signing: true,
                accept_only: false,
                signed: 10,
                verified: 9,
            }],
        };
        let json = serde_json::to_string(&Reply::Keys(report.clone())).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"keys","source":"/etc/iwpmd/peer-keys","loaded_ago_ms":1500,"reload_error":null,"keys":[{"id":2,"signing":true,"accept_only":false,"signed":10,"verified":9}]}"#
        );
        assert_eq!(
            serde_json::from_str::<Reply>(&json).unwrap(),
            Reply::Keys(report)
        );
        let request = serde_json::to_string(&Request::new(Command::Keys)).unwrap();
        assert_eq!(request, r#"{"version":1,"command":{"cmd":"keys"}}"#);
    }
}
