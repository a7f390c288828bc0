//! The eight `iwpm_*_cb` handlers (`docs/protocol.md` §4). Each returns what the real handler
//! returns, which becomes the payload of the `NLMSG_DONE` the daemon receives.

use iwpm_proto::consts::op::*;
use iwpm_proto::consts::{
    err::IWPM_REMOTE_QUERY_REJECT, err::IWPM_USER_LIB_INFO_ERR, IWPM_FLAGS_NO_PORT_MAP,
    IWPM_UABI_VERSION, IWPM_UABI_VERSION_MIN, IWPM_ULIB_NAME,
};
use iwpm_proto::kernel_side::requests::{encode_request, hello_reply, negotiated_abi};
use iwpm_proto::kernel_side::Answer;
use iwpm_proto::netlink::{
    AddMappingReply, DaemonMsg, HandleErr, Hello, MapInfoNumReply, MapInfoRequest, NlHeader,
    QueryMappingReply, RegPidReply,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use super::dispatch::EINVAL;
use super::{
    Completion, KernelIwpm, Link, MapToken, Registration, RemoteInfoEntry, RequestKind,
    RequestState, SendMode, Violation,
};

/// `-ECONNREFUSED`.
const ECONNREFUSED: i32 = -111;

impl<A: Clone + PartialEq + std::fmt::Debug> KernelIwpm<A> {
    pub(super) fn handle_msg(
        &mut self,
        from: &A,
        header: &NlHeader,
        msg: DaemonMsg,
        link: &mut dyn Link<A>,
        woken: &mut Vec<MapToken>,
    ) -> i32 {
        match msg {
            DaemonMsg::RegPid(m) => self.on_reg_pid(from, header, m, woken),
            DaemonMsg::AddMapping(m) => self.on_add_reply(header, m, woken),
            DaemonMsg::QueryMapping(m) => self.on_query_reply(header, m, woken),
            DaemonMsg::RemoteInfo(m) => self.on_remote_info(header, m),
            DaemonMsg::HandleErr(m) => self.on_handle_err(header, m, woken),
            DaemonMsg::MapInfo(m) => self.on_mapinfo(from, header, m, link),
            DaemonMsg::MapInfoNum(m) => self.on_mapinfo_num(header, m),
            DaemonMsg::Hello(m) => self.on_hello(from, header, m, link),
        }
    }

    /// `iwpm_find_nlmsg_request` plus the checks the emulator adds: a pending request the
    /// reply `kind` fits ([`Answer::fits`]), or the handler's return value when there is none.
    fn pending(&mut self, kind: RequestKind, seq: u32) -> Result<MapToken, i32> {
        let op = kind.op();
        let Some(r) = self.requests.get(&seq).copied() else {
            tracing::info!(seq, "Could not find a matching request");
            self.record_violation(Violation::UnknownSeq { op, seq });
            return Err(EINVAL);
        };
        // The kernel finds these (requests are never freed) and returns 0; processing
        // them would touch a returned stack frame, so the emulator stops here.
        match r.state {
            RequestState::Completed => {
                self.record_violation(Violation::DuplicateReply { op, seq });
                Err(0)
            }
            RequestState::TimedOut => {
                self.record_violation(Violation::LateReply { op, seq });
                Err(0)
            }
            RequestState::Pending if !(Answer::Reply { kind, seq }).fits(r.kind) => {
                self.record_violation(Violation::WrongReplyOp {
                    op,
                    seq,
                    expected: r.kind,
                });
                Err(0)
            }
            RequestState::Pending => Ok(r.token),
        }
    }

    fn complete(
        &mut self,
        seq: u32,
        token: MapToken,
        completion: Completion,
        woken: &mut Vec<MapToken>,
    ) {
        self.finish_request(seq, token, completion);
        woken.push(token);
    }

    /// A reply the kernel refuses: the violation is recorded and the waiting request
    /// completes with `IWPM_USER_LIB_INFO_ERR`, as `iw_cm` then treats it. Returns the
    /// handler's return value (0: the kernel does not fail the netlink message).
    fn fail_reply(
        &mut self,
        seq: u32,
        token: MapToken,
        violation: Violation,
        woken: &mut Vec<MapToken>,
    ) -> i32 {
        self.record_violation(violation);
        self.complete(seq, token, Completion::Code(IWPM_USER_LIB_INFO_ERR), woken);
        0
    }

    /// The kernel ignores a reply's error code (it looks only at the addresses); a daemon
    /// that sets one anyway is told by a violation.
    fn check_err_code(&mut self, op: u16, seq: u32, err: u16) {
        if err != 0 {
            self.record_violation(Violation::IgnoredErrCode { op, seq, err });
        }
    }

    /// The start of an ADD/QUERY reply: the kernel echoes the sequence number, then finds the
    /// pending request and what it asked. `Err` is the handler's return value.
    fn begin_reply(
        &mut self,
        header: &NlHeader,
        seq: u32,
        kind: RequestKind,
    ) -> Result<(MapToken, super::MapRequest), i32> {
        self.echo_seq = header.seq;
        let token = self.pending(kind, seq)?;
        let request = self.request_of(token).ok_or(0)?;
        Ok((token, request))
    }

    fn request_of(&self, token: MapToken) -> Option<super::MapRequest> {
        self.ops.get(&token).map(|op| op.request.clone())
    }

    fn on_reg_pid(
        &mut self,
        from: &A,
        header: &NlHeader,
        m: RegPidReply,
        woken: &mut Vec<MapToken>,
    ) -> i32 {
        self.stats.reg_pid_replies += 1;
        let token = match self.pending(RequestKind::RegPid, m.seq) {
            Ok(t) => t,
            Err(ret) => return ret,
        };
        self.check_err_code(RDMA_NL_IWPM_REG_PID, m.seq, m.err);
        let dev_ok = m.ibdev_name.as_bytes() == self.config.ibdev_name.as_bytes();
        let lib_ok = m.ulib_name.as_bytes() == IWPM_ULIB_NAME.as_bytes();
        if !dev_ok || !lib_ok || m.ulib_version < IWPM_UABI_VERSION_MIN {
            tracing::info!(
                dev = %m.ibdev_name.to_string_lossy(),
                name = %m.ulib_name.to_string_lossy(),
                version = m.ulib_version,
                "Incorrect info"
            );
            return self.fail_reply(
                m.seq,
                token,
                Violation::RegPidInfoMismatch {
                    seq: m.seq,
                    ibdev_name: m.ibdev_name.as_bytes().to_vec(),
                    ulib_name: m.ulib_name.as_bytes().to_vec(),
                    version: m.ulib_version,
                },
                woken,
            );
        }
        self.pid = header.pid as i32;
        self.learn_pid(header.pid, from);
        self.ulib_version = m.ulib_version;
        if m.ulib_version < IWPM_UABI_VERSION {
            self.record_violation(Violation::DownLevelVersion {
                op: RDMA_NL_IWPM_REG_PID,
                version: m.ulib_version,
            });
        }
        self.echo_seq = header.seq;
        self.registration = Registration::Valid;
        self.complete(
            m.seq,
            token,
            Completion::Success {
                mapped_local: None,
                mapped_remote: None,
            },
            woken,
        );
        0
    }

    fn on_add_reply(
        &mut self,
        header: &NlHeader,
        m: AddMappingReply,
        woken: &mut Vec<MapToken>,
    ) -> i32 {
        self.stats.add_replies += 1;
        let op = RDMA_NL_IWPM_ADD_MAPPING;
        let (token, request) = match self.begin_reply(header, m.seq, RequestKind::AddMapping) {
            Ok(found) => found,
            Err(ret) => return ret,
        };
        self.check_err_code(op, m.seq, m.err);
        let echoed = m.addr.same_endpoint(&request.local);
        let families_match = m.mapped_addr.family() == m.addr.family();
        if let Some(violation) = reply_violation(op, m.seq, echoed, families_match) {
            return self.fail_reply(m.seq, token, violation, woken);
        }
        self.check_mapped_local(op, request.flags, &request.local, &m.mapped_addr);
        self.complete(
            m.seq,
            token,
            Completion::Success {
                mapped_local: Some(m.mapped_addr),
                mapped_remote: None,
            },
            woken,
        );
        0
    }

    fn on_query_reply(
        &mut self,
        header: &NlHeader,
        m: QueryMappingReply,
        woken: &mut Vec<MapToken>,
    ) -> i32 {
        self.stats.query_replies += 1;
        let op = RDMA_NL_IWPM_QUERY_MAPPING;
        let kind = RequestKind::QueryMapping;
        let (token, request) = match self.begin_reply(header, m.seq, kind) {
            Ok(found) => found,
            Err(ret) => return ret,
        };
        let rejected = m.err == IWPM_REMOTE_QUERY_REJECT;
        if rejected {
            tracing::info!(pid = header.pid, echo_seq = header.seq, "Received a Reject");
        } else if m.err != 0 {
            self.record_violation(Violation::IgnoredErrCode {
                op,
                seq: m.seq,
                err: m.err,
            });
        }
        let remote_ok = request
            .remote
            .is_some_and(|r| m.remote_addr.same_endpoint(&r));
        let echoed = m.local_addr.same_endpoint(&request.local) && remote_ok;
        let families_match = m.mapped_local_addr.family() == m.local_addr.family()
            && m.mapped_remote_addr.family() == m.remote_addr.family();
        if let Some(violation) = reply_violation(op, m.seq, echoed, families_match) {
            return self.fail_reply(m.seq, token, violation, woken);
        }
        let completion = if rejected {
            Completion::Code(IWPM_REMOTE_QUERY_REJECT)
        } else {
            self.check_mapped_local(op, request.flags, &request.local, &m.mapped_local_addr);
            Completion::Success {
                mapped_local: Some(m.mapped_local_addr),
                mapped_remote: Some(m.mapped_remote_addr),
            }
        };
        self.complete(m.seq, token, completion, woken);
        0
    }

    /// Checks a daemon's mapped local address against what mapping means (ports only;
    /// identity under `NO_PORT_MAP`). The kernel does not check this; a correct daemon
    /// never violates it.
    fn check_mapped_local(
        &mut self,
        op: u16,
        flags: u32,
        local: &SockAddrStorage,
        mapped: &SockAddrStorage,
    ) {
        let (Some(l), Some(m)) = (local.endpoint(), mapped.endpoint()) else {
            return;
        };
        if flags & IWPM_FLAGS_NO_PORT_MAP != 0 && l != m {
            self.record_violation(Violation::NoPortMapNotIdentity {
                op,
                local: *local,
                mapped: *mapped,
            });
        } else if l.ip != m.ip {
            self.record_violation(Violation::MappedIpChanged {
                op,
                local: *local,
                mapped: *mapped,
            });
        }
    }

    fn on_remote_info(&mut self, header: &NlHeader, m: QueryMappingReply) -> i32 {
        self.stats.remote_info_received += 1;
        self.echo_seq = header.seq;
        if m.mapped_local_addr.family() != m.local_addr.family()
            || m.mapped_remote_addr.family() != m.remote_addr.family()
        {
            tracing::info!("Sockaddr family doesn't match the requested one");
            self.record_violation(Violation::MappedFamilyMismatch {
                op: RDMA_NL_IWPM_REMOTE_INFO,
                seq: m.seq,
            });
            return EINVAL;
        }
        self.remote_info.insert(RemoteInfoEntry {
            mapped_local: m.mapped_local_addr,
            mapped_remote: m.mapped_remote_addr,
            remote: m.remote_addr,
        });
        // iwpm_remote_info_cb returns -EINVAL even on success.
        EINVAL
    }

    fn on_handle_err(&mut self, header: &NlHeader, m: HandleErr, woken: &mut Vec<MapToken>) -> i32 {
        self.stats.handle_err_received += 1;
        tracing::info!(
            seq = m.seq,
            code = m.code,
            "Received msg seq = .. err code = .. client = 2"
        );
        let Some(r) = self.requests.get(&m.seq).copied() else {
            // "not all errors have associated requests"
            self.stats.handle_err_unmatched += 1;
            return 0;
        };
        let op = RDMA_NL_IWPM_HANDLE_ERR;
        match r.state {
            RequestState::Completed => {
                self.record_violation(Violation::DuplicateReply { op, seq: m.seq });
                return 0;
            }
            RequestState::TimedOut => {
                self.record_violation(Violation::LateReply { op, seq: m.seq });
                return 0;
            }
            RequestState::Pending => {}
        }
        self.echo_seq = header.seq;
        let completion = if m.code == 0 {
            self.record_violation(Violation::HandleErrZero { seq: m.seq });
            Completion::HandleErrZero
        } else {
            Completion::Code(m.code)
        };
        self.complete(m.seq, r.token, completion, woken);
        0
    }

    fn on_mapinfo(
        &mut self,
        from: &A,
        header: &NlHeader,
        m: MapInfoRequest,
        link: &mut dyn Link<A>,
    ) -> i32 {
        self.stats.mapinfo_requests += 1;
        if m.ulib_name.as_bytes() != IWPM_ULIB_NAME.as_bytes()
            || m.ulib_version < IWPM_UABI_VERSION_MIN
        {
            tracing::info!("Invalid port mapper name or version");
            self.record_violation(Violation::BadMapInfoRequest {
                ulib_name: m.ulib_name.as_bytes().to_vec(),
                version: m.ulib_version,
            });
            return EINVAL;
        }
        self.registration = Registration::Incompl;
        self.echo_seq = header.seq;
        self.pid = header.pid as i32;
        self.learn_pid(header.pid, from);
        if self.mapinfo.is_empty() {
            return 0;
        }
        self.send_mapinfo(link)
    }

    fn on_mapinfo_num(&mut self, header: &NlHeader, m: MapInfoNumReply) -> i32 {
        self.stats.mapinfo_num_acks += 1;
        match self.mapinfo_num_outstanding.front() {
            Some(&sent) if sent == m.send_num => {
                self.mapinfo_num_outstanding.pop_front();
            }
            _ => self.record_violation(Violation::UnsolicitedMapInfoNum {
                send_num: m.send_num,
            }),
        }
        if m.ack_num != m.send_num {
            tracing::info!(
                sent = m.send_num,
                acked = m.ack_num,
                "Invalid mapinfo number"
            );
            self.record_violation(Violation::MapInfoAckMismatch {
                sent: m.send_num,
                acked: m.ack_num,
            });
        }
        self.echo_seq = header.seq;
        0
    }

    fn on_hello(&mut self, from: &A, header: &NlHeader, m: Hello, link: &mut dyn Link<A>) -> i32 {
        self.stats.hellos += 1;
        self.registration = Registration::Incompl;
        self.echo_seq = header.seq;
        self.ulib_version = negotiated_abi(m.abi_version);
        if m.abi_version < IWPM_UABI_VERSION {
            self.record_violation(Violation::DownLevelVersion {
                op: RDMA_NL_IWPM_HELLO,
                version: m.abi_version,
            });
        }
        self.pid = header.pid as i32;
        if header.pid == 0 {
            // The real kernel would unicast to its own socket here (`docs/protocol.md` §5.7,
            // hazard 3).
            return ECONNREFUSED;
        }
        self.learn_pid(header.pid, from);
        let seq = self.next_seq();
        let buf = encode_request(seq, &hello_reply(m.abi_version));
        match self.unicast(self.pid, &buf, SendMode::NonBlocking, link) {
            Ok(()) => {
                self.stats.hello_replies_sent += 1;
                0
            }
            Err(e) => e.errno(),
        }
    }
}

/// The kernel's address checks on an ADD/QUERY reply, in its order (with its log lines):
/// the request's addresses echoed, then each mapped address in the family asked about.
fn reply_violation(op: u16, seq: u32, echoed: bool, families_match: bool) -> Option<Violation> {
    if !echoed {
        if op == RDMA_NL_IWPM_QUERY_MAPPING {
            tracing::info!("Incorrect local sockaddr");
        }
        return Some(Violation::AddressNotEchoed { op, seq });
    }
    if !families_match {
        tracing::info!("Sockaddr family doesn't match the requested one");
        return Some(Violation::MappedFamilyMismatch { op, seq });
    }
    None
}
