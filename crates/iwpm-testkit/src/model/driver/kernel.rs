//! The model kernel: the netlink messages the ops send (built by
//! [`iwpm_proto::kernel_side`], as every kernel stand-in's are, then varied on purpose:
//! other clients, repeated or zero seqs, foreign library names, cut replays, mutated
//! bytes), its ledger of requests and of the references it was told it holds, and the
//! checks on everything the core sends it (which answer fits which request is the kernel
//! side's rule too).

use iwpm_proto::consts::op::*;
use iwpm_proto::consts::{
    rdma_nl_get_type, IWPM_FLAGS_NO_PORT_MAP, IWPM_UABI_VERSION, IWPM_UABI_VERSION_MIN,
    IWPM_ULIB_NAME, NLM_F_MULTI, NLM_F_REQUEST, RDMA_NL_IWCM, RDMA_NL_RSVD,
};
use iwpm_proto::kernel_side::requests::{
    add_mapping, encode_handler_done, encode_mapinfo_end, encode_mapinfo_record, encode_request,
    mapinfo_num, query_mapping, reg_pid, remove_mapping,
};
use iwpm_proto::kernel_side::{dispatched, Answer, RequestKind};
use iwpm_proto::netlink::{
    decode_daemon_msg, decode_kernel_msg, encode_error, encode_kernel_msg, frames, DaemonMsg,
    Envelope, Frame, Hello, KernelMsg, MapInfoRecord, NlHeader,
};
use iwpm_proto::sockaddr::SockAddrStorage;

use super::{Driver, Op, Request};
use crate::model::pools::{client_of, fail, local_addr, remote_addr, GRANT_BASE};
use crate::model::PID;

impl Driver {
    /// Plays a kernel request (REG_PID, ADD, QUERY, REMOVE, MAPINFO records and count).
    pub(super) fn kernel_request(&mut self, op: &Op) {
        match op {
            Op::RegPid { client, lib, seq } => {
                let ulib = if lib % 4 == 3 {
                    "otherPortMapper"
                } else {
                    IWPM_ULIB_NAME
                };
                let msg = reg_pid(0, "eth0", "siw0", ulib);
                self.kernel_msg(client_of(*client), *seq, &msg, None);
            }
            Op::Add {
                client,
                local,
                flags,
                seq,
            } => {
                let addr = local_addr(*local);
                let msg = add_mapping(0, addr, self.flags(*flags));
                self.kernel_msg(client_of(*client), *seq, &msg, Some(addr));
            }
            Op::Query {
                client,
                local,
                remote,
                flags,
                seq,
            } => {
                let local_addr = local_addr(*local);
                let msg = query_mapping(0, local_addr, remote_addr(*remote), self.flags(*flags));
                self.kernel_msg(client_of(*client), *seq, &msg, Some(local_addr));
            }
            Op::Remove { client, local } => self.remove(client_of(*client), local_addr(*local)),
            Op::MapInfo {
                client,
                done,
                records,
            } => {
                let client = client_of(*client);
                let mut b = Vec::new();
                for [l, m, f] in records {
                    let local = local_addr(*l);
                    // Mapped: the local address with a pool port, or another pool address.
                    let mapped = if m & 0x80 == 0 {
                        local.with_port(GRANT_BASE + u16::from(m % 6))
                    } else {
                        local_addr(*m)
                    };
                    let flags = match f % 4 {
                        0 | 1 => Some(0),
                        2 => Some(IWPM_FLAGS_NO_PORT_MAP),
                        _ => None,
                    };
                    let rec = MapInfoRecord {
                        local_addr: local,
                        mapped_addr: mapped,
                        flags,
                        unknown: vec![],
                    };
                    encode_mapinfo_record(client, rec, &mut b);
                }
                if done & 1 != 0 {
                    encode_mapinfo_end(&mut b);
                }
                self.kernel_datagram(&b, false);
            }
            Op::MapInfoNum { client, send_num } => {
                let msg = mapinfo_num(u32::from(*send_num));
                self.kernel_msg(client_of(*client), 0, &msg, None);
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    /// Plays the other kernel input: HELLO, control messages, raw and mutated datagrams.
    pub(super) fn kernel_other(&mut self, op: &Op) {
        match op {
            Op::Hello { abi } => {
                let msg = KernelMsg::Hello(Hello {
                    abi_version: u16::from(abi % 7),
                    unknown: vec![],
                });
                self.kernel_msg(RDMA_NL_IWCM, 0, &msg, None);
            }
            Op::Done { seq, result } => {
                let seq = self.pick_seq(*seq);
                let result = match result % 4 {
                    0 => Some(0),
                    1 => Some(-22),
                    2 => None,
                    _ => Some(-i32::from(*result)),
                };
                let mut b = Vec::new();
                encode_handler_done(seq, PID, result, &mut b);
                self.kernel_datagram(&b, false);
            }
            Op::NlError {
                seq,
                error,
                request,
            } => {
                let seq = self.pick_seq(*seq);
                let req = match request % 3 {
                    0 => None,
                    1 => Some(NlHeader {
                        len: 20,
                        ty: rdma_nl_get_type(RDMA_NL_IWCM, RDMA_NL_IWPM_HELLO),
                        flags: NLM_F_REQUEST,
                        seq,
                        pid: PID,
                    }),
                    _ => Some(NlHeader {
                        len: 20,
                        ty: rdma_nl_get_type(RDMA_NL_RSVD, RDMA_NL_IWPM_MAPINFO),
                        flags: NLM_F_REQUEST,
                        seq,
                        pid: PID,
                    }),
                };
                let mut b = Vec::new();
                encode_error(seq, PID, -i32::from(*error), req.as_ref(), &mut b);
                self.kernel_datagram(&b, false);
            }
            Op::KernelRaw { data } => self.kernel_datagram(data, true),
            Op::KernelMutate {
                base,
                local,
                at,
                xor,
            } => {
                let addr = local_addr(*local);
                let msg = match base % 4 {
                    0 => add_mapping(0, addr, Some(0)),
                    1 => query_mapping(0, addr, remote_addr(*base >> 2), Some(0)),
                    2 => remove_mapping(0, addr),
                    // A record as a request (the replay sends them with NLM_F_MULTI, seq 0).
                    _ => KernelMsg::MapInfo(MapInfoRecord {
                        local_addr: addr,
                        mapped_addr: addr.with_port(GRANT_BASE),
                        flags: Some(0),
                        unknown: vec![],
                    }),
                };
                let mut b = encode_request(self.fresh_seq(), &msg);
                // Spread the mutation over the header (0..16) and the attributes.
                let pos = usize::from(*at) * b.len() / 256;
                if let Some(x) = b.get_mut(pos) {
                    *x ^= xor | 1;
                }
                self.kernel_datagram(&b, true);
            }
            // Other ops: `step` plays them elsewhere.
            _ => {}
        }
    }

    pub(super) fn flags(&self, f: u8) -> Option<u32> {
        match f % 6 {
            0..=2 => Some(0),
            3 => Some(IWPM_FLAGS_NO_PORT_MAP),
            4 => None,
            _ => Some(u32::from(f)),
        }
    }

    pub(super) fn fresh_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq += 1;
        self.last_seq = s;
        s
    }

    /// Header seq by mode: mostly fresh, sometimes the last one again, sometimes 0.
    pub(super) fn seq_for(&mut self, mode: u8) -> u32 {
        match mode % 8 {
            6 => self.last_seq,
            7 => 0,
            _ => self.fresh_seq(),
        }
    }

    /// A seq for DONE/ERROR: 0 (the HELLO's), the last one, or small.
    pub(super) fn pick_seq(&self, sel: u8) -> u32 {
        match sel % 4 {
            0 | 1 => 0,
            2 => self.last_seq,
            _ => u32::from(sel >> 2),
        }
    }

    pub(super) fn kernel_msg(
        &mut self,
        client: u8,
        seq_mode: u8,
        msg: &KernelMsg,
        local: Option<SockAddrStorage>,
    ) {
        let notice = matches!(msg, KernelMsg::MapInfoNum(_) | KernelMsg::Hello(_));
        let env = Envelope {
            client,
            flags: if notice { NLM_F_MULTI } else { NLM_F_REQUEST },
            seq: if notice {
                self.fresh_seq()
            } else {
                self.seq_for(seq_mode)
            },
            pid: 0,
        };
        let mut b = Vec::new();
        encode_kernel_msg(&env, msg, &mut b);
        self.account_kernel(&b, false);
        if let Some(local) = local {
            if let Some(r) = self.requests.get_mut(&(client, env.seq)) {
                if r.count == 1 {
                    r.local = Some(local);
                }
            }
        }
        self.feed_kernel(&b);
    }

    /// Sends a datagram the driver did not build message by message (`opaque`: it may
    /// hold anything, a REMOVE included).
    pub(super) fn kernel_datagram(&mut self, b: &[u8], opaque: bool) {
        self.account_kernel(b, opaque);
        self.feed_kernel(b);
    }

    /// Records every frame of a datagram about to be sent, as the kernel would.
    pub(super) fn account_kernel(&mut self, b: &[u8], opaque: bool) {
        for f in frames(b) {
            let Ok(Frame::Msg(header, payload)) = f else {
                continue;
            };
            let key = (header.client(), header.seq);
            let op = header.op();
            let r = self.requests.entry(key).or_insert(Request {
                count: 0,
                other: false,
                op,
                sent_at: self.now,
                local: None,
                answers: 0,
            });
            if RequestKind::of_op(op).is_some() {
                r.count += 1;
                if r.count == 1 {
                    r.op = op;
                    r.sent_at = self.now;
                }
                r.local = None;
            } else {
                r.other = true;
            }
            if op != RDMA_NL_IWPM_REMOVE_MAPPING {
                continue;
            }
            if opaque {
                self.removes_in_call = true;
            }
            // REMOVE decodes alike in both ABIs; one the core cannot decode has no effect.
            let ep = [IWPM_UABI_VERSION_MIN, IWPM_UABI_VERSION]
                .into_iter()
                .find_map(|abi| match decode_kernel_msg(&header, payload, abi) {
                    Ok((_, KernelMsg::RemoveMapping(m))) => m.addr.endpoint(),
                    _ => None,
                });
            if let Some(ep) = ep {
                match self.kref.get_mut(&ep) {
                    Some(k) if *k > 0 => *k -= 1,
                    _ => *self.debt.entry(ep).or_default() += 1,
                }
            }
        }
    }

    pub(super) fn remove(&mut self, client: u8, addr: SockAddrStorage) {
        let ep = addr.endpoint();
        let before = ep.and_then(|ep| {
            self.core()
                .mappings()
                .find(|m| m.local_endpoint == ep)
                .map(|m| (m.id, m.refcount, m.owner_client))
        });
        self.kernel_msg(client, 0, &remove_mapping(0, addr), None);
        let Some(ep) = ep else { return };
        let after = self
            .core()
            .mappings()
            .find(|m| m.local_endpoint == ep)
            .map(|m| (m.id, m.refcount));
        match before {
            Some((id, rc, owner)) if owner == client => {
                let expect = (rc > 1).then_some((id, rc - 1));
                if after != expect {
                    fail(format!(
                        "REMOVE of {ep} by its owner: refcount {rc} became {after:?}"
                    ));
                }
            }
            Some((id, rc, _)) => {
                if after != Some((id, rc)) {
                    fail(format!(
                        "REMOVE of {ep} by a non-owner changed it: {after:?}"
                    ));
                }
            }
            None => {
                if after.is_some() {
                    fail(format!("REMOVE of {ep} created a mapping"));
                }
            }
        }
    }

    pub(super) fn on_to_kernel(&mut self, bytes: &[u8]) {
        for f in frames(bytes) {
            let Ok(Frame::Msg(header, payload)) = f else {
                fail(format!("the core sent a non-message frame: {f:?}"));
            };
            if header.pid != PID {
                fail(format!("nlmsg_pid {} is not ours", header.pid));
            }
            if !dispatched(header.client(), header.flags) {
                fail("message to the kernel without NLM_F_REQUEST");
            }
            let client = header.client();
            // The kernel only dispatches client 2; decode legacy client 3 with its rules too.
            let as_iwcm = NlHeader {
                ty: rdma_nl_get_type(RDMA_NL_IWCM, header.op()),
                ..header
            };
            let msg = match decode_daemon_msg(&as_iwcm, payload) {
                Ok((_, msg)) => msg,
                Err(e) => fail(format!("the kernel would not accept a message: {e}")),
            };
            self.on_kernel_answer(client, msg);
        }
    }

    pub(super) fn on_kernel_answer(&mut self, client: u8, msg: DaemonMsg) {
        if let DaemonMsg::RemoteInfo(r) = &msg {
            self.remote_infos += 1;
            if r.remote_addr.same_endpoint(&r.mapped_remote_addr) {
                fail(format!(
                    "REMOTE_INFO for a peer that is not port mapped (the kernel needs none, \
                     and keeps it for ever): {msg:?}"
                ));
            }
        }
        match &msg {
            DaemonMsg::MapInfo(_) if self.mapinfo_asked.len() < 4 => {
                self.mapinfo_asked.push(client)
            }
            DaemonMsg::MapInfoNum(r) => self.last_ack_num = Some(r.ack_num),
            DaemonMsg::HandleErr(_) => self.handle_errs += 1,
            _ => {}
        }
        let Some(answer) = Answer::of(&msg) else {
            return;
        };
        if let Answer::HandleErr { code: 0, .. } = answer {
            fail("HANDLE_ERR with code 0");
        }
        let seq = answer.seq();
        let is_reply = matches!(answer, Answer::Reply { .. });
        let now = self.now;
        let deadline = self.config.reply_deadline;
        let Some(req) = self.requests.get_mut(&(client, seq)) else {
            fail(format!("answer for a request never sent: {msg:?}"));
        };
        if is_reply && req.count == 0 {
            fail(format!("reply to a request of another op: {msg:?}"));
        }
        if req.count != 1 || req.other {
            return;
        }
        req.answers += 1;
        if req.answers > 1 {
            fail(format!("kernel request seq {seq} answered twice: {msg:?}"));
        }
        if RequestKind::of_op(req.op).is_some_and(|kind| !answer.fits(kind)) {
            fail(format!("op {} answered with {msg:?}", req.op));
        }
        if now.saturating_duration_since(req.sent_at) >= deadline {
            fail(format!("answer after the reply deadline: {msg:?}"));
        }
        let local = req.local;
        let (addr, mapped) = match &msg {
            DaemonMsg::AddMapping(r) if r.err == 0 => (r.addr, r.mapped_addr),
            DaemonMsg::QueryMapping(r) if r.err == 0 => (r.local_addr, r.mapped_local_addr),
            _ => return,
        };
        if let Some(local) = local {
            if local != addr {
                fail(format!(
                    "reply does not echo the request's address: {msg:?}"
                ));
            }
        }
        let Some(ep) = addr.endpoint() else {
            fail(format!("success for a non-IP address: {msg:?}"));
        };
        if self.removes_in_call {
            return;
        }
        match self.core().mappings().find(|m| m.local_endpoint == ep) {
            Some(m) if m.mapped == mapped => {}
            other => fail(format!(
                "success answer for {ep} but the mapping is {:?}",
                other.map(|m| (m.mapped_endpoint, m.refcount))
            )),
        }
        match self.debt.get_mut(&ep) {
            Some(d) if *d > 0 => *d -= 1,
            _ => *self.kref.entry(ep).or_default() += 1,
        }
    }
}
