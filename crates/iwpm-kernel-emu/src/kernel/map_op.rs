//! `iw_cm_map` and the request senders it uses (`iwpm_register_pid`, `iwpm_add_mapping`,
//! `iwpm_add_and_query_mapping`, `iwpm_remove_mapping`), split at every point where the
//! kernel sleeps waiting for a reply.

use std::time::Instant;

use iwpm_proto::consts::{
    IWPM_DEVNAME_SIZE, IWPM_IFNAME_SIZE, IWPM_UABI_VERSION_MIN, IWPM_ULIB_NAME,
};
use iwpm_proto::kernel_side::requests::{
    add_mapping, encode_request, mapping_flags, query_mapping, reg_pid, remove_mapping,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use super::{
    Completion, KernelIwpm, Link, MapError, MapOp, MapOutcome, MapRequest, MapResult, MapToken,
    PendingRequest, Phase, Registration, RequestKind, RequestState, SendError, SendMode,
    UnmappedReason, IWPM_PID_UNAVAILABLE, IWPM_PID_UNDEFINED,
};
use crate::kernel::tables::MapInfoEntry;

impl<A: Clone + PartialEq + std::fmt::Debug> KernelIwpm<A> {
    pub(super) fn begin_map(
        &mut self,
        now: Instant,
        request: MapRequest,
        link: &mut dyn Link<A>,
    ) -> Result<MapToken, MapError> {
        if self.config.ibdev_name.len() >= IWPM_DEVNAME_SIZE
            || self.config.if_name.len() >= IWPM_IFNAME_SIZE
        {
            return Err(MapError::NameTooLong);
        }
        self.stats.maps_started += 1;
        let token = MapToken(self.next_token);
        self.next_token += 1;
        self.ops.insert(
            token,
            MapOp {
                request,
                phase: Phase::Registering { seq: 0 },
                completion: None,
            },
        );
        // iwpm_register_pid: nothing to do when registered or when no daemon listens.
        if self.registration == Registration::Valid || self.pid == IWPM_PID_UNAVAILABLE {
            self.after_register(now, token, link);
        } else {
            self.send_reg_pid(now, token, link);
        }
        Ok(token)
    }

    /// Continues the caller of a request that has just completed (reply, error, timeout).
    pub(super) fn resume(&mut self, now: Instant, token: MapToken, link: &mut dyn Link<A>) {
        let Some(op) = self.ops.get_mut(&token) else {
            return;
        };
        let Some(completion) = op.completion.take() else {
            return;
        };
        match op.phase {
            Phase::Registering { seq } => match completion {
                // HANDLE_ERR 0 returns 0 to iwpm_register_pid without registering.
                Completion::Success { .. } | Completion::HandleErrZero => {
                    self.after_register(now, token, link)
                }
                Completion::Code(code) => self.finish_unmapped(
                    token,
                    UnmappedReason::ErrorCode {
                        kind: RequestKind::RegPid,
                        code,
                    },
                ),
                Completion::TimedOut => self.finish_unmapped(
                    token,
                    UnmappedReason::Timeout {
                        kind: RequestKind::RegPid,
                        seq,
                    },
                ),
            },
            Phase::Mapping { seq, kind } => {
                let result = match completion {
                    Completion::Success {
                        mapped_local,
                        mapped_remote,
                    } => Ok((mapped_local, mapped_remote)),
                    Completion::Code(code) => Err(UnmappedReason::ErrorCode { kind, code }),
                    Completion::HandleErrZero => Err(UnmappedReason::HandleErrZero { kind }),
                    Completion::TimedOut => Err(UnmappedReason::Timeout { kind, seq }),
                };
                self.finish_mapped(token, result);
            }
        }
    }

    fn send_reg_pid(&mut self, now: Instant, token: MapToken, link: &mut dyn Link<A>) {
        let seq = self.next_seq();
        let msg = reg_pid(
            self.echo_seq,
            &self.config.if_name,
            &self.config.ibdev_name,
            IWPM_ULIB_NAME,
        );
        let buf = encode_request(seq, &msg);
        self.stats.reg_pid_sent += 1;
        let sent = match self.group_member.clone() {
            None => Err(SendError::NoListener),
            Some(member) => link.send(&member, &buf, SendMode::NonBlocking),
        };
        if let Err(e) = sent {
            // netlink_broadcast: -ENOBUFS if the member's queue is full, else -ESRCH.
            let errno = match e {
                SendError::WouldBlock => -105,
                _ => -3,
            };
            tracing::info!(
                errno,
                "iwpm_register_pid: Unable to send a nlmsg (client = 2)"
            );
            self.stats.multicast_failures += 1;
            self.pid = IWPM_PID_UNAVAILABLE;
            self.finish_unmapped(token, UnmappedReason::RegPidSendFailed { errno });
            return;
        }
        self.add_request(now, seq, RequestKind::RegPid, token);
        if let Some(op) = self.ops.get_mut(&token) {
            op.phase = Phase::Registering { seq };
        }
    }

    /// The rest of `iw_cm_map` once `iwpm_register_pid` returned 0.
    fn after_register(&mut self, now: Instant, token: MapToken, link: &mut dyn Link<A>) {
        if !self.daemon_known() {
            let pid = self.pid;
            self.finish_unmapped(token, UnmappedReason::NoDaemon { pid });
            return;
        }
        // From here cm_id->mapped is true.
        let Some(request) = self.ops.get(&token).map(|op| op.request.clone()) else {
            return;
        };
        let kind = if request.is_active() {
            RequestKind::QueryMapping
        } else {
            RequestKind::AddMapping
        };
        if self.registration != Registration::Valid {
            tracing::info!("Unregistered port mapper client (client = 2)");
            self.finish_mapped(token, Err(UnmappedReason::Unregistered));
            return;
        }
        let seq = self.next_seq();
        if request.flags != 0 && self.ulib_version == IWPM_UABI_VERSION_MIN {
            self.finish_mapped(token, Err(UnmappedReason::Abi3NoPortMap));
            return;
        }
        let flags = mapping_flags(self.ulib_version, request.flags);
        let msg = match request.remote {
            Some(remote) => query_mapping(self.echo_seq, request.local, remote, flags),
            None => add_mapping(self.echo_seq, request.local, flags),
        };
        let buf = encode_request(seq, &msg);
        match kind {
            RequestKind::QueryMapping => self.stats.query_sent += 1,
            _ => self.stats.add_sent += 1,
        }
        if let Err(e) = self.unicast(self.pid, &buf, SendMode::Wait, link) {
            self.stats.unicast_failures += 1;
            // A failed QUERY leaves the stale pid in place; ADD resets it.
            if kind == RequestKind::AddMapping {
                self.pid = IWPM_PID_UNDEFINED;
            }
            tracing::info!(?kind, error = %e, "Unable to send a nlmsg (client = 2)");
            self.finish_mapped(
                token,
                Err(UnmappedReason::SendFailed {
                    kind,
                    errno: e.errno(),
                }),
            );
            return;
        }
        self.add_request(now, seq, kind, token);
        if let Some(op) = self.ops.get_mut(&token) {
            op.phase = Phase::Mapping { seq, kind };
        }
    }

    fn add_request(&mut self, now: Instant, seq: u32, kind: RequestKind, token: MapToken) {
        let deadline = now + self.config.request_timeout;
        let old = self.requests.insert(
            seq,
            PendingRequest {
                kind,
                token,
                deadline,
                state: RequestState::Pending,
            },
        );
        // A wrapped seq replaces an old request: drop its deadline if it was pending.
        if let Some(old) = old {
            self.deadlines.remove(&(old.deadline, seq));
        }
        self.deadlines.insert((deadline, seq));
    }

    /// `iw_cm_map` returned before `mapped` was set: no mapinfo entry, no REMOVE later.
    fn finish_unmapped(&mut self, token: MapToken, reason: UnmappedReason) {
        let Some(op) = self.ops.remove(&token) else {
            return;
        };
        self.stats.maps_unmapped += 1;
        let request = op.request;
        self.completed.push_back((
            token,
            MapResult {
                mapped: false,
                m_local: request.local,
                m_remote: request.remote,
                outcome: MapOutcome::Unmapped(reason),
                request,
            },
        ));
    }

    /// The end of `iw_cm_map` with `mapped` set: take the mapped addresses if the request
    /// succeeded, and always record a mapinfo entry (identity on failure).
    fn finish_mapped(
        &mut self,
        token: MapToken,
        result: Result<(Option<SockAddrStorage>, Option<SockAddrStorage>), UnmappedReason>,
    ) {
        let Some(op) = self.ops.remove(&token) else {
            return;
        };
        let request = op.request;
        let mut m_local = request.local;
        let mut m_remote = request.remote;
        let outcome = match result {
            Ok((mapped_local, mapped_remote)) => {
                if let Some(ml) = mapped_local {
                    m_local = ml;
                }
                if let (Some(mr), Some(remote)) = (mapped_remote, request.remote) {
                    m_remote = Some(fix_wildcard(&mr, &remote));
                }
                self.stats.maps_mapped += 1;
                MapOutcome::Mapped
            }
            Err(reason) => {
                self.stats.maps_unmapped += 1;
                MapOutcome::Unmapped(reason)
            }
        };
        self.mapinfo.insert(MapInfoEntry {
            local: request.local,
            mapped: m_local,
            flags: request.flags,
        });
        self.completed.push_back((
            token,
            MapResult {
                mapped: true,
                m_local,
                m_remote,
                outcome,
                request,
            },
        ));
    }

    /// `iwpm_remove_mapping`.
    pub(super) fn send_remove(&mut self, local: &SockAddrStorage, link: &mut dyn Link<A>) {
        if !self.daemon_known() {
            return;
        }
        if self.registration == Registration::Undef {
            tracing::info!("iwpm_remove_mapping: Unregistered port mapper client (client = 2)");
            return;
        }
        let seq = self.next_seq();
        let buf = encode_request(seq, &remove_mapping(self.echo_seq, *local));
        self.stats.remove_sent += 1;
        if let Err(e) = self.unicast(self.pid, &buf, SendMode::Wait, link) {
            tracing::info!(error = %e, "iwpm_remove_mapping: Unable to send a nlmsg (client = 2)");
            self.stats.unicast_failures += 1;
            self.pid = IWPM_PID_UNDEFINED;
        }
    }
}

/// `iw_cm_check_wildcard`: a wildcard IP in `mapped` is replaced by the IP of `real`, the
/// mapped port kept. The kernel tests only for AF_INET and treats anything else as IPv6.
pub(crate) fn fix_wildcard(mapped: &SockAddrStorage, real: &SockAddrStorage) -> SockAddrStorage {
    let mut out = *mapped;
    let range = if mapped.family() == iwpm_proto::consts::AF_INET {
        4..8
    } else {
        8..24
    };
    if mapped.0[range.clone()].iter().all(|b| *b == 0) {
        out.0[range.clone()].copy_from_slice(&real.0[range]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::sa;

    #[test]
    fn wildcard_fix_keeps_port() {
        assert_eq!(
            fix_wildcard(&sa("0.0.0.0:4000"), &sa("127.0.0.3:99")),
            sa("127.0.0.3:4000")
        );
        assert_eq!(
            fix_wildcard(&sa("127.0.0.4:4000"), &sa("127.0.0.3:99")),
            sa("127.0.0.4:4000")
        );
        assert_eq!(
            fix_wildcard(&sa("[::]:4000"), &sa("[::1]:99")),
            sa("[::1]:4000")
        );
    }
}
