//! Reachability probes (`iwpmctl probe HOST`): is the peer daemon's UDP port reachable?
//!
//! A probe sends a REQUEST for port 0 on the peer's own IP. No mapping can have local port
//! 0 (the kernel maps bound endpoints only), so every port mapper — rdma-core's and ours —
//! answers with a REJECT at once and keeps nothing: a REJECT is sent from the look-up
//! failure alone, before any exchange record or REMOTE_INFO exists, so the peer's kernel
//! never hears of it. The REQUEST is repeated every [`PROBE_RESEND`] until the answer or
//! the deadline (so one lost datagram, or the peer's REJECT rate limit, is not mistaken
//! for a blocked port); the first REJECT (or, impossibly, ACCEPT) from the asked IP with
//! the probe's handle ends it.
//!
//! Probes never touch the mapping table or the exchange budgets, and at most
//! [`MAX_PROBES`] run at once.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use iwpm_proto::peer::{PeerMessage, PeerMsgType};

use super::Core;
use crate::action::{Action, PeerSocket};
use crate::outcome::{ProbeId, ProbeOutcome, ProbeResult};

/// Most probes in flight.
pub const MAX_PROBES: usize = 16;
/// Interval between a probe's REQUESTs.
pub(super) const PROBE_RESEND: Duration = Duration::from_millis(300);
/// Longest wait a probe may ask for.
pub const PROBE_MAX_WAIT: Duration = Duration::from_secs(10);

/// What a probe asks: named fields, since the two addresses share a type and a swap
/// would probe the wrong host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRequest {
    /// The peer daemon's IP (probed on the configured peer port).
    pub target: IpAddr,
    /// The address the REQUEST comes from (the one the shell's route to the target uses;
    /// it is the REQUEST's connecting address).
    pub source: IpAddr,
    /// How long to wait for the answer (capped at [`PROBE_MAX_WAIT`]).
    pub wait: Duration,
}

/// Why a probe could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// [`MAX_PROBES`] are already running.
    #[error("too many probes in flight (at most {MAX_PROBES})")]
    TooMany,
    /// The local and the target address are of different families.
    #[error("the local address and the target are of different address families")]
    FamilyMismatch,
    /// The target is a wildcard address.
    #[error("cannot probe a wildcard address")]
    Wildcard,
}

#[derive(Debug)]
pub(crate) struct Probe {
    id: ProbeId,
    handle: u64,
    target: SocketAddr,
    via: PeerSocket,
    request: Vec<u8>,
    started: Instant,
    deadline: Instant,
    next_send: Instant,
    sent: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Probes {
    running: Vec<Probe>,
    next_id: u64,
}

impl Probes {
    pub(super) fn next_timer(&self) -> Option<Instant> {
        self.running
            .iter()
            .map(|p| p.next_send.min(p.deadline))
            .min()
    }
}

impl Core {
    /// Starts a probe of the peer daemon at `probe.target` from `probe.source`. The
    /// result comes as [`Action::ProbeDone`] at the latest `probe.wait` (capped at
    /// [`PROBE_MAX_WAIT`]) from now.
    pub(crate) fn start_probe(
        &mut self,
        now: Instant,
        probe: ProbeRequest,
    ) -> Result<ProbeId, ProbeError> {
        let ProbeRequest {
            target: target_ip,
            source: local_ip,
            wait,
        } = probe;
        self.last_now = now;
        if self.probes.running.len() >= MAX_PROBES {
            return Err(ProbeError::TooMany);
        }
        if target_ip.is_unspecified() {
            return Err(ProbeError::Wildcard);
        }
        if target_ip.is_ipv4() != local_ip.is_ipv4() {
            return Err(ProbeError::FamilyMismatch);
        }
        let target = SocketAddr::new(target_ip, self.config.peer_port);
        let handle = self.handles.next_handle();
        let local = SocketAddr::new(local_ip, 0);
        let request = PeerMessage::request(handle, local, local, SocketAddr::new(target_ip, 0));
        self.probes.next_id += 1;
        let id = ProbeId(self.probes.next_id);
        let via = PeerSocket::client_for(&target);
        self.probes.running.push(Probe {
            id,
            handle,
            target,
            via,
            request: request.encode(),
            started: now,
            deadline: now + wait.min(PROBE_MAX_WAIT),
            next_send: now,
            sent: 0,
        });
        self.run_probe_timers(now);
        self.end_input();
        Ok(id)
    }

    /// Sends due REQUESTs and ends probes past their deadline.
    pub(super) fn run_probe_timers(&mut self, now: Instant) {
        let mut i = 0;
        while let Some(p) = self.probes.running.get_mut(i) {
            if now >= p.deadline {
                let p = self.probes.running.swap_remove(i);
                self.push(Action::ProbeDone(ProbeResult {
                    id: p.id,
                    target: p.target,
                    outcome: ProbeOutcome::NoAnswer,
                    elapsed: now.saturating_duration_since(p.started),
                    requests: p.sent,
                }));
                continue;
            }
            if now >= p.next_send {
                p.sent += 1;
                p.next_send = now + PROBE_RESEND;
                let (via, to, datagram) = (p.via, p.target, p.request.clone());
                self.send_peer(via, to, PeerMsgType::Request, datagram);
            }
            i += 1;
        }
    }

    /// True if `msg` (an ACCEPT or REJECT from `from`) answers a running probe, which then
    /// ends; such a message is not the exchanges' business.
    pub(super) fn probe_answered(
        &mut self,
        now: Instant,
        from: SocketAddr,
        msg: &PeerMessage,
    ) -> bool {
        let outcome = match msg.msg_type {
            PeerMsgType::Reject => ProbeOutcome::Rejected,
            PeerMsgType::Accept => ProbeOutcome::Accepted,
            _ => return false,
        };
        let Some(i) = self
            .probes
            .running
            .iter()
            .position(|p| p.handle == msg.assoc_handle && p.target.ip() == from.ip())
        else {
            return false;
        };
        let p = self.probes.running.swap_remove(i);
        self.push(Action::ProbeDone(ProbeResult {
            id: p.id,
            target: p.target,
            outcome,
            elapsed: now.saturating_duration_since(p.started),
            requests: p.sent,
        }));
        true
    }
}
