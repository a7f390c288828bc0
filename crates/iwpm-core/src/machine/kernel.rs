//! Netlink side: framing and dispatch, REG_PID, ADD, QUERY, REMOVE and MAPINFO_NUM. The
//! handshake is in `handshake.rs`, MAPINFO records in `recovery.rs`, mapping creation in
//! `reserve.rs`.
//!
//! # Where we differ from the C daemon, on purpose
//!
//! * **A failing message does not drop the rest of its datagram.** C skips every message
//!   after one whose handler failed, which silently loses the rest of a MAPINFO batch after a
//!   single conflict. Here each message is handled on its own; only broken framing (a length
//!   that cannot be trusted) ends the walk.
//! * **At most one reply per kernel request.** The kernel appears never to free completed
//!   requests (`docs/protocol.md` §5.7), so a second answer for a seq would touch stale
//!   memory. The (client, seq) of every REG_PID/ADD/QUERY answered in the last
//!   `2 × reply_deadline` is remembered and a repeat is dropped.
//! * **No late replies.** A reply that could only be produced after `reply_deadline` (the
//!   kernel waits 10 s), such as an ACCEPT arriving too late, is dropped and counted instead
//!   of sent.
//! * **Never HANDLE_ERR code 0** (the kernel would take it as success with garbage addresses).
//! * **Control messages other than DONE/ERROR are ignored** (C dispatches them as client 0
//!   op 1/4). `NLMSG_DONE` is expected after every message we send (−22 after REMOTE_INFO is
//!   the kernel's normal answer) and only counted.
//! * **Unusable addresses get an answer.** C sends nothing for a QUERY whose remote family is
//!   not IP (the kernel then waits 10 s) and leaks a socket for an ADD with a non-IP family.
//!   Here a non-IP or mismatched-family QUERY gets HANDLE_ERR 10 and a non-IP local address
//!   gets CREATE_MAPPING_ERR without any reservation; a wildcard local address in a QUERY is
//!   refused (11) before anything is created.
//! * **An IPv4 and an IPv6 listener may share a local port** (`docs/protocol.md` §4.5): an
//!   ADD_MAPPING collides only with a mapping of its own family (the same address, or
//!   either one a wildcard), so nfsd's `0.0.0.0:20049` and `[::]:20049` are both mapped.
//!   C lets a wildcard collide across families and refuses the second. MAPINFO records and
//!   restored mappings follow the same rule, so both survive a restart.
//! * **MAPINFO_NUM acknowledges the batch it closes**: ACK_NUM counts the records accepted
//!   since the previous MAPINFO_NUM of that client (C counts since start; identical for the
//!   single replay that follows a start).

use std::time::Instant;

use iwpm_proto::consts::op::*;
use iwpm_proto::consts::IWPM_ULIB_NAME;
use iwpm_proto::netlink::{
    decode_kernel_msg, frames, AddMappingReply, DaemonMsg, Frame, KernelMsg, ManageMappingRequest,
    MapInfoNumReply, MapInfoNumRequest, NlHeader, NlString, QueryMappingRequest, RegPidReply,
    RegPidRequest,
};
use iwpm_proto::sockaddr::SockAddrStorage;
use iwpm_report::Stats;

use super::{code, Core};
use crate::action::PortReservations;
use crate::clients::{ClientInfo, Registration};
use crate::mapping_id::MappingId;
use crate::ratelimit::LogKind;
use crate::request::{Addr, Query, Request};
use crate::table::MappingRole;

/// A string payload as C writes it: the bytes up to the first NUL, plus one NUL.
fn nul_terminated(s: &NlString) -> NlString {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    NlString(v)
}

impl Core {
    /// Handles every message of `datagram`; true if it opened with an acknowledgement
    /// (`NLMSG_DONE` or `NLMSG_ERROR`) rather than a request.
    pub(super) fn process_kernel_datagram(
        &mut self,
        now: Instant,
        datagram: &[u8],
        ports: &mut dyn PortReservations,
    ) -> bool {
        let mut acknowledgement = None;
        for item in frames(datagram) {
            acknowledgement
                .get_or_insert(matches!(item, Ok(Frame::Done { .. } | Frame::Error { .. })));
            match item {
                Err(e) => {
                    self.count_warn(
                        now,
                        |s| &mut s.netlink_bad_framing,
                        LogKind::BadFraming,
                        format_args!("netlink datagram dropped from here: {e}"),
                    );
                }
                Ok(Frame::Done { header, result }) => self.on_done(now, header, result),
                Ok(Frame::Error {
                    header,
                    error,
                    request,
                }) => self.on_nl_error(now, header, error, request),
                Ok(Frame::Control { .. }) => self.stats.netlink_control_other += 1,
                Ok(Frame::Msg(header, payload)) => self.on_message(now, header, payload, ports),
            }
        }
        acknowledgement.unwrap_or(false)
    }

    fn on_message(
        &mut self,
        now: Instant,
        header: NlHeader,
        payload: &[u8],
        ports: &mut dyn PortReservations,
    ) {
        let (client, op, seq) = (header.client(), header.op(), header.seq);
        Stats::bump_op(&mut self.stats.netlink_in, op);
        let wants_reply = matches!(
            op,
            RDMA_NL_IWPM_REG_PID | RDMA_NL_IWPM_ADD_MAPPING | RDMA_NL_IWPM_QUERY_MAPPING
        );
        let msg = match decode_kernel_msg(&header, payload, self.abi.0) {
            Ok((_, msg)) => msg,
            Err(e) if e.is_malformed_attrs() => {
                self.count_warn(
                    now,
                    |s| &mut s.netlink_malformed,
                    LogKind::MalformedNetlink,
                    format_args!("invalid netlink message (client {client}, seq {seq}): {e}"),
                );
                if !wants_reply || self.first_reply(now, client, seq) {
                    self.send_handle_err(client, seq, code::INVALID);
                }
                return;
            }
            Err(e) => {
                self.count_warn(
                    now,
                    |s| &mut s.netlink_unknown_op,
                    LogKind::UnknownOp,
                    format_args!("netlink message with invalid opcode dropped: {e}"),
                );
                return;
            }
        };
        let req = Request { client, seq };
        match msg {
            KernelMsg::RegPid(m) => self.on_reg_pid(now, req, m),
            KernelMsg::AddMapping(m) => self.on_add(now, req, m, ports),
            KernelMsg::QueryMapping(m) => self.on_query(now, req, m, ports),
            KernelMsg::RemoveMapping(m) => self.on_remove(now, client, m, ports),
            KernelMsg::MapInfo(rec) => self.on_mapinfo(now, req, rec, ports),
            KernelMsg::MapInfoNum(n) => self.on_mapinfo_num(req, n),
            KernelMsg::Hello(h) => self.on_hello(now, req, h),
        }
    }

    /// Reply-once gate; counts and drops repeats.
    fn first_reply(&mut self, now: Instant, client: u8, seq: u32) -> bool {
        if self.answered.first_time(now, client, seq) {
            return true;
        }
        self.count_warn(
            now,
            |s| &mut s.netlink_duplicate_seq,
            LogKind::Protocol,
            format_args!("kernel request seq {seq} (client {client}) already answered"),
        );
        false
    }

    /// ADD/QUERY need a registered client; C drops them without a reply otherwise.
    fn registered(&mut self, now: Instant, client: u8, what: &str) -> bool {
        if self.clients.is_registered(client) {
            return true;
        }
        self.count_warn(
            now,
            |s| &mut s.netlink_unregistered,
            LogKind::Unregistered,
            format_args!("{what} request from unregistered client {client} dropped"),
        );
        false
    }

    fn on_reg_pid(&mut self, now: Instant, req: Request, m: RegPidRequest) {
        let Request { client, seq } = req;
        if !self.first_reply(now, client, seq) {
            return;
        }
        let ibdev_name = nul_terminated(&m.ibdev_name);
        let info = ClientInfo {
            if_name: m.if_name,
            ibdev_name: m.ibdev_name,
            ulib_name: m.ulib_name,
        };
        match self.clients.register(client, info) {
            Registration::LibraryMismatch => {
                self.warn(
                    now,
                    LogKind::Protocol,
                    format_args!("REG_PID from client {client} with another library name"),
                );
                self.send_handle_err(client, seq, code::LIB_INFO);
            }
            Registration::Ok => {
                let ulib_version = self.abi.0;
                self.send_kernel(
                    client,
                    DaemonMsg::RegPid(RegPidReply {
                        seq,
                        ibdev_name,
                        ulib_name: NlString::new(IWPM_ULIB_NAME),
                        ulib_version,
                        err: 0,
                        unknown: Vec::new(),
                    }),
                );
            }
        }
    }

    fn on_add(
        &mut self,
        now: Instant,
        req: Request,
        m: ManageMappingRequest,
        ports: &mut dyn PortReservations,
    ) {
        if !self.registered(now, req.client, "ADD_MAPPING")
            || !self.first_reply(now, req.client, req.seq)
        {
            return;
        }
        let flags = self.abi.flags(m.flags);
        let Some(local) = Addr::parse(m.addr) else {
            self.mapping_failed(now, req, "ADD_MAPPING of a non-IP address");
            return;
        };
        if let Some(id) = self.table.colliding_local(&local.ep) {
            let shared = self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep().is_wildcard() && m.local_ep() == local.ep);
            if shared {
                self.add_requested_ref(id);
                self.reply_add(req, local.raw, id);
            } else {
                self.send_handle_err(req.client, req.seq, code::DUPLICATE);
            }
            return;
        }
        match self.map_local(now, req.client, local, flags, MappingRole::Listener, ports) {
            Some(id) => self.reply_add(req, local.raw, id),
            None => self.send_handle_err(req.client, req.seq, code::CREATE),
        }
    }

    fn on_query(
        &mut self,
        now: Instant,
        req: Request,
        m: QueryMappingRequest,
        ports: &mut dyn PortReservations,
    ) {
        if !self.registered(now, req.client, "QUERY_MAPPING")
            || !self.first_reply(now, req.client, req.seq)
        {
            return;
        }
        let flags = self.abi.flags(m.flags);
        let (Some(local), Some(remote)) = (Addr::parse(m.local_addr), Addr::parse(m.remote_addr))
        else {
            if m.local_addr.endpoint().is_none() {
                self.mapping_failed(now, req, "QUERY_MAPPING of a non-IP local address");
            } else {
                self.invalid(now, req, "QUERY_MAPPING with a non-IP remote address");
            }
            return;
        };
        if local.ep.ip.is_ipv4() != remote.ep.ip.is_ipv4() {
            self.invalid(now, req, "QUERY_MAPPING mixing IPv4 and IPv6");
            return;
        }
        if local.ep.is_wildcard() {
            self.mapping_failed(now, req, "QUERY_MAPPING of a wildcard address");
            return;
        }
        if self.exchanges.active_len() >= self.config.max_exchanges {
            self.stats.exchanges_refused += 1;
            self.mapping_failed(now, req, "too many peer exchanges in flight");
            return;
        }
        let query = Query { req, local, remote };
        if let Some(id) = self.table.loose_local(&local.ep) {
            if self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep().is_wildcard())
            {
                self.mapping_failed(now, req, "QUERY_MAPPING resolved to a wildcard");
                return;
            }
            self.add_requested_ref(id);
            self.resolve_query(now, query, id);
            return;
        }
        match self.map_local(now, req.client, local, flags, MappingRole::Connector, ports) {
            Some(id) => self.resolve_query(now, query, id),
            None => self.send_handle_err(req.client, req.seq, code::CREATE),
        }
    }

    fn on_remove(
        &mut self,
        now: Instant,
        client: u8,
        m: ManageMappingRequest,
        ports: &mut dyn PortReservations,
    ) {
        let Some(id) = m.addr.endpoint().and_then(|ep| self.table.exact_local(&ep)) else {
            self.stats.remove_unknown += 1;
            return;
        };
        let owner = self.table.get(id).map(|m| m.owner);
        if owner != Some(client) {
            self.count_warn(
                now,
                |s| &mut s.remove_wrong_owner,
                LogKind::RemoveWrongOwner,
                format_args!("REMOVE_MAPPING from client {client}, mapping owned by {owner:?}"),
            );
            return;
        }
        self.remove_requested_ref(id, client, ports);
    }

    fn on_mapinfo_num(&mut self, req: Request, n: MapInfoNumRequest) {
        let Request { client, seq } = req;
        self.close_mapinfo_window(client);
        self.replay_ended(client, true);
        let ack_num = self.clients.take_mapinfo_acks(client);
        if ack_num != n.send_num {
            tracing::info!(
                "MAPINFO replay of client {client}: kernel sent {}, accepted {ack_num}",
                n.send_num
            );
        }
        self.send_kernel(
            client,
            DaemonMsg::MapInfoNum(MapInfoNumReply {
                seq,
                send_num: n.send_num,
                ack_num,
                unknown: Vec::new(),
            }),
        );
    }

    /// ADD reply: the request's address echoed byte-for-byte, the mapping's mapped address.
    fn reply_add(&mut self, req: Request, addr: SockAddrStorage, id: MappingId) {
        let Some(mapped_addr) = self.table.get(id).map(|m| m.mapped()) else {
            return;
        };
        self.send_kernel(
            req.client,
            DaemonMsg::AddMapping(AddMappingReply {
                seq: req.seq,
                addr,
                mapped_addr,
                err: 0,
                unknown: Vec::new(),
            }),
        );
    }

    fn mapping_failed(&mut self, now: Instant, req: Request, why: &str) {
        self.warn(
            now,
            LogKind::MappingFailed,
            format_args!("cannot create mapping: {why}"),
        );
        self.send_handle_err(req.client, req.seq, code::CREATE);
    }

    fn invalid(&mut self, now: Instant, req: Request, why: &str) {
        self.stats.netlink_malformed += 1;
        self.warn(now, LogKind::MalformedNetlink, format_args!("{why}"));
        self.send_handle_err(req.client, req.seq, code::INVALID);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::SocketAddr;

    use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, NLM_F_MULTI, NLM_F_REQUEST, RDMA_NL_IWCM};
    use iwpm_proto::netlink::{encode_done, encode_kernel_msg, Envelope, Hello};

    use crate::action::{Action, KernelReceipt, ReservationId, ReserveError};
    use crate::config::CoreConfig;

    #[test]
    fn strings_are_echoed_as_strlen_plus_one() {
        assert_eq!(nul_terminated(&NlString::padded("siw0", 32)).0, b"siw0\0");
        assert_eq!(nul_terminated(&NlString(b"x".to_vec())).0, b"x\0");
    }

    /// Reservations are never asked for here (NO_PORT_MAP only).
    struct NoPorts;

    impl PortReservations for NoPorts {
        fn reserve(&mut self, _: SocketAddr) -> Result<(ReservationId, u16), ReserveError> {
            Err(ReserveError::AddrInUse)
        }
        fn release(&mut self, _: ReservationId) {}
    }

    /// Kernel requests with header seqs from 1, in one datagram.
    fn requests(msgs: &[KernelMsg]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, msg) in (1..).zip(msgs) {
            let env = Envelope {
                client: RDMA_NL_IWCM,
                flags: NLM_F_REQUEST,
                seq,
                pid: 0,
            };
            encode_kernel_msg(&env, msg, &mut out);
        }
        out
    }

    fn add(local: &str) -> KernelMsg {
        KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from_socket_addr(local.parse().unwrap()),
            flags: Some(IWPM_FLAGS_NO_PORT_MAP),
            unknown: vec![],
        })
    }

    fn drain(core: &mut Core) -> Vec<Action> {
        std::iter::from_fn(|| core.poll_action()).collect()
    }

    /// What a read loop decides with: whether the datagram was an acknowledgement and how
    /// many messages answered it; and a table change is announced once per call, last.
    #[test]
    fn the_receipt_and_the_table_announcement_describe_the_whole_call() {
        let now = Instant::now();
        let config = CoreConfig {
            netlink_pid: 7,
            ..CoreConfig::default()
        };
        let mut core = Core::new(config, now);
        core.start(now);
        assert!(
            matches!(drain(&mut core)[..], [Action::ToKernel(_)]),
            "HELLO"
        );
        let hello = KernelMsg::Hello(Hello {
            abi_version: 4,
            unknown: vec![],
        });
        let r = core.handle_kernel_datagram(now, &requests(&[hello]), &mut NoPorts);
        assert_eq!(r.answers, 1, "the MAPINFO request");
        assert!(!r.acknowledgement && !r.unanswered_request());
        drain(&mut core);

        let mut done = Vec::new();
        encode_done(0, 7, NLM_F_MULTI, Some(0), &mut done);
        let r = core.handle_kernel_datagram(now, &done, &mut NoPorts);
        assert_eq!(
            r,
            KernelReceipt {
                acknowledgement: true,
                answers: 0
            }
        );

        let reg_pid = KernelMsg::RegPid(RegPidRequest {
            echo_seq: 0,
            if_name: NlString::padded("eth0", 16),
            ibdev_name: NlString::padded("siw0", 32),
            ulib_name: NlString::padded(IWPM_ULIB_NAME, 32),
            unknown: vec![],
        });
        let batch = requests(&[reg_pid, add("10.0.0.1:4000"), add("10.0.0.1:4001")]);
        let r = core.handle_kernel_datagram(now, &batch, &mut NoPorts);
        assert_eq!((r.acknowledgement, r.answers), (false, 3));
        let actions = drain(&mut core);
        assert_eq!(actions.len(), 4, "{actions:?}");
        assert!(matches!(
            actions[3],
            Action::TableChanged { mappings: 2, .. }
        ));

        let remove = KernelMsg::RemoveMapping(ManageMappingRequest {
            echo_seq: 0,
            addr: SockAddrStorage::from_socket_addr("10.0.0.9:1".parse().unwrap()),
            flags: None,
            unknown: vec![],
        });
        let r = core.handle_kernel_datagram(now, &requests(&[remove]), &mut NoPorts);
        assert!(r.unanswered_request(), "{r:?}");
        assert!(
            drain(&mut core).is_empty(),
            "an unknown REMOVE changes nothing"
        );
    }
}
