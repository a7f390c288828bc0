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
    Counter, ExchangeOutcome, ExchangeSide, MappingRole, PeerSocket, ProbeId, ProbeOutcome,
    ProbeRequest, ProbeResult,
};
use iwpm_report::Surface;
use mio::event::Event;

use crate::dump;
use crate::logging;
use crate::shell::Shell;

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

impl Shell {
    /// Serves `server` from this loop from now on.
    pub(crate) fn attach_control(&mut self, server: ControlServer, kernel_link: String) {
        tracing::info!(path = %server.path().display(), "control socket ready");
        self.control = Some(Control {
            server,
            kernel_link,
            probes: Vec::new(),
        });
    }

    /// The control socket's next deadline, to shorten the poll timeout.
    pub(crate) fn control_deadline(&self) -> Option<Instant> {
        self.control.as_ref()?.server.next_deadline()
    }

    /// Readiness on one of the control socket's tokens.
    pub(crate) fn control_event(&mut self, event: &Event) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let requests = control.server.handle_event(self.wakeups.registry(), event);
        for (conn, req) in requests {
            self.control_request(conn, req);
        }
    }

    /// Once per loop turn: connection deadlines, pipelined requests.
    pub(crate) fn control_turn(&mut self, now: Instant) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        if !control.server.has_connections() {
            return;
        }
        control.server.expire(self.wakeups.registry(), now);
        let next = control.server.next_requests(self.wakeups.registry());
        for (conn, req) in next {
            self.control_request(conn, req);
        }
    }

    fn control_request(&mut self, conn: ConnId, req: Request) {
        let now = Instant::now();
        tracing::debug!(cmd = req.command.name(), "control request");
        let response = match req.command {
            Command::Status => Response::ok(Reply::Status(self.status_report(now))),
            Command::List => Response::ok(Reply::List(self.mapping_list(now))),
            Command::Peers => Response::ok(Reply::Peers(self.peers_report(now))),
            Command::Keys => Response::ok(Reply::Keys(self.keys_report(now))),
            Command::Metrics => Response::ok(Reply::Metrics(TextReply {
                text: metrics::render(&self.status_report(now)),
            })),
            Command::Dump => Response::ok(Reply::Dump(TextReply {
                text: self.dump_text(now),
            })),
            Command::LogLevel { set } => log_level(set),
            Command::Probe { host, timeout_ms } => {
                let wait = timeout_ms.map_or(PROBE_DEFAULT_WAIT, |ms| {
                    Duration::from_millis(u64::from(ms))
                });
                match self.start_probe(now, conn, host, wait) {
                    Ok(()) => return,
                    Err((kind, message)) => Response::error(kind, message),
                }
            }
        };
        self.control_respond(conn, &response);
    }

    fn control_respond(&mut self, conn: ConnId, response: &Response) {
        if let Some(control) = self.control.as_mut() {
            control
                .server
                .respond(self.wakeups.registry(), conn, response);
        }
    }

    fn status_report(&self, now: Instant) -> StatusReport {
        let (uptime, kernel_link, control_clients) = match &self.control {
            Some(c) => (
                now.saturating_duration_since(c.server.started),
                c.kernel_link.clone(),
                c.server.clients(),
            ),
            None => (Duration::ZERO, String::new(), 0),
        };
        let stats = self.host.core().stats();
        let core_counters: BTreeMap<String, u64> = stats
            .iter_on(Surface::Status)
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let elsewhere = self.held_elsewhere();
        let io_counters: BTreeMap<String, u64> = self
            .counters
            .with(&elsewhere, Surface::Status)
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let gauges = gauge_names();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            abi: self.host.core().abi(),
            handshake: self.host.core().handshake_state().to_owned(),
            uptime_secs: uptime.as_secs_f64(),
            kernel_link,
            clients: self
                .host
                .core()
                .snapshot_clients()
                .into_iter()
                .map(|c| ClientEntry {
                    index: c.index,
                    ibdev: c.ibdev,
                    interface: c.interface,
                })
                .collect(),
            mappings: stats.mappings,
            ports_held: elsewhere.ports_held,
            exchanges: stats.exchanges_active,
            control_clients: control_clients as u64,
            core_counters,
            io_counters,
            gauges,
        }
    }

    fn mapping_list(&self, now: Instant) -> MappingList {
        let clients = self.host.core().snapshot_clients();
        let mappings = self
            .host
            .core()
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

    fn peers_report(&self, now: Instant) -> PeersReport {
        let mut in_flight: Vec<ExchangeEntry> = self
            .host
            .core()
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
        let recent = self
            .host
            .core()
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
        let mut peers: Vec<PeerEntry> = self
            .host
            .core()
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

    /// The SIGUSR1 dump's lines (table, IO counters, core counters), newline-separated.
    fn dump_text(&self, now: Instant) -> String {
        let mut lines = self.host.core().dump_lines_at(now);
        lines.push(self.io_counters_line());
        lines.push(dump::pairs_line(
            "core counters",
            self.host.core().stats().iter_on(Surface::Dump),
        ));
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }

    fn start_probe(
        &mut self,
        now: Instant,
        conn: ConnId,
        host: IpAddr,
        wait: Duration,
    ) -> Result<(), (ErrorKind, String)> {
        let target = SocketAddr::new(host, self.host.core().config().peer_port);
        let Some(client) = self.peers.sockets.get(PeerSocket::client_for(&target)) else {
            return Err((
                ErrorKind::Failed,
                format!("this daemon has no peer socket for {host}'s address family"),
            ));
        };
        // The REQUESTs leave from the daemon's client socket: when it is bound to one
        // address, the route must start there (a daemon bound to 127.0.0.1 cannot reach
        // another host at all, and saying "filtered" then would send the operator to the
        // wrong firewall).
        let bound = client
            .local_addr()
            .map_or_else(|_| unspecified(host), |a| a.ip());
        let local = route_source(target, bound).map_err(|e| {
            let from = if bound.is_unspecified() {
                String::new()
            } else {
                format!(" from {bound}, the address this daemon's peer sockets are bound to")
            };
            (
                ErrorKind::Failed,
                format!("cannot send to {host}{from}: {e}; nothing was sent"),
            )
        })?;
        let id = self
            .host
            .start_probe(
                now,
                ProbeRequest {
                    target: host,
                    source: local,
                    wait,
                },
            )
            .map_err(|e| (ErrorKind::Busy, e.to_string()))?;
        if let Some(control) = self.control.as_mut() {
            control.probes.push((id, conn, local));
        }
        self.flush(now);
        Ok(())
    }

    /// A probe ended (`Action::ProbeDone`): its answer goes to the connection that asked.
    pub(crate) fn probe_done(&mut self, result: &ProbeResult) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let Some(i) = control
            .probes
            .iter()
            .position(|(id, _, _)| *id == result.id)
        else {
            return;
        };
        let (_, conn, local) = control.probes.swap_remove(i);
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
        self.control_respond(conn, &Response::ok(Reply::Probe(report)));
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The local address the kernel's routing picks towards `target` (a connected UDP socket
/// sends nothing; it only asks the route).
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
