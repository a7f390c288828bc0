//! The control socket component: the socket IO is `control/server.rs`; what the requests
//! mean is here, answers built from the core's read-only snapshots and the shell's own
//! counters, at one moment of the loop (so every answer is consistent with itself).
//!
//! Only `probe` is not answered at once: it starts a core probe, and the answer goes out
//! when the core reports the probe's end (`Action::ProbeDone`, at the latest at its
//! deadline).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use iwpm_control::{
    metrics, ClientEntry, Command, ErrorKind, ExchangeEntry, IoCounter, LogLevelReply,
    MappingEntry, MappingList, PeerEntry, PeersReport, ProbeReport, RecentEntry, Reply, Request,
    Response, StatusReport, TextReply,
};
use iwpm_core::{
    Counter, ExchangeOutcome, ExchangeSide, MappingRole, ProbeId, ProbeOutcome, ProbeResult,
};
use iwpm_report::Surface;
use mio::event::Event;
use mio::Registry;

use crate::fleet_keys::keys_report;
use crate::logging;
use crate::snapshot::Snapshot;

use self::server::{ConnId, ControlServer};

pub(crate) mod server;

/// A probe's default wait: the answer must come well within the 2 s an operator waits.
const PROBE_DEFAULT_WAIT: Duration = Duration::from_millis(1500);

/// The names of the counters that are gauges (the rest only grow), from their types: the
/// core's [`Counter::kind`] and the IO shell's [`IoCounter::kind`].
fn gauge_names() -> Vec<String> {
    let core = Counter::all().filter(|c| c.is_gauge()).map(Counter::name);
    let io = IoCounter::all()
        .filter(|c| c.is_gauge())
        .map(IoCounter::name);
    core.chain(io).map(str::to_owned).collect()
}

/// The control socket as the shell holds it.
#[derive(Debug)]
pub(crate) struct Control {
    server: ControlServer,
    /// `netlink` or `unix:PATH`, for `status`.
    kernel_link: String,
    /// Probes in flight and the connection each answers.
    probes: Vec<(ProbeId, ConnId, IpAddr)>,
}

/// What a request asks of the loop.
pub(crate) enum Answer {
    /// The answer, made from the snapshot: send it now.
    Now(Response),
    /// A probe of `host` (the shell starts it; the answer goes out when it ends).
    Probe { host: IpAddr, wait: Duration },
}

impl Control {
    /// Serves `server` from the loop from now on.
    pub(crate) fn new(server: ControlServer, kernel_link: String) -> Self {
        tracing::info!(path = %server.path().display(), "control socket ready");
        Control {
            server,
            kernel_link,
            probes: Vec::new(),
        }
    }

    /// The control socket's next deadline, to shorten the poll timeout.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.server.next_deadline()
    }

    /// Readiness on one of the control socket's tokens: the requests it completed.
    pub(crate) fn requests_on(
        &mut self,
        registry: &Registry,
        event: &Event,
    ) -> Vec<(ConnId, Request)> {
        self.server.handle_event(registry, event)
    }

    /// Once per loop turn: connection deadlines, then the pipelined requests due now.
    pub(crate) fn requests_this_turn(
        &mut self,
        registry: &Registry,
        now: Instant,
    ) -> Vec<(ConnId, Request)> {
        if !self.server.has_connections() {
            return Vec::new();
        }
        self.server.expire(registry, now);
        self.server.next_requests(registry)
    }

    /// What `req` asks for: an answer from `snap`, taken at `now`, or a probe.
    pub(crate) fn answer(&self, snap: &Snapshot<'_>, now: Instant, req: Request) -> Answer {
        tracing::debug!(cmd = req.command.name(), "control request");
        let response = match req.command {
            Command::Status => Response::ok(Reply::Status(self.status_report(snap, now))),
            Command::List => Response::ok(Reply::List(mapping_list(snap, now))),
            Command::Peers => Response::ok(Reply::Peers(peers_report(snap, now))),
            Command::Keys => Response::ok(Reply::Keys(keys_report(snap.fleet, snap.core, now))),
            Command::Metrics => Response::ok(Reply::Metrics(TextReply {
                text: metrics::render(&self.status_report(snap, now)),
            })),
            Command::Dump => Response::ok(Reply::Dump(TextReply {
                text: snap.dump_text(now),
            })),
            Command::LogLevel { set } => log_level(set),
            Command::Probe { host, timeout_ms } => {
                let wait = timeout_ms.map_or(PROBE_DEFAULT_WAIT, |ms| {
                    Duration::from_millis(u64::from(ms))
                });
                return Answer::Probe { host, wait };
            }
        };
        Answer::Now(response)
    }

    /// Sends `response` on `conn`.
    pub(crate) fn respond(&mut self, registry: &Registry, conn: ConnId, response: &Response) {
        self.server.respond(registry, conn, response);
    }

    /// A probe started for `conn`, from `local`: its answer waits for [`Control::probe_done`].
    pub(crate) fn probe_started(&mut self, id: ProbeId, conn: ConnId, local: IpAddr) {
        self.probes.push((id, conn, local));
    }

    /// A probe ended (`Action::ProbeDone`): its answer, and the connection that asked.
    pub(crate) fn probe_done(&mut self, result: &ProbeResult) -> Option<(ConnId, Response)> {
        let i = self.probes.iter().position(|(id, _, _)| *id == result.id)?;
        let (_, conn, local) = self.probes.swap_remove(i);
        let (reachable, answer) = match result.outcome {
            ProbeOutcome::Rejected => (true, "rejected"),
            ProbeOutcome::Accepted => (true, "accepted"),
            ProbeOutcome::NoAnswer => (false, "no-answer"),
        };
        tracing::info!(
            target = %result.target,
            answer,
            elapsed_ms = crate::logging::log_ms(result.elapsed),
            "probe finished"
        );
        let report = ProbeReport {
            target: result.target,
            local,
            reachable,
            answer: answer.to_owned(),
            elapsed_us: u64::try_from(result.elapsed.as_micros()).unwrap_or(u64::MAX),
            requests: result.requests,
        };
        Some((conn, Response::ok(Reply::Probe(report))))
    }

    fn status_report(&self, snap: &Snapshot<'_>, now: Instant) -> StatusReport {
        let stats = snap.core.stats();
        let core_counters: BTreeMap<String, u64> = stats
            .iter_on(Surface::Status)
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let io_counters: BTreeMap<String, u64> = snap
            .counters
            .with(&snap.elsewhere, Surface::Status)
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            abi: snap.core.abi(),
            handshake: snap.core.handshake_state().to_owned(),
            uptime_secs: now
                .saturating_duration_since(self.server.started)
                .as_secs_f64(),
            kernel_link: self.kernel_link.clone(),
            clients: snap
                .core
                .snapshot_clients()
                .into_iter()
                .map(|c| ClientEntry {
                    index: c.index,
                    ibdev: c.ibdev,
                    interface: c.interface,
                })
                .collect(),
            mappings: stats.mappings,
            ports_held: snap.elsewhere.ports_held,
            exchanges: stats.exchanges_active,
            control_clients: self.server.clients() as u64,
            core_counters,
            io_counters,
            gauges: gauge_names(),
        }
    }
}

fn mapping_list(snap: &Snapshot<'_>, now: Instant) -> MappingList {
    let clients = snap.core.snapshot_clients();
    let mappings = snap
        .core
        .snapshot_mappings(now)
        .into_iter()
        .map(|m| {
            let mut flags = Vec::new();
            if m.wildcard {
                flags.push("wildcard".to_owned());
            }
            if m.no_port_map {
                flags.push("no_port_map".to_owned());
            }
            MappingEntry {
                local: SocketAddr::from(m.local),
                mapped: SocketAddr::from(m.mapped),
                owner_client: m.owner_client,
                owner_device: clients
                    .iter()
                    .find(|c| c.index == m.owner_client)
                    .map(|c| c.ibdev.clone()),
                refcount: m.refcount,
                flags,
                role: match m.role {
                    MappingRole::Listener => "listener",
                    MappingRole::Connector => "connector",
                    MappingRole::Recovered => "recovered",
                }
                .to_owned(),
                age_ms: millis(m.age),
            }
        })
        .collect();
    MappingList { mappings }
}

fn peers_report(snap: &Snapshot<'_>, now: Instant) -> PeersReport {
    let mut in_flight: Vec<ExchangeEntry> = snap
        .core
        .snapshot_exchanges(now)
        .into_iter()
        .map(|e| ExchangeEntry {
            peer: e.peer,
            state: match e.side {
                ExchangeSide::Requesting => "requesting",
                ExchangeSide::Acked => "acked",
                ExchangeSide::Accepting => "accepting",
                ExchangeSide::Confirmed => "confirmed",
            }
            .to_owned(),
            local: e.local.map(SocketAddr::from),
            retransmissions: e.retransmissions,
            age_ms: millis(e.age),
            expires_in_ms: millis(e.expires_in),
        })
        .collect();
    in_flight.sort_by_key(|e| std::cmp::Reverse(e.age_ms));
    let recent = snap
        .core
        .recent_exchanges()
        .into_iter()
        .map(|r| RecentEntry {
            peer: r.peer,
            outcome: match r.outcome {
                ExchangeOutcome::Accepted => "accepted",
                ExchangeOutcome::Rejected => "rejected",
                ExchangeOutcome::TimedOut => "timed-out",
            }
            .to_owned(),
            retransmissions: r.retransmissions,
            took_ms: millis(r.took),
            ended_ago_ms: millis(now.saturating_duration_since(r.ended_at)),
        })
        .collect();
    let mut peers: Vec<PeerEntry> = snap
        .core
        .snapshot_peers(now)
        .into_iter()
        .map(|p| PeerEntry {
            ip: p.ip,
            tally: p.tally,
            last_seen_ms: millis(p.last_seen),
        })
        .collect();
    peers.sort_by_key(|p| p.ip);
    PeersReport {
        in_flight,
        recent,
        peers,
    }
}

/// Where a probe of `target` would leave from: the source address the routing picks from
/// the daemon's client socket for its family (`client`: that socket's address, `None`
/// when this daemon has none). The REQUESTs leave from that socket: when it is bound to one address, the route
/// must start there (a daemon bound to 127.0.0.1 cannot reach another host at all, and
/// saying "filtered" then would send the operator to the wrong firewall).
pub(crate) fn probe_source(
    client: Option<std::io::Result<SocketAddr>>,
    target: SocketAddr,
) -> Result<IpAddr, (ErrorKind, String)> {
    let host = target.ip();
    let Some(client) = client else {
        return Err((
            ErrorKind::Failed,
            format!("this daemon has no peer socket for {host}'s address family"),
        ));
    };
    let bound = client.map_or_else(|_| unspecified(host), |a| a.ip());
    route_source(target, bound).map_err(|e| {
        let from = if bound.is_unspecified() {
            String::new()
        } else {
            format!(" from {bound}, the address this daemon's peer sockets are bound to")
        };
        (
            ErrorKind::Failed,
            format!("cannot send to {host}{from}: {e}; nothing was sent"),
        )
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wildcard address of `ip`'s family.
fn unspecified(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    }
}

/// The source address the kernel picks for a datagram from `bound` (a wildcard, or the
/// one address the daemon's socket is bound to) to `target`: a connected UDP socket asks
/// the routing table without sending anything.
fn route_source(target: SocketAddr, bound: IpAddr) -> std::io::Result<IpAddr> {
    let sock = UdpSocket::bind(SocketAddr::new(bound, 0))?;
    sock.connect(target)?;
    Ok(sock.local_addr()?.ip())
}

fn log_level(set: Option<String>) -> Response {
    match set {
        None => match logging::current_filter() {
            Some(filter) => Response::ok(Reply::LogLevel(LogLevelReply {
                filter,
                previous: None,
            })),
            None => Response::error(ErrorKind::Failed, "the log filter cannot be changed"),
        },
        Some(directives) => match logging::set_filter(&directives) {
            Ok((previous, filter)) => {
                tracing::warn!(%filter, %previous, "log filter changed over the control socket");
                Response::ok(Reply::LogLevel(LogLevelReply {
                    filter,
                    previous: Some(previous),
                }))
            }
            Err(e) => Response::error(ErrorKind::InvalidArgument, e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use iwpm_control::StatusReport;
    use iwpm_core::Stats;

    use super::*;

    #[test]
    fn every_gauge_renders_as_a_gauge_and_every_total_as_a_counter() {
        let core_counters = Stats::default()
            .iter()
            .map(|(n, v)| (n.to_owned(), v))
            .collect();
        let io_counters = IoCounter::all().map(|c| (c.name().to_owned(), 0)).collect();
        let status = StatusReport {
            version: "0".into(),
            pid: 1,
            abi: 4,
            handshake: "done".into(),
            uptime_secs: 0.0,
            kernel_link: "netlink".into(),
            clients: vec![],
            mappings: 0,
            ports_held: 0,
            exchanges: 0,
            control_clients: 0,
            core_counters,
            io_counters,
            gauges: gauge_names(),
        };
        let text = metrics::render(&status);
        let families = Counter::all()
            .map(|c| {
                (
                    format!("iwpmd_core_{c}"),
                    c.is_gauge(),
                    c.shows_in(Surface::Metrics),
                )
            })
            .chain(IoCounter::all().map(|c| {
                let shown = c.shows_in(Surface::Metrics);
                (format!("iwpmd_io_{c}"), c.is_gauge(), shown)
            }));
        for (family, is_gauge, shown) in families {
            let kind = if is_gauge { "gauge" } else { "counter" };
            let sample = if is_gauge {
                format!("\n{family} 0\n")
            } else {
                format!("\n{family}_total 0\n")
            };
            assert_eq!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                shown,
                "{family}"
            );
            assert_eq!(text.contains(&sample), shown, "{family}");
        }
        // Each figure under one name: the gauges above carry these.
        for gone in [
            "iwpmd_core_mappings",
            "iwpmd_core_exchanges_active",
            "iwpmd_core_kernel_overruns",
            "iwpmd_io_ports_held",
        ] {
            assert!(!text.contains(&format!("# TYPE {gone} ")), "{gone}");
        }
        assert!(text.contains("\niwpmd_mappings 0\n"));
        assert!(text.contains("# TYPE iwpmd_core_peer_exchanges_active gauge\n"));
        assert!(text.contains("\niwpmd_io_kernel_overruns_total 0\n"));
        assert!(text.contains("iwpmd_core_mappings_created_total 0\n"));
    }
}
