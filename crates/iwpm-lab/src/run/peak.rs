//! The cross-checks at the peak of a run, when every connection is up: both ends of each
//! connection, both daemons' tables against both kernels' (the module docs of
//! [`crate::run`] say what "consistent" means), the ports the daemons hold, and the
//! REMOTE_INFO that reached B's kernel late.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use iwpm_kernel_emu::{ConnInfo, MapOutcome, PortMapMode, RemoteInfoLookup};

use crate::dump::{Dump, IoCounter};
use crate::lab::{Lab, LabError, Side};
use crate::mismatch::{ConnProblem, ConnTag, Mismatch};
use crate::report::{Connections, Mappings};
use crate::tap::TapRecords;
use crate::workload::{Accepted, Acceptor, ConnRecord};

use super::Listening;

/// What the cross-checks at the peak found.
pub(super) struct Peak {
    pub(super) connections: Connections,
    pub(super) mappings: Mappings,
    pub(super) mismatches: Vec<Mismatch>,
    /// How long the checks waited for passive ends and REMOTE_INFOs still on their way.
    pub(super) waited: Duration,
}

/// Cross-checks at the peak: both ends, both daemons, both kernels.
pub(super) fn check_peak(
    lab: &mut Lab,
    listening: &Listening,
    records: &[ConnRecord],
) -> Result<Peak, LabError> {
    let mut found = Vec::new();
    let established: Vec<&ConnInfo> = records.iter().filter_map(|r| r.established()).collect();
    let t_wait = Instant::now();
    found.extend(wait_passive(&listening.acceptor, established.len()));
    let accepted = listening.acceptor.accepted();
    wait_remote_infos(lab, &accepted, established.len());
    let waited = t_wait.elapsed();
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
        waited,
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

/// Gives REMOTE_INFOs overtaken by their connection a moment to reach B's kernel: until
/// one per connection arrived, none came for [`REMOTE_INFO_QUIET`] (the active side's
/// last ACK went out 60 ms after the ACCEPT; what has not come by then never will), or
/// 5 s. No wait without port mapping: the daemons send no REMOTE_INFO then.
fn wait_remote_infos(lab: &Lab, accepted: &[Accepted], n_est: usize) {
    if lab.config.mode == PortMapMode::NoPortMap
        || accepted
            .iter()
            .all(|a| a.info.remote_info == Some(RemoteInfoLookup::Found))
    {
        return;
    }
    let want = n_est as u64;
    let received = || lab.b.host.stats().kernel.remote_info_received;
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut seen, mut since) = (received(), Instant::now());
    while seen < want && Instant::now() < deadline && since.elapsed() < REMOTE_INFO_QUIET {
        std::thread::sleep(Duration::from_millis(10));
        let now = received();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
    }
}

/// How long no new REMOTE_INFO ends the wait for late ones.
const REMOTE_INFO_QUIET: Duration = Duration::from_secs(1);

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

/// Every kernel mapinfo entry must be in the daemon's table with the same mapped address,
/// and the daemon must hold nothing the kernel does not know.
pub(super) fn compare_tables(side: &Side, dump: &Dump) -> Vec<Mismatch> {
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
