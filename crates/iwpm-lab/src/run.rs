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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{AcceptMode, EventChannel, MapOutcome, PortMapMode, RemoteInfoLookup};

use crate::dump::Dump;
use crate::lab::{Family, Lab, LabError, Side, Topology};
use crate::report::{Connections, Latency, Mappings, Peer, Percentiles, Report, RunSettings};
use crate::workload::{connect_all, Acceptor, ConnRecord, Progress, WorkloadConfig};

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

/// How long the tables may take to empty after teardown.
const SETTLE: Duration = Duration::from_secs(10);

/// Runs the scenario and stops the daemons. `setup` is how long building the lab took
/// (reported); `progress` sees every connection outcome.
pub fn run(
    lab: &mut Lab,
    opts: &RunOptions,
    setup: Duration,
    mut progress: impl FnMut(Progress),
) -> Result<Report, LabError> {
    let t_start = Instant::now();
    let mut report = Report {
        settings: settings(lab, opts),
        ..Report::default()
    };
    let mut mismatches: Vec<String> = Vec::new();

    // B listens.
    let listen_addr = lab.b_addr(opts.listen_port);
    let channel = EventChannel::new();
    let listener = lab
        .b
        .host
        .listen(listen_addr, AcceptMode::Auto, Some(&channel))
        .map_err(LabError::Cm)?;
    let acceptor = Acceptor::start(channel);
    if listener.info.mapping != MapOutcome::Mapped {
        mismatches.push(format!(
            "B's listener on {listen_addr} is not mapped: {:?}",
            listener.info.mapping
        ));
    }
    let listen_mapped = listener.info.mapped_local;
    let setup_s = setup.as_secs_f64() + t_start.elapsed().as_secs_f64();

    // A connects; B's daemon may be restarted half-way.
    let t_connect = Instant::now();
    let host_a = lab.a.host.clone();
    let n = opts.workload.connections;
    let (tx, rx) = mpsc::channel::<()>();
    let mut records: Vec<ConnRecord> = Vec::new();
    let mut restart = None;
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
        records = connect_all(&host_a, listen_addr, &opts.workload, |p| {
            in_flight.store(p.in_flight, Ordering::Relaxed);
            progress(p);
            if !signalled && p.done >= (n / 2).max(1) {
                signalled = true;
                let _ = tx.send(());
            }
        });
        drop(tx);
        restart = restarter.and_then(|h| h.join().ok()).flatten();
    });
    let connect_s = t_connect.elapsed().as_secs_f64();
    match restart {
        Some(Ok(r)) => {
            mismatches.extend(r.lost.iter().cloned());
            mismatches.extend(r.changed.iter().cloned());
            mismatches.extend(r.mappings_lost.iter().cloned());
            if r.recovered == 0 {
                mismatches.push("the restarted daemon recovered no mapping".into());
            }
            report.restart = Some(r);
        }
        Some(Err(e)) => mismatches.push(format!("daemon restart failed: {e}")),
        None if opts.restart_daemon => mismatches.push("daemon restart did not happen".into()),
        None => {}
    }

    // The peak: both ends, both daemons, both kernels.
    let established: Vec<&ConnRecord> = records
        .iter()
        .filter(|r| r.established().is_some())
        .collect();
    let n_est = established.len();
    if !acceptor.wait(Duration::from_secs(10), |acc| {
        acc.iter().filter(|a| a.established).count() >= n_est
    }) {
        mismatches.push(format!(
            "passive side: {} of {n_est} connections established",
            acceptor.accepted().iter().filter(|a| a.established).count()
        ));
    }
    let accepted = acceptor.accepted();
    if accepted
        .iter()
        .any(|a| a.info.remote_info != Some(RemoteInfoLookup::Found))
    {
        // Overtaken REMOTE_INFOs may still be on their way.
        let want = n_est as u64;
        let deadline = Instant::now() + Duration::from_secs(5);
        while lab.b.host.stats().kernel.remote_info_received < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // REMOTE_INFO that reached B's kernel after the connection it describes (see
    // `Connections::remote_info_late`).
    let mut late_infos: Vec<(SocketAddr, SocketAddr)> = lab
        .b
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
        .collect();
    let dump_a = lab.a.dump()?;
    let dump_b = lab.b.dump()?;
    compare_tables(&lab.a, &dump_a, &mut mismatches);
    compare_tables(&lab.b, &dump_b, &mut mismatches);
    let port_mapped = lab.config.mode == PortMapMode::PortMapped;
    for (side, dump) in [(&lab.a, &dump_a), (&lab.b, &dump_b)] {
        let expect = if port_mapped { dump.mappings.len() } else { 0 };
        let held = dump.io("ports_held");
        if held != expect as u64 {
            mismatches.push(format!(
                "host {}: daemon holds {held} TCP ports for {} mappings",
                side.name,
                dump.mappings.len()
            ));
        }
    }
    match dump_b.find(listen_addr) {
        Some(m) if m.mapped == listen_mapped => {}
        Some(m) => mismatches.push(format!(
            "B's daemon maps the listener {listen_addr} to {}, B's kernel uses {listen_mapped}",
            m.mapped
        )),
        None => mismatches.push(format!("B's daemon has no mapping for {listen_addr}")),
    }
    let passive_by_tuple: HashMap<(SocketAddr, SocketAddr), usize> = accepted
        .iter()
        .enumerate()
        .map(|(i, a)| ((a.info.wire_remote, a.info.wire_local), i))
        .collect();
    let tap_a = lab.a.tap.as_ref().map(|t| t.records());
    let mut conns = Connections {
        attempted: records.len(),
        established: n_est,
        failed: records.len() - n_est,
        ..Connections::default()
    };
    for r in &records {
        if let Some(Err(f)) = &r.outcome {
            *conns.failures.entry(f.category().to_string()).or_default() += 1;
        }
    }
    if let Some(first) = records.iter().find_map(|r| match &r.outcome {
        Some(Err(f)) => Some((r.index, f.clone())),
        _ => None,
    }) {
        mismatches.push(format!(
            "{} of {} connections failed (first: #{} {:?})",
            conns.failed, conns.attempted, first.0, first.1
        ));
    }
    for r in &established {
        let Some(ai) = r.established() else { continue };
        let before = mismatches.len();
        let tag = format!("connection #{} {} -> {}", r.index, ai.local, ai.remote);
        if ai.mapping == MapOutcome::Mapped {
            conns.mapped += 1;
        } else {
            mismatches.push(format!("{tag}: not mapped ({:?})", ai.mapping));
        }
        match dump_a.find(ai.local) {
            Some(m) if m.mapped == ai.mapped_local => {}
            Some(m) => mismatches.push(format!(
                "{tag}: A's kernel uses mapped {}, A's daemon holds {}",
                ai.mapped_local, m.mapped
            )),
            None => mismatches.push(format!("{tag}: A's daemon has no mapping")),
        }
        if !port_mapped && ai.mapped_local != ai.local {
            mismatches.push(format!(
                "{tag}: no-port-map mapping is not the identity ({})",
                ai.mapped_local
            ));
        }
        if ai.mapped_remote != listen_mapped {
            mismatches.push(format!(
                "{tag}: mapped remote {} is not B's listener mapping {listen_mapped}",
                ai.mapped_remote
            ));
        }
        match passive_by_tuple.get(&(ai.wire_local, ai.wire_remote)) {
            None => mismatches.push(format!("{tag}: no passive end on B")),
            Some(&i) => {
                let pi = &accepted[i].info;
                if pi.remote_info == Some(RemoteInfoLookup::Found) {
                    conns.remote_info_found += 1;
                    if pi.remote != ai.local {
                        mismatches.push(format!(
                            "{tag}: B sees the peer as {}, it is {}",
                            pi.remote, ai.local
                        ));
                    }
                } else if let Some(k) = late_infos
                    .iter()
                    .position(|(mapped, real)| *mapped == ai.wire_local && *real == ai.local)
                {
                    // The daemon told B's kernel, but only after the connection arrived.
                    late_infos.swap_remove(k);
                    conns.remote_info_late += 1;
                } else {
                    mismatches.push(format!(
                        "{tag}: B's kernel got no REMOTE_INFO for the peer (sees {})",
                        pi.remote
                    ));
                }
                if pi.remote_info == Some(RemoteInfoLookup::Found) && pi.local != listen_addr {
                    mismatches.push(format!(
                        "{tag}: B's end is on {}, the listener is {listen_addr}",
                        pi.local
                    ));
                }
            }
        }
        if let Some(tap) = &tap_a {
            match tap.queries.get(&ai.local) {
                Some(q) if q.answered.is_some() && q.err == Some(0) => {}
                Some(q) => mismatches.push(format!(
                    "{tag}: QUERY at the tap answered {:?} with error {:?}",
                    q.answered.is_some(),
                    q.err
                )),
                None => mismatches.push(format!("{tag}: the tap saw no QUERY")),
            }
        }
        if mismatches.len() == before {
            conns.consistent += 1;
        }
    }
    let unmapped = lab.a.host.stats().kernel.maps_unmapped;
    if unmapped != 0 {
        mismatches.push(format!(
            "A's kernel fell back to unmapped addresses {unmapped} times"
        ));
    }
    let mut mappings = Mappings {
        peak_a: dump_a.mappings.len(),
        peak_b: dump_b.mappings.len(),
        ports_held_a: dump_a.io("ports_held"),
        ports_held_b: dump_b.io("ports_held"),
        ..Mappings::default()
    };
    report.latency = latency(lab, &records, &listen_addr);

    // Teardown.
    let t_teardown = Instant::now();
    for r in &records {
        let _ = r.id.destroy();
    }
    if !acceptor.wait(Duration::from_secs(10), |acc| {
        acc.iter().all(|a| a.disconnected || !a.established)
    }) {
        mismatches.push("passive ends were not all disconnected after teardown".into());
    }
    for a in acceptor.accepted() {
        let _ = a.id.destroy();
    }
    drop(acceptor);
    let _ = listener.id.destroy();
    for side in lab.sides_mut() {
        let view = side.host.kernel_view();
        if !view.mapinfo.is_empty() {
            mismatches.push(format!(
                "host {}: kernel still has {} mapinfo entries after teardown",
                side.name,
                view.mapinfo.len()
            ));
        }
    }
    let (left_a, left_b) = (settle(&mut lab.a)?, settle(&mut lab.b)?);
    mappings.after_teardown_a = left_a.mappings.len();
    mappings.after_teardown_b = left_b.mappings.len();
    for (name, d) in [("A", &left_a), ("B", &left_b)] {
        if !d.mappings.is_empty() || d.io("ports_held") != 0 {
            mismatches.push(format!(
                "host {name}: daemon still holds {} mappings and {} ports after teardown",
                d.mappings.len(),
                d.io("ports_held")
            ));
        }
        if d.exchanges_connecting.unwrap_or(0) != 0 {
            mismatches.push(format!(
                "host {name}: {} connecting exchanges still in flight after teardown",
                d.exchanges_connecting.unwrap_or(0)
            ));
        }
    }
    let teardown_s = t_teardown.elapsed().as_secs_f64();

    // Counters, violations, exits.
    report.peer = peer_counters(lab)?;
    report.peer.stale_remote_info = lab.b.host.kernel_view().remote_info.len();
    for side in [&lab.a, &lab.b] {
        for v in side.host.violations() {
            report.violations.push(format!("host {}: {v:?}", side.name));
        }
    }
    for side in lab.sides_mut() {
        if let Some(status) = side.stop_daemon()? {
            if !status.success() {
                mismatches.push(format!(
                    "host {}: iwpmd exited with {status} after SIGTERM",
                    side.name
                ));
            }
            report
                .daemon_exits
                .insert(side.name.clone(), status.to_string());
        }
    }

    report.connections = conns;
    report.mappings = mappings;
    report.timings.setup_s = setup_s;
    report.timings.connect_s = connect_s;
    report.timings.teardown_s = teardown_s;
    report.timings.total_s = setup.as_secs_f64() + t_start.elapsed().as_secs_f64();
    report.timings.connections_per_s = if connect_s > 0.0 {
        n_est as f64 / connect_s
    } else {
        0.0
    };
    report.ok = mismatches.is_empty() && report.violations.is_empty();
    report.mismatches = mismatches;
    Ok(report)
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
fn compare_tables(side: &Side, dump: &Dump, mismatches: &mut Vec<String>) {
    let view = side.host.kernel_view();
    let mut kernel: HashSet<(SocketAddr, SocketAddr)> = HashSet::new();
    for e in &view.mapinfo {
        if let (Some(l), Some(m)) = (e.local.to_socket_addr(), e.mapped.to_socket_addr()) {
            kernel.insert((l, m));
        }
    }
    let daemon: HashSet<(SocketAddr, SocketAddr)> =
        dump.mappings.iter().map(|m| (m.local, m.mapped)).collect();
    for (l, m) in kernel.difference(&daemon).take(5) {
        mismatches.push(format!(
            "host {}: kernel maps {l} -> {m}, the daemon does not",
            side.name
        ));
    }
    for (l, m) in daemon.difference(&kernel).take(5) {
        mismatches.push(format!(
            "host {}: daemon maps {l} -> {m}, the kernel does not",
            side.name
        ));
    }
    let extra = kernel.symmetric_difference(&daemon).count();
    if extra > 10 {
        mismatches.push(format!(
            "host {}: {extra} differences between kernel and daemon tables in all",
            side.name
        ));
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
        connect: Percentiles::of(&total),
        daemon_local: Percentiles::of(&local),
        peer_exchange: Percentiles::of(&peer),
        kernel_and_fabric: Percentiles::of(&rest),
        listen_add_ms,
    }
}

fn peer_counters(lab: &mut Lab) -> Result<Peer, LabError> {
    let ka = lab.a.host.stats().kernel;
    let kb = lab.b.host.stats().kernel;
    let mut p = Peer {
        exchanges: ka.query_replies,
        remote_infos: kb.remote_info_received,
        ..Peer::default()
    };
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for side in lab.sides_mut() {
        let d = side.total_counters()?;
        for key in [
            "peer_out[0]",
            "peer_out[1]",
            "peer_out[2]",
            "peer_out[3]",
            "retransmissions",
            "peer_duplicates",
        ] {
            *totals.entry(key).or_default() += d.core(key);
        }
        if let Some(r) = &side.relay {
            let st = r.stats();
            p.relay_seen += st.seen.iter().sum::<u64>();
            p.relay_dropped += st.dropped.iter().sum::<u64>();
            p.relay_extra_copies += st.duplicated + st.replayed;
            p.relay_reordered += st.reordered;
            p.relay_overtaken += st.overtaken;
            p.relay_spared += st.spared;
        }
    }
    p.requests = totals["peer_out[0]"];
    p.accepts = totals["peer_out[1]"];
    p.acks = totals["peer_out[2]"];
    p.rejects = totals["peer_out[3]"];
    p.retransmissions = totals["retransmissions"];
    p.duplicates = totals["peer_duplicates"];
    Ok(p)
}
