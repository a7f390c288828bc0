//! Typed iwpm netlink messages, one struct per op and direction.
//!
//! The request and reply of an op carry different attribute sets (the kernel's
//! `IWPM_NLA_*` vs `IWPM_NLA_R*` enums), so each direction has its own type. Messages the
//! kernel sends to the daemon are [`KernelMsg`]; messages the daemon sends to the kernel are
//! [`DaemonMsg`]. Every message travels with its [`Envelope`] (header fields other than the
//! length and type).
//!
//! Attributes this codec does not know (an id outside the op's set) are kept in
//! `unknown`, in wire order, and re-emitted after the known ones.

use crate::netlink::attr::{NlString, RawAttr};
use crate::sockaddr::SockAddrStorage;

/// Header fields of one netlink message, except the length and the type (which the codec
/// derives from the body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Envelope {
    /// RDMA netlink client index (bits 10..15 of `nlmsg_type`); 2 = `RDMA_NL_IWCM`.
    pub client: u8,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`: 0 from the kernel; the daemon's bound port id from the daemon.
    pub pid: u32,
}

impl Envelope {
    /// The envelope of a received message (client from the type's high bits).
    pub fn from_header(header: &crate::netlink::frame::NlHeader) -> Self {
        Envelope {
            client: header.client(),
            flags: header.flags,
            seq: header.seq,
            pid: header.pid,
        }
    }

    /// What the kernel's iwpm client puts on a request to the daemon: client
    /// `RDMA_NL_IWCM`, `NLM_F_REQUEST`, port id 0, and its sequence number `seq`.
    pub fn kernel_request(seq: u32) -> Self {
        Envelope {
            client: crate::consts::RDMA_NL_IWCM,
            flags: crate::consts::NLM_F_REQUEST,
            seq,
            pid: 0,
        }
    }
}

/// REG_PID request (kernel → daemon, multicast on group 2). Kernel sends fixed-size,
/// NUL-padded names (16/32/32 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegPidRequest {
    /// `IWPM_NLA_REG_PID_SEQ`: the kernel's echo of the daemon's last header seq.
    pub echo_seq: u32,
    /// `IWPM_NLA_REG_IF_NAME` (max 16 bytes with NUL).
    pub if_name: NlString,
    /// `IWPM_NLA_REG_IBDEV_NAME` (max 32 bytes with NUL).
    pub ibdev_name: NlString,
    /// `IWPM_NLA_REG_ULIB_NAME` (max 32 bytes with NUL).
    pub ulib_name: NlString,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// REG_PID reply (daemon → kernel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegPidReply {
    /// `IWPM_NLA_RREG_PID_SEQ`: header seq of the kernel's request.
    pub seq: u32,
    /// `IWPM_NLA_RREG_IBDEV_NAME`: the request's device name, echoed.
    pub ibdev_name: NlString,
    /// `IWPM_NLA_RREG_ULIB_NAME`: `iWarpPortMapperUser`.
    pub ulib_name: NlString,
    /// `IWPM_NLA_RREG_ULIB_VER`: the negotiated ABI version.
    pub ulib_version: u16,
    /// `IWPM_NLA_RREG_PID_ERR`: 0.
    pub err: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// ADD_MAPPING request (kernel → daemon); also the shape of REMOVE_MAPPING.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManageMappingRequest {
    /// `IWPM_NLA_MANAGE_MAPPING_SEQ` (echo seq).
    pub echo_seq: u32,
    /// `IWPM_NLA_MANAGE_ADDR`: the local address to map.
    pub addr: SockAddrStorage,
    /// `IWPM_NLA_MANAGE_FLAGS`: mandatory for ADD in ABI 4, absent in ABI 3 and in REMOVE.
    pub flags: Option<u32>,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// ADD_MAPPING reply (daemon → kernel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddMappingReply {
    /// `IWPM_NLA_RMANAGE_MAPPING_SEQ`: header seq of the kernel's request.
    pub seq: u32,
    /// `IWPM_NLA_RMANAGE_ADDR`: the requested local address, echoed.
    pub addr: SockAddrStorage,
    /// `IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR`.
    pub mapped_addr: SockAddrStorage,
    /// `IWPM_NLA_RMANAGE_MAPPING_ERR`.
    pub err: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// QUERY_MAPPING request (kernel → daemon): add a local mapping and ask the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMappingRequest {
    /// `IWPM_NLA_QUERY_MAPPING_SEQ` (echo seq).
    pub echo_seq: u32,
    /// `IWPM_NLA_QUERY_LOCAL_ADDR`.
    pub local_addr: SockAddrStorage,
    /// `IWPM_NLA_QUERY_REMOTE_ADDR`.
    pub remote_addr: SockAddrStorage,
    /// `IWPM_NLA_QUERY_FLAGS`: mandatory in ABI 4, absent in ABI 3.
    pub flags: Option<u32>,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// QUERY_MAPPING reply and REMOTE_INFO (daemon → kernel): the `IWPM_NLA_RQUERY_*` set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMappingReply {
    /// `IWPM_NLA_RQUERY_MAPPING_SEQ`: request header seq (0 in REMOTE_INFO).
    pub seq: u32,
    /// `IWPM_NLA_RQUERY_LOCAL_ADDR`.
    pub local_addr: SockAddrStorage,
    /// `IWPM_NLA_RQUERY_REMOTE_ADDR`.
    pub remote_addr: SockAddrStorage,
    /// `IWPM_NLA_RQUERY_MAPPED_LOC_ADDR`.
    pub mapped_local_addr: SockAddrStorage,
    /// `IWPM_NLA_RQUERY_MAPPED_REM_ADDR`.
    pub mapped_remote_addr: SockAddrStorage,
    /// `IWPM_NLA_RQUERY_MAPPING_ERR`: 0, or 16 when the peer rejected.
    pub err: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// HANDLE_ERR (daemon → kernel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleErr {
    /// `IWPM_NLA_ERR_SEQ`: header seq of the failed kernel request.
    pub seq: u32,
    /// `IWPM_NLA_ERR_CODE`: one of [`crate::consts::err`]; never 0.
    pub code: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// MAPINFO request (daemon → kernel): "replay your mappings".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfoRequest {
    /// `IWPM_NLA_MAPINFO_ULIB_NAME`.
    pub ulib_name: NlString,
    /// `IWPM_NLA_MAPINFO_ULIB_VER`.
    pub ulib_version: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// MAPINFO record (kernel → daemon, `NLM_F_MULTI`, header seq 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfoRecord {
    /// `IWPM_NLA_MAPINFO_LOCAL_ADDR`.
    pub local_addr: SockAddrStorage,
    /// `IWPM_NLA_MAPINFO_MAPPED_ADDR`.
    pub mapped_addr: SockAddrStorage,
    /// `IWPM_NLA_MAPINFO_FLAGS`: mandatory in ABI 4, absent in ABI 3.
    pub flags: Option<u32>,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// MAPINFO_NUM from the kernel: how many records it sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfoNumRequest {
    /// `IWPM_NLA_MAPINFO_SEQ` (the kernel sends 0).
    pub seq: u32,
    /// `IWPM_NLA_MAPINFO_SEND_NUM`.
    pub send_num: u32,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// MAPINFO_NUM acknowledgement from the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfoNumReply {
    /// `IWPM_NLA_MAPINFO_SEQ`: the kernel's MAPINFO_NUM header seq.
    pub seq: u32,
    /// `IWPM_NLA_MAPINFO_SEND_NUM`, echoed.
    pub send_num: u32,
    /// `IWPM_NLA_MAPINFO_ACK_NUM`: records accepted.
    pub ack_num: u32,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// HELLO, both directions: the ABI version offered (daemon) or negotiated (kernel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// `IWPM_NLA_HELLO_ABI_VERSION`.
    pub abi_version: u16,
    /// Attributes outside the set.
    pub unknown: Vec<RawAttr>,
}

/// Body of a message the kernel sends to the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelMsg {
    /// Op 0, multicast.
    RegPid(RegPidRequest),
    /// Op 1.
    AddMapping(ManageMappingRequest),
    /// Op 2.
    QueryMapping(QueryMappingRequest),
    /// Op 3 (no reply).
    RemoveMapping(ManageMappingRequest),
    /// Op 6, one record of a restart replay.
    MapInfo(MapInfoRecord),
    /// Op 7, the count after the records.
    MapInfoNum(MapInfoNumRequest),
    /// Op 8, the answer to the daemon's HELLO.
    Hello(Hello),
}

/// Body of a message the daemon sends to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonMsg {
    /// Op 0 reply.
    RegPid(RegPidReply),
    /// Op 1 reply.
    AddMapping(AddMappingReply),
    /// Op 2 reply (sent when the peer answered).
    QueryMapping(QueryMappingReply),
    /// Op 4, passive side, unsolicited.
    RemoteInfo(QueryMappingReply),
    /// Op 5.
    HandleErr(HandleErr),
    /// Op 6 request.
    MapInfo(MapInfoRequest),
    /// Op 7 acknowledgement.
    MapInfoNum(MapInfoNumReply),
    /// Op 8.
    Hello(Hello),
}

impl KernelMsg {
    /// The op number (`RDMA_NL_IWPM_*`).
    pub fn op(&self) -> u16 {
        use crate::consts::op::*;
        match self {
            KernelMsg::RegPid(_) => RDMA_NL_IWPM_REG_PID,
            KernelMsg::AddMapping(_) => RDMA_NL_IWPM_ADD_MAPPING,
            KernelMsg::QueryMapping(_) => RDMA_NL_IWPM_QUERY_MAPPING,
            KernelMsg::RemoveMapping(_) => RDMA_NL_IWPM_REMOVE_MAPPING,
            KernelMsg::MapInfo(_) => RDMA_NL_IWPM_MAPINFO,
            KernelMsg::MapInfoNum(_) => RDMA_NL_IWPM_MAPINFO_NUM,
            KernelMsg::Hello(_) => RDMA_NL_IWPM_HELLO,
        }
    }
}

impl DaemonMsg {
    /// The op number (`RDMA_NL_IWPM_*`).
    pub fn op(&self) -> u16 {
        use crate::consts::op::*;
        match self {
            DaemonMsg::RegPid(_) => RDMA_NL_IWPM_REG_PID,
            DaemonMsg::AddMapping(_) => RDMA_NL_IWPM_ADD_MAPPING,
            DaemonMsg::QueryMapping(_) => RDMA_NL_IWPM_QUERY_MAPPING,
            DaemonMsg::RemoteInfo(_) => RDMA_NL_IWPM_REMOTE_INFO,
            DaemonMsg::HandleErr(_) => RDMA_NL_IWPM_HANDLE_ERR,
            DaemonMsg::MapInfo(_) => RDMA_NL_IWPM_MAPINFO,
            DaemonMsg::MapInfoNum(_) => RDMA_NL_IWPM_MAPINFO_NUM,
            DaemonMsg::Hello(_) => RDMA_NL_IWPM_HELLO,
        }
    }
}
