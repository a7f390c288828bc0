//! What the loop does for the operator's requests, each answered by its component from a
//! [`Snapshot`]: the control socket (`control.rs`), SIGUSR1 dumps (`dump.rs`) and SIGHUP's
//! key reload (`fleet_keys.rs`). Here only the glue: which component asks what of the host.

use std::time::{Duration, Instant};

use iwpm_control::{ErrorKind, Response};
use iwpm_core::{PeerSocket, ProbeRequest, ProbeResult};
use mio::event::Event;

use crate::control::server::{ConnId, ControlServer};
use crate::control::{probe_source, Answer, Control};
use crate::fleet_keys::{reload, FleetKeyState, KeySource, Loaded};
use crate::io_counters::HeldElsewhere;
use crate::snapshot::Snapshot;

use super::Shell;

impl Shell {
    /// The core, the counters and the key state at this moment, read-only.
    pub(crate) fn snapshot(&self) -> Snapshot<'_> {
        let ports = self.host.ports();
        Snapshot {
            core: self.host.core(),
            counters: &self.counters,
            elsewhere: HeldElsewhere {
                reserve_no_fd: ports.no_fd,
                reserve_no_port: ports.no_port,
                ports_held: u64::try_from(ports.held().len()).unwrap_or(u64::MAX),
                restart: self.restart.counts(),
            },
            fleet: self.fleet.as_ref(),
        }
    }

    /// Serves `server` from this loop from now on.
    pub(crate) fn attach_control(&mut self, server: ControlServer, kernel_link: String) {
        self.control = Some(Control::new(server, kernel_link));
    }

    /// The control socket's next deadline, to shorten the poll timeout.
    pub(super) fn control_deadline(&self) -> Option<Instant> {
        self.control.as_ref()?.deadline()
    }

    /// Readiness on one of the control socket's tokens.
    pub(super) fn control_event(&mut self, event: &Event) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let requests = control.requests_on(self.wakeups.registry(), event);
        self.control_requests(requests);
    }

    /// Once per loop turn: connection deadlines, pipelined requests.
    pub(super) fn control_turn(&mut self, now: Instant) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let requests = control.requests_this_turn(self.wakeups.registry(), now);
        self.control_requests(requests);
    }

    fn control_requests(&mut self, requests: Vec<(ConnId, iwpm_control::Request)>) {
        for (conn, req) in requests {
            let now = Instant::now();
            let Some(control) = self.control.as_ref() else {
                return;
            };
            let response = match control.answer(&self.snapshot(), now, req) {
                Answer::Now(response) => response,
                Answer::Probe { host, wait } => match self.start_probe(now, conn, host, wait) {
                    Ok(()) => continue,
                    Err((kind, message)) => Response::error(kind, message),
                },
            };
            self.control_respond(conn, &response);
        }
    }

    fn control_respond(&mut self, conn: ConnId, response: &Response) {
        if let Some(control) = self.control.as_mut() {
            control.respond(self.wakeups.registry(), conn, response);
        }
    }

    /// Starts a core probe of `host` for `conn`; its REQUESTs go out at once.
    fn start_probe(
        &mut self,
        now: Instant,
        conn: ConnId,
        host: std::net::IpAddr,
        wait: Duration,
    ) -> Result<(), (ErrorKind, String)> {
        let target = std::net::SocketAddr::new(host, self.host.core().config().peer_port);
        let client = self
            .peers
            .sockets
            .get(PeerSocket::client_for(&target))
            .map(mio::net::UdpSocket::local_addr);
        let local = probe_source(client, target)?;
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
            control.probe_started(id, conn, local);
        }
        self.flush(now);
        Ok(())
    }

    /// A probe ended (`Action::ProbeDone`): its answer goes to the connection that asked.
    pub(super) fn probe_done(&mut self, result: &ProbeResult) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        if let Some((conn, response)) = control.probe_done(result) {
            self.control_respond(conn, &response);
        }
    }

    /// SIGUSR1: starts a dump, or, while one is being written, notes that another one is
    /// wanted.
    pub(super) fn request_dump(&mut self) {
        if self.dump.asked(&mut self.counters) {
            self.start_dump();
        }
    }

    /// The writer finished a dump: start the one asked for meanwhile, if any.
    pub(super) fn dump_written(&mut self) {
        if self.dump.written() {
            self.start_dump();
        }
    }

    /// Takes the dump's text now, one consistent moment of the table, for the writer.
    fn start_dump(&mut self) {
        let started = Instant::now();
        let text = self.snapshot().dump();
        self.dump
            .submit(text, &mut self.counters, started.elapsed());
    }

    /// Hands the start-up keys to the core and keeps where they came from for SIGHUP.
    pub(crate) fn start_fleet_keys(&mut self, now: Instant, source: KeySource, loaded: Loaded) {
        self.fleet = Some(FleetKeyState::new(now, source, &loaded));
        self.host.set_fleet_keys(now, Some(loaded.keys));
    }

    /// SIGHUP: with a key file, reads it again (true); without one, false (the daemon
    /// exits, as rdma-core's does).
    pub(super) fn reload_fleet_keys(&mut self, now: Instant) -> bool {
        let Some(state) = self.fleet.as_mut() else {
            return false;
        };
        if let Some(keys) = reload(state, now) {
            self.host.set_fleet_keys(now, Some(keys));
        }
        true
    }
}
