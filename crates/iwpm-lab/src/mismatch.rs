//! What a run's checks found wrong, one variant per kind of disagreement, so tests can match
//! on the kind and the report renders every one the same way (its `Display` text, also in
//! the JSON report).

use std::fmt;
use std::net::SocketAddr;

use iwpm_kernel_emu::MapOutcome;
use serde::{Serialize, Serializer};

use crate::workload::ConnFailure;

/// One disagreement between what should hold and what did.
#[derive(Clone, Debug, PartialEq)]
pub enum Mismatch {
    /// B's listener got the kernel's unmapped fallback.
    ListenerNotMapped {
        /// The listen address.
        listen: SocketAddr,
        /// What the kernel reported.
        outcome: MapOutcome,
    },
    /// A line of the restart's `lost`, `changed` or `mappings_lost` lists (kept as text:
    /// they are part of the report's restart section too).
    Restart(String),
    /// The restarted daemon's table matched none of the kernel's mappings.
    RestartRecoveredNothing,
    /// Killing or restarting B's daemon failed.
    RestartFailed(String),
    /// `--restart-daemon` was asked for, but the restart never ran.
    RestartMissing,
    /// Fewer passive ends established than active ones.
    PassiveNotEstablished {
        /// Passive ends established.
        established: usize,
        /// Active ends established.
        expected: usize,
    },
    /// A kernel mapinfo entry the daemon does not hold.
    KernelOnly {
        /// "A" or "B".
        host: String,
        /// Local address.
        local: SocketAddr,
        /// Mapped address.
        mapped: SocketAddr,
    },
    /// A daemon mapping the kernel does not know.
    DaemonOnly {
        /// "A" or "B".
        host: String,
        /// Local address.
        local: SocketAddr,
        /// Mapped address.
        mapped: SocketAddr,
    },
    /// Many table differences (only the first few are listed one by one).
    TableDifferences {
        /// "A" or "B".
        host: String,
        /// Differences in all.
        count: usize,
    },
    /// TCP ports held do not match the mappings (port-mapped mode: one per mapping).
    PortsHeld {
        /// "A" or "B".
        host: String,
        /// Ports the daemon holds.
        held: u64,
        /// Mappings it holds.
        mappings: usize,
    },
    /// B's daemon maps the listener elsewhere than B's kernel believes.
    ListenerMappedDifferently {
        /// The listen address.
        listen: SocketAddr,
        /// The daemon's mapped address.
        daemon: SocketAddr,
        /// The kernel's mapped address.
        kernel: SocketAddr,
    },
    /// B's daemon has no mapping for the listener.
    ListenerUnknown {
        /// The listen address.
        listen: SocketAddr,
    },
    /// Connections were not established.
    ConnectionsFailed {
        /// How many failed.
        failed: usize,
        /// How many were attempted.
        attempted: usize,
        /// The first failed connection's index.
        first_index: usize,
        /// Why it failed.
        first: ConnFailure,
    },
    /// An established connection with a problem.
    Connection {
        /// Which connection.
        conn: ConnTag,
        /// What is wrong.
        problem: ConnProblem,
    },
    /// A's kernel used unmapped addresses.
    KernelUnmapped {
        /// How often.
        count: u64,
    },
    /// Passive ends still connected after teardown.
    PassiveNotDisconnected,
    /// A kernel still has mapinfo entries after teardown.
    KernelMapinfoLeft {
        /// "A" or "B".
        host: String,
        /// Entries left.
        entries: usize,
    },
    /// A daemon still holds mappings or ports after teardown.
    DaemonTableLeft {
        /// "A" or "B".
        host: String,
        /// Mappings left.
        mappings: usize,
        /// Ports left.
        ports: u64,
    },
    /// A daemon still has connecting exchanges after teardown.
    ExchangesLeft {
        /// "A" or "B".
        host: String,
        /// Connecting exchanges in flight.
        connecting: u64,
    },
    /// A daemon ran out of descriptors or ports, so mappings were refused: named first,
    /// as it explains the failed connections that follow from it.
    OutOfResources(Shortage),
    /// A daemon did not exit cleanly on SIGTERM.
    DaemonExit {
        /// "A" or "B".
        host: String,
        /// Its exit status.
        status: String,
    },
}

/// One active connection, as mismatch lines name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnTag {
    /// Its index in the run.
    pub index: usize,
    /// The active end's local address.
    pub local: SocketAddr,
    /// The address it connected to.
    pub remote: SocketAddr,
}

/// What is wrong with one established connection.
#[derive(Clone, Debug, PartialEq)]
pub enum ConnProblem {
    /// The kernel used its unmapped fallback.
    NotMapped(MapOutcome),
    /// A's daemon holds another mapped address than A's kernel uses.
    MappedLocalDiffers {
        /// What A's kernel uses.
        kernel: SocketAddr,
        /// What A's daemon holds.
        daemon: SocketAddr,
    },
    /// A's daemon has no mapping for the local address.
    NoDaemonMapping,
    /// No-port-map mode, but the mapped address differs from the local one.
    NotIdentity {
        /// The mapped local address.
        mapped: SocketAddr,
    },
    /// The mapped remote address is not B's listener mapping.
    WrongMappedRemote {
        /// The connection's mapped remote address.
        mapped_remote: SocketAddr,
        /// B's listener mapping.
        listener: SocketAddr,
    },
    /// B has no passive end with the same wire addresses.
    NoPassiveEnd,
    /// B's kernel learned another real address for the peer.
    WrongPeer {
        /// What B sees.
        seen: SocketAddr,
        /// The active end's real address.
        actual: SocketAddr,
    },
    /// B's kernel never got the peer's REMOTE_INFO.
    NoRemoteInfo {
        /// What B sees instead.
        seen: SocketAddr,
    },
    /// B's end is not on the listener's address.
    WrongListener {
        /// B's end's local address.
        local: SocketAddr,
        /// The listen address.
        listen: SocketAddr,
    },
    /// The tap saw A's QUERY unanswered or answered with an error.
    QueryNotOk {
        /// Whether it was answered.
        answered: bool,
        /// The error code, if any.
        err: Option<u16>,
    },
    /// The tap saw no QUERY for the connection.
    NoQuery,
}

impl fmt::Display for ConnTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connection #{} {} -> {}",
            self.index, self.local, self.remote
        )
    }
}

impl fmt::Display for ConnProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnProblem::NotMapped(outcome) => write!(f, "not mapped ({outcome:?})"),
            ConnProblem::MappedLocalDiffers { kernel, daemon } => write!(
                f,
                "A's kernel uses mapped {kernel}, A's daemon holds {daemon}"
            ),
            ConnProblem::NoDaemonMapping => f.write_str("A's daemon has no mapping"),
            ConnProblem::NotIdentity { mapped } => {
                write!(f, "no-port-map mapping is not the identity ({mapped})")
            }
            ConnProblem::WrongMappedRemote {
                mapped_remote,
                listener,
            } => write!(
                f,
                "mapped remote {mapped_remote} is not B's listener mapping {listener}"
            ),
            ConnProblem::NoPassiveEnd => f.write_str("no passive end on B"),
            ConnProblem::WrongPeer { seen, actual } => {
                write!(f, "B sees the peer as {seen}, it is {actual}")
            }
            ConnProblem::NoRemoteInfo { seen } => write!(
                f,
                "B's kernel got no REMOTE_INFO for the peer (sees {seen})"
            ),
            ConnProblem::WrongListener { local, listen } => {
                write!(f, "B's end is on {local}, the listener is {listen}")
            }
            ConnProblem::QueryNotOk { answered, err } => write!(
                f,
                "QUERY at the tap answered {answered:?} with error {err:?}"
            ),
            ConnProblem::NoQuery => f.write_str("the tap saw no QUERY"),
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::ListenerNotMapped { listen, outcome } => {
                write!(f, "B's listener on {listen} is not mapped: {outcome:?}")
            }
            Mismatch::Restart(line) => f.write_str(line),
            Mismatch::RestartRecoveredNothing => {
                f.write_str("the restarted daemon recovered no mapping")
            }
            Mismatch::RestartFailed(e) => write!(f, "daemon restart failed: {e}"),
            Mismatch::RestartMissing => f.write_str("daemon restart did not happen"),
            Mismatch::PassiveNotEstablished {
                established,
                expected,
            } => write!(
                f,
                "passive side: {established} of {expected} connections established"
            ),
            Mismatch::KernelOnly {
                host,
                local,
                mapped,
            } => write!(
                f,
                "host {host}: kernel maps {local} -> {mapped}, the daemon does not"
            ),
            Mismatch::DaemonOnly {
                host,
                local,
                mapped,
            } => write!(
                f,
                "host {host}: daemon maps {local} -> {mapped}, the kernel does not"
            ),
            Mismatch::TableDifferences { host, count } => write!(
                f,
                "host {host}: {count} differences between kernel and daemon tables in all"
            ),
            Mismatch::PortsHeld {
                host,
                held,
                mappings,
            } => write!(
                f,
                "host {host}: daemon holds {held} TCP ports for {mappings} mappings"
            ),
            Mismatch::ListenerMappedDifferently {
                listen,
                daemon,
                kernel,
            } => write!(
                f,
                "B's daemon maps the listener {listen} to {daemon}, B's kernel uses {kernel}"
            ),
            Mismatch::ListenerUnknown { listen } => {
                write!(f, "B's daemon has no mapping for {listen}")
            }
            Mismatch::ConnectionsFailed {
                failed,
                attempted,
                first_index,
                first,
            } => write!(
                f,
                "{failed} of {attempted} connections failed (first: #{first_index} {first})"
            ),
            Mismatch::Connection { conn, problem } => write!(f, "{conn}: {problem}"),
            Mismatch::KernelUnmapped { count } => write!(
                f,
                "A's kernel fell back to unmapped addresses {count} times"
            ),
            Mismatch::PassiveNotDisconnected => {
                f.write_str("passive ends were not all disconnected after teardown")
            }
            Mismatch::KernelMapinfoLeft { host, entries } => write!(
                f,
                "host {host}: kernel still has {entries} mapinfo entries after teardown"
            ),
            Mismatch::DaemonTableLeft {
                host,
                mappings,
                ports,
            } => write!(
                f,
                "host {host}: daemon still holds {mappings} mappings and {ports} ports after \
                 teardown"
            ),
            Mismatch::ExchangesLeft { host, connecting } => write!(
                f,
                "host {host}: {connecting} connecting exchanges still in flight after teardown"
            ),
            // The report's `cause` line explains it; this names it among the mismatches.
            Mismatch::OutOfResources(s) => write!(
                f,
                "host {}: iwpmd ran out of {}: {} mappings refused",
                s.host,
                s.what(),
                s.refused
            ),
            Mismatch::DaemonExit { host, status } => {
                write!(f, "host {host}: iwpmd exited with {status} after SIGTERM")
            }
        }
    }
}

impl Mismatch {
    /// A connection that reached B without its REMOTE_INFO (what `--loss` can cause).
    pub fn is_missing_remote_info(&self) -> bool {
        matches!(
            self,
            Mismatch::Connection {
                problem: ConnProblem::NoRemoteInfo { .. },
                ..
            }
        )
    }
}

/// As its text, so the JSON report keeps one readable line per mismatch.
impl Serialize for Mismatch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_report_lines() {
        let conn = ConnTag {
            index: 3,
            local: "127.0.0.1:5000".parse().unwrap(),
            remote: "127.0.0.2:18515".parse().unwrap(),
        };
        let m = Mismatch::Connection {
            conn,
            problem: ConnProblem::QueryNotOk {
                answered: true,
                err: Some(16),
            },
        };
        assert_eq!(
            m.to_string(),
            "connection #3 127.0.0.1:5000 -> 127.0.0.2:18515: QUERY at the tap answered true \
             with error Some(16)"
        );
        assert_eq!(
            serde_json::to_string(&[Mismatch::RestartMissing]).unwrap(),
            r#"["daemon restart did not happen"]"#
        );
        let left = Mismatch::DaemonTableLeft {
            host: "A".into(),
            mappings: 1,
            ports: 2,
        };
        assert_eq!(
            left.to_string(),
            "host A: daemon still holds 1 mappings and 2 ports after teardown"
        );
    }
}

/// What a daemon ran out of while it reserved ports for mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Resource {
    /// File descriptors (`EMFILE` at its `RLIMIT_NOFILE`, or `ENFILE`): every port-mapped
    /// mapping holds a socket.
    FileDescriptors,
    /// Ephemeral ports (`net.ipv4.ip_local_port_range`).
    Ports,
}

/// A daemon refused mappings for lack of a resource (its `reserve_no_fd` /
/// `reserve_no_port` counters, and the warning it logged).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shortage {
    /// "A" or "B".
    pub host: String,
    /// What ran out.
    pub resource: Resource,
    /// Port reservations refused for it.
    pub refused: u64,
    /// The daemon's own warning about it (the first), without its log prefix.
    pub logged: Option<String>,
}
