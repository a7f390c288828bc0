//! Netlink side: framing and dispatch, REG_PID, ADD, QUERY, REMOVE and MAPINFO_NUM. The
//! handshake is in `handshake.rs`, MAPINFO records in `recovery.rs`, reservation answers in
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
//!   kernel waits 10 s) is dropped and counted instead of sent: a reservation answered too
//!   late, an ACCEPT arriving too late, or a request buffered behind a slow reservation.
//! * **Never HANDLE_ERR code 0** (the kernel would take it as success with garbage addresses).
//! * **Control messages other than DONE/ERROR are ignored** (C dispatches them as client 0
//!   op 1/4). `NLMSG_DONE` is expected after every message we send (−22 after REMOTE_INFO is
//!   the kernel's normal answer) and only counted.
//! * **Unusable addresses get an answer.** C sends nothing for a QUERY whose remote family is
//!   not IP (the kernel then waits 10 s) and leaks a socket for an ADD with a non-IP family.
//!   Here a non-IP or mismatched-family QUERY gets HANDLE_ERR 10 and a non-IP local address
//!   gets CREATE_MAPPING_ERR without any reservation; a wildcard local address in a QUERY is
//!   refused (11) before anything is created.
//! * **MAPINFO_NUM acknowledges the batch it closes**: ACK_NUM counts the records accepted
//!   since the previous MAPINFO_NUM of that client (C counts since start; identical for the
//!   single replay that follows a start).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use iwpm_proto::consts::op::*;
use iwpm_proto::consts::{IWPM_FLAGS_NO_PORT_MAP, IWPM_UABI_VERSION_MIN, IWPM_ULIB_NAME};
use iwpm_proto::netlink::{
    decode_kernel_msg, frames, AddMappingReply, DaemonMsg, Frame, KernelMsg, ManageMappingRequest,
    MapInfoNumReply, MapInfoNumRequest, NlHeader, NlString, QueryMappingRequest, RegPidReply,
    RegPidRequest,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use crate::clients::{ClientInfo, Registration};
use crate::core::{code, wildcard_of, Core, Deferred, Purpose};
use crate::ratelimit::LogKind;
use crate::stats::Stats;
use crate::table::{MappingId, MappingRole};

/// A netlink frame kept while a reservation is pending.
#[derive(Clone, Debug)]
pub(crate) enum OwnedFrame {
    Done {
        header: NlHeader,
        result: Option<i32>,
    },
    Error {
        header: NlHeader,
        error: i32,
        request: Option<NlHeader>,
    },
    Control {
        header: NlHeader,
        payload: Vec<u8>,
    },
    Message {
        header: NlHeader,
        payload: Vec<u8>,
    },
}

impl OwnedFrame {
    fn from_frame(f: &Frame<'_>) -> Self {
        match *f {
            Frame::Done { header, result } => OwnedFrame::Done { header, result },
            Frame::Error {
                header,
                error,
                request,
            } => OwnedFrame::Error {
                header,
                error,
                request,
            },
            Frame::Control { header, payload } => OwnedFrame::Control {
                header,
                payload: payload.to_vec(),
            },
            Frame::Message { header, payload } => OwnedFrame::Message {
                header,
                payload: payload.to_vec(),
            },
        }
    }

    fn as_frame(&self) -> Frame<'_> {
        match self {
            OwnedFrame::Done { header, result } => Frame::Done {
                header: *header,
                result: *result,
            },
            OwnedFrame::Error {
                header,
                error,
                request,
            } => Frame::Error {
                header: *header,
                error: *error,
                request: *request,
            },
            OwnedFrame::Control { header, payload } => Frame::Control {
                header: *header,
                payload,
            },
            OwnedFrame::Message { header, payload } => Frame::Message {
                header: *header,
                payload,
            },
        }
    }
}

/// Most (client, seq) pairs remembered for the reply-once rule.
const MAX_TRACKED_SEQS: usize = 65_536;

/// Kernel requests already answered recently, for the reply-once rule.
#[derive(Debug)]
pub(crate) struct AnsweredSeqs {
    window: Duration,
    set: HashSet<(u8, u32)>,
    order: VecDeque<(Instant, u8, u32)>,
}

impl AnsweredSeqs {
    pub fn new(window: Duration) -> Self {
        AnsweredSeqs {
            window,
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// True the first time (client, seq) is seen within the window.
    pub fn first_time(&mut self, now: Instant, client: u8, seq: u32) -> bool {
        while let Some(&(at, c, s)) = self.order.front() {
            let stale = now.saturating_duration_since(at) >= self.window;
            if !stale && self.order.len() < MAX_TRACKED_SEQS {
                break;
            }
            self.order.pop_front();
            self.set.remove(&(c, s));
        }
        if !self.set.insert((client, seq)) {
            return false;
        }
        self.order.push_back((now, client, seq));
        true
    }
}

/// A string payload as C writes it: the bytes up to the first NUL, plus one NUL.
fn nul_terminated(s: &NlString) -> NlString {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    NlString(v)
}

impl Core {
    pub(crate) fn process_kernel_datagram(&mut self, now: Instant, datagram: &[u8]) {
        for item in frames(datagram) {
            match item {
                Err(e) => {
                    self.stats.netlink_bad_framing += 1;
                    self.warn(
                        now,
                        LogKind::BadFraming,
                        format_args!("netlink datagram dropped from here: {e}"),
                    );
                }
                Ok(frame) if self.pending.is_some() => {
                    self.defer(
                        now,
                        Deferred::Kernel {
                            received: now,
                            frame: OwnedFrame::from_frame(&frame),
                        },
                    );
                }
                Ok(frame) => self.on_frame(now, now, frame),
            }
        }
    }

    pub(crate) fn process_frame(&mut self, now: Instant, received: Instant, frame: OwnedFrame) {
        self.on_frame(now, received, frame.as_frame());
    }

    fn on_frame(&mut self, now: Instant, received: Instant, frame: Frame<'_>) {
        match frame {
            Frame::Done { header, result } => self.on_done(now, header, result),
            Frame::Error {
                header,
                error,
                request,
            } => self.on_nl_error(now, header, error, request),
            Frame::Control { .. } => self.stats.netlink_control_other += 1,
            Frame::Message { header, payload } => self.on_message(now, received, header, payload),
        }
    }

    fn on_message(&mut self, now: Instant, received: Instant, header: NlHeader, payload: &[u8]) {
        let (client, op, seq) = (header.client(), header.op(), header.seq);
        Stats::bump_op(&mut self.stats.netlink_in, op);
        let wants_reply = matches!(
            op,
            RDMA_NL_IWPM_REG_PID | RDMA_NL_IWPM_ADD_MAPPING | RDMA_NL_IWPM_QUERY_MAPPING
        );
        // Only possible for input buffered behind a slow reservation: the kernel's wait for
        // this request is over, and an answer now would hit its stale request record.
        let late = now.saturating_duration_since(received) >= self.config.reply_deadline;
        if late && wants_reply {
            self.stats.replies_dropped_late += 1;
            self.warn(
                now,
                LogKind::LateReply,
                format_args!("kernel request seq {seq} (op {op}) waited too long; dropped"),
            );
            return;
        }
        let msg = match decode_kernel_msg(&header, payload, self.abi) {
            Ok((_, msg)) => msg,
            Err(e) if e.is_malformed_attrs() => {
                self.stats.netlink_malformed += 1;
                self.warn(
                    now,
                    LogKind::MalformedNetlink,
                    format_args!("invalid netlink message (client {client}, seq {seq}): {e}"),
                );
                if late {
                    return;
                }
                if !wants_reply || self.first_reply(now, client, seq) {
                    self.send_handle_err(client, seq, code::INVALID);
                }
                return;
            }
            Err(e) => {
                self.stats.netlink_unknown_op += 1;
                self.warn(
                    now,
                    LogKind::UnknownOp,
                    format_args!("netlink message with invalid opcode dropped: {e}"),
                );
                return;
            }
        };
        match msg {
            KernelMsg::RegPid(req) => self.on_reg_pid(now, client, seq, req),
            KernelMsg::AddMapping(req) => self.on_add(now, received, client, seq, req),
            KernelMsg::QueryMapping(req) => self.on_query(now, received, client, seq, req),
            KernelMsg::RemoveMapping(req) => self.on_remove(now, client, req),
            KernelMsg::MapInfo(rec) => self.on_mapinfo(now, client, seq, rec),
            KernelMsg::MapInfoNum(n) => self.on_mapinfo_num(client, seq, n),
            KernelMsg::Hello(h) => self.on_hello(now, client, seq, h),
        }
    }

    /// Reply-once gate; counts and drops repeats.
    fn first_reply(&mut self, now: Instant, client: u8, seq: u32) -> bool {
        if self.answered.first_time(now, client, seq) {
            return true;
        }
        self.stats.netlink_duplicate_seq += 1;
        self.warn(
            now,
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
        self.stats.netlink_unregistered += 1;
        self.warn(
            now,
            LogKind::Unregistered,
            format_args!("{what} request from unregistered client {client} dropped"),
        );
        false
    }

    fn flags(&self, flags: Option<u32>) -> u32 {
        if self.abi > IWPM_UABI_VERSION_MIN {
            flags.unwrap_or(0)
        } else {
            0
        }
    }

    fn on_reg_pid(&mut self, now: Instant, client: u8, seq: u32, req: RegPidRequest) {
        if !self.first_reply(now, client, seq) {
            return;
        }
        let ibdev_name = nul_terminated(&req.ibdev_name);
        let info = ClientInfo {
            if_name: req.if_name,
            ibdev_name: req.ibdev_name,
            ulib_name: req.ulib_name,
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
                let ulib_version = self.abi;
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
        received: Instant,
        client: u8,
        seq: u32,
        req: ManageMappingRequest,
    ) {
        if !self.registered(now, client, "ADD_MAPPING") || !self.first_reply(now, client, seq) {
            return;
        }
        let flags = self.flags(req.flags);
        let Some(local_ep) = req.addr.endpoint() else {
            self.mapping_failed(now, client, seq, "ADD_MAPPING of a non-IP address");
            return;
        };
        if let Some(id) = self.table.loose_local(&local_ep) {
            let shared = self
                .table
                .get(id)
                .is_some_and(|m| m.local_ep.is_wildcard() && m.local_ep == local_ep);
            if shared {
                self.add_ref(id);
                self.reply_add(client, seq, req.addr, id);
            } else {
                self.send_handle_err(client, seq, code::DUPLICATE);
            }
            return;
        }
        if self.mappings_full(now) {
            self.send_handle_err(client, seq, code::CREATE);
            return;
        }
        if flags & IWPM_FLAGS_NO_PORT_MAP != 0 {
            let id = self.new_mapping(
                now,
                client,
                (req.addr, local_ep),
                (req.addr, local_ep),
                None,
                MappingRole::Listener,
            );
            self.reply_add(client, seq, req.addr, id);
            return;
        }
        self.reserve(
            wildcard_of(&local_ep, 0),
            Purpose::Add {
                client,
                seq,
                received,
                local: req.addr,
                local_ep,
            },
        );
    }

    fn on_query(
        &mut self,
        now: Instant,
        received: Instant,
        client: u8,
        seq: u32,
        req: QueryMappingRequest,
    ) {
        if !self.registered(now, client, "QUERY_MAPPING") || !self.first_reply(now, client, seq) {
            return;
        }
        let flags = self.flags(req.flags);
        let (Some(local_ep), Some(remote_sa)) =
            (req.local_addr.endpoint(), req.remote_addr.to_socket_addr())
        else {
            if req.local_addr.endpoint().is_none() {
                self.mapping_failed(now, client, seq, "QUERY_MAPPING of a non-IP local address");
            } else {
                self.invalid(
                    now,
                    client,
                    seq,
                    "QUERY_MAPPING with a non-IP remote address",
                );
            }
            return;
        };
        if local_ep.ip.is_ipv4() != remote_sa.is_ipv4() {
            self.invalid(now, client, seq, "QUERY_MAPPING mixing IPv4 and IPv6");
            return;
        }
        if local_ep.is_wildcard() {
            self.mapping_failed(now, client, seq, "QUERY_MAPPING of a wildcard address");
            return;
        }
        if self.exchanges.active_len() >= self.config.max_exchanges {
            self.stats.exchanges_refused += 1;
            self.mapping_failed(now, client, seq, "too many peer exchanges in flight");
            return;
        }
        let (local, remote) = (req.local_addr, req.remote_addr);
        if let Some(id) = self.table.loose_local(&local_ep) {
            if self.table.get(id).is_some_and(|m| m.local_ep.is_wildcard()) {
                self.mapping_failed(now, client, seq, "QUERY_MAPPING resolved to a wildcard");
                return;
            }
            self.add_ref(id);
            self.start_query_exchange(now, received, client, seq, id, local, remote, remote_sa);
            return;
        }
        if self.mappings_full(now) {
            self.send_handle_err(client, seq, code::CREATE);
            return;
        }
        if flags & IWPM_FLAGS_NO_PORT_MAP != 0 {
            let id = self.new_mapping(
                now,
                client,
                (local, local_ep),
                (local, local_ep),
                None,
                MappingRole::Connector,
            );
            self.start_query_exchange(now, received, client, seq, id, local, remote, remote_sa);
            return;
        }
        self.reserve(
            wildcard_of(&local_ep, 0),
            Purpose::Query {
                client,
                seq,
                received,
                local,
                local_ep,
                remote,
                remote_sa,
            },
        );
    }

    fn on_remove(&mut self, now: Instant, client: u8, req: ManageMappingRequest) {
        let Some(id) = req
            .addr
            .endpoint()
            .and_then(|ep| self.table.exact_local(&ep))
        else {
            self.stats.remove_unknown += 1;
            return;
        };
        let owner = self.table.get(id).map(|m| m.owner);
        if owner != Some(client) {
            self.stats.remove_wrong_owner += 1;
            self.warn(
                now,
                LogKind::RemoveWrongOwner,
                format_args!("REMOVE_MAPPING from client {client}, mapping owned by {owner:?}"),
            );
            return;
        }
        self.unref_mapping(id);
    }

    fn on_mapinfo_num(&mut self, client: u8, seq: u32, n: MapInfoNumRequest) {
        self.close_mapinfo_window(client);
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
    pub(crate) fn reply_add(&mut self, client: u8, seq: u32, addr: SockAddrStorage, id: MappingId) {
        let Some(mapped_addr) = self.table.get(id).map(|m| m.mapped) else {
            return;
        };
        self.send_kernel(
            client,
            DaemonMsg::AddMapping(AddMappingReply {
                seq,
                addr,
                mapped_addr,
                err: 0,
                unknown: Vec::new(),
            }),
        );
    }

    fn mapping_failed(&mut self, now: Instant, client: u8, seq: u32, why: &str) {
        self.warn(
            now,
            LogKind::MappingFailed,
            format_args!("cannot create mapping: {why}"),
        );
        self.send_handle_err(client, seq, code::CREATE);
    }

    fn invalid(&mut self, now: Instant, client: u8, seq: u32, why: &str) {
        self.stats.netlink_malformed += 1;
        self.warn(now, LogKind::MalformedNetlink, format_args!("{why}"));
        self.send_handle_err(client, seq, code::INVALID);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answered_seqs_forget_after_the_window() {
        let t0 = Instant::now();
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        assert!(a.first_time(t0, 2, 7));
        assert!(!a.first_time(t0 + Duration::from_secs(19), 2, 7));
        assert!(a.first_time(t0, 3, 7), "per client");
        assert!(
            a.first_time(t0 + Duration::from_secs(20), 2, 7),
            "window passed"
        );
    }

    #[test]
    fn answered_seqs_are_bounded() {
        let t0 = Instant::now();
        let mut a = AnsweredSeqs::new(Duration::from_secs(20));
        for s in 0..(MAX_TRACKED_SEQS as u32 + 10) {
            assert!(a.first_time(t0, 2, s));
        }
        assert!(a.order.len() <= MAX_TRACKED_SEQS);
        assert_eq!(a.set.len(), a.order.len());
    }

    #[test]
    fn strings_are_echoed_as_strlen_plus_one() {
        assert_eq!(nul_terminated(&NlString::padded("siw0", 32)).0, b"siw0\0");
        assert_eq!(nul_terminated(&NlString(b"x".to_vec())).0, b"x\0");
    }
}
