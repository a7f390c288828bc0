//! The traffic: host A opens N connections to a listener on host B, at most C at a time,
//! through asynchronous rdma_cm-style ids on one event channel; host B accepts every
//! request. Both ends are recorded so the checks can pair them up.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{
    CmEvent, CmEventKind, CmId, ConnInfo, EmulatedHost, EventChannel, RejectReason,
};
use serde::Serialize;

/// How many connections and how fast.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Connections to open.
    pub connections: usize,
    /// At most this many in progress at once.
    pub concurrency: usize,
    /// Give up on one connection after this long (beyond the kernel's own 10 s timeout).
    pub per_connection_timeout: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            connections: 1000,
            concurrency: 32,
            per_connection_timeout: Duration::from_secs(40),
        }
    }
}

/// Why a connection did not get established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ConnFailure {
    /// `REJECTED` (no listener at the mapped address, duplicate tuple, or by the peer).
    Rejected(String),
    /// `UNREACHABLE`.
    Unreachable(String),
    /// `ADDR_ERROR`.
    AddrError(String),
    /// An id operation failed.
    Cm(String),
    /// No outcome within the per-connection timeout.
    Timeout,
    /// Established, then disconnected before the end of the run.
    Dropped,
}

impl ConnFailure {
    /// A short category for counting.
    pub fn category(&self) -> &'static str {
        match self {
            ConnFailure::Rejected(_) => "rejected",
            ConnFailure::Unreachable(_) => "unreachable",
            ConnFailure::AddrError(_) => "address error",
            ConnFailure::Cm(_) => "cm error",
            ConnFailure::Timeout => "timeout",
            ConnFailure::Dropped => "dropped",
        }
    }
}

impl std::fmt::Display for ConnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnFailure::Rejected(why) => write!(f, "rejected: {why}"),
            ConnFailure::Unreachable(why) => write!(f, "unreachable: {why}"),
            ConnFailure::AddrError(why) => write!(f, "address error: {why}"),
            ConnFailure::Cm(why) => write!(f, "rdma_cm error: {why}"),
            ConnFailure::Timeout => f.write_str("no outcome within the per-connection timeout"),
            ConnFailure::Dropped => f.write_str("established, then disconnected"),
        }
    }
}

/// Why the emulated fabric refused a connection, in words.
fn reject_text(r: RejectReason) -> String {
    match r {
        RejectReason::NoListener { wire_dst } => {
            format!("no listener at {wire_dst} (the connection was reset)")
        }
        RejectReason::DuplicateTuple { wire_src, wire_dst } => {
            format!("another live connection uses {wire_src} -> {wire_dst}")
        }
        RejectReason::ByPeer => "by the passive side".to_owned(),
    }
}

/// One active connection attempt.
#[derive(Clone, Debug)]
pub struct ConnRecord {
    /// Its index in the run.
    pub index: usize,
    /// The active id (destroyed at teardown).
    pub id: CmId,
    /// When the id was created.
    pub started: Instant,
    /// When the outcome arrived.
    pub finished: Option<Instant>,
    /// Established connection details, or why not.
    pub outcome: Option<Result<ConnInfo, ConnFailure>>,
}

impl ConnRecord {
    /// The established connection, if it was.
    pub fn established(&self) -> Option<&ConnInfo> {
        match &self.outcome {
            Some(Ok(info)) => Some(info),
            _ => None,
        }
    }

    /// Time from creation to the outcome.
    pub fn latency(&self) -> Option<Duration> {
        self.finished.map(|f| f.duration_since(self.started))
    }
}

/// Progress so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Attempts with an outcome.
    pub done: usize,
    /// Of which established.
    pub established: usize,
    /// Of which failed.
    pub failed: usize,
    /// Started and still without an outcome (connections in flight).
    pub in_flight: usize,
}

/// Opens the connections from `host` to `dst`; returns every attempt, established ones
/// still open. `on_progress` is called after each outcome and after the attempts that
/// replace finished ones have started, so its `in_flight` is never one short between an
/// outcome and the start of the next attempt (the restart line reads it at the kill).
pub fn connect_all(
    host: &EmulatedHost,
    dst: SocketAddr,
    config: &WorkloadConfig,
    on_progress: impl FnMut(Progress),
) -> Vec<ConnRecord> {
    let channel = EventChannel::new();
    let mut attempts = Attempts {
        records: Vec::with_capacity(config.connections),
        by_num: HashMap::new(),
        progress: Progress::default(),
        in_flight: 0,
        on_progress,
    };
    let concurrency = config.concurrency.max(1);
    while attempts.progress.done < config.connections {
        let started_before = attempts.records.len();
        while attempts.in_flight < concurrency && attempts.records.len() < config.connections {
            attempts.start(host, &channel, dst);
        }
        if attempts.records.len() > started_before {
            attempts.progress.in_flight = attempts.in_flight;
            (attempts.on_progress)(attempts.progress);
        }
        match channel.get_event(Duration::from_millis(100)) {
            Ok(event) => attempts.on_event(event),
            Err(_) => attempts.expire(config.per_connection_timeout),
        }
    }
    attempts.records
}

/// The attempts of one [`connect_all`] and their progress.
struct Attempts<F> {
    records: Vec<ConnRecord>,
    /// Record index by id number (events name the id).
    by_num: HashMap<u64, usize>,
    progress: Progress,
    in_flight: usize,
    on_progress: F,
}

impl<F: FnMut(Progress)> Attempts<F> {
    /// Creates one more id and starts resolving `dst`.
    fn start(&mut self, host: &EmulatedHost, channel: &EventChannel, dst: SocketAddr) {
        let index = self.records.len();
        let id = host.create_id(Some(channel));
        self.by_num.insert(id.num(), index);
        self.records.push(ConnRecord {
            index,
            id: id.clone(),
            started: Instant::now(),
            finished: None,
            outcome: None,
        });
        self.in_flight += 1;
        if let Err(e) = id.resolve_addr(None, dst) {
            self.finish_and_report(index, Err(ConnFailure::Cm(e.to_string())));
        }
    }

    /// Records the outcome of attempt `index` unless it already has one; true if it did
    /// not.
    fn finish(&mut self, index: usize, outcome: Result<ConnInfo, ConnFailure>) -> bool {
        let rec = &mut self.records[index];
        if rec.outcome.is_some() {
            return false;
        }
        rec.finished = Some(Instant::now());
        match &outcome {
            Ok(_) => self.progress.established += 1,
            Err(_) => self.progress.failed += 1,
        }
        rec.outcome = Some(outcome);
        self.progress.done += 1;
        self.in_flight -= 1;
        self.progress.in_flight = self.in_flight;
        true
    }

    fn finish_and_report(&mut self, index: usize, outcome: Result<ConnInfo, ConnFailure>) {
        if self.finish(index, outcome) {
            (self.on_progress)(self.progress);
        }
    }

    /// No event for a while: gives up on attempts older than `timeout` (one progress
    /// report for all of them).
    fn expire(&mut self, timeout: Duration) {
        let now = Instant::now();
        let mut changed = false;
        for index in 0..self.records.len() {
            let rec = &self.records[index];
            if rec.outcome.is_none() && now.duration_since(rec.started) > timeout {
                let _ = rec.id.destroy();
                changed |= self.finish(index, Err(ConnFailure::Timeout));
            }
        }
        if changed {
            (self.on_progress)(self.progress);
        }
    }

    /// Advances the attempt the event is for: the next rdma_cm step, or its outcome.
    fn on_event(&mut self, event: CmEvent) {
        let Some(&index) = self.by_num.get(&event.id.num()) else {
            return;
        };
        let rec = &mut self.records[index];
        let outcome = match event.kind {
            CmEventKind::AddrResolved => rec.id.resolve_route().err().map(|e| e.to_string()),
            CmEventKind::RouteResolved => rec.id.connect().err().map(|e| e.to_string()),
            CmEventKind::Established(info) => {
                self.finish_and_report(index, Ok(info));
                None
            }
            CmEventKind::Rejected(r) => {
                self.finish_and_report(index, Err(ConnFailure::Rejected(reject_text(r))));
                None
            }
            CmEventKind::Unreachable(r) => {
                let failure = ConnFailure::Unreachable(format!("{r:?}"));
                self.finish_and_report(index, Err(failure));
                None
            }
            CmEventKind::AddrError(e) => {
                self.finish_and_report(index, Err(ConnFailure::AddrError(e.to_string())));
                None
            }
            CmEventKind::Disconnected => {
                if rec.established().is_some() {
                    rec.outcome = Some(Err(ConnFailure::Dropped));
                }
                None
            }
            CmEventKind::ConnectRequest(_) => None,
        };
        if let Some(err) = outcome {
            self.finish_and_report(index, Err(ConnFailure::Cm(err)));
        }
    }
}

/// One accepted connection on the passive side.
#[derive(Clone, Debug)]
pub struct Accepted {
    /// The child id.
    pub id: CmId,
    /// Its connection details.
    pub info: ConnInfo,
    /// Got `ESTABLISHED`.
    pub established: bool,
    /// Got `DISCONNECTED`.
    pub disconnected: bool,
}

/// Collects the children of an auto-accepting listener from its event channel.
#[derive(Debug)]
pub struct Acceptor {
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    /// Starts draining `channel` (the listener's and its children's).
    pub fn start(channel: EventChannel) -> Acceptor {
        let stop = Arc::new(AtomicBool::new(false));
        let accepted: Arc<Mutex<Vec<Accepted>>> = Arc::default();
        let (s, acc) = (stop.clone(), accepted.clone());
        let thread = std::thread::Builder::new()
            .name("iwpm-lab-acceptor".into())
            .spawn(move || {
                let mut index: HashMap<u64, usize> = HashMap::new();
                while !s.load(Ordering::Acquire) {
                    let Ok(ev) = channel.get_event(Duration::from_millis(50)) else {
                        continue;
                    };
                    let mut list = acc.lock().unwrap_or_else(PoisonError::into_inner);
                    match ev.kind {
                        CmEventKind::ConnectRequest(info) => {
                            index.insert(ev.id.num(), list.len());
                            list.push(Accepted {
                                id: ev.id,
                                info,
                                established: false,
                                disconnected: false,
                            });
                        }
                        CmEventKind::Established(_) => {
                            if let Some(&i) = index.get(&ev.id.num()) {
                                list[i].established = true;
                            }
                        }
                        CmEventKind::Disconnected => {
                            if let Some(&i) = index.get(&ev.id.num()) {
                                list[i].disconnected = true;
                            }
                        }
                        _ => {}
                    }
                }
            })
            .ok();
        Acceptor {
            stop,
            accepted,
            thread,
        }
    }

    /// What was accepted so far.
    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `cond` holds for the accepted list.
    pub fn wait(&self, timeout: Duration, cond: impl Fn(&[Accepted]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if cond(&self.accepted.lock().unwrap_or_else(PoisonError::into_inner)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
