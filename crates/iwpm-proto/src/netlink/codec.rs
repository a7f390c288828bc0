//! Typed encode/decode of iwpm messages, with each receiver's acceptance rules.
//!
//! Two receivers, two rule sets:
//! * the daemon receiving from the kernel ([`decode_kernel_msg`]) follows rdma-core's
//!   `iwpmd` on libnl (`docs/protocol.md` §3.8): every attribute of the op is mandatory,
//!   FLAGS only when the negotiated ABI is 4 or more (below that FLAGS is outside the set and
//!   lands in `unknown`, as iwpmd ignores it); strings need a NUL as last byte and at most
//!   the field size (16 or 32 bytes);
//! * the kernel receiving from the daemon ([`decode_daemon_msg`], for the emulator)
//!   follows `iwpm_parse_nlmsg` and the nla policies (`docs/protocol.md` §3.8, §4.1): every
//!   attribute mandatory; strings are `NLA_NUL_STRING` with at most 31 characters.
//!
//! Common to both: u32 >= 4 bytes, u16 >= 2, sockaddr >= 128 (only the first 128 kept);
//! ids outside the set (0 included, or with flag bits) are kept in `unknown`.
//! Deliberately stricter than both peers: a repeated known attribute is
//! [`NetlinkError::DuplicateAttr`] (they keep the last), and bytes that do not parse as an
//! attribute are an error (they ignore them with a warning).
//!
//! Encoding writes what the value says: known attributes in id order, then `unknown` in
//! order, zero padding, one aligned message appended to `out`. It does not validate, so
//! tests and the emulator can build any message; build strings with [`NlString::new`] or
//! [`NlString::padded`] to get valid ones.

use crate::consts::attr as ids;
use crate::consts::op::*;
use crate::consts::{
    rdma_nl_get_type, IWPM_DEVNAME_SIZE, IWPM_IFNAME_SIZE, IWPM_UABI_VERSION_MIN,
    IWPM_ULIBNAME_SIZE, RDMA_NL_IWCM, RDMA_NL_RSVD, SOCKADDR_STORAGE_SIZE,
};
use crate::netlink::attr::{align, push_attr, walk, NlString, RawAttr, WalkError};
use crate::netlink::error::NetlinkError;
use crate::netlink::frame::{FrameBody, NlHeader};
use crate::netlink::message::*;
use crate::sockaddr::SockAddrStorage;

/// An iwpm message of one direction: one decode (with its receiver's rules) and one encode,
/// so frames and datagrams are handled by the same generic code for both directions.
pub trait NetlinkMessage: FrameBody<Head = Envelope, Control = Vec<u8>> + Sized {
    /// Decodes the message of a frame as its receiver must accept it; `abi` is the
    /// negotiated iwpm ABI where the rules depend on it.
    fn decode(
        header: &NlHeader,
        payload: &[u8],
        abi: u16,
    ) -> Result<(Envelope, Self), NetlinkError>;

    /// Appends the message (header + attributes, aligned) to `out`.
    fn encode(&self, env: &Envelope, out: &mut Vec<u8>);
}

impl FrameBody for KernelMsg {
    type Head = Envelope;
    type Control = Vec<u8>;
}

impl FrameBody for DaemonMsg {
    type Head = Envelope;
    type Control = Vec<u8>;
}

impl NetlinkMessage for KernelMsg {
    fn decode(
        header: &NlHeader,
        payload: &[u8],
        abi: u16,
    ) -> Result<(Envelope, Self), NetlinkError> {
        decode_kernel_msg(header, payload, abi)
    }

    fn encode(&self, env: &Envelope, out: &mut Vec<u8>) {
        encode_kernel_msg(env, self, out);
    }
}

impl NetlinkMessage for DaemonMsg {
    /// The kernel's rules do not depend on the ABI.
    fn decode(
        header: &NlHeader,
        payload: &[u8],
        _abi: u16,
    ) -> Result<(Envelope, Self), NetlinkError> {
        decode_daemon_msg(header, payload)
    }

    fn encode(&self, env: &Envelope, out: &mut Vec<u8>) {
        encode_daemon_msg(env, self, out);
    }
}

/// Longest string (NUL excluded) the kernel's `NLA_NUL_STRING` policies accept.
const KERNEL_STRING_MAX: usize = IWPM_ULIBNAME_SIZE - 1;

/// Decodes a message the kernel sent, as the daemon must accept it.
///
/// `abi` is the negotiated iwpm ABI version: FLAGS (ADD, QUERY, MAPINFO records) is
/// mandatory when it is 4 or more and ignored (kept in `unknown`) below. REMOVE_MAPPING
/// never has FLAGS and MAPINFO_NUM never has ACK_NUM: such attributes go to `unknown`.
/// Client 2 (`RDMA_NL_IWCM`) and legacy client 3 are accepted.
pub fn decode_kernel_msg(
    header: &NlHeader,
    payload: &[u8],
    abi: u16,
) -> Result<(Envelope, KernelMsg), NetlinkError> {
    use Kind::*;
    let (client, op) = (header.client(), header.op());
    if client != RDMA_NL_IWCM && client != RDMA_NL_RSVD {
        return Err(NetlinkError::UnknownOp { client, op });
    }
    let v4 = abi > IWPM_UABI_VERSION_MIN;
    let with_flags = |base: &'static [Kind], all: &'static [Kind]| if v4 { all } else { base };
    let msg = match op {
        RDMA_NL_IWPM_REG_PID => {
            let spec = [
                U32,
                Str(StrRule::Libnl(IWPM_IFNAME_SIZE)),
                Str(StrRule::Libnl(IWPM_DEVNAME_SIZE)),
                Str(StrRule::Libnl(IWPM_ULIBNAME_SIZE)),
            ];
            let a = Attrs::parse(op, payload, &spec)?;
            KernelMsg::RegPid(RegPidRequest {
                echo_seq: a.u32(ids::reg_pid::IWPM_NLA_REG_PID_SEQ)?,
                if_name: a.string(ids::reg_pid::IWPM_NLA_REG_IF_NAME)?,
                ibdev_name: a.string(ids::reg_pid::IWPM_NLA_REG_IBDEV_NAME)?,
                ulib_name: a.string(ids::reg_pid::IWPM_NLA_REG_ULIB_NAME)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_ADD_MAPPING | RDMA_NL_IWPM_REMOVE_MAPPING => {
            let spec = if op == RDMA_NL_IWPM_ADD_MAPPING {
                with_flags(&[U32, Addr], &[U32, Addr, U32])
            } else {
                &[U32, Addr]
            };
            let a = Attrs::parse(op, payload, spec)?;
            let m = ManageMappingRequest {
                echo_seq: a.u32(ids::manage::IWPM_NLA_MANAGE_MAPPING_SEQ)?,
                addr: a.addr(ids::manage::IWPM_NLA_MANAGE_ADDR)?,
                flags: a.opt_u32(spec, ids::manage::IWPM_NLA_MANAGE_FLAGS)?,
                unknown: a.unknown,
            };
            if op == RDMA_NL_IWPM_ADD_MAPPING {
                KernelMsg::AddMapping(m)
            } else {
                KernelMsg::RemoveMapping(m)
            }
        }
        RDMA_NL_IWPM_QUERY_MAPPING => {
            let spec = with_flags(&[U32, Addr, Addr], &[U32, Addr, Addr, U32]);
            let a = Attrs::parse(op, payload, spec)?;
            KernelMsg::QueryMapping(QueryMappingRequest {
                echo_seq: a.u32(ids::query::IWPM_NLA_QUERY_MAPPING_SEQ)?,
                local_addr: a.addr(ids::query::IWPM_NLA_QUERY_LOCAL_ADDR)?,
                remote_addr: a.addr(ids::query::IWPM_NLA_QUERY_REMOTE_ADDR)?,
                flags: a.opt_u32(spec, ids::query::IWPM_NLA_QUERY_FLAGS)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_MAPINFO => {
            let spec = with_flags(&[Addr, Addr], &[Addr, Addr, U32]);
            let a = Attrs::parse(op, payload, spec)?;
            KernelMsg::MapInfo(MapInfoRecord {
                local_addr: a.addr(ids::mapinfo::IWPM_NLA_MAPINFO_LOCAL_ADDR)?,
                mapped_addr: a.addr(ids::mapinfo::IWPM_NLA_MAPINFO_MAPPED_ADDR)?,
                flags: a.opt_u32(spec, ids::mapinfo::IWPM_NLA_MAPINFO_FLAGS)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_MAPINFO_NUM => {
            let a = Attrs::parse(op, payload, &[U32, U32])?;
            KernelMsg::MapInfoNum(MapInfoNumRequest {
                seq: a.u32(ids::mapinfo_num::IWPM_NLA_MAPINFO_SEQ)?,
                send_num: a.u32(ids::mapinfo_num::IWPM_NLA_MAPINFO_SEND_NUM)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_HELLO => {
            let a = Attrs::parse(op, payload, &[U16])?;
            KernelMsg::Hello(Hello {
                abi_version: a.u16(ids::hello::IWPM_NLA_HELLO_ABI_VERSION)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_REMOTE_INFO | RDMA_NL_IWPM_HANDLE_ERR => {
            return Err(NetlinkError::WrongDirection { op })
        }
        _ => return Err(NetlinkError::UnknownOp { client, op }),
    };
    Ok((Envelope::from_header(header), msg))
}

/// Decodes a message the daemon sent, as the kernel accepts it (for the kernel emulator).
///
/// Only client 2 is dispatched by a current kernel; anything else, op >= 9 included, is
/// [`NetlinkError::UnknownOp`] (the kernel answers `NLMSG_ERROR` -EINVAL), and
/// REMOVE_MAPPING is [`NetlinkError::WrongDirection`] (no handler, same answer). Checking
/// `NLM_F_REQUEST` is left to the caller.
pub fn decode_daemon_msg(
    header: &NlHeader,
    payload: &[u8],
) -> Result<(Envelope, DaemonMsg), NetlinkError> {
    use Kind::*;
    let (client, op) = (header.client(), header.op());
    if client != RDMA_NL_IWCM {
        return Err(NetlinkError::UnknownOp { client, op });
    }
    let name = Str(StrRule::KernelNul);
    let msg = match op {
        RDMA_NL_IWPM_REG_PID => {
            let a = Attrs::parse(op, payload, &[U32, name, name, U16, U16])?;
            DaemonMsg::RegPid(RegPidReply {
                seq: a.u32(ids::rreg_pid::IWPM_NLA_RREG_PID_SEQ)?,
                ibdev_name: a.string(ids::rreg_pid::IWPM_NLA_RREG_IBDEV_NAME)?,
                ulib_name: a.string(ids::rreg_pid::IWPM_NLA_RREG_ULIB_NAME)?,
                ulib_version: a.u16(ids::rreg_pid::IWPM_NLA_RREG_ULIB_VER)?,
                err: a.u16(ids::rreg_pid::IWPM_NLA_RREG_PID_ERR)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_ADD_MAPPING => {
            let a = Attrs::parse(op, payload, &[U32, Addr, Addr, U16])?;
            DaemonMsg::AddMapping(AddMappingReply {
                seq: a.u32(ids::rmanage::IWPM_NLA_RMANAGE_MAPPING_SEQ)?,
                addr: a.addr(ids::rmanage::IWPM_NLA_RMANAGE_ADDR)?,
                mapped_addr: a.addr(ids::rmanage::IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR)?,
                err: a.u16(ids::rmanage::IWPM_NLA_RMANAGE_MAPPING_ERR)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_QUERY_MAPPING | RDMA_NL_IWPM_REMOTE_INFO => {
            let a = Attrs::parse(op, payload, &[U32, Addr, Addr, Addr, Addr, U16])?;
            let r = QueryMappingReply {
                seq: a.u32(ids::rquery::IWPM_NLA_RQUERY_MAPPING_SEQ)?,
                local_addr: a.addr(ids::rquery::IWPM_NLA_RQUERY_LOCAL_ADDR)?,
                remote_addr: a.addr(ids::rquery::IWPM_NLA_RQUERY_REMOTE_ADDR)?,
                mapped_local_addr: a.addr(ids::rquery::IWPM_NLA_RQUERY_MAPPED_LOC_ADDR)?,
                mapped_remote_addr: a.addr(ids::rquery::IWPM_NLA_RQUERY_MAPPED_REM_ADDR)?,
                err: a.u16(ids::rquery::IWPM_NLA_RQUERY_MAPPING_ERR)?,
                unknown: a.unknown,
            };
            if op == RDMA_NL_IWPM_QUERY_MAPPING {
                DaemonMsg::QueryMapping(r)
            } else {
                DaemonMsg::RemoteInfo(r)
            }
        }
        RDMA_NL_IWPM_HANDLE_ERR => {
            let a = Attrs::parse(op, payload, &[U32, U16])?;
            DaemonMsg::HandleErr(HandleErr {
                seq: a.u32(ids::err::IWPM_NLA_ERR_SEQ)?,
                code: a.u16(ids::err::IWPM_NLA_ERR_CODE)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_MAPINFO => {
            let a = Attrs::parse(op, payload, &[name, U16])?;
            DaemonMsg::MapInfo(MapInfoRequest {
                ulib_name: a.string(ids::mapinfo_req::IWPM_NLA_MAPINFO_ULIB_NAME)?,
                ulib_version: a.u16(ids::mapinfo_req::IWPM_NLA_MAPINFO_ULIB_VER)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_MAPINFO_NUM => {
            let a = Attrs::parse(op, payload, &[U32, U32, U32])?;
            DaemonMsg::MapInfoNum(MapInfoNumReply {
                seq: a.u32(ids::mapinfo_num::IWPM_NLA_MAPINFO_SEQ)?,
                send_num: a.u32(ids::mapinfo_num::IWPM_NLA_MAPINFO_SEND_NUM)?,
                ack_num: a.u32(ids::mapinfo_num::IWPM_NLA_MAPINFO_ACK_NUM)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_HELLO => {
            let a = Attrs::parse(op, payload, &[U16])?;
            DaemonMsg::Hello(Hello {
                abi_version: a.u16(ids::hello::IWPM_NLA_HELLO_ABI_VERSION)?,
                unknown: a.unknown,
            })
        }
        RDMA_NL_IWPM_REMOVE_MAPPING => return Err(NetlinkError::WrongDirection { op }),
        _ => return Err(NetlinkError::UnknownOp { client, op }),
    };
    Ok((Envelope::from_header(header), msg))
}

/// Appends one kernel -> daemon message (header + attributes, aligned) to `out`.
/// `flags: None` omits the FLAGS attribute (ABI 3, and always for REMOVE_MAPPING).
pub fn encode_kernel_msg(env: &Envelope, msg: &KernelMsg, out: &mut Vec<u8>) {
    use ids::{hello, manage, mapinfo, mapinfo_num, query, reg_pid};
    let start = begin(out);
    let p = &mut *out;
    let unknown = match msg {
        KernelMsg::RegPid(m) => {
            push_u32(p, reg_pid::IWPM_NLA_REG_PID_SEQ, m.echo_seq);
            push_attr(p, reg_pid::IWPM_NLA_REG_IF_NAME, &m.if_name.0);
            push_attr(p, reg_pid::IWPM_NLA_REG_IBDEV_NAME, &m.ibdev_name.0);
            push_attr(p, reg_pid::IWPM_NLA_REG_ULIB_NAME, &m.ulib_name.0);
            &m.unknown
        }
        KernelMsg::AddMapping(m) | KernelMsg::RemoveMapping(m) => {
            push_u32(p, manage::IWPM_NLA_MANAGE_MAPPING_SEQ, m.echo_seq);
            push_attr(p, manage::IWPM_NLA_MANAGE_ADDR, &m.addr.0);
            push_opt_u32(p, manage::IWPM_NLA_MANAGE_FLAGS, m.flags);
            &m.unknown
        }
        KernelMsg::QueryMapping(m) => {
            push_u32(p, query::IWPM_NLA_QUERY_MAPPING_SEQ, m.echo_seq);
            push_attr(p, query::IWPM_NLA_QUERY_LOCAL_ADDR, &m.local_addr.0);
            push_attr(p, query::IWPM_NLA_QUERY_REMOTE_ADDR, &m.remote_addr.0);
            push_opt_u32(p, query::IWPM_NLA_QUERY_FLAGS, m.flags);
            &m.unknown
        }
        KernelMsg::MapInfo(m) => {
            push_attr(p, mapinfo::IWPM_NLA_MAPINFO_LOCAL_ADDR, &m.local_addr.0);
            push_attr(p, mapinfo::IWPM_NLA_MAPINFO_MAPPED_ADDR, &m.mapped_addr.0);
            push_opt_u32(p, mapinfo::IWPM_NLA_MAPINFO_FLAGS, m.flags);
            &m.unknown
        }
        KernelMsg::MapInfoNum(m) => {
            push_u32(p, mapinfo_num::IWPM_NLA_MAPINFO_SEQ, m.seq);
            push_u32(p, mapinfo_num::IWPM_NLA_MAPINFO_SEND_NUM, m.send_num);
            &m.unknown
        }
        KernelMsg::Hello(m) => {
            push_u16(p, hello::IWPM_NLA_HELLO_ABI_VERSION, m.abi_version);
            &m.unknown
        }
    };
    finish(env, msg.op(), start, unknown, out);
}

/// Appends one daemon -> kernel message (header + attributes, aligned) to `out`.
pub fn encode_daemon_msg(env: &Envelope, msg: &DaemonMsg, out: &mut Vec<u8>) {
    use ids::{err, hello, mapinfo_num, mapinfo_req, rmanage, rquery, rreg_pid};
    let start = begin(out);
    let p = &mut *out;
    let unknown = match msg {
        DaemonMsg::RegPid(m) => {
            push_u32(p, rreg_pid::IWPM_NLA_RREG_PID_SEQ, m.seq);
            push_attr(p, rreg_pid::IWPM_NLA_RREG_IBDEV_NAME, &m.ibdev_name.0);
            push_attr(p, rreg_pid::IWPM_NLA_RREG_ULIB_NAME, &m.ulib_name.0);
            push_u16(p, rreg_pid::IWPM_NLA_RREG_ULIB_VER, m.ulib_version);
            push_u16(p, rreg_pid::IWPM_NLA_RREG_PID_ERR, m.err);
            &m.unknown
        }
        DaemonMsg::AddMapping(m) => {
            push_u32(p, rmanage::IWPM_NLA_RMANAGE_MAPPING_SEQ, m.seq);
            push_attr(p, rmanage::IWPM_NLA_RMANAGE_ADDR, &m.addr.0);
            push_attr(
                p,
                rmanage::IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR,
                &m.mapped_addr.0,
            );
            push_u16(p, rmanage::IWPM_NLA_RMANAGE_MAPPING_ERR, m.err);
            &m.unknown
        }
        DaemonMsg::QueryMapping(m) | DaemonMsg::RemoteInfo(m) => {
            push_u32(p, rquery::IWPM_NLA_RQUERY_MAPPING_SEQ, m.seq);
            push_attr(p, rquery::IWPM_NLA_RQUERY_LOCAL_ADDR, &m.local_addr.0);
            push_attr(p, rquery::IWPM_NLA_RQUERY_REMOTE_ADDR, &m.remote_addr.0);
            let mapped_local = &m.mapped_local_addr.0;
            push_attr(p, rquery::IWPM_NLA_RQUERY_MAPPED_LOC_ADDR, mapped_local);
            let mapped_remote = &m.mapped_remote_addr.0;
            push_attr(p, rquery::IWPM_NLA_RQUERY_MAPPED_REM_ADDR, mapped_remote);
            push_u16(p, rquery::IWPM_NLA_RQUERY_MAPPING_ERR, m.err);
            &m.unknown
        }
        DaemonMsg::HandleErr(m) => {
            push_u32(p, err::IWPM_NLA_ERR_SEQ, m.seq);
            push_u16(p, err::IWPM_NLA_ERR_CODE, m.code);
            &m.unknown
        }
        DaemonMsg::MapInfo(m) => {
            push_attr(p, mapinfo_req::IWPM_NLA_MAPINFO_ULIB_NAME, &m.ulib_name.0);
            push_u16(p, mapinfo_req::IWPM_NLA_MAPINFO_ULIB_VER, m.ulib_version);
            &m.unknown
        }
        DaemonMsg::MapInfoNum(m) => {
            push_u32(p, mapinfo_num::IWPM_NLA_MAPINFO_SEQ, m.seq);
            push_u32(p, mapinfo_num::IWPM_NLA_MAPINFO_SEND_NUM, m.send_num);
            push_u32(p, mapinfo_num::IWPM_NLA_MAPINFO_ACK_NUM, m.ack_num);
            &m.unknown
        }
        DaemonMsg::Hello(m) => {
            push_u16(p, hello::IWPM_NLA_HELLO_ABI_VERSION, m.abi_version);
            &m.unknown
        }
    };
    finish(env, msg.op(), start, unknown, out);
}

fn push_u16(p: &mut Vec<u8>, ty: u16, v: u16) {
    push_attr(p, ty, &v.to_ne_bytes());
}

/// FLAGS is optional (absent below ABI 4 and in REMOVE_MAPPING).
fn push_opt_u32(p: &mut Vec<u8>, ty: u16, v: Option<u32>) {
    if let Some(v) = v {
        push_u32(p, ty, v);
    }
}

fn push_u32(p: &mut Vec<u8>, ty: u16, v: u32) {
    push_attr(p, ty, &v.to_ne_bytes());
}

/// Starts a message in `out`: room for its header, written by [`finish`] once the
/// attributes (pushed straight into `out`, no intermediate buffer) give its length.
fn begin(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; NlHeader::LEN]);
    start
}

/// Appends the unknown attributes kept for echoing, then writes the header of the message
/// that starts at `start` and pads it to 4 bytes.
fn finish(env: &Envelope, op: u16, start: usize, unknown: &[RawAttr], out: &mut Vec<u8>) {
    for a in unknown {
        push_attr(out, a.ty, &a.payload);
    }
    let len = out.len() - start;
    let header = NlHeader {
        len: len as u32,
        ty: rdma_nl_get_type(env.client, op),
        flags: env.flags,
        seq: env.seq,
        pid: env.pid,
    };
    out[start..start + NlHeader::LEN].copy_from_slice(&header.to_bytes());
    out.resize(start + align(len), 0);
}

/// What an attribute id of an op's set holds.
#[derive(Clone, Copy, Debug)]
enum Kind {
    U16,
    U32,
    Addr,
    Str(StrRule),
}

/// Which receiver's string rule applies.
#[derive(Clone, Copy, Debug)]
enum StrRule {
    /// libnl `NLA_STRING` with `maxlen`: 1..=max bytes, last byte NUL.
    Libnl(usize),
    /// Kernel `NLA_NUL_STRING` with len 31: a NUL within the first min(len, 32) bytes, and
    /// at most 31 bytes once one trailing NUL is dropped.
    KernelNul,
}

/// A validated attribute value.
#[derive(Clone, Copy, Debug)]
enum Val<'a> {
    U16(u16),
    U32(u32),
    /// Borrowed from the payload: a slot stays 16 bytes, and the 128 bytes are copied
    /// once, into the message, not through every slot move.
    Addr(&'a [u8; SOCKADDR_STORAGE_SIZE]),
    Str(&'a [u8]),
}

/// The attributes of one message, validated against an op's set.
struct Attrs<'a> {
    op: u16,
    /// By id - 1; a fixed array, so decoding a message allocates nothing (unless it
    /// carries unknown attributes).
    slots: [Option<Val<'a>>; MAX_SPEC],
    unknown: Vec<RawAttr>,
}

/// Most attribute ids an op defines (QUERY_MAPPING's reply has 6).
const MAX_SPEC: usize = 8;

impl<'a> Attrs<'a> {
    /// Walks and validates every attribute (wire order); `spec[i]` describes id `i + 1`.
    /// Presence is checked later, by the getters, in id order.
    fn parse(op: u16, payload: &'a [u8], spec: &[Kind]) -> Result<Self, NetlinkError> {
        debug_assert!(spec.len() <= MAX_SPEC, "op {op} defines {} ids", spec.len());
        let spec = &spec[..spec.len().min(MAX_SPEC)];
        let mut attrs = Attrs {
            op,
            slots: [None; MAX_SPEC],
            unknown: Vec::new(),
        };
        for item in walk(payload) {
            let a = item.map_err(|e| walk_error(op, e))?;
            let kind = usize::from(a.ty)
                .checked_sub(1)
                .and_then(|i| spec.get(i).map(|k| (i, *k)));
            let Some((index, kind)) = kind else {
                attrs.unknown.push(RawAttr {
                    ty: a.ty,
                    payload: a.payload.to_vec(),
                });
                continue;
            };
            // `index < spec.len() <= slots.len()`: `spec.get(index)` succeeded.
            let slot = &mut attrs.slots[index];
            if slot.is_some() {
                return Err(NetlinkError::DuplicateAttr { op, attr: a.ty });
            }
            *slot = Some(validate(op, a.ty, kind, a.payload)?);
        }
        Ok(attrs)
    }

    fn get(&self, id: u16) -> Result<Val<'a>, NetlinkError> {
        let missing = NetlinkError::MissingAttr {
            op: self.op,
            attr: id,
        };
        let index = usize::from(id).checked_sub(1).ok_or(missing)?;
        self.slots.get(index).copied().flatten().ok_or(missing)
    }

    fn u16(&self, id: u16) -> Result<u16, NetlinkError> {
        match self.get(id)? {
            Val::U16(v) => Ok(v),
            _ => Err(self.kind_mismatch(id)),
        }
    }

    fn u32(&self, id: u16) -> Result<u32, NetlinkError> {
        match self.get(id)? {
            Val::U32(v) => Ok(v),
            _ => Err(self.kind_mismatch(id)),
        }
    }

    /// FLAGS: mandatory if `spec` covers `id` (ABI >= 4), else `None` (it is in `unknown`).
    fn opt_u32(&self, spec: &[Kind], id: u16) -> Result<Option<u32>, NetlinkError> {
        if usize::from(id) <= spec.len() {
            self.u32(id).map(Some)
        } else {
            Ok(None)
        }
    }

    fn addr(&self, id: u16) -> Result<SockAddrStorage, NetlinkError> {
        match self.get(id)? {
            Val::Addr(v) => Ok(SockAddrStorage(*v)),
            _ => Err(self.kind_mismatch(id)),
        }
    }

    fn string(&self, id: u16) -> Result<NlString, NetlinkError> {
        match self.get(id)? {
            Val::Str(v) => Ok(NlString(v.to_vec())),
            _ => Err(self.kind_mismatch(id)),
        }
    }

    /// Unreachable by construction (each op's getters match its spec); reported as a
    /// missing attribute rather than a panic.
    fn kind_mismatch(&self, id: u16) -> NetlinkError {
        NetlinkError::MissingAttr {
            op: self.op,
            attr: id,
        }
    }
}

fn walk_error(op: u16, e: WalkError) -> NetlinkError {
    match e {
        WalkError::HeaderTruncated { offset, remaining } => NetlinkError::AttrHeaderTruncated {
            op,
            offset,
            remaining,
        },
        WalkError::LenInvalid { offset, nla_len } => NetlinkError::AttrLenInvalid {
            op,
            offset,
            nla_len,
        },
        WalkError::Overrun {
            offset,
            nla_len,
            remaining,
        } => NetlinkError::AttrOverrun {
            op,
            offset,
            nla_len,
            remaining,
        },
    }
}

fn validate<'a>(op: u16, attr: u16, kind: Kind, p: &'a [u8]) -> Result<Val<'a>, NetlinkError> {
    let too_short = |min| NetlinkError::AttrTooShort {
        op,
        attr,
        len: p.len(),
        min,
    };
    Ok(match kind {
        Kind::U16 => Val::U16(u16::from_ne_bytes(
            p.get(..2)
                .and_then(|b| b.try_into().ok())
                .ok_or(too_short(2))?,
        )),
        Kind::U32 => Val::U32(u32::from_ne_bytes(
            p.get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or(too_short(4))?,
        )),
        Kind::Addr => Val::Addr(
            p.get(..SOCKADDR_STORAGE_SIZE)
                .and_then(|b| b.try_into().ok())
                .ok_or(too_short(SOCKADDR_STORAGE_SIZE))?,
        ),
        Kind::Str(rule) => Val::Str(validate_string(op, attr, rule, p)?),
    })
}

fn validate_string(op: u16, attr: u16, rule: StrRule, p: &[u8]) -> Result<&[u8], NetlinkError> {
    let Some(&last) = p.last() else {
        return Err(NetlinkError::EmptyString { op, attr });
    };
    match rule {
        StrRule::Libnl(max) => {
            // libnl order: length range first, then the terminating NUL.
            if p.len() > max {
                return Err(NetlinkError::StringTooLong {
                    op,
                    attr,
                    len: p.len(),
                    max,
                });
            }
            if last != 0 {
                return Err(NetlinkError::StringNotTerminated { op, attr });
            }
        }
        StrRule::KernelNul => {
            let scan = &p[..p.len().min(KERNEL_STRING_MAX + 1)];
            if !scan.contains(&0) {
                return Err(NetlinkError::StringNotTerminated { op, attr });
            }
            let len = p.len() - usize::from(last == 0);
            if len > KERNEL_STRING_MAX {
                return Err(NetlinkError::StringTooLong {
                    op,
                    attr,
                    len,
                    max: KERNEL_STRING_MAX,
                });
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::NLM_F_REQUEST;
    use crate::netlink::frame::push_message;

    fn kernel_env() -> Envelope {
        Envelope {
            client: RDMA_NL_IWCM,
            flags: NLM_F_REQUEST,
            seq: 4,
            pid: 0,
        }
    }

    fn one(buf: &[u8]) -> (NlHeader, &[u8]) {
        let h = NlHeader::parse(buf).unwrap();
        (h, &buf[16..h.len as usize])
    }

    fn hello_with(attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut p = vec![];
        for (ty, v) in attrs {
            push_attr(&mut p, *ty, v);
        }
        let mut out = vec![];
        push_message(0x0808, 1, 0, 0, &p, &mut out);
        out
    }

    #[test]
    fn add_mapping_flags_follow_abi() {
        let addr = SockAddrStorage::from_socket_addr("10.88.0.1:7174".parse().unwrap());
        let msg = KernelMsg::AddMapping(ManageMappingRequest {
            echo_seq: 2,
            addr,
            flags: Some(1),
            unknown: vec![],
        });
        let mut buf = vec![];
        encode_kernel_msg(&kernel_env(), &msg, &mut buf);
        assert_eq!(buf.len(), 164);
        let (h, p) = one(&buf);
        assert_eq!(decode_kernel_msg(&h, p, 4).unwrap().1, msg);
        // ABI 3: FLAGS is outside the set, kept raw.
        let KernelMsg::AddMapping(v3) = decode_kernel_msg(&h, p, 3).unwrap().1 else {
            panic!("wrong variant")
        };
        assert_eq!(v3.flags, None);
        assert_eq!(
            v3.unknown,
            [RawAttr {
                ty: 3,
                payload: 1u32.to_ne_bytes().to_vec()
            }]
        );
    }

    #[test]
    fn kernel_string_rule() {
        let check = |s: &[u8]| {
            let mut p = vec![];
            push_attr(&mut p, 1, s);
            push_attr(&mut p, 2, &4u16.to_ne_bytes());
            let mut out = vec![];
            push_message(0x0806, 1, 0, 0, &p, &mut out);
            let (h, p) = one(&out);
            decode_daemon_msg(&h, p).map(|_| ())
        };
        assert_eq!(check(b"iWarpPortMapperUser\0"), Ok(()));
        assert_eq!(
            check(&[b'a'; 31].iter().chain(&[0]).copied().collect::<Vec<_>>()),
            Ok(())
        );
        // A 32-byte NUL-padded field passes; garbage after the NUL is accepted too.
        assert_eq!(check(NlString::padded("x", 32).raw()), Ok(()));
        assert_eq!(check(b"ab\0cd"), Ok(()));
        assert_eq!(
            check(NlString::padded("x", 33).raw()),
            Err(NetlinkError::StringTooLong {
                op: 6,
                attr: 1,
                len: 32,
                max: 31
            })
        );
        assert_eq!(
            check(&[b'a'; 32]),
            Err(NetlinkError::StringNotTerminated { op: 6, attr: 1 })
        );
        assert_eq!(
            check(b""),
            Err(NetlinkError::EmptyString { op: 6, attr: 1 })
        );
    }

    #[test]
    fn flagged_and_zero_ids_are_unknown() {
        let buf = hello_with(&[(0, b"z"), (0x8001, &[9, 0]), (1, &[4, 0])]);
        let (h, p) = one(&buf);
        let (_, KernelMsg::Hello(m)) = decode_kernel_msg(&h, p, 4).unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(m.abi_version, 4);
        assert_eq!(m.unknown.len(), 2);
        assert_eq!(m.unknown[1].ty, 0x8001);
    }

    #[test]
    fn longer_integers_use_their_first_bytes() {
        let buf = hello_with(&[(1, &[3, 0, 0xff, 0xff])]);
        let (h, p) = one(&buf);
        assert!(matches!(
            decode_daemon_msg(&h, p).unwrap().1,
            DaemonMsg::Hello(Hello { abi_version: 3, .. })
        ));
    }
}
