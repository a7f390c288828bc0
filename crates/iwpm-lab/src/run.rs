//! One full run on a [`Lab`]: B listens, A opens the connections (B's daemon optionally
//! killed and restarted half-way), everything is cross-checked at the peak, torn down and
//! checked again, and the daemons are stopped. The result is a [`Report`].
//!
//! What "consistent" means for one connection: the active end is established with the
//! daemons' mapping; A's daemon holds exactly the mapped local address A's kernel uses; the
//! mapped remote address is B's listener mapping as B's daemon and B's kernel hold it; the
//! passive end is the same wire connection seen from the other side and learned the
//! active end's real address through REMOTE_INFO; and the tap saw A's QUERY answered
//! without an error code.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{AcceptMode, EventChannel, Listener, MapOutcome, PortMapMode};

use crate::dump::{Dump, IoCounter};
use crate::lab::{Family, Lab, LabError, RestartOutcome, Side, Topology};
use crate::mismatch::Mismatch;
use crate::report::{Mappings, Report, RunSettings};
use crate::workload::{connect_all, Acceptor, ConnRecord, Progress, WorkloadConfig};

mod figures;
mod peak;

use figures::{latency, peer_counters};
use peak::check_peak;

/// What to do in a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The connections.
    pub workload: WorkloadConfig,
    /// The port B listens on.
    pub listen_port: u16,
    /// Kill B's daemon with SIGKILL half-way and restart it.
    pub restart_daemon: bool,
    /// How long B's daemon stays dead.
    pub restart_pause: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            workload: WorkloadConfig::default(),
            listen_port: 18515,
            restart_daemon: false,
            restart_pause: Duration::from_millis(200),
        }
    }
}

/// Where a run is, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEvent {
    /// A phase begins.
    Phase(Phase),
    /// A connection attempt got its outcome (during [`Phase::Connecting`]).
    Connections(Progress),
}

/// The phases of a run, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A opens the connections (and B's daemon may be restarted); `Connections` events
    /// follow.
    Connecting {
        /// Connections to open.
        total: usize,
    },
    /// The cross-checks at the peak (waiting for passive ends and REMOTE_INFOs, dumps).
    Checking,
    /// Every id destroyed; waiting for the tables to empty.
    TearingDown,
    /// Counters read, daemons stopped with SIGTERM.
    Stopping,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Connecting { .. } => "connecting",
            Phase::Checking => "checking both hosts, both daemons and both kernels at the peak",
            Phase::TearingDown => "tearing down, waiting for every table to empty",
            Phase::Stopping => "reading the counters, stopping the daemons",
        })
    }
}

/// How long the tables may take to empty after teardown.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs the scenario and stops the daemons. `setup` is how long building the lab took
/// (reported); `progress` sees each phase begin and every connection outcome.
///
/// Phases: set-up (B listens), workload (A connects, B's daemon maybe restarted), the
/// cross-checks at the peak, teardown with its checks, and the report. Every check returns
/// its [`Mismatch`]es; they are collected in phase order.
pub fn run(
    lab: &mut Lab,
    opts: &RunOptions,
    setup: Duration,
    mut progress: impl FnMut(RunEvent),
) -> Result<Report, LabError> {
    // Each phase is the time since the previous one ended, so the phases add up to the total.
    let mut clock = Lap(Instant::now());
    let mut report = Report {
        settings: settings(lab, opts),
        ..Report::default()
    };
    let mut mismatches: Vec<Mismatch> = Vec::new();

    let (listening, found) = listen(lab, opts)?;
    mismatches.extend(found);
    report.timings.setup_s = setup.as_secs_f64() + clock.lap();

    progress(RunEvent::Phase(Phase::Connecting {
        total: opts.workload.connections,
    }));
    let (records, restart) = workload(lab, opts, listening.addr, |p| {
        progress(RunEvent::Connections(p));
    });
    report.timings.connect_s = clock.lap();
    let (restart, found) = check_restart(opts.restart_daemon, restart);
    report.restart = restart;
    mismatches.extend(found);

    progress(RunEvent::Phase(Phase::Checking));
    let peak = check_peak(lab, &listening, &records)?;
    mismatches.extend(peak.mismatches);
    report.connections = peak.connections;
    report.mappings = peak.mappings;
    report.latency = latency(lab, &records, &listening.addr);
    report.timings.check_s = clock.lap();
    // To the millisecond: checks that found everything there at once "waited" a few µs.
    report.timings.check_wait_s = peak.waited.as_millis() as f64 / 1e3;

    progress(RunEvent::Phase(Phase::TearingDown));
    mismatches.extend(teardown(lab, &records, listening, &mut report.mappings)?);
    report.timings.teardown_s = clock.lap();

    progress(RunEvent::Phase(Phase::Stopping));
    mismatches.extend(finish(lab, &mut report)?);
    // A daemon that ran out of descriptors or ports explains the failures listed before.
    mismatches.splice(
        0..0,
        report
            .shortages
            .iter()
            .cloned()
            .map(Mismatch::OutOfResources),
    );
    let t = &mut report.timings;
    t.stop_s = clock.lap();
    t.total_s = t.setup_s + t.connect_s + t.check_s + t.teardown_s + t.stop_s;
    t.connections_per_s = if t.connect_s > 0.0 {
        report.connections.established as f64 / t.connect_s
    } else {
        0.0
    };
    report.ok = mismatches.is_empty() && report.violations.is_empty();
    report.mismatches = mismatches;
    Ok(report)
}

/// A stopwatch whose laps are contiguous: the time since the previous lap.
struct Lap(Instant);

impl Lap {
    /// Seconds since the previous lap (or the start).
    fn lap(&mut self) -> f64 {
        let now = Instant::now();
        let lap = now.saturating_duration_since(self.0);
        self.0 = now;
        lap.as_secs_f64()
    }
}

/// B's listener and the thread collecting its passive ends.
struct Listening {
    addr: SocketAddr,
    /// The listener's mapped address as B's kernel holds it.
    mapped: SocketAddr,
    listener: Listener,
    acceptor: Acceptor,
}

/// Set-up: B listens (auto-accept); the listener must be mapped.
fn listen(lab: &Lab, opts: &RunOptions) -> Result<(Listening, Option<Mismatch>), LabError> {
    let addr = lab.b_addr(opts.listen_port);
    let channel = EventChannel::new();
    let listener = lab
        .b
        .host
        .listen(addr, AcceptMode::Auto, Some(&channel))
        .map_err(LabError::Cm)?;
    let acceptor = Acceptor::start(channel);
    let found =
        (listener.info.mapping != MapOutcome::Mapped).then(|| Mismatch::ListenerNotMapped {
            listen: addr,
            outcome: listener.info.mapping.clone(),
        });
    let listening = Listening {
        addr,
        mapped: listener.info.mapped_local,
        listener,
        acceptor,
    };
    Ok((listening, found))
}

type RestartResult = Option<Result<RestartOutcome, LabError>>;

/// Workload: A opens the connections; with `--restart-daemon` a helper thread kills and
/// restarts B's daemon once half of them have an outcome.
fn workload(
    lab: &mut Lab,
    opts: &RunOptions,
    listen: SocketAddr,
    mut progress: impl FnMut(Progress),
) -> (Vec<ConnRecord>, RestartResult) {
    let host_a = lab.a.host.clone();
    let n = opts.workload.connections;
    let (tx, rx) = mpsc::channel::<()>();
    // Connections in flight as of the latest outcome, read by the restarter at the kill.
    let in_flight = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let side_b = &mut lab.b;
        let pause = opts.restart_pause;
        let in_flight = &in_flight;
        let restarter = opts.restart_daemon.then(|| {
            s.spawn(move || {
                rx.recv().ok().map(|()| {
                    side_b
                        .restart_daemon_observed(pause, || Some(in_flight.load(Ordering::Relaxed)))
                })
            })
        });
        let mut signalled = false;
        let records = connect_all(&host_a, listen, &opts.workload, |p| {
            in_flight.store(p.in_flight, Ordering::Relaxed);
            progress(p);
            if !signalled && p.done >= (n / 2).max(1) {
                signalled = true;
                let _ = tx.send(());
            }
        });
        drop(tx);
        let restart = restarter.and_then(|h| h.join().ok()).flatten();
        (records, restart)
    })
}

/// The restart (if asked for) happened, recovered the kernel's mappings and changed none.
fn check_restart(wanted: bool, restart: RestartResult) -> (Option<RestartOutcome>, Vec<Mismatch>) {
    match restart {
        Some(Ok(r)) => {
            let mut found: Vec<Mismatch> = r
                .lost
                .iter()
                .chain(&r.changed)
                .chain(&r.mappings_lost)
                .cloned()
                .map(Mismatch::Restart)
                .collect();
            if r.recovered == 0 {
                found.push(Mismatch::RestartRecoveredNothing);
            }
            (Some(r), found)
        }
        Some(Err(e)) => (None, vec![Mismatch::RestartFailed(e.to_string())]),
        None if wanted => (None, vec![Mismatch::RestartMissing]),
        None => (None, Vec::new()),
    }
}

/// Teardown: every id destroyed; then both kernels' and both daemons' tables must empty
/// and no connecting exchange may be left. Records what is left in `mappings`.
fn teardown(
    lab: &mut Lab,
    records: &[ConnRecord],
    listening: Listening,
    mappings: &mut Mappings,
) -> Result<Vec<Mismatch>, LabError> {
    let mut found = Vec::new();
    let Listening {
        listener, acceptor, ..
    } = listening;
    for r in records {
        let _ = r.id.destroy();
    }
    if !acceptor.wait(Duration::from_secs(10), |acc| {
        acc.iter().all(|a| a.disconnected || !a.established)
    }) {
        found.push(Mismatch::PassiveNotDisconnected);
    }
    for a in acceptor.accepted() {
        let _ = a.id.destroy();
    }
    drop(acceptor);
    let _ = listener.id.destroy();
    for side in lab.sides_mut() {
        let entries = side.host.kernel_view().mapinfo.len();
        if entries != 0 {
            found.push(Mismatch::KernelMapinfoLeft {
                host: side.name.clone(),
                entries,
            });
        }
    }
    let (left_a, left_b) = (settle(&mut lab.a)?, settle(&mut lab.b)?);
    mappings.after_teardown_a = left_a.mappings.len();
    mappings.after_teardown_b = left_b.mappings.len();
    for (name, d) in [("A", &left_a), ("B", &left_b)] {
        found.extend(check_left(name, d));
    }
    Ok(found)
}

/// A daemon's dump after teardown: no mapping, no port, no connecting exchange.
fn check_left(host: &str, d: &Dump) -> Vec<Mismatch> {
    let mut found = Vec::new();
    let ports = d.io(IoCounter::PortsHeld);
    if !d.mappings.is_empty() || ports != 0 {
        found.push(Mismatch::DaemonTableLeft {
            host: host.into(),
            mappings: d.mappings.len(),
            ports,
        });
    }
    let connecting = d.exchanges_connecting.unwrap_or(0);
    if connecting != 0 {
        found.push(Mismatch::ExchangesLeft {
            host: host.into(),
            connecting,
        });
    }
    found
}

/// Report: peer counters, violations, and the daemons' exits on SIGTERM (which must be
/// clean).
fn finish(lab: &mut Lab, report: &mut Report) -> Result<Vec<Mismatch>, LabError> {
    let mut found = Vec::new();
    (report.peer, report.shortages) = peer_counters(lab)?;
    report.peer.stale_remote_info = lab.b.host.kernel_view().remote_info.len();
    for side in [&lab.a, &lab.b] {
        for v in side.host.violations() {
            report.violations.push(format!("host {}: {v:?}", side.name));
        }
    }
    for side in lab.sides_mut() {
        if let Some(status) = side.stop_daemon()? {
            if !status.success() {
                found.push(Mismatch::DaemonExit {
                    host: side.name.clone(),
                    status: status.to_string(),
                });
            }
            report
                .daemon_exits
                .insert(side.name.clone(), status.to_string());
        }
    }
    Ok(found)
}

fn settings(lab: &Lab, opts: &RunOptions) -> RunSettings {
    let c = &lab.config;
    RunSettings {
        connections: opts.workload.connections,
        concurrency: opts.workload.concurrency,
        family: match c.family {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
        .into(),
        topology: match c.topology {
            Topology::Current if c.family == Family::V6 => "in a private network namespace",
            Topology::Current => "on loopback",
            Topology::Private => "in a private network namespace",
            Topology::VethPair => "in two network namespaces joined by a veth pair",
        }
        .into(),
        mode: match c.mode {
            PortMapMode::PortMapped => "port-mapped device (FLAGS=0)",
            PortMapMode::NoPortMap => "no-port-map device (siw, FLAGS=1)",
        }
        .into(),
        host_a: lab.a.addrs.public.to_string(),
        host_b: lab.b.addrs.public.to_string(),
        peer_port: lab.peer_port,
        relays: c.relay.is_some(),
        loss_percent: c.relay.as_ref().map_or(0.0, |r| r.loss * 100.0),
        duplicate_percent: c.relay.as_ref().map_or(0.0, |r| r.duplicate * 100.0),
        reorder_percent: c.relay.as_ref().map_or(0.0, |r| r.reorder * 100.0),
        restart_daemon: opts.restart_daemon,
        daemon_binary: lab
            .a
            .daemon
            .as_ref()
            .map(|d| d.config().binary.display().to_string())
            .unwrap_or_default(),
    }
}

/// Polls the daemon until its table is empty (REMOVEs are processed asynchronously).
fn settle(side: &mut Side) -> Result<Dump, LabError> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let d = side.dump()?;
        let busy = d.exchanges_connecting.unwrap_or(0) != 0;
        if (d.mappings.is_empty() && !busy) || Instant::now() >= deadline {
            return Ok(d);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
