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

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwpm_core::Counter;
use iwpm_kernel_emu::{
    AcceptMode, ConnInfo, EventChannel, Listener, MapOutcome, PortMapMode, RemoteInfoLookup,
};
use iwpm_proto::peer::PeerMsgType;

use crate::dump::{Dump, IoCounter};
use crate::lab::{Family, Lab, LabError, RestartOutcome, Side, Topology};
use crate::mismatch::{ConnProblem, ConnTag, Mismatch};
use crate::report::{
    Connections, Latency, Mappings, Peer, Percentiles, Report, Resource, RunSettings, Shortage,
};
use crate::tap::TapRecords;
use crate::workload::{connect_all, Accepted, Acceptor, ConnRecord, Progress, WorkloadConfig};

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
    let t_start = Instant::now();
    let mut report = Report {
        settings: settings(lab, opts),
        ..Report::default()
    };
    let mut mismatches: Vec<Mismatch> = Vec::new();

    let (listening, found) = listen(lab, opts)?;
    mismatches.extend(found);
    report.timings.setup_s = setup.as_secs_f64() + t_start.elapsed().as_secs_f64();

    let t_connect = Instant::now();
    progress(RunEvent::Phase(Phase::Connecting {
        total: opts.workload.connections,
    }));
    let (records, restart) = workload(lab, opts, listening.addr, |p| {
        progress(RunEvent::Connections(p));
    });
    report.timings.connect_s = t_connect.elapsed().as_secs_f64();
    let (restart, found) = check_restart(opts.restart_daemon, restart);
    report.restart = restart;
    mismatches.extend(found);

    progress(RunEvent::Phase(Phase::Checking));
    let peak = check_peak(lab, &listening, &records)?;
    mismatches.extend(peak.mismatches);
    report.connections = peak.connections;
    report.mappings = peak.mappings;
    report.latency = latency(lab, &records, &listening.addr);

    progress(RunEvent::Phase(Phase::TearingDown));
    let t_teardown = Instant::now();
    mismatches.extend(teardown(lab, &records, listening, &mut report.mappings)?);
    report.timings.teardown_s = t_teardown.elapsed().as_secs_f64();

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
    t.total_s = setup.as_secs_f64() + t_start.elapsed().as_secs_f64();
    t.connections_per_s = if t.connect_s > 0.0 {
        report.connections.established as f64 / t.connect_s
    } else {
        0.0
    };
    report.ok = mismatches.is_empty() && report.violations.is_empty();
    report.mismatches = mismatches;
    Ok(report)
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

/// What the cross-checks at the peak found.
struct Peak {
    connections: Connections,
    mappings: Mappings,
    mismatches: Vec<Mismatch>,
}

/// Cross-checks at the peak: both ends, both daemons, both kernels.
fn check_peak(
    lab: &mut Lab,
    listening: &Listening,
    records: &[ConnRecord],
) -> Result<Peak, LabError> {
    let mut found = Vec::new();
    let established: Vec<&ConnInfo> = records.iter().filter_map(|r| r.established()).collect();
    found.extend(wait_passive(&listening.acceptor, established.len()));
    let accepted = listening.acceptor.accepted();
    wait_remote_infos(lab, &accepted, established.len());
    let mut late_infos = late_remote_infos(lab);
    let dump_a = lab.a.dump()?;
    let dump_b = lab.b.dump()?;
    found.extend(compare_tables(&lab.a, &dump_a));
    found.extend(compare_tables(&lab.b, &dump_b));
    let port_mapped = lab.config.mode == PortMapMode::PortMapped;
    for (side, dump) in [(&lab.a, &dump_a), (&lab.b, &dump_b)] {
        found.extend(check_ports_held(side, dump, port_mapped));
    }
    found.extend(check_listener(&dump_b, listening));
    let (mut connections, failed) = count_outcomes(records);
    found.extend(failed);
    let view = PeakView {
        mapped_a: newest_mapped(&dump_a),
        listen: listening.addr,
        listen_mapped: listening.mapped,
        port_mapped,
        passive_by_tuple: accepted
            .iter()
            .enumerate()
            .map(|(i, a)| ((a.info.wire_remote, a.info.wire_local), i))
            .collect(),
        accepted: &accepted,
        tap_a: lab.a.tap.as_ref().map(|t| t.records()),
    };
    for r in records {
        let Some(ai) = r.established() else { continue };
        let problems = check_connection(&view, ai, &mut late_infos, &mut connections);
        if problems.is_empty() {
            connections.consistent += 1;
        }
        let conn = ConnTag {
            index: r.index,
            local: ai.local,
            remote: ai.remote,
        };
        found.extend(
            problems
                .into_iter()
                .map(|problem| Mismatch::Connection { conn, problem }),
        );
    }
    let unmapped = lab.a.host.stats().kernel.maps_unmapped;
    if unmapped != 0 {
        found.push(Mismatch::KernelUnmapped { count: unmapped });
    }
    let mappings = Mappings {
        peak_a: dump_a.mappings.len(),
        peak_b: dump_b.mappings.len(),
        ports_held_a: dump_a.io(IoCounter::PortsHeld),
        ports_held_b: dump_b.io(IoCounter::PortsHeld),
        ..Mappings::default()
    };
    Ok(Peak {
        connections,
        mappings,
        mismatches: found,
    })
}

/// Every established active end has its passive end established on B.
fn wait_passive(acceptor: &Acceptor, n_est: usize) -> Option<Mismatch> {
    let all = acceptor.wait(Duration::from_secs(10), |acc| {
        acc.iter().filter(|a| a.established).count() >= n_est
    });
    (!all).then(|| Mismatch::PassiveNotEstablished {
        established: acceptor.accepted().iter().filter(|a| a.established).count(),
        expected: n_est,
    })
}

/// Gives REMOTE_INFOs overtaken by their connection a moment to reach B's kernel.
fn wait_remote_infos(lab: &Lab, accepted: &[Accepted], n_est: usize) {
    if accepted
        .iter()
        .all(|a| a.info.remote_info == Some(RemoteInfoLookup::Found))
    {
        return;
    }
    let want = n_est as u64;
    let deadline = Instant::now() + Duration::from_secs(5);
    while lab.b.host.stats().kernel.remote_info_received < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (mapped remote, real remote) of every REMOTE_INFO still in B's kernel: those that
/// reached it after the connection they describe (see `Connections::remote_info_late`).
fn late_remote_infos(lab: &Lab) -> Vec<(SocketAddr, SocketAddr)> {
    lab.b
        .host
        .kernel_view()
        .remote_info
        .iter()
        .filter_map(|e| {
            Some((
                e.mapped_remote.to_socket_addr()?,
                e.remote.to_socket_addr()?,
            ))
        })
        .collect()
}

/// In port-mapped mode the daemon holds one TCP port per mapping, otherwise none.
fn check_ports_held(side: &Side, dump: &Dump, port_mapped: bool) -> Option<Mismatch> {
    let expect = if port_mapped { dump.mappings.len() } else { 0 };
    let held = dump.io(IoCounter::PortsHeld);
    (held != expect as u64).then(|| Mismatch::PortsHeld {
        host: side.name.clone(),
        held,
        mappings: dump.mappings.len(),
    })
}

/// B's daemon maps the listener where B's kernel believes it is mapped.
fn check_listener(dump_b: &Dump, listening: &Listening) -> Option<Mismatch> {
    match dump_b.find(listening.addr) {
        Some(m) if m.mapped == listening.mapped => None,
        Some(m) => Some(Mismatch::ListenerMappedDifferently {
            listen: listening.addr,
            daemon: m.mapped,
            kernel: listening.mapped,
        }),
        None => Some(Mismatch::ListenerUnknown {
            listen: listening.addr,
        }),
    }
}

/// Connection outcomes by category; any failure is a mismatch naming the first.
fn count_outcomes(records: &[ConnRecord]) -> (Connections, Option<Mismatch>) {
    let n_est = records.iter().filter(|r| r.established().is_some()).count();
    let mut conns = Connections {
        attempted: records.len(),
        established: n_est,
        failed: records.len() - n_est,
        ..Connections::default()
    };
    for r in records {
        if let Some(Err(f)) = &r.outcome {
            *conns.failures.entry(f.category().to_string()).or_default() += 1;
        }
    }
    let first = records.iter().find_map(|r| match &r.outcome {
        Some(Err(f)) => Some(Mismatch::ConnectionsFailed {
            failed: conns.failed,
            attempted: conns.attempted,
            first_index: r.index,
            first: f.clone(),
        }),
        _ => None,
    });
    (conns, first)
}

/// What the per-connection checks compare against.
struct PeakView<'a> {
    /// A's mapped address by local address (the newest mapping of each, as
    /// [`Dump::find`] gives it).
    mapped_a: HashMap<SocketAddr, SocketAddr>,
    listen: SocketAddr,
    listen_mapped: SocketAddr,
    port_mapped: bool,
    accepted: &'a [Accepted],
    /// Passive ends by (their remote, their local) wire address.
    passive_by_tuple: HashMap<(SocketAddr, SocketAddr), usize>,
    tap_a: Option<TapRecords>,
}

/// Local to mapped address of each mapping in `dump`, the newest (first listed) where one
/// local address has several: one pass instead of a search per connection.
fn newest_mapped(dump: &Dump) -> HashMap<SocketAddr, SocketAddr> {
    let mut out = HashMap::with_capacity(dump.mappings.len());
    for m in &dump.mappings {
        out.entry(m.local).or_insert(m.mapped);
    }
    out
}

/// One established connection against the daemons, B's passive end and A's tap (see the
/// module docs); counts `mapped`, `remote_info_found` and `remote_info_late`. Late
/// REMOTE_INFOs used to excuse a connection are taken out of `late_infos`.
fn check_connection(
    view: &PeakView<'_>,
    ai: &ConnInfo,
    late_infos: &mut Vec<(SocketAddr, SocketAddr)>,
    conns: &mut Connections,
) -> Vec<ConnProblem> {
    let mut problems = Vec::new();
    if ai.mapping == MapOutcome::Mapped {
        conns.mapped += 1;
    } else {
        problems.push(ConnProblem::NotMapped(ai.mapping.clone()));
    }
    match view.mapped_a.get(&ai.local) {
        Some(&m) if m == ai.mapped_local => {}
        Some(&m) => problems.push(ConnProblem::MappedLocalDiffers {
            kernel: ai.mapped_local,
            daemon: m,
        }),
        None => problems.push(ConnProblem::NoDaemonMapping),
    }
    if !view.port_mapped && ai.mapped_local != ai.local {
        problems.push(ConnProblem::NotIdentity {
            mapped: ai.mapped_local,
        });
    }
    if ai.mapped_remote != view.listen_mapped {
        problems.push(ConnProblem::WrongMappedRemote {
            mapped_remote: ai.mapped_remote,
            listener: view.listen_mapped,
        });
    }
    match view.passive_by_tuple.get(&(ai.wire_local, ai.wire_remote)) {
        None => problems.push(ConnProblem::NoPassiveEnd),
        Some(&i) => {
            let pi = &view.accepted[i].info;
            problems.extend(check_passive_end(view, ai, pi, late_infos, conns));
        }
    }
    if let Some(tap) = &view.tap_a {
        match tap.queries.get(&ai.local) {
            Some(q) if q.answered.is_some() && q.err == Some(0) => {}
            Some(q) => problems.push(ConnProblem::QueryNotOk {
                answered: q.answered.is_some(),
                err: q.err,
            }),
            None => problems.push(ConnProblem::NoQuery),
        }
    }
    problems
}

/// B's end `pi` of the connection `ai` learned A's real address through REMOTE_INFO (or
/// the REMOTE_INFO arrived late) and sits on the listener's address.
fn check_passive_end(
    view: &PeakView<'_>,
    ai: &ConnInfo,
    pi: &ConnInfo,
    late_infos: &mut Vec<(SocketAddr, SocketAddr)>,
    conns: &mut Connections,
) -> Vec<ConnProblem> {
    let mut problems = Vec::new();
    let found = pi.remote_info == Some(RemoteInfoLookup::Found);
    if found {
        conns.remote_info_found += 1;
        if pi.remote != ai.local {
            problems.push(ConnProblem::WrongPeer {
                seen: pi.remote,
                actual: ai.local,
            });
        }
    } else if ai.wire_local == ai.local && pi.remote == ai.local {
        // A is not port mapped: no REMOTE_INFO is owed (the daemon sends none), and B's
        // kernel reports A's real address all the same.
        conns.remote_info_not_needed += 1;
    } else if let Some(k) = late_infos
        .iter()
        .position(|(mapped, real)| *mapped == ai.wire_local && *real == ai.local)
    {
        // The daemon told B's kernel, but only after the connection arrived.
        late_infos.swap_remove(k);
        conns.remote_info_late += 1;
    } else {
        problems.push(ConnProblem::NoRemoteInfo { seen: pi.remote });
    }
    if found && pi.local != view.listen {
        problems.push(ConnProblem::WrongListener {
            local: pi.local,
            listen: view.listen,
        });
    }
    problems
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

/// Every kernel mapinfo entry must be in the daemon's table with the same mapped address,
/// and the daemon must hold nothing the kernel does not know.
fn compare_tables(side: &Side, dump: &Dump) -> Vec<Mismatch> {
    let view = side.host.kernel_view();
    let mut kernel: HashSet<(SocketAddr, SocketAddr)> = HashSet::new();
    for e in &view.mapinfo {
        if let (Some(l), Some(m)) = (e.local.to_socket_addr(), e.mapped.to_socket_addr()) {
            kernel.insert((l, m));
        }
    }
    let daemon: HashSet<(SocketAddr, SocketAddr)> =
        dump.mappings.iter().map(|m| (m.local, m.mapped)).collect();
    let host = || side.name.clone();
    let mut found: Vec<Mismatch> = kernel
        .difference(&daemon)
        .take(5)
        .map(|&(local, mapped)| Mismatch::KernelOnly {
            host: host(),
            local,
            mapped,
        })
        .collect();
    found.extend(
        daemon
            .difference(&kernel)
            .take(5)
            .map(|&(local, mapped)| Mismatch::DaemonOnly {
                host: host(),
                local,
                mapped,
            }),
    );
    let count = kernel.symmetric_difference(&daemon).count();
    if count > 10 {
        found.push(Mismatch::TableDifferences {
            host: host(),
            count,
        });
    }
    found
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

fn latency(lab: &Lab, records: &[ConnRecord], listen_addr: &SocketAddr) -> Latency {
    let tap = lab.a.tap.as_ref().map(|t| t.records());
    let relay = lab.b.relay.as_ref().map(|r| r.exchanges());
    let (mut total, mut local, mut peer, mut rest) = (vec![], vec![], vec![], vec![]);
    for r in records {
        let (Some(info), Some(lat)) = (r.established(), r.latency()) else {
            continue;
        };
        total.push(lat);
        let q = tap
            .as_ref()
            .and_then(|t| t.queries.get(&info.local))
            .and_then(|q| Some(q.answered?.saturating_duration_since(q.sent)));
        if let Some(q) = q {
            rest.push(lat.saturating_sub(q));
            let p = relay
                .as_ref()
                .and_then(|m| m.get(&info.local))
                .and_then(|e| {
                    Some(
                        e.first_answer_delivered?
                            .saturating_duration_since(e.first_request),
                    )
                });
            if let Some(p) = p {
                peer.push(p);
                local.push(q.saturating_sub(p));
            }
        }
    }
    let listen_add_ms = lab
        .b
        .tap
        .as_ref()
        .and_then(|t| t.records().adds.get(listen_addr).copied())
        .and_then(|a| Some(a.answered?.saturating_duration_since(a.sent).as_secs_f64() * 1e3));
    Latency {
        connect_histogram: crate::histogram::buckets(&total),
        connect: Percentiles::of(&total),
        daemon_local: Percentiles::of(&local),
        peer_exchange: Percentiles::of(&peer),
        kernel_and_fabric: Percentiles::of(&rest),
        listen_add_ms,
    }
}

/// Peer traffic of both daemons (killed ones included) and of the relays, and what the
/// daemons ran out of.
fn peer_counters(lab: &mut Lab) -> Result<(Peer, Vec<Shortage>), LabError> {
    let ka = lab.a.host.stats().kernel;
    let kb = lab.b.host.stats().kernel;
    let mut p = Peer {
        exchanges: ka.query_replies,
        remote_infos: kb.remote_info_received,
        ..Peer::default()
    };
    let mut shortages = Vec::new();
    for side in lab.sides_mut() {
        let d = side.total_counters()?;
        shortages.extend(shortages_of(side, &d));
        p.requests += d.core(Counter::PeerOut(PeerMsgType::Request));
        p.accepts += d.core(Counter::PeerOut(PeerMsgType::Accept));
        p.acks += d.core(Counter::PeerOut(PeerMsgType::Ack));
        p.rejects += d.core(Counter::PeerOut(PeerMsgType::Reject));
        p.retransmissions += d.core(Counter::Retransmissions);
        p.duplicates += d.core(Counter::PeerDuplicates);
        if let Some(r) = &side.relay {
            let st = r.stats();
            p.relay_seen += st.seen.iter().sum::<u64>();
            p.relay_dropped += st.dropped.iter().sum::<u64>();
            p.relay_blocked += st.blocked;
            p.relay_extra_copies += st.duplicated + st.replayed;
            p.relay_reordered += st.reordered;
            p.relay_overtaken += st.overtaken;
            p.relay_spared += st.spared;
        }
    }
    Ok((p, shortages))
}

/// The daemon's refused reservations by resource (from its counters `d`, all incarnations),
/// with the warning its current incarnation logged about each.
fn shortages_of(side: &Side, d: &Dump) -> Vec<Shortage> {
    [
        (
            Resource::FileDescriptors,
            IoCounter::ReserveNoFd,
            "out of file descriptors",
        ),
        (Resource::Ports, IoCounter::ReserveNoPort, "out of ports"),
    ]
    .into_iter()
    .filter(|&(_, counter, _)| d.io(counter) > 0)
    .map(|(resource, counter, needle)| Shortage {
        host: side.name.clone(),
        resource,
        refused: d.io(counter),
        logged: side.daemon.as_ref().and_then(|daemon| {
            let log = daemon.log();
            let i = log.find_from(0, needle, Duration::ZERO)?;
            let line = log.lines_from(i).into_iter().next()?;
            Some(crate::daemon::message_of(&line).to_owned())
        }),
    })
    .collect()
}
