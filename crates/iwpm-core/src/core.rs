//! The [`Core`] state machine (skeleton; being filled in).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use crate::action::{Action, PeerSocket, ReservationId, ReserveError};
use crate::config::CoreConfig;
use crate::stats::Stats;
use crate::table::{MappingTable, MappingView};

/// A broken internal invariant (reported by [`Core::check_invariants`], for tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("core invariant violated: {0}")]
pub struct InvariantError(pub &'static str);

/// The port mapper state machine.
#[derive(Debug)]
pub struct Core {
    config: CoreConfig,
    abi: u16,
    table: MappingTable,
    actions: VecDeque<Action>,
    stats: Stats,
}

impl Core {
    /// Creates an idle core; call [`Core::start`] to begin the kernel handshake.
    pub fn new(config: CoreConfig, _now: Instant) -> Self {
        let abi = config.max_abi;
        Core {
            config,
            abi,
            table: MappingTable::default(),
            actions: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Queues HELLO(max_abi) to the kernel.
    pub fn start(&mut self, _now: Instant) {}

    /// One datagram from the kernel (port id 0).
    pub fn handle_kernel_datagram(&mut self, _now: Instant, _datagram: &[u8]) {}

    /// One UDP datagram received on `via` from `from`.
    pub fn handle_peer_datagram(
        &mut self,
        _now: Instant,
        _via: PeerSocket,
        _from: SocketAddr,
        _datagram: &[u8],
    ) {
    }

    /// The shell's answer to [`Action::Reserve`].
    pub fn handle_reserved(
        &mut self,
        _now: Instant,
        _id: ReservationId,
        _result: Result<u16, ReserveError>,
    ) {
    }

    /// Runs every timer due at or before `now`.
    pub fn handle_timeout(&mut self, _now: Instant) {}

    /// Next output, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Core::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// All mappings, newest first.
    pub fn mappings(&self) -> impl Iterator<Item = MappingView<'_>> {
        self.table.iter().map(|(id, m)| MappingTable::view(id, m))
    }

    /// The SIGUSR1 dump, one log line per element.
    pub fn dump_lines(&self) -> Vec<String> {
        vec!["print_iwpm_mapped_ports:".to_owned()]
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The negotiated iwpm ABI version.
    pub fn abi(&self) -> u16 {
        self.abi
    }

    /// The configuration in use.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Checks the internal indexes against each other (for tests and fuzzing).
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        self.table.check().map_err(InvariantError)
    }
}
